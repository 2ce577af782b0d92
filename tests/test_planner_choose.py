"""Unit tests of the lowering table, ``choose()`` and forcing a lowering (no Spark, no JVM).

Streams are built on source nodes with no session: nothing here runs anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, get_args

import attrs
import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py._typing import Lowering, WindowKind
from krishiv_py.api.stream import Stream
from krishiv_py.api.windowed import WindowedStream
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TimeIntervalWindow, TumblingWindow
from krishiv_py.planner.spark import LOWERINGS, choose, lower
from krishiv_py.planner.spark.choose import EmissionFeature, InputKind, capabilities, features_of, window_kind
from krishiv_py.types import to_schema

SCHEMA = to_schema("k string, t bigint, v bigint")
Windowed = Callable[[WindowedStream], WindowedStream]


class KeepLate:
    """A late-event handler that is not the default counting one."""

    def handle(self, late: pa.Table) -> None:
        del late


def unbounded() -> Stream:
    return Stream(None, n.MemorySource(name="in", schema=SCHEMA, path="/data/in"))


def bounded() -> Stream:
    data = pa.table({"k": ["a"], "t": pa.array([1], pa.int64()), "v": pa.array([2], pa.int64())})
    return Stream(None, n.RecordsSource(name="recs", schema=SCHEMA, data=data))


def windowed(source: Stream, emit: Windowed = lambda w: w) -> n.PlanNode:
    w = source.watermark("t", 0).key_by("k").tumbling_window(10)
    return emit(w).agg(kp.count(kp.col("*"))).plan


def capped(source: Stream) -> n.PlanNode:
    # The builder refuses max_duration_ms, so build the node directly.
    plan = windowed(source)
    assert isinstance(plan, n.WindowAggregate)
    return attrs.evolve(plan, window=SessionWindow(gap_ms=10, max_duration_ms=100))


def raises_plan_error(*words: str) -> Any:
    """pytest.raises(PlanError) whose message must mention every word."""
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


EMISSION: dict[EmissionFeature, tuple[Windowed, str]] = {
    "early_trigger": (lambda w: w.trigger(kp.Trigger.on_count(3)), "trigger on_count(3)"),
    "allowed_lateness": (lambda w: w.allowed_lateness(60_000), "allowed_lateness(60000 ms)"),
    "non_accumulating": (lambda w: w.accumulation("discarding"), "accumulation('discarding')"),
    "late_handler": (lambda w: w.with_late_event_handler(KeepLate()), "late-event handler KeepLate"),
}


# --- the table ---------------------------------------------------------------------


def test_the_table_has_one_row_per_lowering_in_order_of_preference() -> None:
    assert [c.lowering for c in LOWERINGS] == ["bounded", "native", "stateful"]
    assert sorted(c.lowering for c in LOWERINGS) == sorted(get_args(Lowering))


def test_the_table_says_what_each_lowering_runs_exactly() -> None:
    every_emission = frozenset(get_args(EmissionFeature))
    spark_windows = frozenset({"tumbling", "sliding", "session"})
    rows = {c.lowering: (c.inputs, c.window_kinds, c.emission) for c in LOWERINGS}
    assert rows == {
        "bounded": ({"bounded"}, spark_windows, {"allowed_lateness"}),
        "native": ({"unbounded"}, {"tumbling", "sliding"}, frozenset()),
        "stateful": (frozenset(get_args(InputKind)), frozenset(get_args(WindowKind)), every_emission),
    }


def test_only_bounded_reads_unbounded_input_as_a_snapshot() -> None:
    assert capabilities("bounded").covers("unbounded", forced=True)
    assert not capabilities("bounded").covers("unbounded")
    assert not capabilities("native").covers("bounded", forced=True)


@pytest.mark.parametrize(
    ("window", "kind"),
    [
        (TumblingWindow(size_ms=10), "tumbling"),
        (SlidingWindow(size_ms=10, slide_ms=5), "sliding"),
        (SessionWindow(gap_ms=10), "session"),
        (SessionWindow(gap_ms=10, max_duration_ms=100), "capped_session"),
        (TimeIntervalWindow(interval_ms=10, creation_period_ms=5, discard_age_ms=0), "time_interval"),
    ],
)
def test_window_kind_agrees_with_the_window_itself(window: Any, kind: WindowKind) -> None:
    assert window_kind(window) == kind == window.kind


def test_plan_features_name_the_options_as_emission_does() -> None:
    def every_option(w: WindowedStream) -> WindowedStream:
        for emit, _ in EMISSION.values():
            w = emit(w)
        return w

    plan = windowed(unbounded(), every_option)
    assert isinstance(plan, n.WindowAggregate)
    features = features_of(plan)
    assert [f.name for f in features] == ["unbounded", "tumbling", *EMISSION]
    assert [f.text for f in features[2:]] == plan.emission.stateful_features()


def test_default_emission_options_are_not_features() -> None:
    plan = windowed(unbounded(), lambda w: w.with_late_event_handler(kp.CountingLateEventHandler()))
    assert [f.name for f in features_of(plan)] == ["unbounded", "tumbling"]


# --- choose() ----------------------------------------------------------------------


def test_unbounded_input_with_default_emission_runs_native() -> None:
    lowering, reason = choose(windowed(unbounded()))
    assert lowering == "native"
    assert reason == capabilities("native").why


def test_finite_input_runs_bounded() -> None:
    lowering, reason = choose(windowed(bounded()))
    assert lowering == "bounded"
    assert reason == capabilities("bounded").why


def test_plans_without_windows_are_chosen_by_their_input() -> None:
    assert choose(unbounded().plan)[0] == "native"
    assert choose(bounded().filter(kp.col("v") > 1).plan)[0] == "bounded"


@pytest.mark.parametrize("feature", list(EMISSION))
def test_each_emission_option_on_unbounded_input_needs_the_stateful_lowering(
    feature: EmissionFeature,
) -> None:
    emit, text = EMISSION[feature]
    lowering, reason = choose(windowed(unbounded(), emit))
    assert lowering == "stateful"
    assert f"the plan uses {text}, which the native lowering cannot run exactly" in reason
    assert "needs the stateful lowering" in reason


def test_allowed_lateness_on_finite_input_stays_bounded() -> None:
    assert choose(windowed(bounded(), EMISSION["allowed_lateness"][0]))[0] == "bounded"


@pytest.mark.parametrize("feature", ["early_trigger", "non_accumulating", "late_handler"])
def test_finite_input_with_options_a_batch_cannot_run_needs_the_stateful_lowering(
    feature: EmissionFeature,
) -> None:
    emit, text = EMISSION[feature]
    lowering, reason = choose(windowed(bounded(), emit))
    assert lowering == "stateful"
    assert f"the plan uses {text}, which the bounded lowering cannot run exactly" in reason


def test_the_reason_names_every_feature_the_preferred_lowering_lacks() -> None:
    def two(w: WindowedStream) -> WindowedStream:
        return w.trigger(kp.Trigger.on_every_element()).allowed_lateness(5_000)

    _, reason = choose(windowed(unbounded(), two))
    assert "the plan uses trigger on_every_element() and allowed_lateness(5000 ms), which" in reason


@pytest.mark.parametrize("source", [unbounded, bounded])
def test_capped_sessions_need_the_stateful_lowering(source: Callable[[], Stream]) -> None:
    lowering, reason = choose(capped(source()))
    assert lowering == "stateful"
    assert "a capped session window (max_duration_ms=100)" in reason


def test_streaming_sessions_need_the_stateful_lowering() -> None:
    sessions = unbounded().watermark("t", 0).session_window(10).agg(kp.count(kp.col("*")))
    lowering, reason = choose(sessions.plan)
    assert lowering == "stateful"
    assert "a session window, which the native lowering cannot run exactly" in reason


def test_sessions_can_be_forced_onto_spark_s_own_operator() -> None:
    plan = unbounded().watermark("t", 0).session_window(10).agg(kp.count(kp.col("*"))).plan
    assert lower(plan, lowering="native").lowering == "native"


# --- lower() ----------------------------------------------------------------------------


def test_lower_runs_plans_that_need_the_stateful_lowering() -> None:
    recipe = lower(windowed(unbounded(), EMISSION["allowed_lateness"][0]))
    assert recipe.lowering == "stateful"
    assert recipe.stateful is not None and recipe.stateful.streaming
    assert "allowed_lateness(60000 ms)" in recipe.reason and "needs the stateful lowering" in recipe.reason


def test_lower_runs_capped_sessions_on_the_stateful_operator() -> None:
    recipe = lower(capped(unbounded()))
    assert recipe.stateful is not None
    assert recipe.stateful.operator.kernel.spec.capped


# --- forcing a lowering ------------------------------------------------------------


def test_forcing_the_chosen_lowering_changes_nothing() -> None:
    plan = windowed(unbounded())
    assert lower(plan, lowering="native") == lower(plan)
    assert lower(windowed(bounded()), lowering="bounded") == lower(windowed(bounded()))


def test_forcing_bounded_is_force_bounded() -> None:
    plan = windowed(unbounded())
    forced = lower(plan, lowering="bounded")
    assert forced == lower(plan, force_bounded=True)
    assert forced.lowering == "bounded" and "collect()" in forced.reason


def test_force_bounded_reads_a_snapshot_even_with_allowed_lateness() -> None:
    recipe = lower(windowed(unbounded(), EMISSION["allowed_lateness"][0]), force_bounded=True)
    assert recipe.lowering == "bounded"


@pytest.mark.parametrize("feature", ["early_trigger", "non_accumulating", "late_handler"])
def test_force_bounded_runs_the_stateful_operator_as_a_batch(feature: EmissionFeature) -> None:
    emit, text = EMISSION[feature]
    recipe = lower(windowed(unbounded(), emit), force_bounded=True)
    assert recipe.lowering == "stateful" and recipe.stateful is not None
    assert not recipe.stateful.streaming
    assert text in recipe.reason and "one batch job" in recipe.reason


def test_forcing_native_on_finite_input_is_refused() -> None:
    with raises_plan_error("lowering='native'", "finite input", "picks 'bounded'"):
        lower(windowed(bounded()), lowering="native")


@pytest.mark.parametrize("feature", list(EMISSION))
def test_forcing_native_on_options_it_cannot_run_is_refused(feature: EmissionFeature) -> None:
    emit, text = EMISSION[feature]
    with raises_plan_error("lowering='native'", text, "picks 'stateful'"):
        lower(windowed(unbounded(), emit), lowering="native")


def test_forcing_native_on_capped_sessions_is_refused() -> None:
    with raises_plan_error("max_duration_ms=100"):
        lower(capped(unbounded()), lowering="native")


def test_forcing_stateful_on_a_plan_native_runs() -> None:
    recipe = lower(windowed(unbounded()), lowering="stateful")
    assert recipe.lowering == "stateful" and "lowering='stateful'" in recipe.reason


def test_force_bounded_and_another_lowering_contradict() -> None:
    with raises_plan_error("force_bounded=True", "lowering='native'"):
        lower(windowed(unbounded()), force_bounded=True, lowering="native")
