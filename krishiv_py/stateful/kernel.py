"""The stateful kernel: one micro-batch of one key bucket, vectorized.

``step(spec, state, batch, watermark_ms, now_ms) -> (state, StepOutput)`` is
a pure function. ``state`` is an Arrow table with one row per open window
(or session) of the bucket: the key columns ``k0, k1, ...``, the bounds
``__ws``/``__we`` (µs), the firing bookkeeping and the partial aggregates
of :mod:`~krishiv_py.stateful.aggregates` — or, for sliding windows that
fire once each (:func:`pane_state`), one row per key and pane
(:mod:`~krishiv_py.stateful.pane_layout`). The batch is an Arrow table of
input rows with ``__kp_ts`` (event time in µs; null when invalid) and
``__kp_seq`` (arrival order).

What one step does, with ``W`` the watermark that applies to the batch
(SPEC 3.5-3.7; the rules are in :mod:`krishiv_py.plan.emission`):

1. **Classify** every row: invalid (no valid event time), very late (no
   retained window; for sessions, the session it would merge into is not
   retained), mildly late (``ts < W``) or on time; future rows
   (``ts > W + future_tolerance``) are counted as well.
2. **Add** the kept rows to their windows: per-row partials merged into the
   stored accumulators by (key, window) — sessions are merged by a sweep
   over the key's stored sessions and new proto-windows sorted by start.
3. **Fire** (:func:`phase`): element-count firings as rows arrive, then at
   the end of the batch the final firing of every window with ``end <= W``,
   a late firing of windows updated after it, and interval firings; then
   **evict** windows with ``W >= end + allowed_lateness``.

The Spark operator calls ``step`` once per bucket and micro-batch, and once
more with an empty batch (a "tick") after a micro-batch moved the
watermark, which is when windows whose end it passed fire.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> spec = KernelSpec(keys=(), window=TumblingWindow(size_ms=10),
...     aggs=(AggSpec(name="n", func="count", column=None, out_type=pa.int64()),))
>>> batch = pa.table({"__kp_ts": [3_000, 12_000], "__kp_seq": [0, 1]})
>>> state, out = step(spec, None, batch, None, 0)
>>> state, out = step(spec, state, batch.slice(0, 0), 12, 0)
>>> out.results.to_pylist()
[{'window_start': 0, 'window_end': 10000, 'n': 1}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, RESULT_ARITH, RESULT_KIND, SEQ
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    SlidingWindow,
    TimeIntervalWindow,
    TumblingWindow,
)
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import Column, HashAggregation, arrow, replaced, table_of
from krishiv_py.stateful.elements import ElementPatch, element_firings
from krishiv_py.stateful.event_sliding import add_event_sliding, lookup_horizon_ms
from krishiv_py.stateful.grouping import canonical, first_rows, group_ids
from krishiv_py.stateful.pane_layout import add_panes, fire_panes, pane_fields, uses_panes
from krishiv_py.stateful.premerge import MERGED_FUTURE, MERGED_ROWS, premergeable
from krishiv_py.stateful.sessions import capped_groups, kept_session_rows, sweep_sessions
from krishiv_py.stateful.state import (
    EMITTED,
    FIRED,
    FIRST,
    LAST,
    MAXTS,
    NEWEST,
    PENDING,
    ROWS,
    SEALED,
    WE,
    WS,
    KernelSpec,
    key_ids,
    result_table,
    retract_rows,
)

__all__ = ["KernelSpec", "StepOutput", "arrivals", "pane_state", "phase", "step"]


@attrs.frozen(kw_only=True)
class StepOutput:
    """What one step emits: result rows, late/invalid row indices into the batch, counts."""

    results: pa.Table
    very_late: np.ndarray
    invalid: np.ndarray
    on_time: int = 0
    mildly_late: int = 0
    future: int = 0
    #: With ``pane_events``: the windows this step evicted, with their final aggregates.
    closed: pa.Table | None = None
    #: Windows removed by the state TTL.
    expired: int = 0
    #: Emitted aggregates without a value (an integer sum beyond a bigint).
    arithmetic_errors: int = 0

    @property
    def emitted(self) -> int:
        if RESULT_KIND not in self.results.column_names:
            return self.results.num_rows
        emits = pc.equal(self.results.column(RESULT_KIND), pa.scalar("emit"))
        # Arrow's sum counts the true values of a boolean array; the stubs take numbers only.
        return int(pc.sum(emits).as_py() or 0)  # type: ignore[type-var]

    @property
    def retracted(self) -> int:
        return self.results.num_rows - self.emitted


def arrivals(batch: pa.Table, watermark_ms: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``batch``: whether it has an event time, and whether that is behind ``watermark_ms``."""
    ts_col = batch.column(BATCH_TS).combine_chunks() if batch.num_rows else pa.array([], pa.int64())
    valid = np.asarray(pc.is_valid(ts_col).to_numpy(zero_copy_only=False), bool)
    ts = np.asarray(ts_col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    return valid, valid & (watermark_ms is not None) & (ts < (watermark_ms or 0) * 1000)


def step(
    spec: KernelSpec,
    state: pa.Table | None,
    batch: pa.Table,
    watermark_ms: int | None,
    now_ms: int,
    *,
    merged: pa.Table | None = None,
) -> tuple[pa.Table, StepOutput]:
    """Add ``batch`` to ``state`` under watermark ``watermark_ms``, fire, evict.

    ``merged``: on-time rows merged per key and pane before the step, under
    the same watermark (:func:`~krishiv_py.stateful.premerge.premerge`); they
    join their windows with ``batch``'s rows.
    """
    if merged is not None and not premergeable(spec):
        raise ValueError("merged partials given for windows whose rows are not merged")
    if state is None or (not state.num_rows and pane_state(spec)):
        # A new state takes the spec's layout; a stored one keeps its own (an older checkpoint's windows).
        state = empty_state(spec, batch)
    elif uses_panes(state) and not pane_state(spec):
        raise ValueError(f"a state of panes given for windows that keep one row per window: {spec!r}")
    if spec.ttl_ms is not None and spec.ttl_time == "processing":
        # A window's last update is the processing time of the step that added a row to it.
        batch = batch.append_column(NEWEST, pa.array(np.full(batch.num_rows, now_ms * 1000, np.int64)))
    ts_col: pa.Array[Any] = (
        batch.column(BATCH_TS).combine_chunks() if batch.num_rows else pa.array([], pa.int64())
    )
    valid = pc.is_valid(ts_col).to_numpy(zero_copy_only=False)
    ts = ts_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    seq = batch.column(SEQ).to_numpy().astype(np.int64) if batch.num_rows else np.zeros(0, np.int64)
    w_us = None if watermark_ms is None else watermark_ms * 1000
    early: list[pa.Table] = []
    closed: list[pa.Table] | None = [] if spec.pane_events else None
    expired: list[int] = []
    if (watermark_ms is not None or spec.ttl_ms is not None) and state.num_rows:
        # What this watermark (or a processing-time TTL) made due before the batch: normally
        # a tick already fired it; when micro-batches follow each other before the tick
        # arrives, it fires here, so late rows meet the state the specification says they meet.
        state, due = phase(spec, state, watermark_ms, now_ms, interval=False, closed=closed, expired=expired)
        if due.num_rows:
            early.append(due)
    if isinstance(spec.window, EventSlidingWindow):
        valid &= ts >= 0  # no windows before the epoch (Kafka's rule)
        state, kept = add_event_sliding(spec, state, batch, ts, seq, valid, w_us)
        very_late = valid & ~kept
    else:
        # With a state TTL, a row already ``ttl`` behind the watermark would expire at once: very late.
        fresh = valid
        if spec.ttl_ms is not None and spec.ttl_time == "event" and watermark_ms is not None:
            fresh = valid & (ts > (watermark_ms - spec.ttl_ms) * 1000)
        if isinstance(spec.window, SessionWindow):
            state, kept, _ = _add_sessions(spec, state, batch, ts, seq, fresh, w_us, early, now_ms)
        else:
            state, kept, _ = _add_fixed(spec, state, batch, ts, seq, fresh, w_us, early, merged)
        very_late = valid & ~kept
    state, fired = phase(spec, state, watermark_ms, now_ms, closed=closed, expired=expired)
    mild = kept & (w_us is not None) & (ts < (w_us or 0))
    future = (
        valid & (watermark_ms is not None) & (ts > ((watermark_ms or 0) + spec.future_tolerance_ms) * 1000)
    )
    results, errors = _without_errors(pa.concat_tables([*early, fired]) if early else fired)
    merged_rows = merged_future = 0
    if merged is not None and merged.num_rows:
        merged_rows = int(np.sum(merged.column(MERGED_ROWS).to_numpy()))
        merged_future = int(np.sum(merged.column(MERGED_FUTURE).to_numpy()))
    return state, StepOutput(
        results=results,
        arithmetic_errors=errors,
        very_late=np.flatnonzero(very_late),
        invalid=np.flatnonzero(~valid),
        on_time=int((kept & ~mild).sum()) + merged_rows,
        mildly_late=int(mild.sum()),
        future=int(future.sum()) + merged_future,
        closed=None if closed is None else _closed_table(spec, state, closed),
        expired=sum(expired),
    )


# --- state layout -------------------------------------------------------------


def state_fields(spec: KernelSpec, key_types: Sequence[pa.DataType]) -> list[pa.Field[Any]]:
    """The columns of a new state of ``spec``: one row per key and pane with :func:`pane_state`."""
    if pane_state(spec):
        return pane_fields(spec, key_types)
    fields = [pa.field(k, t) for k, t in zip(spec.key_names(), key_types, strict=True)]
    fields += [
        pa.field(WS, pa.int64()),
        pa.field(WE, pa.int64()),
        pa.field(FIRED, pa.bool_()),
        pa.field(PENDING, pa.int64()),
        pa.field(LAST, pa.int64()),
        pa.field(EMITTED, pa.bool_()),
    ]
    fields += agg.partial_schema(spec.aggs)
    if spec.capped:
        fields.append(pa.field(SEALED, pa.bool_()))
    if spec.ttl_ms is not None:
        fields.append(pa.field(NEWEST, pa.int64()))
    if isinstance(spec.window, EventSlidingWindow):
        fields.append(pa.field(MAXTS, pa.int64()))
        if spec.trigger.kind == "count":
            fields.append(pa.field(ROWS, pa.int64()))
    if spec.retracting:
        fields += [pa.field("__r_ws", pa.int64()), pa.field("__r_we", pa.int64())]
        fields += [pa.field(f"__r_{i}", a.out_type) for i, a in enumerate(spec.aggs)]
    return fields


def empty_state(spec: KernelSpec, batch: pa.Table) -> pa.Table:
    key_types = [batch.schema.field(k).type for k in spec.keys]
    return pa.schema(state_fields(spec, key_types)).empty_table()


def _new_windows(
    spec: KernelSpec,
    rows: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    schema: pa.Schema,
) -> pa.Table:
    """One state row per (kept row, window): its own partial, pending 1."""
    newest = None
    if spec.ttl_ms is not None:
        stamp = rows.column(NEWEST) if NEWEST in rows.column_names else None
        newest = pa.array(np.asarray(ts, np.int64)) if stamp is None else stamp.combine_chunks()
    partials = agg.row_partials(spec.aggs, rows, ts, seq)
    return _window_rows(spec, rows, ws, we, partials, np.ones(rows.num_rows, np.int64), newest, schema)


def _window_rows(
    spec: KernelSpec,
    rows: pa.Table,
    ws: np.ndarray,
    we: np.ndarray,
    partials: dict[str, pa.Array[Any]],
    pending: np.ndarray,
    newest: pa.Array[Any] | None,
    schema: pa.Schema,
) -> pa.Table:
    """State rows of new windows: keys from ``rows``, bounds, ``partials``, never fired."""
    n = rows.num_rows
    cols: dict[str, pa.Array[Any]] = {
        k: canonical(rows.column(name)) for k, name in zip(spec.key_names(), spec.keys, strict=True)
    }
    cols |= {
        WS: pa.array(ws),
        WE: pa.array(we),
        FIRED: pa.array(np.zeros(n, bool)),
        PENDING: pa.array(pending),
        LAST: pa.array(np.full(n, -1, np.int64)),
        EMITTED: pa.array(np.zeros(n, bool)),
    }
    if newest is not None:
        cols[NEWEST] = newest
    cols |= partials
    table = pa.table(cols)
    for f in schema:
        if f.name not in cols:
            table = table.append_column(f, pa.nulls(n, f.type))
    return table.select(schema.names).cast(schema)


# --- tumbling and sliding windows ------------------------------------------------


def assign_fixed(
    window: TumblingWindow | SlidingWindow | TimeIntervalWindow, ts_ms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(row index, window start ms) for every window of every row, vectorized."""
    size, slide = window.size_ms, window.slide_ms
    if isinstance(window, TumblingWindow):
        return np.arange(len(ts_ms)), ts_ms - ((ts_ms - window.offset_ms) % size)
    k = -(-size // slide)
    rows = np.repeat(np.arange(len(ts_ms)), k)
    last = np.repeat(ts_ms - ts_ms % slide, k)
    starts = last - np.tile(np.arange(k, dtype=np.int64), len(ts_ms)) * slide
    inside = starts > np.repeat(ts_ms, k) - size
    return rows[inside], starts[inside]


def _add_fixed(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
    early: list[pa.Table],
    merged: pa.Table | None = None,
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    assert not isinstance(spec.window, SessionWindow | EventSlidingWindow)
    idx = np.flatnonzero(valid)
    if uses_panes(state):
        state, kept = add_panes(spec, state, batch, ts, seq, idx, w_us, merged)
        return state, kept, valid & ~kept
    if by_pane(spec):
        return _add_fixed_by_pane(spec, state, batch, ts, seq, idx, w_us, early, merged)
    rows, starts = assign_fixed(spec.window, np.floor_divide(ts[idx], 1000))
    rows = idx[rows]
    ends = starts + spec.window.size_ms
    retained = np.ones(len(rows), bool) if w_us is None else (w_us < (ends + spec.allowed_lateness_ms) * 1000)
    kept = np.zeros(len(ts), bool)
    kept[rows[retained]] = True
    rows, starts, ends = rows[retained], starts[retained], ends[retained]
    parts = [] if merged is None or not merged.num_rows else [_merged_windows(spec, merged, state.schema)]
    if len(rows):
        order = np.argsort(seq[rows], kind="stable")  # arrival order within each window
        rows, starts, ends = rows[order], starts[order], ends[order]
        parts.insert(
            0,
            _new_windows(
                spec, batch.take(arrow(rows)), ts[rows], seq[rows], starts * 1000, ends * 1000, state.schema
            ),
        )
    state = _merge_windows(spec, state, parts, early)
    return state, kept, valid & ~kept


def by_pane(spec: KernelSpec) -> bool:
    """Whether a batch's rows go into sliding windows as one partial per key and pane.

    A pane is the slide-sized interval a row's event time falls in. When the
    slide divides the size, every row of a pane belongs to the same windows,
    so the rows of one key and pane can be merged first and the merged
    partial copied into each window: ``size / slide`` copies per key and
    pane instead of per row. Element-count triggers count rows one by one
    as they arrive, so they keep the per-row path.
    """
    w = spec.window
    if isinstance(w, TumblingWindow | SessionWindow | EventSlidingWindow):
        return False
    return w.size_ms % w.slide_ms == 0 and w.size_ms > w.slide_ms and not spec.trigger.element_count


def pane_state(spec: KernelSpec) -> bool:
    """Whether a new state of ``spec`` keeps one row per key and pane, not per window.

    For sliding windows merged per pane (:func:`by_pane`) that each fire
    exactly once, at the watermark, with the plain result: the default
    trigger, no allowed lateness, accumulating, no pane events and no state
    TTL. A window's aggregate is then the merge of its panes' partials when
    it fires (every aggregate's partials merge, see
    :func:`~krishiv_py.stateful.aggregates.merge`), so the state holds
    each pane once instead of once per window
    (:mod:`~krishiv_py.stateful.pane_layout`).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from krishiv_py.plan.windows import SlidingWindow
    >>> from krishiv_py.stateful.aggregates import AggSpec
    >>> spec = KernelSpec(keys=("k",), window=SlidingWindow(size_ms=600_000, slide_ms=10_000),
    ...     aggs=(AggSpec(name="n", func="count", column=None, out_type=pa.int64()),))
    >>> pane_state(spec), pane_state(attrs.evolve(spec, allowed_lateness_ms=1))
    (True, False)
    """
    return (
        by_pane(spec)
        and spec.trigger.kind == "watermark"
        and spec.allowed_lateness_ms == 0
        and spec.accumulation == "accumulating"
        and not spec.pane_events
        and spec.ttl_ms is None
    )


def _add_fixed_by_pane(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    idx: np.ndarray,
    w_us: int | None,
    early: list[pa.Table],
    merged: pa.Table | None = None,
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """:func:`_add_fixed` with the rows merged per key and pane first (see :func:`by_pane`)."""
    assert isinstance(spec.window, SlidingWindow | TimeIntervalWindow)
    kept = np.zeros(len(ts), bool)
    parts = [] if merged is None or not merged.num_rows else [_merged_windows(spec, merged, state.schema)]
    if not len(idx):
        return _merge_windows(spec, state, parts, early), kept, kept
    slide = spec.window.slide_ms
    ts_ms = np.floor_divide(ts[idx], 1000)
    pane = ts_ms - ts_ms % slide
    keys = [canonical(batch.column(name).take(arrow(idx))) for name in spec.keys]
    gid, n_groups, first = group_ids([*keys, pa.array(pane)])
    # Every row of a pane has the pane's windows: assign them once per group.
    groups, starts = assign_fixed(spec.window, ts_ms[first])
    ends = starts + spec.window.size_ms
    retained = np.ones(len(groups), bool)
    if w_us is not None:
        retained = w_us < (ends + spec.allowed_lateness_ms) * 1000
    group_kept = np.zeros(n_groups, bool)
    group_kept[groups[retained]] = True
    kept[idx[group_kept[gid]]] = True
    groups, starts, ends = groups[retained], starts[retained], ends[retained]
    if len(groups):
        rows = batch.take(arrow(idx))
        partials = agg.merge(spec.aggs, agg.row_partials(spec.aggs, rows, ts[idx], seq[idx]), gid, n_groups)
        newest = None
        if spec.ttl_ms is not None:
            if NEWEST in rows.column_names:  # processing time: one stamp for the whole batch
                newest = rows.column(NEWEST).combine_chunks().take(arrow(first[groups]))
            else:
                latest = np.full(n_groups, np.iinfo(np.int64).min, np.int64)
                np.maximum.at(latest, gid, ts[idx])
                newest = pa.array(latest[groups])
        take = arrow(groups)
        new = _window_rows(
            spec,
            rows.take(arrow(first[groups])),
            starts * 1000,
            ends * 1000,
            {name: arr.take(take) for name, arr in partials.items()},
            np.bincount(gid, minlength=n_groups)[groups].astype(np.int64),
            newest,
            state.schema,
        )
        parts.insert(0, new)
    state = _merge_windows(spec, state, parts, early)
    valid = np.zeros(len(ts), bool)
    valid[idx] = True
    return state, kept, valid & ~kept


def _merge_windows(
    spec: KernelSpec, state: pa.Table, parts: list[pa.Table], early: list[pa.Table]
) -> pa.Table:
    """``state`` with the new window rows of ``parts`` merged in (their firings into ``early``)."""
    if not parts:
        return state
    state, fired = _merge_new(
        spec, state, parts[0] if len(parts) == 1 else pa.concat_tables(parts), session=False
    )
    if fired is not None:
        early.append(fired)
    return state


def _merged_windows(spec: KernelSpec, merged: pa.Table, schema: pa.Schema) -> pa.Table:
    """State rows of the windows of merged partials (every window of each pane, all open)."""
    assert not isinstance(spec.window, SessionWindow | EventSlidingWindow)
    ts_ms = np.floor_divide(merged.column(BATCH_TS).to_numpy(), 1000)
    groups, starts = assign_fixed(spec.window, ts_ms)
    take = arrow(groups)
    partials = {
        f.name: merged.column(f.name).combine_chunks().take(take) for f in agg.partial_schema(spec.aggs)
    }
    newest = merged.column(NEWEST).combine_chunks().take(take) if spec.ttl_ms is not None else None
    pending = merged.column(MERGED_ROWS).to_numpy()[groups].astype(np.int64)
    ends = starts + spec.window.size_ms
    return _window_rows(
        spec, merged.take(take), starts * 1000, ends * 1000, partials, pending, newest, schema
    )


# --- session windows ---------------------------------------------------------------


def _add_sessions(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
    early: list[pa.Table],
    now_ms: int,
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    assert isinstance(spec.window, SessionWindow)
    gap = spec.window.gap_ms * 1000
    if spec.capped:
        kept = _kept_capped(spec, state, batch, ts, seq, valid, w_us)
    else:
        kept = kept_session_rows(spec, state, batch, ts, seq, valid, w_us, gap)
    rows = np.flatnonzero(kept)
    if len(rows):
        rows = rows[np.argsort(seq[rows], kind="stable")]
        new = _new_windows(
            spec, batch.take(arrow(rows)), ts[rows], seq[rows], ts[rows], ts[rows] + gap, state.schema
        )
        if spec.trigger.element_count:
            state = _merge_sessions_by_element(spec, state, new, now_ms, early)
        else:
            state, fired = _merge_new(spec, state, new, session=True)
            if fired is not None:
                early.append(fired)
    return state, kept, valid & ~kept


def _merge_sessions_by_element(
    spec: KernelSpec, state: pa.Table, new: pa.Table, now_ms: int, early: list[pa.Table]
) -> pa.Table:
    """Merge new session rows (in arrival order) one *round* at a time, firing by element count.

    Which session a row forms depends on the rows of its key that came before
    it, so round ``r`` merges the ``r``-th new row of every key at once and
    then fires each session whose pending count reached ``n``: one vectorized
    pass per round, as many rounds as the most rows one key has in the batch.
    Only the sessions of keys in the batch take part. A grown session has not
    emitted (its absorbed sessions were retracted at the merge), so a firing
    here never retracts; every stored session keeps fewer than ``n`` pending
    rows between firings. Capped sessions take a batch's rows in event-time
    order (then arrival order), as they do without element firings.
    """
    n = spec.trigger.element_count
    if spec.capped:  # a step's rows join capped sessions in event-time order, then arrival order
        new = new.take(arrow(np.argsort(new.column(WS).to_numpy(), kind="stable")))
    if spec.keys:
        both = pa.concat_tables([state.select(spec.key_names()), new.select(spec.key_names())])
        ids, _, _ = group_ids([both.column(k).combine_chunks() for k in spec.key_names()])
    else:
        ids = np.zeros(state.num_rows + new.num_rows, np.int64)
    kid_state, kid_new = ids[: state.num_rows], ids[state.num_rows :]
    touched = np.zeros(int(max(kid_state.max(initial=-1), kid_new.max(initial=-1))) + 1, bool)
    touched[kid_new] = True
    involved = touched[kid_state]
    rest = state.filter(pa.array(~involved))
    work = state.filter(pa.array(involved))
    order = np.argsort(kid_new, kind="stable")  # rows are in arrival order already
    ranks = np.empty(len(kid_new), np.int64)
    sorted_ids = kid_new[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_ids[1:] != sorted_ids[:-1]]))
    ranks[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    for r in range(int(ranks.max(initial=-1)) + 1):
        work, retracts = _merge_new(spec, work, new.filter(pa.array(ranks == r)), session=True)
        if retracts is not None:
            early.append(retracts)
        due = work.column(PENDING).to_numpy() >= n
        if due.any():
            fired, work = _fire(spec, work, due, now_ms)
            early.append(fired)
            work = replaced(work, PENDING, pc.if_else(pa.array(due), 0, work.column(PENDING)))
    return pa.concat_tables([rest, work.select(rest.schema.names).cast(rest.schema)])


def _kept_capped(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
) -> np.ndarray:
    """Which rows join a capped session (see :func:`~krishiv_py.stateful.sessions.capped_groups`)."""
    assert isinstance(spec.window, SessionWindow) and spec.window.max_duration_ms is not None
    rows = np.flatnonzero(valid)
    kid_state, kid_rows = key_ids(spec, state, batch.take(arrow(rows)))
    gap = spec.window.gap_ms * 1000
    n_state = state.num_rows
    _, _, kept_items, _ = capped_groups(
        np.concatenate([kid_state, kid_rows]),
        np.concatenate([state.column(WS).to_numpy(), ts[rows]]),
        np.concatenate([state.column(WE).to_numpy(), ts[rows] + gap]),
        np.concatenate([np.zeros(n_state, bool), np.ones(len(rows), bool)]),
        np.concatenate([_sealed(state), np.zeros(len(rows), bool)]),
        np.concatenate([np.zeros(n_state, np.int64), seq[rows]]),
        gap_us=gap,
        cap_us=spec.window.max_duration_ms * 1000,
        w_us=w_us,
        lateness_us=spec.allowed_lateness_ms * 1000,
    )
    kept = np.zeros(len(ts), bool)
    kept[rows[kept_items[n_state:]]] = True
    return kept


def _sealed(table: pa.Table) -> np.ndarray:
    column = table.column(SEALED).combine_chunks()
    filled: Any = pc.fill_null(column, pa.scalar(False))
    return np.asarray(filled.to_numpy(zero_copy_only=False), bool)


# --- merging new rows into state -------------------------------------------------------


def _merge_new(
    spec: KernelSpec, state: pa.Table, new: pa.Table, *, session: bool
) -> tuple[pa.Table, pa.Table | None]:
    """Merge the new per-row windows into ``state``; returns element/merge firings too."""
    key_names = spec.key_names()
    n_state = state.num_rows
    combined = pa.concat_tables([state, new])
    is_new = np.concatenate([np.zeros(n_state, bool), np.ones(new.num_rows, bool)])
    if key_names:
        kid, _, _ = group_ids([combined.column(k).combine_chunks() for k in key_names])
    else:
        kid = np.zeros(combined.num_rows, np.int64)
    # Only windows of keys in this batch take part; the rest of the state passes through.
    touched_keys = np.zeros(int(kid.max()) + 1 if len(kid) else 0, bool)
    touched_keys[kid[is_new]] = True
    involved = touched_keys[kid]
    passthrough = combined.filter(pa.array(~involved))
    work = combined.filter(pa.array(involved))
    work_new = is_new[involved]
    work_kid = kid[involved]
    ws = work.column(WS).to_numpy()
    we = work.column(WE).to_numpy()
    sealed = None
    if session and spec.capped:
        assert isinstance(spec.window, SessionWindow) and spec.window.max_duration_ms is not None
        ids, n_groups, _, sealed = capped_groups(
            work_kid,
            ws,
            we,
            work_new,
            _sealed(work),
            np.arange(len(ws)),  # new rows are in arrival order
            gap_us=spec.window.gap_ms * 1000,
            cap_us=spec.window.max_duration_ms * 1000,
            w_us=None,  # the rows were kept already
            lateness_us=0,
        )
    elif session:
        ids, n_groups = sweep_sessions(work_kid, ws, we, work_new)
    else:
        ids, n_groups, _ = group_ids([pa.array(work_kid), pa.array(ws)])
    fired_parts: list[pa.Table] = []
    patch = None
    if spec.trigger.element_count and not session:
        firing = element_firings(spec, work, ids, n_groups, work_new)
        if firing is not None:
            fired_parts.append(firing[0])
            patch = firing[1]
    merged, retracts = _merge_groups(spec, work, ids, n_groups, work_new, session=session)
    if sealed is not None:
        merged = merged.append_column(SEALED, pa.array(sealed))
    if retracts is not None:
        fired_parts.insert(0, retracts)
    if patch is not None:
        merged = _apply_patch(spec, merged, patch)
    out = pa.concat_tables([passthrough, merged.select(state.schema.names).cast(state.schema)])
    return out, (pa.concat_tables(fired_parts) if fired_parts else None)


def _apply_patch(spec: KernelSpec, merged: pa.Table, patch: ElementPatch) -> pa.Table:
    """Record element firings on the merged windows (pending, last result, open partials)."""
    fired = pa.array(patch.fired)
    merged = replaced(merged, PENDING, pc.if_else(fired, pa.array(patch.pending), merged.column(PENDING)))
    merged = replaced(merged, EMITTED, pc.or_(merged.column(EMITTED), fired))
    if spec.retracting:
        merged = replaced(merged, "__r_ws", pc.if_else(fired, patch.last_ws, merged.column("__r_ws")))
        merged = replaced(merged, "__r_we", pc.if_else(fired, patch.last_we, merged.column("__r_we")))
        for i, a in enumerate(spec.aggs):
            merged = replaced(
                merged, f"__r_{i}", pc.if_else(fired, patch.last_values[a.name], merged.column(f"__r_{i}"))
            )
    for name, arr in patch.open_partials.items():
        merged = replaced(merged, name, pc.if_else(fired, arr, merged.column(name)))
    return merged


def _merge_groups(
    spec: KernelSpec, work: pa.Table, ids: np.ndarray, n_groups: int, is_new: np.ndarray, *, session: bool
) -> tuple[pa.Table, pa.Table | None]:
    names = work.column_names
    parts = {f.name: work.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
    merged = agg.merge(spec.aggs, parts, ids, n_groups)
    meta_cols = [WS, WE, FIRED, PENDING, LAST, EMITTED]
    if spec.ttl_ms is not None:
        meta_cols.append(NEWEST)
    extra = [c for c in names if c.startswith("__r_")]
    table = table_of(
        {"g": ids, "__n": is_new.astype(np.int64), **{c: work.column(c) for c in [*meta_cols, *extra]}}
    )
    how: list[tuple[str, HashAggregation]] = [
        (WS, "min"),
        (WE, "max"),
        (FIRED, "any"),
        (PENDING, "sum"),
        (LAST, "max"),
        (EMITTED, "any"),
        ("__n", "sum"),
        *[(c, "first") for c in extra],
    ]
    if spec.ttl_ms is not None:
        how.append((NEWEST, "max"))
    g = table.group_by("g", use_threads=False).aggregate(how)
    g = g.take(arrow(np.argsort(g.column("g").to_numpy())))
    first = first_rows(ids, n_groups)
    cols: dict[str, Column] = {k: work.column(k).take(arrow(first)) for k in spec.key_names()}
    for c, h in how:
        if c != "__n":
            cols[c] = g.column(f"{c}_{h}").combine_chunks()
    cols |= merged
    retracts = None
    if session:
        grew = g.column("__n_sum").to_numpy() > 0
        if spec.retracting:
            absorbed = (~is_new) & grew[ids] & work.column(EMITTED).to_numpy(zero_copy_only=False)
            if absorbed.any():
                retracts = retract_rows(spec, work.filter(pa.array(absorbed)))
        # A session that took new rows is a new session: not fired, never emitted.
        cols[FIRED] = pc.and_(cols[FIRED], pa.array(~grew))
        cols[EMITTED] = pc.and_(cols[EMITTED], pa.array(~grew))
        cols[LAST] = pc.if_else(pa.array(grew), -1, cols[LAST])
    return table_of(cols), retracts


# --- firing ---------------------------------------------------------------------------------


def phase(
    spec: KernelSpec,
    state: pa.Table,
    watermark_ms: int | None,
    now_ms: int,
    *,
    interval: bool = True,
    closed: list[pa.Table] | None = None,
    expired: list[int] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Fire what ``watermark_ms`` (and processing time ``now_ms``) makes due, then evict.

    ``interval=False`` leaves ``on_interval`` firings out (only the watermark's work);
    ``closed`` receives the evicted windows (result-shaped) when given. A state of
    panes (:func:`pane_state`) fires the windows its panes make up.
    """
    if uses_panes(state):
        return fire_panes(spec, state, watermark_ms)
    n = state.num_rows
    we = state.column(WE).to_numpy()
    fired = state.column(FIRED).to_numpy(zero_copy_only=False)
    pending = state.column(PENDING).to_numpy()
    due = np.zeros(n, bool) if watermark_ms is None else we <= watermark_ms * 1000
    stale = np.zeros(n, bool)
    ttl_clock = watermark_ms if spec.ttl_time == "event" else now_ms
    if spec.ttl_ms is not None and ttl_clock is not None:
        newest = state.column(NEWEST).to_numpy(zero_copy_only=False)
        stale = ttl_clock * 1000 - newest >= spec.ttl_ms * 1000
        due |= stale  # an expired window that never fired fires now
    final = due & ~fired
    fire = final | (due & fired & (pending > 0))
    if interval and spec.trigger.kind == "interval":
        last = state.column(LAST).to_numpy()
        ready = (last < 0) | (now_ms - last >= spec.trigger.every)
        fire |= ~due & (pending > 0) & ready
    sliding = spec.window if isinstance(spec.window, EventSlidingWindow) else None
    if sliding is not None and spec.trigger.kind == "element":
        fire |= ~due & (pending > 0)  # every updated window, once per micro-batch
    if sliding is not None and spec.trigger.kind == "count":
        fire |= ~due & (pending >= spec.trigger.every)  # at most once per micro-batch, too
    emit = fire & (pending > 0) if spec.accumulation == "discarding" else fire
    results, state = _fire(spec, state, emit, now_ms)
    if spec.pane_events:
        results = results.append_column(FIRST, pa.array(final[emit]))
    if fire.any() or final.any():
        state = replaced(state, FIRED, pc.or_(state.column(FIRED), pa.array(final)))
        state = replaced(state, PENDING, pc.if_else(pa.array(fire), 0, state.column(PENDING)))
    if watermark_ms is not None or stale.any():
        alive = np.ones(n, bool)
        if watermark_ms is not None:
            alive = watermark_ms * 1000 < we + spec.allowed_lateness_ms * 1000
        if (
            sliding is not None and watermark_ms is not None
        ):  # closed windows stay while a row could look them up
            alive = state.column(WS).to_numpy() >= lookup_horizon_ms(sliding, watermark_ms) * 1000
        if stale.any():
            if expired is not None:
                expired.append(int((stale & alive).sum()))
            alive &= ~stale
        if not alive.all():
            if closed is not None:
                closed.append(_finals(spec, state.filter(pa.array(~alive))))
            state = state.filter(pa.array(alive))
    return state, results


def _finals(spec: KernelSpec, rows: pa.Table) -> pa.Table:
    """Result rows (keys, bounds, final aggregates) of the windows in ``rows``."""
    parts = {f.name: rows.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
    values = agg.finalize(spec.aggs, parts)
    return result_table(spec, rows, rows.column(WS), shown_end(spec, rows), values, "emit")


def _closed_table(spec: KernelSpec, state: pa.Table, closed: list[pa.Table]) -> pa.Table:
    table = pa.concat_tables(closed) if closed else _finals(spec, state.slice(0, 0))
    return _without_errors(table)[0]


def _fire(spec: KernelSpec, state: pa.Table, emit: np.ndarray, now_ms: int) -> tuple[pa.Table, pa.Table]:
    idx = np.flatnonzero(emit)
    rows = state.take(arrow(idx))
    parts = {f.name: rows.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
    values = agg.finalize(spec.aggs, parts)
    errors = agg.overflows(spec.aggs, parts)
    emits = result_table(spec, rows, rows.column(WS), shown_end(spec, rows), values, "emit", errors=errors)
    out = [emits]
    if spec.retracting:
        had = rows.column(EMITTED).to_numpy(zero_copy_only=False)
        if had.any():
            out.insert(0, retract_rows(spec, rows.filter(pa.array(had))))
        state = replaced(state, "__r_ws", _put(state.column("__r_ws"), idx, rows.column(WS)))
        state = replaced(state, "__r_we", _put(state.column("__r_we"), idx, rows.column(WE)))
        for i, a in enumerate(spec.aggs):
            state = replaced(state, f"__r_{i}", _put(state.column(f"__r_{i}"), idx, values[a.name]))
    if len(idx):
        state = replaced(state, EMITTED, pc.or_(state.column(EMITTED), pa.array(emit)))
        state = replaced(state, LAST, pc.if_else(pa.array(emit), now_ms, state.column(LAST)))
        if spec.accumulation == "discarding":
            parts_all = {f.name: state.column(f.name).combine_chunks() for f in agg.partial_schema(spec.aggs)}
            for name, arr in agg.reset(spec.aggs, parts_all, emit).items():
                state = replaced(state, name, arr)
    return pa.concat_tables(out), state


def shown_end(spec: KernelSpec, rows: pa.Table) -> Column:
    """The reported ``window_end`` (µs): the firing bound, or Kafka's inclusive end for sliding windows."""
    if isinstance(spec.window, EventSlidingWindow):
        out: Column = pc.add(rows.column(WS), pa.scalar(spec.window.size_ms * 1000))
        return out
    return rows.column(WE)


def _without_errors(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` without the :data:`~krishiv_py.names.RESULT_ARITH` column, and that column's total."""
    i = table.schema.get_field_index(RESULT_ARITH)
    if i < 0:
        return table, 0
    total = int(pc.sum(table.column(i)).as_py() or 0)
    return table.remove_column(i), total


def _put(target: pa.ChunkedArray[Any], idx: np.ndarray, values: Column) -> Column:
    """``target`` with ``values`` written at positions ``idx``."""
    if not len(idx):
        return target.combine_chunks()
    mask = np.zeros(len(target), bool)
    mask[idx] = True
    positions = np.cumsum(mask) - 1
    spread = values.take(arrow(np.where(mask, positions, 0)))
    out: Column = pc.if_else(pa.array(mask), spread, target)
    return out
