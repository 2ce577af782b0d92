"""The kernel of over-aggregation (SPEC 3.16): a result per row, over the rows of its key before it.

``keyed.over_rows(n)`` / ``keyed.over_range(range_ms)`` then ``.agg(...)``:
each row gets its own columns and each aggregate over its *frame* — the row
and the ``n`` rows before it in its key's order (``rows``), or the rows whose
event time is within ``range_ms`` before its own, its peers (equal event
time) included (``range``). A key's order is by event time, ties by arrival.
The oracle is :class:`krishiv_py.model.over.OverModel`.

Emission
    A row's result is emitted in the step whose watermark passes its event
    time (``t < W``): no on-time row can come before it after that. A row
    behind the watermark but within the allowed lateness is placed in its
    key's order and emitted at once; the emitted results whose frames it
    changes are corrected (``"accumulating"``: their new result;
    ``"retracting"``: the old one retracted first). Further behind it is very
    late (counted, dropped); without an event time, invalid.
Changelog input
    Built with ``retracting_input=True``, a row of ``kind`` ``"retract"``
    withdraws one held row equal in every column (the earliest to arrive):
    its emitted result is retracted (``"retracting"``) and the results it was
    part of corrected; one that finds no row is counted in
    ``arithmetic_errors``. Within one batch a retraction may withdraw an
    emit of the same batch whatever their order (a changelog retracts only
    what it emitted before).
State
    One row per held input row: its columns, event time (µs), arrival number
    (``__kp_seq``, counted on per key), whether its result was emitted
    (``__kp_emitted``) and with which values (``__kp_o0``, ...), and whether
    it is final (``__kp_final``: behind the watermark by more than the
    allowed lateness, so no row can come before it any more). A step
    computes the frames of the keys it touches only, vectorized: each frame
    is expanded into its rows and aggregated with the window kernels'
    partials (:mod:`krishiv_py.stateful.aggregates`).
Eviction
    Once final, a row stays only while the frame of a row that can still be
    emitted or corrected may hold it: ``rows``, the last ``n`` final rows of
    its key; ``range``, while its time plus ``range_ms`` is not behind the
    watermark minus the allowed lateness.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.names import BATCH_TS, SEQ
>>> spec = AggSpec(name="s", func="sum", column="v", out_type=pa.int64(), in_type=pa.int64())
>>> kernel = OverKernel(keys=("k",), columns=("k", "t", "v"), frame="rows", preceding=1, aggs=(spec,))
>>> def batch(rows):
...     return pa.table({"k": [r[0] for r in rows], "t": [r[1] for r in rows], "v": [r[2] for r in rows],
...                      BATCH_TS: [r[1] * 1000 for r in rows], SEQ: list(range(len(rows)))})
>>> state, out = kernel.step(None, batch([("a", 10, 1), ("a", 20, 2), ("a", 30, 4)]), None, 0)
>>> out.results.num_rows
0
>>> state, out = kernel.step(state, batch([]), 25, 0)
>>> [(r["t"], r["s"]) for r in out.results.to_pylist()]
[(10, 1), (20, 3)]
"""

from __future__ import annotations

from typing import Any, Literal, cast

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, OVER_EMITTED, OVER_FINAL, OVER_VALUE, RESULT_KIND, SEQ
from krishiv_py.stateful.aggregates import AggSpec, finalize, merge, row_partials
from krishiv_py.stateful.grouping import group_ids, withdrawn
from krishiv_py.stateful.kernel import StepOutput, arrivals
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import FlatState

__all__ = ["OverKernel"]

I64 = npt.NDArray[np.int64]


@attrs.frozen(kw_only=True)
class OverKernel(FlatState, Unmerged):
    """Over-aggregation per key, as a :class:`~krishiv_py.stateful.protocol.Kernel`."""

    keys: tuple[str, ...]
    #: The rows' columns, in order (the results carry them all, then the aggregates).
    columns: tuple[str, ...]
    frame: Literal["rows", "range"]
    #: ``rows``: how many rows before; ``range``: how many milliseconds before.
    preceding: int
    aggs: tuple[AggSpec, ...]
    allowed_lateness_ms: int = 0
    mode: Literal["accumulating", "retracting"] = "accumulating"
    #: Whether its rows may withdraw earlier ones (``kind``).
    retracting_input: bool = False
    #: Whether its results carry their rows' event times (``__kp_ts``, µs) for an operator after it.
    event_times: bool = False

    def __attrs_post_init__(self) -> None:
        if self.frame not in ("rows", "range"):
            raise ValueError(f"an over-aggregation's frame is 'rows' or 'range', not {self.frame!r}")
        if self.preceding < 0 or self.allowed_lateness_ms < 0:
            raise ValueError("an over-aggregation's preceding and allowed lateness are >= 0")
        if self.frame == "range" and any(a.func in ("first", "last") for a in self.aggs):
            raise ValueError("first/last over a range frame: peers have no order")

    @property
    def accumulation(self) -> str:
        return self.mode

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return self.keys

    @property
    def identity(self) -> tuple[str, ...]:
        return ()

    # --- a step ----------------------------------------------------------------------------------

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
        ts = _ts(batch)
        very = np.zeros(batch.num_rows, bool)
        if watermark_ms is not None:
            very = valid & (ts < (watermark_ms - self.allowed_lateness_ms) * 1000)
        rows = batch.filter(pa.array(valid & ~very))
        retract = self._retractions(rows)
        held = state if state is not None and state.num_rows else self._empty(batch)
        fresh = self._fresh(rows.filter(pa.array(~retract)), held)
        gone = rows.filter(pa.array(retract))
        out_held, out_fresh, unmatched = withdrawn([held, fresh], gone, list(self.columns))
        dropped = held.filter(pa.array(out_held))
        live = pa.concat_tables([held.filter(pa.array(~out_held)), fresh.filter(pa.array(~out_fresh))])
        live, results = self._fire(live, rows, watermark_ms)
        if self.mode == "retracting":
            dropped = dropped.filter(dropped.column(OVER_EMITTED))
            results = pa.concat_tables([self._results(dropped, self._stored(dropped), "retract"), results])
        return self._evicted(live, watermark_ms), StepOutput(
            results=results,
            very_late=np.flatnonzero(very).astype(np.int64),
            invalid=np.flatnonzero(~valid).astype(np.int64),
            on_time=int(np.sum(valid & ~late)),
            mildly_late=int(np.sum(late & ~very)),
            arithmetic_errors=unmatched,
        )

    def _retractions(self, rows: pa.Table) -> npt.NDArray[np.bool_]:
        if RESULT_KIND not in rows.column_names:
            return np.zeros(rows.num_rows, bool)
        if not self.retracting_input:
            raise ValueError("an over-aggregation built without retracting_input takes emits only")
        kinds = pc.equal(rows.column(RESULT_KIND), pa.scalar("retract")).fill_null(False)
        return np.asarray(kinds.to_numpy(zero_copy_only=False), bool)

    def _empty(self, batch: pa.Table) -> pa.Table:
        fields = [batch.schema.field(c) for c in self.columns]
        fields += [pa.field(BATCH_TS, pa.int64()), pa.field(SEQ, pa.int64())]
        fields += [pa.field(OVER_EMITTED, pa.bool_()), pa.field(OVER_FINAL, pa.bool_())]
        fields += [pa.field(f"{OVER_VALUE}{i}", a.out_type) for i, a in enumerate(self.aggs)]
        return pa.schema(fields).empty_table()

    def _fresh(self, rows: pa.Table, held: pa.Table) -> pa.Table:
        """``rows`` as state rows, not emitted, numbered on from their key's last arrival (per key:
        the numbers do not depend on which other keys a step holds)."""
        n = rows.num_rows
        gid, groups = _key_ids(self.keys, [held, rows])
        last = np.full(groups, -1, np.int64)
        np.maximum.at(last, gid[: held.num_rows], np.asarray(held.column(SEQ).to_numpy(), np.int64))
        mine = gid[held.num_rows :]
        order = np.argsort(mine, kind="stable")
        rank = np.empty(n, np.int64)
        rank[order] = _within(mine[order])
        cols: dict[str, Any] = {c: rows.column(c) for c in self.columns}
        cols[BATCH_TS] = rows.column(BATCH_TS).cast(pa.int64())
        cols[SEQ] = pa.array(last[mine] + 1 + rank)
        cols[OVER_EMITTED] = pa.array(np.zeros(n, bool))
        cols[OVER_FINAL] = pa.array(np.zeros(n, bool))
        for i, a in enumerate(self.aggs):
            cols[f"{OVER_VALUE}{i}"] = pa.nulls(n, cast(Any, a.out_type))
        return pa.table(cols).cast(held.schema)

    def _fire(self, live: pa.Table, rows: pa.Table, watermark_ms: int | None) -> tuple[pa.Table, pa.Table]:
        """Emit the rows the watermark passed and correct the emitted ones whose frames changed,
        over the keys of ``rows`` and of rows due now."""
        if watermark_ms is None or not live.num_rows:
            return live, self._none(live)
        w_us = watermark_ms * 1000
        gid, _ = _key_ids(self.keys, [live, rows])
        live_gid, row_gid = gid[: live.num_rows], gid[live.num_rows :]
        ts = _ts(live)
        emitted = np.asarray(live.column(OVER_EMITTED).to_numpy(zero_copy_only=False), bool)
        touched = np.zeros(int(gid.max()) + 1 if len(gid) else 0, bool)
        touched[row_gid] = True
        touched[live_gid[~emitted & (ts < w_us)]] = True
        sub = np.flatnonzero(touched[live_gid])
        seq = np.asarray(live.column(SEQ).to_numpy(), np.int64)
        order = sub[np.lexsort((seq[sub], ts[sub], live_gid[sub]))]
        g, t = live_gid[order], ts[order]
        # A final row's result stands (and the rows its frame held may be gone).
        final = np.asarray(live.column(OVER_FINAL).to_numpy(zero_copy_only=False), bool)
        targets = np.flatnonzero((t < w_us) & ~final[order])
        if not len(targets):
            return live, self._none(live)
        lo, hi = self._frames(g, t, targets)
        counts = hi - lo + 1
        owner = np.repeat(np.arange(len(targets), dtype=np.int64), counts)
        starts = np.cumsum(counts) - counts
        members = order[np.repeat(lo, counts) + np.arange(int(counts.sum())) - np.repeat(starts, counts)]
        table = live.take(members)
        parts = row_partials(self.aggs, table, ts[members], seq[members])
        values = finalize(self.aggs, merge(self.aggs, parts, owner, len(targets)))
        at = order[targets]  # the targets' rows of ``live``
        was = self._stored(live.take(at))
        same = np.ones(len(at), bool)
        for a in self.aggs:
            same &= _same(was[a.name], values[a.name])
        changed = ~(emitted[at] & same)
        now_rows = live.take(at[changed])
        new_values = {a.name: values[a.name].filter(pa.array(changed)) for a in self.aggs}
        out = [self._results(now_rows, new_values, "emit")]
        if self.mode == "retracting":
            again = changed & emitted[at]
            out.insert(
                0,
                self._results(
                    live.take(at[again]),
                    {k: v.filter(pa.array(again)) for k, v in was.items()},
                    "retract",
                ),
            )
        live = _with_values(live, at[changed], self.aggs, new_values)
        return live, pa.concat_tables(out)

    def _frames(self, g: I64, t: I64, targets: I64) -> tuple[I64, I64]:
        """Each target's frame as first and last positions in the key-ordered rows ``(g, t)``."""
        if self.frame == "rows":
            start = np.arange(len(g), dtype=np.int64) - _within(g)  # each key's first position
            return np.maximum(start[targets], targets - self.preceding), targets
        back = t - self.preceding * 1000
        values = np.unique(np.concatenate([t, back]))
        width = len(values) + 1
        composite = g * width + np.searchsorted(values, t)
        lo = np.searchsorted(composite, g[targets] * width + np.searchsorted(values, back[targets]), "left")
        hi = np.searchsorted(composite, composite[targets], "right") - 1
        return lo.astype(np.int64), hi.astype(np.int64)

    def _stored(self, rows: pa.Table) -> dict[str, pa.Array[Any]]:
        """The values ``rows`` last emitted, by aggregate name."""
        return {a.name: rows.column(f"{OVER_VALUE}{i}").combine_chunks() for i, a in enumerate(self.aggs)}

    def _none(self, like: pa.Table) -> pa.Table:
        """No results (their columns)."""
        return self._results(like.slice(0, 0), self._stored(like.slice(0, 0)), "emit")

    def _results(self, rows: pa.Table, values: dict[str, pa.Array[Any]], kind: str) -> pa.Table:
        kept = [*self.columns, BATCH_TS] if self.event_times else list(self.columns)
        out = rows.select(kept)
        for a in self.aggs:
            out = out.append_column(pa.field(a.name, a.out_type), values[a.name].cast(a.out_type))
        if self.mode == "retracting":
            out = out.append_column(RESULT_KIND, pa.array([kind] * out.num_rows, pa.string()))
        return out

    def _evicted(self, live: pa.Table, watermark_ms: int | None) -> pa.Table:
        """``live`` marked final where the watermark left it behind, without what no frame can need."""
        if watermark_ms is None or not live.num_rows:
            return live
        edge = (watermark_ms - self.allowed_lateness_ms) * 1000
        ts = _ts(live)
        final = ts < edge
        if self.frame == "range":
            keep = ts + self.preceding * 1000 >= edge
        else:
            g = _key_ids(self.keys, [live])[0]
            seq = np.asarray(live.column(SEQ).to_numpy(), np.int64)
            order = np.lexsort((-seq, -ts, ~final, g))  # per key: its final rows, newest first
            rank = np.empty(len(order), np.int64)
            rank[order] = _within(g[order])
            keep = ~final | (rank < self.preceding)
        live = live.set_column(live.schema.get_field_index(OVER_FINAL), OVER_FINAL, pa.array(final))
        return live.filter(pa.array(keep))

    # --- what the operator asks ------------------------------------------------------------------

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        due = self.row_due(state)
        due = due[due != NOT_DUE]
        return (int(due.min()) if len(due) else NOT_DUE), NOT_DUE

    def row_due(self, state: pa.Table) -> np.ndarray:
        """A pending row is due when the watermark passes it, an emitted one when it turns final, a
        final one (``range``) when it leaves every frame."""
        if not state.num_rows:
            return np.zeros(0, np.int64)
        ts = _ts(state)
        emitted = np.asarray(state.column(OVER_EMITTED).to_numpy(zero_copy_only=False), bool)
        final = np.asarray(state.column(OVER_FINAL).to_numpy(zero_copy_only=False), bool)
        lateness = self.allowed_lateness_ms
        then = NOT_DUE if self.frame == "rows" else (ts + self.preceding * 1000) // 1000 + lateness + 1
        gone = np.where(final, then, ts // 1000 + lateness + 1)
        return np.asarray(np.where(emitted, gone, ts // 1000 + 1), np.int64)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def describe(self) -> str:
        frame = (
            f"the row and {self.preceding} rows before it"
            if self.frame == "rows"
            else f"the rows of the {self.preceding} ms up to its time"
        )
        aggs = ", ".join(f"{a.func}({a.column or '*'}) AS {a.name}" for a in self.aggs)
        return (
            f"krishiv over-aggregation per key: keys={list(self.keys)} over {frame}: {aggs} "
            f"({self.mode}, allowed lateness {self.allowed_lateness_ms} ms"
            f"{'; takes retractions' if self.retracting_input else ''})"
        )


def _key_ids(keys: tuple[str, ...], tables: list[pa.Table]) -> tuple[I64, int]:
    """One id per distinct key over the rows of ``tables`` in turn, and how many there are."""
    n = sum(t.num_rows for t in tables)
    if not keys or not n:
        return np.zeros(n, np.int64), int(n > 0)
    types = [tables[0].schema.field(c).type for c in keys]
    columns = [
        pa.concat_arrays([t.column(c).combine_chunks().cast(ty) for t in tables])
        for c, ty in zip(keys, types, strict=True)
    ]
    ids, groups, _ = group_ids(columns)
    return ids, groups


def _within(sorted_ids: I64) -> I64:
    """Each position's place within its run of equal ids (0 for the first), ids sorted."""
    pos = np.arange(len(sorted_ids), dtype=np.int64)
    new = np.ones(len(sorted_ids), bool)
    new[1:] = sorted_ids[1:] != sorted_ids[:-1]
    out: I64 = pos - np.maximum.accumulate(np.where(new, pos, 0))
    return out


def _ts(table: pa.Table) -> I64:
    col = table.column(BATCH_TS).combine_chunks() if table.num_rows else pa.array([], pa.int64())
    return np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)


def _same(old: pa.Array[Any], new: pa.Array[Any]) -> npt.NDArray[np.bool_]:
    """Per row, whether a value is unchanged: equal, both null, or both NaN."""
    new = new.cast(old.type) if new.type != old.type else new

    def flags(arr: Any) -> npt.NDArray[np.bool_]:
        return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), bool)

    same = flags(pc.equal(old, new)) | (flags(pc.is_null(old)) & flags(pc.is_null(new)))
    if pa.types.is_floating(old.type):
        same |= flags(pc.is_nan(old)) & flags(pc.is_nan(new))
    return same


def _with_values(
    live: pa.Table, at: I64, aggs: tuple[AggSpec, ...], values: dict[str, pa.Array[Any]]
) -> pa.Table:
    """``live`` with the rows ``at`` emitted with ``values``."""
    emitted = np.asarray(live.column(OVER_EMITTED).to_numpy(zero_copy_only=False), bool).copy()
    emitted[at] = True
    live = live.set_column(live.schema.get_field_index(OVER_EMITTED), OVER_EMITTED, pa.array(emitted))
    pick = np.arange(live.num_rows, dtype=np.int64)
    pick[at] = live.num_rows + np.arange(len(at), dtype=np.int64)
    for i, a in enumerate(aggs):
        name = f"{OVER_VALUE}{i}"
        old = live.column(name).combine_chunks()
        both = pa.concat_arrays([old, values[a.name].cast(old.type)])
        live = live.set_column(live.schema.get_field_index(name), name, both.take(pick))
    return live
