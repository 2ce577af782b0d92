"""A checkpoint disk that fills up or turns read-only under a running job: a clear error, then a clean resume.

The disk is a small tmpfs the test mounts (and always unmounts): where this
process may not mount one (not root, or no ``mount``), the tests skip.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.runtime.bad_files import disk_hint

SCHEMA = "k string, t bigint"


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs at ``tmp_path / "disk"``, unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        done = _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk))
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Write a file on ``disk`` until it is full (unbuffered, to the last block); the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 512, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler


def durable(shared: kp.Session, state_dir: Path) -> kp.Session:
    return kp.Session(
        shared.spark, owns_spark=False, state_dir=str(state_dir), durability="dev-local", master="local[*]"
    )


def per_10(stream: kp.Stream) -> kp.Stream:
    return stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))


def test_the_hint_says_what_happened_and_the_way_back(tmp_path: Path) -> None:
    # The disks here are not full: the hint cannot tell which one was, and says so.
    text = f"java.io.IOException: No space left on device\n  at file:{tmp_path}/in/part-1.parquet"
    hint = disk_hint(text, str(tmp_path / "ckpt"))
    assert f"A disk the job writes to (its checkpoint is {tmp_path}/ckpt) is full" in hint
    assert "start the pipeline again under its name" in hint
    assert "is read-only (Read-only file system)" in disk_hint("IOException: Read-only file system", "/x")
    assert disk_hint("java.lang.ArithmeticException: overflow", "/mnt/ckpt") == ""


@pytest.mark.parametrize(
    ("fault", "lowering"), [("full", "native"), ("full", "stateful"), ("read-only", "native")]
)
def test_a_full_or_read_only_checkpoint_disk_fails_clearly_and_the_job_resumes_exactly_once(
    session: kp.Session, tmp_path: Path, small_disk: Path, fault: str, lowering: Any
) -> None:
    s = durable(session, tmp_path / "state")
    stream, sender = s.memory_stream(SCHEMA, name="clicks")
    out, ckpt = tmp_path / "out", small_disk / "ckpt"

    def started() -> kp.Job:
        return per_10(stream).start(kp.ParquetSink(str(out)), checkpoint_dir=str(ckpt), lowering=lowering)

    job = started()
    try:
        sender.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}])
        job.process_all_available()
        filler = fill(small_disk) if fault == "full" else None
        if fault == "read-only":
            done = _mount("-o", "remount,ro", str(small_disk))
            assert done.returncode == 0, done.stderr
        sender.send([{"k": "a", "t": 15}])
        with pytest.raises(kp.JobError) as caught:
            job.process_all_available()
        message = str(caught.value)
        needle = "No space left on device" if fault == "full" else "Read-only file system"
        assert needle in message and f"The disk under {ckpt}" in message, message
        assert "start the pipeline again under its name (or checkpoint_dir)" in message
        assert "delete" not in message.lower()
    finally:
        job.stop()
    if filler is not None:
        os.remove(filler)
    else:
        assert _mount("-o", "remount,rw", str(small_disk)).returncode == 0
    sender.send([{"k": "a", "t": 16}, {"k": "a", "t": 25}])
    sender.close()
    again = started()
    try:
        assert again.await_termination(timeout_s=180)
        rows = sorted(
            (int(r["window_start"].timestamp() * 1000), r["n"]) for r in again.results().to_pylist()
        )
        assert rows == [(0, 2), (10, 2), (20, 1)]  # every window once: nothing lost, nothing twice
    finally:
        again.stop()
        s.stop()
