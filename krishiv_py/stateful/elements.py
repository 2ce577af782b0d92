"""Element-count firings (``on_every_element``, ``on_count(n)``), vectorized.

A window with ``p`` elements pending (added since its last firing) that
receives ``m`` new elements in a batch fires after its ``j``-th new element
whenever ``(p + j) % n == 0``, with the result as of that element:
everything so far (accumulating, retracting) or everything since the
previous firing (discarding).

Computed for all windows of a batch at once as a *segmented scan* of the
partial aggregates over the window's stored accumulator followed by its new
rows in arrival order; a segment is the whole window (accumulating) or the
stretch between two firings (discarding). Sums use grouped cumulative sums,
``min``/``max``/``first``/``last`` grouped cumulative minima of rank codes
(so NaN and nulls order as in Spark), ``count_distinct`` the first
occurrence of each value.
"""

from __future__ import annotations

from typing import Any, cast

import attrs
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import arrow, list_array, table_of
from krishiv_py.stateful.state import EMITTED, PENDING, WE, WS, KernelSpec, result_table, retract_rows

__all__ = ["ElementPatch", "element_firings"]


@attrs.frozen(kw_only=True)
class ElementPatch:
    """How element firings change the merged accumulators of the windows that fired.

    Arrays are indexed by window (group id); only windows in ``fired`` change.
    """

    fired: np.ndarray
    pending: np.ndarray
    last_values: dict[str, pa.Array[Any]]
    last_ws: pa.Array[Any]
    last_we: pa.Array[Any]
    open_partials: dict[str, pa.Array[Any]]


def element_firings(
    spec: KernelSpec, work: pa.Table, ids: np.ndarray, n_groups: int, is_new: np.ndarray
) -> tuple[pa.Table, ElementPatch] | None:
    """Element firings of the windows in ``work``; ``None`` when none fire.

    ``work`` holds stored accumulators (``is_new`` False, at most one per
    window) and new per-row partials in arrival order. Returns the result
    rows (each preceded by a retraction in retracting mode) and the patch to
    apply to the merged windows.
    """
    n = spec.trigger.element_count
    order = np.lexsort((np.arange(len(ids)), is_new, ids))  # stored row first, then arrival order
    g = ids[order]
    new_sorted = is_new[order]
    pending = work.column(PENDING).to_numpy()[order]
    head = np.concatenate([[True], g[1:] != g[:-1]]) if len(g) else np.zeros(0, bool)
    base = _segmented_cumsum(g, np.where(head & ~new_sorted, pending, 0))
    position = _segmented_cumsum(g, new_sorted.astype(np.int64))
    fires = new_sorted & ((base + position) % n == 0)
    if not fires.any():
        return None
    seg = g if spec.accumulation != "discarding" else _discarding_segments(g, base, position, n, new_sorted)
    rows = work.take(arrow(order))
    parts = {f.name: rows.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
    scanned = _scan(spec, parts, seg)
    fire_idx = np.flatnonzero(fires)
    fired_parts = {k: v.take(arrow(fire_idx)) for k, v in scanned.items()}
    values = agg.finalize(spec.aggs, fired_parts)
    fired_rows = rows.take(arrow(fire_idx))
    emits = result_table(
        spec,
        fired_rows,
        fired_rows.column(WS),
        fired_rows.column(WE),
        values,
        "emit",
        errors=agg.overflows(spec.aggs, fired_parts),
    )
    if not spec.retracting:
        results = emits
    else:
        # Before each firing, retract the window's previous result: the stored one for
        # its first firing in this batch, else the firing before it.
        fire_g = g[fire_idx]
        first = np.concatenate([[True], fire_g[1:] != fire_g[:-1]])
        heads = np.flatnonzero(head)
        stored = heads[np.searchsorted(heads, fire_idx[first], "right") - 1]
        stored = stored[~new_sorted[stored]]
        prior = rows.take(pa.array(stored, pa.int64()))
        prior = prior.filter(prior.column(EMITTED))
        prev = pa.array(np.flatnonzero(~first) - 1, pa.int64())
        again = result_table(
            spec,
            fired_rows.take(prev),
            fired_rows.column(WS).take(prev),
            fired_rows.column(WE).take(prev),
            {k: v.take(prev) for k, v in values.items()},
            "retract",
        )
        results = pa.concat_tables([retract_rows(spec, prior), again, emits])
    patch = _patch(spec, g, fires, new_sorted, scanned, values, fired_rows, n_groups, order, parts, seg)
    return results, patch


def _segmented_cumsum(seg: np.ndarray, values: np.ndarray) -> np.ndarray:
    return pd.Series(values).groupby(seg).cumsum().to_numpy()


def _discarding_segments(
    g: np.ndarray, base: np.ndarray, position: np.ndarray, n: int, is_new: np.ndarray
) -> np.ndarray:
    """Segment ids: (window, firings before the row); the stored row opens segment 0."""
    k = np.where(is_new, (base + position - 1) // n, 0)
    codes = pd.MultiIndex.from_arrays([g, k]).factorize()[0] if len(g) else np.zeros(0, np.int64)
    return np.asarray(codes, np.int64)


def _scan(spec: KernelSpec, parts: dict[str, pa.Array[Any]], seg: np.ndarray) -> dict[str, pa.Array[Any]]:
    """The merge of every row with the rows before it in its segment."""
    out: dict[str, pa.Array[Any]] = {}
    for i, s in enumerate(spec.aggs):
        p = s.prefix(i)
        for suffix in ("c", "n"):
            if p + suffix in parts:
                out[p + suffix] = pa.array(_segmented_cumsum(seg, parts[p + suffix].to_numpy()))
        for suffix in ("s", "h"):  # "h": the high halves of an integer sum
            if p + suffix in parts:
                out[p + suffix] = _cum_sum(seg, parts[p + suffix])
        if s.func in ("min", "max"):
            out[p + "v"] = _cum_pick(seg, parts[p + "v"], parts[p + "v"], largest=s.func == "max")
        elif s.func in ("first", "last"):
            key = pa.StructArray.from_arrays([parts[p + "t"], parts[p + "q"]], ["t", "q"])
            for suffix in ("v", "t", "q"):
                out[p + suffix] = _cum_pick(seg, key, parts[p + suffix], largest=s.func == "last")
        elif s.func == "count_distinct":
            out[p + "d"] = _cum_distinct(seg, parts[p + "d"])
    return out


def _cum_sum(seg: np.ndarray, values: pa.Array[Any]) -> pa.Array[Any]:
    if pa.types.is_decimal(values.type):
        acc: dict[int, object] = {}
        out = []
        for s, v in zip(seg.tolist(), values.to_pylist(), strict=True):
            if v is not None:
                acc[s] = v if acc.get(s) is None else acc[s] + v
            out.append(acc.get(s))
        return pa.array(out, values.type)
    filled = values.fill_null(0).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(values.type):
        return arrow(_segmented_cumsum(seg, filled), values.type)
    finite = np.isfinite(filled)
    total = _segmented_cumsum(seg, np.where(finite, filled, 0.0))
    nan = _segmented_cumsum(seg, np.isnan(filled).astype(np.int64))
    pinf = _segmented_cumsum(seg, (filled == np.inf).astype(np.int64))
    ninf = _segmented_cumsum(seg, (filled == -np.inf).astype(np.int64))
    total = np.where(pinf > 0, np.inf, total)
    total = np.where(ninf > 0, -np.inf, total)
    total = np.where((nan > 0) | ((pinf > 0) & (ninf > 0)), np.nan, total)
    return arrow(total, values.type)


def _cum_pick(seg: np.ndarray, key: pa.Array[Any], values: pa.Array[Any], *, largest: bool) -> pa.Array[Any]:
    """At every row, ``values`` of the row with the least (greatest) ``key`` so far; nulls skipped."""
    n = len(key)
    if pa.types.is_struct(key.type):
        struct = cast(pa.StructArray, key)
        t = struct.field("t")
        valid = pc.is_valid(t).to_numpy(zero_copy_only=False)
        sort = table_of({"t": t, "q": struct.field("q"), "i": np.arange(n)}).sort_by(
            [("t", "ascending"), ("q", "ascending")]
        )
        order = sort.column("i").to_numpy()
        rank = np.empty(n, np.float64)
        rank[order] = np.arange(n, dtype=np.float64)
    else:
        valid = pc.is_valid(key).to_numpy(zero_copy_only=False)
        rank = pc.rank(key, sort_keys="ascending", tiebreaker="first").to_numpy().astype(np.float64)
    rank[~valid] = np.nan
    grouped = pd.Series(rank).groupby(seg)
    best_so_far = grouped.cummax() if largest else grouped.cummin()
    best = best_so_far.groupby(seg).ffill().to_numpy()  # a null row keeps the best before it
    holder = np.full(n + 1, n, np.int64)  # rank -> row (index n: none yet)
    ranks_valid = rank[valid].astype(np.int64)
    holder[ranks_valid] = np.flatnonzero(valid)
    pick = np.where(np.isnan(best), n, holder[np.nan_to_num(best, nan=n).astype(np.int64)])
    padded: pa.Array[Any] = pa.concat_arrays(
        [values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values, pa.nulls(1, values.type)]
    )
    return padded.take(arrow(pick))


def _cum_distinct(seg: np.ndarray, lists: pa.Array[Any]) -> pa.Array[Any]:
    """Distinct values so far, as counts held in a list column of the right length."""
    values = pc.list_flatten(lists)
    owner = pc.list_parent_indices(lists).to_numpy()
    n = len(lists)
    firsts = np.zeros(n, np.int64)
    if len(values):
        pairs = table_of({"s": seg[owner], "v": values, "o": owner})
        first = (
            pairs.group_by(["s", "v"], use_threads=False).aggregate([("o", "min")]).column("o_min").to_numpy()
        )
        firsts = np.bincount(first, minlength=n).astype(np.int64)
    counts = _segmented_cumsum(seg, firsts)
    # finalize() only reads the list lengths: a list of ``count`` nulls carries the count.
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return list_array(offsets, pa.nulls(int(offsets[-1]), lists.type.value_type))


def _patch(
    spec: KernelSpec,
    g: np.ndarray,
    fires: np.ndarray,
    new_sorted: np.ndarray,
    scanned: dict[str, pa.Array[Any]],
    values: dict[str, pa.Array[Any]],
    fired_rows: pa.Table,
    n_groups: int,
    order: np.ndarray,
    parts: dict[str, pa.Array[Any]],
    seg: np.ndarray,
) -> ElementPatch:
    fire_idx = np.flatnonzero(fires)
    fired = np.zeros(n_groups, bool)
    fired[g[fire_idx]] = True
    last_fire = np.full(n_groups, -1, np.int64)
    np.maximum.at(last_fire, g[fire_idx], fire_idx)
    pos = np.arange(len(g))
    after = new_sorted & (pos > last_fire[g])
    pending = np.bincount(g[after], minlength=n_groups).astype(np.int64)
    # The last firing of each window, as an index into the firings.
    which = np.full(n_groups, 0, np.int64)
    which[g[fire_idx]] = np.arange(len(fire_idx))
    last_values = {k: v.take(arrow(which)) for k, v in values.items()}
    last_ws = fired_rows.column(WS).take(arrow(which))
    last_we = fired_rows.column(WE).take(arrow(which))
    # Discarding: what stays in a fired window is its open segment, i.e. the scan at its last row
    # when that row did not fire, else nothing.
    last_row = np.full(n_groups, 0, np.int64)
    np.maximum.at(last_row, g, pos)
    open_partials: dict[str, pa.Array[Any]] = {}
    if spec.accumulation == "discarding":
        at_last = {k: v.take(arrow(last_row)) for k, v in scanned.items()}
        # The scan of count_distinct carries only counts; the open segment keeps its values,
        # so that a later batch's rows are told apart from them.
        in_open = seg == seg[last_row][g]
        for i, s in enumerate(spec.aggs):
            if s.func == "count_distinct":
                name = s.prefix(i) + "d"
                lists = parts[name].filter(pa.array(in_open))
                at_last[name] = agg.merge_distinct(lists, g[in_open], n_groups)
        closed = fires[last_row]
        open_partials = agg.reset(spec.aggs, at_last, closed)
    del order
    return ElementPatch(
        fired=fired,
        pending=pending,
        last_values=last_values,
        last_ws=last_ws.combine_chunks() if isinstance(last_ws, pa.ChunkedArray) else last_ws,
        last_we=last_we.combine_chunks() if isinstance(last_we, pa.ChunkedArray) else last_we,
        open_partials=open_partials,
    )
