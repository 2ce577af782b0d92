"""The stateful lowering on real Spark: lateness, handlers, triggers, metrics, parity.

Results are compared with the reference model after every step; random
streams check three-way parity (model, stateful streaming, bounded) and
two-way parity with the native lowering where both run a plan.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, cast

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.testing import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
    run_reference,
    run_streaming,
)

SCHEMA = "k string, t bigint, v bigint"
Pipeline = Callable[[kp.Stream], kp.Stream]


def ripple(handler: kp.LateEventHandler | None = None, mode: Any = "accumulating") -> Pipeline:
    """The Ripple seed's example: 10 ms tumbling windows, lag 0, allowed lateness and future tolerance 60."""

    def build(s: kp.Stream) -> kp.Stream:
        w = (
            s.watermark("t", 0, future_tolerance_ms=60)
            .key_by("k")
            .tumbling_window(10)
            .allowed_lateness(60)
            .accumulation(mode)
        )
        if handler is not None:
            w = w.with_late_event_handler(handler)
        return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))

    return build


RIPPLE_STEPS: list[Step] = [
    Send([{"k": "a", "t": 191, "v": 1}, {"k": "a", "t": 200, "v": 2}]),  # watermark -> 200
    Send([{"k": "a", "t": 195, "v": 10}, {"k": "a", "t": 130, "v": 20}, {"k": "a", "t": 280, "v": 30}]),
    Close(),
]


def test_ripple_example_through_the_public_api(session: kp.Session) -> None:
    handler = kp.SideOutputLateEventHandler()
    stream, sender = session.memory_stream(SCHEMA)
    job = ripple(handler, "retracting")(stream).start()
    try:
        assert job.lowering == "stateful"
        sender.send(list(RIPPLE_STEPS[0].rows))  # type: ignore[union-attr]
        job.process_all_available()
        assert job.watermark_ms == 200
        assert_same_rows(job.results(), [row(190, 200, 1, 1, "emit")])
        sender.send(list(RIPPLE_STEPS[1].rows))  # type: ignore[union-attr]
        job.process_all_available()
        # 195 is mildly late: [190, 200) is retained (200 < 200 + 60) and fires again, corrected.
        assert_same_rows(
            job.results(),
            [
                row(190, 200, 1, 1, "emit"),
                row(190, 200, 1, 1, "retract"),
                row(190, 200, 2, 11, "emit"),
                row(200, 210, 1, 2, "emit"),
            ],
        )
        late = job.late_events().to_pylist()
        # 130 is very late: [130, 140) closed for good at 140 + 60 = 200.
        assert late == [{"k": "a", "t": 130, "v": 20, "classification": "very_late", "watermark_ms": 200}]
        m = job.metrics()
        assert (m.on_time_events, m.mildly_late_events, m.very_late_events, m.future_events) == (3, 1, 1, 1)
        assert m.retractions == 1 and m.windows_emitted == 3
        assert m.state_windows == 1  # [280, 290): the others were evicted at W >= end + 60
        text = m.to_prometheus()
        assert "krishiv_window_very_late_events_total 1" in text
        assert "krishiv_window_future_events_total 1" in text
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert_same_rows(
            [r for r in job.results().to_pylist() if r["window_start"] == at(280)],
            [row(280, 290, 1, 30, "emit")],
        )
    finally:
        job.stop()


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def row(start: int, end: int, n: int, total: int, kind: str) -> dict[str, Any]:
    return {"k": "a", "window_start": start, "window_end": end, "count": n, "sum_v": total, "kind": kind}


def test_ripple_example_agrees_with_the_model_three_ways(session: kp.Session) -> None:
    for mode in ("accumulating", "discarding", "retracting"):
        assert_lowerings_agree(session, SCHEMA, ripple(mode=mode), RIPPLE_STEPS)


def test_invalid_rows_go_to_the_handler_and_nothing_is_lost(session: kp.Session) -> None:
    handler = kp.SideOutputLateEventHandler()
    steps: list[Step] = [
        Send([{"k": "a", "t": 5, "v": 1}, {"k": "b", "t": None, "v": 2}, {"k": "a", "t": 50, "v": 4}]),
        Send([{"k": "a", "t": 1, "v": 8}, {"k": "a", "t": 10**17, "v": 16}]),  # very late; out of range
        Close(),
    ]
    stream, sender = session.memory_stream(SCHEMA)
    job = ripple(handler, "discarding")(stream).start()  # each firing carries only new rows
    try:
        for step in steps:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            else:
                sender.close()
            job.process_all_available()
        late = sorted(job.late_events().to_pylist(), key=lambda r: r["v"])
        assert [(r["v"], r["classification"]) for r in late] == [(2, "invalid"), (16, "invalid")]
        counted = sum(r["sum_v"] for r in job.results().to_pylist())
        # 8 (t=1) is mildly late: [0, 10) is retained until W >= 70.
        assert counted + sum(r["v"] for r in late) == 1 + 2 + 4 + 8 + 16
        assert job.metrics().invalid_events == 2
    finally:
        job.stop()


def test_start_on_bounded_input_runs_the_operator_as_a_batch(session: kp.Session) -> None:
    rows = [{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 2, "v": None}, {"k": "a", "t": None, "v": 5}]
    handler = kp.SideOutputLateEventHandler()
    job = ripple(handler, "retracting")(session.from_records(rows, SCHEMA)).start()
    assert job.lowering == "stateful" and not job.is_active
    assert_same_rows(job.results(), [row(0, 10, 2, 1, "emit")])
    assert [r["classification"] for r in job.late_events().to_pylist()] == ["invalid"]
    m = job.metrics()
    assert (m.on_time_events, m.invalid_events, m.windows_emitted) == (2, 1, 1)


def test_a_raising_handler_fails_the_job_naming_its_error(session: kp.Session) -> None:
    class Boom:
        def handle(self, late: pa.Table) -> None:
            raise ValueError(f"handler saw {late.num_rows} late rows")

    stream, sender = session.memory_stream(SCHEMA)
    job = ripple(Boom())(stream).start()
    try:
        sender.send([{"k": "a", "t": 100, "v": 1}])
        job.process_all_available()
        sender.send([{"k": "a", "t": 1, "v": 1}])
        with pytest.raises(kp.JobError, match="handler saw 1 late rows"):
            job.process_all_available()
    finally:
        job.stop()


def test_side_output_to_parquet_is_written_once_per_batch(session: kp.Session, tmp_path: Any) -> None:
    path = str(tmp_path / "late")
    handler = kp.SideOutputLateEventHandler(kp.ParquetSink(path))
    results = str(tmp_path / "results")
    stream, sender = session.memory_stream(SCHEMA)
    job = ripple(handler)(stream).start(kp.ParquetSink(results))
    try:
        sender.send([{"k": "a", "t": 100, "v": 1}])
        job.process_all_available()
        sender.send([{"k": "a", "t": 1, "v": 2}, {"k": "a", "t": 2, "v": 3}])
        job.process_all_available()
        assert sorted(r["v"] for r in job.late_events().to_pylist()) == [2, 3]
        assert len([f for f in os.listdir(path) if f.endswith(".parquet")]) == 1
        sender.close()
        job.await_termination(timeout_s=120)
        assert_same_rows(
            job.results(), [{"k": "a", "window_start": 100, "window_end": 110, "count": 1, "sum_v": 1}]
        )
    finally:
        job.stop()


@pytest.mark.parametrize("recorded", [None, 3])
def test_restart_from_checkpoint_keeps_window_state(
    session: kp.Session, tmp_path: Any, recorded: int | None
) -> None:
    """Also with a number of key buckets recorded in the checkpoint (before key groups) that this
    session would not pick: each bucket is read as a key group."""
    from krishiv_py.runtime.launch import BUCKETS_FILE

    checkpoint = str(tmp_path / "cp")
    if recorded is not None:
        os.makedirs(checkpoint)
        with open(os.path.join(checkpoint, BUCKETS_FILE), "w") as f:
            f.write(f"{recorded}\n")
    results = str(tmp_path / "out")
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = ripple()(stream)
    job = pipeline.start(kp.ParquetSink(results), checkpoint_dir=checkpoint)
    sender.send([{"k": "a", "t": 3, "v": 1}, {"k": "b", "t": 4, "v": 2}])
    job.process_all_available()
    job.stop()
    partitions = int(session.spark.conf.get("spark.sql.shuffle.partitions") or 0)
    if recorded is not None:  # key buckets, read as key groups: the same number, kept
        with open(os.path.join(checkpoint, BUCKETS_FILE)) as f:
            assert int(f.read()) == recorded
    else:  # a new checkpoint records its key groups and the tasks it ran on
        with open(os.path.join(checkpoint, "krishiv-key-groups.json")) as f:
            layout = json.load(f)
        assert (layout["key_groups"], layout["tasks"]) == (128, min(128, partitions))
    sender.send([{"k": "a", "t": 5, "v": 4}, {"k": "a", "t": 40, "v": 8}])
    job = pipeline.start(kp.ParquetSink(results), checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert_same_rows(
            job.results(),
            [
                {"k": "a", "window_start": 0, "window_end": 10, "count": 2, "sum_v": 5},
                {"k": "b", "window_start": 0, "window_end": 10, "count": 1, "sum_v": 2},
                {"k": "a", "window_start": 40, "window_end": 50, "count": 1, "sum_v": 8},
            ],
        )
    finally:
        job.stop()


def test_long_sliding_windows_keep_panes_across_a_restart(session: kp.Session, tmp_path: Any) -> None:
    """Sliding windows that fire once each keep one state row per key and pane; a restart reads them back."""

    def build(s: kp.Stream) -> kp.Stream:
        windowed = s.watermark("t", 5).key_by("k").sliding_window(40, 10)
        return windowed.agg(*AGGS)

    first = [
        {"k": "a", "t": 3, "v": 1},
        {"k": "a", "t": 14, "v": 2},
        {"k": "b", "t": 15, "v": None},
        {"k": "a", "t": 27, "v": 4},
        {"k": "b", "t": 60, "v": 64},
    ]
    second = [
        {"k": "a", "t": 21, "v": 8},  # behind the watermark (60 - 5); the window [20, 60) is open
        {"k": "a", "t": 2, "v": 16},  # every window over its pane ended by 40: very late
        {"k": "b", "t": 70, "v": 32},
    ]
    steps: list[Step] = [Send(first), Send(second), Close()]
    checkpoint = str(tmp_path / "cp")
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = build(stream)
    sink = kp.ParquetSink(str(tmp_path / "out"))
    job = pipeline.start(sink, checkpoint_dir=checkpoint, lowering="stateful")
    sender.send(first)
    job.process_all_available()
    job.stop()
    sender.send(second)
    job = pipeline.start(sink, checkpoint_dir=checkpoint, lowering="stateful")
    try:
        job.process_all_available()
        sender.close()
        assert job.await_termination(timeout_s=120)
        expected = run_reference(SCHEMA, build, steps)[-1]
        assert_same_rows(job.results(), expected)
        metrics = job.metrics()
        assert (metrics.mildly_late_events, metrics.very_late_events) == (1, 1)
    finally:
        job.stop()


def test_timestamps_outside_pandas_range(session: kp.Session) -> None:
    schema = "k string, t timestamp, w timestamp"
    early, late = dt.datetime(1500, 3, 1, tzinfo=dt.UTC), dt.datetime(2500, 3, 1, tzinfo=dt.UTC)

    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).key_by("k").tumbling_window(60_000).allowed_lateness(1_000)
        return w.agg(kp.count(kp.col("*")), kp.max(kp.col("w")), kp.first(kp.col("w")))

    steps: list[Step] = [
        Send([{"k": "a", "t": early, "w": late}, {"k": "a", "t": late, "w": early}]),
        Close(),
    ]
    got = run_streaming(session, schema, build, steps)
    assert_same_rows(got[-1], run_reference(schema, build, steps)[-1])
    assert {cast(dt.datetime, r["window_start"]).year for r in got[-1]} == {1500, 2500}


def test_explain_names_the_feature_that_forced_the_stateful_lowering(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    text = ripple()(stream).explain(show=False)
    assert "== Lowering: stateful ==" in text
    assert "allowed_lateness(60 ms)" in text
    assert ".applyInArrow(" in text and "krishiv-state/<bucket>/<batch id>.arrow" in text
    assert "FlatMapGroupsInArrow" in text  # Spark's own plan


def test_interval_firings_are_woken_by_processing_time(session: kp.Session) -> None:
    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).tumbling_window(1_000_000).trigger(kp.Trigger.on_interval(1_500))
        return w.agg(kp.count(kp.col("*")))

    stream, sender = session.memory_stream(SCHEMA)
    job = build(stream).start()
    try:
        sender.send([{"k": "a", "t": 1, "v": 1}])
        job.process_all_available()
        assert [r["count"] for r in job.results().to_pylist()] == [1]  # never fired: fires at once
        sender.send([{"k": "a", "t": 2, "v": 1}])
        job.process_all_available()
        # Within 1.5 s of the first firing the window waits; the job wakes it when it is due,
        # with no further input.
        deadline = time.monotonic() + 60
        while 2 not in [r["count"] for r in job.results().to_pylist()]:
            assert time.monotonic() < deadline, job.results().to_pylist()
            time.sleep(0.5)
        assert job.metrics().windows_emitted == 2
    finally:
        job.stop()


def test_future_events_are_counted_and_warned_about(session: kp.Session, caplog: Any) -> None:
    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0, future_tolerance_ms=50).tumbling_window(10).allowed_lateness(10)
        return w.agg(kp.count(kp.col("*")))

    stream, sender = session.memory_stream(SCHEMA)
    job = build(stream).start()
    try:
        sender.send([{"k": "a", "t": 100, "v": 1}])
        job.process_all_available()
        with caplog.at_level(logging.WARNING, logger="krishiv_py"):
            sender.send([{"k": "a", "t": 151, "v": 1}, {"k": "a", "t": 150, "v": 1}])
            job.process_all_available()
        assert job.metrics().future_events == 1
        assert any("future tolerance" in r.getMessage() for r in caplog.records)
    finally:
        job.stop()


# --- parity on random streams -----------------------------------------------------------

AGGS = (
    kp.count(kp.col("*")),
    kp.sum(kp.col("v")),
    kp.min(kp.col("v")),
    kp.count_distinct(kp.col("v")),
    kp.last(kp.col("v")),
)
row_st = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b"]),
        "t": st.one_of(st.integers(min_value=-40, max_value=150), st.just(None)),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9)),
    }
)
step_st = st.one_of(
    st.lists(row_st, max_size=6).map(Send),
    st.lists(row_st, max_size=6).map(Send),
    st.integers(min_value=-40, max_value=160).map(AdvanceWatermark),
)
steps_st = st.lists(step_st, min_size=1, max_size=3).map(lambda s: [*s, Close()])


def pipeline(kind: str, size: int, lag: int, lateness: int, trigger: kp.Trigger, mode: Any) -> Pipeline:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag).key_by("k")
        if kind == "tumbling":
            windowed = w.tumbling_window(size)
        elif kind == "sliding":
            windowed = w.sliding_window(size, max(1, size // 2))
        else:
            windowed = w.session_window(size)
        windowed = windowed.allowed_lateness(lateness).trigger(trigger).accumulation(mode)
        return windowed.agg(*AGGS)  # type: ignore[no-any-return]

    return build


@settings(max_examples=int(os.environ.get("KRISHIV_SPARK_EXAMPLES", "3")))
@given(
    kind=st.sampled_from(["tumbling", "sliding", "session"]),
    size=st.integers(5, 40),
    lag=st.integers(0, 20),
    lateness=st.sampled_from([0, 25]),
    trigger=st.sampled_from(
        [kp.Trigger.on_watermark(), kp.Trigger.on_count(2), kp.Trigger.on_every_element()]
    ),
    mode=st.sampled_from(["accumulating", "discarding", "retracting"]),
    scenario=steps_st,
)
def test_three_way_parity(
    session: kp.Session,
    kind: str,
    size: int,
    lag: int,
    lateness: int,
    trigger: kp.Trigger,
    mode: Any,
    scenario: list[Step],
) -> None:
    assert_lowerings_agree(session, SCHEMA, pipeline(kind, size, lag, lateness, trigger, mode), scenario)


@settings(max_examples=int(os.environ.get("KRISHIV_SPARK_EXAMPLES", "3")))
@given(
    kind=st.sampled_from(["tumbling", "sliding"]),
    size=st.integers(5, 40),
    lag=st.integers(0, 20),
    scenario=steps_st,
)
def test_stateful_agrees_with_native(
    session: kp.Session, kind: str, size: int, lag: int, scenario: list[Step]
) -> None:
    build = pipeline(kind, size, lag, 0, kp.Trigger.on_watermark(), "accumulating")
    native = run_streaming(session, SCHEMA, build, scenario, lowering="native")
    stateful = run_streaming(session, SCHEMA, build, scenario, lowering="stateful")
    for i, (a, b) in enumerate(zip(native, stateful, strict=True)):
        try:
            assert_same_rows(b, a)
        except AssertionError as exc:
            raise AssertionError(f"after step {i}: {exc}") from None


def _log_managers(job: kp.Job) -> list[str]:
    """The checkpoint manager class each file source of ``job``'s query writes its file log with."""
    query = job._query._jsq.streamingQuery()  # type: ignore[attr-defined]
    sources = query.sources()
    names = []
    for i in range(sources.size()):
        source = sources.apply(i)
        field = source.getClass().getDeclaredField("metadataLog")
        field.setAccessible(True)
        log = field.get(source)
        cls = log.getClass()
        while "fileManager" not in [f.getName() for f in cls.getDeclaredFields()]:
            cls = cls.getSuperclass()
        manager = cls.getDeclaredField("fileManager")
        manager.setAccessible(True)
        names.append(str(manager.get(log).getClass().getSimpleName()))
    return names


def test_file_sources_log_through_the_fast_checkpoint_manager_and_the_operator_is_timed(
    session: kp.Session, tmp_path: Any
) -> None:
    """Spark creates a query's sources after ``start()`` returns: they still see the job's settings."""
    import pyarrow.parquet as pq

    from krishiv_py.stateful.operator import TIMING_NAMES

    data = tmp_path / "in"
    data.mkdir()
    pq.write_table(pa.table({"k": ["a"], "t": [5], "v": [1]}), str(data / "a.parquet"))
    source = session.read_parquet(str(data), schema=SCHEMA, streaming=True)
    job = ripple()(source).start()
    try:
        job.process_all_available()
        # The data source and the operator's tick source.
        assert _log_managers(job) == ["FileSystemBasedCheckpointFileManager"] * 2
        timing = job._collector.timings[0]  # type: ignore[attr-defined]
        # Every bucket runs: each hears the micro-batch's highest event time (it fires ahead).
        buckets = job._buckets  # type: ignore[attr-defined]
        assert timing["buckets"] == buckets and timing["kernel_us"] > 0 and timing["collect_us"] > 0
        assert set(TIMING_NAMES) <= set(timing) and min(timing.values()) >= 0
    finally:
        job.stop()


def test_map_tasks_merge_on_time_rows_under_the_operators_watermark(session: kp.Session) -> None:
    """Each map task reads its micro-batch's watermark and merges its on-time rows; nothing else moves."""
    steps: list[Step] = [
        Send([{"k": k, "t": t, "v": t} for k in "abc" for t in (191, 200, 205)]),  # watermark -> 205
        Send([{"k": "a", "t": 203, "v": 1}, {"k": "b", "t": 130, "v": 2}, {"k": "c", "t": 300, "v": 3}]),
        Send([{"k": "a", "t": None, "v": 4}, {"k": "b", "t": 305, "v": 5}, {"k": "a", "t": 290, "v": 6}]),
        Close(),
    ]
    stream, sender = session.memory_stream(SCHEMA)
    job = ripple()(stream).start(lowering="stateful")
    try:
        for s in steps[:-1]:
            assert isinstance(s, Send)
            sender.send(s.rows)
            job.process_all_available()
        sender.close()
        job.await_termination()
        assert_same_rows(job.results(), run_reference(SCHEMA, ripple(), steps)[-1])
        totals = job._collector.totals()  # type: ignore[attr-defined]
        metrics = job.metrics()
        # Every on-time row arrived merged: the first batch's nine (no watermark yet), then
        # those at or past the watermark; the late and the invalid row came one by one.
        assert totals["merged"] == metrics.on_time_events == 11
        assert (metrics.mildly_late_events, metrics.very_late_events, metrics.invalid_events) == (2, 1, 1)
        assert metrics.future_events == 1  # c@300, 95 ms past watermark 205 (tolerance 60), merged
    finally:
        job.stop()


EXACT_SCHEMA = (
    "k string, t bigint, i8 tinyint, i16 smallint, i32 int, i64 bigint, f float, d double, b boolean, "
    "ts timestamp, day date, price decimal(38,2), raw binary"
)


def test_every_column_reaches_the_operator_exactly(session: kp.Session) -> None:
    """Extremes, NaN, -0.0, nulls and far years survive the packer: in the aggregates and in late rows."""
    utc = dt.UTC
    i64 = 2**63 - 1
    rows: list[dict[str, Any]] = [
        {
            "k": "a",
            "t": 5,
            "i8": -128,
            "i16": 32767,
            "i32": -(2**31),
            "i64": i64,
            "f": float("nan"),
            "d": -0.0,
            "b": True,
            "ts": dt.datetime(1, 1, 1, tzinfo=utc),
            "day": dt.date(1, 1, 1),
            "price": Decimal("999999999999999999999999999999999999.99"),
            "raw": b"\x00",
        },
        {
            "k": "a",
            "t": 6,
            "i8": None,
            "i16": None,
            "i32": None,
            "i64": -i64 - 1,
            "f": float("-inf"),
            "d": None,
            "b": None,
            "ts": dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=utc),
            "day": None,
            "price": None,
            "raw": None,
        },
        {
            "k": None,
            "t": 7,
            "i8": 127,
            "i16": -32768,
            "i32": 2**31 - 1,
            "i64": None,
            "f": -0.0,
            "d": 1.5,
            "b": False,
            "ts": None,
            "day": dt.date(9999, 12, 31),
            "price": Decimal("-0.01"),
            "raw": b"",
        },
    ]
    # The same rows without an event time go to the handler as they were sent.
    invalid = [{**r, "t": None} for r in rows]
    numeric = ["i8", "i16", "i32", "i64", "f", "d", "ts", "day", "price"]

    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).key_by("k").tumbling_window(10)
        w = w.with_late_event_handler(kp.SideOutputLateEventHandler())
        return w.agg(
            kp.count(kp.col("*")),
            *(kp.min(kp.col(c)) for c in numeric),
            *(kp.max(kp.col(c)) for c in numeric),
            kp.first(kp.col("raw")),
            kp.last(kp.col("b")),
        )

    stream, sender = session.memory_stream(EXACT_SCHEMA)
    job = build(stream).start(lowering="stateful")
    try:
        sender.send(rows + invalid)
        sender.close()
        job.process_all_available()
        got = job.results().to_pylist()
        late = job.late_events().to_pylist()
    finally:
        job.stop()
    want = run_reference(EXACT_SCHEMA, build, [Send(rows), Close()])[-1]
    by_key = {r["k"]: r for r in got}
    assert len(got) == len(want) == len(by_key)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    for w in want:
        mine = by_key[w["k"]]
        assert (mine.pop("window_start"), w.pop("window_start")) == (epoch, 0)
        assert (mine.pop("window_end"), w.pop("window_end")) == (epoch + dt.timedelta(milliseconds=10), 10)
        assert _exactly(mine) == _exactly(w)
    sent = [_exactly({c: r[c] for c in invalid[0]}) for r in late]
    assert sorted(sent, key=repr) == sorted(map(_exactly, invalid), key=repr)


def _exactly(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with floats as their repr: NaN equals NaN, -0.0 differs from 0.0."""
    return {c: repr(v) if isinstance(v, float) else v for c, v in row.items()}
