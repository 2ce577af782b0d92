"""Source files a streaming job cannot read: ``bad_files="fail"`` names them, ``"quarantine"`` moves them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.runtime.bad_files import BadFiles, BadFileSource, fail_hint, files_named, quarantined_files

SCHEMA = "k string, t bigint, v bigint"


def write(directory: Path, name: str, first: int, n: int, *, torn: bool = False) -> None:
    """``n`` rows ``v = first .. first + n - 1`` as a Parquet file moved into ``directory``."""
    table = pa.table(
        {
            "k": [f"k{i % 3}" for i in range(first, first + n)],
            "t": list(range(first, first + n)),
            "v": list(range(first, first + n)),
        }
    )
    staging = directory.parent / f".{directory.name}-staging"
    staging.mkdir(exist_ok=True)
    tmp = staging / name
    pq.write_table(table, tmp)
    if torn:  # written halfway: the footer is gone
        data = tmp.read_bytes()
        tmp.write_bytes(data[: len(data) // 2])
    os.replace(tmp, directory / name)


def torn_among_good(tmp_path: Path) -> Path:
    """A source directory of three files, the middle one torn: rows 0-2 and 6-8 are readable."""
    src = tmp_path / "in"
    src.mkdir()
    write(src, "part-0.parquet", 0, 3)
    write(src, "part-1.parquet", 3, 3, torn=True)
    write(src, "part-2.parquet", 6, 3)
    return src


def values(job: kp.Job) -> list[int]:
    return sorted(r["v"] for r in job.results().to_pylist())


# --- no Spark -----------------------------------------------------------------------------------------


def test_files_a_spark_error_names_are_found_and_mapped_to_their_source(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "part-2.parquet").write_bytes(b"PAR1 torn")
    cause = (
        "org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
        f"file://{src}/part-2.parquet. SQLSTATE: KD001\n"
        f"Caused by: java.lang.RuntimeException: file:{src}/part-2.parquet is not a Parquet file."
    )
    assert files_named(cause) == [f"{src}/part-2.parquet"]
    sources = [BadFileSource("clicks", str(src), "quarantine"), BadFileSource("other", "/elsewhere", "fail")]
    quarantine = tmp_path / "q"
    moved = BadFiles(str(quarantine), sources).set_aside(cause)
    assert moved == str(quarantine / "files" / "clicks" / "part-2.parquet")
    assert not (src / "part-2.parquet").exists() and Path(moved).read_bytes() == b"PAR1 torn"
    reason = Path(moved + ".reason.txt").read_text()
    assert "source: clicks" in reason and f"file: {src}/part-2.parquet" in reason
    assert "is not a Parquet file" in reason
    assert quarantined_files(str(quarantine)) == 1
    # Gone already, or a file of no quarantining source: nothing to set aside.
    assert BadFiles(str(quarantine), sources).set_aside(cause) is None
    assert BadFiles(str(quarantine), sources).set_aside("error reading file:/elsewhere/x.parquet") is None
    assert quarantined_files(None) is None and quarantined_files(str(tmp_path / "none")) == 0
    # A failing source names the file and the option.
    hint = fail_hint(cause, [BadFileSource("clicks", str(src), "fail")])
    assert f"{src}/part-2.parquet" in hint and "'clicks'" in hint and "bad_files='quarantine'" in hint
    assert fail_hint(cause, sources) == "" and fail_hint("Py4JError: gone", sources) == ""


def test_bad_files_is_checked_where_it_is_given(session: kp.Session, tmp_path: Path) -> None:
    write(tmp_path, "part-0.parquet", 0, 3)
    with pytest.raises(kp.PlanError, match="bad_files must be 'fail' or 'quarantine', got 'skip'"):
        session.read_parquet(str(tmp_path), SCHEMA, streaming=True, bad_files="skip")  # type: ignore[arg-type]
    with pytest.raises(kp.PlanError, match="bad_files='quarantine' is for streaming=True sources"):
        session.read_parquet(str(tmp_path), SCHEMA, bad_files="quarantine")
    stream = session.read_parquet(str(tmp_path), SCHEMA, streaming=True, bad_files="quarantine")
    with pytest.raises(kp.PlanError, match=r"sets unreadable files aside .* start\(\.\.\., quarantine_dir="):
        stream.select("v").start()
    text = stream.select("v").explain(show=False)
    assert "bad_files=quarantine" in text


# --- real Spark ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("read", ["read_parquet", "read_json"])
def test_a_torn_file_fails_the_job_naming_the_file_and_the_way_past_it(
    session: kp.Session, tmp_path: Path, read: str
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    if read == "read_parquet":
        write(src, "part-0.parquet", 0, 3)
        write(src, "part-1.parquet", 3, 3, torn=True)
        bad = src / "part-1.parquet"
    else:
        (src / "part-0.json").write_text('{"k": "a", "t": 1, "v": 1}\n')
        bad = src / "part-1.json.gz"
        bad.write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
    stream = getattr(session, read)(str(src), SCHEMA, streaming=True)
    job = stream.select("v").start()
    try:
        with pytest.raises(kp.JobError) as caught:
            job.process_all_available()
        message = str(caught.value)
        assert str(bad) in message and "bad_files='quarantine'" in message and "quarantine_dir=" in message
    finally:
        job.stop()
    assert bad.exists()  # "fail" leaves the file where it is


def test_a_torn_file_is_set_aside_and_every_other_row_counts_once(
    session: kp.Session, tmp_path: Path
) -> None:
    src, quarantine = torn_among_good(tmp_path), tmp_path / "quarantine"
    stream = session.read_parquet(str(src), SCHEMA, streaming=True, name="clicks", bad_files="quarantine")
    out = tmp_path / "out"
    job = stream.select("v").start(kp.ParquetSink(str(out)), quarantine_dir=str(quarantine))
    try:
        job.process_all_available()
        assert values(job) == [0, 1, 2, 6, 7, 8]
        moved = quarantine / "files" / "clicks" / "part-1.parquet"
        assert moved.exists() and not (src / "part-1.parquet").exists()
        assert (
            str(src / "part-1.parquet")
            in (quarantine / "files" / "clicks" / "part-1.parquet.reason.txt").read_text()
        )
        assert job.metrics().quarantined_files == 1 and job.is_active
        # The job goes on: a later torn file is set aside without a caller waiting, a good one is read.
        write(src, "part-3.parquet", 20, 2, torn=True)
        write(src, "part-4.parquet", 30, 2)
        job.process_all_available()
        assert values(job) == [0, 1, 2, 6, 7, 8, 30, 31]
        assert job.metrics().quarantined_files == 2
    finally:
        job.stop()


def test_a_job_that_failed_on_a_file_resumes_with_quarantine(session: kp.Session, tmp_path: Path) -> None:
    src, ckpt, quarantine, out = tmp_path / "in", tmp_path / "ckpt", tmp_path / "q", tmp_path / "out"
    src.mkdir()
    write(src, "part-0.parquet", 0, 2)

    def started(bad_files: Any, **kwargs: Any) -> kp.Job:
        stream = session.read_parquet(str(src), SCHEMA, streaming=True, name="clicks", bad_files=bad_files)
        return stream.select("v").start(kp.ParquetSink(str(out)), checkpoint_dir=str(ckpt), **kwargs)

    job = started("fail")
    job.process_all_available()
    write(src, "part-1.parquet", 2, 2, torn=True)
    write(src, "part-2.parquet", 4, 2)
    with pytest.raises(kp.JobError, match=r"part-1\.parquet"):
        job.process_all_available()
    job.stop()
    again = started("quarantine", quarantine_dir=str(quarantine))  # the same checkpoint: not another pipeline
    try:
        again.process_all_available()
        assert values(again) == [0, 1, 4, 5]
        assert again.metrics().quarantined_files == 1
    finally:
        again.stop()


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_windows_count_every_row_but_the_quarantined_files(
    session: kp.Session, tmp_path: Path, lowering: Any
) -> None:
    src, quarantine = torn_among_good(tmp_path), tmp_path / "q"
    stream = session.read_parquet(str(src), SCHEMA, streaming=True, bad_files="quarantine")
    windowed = stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))
    job = windowed.start(lowering=lowering, quarantine_dir=str(quarantine))
    try:
        job.process_all_available()
        write(src, "part-3.parquet", 100, 1)  # moves the watermark past [0, 10)
        job.process_all_available()
        rows = [(int(r["window_start"].timestamp() * 1000), r["n"]) for r in job.results().to_pylist()]
        assert rows == [(0, 6)]
        assert job.metrics().quarantined_files == 1
    finally:
        job.stop()


def test_url_encoded_nested_and_unmovable_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outer = tmp_path / "my in"
    inner = outer / "sub"
    inner.mkdir(parents=True)
    (inner / "p 1.parquet").write_bytes(b"torn")
    cause = (
        f"FAILED_READ_FILE: Encountered error while reading file file://{tmp_path}/my%20in/sub/p%201.parquet."
    )
    sources = [BadFileSource("outer", str(outer), "quarantine"), BadFileSource("inner", str(inner), "fail")]
    # Spark's URL-encoded path is read back; the innermost source owns the file (here: "fail").
    assert f"{inner}/p 1.parquet" in files_named(cause)
    assert BadFiles(str(tmp_path / "q"), sources).set_aside(cause) is None
    assert "'inner'" in fail_hint(cause, sources)
    # A file that cannot be moved stays, with nothing left in the quarantine.
    only_outer = [BadFileSource("outer", str(outer), "quarantine")]

    def refuse(*_a: Any) -> None:
        raise PermissionError("read-only source directory")

    monkeypatch.setattr(os, "rename", refuse)
    assert BadFiles(str(tmp_path / "q"), only_outer).set_aside(cause) is None
    assert (inner / "p 1.parquet").exists() and quarantined_files(str(tmp_path / "q")) == 0
    assert not [p for p in (tmp_path / "q").rglob("*") if p.is_file()]


def test_a_stopped_job_does_not_start_again_past_a_bad_file(session: kp.Session, tmp_path: Path) -> None:
    src, quarantine = tmp_path / "in", tmp_path / "q"
    src.mkdir()
    write(src, "part-0.parquet", 0, 2)
    stream = session.read_parquet(str(src), SCHEMA, streaming=True, bad_files="quarantine")
    job = stream.select("v").start(quarantine_dir=str(quarantine))
    job.process_all_available()
    job.stop()
    write(src, "part-1.parquet", 2, 2, torn=True)
    import time

    time.sleep(1.5)  # three background ticks: none may start the stopped job again
    assert not job.is_active and (src / "part-1.parquet").exists()
    assert job.metrics().quarantined_files == 0
