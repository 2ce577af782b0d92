"""Sliding windows from pane aggregates (bounded) and pane partials (streaming): the same
windows and values as the reference model."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.testing import AdvanceWatermark, Close, Send, Step, assert_lowerings_agree, assert_same_rows
from krishiv_py.testing.steps import run_reference_bounded

SCHEMA = "k string, t bigint, v bigint, x double"


def rows(seed: int, n: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(n):
        out.append(
            {
                "k": rng.choice(["a", "b", None]),
                "t": rng.choice([None, rng.randint(-50, 400)])
                if rng.random() < 0.05
                else rng.randint(-50, 400),
                "v": rng.choice([None, rng.randint(-100, 100), 2**62]),
                "x": rng.choice([None, rng.uniform(-5, 5), math.nan, 0.5]),
            }
        )
    return out


def every_aggregate(stream: kp.Stream) -> kp.Stream:
    windows = stream.watermark("t", 0).key_by("k").sliding_window(60, 20)
    return windows.agg(
        kp.count(kp.col("*")).alias("n"),
        kp.count(kp.col("x")).alias("nx"),
        kp.sum(kp.col("v")).alias("sv"),
        kp.sum(kp.col("x")).alias("sx"),
        kp.avg(kp.col("v")).alias("av"),
        kp.min(kp.col("x")).alias("lo"),
        kp.max(kp.col("x")).alias("hi"),
        kp.first(kp.col("v")).alias("first_v"),
        kp.last(kp.col("x")).alias("last_x"),
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_pane_aggregates_equal_the_reference_model(session: kp.Session, seed: int) -> None:
    data: list[dict[str, object]] = []
    seen: set[tuple[object, object]] = set()
    for r in rows(seed, 300):  # distinct event times per key keep first/last free of ties
        if (r["k"], r["t"]) not in seen:
            seen.add((r["k"], r["t"]))
            data.append(r)
    pipeline = every_aggregate(session.from_records(data, SCHEMA))
    text = pipeline.explain(show=False)
    assert "combined from 20 ms pane aggregates" in text and "sequence(" in text
    job = pipeline.start()
    expected = run_reference_bounded(SCHEMA, every_aggregate, data)
    assert_same_rows(job.results(), expected)

    def has_values(window: dict[str, object]) -> bool:
        start, end = window["window_start"], window["window_end"]
        assert isinstance(start, int) and isinstance(end, int)
        return any(
            d["v"] is not None and d["k"] == window["k"] and isinstance(d["t"], int) and start <= d["t"] < end
            for d in data
        )

    overflowed = sum(1 for r in expected if r["sv"] is None and has_values(r))
    assert overflowed > 0
    assert job.metrics().arithmetic_errors == overflowed


def test_count_distinct_keeps_spark_window_and_says_why(session: kp.Session) -> None:
    data = [{"k": "a", "t": t, "v": t % 3, "x": 1.0} for t in range(0, 100, 7)]
    windows = session.from_records(data, SCHEMA).watermark("t", 0).sliding_window(60, 20)
    distinct = windows.agg(kp.count_distinct(kp.col("v")).alias("d"))
    text = distinct.explain(show=False)
    assert "count_distinct does not combine from partial aggregates" in text and "sequence(" not in text
    expected = run_reference_bounded(
        SCHEMA,
        lambda s: s.watermark("t", 0).sliding_window(60, 20).agg(kp.count_distinct(kp.col("v")).alias("d")),
        data,
    )
    assert_same_rows(distinct.collect(), expected)


# --- streaming: pane partials per micro-batch (native lowering) ---------------------

STREAM_AGGS = (
    kp.count(kp.col("*")).alias("n"),
    kp.count(kp.col("*")).alias("rows"),  # a second row count (one Arrow count_all each)
    kp.count(kp.col("v")).alias("nv"),
    kp.sum(kp.col("v")).alias("sv"),
    kp.sum(kp.col("x")).alias("sx"),
    kp.avg(kp.col("v")).alias("av"),
    kp.min(kp.col("v")).alias("lo"),
    kp.max(kp.col("k")).alias("hi_k"),
)


def stream_panes(slide: int, copies: int, lag: int, keyed: bool) -> Callable[[kp.Stream], kp.Stream]:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag)
        if keyed:
            w = w.key_by("k")
        return w.sliding_window(slide * copies, slide).agg(*STREAM_AGGS)  # type: ignore[no-any-return]

    return build


stream_row = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", None]),
        "t": st.one_of(st.integers(min_value=-60, max_value=200), st.just(None)),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9), st.just(2**62)),
        "x": st.one_of(st.none(), st.sampled_from([0.5, -1.25, 2.0])),
    }
)
stream_steps = st.lists(
    st.one_of(
        st.lists(stream_row, max_size=8).map(Send),
        st.integers(min_value=-60, max_value=220).map(AdvanceWatermark),
    ),
    min_size=1,
    max_size=4,
).map(lambda s: [*s, Close()])


@settings(max_examples=4, deadline=None)
@given(
    slide=st.integers(1, 6),
    copies=st.integers(10, 14),
    lag=st.integers(0, 40),
    keyed=st.booleans(),
    scenario=stream_steps,
)
def test_streaming_pane_partials_agree_with_the_reference_model(
    session: kp.Session, slide: int, copies: int, lag: int, keyed: bool, scenario: list[Step]
) -> None:
    """Late rows meet windows that are partly closed: a pane row is dropped per window, as events are."""
    assert_lowerings_agree(session, SCHEMA, stream_panes(slide, copies, lag, keyed), scenario)


def test_streaming_explain_names_the_pane_step_and_when_it_is_not_used(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    panes = stream_panes(10, 60, 0, True)(stream)
    text = panes.explain(show=False)
    assert "native" in text and "10 ms pane partials" in text and "mapInArrow(<pane partials" in text
    few = stream.watermark("t", 0).key_by("k").sliding_window(60, 10).agg(kp.count(kp.col("*")))
    few_text = few.explain(show=False)
    assert "copies each event into its 6 windows" in few_text and "mapInArrow" not in few_text
    firsts = stream.watermark("t", 0).sliding_window(600, 10).agg(kp.first(kp.col("v")))
    text = firsts.explain(show=False)
    assert "first needs each event's arrival order" in text and "mapInArrow" not in text
    nan = stream.watermark("t", 0).sliding_window(600, 10).agg(kp.max(kp.col("x")))
    assert "floating-point" in nan.explain(show=False)
    filtered = stream.watermark("t", 0).filter(kp.col("v") > 0)
    between = filtered.sliding_window(600, 10).agg(kp.count(kp.col("*")))
    assert "a step between the watermark and the window" in between.explain(show=False)


def test_streaming_pane_sums_count_overflows_and_drop_late_rows_per_window(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = stream_panes(10, 10, 0, False)(stream).start()
    try:
        sender.send([{"k": "a", "t": t, "v": 2**62, "x": 1.0} for t in (5, 15, 25, 35)])
        # t=105 moves the watermark to 105. The late t=12 belongs to the windows starting
        # at -80 .. 10: all but [10, 110) have closed, so it joins that one only.
        sender.send([{"k": "a", "t": 105, "v": 1, "x": 1.0}])
        sender.send([{"k": "a", "t": 12, "v": 1, "x": 1.0}])
        sender.close()
        job.process_all_available()
        rows = job.results().to_pylist()
        got = {(_ms(r["window_start"]), _ms(r["window_end"])): r for r in rows}
        assert got[(10, 110)]["n"] == 5  # 15, 25, 35, 105 and the late 12
        assert got[(0, 100)]["n"] == 4  # closed before 12 arrived: 5, 15, 25, 35
        assert got[(0, 100)]["sv"] is None  # 4 * 2**62 does not fit a bigint
        overflowed = sum(1 for r in rows if r["sv"] is None)
        assert overflowed > 0 and job.metrics().arithmetic_errors == overflowed
    finally:
        job.stop()


def _ms(value: object) -> int:
    assert isinstance(value, dt.datetime)
    return round(value.timestamp() * 1000)
