"""The running job's automatic lag (:mod:`krishiv_py.stateful.auto_lag`) against the model's."""

from __future__ import annotations

import re

import numpy as np
import pytest

import krishiv_py as kp
from krishiv_py.model.auto_lag import AutoLagTracker
from krishiv_py.stateful.auto_lag import AutoState, advance, lag_ms, value_counts


@pytest.mark.parametrize("seed", range(12))
def test_the_running_lag_and_watermark_follow_the_model_step_for_step(seed: int) -> None:
    """Per micro-batch of random disorder (a heavy tail, batches of 0-400 rows, repeated times),
    the lag and the watermark from (value, count) pairs equal the model's from each row."""
    rng = np.random.default_rng(seed)
    spec = kp.AutoLag(
        quantile=float(rng.choice([0.5, 0.9, 0.95, 0.99])),
        window_rows=int(rng.integers(1, 600)),
        warmup_rows=int(rng.integers(0, 300)),
        min_lag_ms=int(rng.integers(0, 30)),
        max_lag_ms=int(rng.integers(5_000, 50_000)),
    )
    model = AutoLagTracker(spec)
    model_w: int | None = None
    state = AutoState()
    now = 1_000_000
    for _ in range(40):
        n = int(rng.integers(0, 400))
        now += int(rng.integers(0, 2_000))
        behind = rng.integers(0, 300, n) + (rng.random(n) < 0.05) * rng.integers(0, 20_000, n)
        times = (now - behind - behind % 7).astype(np.int64)  # repeated values
        ran_with = model.lag_ms()
        if n:
            mark = int(times.max()) - ran_with
            model_w = mark if model_w is None else max(model_w, mark)
        model.step(times.tolist())
        values, counts = value_counts(times)
        order = rng.permutation(len(values))  # the buckets' reports arrive in any order
        state = advance(state, spec, values[order], counts[order])
        assert state.rows == model.rows and state.highest_ms == model.highest_ms
        assert lag_ms(state, spec) == model.lag_ms()
        assert state.watermark_ms == model_w
        assert AutoState.from_bytes(state.to_bytes()).to_bytes() == state.to_bytes()
    assert state.lag_ms == model.lag_ms()


def test_a_micro_batch_without_rows_changes_nothing() -> None:
    spec = kp.AutoLag(window_rows=10, warmup_rows=1, min_lag_ms=0)
    state = advance(AutoState(), spec, np.array([5_000, 4_000]), np.array([3, 1]))
    assert advance(state, spec, np.array([], np.int64), np.array([], np.int64)) is state
    assert advance(state, spec, np.array([9_000]), np.array([0])) is state
    assert state.lag_ms == 1_000 and state.rows == 4


def test_watermark_auto_takes_autolags_settings_and_names_a_wrong_one() -> None:
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.planner.spark.choose import choose, force
    from krishiv_py.types import to_schema

    source = n.MemorySource(name="clicks", schema=to_schema("k string, ts bigint"), path="/nowhere")
    stream = Stream(None, source)
    mark = stream.watermark("ts", "auto", quantile=0.9, max_lag_ms=60_000).plan
    assert isinstance(mark, n.Watermark) and mark.auto == kp.AutoLag(quantile=0.9, max_lag_ms=60_000)
    assert mark.lag_ms == 60_000  # the lag until warmed up
    assert stream.watermark("ts", kp.AutoLag(quantile=0.9, max_lag_ms=60_000)).plan == mark
    assert "lag=AutoLag(quantile=0.9" in n.render_plan(mark)
    for bad, words in (
        ({"lag_ms": 5_000, "quantile": 0.9}, "takes quantile only with lag_ms='auto'"),
        ({"lag_ms": "soon"}, "or 'auto', got 'soon'"),
        ({"lag_ms": kp.AutoLag(), "quantile": 0.5}, "an AutoLag or its settings, not both"),
        ({"lag_ms": "auto", "warmup_rows": -1}, "warmup_rows is a whole number of rows >= 0"),
    ):
        with pytest.raises(kp.PlanError, match=re.escape(words)):
            stream.watermark("ts", **bad)
    windowed = stream.watermark("ts", "auto").key_by("k").tumbling_window(1_000).agg(kp.count(kp.col("*")))
    lowering, why = choose(windowed.plan)
    assert lowering == "stateful" and "an automatic watermark lag" in why
    with pytest.raises(kp.PlanError, match="native lowering, which cannot run this plan exactly"):
        force(windowed.plan, "native", how="lowering='native'")
