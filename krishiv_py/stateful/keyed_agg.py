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

Retracting input
    A kernel built with ``retracting=True`` (the planner's choice when its
    input is itself a changelog, as Nexmark q4's ``AVG(final) GROUP BY
    category`` over a running ``MAX(price)`` per auction) takes rows that
    may carry ``kind``: ``"emit"`` or ``"retract"``; without the column
    every row is an emit. A retraction withdraws one earlier emitted row of
    equal values (a multiset, as Flink's retract aggregation does).

    - ``count``, ``sum``, ``avg`` subtract the row's contribution. An
      integer sum stays exact (its two halves subtract); a float sum
      subtracts too, so it keeps the rounding of values since withdrawn (as
      Flink's does), but its NaN and infinities are counted apart from its
      finite part, so withdrawing them gives back a finite sum.
    - ``min``, ``max`` and ``count_distinct`` stay exact: the kernel keeps
      per key a multiset of the column's live values (value → count, one
      for all aggregates of a column; NaN one value, ``-0.0`` kept as
      ``0.0``), so their state grows with the distinct values per key.
    - ``first`` and ``last`` are refused when the kernel is built (a
      ``ValueError``): a withdrawn row may be the one they picked, and the
      next one is not kept.

    A batch is one change: its retractions withdraw from the key's live
    rows together with the batch's emits, whatever their order. A key left
    with no live row retracts the row it emitted last, emits nothing and
    leaves the state. A retraction that finds nothing to withdraw (its key
    has no live row left, or no live row of its value in a column the
    kernel counts: a min/max/count_distinct column's values, a count, sum
    or avg column's non-null values, NaN and infinities) is an upstream
    inconsistency the stream survives: it is dropped, and counted in
    :attr:`StepOutput.arithmetic_errors` (the job's ``arithmetic_errors``).
    Of several such retractions of one key (or value), the earliest are
    dropped. A retraction of a sum's value never emitted, in a key that has
    live rows, cannot be told from a right one and is applied. A kernel
    built without ``retracting`` refuses retractions (``ValueError``).

    The retracting state adds per key its live rows (``__kp_live``), the
    NaN and infinity counts of each float sum and the value multisets
    (``__kp_values_<j>``: a list of ``{v, n}``, ascending, NaN last).

State TTL
    With ``ttl_ms`` (``key_by(...).with_state_ttl(StateTtlConfig(ttl_ms))``),
    each key keeps the newest event time of its rows (``__kp_newest``); a
    key whose newest row is ``ttl_ms`` or more behind the watermark leaves
    the state silently (counted in ``expired``), as Flink's state TTL does:
    its last row stands downstream, and a later row of the key starts it
    again, emitted without a retraction (an upsert table replaces the
    key's row; an operator after it holds both). The bucket is woken when
    its oldest key expires.

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

Over a changelog, a withdrawn maximum gives way to the next live value:

>>> top = AggSpec(name="top", func="max", column="v", out_type=pa.int64(), in_type=pa.int64())
>>> kernel = KeyedAggKernel(keys=("k",), aggs=(top,), retracting=True)
>>> def changes(values, kinds, seq):
...     return pa.table({"k": ["a"] * len(values), "v": values, "kind": kinds,
...                      BATCH_TS: [1_000] * len(values), SEQ: list(range(seq, seq + len(values)))})
>>> state, out = kernel.step(None, changes([5, 9], ["emit", "emit"], 0), None, 0)
>>> out.results.to_pylist()
[{'k': 'a', 'top': 9, 'kind': 'emit'}]
>>> state, out = kernel.step(state, changes([9], ["retract"], 2), None, 0)
>>> out.results.to_pylist()
[{'k': 'a', 'top': 9, 'kind': 'retract'}, {'k': 'a', 'top': 5, 'kind': 'emit'}]
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import attrs
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import (
    BATCH_TS,
    KEYED_LIVE,
    KEYED_NEWEST,
    KEYED_OUT_TS,
    RESULT_KIND,
    SEQ,
    keyed_special,
    keyed_values,
)
from krishiv_py.names import keyed_output as _out
from krishiv_py.stateful._arrow import arrow, list_array, table_of
from krishiv_py.stateful.aggregates import (
    AggSpec,
    empty_partials,
    finalize,
    merge,
    partial_schema,
    row_partials,
)
from krishiv_py.stateful.grouping import canonical, first_rows, group_ids, segment_starts
from krishiv_py.stateful.kernel import StepOutput, arrivals
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import FlatState

__all__ = ["KeyedAggKernel"]

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: What a retracting kernel subtracts, and what it keeps a multiset of values for.
_ADDITIVE = ("count", "sum", "avg")
_BY_VALUE = ("min", "max", "count_distinct")
#: A retracting kernel's state column: each key's live rows.
_LIVE = KEYED_LIVE
#: The values a float sum counts apart from its finite part.
_SPECIAL: dict[str, float] = {"nan": float("nan"), "pinf": float("inf"), "ninf": float("-inf")}


@attrs.frozen(kw_only=True)
class KeyedAggKernel(FlatState, Unmerged):
    """An aggregation per key without a window, as a :class:`~krishiv_py.stateful.protocol.Kernel`.

    Parameters
    ----------
    keys
        The key columns.
    aggs
        The aggregates, in output order.
    retracting
        Whether the input is a changelog whose rows may be retractions (see
        the module docstring); ``first`` and ``last`` are refused then.
    """

    keys: tuple[str, ...]
    aggs: tuple[AggSpec, ...]
    retracting: bool = False
    #: Event-time state TTL (ms): a key whose newest row is this far behind the watermark goes.
    ttl_ms: int | None = None
    #: Whether its changes carry their event time (``__kp_ts``, µs; an operator after it reads it):
    #: an emit the latest time among its key's rows of the batch (the rows that changed it, in
    #: whatever order they came), a retraction the time of the emit it withdraws (kept per key
    #: in ``__kp_out_ts``).
    event_times: bool = False

    def __attrs_post_init__(self) -> None:
        picks = [f"{a.func}({a.column})" for a in self.aggs if a.func in ("first", "last")]
        if self.retracting and picks:
            raise ValueError(
                f"{', '.join(picks)} over a retracting input: a withdrawn row may be the one picked, "
                "and the next one is not kept; use min or max, or aggregate before the retracting operator"
            )

    @property
    def accumulation(self) -> str:
        return "retracting"

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return self.keys

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
        del merged
        if self.event_times:
            return self._timed(state, batch, watermark_ms, now_ms)
        valid, late = arrivals(batch, watermark_ms)
        rows = batch.filter(pa.array(valid)) if not valid.all() else batch
        held = state if state is not None and state.num_rows else None
        if self.ttl_ms is not None:
            return self._with_ttl(held, rows, watermark_ms)
        retract = self._retractions(rows)
        unmatched = 0
        if not rows.num_rows:
            results, new_state = self._empty_results(rows), held
        elif self.retracting:
            results, new_state, unmatched = self._apply_changes(held, rows, retract)
        else:
            results, new_state = self._apply(held, rows)
        out = StepOutput(
            results=results,
            very_late=np.zeros(0, np.int64),
            invalid=np.flatnonzero(~valid).astype(np.int64),
            on_time=int(np.sum(valid & ~late)),
            mildly_late=int(np.sum(late)),
            arithmetic_errors=unmatched,
        )
        return (new_state if new_state is not None else self._state_schema(rows).empty_table()), out

    def _with_ttl(
        self, held: pa.Table | None, rows: pa.Table, watermark_ms: int | None
    ) -> tuple[pa.Table, StepOutput]:
        """A step of a kernel with a state TTL: the plain step, each key's newest event time kept
        beside its state, then the keys the TTL expires dropped (see the module docstring)."""
        plain = attrs.evolve(self, ttl_ms=None)
        newest_held = held.column(KEYED_NEWEST) if held is not None else None
        inner = held.drop_columns([KEYED_NEWEST]) if held is not None else None
        state, out = plain.step(inner, rows, watermark_ms, 0)  # (the invalid rows are not in ``rows``)
        # Each key's newest event time: the held one, or the newest of its rows in this batch.
        parts = [state.select(list(self.keys))]
        if held is not None:
            parts.append(held.select(list(self.keys)).cast(parts[0].schema))
        if rows.num_rows:
            parts.append(rows.select(list(self.keys)).cast(parts[0].schema))
        both = pa.concat_tables(parts)
        ids, groups, _ = (
            group_ids([both.column(k).combine_chunks() for k in self.keys])
            if both.num_rows
            else (
                np.zeros(0, np.int64),
                0,
                None,
            )
        )
        newest = np.full(groups, np.iinfo(np.int64).min, np.int64)
        at = state.num_rows
        if held is not None and newest_held is not None:
            np.maximum.at(newest, ids[at : at + held.num_rows], newest_held.to_numpy().astype(np.int64))
            at += held.num_rows
        if rows.num_rows:
            np.maximum.at(newest, ids[at:], rows.column(BATCH_TS).to_numpy().astype(np.int64))
        kept_newest = newest[ids[: state.num_rows]]
        gone = np.zeros(state.num_rows, bool)
        if watermark_ms is not None and self.ttl_ms is not None:
            gone = kept_newest + self.ttl_ms * 1000 <= watermark_ms * 1000
        state = state.filter(pa.array(~gone)).append_column(
            KEYED_NEWEST, pa.array(kept_newest[~gone], pa.int64())
        )
        return state, attrs.evolve(out, expired=int(gone.sum()))

    def _timed(
        self, state: pa.Table | None, batch: pa.Table, watermark_ms: int | None, now_ms: int
    ) -> tuple[pa.Table, StepOutput]:
        """A step whose changes carry event times (see ``event_times``): the plain step, then each
        change's time from its key's rows in the batch or the time kept for its key."""
        held = state if state is not None and state.num_rows else None
        inner = held.drop_columns([KEYED_OUT_TS]) if held is not None else None
        new_state, out = attrs.evolve(self, event_times=False).step(inner, batch, watermark_ms, now_ms)
        valid, _ = arrivals(batch, watermark_ms)
        rows = batch.filter(pa.array(valid)) if not valid.all() else batch
        results = out.results
        empty = new_state.select(list(self.keys)).slice(0, 0)
        tables = [new_state, held if held is not None else empty, rows, results]
        keys = pa.concat_tables([t.select(list(self.keys)).cast(empty.schema) for t in tables])
        ids = np.zeros(0, np.int64)
        if keys.num_rows:
            ids = np.asarray(group_ids([keys.column(k).combine_chunks() for k in self.keys])[0], np.int64)
        bounds = np.cumsum([0, *(t.num_rows for t in tables)])
        state_ids, held_ids, row_ids, result_ids = (ids[a:b] for a, b in itertools.pairwise(bounds))
        groups = int(ids.max()) + 1 if len(ids) else 0
        kept = np.zeros(groups, np.int64)
        if held is not None:
            kept[held_ids] = held.column(KEYED_OUT_TS).to_numpy().astype(np.int64)
        last = np.full(groups, np.iinfo(np.int64).min, np.int64)
        if rows.num_rows:  # the latest event time among each key's rows of the batch
            np.maximum.at(last, row_ids, rows.column(BATCH_TS).to_numpy().astype(np.int64))
        emitted = _bools(pc.equal(results.column(RESULT_KIND), pa.scalar("emit")))
        times = np.where(emitted, last[result_ids], kept[result_ids])
        kept[result_ids[emitted]] = last[result_ids[emitted]]
        new_state = new_state.append_column(KEYED_OUT_TS, pa.array(kept[state_ids], pa.int64()))
        timed = results.append_column(BATCH_TS, pa.array(times, pa.int64()))
        return new_state, attrs.evolve(out, results=timed)

    def _retractions(self, rows: pa.Table) -> Bools:
        """Which rows withdraw an earlier one (none without a ``kind`` column)."""
        if RESULT_KIND not in rows.column_names:
            return np.zeros(rows.num_rows, bool)
        kind = rows.column(RESULT_KIND)
        retract = _bools(pc.equal(kind, pa.scalar("retract")).fill_null(False))
        known = retract | _bools(pc.equal(kind, pa.scalar("emit")).fill_null(False))
        if not known.all():
            bad = pc.unique(kind.filter(pa.array(~known))).to_pylist()
            raise ValueError(f"a changelog's {RESULT_KIND!r} is 'emit' or 'retract', got {bad}")
        if not self.retracting and retract.any():
            raise ValueError(f"retractions given to a kernel built with retracting=False: {self.describe()}")
        return retract

    def _apply(self, held: pa.Table | None, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        ids, groups, firsts = group_ids([rows.column(k).combine_chunks() for k in self.keys])
        ts = rows.column(BATCH_TS).to_numpy().astype(np.int64)
        seq = rows.column(SEQ).to_numpy().astype(np.int64)
        parts = merge(self.aggs, row_partials(self.aggs, rows, ts, seq), ids, groups)
        key_rows, ids2, groups2 = self._regroup(held, rows.take(firsts).select(list(self.keys)))
        names = [f.name for f in partial_schema(self.aggs)]
        merged = merge(self.aggs, _stacked(held, parts, names), ids2, groups2)
        values = finalize(self.aggs, merged)
        n_held = 0 if held is None else held.num_rows
        touched = np.zeros(groups2, bool)
        touched[ids2[n_held:]] = True
        results = self._changes(key_rows, held, ids2[:n_held], values, touched)
        return results, self._state(key_rows, {**merged, **self._outputs(values)})

    def _regroup(self, held: pa.Table | None, fresh: pa.Table) -> tuple[pa.Table, Ints, int]:
        """The held keys, then ``fresh``'s, grouped: each group's keys, each row's group, the groups."""
        keys = fresh
        if held is not None:
            old = held.select(list(self.keys))
            keys = pa.concat_tables([old, fresh.cast(old.schema)])
        ids, groups, firsts = group_ids([keys.column(k).combine_chunks() for k in self.keys])
        return keys.take(firsts), ids, groups

    def _changes(
        self,
        key_rows: pa.Table,
        held: pa.Table | None,
        held_ids: Ints,
        values: dict[str, pa.Array[Any]],
        touched: Bools,
        gone: Bools | None = None,
    ) -> pa.Table:
        """Retract the row a changed key emitted last and emit its new one (a key ``gone``: none)."""
        groups = len(touched)
        had = np.zeros(groups, bool)
        old: dict[str, pa.Array[Any]] = {}
        changed = touched.copy()
        if held is not None:
            had[held_ids] = True
            where = np.full(groups, 0, np.int64)
            where[held_ids] = np.arange(len(held_ids))
            for i, a in enumerate(self.aggs):
                old[a.name] = held.column(_out(i)).combine_chunks().take(where)
            same = np.ones(groups, bool)
            for a in self.aggs:
                same &= _same(values[a.name], old[a.name])
            changed &= ~(had & same)
        if gone is None:
            retract, emit = np.flatnonzero(changed & had), np.flatnonzero(changed)
        else:
            retract, emit = np.flatnonzero((changed | gone) & had), np.flatnonzero(changed & ~gone)
        pieces = []
        if len(retract):
            pieces.append(self._rows(key_rows, old, retract, "retract"))
        if len(emit):
            pieces.append(self._rows(key_rows, values, emit, "emit"))
        return self._interleave(pieces, retract, emit) if pieces else self._empty_results(key_rows)

    def _outputs(self, values: dict[str, pa.Array[Any]]) -> dict[str, pa.Array[Any]]:
        return {_out(i): values[a.name] for i, a in enumerate(self.aggs)}

    def _state(self, key_rows: pa.Table, columns: dict[str, Any]) -> pa.Table:
        state_cols: dict[str, Any] = {k: key_rows.column(k) for k in self.keys}
        state_cols.update(columns)
        return pa.table(state_cols)

    # --- a retracting input -------------------------------------------------------------

    @property
    def _additive(self) -> tuple[AggSpec, ...]:
        """The aggregates a retraction subtracts from (their partials are numbered in this order)."""
        return tuple(a for a in self.aggs if a.func in _ADDITIVE)

    @property
    def _tracked(self) -> tuple[str, ...]:
        """The columns whose live values are kept as a multiset, in order of their aggregates."""
        return tuple(dict.fromkeys(a.column for a in self.aggs if a.func in _BY_VALUE and a.column))

    def _by_value(self, column: str) -> list[AggSpec]:
        """The aggregates that read ``column``'s multiset of live values."""
        return [a for a in self.aggs if a.column == column and a.func in _BY_VALUE]

    def _counted(self) -> dict[str, int]:
        """Each column a count, sum or avg reads, with the first such aggregate (its non-null count)."""
        out: dict[str, int] = {}
        for j, a in enumerate(self._additive):
            if a.column is not None:
                out.setdefault(a.column, j)
        return out

    def _float_sums(self, schema: pa.Schema) -> list[tuple[int, AggSpec, str]]:
        """The sums and averages of a float column (their NaN and infinities are counted apart)."""
        return [
            (j, a, a.column)
            for j, a in enumerate(self._additive)
            if a.func != "count"
            and a.column is not None
            and pa.types.is_floating(schema.field(a.column).type)
        ]

    def _apply_changes(
        self, held: pa.Table | None, rows: pa.Table, retract: Bools
    ) -> tuple[pa.Table, pa.Table, int]:
        """:meth:`_apply` for a changelog: signed rows, value multisets, keys left without rows."""
        key_rows, ids, groups = self._regroup(held, rows.select(list(self.keys)))
        batch = _Changelog.of(held, rows, ids, groups, retract)
        sets = [_ValueSet.of(batch, _values(j), rows.column(c)) for j, c in enumerate(self._tracked)]
        specials = self._specials(rows)
        keep = self._matched(batch, sets, specials)
        weight = np.where(keep, batch.sign, 0)
        columns: dict[str, Any] = self._sums(batch, keep)
        values = finalize(self._additive, columns)
        counts = {
            name: batch.held_ints(name) + batch.tally(weight, flags) for name, flags in specials.items()
        }
        for j, a, _ in self._float_sums(rows.schema):
            values[a.name] = _with_specials(values[a.name], *(counts[_special(j, s)] for s in _SPECIAL))
        counts[_LIVE] = live = batch.held_ints(_LIVE) + batch.tally(weight)
        columns.update(counts)
        for j, (column, found) in enumerate(zip(self._tracked, sets, strict=True)):
            columns[_values(j)] = lists = batch.per_group(_values(j), found.lists(weight, batch.touched))
            values.update({a.name: _from_values(lists, a) for a in self._by_value(column)})
        values = {a.name: values[a.name] for a in self.aggs}
        gone = live <= 0
        results = self._changes(key_rows, held, batch.held_ids, values, batch.touched, gone)
        state = self._state(key_rows, {**columns, **self._outputs(values)}).filter(arrow(~gone))
        return results, state, int(np.sum(~keep))

    def _specials(self, rows: pa.Table) -> dict[str, Bools]:
        """Per state column of a float sum's NaN or infinity count: the rows that hold that value."""
        out: dict[str, Bools] = {}
        for j, _, column in self._float_sums(rows.schema):
            values = rows.column(column).combine_chunks().cast(pa.float64())
            for name, value in _SPECIAL.items():
                hit = pc.is_nan(values) if name == "nan" else pc.equal(values, pa.scalar(value))
                out[_special(j, name)] = _bools(hit.fill_null(False))
        return out

    def _matched(self, batch: _Changelog, sets: list[_ValueSet], specials: dict[str, Bools]) -> Bools:
        """Which rows to apply: not a retraction that finds no live row to withdraw (most specific first)."""
        keep = np.ones(len(batch.sign), bool)
        if not (batch.sign < 0).any():
            return keep
        checks = [(found.row_pair, found.held_net(), found.n) for found in sets]
        for name, flags in specials.items():
            checks.append((batch.where(flags), batch.held_ints(name), batch.groups))
        for column, j in self._counted().items():
            present = _bools(pc.is_valid(batch.rows.column(column)))
            checks.append((batch.where(present), batch.held_ints(AggSpec.prefix_of(j) + "c"), batch.groups))
        checks.append((batch.row_ids, batch.held_ints(_LIVE), batch.groups))
        for items, base, n in checks:
            keep &= ~_unmatched(items, base, np.where(keep, batch.sign, 0), n)
        return keep

    def _sums(self, batch: _Changelog, keep: Bools) -> dict[str, pa.Array[Any]]:
        """The count, sum and avg partials of each group: the held ones plus the kept rows', signed."""
        if not self._additive:
            return {}
        rows = batch.rows if keep.all() else batch.rows.filter(arrow(keep))
        parts = row_partials(self._additive, rows, None, None)
        for j, _, _ in self._float_sums(rows.schema):
            s = AggSpec.prefix_of(j) + "s"  # a NaN or an infinity is counted apart (_specials)
            parts[s] = pc.if_else(
                pc.is_finite(parts[s]).fill_null(True), parts[s], pa.scalar(0.0, parts[s].type)
            )
        negative = batch.sign[keep] < 0
        if negative.any():
            parts = {name: pc.if_else(arrow(negative), pc.negate(arr), arr) for name, arr in parts.items()}
        names = [f.name for f in partial_schema(self._additive)]
        at = np.concatenate([batch.held_ids, batch.row_ids[keep]])
        stacked = _stacked(batch.held, parts, names)
        missing = np.flatnonzero(np.bincount(at, minlength=batch.groups) == 0)
        if len(missing):  # a new key whose every row was dropped: it merges an empty accumulator
            empty = empty_partials(self._additive, len(missing))
            stacked = {c: pa.concat_arrays([stacked[c], empty[c].cast(stacked[c].type)]) for c in names}
            at = np.concatenate([at, missing])
        return _zeroed_sums(merge(self._additive, stacked, at, batch.groups))

    # --- results and layout ----------------------------------------------------------------

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
        fields = [rows.schema.field(k) for k in self.keys]
        if self.retracting:
            fields += partial_schema(self._additive)
            specials = [_special(j, s) for j, _, _ in self._float_sums(rows.schema) for s in _SPECIAL]
            fields += [pa.field(name, pa.int64()) for name in [*specials, _LIVE]]
            fields += [
                pa.field(_values(j), _values_type(rows.schema.field(c).type))
                for j, c in enumerate(self._tracked)
            ]
        else:
            fields += partial_schema(self.aggs)
        fields += [pa.field(_out(i), a.out_type) for i, a in enumerate(self.aggs)]
        return pa.schema(fields)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        if self.ttl_ms is None or not state.num_rows:
            return NOT_DUE, NOT_DUE
        oldest = int(pc.min(state.column(KEYED_NEWEST)).as_py())
        return -(-oldest // 1000) + self.ttl_ms, NOT_DUE  # the watermark at which a key expires

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        if self.ttl_ms is None or not state.num_rows:
            return np.full(state.num_rows, NOT_DUE, np.int64)
        newest = state.column(KEYED_NEWEST).to_numpy().astype(np.int64)
        due: np.ndarray = -(-newest // 1000) + self.ttl_ms
        return due

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def describe(self) -> str:
        aggs = ", ".join(f"{a.func}({a.column or '*'})" for a in self.aggs)
        input_kind = ", retracting input" if self.retracting else ""
        ttl = f", state TTL {self.ttl_ms} ms of event time" if self.ttl_ms is not None else ""
        return (
            f"krishiv aggregation per key: keys={list(self.keys)} aggs=[{aggs}] (no window{input_kind}{ttl})"
        )


@attrs.frozen(kw_only=True)
class _Changelog:
    """A batch of a changelog against the held state: the group of each held key and of each row."""

    held: pa.Table | None
    rows: pa.Table
    held_ids: Ints
    row_ids: Ints
    groups: int
    #: The groups the batch has rows of.
    touched: Bools
    #: Per row, 1 for an emit, -1 for a retraction.
    sign: Ints

    @classmethod
    def of(cls, held: pa.Table | None, rows: pa.Table, ids: Ints, groups: int, retract: Bools) -> _Changelog:
        n_held = 0 if held is None else held.num_rows
        touched = np.zeros(groups, bool)
        touched[ids[n_held:]] = True
        sign = np.where(retract, -1, 1).astype(np.int64)
        return cls(
            held=held,
            rows=rows,
            held_ids=ids[:n_held],
            row_ids=ids[n_held:],
            groups=groups,
            touched=touched,
            sign=sign,
        )

    def held_ints(self, name: str) -> Ints:
        """A held integer column per group (0 for a group not held)."""
        out = np.zeros(self.groups, np.int64)
        if self.held is not None:
            out[self.held_ids] = self.held.column(name).to_numpy()
        return out

    def tally(self, weight: Ints, rows: Bools | None = None) -> Ints:
        """Per group, the sum of its (chosen) rows' ``weight``."""
        if rows is None:
            return _tally(self.row_ids, weight, self.groups)
        return _tally(self.row_ids[rows], weight[rows], self.groups)

    def where(self, rows: Bools) -> Ints:
        """Each row's group where ``rows``, else -1."""
        return np.where(rows, self.row_ids, -1)

    def per_group(self, name: str, fresh: pa.Array[Any]) -> pa.Array[Any]:
        """Per group: ``fresh``'s entry for a touched group (in group order), else the held one."""
        if self.held is None:
            return fresh
        where = np.zeros(self.groups, np.int64)
        where[self.held_ids] = np.arange(len(self.held_ids))
        where[self.touched] = len(self.held_ids) + np.arange(len(fresh))
        return pa.concat_arrays([self.held.column(name).combine_chunks(), fresh]).take(arrow(where))


@attrs.frozen(kw_only=True)
class _ValueSet:
    """One column's live values per key around one batch: its (group, value) pairs, numbered."""

    #: The pair of each held entry (of the keys the batch touches) and its count.
    held_pair: Ints
    held_count: Ints
    #: The pair of each batch row; -1 for a null value (not counted).
    row_pair: Ints
    #: Each pair's group and value.
    group: Ints
    value: pa.Array[Any]
    n: int

    @classmethod
    def of(cls, batch: _Changelog, name: str, column: pa.ChunkedArray[Any]) -> _ValueSet:
        """The pairs of the batch's values and of the held ones (state column ``name``) of its keys."""
        values = canonical(column)
        present = _bools(pc.is_valid(values))
        new = values.filter(arrow(present))
        held_values, held_count, held_groups = new.slice(0, 0), np.zeros(0, np.int64), np.zeros(0, np.int64)
        if batch.held is not None:
            mine = np.flatnonzero(batch.touched[batch.held_ids])
            lists = batch.held.column(name).combine_chunks().take(arrow(mine))
            flat = pc.list_flatten(lists)
            held_values = pc.struct_field(flat, "v")
            held_count = np.asarray(pc.struct_field(flat, "n").to_numpy(zero_copy_only=False), np.int64)
            held_groups = batch.held_ids[mine][pc.list_parent_indices(lists).to_numpy()]
        every = pa.concat_arrays([held_values, new.cast(held_values.type)])
        groups = np.concatenate([held_groups, batch.row_ids[present]])
        pair, n, first = _pairs(groups, every)
        row_pair = np.full(len(present), -1, np.int64)
        row_pair[present] = pair[len(held_groups) :]
        return cls(
            held_pair=pair[: len(held_groups)],
            held_count=held_count,
            row_pair=row_pair,
            group=groups[first],
            value=every.take(arrow(first)),
            n=n,
        )

    def held_net(self) -> Ints:
        return _tally(self.held_pair, self.held_count, self.n)

    def lists(self, weight: Ints, touched: Bools) -> pa.Array[Any]:
        """The live values of each touched group, ascending (NaN last), with their counts."""
        counted = self.row_pair >= 0
        net = self.held_net() + _tally(self.row_pair[counted], weight[counted], self.n)
        live = np.flatnonzero(net > 0)
        table = table_of({"g": self.group[live], "v": self.value.take(arrow(live)), "n": net[live]})
        table = table.take(pc.sort_indices(table, sort_keys=[("g", "ascending"), ("v", "ascending")]))
        sizes = np.bincount(table.column("g").to_numpy(), minlength=len(touched))[touched]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        cols = [table.column(c).combine_chunks() for c in ("v", "n")]
        return list_array(offsets, pa.StructArray.from_arrays(cols, names=["v", "n"]))


def _pairs(groups: Ints, values: pa.Array[Any]) -> tuple[Ints, int, Ints]:
    """The distinct (group, value) pairs: each entry's pair, how many, each pair's first entry.

    The groups are numbers already, so only the values are hashed (and then the pairs' codes).
    """
    encoded = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(values))
    code = groups * max(len(encoded.dictionary), 1) + encoded.indices.to_numpy(zero_copy_only=False)
    pair, uniques = pd.factorize(code)
    ids = pair.astype(np.int64, copy=False)
    return ids, len(uniques), first_rows(ids, len(uniques))


def _values(j: int) -> str:
    """A retracting kernel's state column: the multiset of the ``j``-th tracked column's live values."""
    return keyed_values(j)


def _values_type(value_type: pa.DataType) -> pa.DataType:
    return pa.list_(pa.struct([pa.field("v", value_type), pa.field("n", pa.int64())]))


def _special(j: int, name: str) -> str:
    """A retracting kernel's state column: the ``j``-th float sum's count of NaN or an infinity."""
    return keyed_special(j, name)


def _stacked(
    held: pa.Table | None, parts: dict[str, pa.Array[Any]], names: list[str]
) -> dict[str, pa.Array[Any]]:
    """The held partials, then ``parts``."""
    if held is None:
        return parts
    return {c: pa.concat_arrays([held.column(c).combine_chunks(), parts[c]]) for c in names}


def _tally(items: Ints, weights: Ints, n: int) -> Ints:
    """Per item ``0 .. n - 1``, the sum of its ``weights`` (exact below 2**53)."""
    return np.bincount(items, weights=weights, minlength=n).astype(np.int64)


def _unmatched(items: Ints, base: Ints, sign: Ints, n: int) -> Bools:
    """The retractions beyond what their item (a key, or a key's value) holds: the earliest of each.

    ``base``: what each item holds before the batch; a row of ``items`` -1
    or ``sign`` 0 counts for nothing.
    """
    counted = (items >= 0) & (sign != 0)
    short = np.maximum(-(base + _tally(items[counted], sign[counted], n)), 0)
    out = np.zeros(len(sign), bool)
    if not short.any():
        return out
    cand = np.flatnonzero(counted & (sign < 0))
    cand = cand[np.argsort(items[cand], kind="stable")]
    starts = segment_starts(items[cand])
    runs = np.diff(np.append(starts, len(cand)))
    rank = np.arange(len(cand)) - np.repeat(starts, runs)
    out[cand[rank < short[items[cand]]]] = True
    return out


def _zeroed_sums(parts: dict[str, pa.Array[Any]]) -> dict[str, pa.Array[Any]]:
    """``parts`` with each float sum of no value set to 0 (what its subtractions left is rounding)."""
    out = dict(parts)
    for s, total in parts.items():
        if s.endswith("_s") and pa.types.is_floating(total.type):
            out[s] = pc.if_else(
                pc.equal(parts[s[:-1] + "c"], pa.scalar(0)), pa.scalar(0.0, total.type), total
            )
    return out


def _with_specials(value: pa.Array[Any], nan: Ints, pinf: Ints, ninf: Ints) -> pa.Array[Any]:
    """A float sum or average with its NaN and infinities: NaN, then an infinity, else the finite part."""
    hit = (nan > 0) | (pinf > 0) | (ninf > 0)
    if not hit.any():
        return value
    special = np.where((nan > 0) | ((pinf > 0) & (ninf > 0)), np.nan, np.where(pinf > 0, np.inf, -np.inf))
    out: pa.Array[Any] = pc.if_else(arrow(hit), arrow(special, value.type), value)
    return out


def _from_values(lists: pa.Array[Any], spec: AggSpec) -> pa.Array[Any]:
    """``min``, ``max`` or ``count_distinct`` of each group's live values (ascending, NaN last)."""
    length = np.asarray(pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    if spec.func == "count_distinct":
        return arrow(length, pa.int64()).cast(spec.out_type)
    ends = np.cumsum(length)
    at = ends - length if spec.func == "min" else ends - 1
    values: pa.Array[Any] = pc.struct_field(pc.list_flatten(lists), "v")
    return values.take(arrow(np.maximum(at, 0), mask=length == 0)).cast(spec.out_type)


def _bools(x: Any) -> Bools:
    return np.asarray(x.to_numpy(zero_copy_only=False), bool)


def _same(a: pa.Array[Any], b: pa.Array[Any]) -> Bools:
    """Null-safe equality, NaN equal to NaN (a value that did not change emits nothing)."""
    if a.type != b.type:
        b = b.cast(a.type)
    both_null = _bools(pc.is_null(a)) & _bools(pc.is_null(b))
    eq = _bools(pc.equal(a, b).fill_null(False))
    if pa.types.is_floating(a.type):
        eq |= _bools(pc.is_nan(a).fill_null(False)) & _bools(pc.is_nan(b).fill_null(False))
    out: Bools = eq | both_null
    return out
