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

import uuid
from typing import Any

__all__ = ["VersionedBlobs"]

#: The newest blob each directory's versions gave this process: ``(version, size, mtime_ns, blob)``.
_CACHE: dict[str, tuple[int, int, int, bytes | None]] = {}


class VersionedBlobs:
    """One bucket's versions under ``path`` (a local path or a URI pyarrow's file systems read)."""

    def __init__(self, path: str, bucket: int) -> None:
        from pyarrow import fs

        self._fs, root = fs.FileSystem.from_uri(path) if "://" in path else (fs.LocalFileSystem(), path)
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


def forget_cache() -> None:
    """Drop what this process remembers (tests: a worker that starts afresh)."""
    _CACHE.clear()
