"""The analysed plan (krishiv_py.plan.analysis): each node's facts, computed once.

The schema and event time agree with the builder's own checks
(``schema_of``, ``event_time``) on every node of plans of every operator
kind; changelog modes, keys, watermarks and how long results may still be
corrected follow the operators' rules, chained.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream, placeholder
from krishiv_py.plan import analysis
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import END_OF_TIME_MS, between, facts

SCHEMA = "k string, g string, v bigint, t bigint"


def _events(name: str = "s", lag: int = 1_000) -> Stream:
    return placeholder(SCHEMA, name).watermark("t", lag)


def _count() -> kp.AggExpr:
    return kp.count(kp.col("*")).alias("c")


def _window(lateness: int = 0, mode: str = "accumulating") -> Stream:
    w = _events().key_by("k").tumbling_window(10_000)
    if lateness:
        w = w.allowed_lateness(lateness)
    return w.accumulation(mode).agg(_count(), kp.sum(kp.col("v")).alias("total"))  # type: ignore[arg-type]


def _join(lateness: int = 0, mode: str = "accumulating") -> Stream:
    left, right = _events("l").key_by("k"), _events("r", 2_000).key_by("k")
    joined = left.interval_join(right, between=(-5_000, 0))
    if lateness:
        joined = joined.allowed_lateness(lateness)
    return joined.accumulation(mode)  # type: ignore[arg-type]


PLANS: dict[str, Callable[[], Stream]] = {
    "source": lambda: _events(),
    "filter and select": lambda: _events().filter(kp.col("v") > 1).select("k", "t"),
    "tumbling": lambda: _window(),
    "late window": lambda: _window(5_000),
    "retracting window": lambda: _window(5_000, "retracting"),
    "sliding": lambda: _events().key_by("k").sliding_window(10_000, 5_000).agg(_count()),
    "session": lambda: _events().key_by("k").session_window(3_000).agg(_count()),
    "processing time": lambda: (
        placeholder(SCHEMA).key_by("k").tumbling_window(1_000, time="processing").agg(_count())
    ),
    "cascade": lambda: _window(2_000).key_by("k").tumbling_window(60_000).agg(kp.sum(kp.col("c")).alias("n")),
    "window top-N": lambda: _window(0, "retracting").top_n(2, by="c", keys=("k",)),
    "join": lambda: _join(),
    "window after join": lambda: (
        _join(3_000).key_by("k").tumbling_window(10_000).allowed_lateness(1_000).agg(_count())
    ),
    "aggregation per key": lambda: _events().key_by("k").agg(_count()),
    "window after aggregation": lambda: (
        _events()
        .key_by("k")
        .agg(_count())
        .key_by("k")
        .tumbling_window(10_000)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("c")).alias("n"))
    ),
    "top-N per key": lambda: _events().top_n(3, by="v", per="key", keys=("k",)),
    "over rows": lambda: _events().key_by("k").over_rows(3).allowed_lateness(2_000).agg(kp.sum(kp.col("v"))),
    "union of windows": lambda: _window(1_000).union(
        _events("s2").key_by("k").tumbling_window(10_000).agg(_count(), kp.sum(kp.col("v")).alias("total"))
    ),
    "join of a window": lambda: (
        _window(4_000, "retracting").key_by("k").interval_join(_events("r").key_by("k"), between=(-1_000, 0))
    ),
}


def _nodes(plan: n.PlanNode) -> list[n.PlanNode]:
    return list(n.walk(plan))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_schema_and_event_time_agree_with_the_builders_on_every_node(name: str) -> None:
    plan = PLANS[name]().plan
    for node in _nodes(plan):
        f = facts(node)
        assert f.schema == n.schema_of(node), node
        assert f.event_time == n.event_time(node), node


def test_changelog_modes() -> None:
    assert facts(_events().plan).changelog == "insert-only"
    assert facts(_window().plan).changelog == "insert-only"  # fires each window once
    assert facts(_window(5_000).plan).changelog == "updating"  # fires again for late rows
    assert facts(_window(5_000, "retracting").plan).changelog == "retracting"
    assert facts(_join().plan).changelog == "insert-only"
    assert facts(_join(1_000, "retracting").plan).changelog == "retracting"
    assert facts(PLANS["aggregation per key"]().plan).changelog == "retracting"
    assert facts(PLANS["top-N per key"]().plan).changelog == "retracting"
    assert facts(PLANS["window top-N"]().plan).changelog == "retracting"
    assert facts(PLANS["over rows"]().plan).changelog == "updating"
    # A union carries each branch's corrections, with kind.
    assert facts(PLANS["union of windows"]().plan).changelog == "retracting"
    assert facts(_events().union(_events("s2")).plan).changelog == "insert-only"
    # Filters and projections hand their input's mode on.
    assert facts(_window(5_000).filter(kp.col("c") > 1).plan).changelog == "updating"


def test_how_long_results_may_be_corrected_chains_through_operators() -> None:
    assert facts(_events().plan).correction_ms == 0
    assert facts(_window(5_000).plan).correction_ms == 5_000
    assert facts(_join(3_000).plan).correction_ms == 3_000
    # A window after a join keeps its windows the join's lateness longer.
    assert facts(PLANS["window after join"]().plan).correction_ms == 3_000 + 1_000
    # A cascade's second window: its own (none) and the first's.
    assert facts(PLANS["cascade"]().plan).correction_ms == 2_000
    # A change per key may withdraw a row of any age, and so may a window over such changes.
    assert facts(PLANS["aggregation per key"]().plan).correction_ms == END_OF_TIME_MS
    assert facts(PLANS["window after aggregation"]().plan).correction_ms >= END_OF_TIME_MS
    # A join of a window's results reads them at window_end - 1 ms: late by one ms more.
    window = facts(_window(4_000, "retracting").plan)
    assert (window.correction_ms, window.join_correction_ms) == (4_000, 4_001)
    assert facts(PLANS["join of a window"]().plan).correction_ms == 4_001
    assert facts(_window().plan).join_correction_ms == 0  # (fires once: nothing to correct)


def test_keys_as_the_results_name_them() -> None:
    assert facts(_events().plan).keys is None
    assert facts(_window().plan).keys == ("k",)
    assert facts(_join().plan).keys == ("k",)
    assert facts(PLANS["window top-N"]().plan).keys == ("window_start", "window_end", "k")
    assert facts(_window().select("k", "c").plan).keys == ("k",)
    # Renamed away: no column of the results names them.
    assert facts(_window().select(kp.col("k").alias("key"), "c").plan).keys is None
    union = PLANS["union of windows"]().plan
    assert facts(union).keys == ("k",)


def test_watermarks_and_their_delay() -> None:
    joined = facts(_join().plan)
    assert [w.lag_ms for w in joined.watermarks] == [1_000, 2_000]
    assert joined.watermark_delay_ms == 2_000
    assert facts(placeholder(SCHEMA).plan).watermark_delay_ms is None
    # One stream read twice: a watermark operator per read.
    s = _events()
    assert len(facts(s.union(s).plan).watermarks) == 2


def test_between_gives_the_filters_and_projections_over_an_operator() -> None:
    out = _window().filter(kp.col("c") > 1).select("k", "c")
    steps = between(out.plan)
    assert [type(x) for x in steps] == [n.Filter, n.Project]
    assert facts(out.plan).results_of is steps[0].input
    assert between(_window().plan) == ()


def test_facts_are_computed_once_per_node_and_go_with_it() -> None:
    window = _window(5_000)
    first = facts(window.plan)
    assert facts(window.plan) is first
    above = window.filter(kp.col("c") > 1)
    facts(above.plan)
    assert facts(window.plan) is first  # a plan over it reuses its facts
    before = len(analysis._FACTS)
    del window, above, first
    gc.collect()
    assert len(analysis._FACTS) < before  # dropped with their nodes
