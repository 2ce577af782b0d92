"""Run one scenario cut into micro-batches at chosen places, on the model and on Spark.

:mod:`krishiv_py.testing.steps` processes after every step. Real input does
not arrive that politely: several sends can wait while a micro-batch runs,
a watermark advance can land right before a row, and a row can follow an
advance with no empty micro-batch between them. Here a scenario is a list
of *groups*; the steps of one group are sent back to back and then the job
processes them all (``process_all_available()``), so every step is still
its own micro-batch (a memory stream reads one send per micro-batch), but
nothing runs between the micro-batches of a group. Results, the watermark
and the very late count are compared after every group.

The model plays the same steps one by one, each a micro-batch, which is
what the specification says they are (SPEC 3.4: the watermark in force
for a micro-batch is the one computed at the end of the one before).
A group's steps must come from one source: Spark takes one waiting send of
*each* source into a micro-batch, so sends of two sources in one group
would make micro-batches whose cut depends on timing.

Examples
--------
>>> import krishiv_py as kp
>>> from krishiv_py.testing import AdvanceWatermark, Send
>>> build = lambda s: s.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))
>>> groups = [[Send([{"t": 5}])], [AdvanceWatermark(30), Send([{"t": 8}])]]
>>> seen = run_reference_batched("t bigint", build, groups)
>>> seen[-1].results, seen[-1].watermark_ms, seen[-1].very_late_events
([{'window_start': 0, 'window_end': 10, 'count': 1}], 30, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.model.steps import AdvanceProcessingTime, Send, Step, model_for
from krishiv_py.plan import nodes as n
from krishiv_py.plan.nodes import KIND_COLUMN
from krishiv_py.testing.compare import assert_same_rows
from krishiv_py.testing.steps import Pipeline, _model_source, _model_step, _placeholder, _send_step

if TYPE_CHECKING:
    from krishiv_py._typing import Lowering
    from krishiv_py.session import Session

__all__ = [
    "Group",
    "Observed",
    "assert_batchings_agree",
    "assert_observed_agree",
    "run_reference_batched",
    "run_streaming_batched",
]

#: Steps sent back to back, then processed together (one micro-batch each).
Group = Sequence[Step]


@attrs.frozen(kw_only=True)
class Observed:
    """What one engine shows after a group: its results so far, its watermark, its very late rows.

    ``very_late_events`` is ``None`` where the engine does not count them
    (the native lowering's windows: Spark drops them inside its operator).
    ``input_rows``: the data rows read so far.
    """

    results: list[dict[str, Any]]
    watermark_ms: int | None
    very_late_events: int | None
    input_rows: int | None


def _check_groups(groups: Sequence[Group], sources: Sequence[str]) -> None:
    for i, group in enumerate(groups):
        named = {
            _model_source(step, sources) for step in group if not isinstance(step, AdvanceProcessingTime)
        }
        if len(named) > 1:
            raise PlanError(
                f"group {i} has steps of several sources ({sorted(named)}): Spark takes one waiting "
                "send of each source into a micro-batch, so such a group's micro-batches depend on "
                "timing; give each group the steps of one source"
            )
        if any(isinstance(step, AdvanceProcessingTime) for step in group):
            raise PlanError("a batched scenario has no processing time: its groups are event-time steps")


def run_reference_batched(
    schema: Any, pipeline: Pipeline, groups: Sequence[Group], *, sources: Sequence[str] = ("input",)
) -> list[Observed]:
    """What the model shows after each group (each step of it one micro-batch)."""
    _check_groups(groups, sources)
    built = pipeline(*(_placeholder(schema, name) for name in sources))
    model = model_for(built)
    plan = built.plan
    left = {s.name for s in n.sources_of(plan.left)} if isinstance(plan, n.Join) else set()
    names = set(n.schema_of(plan).names)
    out = []
    sent = 0
    for group in groups:
        for step in group:
            _model_step(model, step, _model_source(step, sources), left)
            sent += len(step.rows) if isinstance(step, Send) else 0
        late = sum(1 for e in model.late_events if e.get("classification") == "very_late")
        out.append(
            Observed(
                results=_as_output(model.results, names),
                watermark_ms=model.watermark_ms,
                very_late_events=late,
                input_rows=sent,
            )
        )
    return out


def _as_output(results: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """The model's rows as the pipeline's output shows them: a window top-N's model marks every
    row ``kind``; an output without that column (the window fires once) holds its emits, and a
    retraction stays marked, so that it differs from any output row."""
    if KIND_COLUMN in names:
        return results
    return [
        {k: v for k, v in row.items() if k != KIND_COLUMN} if row.get(KIND_COLUMN, "emit") == "emit" else row
        for row in results
    ]


def run_streaming_batched(
    session: Session,
    schema: Any,
    pipeline: Pipeline,
    groups: Sequence[Group],
    *,
    lowering: Lowering | None = None,
    sources: Sequence[str] = ("input",),
) -> list[Observed]:
    """What a streaming job shows after each group: its steps sent back to back, then processed."""
    _check_groups(groups, sources)
    pairs = [session.memory_stream(schema, name=name if len(sources) > 1 else None) for name in sources]
    senders = {name: sender for name, (_, sender) in zip(sources, pairs, strict=True)}
    job = pipeline(*(stream for stream, _ in pairs)).start(lowering=lowering)
    out = []
    try:
        for group in groups:
            for step in group:
                assert not isinstance(step, AdvanceProcessingTime)  # _check_groups refused it
                _send_step(step, senders, sources)
            job.process_all_available()
            metrics = job.metrics()
            out.append(
                Observed(
                    results=job.results().to_pylist(),
                    watermark_ms=job.watermark_ms,
                    very_late_events=metrics.very_late_events,
                    input_rows=metrics.input_rows,
                )
            )
        if all(s.closed for s in senders.values()) and not job.await_termination(timeout_s=120):
            raise AssertionError("the job did not finish after close()")
    finally:
        job.stop()
    return out


def assert_batchings_agree(
    session: Session,
    schema: Any,
    pipeline: Pipeline,
    groups: Sequence[Group],
    *,
    lowering: Lowering | None = None,
    sources: Sequence[str] = ("input",),
    expected: Sequence[Observed] | None = None,
) -> list[Observed]:
    """Run ``groups`` on the model and on a streaming job; raise ``AssertionError`` at the first
    group after which they differ (results, watermark, very late rows where the job counts them,
    data rows read). Returns what the job showed. ``expected``: the model's, when already played.
    """
    if expected is None:
        expected = run_reference_batched(schema, pipeline, groups, sources=sources)
    got = run_streaming_batched(session, schema, pipeline, groups, lowering=lowering, sources=sources)
    assert_observed_agree(got, expected, groups)
    return got


def assert_observed_agree(got: Sequence[Observed], want: Sequence[Observed], groups: Sequence[Group]) -> None:
    """Raise ``AssertionError`` at the first group after which ``got`` (a job) differs from ``want``
    (the model): results, watermark, very late rows where the job counts them, rows read.

    >>> a = Observed(results=[{"x": 1}], watermark_ms=5, very_late_events=None, input_rows=1)
    >>> assert_observed_agree([a], [attrs.evolve(a, very_late_events=3)], [[]])
    >>> assert_observed_agree([a], [attrs.evolve(a, watermark_ms=6)], [[]])
    Traceback (most recent call last):
    ...
    AssertionError: watermark differs after group 0 ([]): job 5, model 6
    """
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        where = f"after group {i} ({list(groups[i])!r})"
        try:
            assert_same_rows(g.results, w.results)
        except AssertionError as exc:
            raise AssertionError(f"results differ {where}:\n{exc}") from None
        if g.watermark_ms != w.watermark_ms:
            raise AssertionError(f"watermark differs {where}: job {g.watermark_ms}, model {w.watermark_ms}")
        if g.very_late_events is not None and g.very_late_events != w.very_late_events:
            raise AssertionError(
                f"very late rows differ {where}: job {g.very_late_events}, model {w.very_late_events}"
            )
        if g.input_rows is not None and g.input_rows != w.input_rows:
            raise AssertionError(f"input rows differ {where}: job {g.input_rows}, model {w.input_rows}")
