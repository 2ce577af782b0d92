"""A Nexmark query on a dataset, krishiv's way and DuckDB's: the rows of both, and whether they agree.

krishiv runs the query's builder pipeline over the dataset's Parquet files
as bounded input (the lowering ``explain()`` chooses for it: a batch job),
each table with the columns in the module's ``READ_ORDER`` where it has
one; DuckDB runs ``DUCKDB``. Rows compare as multisets, a timestamp as its
epoch microseconds, a float exactly (both compute in IEEE doubles). An
updating result's rows are those its changes leave (each ``retract``
withdraws an equal ``emit``), ``kind`` dropped, and so are the columns a
module names ``NOT_REPRODUCIBLE`` (q12's processing-time windows); the rows
of the keys a module's ``TIES_DUCKDB`` names compare by count alone (q6).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from types import ModuleType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import krishiv_py as kp
from benchmarks.data import Dataset
from benchmarks.nexmark._streams import LAG_MS
from krishiv_py.api.stream import Stream
from krishiv_py.names import KAFKA_COLUMNS, RESULT_KIND

TABLES = ("bid", "auction", "person")
#: Rows as compared: each a tuple of the compared columns' values, with its count.
Rows = Counter[tuple[Any, ...]]


#: q13's side table: each key of 0-9,999 with a value.
SIDE_INPUT_DDL = "key bigint, value string"


@dataclass(frozen=True)
class DatasetStreams:
    """The dataset's three tables as bounded streams, each with its watermark on ``date_time``, and
    q13's side table."""

    bid: Stream
    auction: Stream
    person: Stream
    side_input: Stream


def side_input(dataset: Dataset) -> str:
    """The directory of q13's side table next to the dataset (written once): key ``i``, value
    ``'value-<i>'``, in one Parquet file (and in ``side_input_csv/``, as ``key,value`` lines, for
    Flink)."""
    path, csv = dataset.root / "side_input", dataset.root / "side_input_csv"
    if not (csv / "part-0.csv").exists():
        for directory in (path, csv):
            directory.mkdir(parents=True, exist_ok=True)
        keys = pa.array(range(10_000), pa.int64())
        values = pa.array([f"value-{i}" for i in range(10_000)], pa.string())
        table = pa.table({"key": keys, "value": values})
        pacsv.write_csv(table, csv / "part-0.csv", write_options=pacsv.WriteOptions(include_header=False))
        pq.write_table(table, path / "part-0.parquet")
    return str(path)


def streams_of(session: kp.Session, dataset: Dataset) -> DatasetStreams:
    tag = re.sub(r"\W", "_", dataset.root.name)
    read = {
        t: session.read_parquet(dataset.table_dir(t), dataset.ddl(t), name=f"{t}_{tag}").watermark(
            "date_time", LAG_MS
        )
        for t in TABLES
    }
    side = session.read_parquet(side_input(dataset), SIDE_INPUT_DDL, name=f"side_input_{tag}")
    return DatasetStreams(**read, side_input=side)


@dataclass(frozen=True)
class Outcome:
    name: str
    rows: int
    krishiv_s: float
    duckdb_s: float
    equal: bool
    #: A few rows of each side that the other lacks (empty when equal).
    only_krishiv: list[tuple[Any, ...]]
    only_duckdb: list[tuple[Any, ...]]


def compared_columns(query: ModuleType, columns: list[str]) -> list[str]:
    """The result columns the check compares: all but ``kind``, the module's ``NOT_REPRODUCIBLE``
    and a Kafka record's own columns (``kafka_offset``, ...: the files have none)."""
    left_out = {"kind", *getattr(query, "NOT_REPRODUCIBLE", ()), *KAFKA_COLUMNS}
    return [c for c in columns if c not in left_out]


def reading(query: ModuleType, streams: DatasetStreams) -> DatasetStreams:
    """``streams`` with each table the module names in ``READ_ORDER`` in its columns' order there."""
    order: dict[str, tuple[str, ...]] = getattr(query, "READ_ORDER", {})
    return replace(streams, **{t: getattr(streams, t).select(*columns) for t, columns in order.items()})


def run(query: ModuleType, streams: DatasetStreams, dataset: Dataset) -> Outcome:
    pipeline = query.build(reading(query, streams))
    columns = compared_columns(query, list(pipeline.columns))
    start = time.perf_counter()
    table = pipeline.collect()  # (timed: the run and its rows in this process, as Arrow)
    krishiv_s = time.perf_counter() - start
    untie = untied(query, dataset)
    got = untie(current(table.to_pylist(), columns))
    start = time.perf_counter()
    want = untie(normalized(duckdb_rows(query, dataset), columns))
    duckdb_s = time.perf_counter() - start
    return Outcome(
        name=query.__name__.rsplit(".", 1)[1],
        rows=sum(want.values()),
        krishiv_s=krishiv_s,
        duckdb_s=duckdb_s,
        equal=got == want,
        only_krishiv=list((got - want).elements())[:5],
        only_duckdb=list((want - got).elements())[:5],
    )


def duckdb_rows(query: ModuleType, dataset: Dataset, statement: str = "DUCKDB") -> list[dict[str, Any]]:
    """The rows of the module's ``statement`` (``DUCKDB``, ``TIES_DUCKDB``) over ``dataset``'s files."""
    tables = {t: f"read_parquet('{dataset.table_dir(t)}/*.parquet')" for t in TABLES}
    tables["side_input"] = f"read_parquet('{side_input(dataset)}/*.parquet')"
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        table = con.sql(getattr(query, statement).format(**tables)).to_arrow_table()
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def current(rows: list[dict[str, Any]], columns: list[str]) -> Rows:
    """The rows a result leaves: with a ``kind`` column, each ``retract`` withdraws an equal ``emit`` (a
    retraction of a row never emitted stays, as a negative count, so the rows equal no reference)."""
    left = normalized([r for r in rows if r.get(RESULT_KIND) != "retract"], columns)
    left.subtract(normalized([r for r in rows if r.get(RESULT_KIND) == "retract"], columns))
    return +left if all(n >= 0 for n in left.values()) else left


def untied(query: ModuleType, dataset: Dataset) -> Callable[[Rows], Rows]:
    """What makes rows comparable where krishiv orders ties in time by arrival and the reference by a
    column: the rows whose first value the module's ``TIES_DUCKDB`` names, with their other values left
    out (nothing to do without one)."""
    if getattr(query, "TIES_DUCKDB", None) is None:
        return lambda rows: rows
    tied = {next(iter(r.values())) for r in duckdb_rows(query, dataset, "TIES_DUCKDB")}

    def untie(rows: Rows) -> Rows:
        out: Rows = Counter()
        for row, count in rows.items():
            out[(row[0], *(None for _ in row[1:])) if row[0] in tied else row] += count
        return out

    return untie


def normalized(rows: list[dict[str, Any]], columns: list[str]) -> Rows:
    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            return int(value.timestamp() * 1_000_000)
        return value

    return Counter(tuple(plain(r[c]) for c in columns) for r in rows)


@dataclass(frozen=True)
class FlinkOutcome:
    """PyFlink's run of Nexmark's Flink SQL for a query (:mod:`benchmarks.nexmark.flink`)."""

    name: str
    #: Seconds of the best timed run; None when Flink did not run it.
    seconds: float | None
    #: Whether its rows equal DuckDB's (on :data:`~benchmarks.nexmark.flink_sql.COMPARED`'s columns).
    equal: bool | None
    #: Why it did not run (skipped or failed), else "".
    note: str = ""


def run_flink(
    flink_python: str, dataset: Dataset, names: list[str], *, repeat: int = 1
) -> dict[str, dict[str, Any]]:
    """Run ``names`` in PyFlink (``flink_python``, a PyFlink environment's interpreter): each query's
    record (:mod:`benchmarks.nexmark.flink`) by name."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    side = Path(side_input(dataset)).with_name("side_input_csv")
    with tempfile.TemporaryDirectory(prefix="nexmark-flink-") as tmp:
        out = Path(tmp) / "rows.jsonl"
        args = [flink_python, "-m", "benchmarks.nexmark.flink", "--dataset", str(dataset.root)]
        args += ["--side-input", str(side), "--out", str(out), "--repeat", str(repeat)]
        for name in names:
            args += ["--query", name]
        env = {**os.environ, "PYTHONPATH": str(root)}
        subprocess.run(args, env=env, check=True, stdout=sys.stderr, stderr=subprocess.DEVNULL)
        return {r["query"]: r for r in map(json.loads, out.read_text().splitlines())}


def flink_outcome(query: ModuleType, record: dict[str, Any], dataset: Dataset) -> FlinkOutcome:
    """Flink's record for ``query`` compared with DuckDB's rows."""
    from benchmarks.nexmark.flink_sql import COMPARED

    name = query.__name__.rsplit(".", 1)[1]
    if "rows" not in record:
        return FlinkOutcome(name, None, None, record.get("skipped") or record.get("failed", ""))
    columns = list(COMPARED.get(name, compared_columns(query, record["columns"])))
    got: Rows = Counter()
    for row in record["rows"]:
        values = dict(zip(record["columns"], row, strict=True))
        got[tuple(values[c] for c in columns)] += 1
    want = normalized(duckdb_rows(query, dataset), columns)
    return FlinkOutcome(name, float(record["seconds"]), got == want)
