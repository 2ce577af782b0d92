"""An aggregation per key without a window (SPEC 3.13): one updating row per key.

The oracle is the composition model (``krishiv_py.model.compose``:
``AggOf`` over a source), which recomputes each key's aggregates from all
its rows after every step and emits the difference. The kernel (no Spark)
and a streaming job on Spark must give the same changelog, step by step.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.api.stream import placeholder
from krishiv_py.model.compose import AggOf, ComposedModel, Source
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.kinds import kernel_aggs
from krishiv_py.stateful.keyed_agg import KeyedAggKernel

SCHEMA = "k string, t bigint, v bigint"
FUNCS: tuple[tuple[str, str, str | None], ...] = (
    ("n", "count", None),
    ("total", "sum", "v"),
    ("low", "min", "v"),
    ("high", "max", "v"),
    ("mean", "avg", "v"),
    ("kinds", "count_distinct", "v"),
)


def _pipeline(stream: kp.Stream) -> kp.Stream:
    calls = {
        "count": lambda c: kp.count(kp.col("*")),
        "sum": lambda c: kp.sum(kp.col(c)),
        "min": lambda c: kp.min(kp.col(c)),
        "max": lambda c: kp.max(kp.col(c)),
        "avg": lambda c: kp.avg(kp.col(c)),
        "count_distinct": lambda c: kp.count_distinct(kp.col(c)),
    }
    aggs = [calls[func](column).alias(name) for name, func, column in FUNCS]
    return stream.watermark("t", 0).key_by("k").agg(*aggs)


def _model() -> ComposedModel:
    aggs = [ModelAgg(name=name, func=func, column=column) for name, func, column in FUNCS]  # type: ignore[arg-type]
    return ComposedModel(AggOf(Source("s", "t", ("k", "t", "v")), keys=("k",), aggregates=aggs))


def _rows(results: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    def value(v: Any) -> Any:
        return round(v, 9) if isinstance(v, float) else v

    return Counter(tuple(value(r[c]) for c in ("k", *(f[0] for f in FUNCS), "kind")) for r in results)


ROW = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", "c", None]),
        "t": st.integers(0, 50),
        "v": st.one_of(st.none(), st.integers(-5, 5)),
    }
)


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.lists(ROW, max_size=6), min_size=1, max_size=6))
def test_the_kernel_gives_the_models_changelog_step_by_step(batches: list[list[dict[str, Any]]]) -> None:
    plan = _pipeline(placeholder(SCHEMA, "s")).plan
    kernel = KeyedAggKernel(keys=("k",), aggs=kernel_aggs(plan))
    model = _model()
    state: pa.Table | None = None
    seq = 0
    for rows in batches:
        before = model.watermark_ms
        expected = model.send(rows, source="s")
        batch = pa.table(
            {
                "k": pa.array([r["k"] for r in rows], pa.string()),
                "v": pa.array([r["v"] for r in rows], pa.int64()),
                BATCH_TS: pa.array([r["t"] * 1000 for r in rows], pa.int64()),
                SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
            }
        )
        seq += len(rows)
        state, out = kernel.step(state, batch, before, 0)
        assert _rows(out.results.to_pylist()) == _rows(expected)
        kinds = out.results.column("kind").to_pylist()
        keys = out.results.column("k").to_pylist()
        for i, kind in enumerate(kinds):  # each key's retraction comes right before its emit
            if kind == "retract":
                assert kinds[i + 1] == "emit" and keys[i + 1] == keys[i]


def test_the_planner_says_the_state_grows_with_the_keys() -> None:
    recipe = _pipeline(placeholder(SCHEMA, "s")).lower()
    text = recipe.reason
    assert recipe.lowering == "stateful"
    assert "aggregation per key without a window" in text and "grows with the keys" in text
    assert _pipeline(placeholder(SCHEMA, "s")).columns == ("k", *(f[0] for f in FUNCS), "kind")


def test_agg_without_a_window_needs_keys_and_a_watermark() -> None:
    with pytest.raises(kp.PlanError, match="watermark"):
        placeholder(SCHEMA, "s").key_by("k").agg(kp.count(kp.col("*")))


STEPS: list[list[dict[str, Any]]] = [
    [{"k": "a", "t": 1, "v": 3}, {"k": "b", "t": 2, "v": 4}, {"k": "a", "t": 3, "v": None}],
    [{"k": "a", "t": 10, "v": 7}],
    [{"k": "b", "t": 1, "v": -2}, {"k": None, "t": 12, "v": 1}],  # behind the watermark: still counted
    [{"k": "c", "t": 20, "v": 5}, {"k": "a", "t": 21, "v": 7}],
]


@pytest.mark.spark
def test_a_streaming_aggregation_per_key_retracts_and_emits_each_change(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    job = _pipeline(stream).start()
    model = _model()
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
    assert job.metrics().mildly_late_events == 1


@pytest.mark.spark
def test_a_table_sink_holds_each_keys_current_row(session: kp.Session, tmp_path: Any) -> None:
    """An upsert table keyed by the keys: the retraction and the new emit of a key are one replace."""
    import duckdb

    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    path = str(tmp_path / "totals.duckdb")
    job = _pipeline(stream).start(kp.DuckDBSink(path, "totals"))
    model = _model()
    try:
        for rows in STEPS:
            model.send(rows, source="s")
            sender.send(rows)
            job.process_all_available()
            current: dict[Any, tuple[Any, ...]] = {}
            for r in model.results:
                if r["kind"] == "emit":
                    current[r["k"]] = (r["k"], r["n"], r["total"])
                elif current.get(r["k"]) == (r["k"], r["n"], r["total"]):
                    del current[r["k"]]
            with duckdb.connect(path, read_only=True) as con:
                got = con.execute("SELECT k, n, total FROM totals").fetchall()
            assert sorted(got, key=repr) == sorted(current.values(), key=repr)
    finally:
        job.stop()


# --- a state TTL --------------------------------------------------------------------------------


def _counts(ttl_ms: int) -> KeyedAggKernel:
    plan = placeholder(SCHEMA, "s").watermark("t", 0).key_by("k").agg(kp.count(kp.col("*"))).plan
    assert isinstance(plan, n.KeyedAggregate)
    count = kernel_aggs(plan)
    return KeyedAggKernel(keys=("k",), aggs=count, ttl_ms=ttl_ms)


def _batch(rows: list[tuple[str, int]], seq: int = 0) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.string()),
            BATCH_TS: pa.array([t * 1_000 for _, t in rows], pa.int64()),
            SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
        }
    )


def test_a_key_quiet_for_the_ttl_leaves_the_state_and_its_last_row_stands() -> None:
    kernel = _counts(10)
    state, _ = kernel.step(None, _batch([("a", 1), ("b", 5), ("b", 6)]), None, 0)
    assert kernel.next_due(state)[0] == 11  # a's newest row (1 ms) plus the TTL
    state, out = kernel.step(state, _batch([], 3), 11, 0)
    assert out.expired == 1 and out.results.num_rows == 0  # silently, as Flink's state TTL
    assert [r["k"] for r in state.to_pylist()] == ["b"] and kernel.next_due(state)[0] == 16
    state, out = kernel.step(state, _batch([("a", 30), ("b", 30)], 3), 12, 0)
    got = {tuple(r.values()) for r in out.results.to_pylist()}  # (key, count, kind)
    assert got == {("a", 1, "emit"), ("b", 2, "retract"), ("b", 3, "emit")}  # a starts again


@pytest.mark.spark
def test_a_ttl_on_agg_reaches_the_kernel_and_explain(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    keyed = stream.watermark("t", 0).key_by("k")
    counts = keyed.with_state_ttl(kp.StateTtlConfig(ttl_ms=60_000)).agg(kp.count(kp.col("*")))
    assert "state TTL 60000 ms of event time" in counts.explain()
    with pytest.raises(kp.PlanError, match="event-time state TTL"):
        keyed.with_state_ttl(kp.StateTtlConfig(ttl_ms=5, time="processing")).agg(kp.count(kp.col("*")))
    with pytest.raises(kp.PlanError, match="takes its own"):
        keyed.with_state_ttl(kp.StateTtlConfig(ttl_ms=5)).interval_join(keyed, between=(0, 1))
    window = keyed.with_state_ttl(kp.StateTtlConfig(ttl_ms=7)).tumbling_window(10)
    assert window.emission.state_ttl == kp.StateTtlConfig(ttl_ms=7)


@pytest.mark.spark
def test_a_streaming_aggregation_with_a_ttl_expires_quiet_keys(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    keyed = stream.watermark("t", 0).key_by("k").with_state_ttl(kp.StateTtlConfig(ttl_ms=10))
    job = keyed.agg(kp.count(kp.col("*")).alias("n")).start()
    try:
        sender.send([{"k": "a", "t": 1, "v": 1}, {"k": "b", "t": 2, "v": 1}])
        job.process_all_available()
        sender.send([{"k": "b", "t": 30, "v": 1}])  # the watermark passes a's and b's first rows + 10 ms
        job.process_all_available()
        sender.advance_watermark(35)
        job.process_all_available()
        sender.send([{"k": "a", "t": 40, "v": 1}])  # a starts again
        job.process_all_available()
        rows = [(r["k"], r["n"], r["kind"]) for r in job.results().to_pylist()]
        m = job.metrics()
    finally:
        job.stop()
    assert rows == [
        ("a", 1, "emit"),
        ("b", 1, "emit"),
        ("b", 1, "retract"),
        ("b", 2, "emit"),
        ("a", 1, "emit"),
    ]
    assert (m.state_evictions or 0) >= 1
