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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from krishiv_py.api.stream import placeholder
from krishiv_py.errors import PlanError
from krishiv_py.model.cascade import CascadeModel
from krishiv_py.model.joins import JoinModel
from krishiv_py.model.over import OverSteps
from krishiv_py.model.ranking import TopNModel
from krishiv_py.model.reference import ReferenceModel
from krishiv_py.model.steps import (
    AdvanceProcessingTime,
    AdvanceWatermark,
    Close,
    ManualClock,
    Send,
    Step,
    model_for,
    plan_of,
    reference_model_for,
)
from krishiv_py.plan import nodes as n
from krishiv_py.runtime.job import StreamingJob
from krishiv_py.testing.compare import assert_same_rows

if TYPE_CHECKING:
    from krishiv_py._typing import Lowering
    from krishiv_py.api.stream import Stream
    from krishiv_py.runtime.job import Job
    from krishiv_py.session import Session
    from krishiv_py.sinks import Sink

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
#: A function from the source stream(s) to the result stream: one argument per source.
Pipeline: TypeAlias = "Callable[..., Stream]"

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


def _placeholder(schema: Any, name: str = "input") -> Stream:
    """A stream of ``schema`` that only describes (no session): for building plans."""
    return placeholder(schema, name)


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
    observe: Callable[[ReferenceModel | CascadeModel | TopNModel | JoinModel | OverSteps], list[Result]],
    sources: Sequence[str],
) -> list[list[Result]]:
    """Play ``steps`` on the reference model; ``observe`` it after each step."""
    built = pipeline(*(_placeholder(schema, name) for name in sources))
    model = model_for(built, clock=_scenario_clock(steps))
    plan = plan_of(built)
    left = {s.name for s in n.sources_of(plan.left)} if isinstance(plan, n.Join) else set()
    out = []
    for step in steps:
        _model_step(model, step, _model_source(step, sources), left)
        out.append(observe(model))
    return out


def _model_step(model: Any, step: Step, source: str, left: set[str]) -> None:
    """Play one step on ``model``; a join's model takes it on the side whose sources are ``left``
    or the other one (each source is a side of the join)."""
    if isinstance(model, JoinModel):
        side: Literal["left", "right"] = "left" if source in left else "right"
        if isinstance(step, AdvanceProcessingTime):
            raise PlanError("a join's model has no processing time: its rules are in event time only")
        if isinstance(step, Send):
            model.send(step.rows, side=side)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms, side=side)
        else:
            model.close(side=side)
    elif isinstance(step, AdvanceProcessingTime):
        model.advance_processing_time(step.ms)
    elif isinstance(step, Send):
        model.send(step.rows, source=source)
    elif isinstance(step, AdvanceWatermark):
        model.advance_watermark(step.ts_ms, source=source)
    else:
        model.close(source=source)


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
    if isinstance(model, JoinModel):
        raise PlanError(
            "a join reads two inputs: play it with run_reference(..., sources=(left, right)) and "
            "Send(rows, source=...) steps, then Close()"
        )
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
            if isinstance(step, AdvanceProcessingTime):
                assert clock is not None
                clock.advance(step.ms)
            else:
                _send_step(step, senders, sources)
            job.process_all_available()
            out.append(job.results().to_pylist())
        if all(s.closed for s in senders.values()) and not job.await_termination(timeout_s=120):
            raise AssertionError("the job did not finish after close()")
    finally:
        job.stop()
    return out


def _send_step(
    step: Send | AdvanceWatermark | Close, senders: Mapping[str, Any], sources: Sequence[str]
) -> None:
    """Hand one step to the sender of its source."""
    source = _model_source(step, sources)
    sender = senders[sources[0] if source in ("main", "") else source]
    if isinstance(step, Send):
        sender.send(list(step.rows))
    elif isinstance(step, AdvanceWatermark):
        sender.advance_watermark(step.ts_ms)
    else:
        sender.close()


def _use_clock(job: Job, clock: ManualClock) -> None:
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
