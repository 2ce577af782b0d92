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
    One row: both kernels' state tables as Arrow IPC, the watermark of the
    last step, the next arrival number for ``then``'s rows, and how many
    rows both states hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import (
    CHAIN_FIRST,
    CHAIN_ROWS,
    CHAIN_SEQ,
    CHAIN_THEN,
    CHAIN_WATERMARK,
    SEQ,
)
from krishiv_py.stateful._arrow import ipc_bytes, ipc_table
from krishiv_py.stateful.between import Between, handed_rows
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import NOT_DUE, Kernel, Unmerged
from krishiv_py.stateful.regroup import Keep

__all__ = ["ChainKernel", "kinds_of"]

#: A kernel's state that holds nothing.
_EMPTY = pa.table({})
_STATE = pa.schema(
    [pa.field(name, pa.binary()) for name in (CHAIN_FIRST, CHAIN_THEN)]
    + [pa.field(name, pa.int64()) for name in (CHAIN_WATERMARK, CHAIN_SEQ, CHAIN_ROWS)]
)


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

    @property
    def keys(self) -> tuple[str, ...]:
        return self.then.keys

    @property
    def accumulation(self) -> str:
        return self.then.accumulation

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return None  # (one row: both kernels' states)

    @property
    def movable(self) -> bool:
        # Rows are bucketed by ``first``'s keys; ``then``'s state splits by them only when they
        # are its keys too (a window keyed by more columns than the join's keeps its tasks).
        return self.first.movable and self.then.movable and tuple(self.first.keys) == tuple(self.then.keys)

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        first, then, watermark, seq = _split(state)
        if first is None and then is None:
            return state
        return _joined(
            self.first.split_state(first, keep) if first is not None else _EMPTY,
            self.then.split_state(then, keep) if then is not None else _EMPTY,
            watermark,
            seq,
        )

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        parts = [_split(s) for s in states]
        held = [p for p in parts if p[0] is not None or p[1] is not None]
        if not held:
            return states[0] if states else None
        firsts = [p[0] for p in held if p[0] is not None]
        thens = [p[1] for p in held if p[1] is not None]
        marks = [p[2] for p in held if p[2] is not None]  # (equal: each stepped to one watermark)
        first = self.first.gather_states(firsts) if firsts else None
        then = self.then.gather_states(thens) if thens else None
        return _joined(
            _EMPTY if first is None else first,
            _EMPTY if then is None else then,
            max(marks) if marks else None,
            # Arrival numbers: each task counted its own; the next are above every task's (a
            # window over a changelog renumbers its live rows below their sum).
            sum(p[3] for p in held),
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
        first_state, then_state, before, seq = _split(state)
        first_state, out = self.first.step(first_state, batch, watermark_ms, now_ms, merged=merged)
        rows = self._handed_on(out.results, seq, self.first.output_watermark(before))
        then_state, applied = self.then.step(then_state, rows, self.first.output_watermark(before), now_ms)
        outputs = [applied]
        after = self.first.output_watermark(watermark_ms)
        if after != self.first.output_watermark(before):
            then_state, fired = self.then.step(then_state, rows.slice(0, 0), after, now_ms)
            outputs.append(fired)
        new_state = _joined(first_state, then_state, watermark_ms, seq + rows.num_rows)
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
        return None  # (its two kernels' states share one table)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        first_state, then_state, _, _ = _split(state)
        due = [self.first.next_due(first_state)] if first_state is not None else []
        if then_state is not None:
            event, clock = self.then.next_due(then_state)
            delay = 0 - (self.first.output_watermark(0) or 0)  # first passes on W - delay
            due.append((event + delay if event != NOT_DUE else NOT_DUE, clock))
        events = [d[0] for d in due if d[0] != NOT_DUE]
        clocks = [d[1] for d in due if d[1] != NOT_DUE]
        return (min(events) if events else NOT_DUE), (min(clocks) if clocks else NOT_DUE)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return self.then.output_watermark(self.first.output_watermark(watermark_ms))

    def state_rows(self, state: pa.Table) -> int:
        return int(state.column(CHAIN_ROWS)[0].as_py()) if state.num_rows else 0

    def describe(self) -> str:
        return f"{self.first.describe()}, then in the same call {self.then.describe()}"


def kinds_of(kernel: Kernel) -> list[str]:
    """The kinds of the kernels ``kernel`` runs, first to last (a chain's, each of its own)."""
    if isinstance(kernel, ChainKernel):
        return [*kinds_of(kernel.first), *kinds_of(kernel.then)]
    return [type(kernel).__name__]


def _split(state: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None, int | None, int]:
    """Both kernels' states (None: empty), the last watermark and the next arrival number."""
    if state is None or not state.num_rows:
        return None, None, None, 0
    row = state.slice(0, 1).to_pylist()[0]
    return _load(row[CHAIN_FIRST]), _load(row[CHAIN_THEN]), row[CHAIN_WATERMARK], int(row[CHAIN_SEQ])


def _joined(first: pa.Table, then: pa.Table, watermark_ms: int | None, seq: int) -> pa.Table:
    """The chain's state, or an empty table when neither kernel holds a row."""
    if not first.num_rows and not then.num_rows:
        return _STATE.empty_table()
    return pa.table(
        {
            CHAIN_FIRST: [ipc_bytes(first)],
            CHAIN_THEN: [ipc_bytes(then)],
            CHAIN_WATERMARK: [watermark_ms],
            CHAIN_SEQ: [seq],
            CHAIN_ROWS: [first.num_rows + then.num_rows],
        },
        schema=_STATE,
    )


def _load(blob: bytes | None) -> pa.Table | None:
    if blob is None:
        return None
    table = ipc_table(blob)
    return table if table.num_rows or table.schema.metadata else None
