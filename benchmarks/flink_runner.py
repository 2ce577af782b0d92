"""The PyFlink runner: every benchmark query as Flink SQL in streaming mode (the peer engine).

Run from the repository root with an interpreter that has ``apache-flink``
installed (PyFlink pins pyarrow/pandas versions that clash with pyspark's, so
it lives in its own virtualenv)::

    python -m benchmarks.flink_runner --query tumbling --query nexmark-q5 \\
        --clickstream DIR --nexmark DIR --repeat 3

One streaming ``TableEnvironment`` (one local mini-cluster) serves every query
of the process. A query is one Flink SQL job: the filesystem connector reads
the table as CSV, the watermark is ``<et> - INTERVAL '5' SECOND`` and the
windows are window table-valued functions (``TUMBLE``, ``HOP``, ``SESSION ...
PARTITION BY``). A timed run executes the whole job and writes its complete
result with the filesystem connector (CSV) into a fresh directory; reading it
back for the digest is not timed. That is several times cheaper than collecting
~100k rows into the client (``to_pandas`` or ``collect``). At the end of the
input Flink advances the watermark to +inf, so the last, still-open windows are
emitted too.

Input order, parallelism and late events: Flink's file source hands the files
of a directory to its readers in no particular order (and reads them in
parallel), so the table's parts are concatenated once per process, in arrival
order (part number), into one CSV file. Its reader chain (source, watermark
assigner, local pre-aggregation) runs as one subtask
(``table.exec.resource.default-parallelism: 1``, which the planner applies to
the source chain), everything after the first shuffle at
``parallelism.default`` = ``os.cpu_count()``. Watermarks are emitted after
every record (``pipeline.auto-watermark-interval: 0``), so the run is
deterministic: an event is dropped exactly when every window it belongs to was
already closed by the watermark of the events before it (a hopping window's
later windows still count it). With a parallel source, idle reader subtasks
would hold the watermark back for a timing-dependent moment at the start of
each job.

Semantic notes:

* Session windows are Flink's own: touching proto-windows (events exactly
  ``gap`` apart) merge, as :mod:`benchmarks.queries` specifies.
* nexmark-q5 keeps every auction tied at the highest count of its window: window
  Top-N only supports ``ROW_NUMBER``, so it joins the per-auction counts with
  their per-window maximum (a window join on ``window_start``/``window_end``).
* The join queries (nexmark-q3, -q8, -q20) are Nexmark's own SQL over two
  tables, each registered as above with its own watermark (:func:`join_sql`).

Flink's Java logging goes to the log directory of the PyFlink installation
(or ``$FLINK_LOG_DIR``), not to stdout.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import protocol
from benchmarks.queries import QUERIES, WATERMARK_LAG_MS, Query

RUNNER = "pyflink"

_FLINK_TYPES = {
    "string": "STRING",
    "timestamp": "TIMESTAMP(3)",
    "double": "DOUBLE",
    "bigint": "BIGINT",
    "int": "INT",
    "integer": "INT",
    "boolean": "BOOLEAN",
}

_EPOCH = dt.datetime(1970, 1, 1)


def _epoch_ms(text: str) -> int:
    return (dt.datetime.fromisoformat(text) - _EPOCH) // dt.timedelta(milliseconds=1)


# Flink SQL type and CSV parser of every result column of the queries.
_RESULT_COLUMNS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "user_id": ("STRING", str),
    "auction": ("BIGINT", int),
    "bidder": ("BIGINT", int),
    "window_start": ("TIMESTAMP(3)", _epoch_ms),
    "window_end": ("TIMESTAMP(3)", _epoch_ms),
    "count": ("BIGINT", int),
    "sum_amount": ("DOUBLE", float),
    "max_price": ("BIGINT", int),
    # Nexmark's join queries (Q3, Q8, Q20)
    "id": ("BIGINT", int),
    "name": ("STRING", str),
    "city": ("STRING", str),
    "state": ("STRING", str),
    "price": ("BIGINT", int),
    "channel": ("STRING", str),
    "url": ("STRING", str),
    "date_time": ("TIMESTAMP(3)", _epoch_ms),
    "item_name": ("STRING", str),
    "description": ("STRING", str),
    "initial_bid": ("BIGINT", int),
    "reserve": ("BIGINT", int),
    "date_time_right": ("TIMESTAMP(3)", _epoch_ms),
    "expires": ("TIMESTAMP(3)", _epoch_ms),
    "seller": ("BIGINT", int),
    "category": ("BIGINT", int),
}


def interval(ms: int) -> str:
    """A Flink SQL day-time interval literal of ``ms`` milliseconds.

    Written ``DAY TO SECOND``: a plain ``SECOND`` literal takes at most two
    digits (``INTERVAL '600' SECOND`` is refused).
    """
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"INTERVAL '{days} {hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}' DAY TO SECOND(3)"


def flink_columns(ddl: str) -> list[tuple[str, str]]:
    """``(name, Flink SQL type)`` pairs of a Spark DDL string such as ``"a string, t timestamp"``."""
    cols = []
    for part in ddl.split(","):
        name, spark_type = part.split()
        cols.append((name, _FLINK_TYPES[spark_type.lower()]))
    return cols


def _file_table(name: str, columns: Sequence[str], path: Path) -> str:
    body = ",\n  ".join(columns)
    return (
        f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) WITH (\n"
        f"  'connector' = 'filesystem', 'path' = '{path.resolve().as_uri()}', 'format' = 'csv'\n)"
    )


def source_ddl(name: str, ddl: str, event_time: str, path: Path, lag_ms: int = WATERMARK_LAG_MS) -> str:
    cols = [f"`{c}` {t}" for c, t in flink_columns(ddl)]
    cols.append(f"WATERMARK FOR `{event_time}` AS `{event_time}` - {interval(lag_ms)}")
    return _file_table(name, cols, path)


def sink_ddl(name: str, query: Query, path: Path) -> str:
    return _file_table(name, [f"`{c}` {_RESULT_COLUMNS[c][0]}" for c in query.columns], path)


def _session_sql(table: str, key: str, et: str, gap_ms: int, aggs: str, select: str) -> str:
    return (
        f"SELECT {select} FROM (\n"
        f"  SELECT {key}, window_start, window_end, {aggs}\n"
        f"  FROM TABLE(SESSION(TABLE {table} PARTITION BY {key}, DESCRIPTOR({et}), {interval(gap_ms)}))\n"
        f"  GROUP BY {key}, window_start, window_end\n)"
    )


def query_sql(query: Query) -> str:
    """The Flink SQL of ``query``; its columns are ``query.columns`` in order."""
    t, et = f"`{query.table}`", f"`{query.event_time}`"
    select = ", ".join(f"`{c}`" for c in query.columns)
    count_sum = "COUNT(*) AS `count`, SUM(amount) AS sum_amount"
    if query.name == "tumbling":
        return (
            f"SELECT user_id, window_start, window_end, {count_sum}\n"
            f"FROM TABLE(TUMBLE(TABLE {t}, DESCRIPTOR({et}), {interval(60_000)}))\n"
            "GROUP BY user_id, window_start, window_end"
        )
    if query.name in ("sliding", "sliding-10m"):
        size = 60_000 if query.name == "sliding" else 600_000
        return (
            f"SELECT user_id, window_start, window_end, {count_sum}\n"
            f"FROM TABLE(HOP(TABLE {t}, DESCRIPTOR({et}), {interval(10_000)}, {interval(size)}))\n"
            "GROUP BY user_id, window_start, window_end"
        )
    if query.name == "session":
        return _session_sql(t, "user_id", et, 30_000, count_sum, select)
    if query.name == "nexmark-q5":
        # Window Top-N supports only ROW_NUMBER (no ties), so: per-window max, then a window join.
        return (
            "WITH counts AS (\n"
            "  SELECT auction, window_start, window_end, COUNT(*) AS `count`\n"
            f"  FROM TABLE(HOP(TABLE {t}, DESCRIPTOR({et}), {interval(2_000)}, {interval(10_000)}))\n"
            "  GROUP BY auction, window_start, window_end\n"
            "), maxima AS (\n"
            "  SELECT window_start, window_end, MAX(`count`) AS max_count\n"
            "  FROM counts GROUP BY window_start, window_end\n"
            ")\n"
            "SELECT c.auction, c.window_start, c.window_end, c.`count`\n"
            "FROM counts AS c JOIN maxima AS m\n"
            "ON c.window_start = m.window_start AND c.window_end = m.window_end AND c.`count` = m.max_count"
        )
    if query.name == "nexmark-q7":
        return (
            "SELECT window_start, window_end, MAX(price) AS max_price\n"
            f"FROM TABLE(TUMBLE(TABLE {t}, DESCRIPTOR({et}), {interval(10_000)}))\n"
            "GROUP BY window_start, window_end"
        )
    if query.name == "nexmark-q11":
        return _session_sql(t, "bidder", et, 10_000, "COUNT(*) AS `count`", select)
    if query.is_join:
        return join_sql(query)
    raise ValueError(f"unknown query {query.name!r}")


def join_sql(query: Query) -> str:
    """Nexmark's own SQL of a join query (the Nexmark benchmark's Flink queries, our column names).

    Q3 and Q20 are regular joins: Flink keeps every row of both inputs and
    joins each new row with all of them, whatever its event time, so their
    rows are the bounded answer. Q8 groups each side per key and 10 s window
    (window TVFs) and joins the two on the key and the window bounds; the
    groupings drop late events by Flink's own watermark.
    """
    if query.name == "nexmark-q3":
        return (
            "SELECT P.name, P.city, P.state, A.id\n"
            "FROM auction AS A INNER JOIN person AS P ON A.seller = P.id\n"
            "WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"
        )
    if query.name == "nexmark-q8":
        window = interval(10_000)
        return (
            "SELECT P.id, P.name, P.starttime\n"
            "FROM (\n"
            "  SELECT id, name, window_start AS starttime, window_end AS endtime\n"
            f"  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), {window}))\n"
            "  GROUP BY id, name, window_start, window_end\n"
            ") P\n"
            "JOIN (\n"
            "  SELECT seller, window_start AS starttime, window_end AS endtime\n"
            f"  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), {window}))\n"
            "  GROUP BY seller, window_start, window_end\n"
            ") A\n"
            "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"
        )
    if query.name == "nexmark-q20":
        # The event times leave the join as plain timestamps: Flink keeps no time attribute
        # through a regular join.
        return (
            "SELECT auction, bidder, price, channel, url, CAST(B.date_time AS TIMESTAMP(3)),\n"
            "       item_name, description, initial_bid, reserve, CAST(A.date_time AS TIMESTAMP(3)),\n"
            "       expires, seller, category\n"
            "FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id\n"
            "WHERE A.category = 10"
        )
    raise ValueError(f"unknown join query {query.name!r}")


@dataclass(frozen=True)
class SinkResult:
    """Where a run wrote its result (CSV part files), and the columns it has."""

    path: Path
    columns: tuple[str, ...]


def rows_of(result: SinkResult) -> protocol.Rows:
    """The rows of a run's CSV result, window bounds as epoch ms."""
    parsers = [_RESULT_COLUMNS[c][1] for c in result.columns]
    rows: protocol.Rows = []
    for part in sorted(result.path.rglob("*")):
        if not part.is_file() or part.name.startswith((".", "_")):
            continue  # in-progress / hidden files of the filesystem sink
        with open(part, newline="") as f:
            rows.extend(tuple(p(v) for p, v in zip(parsers, rec, strict=True)) for rec in csv.reader(f))
    return rows


class FlinkRunner:
    """One streaming TableEnvironment (one local mini-cluster) for every query of the process."""

    def __init__(self, parallelism: int, watermark_interval_ms: int = 0) -> None:
        from pyflink.table import EnvironmentSettings, TableEnvironment

        self.env: Any = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        config = self.env.get_config()
        config.set("parallelism.default", str(parallelism))
        config.set("table.exec.resource.default-parallelism", "1")  # the (single-split) reader chain
        config.set("pipeline.auto-watermark-interval", f"{watermark_interval_ms} ms")
        config.set("table.local-time-zone", "UTC")
        self.tmp = tempfile.TemporaryDirectory(prefix="flink-bench-")
        self.sources: set[str] = set()
        self.runs = 0
        self.last: Path | None = None

    def close(self) -> None:
        self.tmp.cleanup()

    def prepare(
        self, query: Query, infos: Sequence[protocol.TableInfo], *, lag_ms: int = WATERMARK_LAG_MS
    ) -> None:
        """Register the query's source tables (a join's two; once per table), watermarks ``lag_ms`` behind."""
        for table, info in zip(query.tables, infos, strict=True):
            if table not in self.sources:
                self._register(table, query.event_time, info, lag_ms)

    def _register(self, table: str, event_time: str, info: protocol.TableInfo, lag_ms: int) -> None:
        parts = sorted(Path(info.files("csv")).glob("part-*.csv"))
        if not parts:
            raise FileNotFoundError(f"no CSV parts in {info.files('csv')}")
        ordered = Path(self.tmp.name) / "sources" / table
        ordered.mkdir(parents=True)
        with open(ordered / "data.csv", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out)
        self.env.execute_sql(source_ddl(table, info.ddl, event_time, ordered, lag_ms))
        self.sources.add(table)

    def run(self, query: Query) -> SinkResult:
        """Run the whole streaming job, writing its complete result to a fresh directory."""
        if self.last is not None:  # keep only the latest result on disk
            shutil.rmtree(self.last, ignore_errors=True)
        self.runs += 1
        out = Path(self.tmp.name) / "results" / f"run-{self.runs}"
        out.mkdir(parents=True)
        self.last = out
        self.env.execute_sql("DROP TEMPORARY TABLE IF EXISTS `result_sink`")
        self.env.execute_sql(sink_ddl("result_sink", query, out))
        self.env.execute_sql(f"INSERT INTO `result_sink`\n{query_sql(query)}").wait()
        return SinkResult(out, query.columns)


def main(argv: Sequence[str] | None = None) -> int:
    p = protocol.parser("benchmarks.flink_runner")
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--watermark-interval-ms",
        type=int,
        default=0,
        help="pipeline.auto-watermark-interval (0: a watermark after every record)",
    )
    args = p.parse_args(argv)
    try:
        import pyflink  # noqa: F401
    except ImportError:
        for name in args.query:
            protocol.skip(RUNNER, name, "apache-flink is not installed in this interpreter")
        return 0
    try:
        runner = FlinkRunner(args.parallelism, args.watermark_interval_ms)
    except Exception as exc:  # noqa: BLE001 - no JVM, no mini-cluster: every query reports it
        for name in args.query:
            _failed(name, exc)
        return 0
    try:
        for name in args.query:
            query = QUERIES.get(name)
            if query is None:
                protocol.skip(RUNNER, name, f"unknown query {name!r}")
                continue
            try:
                infos = protocol.tables_info(query, args)
                runner.prepare(query, infos)
            except Exception as exc:  # noqa: BLE001 - reported; the other queries still run
                _failed(name, exc)
                continue
            run = functools.partial(runner.run, query)
            events = sum(i.rows for i in infos)
            protocol.measure(RUNNER, name, events, run, rows_of, args.repeat, warmup=args.warmup)
    finally:
        runner.close()
    return 0


def _failed(query: str, exc: BaseException) -> None:
    traceback.print_exception(exc)
    protocol.report(RUNNER, query, "failed", f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
