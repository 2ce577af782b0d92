"""The kernel of an aggregation per key without a window: one updating row per key (SPEC 3.13).

Every valid row of a micro-batch counts (there is no window to close, so
no row is dropped as late; a row behind the watermark is counted as mildly
late). The batch's rows merge into their key's partial aggregates
(:mod:`krishiv_py.stateful.aggregates`, the window kernel's partials, so
values follow Spark SQL alike); a key whose values changed retracts the row
it emitted last and emits the new one. The changes of one micro-batch are
one change per key (Flink's mini-batch aggregation), not one per row.

State
    One row per key: the key columns, the partial columns and the values
    emitted last (``__kp_out_<i>``).

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.names import BATCH_TS, SEQ
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> n = AggSpec(name="n", func="count", column=None, out_type=pa.int64())
>>> kernel = KeyedAggKernel(keys=("k",), aggs=(n,))
>>> def batch(keys, seq):
...     return pa.table({"k": keys, BATCH_TS: [1_000] * len(keys), SEQ: list(range(seq, seq + len(keys)))})
>>> state, out = kernel.step(None, batch(["a", "a", "b"], 0), None, 0)
>>> out.results.to_pylist()
[{'k': 'a', 'n': 2, 'kind': 'emit'}, {'k': 'b', 'n': 1, 'kind': 'emit'}]
>>> state, out = kernel.step(state, batch(["a"], 3), 5, 0)
>>> out.results.to_pylist()
[{'k': 'a', 'n': 2, 'kind': 'retract'}, {'k': 'a', 'n': 3, 'kind': 'emit'}]
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.names import keyed_output as _out
from krishiv_py.stateful.aggregates import AggSpec, finalize, merge, partial_schema, row_partials
from krishiv_py.stateful.grouping import group_ids
from krishiv_py.stateful.kernel import StepOutput, arrivals
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged

__all__ = ["KeyedAggKernel"]


@attrs.frozen(kw_only=True)
class KeyedAggKernel(Unmerged):
    """An aggregation per key without a window, as a :class:`~krishiv_py.stateful.protocol.Kernel`."""

    keys: tuple[str, ...]
    aggs: tuple[AggSpec, ...]

    @property
    def accumulation(self) -> str:
        return "retracting"

    @property
    def identity(self) -> tuple[str, ...]:
        return self.keys

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        del now_ms, merged
        valid, late = arrivals(batch, watermark_ms)
        rows = batch.filter(pa.array(valid)) if not valid.all() else batch
        held = state if state is not None and state.num_rows else None
        if not rows.num_rows:
            results, new_state = self._empty_results(rows), held
        else:
            results, new_state = self._apply(held, rows)
        out = StepOutput(
            results=results,
            very_late=np.zeros(0, np.int64),
            invalid=np.flatnonzero(~valid).astype(np.int64),
            on_time=int(np.sum(valid & ~late)),
            mildly_late=int(np.sum(late)),
        )
        return (new_state if new_state is not None else self._state_schema(rows).empty_table()), out

    def _apply(self, held: pa.Table | None, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        ids, groups, firsts = group_ids([rows.column(k).combine_chunks() for k in self.keys])
        ts = rows.column(BATCH_TS).to_numpy().astype(np.int64)
        seq = rows.column(SEQ).to_numpy().astype(np.int64)
        parts = merge(self.aggs, row_partials(self.aggs, rows, ts, seq), ids, groups)
        fresh = rows.take(firsts).select(list(self.keys))
        names = [f.name for f in partial_schema(self.aggs)]
        if held is None:
            keys, all_parts, n_held = fresh, parts, 0
        else:
            keys = pa.concat_tables(
                [held.select(list(self.keys)), fresh.cast(held.select(list(self.keys)).schema)]
            )
            all_parts = {c: pa.concat_arrays([held.column(c).combine_chunks(), parts[c]]) for c in names}
            n_held = held.num_rows
        ids2, groups2, firsts2 = group_ids([keys.column(k).combine_chunks() for k in self.keys])
        merged = merge(self.aggs, all_parts, ids2, groups2)
        values = finalize(self.aggs, merged)
        key_rows = keys.take(firsts2)
        touched = np.zeros(groups2, bool)
        touched[ids2[n_held:]] = True
        had = np.zeros(groups2, bool)
        old: dict[str, pa.Array[Any]] = {}
        if held is not None:
            had[ids2[:n_held]] = True
            where = np.full(groups2, 0, np.int64)
            where[ids2[:n_held]] = np.arange(n_held)
            for i, a in enumerate(self.aggs):
                old[a.name] = held.column(_out(i)).combine_chunks().take(where)
        changed = touched.copy()
        if held is not None:
            same = np.ones(groups2, bool)
            for a in self.aggs:
                same &= _same(values[a.name], old[a.name])
            changed &= ~(had & same)
        retract = np.flatnonzero(changed & had)
        emit = np.flatnonzero(changed)
        pieces = []
        if len(retract):
            pieces.append(self._rows(key_rows, old, retract, "retract"))
        if len(emit):
            pieces.append(self._rows(key_rows, values, emit, "emit"))
        results = self._interleave(pieces, retract, emit) if pieces else self._empty_results(rows)
        state_cols: dict[str, Any] = {k: key_rows.column(k) for k in self.keys}
        state_cols.update({c: merged[c] for c in names})
        state_cols.update({_out(i): values[a.name] for i, a in enumerate(self.aggs)})
        return results, pa.table(state_cols)

    def _rows(self, keys: pa.Table, values: dict[str, pa.Array[Any]], idx: np.ndarray, kind: str) -> pa.Table:
        take = idx
        cols: dict[str, Any] = {k: keys.column(k).take(take) for k in self.keys}
        cols.update({a.name: values[a.name].take(take).cast(a.out_type) for a in self.aggs})
        cols[RESULT_KIND] = pa.array([kind] * len(idx), pa.string())
        return pa.table(cols)

    @staticmethod
    def _interleave(pieces: list[pa.Table], retract: np.ndarray, emit: np.ndarray) -> pa.Table:
        """Each key's retraction right before its emit, keys in order of their groups."""
        table = pa.concat_tables(pieces)
        order_key = np.concatenate([retract * 2, emit * 2 + 1]) if len(retract) else emit * 2 + 1
        return table.take(np.argsort(order_key, kind="stable"))

    def _empty_results(self, rows: pa.Table) -> pa.Table:
        fields = [rows.schema.field(k) for k in self.keys]
        fields += [pa.field(a.name, a.out_type) for a in self.aggs]
        fields.append(pa.field(RESULT_KIND, pa.string()))
        return pa.schema(fields).empty_table()

    def _state_schema(self, rows: pa.Table) -> pa.Schema:
        fields = [rows.schema.field(k) for k in self.keys] + partial_schema(self.aggs)
        fields += [pa.field(_out(i), a.out_type) for i, a in enumerate(self.aggs)]
        return pa.schema(fields)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        return NOT_DUE, NOT_DUE

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def describe(self) -> str:
        aggs = ", ".join(f"{a.func}({a.column or '*'})" for a in self.aggs)
        return f"krishiv aggregation per key: keys={list(self.keys)} aggs=[{aggs}] (no window)"


def _same(a: pa.Array[Any], b: pa.Array[Any]) -> np.ndarray:
    """Null-safe equality, NaN equal to NaN (a value that did not change emits nothing)."""
    if a.type != b.type:
        b = b.cast(a.type)

    def mask(x: Any) -> np.ndarray:
        return np.asarray(x.to_numpy(zero_copy_only=False), bool)

    both_null = mask(pc.is_null(a)) & mask(pc.is_null(b))
    eq = mask(pc.equal(a, b).fill_null(False))
    if pa.types.is_floating(a.type):
        eq |= mask(pc.is_nan(a).fill_null(False)) & mask(pc.is_nan(b).fill_null(False))
    out: np.ndarray = eq | both_null
    return out
