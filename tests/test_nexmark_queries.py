"""Nexmark's queries in ``benchmarks/nexmark/``: SQL and builder make one plan; each equals DuckDB.

Without Spark: each query's ``SQL`` gives the logical plan of its
``build()`` over the same three streams. On Spark: each query, on a small
dataset of the benchmark's generator, gives DuckDB's rows
(:mod:`benchmarks.nexmark.check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

import krishiv_py as kp
from benchmarks import data
from benchmarks.nexmark import NAMES, query
from benchmarks.nexmark._streams import LAG_MS
from benchmarks.nexmark.check import SIDE_INPUT_DDL, TABLES, run, streams_of
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

DDL = {"bid": data.BID_DDL, "auction": data.AUCTION_DDL, "person": data.PERSON_DDL}


@dataclass(frozen=True)
class PlanStreams:
    bid: Stream
    auction: Stream
    person: Stream
    side_input: Stream


def _plans() -> tuple[PlanStreams, SqlCatalog]:
    streams = {
        t: Stream(cast(Any, None), n.MemorySource(name=t, schema=to_schema(DDL[t]), path=f"/{t}")).watermark(
            "date_time", LAG_MS
        )
        for t in TABLES
    }
    catalog = SqlCatalog()
    for name, stream in streams.items():
        catalog.register(name, stream.plan)
    side = n.FileSource(name="side_input", schema=to_schema(SIDE_INPUT_DDL), path="/side", format="parquet")
    return PlanStreams(**streams, side_input=Stream(cast(Any, None), side)), catalog


@pytest.mark.parametrize("name", NAMES)
def test_the_querys_sql_is_its_builder_pipeline(name: str) -> None:
    streams, catalog = _plans()
    module = query(name)
    catalog.register("side_input", streams.side_input.plan)
    out = execute(catalog, module.SQL, cast(Any, None))
    assert out is not None
    built = module.build(streams).plan
    assert out.plan == built, f"\nSQL:\n{n.render_plan(out.plan)}\nbuilder:\n{n.render_plan(built)}"


@pytest.mark.spark
def test_every_query_gives_duckdbs_rows(session: kp.Session, tmp_path: Path) -> None:
    dataset = data.nexmark(data.NexmarkSpec(events=20_000, files=2), cache=tmp_path)
    streams = streams_of(session, dataset)
    failed = []
    for name in NAMES:
        outcome = run(query(name), streams, dataset)
        assert outcome.rows > 0 or name == "q14", name  # (q14's prices are rare on a small input)
        if not outcome.equal:
            failed.append((name, outcome.only_krishiv, outcome.only_duckdb))
    assert not failed, failed
