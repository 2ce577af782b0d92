"""Checkpoints in an object store: krishiv's records and the operator's state through S3's protocol.

A job whose checkpoint is a URI (``s3a://``, ``gs://``, ``hdfs://``) keeps the
stateful operator's state on the fast carrier (``krishiv-files``) there, read and
written by pyarrow's file systems (:mod:`krishiv_py.files`). An S3-protocol server
(moto, on loopback) stands in for the store here. Spark's own side of such a
checkpoint (its offset and commit logs through Hadoop's S3A connector) needs
``hadoop-aws`` from Maven, which these tests cannot install: they run a real job
on a local checkpoint, copy the checkpoint into the store, and read it there —
the logs, the records, the state — against what the same reads give here; and
they run the launcher's records against the store itself (the operator's
versioned state in the store: tests/test_held_state.py). The server is the
``s3_bucket`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from krishiv_py import files
from krishiv_py.checkpoint import CheckpointLayout, file_source_log
from krishiv_py.errors import JobError, PlanError
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.runtime import launch
from krishiv_py.runtime.auto_watermark import AutoWatermark
from krishiv_py.runtime.idle import FileFeed
from krishiv_py.runtime.state_view import describe_state, read_state


def test_files_in_the_store_are_written_whole_listed_and_read_back(s3_bucket: str) -> None:
    root = files.join(s3_bucket, "basics")
    assert files.names(root) == [] and not files.exists(root)
    files.write_bytes(files.join(root, "a", "one.json"), b'{"x": 1}\n')
    files.write_bytes(files.join(root, "a", "two"), b"")
    files.write_bytes(files.join(root, "a", "two"), b"second")  # over the first
    assert files.names(files.join(root, "a")) == ["one.json", "two"]  # no temporary object left
    assert files.read_bytes(files.join(root, "a", "two")) == b"second"
    # Hadoop's name of S3 and S3's own name reach the same object.
    assert files.read_bytes(f"s3://{s3_bucket.removeprefix('s3a://')}/basics/a/one.json") == b'{"x": 1}\n'
    assert files.is_dir(files.join(root, "a")) and not files.is_dir(files.join(root, "a", "two"))
    stat = files.stat(files.join(root, "a", "two"))
    assert stat is not None and stat[1] == len(b"second")
    assert files.bytes_under(root) == len(b'{"x": 1}\n') + len(b"second")
    with pytest.raises(FileNotFoundError):
        files.read_bytes(files.join(root, "a", "three"))
    files.delete(files.join(root, "a", "one.json"))
    files.delete(files.join(root, "a", "one.json"))  # gone already: nothing
    assert files.names(files.join(root, "a")) == ["two"]


def test_the_launchers_records_live_in_the_store(s3_bucket: str) -> None:
    """A new job on an ``s3a://`` checkpoint runs on krishiv's own files there; the plan it records
    refuses another pipeline; its key groups move to another task count on restart."""
    checkpoint = CheckpointLayout(files.join(s3_bucket, "launch"))
    assert launch.operator_carrier(checkpoint, None) == "krishiv-files"
    plan = "lowering: stateful\nplan: window(k)\ncarrier: krishiv-files\n"
    launch.check_plan(checkpoint, plan)
    assert launch.recorded_carrier(checkpoint) == "krishiv-files"
    launch.check_plan(checkpoint, plan)  # the same pipeline again: fine
    with pytest.raises(JobError, match=r"another pipeline.*plan: window\(k\).*plan: window\(u\)"):
        launch.check_plan(checkpoint, plan.replace("(k)", "(u)"))
    assert files.read_bytes(checkpoint.plan_file).decode() == plan  # left as it was

    first = launch.operator_layout(checkpoint, 2, asked="64", movable=True, what="a window")
    assert (first.key_groups, first.tasks, first.since) == (64, 2, 0)
    for batch in (0, 1, 2):  # as Spark's commit log would hold them
        files.write_bytes(files.join(checkpoint.commits, str(batch)), b'v1\n{"nextBatchWatermarkMs":0}\n')
    moved = launch.operator_layout(checkpoint, 8, asked=None, movable=True, what="a window")
    assert (moved.key_groups, moved.tasks, moved.since) == (64, 8, 3)
    assert launch.operator_layout(checkpoint, 8, asked=None, movable=True, what="a window") == moved
    with pytest.raises(JobError, match="hashes its keys into 64 key groups"):
        launch.operator_layout(checkpoint, 8, asked="128", movable=True, what="a window")


def test_a_store_this_process_cannot_open_keeps_the_state_in_sparks_store() -> None:
    checkpoint = CheckpointLayout("nosuchstore://somewhere/ckpt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert launch.operator_carrier(checkpoint, None) == "state-store"
    assert any("cannot read the checkpoint nosuchstore://" in str(w.message) for w in caught)
    assert launch.operator_carrier(checkpoint, "krishiv-files") == "krishiv-files"  # asked: as asked
    # Spark's state there is Spark's to read: the records a look inside needs are left out.
    assert launch.operator_buckets(checkpoint, 2) == 16
    launch.check_plan(checkpoint, "lowering: native\nplan\n")
    with pytest.raises(PlanError, match=r"automatic lag .* cannot read .*nosuchstore://"):
        AutoWatermark(checkpoint, [("clicks", AutoLag())])


def test_feeds_and_automatic_lag_records_in_the_store(s3_bucket: str) -> None:
    root = files.join(s3_bucket, "feeds")
    feed = FileFeed(files.join(root, "ticks"), "tick")
    feed.write_column("t", [1, 2])
    feed.write_column("t", [3])
    again = FileFeed(files.join(root, "ticks"), "tick")  # a restart counts on
    again.write_column("t", [4])
    names = files.names(files.join(root, "ticks"))
    assert names == [f"tick-{i:012d}.parquet" for i in range(3)]
    import pyarrow.parquet as pq

    last = pa.BufferReader(files.read_bytes(files.join(root, "ticks", names[-1])))
    assert pq.read_table(last).column("t").to_pylist() == [4]

    layout = CheckpointLayout(root)
    assert not layout.has_auto_lag_records() and layout.auto_lag_record(0) is None
    for batch in range(6):
        layout.write_auto_lag_record(batch, f"lag {batch}".encode(), keep=2)
    assert layout.auto_lag_record(5) == b"lag 5" and layout.auto_lag_record(1) is None  # pruned
    assert layout.has_auto_lag_records()


@pytest.mark.spark
def test_a_jobs_checkpoint_copied_into_the_store_reads_there_as_it_does_here(
    session: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """A stateful job's checkpoint (krishiv's own files, key groups, Spark's logs) copied into S3:
    its logs, records, state and ``krishiv state show`` read the same there as here."""
    from pyarrow import fs

    import krishiv_py as kp

    local = str(tmp_path / "cp")
    stream, sender = session.memory_stream("k string, t bigint", name="object_store_job")
    counted = (
        stream.watermark("t", 0).key_by("k").tumbling_window(1_000).agg(kp.count(kp.col("*")).alias("n"))
    )
    job = counted.start(kp.MemorySink(), checkpoint_dir=local, lowering="stateful")
    try:
        for rows_in in ([("a", 100), ("b", 200), ("a", 300)], [("c", 1_500), ("a", 900)], [("b", 2_500)]):
            sender.send([{"k": k, "t": t} for k, t in rows_in])
            job.process_all_available()
    finally:
        job.stop()
    here = CheckpointLayout(local)
    assert launch.recorded_carrier(here) == "krishiv-files"

    store, path = files.file_system(files.join(s3_bucket, "copied"))
    fs.copy_files(local, path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=store)
    there = CheckpointLayout(files.join(s3_bucket, "copied"))

    last = here.committed_batch()
    assert last >= 2 and there.committed_batch() == last and there.has_offsets()
    for batch in range(last + 1):
        assert there.batch_watermark_ms(batch) == here.batch_watermark_ms(batch)
        assert there.next_watermark_ms(batch) == here.next_watermark_ms(batch)
        assert there.source_offsets(batch) == here.source_offsets(batch)
    assert there.source_logs() == here.source_logs()
    assert file_source_log(there.source_log(0)) == file_source_log(here.source_log(0))
    assert launch.recorded_carrier(there) == "krishiv-files"

    def rows(table: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r.values()) for r in table.to_pylist())

    state = read_state(local)
    assert state.num_rows and rows(read_state(there.root)) == rows(state)
    shown_here, shown_there = describe_state(local), describe_state(there.root)
    assert shown_there.pop("checkpoint") == there.root and shown_here.pop("checkpoint") == local
    assert shown_there == shown_here
