"""Nexmark q4, q6, q7, q9 and q23 (joins composed with aggregations, top-N, a window and a join):
streamed in krishiv and in PyFlink, against DuckDB.

Five of Nexmark's queries over this repository's Nexmark tables
(:func:`benchmarks.data.nexmark`), each defined by its module of
:mod:`benchmarks.nexmark` (``q4.py``, ``q6.py``, ``q7.py``, ``q9.py``,
``q23.py``: :func:`composed` reads it into a :class:`NexmarkQuery`):

* Nexmark's own SQL (``nexmark-flink/src/main/resources/queries/qN.sql`` of
  the Nexmark benchmark repository, nexmark/nexmark, as of commit ``6b3646c``,
  2025-12-26), quoted in the module's docstring, and rewritten to this
  repository's column names (``date_time``, ``item_name``, ...; the tables
  have no ``extra`` column): the module's ``DUCKDB``;
* a DuckDB reference (:func:`duckdb_rows`): that SQL on the bounded tables
  (the Parquet files), which is the *final answer once all input is in*;
* a PyFlink run of the same SQL on the same data (:func:`flink_rows`), in
  streaming mode, where Flink can run it (the module's ``FLINK`` where its
  text differs);
* :func:`compare`: both engines, and whether they agree row for row;
* krishiv's pipelines with the builder (the module's ``build``, over the
  tables each watermarked :func:`watermark_lag_ms` behind:
  :func:`krishiv_pipeline`), q4 and q9 also in krishiv SQL, whose plans
  equal the builder's (:func:`sql_plan_agrees`), and :func:`krishiv_rows`,
  which runs one bounded and streamed and compares it with DuckDB's rows.

``python -m benchmarks.nexmark --query q9`` checks the same pipeline
bounded, beside the other queries.

The queries join on keys (and, for q4/q6/q7/q9, a condition between the event
times) as *regular* joins: Flink keeps every row of both inputs and drops
nothing behind a watermark, so its final state is the bounded answer, and
the DuckDB rows are the reference a streamed run is checked against. q7's
window drops rows behind the watermark in both engines; the watermark lag
leaves none there.

Result rows compare as multisets: rows are sorted and compared pairwise,
timestamps as epoch milliseconds, floats to a relative tolerance of 1e-9
(:func:`rows_agree`). Averages are taken over ``DOUBLE``: Nexmark writes
``AVG(price)`` of a ``BIGINT``, which Flink computes as a ``BIGINT`` (the
integer part) and DuckDB as a ``DOUBLE``; casting to ``DOUBLE`` first makes
both the exact mean.

How Flink is run
----------------
PyFlink lives in an environment of its own (``apache-flink`` pins pyarrow and
pandas versions that clash with pyspark's): ``nox -s bench`` makes
``.nox/flink``, and :func:`benchmarks.driver.python_for_flink` finds it (or
``--flink-python``, ``KRISHIV_BENCH_FLINK_PYTHON``). :func:`run_flink` starts
this module there as a worker process (``--worker OUT``), which registers the
three tables as :mod:`benchmarks.flink_runner` does (the CSV parts in arrival
order, one reader, the watermark :func:`watermark_lag_ms` behind, as krishiv's, so
that q7's windows drop no row), runs ``INSERT INTO`` a filesystem
sink in the ``debezium-json`` format and writes the rows the changelog leaves
(:func:`final_rows`) as JSON. An updating result (q4's averages, q9's top
row per auction) is applied by the query's unique key, so both of Flink's
forms of an update give the same rows: a retraction (``-U``) then the new
row, or the new row alone (upsert form, which Flink 2.3 picks for q9's
top-N). Flink writes an updating stream with the parallelism of the
operator that makes it (it refuses a ``sink.parallelism`` of its own "when
the input stream is not INSERT only"), so all of a key's changes are in one
writer's files, in the order they were made. The worker imports neither
DuckDB nor psutil, which the PyFlink environment lacks.

q6 in Flink
-----------
Flink cannot run q6 (FLINK-19059: its ``OVER`` window does not consume the
top-1's retractions); :mod:`benchmarks.nexmark.q6` says how its planner
refuses it. The DuckDB reference is the only answer.

How krishiv is run
------------------
Each table is a Parquet file source (:func:`krishiv_sources`): bounded, a
``collect()``; streamed, one file of each table per micro-batch, then
``process_all_available()`` and ``stop()``. The watermark is on
``date_time`` with a lag of the generator's disorder plus its longest
lateness (:func:`watermark_lag_ms`, 62 s): no row is behind it, so a
streamed run has every row the reference has, and its final rows are the
bounded answer. An updating result (q4, q9) is applied by its ``kind``
column (:func:`current_rows`): each ``retract`` withdraws an equal
``emit``. q6's ``OVER`` gives a row per winning bid, in krishiv too
(``over_rows``); a streamed run has the rows the watermark passed
(:meth:`NexmarkQuery.fired`).

Run::

    python -m benchmarks.nexmark_compose --query q9 --events 20000 [--krishiv]

prints DuckDB's row count, Flink's, whether they agree, and the times;
``--krishiv`` adds krishiv's streamed and bounded runs (and whether its SQL
makes the builder's plan).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pyarrow as pa

import krishiv_py as kp
from benchmarks import data, protocol
from benchmarks.data import Dataset, NexmarkSpec
from benchmarks.flink_runner import FlinkRunner
from benchmarks.nexmark import _streams, q9, query
from benchmarks.queries import Query
from krishiv_py.api.stream import placeholder
from krishiv_py.names import RESULT_KIND

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("person", "auction", "bid")
EVENT_TIME = "date_time"
REL_TOL = 1e-9

Row = tuple[Any, ...]
#: A changelog entry: ``"+"`` a row enters the result (insert, update-after), ``"-"`` one leaves it.
Change = tuple[Literal["+", "-"], Row]

_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True, kw_only=True)
class NexmarkQuery:
    """One query: the SQL both engines run, its result columns, and the key its changelog applies by."""

    name: str
    title: str
    sql: str
    #: ``(name, Flink SQL type)`` of each result column, in ``SELECT`` order.
    columns: tuple[tuple[str, str], ...]
    #: Columns unique in the final result (an updating result applies its changes by them);
    #: ``()``: an insert-only result, any duplicates kept.
    key: tuple[str, ...] = ()
    #: The text Flink runs, when it is not ``sql`` (q6: Nexmark's single ordering column).
    flink_sql: str = ""
    #: The query in krishiv SQL (the form docs/sql.md accepts), ``""`` where it has none.
    krishiv_sql: str = ""
    #: Where a row waits for its window to close (q7): ``sql`` keeping only the rows of windows the
    #: watermark ``{watermark_ms}`` (epoch ms) closed. A streamed run of files has no end of input:
    #: its last windows never close, and it is checked against these rows.
    fired_sql: str = ""
    #: Where ``sql`` orders rows by time and krishiv breaks ties in time by arrival (q6's ``OVER``):
    #: the SQL of the first column's values whose rows tie; their rows are compared by count alone.
    ties_sql: str = ""

    def fired(self, watermark_ms: int) -> NexmarkQuery:
        """The query of the rows a run whose watermark reached ``watermark_ms`` has (itself: all)."""
        if not self.fired_sql:
            return self
        return replace(self, sql=self.fired_sql.format(watermark_ms=watermark_ms), flink_sql="")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    @property
    def key_index(self) -> tuple[int, ...]:
        return tuple(self.column_names.index(k) for k in self.key)


#: The tables as a module's DuckDB statements name them here: the views :func:`duckdb_rows` makes,
#: and the tables PyFlink registers.
VIEWS = {t: t for t in TABLES}


def _title(module: ModuleType) -> str:
    """A module's name of its query: its docstring's ``Nexmark qN, <name>: ...``."""
    first = (module.__doc__ or "").split("\n", 1)[0]
    return first.split(", ", 1)[-1].split(":", 1)[0]


def composed(name: str) -> NexmarkQuery:
    """Query ``name`` of :mod:`benchmarks.nexmark` (``qN.py``) as this module runs it."""
    module = query(name)

    def text(attribute: str) -> str:
        sql: str | None = getattr(module, attribute, None)
        return "" if sql is None else sql.format(**VIEWS, watermark_ms="{watermark_ms}")

    return NexmarkQuery(
        name=name,
        title=_title(module),
        sql=text("DUCKDB"),
        columns=module.COLUMNS,
        key=getattr(module, "KEY", ()),
        flink_sql=text("FLINK"),
        krishiv_sql=module.SQL or "",
        fired_sql=text("FIRED_DUCKDB"),
        ties_sql=text("TIES_DUCKDB"),
    )


#: The queries krishiv runs.
KRISHIV_QUERIES = ("q4", "q6", "q7", "q9", "q23")
QUERIES: dict[str, NexmarkQuery] = {name: composed(name) for name in KRISHIV_QUERIES}


# --- DuckDB: the bounded reference ---------------------------------------------------------


def duckdb_rows(query: NexmarkQuery, dataset: Dataset) -> list[Row]:
    """The final answer of ``query`` over every row of ``dataset`` (its Parquet files), in DuckDB."""
    import duckdb  # here, not at the top: the PyFlink environment runs this module without DuckDB

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        for table in TABLES:
            files = (Path(dataset.table_dir(table)) / "*.parquet").as_posix().replace("'", "''")
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}')")
        return arrow_rows(con.sql(query.sql).to_arrow_table())
    finally:
        con.close()


def arrow_rows(table: pa.Table) -> list[Row]:
    """The rows of ``table``, timestamps as epoch milliseconds."""
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
        columns.append(column.to_pylist())
    return list(zip(*columns, strict=True))


# --- PyFlink: the same SQL, streaming ------------------------------------------------------


def final_rows(changes: Iterable[Change], key: Sequence[int]) -> list[Row]:
    """The rows a changelog leaves, applied by the columns at ``key`` (``()``: insert-only).

    With a key, ``"+"`` sets the key's row and ``"-"`` removes it: a
    retraction followed by the new row and the new row alone (upsert form)
    leave the same rows. Without one, every change must be ``"+"``.

    Examples
    --------
    >>> retract = [("+", ("a", 1)), ("-", ("a", 1)), ("+", ("a", 2))]
    >>> upsert = [("+", ("a", 1)), ("+", ("a", 2))]
    >>> final_rows(retract, (0,)) == final_rows(upsert, (0,)) == [("a", 2)]
    True
    """
    if not key:
        return [_inserted(kind, row) for kind, row in changes]
    state: dict[Row, Row] = {}
    for kind, row in changes:
        k = tuple(row[i] for i in key)
        if kind == "+":
            state[k] = row
        elif state.pop(k, None) is None:
            raise ValueError(f"a retraction of {row!r}, whose key {k!r} has no row")
    return list(state.values())


def _inserted(kind: str, row: Row) -> Row:
    if kind != "+":
        raise ValueError(f"an insert-only query's changelog retracts {row!r}: give the query a key")
    return row


def _epoch_ms(text: str) -> int:
    return (dt.datetime.fromisoformat(text) - _EPOCH) // dt.timedelta(milliseconds=1)


def _value(flink_type: str, value: Any) -> Any:
    if value is None:
        return None
    if flink_type.startswith("TIMESTAMP"):
        return _epoch_ms(value)
    return float(value) if flink_type == "DOUBLE" else value


def _part_order(path: Path) -> tuple[int, int]:
    """``part-<uuid>-<subtask>-<count>``: each writer's files in the order it wrote them."""
    subtask, count = path.name.rsplit("-", 2)[1:]
    return int(subtask), int(count)


#: Debezium's ``op`` as Flink writes it: the change, and where its row is.
_OPS: dict[str, tuple[Literal["+", "-"], str]] = {"c": ("+", "after"), "d": ("-", "before")}


def read_changes(directory: Path, query: NexmarkQuery) -> Iterator[Change]:
    """The changelog a ``debezium-json`` filesystem sink wrote into ``directory``, each writer's in order.

    Flink writes an insert or update-after as ``"op": "c"`` with the row in
    ``after``, an update-before or delete as ``"op": "d"`` with it in
    ``before``; timestamps as ``yyyy-MM-dd HH:mm:ss.SSS`` text, read as epoch ms.
    """
    parts = [p for p in directory.rglob("part-*") if p.is_file()]
    for part in sorted(parts, key=_part_order):
        with open(part) as f:
            for line in f:
                record = json.loads(line)
                kind, side = _OPS[record["op"]]
                yield kind, tuple(_value(t, record[side][c]) for c, t in query.columns)


def sink_ddl(name: str, query: NexmarkQuery, path: Path) -> str:
    """A filesystem sink of ``query``'s columns writing its changelog (``debezium-json``)."""
    body = ",\n  ".join(f"`{c}` {t}" for c, t in query.columns)
    return (
        f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) WITH (\n"
        f"  'connector' = 'filesystem', 'path' = '{path.resolve().as_uri()}',\n"
        "  'format' = 'debezium-json'\n)"
    )


@dataclass(frozen=True)
class FlinkResult:
    rows: list[Row]
    changes: int
    #: The job from ``INSERT INTO`` to its end, in the worker.
    job_s: float


def flink_rows(query: NexmarkQuery, dataset: Dataset, parallelism: int) -> FlinkResult:
    """Run ``query`` in streaming mode on a local mini-cluster (needs PyFlink: the worker process)."""
    runner = FlinkRunner(parallelism)
    try:
        for table in TABLES:
            info = protocol.TableInfo(
                root=dataset.root / table, ddl=dataset.ddl(table), rows=dataset.rows(table)
            )
            table_query = Query(table, "nexmark", table, EVENT_TIME, (), f"Nexmark {table}")
            runner.prepare(table_query, [info], lag_ms=watermark_lag_ms(dataset))
        out = Path(runner.tmp.name) / "result"
        out.mkdir()
        runner.env.execute_sql(sink_ddl("result", query, out))
        start = time.perf_counter()
        runner.env.execute_sql(f"INSERT INTO `result`\n{query.flink_sql or query.sql}").wait()
        job_s = time.perf_counter() - start
        changes = list(read_changes(out, query))
        return FlinkResult(final_rows(changes, query.key_index), len(changes), job_s)
    finally:
        runner.close()


class FlinkError(RuntimeError):
    """Flink refused the query or its job failed; the message is Flink's."""


@dataclass(frozen=True)
class FlinkRun:
    result: FlinkResult
    #: The worker process, JVM start included.
    process_s: float


def run_flink(
    query: NexmarkQuery,
    dataset: Dataset,
    *,
    flink_python: str | None = None,
    parallelism: int | None = None,
    timeout_s: float = 3_600,
) -> FlinkRun:
    """Run :func:`flink_rows` in a PyFlink interpreter (a worker process) and read its rows back."""
    from benchmarks.driver import python_for_flink  # psutil: not in the PyFlink environment

    python, how = python_for_flink(flink_python)
    if python is None:
        raise FlinkError(how)
    with tempfile.TemporaryDirectory(prefix="nexmark-compose-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [python, "-m", "benchmarks.nexmark_compose", "--query", query.name]
        cmd += ["--dataset", str(dataset.root), "--parallelism", str(parallelism or os.cpu_count() or 1)]
        start = time.perf_counter()
        proc = subprocess.run(
            [*cmd, "--worker", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
        )
        process_s = time.perf_counter() - start
        if proc.returncode != 0 or not out.exists():
            raise FlinkError(f"the PyFlink worker exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
        report = json.loads(out.read_text())
    if "error" in report:
        raise FlinkError(report["error"])
    rows = [tuple(r) for r in report["rows"]]
    return FlinkRun(FlinkResult(rows, report["changes"], report["job_s"]), process_s)


def _flink_message(exc: BaseException) -> str:
    """The Java exception's own line of a Py4J error (``...Exception: message``), else the first line."""
    lines = str(exc).splitlines()
    java = [ln.lstrip(": ") for ln in lines if "Exception: " in ln and not ln.lstrip().startswith("at ")]
    return java[0] if java else (lines[0] if lines else type(exc).__name__)


def _worker(query: NexmarkQuery, dataset: Dataset, parallelism: int, out: Path) -> None:
    try:
        result = flink_rows(query, dataset, parallelism)
    except Exception as exc:  # noqa: BLE001 - a refused query is the report, not a crash
        report: dict[str, Any] = {"error": _flink_message(exc)}
    else:
        report = {"rows": result.rows, "changes": result.changes, "job_s": result.job_s}
    out.write_text(json.dumps(report))


# --- comparing ---------------------------------------------------------------------------


def _values_close(a: Any, b: Any, rel_tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel_tol)
    return bool(a == b)


def _order(row: Row) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is None, 0 if v is None else v) for v in row)


def rows_agree(left: Sequence[Row], right: Sequence[Row], rel_tol: float = REL_TOL) -> bool:
    """Are ``left`` and ``right`` the same multiset of rows (floats to ``rel_tol`` relative)?

    Examples
    --------
    >>> rows_agree([(1, 0.3)], [(1, 0.1 + 0.2)])
    True
    >>> rows_agree([(1, 2.0), (1, 2.0)], [(1, 2.0)])
    False
    """
    if len(left) != len(right):
        return False
    pairs = zip(sorted(left, key=_order), sorted(right, key=_order), strict=True)
    return all(
        len(a) == len(b) and all(_values_close(x, y, rel_tol) for x, y in zip(a, b, strict=True))
        for a, b in pairs
    )


def compare(query: str, dataset: Dataset) -> bool:
    """Do DuckDB and PyFlink give ``query`` the same rows on ``dataset``?

    Raises :class:`FlinkError` when Flink cannot run it (q6) or no PyFlink
    environment is found.
    """
    q = QUERIES[query]
    return rows_agree(duckdb_rows(q, dataset), run_flink(q, dataset).result.rows)


# --- krishiv: the builder's pipelines, their SQL, and runs --------------------------------------

#: q23's joins: a partner at most the longest auction before or after.
BETWEEN = _streams.BETWEEN
#: The bid table as krishiv reads it: the columns Nexmark's q9 ranks a tie by first
#: (:mod:`benchmarks.nexmark.q9`).
RANKED_BID_DDL = q9.RANKED_BID_DDL
DDLS = {"person": data.PERSON_DDL, "auction": data.AUCTION_DDL, "bid": RANKED_BID_DDL}

Streams = Mapping[str, kp.Stream]


def watermark_lag_ms(dataset: Dataset) -> int:
    """A lag that leaves no row of ``dataset`` late: its disorder plus its longest lateness (62 s;
    none when the dataset has no late events).

    An event is at most that far behind the events before it in arrival
    order, so behind no watermark (each source's newest event time minus the
    lag, the least of the sources'), and a streamed run sees every row the
    reference does.
    """
    params = dataset.meta["params"]
    late = data.MAX_LATE_DELAY_MS if float(params.get("late_fraction", 1)) > 0 else 0
    return int(params["disorder_ms"]) + late


def lifetime_bids(streams: Streams, lag_ms: int) -> kp.Stream:
    """Each auction with its bids from its start until it expires: the join and filter of q4, q6, q9
    (:func:`benchmarks.nexmark.q9.lifetime_bids`) over ``streams``, each watermarked ``lag_ms`` behind."""
    return q9.lifetime_bids(_streams.timed(streams, lag_ms, EVENT_TIME))


def _pipeline(name: str) -> Callable[[Streams, int], kp.Stream]:
    def build(streams: Streams, lag_ms: int) -> kp.Stream:
        pipeline: kp.Stream = query(name).build(_streams.timed(streams, lag_ms, EVENT_TIME))
        return pipeline

    return build


#: Each query's builder pipeline (its module's ``build``) over the tables without a watermark, each
#: given one on ``date_time``, the lag behind.
PIPELINES: dict[str, Callable[[Streams, int], kp.Stream]] = {
    name: _pipeline(name) for name in KRISHIV_QUERIES
}


def krishiv_sql(query: NexmarkQuery, lag_ms: int) -> str | None:
    """``query`` in krishiv SQL, its watermark lag ``SET`` first; None when SQL cannot say it (q23)."""
    if not query.krishiv_sql:
        return None
    return f"SET watermark.lag = INTERVAL '{lag_ms}' MILLISECOND;\n{query.krishiv_sql}"


def sql_plan_agrees(query: NexmarkQuery, lag_ms: int = 62_000) -> bool | None:
    """Does ``query``'s krishiv SQL make its builder pipeline's plan? None: it has no SQL. No Spark.

    Both read placeholder streams of the three tables' schemas: the plan is
    what the query means, whatever the files.
    """
    from krishiv_py.sql import SqlCatalog, execute  # sqlglot: not in the PyFlink environment

    text = krishiv_sql(query, lag_ms)
    if text is None:
        return None
    streams = {t: placeholder(DDLS[t], t) for t in TABLES}
    catalog = SqlCatalog()
    for table, stream in streams.items():
        catalog.register(table, stream.plan)
    no_engine: Any = None  # a plan, never run: execute() keeps the engine for the stream it returns
    got = execute(catalog, text, no_engine)
    return got is not None and got.plan == PIPELINES[query.name](streams, lag_ms).plan


def krishiv_sources(session: kp.Session, dataset: Dataset, *, streaming: bool) -> dict[str, kp.Stream]:
    """The three tables' Parquet files, under their names for SQL; streamed one file per micro-batch."""
    if streaming:
        return {
            t: session.read_parquet(
                dataset.table_dir(t), DDLS[t], name=t, streaming=True, max_files_per_trigger=1
            )
            for t in TABLES
        }
    return {t: session.read_parquet(dataset.table_dir(t), DDLS[t], name=t) for t in TABLES}


def krishiv_pipeline(
    query: NexmarkQuery, session: kp.Session, dataset: Dataset, *, streaming: bool, sql: bool = False
) -> kp.Stream:
    """``query`` over ``dataset``'s files with the builder (or, ``sql=True``, its krishiv SQL)."""
    if query.name not in PIPELINES:
        raise ValueError(f"krishiv runs {', '.join(KRISHIV_QUERIES)}, not {query.name}")
    streams = krishiv_sources(session, dataset, streaming=streaming)
    lag_ms = watermark_lag_ms(dataset)
    if not sql:
        return PIPELINES[query.name](streams, lag_ms)
    text = krishiv_sql(query, lag_ms)
    stream = session.sql(text) if text is not None else None
    if stream is None:
        raise ValueError(f"{query.name} has no krishiv SQL: one join per query")
    return stream


def current_rows(table: pa.Table, columns: Sequence[str]) -> list[Row]:
    """The rows a result leaves: with a ``kind`` column, each ``retract`` withdraws an equal ``emit``.

    Taken as multisets, so the order of a micro-batch's changes does not
    matter; a retraction of a row never emitted is an error.

    Examples
    --------
    >>> changes = pa.table({"k": ["a", "a", "a"], "v": [1, 1, 2], "kind": ["emit", "retract", "emit"]})
    >>> current_rows(changes, ("k", "v"))
    [('a', 2)]
    """
    rows = arrow_rows(table.select(list(columns)))
    if RESULT_KIND not in table.column_names:
        return rows
    kinds = [str(k) for k in table.column(RESULT_KIND).to_pylist()]
    emitted = Counter(r for r, k in zip(rows, kinds, strict=True) if k == "emit")
    retracted = Counter(r for r, k in zip(rows, kinds, strict=True) if k == "retract")
    if unknown := set(kinds) - {"emit", "retract"}:
        raise ValueError(f"a kind other than emit and retract: {sorted(unknown)}")
    if extra := retracted - emitted:
        raise ValueError(f"retractions of rows never emitted: {list(extra)[:3]}")
    return list((emitted - retracted).elements())


@dataclass(frozen=True)
class KrishivResult:
    rows: list[Row]
    #: The rows the job wrote (emits and retractions).
    changes: int
    #: From ``start()`` (or ``collect()``) to the last row, Spark's query start included.
    seconds: float
    #: A streamed run's watermark at its end (None: bounded).
    watermark_ms: int | None = None


def run_krishiv(
    query: NexmarkQuery, session: kp.Session, dataset: Dataset, *, streaming: bool, sql: bool = False
) -> KrishivResult:
    """Run ``query`` to the end of ``dataset``: bounded, ``collect()``; streamed, every file, then stop."""
    pipeline = krishiv_pipeline(query, session, dataset, streaming=streaming, sql=sql)
    start = time.perf_counter()
    watermark: int | None = None
    if streaming:
        job = pipeline.start()
        try:
            job.process_all_available()
            table = job.results()
            watermark = job.watermark_ms
        finally:
            job.stop()
    else:
        table = pipeline.collect()
    seconds = time.perf_counter() - start
    return KrishivResult(current_rows(table, query.column_names), table.num_rows, seconds, watermark)


@dataclass(frozen=True)
class KrishivCheck:
    """krishiv's rows, bounded and streamed, next to the DuckDB reference."""

    reference: list[Row]
    bounded: KrishivResult
    streaming: KrishivResult
    #: The reference's rows the streamed run has (:meth:`NexmarkQuery.fired`: of the windows closed).
    streamed_reference: list[Row]

    @property
    def agree(self) -> bool:
        return rows_agree(self.reference, self.bounded.rows) and rows_agree(
            self.streamed_reference, self.streaming.rows
        )


def krishiv_rows(
    query: str | NexmarkQuery, dataset: Dataset, session: kp.Session, *, sql: bool = False
) -> KrishivCheck:
    """Run ``query`` in krishiv bounded and streamed on ``dataset``; compare with :func:`duckdb_rows`
    (the rows of keys whose order ties in time by count alone, :attr:`NexmarkQuery.ties_sql`)."""
    q = QUERIES[query] if isinstance(query, str) else query
    untie = untied(q, dataset)
    reference = duckdb_rows(q, dataset)
    streamed = run_krishiv(q, session, dataset, streaming=True, sql=sql)
    closed = reference
    if q.fired_sql and streamed.watermark_ms is not None:
        closed = duckdb_rows(q.fired(streamed.watermark_ms), dataset)
    bounded = run_krishiv(q, session, dataset, streaming=False, sql=sql)
    return KrishivCheck(
        reference=untie(reference),
        bounded=replace(bounded, rows=untie(bounded.rows)),
        streaming=replace(streamed, rows=untie(streamed.rows)),
        streamed_reference=untie(closed),
    )


def untied(query: NexmarkQuery, dataset: Dataset) -> Callable[[list[Row]], list[Row]]:
    """What makes rows comparable where krishiv's order of ties in time (arrival) is not the
    reference's: the rows of a tied key with their other values left out (None: nothing to do)."""
    if not query.ties_sql:
        return list
    tied = {row[0] for row in duckdb_rows(replace(query, sql=query.ties_sql), dataset)}

    def untie(rows: list[Row]) -> list[Row]:
        return [(r[0], *(None for _ in r[1:])) if r[0] in tied else r for r in rows]

    return untie


# --- command line ------------------------------------------------------------------------


def _dataset(args: argparse.Namespace) -> Dataset:
    if args.dataset:
        root = Path(args.dataset)
        return Dataset(root=root, meta=json.loads((root / "meta.json").read_text()))
    return data.nexmark(NexmarkSpec(events=args.events))


def _yes(agree: bool) -> str:
    return "yes" if agree else "no"


def _print_krishiv(query: NexmarkQuery, dataset: Dataset, reference: list[Row], events: int) -> None:
    """Run ``query`` in krishiv, streamed then bounded, and print each next to the reference (a
    streamed run's: the rows of the windows its watermark closed, :meth:`NexmarkQuery.fired`)."""
    agrees = sql_plan_agrees(query, watermark_lag_ms(dataset))
    if agrees is not None:
        print(f"krishiv SQL: {'the builder plan' if agrees else 'a plan other than the builder one'}")
    with kp.Session.embedded(progress=False) as session:
        for streaming in (True, False):
            r = run_krishiv(query, session, dataset, streaming=streaming)
            how = "krishiv streaming" if streaming else "krishiv bounded  "
            print(f"{how}: {len(r.rows):,} rows ({r.changes:,} changes) in {r.seconds:.2f} s", end="")
            per_core = events / r.seconds / (os.cpu_count() or 1)
            expected = reference
            if streaming and query.fired_sql and r.watermark_ms is not None:
                expected = duckdb_rows(query.fired(r.watermark_ms), dataset)
                print(f" ({len(expected):,} rows of the closed windows)", end="")
            untie = untied(query, dataset)
            agree = rows_agree(untie(expected), untie(r.rows))
            print(f" ({per_core:,.0f} events/s per core); agrees: {_yes(agree)}")


def _print_flink(
    query: NexmarkQuery, dataset: Dataset, reference: list[Row], args: argparse.Namespace
) -> None:
    try:
        run = run_flink(query, dataset, flink_python=args.flink_python, parallelism=args.parallelism)
    except FlinkError as exc:
        print(f"pyflink: cannot run it: {exc}")
        return
    r = run.result
    print(f"pyflink: {len(r.rows):,} rows ({r.changes:,} changes) in {r.job_s:.2f} s", end="")
    print(
        f" (process {run.process_s:.1f} s, JVM start included); agrees: {_yes(rows_agree(reference, r.rows))}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.nexmark_compose",
        description="Nexmark q4, q6, q7, q9, q23: DuckDB reference vs PyFlink (and krishiv)",
    )
    p.add_argument("--query", choices=sorted(QUERIES), required=True)
    p.add_argument("--events", type=int, default=20_000, help="size of the generated Nexmark dataset")
    p.add_argument("--dataset", help="an existing Nexmark dataset directory (instead of --events)")
    p.add_argument(
        "--krishiv", action="store_true", help="also run krishiv (q4, q6, q7, q9, q23), streamed and bounded"
    )
    p.add_argument("--no-flink", action="store_true", help="leave PyFlink out")
    p.add_argument("--flink-python", help="the interpreter of a PyFlink environment")
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    p.add_argument("--worker", help=argparse.SUPPRESS)  # run Flink here, write the rows to this file
    args = p.parse_args(argv)
    dataset, query = _dataset(args), QUERIES[args.query]
    if args.worker:
        _worker(query, dataset, args.parallelism, Path(args.worker))
        return 0
    events = sum(dataset.rows(t) for t in TABLES)
    print(f"{query.name} ({query.title}) on {dataset.root.name}: {events:,} events")
    start = time.perf_counter()
    reference = duckdb_rows(query, dataset)
    print(f"duckdb:  {len(reference):,} rows in {time.perf_counter() - start:.2f} s (the reference)")
    if args.krishiv and query.name in PIPELINES:
        _print_krishiv(query, dataset, reference, events)
    elif args.krishiv:
        print(f"krishiv: not run, it runs {', '.join(KRISHIV_QUERIES)}")
    if not args.no_flink:
        _print_flink(query, dataset, reference, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
