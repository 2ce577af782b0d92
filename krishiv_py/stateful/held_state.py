"""A task's state between micro-batches: stepped whole, or a few keys at a time.

The operator holds each task's state in one of two forms, behind the same
four calls (``take`` the rows a step needs, ``put`` back what it made,
``next_due``, ``state_rows``):

:class:`WholeState`
    The state as one table, all of it passed to every step: kernels whose
    step may change any row (window and as-of joins, unions, a chain below
    its threshold or of kernels not both key-local, processing time).
:class:`KeyedState`
    For key-local kernels (:meth:`~krishiv_py.stateful.protocol.Kernel.row_due`
    gives an array): a step gets only the rows of the keys its micro-batch
    touches and of the rows the watermark makes due, and its new rows
    replace exactly those keys' rows. A micro-batch of 20,000 rows then
    costs about the same over 10,000 live keys as over 10,000,000.

A key-local kernel's state is held by key once it has :data:`KEYED_MIN_ROWS`
rows (read from a snapshot that large, or from deltas), and whole again
when it falls below half of them: hashing, searching and merging cost more
than they save on a state a micro-batch touches most of.

How a :class:`KeyedState` finds a key's rows
    Rows are held in *runs*, each sorted by a 64-bit hash of its key
    (:func:`~krishiv_py.stateful.key_groups.key_hash64`), with a mask of the
    rows still live and the rows' due watermarks in order. A key's rows are
    found by binary search in each run; the rows due at a watermark are a
    prefix of each run's due order. A step's new rows become a new run, and
    the rows it replaced are masked out. Runs merge by tiers, as a
    log-structured merge tree does: :data:`FANOUT` runs whose live rows are
    within one power of :data:`FANOUT` merge into one, so each row is merged
    O(log n) times and a lookup searches a few runs per tier; a run mostly
    of dead rows is compacted. Two keys of one hash are always taken
    together: the kernel still tells them apart.
What is written (:mod:`krishiv_py.stateful.versioned`)
    After a micro-batch, the keys it replaced and their new rows (a *delta*),
    or, now and then, the whole state (a *snapshot*): when the deltas since
    the last snapshot add up to more than the snapshot, or there are
    :data:`MAX_DELTAS` of them. Reading a version replays its deltas over
    its snapshot (:func:`~krishiv_py.stateful.versioned.replay`). Persisted rows carry their hash
    (:data:`~krishiv_py.stateful.versioned.KHASH`), so a restart reads a snapshot without hashing it again.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.names import BATCH_TS, SEQ
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> from krishiv_py.stateful.keyed_agg import KeyedAggKernel
>>> count = AggSpec(name="n", func="count", column=None, out_type=pa.int64())
>>> kernel = KeyedAggKernel(keys=("k",), aggs=(count,))
>>> def rows(keys):
...     return pa.table({"k": keys, BATCH_TS: [1_000] * len(keys), SEQ: list(range(len(keys)))})
>>> state, _ = kernel.step(None, rows(["a", "b", "c"]), None, 0)
>>> held = KeyedState.of(kernel, state)
>>> batch = rows(["b", "b"])
>>> taken = held.take(batch, None, None)
>>> taken.to_pylist()[0]["k"], taken.num_rows  # only b's row goes to the step
('b', 1)
>>> new, out = kernel.step(taken, batch, None, 0)
>>> held.put(new)
>>> held.state_rows(), sorted(r["k"] for r in held.table().to_pylist())
(3, ['a', 'b', 'c'])
>>> keys, delta = held.delta()
>>> len(keys), delta.column("p0_c").to_pylist()
(1, [3])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from krishiv_py.stateful._arrow import ipc_bytes, ipc_table
from krishiv_py.stateful.key_groups import UnhashableKey, key_hash64
from krishiv_py.stateful.protocol import EVERY_STEP, NOT_DUE
from krishiv_py.stateful.versioned import KHASH, Chain, VersionedBlobs, delta_blob, delta_of, without_hash

if TYPE_CHECKING:
    from krishiv_py.stateful.protocol import Kernel

__all__ = [
    "KEYED_MIN_ROWS",
    "MAX_DELTAS",
    "KeyedState",
    "WholeState",
    "keyed",
    "open_held",
    "open_table",
    "unchanged",
    "write_state",
]

#: The most deltas written after one snapshot before the next snapshot.
MAX_DELTAS = 64
#: The state rows from which a task's state is held by key; below half of them it is held whole
#: again (a small state is cheaper to step and write whole than to hash, search and merge).
KEYED_MIN_ROWS = 50_000
#: How many runs of one tier merge into one run of the next.
FANOUT = 8
#: A run whose dead rows exceed its live ones and this many is compacted.
_COMPACT_DEAD = 65_536
#: A merge copies a run's live rows out once its table is in more chunks than this.
_MAX_CHUNKS = 64


class WholeState:
    """A task's state as one table, passed whole to every step."""

    def __init__(self, kernel: Kernel, table: pa.Table | None, *, fresh: bool = False) -> None:
        self._kernel = kernel
        self._loaded = table
        self._table = table
        self._touched = fresh
        #: :meth:`next_due` of the table it was computed for (a table is never changed in place).
        self._due: tuple[pa.Table, tuple[int, int]] | None = None

    def take(self, batch: pa.Table, merged: pa.Table | None, watermark: int | None) -> pa.Table | None:
        if batch.num_rows or merged is not None:
            self._touched = True
        return self._table

    def put(self, new: pa.Table) -> None:
        self._table = new

    def table(self) -> pa.Table | None:
        return self._table if self._table is not None and self._table.num_rows else None

    def next_due(self) -> tuple[int, int]:
        table = self._table
        if table is None:
            return NOT_DUE, NOT_DUE
        if self._due is None or self._due[0] is not table:
            self._due = (table, self._kernel.next_due(table))
        return self._due[1]

    def state_rows(self) -> int:
        return self._kernel.state_rows(self._table) if self._table is not None else 0

    def state_bytes(self) -> int:
        """The bytes the state's columns take in memory."""
        return int(self._table.nbytes) if self._table is not None else 0

    @property
    def changed(self) -> bool:
        """Whether this version must be written: rows came, or the state is not what was read."""
        return self._touched or (self._table is not None and not unchanged(self._loaded, self._table))


def unchanged(stored: pa.Table | None, new: pa.Table) -> bool:
    """Whether a step over no rows left the state as it was (its version need not be written).

    The schema's metadata is part of the state: a join keeps the watermark of its last sweep
    there, which a step over no rows may move alone.
    """
    if stored is None:
        return new.num_rows == 0  # (an empty state is written as none: no rows to sweep again)
    return new is stored or (
        new.num_rows == stored.num_rows and bool(new.equals(stored, check_metadata=True))
    )


class _Run:
    """Rows sorted by key hash, with the mask of those still live and their due order.

    Positions (what :meth:`find` gives, ``khash``, ``due``, ``alive``) are in hash order; the
    table's rows need not be: ``rows`` maps each position to its table row (None: the same), so
    a new run or a merge of runs sorts hashes, not the rows' columns.
    """

    def __init__(
        self,
        table: pa.Table,
        khash: np.ndarray,
        due: np.ndarray,
        *,
        ordered: bool = False,
        rows: np.ndarray | None = None,
    ) -> None:
        if not ordered:
            idx = np.argsort(khash, kind="stable")
            khash, due = khash[idx], due[idx]
            rows = idx if rows is None else rows[idx]
        self.table = table
        self.rows = rows
        self.khash = khash
        self.due = due
        self.order = np.argsort(due, kind="stable")
        self.due_sorted = due[self.order]
        self.alive = np.ones(len(khash), bool)
        self.live = len(khash)
        # Rows due at NOT_DUE are never due, nor are those due at EVERY_STEP (given to every step
        # instead); of the rest, every row of ``order[:_first]`` is dead.
        never = int(np.searchsorted(self.due_sorted, NOT_DUE, "right"))
        self._first = int(np.searchsorted(self.due_sorted, EVERY_STEP, "right"))
        self.every = self.order[never : self._first]

    def find(self, keys: np.ndarray) -> np.ndarray:
        """Positions of the live rows whose hash is one of ``keys`` (sorted, unique).

        One binary search per key; a key's further rows follow its first (one step per row of the
        key with the most, over the keys that have that many).
        """
        n = len(self.khash)
        if not n or not len(keys):
            return np.zeros(0, np.int64)
        at = np.searchsorted(self.khash, keys, "left")
        hit = at < n
        hit[hit] = self.khash[at[hit]] == keys[hit]
        at = at[hit]
        found = [at]
        while len(at):
            nxt = at + 1
            nxt = nxt[nxt < n]
            at = nxt[self.khash[nxt] == self.khash[nxt - 1]]
            found.append(at)
        pos = np.concatenate(found) if len(found) > 1 else found[0]
        return pos[self.alive[pos]]

    def due_keys(self, watermark: int) -> np.ndarray:
        """The key hashes of the live rows due at ``watermark``."""
        end = int(np.searchsorted(self.due_sorted, watermark, "right"))
        rows = self.order[self._first : end]
        return self.khash[rows[self.alive[rows]]]

    def every_keys(self) -> np.ndarray:
        """The key hashes of the live rows every step is given (due at :data:`EVERY_STEP`)."""
        return self.khash[self.every[self.alive[self.every]]]

    def least_due(self) -> int:
        n = len(self.order)
        while self._first < n:
            chunk = self.alive[self.order[self._first : self._first + 4096]]
            if chunk.any():
                self._first += int(np.argmax(chunk))
                return int(self.due_sorted[self._first])
            self._first += len(chunk)
        return NOT_DUE

    def kill(self, pos: np.ndarray) -> None:
        """Mark rows dead (``pos``: live rows, each once, as :meth:`find` gives them)."""
        self.alive[pos] = False
        self.live -= len(pos)

    def take(self, pos: np.ndarray) -> pa.Table:
        """The rows at positions ``pos``."""
        return self.table.take(pos if self.rows is None else self.rows[pos])

    def wasted(self) -> int:
        """The table's rows no live position holds (dead, or left there by a merge)."""
        return self.table.num_rows - self.live

    def live_rows(self) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
        """The table, the table rows of the live positions, their hashes and due watermarks; the
        live rows copied out (in hash order) when the table holds mostly others or many chunks."""
        rows = self.rows if self.rows is not None else np.arange(len(self.khash))
        khash, due = self.khash, self.due
        if self.live < len(self.alive):
            keep = self.alive
            rows, khash, due = rows[keep], khash[keep], due[keep]
        table = self.table
        chunks = table.column(0).num_chunks if table.num_columns else 0
        if self.wasted() > self.live + _COMPACT_DEAD or chunks > _MAX_CHUNKS:
            table, rows = table.take(rows), np.arange(len(rows))
        return table, rows, khash, due


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    if all(t.schema.equals(first) for t in tables[1:]):
        return pa.concat_tables(tables)
    return pa.concat_tables(tables, promote_options="permissive")


class KeyedState:
    """A key-local kernel's state, stepped a few keys at a time (see the module docstring)."""

    def __init__(self, kernel: Kernel, names: tuple[str, ...], *, fresh: bool) -> None:
        self._kernel = kernel
        self._names = names
        self._runs: list[_Run] = []
        self._schema: pa.Schema | None = None
        self._taken: list[tuple[_Run, np.ndarray]] = []
        self._taken_keys = np.zeros(0, np.uint64)
        #: The keys each step since the last write replaced, and their new rows (with hashes).
        self._dirty: list[tuple[np.ndarray, pa.Table | None]] = []
        self._rows = 0
        #: Whether the next write must be a snapshot (the state was not read from this layout's files).
        self.fresh = fresh
        #: The version this state was read as, and what its files hold since its snapshot:
        #: ``(deltas, their bytes, the snapshot's bytes)``.
        self.version: int | None = None
        self.chain = (0, 0, 0)

    @classmethod
    def of(cls, kernel: Kernel, table: pa.Table | None, *, fresh: bool = True) -> KeyedState | None:
        """``table`` held by key, or None when the kernel is not key-local or its keys do not hash."""
        names = kernel.state_keys
        if names is None:
            return None
        held = cls(kernel, names, fresh=fresh)
        if table is None or not table.num_rows:
            if kernel.row_due(table if table is not None else pa.table({})) is None:
                return None
            if table is not None:
                held._schema = without_hash(table).schema
            return held
        try:
            run = held._run_of(table)
        except (UnhashableKey, KeyError):
            return None
        if run is None:
            return None
        held._runs.append(run)
        held._rows = run.live
        held._schema = run.table.schema
        return held

    def _run_of(self, table: pa.Table) -> _Run | None:
        """A run of ``table``'s rows (its :data:`KHASH` column, when it has one, as their hashes)."""
        ordered = False
        if KHASH in table.column_names:
            khash = np.asarray(table.column(KHASH).to_numpy(), np.uint64)
            table = table.drop_columns([KHASH])
            ordered = bool(np.all(khash[1:] >= khash[:-1]))
        else:
            khash = key_hash64([table.column(k) for k in self._names], table.num_rows)
        due = self._kernel.row_due(table)
        if due is None:
            return None
        return _Run(table, khash, np.asarray(due, np.int64), ordered=ordered)

    # --- a step ------------------------------------------------------------------------------

    def take(self, batch: pa.Table, merged: pa.Table | None, watermark: int | None) -> pa.Table | None:
        """The rows of every key of ``batch`` and ``merged``, of every row due at ``watermark`` and
        of every row due at :data:`EVERY_STEP` (None: none); the next :meth:`put` replaces them."""
        found = [self._hashes(t) for t in (batch, merged) if t is not None and t.num_rows]
        found.extend(run.every_keys() for run in self._runs if len(run.every))
        if watermark is not None:
            found.extend(run.due_keys(watermark) for run in self._runs)
        keys = np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
        self._taken_keys = keys
        self._taken = []
        if not len(keys):
            return None
        parts = []
        for run in self._runs:
            pos = run.find(keys)
            if len(pos):
                self._taken.append((run, pos))
                parts.append(run.take(pos))
        return _concat(parts) if parts else None

    def _hashes(self, rows: pa.Table) -> np.ndarray:
        """The key hashes of rows in the kernel's key columns (as the state's key types)."""
        columns = []
        for key, name in zip(self._kernel.keys, self._names, strict=True):
            column = rows.column(key)
            if self._schema is not None and name in self._schema.names:
                kind = self._schema.field(name).type
                if column.type != kind:
                    column = column.cast(kind)
            columns.append(column)
        return key_hash64(columns, rows.num_rows)

    def put(self, new: pa.Table) -> None:
        """Replace the rows :meth:`take` gave with ``new`` (the step's state for those keys)."""
        for run, pos in self._taken:
            run.kill(pos)
            self._rows -= len(pos)
        keys = self._taken_keys
        self._taken, self._taken_keys = [], np.zeros(0, np.uint64)
        if self._schema is None and new.num_columns:
            self._schema = new.schema
        added = self._add(new) if new.num_rows else None
        if len(keys):
            rows = None
            if added is not None:  # (the new rows as they came, each with its hash)
                run = added
                khash = np.empty_like(run.khash)
                khash[run.rows if run.rows is not None else slice(None)] = run.khash
                rows = run.table.append_column(KHASH, pa.array(khash))
            self._dirty.append((keys, rows))
        self._tidy()

    def _tidy(self) -> None:
        """Merge runs by tiers (:data:`FANOUT` runs of one tier into one of the next; a tier is a
        power of :data:`FANOUT` of live rows); compact runs mostly of dead rows."""
        runs = [r for r in self._runs if r.live]
        while True:
            tiers: dict[int, list[int]] = {}
            for i, run in enumerate(runs):
                tiers.setdefault(_tier(run.live), []).append(i)
            full = [t for t, members in tiers.items() if len(members) >= FANOUT]
            if not full:
                break
            members = tiers[min(full)]
            merged = self._merged([runs[i] for i in members])
            runs = [r for i, r in enumerate(runs) if i not in members] + [merged]
        for i, run in enumerate(runs):
            if run.wasted() > run.live + _COMPACT_DEAD:
                runs[i] = self._merged([run])
        self._runs = runs

    @staticmethod
    def _merged(runs: list[_Run]) -> _Run:
        """One run of the live rows of ``runs``: their tables side by side (no copy, unless
        :meth:`_Run.live_rows` copies), their hashes merged."""
        parts = [r.live_rows() for r in runs]
        offsets = np.cumsum([0] + [p[0].num_rows for p in parts[:-1]])
        return _Run(
            _concat([p[0] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]),
            rows=np.concatenate([p[1] + offset for p, offset in zip(parts, offsets, strict=True)]),
        )

    # --- what the operator reports and writes --------------------------------------------------

    def next_due(self) -> tuple[int, int]:
        dues = [d for d in (run.least_due() for run in self._runs) if d != NOT_DUE]
        return (min(dues) if dues else NOT_DUE), NOT_DUE

    def state_rows(self) -> int:
        """The live rows, less those every step is given (a kernel's bookkeeping, not its state)."""
        return self._rows - sum(int(r.alive[r.every].sum()) for r in self._runs if len(r.every))

    def state_bytes(self) -> int:
        """The bytes the live rows' columns take in memory (each run's share of its live rows)."""
        return sum(int(r.table.nbytes) * r.live // max(r.table.num_rows, 1) for r in self._runs)

    @property
    def changed(self) -> bool:
        return self.fresh or bool(self._dirty)

    def runs(self) -> int:
        """How many runs hold the rows (at most :data:`FANOUT` - 1 per tier)."""
        return len(self._runs)

    def table(self, *, hashed: bool = False) -> pa.Table | None:
        """Every live row (with :data:`KHASH` when ``hashed``, in hash order); None: no rows.
        The runs are merged into one first."""
        if len(self._runs) > 1 or (self._runs and self._runs[0].live < len(self._runs[0].alive)):
            self._runs = [self._merged(self._runs)] if self._rows else []
        if not self._runs:
            return None
        run = self._runs[0]
        if run.rows is not None or run.wasted():  # (its rows in hash order, as a snapshot holds them)
            run = _Run(run.take(np.arange(run.live)), run.khash, run.due, ordered=True)
            self._runs = [run]
        if not hashed:
            return run.table
        return run.table.append_column(KHASH, pa.array(run.khash, pa.uint64()))

    def delta(self) -> tuple[np.ndarray, pa.Table | None]:
        """The keys replaced since the last :meth:`delta` and their rows now (with :data:`KHASH`):
        each step's new rows, less those of keys a later step replaced again."""
        steps, self._dirty = self._dirty, []
        if not steps:
            return np.zeros(0, np.uint64), None
        parts = []
        for i, (_, rows) in enumerate(steps):
            if rows is None or not rows.num_rows:
                continue
            later = [k for k, _ in steps[i + 1 :]]
            if later:
                again = np.isin(np.asarray(rows.column(KHASH).to_numpy(), np.uint64), np.concatenate(later))
                rows = rows.filter(pa.array(~again)) if again.any() else rows
            parts.append(rows)
        keys = np.unique(np.concatenate([k for k, _ in steps])) if len(steps) > 1 else steps[0][0]
        return keys, (_concat(parts) if parts else None)

    def written(self) -> None:
        """What :meth:`delta` or :meth:`table` gave is on disk."""
        self._dirty = []
        self.fresh = False

    def apply(self, keys: np.ndarray, rows: pa.Table | None) -> None:
        """Replay a delta read from the files: ``keys``' rows replaced by ``rows``."""
        for run in self._runs:
            pos = run.find(keys)
            if len(pos):
                run.kill(pos)
                self._rows -= len(pos)
        if rows is not None and rows.num_rows:
            self._add(rows)
        self._tidy()

    def _add(self, rows: pa.Table) -> _Run:
        added = self._run_of(rows)
        if added is None:  # (a kernel's row_due answers by its settings, never by the rows)
            raise RuntimeError(f"{self._kernel.describe()}: row_due gave None for rows it held before")
        self._runs.append(added)
        self._rows += added.live
        return added


def _tier(rows: int) -> int:
    """The tier of a run of ``rows`` live rows: ``floor(log_FANOUT(rows))``."""
    tier = 0
    while rows >= FANOUT:
        rows //= FANOUT
        tier += 1
    return tier


class _Store(Protocol):
    """Where a task's versions go (:class:`~krishiv_py.stateful.versioned.VersionedBlobs`, or a
    :class:`~krishiv_py.stateful.versioned.KeyGroupStore`)."""

    def save(self, batch_id: int, blob: bytes | None) -> None: ...

    def save_delta(self, batch_id: int, base: int, blob: bytes) -> None: ...

    def keep_held(self, version: int | None, held: Any) -> None: ...


def keyed(kernel: Kernel) -> bool:
    """Whether ``kernel``'s state is held by key (:class:`KeyedState`)."""
    return kernel.state_keys is not None and kernel.row_due(pa.table({})) is not None


def open_held(kernel: Kernel, blobs: VersionedBlobs, batch_id: int) -> WholeState | KeyedState:
    """The state the micro-batches before ``batch_id`` left in ``blobs``: the object this worker
    kept when it is that version, else read from the files."""
    if keyed(kernel):
        taken = blobs.take_held(batch_id)
        if taken is not None and isinstance(taken[0], KeyedState):
            return _caught_up(taken[0], taken[1])
        if blobs.newest_is_delta(batch_id):
            chain = blobs.load_chain(batch_id)
            held = _keyed_of_chain(kernel, chain) if chain is not None else None
            if held is not None:
                return held
    blob = blobs.load_before(batch_id)
    table = ipc_table(blob) if blob is not None else None
    rows = table.num_rows if table is not None else 0
    if rows >= KEYED_MIN_ROWS and keyed(kernel):
        held = KeyedState.of(
            kernel, table, fresh=rows > 0 and table is not None and KHASH not in table.column_names
        )
        if held is not None:
            held.version = blobs.newest_before(batch_id)
            held.chain = (0, 0, len(blob or b""))
            return held
    return WholeState(kernel, without_hash(table) if table is not None else None)


def _caught_up(held: KeyedState, newer: list[tuple[int, bytes]]) -> KeyedState:
    """``held`` with the deltas of the micro-batches another worker ran since its version."""
    for version, data in newer:
        changed, replaced = delta_of(data)
        held.apply(changed, replaced)
        deltas, delta_bytes, snapshot_bytes = held.chain
        held.chain = (deltas + 1, delta_bytes + len(data), snapshot_bytes)
        held.version = version
    return held


def _keyed_of_chain(kernel: Kernel, chain: Chain) -> KeyedState | None:
    snapshot = ipc_table(chain.snapshot) if chain.snapshot is not None else None
    deltas = [delta_of(d) for d in chain.deltas]
    held = KeyedState.of(kernel, snapshot, fresh=False)
    if held is None:
        return None
    for keys, rows in deltas:
        held.apply(keys, rows)
    held.version = chain.version
    held.chain = (len(deltas), chain.delta_bytes, chain.snapshot_bytes)
    # A snapshot without the rows' hashes (written before keyed state) takes no delta after it.
    held.fresh = snapshot is not None and snapshot.num_rows > 0 and KHASH not in snapshot.column_names
    return held


def open_table(kernel: Kernel, table: pa.Table | None, *, fresh: bool) -> WholeState | KeyedState:
    """``table`` (state gathered from other tasks' files) held as ``kernel`` steps it (no rows:
    whole, as a new state is; a kernel may hold a small state in a form it cannot be stepped by
    key in, as a chain does)."""
    held = KeyedState.of(kernel, table, fresh=fresh) if table is not None and table.num_rows else None
    if held is not None:
        return held
    return WholeState(kernel, without_hash(table) if table is not None else None, fresh=fresh)


def write_state(held: WholeState | KeyedState, store: _Store, batch_id: int) -> int:
    """Write ``held`` as ``batch_id``'s version when a step changed it (keyed state: a delta, or a
    snapshot by the rule of the module docstring); the bytes written."""
    if isinstance(held, WholeState):
        if not held.changed:
            return 0
        table = held.table()
        blob = ipc_bytes(table) if table is not None else None
        store.save(batch_id, blob)
        return len(blob or b"")
    if not held.changed:
        store.keep_held(held.version, held)
        return 0
    deltas, delta_bytes, snapshot_bytes = held.chain
    small = held.state_rows() < KEYED_MIN_ROWS // 2  # (written whole, and held whole from now on)
    if not small and not held.fresh and held.version is not None and deltas < MAX_DELTAS:
        keys, rows = held.delta()
        # A delta whose rows alone outweigh the room left (its file is about their bytes in memory)
        # is not written out first only to be dropped for the snapshot: under heavy churn each
        # micro-batch's delta can outweigh the whole state.
        if (rows.nbytes if rows is not None else 0) <= snapshot_bytes - delta_bytes:
            blob = delta_blob(keys, rows)
            if delta_bytes + len(blob) <= snapshot_bytes:
                store.save_delta(batch_id, held.version, blob)
                held.chain = (deltas + 1, delta_bytes + len(blob), snapshot_bytes)
                return _written(held, store, batch_id, len(blob))
    table = held.table(hashed=not small)
    snapshot = ipc_bytes(table) if table is not None else None
    store.save(batch_id, snapshot)
    if small:
        return len(snapshot or b"")
    held.chain = (0, 0, len(snapshot or b""))
    return _written(held, store, batch_id, len(snapshot or b""))


def _written(held: KeyedState, store: _Store, batch_id: int, size: int) -> int:
    held.written()
    held.version = batch_id
    store.keep_held(batch_id, held)
    return size
