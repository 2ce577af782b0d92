"""A Nexmark query on a dataset, krishiv's way and DuckDB's: the rows of both, and whether they agree.

krishiv runs the query's builder pipeline over the dataset's Parquet files
as bounded input (the lowering ``explain()`` chooses for it: a batch job);
DuckDB runs ``DUCKDB``. Rows compare as multisets, a timestamp as its epoch
microseconds, a float exactly (both compute in IEEE doubles), ``kind``
dropped (every row of a bounded run is an emit), and so are the columns a
module names ``NOT_REPRODUCIBLE`` (q12's processing-time windows).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import krishiv_py as kp
from benchmarks.data import Dataset
from benchmarks.nexmark._streams import LAG_MS
from krishiv_py.api.stream import Stream

TABLES = ("bid", "auction", "person")


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
    ``'value-<i>'``, in one Parquet file."""
    path = dataset.root / "side_input"
    if not (path / "part-0.parquet").exists():
        path.mkdir(parents=True, exist_ok=True)
        keys = pa.array(range(10_000), pa.int64())
        values = pa.array([f"value-{i}" for i in range(10_000)], pa.string())
        pq.write_table(pa.table({"key": keys, "value": values}), path / "part-0.parquet")
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


def run(query: ModuleType, streams: DatasetStreams, dataset: Dataset) -> Outcome:
    pipeline = query.build(streams)
    left_out = {"kind", *getattr(query, "NOT_REPRODUCIBLE", ())}
    columns = [c for c in pipeline.columns if c not in left_out]
    start = time.perf_counter()
    got = normalized(pipeline.collect().to_pylist(), columns)
    krishiv_s = time.perf_counter() - start
    start = time.perf_counter()
    want = normalized(duckdb_rows(query, dataset), columns)
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


def duckdb_rows(query: ModuleType, dataset: Dataset) -> list[dict[str, Any]]:
    tables = {t: f"read_parquet('{dataset.table_dir(t)}/*.parquet')" for t in TABLES}
    tables["side_input"] = f"read_parquet('{side_input(dataset)}/*.parquet')"
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        table = con.sql(query.DUCKDB.format(**tables)).to_arrow_table()
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def normalized(rows: list[dict[str, Any]], columns: list[str]) -> Counter[tuple[Any, ...]]:
    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            return int(value.timestamp() * 1_000_000)
        return value

    return Counter(tuple(plain(r[c]) for c in columns) for r in rows)
