"""Time-interval panes (SPEC 3.3, IBM Streams SPL ``timeInterval`` windows).

The SPL seed's example (interval 10, creation period 5, discard age 15),
re-firing only on new rows, deletion after the discard age, pane events and
their order: pinned transcripts on the reference model, then the same steps
on the stateful lowering (streaming and bounded) with the events its
callbacks receive.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.errors import JobError, PlanError
from krishiv_py.testing import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
    run_reference,
)
from krishiv_py.testing.steps import _placeholder, reference_model_for

SCHEMA = "k string, t bigint"


def panes(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("t", 0)
        .key_by("k")
        .time_interval_window(10, 5, 15)
        .agg(kp.count(kp.col("*")).alias("n"))
    )


def r(k: str, t: int) -> dict[str, object]:
    return {"k": k, "t": t}


def pane(k: str, start: int, n: int) -> dict[str, object]:
    return {"k": k, "window_start": start, "window_end": start + 10, "n": n}


#: The SPL seed: T(7) is in [0, 10) and [5, 15); T(10) is not in [0, 10). Each entry: a step and
#: the rows it emits. Panes close at end + 15.
SPL: list[tuple[Step, list[dict[str, object]]]] = [
    # the watermark becomes 10: [0, 10) fires, holding T(7) only
    (Send([r("a", 7), r("a", 10)]), [pane("a", 0, 1)]),
    (AdvanceWatermark(10), []),  # no change
    (AdvanceWatermark(12), []),  # nothing new: no firing
    # T(3) opens [-5, 5) (already due: it fires at once) and re-fires [0, 10); T(8) opens b's panes
    (Send([r("a", 3), r("b", 8)]), [pane("a", -5, 1), pane("a", 0, 2), pane("b", 0, 1)]),
    (AdvanceWatermark(15), [pane("a", 5, 2), pane("b", 5, 1)]),  # [5, 15): T(7), T(10) / T(8)
    (AdvanceWatermark(20), [pane("a", 10, 1)]),  # [-5, 5) closes at 20
    (Send([r("a", 4)]), [pane("a", 0, 3)]),  # [-5, 5) is gone; [0, 10) is kept until 25 and fires again
    (AdvanceWatermark(25), []),  # [0, 10) closes
    (Send([r("a", 9)]), [pane("a", 5, 3)]),  # only [5, 15) still holds T(9)
    (Close(), []),
]


def _events(events: list[kp.PaneEvent]) -> list[tuple[str, tuple[object, ...], int, int]]:
    return [(e.kind, e.key, e.window_start_ms, int(e.values["n"])) for e in events]  # type: ignore[call-overload]


#: The pane events of SPL, in order (kind, key, start, n).
SPL_EVENTS = [
    ("initial_full", ("a",), 0, 1),
    ("trigger", ("a",), 0, 1),
    ("initial_full", ("a",), -5, 1),
    ("trigger", ("a",), -5, 1),
    ("trigger", ("a",), 0, 2),
    ("initial_full", ("b",), 0, 1),
    ("trigger", ("b",), 0, 1),
    ("initial_full", ("a",), 5, 2),
    ("trigger", ("a",), 5, 2),
    ("initial_full", ("b",), 5, 1),
    ("trigger", ("b",), 5, 1),
    ("initial_full", ("a",), 10, 1),
    ("trigger", ("a",), 10, 1),
    ("close", ("a",), -5, 1),
    ("trigger", ("a",), 0, 3),
    ("close", ("a",), 0, 3),
    ("close", ("b",), 0, 1),
    ("trigger", ("a",), 5, 3),
    ("close", ("a",), 5, 3),
    ("close", ("b",), 5, 1),
    ("close", ("a",), 10, 1),
]


def test_spl_example_on_the_reference_model() -> None:
    model = reference_model_for(panes(_placeholder(SCHEMA)))
    for step, want in SPL:
        if isinstance(step, Send):
            got = model.send(step.rows)
        elif isinstance(step, AdvanceWatermark):
            got = model.advance_watermark(step.ts_ms)
        else:
            got = model.close()
        assert_same_rows(got, want)
    assert _events(model.pane_events) == SPL_EVENTS
    assert [e["t"] for e in model.late_events] == []  # T(4) joined [0, 10); nothing was very late


def test_rows_for_a_deleted_pane_are_very_late() -> None:
    model = reference_model_for(panes(_placeholder(SCHEMA)))
    model.send([r("a", 7)])
    model.advance_watermark(30)  # [0, 10) and [5, 15) are deleted (end + 15 <= 30)
    assert model.send([r("a", 8)]) == []
    assert [(e["t"], e["classification"]) for e in model.late_events] == [(8, "very_late")]


def test_builder_rules_for_time_interval_windows(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    timed = stream.watermark("t", 0)
    windowed = timed.time_interval_window(10, 5, 15)
    assert windowed.emission.allowed_lateness_ms == 15
    with pytest.raises(PlanError, match="creation_period_ms \\(20\\) must be <= interval_ms \\(10\\)"):
        timed.time_interval_window(10, 20, 0)
    with pytest.raises(PlanError, match="discard_age_ms must be >= 0"):
        timed.time_interval_window(10, 5, -1)
    with pytest.raises(PlanError, match="allowed_lateness\\(\\) does not apply to time-interval panes"):
        windowed.allowed_lateness(5)
    with pytest.raises(PlanError, match="does not apply to time-interval panes"):
        windowed.trigger(kp.Trigger.on_count(2))
    with pytest.raises(PlanError, match="accumulation\\('discarding'\\) does not apply"):
        windowed.accumulation("discarding")
    with pytest.raises(PlanError, match="on_close\\(\\) observes the panes of time_interval_window"):
        timed.tumbling_window(10).on_close(print)
    with pytest.raises(PlanError, match="takes a function of one PaneEvent"):
        windowed.on_trigger(42)  # type: ignore[arg-type]
    plan = windowed.on_close(print).agg(kp.count(kp.col("*")))
    explained = plan.explain(show=False)
    assert "time_interval(interval_ms=10, creation_period_ms=5, discard_age_ms=15)" in explained
    assert "== Lowering: stateful ==" in explained
    assert "a time interval window" in explained  # why: the native lowering cannot run it


class Recorder:
    def __init__(self) -> None:
        self.events: list[kp.PaneEvent] = []

    def __call__(self, event: kp.PaneEvent) -> None:
        self.events.append(event)


def _with_callbacks(rec: Recorder) -> Any:
    def build(stream: kp.Stream) -> kp.Stream:
        return (
            stream.watermark("t", 0)
            .key_by("k")
            .time_interval_window(10, 5, 15)
            .on_initial_full(rec)
            .on_trigger(rec)
            .on_close(rec)
            .agg(kp.count(kp.col("*")).alias("n"))
        )

    return build


def test_spl_example_on_spark_with_pane_events(session: kp.Session) -> None:
    rec = Recorder()
    stream, sender = session.memory_stream(SCHEMA)
    job = _with_callbacks(rec)(stream).start()
    assert job.lowering == "stateful"
    seen = 0
    try:
        for step, want in SPL:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            else:
                sender.close()
            job.process_all_available()
            rows = job.results().to_pylist()
            got = [
                {**row, "window_start": _ms(row["window_start"]), "window_end": _ms(row["window_end"])}
                for row in rows[seen:]
            ]
            seen = len(rows)
            assert_same_rows(got, want)
        assert job.await_termination(timeout_s=120)
    finally:
        job.stop()
    assert _events(rec.events) == SPL_EVENTS


def test_bounded_panes_fire_once_then_close(session: kp.Session) -> None:
    rec = Recorder()
    rows = [r("a", 7), r("a", 10), r("a", 3), r("b", 8)]
    got = _with_callbacks(rec)(session.from_records(rows, SCHEMA)).collect().to_pylist()
    model = reference_model_for(_with_callbacks(Recorder())(_placeholder(SCHEMA)))
    model.send(rows)
    model.close()
    assert_same_rows(
        [{**g, "window_start": _ms(g["window_start"]), "window_end": _ms(g["window_end"])} for g in got],
        model.results,
    )
    assert _events(rec.events) == _events(model.pane_events)
    kinds = [e.kind for e in rec.events]
    assert kinds.count("initial_full") == kinds.count("trigger") == kinds.count("close") == len(got)


def test_a_raising_callback_fails_the_job(session: kp.Session) -> None:
    def boom(event: kp.PaneEvent) -> None:
        raise RuntimeError(f"no thanks: {event.window_start_ms}")

    stream, sender = session.memory_stream(SCHEMA)
    job = (
        stream.watermark("t", 0)
        .time_interval_window(10, 5, 0)
        .on_trigger(boom)
        .agg(kp.count(kp.col("*")))
        .start()
    )
    try:
        sender.send([r("a", 7)])
        sender.advance_watermark(20)
        with pytest.raises(JobError, match="no thanks"):
            job.process_all_available()
        assert job.state == "failed"
    finally:
        job.stop()
    with pytest.raises(JobError, match="no thanks"):
        stream.watermark("t", 0).time_interval_window(10, 5, 0).on_close(boom).agg(
            kp.count(kp.col("*"))
        ).collect()


def _ms(value: Any) -> int:
    return int(value.timestamp() * 1000)


times = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 60)), min_size=1, max_size=12)


@settings(max_examples=1, deadline=None)
@given(
    batches=st.lists(times, min_size=1, max_size=4),
    marks=st.lists(st.integers(0, 80), min_size=4, max_size=4),
)
def test_model_streaming_and_bounded_agree(
    session: kp.Session, batches: list[list[tuple[str, int]]], marks: list[int]
) -> None:
    steps: list[Step] = []
    for batch, mark in zip(batches, marks, strict=False):
        steps += [Send([r(k, t) for k, t in batch]), AdvanceWatermark(mark)]
    steps.append(Close())
    assert_lowerings_agree(session, SCHEMA, panes, steps)


def test_run_reference_gives_the_spl_results() -> None:
    cumulative = run_reference(SCHEMA, panes, [s for s, _ in SPL])
    assert len(cumulative[-1]) == sum(len(want) for _, want in SPL)
