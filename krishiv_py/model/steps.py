"""Scenario steps and the reference model of a plan.

A scenario's steps (:class:`Send`, :class:`AdvanceWatermark`, :class:`Close`,
:class:`AdvanceProcessingTime`) and the model of a pipeline's plan
(:func:`reference_model_for`, :func:`model_for`). Both are plain data and
plain Python: this module knows plans, not streams or jobs, so the
runtime's tools (the watermark advisor, what-if replay, timelines) use it
as well as the test runners in :mod:`krishiv_py.testing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeAlias, cast

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.model.cascade import CascadeModel
from krishiv_py.model.joins import JoinModel, join_model_for
from krishiv_py.model.over import OverModel, OverSteps
from krishiv_py.model.ranking import TopNModel
from krishiv_py.model.reference import AggSpec, ReferenceModel
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

__all__ = [
    "AdvanceProcessingTime",
    "AdvanceWatermark",
    "Close",
    "ManualClock",
    "Send",
    "Step",
    "model_for",
    "over_model_for",
    "Planned",
    "plan_of",
    "reference_model_for",
]

Row: TypeAlias = Mapping[str, object]


class Planned(Protocol):
    """Anything that holds a plan: a ``Stream``, a ``Job``."""

    @property
    def plan(self) -> n.PlanNode: ...


def plan_of(pipeline: Planned | n.PlanNode) -> n.PlanNode:
    """The plan of a stream or a job, or ``pipeline`` itself when it is a plan."""
    plan = getattr(pipeline, "plan", pipeline)
    if not isinstance(plan, n.PlanNode):
        raise PlanError(f"expected a Stream, a Job or a plan, got {type(pipeline).__name__}")
    return plan


def _as_rows(rows: Iterable[Row]) -> tuple[Row, ...]:
    return tuple(rows)


@attrs.frozen
class Send:
    """One ``sender.send(rows)``: one step (``source``: which sender; default the first)."""

    rows: tuple[Row, ...] = attrs.field(converter=_as_rows)
    source: str | None = None


@attrs.frozen
class AdvanceWatermark:
    """One ``sender.advance_watermark(ts_ms)`` (``source``: which sender; default the first)."""

    ts_ms: int
    source: str | None = None


@attrs.frozen
class Close:
    """``sender.close()``: end of input of one source (``source``; default the first)."""

    source: str | None = None


@attrs.frozen
class AdvanceProcessingTime:
    """``ms`` of processing time pass with no input (one step; sources may go idle)."""

    ms: int
    source: None = None


Step: TypeAlias = Send | AdvanceWatermark | Close | AdvanceProcessingTime


class ManualClock:
    """A processing-time clock in ms that moves only when told to (for scenarios).

    >>> clock = ManualClock()
    >>> clock.advance(1_500)
    >>> clock()
    1500.0
    """

    def __init__(self) -> None:
        self._ms = 0.0

    def __call__(self) -> float:
        return self._ms

    def advance(self, ms: float) -> None:
        self._ms += ms


def _source_names(mark: n.Watermark) -> list[str]:
    """The model's sources of a watermark over a source: a Kafka topic read with a watermark per
    partition is one per partition (``name[0]``, ``name[1]``, ... as the job names them)."""
    source = cast("n.MemorySource | n.KafkaSource", mark.input)
    if isinstance(source, n.KafkaSource) and source.per_partition and source.partitions is not None:
        return [f"{source.name}[{p}]" for p in range(source.partitions)]
    return [source.name]


def reference_model_for(
    stream: Planned | n.PlanNode,
    *,
    clock: Callable[[], float] | None = None,
    record: bool = False,
    lag: AutoLag | None = None,
) -> ReferenceModel:
    """A :class:`ReferenceModel` for a ``source -> watermark -> window -> agg`` pipeline.

    Several sources are modelled when the window's input is a union of
    watermarked sources (``a.watermark(...).union(b.watermark(...))``, one
    event-time column, a lag per source); the model's sources are the
    streams' names. The model gets the pipeline's emission options (trigger,
    allowed lateness, accumulation) and the watermark's future tolerance;
    ``clock`` (processing time in ms) drives ``Trigger.on_interval`` and
    idle timeouts (``idle_timeout_ms`` of the watermarks);
    ``record=True`` keeps the model's :attr:`~ReferenceModel.log`.
    ``stream`` may also be the plan itself (a job's ``plan``); ``lag``, an
    automatic lag for every source in place of the watermarks' own.
    """
    plan, marks = _windowed_sources(plan_of(stream))
    wm = marks[0]
    # A Kafka topic read with a watermark per partition is a source per partition: name[0], ...
    named = [(name, m) for m in marks for name in _source_names(m)]
    names = [name for name, _ in named]
    idle: int | dict[str, int | None] | None = wm.idle_timeout_ms
    # A watermark's own automatic lag (watermark(column, "auto")) unless ``lag`` replaces it.
    lags: int | AutoLag | dict[str, int | AutoLag] = lag if lag is not None else wm.auto or wm.lag_ms
    if len(named) > 1:
        idle = {name: m.idle_timeout_ms for name, m in named}
        if lag is None:
            lags = {name: m.auto or m.lag_ms for name, m in named}
    return ReferenceModel(
        window=plan.window,
        event_time=wm.column,
        lag_ms=lags,
        keys=plan.keys,
        aggregates=[AggSpec(name=a.name, func=a.func, column=a.column) for a in plan.aggregates],
        sources=names if len(names) > 1 else ("main",),
        allowed_lateness_ms=plan.emission.allowed_lateness_ms,
        trigger=plan.emission.trigger,
        accumulation=plan.emission.accumulation,
        future_tolerance_ms=wm.future_tolerance_ms,
        idle_timeout_ms=idle,
        state_ttl_ms=None if plan.emission.state_ttl is None else plan.emission.state_ttl.ttl_ms,
        state_ttl_time="event" if plan.emission.state_ttl is None else plan.emission.state_ttl.time,
        clock=clock,
        record=record,
    )


def _windowed_sources(plan: n.PlanNode) -> tuple[n.WindowAggregate, list[n.Watermark]]:
    """``plan``, checked to be a window over watermarked sources, and the sources' watermarks."""
    if isinstance(plan, n.Join):
        raise PlanError("a join has its own model: use model_for() (a JoinModel)")
    if not isinstance(plan, n.WindowAggregate):
        raise PlanError("the reference model covers source -> watermark -> [key_by] -> window -> agg")
    if n.cascade_of(plan) is not None:
        raise PlanError("a window over windowed results has its own model: use model_for()")
    inputs = plan.input.inputs if isinstance(plan.input, n.Union) else (plan.input,)
    marks: list[n.Watermark] = []
    for node in inputs:
        if not isinstance(node, n.Watermark):
            raise PlanError("the reference model covers source -> watermark -> [key_by] -> window -> agg")
        if not isinstance(node.input, n.SOURCE_TYPES):
            raise PlanError("the reference model covers pipelines without stateless steps before the window")
        marks.append(node)
    if len({m.column for m in marks}) > 1 or len({m.future_tolerance_ms for m in marks}) > 1:
        raise PlanError(
            "the reference model needs one event-time column and future tolerance for all sources"
        )
    return plan, marks


def over_model_for(plan: n.OverAggregate) -> OverSteps:
    """The model of an over-aggregation right after a watermarked source (SPEC 3.16)."""
    mark = plan.input
    if not isinstance(mark, n.Watermark) or not isinstance(mark.input, n.SOURCE_TYPES):
        raise PlanError(
            "the reference model covers source -> watermark -> key_by -> over_rows/over_range -> agg"
        )
    model = OverModel(
        keys=plan.keys,
        frame=plan.frame,
        preceding=plan.preceding,
        aggs=tuple(AggSpec(name=a.name, func=a.func, column=a.column) for a in plan.aggregates),
        event_time=mark.column,
        allowed_lateness_ms=plan.emission.allowed_lateness_ms,
        accumulation="retracting" if plan.retracting else "accumulating",
    )
    return OverSteps(model, mark.auto.max_lag_ms if mark.auto is not None else mark.lag_ms)


def model_for(
    stream: Planned | n.PlanNode, *, clock: Callable[[], float] | None = None
) -> ReferenceModel | CascadeModel | TopNModel | JoinModel | OverSteps:
    """The model of a pipeline: :func:`reference_model_for`, a :class:`CascadeModel`, a :class:`TopNModel`.

    A join (``interval_join``, ``join``, ``as_of_join``) is modelled by a
    :class:`~krishiv_py.model.joins.JoinModel` (send each side's rows with
    ``send(rows, side="left" | "right")``).

    Window top-N right after a window's ``agg`` is modelled as the results
    fire and are corrected (``kind`` on every row); compare it with a
    retracting pipeline.

    A window over windowed results (a cascade) is modelled when no stage
    stands between the two windows (the model evaluates no expressions:
    build a :class:`CascadeModel` with ``between=`` for those).
    """
    plan = plan_of(stream)
    if isinstance(plan, n.Join):
        return join_model_for(plan)
    if isinstance(plan, n.OverAggregate):
        return over_model_for(plan)
    if isinstance(plan, n.TopN) and isinstance(plan.input, n.WindowAggregate):
        return TopNModel(
            model_for(plan.input, clock=clock),
            n=plan.n,
            by=plan.by,
            keys=plan.keys,
            ties=plan.ties,
            ascending=plan.ascending,
            allowed_lateness_ms=n.cascade_lateness_ms(plan.input),
        )
    cascade = n.cascade_of(plan) if isinstance(plan, n.WindowAggregate) else None
    if cascade is None:
        return reference_model_for(plan, clock=clock)
    assert isinstance(plan, n.WindowAggregate)
    if cascade.between:
        raise PlanError(
            "the reference model runs no expressions between two windows: build a CascadeModel "
            "with between= for that pipeline"
        )
    if n.cascade_of(cascade.upstream) is not None:
        raise PlanError("the reference model covers two windows, not more")
    window = plan.window
    assert isinstance(window, TumblingWindow | SlidingWindow | SessionWindow)
    return CascadeModel(
        reference_model_for(cascade.upstream, clock=clock),
        window=window,
        keys=plan.keys,
        aggregates=[AggSpec(name=a.name, func=a.func, column=a.column) for a in plan.aggregates],
        allowed_lateness_ms=n.cascade_lateness_ms(plan),
        accumulation=plan.emission.accumulation,
    )
