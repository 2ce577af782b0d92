"""Jobs on real local Spark: sinks, metrics, watermarks, errors, explain, sources."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.spark_errors import SparkFailure

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def ev(user: str, sec: float, amount: float | None = 1.0) -> dict[str, Any]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=sec), "amount": amount}


def per_minute(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )


def test_watermark_metrics_and_close(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA, name="clicks_metrics")
    job = per_minute(stream).start()
    try:
        job.process_all_available()
        assert job.watermark_ms is None
        assert job.source_watermarks() == {}
        sender.send([ev("a", 1), ev("a", 30, 2.0), ev("b", 61)])
        job.process_all_available()
        t0_ms = int(T0.timestamp() * 1000)
        assert job.watermark_ms == t0_ms + 61_000 - 5_000
        assert job.results().num_rows == 0  # W < first window end
        sender.advance_watermark(t0_ms + 60_000)
        job.process_all_available()
        assert job.source_watermarks() == {"clicks_metrics": t0_ms + 60_000}
        got = job.results().to_pylist()
        assert got == [
            {
                "user_id": "a",
                "window_start": T0,
                "window_end": T0 + dt.timedelta(minutes=1),
                "events": 2,
                "total": 3.0,
            }
        ]
        sender.send([ev("a", 10), {"user_id": "c", "event_time": None, "amount": 1.0}])  # late + invalid
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert not job.is_active
        final = job.results()
        assert final.num_rows == 2
        m = job.metrics()
        assert m.input_rows == 5
        assert m.invalid_events == 1
        assert m.windows_emitted == 2
        assert m.very_late_events is None  # not observable natively: None, not a guess
        assert m.watermark_ms == kp.END_OF_TIME_MS
        assert m.watermark_advances == 3
        assert m.batches >= 4
        text = m.to_prometheus(job="clicks")
        assert 'krishiv_window_input_rows_total{job="clicks"} 5' in text
        assert "very_late" not in text
        assert [p.batch_id for p in job.progress()] == sorted(p.batch_id for p in job.progress())
    finally:
        job.stop()


def test_await_termination_times_out_while_sources_are_open(session: kp.Session) -> None:
    stream, _sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start()
    try:
        assert job.await_termination(timeout_s=0.5) is False
        assert job.is_active
    finally:
        job.stop()
    assert not job.is_active


def test_parquet_sink_is_readable_and_exactly_once(session: kp.Session, tmp_path: Path) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    job = per_minute(stream).start(kp.ParquetSink(str(out)), checkpoint_dir=str(ckpt))
    empty = job.results()  # nothing committed yet: an empty table, not an error
    assert empty.num_rows == 0
    assert empty.column_names == ["user_id", "window_start", "window_end", "events", "total"]
    sender.send([ev("a", 1), ev("b", 2)])
    sender.send([ev("a", 125)])
    job.process_all_available()
    job.stop()
    first = job.results()
    assert first.num_rows == 2
    # Restart from the same checkpoint: nothing is written twice.
    job2 = per_minute(stream).start(kp.ParquetSink(str(out)), checkpoint_dir=str(ckpt))
    sender.close()
    assert job2.await_termination(timeout_s=120)
    rows = job2.results().to_pylist()
    assert sorted((r["user_id"], r["window_start"]) for r in rows) == [
        ("a", T0),
        ("a", T0 + dt.timedelta(minutes=2)),
        ("b", T0),
    ]
    assert (out / "_spark_metadata").is_dir()
    files = [f for f in out.glob("*.parquet")]
    assert pq.read_schema(files[0]).field("window_start").type == pa.timestamp("us", tz="UTC")


def test_foreach_batch_sink_gets_arrow_tables(session: kp.Session) -> None:
    seen: list[tuple[int, pa.Table]] = []
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start(kp.ForeachBatchSink(lambda t, b: seen.append((b, t))))
    sender.send([ev("a", 1)])
    sender.close()
    assert job.await_termination(timeout_s=120)
    tables = [t for _, t in seen if t.num_rows]
    assert len(tables) == 1
    assert tables[0].column_names == ["user_id", "window_start", "window_end", "events", "total"]
    with pytest.raises(kp.NoResultsError, match="ForeachBatchSink, which keeps no rows"):
        job.results()


def test_failing_foreach_function_fails_the_job_with_job_error(session: kp.Session) -> None:
    def boom(table: pa.Table, batch_id: int) -> None:
        if table.num_rows:
            raise ValueError("downstream unavailable")

    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start(kp.ForeachBatchSink(boom))
    sender.send([ev("a", 1), ev("a", 200)])
    with pytest.raises(kp.JobError) as info:
        job.process_all_available()
    assert "downstream unavailable" in str(info.value)
    assert info.value.cause is not None
    # What an uncaught error prints: Spark's words and the user's line, not the query's plan.
    shown = "".join(traceback.format_exception(info.value))
    assert "=== Streaming Query ===" not in shown and "Logical Plan" not in shown, shown
    assert 'raise ValueError("downstream unavailable")' in shown
    brief = info.value.__cause__
    assert isinstance(brief, SparkFailure) and "=== Streaming Query ===" in str(brief.error)
    job.stop()


def test_runtime_error_in_spark_is_a_job_error(session: kp.Session, tmp_path: Path) -> None:
    pq.write_table(pa.table({"k": ["a"], "x": pa.array([1], pa.int64())}), tmp_path / "good.parquet")
    job = session.read_parquet(str(tmp_path), streaming=True).start()
    job.process_all_available()
    (tmp_path / "torn.parquet").write_bytes(b"PAR1 not a parquet file")  # a file cut short
    with pytest.raises(kp.JobError, match=r"torn\.parquet") as info:
        job.process_all_available()
    assert info.value.cause is not None
    assert "Traceback" not in str(info.value) and "\tat org.apache" not in str(info.value)
    job.stop()


def test_console_sink_runs(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start(kp.ConsoleSink(num_rows=5))
    sender.send([ev("a", 1)])
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.metrics().windows_emitted == 1


def test_stateless_pipeline_filters_selects_and_drops_markers(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = (
        stream.filter(kp.col("amount") > 1)
        .with_column("double", kp.col("amount") * 2)
        .select("user_id", "double")
    )
    job = pipeline.start()
    sender.send([ev("a", 1, 1.0), ev("b", 2, 5.0), ev("c", 3, None)])
    sender.advance_watermark(0)
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.results().to_pylist() == [{"user_id": "b", "double": 10.0}]
    assert job.metrics().input_rows == 3


def test_union_of_two_memory_streams(session: kp.Session) -> None:
    a, sa = session.memory_stream(SCHEMA, name="union_left")
    b, sb = session.memory_stream(SCHEMA, name="union_right")
    merged = a.watermark("event_time", 0).union(b.watermark("event_time", 0))
    job = merged.tumbling_window(60_000).agg(kp.count(kp.col("*"))).start()
    sa.send([ev("a", 1)])
    job.process_all_available()
    assert job.watermark_ms is None  # the right source has no watermark yet
    assert job.results().num_rows == 0
    sb.send([ev("b", 2), ev("b", 70)])
    job.process_all_available()
    assert job.watermark_ms == int(T0.timestamp() * 1000) + 1_000
    assert set(job.source_watermarks()) == {"union_left", "union_right"}
    sa.close()
    sb.close()
    assert job.await_termination(timeout_s=120)
    counts = sorted((r["window_start"], r["count"]) for r in job.results().to_pylist())
    assert counts == [(T0, 2), (T0 + dt.timedelta(minutes=1), 1)]


def test_collect_on_memory_stream_is_a_snapshot(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = per_minute(stream)
    assert pipeline.collect().num_rows == 0
    sender.send([ev("a", 1), ev("a", 2), ev("b", 70)])
    sender.advance_watermark(10)
    table = pipeline.collect()
    assert sorted((r["user_id"], r["events"]) for r in table.to_pylist()) == [("a", 2), ("b", 1)]
    assert pipeline.collect_with_aggs([kp.max(kp.col("amount"))]).column_names[-1] == "max_amount"


def test_explain_shows_plan_lowering_and_spark_plan(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    text = per_minute(stream).explain(show=False)
    for section in ("== Logical plan ==", "== Lowering: native ==", "== Spark recipe ==", "== Spark plan =="):
        assert section in text
    assert "WindowAggregate keys=[user_id]" in text
    assert "EventTimeWatermark" in text
    bounded = session.from_records([ev("a", 1)], SCHEMA)
    assert "== Lowering: bounded ==" in per_minute(bounded).explain(show=False)


def test_explain_and_to_spark_leave_no_temporary_directory_once_the_session_stops(
    session: kp.Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that reads the operator's ticks and idle markers: explain() removes them, stop() the rest."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the temporary directory of this test alone
    other = kp.Session.embedded()  # on the running Spark, with a temporary state directory
    stream, _ = other.memory_stream(SCHEMA)
    windows = (
        stream.watermark("event_time", 5_000, idle_timeout_ms=1_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"))
    )
    assert "== Lowering: stateful ==" in windows.explain(lowering="stateful")
    assert [p.name for p in temp.iterdir()] == [os.path.basename(other.state_dir)]  # no ticks, no markers
    assert windows.to_spark(lowering="stateful").isStreaming
    other.stop()
    assert [p.name for p in temp.iterdir() if p.name != "krishiv-logs"] == []


def test_to_spark_is_streaming_only_for_unbounded(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    assert per_minute(stream).to_spark().isStreaming
    assert not per_minute(session.from_records([ev("a", 1)], SCHEMA)).to_spark().isStreaming


def test_bounded_job_metrics_and_sinks(session: kp.Session, tmp_path: Path) -> None:
    records = [ev("a", 1), ev("a", 2), {"user_id": "b", "event_time": None, "amount": 3.0}]
    bounded = per_minute(session.from_records(records, SCHEMA))
    job = bounded.start()
    assert job.results().num_rows == 1
    m = job.metrics()
    assert (m.input_rows, m.invalid_events, m.on_time_events, m.very_late_events) == (3, 1, 2, 0)
    assert m.windows_emitted == 1
    pjob = bounded.start(kp.ParquetSink(str(tmp_path / "p")))
    assert pjob.results().num_rows == 1
    assert pq.read_table(str(tmp_path / "p")).num_rows == 1


class _ClosingWriter:
    """A writer with the optional ``close()``, recording what the job called; ``fail``: write raises."""

    def __init__(self, fail: bool, close_fails: bool = False) -> None:
        self.fail, self.close_fails = fail, close_fails
        self.calls: list[str] = []

    def write(self, table: pa.Table, batch_id: int) -> None:
        self.calls.append(f"write {table.num_rows} rows, batch {batch_id}")
        if self.fail:
            raise ValueError("the database went away")

    def close(self) -> None:
        self.calls.append("close")
        if self.close_fails:
            raise OSError("the socket is already gone")


class _ClosingSink:
    def __init__(self, writer: _ClosingWriter) -> None:
        self.writer = writer

    def open(self, context: Any) -> _ClosingWriter:
        return self.writer


def test_a_bounded_job_closes_its_writer_once_written_even_when_the_write_failed(
    session: kp.Session,
) -> None:
    """A bounded run is over when ``start()`` returns: its writer's connections end there, as at stop()."""
    bounded = per_minute(session.from_records([ev("a", 1), ev("a", 2)], SCHEMA))
    fine = _ClosingWriter(fail=False)
    bounded.start(_ClosingSink(fine))
    assert fine.calls == ["write 1 rows, batch 0", "close"]
    failing = _ClosingWriter(fail=True)
    with pytest.raises(kp.JobError, match="the database went away"):
        bounded.start(_ClosingSink(failing))
    assert failing.calls == ["write 1 rows, batch 0", "close"]
    # A close that fails: after a failed write the write's error stands; else it is the job's error.
    both = _ClosingWriter(fail=True, close_fails=True)
    with pytest.raises(kp.JobError, match="the database went away"):
        bounded.start(_ClosingSink(both))
    only_close = _ClosingWriter(fail=False, close_fails=True)
    with pytest.raises(kp.JobError, match="closing the sink's writer failed"):
        bounded.start(_ClosingSink(only_close))
    assert only_close.calls == ["write 1 rows, batch 0", "close"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_file_sources_bounded(session: kp.Session, tmp_path: Path, fmt: str) -> None:
    table = pa.table(
        {
            "user_id": ["a", "a", "b"],
            "event_time": pa.array([T0, T0 + dt.timedelta(seconds=61), T0], pa.timestamp("us", tz="UTC")),
            "amount": [1.0, 2.0, 3.0],
        }
    )
    path = tmp_path / f"data.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    else:
        path.write_text(
            "\n".join(json.dumps({**r, "event_time": r["event_time"].isoformat()}) for r in table.to_pylist())
        )
    reader = {"parquet": session.read_parquet, "csv": session.read_csv, "json": session.read_json}[fmt]
    stream = reader(str(path), SCHEMA)
    got = sorted(
        (r["user_id"], r["window_start"], r["events"]) for r in per_minute(stream).collect().to_pylist()
    )
    assert got == [("a", T0, 1), ("a", T0 + dt.timedelta(minutes=1), 1), ("b", T0, 1)]


def test_streaming_parquet_directory_source(session: kp.Session, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    schema = kp.Schema.parse(SCHEMA).to_arrow()
    pq.write_table(pa.Table.from_pylist([ev("a", 1), ev("a", 130)], schema=schema), src / "one.parquet")
    stream = session.read_parquet(str(src), streaming=True)
    assert stream.schema == kp.Schema.parse(SCHEMA)
    job = per_minute(stream).start()
    job.process_all_available()
    assert [r["events"] for r in job.results().to_pylist()] == [1]
    job.stop()


def test_a_file_sources_rows_are_counted_by_spark_invalid_ones_observed(
    session: kp.Session, tmp_path: Path
) -> None:
    """One streaming file source right under its watermark: its rows are Spark's own count (no
    per-row count in the plan), the rows without a valid event time still observed, per file."""
    src = tmp_path / "in"
    src.mkdir()
    schema = kp.Schema.parse(SCHEMA).to_arrow()
    far = {"user_id": "a", "event_time": dt.datetime(1200, 1, 1, tzinfo=dt.UTC), "amount": 1.0}
    files = [
        [ev("a", 1), {"user_id": "a", "event_time": None, "amount": 1.0}, ev("b", 2)],
        [ev("a", 130), far],
        [ev("b", 131)],
    ]
    for i, rows in enumerate(files):
        path = src / f"part-{i}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    stream = per_minute(session.read_parquet(str(src), streaming=True, max_files_per_trigger=1))
    assert stream.lower().tracked[0].rows_in_progress
    job = stream.start()
    job.process_all_available()
    m = job.metrics()
    job.stop()
    assert sorted((r["user_id"], r["events"]) for r in job.results().to_pylist()) == [("a", 1), ("b", 1)]
    assert (m.input_rows, m.invalid_events, m.batches >= 3) == (6, 2, True)


def test_streaming_files_one_per_micro_batch(session: kp.Session, tmp_path: Path) -> None:
    """With max_files_per_trigger=1 the watermark moves between files, so a late event is dropped."""
    src = tmp_path / "in"
    src.mkdir()
    schema = kp.Schema.parse(SCHEMA).to_arrow()
    # The event at 2 s comes in the file after the watermark passed 125 s: it is late,
    # even though the next micro-batch follows at once (no empty batch in between).
    files = [[ev("a", 1), ev("a", 130)], [ev("a", 2), ev("a", 131)]]
    for i, rows in enumerate(files):
        path = src / f"part-{i}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    key = "spark.sql.streaming.statefulOperator.allowMultiple"
    before = session.spark.conf.get(key, None)
    job = per_minute(session.read_parquet(str(src), streaming=True, max_files_per_trigger=1)).start()
    assert session.spark.conf.get(key, None) == before  # set for the job's start only
    job.process_all_available()
    assert [r["events"] for r in job.results().to_pylist()] == [1]  # the late event is not counted
    assert job.metrics().batches >= 2
    job.stop()
    # Read all at once (the default), nothing is late: the minute holds both events.
    job = per_minute(session.read_parquet(str(src), streaming=True)).start()
    job.process_all_available()
    assert [r["events"] for r in job.results().to_pylist()] == [2]
    job.stop()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"streaming": True, "max_files_per_trigger": 0}, "positive integer, got 0"),
        ({"streaming": True, "max_files_per_trigger": "1"}, "positive integer, got '1'"),
        ({"max_files_per_trigger": 1}, "streaming=True"),
    ],
)
def test_max_files_per_trigger_is_checked(
    session: kp.Session, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(kp.PlanError, match=message):
        session.read_parquet(str(tmp_path), SCHEMA, **kwargs)


def test_schema_inference_needs_files(session: kp.Session, tmp_path: Path) -> None:
    with pytest.raises(kp.SchemaError, match="pass schema="):
        session.read_json(str(tmp_path))


def test_embedded_without_java_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # no bin/java there
    with pytest.raises(kp.SessionError, match="Java 17"):
        kp.Session.embedded()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(kp.SessionError, match="Java 8"):
        kp.Session.embedded()


def test_unknown_durability_is_refused() -> None:
    with pytest.raises(kp.SessionError, match="dev-local"):
        kp.Session.embedded(durability="cloud")  # type: ignore[arg-type]


def test_second_session_attaches_and_cleans_its_state(session: kp.Session) -> None:
    other = kp.Session.embedded()
    state = other.state_dir
    assert other.spark is session.spark
    _stream, sender = other.memory_stream(SCHEMA)
    sender.send([ev("a", 1)])
    assert os.path.isdir(state)
    other.stop()
    assert not os.path.exists(state)
    with pytest.raises(kp.SessionError, match="stopped"):
        _ = other.spark
    assert session.spark.range(1).count() == 1  # the shared Spark still runs


def test_connect_to_local_master(session: kp.Session) -> None:
    remote = kp.Session.connect("local[2]")
    try:
        got = per_minute(remote.from_records([ev("a", 1)], SCHEMA)).collect()
        assert got.num_rows == 1
    finally:
        remote.stop()
    with pytest.raises(kp.SessionError, match="unsupported master"):
        kp.Session.connect("http://nowhere")


def test_import_starts_no_jvm() -> None:
    code = "import sys, krishiv_py; print(any(m.startswith(('pyspark', 'py4j')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_null_literal_column_has_the_planned_type(session: kp.Session) -> None:
    stream = session.from_records([ev("a", 1)], SCHEMA).select("user_id", kp.lit(None).alias("z"))
    table = stream.collect()
    assert table.schema.field("z").type == pa.string()
    assert table.to_pylist() == [{"user_id": "a", "z": None}]


def test_event_times_before_the_supported_range_are_counted_invalid(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = per_minute(stream)
    job = pipeline.start()
    sender.send(
        [{"user_id": "a", "event_time": dt.datetime(1000, 1, 1, tzinfo=dt.UTC), "amount": 1.0}, ev("a", 1)]
    )
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.results().num_rows == 1
    assert job.metrics().invalid_events == 1
    assert pipeline.collect().num_rows == 1


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_source_watermarks_at_the_ends_of_the_supported_range(session: kp.Session, lowering: str) -> None:
    """One watermark operator: the source's newest event time is Spark's own, read from the progress."""
    stream, sender = session.memory_stream(SCHEMA, name=f"ends_{lowering}")
    job = per_minute(stream).start(lowering=lowering)  # type: ignore[arg-type]
    try:
        early = dt.datetime(1500, 3, 1, 0, 0, 1, 7_000, tzinfo=dt.UTC)
        sender.send([{"user_id": "a", "event_time": early, "amount": 1.0}])
        job.process_all_available()
        early_ms = (early - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
        assert job.source_watermarks() == {f"ends_{lowering}": early_ms - 5_000}
        late = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)
        sender.send([{"user_id": "a", "event_time": late, "amount": 1.0}])
        job.process_all_available()
        late_ms = (late - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
        assert job.source_watermarks() == {f"ends_{lowering}": late_ms - 5_000}
        assert job.watermark_ms == late_ms - 5_000
    finally:
        job.stop()


def test_huge_batch_is_one_step(session: kp.Session) -> None:
    n = 200_000
    table = pa.table(
        {
            "user_id": pa.array([f"u{i % 100}" for i in range(n)]),
            "event_time": pa.array(
                [T0 + dt.timedelta(milliseconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "amount": pa.array([1.0] * n),
        }
    )
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start()
    assert sender.send(table) == 0
    sender.close()
    assert job.await_termination(timeout_s=300)
    totals = job.results().to_pylist()
    assert sum(r["events"] for r in totals) == n
    assert job.metrics().input_rows == n
