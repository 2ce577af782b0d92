"""DuckDB runner: every query as one SQL statement over the Parquet files (bounded).

``python -m benchmarks.duckdb_runner --query Q [--query Q ...] --clickstream DIR
--nexmark DIR --repeat R [--no-panes]``

The vectorised single-process reference: a bounded run, so every event counts
(no watermark, no late drops) and every window is emitted. Each timed run plans
the statement, reads the table's Parquet files, computes the query and fetches
the whole result as an Arrow table. DuckDB uses its default thread count.

Event time is handled as integer epoch microseconds (``epoch_us``), so window
bounds are exact; they are returned as ``TIMESTAMP WITH TIME ZONE`` (the
session time zone is UTC). Window semantics are those of
:mod:`benchmarks.queries`:

* tumbling: ``window_start = floor(t / size) * size`` (a true floor, also right
  before 1970), then one ``GROUP BY``;
* sliding (hopping, ``size`` a multiple of ``slide``): events are first
  aggregated per key and ``slide``-wide pane, then each pane is added to the
  ``size / slide`` windows that contain it (a join with a small offsets table);
* sessions (gap ``g``): events are first aggregated per key and ``g``-wide
  bucket (count, sums, first and last timestamp). Events in one bucket are less
  than ``g`` apart, so a bucket is never split between sessions; gaps and
  islands then run over the buckets: ``lag`` per key flags a new session where a
  bucket's first event is ``g`` or more after the previous bucket's last event,
  a running count of the flags numbers the sessions, and ``window_end`` is the
  session's last event plus ``g``.

Nexmark's join queries (Q3, Q8, Q20) are Nexmark's own SQL (:func:`join_sql`,
the references of :mod:`benchmarks.nexmark`'s modules): regular joins, and
for Q8 each side grouped per key and 10 s window, then joined on the key and
the window. Q5's and Q11's statements here are those modules' references too.

Pre-aggregating panes and buckets gives exactly the same windows as handling
each event on its own, with far fewer rows in the expansion and the window
sort. ``--no-panes`` (runner name ``duckdb-no-panes``) runs the per-event
formulations instead: every event joined with the offsets of its sliding
windows, and gaps and islands over the events themselves (``lag`` per key
ordered by time, then a running count over a ``RANGE`` frame so that events with
equal timestamps share a session).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import pyarrow as pa

from benchmarks import protocol
from benchmarks.arrow import rows_of
from benchmarks.queries import QUERIES, Query

RUNNER = "duckdb"
US_PER_MS = 1_000

Aggs = dict[str, tuple[str, str]]
"""Output column -> (aggregate over events, aggregate of those partials with ``{}`` for the partial)."""

COUNT_SUM: Aggs = {"count": ("count(*)", "sum({})::BIGINT"), "sum_amount": ("sum(amount)", "sum({})")}
COUNT: Aggs = {"count": ("count(*)", "sum({})::BIGINT")}
MAX_PRICE: Aggs = {"max_price": ("max(price)", "max({})")}


def _floor(expr: str, step: int) -> str:
    """SQL for ``expr`` rounded down to a multiple of ``step`` (floor, not truncation)."""
    return f"({expr} - ((({expr}) % {step}) + {step}) % {step})"


def _ts(expr: str) -> str:
    """SQL turning integer epoch microseconds into a UTC ``TIMESTAMPTZ``."""
    return f"make_timestamp({expr})::TIMESTAMPTZ"


def _new_session(gap_us: int, later: str, earlier: str) -> str:
    """SQL: does the event at ``later`` start a new session after the one at ``earlier`` (NULL: yes)?

    Events exactly ``gap_us`` apart stay in one session: their proto-windows
    ``[t, t + gap)`` touch, and touching windows merge (:mod:`benchmarks.queries`).
    """
    return f"coalesce({later} - {earlier} > {gap_us}, true)"


def _events(src: str, time: str) -> str:
    """The source rows with their event time as epoch microseconds ``t``."""
    return f"SELECT *, epoch_us({time}) AS t FROM {src}"


def _direct(aggs: Aggs) -> str:
    return ", ".join(f"{part} AS {name}" for name, (part, _) in aggs.items())


def _partials(aggs: Aggs) -> str:
    return ", ".join(f"{part} AS _{name}" for name, (part, _) in aggs.items())


def _finals(aggs: Aggs) -> str:
    return ", ".join(f"{final.format('_' + name)} AS {name}" for name, (_, final) in aggs.items())


def tumbling_sql(src: str, key: str, time: str, size_ms: int, aggs: Aggs) -> str:
    """Tumbling windows per ``key`` (all events together if ``key`` is empty)."""
    size = size_ms * US_PER_MS
    k = f"{key}, " if key else ""
    return f"""
        SELECT {k}{_ts("ws")} AS window_start, {_ts(f"ws + {size}")} AS window_end, {_direct(aggs)}
        FROM (SELECT *, {_floor("t", size)} AS ws FROM ({_events(src, time)}))
        GROUP BY {k}ws
    """


def _hopping_sql(src: str, key: str, time: str, size_ms: int, slide_ms: int, aggs: Aggs, panes: bool) -> str:
    """``key, ws, <aggs>`` per hopping window (``ws``: its start in epoch microseconds)."""
    if size_ms % slide_ms:
        raise ValueError(f"window size {size_ms} ms is not a multiple of the slide {slide_ms} ms")
    size, slide = size_ms * US_PER_MS, slide_ms * US_PER_MS
    offsets = f"range({size // slide}) AS o(i)"
    if not panes:
        return f"""
            SELECT {key}, ws, {_direct(aggs)}
            FROM (SELECT *, {_floor("t", slide)} - o.i * {slide} AS ws FROM ({_events(src, time)}), {offsets})
            GROUP BY {key}, ws
        """
    return f"""
        WITH p AS (
            SELECT {key}, {_floor("t", slide)} AS ps, {_partials(aggs)}
            FROM ({_events(src, time)})
            GROUP BY ALL
        )
        SELECT {key}, ws, {_finals(aggs)}
        FROM (SELECT *, ps - o.i * {slide} AS ws FROM p, {offsets})
        GROUP BY {key}, ws
    """


def _with_bounds(key: str, size_ms: int, aggs: Aggs) -> str:
    size = size_ms * US_PER_MS
    return f"{key}, {_ts('ws')} AS window_start, {_ts(f'ws + {size}')} AS window_end, {', '.join(aggs)}"


def sliding_sql(src: str, key: str, time: str, size_ms: int, slide_ms: int, aggs: Aggs, panes: bool) -> str:
    """Hopping windows of ``size_ms`` every ``slide_ms`` per ``key``."""
    return f"""
        SELECT {_with_bounds(key, size_ms, aggs)}
        FROM ({_hopping_sql(src, key, time, size_ms, slide_ms, aggs, panes)})
    """


def session_sql(src: str, key: str, time: str, gap_ms: int, aggs: Aggs, panes: bool) -> str:
    """Sessions of gap ``gap_ms`` per ``key``."""
    gap = gap_ms * US_PER_MS
    if not panes:
        return f"""
            WITH f AS (
                SELECT *, {_new_session(gap, "t", f"lag(t) OVER (PARTITION BY {key} ORDER BY t)")} AS is_first
                FROM ({_events(src, time)})
            ),
            g AS (
                SELECT *, count_if(is_first) OVER (PARTITION BY {key} ORDER BY t) AS sid FROM f
            )
            SELECT {key}, {_ts("min(t)")} AS window_start, {_ts(f"max(t) + {gap}")} AS window_end,
                   {_direct(aggs)}
            FROM g
            GROUP BY {key}, sid
        """
    # (key, b) is unique, so a ROWS frame numbers the sessions.
    return f"""
        WITH p AS (
            SELECT {key}, {_floor("t", gap)} AS b, min(t) AS t0, max(t) AS t1, {_partials(aggs)}
            FROM ({_events(src, time)})
            GROUP BY ALL
        ),
        f AS (
            SELECT *, {_new_session(gap, "t0", f"lag(t1) OVER (PARTITION BY {key} ORDER BY b)")} AS is_first
            FROM p
        ),
        g AS (
            SELECT *, count_if(is_first) OVER (PARTITION BY {key} ORDER BY b ROWS UNBOUNDED PRECEDING) AS sid
            FROM f
        )
        SELECT {key}, {_ts("min(t0)")} AS window_start, {_ts(f"max(t1) + {gap}")} AS window_end,
               {_finals(aggs)}
        FROM g
        GROUP BY {key}, sid
    """


def hot_items_sql(src: str, key: str, time: str, size_ms: int, slide_ms: int, panes: bool) -> str:
    """Nexmark q5: per hopping window, every ``key`` tied at the highest event count."""
    return f"""
        SELECT {_with_bounds(key, size_ms, COUNT)}
        FROM ({_hopping_sql(src, key, time, size_ms, slide_ms, COUNT, panes)})
        QUALIFY count = max(count) OVER (PARTITION BY ws)
    """


def query_sql(query: Query, path: str, panes: bool = True) -> str:
    """The SQL of ``query`` over the Parquet files matching ``path`` (a glob)."""
    src = "read_parquet('" + path.replace("'", "''") + "')"
    t = query.event_time
    sql: dict[str, Callable[[], str]] = {
        "tumbling": lambda: tumbling_sql(src, "user_id", t, 60_000, COUNT_SUM),
        "sliding": lambda: sliding_sql(src, "user_id", t, 60_000, 10_000, COUNT_SUM, panes),
        "sliding-10m": lambda: sliding_sql(src, "user_id", t, 600_000, 10_000, COUNT_SUM, panes),
        "session": lambda: session_sql(src, "user_id", t, 30_000, COUNT_SUM, panes),
        "nexmark-q5": lambda: hot_items_sql(src, "auction", t, 10_000, 2_000, panes),
        "nexmark-q7": lambda: tumbling_sql(src, "", t, 10_000, MAX_PRICE),
        "nexmark-q11": lambda: session_sql(src, "bidder", t, 10_000, COUNT, panes),
    }
    return sql[query.name]()


def _source(path: str) -> str:
    return "read_parquet('" + path.replace("'", "''") + "')"


def join_sql(query: Query, paths: dict[str, str]) -> str:
    """Nexmark's own SQL of a join query (regular joins, Q8's windows grouped per side) over ``paths``:
    its module's reference (``nexmark-q3``: :data:`benchmarks.nexmark.q3.DUCKDB`).

    ``paths``: each table's Parquet files (a glob). Q8's windows are 10 s
    tumbling windows on epoch microseconds, as :func:`tumbling_sql`'s.
    """
    from benchmarks.nexmark import query as nexmark_query  # (its q5 and q11 read this module)

    if not query.is_join:
        raise ValueError(f"{query.name!r} is not a join query")
    sql: str = nexmark_query(query.name.removeprefix("nexmark-")).DUCKDB
    return sql.format(**{table: _source(path) for table, path in paths.items()})


def main(argv: list[str] | None = None) -> int:
    parser = protocol.parser("python -m benchmarks.duckdb_runner")
    parser.add_argument(
        "--no-panes",
        action="store_true",
        help="per-event formulations of the sliding and session queries (runner duckdb-no-panes)",
    )
    args = parser.parse_args(argv)
    runner = f"{RUNNER}-no-panes" if args.no_panes else RUNNER
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in args.query:
        query = QUERIES.get(name)
        if query is None:
            protocol.skip(runner, name, "unknown query")
            continue
        infos = protocol.tables_info(query, args)
        paths = {t: i.files() + "/*.parquet" for t, i in zip(query.tables, infos, strict=True)}
        if query.is_join:
            sql = join_sql(query, paths)
        else:
            sql = query_sql(query, paths[query.table], panes=not args.no_panes)

        def run(sql: str = sql) -> pa.Table:
            result: pa.Table = con.sql(sql).to_arrow_table()
            return result

        events = sum(i.rows for i in infos)
        protocol.measure(runner, name, events, run, rows_of(query.columns), args.repeat, warmup=args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
