"""State that krishiv keeps itself, one version per micro-batch, as Spark's HDFS state store does.

A key bucket's state (the operator's with the ``krishiv-files`` carrier, a
stage's after it) is one blob per micro-batch under a directory of the
checkpoint: ``<path>/<bucket>/<batch id>.arrow``, written to a temporary
name and moved in place before the micro-batch commits. A micro-batch reads
the newest version before its own id, so one that Spark runs again after a
failure starts where the micro-batch before it ended, whatever the failed
attempt wrote. An empty file is a version that holds no state (a bucket
whose state emptied must not read an older version again).

Python workers outlive tasks: the version a worker wrote or read last stays
in memory, keyed by its directory, its version, size and modification
time, so the next micro-batch of the bucket on that worker reads no file.
Any other version on disk (another worker wrote it, a retry rewrote it) is
read from the file.

Examples
--------
>>> import tempfile
>>> store = VersionedBlobs(tempfile.mkdtemp(), bucket=3)
>>> store.load_before(5) is None
True
>>> store.save(5, b"state after 5")
>>> store.save(6, None)
>>> store.load_before(6), store.load_before(7), store.load_before(9)
(b'state after 5', None, None)
>>> store.versions()
[5, 6]
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import attrs

__all__ = ["KeyGroupStore", "Piece", "VersionedBlobs", "parse_range", "range_name"]

#: The newest blob each directory's versions gave this process: ``(version, size, mtime_ns, blob)``.
_CACHE: dict[str, tuple[int, int, int, bytes | None]] = {}


class VersionedBlobs:
    """One bucket's versions under ``path`` (a local path or a URI pyarrow's file systems read)."""

    def __init__(self, path: str, bucket: int | str) -> None:
        self._fs, root = _file_system(path)
        self._dir = f"{root.rstrip('/')}/{bucket}"

    def _listing(self) -> tuple[dict[int, Any], list[tuple[int, Any]]]:
        """The versions on disk by batch id, and what writes killed before their move left."""
        from pyarrow import fs

        versions: dict[int, Any] = {}
        temps: list[tuple[int, Any]] = []
        for info in self._fs.get_file_info(fs.FileSelector(self._dir, allow_not_found=True)):
            head, _, tail = info.base_name.partition(".")
            if not head.isdigit():
                continue
            if tail == "arrow":
                versions[int(head)] = info
            elif tail.endswith(".tmp"):
                temps.append((int(head), info))
        return versions, temps

    def versions(self) -> list[int]:
        """The batch ids with a version on disk, oldest first."""
        return sorted(self._listing()[0])

    def newest_before(self, batch_id: int) -> int | None:
        """The newest version written by a micro-batch before ``batch_id`` (None: none)."""
        return max((v for v in self._listing()[0] if v < batch_id), default=None)

    def load_before(self, batch_id: int) -> bytes | None:
        """The newest version written by a micro-batch before ``batch_id`` (None: no state)."""
        infos = self._listing()[0]
        older = [v for v in infos if v < batch_id]
        if not older:
            return None
        version = max(older)
        info = infos[version]
        stamp = (version, int(info.size or 0), int(info.mtime_ns or 0))
        cached = _CACHE.get(self._dir)
        if cached is not None and cached[:3] == stamp:
            return cached[3]
        if not info.size:
            blob = None
        else:
            with self._fs.open_input_stream(info.path) as f:
                blob = f.read()
        _CACHE[self._dir] = (*stamp, blob)
        return blob

    def save(self, batch_id: int, blob: bytes | None) -> None:
        """Write ``blob`` (None: no state) as the version of ``batch_id``; keep the one before it."""
        self._fs.create_dir(self._dir, recursive=True)
        final = f"{self._dir}/{batch_id}.arrow"
        temp = f"{final}.{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(temp) as f:
            if blob:
                f.write(blob)
        self._fs.move(temp, final)
        infos, temps = self._listing()
        info = infos[batch_id]
        _CACHE[self._dir] = (batch_id, int(info.size or 0), int(info.mtime_ns or 0), blob or None)
        older = sorted(v for v in infos if v < batch_id)
        for v in older[:-1]:
            self._fs.delete_file(infos[v].path)
        for version, stale in temps:  # what a killed write left, of micro-batches before this one
            if version < batch_id:
                self._fs.delete_file(stale.path)


def _file_system(path: str) -> tuple[Any, str]:
    from pyarrow import fs

    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), path


def range_name(lo: int, hi: int) -> str:
    """The directory of the state of key groups ``[lo, hi)``: ``<lo>`` for one group (the layout
    of checkpoints written before key groups, one per bucket), ``<lo>-<hi>`` for more."""
    return str(lo) if hi == lo + 1 else f"{lo}-{hi}"


def parse_range(name: str) -> tuple[int, int] | None:
    """The key groups of a state directory named by :func:`range_name` (None: not one)."""
    lo, dash, hi = name.partition("-")
    if not lo.isdigit() or (dash and not hi.isdigit()):
        return None
    return (int(lo), int(hi)) if dash else (int(lo), int(lo) + 1)


@attrs.frozen
class Piece:
    """Part of a task's state: the newest version of one directory, holding key groups
    ``[lo, hi)``, of which the task takes ``groups`` (None: all of them, the whole blob)."""

    blob: bytes | None
    lo: int
    hi: int
    groups: tuple[int, ...] | None


class KeyGroupStore:
    r"""The state of one task that owns key groups ``[lo, hi)``, wherever the last runs left it.

    A run on ``P`` tasks writes each task's state under the directory of its
    range (:func:`range_name`). After a restart on another number of tasks,
    a task reads each of its key groups from the directory that holds the
    newest version of it: its own once it wrote one, before that the
    directories of the run before (:meth:`load_before` returns them as
    :class:`Piece`\ s, which the operator splits by key group). ``current``
    names the directories of this run's layout; a version another layout
    wrote from ``since`` on (the first micro-batch of this layout) belongs to
    an attempt that never committed and is not read. Directories whose every
    key group this layout has written since are removed.
    """

    def __init__(self, path: str, lo: int, hi: int, *, since: int, current: frozenset[str]) -> None:
        self._path = path
        self._fs, self._root = _file_system(path)
        self.lo, self.hi = lo, hi
        self._mine = range_name(lo, hi)
        self._since = since
        self._current = current

    def _directories(self) -> dict[str, tuple[int, int]]:
        from pyarrow import fs

        found = {}
        for info in self._fs.get_file_info(fs.FileSelector(self._root, allow_not_found=True)):
            span = parse_range(info.base_name) if info.type == fs.FileType.Directory else None
            if span is not None:
                found[info.base_name] = span
        return found

    def _others(self, dirs: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        return {d: s for d, s in dirs.items() if d != self._mine and s[0] < self.hi and self.lo < s[1]}

    def _newest(self, name: str, batch_id: int) -> int | None:
        bound = batch_id if name in self._current else min(batch_id, self._since)
        return VersionedBlobs(self._path, name).newest_before(bound)

    def load_before(self, batch_id: int) -> list[Piece]:
        """The pieces of this task's state as the micro-batches before ``batch_id`` left it."""
        mine = VersionedBlobs(self._path, self._mine)
        others = self._others(self._directories())
        if not others:
            return [Piece(mine.load_before(batch_id), self.lo, self.hi, None)]
        spans = {self._mine: (self.lo, self.hi), **others}
        newest = {name: self._newest(name, batch_id) for name in spans}
        source: dict[str, list[int]] = {}
        for group in range(self.lo, self.hi):
            holders = [
                (v, name)
                for name, (a, b) in spans.items()
                if a <= group < b and (v := newest[name]) is not None
            ]
            if holders:
                source.setdefault(max(holders)[1], []).append(group)
        pieces = []
        for name, groups in sorted(source.items()):
            a, b = spans[name]
            version = newest[name]
            assert version is not None
            blob = VersionedBlobs(self._path, name).load_before(version + 1)
            whole = self.lo <= a and b <= self.hi and len(groups) == b - a
            pieces.append(Piece(blob, a, b, None if whole else tuple(groups)))
        return pieces

    def save(self, batch_id: int, blob: bytes | None) -> None:
        """Write this task's state after ``batch_id``; remove what no later read needs."""
        VersionedBlobs(self._path, self._mine).save(batch_id, blob)
        others = self._others(self._directories())
        for name, (a, b) in others.items():
            if name in self._current:
                continue
            gone = self._newest(name, batch_id)
            covered = all(self._written_since(group, gone, batch_id) for group in range(a, b))
            if covered:
                # (another task of this micro-batch may have removed it)
                with contextlib.suppress(FileNotFoundError, OSError):
                    self._fs.delete_dir(f"{self._root.rstrip('/')}/{name}")

    def _written_since(self, group: int, version: int | None, batch_id: int) -> bool:
        """Whether a directory of this layout holds a version of ``group`` after ``version`` and
        before ``batch_id`` (so no read from ``batch_id`` on needs an older directory's)."""
        for name in self._current:
            span = parse_range(name)
            if span is not None and span[0] <= group < span[1]:
                newest = VersionedBlobs(self._path, name).newest_before(batch_id)
                return newest is not None and (version is None or newest > version)
        return False


def forget_cache() -> None:
    """Drop what this process remembers (tests: a worker that starts afresh)."""
    _CACHE.clear()
