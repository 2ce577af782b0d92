"""Per-event sliding windows (Kafka Streams ``SlidingWindows``, KIP-450) in the kernel.

A window ``[s, s + size]`` (both ends inclusive) is a state row with
``__ws = s`` and ``__we = s + size + 1 + grace`` (µs): the watermark that
*closes* it, when it fires (``Trigger.on_watermark()``) and stops taking
rows. Kafka builds windows record by record — updating the windows that
contain a record, creating the previous record's right window and the
record's left window, copying the right window from the newest window
after it — so one micro-batch of a key is replayed in arrival order here.
The replay only moves window *contents* around as ``(stored window, batch
rows)`` pairs; the partial aggregates of every window that changed are then
built in one vectorized merge (:func:`~krishiv_py.stateful.aggregates.merge`).

The rules, with ``close = W - grace`` for the batch's watermark ``W``:

- a row with ``t + size < close`` is very late; a row whose windows are all
  closed is very late too;
- ``t < size`` (early rows) share ``[0, size]``, which they update last;
- otherwise the windows starting in ``[t - 2 size, t + 1]`` are visited
  newest first (see :func:`_replay_regular`); only windows with
  ``end >= close`` are updated or created, except the row's own right
  window, which is a copy of the newest later window.

Closed windows stay in state, unchanged, while a later row could still
look them up (their start is within ``grace + 3 size`` of the watermark).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.plan.windows import EventSlidingWindow
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import arrow
from krishiv_py.stateful.grouping import canonical
from krishiv_py.stateful.state import (
    EMITTED,
    FIRED,
    LAST,
    MAXTS,
    PENDING,
    ROWS,
    WE,
    WS,
    KernelSpec,
    key_ids,
)

__all__ = ["add_event_sliding", "lookup_horizon_ms"]


@attrs.define
class _Content:
    """A window's contents: a stored window's accumulator (``base``) plus batch rows."""

    base: int | None  # state row index
    rows: list[int]
    maxts: int  # ms
    changed: bool = False


def lookup_horizon_ms(window: EventSlidingWindow, watermark_ms: int) -> int:
    """Windows starting before this can no longer be looked up by a row that is not very late."""
    return watermark_ms - window.grace_ms - 3 * window.size_ms


def add_event_sliding(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
) -> tuple[pa.Table, np.ndarray]:
    """Add ``batch`` to the windows in ``state``; returns the new state and which rows joined a window."""
    window = spec.window
    assert isinstance(window, EventSlidingWindow)
    size, grace = window.size_ms, window.grace_ms
    close = None if w_us is None else w_us // 1000 - grace
    kept = np.zeros(len(ts), bool)
    rows = np.flatnonzero(valid)
    if not len(rows):
        return state, kept
    t_ms = np.floor_divide(ts, 1000)
    kid_state, kid_rows = key_ids(spec, state, batch.take(arrow(rows)))
    starts = state.column(WS).to_numpy() // 1000
    maxts = state.column(MAXTS).to_numpy() // 1000 if state.num_rows else np.zeros(0, np.int64)
    by_key: dict[int, dict[int, _Content]] = {}
    originals: list[tuple[int, int, int, _Content]] = []  # state row, key, start, contents
    for key in np.unique(kid_rows).tolist():
        by_key[key] = {}
        for i in np.flatnonzero(kid_state == key).tolist():
            content = _Content(base=i, rows=[], maxts=int(maxts[i]))
            by_key[key][int(starts[i])] = content
            originals.append((i, key, int(starts[i]), content))
    rep = {int(key): int(rows[j]) for j, key in reversed(list(enumerate(kid_rows.tolist())))}
    order = np.argsort(seq[rows], kind="stable")
    for j in order.tolist():
        r = int(rows[j])
        wins = by_key[int(kid_rows[j])]
        t = int(t_ms[r])
        if close is not None and t + size < close:
            continue
        replay = _replay_early if t < size else _replay_regular
        kept[r] = replay(wins, r, t, size, lambda s: close is None or s + size >= close)
    keep = np.ones(state.num_rows, bool)
    updated: set[int] = set()  # stored windows that took rows (not replaced): they keep their firing state
    for i, key, start, content in originals:  # a stored window that changed or was replaced is rebuilt
        same = by_key[key].get(start) is content
        keep[i] = same and not content.changed
        if same and content.changed:
            updated.add(id(content))
    return _rebuild(spec, state.filter(pa.array(keep)), state, batch, ts, seq, by_key, rep, updated), kept


def _add(content: _Content, r: int, t: int) -> None:
    content.rows.append(r)
    content.maxts = max(content.maxts, t)
    content.changed = True


def _fresh(base: _Content | None, r: int, t: int) -> _Content:
    out = _Content(base=None, rows=[], maxts=t, changed=True)
    if base is not None:
        out.base, out.rows, out.maxts = base.base, list(base.rows), max(base.maxts, t)
    out.rows.append(r)
    return out


def _replay_regular(wins: dict[int, _Content], r: int, t: int, size: int, is_open: Any) -> bool:
    """One row at ``t >= size``, as Kafka's ``processReverse`` + ``createWindows``."""
    joined = False
    right: _Content | None = None
    left_exists = right_exists = False
    prev: int | None = None
    left_base: _Content | None = None
    visited = sorted((s for s in wins if max(0, t - 2 * size) <= s <= t + 1), reverse=True)
    for s in visited:
        c, end = wins[s], s + size
        if s == t + 1:
            right_exists = True
        elif end > t:
            if right is None:
                right = _Content(base=c.base, rows=list(c.rows), maxts=c.maxts, changed=True)
            if is_open(s):
                _add(c, r, t)
                joined = True
        elif end == t:
            left_exists = True
            newest = c.maxts
            if is_open(s):
                _add(c, r, t)
                joined = True
            if newest < t:
                prev = newest
            else:
                return joined  # a row at t was here already: nothing is created
        else:
            left_base, prev = c, c.maxts
            break
    if prev is not None and prev + 1 not in visited and prev + 1 + size >= t and is_open(prev + 1):
        wins[prev + 1] = _fresh(None, r, t)
        joined = True
    if not left_exists and is_open(t - size):
        base = left_base if prev is not None and t - size <= prev else None
        wins[t - size] = _fresh(base, r, t)
        joined = True
    if not right_exists and right is not None and right.maxts > t:
        wins[t + 1] = right
    return joined


def _replay_early(wins: dict[int, _Content], r: int, t: int, size: int, is_open: Any) -> bool:
    """One row at ``0 <= t < size``, as Kafka's ``processEarly``."""
    joined = False
    combined = wins.get(0)
    prev = combined.maxts if combined is not None and combined.maxts < t else None
    right: _Content | None = None
    right_exists = False
    for s in sorted(s for s in wins if 0 < s <= t + 1):
        c = wins[s]
        if s == t + 1:
            right_exists = True
            continue
        right = _Content(base=c.base, rows=list(c.rows), maxts=c.maxts, changed=True)
        if is_open(s):
            _add(c, r, t)
            joined = True
    if right is None and combined is not None and combined.maxts > t:
        right = _Content(base=combined.base, rows=list(combined.rows), maxts=combined.maxts, changed=True)
    if not right_exists and right is not None and right.maxts > t:
        wins[t + 1] = right
    if prev is not None and prev + 1 not in wins and is_open(prev + 1):
        wins[prev + 1] = _fresh(None, r, t)
        joined = True
    if is_open(0):
        if combined is None:
            wins[0] = _fresh(None, r, t)
        else:
            _add(combined, r, t)
        joined = True
    return joined


def _rebuild(
    spec: KernelSpec,
    kept_state: pa.Table,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    by_key: dict[int, dict[int, _Content]],
    rep: dict[int, int],
    updated: set[int],
) -> pa.Table:
    """``kept_state`` plus every changed window, its accumulator rebuilt in one merge.

    Contents refer to rows of the step's ``state``; ``rep`` maps a key id to a
    batch row of that key (where its key values come from). A stored window
    that took rows (its content's id in ``updated``) keeps when it last fired
    and whether it emitted; a new window (a copy included) starts afresh.
    """
    window = spec.window
    assert isinstance(window, EventSlidingWindow)
    changed = [(key, start, c) for key, wins in by_key.items() for start, c in wins.items() if c.changed]
    if not changed:
        return kept_state
    ids: list[int] = []
    src_state: list[int] = []
    ids_rows: list[int] = []
    src_rows: list[int] = []
    for g, (_, _, c) in enumerate(changed):
        if c.base is not None:
            ids.append(g)
            src_state.append(c.base)
        ids_rows += [g] * len(c.rows)
        src_rows += c.rows
    names = [f.name for f in agg.partial_schema(spec.aggs)]
    stored = state.take(arrow(np.asarray(src_state, np.int64)))
    take = np.asarray(src_rows, np.int64)
    row_parts = agg.row_partials(spec.aggs, batch.take(arrow(take)), ts[take], seq[take])
    parts = {
        n: pa.concat_arrays(
            [stored.column(n).combine_chunks(), row_parts[n].cast(state.schema.field(n).type)]
        )
        for n in names
    }
    merged = agg.merge(spec.aggs, parts, np.asarray(ids + ids_rows, np.int64), len(changed))
    n = len(changed)
    reps = np.asarray([rep[key] for key, _, _ in changed], np.int64)
    cols: dict[str, Any] = {
        name: canonical(batch.column(column).combine_chunks()).take(arrow(reps))
        for name, column in zip(spec.key_names(), spec.keys, strict=True)
    }
    starts_ms = np.asarray([s for _, s, _ in changed], np.int64)
    cols[WS] = pa.array(starts_ms * 1000)
    cols[WE] = pa.array((starts_ms + window.size_ms + 1 + window.grace_ms) * 1000)
    same = np.asarray([id(c) in updated for _, _, c in changed], bool)
    rows_of = np.asarray([c.base if id(c) in updated else 0 for _, _, c in changed], np.int64)
    held = state.take(arrow(rows_of)) if state.num_rows else None

    def carried(name: str, fresh: np.ndarray) -> pa.Array[Any]:
        values = fresh
        if held is not None and same.any():
            old = np.asarray(held.column(name).combine_chunks().to_numpy(zero_copy_only=False))
            values = np.where(same, old, fresh)
        out: pa.Array[Any] = pa.array(values)
        return out

    cols[FIRED] = carried(FIRED, np.zeros(n, bool))
    added = np.asarray([len(c.rows) for _, _, c in changed], np.int64)
    if ROWS in state.schema.names:
        # Rows a window holds: a stored window's count plus its new rows; a new window
        # (a copy included) holds its base's rows and the rows added to it. Pending: the
        # rows since its last firing, all of them for a new window.
        bases = np.asarray([-1 if c.base is None else c.base for _, _, c in changed], np.int64)
        counts = state.column(ROWS).to_numpy() if state.num_rows else np.zeros(0, np.int64)
        held_rows = np.where(bases >= 0, counts[np.maximum(bases, 0)] if len(counts) else 0, 0) + added
        cols[ROWS] = pa.array(held_rows)
        before = carried(PENDING, np.zeros(n, np.int64)).to_numpy(zero_copy_only=False)
        cols[PENDING] = pa.array(np.where(same, before + added, held_rows))
    else:
        cols[PENDING] = pa.array(np.ones(n, np.int64))
    cols[LAST] = carried(LAST, np.full(n, -1, np.int64))
    cols[EMITTED] = carried(EMITTED, np.zeros(n, bool))
    cols |= merged
    cols[MAXTS] = pa.array(np.asarray([c.maxts for _, _, c in changed], np.int64) * 1000)
    table = pa.table(cols)
    for f in state.schema:
        if f.name not in cols:
            table = table.append_column(f, pa.nulls(n, f.type))
    new = table.select(state.schema.names).cast(state.schema)
    return pa.concat_tables([kept_state, new])
