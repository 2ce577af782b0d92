"""The kernel of top-N per key over every row so far (SPEC 3.13): ``top_n(n, by=..., per="key")``.

The state holds the rows in the top of each key (every row tied with the
``n``-th with ``ties="all"``): a source's rows are only ever added, so a
row pushed out of the top never comes back, and nothing else need be kept.
A micro-batch's rows are ranked with the top they meet; a row that enters
the top is emitted, a row pushed out is retracted (its retraction before
the micro-batch's emits). ``top_n(1, by="event_time", per="key")`` keeps
the latest row per key: deduplication.

Retracting input
    A kernel built with ``retracting=True`` (the planner's choice when its
    input is a changelog: an aggregation's or a top-N's changes, a
    retracting window's or join's) takes rows that may carry ``kind``. A
    retraction withdraws one live row equal in every column (a multiset);
    one that finds none is dropped and counted in ``arithmetic_errors``.
    A row withdrawn from the top lets the next one in, so the state holds
    every live row of a key, not only its top (``__kp_in_top`` marks the
    rows emitted): it grows with the live rows, as Flink's retract rank's.

Order
    By the ``by`` columns, largest first unless ``ascending``; nulls last;
    ``NaN`` above every number (Spark's order). ``ties="all"``: a row's rank
    is one more than the rows of its key that order strictly before it
    (``RANK() <= n``); ``ties="first"``: exactly ``n`` rows, ties broken by
    the remaining columns in order, then by arrival.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.names import BATCH_TS, SEQ
>>> kernel = KeyedTopNKernel(keys=("k",), n=1, by=("t",), columns=("k", "t"))
>>> def batch(rows, seq):
...     return pa.table({"k": [r[0] for r in rows], "t": [r[1] for r in rows],
...                      BATCH_TS: [r[1] * 1000 for r in rows], SEQ: list(range(seq, seq + len(rows)))})
>>> state, out = kernel.step(None, batch([("a", 5), ("a", 3), ("b", 1)], 0), None, 0)
>>> out.results.to_pylist()
[{'k': 'a', 't': 5, 'kind': 'emit'}, {'k': 'b', 't': 1, 'kind': 'emit'}]
>>> state, out = kernel.step(state, batch([("a", 9), ("b", 0)], 3), None, 0)
>>> out.results.to_pylist()
[{'k': 'a', 't': 5, 'kind': 'retract'}, {'k': 'a', 't': 9, 'kind': 'emit'}]
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, IN_TOP, RESULT_KIND, SEQ
from krishiv_py.stateful.grouping import group_ids, withdrawn
from krishiv_py.stateful.kernel import StepOutput, arrivals
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import FlatState

__all__ = ["KeyedTopNKernel", "top_rows"]


@attrs.frozen(kw_only=True)
class KeyedTopNKernel(FlatState, Unmerged):
    """Top-N per key over all rows, as a :class:`~krishiv_py.stateful.protocol.Kernel`."""

    keys: tuple[str, ...]
    n: int
    by: tuple[str, ...]
    #: The rows' columns, in order (the results carry them all).
    columns: tuple[str, ...]
    ascending: bool = False
    ties: Literal["all", "first"] = "all"
    #: Whether its rows may withdraw earlier ones (``kind``): it then holds every live row.
    retracting: bool = False
    #: ``(column, ms)``: a held row goes once the watermark reaches its ``column`` time (a
    #: timestamp, or µs) plus ``ms``; window top-N forgets a window at ``window_end`` plus the
    #: time its window can still be corrected (None: rows are kept while the job runs).
    expires: tuple[str, int] | None = None
    #: Whether its changes carry their rows' event times (``__kp_ts``, µs; an operator after it
    #: reads them): a row's own, entering the top or leaving it.
    event_times: bool = False

    @property
    def accumulation(self) -> str:
        return "retracting"

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return self.keys

    @property
    def identity(self) -> tuple[str, ...]:
        return ()

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
        state, out = self._step(state, batch, watermark_ms)
        return self._expired(state, watermark_ms), out

    def _step(
        self, state: pa.Table | None, batch: pa.Table, watermark_ms: int | None
    ) -> tuple[pa.Table, StepOutput]:
        valid, late = arrivals(batch, watermark_ms)
        if self.retracting:
            return self._changes(state, batch, valid, late)
        if RESULT_KIND in batch.column_names:
            raise ValueError("a top-N built without retracting takes emits only")
        rows = batch.filter(pa.array(valid)).select([*self.columns, BATCH_TS, SEQ])
        held = state if state is not None and state.num_rows else rows.slice(0, 0)
        both = pa.concat_tables([held, rows.cast(held.schema)]) if rows.num_rows else held
        kept = top_rows(both, self.n, by=self.by, group=self.keys, ascending=self.ascending, ties=self.ties)
        was = np.zeros(both.num_rows, bool)
        was[: held.num_rows] = True
        out = [both.filter(pa.array(was & ~kept)), both.filter(pa.array(~was & kept))]
        results = self._changelog(out[0], out[1])
        return both.filter(pa.array(kept)), StepOutput(
            results=results,
            very_late=np.zeros(0, np.int64),
            invalid=np.flatnonzero(~valid).astype(np.int64),
            on_time=int(np.sum(valid & ~late)),
            mildly_late=int(np.sum(late)),
        )

    def _changes(
        self, state: pa.Table | None, batch: pa.Table, valid: np.ndarray, late: np.ndarray
    ) -> tuple[pa.Table, StepOutput]:
        """A step over emits and retractions: every live row held, the top marked."""
        rows = batch.filter(pa.array(valid))
        if RESULT_KIND in rows.column_names:
            retract = np.asarray(
                pc.equal(rows.column(RESULT_KIND), pa.scalar("retract")).to_numpy(zero_copy_only=False), bool
            )
        else:
            retract = np.zeros(rows.num_rows, bool)
        rows = rows.select([*self.columns, BATCH_TS, SEQ])
        fresh = rows.filter(pa.array(~retract)).append_column(
            IN_TOP, pa.array(np.zeros(int((~retract).sum()), bool))
        )
        held = state if state is not None and state.num_rows else fresh.slice(0, 0)
        fresh = fresh.cast(held.schema)
        gone = rows.filter(pa.array(retract))
        out_held, out_fresh, unmatched = withdrawn([held, fresh], gone, list(self.columns))
        was = np.asarray(held.column(IN_TOP).to_numpy(zero_copy_only=False), bool)
        left = held.filter(pa.array(out_held & was))  # withdrawn from the top
        live = pa.concat_tables([held.filter(pa.array(~out_held)), fresh.filter(pa.array(~out_fresh))])
        before = np.concatenate([was[~out_held], np.zeros(int((~out_fresh).sum()), bool)])
        kept = top_rows(
            live.drop_columns([IN_TOP]),
            self.n,
            by=self.by,
            group=self.keys,
            ascending=self.ascending,
            ties=self.ties,
        )
        results = self._changelog(
            pa.concat_tables([left, live.filter(pa.array(before & ~kept))]),
            live.filter(pa.array(~before & kept)),
        )
        live = live.set_column(live.schema.get_field_index(IN_TOP), IN_TOP, pa.array(kept))
        return live, StepOutput(
            results=results,
            very_late=np.zeros(0, np.int64),
            invalid=np.flatnonzero(~valid).astype(np.int64),
            on_time=int(np.sum(valid & ~late)),
            mildly_late=int(np.sum(late)),
            arithmetic_errors=unmatched,
        )

    def _expired(self, state: pa.Table, watermark_ms: int | None) -> pa.Table:
        """``state`` without the rows whose time plus the kept time the watermark reached."""
        if self.expires is None or watermark_ms is None or not state.num_rows:
            return state
        column, ms = self.expires
        at = state.column(column)
        micros = (at.cast(pa.timestamp("us")) if pa.types.is_timestamp(at.type) else at).cast(pa.int64())
        return state.filter(pa.array(micros.to_numpy() + ms * 1000 > watermark_ms * 1000))

    def _changelog(self, retracted: pa.Table, emitted: pa.Table) -> pa.Table:
        """The rows that left the top (retracted first), then those that entered it."""
        kept = [*self.columns, BATCH_TS] if self.event_times else list(self.columns)
        return pa.concat_tables(
            [t.select(kept).append_column(RESULT_KIND, pa.array([k] * t.num_rows, pa.string()))
             for t, k in ((retracted, "retract"), (emitted, "emit"))]
        )  # fmt: skip

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        due = self.row_due(state)
        return (int(due.min()) if due is not None and len(due) else NOT_DUE), NOT_DUE

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        due = np.full(state.num_rows, NOT_DUE, np.int64)
        if self.expires is None or not state.num_rows:
            return due
        column, ms = self.expires
        at = state.column(column)
        micros = (at.cast(pa.timestamp("us")) if pa.types.is_timestamp(at.type) else at).cast(pa.int64())
        return np.asarray(-(-micros.to_numpy() // 1000) + ms, np.int64)  # the watermark it goes at

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def describe(self) -> str:
        order = "ascending" if self.ascending else "descending"
        kept = (
            "over every row so far"
            if self.expires is None
            else f"a group's rows kept until the watermark reaches {self.expires[0]} + {self.expires[1]} ms"
        )
        return (
            f"krishiv top-N per key: n={self.n} by={list(self.by)} {order} keys={list(self.keys)} "
            f"ties={self.ties} ({kept}{'; takes retractions' if self.retracting else ''})"
        )


def top_rows(
    table: pa.Table,
    n: int,
    *,
    by: tuple[str, ...],
    group: tuple[str, ...],
    ascending: bool,
    ties: Literal["all", "first"],
) -> np.ndarray:
    """Which rows of ``table`` are in the top ``n`` of their ``group`` (see the module docstring)."""
    if not table.num_rows:
        return np.zeros(0, bool)
    gid = (
        group_ids([table.column(c).combine_chunks() for c in group])[0]
        if group
        else np.zeros(table.num_rows, np.int64)
    )
    way: Literal["ascending", "descending"] = "ascending" if ascending else "descending"
    cols: dict[str, Any] = {"__g": pa.array(gid)}
    keys: list[tuple[str, Literal["ascending", "descending"]]] = [("__g", "ascending")]
    for i, c in enumerate(by):
        col = table.column(c).combine_chunks()
        if pa.types.is_floating(col.type):  # NaN above every number, nulls still last
            cols[f"__n{i}"] = pc.is_nan(col).fill_null(False).cast(pa.int8())
            keys.append((f"__n{i}", way))
        cols[f"__b{i}"] = col
        keys.append((f"__b{i}", way))
    ranked = len(keys)
    if ties == "first":
        rest = [c for c in table.column_names if c not in by and c not in (BATCH_TS, SEQ)] + [SEQ]
        for i, c in enumerate(rest):  # ascending, nulls first (SQL's ORDER BY c)
            rest_col = table.column(c)
            cols[f"__v{i}"] = pc.is_valid(rest_col).cast(pa.int8())
            keys.append((f"__v{i}", "ascending"))
            cols[f"__r{i}"] = rest_col
            keys.append((f"__r{i}", "ascending"))
    order = pc.sort_indices(pa.table(cols), sort_keys=keys).to_numpy()
    g = gid[order]
    pos = np.arange(len(order))
    new_group = np.ones(len(order), bool)
    new_group[1:] = g[1:] != g[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, pos, 0))
    if ties == "first":
        rank = pos - group_start + 1
    else:
        sorted_cols = pa.table(cols).take(order)
        runs = group_ids([sorted_cols.column(k).combine_chunks() for k, _ in keys[:ranked]])[0]
        new_run = np.ones(len(order), bool)
        new_run[1:] = runs[1:] != runs[:-1]
        rank = np.maximum.accumulate(np.where(new_run, pos, 0)) - group_start + 1
    keep = np.zeros(table.num_rows, bool)
    keep[order[rank <= n]] = True
    return keep
