"""Merging a micro-batch's on-time rows per key and pane before the shuffle.

Spark's own aggregation merges rows per key and window in each map task
before the shuffle. The stateful operator can do the same for the rows
whose fate does not depend on anything but the micro-batch's watermark
``W``: a row with a valid event time ``ts >= W`` is *on time*, all its
windows are open (their ends are past ``ts``) and it joins each of them
with its own partial aggregate. Such rows of one key and *pane* (the
interval of event time whose rows share the same windows: the window
itself for tumbling windows, the slide for sliding windows whose slide
divides the size) merge into one partial, with the number of rows it
holds. Every other row still reaches the operator as a row, which
classifies it as before: invalid, mildly late, very late (and so to the
late-event handler) or, with a state TTL, already expired.

What a merge keeps exact
    The merged partial is the merge the kernel would have made of the
    same rows (:func:`krishiv_py.stateful.aggregates.merge`; ``first`` and
    ``last`` carry each row's event time and arrival sequence), the row
    count becomes the windows' pending count, and the newest event time of
    the rows the state TTL's stamp. The counts the operator reports (on
    time, in the future) and the delay profile count merged rows too.
Where rows are not merged (:func:`premergeable`)
    Session and per-event sliding windows (which windows a row forms
    depends on the key's other rows), sliding windows whose slide does not
    divide the size, triggers that fire on element counts (they count rows
    one at a time, in arrival order) and a state TTL in processing time
    (stamped when the operator runs).

The map task needs ``W`` before the operator runs; see
:func:`krishiv_py.stateful.operator.pack_rows` for where it comes from.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> spec = KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10),
...     aggs=(AggSpec(name="n", func="count", column=None, out_type=pa.int64()),))
>>> rows = pa.table({"k": ["a", "a", "b", "a"], "__kp_ts": [21_000, 25_000, 22_000, 3_000],
...     "__kp_seq": [0, 1, 2, 3]})
>>> rest, merged = premerge(spec, rows, 20)
>>> rest.column("__kp_ts").to_pylist()  # behind the watermark: the operator classifies it
[3000]
>>> merged.select(["k", "p0_c", "__kp_rows"]).to_pylist()
[{'k': 'a', 'p0_c': 2, '__kp_rows': 2}, {'k': 'b', 'p0_c': 1, '__kp_rows': 1}]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, MERGED_FUTURE, MERGED_ROWS, SEQ
from krishiv_py.plan.windows import SlidingWindow, TimeIntervalWindow, TumblingWindow
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import arrow
from krishiv_py.stateful.grouping import canonical, group_ids
from krishiv_py.stateful.state import NEWEST, KernelSpec

__all__ = ["MERGED_FUTURE", "MERGED_ROWS", "on_time_rows", "pane_starts", "premerge", "premergeable"]


def premergeable(spec: KernelSpec) -> bool:
    """Whether rows of ``spec``'s windows may be merged per key and pane before the operator."""
    w = spec.window
    if spec.trigger.element_count or (spec.ttl_ms is not None and spec.ttl_time == "processing"):
        return False
    if isinstance(w, TumblingWindow):
        return True
    return isinstance(w, SlidingWindow | TimeIntervalWindow) and w.size_ms % w.slide_ms == 0


def pane_starts(spec: KernelSpec, ts_ms: np.ndarray) -> np.ndarray:
    """The start of each event time's pane: rows of one pane belong to the same windows."""
    w = spec.window
    out: np.ndarray
    if isinstance(w, TumblingWindow):
        out = ts_ms - ((ts_ms - w.offset_ms) % w.size_ms)
    else:
        assert isinstance(w, SlidingWindow | TimeIntervalWindow)
        # (krishiv_py.stateful.kernel.assign_fixed assigns a sliding window's rows from the slide.)
        out = ts_ms - ts_ms % w.slide_ms
    return out


def on_time_rows(spec: KernelSpec, ts_us: pa.Array[Any], watermark_ms: int | None) -> np.ndarray:
    """Which rows (by event time, µs; null: invalid) :func:`premerge` merges under ``watermark_ms``."""
    valid = np.asarray(pc.is_valid(ts_us).to_numpy(zero_copy_only=False), bool)
    if watermark_ms is None:
        return valid
    ts = np.asarray(ts_us.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    on_time = valid & (ts >= watermark_ms * 1000)
    if spec.ttl_ms is not None:  # a row already the TTL behind the watermark is very late
        on_time &= ts > (watermark_ms - spec.ttl_ms) * 1000
    return on_time


def premerge(spec: KernelSpec, rows: pa.Table, watermark_ms: int | None) -> tuple[pa.Table, pa.Table | None]:
    """Split ``rows`` (a kernel batch) into the rows the operator must see and merged partials.

    ``watermark_ms`` is the micro-batch's watermark as the operator will see
    it (``None``: none yet, every valid row is on time). The merged table
    has the key columns, ``__kp_ts`` (an event time of the pane, µs), the
    partial columns, :data:`MERGED_ROWS`, :data:`MERGED_FUTURE` and, with an
    event-time state TTL, the newest event time (µs); ``None`` when no row
    was merged.
    """
    if not premergeable(spec):
        raise ValueError(f"rows of {spec.window!r} with trigger {spec.trigger.describe()} are not merged")
    if not rows.num_rows:
        return rows, None
    ts_col = rows.column(BATCH_TS).combine_chunks()
    ts = np.asarray(ts_col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    on_time = on_time_rows(spec, ts_col, watermark_ms)
    idx = np.flatnonzero(on_time)
    if not len(idx):
        return rows, None
    rest = rows.filter(pa.array(~on_time)) if len(idx) < rows.num_rows else rows.slice(0, 0)
    taken = rows.take(arrow(idx))
    ts_on = ts[idx]
    seq = np.asarray(taken.column(SEQ).to_numpy(), np.int64)
    panes = pane_starts(spec, np.floor_divide(ts_on, 1000))
    keys = [canonical(taken.column(name)) for name in spec.keys]
    gid, n_groups, first = group_ids([*keys, pa.array(panes)])
    cols: dict[str, pa.Array[Any]] = {
        name: taken.column(name).combine_chunks().take(arrow(first)) for name in spec.keys
    }
    cols[BATCH_TS] = pa.array(ts_on[first])
    cols |= agg.merge(spec.aggs, agg.row_partials(spec.aggs, taken, ts_on, seq), gid, n_groups)
    cols[MERGED_ROWS] = pa.array(np.bincount(gid, minlength=n_groups).astype(np.int64))
    future = np.zeros(len(idx), np.int64)
    if watermark_ms is not None:
        future = (ts_on > (watermark_ms + spec.future_tolerance_ms) * 1000).astype(np.int64)
    cols[MERGED_FUTURE] = pa.array(np.bincount(gid, weights=future, minlength=n_groups).astype(np.int64))
    if spec.ttl_ms is not None:
        newest = np.full(n_groups, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(newest, gid, ts_on)
        cols[NEWEST] = pa.array(newest)
    return rest, pa.table(cols)
