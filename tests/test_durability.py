"""Durability profiles (SPEC 3.9): the state store, where checkpoints live, resuming a named job."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

import krishiv_py as kp
from krishiv_py.errors import PlanError, SessionError
from krishiv_py.runtime.durability import DEFAULT_STATE_DIR, check_location, profile

SCHEMA = "k string, t bigint"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def durable(
    shared: kp.Session, state_dir: Path | str | None, name: str = "single-node-durable"
) -> kp.Session:
    """A session of profile ``name`` on the shared Spark (a restarted process would make its own)."""
    return kp.Session(
        shared.spark,
        owns_spark=False,
        state_dir=None if state_dir is None else str(state_dir),
        durability=name,  # type: ignore[arg-type]
        master="local[*]",
    )


def test_profiles_name_their_state_store() -> None:
    assert profile("dev-local").query_conf == {}
    rocks = profile("single-node-durable").query_conf
    assert rocks["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB
    assert rocks["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert profile("distributed-durable").query_conf == rocks
    with pytest.raises(SessionError, match="unknown durability 'durable'; choose one of dev-local"):
        profile("durable")


def test_a_session_hands_its_profile_and_state_to_its_engine(tmp_path: Path) -> None:
    s = kp.Session(
        None, owns_spark=False, state_dir=str(tmp_path), durability="single-node-durable", progress=False
    )
    assert s.profile is s.engine.profile and s.profile.name == "single-node-durable"
    assert s.progress is s.engine.progress is False
    assert s.state_dir == s.engine.state_dir == str(tmp_path)
    assert s.checkpoint_dir("clicks") == os.path.join(str(tmp_path), "checkpoints", "clicks")
    _, sender = s.memory_stream("k string, t bigint", name="clicks")
    assert s.engine.feed(os.path.join(str(tmp_path), "sources", "clicks", "data")) is sender


def test_where_each_profile_keeps_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_location("dev-local", None, master="local[*]") is None
    monkeypatch.delenv("KRISHIV_STATE_DIR", raising=False)
    default = check_location("single-node-durable", None, master="local[*]")
    assert default == os.path.abspath(os.path.expanduser(DEFAULT_STATE_DIR))
    monkeypatch.setenv("KRISHIV_STATE_DIR", str(tmp_path / "env"))
    assert check_location("single-node-durable", None, master="local[*]") == str(tmp_path / "env")
    with pytest.raises(SessionError, match="keeps state in a local directory; got 's3a://bucket/k'"):
        check_location("single-node-durable", "s3a://bucket/k", master="local[*]")
    assert (
        check_location("distributed-durable", "hdfs://nn:8020/k", master="spark://h:7077")
        == "hdfs://nn:8020/k"
    )
    assert check_location("distributed-durable", str(tmp_path), master="local[2]") == str(tmp_path)
    with pytest.raises(SessionError, match="needs state_dir: a URI every node of the cluster sees"):
        check_location("distributed-durable", None, master="spark://h:7077")


def test_distributed_durable_refuses_a_local_path_before_connecting(tmp_path: Path) -> None:
    # Nothing listens on this port: the error must come before any connection attempt.
    with pytest.raises(SessionError, match=r"is a local path and the master is 'spark://127.0.0.1:9'"):
        kp.Session.connect("spark://127.0.0.1:9", durability="distributed-durable", state_dir=str(tmp_path))


def test_a_uri_state_dir_has_no_memory_streams(session: kp.Session) -> None:
    remote = durable(session, "hdfs://namenode:8020/krishiv", "distributed-durable")
    with pytest.raises(SessionError, match="memory streams keep their batches in a local"):
        remote.memory_stream(SCHEMA)


def test_a_durable_job_runs_on_rocksdb_and_resumes_by_name(session: kp.Session, tmp_path: Path) -> None:
    def per_10(stream: kp.Stream) -> kp.Stream:
        return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    out = tmp_path / "out"
    first = durable(session, tmp_path)
    stream, sender = first.memory_stream(SCHEMA, name="clicks")
    job = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
    assert job.durability == "single-node-durable"
    assert job.checkpoint_dir == str(tmp_path / "checkpoints" / "per-10")
    sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}])
    sender.send([{"k": "a", "t": 15}])  # [0, 10) fires
    job.process_all_available()
    assert job.results().to_pylist()[0]["n"] == 2
    job.stop()
    offsets = sorted(glob.glob(str(tmp_path / "checkpoints" / "per-10" / "offsets" / "[0-9]*")))
    metadata = json.loads(Path(offsets[-1]).read_text().splitlines()[1])
    assert metadata["conf"]["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB
    first.stop()
    assert (tmp_path / "sources" / "clicks" / "data").is_dir()  # a durable session keeps its state

    # A new process: the same state_dir, stream name and job name pick up where it stopped.
    again = durable(session, tmp_path)
    stream, sender = again.memory_stream(SCHEMA, name="clicks")
    assert sender.batches_sent == 2
    sender.send([{"k": "a", "t": 16}, {"k": "a", "t": 17}])
    sender.close()
    with pytest.raises(kp.JobError, match="in-memory sink cannot resume"):
        per_10(stream).start(name="per-10")
    job = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
    try:
        assert job.await_termination(timeout_s=120)
        rows = sorted((r["window_start"].timestamp() * 1000, r["n"]) for r in job.results().to_pylist())
        assert rows == [(0.0, 2), (10.0, 3)]  # state restored: [10, 20) holds 15 from the first run
    finally:
        job.stop()
        again.stop()


def test_start_names_and_profiles_are_checked(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    windowed = stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))
    with pytest.raises(PlanError, match="a name or a checkpoint_dir, not both"):
        windowed.start(name="x", checkpoint_dir="/tmp/x")
    with pytest.raises(PlanError, match="job name 'a/b' must be letters"):
        windowed.start(name="a/b")
    with pytest.raises(SessionError, match="unknown durability"):
        windowed.start(durability="safe")  # type: ignore[arg-type]


def test_explain_shows_the_profile_and_where_checkpoints_go(session: kp.Session, tmp_path: Path) -> None:
    durable_session = durable(session, tmp_path)
    stream, _ = durable_session.memory_stream(SCHEMA)
    text = stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*"))).explain(show=False)
    assert "== Durability ==" in text
    assert "single-node-durable: RocksDB state store, changelog checkpointing; checkpoints kept" in text
    assert str(tmp_path / "checkpoints") in text
    bounded = session.from_records([{"k": "a", "t": 1}], SCHEMA)
    assert "a bounded run: one Spark batch job, no checkpoint" in (
        bounded.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*"))).explain(show=False)
    )


def test_a_changed_pipeline_cannot_resume_a_checkpoint(session: kp.Session, tmp_path: Path) -> None:
    def windows(size: int) -> Any:
        def build(stream: kp.Stream) -> kp.Stream:
            return stream.watermark("t", 0).tumbling_window(size).agg(kp.count(kp.col("*")).alias("n"))

        return build

    durable_session = durable(session, tmp_path)
    stream, sender = durable_session.memory_stream(SCHEMA, name="events")
    out = kp.ParquetSink(str(tmp_path / "out"))
    job = windows(10)(stream).start(out, name="counts")
    sender.send([{"k": "a", "t": 1}])
    job.process_all_available()
    job.stop()
    before = sorted(os.listdir(tmp_path / "checkpoints" / "counts" / "offsets"))
    changed = r"written by another pipeline.*tumbling\(size_ms=10\).*tumbling\(size_ms=20\)"
    with pytest.raises(kp.JobError, match=changed):
        windows(20)(stream).start(out, name="counts")
    assert sorted(os.listdir(tmp_path / "checkpoints" / "counts" / "offsets")) == before  # left intact
    job = windows(10)(stream).start(out, name="counts")  # the original pipeline resumes
    try:
        sender.send([{"k": "a", "t": 25}])
        job.process_all_available()
        assert [r["n"] for r in job.results().to_pylist()] == [1]  # [0, 10) fired once
    finally:
        job.stop()


def test_a_checkpoint_records_what_shapes_state_not_callbacks() -> None:
    from krishiv_py.plan.nodes import checkpoint_identity
    from krishiv_py.testing.steps import _placeholder

    def plan(handler: Any = None, ttl: kp.StateTtlConfig | None = None) -> Any:
        windowed = _placeholder(SCHEMA).watermark("t", 0).tumbling_window(10).allowed_lateness(50)
        if handler is not None:
            windowed = windowed.with_late_event_handler(handler)
        if ttl is not None:
            windowed = windowed.with_state_ttl(ttl)
        return checkpoint_identity(windowed.agg(kp.count(kp.col("*")).alias("n")).plan)

    # A replaced (or fixed) late-event handler can resume the checkpoint ...
    assert plan(Flaky()) == plan(kp.SideOutputLateEventHandler()) == plan()
    # ... a changed state TTL cannot: the state it kept means something else.
    event, processing = kp.StateTtlConfig(ttl_ms=100), kp.StateTtlConfig(ttl_ms=100, time="processing")
    assert len({plan(), plan(ttl=event), plan(ttl=processing)}) == 3


def test_a_change_after_the_last_stateful_operator_keeps_the_checkpoints_identity() -> None:
    """A filter or a projection after the last window shapes only what leaves the job (SPEC
    3.15); one before it, or a changed window, is another pipeline."""
    from krishiv_py.plan.nodes import checkpoint_identity
    from krishiv_py.testing.steps import _placeholder

    def windows(source: kp.Stream) -> kp.Stream:
        return source.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    stream = _placeholder(SCHEMA)
    plain = checkpoint_identity(windows(stream).plan)
    after = [
        windows(stream).filter(kp.col("n") > 1),
        windows(stream).select("k", "n"),
        windows(stream).filter(kp.col("n") > 1).select("k"),
    ]
    assert {checkpoint_identity(s.plan) for s in after} == {plain}
    before = windows(stream.filter(kp.col("k") != "x"))
    assert checkpoint_identity(before.plan) != plain
    later = windows(stream).filter(kp.col("n") > 1).key_by("k").agg(kp.count(kp.col("*")).alias("m"))
    assert checkpoint_identity(later.plan) != plain


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_filter_added_after_the_last_window_resumes_the_checkpoint(
    session: kp.Session, tmp_path: Path, lowering: Any
) -> None:
    stream, sender = session.memory_stream(SCHEMA)

    def windows(source: kp.Stream) -> kp.Stream:
        return source.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    checkpoint, out = str(tmp_path / "cp"), kp.ParquetSink(str(tmp_path / "out"))
    job = windows(stream).start(out, checkpoint_dir=checkpoint, lowering=lowering)
    try:
        sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}, {"k": "b", "t": 3}])
        job.process_all_available()
    finally:
        job.stop()
    job = windows(stream).filter(kp.col("n") > 1).start(out, checkpoint_dir=checkpoint, lowering=lowering)
    try:
        sender.send([{"k": "a", "t": 25}])
        job.process_all_available()
        got = [(r["k"], r["n"]) for r in job.results().to_pylist()]
    finally:
        job.stop()
    assert got == [("a", 2)]  # window [0, 10) kept its two rows across the restart; b's count 1 filtered


def test_a_checkpoint_records_how_a_chain_of_operators_lays_out_its_state() -> None:
    """A job whose operator runs more than one kernel records their kinds: a checkpoint whose state
    was laid out for other kernels (a cascade's second window once ran elsewhere) is refused, not
    read as this one's. One kernel records nothing more, as before."""
    from krishiv_py.runtime.launch import recorded_identity
    from krishiv_py.testing.steps import _placeholder

    counts = (
        _placeholder(SCHEMA)
        .watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .allowed_lateness(5)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    cascade = counts.key_by("k").tumbling_window(20).agg(kp.sum(kp.col("n")).alias("s"))
    top = counts.top_n(1, by="n")
    assert "operators:" not in recorded_identity(counts.plan, counts.lower())
    assert recorded_identity(cascade.plan, cascade.lower()).endswith(
        "operators: WindowKernel > ChangesWindowKernel\n"
    )
    assert recorded_identity(top.plan, top.lower()).endswith("operators: WindowKernel | KeyedTopNKernel\n")


class Flaky:
    """A late-event handler that fails while ``broken`` (a bug fixed between two runs)."""

    broken = True
    seen: ClassVar[list[int]] = []

    def handle(self, late: Any) -> None:
        if Flaky.broken:
            raise RuntimeError("handler bug")
        Flaky.seen += late.column("t").to_pylist()


def test_a_failed_job_resumes_from_its_last_committed_batch(session: kp.Session, tmp_path: Path) -> None:
    durable_session = durable(session, tmp_path)
    stream, sender = durable_session.memory_stream(SCHEMA, name="events")
    pipeline = (
        stream.watermark("t", 0)
        .tumbling_window(10)
        .with_late_event_handler(Flaky())
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    out = kp.ParquetSink(str(tmp_path / "out"))
    job = pipeline.start(out, name="with-handler")
    sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 15}])  # [0, 10) fires
    job.process_all_available()
    sender.send([{"k": "a", "t": 2}])  # very late: the handler raises, the job fails
    with pytest.raises(kp.JobError, match="handler bug"):
        job.process_all_available()
    assert job.state == "failed"
    Flaky.broken = False  # the fix
    job = pipeline.start(out, name="with-handler")
    try:
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert Flaky.seen == [2]  # the failed batch ran again, once
        rows = sorted((r["window_start"].timestamp() * 1000, r["n"]) for r in job.results().to_pylist())
        assert rows == [(0.0, 1), (10.0, 1)]  # nothing lost, nothing twice
    finally:
        job.stop()


def test_a_second_job_under_a_running_jobs_name_is_refused_and_the_first_goes_on(
    session: kp.Session, tmp_path: Path
) -> None:
    def per_10(stream: kp.Stream) -> kp.Stream:
        return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    named = durable(session, tmp_path)
    stream, sender = named.memory_stream(SCHEMA, name="clicks")
    out = tmp_path / "out"
    first = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
    try:
        sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}])
        first.process_all_available()
        for sink in (kp.ParquetSink(str(out)), kp.MemorySink()):
            with pytest.raises(kp.JobError) as caught:
                per_10(stream).start(sink, name="per-10")
            message = str(caught.value)
            assert "job 'per-10' is already running on the checkpoint" in message
            assert "job.stop()" in message and "another name" in message
            assert "delete" not in message.lower() and "offsets" not in message
        # The running job was not disturbed: it goes on with what it had and what comes.
        sender.send([{"k": "a", "t": 15}])
        first.process_all_available()
        assert first.is_active and first.results().to_pylist()[0]["n"] == 2
        first.stop()
        # Stopped, the name is free again: the same pipeline resumes it.
        sender.send([{"k": "a", "t": 16}])
        sender.close()
        again = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
        assert again.await_termination(timeout_s=120)
        rows = sorted((r["window_start"].timestamp() * 1000, r["n"]) for r in again.results().to_pylist())
        assert rows == [(0.0, 2), (10.0, 2)]
    finally:
        first.stop()
        named.stop()


@pytest.mark.parametrize("session_setting", [None, "100"])
def test_a_checkpoint_keeps_the_last_ten_micro_batches_unless_the_session_says(
    session: kp.Session, tmp_path: Path, session_setting: str | None
) -> None:
    """Spark keeps 100 micro-batches of logs and state; recovery needs the last, krishiv_py keeps 10."""
    from krishiv_py.runtime.run import RETAINED_BATCHES, RETAINED_BATCHES_CONF

    batches = RETAINED_BATCHES + 4
    if session_setting is not None:
        session.spark.conf.set(RETAINED_BATCHES_CONF, session_setting)
    try:
        s = durable(session, tmp_path)
        stream, sender = s.memory_stream(SCHEMA, name="clicks")
        windows = stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))
        job = windows.start(kp.ParquetSink(str(tmp_path / "out")), name="kept")
        try:
            for i in range(batches):
                sender.send([{"k": "a", "t": 10 * i}])
                job.process_all_available()
            assert job.metrics().batches >= batches
        finally:
            job.stop()
    finally:
        if session_setting is not None:
            session.spark.conf.unset(RETAINED_BATCHES_CONF)
    assert session.spark.conf.get(RETAINED_BATCHES_CONF, None) is None  # the session is as it was
    offsets = [n for n in os.listdir(tmp_path / "checkpoints" / "kept" / "offsets") if n.isdigit()]
    if session_setting is None:
        assert len(offsets) == RETAINED_BATCHES + 1  # Spark keeps the running batch's entry too
    else:
        assert len(offsets) >= batches  # the session's own setting: nothing purged yet


def forget_last_micro_batch(checkpoint: Path, out: Path) -> int:
    """The checkpoint and Parquet sink as a process killed just before its last micro-batch left them.

    That micro-batch must be one without new input (Spark's, firing what the watermark the one before
    it moved to makes due): its offsets, commit, state version and sink log entry go.
    """
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    offsets = [(checkpoint / "offsets" / str(b)).read_text().splitlines()[2:] for b in (last - 1, last)]
    assert offsets[0] == offsets[1], "the last micro-batch read input"
    doomed = [checkpoint / d / n for d in ("offsets", "commits") for n in (str(last), f".{last}.crc")]
    doomed += [out / "_spark_metadata" / n for n in (str(last), f".{last}.crc")]
    for pattern in (f"{last + 1}.*", f".{last + 1}.*"):  # the state store's version of it
        doomed += [Path(p) for p in glob.glob(str(checkpoint / "state" / "*" / "*" / pattern))]
    assert any(p.parent.parent.parent.name == "state" for p in doomed), "no state version found"
    for path in doomed:
        path.unlink(missing_ok=True)
    return last


@pytest.mark.parametrize("closed", [True, False], ids=["input-ended", "input-open"])
def test_a_job_killed_before_spark_fired_a_moved_watermark_fires_it_once_restarted(
    session: kp.Session, tmp_path: Path, closed: bool
) -> None:
    """Spark fires what a moved watermark makes due in a micro-batch of no input, and after a restart
    only once a micro-batch of the new run ran: without input left the windows would never come."""

    def per_10(stream: kp.Stream) -> kp.Stream:
        return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    def windows(job: kp.Job) -> list[tuple[float, int]]:
        return sorted((r["window_start"].timestamp() * 1000, r["n"]) for r in job.results().to_pylist())

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoints" / "per-10"
    first = durable(session, tmp_path)
    stream, sender = first.memory_stream(SCHEMA, name="clicks")
    job = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
    sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}])
    sender.send([{"k": "a", "t": 15}])  # the watermark moves to 15: [0, 10) is due
    if closed:
        sender.close()  # the watermark moves to the end of time: [10, 20) is due
        assert job.await_termination(timeout_s=120)
    else:
        job.process_all_available()
    want = [(0.0, 2), (10.0, 1)] if closed else [(0.0, 2)]
    assert windows(job) == want
    job.stop()
    first.stop()
    forget_last_micro_batch(checkpoint, out)

    again = durable(session, tmp_path)
    stream, sender = again.memory_stream(SCHEMA, name="clicks")
    assert sender.closed is closed
    job = per_10(stream).start(kp.ParquetSink(str(out)), name="per-10")
    try:
        if closed:
            assert job.await_termination(timeout_s=120)
        else:
            job.process_all_available()
        assert windows(job) == want  # each window once: the last one fired in the restarted run
        assert sender.batches_sent == (3 if closed else 2)  # the micro-batch of no rows is no batch
    finally:
        job.stop()
        again.stop()


def test_a_checkpoint_recorded_with_its_last_filter_resumes_and_is_recorded_anew(tmp_path: Path) -> None:
    """Checkpoints recorded the whole plan before: the same pipeline still resumes them."""
    from krishiv_py.checkpoint import CheckpointLayout
    from krishiv_py.runtime.launch import check_plan, recorded_identity
    from krishiv_py.testing.steps import _placeholder

    windows = (
        _placeholder(SCHEMA).watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")))
    )
    filtered = windows.filter(kp.col("count") > 1)
    recipe = filtered.lower(lowering="native")
    layout = CheckpointLayout(str(tmp_path))
    old = recorded_identity(filtered.plan, recipe, whole=True)
    (tmp_path / "krishiv-plan.txt").write_text(old)
    new = recorded_identity(filtered.plan, recipe)
    assert new != old
    check_plan(layout, new, was=old)
    assert (tmp_path / "krishiv-plan.txt").read_text() == new
    other = _placeholder(SCHEMA).watermark("t", 0).key_by("k").tumbling_window(20).agg(kp.count(kp.col("*")))
    with pytest.raises(kp.JobError, match="written by another pipeline"):
        check_plan(
            layout,
            recorded_identity(other.plan, recipe),
            was=recorded_identity(other.plan, recipe, whole=True),
        )


@pytest.mark.parametrize("log", ["offsets", "commits"])
def test_a_job_killed_while_spark_wrote_its_first_log_entry_starts_again(
    session: kp.Session, tmp_path: Path, log: str
) -> None:
    """Spark writes a log entry to a hidden temporary file and then renames it: a job killed in
    between leaves the file, and Spark refuses to start a checkpoint with no micro-batch yet whose
    logs hold anything (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). Nothing was planned there, so
    the start removes the file and the job runs from the beginning."""
    checkpoint = tmp_path / "checkpoints" / "first-write"
    leftover = checkpoint / log / ".0.3f2c5a9e-1b7d-4c60-9d1e-7a8b9c0d1e2f.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text('v1\n{"batchWatermarkMs":0,"batchTim')  # cut off mid-write
    (leftover.parent / f".{leftover.name}.crc").write_bytes(b"crc\x00")
    s = durable(session, tmp_path)
    stream, sender = s.memory_stream(SCHEMA, name="clicks")
    pipeline = stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))
    if log == "offsets":  # any other file in a log is not ours to remove: Spark's refusal stands
        kept = checkpoint / log / "notes.txt"
        kept.write_text("kept")
        with pytest.raises(kp.JobError, match="should be empty on batch 0"):
            pipeline.start(kp.ParquetSink(str(tmp_path / "out")), name="first-write").process_all_available()
        kept.unlink()
    job = pipeline.start(kp.ParquetSink(str(tmp_path / "out")), name="first-write")
    try:
        sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}, {"k": "a", "t": 15}])
        job.process_all_available()
        rows = [(r["k"], r["window_start"].timestamp() * 1000, r["n"]) for r in job.results().to_pylist()]
        assert rows == [("a", 0.0, 2)]
        assert not leftover.exists()
    finally:
        job.stop()
        s.stop()
