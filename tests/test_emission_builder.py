"""The emission options of WindowedStream: immutable builders, PlanError for bad arguments (no Spark)."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.plan import nodes as n
from krishiv_py.plan.emission import Emission
from krishiv_py.testing.steps import _placeholder


def windowed() -> kp.WindowedStream:
    return _placeholder("k string, t bigint, v bigint").watermark("t", 5).key_by("k").tumbling_window(10)


def plan_of(stream: kp.Stream) -> n.WindowAggregate:
    plan = stream.plan
    assert isinstance(plan, n.WindowAggregate)
    return plan


def test_every_option_returns_a_new_windowed_stream() -> None:
    base = windowed()
    late = base.allowed_lateness()
    assert base.emission == Emission() and late is not base
    assert late.emission.allowed_lateness_ms == 60_000
    full = (
        late.trigger(kp.Trigger.on_count(3))
        .accumulation("retracting")
        .with_late_event_handler(kp.SideOutputLateEventHandler())
    )
    e = plan_of(full.agg(kp.count(kp.col("*")))).emission
    assert (e.trigger, e.allowed_lateness_ms, e.accumulation) == (
        kp.Trigger.on_count(3),
        60_000,
        "retracting",
    )
    assert isinstance(e.late_handler, kp.SideOutputLateEventHandler)
    assert base.emission == Emission()  # unchanged


def test_retracting_adds_the_kind_column() -> None:
    out = windowed().accumulation("retracting").agg(kp.count(kp.col("*")))
    assert out.schema.names == ("k", "window_start", "window_end", "count", "kind")
    assert windowed().agg(kp.count(kp.col("*"))).schema.names[-1] == "count"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: kp.Trigger.on_count(0), "on_count"),
        (lambda: kp.Trigger.on_count(cast(Any, 1.5)), "on_count"),
        (lambda: kp.Trigger.on_interval(0), "on_interval"),
        (lambda: windowed().allowed_lateness(-1), "allowed_lateness"),
        (lambda: windowed().allowed_lateness(cast(Any, "sixty seconds")), "allowed_lateness"),
        (lambda: windowed().accumulation(cast(Any, "replacing")), "accumulation must be one of"),
        (lambda: windowed().trigger(cast(Any, "on_count")), "trigger\\(\\) takes a Trigger"),
        (lambda: windowed().with_late_event_handler(cast(Any, object())), "handle\\(table\\)"),
        (lambda: _placeholder("t bigint").watermark("t", 0, future_tolerance_ms=-1), "future_tolerance_ms"),
    ],
)
def test_bad_arguments_are_plan_errors_naming_them(build: Any, message: str) -> None:
    with pytest.raises(kp.PlanError, match=message):
        build()


def test_any_object_with_handle_is_a_handler() -> None:
    class Mine:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def handle(self, late: pa.Table) -> None:
            self.seen.append(late.num_rows)

    w = windowed().with_late_event_handler(Mine())
    assert isinstance(w.emission.late_handler, Mine)


def test_the_plan_text_shows_non_default_emission() -> None:
    text = n.render_plan(windowed().allowed_lateness(1_000).agg(kp.count(kp.col("*"))).plan)
    assert "emission=[trigger=on_watermark() allowed_lateness_ms=1000 accumulation=accumulating]" in text
    assert "emission" not in n.render_plan(windowed().agg(kp.count(kp.col("*"))).plan)


def test_future_tolerance_travels_with_the_watermark() -> None:
    stream = _placeholder("t bigint").watermark("t", 0, future_tolerance_ms=5)
    et = n.event_time(stream.plan)
    assert et is not None and et.future_tolerance_ms == 5
    assert "future_tolerance_ms=5" in n.render_plan(stream.plan)


def test_side_output_handler_refuses_a_non_sink() -> None:
    with pytest.raises(kp.PlanError, match="takes a krishiv sink"):
        kp.SideOutputLateEventHandler(cast(Any, "late/"))
