"""Idle sources (SPEC 3.4): a quiet source is left out of the overall watermark.

The decision rule (``idle_targets``) and the reference model run without
Spark; the same scenario then runs on both streaming lowerings with the
scenario's processing-time clock, and once on real time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.runtime.idle import idle_targets
from krishiv_py.testing import (
    AdvanceProcessingTime,
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    run_reference_late_events,
)
from krishiv_py.testing.steps import ManualClock, _placeholder, reference_model_for

SCHEMA = "k string, t bigint"
LAG = kp.WatermarkSpec.fixed_lag_ms("t", 0)
SPEC = kp.MultiSourceWatermarkSpec().source("a", LAG).source("b", LAG).idle_timeout_ms(1_000)


def per_100ms(a: kp.Stream, b: kp.Stream) -> kp.Stream:
    return a.union(b).with_watermark(SPEC).tumbling_window(100).agg(kp.count(kp.col("*")))


def row(t: int, k: str = "x") -> dict[str, object]:
    return {"k": k, "t": t}


#: Each entry: the step, then (A's watermark, B's watermark, overall, idle sources, windows fired).
#: Idle timeout 1 s for both; processing time starts at 0 with the job.
IDLE: list[tuple[Step, tuple[int | None, int | None, int | None, set[str], int]]] = [
    (Send([row(10)], source="a"), (10, None, None, set(), 0)),
    (Send([row(20)], source="b"), (10, 20, 10, set(), 0)),
    (Send([row(250)], source="a"), (250, 20, 20, set(), 0)),
    (AdvanceProcessingTime(500), (250, 20, 20, set(), 0)),  # 0.5 s: nobody idle yet
    (Send([row(260)], source="a"), (260, 20, 20, set(), 0)),  # A active at 0.5 s
    # 1.1 s: B has sent nothing for 1.1 s -> idle; overall = A's 260: [0, 100) fires
    (AdvanceProcessingTime(600), (260, 20, 260, {"b"}, 1)),
    # B is back: 30 is behind the overall watermark (very late), 320 moves B to 320;
    # the overall watermark stays at 260 (min(260, 320)), it does not go back to 20.
    (Send([row(30), row(320)], source="b"), (260, 320, 260, set(), 1)),
    (Send([row(420)], source="a"), (420, 320, 320, set(), 2)),  # min(420, 320): [200, 300) fires
    (AdvanceProcessingTime(5_000), (420, 320, 320, {"a", "b"}, 2)),  # everyone idle: it stays
    # B active, A idle since 1.1 s: the overall watermark is B's 500 alone
    (Send([row(500)], source="b"), (420, 500, 500, {"a"}, 4)),  # [300, 400) and [400, 500) fire
    (Close(source="a"), (END_OF_TIME_MS, 500, 500, set(), 4)),
    (Close(source="b"), (END_OF_TIME_MS, END_OF_TIME_MS, END_OF_TIME_MS, set(), 5)),
]


# --- the rule, without Spark ------------------------------------------------------------


def test_idle_targets_lift_idle_sources_to_the_minimum_of_the_active_ones() -> None:
    timeouts = {"a": 1_000, "b": 1_000, "c": 1_000}
    idle, targets = idle_targets(
        now_ms=5_000,
        timeouts=timeouts,
        last_active_ms={"a": 4_500, "b": 4_900, "c": 1_000},
        watermarks={"a": 300, "b": 700, "c": 50},
    )
    assert idle == {"c"}
    assert targets == {"c": 300}  # never beyond what the active sources allow


def test_idle_targets_do_nothing_while_no_source_is_active_or_one_has_no_watermark() -> None:
    timeouts = {"a": 1_000, "b": 1_000}
    all_idle = idle_targets(
        now_ms=9_000, timeouts=timeouts, last_active_ms={"a": 0, "b": 0}, watermarks={"a": 5, "b": 9}
    )
    assert all_idle == (frozenset({"a", "b"}), {})
    no_watermark = idle_targets(
        now_ms=9_000, timeouts=timeouts, last_active_ms={"a": 8_500, "b": 0}, watermarks={"b": 9}
    )
    assert no_watermark == (frozenset({"b"}), {})


def test_idle_targets_skip_sources_already_there_and_never_idle_ones() -> None:
    idle, targets = idle_targets(
        now_ms=9_000,
        timeouts={"a": 1_000, "b": 1_000, "c": None},
        last_active_ms={"a": 8_900, "b": 0, "c": 0},
        watermarks={"a": 100, "b": 100, "c": 400},
    )
    assert idle == {"b"}
    assert targets == {}  # b's operator already holds 100; c has no timeout


def test_a_closed_source_is_never_idle_and_counts_as_the_end_of_time() -> None:
    idle, targets = idle_targets(
        now_ms=9_000,
        timeouts={"a": 1_000, "b": 1_000},
        last_active_ms={"a": 0, "b": 0},
        watermarks={"a": END_OF_TIME_MS, "b": 40},
    )
    assert idle == {"b"}
    assert targets == {"b": END_OF_TIME_MS}


# --- the builder ----------------------------------------------------------------------------


def test_multi_source_spec_puts_a_watermark_on_each_named_stream(session: kp.Session) -> None:
    a, _ = session.memory_stream(SCHEMA, name="ms_a")
    b, _ = session.memory_stream(SCHEMA, name="ms_b")
    spec = (
        kp.MultiSourceWatermarkSpec()
        .source("ms_a", kp.WatermarkSpec.fixed_lag_ms("t", 5))
        .source("ms_b", kp.WatermarkSpec.fixed_lag_ms("t", 30))
        .idle_timeout_ms(2_000)
    )
    via_spec = a.union(b).with_watermark(spec)
    by_hand = a.watermark("t", 5, idle_timeout_ms=2_000).union(b.watermark("t", 30).idle_timeout_ms(2_000))
    assert via_spec.plan == by_hand.plan
    text = n.render_plan(via_spec.plan)
    assert "lag_ms=5 idle_timeout_ms=2000" in text and "lag_ms=30 idle_timeout_ms=2000" in text
    explained = via_spec.tumbling_window(100).agg(kp.count(kp.col("*"))).explain(show=False)
    assert "idle_timeout_ms=2000" in explained
    assert "idle markers of kp_src_0" in explained and "idle markers of kp_src_1" in explained


def test_idle_timeout_applies_to_every_watermark_of_a_union(session: kp.Session) -> None:
    a, _ = session.memory_stream(SCHEMA)
    b, _ = session.memory_stream(SCHEMA)
    stream = a.watermark("t", 0).union(b.watermark("t", 10)).idle_timeout_ms(500)
    marks = n.watermarks_of(stream.plan)
    assert [(m.lag_ms, m.idle_timeout_ms) for m in marks] == [(0, 500), (10, 500)]


def test_bad_multi_source_specs_are_plan_errors(session: kp.Session) -> None:
    a, _ = session.memory_stream(SCHEMA, name="bad_a")
    b, _ = session.memory_stream(SCHEMA, name="bad_b")
    both = a.union(b)
    with pytest.raises(
        PlanError, match=r"'nope', which is not in this stream; its streams are: 'bad_a', 'bad_b'"
    ):
        both.with_watermark(kp.MultiSourceWatermarkSpec().source("bad_a", LAG).source("nope", LAG))
    with pytest.raises(PlanError, match=r"stream 'bad_b' has no watermark in the MultiSourceWatermarkSpec"):
        both.with_watermark(kp.MultiSourceWatermarkSpec().source("bad_a", LAG))
    with pytest.raises(PlanError, match="already in this MultiSourceWatermarkSpec"):
        kp.MultiSourceWatermarkSpec().source("bad_a", LAG).source("bad_a", LAG)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(PlanError, match="idle_timeout_ms must be"):
            kp.MultiSourceWatermarkSpec().idle_timeout_ms(bad)  # type: ignore[arg-type]
        with pytest.raises(PlanError, match="idle_timeout_ms must be"):
            a.watermark("t", 0).idle_timeout_ms(bad)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="takes a WatermarkSpec"):
        kp.MultiSourceWatermarkSpec().source("bad_a", 5_000)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="names no source"):
        both.with_watermark(kp.MultiSourceWatermarkSpec())
    with pytest.raises(PlanError, match="already has a watermark"):
        a.watermark("t", 0).with_watermark(kp.MultiSourceWatermarkSpec().source("bad_a", LAG))
    with pytest.raises(PlanError, match=r"idle_timeout_ms\(\) needs a watermark"):
        both.idle_timeout_ms(1_000)
    with pytest.raises(PlanError, match="column 'nope'"):
        both.with_watermark(
            kp.MultiSourceWatermarkSpec()
            .source("bad_a", LAG)
            .source("bad_b", kp.WatermarkSpec.fixed_lag_ms("nope", 0))
        )


# --- the reference model --------------------------------------------------------------------


def _model_states(steps: list[Step]) -> list[tuple[int | None, int | None, int | None, set[str], int]]:
    model = reference_model_for(
        per_100ms(_placeholder(SCHEMA, "a"), _placeholder(SCHEMA, "b")), clock=ManualClock()
    )
    out = []
    for step in steps:
        if isinstance(step, AdvanceProcessingTime):
            model.advance_processing_time(step.ms)
        elif isinstance(step, Send):
            assert step.source is not None
            model.send(step.rows, source=step.source)
        elif isinstance(step, Close):
            assert step.source is not None
            model.close(source=step.source)
        marks = model.source_watermarks()
        out.append(
            (
                marks.get("a"),
                marks.get("b"),
                model.watermark_ms,
                set(model.idle_sources()),
                len(model.results),
            )
        )
    return out


def test_idle_table_on_the_reference_model() -> None:
    got = _model_states([step for step, _ in IDLE])
    for (step, want), state in zip(IDLE, got, strict=True):
        assert state == want, step


def test_a_returning_source_rows_behind_the_watermark_are_very_late() -> None:
    late = run_reference_late_events(SCHEMA, per_100ms, [s for s, _ in IDLE], sources=("a", "b"))[-1]
    assert late == [{"k": "x", "t": 30, "classification": "very_late", "watermark_ms": 260}]


def test_without_an_idle_timeout_a_quiet_source_holds_everything_back() -> None:
    plain = kp.MultiSourceWatermarkSpec().source("a", LAG).source("b", LAG)
    model = reference_model_for(
        _placeholder(SCHEMA, "a")
        .union(_placeholder(SCHEMA, "b"))
        .with_watermark(plain)
        .tumbling_window(100)
        .agg(kp.count(kp.col("*"))),
        clock=ManualClock(),
    )
    model.send([row(10)], source="a")
    model.send([row(500)], source="a")
    model.advance_processing_time(3_600_000)
    assert model.watermark_ms is None and model.results == [] and model.idle_sources() == frozenset()


# --- Spark: both streaming lowerings, the scenario's clock ------------------------------------


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_idle_table_through_the_public_api(session: kp.Session, lowering: str) -> None:
    a, sender_a = session.memory_stream(SCHEMA, name="a")
    b, sender_b = session.memory_stream(SCHEMA, name="b")
    senders = {"a": sender_a, "b": sender_b}
    job = per_100ms(a, b).start(lowering=lowering)  # type: ignore[arg-type]
    clock = ManualClock()
    assert job._idle is not None  # type: ignore[attr-defined]
    job._idle.restart_clock(clock)  # type: ignore[attr-defined]
    try:
        for step, (wa, wb, overall, idle, fired) in IDLE:
            if isinstance(step, AdvanceProcessingTime):
                clock.advance(step.ms)
            elif isinstance(step, Send):
                assert step.source is not None
                senders[step.source].send(list(step.rows))
            elif isinstance(step, Close):
                assert step.source is not None
                senders[step.source].close()
            job.process_all_available()
            marks = job.source_watermarks()
            got = (
                marks.get("a"),
                marks.get("b"),
                job.watermark_ms,
                set(job.idle_sources()),
                job.results().num_rows,
            )
            assert got == (wa, wb, overall, idle, fired), (step, got)
        assert job.await_termination(timeout_s=120)
        m = job.metrics()
        assert m.source_watermarks == {"a": END_OF_TIME_MS, "b": END_OF_TIME_MS}
        if lowering == "stateful":
            assert m.very_late_events == 1  # B's row at 30
    finally:
        job.stop()


def test_idle_scenario_lowerings_agree(session: kp.Session) -> None:
    assert_lowerings_agree(session, SCHEMA, per_100ms, [s for s, _ in IDLE], sources=("a", "b"))


def test_per_source_gauges_in_prometheus_text() -> None:
    m = kp.JobMetrics(
        input_rows=3,
        batches=2,
        invalid_events=0,
        on_time_events=None,
        mildly_late_events=None,
        very_late_events=None,
        future_events=None,
        windows_emitted=1,
        retractions=0,
        state_evictions=0,
        watermark_ms=260,
        watermark_advances=2,
        source_watermarks={"a": 260, "b": 20},
        idle_sources=frozenset({"b"}),
    )
    text = m.to_prometheus(job="clicks")
    assert 'krishiv_window_source_watermark_ms{job="clicks",source="a"} 260' in text
    assert 'krishiv_window_source_watermark_ms{job="clicks",source="b"} 20' in text
    assert 'krishiv_window_source_idle{job="clicks",source="a"} 0' in text
    assert 'krishiv_window_source_idle{job="clicks",source="b"} 1' in text
    assert "# TYPE krishiv_window_source_idle gauge" in text
    assert "b: 1970-01-01 00:00:00.020 UTC (idle)" in m._repr_html_()


# --- Spark, real time -------------------------------------------------------------------------


def _first_window(job: kp.Job) -> dict[str, Any]:
    """The result of the earliest window (the idle source's release fires several at once)."""
    rows = job.results().to_pylist()
    return min(rows, key=lambda r: r["window_start"])


def test_a_real_idle_source_stops_holding_windows_back(session: kp.Session) -> None:
    """B goes quiet; A keeps sending. Windows fire once B has been quiet for the timeout."""
    a, sender_a = session.memory_stream(SCHEMA, name="live")
    b, sender_b = session.memory_stream(SCHEMA, name="quiet")
    # Longer than the first step can take on a loaded machine: B is not yet quiet after it.
    timeout_ms = 5_000
    stream = (
        a.watermark("t", 0)
        .union(b.watermark("t", 0))
        .idle_timeout_ms(timeout_ms)
        .tumbling_window(100)
        .agg(kp.count(kp.col("*")))
    )
    job = stream.start(lowering="native")
    try:
        sender_a.send([row(10)])
        sender_b.send([row(20)])
        job.process_all_available()
        assert job.watermark_ms == 10
        quiet_since = time.monotonic()  # B's last row was sent before this
        t = 250
        fired_after = None
        while time.monotonic() - quiet_since < 60:
            sender_a.send([row(t)])  # A stays active
            t += 10
            time.sleep(0.5)
            if job.results().num_rows:
                fired_after = time.monotonic() - quiet_since
                break
        assert fired_after is not None, "the window never fired: the quiet source held it back"
        # Not before B was quiet for the timeout; within the run's bound after that.
        assert fired_after >= timeout_ms / 1000
        assert "quiet" in job.idle_sources()
        assert _first_window(job)["count"] == 2
        before = job.watermark_ms
        assert before is not None and before > 20
        sender_b.send([row(30), row(t + 1_000)])  # back: 30 is behind the watermark
        job.process_all_available()
        assert job.watermark_ms is not None and job.watermark_ms >= before  # never back to B's 30
        assert job.source_watermarks()["quiet"] == t + 1_000
        first = _first_window(job)
        assert first["count"] == 2  # the late row did not reach the fired window
    finally:
        job.stop()


def test_an_idle_file_source_is_left_out_too(session: kp.Session, tmp_path: Path) -> None:
    """A streaming Parquet directory that goes quiet, beside a busy memory stream."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path / "landing"
    directory.mkdir()
    first = pa.table({"k": pa.array(["x"], pa.string()), "t": pa.array([10], pa.int64())})
    pq.write_table(first, directory / "part-0.parquet")
    files = session.read_parquet(str(directory), SCHEMA, streaming=True, name="landing")
    live, sender = session.memory_stream(SCHEMA, name="busy")
    spec = kp.MultiSourceWatermarkSpec().source("landing", LAG).source("busy", LAG).idle_timeout_ms(1_000)
    job = files.union(live).with_watermark(spec).tumbling_window(100).agg(kp.count(kp.col("*"))).start()
    clock = ManualClock()
    job._idle.restart_clock(clock)  # type: ignore[attr-defined]
    try:
        job.process_all_available()
        sender.send([row(20), row(250)])
        job.process_all_available()
        assert (job.watermark_ms, job.results().num_rows) == (10, 0)
        clock.advance(1_500)  # both quiet: both idle, nothing moves
        job.process_all_available()
        assert job.watermark_ms == 10
        assert job.idle_sources() == {"landing", "busy"}
        sender.send([row(260)])  # the memory stream is back; the directory stays idle
        job.process_all_available()
        assert job.idle_sources() == {"landing"}
        assert job.watermark_ms == 260
        assert job.results().to_pylist()[0]["count"] == 2
        assert job.source_watermarks() == {"landing": 10, "busy": 260}
    finally:
        job.stop()
