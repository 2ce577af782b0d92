"""Pane state: one state row per key and pane for long sliding windows.

A sliding window whose slide divides its size is the union of ``size /
slide`` *panes*, the slide-sized intervals ``[p, p + slide)`` of event time;
pane ``p`` lies in the windows ending at ``p + slide, p + 2 * slide, ...,
p + size``. Where every window fires exactly once, when the watermark ``W``
reaches its end (:func:`~krishiv_py.stateful.kernel.pane_state` says when),
the kernel keeps one state row per key and pane holding the partial
aggregates of the pane's rows, instead of a copy of it in each of its
windows (60 copies for 10 minutes sliding by 10 seconds), and merges a
window's panes only when the window fires.

The state table in this layout (told apart by its :data:`FIRED_TO` column):

``k0, k1, ...``
    the key;
``__ws``
    the pane's start ``p`` (µs);
``__we``
    the end of the pane's next window to fire (µs), so that the operator
    reads the next watermark a pane row needs as it reads a window row's;
``__fired``
    always false (as for a window row that has not fired yet);
partial columns
    the pane's partial aggregates (:mod:`~krishiv_py.stateful.aggregates`);
``__fired_to``
    the watermark (µs) up to which windows have fired: every window with
    ``end <= __fired_to`` fired (or had no rows); null before the first
    watermark. Every row of a state holds the same value.

What a step does with it, with ``L = 0``:

- a row is kept when one of its windows is retained (``W < end``): when
  ``W < p + size``; kept rows merge into their key's pane row, and so do
  partials merged before the operator;
- at a watermark ``W`` above ``__fired_to = F``, every window of a key
  with ``F < end <= W`` over at least one of the key's panes fires, once,
  with the merge of those panes as they are then. A late row joins its
  pane, so the windows over it still open take it; those that ended
  before it came fired already and do not fire again (in the per-window
  layout the row never joins them);
- then the panes whose last window fired (``p + size <= W``) leave state.

Examples
--------
>>> import numpy as np, pyarrow as pa
>>> from krishiv_py.plan.windows import SlidingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> from krishiv_py.stateful.state import KernelSpec
>>> spec = KernelSpec(keys=(), window=SlidingWindow(size_ms=30, slide_ms=10),
...     aggs=(AggSpec(name="n", func="count", column=None, out_type=pa.int64()),))
>>> state = pa.schema(pane_fields(spec, [])).empty_table()
>>> batch = pa.table({"__kp_ts": [3_000, 5_000, 12_000], "__kp_seq": [0, 1, 2]})
>>> ts = batch.column("__kp_ts").to_numpy()
>>> state, kept = add_panes(spec, state, batch, ts, ts, np.arange(3), None, None)
>>> state.num_rows  # panes [0, 10) and [10, 20)
2
>>> state, fired = fire_panes(spec, state, 20)
>>> fired.select(["window_end", "n"]).to_pylist()  # [-20, 10) and [-10, 20)
[{'window_end': 10000, 'n': 2}, {'window_end': 20000, 'n': 3}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS
from krishiv_py.plan.windows import SlidingWindow, TimeIntervalWindow
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import Column, arrow, replaced, table_of
from krishiv_py.stateful.grouping import canonical, first_rows, group_ids
from krishiv_py.stateful.state import FIRED, FIRED_TO, WE, WS, KernelSpec, result_table

__all__ = ["add_panes", "fire_panes", "pane_fields", "uses_panes"]


_I64_MAX = np.iinfo(np.int64).max


def pane_fields(spec: KernelSpec, key_types: Sequence[pa.DataType]) -> list[pa.Field[Any]]:
    """The columns of a state in the pane layout."""
    fields = [pa.field(k, t) for k, t in zip(spec.key_names(), key_types, strict=True)]
    fields += [pa.field(WS, pa.int64()), pa.field(WE, pa.int64()), pa.field(FIRED, pa.bool_())]
    fields += agg.partial_schema(spec.aggs)
    fields.append(pa.field(FIRED_TO, pa.int64()))
    return fields


def uses_panes(state: pa.Table) -> bool:
    """Whether ``state`` is in the pane layout (rather than one row per window)."""
    return FIRED_TO in state.column_names


def add_panes(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    idx: np.ndarray,
    w_us: int | None,
    merged: pa.Table | None,
) -> tuple[pa.Table, np.ndarray]:
    """``state`` with the rows ``idx`` of ``batch`` (and ``merged`` partials) in their panes; kept rows.

    ``ts``/``seq`` are every batch row's event time (µs) and arrival
    sequence, ``idx`` the rows with a valid one, ``w_us`` the watermark.
    A row is kept when one of its windows is retained (``W < p + size``).
    """
    slide, size = _bounds(spec)
    ts_ms = np.floor_divide(ts[idx], 1000)
    pane = ts_ms - ts_ms % slide
    keep = np.ones(len(idx), bool) if w_us is None else w_us < (pane + size) * 1000
    kept = np.zeros(len(ts), bool)
    kept[idx[keep]] = True
    rows_idx, pane = idx[keep], pane[keep]
    parts: list[pa.Table] = []
    if len(rows_idx):
        rows = batch.take(arrow(rows_idx))
        keys = [canonical(rows.column(name)) for name in spec.keys]
        gid, n_groups, first = group_ids([*keys, arrow(pane)])
        partials = agg.row_partials(spec.aggs, rows, ts[rows_idx], seq[rows_idx])
        take = arrow(first)
        parts.append(
            _pane_rows(
                spec,
                [k.take(take) for k in keys],
                pane[first] * 1000,
                agg.merge(spec.aggs, partials, gid, n_groups),
                state.schema,
            )
        )
    if merged is not None and merged.num_rows:
        merged_ms = np.floor_divide(merged.column(BATCH_TS).to_numpy(), 1000)
        parts.append(
            _pane_rows(
                spec,
                [canonical(merged.column(name)) for name in spec.keys],
                (merged_ms - merged_ms % slide) * 1000,
                {f.name: merged.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)},
                state.schema,
            )
        )
    fired_to = _fired_to(state)
    if w_us is not None:
        fired_to = w_us if fired_to is None else max(fired_to, w_us)
    return _stamp(spec, _merge_panes(spec, state, parts), fired_to), kept


def fire_panes(spec: KernelSpec, state: pa.Table, watermark_ms: int | None) -> tuple[pa.Table, pa.Table]:
    """Fire the windows that ended since the last firing, then evict the panes whose windows all fired.

    Returns the state and the result rows (shaped as the per-window layout's).
    """
    if watermark_ms is None or not state.num_rows:
        return state, _results(spec, state.slice(0, 0), np.zeros(0, np.int64), None)
    before = _fired_to(state)
    after = watermark_ms * 1000 if before is None else max(before, watermark_ms * 1000)
    results = _fire(spec, state, before, after)
    alive = state.column(WS).to_numpy() + _bounds(spec)[1] * 1000 > after
    if not alive.all():
        state = state.filter(arrow(alive))
    return _stamp(spec, state, after), results


def _bounds(spec: KernelSpec) -> tuple[int, int]:
    """The slide and size (ms) of ``spec``'s windows."""
    window = spec.window
    assert isinstance(window, SlidingWindow | TimeIntervalWindow)
    return window.slide_ms, window.size_ms


def _fired_to(state: pa.Table) -> int | None:
    if not state.num_rows:
        return None
    value = pc.max(state.column(FIRED_TO)).as_py()
    return None if value is None else int(value)


def _stamp(spec: KernelSpec, state: pa.Table, fired_to: int | None) -> pa.Table:
    """``state`` with ``fired_to`` on every row and each pane's next window end to fire."""
    slide = _bounds(spec)[0] * 1000
    nxt = state.column(WS).to_numpy() + slide
    if fired_to is not None:
        nxt = np.maximum(nxt, min((fired_to // slide + 1) * slide, _I64_MAX))
    state = replaced(state, WE, arrow(nxt, pa.int64()))
    n = state.num_rows
    stamp = pa.nulls(n, pa.int64()) if fired_to is None else arrow(np.full(n, fired_to, np.int64))
    return replaced(state, FIRED_TO, stamp)


def _pane_rows(
    spec: KernelSpec,
    keys: list[pa.Array[Any]],
    ws: np.ndarray,
    partials: dict[str, pa.Array[Any]],
    schema: pa.Schema,
) -> pa.Table:
    """State rows of ``keys``' panes starting at ``ws`` (µs) holding ``partials`` (stamped later)."""
    n = len(ws)
    cols: dict[str, Column | np.ndarray] = dict(zip(spec.key_names(), keys, strict=True))
    cols |= {WS: ws, WE: ws, FIRED: np.zeros(n, bool), **partials}
    cols[FIRED_TO] = pa.nulls(n, pa.int64())
    return table_of(cols).select(schema.names).cast(schema)


def _merge_panes(spec: KernelSpec, state: pa.Table, parts: list[pa.Table]) -> pa.Table:
    """``state`` and the pane rows of ``parts``, one row per key and pane.

    Rows alone in their (key, pane) pass as they are; the others merge.
    """
    if not parts:
        return state
    combined = pa.concat_tables([state, *parts])
    columns = [combined.column(k).combine_chunks() for k in [*spec.key_names(), WS]]
    ids, n_groups, _ = group_ids(columns)
    if n_groups == combined.num_rows:
        return combined
    alone = (np.bincount(ids, minlength=n_groups) == 1)[ids]
    shared = np.flatnonzero(~alone)
    rows = combined.take(arrow(shared))
    groups, inverse = np.unique(ids[shared], return_inverse=True)
    inverse = inverse.astype(np.int64)
    partials = {f.name: rows.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
    heads = rows.take(arrow(first_rows(inverse, len(groups))))
    panes = _pane_rows(
        spec,
        [heads.column(k).combine_chunks() for k in spec.key_names()],
        heads.column(WS).to_numpy(),
        agg.merge(spec.aggs, partials, inverse, len(groups)),
        state.schema,
    )
    return pa.concat_tables([combined.filter(arrow(alone)), panes])


def _fire(spec: KernelSpec, state: pa.Table, before: int | None, after: int) -> pa.Table:
    """Result rows of the windows over the panes of ``state`` ending in ``(before, after]`` (µs).

    With the panes sorted by key and start, a window's panes are a run of
    rows, begun by the pane that *introduces* the window: the first pane
    of its key whose windows include it. Each pane introduces the window
    ends past those of its key's previous pane, so every window is listed
    once, in order, with its run of panes: the partials of all runs, one
    after another, merge by window.
    """
    slide, size = (v * 1000 for v in _bounds(spec))
    n = state.num_rows
    kid = np.zeros(n, np.int64)
    if spec.keys:
        kid = group_ids([state.column(k).combine_chunks() for k in spec.key_names()])[0]
    ws = state.column(WS).to_numpy()
    order = np.lexsort((ws, kid))
    kid, ws = kid[order], ws[order]
    # Window ends are multiples of the slide (the slide divides the size): those in (before, after].
    first = ws + slide if before is None else np.maximum(ws + slide, (before // slide + 1) * slide)
    same_key = np.concatenate([[False], kid[1:] == kid[:-1]])
    # A pane opens the windows past the last one of its key's previous pane (ending at start + size).
    first[same_key] = np.maximum(first[same_key], ws[:-1][same_key[1:]] + size + slide)
    last = np.minimum(ws + size, (after // slide) * slide)
    count = np.where(last >= first, (last - first) // slide + 1, 0)
    if not count.any():
        return _results(spec, state.slice(0, 0), np.zeros(0, np.int64), None)
    opener = np.repeat(np.arange(n), count)
    ends = np.repeat(first, count) + _within(count) * slide
    # A window's run: from its opener to its key's last pane starting by ``end - slide``; ``code``
    # numbers the sorted rows by (key, rank of the start), ascending, so one search finds that pane.
    starts = np.unique(ws)
    code = kid * (len(starts) + 1) + np.searchsorted(starts, ws)
    bound = kid[opener] * (len(starts) + 1) + np.searchsorted(starts, ends - slide, side="right")
    panes = np.searchsorted(code, bound) - opener
    take = arrow(order[np.repeat(opener, panes) + _within(panes)])
    partials = {
        f.name: state.column(f.name).combine_chunks().take(take) for f in agg.partial_schema(spec.aggs)
    }
    windows = np.repeat(np.arange(len(opener)), panes)  # ascending: sums of integers need no hashing
    merged = agg.merge(spec.aggs, partials, windows, len(opener))
    keys = state.select(spec.key_names()).take(arrow(order[opener]))
    return _results(spec, keys, ends, merged)


def _within(counts: np.ndarray) -> np.ndarray:
    """``0, 1, ..., c - 1`` for each ``c`` of ``counts``, one after another."""
    out: np.ndarray = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return out


def _results(
    spec: KernelSpec, keys: pa.Table, ends: np.ndarray, partials: dict[str, pa.Array[Any]] | None
) -> pa.Table:
    """Result rows of the windows of ``keys`` ending at ``ends`` (µs); no partials: no windows."""
    if partials is None:
        partials = {f.name: pa.array([], f.type) for f in agg.partial_schema(spec.aggs)}
    size = _bounds(spec)[1] * 1000
    values = agg.finalize(spec.aggs, partials)
    errors = agg.overflows(spec.aggs, partials)
    ws, we = arrow(ends - size, pa.int64()), arrow(ends, pa.int64())
    return result_table(spec, keys, ws, we, values, "emit", errors=errors)
