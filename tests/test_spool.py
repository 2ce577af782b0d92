"""The spool of a memory stream: retention of committed batches, and resuming it in a new process."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.errors import JobError, PlanError
from krishiv_py.runtime.spool import committed_seq, read_manifest

SCHEMA = "k string, t bigint"


def attached(shared: kp.Session, state_dir: Path, durability: str = "dev-local") -> kp.Session:
    """A session on ``state_dir`` sharing the test run's Spark (a new process would start its own)."""
    return kp.Session(
        shared.spark,
        owns_spark=False,
        state_dir=str(state_dir),
        durability=durability,  # type: ignore[arg-type]
        master="local[*]",
    )


def data_files(state_dir: Path, name: str) -> list[str]:
    return sorted(p.name for p in (state_dir / "sources" / name / "data").glob("batch-*.parquet"))


def batch(i: int, size: int = 3) -> list[dict[str, Any]]:
    return [{"k": "ab"[j % 2], "t": 10 * i + j} for j in range(size)]


def test_retention_is_checked_and_defaults_to_keeping_everything(session: kp.Session, tmp_path: Path) -> None:
    s = attached(session, tmp_path)
    with pytest.raises(PlanError, match="retention must be one of 'all', 'committed', got 'forever'"):
        s.memory_stream(SCHEMA, name="bad", retention="forever")  # type: ignore[arg-type]
    _, sender = s.memory_stream(SCHEMA, name="kept")
    assert sender.retention == "all"


def test_under_retention_the_spool_stays_bounded_and_results_are_exact(
    session: kp.Session, tmp_path: Path
) -> None:
    s = attached(session, tmp_path)
    stream, sender = s.memory_stream(SCHEMA, name="ticks", retention="committed")
    sender.send(batch(0))  # sent before any job reads the stream: kept for the first one
    job = stream.select(kp.col("k"), kp.col("t")).start()
    data = tmp_path / "sources" / "ticks" / "data"
    for i in range(1, 80):
        sender.send(batch(i))
        if i % 10 == 0:
            job.process_all_available()
            # Everything committed is gone (a send may have followed): bounded by files and bytes.
            files = data_files(tmp_path, "ticks")
            assert len(files) <= 2, files
            assert sum(f.stat().st_size for f in data.iterdir()) < 16 * 1024
    sender.close()
    assert job.await_termination(timeout_s=120)
    rows = job.results().to_pylist()
    assert sorted((r["k"], r["t"]) for r in rows) == sorted(
        (r["k"], r["t"]) for i in range(80) for r in batch(i)
    )
    assert sum(f.stat().st_size for f in data.iterdir()) < 16 * 1024
    assert read_manifest(str(tmp_path / "sources" / "ticks")).first_kept >= 70
    job.stop()

    # Counters survive deletion: a new process re-attaching sees where the producer stopped.
    again = attached(session, tmp_path)
    stream, resumed = again.memory_stream(SCHEMA, name="ticks", retention="committed")
    assert (resumed.batches_sent, resumed.closed) == (81, True)
    # What was deleted cannot be read again: a new job and a bounded run say so.
    with pytest.raises(JobError, match=r"'ticks' deleted batches 0\.\.\d+ .*committed none of them"):
        stream.start()
    with pytest.raises(JobError, match=r"collect\(\)\) reads every batch of memory stream 'ticks'"):
        stream.collect()
    s.stop()


def test_a_stopped_named_job_holds_the_batches_it_has_not_committed(
    session: kp.Session, tmp_path: Path
) -> None:
    s = attached(session, tmp_path)
    stream, sender = s.memory_stream(SCHEMA, name="shared", retention="committed")
    fast = stream.start(name="fast")
    slow = stream.start(kp.ParquetSink(str(tmp_path / "slow")), name="slow")
    for i in range(3):
        sender.send(batch(i))
    slow.process_all_available()
    slow.stop()  # named: a reader until its checkpoint is removed
    for i in range(3, 6):
        sender.send(batch(i))
    fast.process_all_available()
    assert committed_seq(str(tmp_path / "checkpoints" / "slow"), str(tmp_path / "sources/shared/data")) == 2
    assert data_files(tmp_path, "shared") == [f"batch-{i:012d}-data.parquet" for i in (3, 4, 5)]
    # The named job resumes, catches up, and only then are its batches deleted.
    slow = stream.start(kp.ParquetSink(str(tmp_path / "slow")), name="slow")
    sender.close()
    assert slow.await_termination(timeout_s=60) and fast.await_termination(timeout_s=60)
    assert len(slow.results()) == len(fast.results()) == 18
    assert data_files(tmp_path, "shared") == []
    assert (sender.batches_sent, sender.closed) == (7, True)
    s.stop()


#: A producer process: it feeds the stream and needs no Spark (the jobs run in the test process).
PRODUCER = """
import sys
import krishiv_py as kp
from tests.test_spool import SCHEMA, batch

session = kp.Session(None, owns_spark=False, state_dir=sys.argv[1], durability="single-node-durable")
_, sender = session.memory_stream(SCHEMA, name="clicks", retention="committed")
for i in range(3):
    sender.send(batch(i))
print("sent", sender.batches_sent, flush=True)
sys.stdin.readline()
for i in range(3, 5):
    sender.send(batch(i))
print("sent", sender.batches_sent, flush=True)
sys.stdin.read()  # until it is killed: no close()
"""


def per_10(stream: kp.Stream) -> kp.Stream:
    return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))


def test_a_memory_stream_and_its_job_resume_after_the_producer_is_killed(
    session: kp.Session, tmp_path: Path
) -> None:
    first = attached(session, tmp_path, "single-node-durable")
    stream, _ = first.memory_stream(SCHEMA, name="clicks", retention="committed")
    job = per_10(stream).start(kp.ParquetSink(str(tmp_path / "out")), name="per-10")
    producer = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(tmp_path)],
        cwd=Path(__file__).resolve().parent.parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert producer.stdin is not None and producer.stdout is not None
        assert producer.stdout.readline().split() == ["sent", "3"]
        job.process_all_available()  # batches 0..2 committed, and deleted
        producer.stdin.write("go on\n")
        producer.stdin.flush()
        assert producer.stdout.readline().split() == ["sent", "5"]
    finally:
        producer.send_signal(signal.SIGKILL)
        producer.wait(timeout=60)
    job.stop()
    first.stop()

    # A new process: the same state_dir, stream name and job name.
    again = attached(session, tmp_path, "single-node-durable")
    stream, sender = again.memory_stream(SCHEMA, name="clicks", retention="committed")
    assert (sender.batches_sent, sender.closed) == (5, False)
    kept = data_files(tmp_path, "clicks")
    assert kept[0] >= "batch-000000000003" and kept[-1] == "batch-000000000004-data.parquet"
    job = per_10(stream).start(kp.ParquetSink(str(tmp_path / "out")), name="per-10")
    try:
        for i in range(sender.batches_sent, 8):
            sender.send(batch(i))
        sender.close()
        assert job.await_termination(timeout_s=120)
        got = Counter(
            (r["k"], r["window_start"].timestamp() * 1000, r["n"]) for r in job.results().to_pylist()
        )
        want = Counter(
            (k, 10.0 * i, n) for i in range(8) for k, n in Counter(r["k"] for r in batch(i)).items()
        )
        assert got == want  # every window once: nothing lost, nothing counted twice
        assert data_files(tmp_path, "clicks") == []  # the only reader committed everything
    finally:
        job.stop()
        again.stop()


def _spark_logs(checkpoint: Path, data: Path, batches: int, compact_every: int = 10) -> None:
    """A checkpoint as Spark writes it for one file source reading ``data``: two spool files a batch."""
    import json

    def line(b: int, seq: int) -> str:
        path = f"file://{data}/batch-{seq:012d}-data.parquet"
        return json.dumps({"path": path, "timestamp": 1000 + seq, "batchId": b})

    log = checkpoint / "sources" / "0"
    log.mkdir(parents=True)
    for b in range(batches):
        lines = [line(b, 2 * b), line(b, 2 * b + 1)]
        if (b + 1) % compact_every == 0:  # a compaction batch: every batch so far, in <b>.compact
            lines = [line(x, s) for x in range(b + 1) for s in (2 * x, 2 * x + 1)]
            (log / f"{b}.compact").write_text("v1\n" + "\n".join(lines) + "\n")
        else:
            (log / str(b)).write_text("v1\n" + "\n".join(lines) + "\n")
    for name in ("offsets", "commits"):
        (checkpoint / name).mkdir()
    last = batches - 1
    offsets = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps({"logOffset": last})]
    (checkpoint / "offsets" / str(last)).write_text("\n".join(offsets) + "\n")
    (checkpoint / "commits" / str(last)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


@pytest.mark.parametrize("batches", [13, 10, 1])
def test_the_committed_spool_file_is_read_from_the_committed_log_batch(tmp_path: Path, batches: int) -> None:
    """From the batch's own log file when there is one, else from the whole log (a compaction batch)."""
    data = tmp_path / "sources" / "clicks" / "data"
    _spark_logs(tmp_path / "ck", data, batches)
    assert committed_seq(str(tmp_path / "ck"), str(data)) == 2 * batches - 1
    assert committed_seq(str(tmp_path / "ck"), str(tmp_path / "another")) == -1  # a stream it does not read


def test_a_committed_micro_batch_that_read_only_a_nudge_keeps_the_spool_position(tmp_path: Path) -> None:
    """A restarted job's micro-batch of no rows (``Sender.nudge``) reads no spool file: the committed
    spool file is the newest one in the log, not none (which would stall retention)."""
    import json

    data, ck = tmp_path / "sources" / "clicks" / "data", tmp_path / "ck"
    _spark_logs(ck, data, 3)  # spool files 0..5 committed by micro-batches 0..2
    nudge = {"path": f"file://{data}/nudge-00000000000000000001.parquet", "timestamp": 2000, "batchId": 3}
    (ck / "sources" / "0" / "3").write_text("v1\n" + json.dumps(nudge) + "\n")
    offsets = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps({"logOffset": 3})]
    (ck / "offsets" / "3").write_text("\n".join(offsets) + "\n")
    (ck / "commits" / "3").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert committed_seq(str(ck), str(data)) == 5


def test_retention_deletes_a_nudge_with_the_first_committed_batch_newer_than_it(tmp_path: Path) -> None:
    """A nudge file (a restarted job's micro-batch of no rows) goes once a batch file read after it is
    deleted; one newer than every deleted batch stays (a reader may not have read it yet)."""
    import json
    import os

    from krishiv_py.runtime.spool import Spool

    spool_dir = tmp_path / "sources" / "clicks"
    data, ck = spool_dir / "data", tmp_path / "ck"
    data.mkdir(parents=True)
    _spark_logs(ck, data, 3)  # spool files 0..5 committed by micro-batches 0..2
    files = {f"batch-{seq:012d}-data.parquet": 1_000.0 + seq for seq in range(8)}
    files["nudge-00000000000000000001.parquet"] = 1_003.5  # read between batches 3 and 4: deleted
    files["nudge-00000000000000000002.parquet"] = 1_006.5  # read after batch 6: kept
    for name, second in files.items():
        (data / name).write_bytes(b"")
        os.utime(data / name, ns=(int(second * 1e9), int(second * 1e9)))
    (spool_dir / "readers").mkdir()
    (spool_dir / "readers" / "job.json").write_text(json.dumps({"checkpoint": str(ck), "pid": None}))
    Spool(str(spool_dir), retention="committed").clean()
    left = sorted(p.name for p in data.iterdir())
    assert left == [
        "batch-000000000006-data.parquet",
        "batch-000000000007-data.parquet",
        "nudge-00000000000000000002.parquet",
    ]
    assert read_manifest(str(spool_dir)).first_kept == 6
