"""Differential tests: random out-of-order streams through three engines.

Hypothesis generates a window (tumbling, sliding, session; keyed or not), a
watermark lag and a few steps of out-of-order rows (with watermark
promises), ending with ``close()``. The pure-Python reference model, the
native streaming lowering on real Spark (compared after every step) and the
bounded lowering (all rows at once) must give the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.testing import AdvanceWatermark, Close, Send, Step, assert_lowerings_agree

SCHEMA = "k string, t bigint, v bigint"
Pipeline = Callable[[kp.Stream], kp.Stream]
AGGS = (
    kp.count(kp.col("*")),
    kp.sum(kp.col("v")),
    kp.avg(kp.col("v")),
    kp.min(kp.col("v")),
    kp.max(kp.col("v")),
    kp.count_distinct(kp.col("v")),
    kp.first(kp.col("v")),
    kp.last(kp.col("v")),
    kp.count(kp.col("v")),
)


def pipeline(kind: str, size: int, slide: int, lag: int, keyed: bool) -> Pipeline:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag)
        if keyed:
            w = w.key_by("k")
        if kind == "tumbling":
            windowed = w.tumbling_window(size)
        elif kind == "sliding":
            windowed = w.sliding_window(size, slide)
        else:
            windowed = w.session_window(size)
        return windowed.agg(*AGGS)  # type: ignore[no-any-return]

    return build


row = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", "c"]),
        "t": st.integers(min_value=-60, max_value=200),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9)),
    }
)
step = st.one_of(
    st.lists(row, max_size=6).map(Send),
    st.lists(row, max_size=6).map(Send),
    st.integers(min_value=-60, max_value=220).map(AdvanceWatermark),
)
steps = st.lists(step, min_size=1, max_size=4).map(lambda s: [*s, Close()])


#: Random scenarios per test through real Spark (each is a streaming and a batch run); the
#: stateful kernel's tests cover many more without Spark. KRISHIV_PARITY_EXAMPLES=30 digs deeper.
EXAMPLES = int(os.environ.get("KRISHIV_PARITY_EXAMPLES", "2"))


def check(session: kp.Session, build: Pipeline, scenario: list[Step]) -> None:
    assert_lowerings_agree(session, SCHEMA, build, scenario)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@settings(max_examples=EXAMPLES)
@given(size=st.integers(5, 60), lag=st.integers(0, 40), scenario=steps)
def test_tumbling(session: kp.Session, keyed: bool, size: int, lag: int, scenario: list[Step]) -> None:
    check(session, pipeline("tumbling", size, size, lag, keyed), scenario)


@settings(max_examples=EXAMPLES + 1)
@given(data=st.data(), lag=st.integers(0, 40), scenario=steps, keyed=st.booleans())
def test_sliding(
    session: kp.Session, data: st.DataObject, lag: int, scenario: list[Step], keyed: bool
) -> None:
    size = data.draw(st.integers(5, 60), label="size")
    slide = data.draw(st.integers(1, size), label="slide")
    check(session, pipeline("sliding", size, slide, lag, keyed), scenario)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@settings(max_examples=EXAMPLES)
@given(gap=st.integers(1, 40), lag=st.integers(0, 40), scenario=steps)
def test_session(session: kp.Session, keyed: bool, gap: int, lag: int, scenario: list[Step]) -> None:
    check(session, pipeline("session", gap, gap, lag, keyed), scenario)
