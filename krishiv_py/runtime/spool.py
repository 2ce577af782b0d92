"""The spool of a memory stream: the batches it keeps, the jobs that read them, what retention deleted.

A memory stream lives in ``<state_dir>/sources/<name>/``::

    data/           batch-<seq>-<kind>.parquet: one file per send, read by Spark's file source;
                    nudge-<ns>.parquet: a file of no rows a restarted job adds (``Sender.nudge``),
                    deleted with the first committed batch file newer than it
    staging/        batches being written (renamed into data/ when complete)
    readers/        one file per job that reads the stream: its checkpoint directory
    manifest.json   what retention deleted: the first batch kept, batches sent, closed
    .lock           held while a job is checked in or batches are deleted

Retention
    ``"all"`` (the default) keeps every batch: a new job or a bounded
    ``collect()`` reads the stream from its first batch. ``"committed"``
    deletes a batch once at least one job reads the stream and every job
    reading it has committed it (it is in the job's checkpoint as done), so
    the spool holds what some reader still needs. Like a Kafka topic's log
    start offset, the manifest then records the first batch kept;
    ``batches_sent``, ``closed`` and sequence numbers (``batch << 32 | row``)
    are unchanged by deletion.

Readers
    A streaming job checks in before its query starts. A job with a name
    (or an explicit ``checkpoint_dir``) stays a reader until its checkpoint
    directory is removed, since a later process may resume it; a job
    without one is a reader while it runs, in the process that runs it. A
    job's progress is read from its Spark checkpoint: the newest
    ``commits/<batch>`` and the file-source log ``sources/<i>/<batch>``
    (lines ``{"path": ..., "batchId": ...}``) that names the spool files
    each micro-batch read. The source reads one file per micro-batch, in
    send order (modification times strictly increase), so the newest
    committed file is a high-water mark: every earlier batch is done.

After a deletion
    A job whose checkpoint has not committed every deleted batch (a new
    job, or one that was not checked in) and a bounded ``collect()`` are
    refused with :class:`~krishiv_py.errors.JobError` before Spark reads
    anything. Spark's file source would otherwise start at the first file
    left, and a micro-batch re-run after a restart skips a file that is gone
    without an error (each file is a root path of its scan, and Spark's file
    index ignores a missing root path) — so a file is only deleted once it is
    committed, never when it is merely planned.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, get_args
from urllib.parse import unquote, urlparse

import attrs

from krishiv_py.checkpoint import (
    CheckpointLayout,
    file_source_batch,
    file_source_log,
    log_offset,
)
from krishiv_py.errors import JobError, PlanError

if TYPE_CHECKING:
    from krishiv_py.runtime.handle import Job

__all__ = [
    "Feed",
    "Manifest",
    "Retention",
    "Spool",
    "check_complete",
    "committed_seq",
    "read_manifest",
    "readers",
]

#: What a memory stream keeps: every batch, or the batches some reader has not committed yet.
Retention: TypeAlias = Literal["all", "committed"]

_FILE = re.compile(r"^batch-(\d{12})-(data|watermark|close)\.parquet$")
_NUDGE = re.compile(r"^nudge-\d{20}\.parquet$")
MANIFEST, READERS, LOCK = "manifest.json", "readers", ".lock"
#: A sender looks for batches to delete at most this often (a job: after each ``process_all_available``).
CLEAN_INTERVAL_S = 0.25

_log = logging.getLogger("krishiv_py.spool")


@attrs.frozen(kw_only=True)
class Manifest:
    """What retention deleted: batches ``0 .. first_kept - 1``; the stream's counters when it did."""

    first_kept: int = 0
    batches_sent: int = 0
    closed: bool = False


def check_retention(retention: object) -> Retention:
    if retention not in get_args(Retention):
        choices = ", ".join(map(repr, get_args(Retention)))
        raise PlanError(f"retention must be one of {choices}, got {retention!r}")
    return retention  # type: ignore[return-value]


def read_manifest(spool_dir: str) -> Manifest:
    """The spool's manifest (all zeros when nothing was ever deleted)."""
    try:
        with open(os.path.join(spool_dir, MANIFEST), encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return Manifest()
    return Manifest(
        first_kept=int(raw["first_kept"]), batches_sent=int(raw["batches_sent"]), closed=bool(raw["closed"])
    )


def _write_manifest(spool_dir: str, manifest: Manifest) -> None:
    path = os.path.join(spool_dir, MANIFEST)
    _write_durably(path, json.dumps(attrs.asdict(manifest)))


def _write_durably(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def spool_files(data_dir: str) -> dict[int, str]:
    """The batch files in ``data_dir`` by sequence number."""
    out: dict[int, str] = {}
    for fname in os.listdir(data_dir):
        m = _FILE.match(fname)
        if m:
            out[int(m.group(1))] = fname
    return out


# --- a reader's progress, from its Spark checkpoint ----------------------------------


def committed_seq(checkpoint_dir: str, data_dir: str) -> int:
    """The newest batch of ``data_dir`` that the job at ``checkpoint_dir`` has committed (-1: none).

    The newest ``commits/<n>`` is the last committed micro-batch; ``offsets/<n>``
    holds each source's offset after it (line ``2 + i`` for ``sources/<i>``),
    which for a file source is an index into that source's log
    (:mod:`krishiv_py.checkpoint` reads them). A log in a format
    other than Spark's ``v1`` holds everything rather than guess (-1).
    """
    try:
        return _committed_seq(checkpoint_dir, data_dir)
    except PlanError:
        return -1


def _committed_seq(checkpoint_dir: str, data_dir: str) -> int:
    checkpoint = CheckpointLayout(checkpoint_dir)
    last = checkpoint.committed_batch()
    if last < 0:
        return -1
    try:
        offsets = checkpoint.source_offsets(last)
    except FileNotFoundError:
        return -1
    if len(offsets) != len(os.listdir(checkpoint.sources) if os.path.isdir(checkpoint.sources) else ()):
        return -1  # not one offset per source directory: hold everything rather than guess
    wanted = {os.path.normpath(data_dir), os.path.realpath(data_dir)}
    per_source = []  # a stream read twice in one query: the slower read counts
    for i, line in enumerate(offsets):
        done = log_offset(line)
        reads, best = False, -1
        log = checkpoint.source_log(i)
        # The spool's files arrive in sequence order, so the committed log batch holds the newest
        # committed one: read that batch's file, not the whole log (a line per file ever read).
        entries = file_source_batch(log, done) if done is not None else None
        if entries is not None and not any(_FILE.match(_file_name(e.path)) for e in entries):
            entries = None  # a micro-batch that read only a file of no rows (``nudge``): the whole log
        for entry in entries if entries is not None else file_source_log(log):
            local = unquote(urlparse(entry.path).path)
            m = _FILE.match(os.path.basename(local))
            if m and os.path.dirname(local) in wanted:
                reads = True
                if done is not None and entry.batch_id <= done:
                    best = max(best, int(m.group(1)))
        if reads:
            per_source.append(best)
    return min(per_source, default=-1)


def _file_name(uri: str) -> str:
    return os.path.basename(unquote(urlparse(uri).path))


# --- readers -------------------------------------------------------------------------

#: Readers without a name checked in by this process: registration file -> the job (None while it starts).
_local: dict[str, weakref.ref[Job] | None] = {}


@attrs.frozen(kw_only=True)
class Reader:
    checkpoint: str
    pid: int | None  # None: a named job, a reader until its checkpoint is removed
    registration: str


class Spool:
    """The spool of one memory stream, as seen by its sender (see the module docstring)."""

    def __init__(self, path: str, retention: Retention = "all") -> None:
        self.path = path
        self.data_dir = os.path.join(path, "data")
        self.retention = check_retention(retention)
        self._lock = threading.Lock()
        self._last_clean = 0.0

    def manifest(self) -> Manifest:
        return read_manifest(self.path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the spool's lock (this process's threads and other processes)."""
        with self._lock, open(os.path.join(self.path, LOCK), "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def readers(self) -> list[Reader]:
        """The jobs reading this stream now or resumable later; forgets those that are gone."""
        directory = os.path.join(self.path, READERS)
        out = []
        for fname in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
            registration = os.path.join(directory, fname)
            try:
                with open(registration, encoding="utf-8") as f:
                    raw = json.load(f)
            except (FileNotFoundError, ValueError):
                continue
            reader = Reader(checkpoint=raw["checkpoint"], pid=raw["pid"], registration=registration)
            if _gone(reader):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(registration)
                _local.pop(registration, None)
            else:
                out.append(reader)
        return out

    def maybe_clean(self, *, throttle: bool = True) -> None:
        """Delete what every reader committed; never raises.

        With ``throttle`` (after a send) at most every :data:`CLEAN_INTERVAL_S`.
        """
        if self.retention != "committed":
            return
        if throttle and time.monotonic() - self._last_clean < CLEAN_INTERVAL_S:
            return
        try:
            self.clean()
        except (OSError, ValueError, KeyError) as exc:  # the batch was written; a later pass retries
            _log.warning("memory stream spool %s: could not delete committed batches: %s", self.path, exc)

    def clean(self) -> int:
        """Delete the batches every reader has committed (under ``retention="committed"``); how many."""
        if self.retention != "committed":
            return 0
        self._last_clean = time.monotonic()
        with self.locked():
            readers = self.readers()
            manifest = self.manifest()
            files = spool_files(self.data_dir)
            if readers:
                first = 1 + min(_progress(r.checkpoint, self.data_dir) for r in readers)
                if first > manifest.first_kept:
                    manifest = Manifest(
                        first_kept=first,
                        batches_sent=max(manifest.batches_sent, max(files, default=-1) + 1),
                        closed=manifest.closed or any(f.endswith("-close.parquet") for f in files.values()),
                    )
                    _write_manifest(self.path, manifest)  # before deleting: the counters survive
            doomed = [f for seq, f in files.items() if seq < manifest.first_kept]
            doomed += _nudges_before(self.data_dir, doomed)
            for fname in doomed:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.data_dir, fname))
            if doomed:
                _fsync_dir(self.data_dir)
            return len(doomed)


def _nudges_before(data_dir: str, doomed: Sequence[str]) -> list[str]:
    """The nudge files (``Sender.nudge``) older than the newest of the batch files ``doomed``.

    Spark's file source reads the spool's files in the order of their
    modification times, one per micro-batch: a nudge older than a batch every
    reader has committed was read, and committed, before it.
    """
    newest = max((_mtime_ns(data_dir, f) for f in doomed), default=-1)
    if newest < 0:
        return []
    nudges = [f for f in os.listdir(data_dir) if _NUDGE.match(f)]
    return [f for f in nudges if 0 <= _mtime_ns(data_dir, f) < newest]


def _mtime_ns(data_dir: str, fname: str) -> int:
    """``fname``'s modification time in ns; -1 when it is gone."""
    try:
        return os.stat(os.path.join(data_dir, fname)).st_mtime_ns
    except FileNotFoundError:
        return -1


def _progress(checkpoint: str, data_dir: str) -> int:
    if "://" in checkpoint:  # not readable from here: the reader holds everything it has not seen
        return -1
    return committed_seq(checkpoint, data_dir)


def _gone(reader: Reader) -> bool:
    if reader.pid is None:
        return "://" not in reader.checkpoint and not os.path.isdir(reader.checkpoint)
    if reader.pid != os.getpid():
        return not _alive(reader.pid)
    if reader.registration not in _local:  # left by an earlier process with this pid
        return True
    ref = _local[reader.registration]
    if ref is None:  # its query is starting
        return False
    job = ref()
    return job is None or not job.is_active


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- checking a job in ------------------------------------------------------------


class Feed(Protocol):
    """What a job knows of a memory stream's producer (a :class:`~krishiv_py.Sender`)."""

    @property
    def closed(self) -> bool:
        """The producer closed the stream (end of input)."""
        ...

    @property
    def spool(self) -> Spool:
        """The stream's batches on disk."""
        ...

    def nudge(self) -> None:
        """Add a file of no rows: every job reading the stream runs one micro-batch of no rows."""
        ...


@contextlib.contextmanager
def readers(senders: Sequence[Feed | None], checkpoint_dir: str, *, resumable: bool) -> Iterator[Any]:
    """Check a job in as a reader of its memory streams before its query starts.

    Raises :class:`JobError` when a stream deleted batches that the job's
    checkpoint has not committed. Yields a function to call with the started
    job; if starting fails, the job is checked out again.
    """
    registered: list[str] = []  # new registrations, withdrawn if the start fails
    running: list[str] = []  # registrations that last while the job runs
    spools = {s.spool.path: s.spool for s in senders if s is not None}
    try:
        for spool in spools.values():
            with spool.locked():
                _check_resumable(spool, checkpoint_dir)
                registration, new = _register(spool, checkpoint_dir, resumable=resumable)
                if new:
                    registered.append(registration)
                if not resumable:
                    running.append(registration)
    except BaseException:
        _unregister(registered)
        raise

    def bind(job: Job) -> None:
        for registration in running:
            _local[registration] = weakref.ref(job)

    try:
        yield bind
    except BaseException:
        _unregister(registered)
        raise


def _check_resumable(spool: Spool, checkpoint_dir: str) -> None:
    first = spool.manifest().first_kept
    if first == 0:
        return
    done = _progress(checkpoint_dir, spool.data_dir)
    if done + 1 >= first:
        return
    name = os.path.basename(spool.path)
    where = "this job committed none of them" if done < 0 else f"this job's checkpoint stops at batch {done}"
    raise JobError(
        f"memory stream {name!r} deleted batches 0..{first - 1} under retention='committed' (every job "
        f"reading it had committed them) and {where}, so it would miss batches {done + 1}..{first - 1}. "
        "Start every job that reads a stream before sending the batches it must see, or use "
        "retention='all' (the default) to keep them for later jobs"
    )


def _register(spool: Spool, checkpoint_dir: str, *, resumable: bool) -> tuple[str, bool]:
    """Write the job's registration; returns it and whether it is new."""
    directory = os.path.join(spool.path, READERS)
    os.makedirs(directory, exist_ok=True)
    key = hashlib.sha1(os.path.abspath(checkpoint_dir).encode(), usedforsecurity=False).hexdigest()[:16]
    registration = os.path.join(directory, f"{key}.json")
    new = not os.path.exists(registration)
    pid = None if resumable else os.getpid()
    if pid is not None:
        _local[registration] = None
    _write_durably(registration, json.dumps({"checkpoint": os.path.abspath(checkpoint_dir), "pid": pid}))
    return registration, new


def _unregister(registrations: list[str]) -> None:
    for registration in registrations:
        with contextlib.suppress(FileNotFoundError):
            os.remove(registration)
        _local.pop(registration, None)


def check_complete(data_dir: str, what: str) -> None:
    """Refuse a bounded read of a memory stream that retention has already trimmed."""
    spool_dir = os.path.dirname(data_dir)
    first = read_manifest(spool_dir).first_kept
    if first > 0:
        raise JobError(
            f"{what} reads every batch of memory stream {os.path.basename(spool_dir)!r}, but batches "
            f"0..{first - 1} were deleted under retention='committed' once every job reading it had "
            "committed them; use retention='all' (the default) to keep them readable, or read the "
            "results of a running job"
        )
