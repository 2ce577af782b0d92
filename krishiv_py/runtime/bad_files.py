"""Source files a streaming job cannot read: fail naming them, or set them aside and go on.

A streaming file source (``read_parquet/csv/json(..., streaming=True)``)
hands every new file in its directory to the next micro-batch. A file that
cannot be read — torn while written, truncated, not of the format — fails
that micro-batch, and since the checkpoint's source log names the file for
that batch, every restart fails the same way.

``bad_files="fail"`` (the default) keeps it so, with an error that names the
file and the way past it (:func:`fail_hint`).

``bad_files="quarantine"`` sets the file aside: when the job's query fails
on a file of such a source, :class:`BadFiles` moves the file to
``<quarantine_dir>/files/<source>/`` with ``<file>.reason.txt`` beside it
(the source, the original path, the time, Spark's error) and starts the
query again on its checkpoint. The failed micro-batch runs again without the
file: the checkpoint's source log still names it, but each file is a root
path of the batch's scan and Spark's file index skips a root path that is
gone. No row of a quarantined file counts and
every other row counts once (the sinks are exactly-once per micro-batch).
``JobMetrics.quarantined_files`` counts the files under ``files/``,
earlier runs of the job included.

Examples
--------
>>> sorted(files_named("FAILED_READ_FILE: Encountered error while reading file file:///d/in/p-1.parquet."))
['/d/in/p-1.parquet']
>>> files_named("Py4JError: the connection closed")
[]
"""

from __future__ import annotations

import datetime as dt
import errno
import logging
import os
import re
import shutil
import threading
import urllib.parse
from collections.abc import Sequence

import attrs

__all__ = ["BadFileSource", "BadFiles", "disk_hint", "fail_hint", "files_named", "quarantined_files"]

log = logging.getLogger("krishiv_py")

#: A local file URI or path in Spark's error text (``file:/x``, ``file:///x``).
_URI = re.compile(r"file:/+([^\s,;'\"\]\)\}]+)")
FILES_DIR = "files"
REASON_SUFFIX = ".reason.txt"


@attrs.frozen
class BadFileSource:
    """A streaming file source of a job: its name, directory and ``bad_files`` mode."""

    name: str
    path: str
    mode: str

    @property
    def quarantines(self) -> bool:
        """Whether a file of this source that cannot be read is set aside (``bad_files="quarantine"``)."""
        return self.mode == "quarantine"


def files_named(cause: str) -> list[str]:
    """The local file paths a Spark error names, in order of first mention."""
    seen: dict[str, None] = {}
    for m in _URI.finditer(cause):
        path = "/" + m.group(1).rstrip(".:")
        seen.setdefault(os.path.normpath(path), None)
        seen.setdefault(os.path.normpath(urllib.parse.unquote(path)), None)  # Spark URL-encodes paths
    return list(seen)


def _source_of(path: str, sources: Sequence[BadFileSource]) -> BadFileSource | None:
    """The source whose directory holds ``path`` (the innermost, when directories nest)."""
    for source in sorted(sources, key=lambda s: len(os.path.realpath(s.path)), reverse=True):
        root = os.path.realpath(source.path)
        if os.path.realpath(path).startswith(root.rstrip("/") + "/"):
            return source
    return None


def bad_file(cause: str | None, sources: Sequence[BadFileSource]) -> tuple[str, BadFileSource] | None:
    """The first file of one of ``sources`` that ``cause`` names (existing ones first), with its source.

    A file belongs to the innermost source whose directory holds it.
    """
    if not cause:
        return None
    found = [(path, _source_of(path, sources)) for path in files_named(cause)]
    owned = [(path, source) for path, source in found if source is not None]
    existing = [f for f in owned if os.path.exists(f[0])]
    ranked = existing or owned
    return ranked[0] if ranked else None


def fail_hint(cause: str | None, sources: Sequence[BadFileSource]) -> str:
    """For a failure on a file of a ``bad_files="fail"`` source: which file, and the way past it."""
    found = bad_file(cause, sources)
    if found is None or found[1].quarantines:
        return ""
    path, source = found
    return (
        f"\nThe failure is in reading {path} of the file source {source.name!r}: every restart reads it "
        "again. Repair or remove the file, or start the pipeline again on its checkpoint with "
        "read_...(..., streaming=True, bad_files='quarantine') and start(..., name=<the same name>, "
        "quarantine_dir=<a directory>): a file that cannot be read is moved there with the reason, "
        "and the job goes on without it (docs/reliability.md, 'Bad source files')"
    )


_DISK = (
    ("No space left on device", "is full"),
    ("Disk quota exceeded", "is over its quota"),
    ("Read-only file system", "is read-only"),
)


def disk_hint(text: str | None, checkpoint_dir: str | None) -> str:
    """For a failure to write to a full or read-only disk: which disk, and how to resume."""
    if not text:
        return ""
    for needle, what in _DISK:
        if needle in text:
            candidates = [c for c in (checkpoint_dir, *files_named(text)) if c and not c.startswith("/dev")]
            path = next((c for c in candidates if _disk_is(c, read_only=what == "is read-only")), None)
            where = f"The disk under {path}" if path else "A disk the job writes to"
            if path is None and checkpoint_dir:
                where += f" (its checkpoint is {checkpoint_dir})"
            return (
                f"\n{where} {what} ({needle}): the micro-batch did not commit, and what was committed "
                "before it is intact. Free space on it (or make it writable) and start the pipeline "
                "again under its name (or checkpoint_dir) to resume where it stopped"
            )
    return ""


def _disk_is(path: str, *, read_only: bool) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) is read-only / full."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    if read_only:
        return bool(st.f_flag & os.ST_RDONLY)
    return st.f_bavail * st.f_frsize < (1 << 20)  # less than 1 MiB left


class BadFiles:
    """Moves a file the query failed on to ``<quarantine_dir>/files/<source>/``; thread-safe."""

    def __init__(self, quarantine_dir: str, sources: Sequence[BadFileSource]) -> None:
        self.root = os.path.join(quarantine_dir, FILES_DIR)
        self.sources = list(sources)  # all of them: a file belongs to the innermost source's mode
        self._lock = threading.Lock()

    def set_aside(self, cause: str | None) -> str | None:
        """Move the file ``cause`` names (if it is one of ours and still there); its new path."""
        found = bad_file(cause, self.sources)
        if found is None or not found[1].quarantines:
            return None
        path, source = found
        with self._lock:
            if not os.path.exists(path):
                return None
            try:
                return self._move(path, source, cause or "")
            except OSError as exc:  # cannot move it (a read-only source directory): the job fails
                log.warning("krishiv_py: could not set aside %s: %s", path, exc)
                return None

    def _move(self, path: str, source: BadFileSource, cause: str) -> str:
        folder = os.path.join(self.root, source.name)
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, os.path.basename(path))
        stem, n = target, 1
        while os.path.exists(target):
            n += 1
            target = f"{stem}.{n}"
        reason = (
            f"source: {source.name}\nfile: {path}\n"
            f"set aside: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}\n"
            f"reason:\n{cause}\n"
        )
        tmp = target + REASON_SUFFIX + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(reason)
        try:
            os.rename(path, target)  # the same disk: atomic, and nothing left behind on failure
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                os.remove(tmp)
                raise
            shutil.copy2(path, target)  # another disk: copy, then remove the original
            try:
                os.remove(path)
            except OSError:
                os.remove(target)
                os.remove(tmp)
                raise
        os.replace(tmp, target + REASON_SUFFIX)
        log.warning("krishiv_py: set aside unreadable file %s of source %r: %s", path, source.name, target)
        return target


def quarantined_files(quarantine_dir: str | None) -> int | None:
    """How many source files were set aside under ``quarantine_dir`` (None without one)."""
    if quarantine_dir is None:
        return None
    root = os.path.join(quarantine_dir, FILES_DIR)
    if not os.path.isdir(root):
        return 0
    return sum(
        1
        for folder in os.listdir(root)
        if os.path.isdir(os.path.join(root, folder))
        for name in os.listdir(os.path.join(root, folder))
        if not name.endswith((REASON_SUFFIX, ".tmp"))
    )
