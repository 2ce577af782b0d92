"""Two kernels in one operator call: an operator over another operator's results (SPEC 3.13).

:class:`ChainKernel` runs a ``first`` kernel (a join) and hands its results,
with their event times, to a ``then`` kernel (a window) in the same call
of the same key bucket. That is exact, and needs no second shuffle, when
rows of equal ``then`` keys always meet in one call: ``then``'s keys
include ``first``'s (the planner checks it), so a window keyed by the join
keys (and more) runs beside the join.

Watermarks
    ``then`` runs at the watermark ``first`` passes on
    (:meth:`~krishiv_py.stateful.protocol.Kernel.output_watermark`: the
    input watermark held back by ``first``'s structural delay only, never
    by its allowed lateness). A step hands ``first``'s new results to
    ``then`` at the watermark ``then`` had before the step — a result of
    on-time input is never late there — and then moves ``then`` on to the
    new watermark, which fires what it passed: upstream results are
    applied before the downstream windows that the same watermark closes
    (SPEC 3.11).
Corrections
    A row late by less than ``first``'s allowed lateness ``L`` still makes
    results (a late partner's new pairs). ``then`` applies them: its
    allowed lateness is its own plus ``L``, so it keeps every window that
    such a result can reach, and re-fires it with the correction. Nothing
    ``first`` emits is dropped downstream.
Between the two
    Filters and projections (:class:`~krishiv_py.stateful.between.Between`)
    run over ``first``'s results in Arrow, exactly as Spark SQL would;
    the event time and ``kind`` pass through them.
Event time and retractions
    A join's result carries its event time (the later of its rows'), a
    window's is ``window_end - 1`` ms; an aggregation's changes have none
    of their own and reach ``then`` at the watermark (on time). ``first``'s
    retractions (``kind``) reach ``then`` only when it takes them
    (``retracting``, an aggregation per key); otherwise the planner
    refuses the chain.
State
    When both kernels are key-local
    (:meth:`~krishiv_py.stateful.protocol.Kernel.row_due`) and ``then``'s keys
    name ``first``'s, the chain is key-local too, and its state is held by
    key (:mod:`~krishiv_py.stateful.held_state`): one row per state row of
    either kernel, with the key it is bucketed by (``__kp_chain_key0``, ...),
    which kernel's it is (:data:`~krishiv_py.names.CHAIN_PART`) and that
    kernel's row as a struct; plus one row of null keys holding the
    watermark of the last step and the next arrival number for ``then``'s
    rows, which every step is given
    (:data:`~krishiv_py.stateful.protocol.EVERY_STEP`). A row of ``then``'s
    is due at its own due watermark plus ``first``'s structural delay.
    Otherwise one row: both kernels' state tables as Arrow IPC, the
    watermark of the last step, the next arrival number, and how many rows
    both states hold. A chain reads either form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import (
    CHAIN_FIRST,
    CHAIN_KEY,
    CHAIN_PART,
    CHAIN_ROWS,
    CHAIN_SEQ,
    CHAIN_THEN,
    CHAIN_WATERMARK,
    SEQ,
)
from krishiv_py.stateful._arrow import cell_table, ipc_cell
from krishiv_py.stateful.between import Between, handed_rows
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import EVERY_STEP, NOT_DUE, Kernel, Unmerged
from krishiv_py.stateful.regroup import Keep

__all__ = ["ChainKernel", "kinds_of"]

#: A kernel's state that holds nothing.
_EMPTY = pa.table({})
_STATE = pa.schema(
    [pa.field(name, pa.binary()) for name in (CHAIN_FIRST, CHAIN_THEN)]
    + [pa.field(name, pa.int64()) for name in (CHAIN_WATERMARK, CHAIN_SEQ, CHAIN_ROWS)]
)
#: The rows from which a key-local chain's state is held by key. Below, its one row of two
#: tables steps faster: stepped whole, the rows by key carry each kernel's columns (nulls for the
#: other's rows) and are taken apart and put together again; a join and a top-N per key, 20,000
#: rows a micro-batch, step in 73 ms as one row and 150 ms by key over 100,000 live keys, 251
#: and 180 ms over 300,000, 1,226 and 213 ms over 1,000,000 (``python -m benchmarks.scaling
#: state --kernel chain``). The operator holds it by key from
#: :data:`~krishiv_py.stateful.held_state.KEYED_MIN_ROWS` rows on, which this is above.
BY_KEY_ROWS = 500_000
#: Which state a row of a chain's state by key holds (:data:`~krishiv_py.names.CHAIN_PART`).
_FIRST, _THEN, _HEADER = 0, 1, 2
#: Per key of a chain held by key: its column in ``first``'s state, in ``then``'s, and its type.
KeyColumns = tuple[tuple[str, str, pa.DataType], ...]


@attrs.frozen(kw_only=True)
class ChainKernel(Unmerged):
    """``then`` over ``first``'s results, in one call (see the module docstring)."""

    first: Kernel
    then: Kernel
    #: The columns ``then`` reads of ``first``'s results, with the types it takes them in.
    columns: tuple[tuple[str, pa.DataType], ...]
    #: Filters and projections between the two, over ``first``'s results.
    between: Between | None = None
    #: Whether ``first``'s results carry ``kind`` (retractions), which ``then`` takes.
    retracting: bool = False
    #: The rows from which a key-local chain's state is held by key (:data:`BY_KEY_ROWS` when it
    #: is made); once held by key it stays so.
    by_key_from: int = attrs.field(factory=lambda: BY_KEY_ROWS)
    #: Its state's key columns when it is held by key (None: one row), from the two kernels.
    by_key: KeyColumns | None = attrs.field(init=False, default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "by_key", _key_columns(self.first, self.then, self.columns))

    @property
    def keys(self) -> tuple[str, ...]:
        return self.first.keys  # (its rows are bucketed by first's keys; then's include them)

    @property
    def accumulation(self) -> str:
        return self.then.accumulation

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        if self.by_key is None:
            return None  # (one row: both kernels' states)
        return tuple(f"{CHAIN_KEY}{i}" for i in range(len(self.by_key)))

    @property
    def movable(self) -> bool:
        # Rows are bucketed by ``first``'s keys; ``then``'s state splits by them only when they
        # are its keys too (a window keyed by more columns than the join's keeps its tasks).
        return self.first.movable and self.then.movable and tuple(self.first.keys) == tuple(self.then.keys)

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        first, then, watermark, seq = self._split(state)
        if first is None and then is None:
            return state
        return self._joined(
            self.first.split_state(first, keep) if first is not None else _EMPTY,
            self.then.split_state(then, keep) if then is not None else _EMPTY,
            watermark,
            seq,
            by_key=_by_key_held(state),
        )

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        parts = [self._split(s) for s in states]
        held = [p for p in parts if p[0] is not None or p[1] is not None]
        if not held:
            return states[0] if states else None
        firsts = [p[0] for p in held if p[0] is not None]
        thens = [p[1] for p in held if p[1] is not None]
        marks = [p[2] for p in held if p[2] is not None]  # (equal: each stepped to one watermark)
        first = self.first.gather_states(firsts) if firsts else None
        then = self.then.gather_states(thens) if thens else None
        return self._joined(
            _EMPTY if first is None else first,
            _EMPTY if then is None else then,
            max(marks) if marks else None,
            # Arrival numbers: each task counted its own; the next are above every task's (a
            # window over a changelog renumbers its live rows below their sum).
            sum(p[3] for p in held),
            by_key=any(_by_key_held(s) for s in states),
        )

    @property
    def identity(self) -> tuple[str, ...]:
        return self.then.identity

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        first_state, then_state, before, seq = self._split(state)
        first_state, out = self.first.step(first_state, batch, watermark_ms, now_ms, merged=merged)
        rows = self._handed_on(out.results, seq, self.first.output_watermark(before))
        then_state, applied = self.then.step(then_state, rows, self.first.output_watermark(before), now_ms)
        outputs = [applied]
        after = self.first.output_watermark(watermark_ms)
        if after != self.first.output_watermark(before):
            then_state, fired = self.then.step(then_state, rows.slice(0, 0), after, now_ms)
            outputs.append(fired)
        new_state = self._joined(
            first_state, then_state, watermark_ms, seq + rows.num_rows, by_key=_by_key_held(state)
        )
        results = [o.results for o in outputs]
        closed = [o.closed for o in outputs if o.closed is not None]
        return new_state, attrs.evolve(
            out,
            results=pa.concat_tables(results) if len(results) > 1 else results[0],
            closed=pa.concat_tables(closed) if closed else None,
            expired=out.expired + sum(o.expired for o in outputs),
            arithmetic_errors=out.arithmetic_errors + sum(o.arithmetic_errors for o in outputs),
        )

    def _handed_on(self, results: pa.Table, seq: int, watermark_ms: int | None) -> pa.Table:
        """``first``'s results as ``then``'s batch: its columns, event time (µs), kind, arrival order."""
        rows = handed_rows(
            results, self.columns, between=self.between, retracting=self.retracting, at=watermark_ms
        )
        seqs = pa.array(np.arange(seq, seq + rows.num_rows, dtype=np.int64))
        return rows.append_column(SEQ, seqs)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        if self.by_key is None or (state.num_rows and CHAIN_PART not in state.column_names):
            return None  # (its two kernels' states share one row)
        if not state.num_rows:
            return np.zeros(0, np.int64)
        part = _parts(state)
        due = np.full(state.num_rows, NOT_DUE, np.int64)
        due[part == _HEADER] = EVERY_STEP
        for which, kernel, column, delay in (
            (_FIRST, self.first, CHAIN_FIRST, 0),
            (_THEN, self.then, CHAIN_THEN, self._delay()),
        ):
            rows = np.flatnonzero(part == which)
            if not len(rows):
                continue
            own = kernel.row_due(_part_table(state, rows, column))
            if own is None:
                raise RuntimeError(f"{kernel.describe()}: row_due gave None for rows of a chain held by key")
            own = np.asarray(own, np.int64)
            if delay:  # (then runs at the watermark first passes on: W - delay)
                own = np.where((own != NOT_DUE) & (own != EVERY_STEP), own + delay, own)
            due[rows] = own
        return due

    def _delay(self) -> int:
        """How far the watermark ``first`` passes on is behind its input's (its structural delay)."""
        return 0 - (self.first.output_watermark(0) or 0)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        first_state, then_state, _, _ = self._split(state)
        due = [self.first.next_due(first_state)] if first_state is not None else []
        if then_state is not None:
            event, clock = self.then.next_due(then_state)
            delay = self._delay()  # first passes on W - delay
            due.append((event + delay if event != NOT_DUE else NOT_DUE, clock))
        events = [d[0] for d in due if d[0] != NOT_DUE]
        clocks = [d[1] for d in due if d[1] != NOT_DUE]
        return (min(events) if events else NOT_DUE), (min(clocks) if clocks else NOT_DUE)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return self.then.output_watermark(self.first.output_watermark(watermark_ms))

    def state_rows(self, state: pa.Table) -> int:
        if not state.num_rows:
            return 0
        if CHAIN_PART not in state.column_names:
            return int(state.column(CHAIN_ROWS)[0].as_py())
        part = _parts(state)
        rows = int(np.sum(part == _THEN))
        if isinstance(self.first, ChainKernel):  # (its own bookkeeping row is no state row)
            held = np.flatnonzero(part == _FIRST)
            return rows + (self.first.state_rows(_part_table(state, held, CHAIN_FIRST)) if len(held) else 0)
        return rows + int(np.sum(part == _FIRST))

    def _split(self, state: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None, int | None, int]:
        """Both kernels' states (None: empty), the last watermark and the next arrival number."""
        if state is None or not state.num_rows:
            return None, None, None, 0
        if CHAIN_PART not in state.column_names:
            return _split_row(state)
        part = _parts(state)
        first_rows, then_rows = np.flatnonzero(part == _FIRST), np.flatnonzero(part == _THEN)
        first = _part_table(state, first_rows, CHAIN_FIRST) if len(first_rows) else None
        then = _part_table(state, then_rows, CHAIN_THEN) if len(then_rows) else None
        header = pa.array(np.flatnonzero(part == _HEADER), pa.int64())
        marks = [m for m in state.column(CHAIN_WATERMARK).take(header).to_pylist() if m is not None]
        seqs = [int(s) for s in state.column(CHAIN_SEQ).take(header).to_pylist() if s is not None]
        return first, then, (max(marks) if marks else None), max(seqs, default=0)

    def _joined(
        self, first: pa.Table, then: pa.Table, watermark_ms: int | None, seq: int, *, by_key: bool
    ) -> pa.Table:
        """The chain's state: by key when it is key-local and its state was held by key (``by_key``)
        or now holds :attr:`by_key_from` rows; else one row."""
        if self.by_key is None or not (by_key or first.num_rows + then.num_rows >= self.by_key_from):
            return _joined_row(first, then, watermark_ms, seq)
        return _by_key(self.by_key, first, then, watermark_ms, seq)

    def describe(self) -> str:
        return f"{self.first.describe()}, then in the same call {self.then.describe()}"


def kinds_of(kernel: Kernel) -> list[str]:
    """The kinds of the kernels ``kernel`` runs, first to last (a chain's, each of its own)."""
    if isinstance(kernel, ChainKernel):
        return [*kinds_of(kernel.first), *kinds_of(kernel.then)]
    return [type(kernel).__name__]


def _key_columns(
    first: Kernel, then: Kernel, columns: tuple[tuple[str, pa.DataType], ...]
) -> KeyColumns | None:
    """Where a chain held by key finds each key it is bucketed by in both kernels' states, and its
    type; None: it cannot be held by key (a kernel that is not key-local, or ``then`` not keyed by
    a column that ``first``'s key names)."""
    held_first, held_then = first.state_keys, then.state_keys
    if held_first is None or held_then is None or not first.keys:
        return None
    if first.row_due(_EMPTY) is None or then.row_due(_EMPTY) is None:
        return None
    types = dict(columns)
    out = []
    for key, column in zip(first.keys, held_first, strict=True):
        if key not in then.keys or key not in types:
            return None
        out.append((column, held_then[then.keys.index(key)], types[key]))
    return tuple(out)


def _by_key_held(state: pa.Table | None) -> bool:
    """Whether ``state`` is a chain's state by key (not its one row)."""
    return state is not None and CHAIN_PART in state.column_names


def _parts(state: pa.Table) -> np.ndarray:
    return np.asarray(state.column(CHAIN_PART).to_numpy(), np.int8)


def _part_table(state: pa.Table, rows: np.ndarray, column: str) -> pa.Table:
    """The kernel's state held in ``column`` at ``rows`` of a chain's state by key (its schema's
    metadata kept in the column's field)."""
    held = state.column(column)
    if int(rows[-1]) - int(rows[0]) + 1 == len(rows):  # (in order: a slice, no copy)
        held = held.slice(int(rows[0]), len(rows))
    else:
        held = held.take(rows)
    table = pa.Table.from_struct_array(cast(pa.StructArray, held.combine_chunks()))
    meta = state.schema.field(column).metadata
    return table.replace_schema_metadata(meta) if meta else table


def _by_key(
    keys: KeyColumns, first: pa.Table, then: pa.Table, watermark_ms: int | None, seq: int
) -> pa.Table:
    """A chain's state by key: ``first``'s rows, ``then``'s, and the row of its watermark and
    arrival number (none while there is neither)."""
    structs = [_struct_field(CHAIN_FIRST, first), _struct_field(CHAIN_THEN, then)]
    schema = pa.schema(
        [pa.field(f"{CHAIN_KEY}{i}", kind) for i, (_, _, kind) in enumerate(keys)]
        + [pa.field(CHAIN_PART, pa.int8()), *structs]
        + [pa.field(name, pa.int64()) for name in (CHAIN_WATERMARK, CHAIN_SEQ)]
    )
    parts = []
    for which, held in ((_FIRST, first), (_THEN, then)):
        n = held.num_rows
        if not n:
            continue
        arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
        for column_first, column_then, kind in keys:
            column = held.column(column_first if which == _FIRST else column_then)
            arrays.append(column if column.type == kind else column.cast(kind))
        arrays.append(pa.array(np.full(n, which, np.int8)))
        own = held.replace_schema_metadata(None).to_struct_array()
        none = [_nulls(n, f.type) for f in structs]
        arrays += [own, none[1]] if which == _FIRST else [none[0], own]
        arrays += [_nulls(n, pa.int64()), _nulls(n, pa.int64())]
        parts.append(pa.Table.from_arrays(arrays, schema=schema))
    if not parts and watermark_ms is None and not seq:
        return schema.empty_table()
    header = [_nulls(1, kind) for _, _, kind in keys] + [pa.array([_HEADER], pa.int8())]
    header += [_nulls(1, f.type) for f in structs]
    header += [pa.array([watermark_ms], pa.int64()), pa.array([seq], pa.int64())]
    parts.append(pa.Table.from_arrays(header, schema=schema))
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _nulls(n: int, kind: pa.DataType) -> pa.Array[Any]:
    return pa.nulls(n, kind)  # type: ignore[call-overload,no-any-return]


def _struct_field(name: str, held: pa.Table) -> pa.Field[Any]:
    """The field of a kernel's state rows as a struct, its schema's metadata on the field."""
    return pa.field(name, pa.struct(list(held.schema)), metadata=held.schema.metadata)


Parts = tuple[pa.Table | None, pa.Table | None, int | None, int]
#: The one-row state :func:`_joined_row` made last and the parts it holds: a task that splits
#: the state it has just made (its next step, a step to the watermark it fires at, when it is
#: due) takes them as they are rather than reading them back. A state is never changed in
#: place, so the same object holds the same parts.
_last_joined: list[tuple[pa.Table, Parts]] = []


def _split_row(state: pa.Table) -> Parts:
    """Both kernels' states of a chain's one-row state."""
    if _last_joined and _last_joined[0][0] is state:
        return _last_joined[0][1]
    first, then = (_load_cell(state.column(c)[0]) for c in (CHAIN_FIRST, CHAIN_THEN))
    return first, then, state.column(CHAIN_WATERMARK)[0].as_py(), int(state.column(CHAIN_SEQ)[0].as_py())


def _joined_row(first: pa.Table, then: pa.Table, watermark_ms: int | None, seq: int) -> pa.Table:
    """The chain's one-row state, or an empty table when neither kernel holds a row."""
    if not first.num_rows and not then.num_rows:
        return _STATE.empty_table()
    state = pa.Table.from_arrays(
        [
            ipc_cell(first),
            ipc_cell(then),
            pa.array([watermark_ms], pa.int64()),
            pa.array([seq], pa.int64()),
            pa.array([first.num_rows + then.num_rows], pa.int64()),
        ],
        schema=_STATE,
    )
    _last_joined[:] = [(state, (_kept(first), _kept(then), watermark_ms, seq))]
    return state


def _kept(table: pa.Table) -> pa.Table | None:
    """A kernel's state as :func:`_load_cell` reads it back: none when it has no row and no metadata."""
    return table if table.num_rows or table.schema.metadata else None


def _load_cell(value: pa.Scalar[Any]) -> pa.Table | None:
    """A kernel's state held in a binary value of the chain's row, read over its buffer."""
    return _kept(cell_table(value)) if value.is_valid else None
