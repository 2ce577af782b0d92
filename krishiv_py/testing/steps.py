"""Run one scenario — a list of steps — on the reference model and on Spark.

A scenario is what a transcript test says: the input schema, a pipeline
(a function from the source stream to the result stream) and the steps
(:class:`Send`, :class:`AdvanceWatermark`, :class:`Close`,
:class:`AdvanceProcessingTime`). Each runner returns the cumulative results
after every step, so firing times are compared, not only final results.

Processing time is part of the scenario: the model and the streaming job
both read a clock that starts at 0 when the job starts and moves only with
:class:`AdvanceProcessingTime` steps, so idle timeouts behave the same on
every machine.

Examples
--------
>>> import krishiv_py as kp
>>> from krishiv_py.testing import Send, Close, run_reference
>>> build = lambda s: s.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))
>>> run_reference("t bigint", build, [Send([{"t": 3}, {"t": 12}]), Close()])[-1]
[{'window_start': 0, 'window_end': 10, 'count': 1}, {'window_start': 10, 'window_end': 20, 'count': 1}]

The rows the model dropped (very late) or could not window (invalid), after each step:

>>> late = run_reference_late_events("t bigint", build, [Send([{"t": 12}]), Send([{"t": 3}, {"t": None}])])
>>> for event in late[-1]:
...     print(event)
{'t': 3, 'classification': 'very_late', 'watermark_ms': 12}
{'t': None, 'classification': 'invalid', 'watermark_ms': 12}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.testing.cascade import CascadeModel
from krishiv_py.testing.compare import assert_same_rows
from krishiv_py.testing.ranking import TopNModel
from krishiv_py.testing.reference import AggSpec, ReferenceModel
from krishiv_py.types import to_schema

if TYPE_CHECKING:
    from krishiv_py._typing import Lowering
    from krishiv_py.api.stream import Stream
    from krishiv_py.runtime.job import Job
    from krishiv_py.session import Session
    from krishiv_py.sinks import Sink

__all__ = [
    "AdvanceProcessingTime",
    "AdvanceWatermark",
    "ManualClock",
    "Close",
    "assert_lowerings_agree",
    "Send",
    "Step",
    "model_for",
    "reference_model_for",
    "run_bounded",
    "run_reference",
    "run_reference_bounded",
    "run_reference_late_events",
    "run_streaming",
]

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
#: A function from the source stream(s) to the result stream: one argument per source.
Pipeline: TypeAlias = "Callable[..., Stream]"


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


def reference_model_for(
    stream: Stream | n.PlanNode, *, clock: Callable[[], float] | None = None, record: bool = False
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
    ``stream`` may also be the plan itself (a job's ``plan``).
    """
    plan = getattr(stream, "plan", stream)
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
    wm = marks[0]
    names = [cast("n.MemorySource", m.input).name for m in marks]
    idle: int | dict[str, int | None] | None = wm.idle_timeout_ms
    if len(marks) > 1:
        idle = dict(zip(names, (m.idle_timeout_ms for m in marks), strict=True))
    return ReferenceModel(
        window=plan.window,
        event_time=wm.column,
        lag_ms=dict(zip(names, (m.lag_ms for m in marks), strict=True)) if len(marks) > 1 else wm.lag_ms,
        keys=plan.keys,
        aggregates=[AggSpec(name=a.name, func=a.func, column=a.column) for a in plan.aggregates],
        sources=names if len(marks) > 1 else ("main",),
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


def model_for(
    stream: Stream | n.PlanNode, *, clock: Callable[[], float] | None = None
) -> ReferenceModel | CascadeModel | TopNModel:
    """The model of a pipeline: :func:`reference_model_for`, a :class:`CascadeModel` or a :class:`TopNModel`.

    Window top-N right after a window's ``agg`` is modelled as the results
    fire and are corrected (``kind`` on every row); compare it with a
    retracting pipeline.

    A window over windowed results (a cascade) is modelled when no stage
    stands between the two windows (the model evaluates no expressions:
    build a :class:`CascadeModel` with ``between=`` for those).
    """
    plan = getattr(stream, "plan", stream)
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


def _placeholder(schema: Any, name: str = "input") -> Stream:
    from krishiv_py.api.stream import Stream

    source = n.MemorySource(name=name, schema=to_schema(schema), path="")
    return Stream(cast("Session", None), source)


def _model_source(step: Step, sources: Sequence[str]) -> str:
    """The model's name of the source a step addresses."""
    if isinstance(step, AdvanceProcessingTime):
        return ""
    if len(sources) == 1:
        if step.source not in (None, sources[0]):
            raise PlanError(f"step {step!r} names a source, but the scenario has one source")
        return "main"
    if step.source is None:
        return sources[0]
    if step.source not in sources:
        raise PlanError(f"step {step!r}: unknown source; the scenario's sources are {list(sources)}")
    return step.source


def _play(
    schema: Any,
    pipeline: Pipeline,
    steps: Sequence[Step],
    observe: Callable[[ReferenceModel | CascadeModel | TopNModel], list[Result]],
    sources: Sequence[str],
) -> list[list[Result]]:
    """Play ``steps`` on the reference model; ``observe`` it after each step."""
    model = model_for(
        pipeline(*(_placeholder(schema, name) for name in sources)), clock=_scenario_clock(steps)
    )
    out = []
    for step in steps:
        source = _model_source(step, sources)
        if isinstance(step, AdvanceProcessingTime):
            model.advance_processing_time(step.ms)
        elif isinstance(step, Send):
            model.send(step.rows, source=source)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms, source=source)
        else:
            model.close(source=source)
        out.append(observe(model))
    return out


def _scenario_clock(steps: Sequence[Step]) -> ManualClock | None:
    """The scenario's processing-time clock: a manual one when steps move processing time."""
    return ManualClock() if any(isinstance(s, AdvanceProcessingTime) for s in steps) else None


def run_reference(
    schema: Any, pipeline: Pipeline, steps: Sequence[Step], *, sources: Sequence[str] = ("input",)
) -> list[list[Result]]:
    """Cumulative reference results after each step.

    With several ``sources``, ``pipeline`` takes one stream per source, in
    order, and each step names its source (default: the first).
    """
    return _play(schema, pipeline, steps, lambda model: model.results, sources)


def run_reference_late_events(
    schema: Any, pipeline: Pipeline, steps: Sequence[Step], *, sources: Sequence[str] = ("input",)
) -> list[list[Result]]:
    """Cumulative reference late events after each step (see :attr:`ReferenceModel.late_events`).

    Each is an invalid or very late input row plus ``classification`` and
    ``watermark_ms``, as a late-event handler receives them.
    """
    return _play(schema, pipeline, steps, lambda model: model.late_events, sources)


def run_reference_bounded(schema: Any, pipeline: Pipeline, rows: Sequence[Row]) -> list[Result]:
    """Reference results of a bounded run: all rows in one step, then end of input."""
    model = model_for(pipeline(_placeholder(schema)))
    model.send(rows)
    model.close()
    return list(model.results)


def run_streaming(
    session: Session,
    schema: Any,
    pipeline: Pipeline,
    steps: Sequence[Step],
    *,
    lowering: Lowering | None = None,
    sources: Sequence[str] = ("input",),
    sink: Sink | None = None,
) -> list[list[dict[str, object]]]:
    """Cumulative results of the streaming job after each step (one step = send + process).

    ``lowering`` forces ``"native"`` or ``"stateful"`` instead of the planner's
    choice. ``sink`` (default: in memory) is where the job writes; the
    results after a step are what its ``job.results()`` reads back (a table
    sink in upsert mode: the current result of every window). With several
    ``sources`` there is one memory stream and sender per source, named
    like the sources; ``pipeline`` takes the streams in order. When steps
    move processing time, the job's idle-source clock is the scenario's
    (see the module docstring).
    """
    pairs = [session.memory_stream(schema, name=name if len(sources) > 1 else None) for name in sources]
    senders = {name: sender for name, (_, sender) in zip(sources, pairs, strict=True)}
    job = pipeline(*(stream for stream, _ in pairs)).start(sink, lowering=lowering)
    clock = _scenario_clock(steps)
    if clock is not None:
        _use_clock(job, clock)
    out = []
    try:
        for step in steps:
            source = _model_source(step, sources)
            sender = senders[sources[0] if source in ("main", "") else source]
            if isinstance(step, AdvanceProcessingTime):
                assert clock is not None
                clock.advance(step.ms)
            elif isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            else:
                sender.close()
            job.process_all_available()
            out.append(job.results().to_pylist())
        if all(s.closed for s in senders.values()) and not job.await_termination(timeout_s=120):
            raise AssertionError("the job did not finish after close()")
    finally:
        job.stop()
    return out


def _use_clock(job: Job, clock: ManualClock) -> None:
    from krishiv_py.runtime.job import StreamingJob

    idle = job._idle if isinstance(job, StreamingJob) else None
    if idle is not None:
        idle.restart_clock(clock)


def run_bounded(
    session: Session, schema: Any, pipeline: Pipeline, rows: Sequence[Row]
) -> list[dict[str, Any]]:
    """Results of the bounded lowering over ``rows`` (``from_records`` + ``collect``)."""
    stream = session.from_records(list(rows), schema)
    return pipeline(stream).collect().to_pylist()


def assert_lowerings_agree(
    session: Session,
    schema: Any,
    pipeline: Pipeline,
    steps: Sequence[Step],
    *,
    lowering: Lowering | None = None,
    sources: Sequence[str] = ("input",),
) -> None:
    """Run ``steps`` on the reference model, streaming Spark and bounded Spark; all must agree.

    The streaming job uses the planner's lowering, or ``lowering`` when given.

    Streaming results are compared with the model after every step (so firing
    times are checked); the bounded run gets all rows at once (one
    ``from_records`` stream per source) and is compared with the model given
    all rows in one step per source, then end of input.
    """
    expected = run_reference(schema, pipeline, steps, sources=sources)
    actual = run_streaming(session, schema, pipeline, steps, lowering=lowering, sources=sources)
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        try:
            assert_same_rows(got, want)
        except AssertionError as exc:
            raise AssertionError(f"streaming differs after step {i} ({steps[i]!r}):\n{exc}") from None
    by_source: dict[str, list[Row]] = {name: [] for name in sources}
    for step in steps:
        if isinstance(step, Send):
            source = _model_source(step, sources)
            by_source[sources[0] if source == "main" else source] += [dict(r) for r in step.rows]
    if len(sources) == 1:
        rows = by_source[sources[0]]
        got, want = (
            run_bounded(session, schema, pipeline, rows),
            run_reference_bounded(schema, pipeline, rows),
        )
    else:
        streams = [session.from_records(by_source[name], schema, name=name) for name in sources]
        got = pipeline(*streams).collect().to_pylist()
        bounded_steps: list[Step] = [Send(by_source[name], source=name) for name in sources]
        bounded_steps += [Close(source=name) for name in sources]
        want = run_reference(schema, pipeline, bounded_steps, sources=sources)[-1]
    try:
        assert_same_rows(got, want)
    except AssertionError as exc:
        raise AssertionError(f"bounded run differs:\n{exc}") from None
