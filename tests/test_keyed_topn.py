"""Top-N per key over every row (SPEC 3.13): ``top_n(n, by=..., per="key", keys=...)``.

The oracle is the composition model (``TopNOf`` over a source), which ranks
each key's rows from scratch after every step and emits the difference.
The kernel (no Spark) and a streaming job on Spark must give the same
changelog step by step; ``n=1`` by the event time deduplicates.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, Literal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.model.compose import ComposedModel, Source, TopNOf
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.stateful.keyed_topn import KeyedTopNKernel

SCHEMA = "k string, t bigint, v bigint"
Ties = Literal["all", "first"]


def _model(n: int, ties: Ties, ascending: bool) -> ComposedModel:
    source = Source("s", "t", ("k", "t", "v"))
    return ComposedModel(TopNOf(source, n=n, by=("v",), keys=("k",), ties=ties, ascending=ascending))


def _rows(results: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((r["k"], r["t"], r["v"], r["kind"]) for r in results)


ROW = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", None]),
        "t": st.integers(0, 40),
        "v": st.one_of(st.none(), st.integers(0, 4)),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.lists(ROW, max_size=6), min_size=1, max_size=6),
    n=st.integers(1, 3),
    ascending=st.booleans(),
)
def test_the_kernel_gives_the_models_changelog_step_by_step(
    batches: list[list[dict[str, Any]]], n: int, ascending: bool
) -> None:
    kernel = KeyedTopNKernel(keys=("k",), n=n, by=("v",), columns=("k", "t", "v"), ascending=ascending)
    model = _model(n, "all", ascending)
    state: pa.Table | None = None
    seq = 0
    for rows in batches:
        expected = model.send(rows, source="s")
        batch = pa.table(
            {
                "k": pa.array([r["k"] for r in rows], pa.string()),
                "t": pa.array([r["t"] for r in rows], pa.int64()),
                "v": pa.array([r["v"] for r in rows], pa.int64()),
                BATCH_TS: pa.array([r["t"] * 1000 for r in rows], pa.int64()),
                SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
            }
        )
        seq += len(rows)
        state, out = kernel.step(state, batch, None, 0)
        assert _rows(out.results.to_pylist()) == _rows(expected)


def test_ties_first_keeps_exactly_n_breaking_ties_by_the_other_columns() -> None:
    kernel = KeyedTopNKernel(keys=("k",), n=2, by=("v",), columns=("k", "t", "v"), ties="first")
    batch = pa.table(
        {"k": ["a"] * 4, "t": [4, 2, 3, 1], "v": [7, 7, 7, 1], BATCH_TS: [0] * 4, SEQ: [0, 1, 2, 3]}
    )
    _, out = kernel.step(None, batch, None, 0)
    assert sorted((r["t"], r["v"]) for r in out.results.to_pylist()) == [(2, 7), (3, 7)]


def test_window_top_n_forgets_a_window_once_the_watermark_passes_its_end_and_kept_time() -> None:
    """``expires=("window_end", 5)``: window [0, 10)'s rows go at watermark 15, [10, 20)'s stay; a
    retraction of a forgotten row finds nothing (counted), one of a kept row re-ranks its window."""
    kernel = KeyedTopNKernel(
        keys=("window_end",),
        n=1,
        by=("v",),
        columns=("window_end", "v"),
        retracting=True,
        expires=("window_end", 5),
    )

    def batch(rows: list[tuple[int, int, str]], seq: int) -> pa.Table:
        return pa.table(
            {
                "window_end": pa.array([r[0] * 1000 for r in rows], pa.int64()),
                "v": pa.array([r[1] for r in rows], pa.int64()),
                "kind": pa.array([r[2] for r in rows], pa.string()),
                BATCH_TS: pa.array([(r[0] - 1) * 1000 for r in rows], pa.int64()),
                SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
            }
        )

    rows = [(10, 1, "emit"), (10, 2, "emit"), (20, 3, "emit"), (20, 4, "emit")]
    state, out = kernel.step(None, batch(rows, 0), 14, 0)
    assert sorted(state.column("v").to_numpy().tolist()) == [1, 2, 3, 4]  # W=14 < 10 + 5: all kept
    state, out = kernel.step(state, batch([], 4), 15, 0)
    assert sorted(state.column("v").to_numpy().tolist()) == [3, 4]
    state, out = kernel.step(state, batch([(10, 2, "retract")], 4), 15, 0)
    assert out.results.num_rows == 0 and out.arithmetic_errors == 1
    state, out = kernel.step(state, batch([(20, 4, "retract")], 5), 15, 0)
    assert out.results.to_pylist() == [
        {"window_end": 20_000, "v": 4, "kind": "retract"},
        {"window_end": 20_000, "v": 3, "kind": "emit"},
    ]
    assert "kept until the watermark reaches window_end + 5 ms" in kernel.describe()


def test_top_n_per_key_needs_event_time_and_ranks_known_columns(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    with pytest.raises(kp.PlanError, match="watermark"):
        stream.top_n(1, by="v", per="key", keys=("k",))
    with pytest.raises(kp.PlanError, match="nope"):
        stream.watermark("t", 0).top_n(1, by="nope", per="key", keys=("k",))
    deduped = stream.watermark("t", 0).top_n(1, by="t", per="key", keys=("k",))
    assert deduped.columns == ("k", "t", "v", "kind")
    assert "top_n per key" in deduped.explain()


STEPS: list[list[dict[str, Any]]] = [
    [{"k": "a", "t": 1, "v": 3}, {"k": "b", "t": 2, "v": 4}, {"k": "a", "t": 3, "v": 5}],
    [{"k": "a", "t": 10, "v": 1}],
    [{"k": "b", "t": 1, "v": 9}, {"k": "a", "t": 12, "v": 8}],  # b's row behind the watermark counts
]


@pytest.mark.spark
def test_deduplication_keeps_the_latest_row_per_key_on_spark(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    job = stream.watermark("t", 0).top_n(1, by="t", per="key", keys=("k",)).start()
    source = Source("s", "t", ("k", "t", "v"))
    model = ComposedModel(TopNOf(source, n=1, by=("t",), keys=("k",)))
    seen = 0
    try:
        for rows in STEPS:
            expected = model.send(rows, source="s")
            sender.send(rows)
            job.process_all_available()
            got = job.results().to_pylist()
            assert _rows(got[seen:]) == _rows(expected)
            seen = len(got)
    finally:
        job.stop()
    live = Counter(_rows(job.results().to_pylist()))
    net = {row[:3] for row in live if row[3] == "emit"} - {row[:3] for row in live if row[3] == "retract"}
    assert net == {("a", 12, 8), ("b", 2, 4)}
