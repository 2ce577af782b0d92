"""A window over a changelog: emits and retractions in, windows corrected by retraction out (SPEC 3.13).

:class:`ChangesWindowKernel` is the window an operator runs over another
operator's changes when they withdraw rows: an outer join in
``accumulation("retracting")`` (a padded row retracted once its partner
comes), a retracting window, an aggregation or top-N per key. Its input
rows carry their event time (``__kp_ts``, µs) and ``kind`` (``"emit"`` or
``"retract"``; without the column every row is an emit).

Rows
    An emit is a new live row. A retraction withdraws one live row of equal
    values — the window's keys, the columns its aggregates read and the
    event time, which is all a window can tell rows by — from the rows held
    or from the same batch's emits (a multiset, as Flink's retract
    aggregation does). A retraction that finds no such row is an upstream
    inconsistency the stream survives: it is dropped and counted in
    :attr:`~krishiv_py.stateful.kernel.StepOutput.arithmetic_errors`.
Windows
    Tumbling, sliding and session windows, computed from the live rows by
    :func:`krishiv_py.stateful.cascade.step` (the same vectorized step, and
    the same aggregate partials as every window, so values follow Spark
    SQL): a window fires when the watermark reaches its end; a change to a
    fired window re-fires it (``"accumulating"``) or retracts the value it
    emitted and emits the new one (``"retracting"``); a fired window that
    loses its last row is retracted; a window goes, with its rows, at
    ``end + allowed lateness``. A row whose last window went already is very
    late and dropped. ``min`` and ``max`` are exact under retraction (the
    rows are held, not partials); ``first`` and ``last`` are refused (a row
    withdrawn may be the one they picked).
State
    One row: the live rows and the fired windows (Arrow IPC), the watermark
    of the last step, the next watermark at which a window fires or goes,
    and the live rows' count. It holds the rows of the open windows, not
    partials: what exact retraction of ``min``/``max`` costs.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> n = AggSpec(name="n", func="count", column=None, out_type=pa.int64())
>>> kernel = ChangesWindowKernel(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(n,),
...                              allowed_lateness_ms=20, accumulation="retracting")
>>> def rows(ts, kinds, seq):
...     return pa.table({"k": pa.array(["a"] * len(ts), pa.string()),
...                      "__kp_ts": pa.array([t * 1000 for t in ts], pa.int64()),
...                      "kind": pa.array(kinds, pa.string()),
...                      "__kp_seq": pa.array(range(seq, seq + len(ts)), pa.int64())})
>>> state, out = kernel.step(None, rows([3, 4], ["emit", "emit"], 0), None, 0)
>>> state, out = kernel.step(state, rows([], [], 2), 10, 0)
>>> out.results.to_pylist()
[{'k': 'a', 'window_start': 0, 'window_end': 10000, 'n': 2, 'kind': 'emit'}]

A retraction after the window fired corrects it:

>>> state, out = kernel.step(state, rows([4], ["retract"], 2), 10, 0)
>>> [(r["n"], r["kind"]) for r in out.results.to_pylist()]
[(2, 'retract'), (1, 'emit')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import (
    BATCH_TS,
    CASCADE_DELETE,
    CASCADE_EVENT_TIME,
    CHANGES_EMITTED,
    CHANGES_LIVE,
    CHANGES_STATE,
    RESULT_KIND,
    SEQ,
    cascade_identity,
)
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful import cascade
from krishiv_py.stateful._arrow import ipc_bytes, ipc_table
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.grouping import withdrawn
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import Keep, split_table

__all__ = ["ChangesWindowKernel"]

Ints = npt.NDArray[np.int64]

_ID = cascade_identity(0)
_STATE = pa.schema(
    [
        pa.field(CHANGES_LIVE, pa.binary()),
        pa.field(CHANGES_EMITTED, pa.binary()),
        pa.field(CHANGES_STATE, pa.list_(pa.int64())),
    ]
)
#: The numbers of the state row: watermark of the last step (or none), next due, live rows.
_NO_WATERMARK = -(2**63)


@attrs.frozen(kw_only=True)
class ChangesWindowKernel(Unmerged):
    """A window over emits and retractions (see the module docstring)."""

    keys: tuple[str, ...]
    window: TumblingWindow | SlidingWindow | SessionWindow
    aggs: tuple[AggSpec, ...]
    allowed_lateness_ms: int
    #: ``"accumulating"`` (a correction re-fires the window) or ``"retracting"``.
    accumulation: str = "accumulating"

    def __attrs_post_init__(self) -> None:
        picky = [a.name for a in self.aggs if a.func in ("first", "last")]
        if picky:
            raise ValueError(
                f"a window over retractions cannot compute first/last ({', '.join(picky)}): "
                "a withdrawn row may be the one they picked"
            )
        if self.accumulation not in ("accumulating", "retracting"):
            raise ValueError(f"a window over retractions re-fires or retracts, not {self.accumulation!r}")

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return None  # (one row: the live rows and the fired windows)

    @property
    def movable(self) -> bool:
        return True  # both tables hold the keys, by name

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        held, mark = _split(state)
        if held is None:
            return state
        live, emitted = (split_table(t, self.keys, keep) for t in held)
        due = int(state.column(CHANGES_STATE)[0].as_py()[1])  # (a part's is never earlier)
        return _joined(cascade.CascadeState(live, emitted, mark), due)

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        parts = [(_split(s), s) for s in states if s.num_rows]
        if not parts:
            return states[0] if states else None
        held = [h for (h, _), _ in parts if h is not None]
        live = pa.concat_tables(_numbered([h[0] for h in held]), promote_options="permissive")
        emitted = pa.concat_tables([h[1] for h in held], promote_options="permissive")
        marks = [m for (_, m), _ in parts if m is not None]  # (equal: each stepped to one watermark)
        due = min(int(s.column(CHANGES_STATE)[0].as_py()[1]) for _, s in parts)
        return _joined(cascade.CascadeState(live, emitted, max(marks) if marks else None), due)

    @property
    def identity(self) -> tuple[str, ...]:
        return (*self.keys, "window_start", "window_end")

    @property
    def _spec(self) -> cascade.CascadeSpec:
        return cascade.CascadeSpec(
            keys=self.keys,
            window=self.window,
            aggs=self.aggs,
            lateness_ms=self.allowed_lateness_ms,
            retracting=self.accumulation == "retracting",
            identity=1,
        )

    @property
    def _values(self) -> list[str]:
        """The columns a retraction is matched on (with the event time)."""
        read = [a.column for a in self.aggs if a.column is not None]
        return list(dict.fromkeys([*self.keys, *read]))

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        held, before = _split(state)
        ts_col = batch.column(BATCH_TS).combine_chunks() if batch.num_rows else pa.array([], pa.int64())
        valid = np.asarray(pc.is_valid(ts_col).to_numpy(zero_copy_only=False), bool)
        t = np.asarray(ts_col.fill_null(0).to_numpy(zero_copy_only=False), np.int64) // 1000
        # Rows are classified at the watermark they are handed on at (never below the last step's).
        marks = [m for m in (before, watermark_ms) if m is not None]
        mark = max(marks) if marks else None
        very = np.zeros(len(t), bool)
        if mark is not None:
            very = valid & (cascade.last_end(self.window, t) + self.allowed_lateness_ms <= mark)
        late = valid & ~very & (mark is not None) & (t < (mark or 0))
        kept = np.flatnonzero(valid & ~very)
        rows = batch.take(pa.array(kept, pa.int64()))
        if RESULT_KIND in rows.column_names:
            retract = np.asarray(
                pc.equal(rows.column(RESULT_KIND), pa.scalar("retract")).to_numpy(zero_copy_only=False), bool
            )
        else:
            retract = np.zeros(rows.num_rows, bool)
        values = self._values
        emits = rows.filter(pa.array(~retract))
        new_cols: dict[str, Any] = {
            _ID: emits.column(SEQ).cast(pa.int64()),
            CASCADE_EVENT_TIME: pa.array(t[kept][~retract]),
        }
        new_cols.update((c, emits.column(c)) for c in values)
        new = pa.table(new_cols)
        gone_cols: dict[str, Any] = {CASCADE_EVENT_TIME: pa.array(t[kept][retract])}
        gone_cols.update((c, rows.column(c).filter(pa.array(retract))) for c in values)
        gone = pa.table(gone_cols)
        live = held[0] if held is not None else new.slice(0, 0)
        new, gone = new.cast(live.schema), gone.cast(live.schema.remove(0))
        removed, taken, unmatched = withdrawn([live, new], gone, [*values, CASCADE_EVENT_TIME])
        new = new.filter(pa.array(~taken))
        changes = pa.concat_tables(
            [
                _changes(live.filter(pa.array(removed)), deleted=True),
                _changes(new, deleted=False),
            ]
        )
        old = None if held is None else cascade.CascadeState(held[0], held[1], before)
        after, out = cascade.step(self._spec, old, changes, watermark_ms, since_ms=mark)
        results = out.results
        for bound in ("window_start", "window_end"):  # the kernels' results carry µs
            at = results.schema.get_field_index(bound)
            results = results.set_column(at, bound, pc.multiply(results.column(bound), 1000))
        return _joined(after, out.next_due_ms), StepOutput(
            results=results,
            very_late=np.flatnonzero(very),
            invalid=np.flatnonzero(~valid),
            on_time=int((valid & ~very & ~late).sum()),
            mildly_late=int(late.sum()),
            arithmetic_errors=unmatched,
        )

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        if not state.num_rows:
            return NOT_DUE, NOT_DUE
        due = state.column(CHANGES_STATE)[0].as_py()[1]
        return int(due), NOT_DUE  # (the window's own NOT_DUE when nothing is due)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        return None  # (one row holds the whole state)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return int(state.column(CHANGES_STATE)[0].as_py()[2]) if state.num_rows else 0

    def describe(self) -> str:
        return (
            f"krishiv window over retractions: keys={list(self.keys)} window={self.window!r} "
            f"allowed_lateness_ms={self.allowed_lateness_ms} accumulation={self.accumulation}"
        )


def _numbered(lives: list[pa.Table]) -> list[pa.Table]:
    """Live rows of several tasks, their identities made one numbering: each task numbered its
    rows by its own arrival count (a chain's), so two tasks' rows may share one; renumbered
    0, 1, ... in each task's order, one task after the other. The rows that arrive next are
    numbered from at least the sum of the tasks' counts (:class:`~krishiv_py.stateful.chain.ChainKernel`),
    never below these."""
    out, start = [], 0
    for live in lives:
        ids = np.asarray(live.column(_ID).to_numpy(), np.int64)
        numbers = np.empty(len(ids), np.int64)
        numbers[np.argsort(ids, kind="stable")] = np.arange(start, start + len(ids), dtype=np.int64)
        out.append(live.set_column(live.schema.get_field_index(_ID), _ID, pa.array(numbers)))
        start += len(ids)
    return out


def _changes(rows: pa.Table, *, deleted: bool) -> pa.Table:
    return rows.append_column(CASCADE_DELETE, pa.array(np.full(rows.num_rows, deleted)))


def _split(state: pa.Table | None) -> tuple[tuple[pa.Table, pa.Table] | None, int | None]:
    """The live rows and fired windows held (None: nothing), and the last step's watermark."""
    if state is None or not state.num_rows:
        return None, None
    row = state.slice(0, 1).to_pylist()[0]
    mark = row[CHANGES_STATE][0]
    return (ipc_table(row[CHANGES_LIVE]), ipc_table(row[CHANGES_EMITTED])), (
        None if mark == _NO_WATERMARK else int(mark)
    )


def _joined(state: cascade.CascadeState, due: int) -> pa.Table:
    """The kernel's state row, or an empty table when it holds nothing."""
    if not state.live.num_rows and not state.emitted.num_rows:
        return _STATE.empty_table()
    mark = _NO_WATERMARK if state.watermark_ms is None else state.watermark_ms
    numbers: list[Any] = [mark, due, state.live.num_rows]
    return pa.table(
        {
            CHANGES_LIVE: [ipc_bytes(state.live)],
            CHANGES_EMITTED: [ipc_bytes(state.emitted)],
            CHANGES_STATE: [numbers],
        },
        schema=_STATE,
    )
