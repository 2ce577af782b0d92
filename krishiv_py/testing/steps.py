"""Run one scenario — a list of steps — on the reference model and on Spark.

A scenario is what a transcript test says: the input schema, a pipeline
(a function from the source stream to the result stream) and the steps
(:class:`Send`, :class:`AdvanceWatermark`, :class:`Close`). Each runner
returns the cumulative results after every step, so firing times are
compared, not only final results.

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
from krishiv_py.testing.compare import assert_same_rows
from krishiv_py.testing.reference import AggSpec, ReferenceModel
from krishiv_py.types import to_schema

if TYPE_CHECKING:
    from krishiv_py._typing import Lowering
    from krishiv_py.api.stream import Stream
    from krishiv_py.session import Session

__all__ = [
    "AdvanceWatermark",
    "Close",
    "assert_lowerings_agree",
    "Send",
    "Step",
    "reference_model_for",
    "run_bounded",
    "run_reference",
    "run_reference_bounded",
    "run_reference_late_events",
    "run_streaming",
]

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
Pipeline: TypeAlias = "Callable[[Stream], Stream]"


def _as_rows(rows: Iterable[Row]) -> tuple[Row, ...]:
    return tuple(rows)


@attrs.frozen
class Send:
    """One ``sender.send(rows)``: one step."""

    rows: tuple[Row, ...] = attrs.field(converter=_as_rows)


@attrs.frozen
class AdvanceWatermark:
    """One ``sender.advance_watermark(ts_ms)``."""

    ts_ms: int


@attrs.frozen
class Close:
    """``sender.close()``: end of input."""


Step: TypeAlias = Send | AdvanceWatermark | Close


def reference_model_for(
    stream: Stream, *, clock: Callable[[], float] | None = None, record: bool = False
) -> ReferenceModel:
    """A :class:`ReferenceModel` for a ``source -> watermark -> window -> agg`` pipeline.

    The model gets the pipeline's emission options (trigger, allowed
    lateness, accumulation) and the watermark's future tolerance; ``clock``
    (processing time in ms) drives ``Trigger.on_interval``; ``record=True``
    keeps the model's :attr:`~ReferenceModel.log`.
    """
    plan = stream.plan
    if not isinstance(plan, n.WindowAggregate) or not isinstance(plan.input, n.Watermark):
        raise PlanError("the reference model covers source -> watermark -> [key_by] -> window -> agg")
    wm = plan.input
    if not isinstance(wm.input, n.MemorySource | n.RecordsSource | n.FileSource):
        raise PlanError("the reference model covers pipelines without stateless steps before the window")
    return ReferenceModel(
        window=plan.window,
        event_time=wm.column,
        lag_ms=wm.lag_ms,
        keys=plan.keys,
        aggregates=[AggSpec(name=a.name, func=a.func, column=a.column) for a in plan.aggregates],
        allowed_lateness_ms=plan.emission.allowed_lateness_ms,
        trigger=plan.emission.trigger,
        accumulation=plan.emission.accumulation,
        future_tolerance_ms=wm.future_tolerance_ms,
        clock=clock,
        record=record,
    )


def _placeholder(schema: Any) -> Stream:
    from krishiv_py.api.stream import Stream

    source = n.MemorySource(name="input", schema=to_schema(schema), path="")
    return Stream(cast("Session", None), source)


def _play(
    schema: Any, pipeline: Pipeline, steps: Sequence[Step], observe: Callable[[ReferenceModel], list[Result]]
) -> list[list[Result]]:
    """Play ``steps`` on the reference model; ``observe`` it after each step."""
    model = reference_model_for(pipeline(_placeholder(schema)))
    out = []
    for step in steps:
        if isinstance(step, Send):
            model.send(step.rows)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms)
        else:
            model.close()
        out.append(observe(model))
    return out


def run_reference(schema: Any, pipeline: Pipeline, steps: Sequence[Step]) -> list[list[Result]]:
    """Cumulative reference results after each step."""
    return _play(schema, pipeline, steps, lambda model: model.results)


def run_reference_late_events(schema: Any, pipeline: Pipeline, steps: Sequence[Step]) -> list[list[Result]]:
    """Cumulative reference late events after each step (see :attr:`ReferenceModel.late_events`).

    Each is an invalid or very late input row plus ``classification`` and
    ``watermark_ms``, as a late-event handler receives them.
    """
    return _play(schema, pipeline, steps, lambda model: model.late_events)


def run_reference_bounded(schema: Any, pipeline: Pipeline, rows: Sequence[Row]) -> list[Result]:
    """Reference results of a bounded run: all rows in one step, then end of input."""
    model = reference_model_for(pipeline(_placeholder(schema)))
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
) -> list[list[dict[str, object]]]:
    """Cumulative results of the streaming job after each step (one step = send + process).

    ``lowering`` forces ``"native"`` or ``"stateful"`` instead of the planner's choice.
    """
    stream, sender = session.memory_stream(schema)
    job = pipeline(stream).start(lowering=lowering)
    out = []
    try:
        for step in steps:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            else:
                sender.close()
            job.process_all_available()
            out.append(job.results().to_pylist())
        if sender.closed and not job.await_termination(timeout_s=120):
            raise AssertionError("the job did not finish after close()")
    finally:
        job.stop()
    return out


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
) -> None:
    """Run ``steps`` on the reference model, streaming Spark and bounded Spark; all must agree.

    The streaming job uses the planner's lowering, or ``lowering`` when given.

    Streaming results are compared with the model after every step (so firing
    times are checked); the bounded run gets all rows at once and is compared
    with the model's one-step run.
    """
    expected = run_reference(schema, pipeline, steps)
    actual = run_streaming(session, schema, pipeline, steps, lowering=lowering)
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        try:
            assert_same_rows(got, want)
        except AssertionError as exc:
            raise AssertionError(f"streaming differs after step {i} ({steps[i]!r}):\n{exc}") from None
    rows = [dict(r) for s in steps if isinstance(s, Send) for r in s.rows]
    try:
        assert_same_rows(
            run_bounded(session, schema, pipeline, rows), run_reference_bounded(schema, pipeline, rows)
        )
    except AssertionError as exc:
        raise AssertionError(f"bounded run differs:\n{exc}") from None
