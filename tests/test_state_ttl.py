"""State TTL (SPEC 3.9): ``with_state_ttl(StateTtlConfig(ttl_ms=..., time=...))``."""

from __future__ import annotations

import time

import pytest

import krishiv_py as kp
from krishiv_py.errors import PlanError
from krishiv_py.testing import (
    AdvanceWatermark,
    ManualClock,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
)
from krishiv_py.testing.steps import _placeholder, reference_model_for

SCHEMA = "k string, t bigint"


def kept_long(stream: kp.Stream) -> kp.Stream:
    """10 ms windows kept 1 s for late rows, but only 50 ms after their newest row."""
    return (
        stream.watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .allowed_lateness(1_000)
        .with_state_ttl(kp.StateTtlConfig(ttl_ms=50))
        .agg(kp.count(kp.col("*")).alias("n"))
    )


STEPS: list[Step] = [
    Send([{"k": "a", "t": 1}, {"k": "a", "t": 5}]),
    AdvanceWatermark(30),  # [0, 10) fires; kept for late rows (1 s of lateness)
    Send([{"k": "a", "t": 3}]),  # mildly late: [0, 10) fires again with 3 rows
    AdvanceWatermark(100),  # the newest row (5) is 95 ms behind: expired, out of state
    Send([{"k": "a", "t": 4}]),  # already 96 ms behind, past the TTL: very late
]


def test_expired_windows_leave_state_and_later_rows_are_very_late() -> None:
    model = reference_model_for(kept_long(_placeholder(SCHEMA)))
    model.send(STEPS[0].rows)  # type: ignore[union-attr]
    model.advance_watermark(30)
    model.send([{"k": "a", "t": 3}])
    assert [r["n"] for r in model.results] == [2, 3]
    assert model.state_windows() != []
    model.advance_watermark(100)
    assert model.state_windows() == [] and model.metrics.state_evictions == 1
    model.send([{"k": "a", "t": 4}])
    assert [e["classification"] for e in model.late_events] == ["very_late"]


def test_an_expired_window_that_never_fired_fires_first() -> None:
    def sessions(stream: kp.Stream) -> kp.Stream:
        windowed = (
            stream.watermark("t", 0).session_window(1_000).with_state_ttl(kp.StateTtlConfig(ttl_ms=100))
        )
        return windowed.agg(kp.count(kp.col("*")).alias("n"))

    model = reference_model_for(sessions(_placeholder(SCHEMA)))
    model.send([{"k": "a", "t": 0}, {"k": "a", "t": 10}])
    assert model.results == []  # the session ends at 1,010
    model.advance_watermark(110)  # 100 ms after its newest row: fires early, then leaves state
    assert_same_rows(model.results, [{"window_start": 0, "window_end": 1_010, "n": 2}])
    assert model.metrics.state_evictions == 1 and model.state_windows() == []


def quiet_sessions(stream: kp.Stream, ttl_ms: int) -> kp.Stream:
    """Hour-long session gaps: only the processing-time TTL ends a session here."""
    return (
        stream.watermark("t", 0)
        .key_by("k")
        .session_window(3_600_000)
        .with_state_ttl(kp.StateTtlConfig(ttl_ms=ttl_ms, time="processing"))
        .agg(kp.count(kp.col("*")).alias("n"))
    )


def test_processing_time_ttl_in_the_model() -> None:
    clock = ManualClock()
    model = reference_model_for(quiet_sessions(_placeholder(SCHEMA), 1_000), clock=clock)
    model.send([{"k": "a", "t": 0}, {"k": "b", "t": 5}])
    model.advance_processing_time(600)
    model.send([{"k": "b", "t": 10}])  # b was updated 600 ms after a
    model.advance_processing_time(400)  # a: 1 s without a row -> fires, leaves state
    assert_same_rows(model.results, [{"k": "a", "window_start": 0, "window_end": 3_600_000, "n": 1}])
    assert [w.key for w in model.state_windows()] == [("b",)]
    assert model.metrics.state_evictions == 1
    model.send([{"k": "a", "t": 20}])  # not late: a new session for a
    assert model.late_events == []
    model.advance_processing_time(1_000)
    assert sorted((r["k"], r["n"]) for r in model.results) == [("a", 1), ("a", 1), ("b", 2)]
    assert model.metrics.state_evictions == 3 and model.state_windows() == []


def test_processing_time_ttl_on_spark(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = quiet_sessions(stream, 1_500).start()
    try:
        sender.send([{"k": "a", "t": 0}, {"k": "a", "t": 10}])
        job.process_all_available()
        deadline = time.monotonic() + 60
        while job.metrics().state_evictions == 0 and time.monotonic() < deadline:
            time.sleep(0.3)  # the job wakes the key's bucket when its window expires
            job.process_all_available()
        m = job.metrics()
        assert (m.state_evictions, m.state_windows) == (1, 0)
        assert_same_rows(
            job.results().to_pylist(), [{"k": "a", "window_start": 0, "window_end": 3_600_010, "n": 2}]
        )
        sender.send([{"k": "a", "t": 5}])  # behind the watermark, but its session is gone: a new one
        job.process_all_available()
        m = job.metrics()
        assert (m.very_late_events, m.mildly_late_events) == (0, 1)
        # Held as a new window, unless a slow machine let it expire again already.
        assert (m.state_windows, m.state_evictions) in ((1, 1), (0, 2))
    finally:
        job.stop()


def test_ttl_on_spark_counts_evictions(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = kept_long(stream).start()
    try:
        for step in STEPS:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            job.process_all_available()
        m = job.metrics()
        assert m.state_evictions == 1
        assert m.very_late_events == 1 and m.mildly_late_events == 1
        assert m.state_windows == 0
        assert [r["n"] for r in job.results().to_pylist()] == [2, 3]
        assert "krishiv_window_state_evictions_total 1" in m.to_prometheus()
    finally:
        job.stop()


def test_ttl_lowerings_agree(session: kp.Session) -> None:
    assert_lowerings_agree(session, SCHEMA, kept_long, STEPS)


def test_state_ttl_rules(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    timed = stream.watermark("t", 0)
    with pytest.raises(PlanError, match="ttl_ms\\) must be > 0"):
        kp.StateTtlConfig(ttl_ms=0)
    with pytest.raises(PlanError, match="is 'event' or 'processing', got 'wall'"):
        kp.StateTtlConfig(ttl_ms=10, time="wall")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="takes a StateTtlConfig"):
        timed.tumbling_window(10).with_state_ttl(50)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="does not apply to event-sliding windows"):
        timed.event_sliding_window(10).with_state_ttl(kp.StateTtlConfig(ttl_ms=5))
    plan = timed.tumbling_window(10).with_state_ttl(kp.StateTtlConfig(ttl_ms=50)).agg(kp.count(kp.col("*")))
    text = plan.explain(show=False)
    assert "== Lowering: stateful ==" in text and "state TTL (50 ms of event time)" in text
