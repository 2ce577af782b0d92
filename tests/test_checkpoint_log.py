"""Spark's checkpoint logs as the spool and the timeline read them: a checkpoint written by hand, no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from krishiv_py.checkpoint import (
    CheckpointLayout,
    FileEntry,
    committed_batch,
    file_source_log,
    log_offset,
    source_offsets,
)
from krishiv_py.errors import PlanError
from krishiv_py.runtime.spool import committed_seq


def write_log(path: Path, lines: list[str], version: str = "v1") -> None:
    path.write_text(version + "\n" + "\n".join(lines) + "\n", encoding="utf-8")


def spool_file(data: Path, batch: int) -> str:
    return f"file://{data}/batch-{batch:012d}-data.parquet"


def checkpoint_reading(tmp_path: Path, *, committed: int, read: int) -> tuple[Path, Path]:
    """A query that read spool batches 0..``read`` (one per micro-batch) and committed ``committed``."""
    data = tmp_path / "stream" / "data"
    checkpoint = tmp_path / "checkpoint"
    for sub in ("sources/0", "offsets", "commits"):
        (checkpoint / sub).mkdir(parents=True)
    for batch in range(read + 1):
        entry = {"path": spool_file(data, batch), "timestamp": 1_000 + batch, "batchId": batch}
        write_log(checkpoint / f"sources/0/{batch}", [json.dumps(entry)])
        meta = json.dumps({"batchWatermarkMs": 0})
        write_log(checkpoint / f"offsets/{batch}", [meta, json.dumps({"logOffset": batch})])
    for batch in range(committed + 1):
        write_log(checkpoint / f"commits/{batch}", ["{}"])
    return checkpoint, data


def test_the_logs_of_a_checkpoint(tmp_path: Path) -> None:
    checkpoint, data = checkpoint_reading(tmp_path, committed=2, read=3)
    (checkpoint / "commits/.2.crc").write_text("x")
    (checkpoint / "sources/0/.3.tmp").write_text("x")
    assert committed_batch(str(checkpoint)) == 2
    assert committed_batch(str(tmp_path / "nowhere")) == -1
    assert source_offsets(str(checkpoint), 2) == ['{"logOffset": 2}']
    entries = sorted(file_source_log(str(checkpoint / "sources/0")))
    assert entries == [FileEntry(b, spool_file(data, b), 1_000 + b) for b in range(4)]
    assert file_source_log(str(checkpoint / "sources/9")) == []
    assert committed_seq(str(checkpoint), str(data)) == 2


def test_offsets_of_file_sources_and_of_none() -> None:
    assert log_offset('{"logOffset": 7}') == 7
    assert log_offset({"logOffset": 7}) == 7
    assert log_offset("-") is None and log_offset("") is None and log_offset(None) is None
    assert log_offset('{"topic": {"0": 5}}') is None  # another source's offset


def test_a_log_that_is_not_v1_is_refused_and_the_spool_holds_everything(tmp_path: Path) -> None:
    checkpoint, data = checkpoint_reading(tmp_path, committed=1, read=1)
    write_log(checkpoint / "offsets/1", ["{}", json.dumps({"logOffset": 1})], version="v2")
    with pytest.raises(PlanError, match=r"unknown Spark offset log format in .*offsets/1"):
        source_offsets(str(checkpoint), 1)
    assert committed_seq(str(checkpoint), str(data)) == -1
    write_log(checkpoint / "offsets/1", ["{}", json.dumps({"logOffset": 1})])
    assert committed_seq(str(checkpoint), str(data)) == 1
    write_log(checkpoint / "sources/0/1", [], version="v2")
    with pytest.raises(PlanError, match=r"unknown Spark file-source log format in .*sources/0/1"):
        file_source_log(str(checkpoint / "sources/0"))
    assert committed_seq(str(checkpoint), str(data)) == -1


def test_a_first_log_entry_left_half_written_goes_only_while_nothing_was_planned(tmp_path: Path) -> None:
    """Spark's temporary files of a log entry (``.<batch>.<uuid>.tmp`` and its checksum) go while
    no micro-batch is in the offset log; every other file stays, and nothing goes once one is."""
    checkpoint = tmp_path / "checkpoint"
    uuid = "0b5c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d"
    doomed = [f"offsets/.0.{uuid}.tmp", f"offsets/..0.{uuid}.tmp.crc", f"commits/.0.{uuid}.tmp"]
    kept = ["offsets/notes.tmp", "offsets/.0.tmp", "commits/.0.crc", f"state/.0.{uuid}.tmp"]
    kept.append("krishiv-plan.txt")
    for name in doomed + kept:
        (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoint / name).write_text("x")
    layout = CheckpointLayout(str(checkpoint))
    assert sorted(layout.drop_unfinished_first_entries()) == sorted(str(checkpoint / n) for n in doomed)
    assert [n for n in doomed + kept if (checkpoint / n).exists()] == kept
    assert layout.drop_unfinished_first_entries() == []
    (checkpoint / f"offsets/.1.{uuid}.tmp").write_text("x")  # a later entry's, once one was planned
    write_log(checkpoint / "offsets/0", [json.dumps({"batchWatermarkMs": 0})])
    assert layout.drop_unfinished_first_entries() == []
    assert (checkpoint / f"offsets/.1.{uuid}.tmp").exists()
    assert CheckpointLayout(str(tmp_path / "nowhere")).drop_unfinished_first_entries() == []
