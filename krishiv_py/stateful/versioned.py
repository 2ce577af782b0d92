"""State that krishiv keeps itself, one version per micro-batch, as Spark's HDFS state store does.

A key bucket's state (the operator's with the ``krishiv-files`` carrier, a
stage's after it) is one file per micro-batch under a directory of the
checkpoint, written to a temporary name and moved in place before the
micro-batch commits:

``<path>/<bucket>/<batch id>.arrow``
    A *snapshot*: the whole state. An empty file is a version that holds no
    state (a bucket whose state emptied must not read an older version again).
``<path>/<bucket>/<batch id>.d<base>.arrow``
    A *delta* over version ``<base>``: the keys the micro-batch replaced and
    their rows now (:func:`delta_blob`; keyed state only, see
    :mod:`krishiv_py.stateful.held_state`). Reading it replays the deltas
    back to a snapshot (:func:`replay`), as Spark's HDFS-backed store and
    RocksDB's changelog checkpointing read theirs.

A micro-batch reads the newest version before its own id, so one that Spark
runs again after a failure starts where the micro-batch before it ended,
whatever the failed attempt wrote. After a write, the versions that neither
it nor the version before it need are removed (a re-run of the micro-batch
reads the one before).

Python workers outlive tasks: the version a worker wrote or read last stays
in memory, keyed by its directory, its version, size and modification
time, so the next micro-batch of the bucket on that worker reads no file
(:meth:`VersionedBlobs.take_held` keeps a keyed state's own object, which a
step changes in place). Any other version on disk (another worker wrote it,
a retry rewrote it) is read from the files.

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
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.errors import JobError
from krishiv_py.files import appears_whole, file_system, listing
from krishiv_py.names import KEY_HASH
from krishiv_py.stateful._arrow import framed, ipc_bytes, ipc_table, unframed
from krishiv_py.stateful.key_groups import key_groups_of

__all__ = [
    "KHASH",
    "Chain",
    "KeyGroupStore",
    "Piece",
    "VersionedBlobs",
    "delta_blob",
    "delta_of",
    "parse_range",
    "range_name",
    "replay",
    "without_hash",
]

#: The column of persisted keyed state that holds each row's key hash (uint64).
KHASH = KEY_HASH

#: The newest blob each directory's versions gave this process: ``(version, size, mtime_ns, blob)``.
_CACHE: dict[str, tuple[int, int, int, bytes | None]] = {}
#: A keyed state object per directory, as the version it was last written or read as.
_HELD: dict[str, tuple[int, int, int, Any]] = {}


@attrs.frozen
class _Version:
    info: Any
    #: The version a delta is over (None: a snapshot).
    base: int | None

    @property
    def size(self) -> int:
        return int(self.info.size or 0)

    @property
    def stamp(self) -> tuple[int, int]:
        return int(self.info.size or 0), int(self.info.mtime_ns or 0)


@attrs.frozen
class Chain:
    """A version as its files hold it: the snapshot, then the deltas after it, in order."""

    version: int
    snapshot: bytes | None
    deltas: tuple[bytes, ...]
    snapshot_bytes: int
    delta_bytes: int


def delta_blob(keys: np.ndarray, rows: pa.Table | None) -> bytes:
    """A delta's file: the key hashes replaced, then their rows now (with :data:`KHASH`)."""
    return framed([pa.table({"h": pa.array(keys, pa.uint64())}), rows if rows is not None else pa.table({})])


def delta_of(blob: bytes) -> tuple[np.ndarray, pa.Table | None]:
    """The key hashes and rows of a delta's file (:func:`delta_blob`)."""
    keys, rows = unframed(blob)
    return np.asarray(keys.column("h").to_numpy(), np.uint64), (rows if rows.num_columns else None)


def without_hash(table: pa.Table) -> pa.Table:
    """``table`` without its :data:`KHASH` column."""
    return table.drop_columns([KHASH]) if KHASH in table.column_names else table


def replay(snapshot: pa.Table | None, deltas: list[tuple[np.ndarray, pa.Table | None]]) -> pa.Table | None:
    """A version's rows: ``snapshot`` (with :data:`KHASH`), each delta's keys' rows replaced by its rows.

    >>> snap = pa.table({"k": ["a", "b"], KHASH: pa.array([1, 2], pa.uint64())})
    >>> delta = (np.array([2, 3], np.uint64), pa.table({"k": ["c"], KHASH: pa.array([3], pa.uint64())}))
    >>> replay(snap, [delta]).column("k").to_pylist()
    ['a', 'c']
    """
    table = snapshot
    for keys, rows in deltas:
        if table is not None and table.num_rows and len(keys):
            if KHASH not in table.column_names:
                raise ValueError("a delta of keyed state over a snapshot without key hashes")
            gone = np.isin(np.asarray(table.column(KHASH).to_numpy(), np.uint64), keys)
            table = table.filter(pa.array(~gone)) if gone.any() else table
        if rows is not None and rows.num_rows:
            if table is None or not table.num_rows:
                table = rows
            else:
                table = pa.concat_tables([table, rows.cast(table.schema)])
    return table


class VersionedBlobs:
    """One bucket's versions under ``path`` (a local path or a URI pyarrow's file systems read)."""

    def __init__(self, path: str, bucket: int | str) -> None:
        self._fs, root = file_system(path)
        self._dir = f"{root.rstrip('/')}/{bucket}"
        #: An object store's objects appear whole: a version is written under its own name, with
        #: no directory to make and no move (each a request or three there).
        self._whole = appears_whole(self._fs)
        #: The listing after this object's last write (a keep after it needs no listing of its own).
        self._written: dict[int, _Version] | None = None

    def _listing(self) -> tuple[dict[int, _Version], list[tuple[int, Any]]]:
        """The versions on disk by batch id, and what writes killed before their move left."""
        versions: dict[int, _Version] = {}
        temps: list[tuple[int, Any]] = []
        for info in listing(self._fs, self._dir):
            head, _, tail = info.base_name.partition(".")
            if not head.isdigit():
                continue
            if tail == "arrow":
                versions[int(head)] = _Version(info, None)
            elif tail.endswith(".tmp"):
                temps.append((int(head), info))
            elif tail.startswith("d") and tail.endswith(".arrow") and tail[1:-6].isdigit():
                versions[int(head)] = _Version(info, int(tail[1:-6]))
        return versions, temps

    def versions(self) -> list[int]:
        """The batch ids with a version on disk, oldest first."""
        return sorted(self._listing()[0])

    def newest_before(self, batch_id: int) -> int | None:
        """The newest version written by a micro-batch before ``batch_id`` (None: none)."""
        return max((v for v in self._listing()[0] if v < batch_id), default=None)

    def newest_is_delta(self, batch_id: int) -> bool:
        """Whether the newest version before ``batch_id`` is a delta."""
        infos = self._listing()[0]
        version = max((v for v in infos if v < batch_id), default=None)
        return version is not None and infos[version].base is not None

    def _chain(self, infos: dict[int, _Version], version: int) -> list[int]:
        """The versions whose files make ``version``: its snapshot first."""
        chain = [version]
        while (base := infos[chain[-1]].base) is not None:
            if base not in infos or base >= chain[-1]:
                raise JobError(
                    f"the state version {chain[-1]} under {self._dir} is a delta over version {base}, "
                    "which is not there: the checkpoint lost a file (restore it, or start on a new "
                    "checkpoint)"
                )
            chain.append(base)
        return chain[::-1]

    def load_chain(self, batch_id: int) -> Chain | None:
        """The newest version before ``batch_id`` as its files hold it (None: no version)."""
        infos = self._listing()[0]
        older = [v for v in infos if v < batch_id]
        if not older:
            return None
        version = max(older)
        chain = self._chain(infos, version)
        blobs = [self._read(infos[v]) for v in chain]
        sizes = [infos[v].size for v in chain]
        return Chain(version, blobs[0], tuple(b or b"" for b in blobs[1:]), sizes[0], sum(sizes[1:]))

    def _read(self, version: _Version) -> bytes | None:
        if not version.size:
            return None
        with self._fs.open_input_stream(version.info.path) as f:
            data: bytes = f.read()
        return data

    def load_before(self, batch_id: int) -> bytes | None:
        """The newest version written by a micro-batch before ``batch_id`` (None: no state): a
        snapshot's bytes, a delta's replayed (an IPC stream whose rows may carry :data:`KHASH`)."""
        infos = self._listing()[0]
        older = [v for v in infos if v < batch_id]
        if not older:
            return None
        version = max(older)
        stamp = (version, *infos[version].stamp)
        cached = _CACHE.get(self._dir)
        if cached is not None and cached[:3] == stamp:
            return cached[3]
        chain = self.load_chain(batch_id)
        assert chain is not None
        if chain.deltas:
            snapshot = ipc_table(chain.snapshot) if chain.snapshot is not None else None
            table = replay(snapshot, [delta_of(d) for d in chain.deltas])
            blob = ipc_bytes(table) if table is not None and table.num_rows else None
        else:
            blob = chain.snapshot
        _CACHE[self._dir] = (*stamp, blob)
        return blob

    def take_held(self, batch_id: int) -> tuple[Any, list[tuple[int, bytes]]] | None:
        """The state object :meth:`keep_held` kept, and the deltas written after its version up to
        the newest version before ``batch_id`` (another worker ran the micro-batches between: the
        object catches up by replaying them). None: none kept, or its version is not in the newest
        version's chain (a snapshot since, a re-run rewrote it). It is no longer kept (a step
        changes it in place)."""
        kept = _HELD.pop(self._dir, None)
        if kept is None:
            return None
        infos = self._listing()[0]
        version = max((v for v in infos if v < batch_id), default=None)
        if version is None:
            return None
        if (version, *infos[version].stamp) == kept[:3]:
            return kept[3], []
        held_version = kept[0]
        if held_version not in infos or infos[held_version].stamp != kept[1:3]:
            return None
        try:
            chain = self._chain(infos, version)
        except JobError:
            return None
        if held_version not in chain:
            return None
        after = chain[chain.index(held_version) + 1 :]
        return kept[3], [(v, self._read(infos[v]) or b"") for v in after]

    def keep_held(self, version: int | None, held: Any) -> None:
        """Keep ``held``, the state as ``version`` holds it, for the next micro-batch on this worker."""
        if version is None:
            return
        listed = self._written if self._written is not None and version in self._written else None
        info = (listed if listed is not None else self._listing()[0]).get(version)
        if info is not None:
            _HELD[self._dir] = (version, *info.stamp, held)

    def save(self, batch_id: int, blob: bytes | None) -> None:
        """Write ``blob`` (None: no state) as the snapshot of ``batch_id``."""
        self._write(f"{batch_id}.arrow", blob)
        self._tidy(batch_id, blob or None)

    def save_delta(self, batch_id: int, base: int, blob: bytes) -> None:
        """Write ``blob`` (:func:`delta_blob`) as the version of ``batch_id``, a delta over ``base``."""
        self._write(f"{batch_id}.d{base}.arrow", blob)
        self._tidy(batch_id, None, cache=False)

    def _write(self, name: str, blob: bytes | None) -> None:
        final = f"{self._dir}/{name}"
        if self._whole:
            with self._fs.open_output_stream(final) as f:
                if blob:
                    f.write(blob)
            return
        self._fs.create_dir(self._dir, recursive=True)
        temp = f"{final}.{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(temp) as f:
            if blob:
                f.write(blob)
        self._fs.move(temp, final)

    def _tidy(self, batch_id: int, blob: bytes | None, *, cache: bool = True) -> None:
        """Remove what neither ``batch_id``'s version nor the one before it (a re-run's) needs."""
        infos, temps = self._listing()
        self._written = infos
        if cache:
            _CACHE[self._dir] = (batch_id, *infos[batch_id].stamp, blob)
        else:
            _CACHE.pop(self._dir, None)
        older = [v for v in infos if v < batch_id]
        needed = set(self._chain(infos, batch_id))
        if older:
            needed.update(self._chain(infos, max(older)))
        for v in older:
            if v not in needed:
                self._fs.delete_file(infos[v].info.path)
        for version, stale in temps:  # what a killed write left, of micro-batches before this one
            if version < batch_id:
                self._fs.delete_file(stale.path)


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


def piece_keep(key_groups: int, piece: Piece) -> Callable[[Sequence[pa.ChunkedArray[Any]], int], np.ndarray]:
    """Which state rows of ``piece`` a task takes (a kernel's ``split_state`` keep): those of the
    key groups it takes of the piece; a row of a group outside the piece's range means the
    state's keys do not hash as its rows did, and stops the job."""
    assert piece.groups is not None
    wanted = np.asarray(piece.groups)

    def keep(columns: Sequence[pa.ChunkedArray[Any]], rows: int) -> np.ndarray:
        groups = key_groups_of(list(columns), key_groups, rows)
        outside = (groups < piece.lo) | (groups >= piece.hi)
        if outside.any():
            raise JobError(
                f"state rows of key groups {piece.lo}-{piece.hi - 1} hash to key group "
                f"{int(groups[outside][0])}: the state's keys do not hash as its rows did, so it "
                "cannot be split; start the job with the spark.sql.shuffle.partitions it ran with"
            )
        return np.isin(groups, wanted)

    return keep


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
        self._fs, self._root = file_system(path)
        self.lo, self.hi = lo, hi
        self._mine = range_name(lo, hi)
        self._since = since
        self._current = current
        self._own = VersionedBlobs(path, self._mine)
        self._dirs: dict[str, tuple[int, int]] | None = None

    def _directories(self) -> dict[str, tuple[int, int]]:
        """The state directories under the root (listed once per store: a micro-batch's tasks
        write only their own, and one another layout's task removes is then found empty)."""
        if self._dirs is None:
            self._dirs = self._list_directories()
        return self._dirs

    def _list_directories(self) -> dict[str, tuple[int, int]]:
        from pyarrow import fs

        found = {}
        for info in listing(self._fs, self._root):
            span = parse_range(info.base_name) if info.type == fs.FileType.Directory else None
            if span is not None:
                found[info.base_name] = span
        return found

    def _others(self, dirs: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        return {d: s for d, s in dirs.items() if d != self._mine and s[0] < self.hi and self.lo < s[1]}

    def _newest(self, name: str, batch_id: int) -> int | None:
        bound = batch_id if name in self._current else min(batch_id, self._since)
        return VersionedBlobs(self._path, name).newest_before(bound)

    @property
    def own(self) -> VersionedBlobs:
        """The versions of this task's own directory."""
        return self._own

    def moved_before(self, batch_id: int) -> list[Piece] | None:
        """The pieces of this task's state when part of it is still in other layouts' directories
        (None: it is all in its own, :attr:`own`)."""
        if not self._others(self._directories()):
            return None
        return self.load_before(batch_id)

    def load_before(self, batch_id: int) -> list[Piece]:
        """The pieces of this task's state as the micro-batches before ``batch_id`` left it."""
        mine = self._own
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

    def keep_held(self, version: int | None, held: Any) -> None:
        self.own.keep_held(version, held)

    def save_delta(self, batch_id: int, base: int, blob: bytes) -> None:
        """Write a delta of this task's state after ``batch_id`` (:meth:`VersionedBlobs.save_delta`)."""
        self.own.save_delta(batch_id, base, blob)
        self._forget_others(batch_id)

    def save(self, batch_id: int, blob: bytes | None) -> None:
        """Write this task's state after ``batch_id``; remove what no later read needs."""
        self.own.save(batch_id, blob)
        self._forget_others(batch_id)

    def _forget_others(self, batch_id: int) -> None:
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
    _HELD.clear()
