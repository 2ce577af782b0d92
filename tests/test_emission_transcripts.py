"""Transcripts with their expected rows written out by hand: lateness, triggers, accumulation.

The transcripts are data, in ``tests/transcripts/*.json``, as Beam keeps its
trigger transcripts: agreement between the reference model and the Spark
lowerings catches lowering bugs, not model bugs, so here both are held to rows
worked out by hand from SPEC 3.2-3.8, the seeds and peers' tests (Flink's
``WindowOperatorTest``). Each file holds ``{"about": ..., "transcripts": [...]}``;
a transcript is

``name``, ``source``
    What it is and where the case comes from.
``schema``, ``input_columns``, ``output_columns``
    The input schema (Spark DDL) and the column order of the compact rows
    below: input rows and late events are arrays under ``input_columns``
    (late events add ``classification`` and ``watermark_ms``), result rows
    arrays under ``output_columns`` (window bounds in epoch ms).
``pipeline``
    ``event_time``, ``lag_ms``, ``keys``, ``window`` (``kind`` tumbling,
    sliding or session with ``size_ms``/``slide_ms``/``gap_ms``),
    ``allowed_lateness_ms``, ``trigger`` (``kind`` watermark, element,
    ``count`` with ``n``, ``interval`` with ``ms``), ``accumulation``,
    ``aggregates`` (``func`` and ``column``, ``"*"`` for rows), optional
    ``future_tolerance_ms`` and ``late_event_handler: "side_output"``.
``steps``
    Each one of ``{"send": rows}``, ``{"advance_watermark": ms}`` or
    ``{"close": true}``, with ``emits`` (the rows that step emits; required,
    ``[]`` for none), optional ``late`` (the late events it produces) and a
    ``why``.
``metrics``
    Optional event counts after the last step.
``xfail``
    Optional ``{"model": reason}`` / ``{"spark": reason}``: a known
    disagreement with the pinned rows, kept visible as a strict xfail.

Every transcript runs on the reference model (results and late events after
every step, then the counts) and as a streaming job on real Spark (the
planner picks the stateful lowering for these plans): the same rows after
every step, the same late events (``job.late_events()``) and the same counts
(``job.metrics()``). All comparisons are of multisets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import krishiv_py as kp
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.testing import (
    AdvanceWatermark,
    AggSpec,
    Close,
    ReferenceModel,
    Send,
    Step,
    assert_same_rows,
    run_reference,
)
from krishiv_py.testing.steps import run_reference_late_events

TRANSCRIPTS_DIR = Path(__file__).parent / "transcripts"
LATE_COLUMNS = ("classification", "watermark_ms")
METRICS = (
    "input_rows",
    "invalid_events",
    "on_time_events",
    "mildly_late_events",
    "very_late_events",
    "future_events",
    "windows_emitted",
    "retractions",
)
_TRANSCRIPT_KEYS = frozenset(
    {"name", "source", "schema", "pipeline", "input_columns", "output_columns", "steps", "metrics", "xfail"}
)
_STEP_KEYS = frozenset({"send", "advance_watermark", "close", "emits", "late", "why"})
_AGGREGATES: dict[str, Callable[[kp.Expr], kp.AggExpr]] = {
    "count": kp.count,
    "sum": kp.sum,
    "avg": kp.avg,
    "min": kp.min,
    "max": kp.max,
}

Row = dict[str, object]
Pipeline = Callable[[kp.Stream], kp.Stream]


@attrs.frozen(kw_only=True)
class Transcript:
    """One transcript file entry, its rows turned into dicts."""

    name: str
    source: str
    schema: str
    pipeline: Mapping[str, Any]
    steps: tuple[Step, ...]
    emits: tuple[tuple[Row, ...], ...]  # the rows each step emits
    late: tuple[tuple[Row, ...], ...]  # the late events each step produces
    metrics: Mapping[str, int] | None
    xfail: Mapping[str, str]

    @property
    def side_output(self) -> bool:
        return self.pipeline.get("late_event_handler") == "side_output"

    def results_after_each_step(self) -> list[list[Row]]:
        return _cumulative(self.emits)

    def late_after_each_step(self) -> list[list[Row]]:
        return _cumulative(self.late)


def _cumulative(per_step: Sequence[Sequence[Row]]) -> list[list[Row]]:
    out: list[list[Row]] = []
    for rows in per_step:
        out.append([*(out[-1] if out else []), *rows])
    return out


def _as_rows(columns: Sequence[str], arrays: Sequence[Sequence[object]], where: str) -> tuple[Row, ...]:
    for values in arrays:
        if len(values) != len(columns):
            raise ValueError(f"{where}: row {values!r} does not match columns {list(columns)}")
    return tuple(dict(zip(columns, values, strict=True)) for values in arrays)


def _step(raw: Mapping[str, Any], inputs: Sequence[str], where: str) -> Step:
    unknown = set(raw) - _STEP_KEYS
    actions = [key for key in ("send", "advance_watermark", "close") if key in raw]
    if unknown or len(actions) != 1 or "emits" not in raw:
        raise ValueError(
            f"{where}: a step is one of send/advance_watermark/close with emits; got {sorted(raw)}"
        )
    if "send" in raw:
        return Send(_as_rows(inputs, raw["send"], where))
    if "advance_watermark" in raw:
        return AdvanceWatermark(raw["advance_watermark"])
    return Close()


def parse(raw: Mapping[str, Any]) -> Transcript:
    """A :class:`Transcript` from its JSON form (see the module docstring)."""
    name = raw["name"]
    if set(raw) - _TRANSCRIPT_KEYS:
        raise ValueError(f"{name}: unknown keys {sorted(set(raw) - _TRANSCRIPT_KEYS)}")
    inputs, outputs = raw["input_columns"], raw["output_columns"]
    steps, emits, late = [], [], []
    for i, step in enumerate(raw["steps"]):
        where = f"{name} step {i}"
        steps.append(_step(step, inputs, where))
        emits.append(_as_rows(outputs, step["emits"], where))
        late.append(_as_rows([*inputs, *LATE_COLUMNS], step.get("late", []), where))
    metrics = raw.get("metrics")
    if metrics is not None and set(metrics) != set(METRICS):
        raise ValueError(f"{name}: metrics must give exactly {list(METRICS)}")
    if set(raw.get("xfail", {})) - {"model", "spark"}:
        raise ValueError(f"{name}: xfail takes the engines 'model' and 'spark'")
    return Transcript(
        name=name,
        source=raw["source"],
        schema=raw["schema"],
        pipeline=raw["pipeline"],
        steps=tuple(steps),
        emits=tuple(emits),
        late=tuple(late),
        metrics=metrics,
        xfail=raw.get("xfail", {}),
    )


def load_transcripts() -> dict[str, Transcript]:
    out: dict[str, Transcript] = {}
    for path in sorted(TRANSCRIPTS_DIR.glob("*.json")):
        for raw in json.loads(path.read_text(encoding="utf-8"))["transcripts"]:
            transcript = parse(raw)
            if transcript.name in out:
                raise ValueError(f"transcript name {transcript.name!r} is used twice")
            out[transcript.name] = transcript
    return out


TRANSCRIPTS = load_transcripts()


# --- the pipeline a transcript describes ----------------------------------------------------------


def _trigger(spec: Mapping[str, Any]) -> kp.Trigger:
    kind = spec["kind"]
    if kind == "watermark":
        return kp.Trigger.on_watermark()
    if kind == "element":
        return kp.Trigger.on_every_element()
    if kind == "count":
        return kp.Trigger.on_count(spec["n"])
    if kind == "interval":
        return kp.Trigger.on_interval(spec["ms"])
    raise ValueError(f"unknown trigger kind {kind!r}")


def _aggregate(spec: Mapping[str, str]) -> kp.AggExpr:
    return _AGGREGATES[spec["func"]](kp.col(spec["column"]))


def pipeline_of(p: Mapping[str, Any]) -> Pipeline:
    """The builder calls for the transcript's ``pipeline`` description."""

    def build(stream: kp.Stream) -> kp.Stream:
        tolerance = p.get("future_tolerance_ms", DEFAULT_FUTURE_TOLERANCE_MS)
        timed = stream.watermark(p["event_time"], p["lag_ms"], future_tolerance_ms=tolerance)
        keyed: kp.Stream | kp.KeyedStream = timed.key_by(*p["keys"]) if p["keys"] else timed
        window = p["window"]
        if window["kind"] == "tumbling":
            windowed = keyed.tumbling_window(window["size_ms"])
        elif window["kind"] == "sliding":
            windowed = keyed.sliding_window(window["size_ms"], window["slide_ms"])
        else:
            windowed = keyed.session_window(window["gap_ms"])
        windowed = (
            windowed.allowed_lateness(p["allowed_lateness_ms"])
            .trigger(_trigger(p["trigger"]))
            .accumulation(p["accumulation"])
        )
        if p.get("late_event_handler") == "side_output":
            windowed = windowed.with_late_event_handler(kp.SideOutputLateEventHandler())
        return windowed.agg(*(_aggregate(a) for a in p["aggregates"]))

    return build


def reference_model_of(p: Mapping[str, Any]) -> ReferenceModel:
    """The reference model for the same description, built directly (for its counters)."""
    window = p["window"]
    spec: TumblingWindow | SlidingWindow | SessionWindow
    if window["kind"] == "tumbling":
        spec = TumblingWindow(size_ms=window["size_ms"])
    elif window["kind"] == "sliding":
        spec = SlidingWindow(size_ms=window["size_ms"], slide_ms=window["slide_ms"])
    else:
        spec = SessionWindow(gap_ms=window["gap_ms"])
    aggregates = [
        AggSpec(name=f"a{i}", func=a["func"], column=None if a["column"] == "*" else a["column"])
        for i, a in enumerate(p["aggregates"])
    ]
    return ReferenceModel(
        window=spec,
        event_time=p["event_time"],
        lag_ms=p["lag_ms"],
        keys=p["keys"],
        aggregates=aggregates,
        allowed_lateness_ms=p["allowed_lateness_ms"],
        trigger=_trigger(p["trigger"]),
        accumulation=p["accumulation"],
        future_tolerance_ms=p.get("future_tolerance_ms", DEFAULT_FUTURE_TOLERANCE_MS),
    )


# --- checks -----------------------------------------------------------------------------------------


def _assert_each_step(
    t: Transcript, what: str, actual: Sequence[Sequence[Mapping[str, object]]], expected: list[list[Row]]
) -> None:
    assert len(actual) == len(expected)
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        try:
            assert_same_rows(got, want)
        except AssertionError as exc:
            raise AssertionError(f"{t.name}: {what} differ after step {i} ({t.steps[i]!r}):\n{exc}") from None


def _assert_metrics(t: Transcript, counts: Mapping[str, object]) -> None:
    assert t.metrics is not None
    assert {name: counts[name] for name in METRICS} == dict(t.metrics), f"{t.name}: event counts"


def _params(engine: str) -> list[Any]:
    return [
        pytest.param(
            name,
            marks=[pytest.mark.xfail(strict=True, reason=TRANSCRIPTS[name].xfail[engine])]
            if engine in TRANSCRIPTS[name].xfail
            else [],
        )
        for name in sorted(TRANSCRIPTS)
    ]


def test_transcripts_are_loaded() -> None:
    """Guard against a vacuous suite: every file parsed, and the cases the transcripts promise are there."""
    assert len(TRANSCRIPTS) >= 10
    lates = [row for t in TRANSCRIPTS.values() for step in t.late for row in step]
    assert {row["classification"] for row in lates} == {"very_late", "invalid"}
    assert {t.pipeline["accumulation"] for t in TRANSCRIPTS.values()} == {
        "accumulating",
        "discarding",
        "retracting",
    }
    for t in TRANSCRIPTS.values():
        assert t.late == tuple(() for _ in t.steps) or t.side_output, f"{t.name}: late events need a handler"


@pytest.mark.parametrize("name", _params("model"))
def test_reference_model_gives_the_pinned_rows(name: str) -> None:
    t = TRANSCRIPTS[name]
    build = pipeline_of(t.pipeline)
    _assert_each_step(t, "results", run_reference(t.schema, build, t.steps), t.results_after_each_step())
    late = run_reference_late_events(t.schema, build, t.steps)
    _assert_each_step(t, "late events", late, t.late_after_each_step())
    if t.metrics is not None:
        model = reference_model_of(t.pipeline)
        for step in t.steps:
            if isinstance(step, Send):
                model.send(step.rows)
            elif isinstance(step, AdvanceWatermark):
                model.advance_watermark(step.ts_ms)
            else:
                model.close()
        _assert_metrics(t, attrs.asdict(model.metrics))


@attrs.frozen
class StreamingRun:
    results: list[list[Row]]
    late: list[list[Row]]
    metrics: kp.JobMetrics


def run_job(session: kp.Session, t: Transcript) -> StreamingRun:
    """Play the steps on a streaming job; results (and late events) after every step, then the metrics."""
    stream, sender = session.memory_stream(t.schema)
    job = pipeline_of(t.pipeline)(stream).start()
    results: list[list[Row]] = []
    late: list[list[Row]] = []
    try:
        for step in t.steps:
            if isinstance(step, Send):
                sender.send([dict(row) for row in step.rows])
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            else:
                sender.close()
            job.process_all_available()
            results.append(job.results().to_pylist())
            if t.side_output:
                late.append(job.late_events().to_pylist())
        if sender.closed:
            assert job.await_termination(timeout_s=120), f"{t.name}: the job did not finish after close()"
        metrics = job.metrics()
    finally:
        job.stop()
    return StreamingRun(results, late, metrics)


@pytest.mark.spark
@pytest.mark.parametrize("name", _params("spark"))
def test_streaming_job_gives_the_pinned_rows(session: kp.Session, name: str) -> None:
    t = TRANSCRIPTS[name]
    run = run_job(session, t)
    _assert_each_step(t, "results", run.results, t.results_after_each_step())
    if t.side_output:
        _assert_each_step(t, "late events", run.late, t.late_after_each_step())
    if t.metrics is not None:
        _assert_metrics(t, attrs.asdict(run.metrics))
