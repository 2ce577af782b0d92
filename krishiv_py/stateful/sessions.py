"""Session windows in the kernel: which late rows are kept, and the merge sweep.

A row's proto-window is ``[ts, ts + gap)``; windows of one key that touch or
overlap merge (SPEC 3.3). Lateness follows Flink's rule (SPEC 3.6): a late
row is kept when the session it forms after merging with the key's current
sessions — the stored ones and the rows of the batch that arrived before it —
is retained (``W < end + allowed_lateness``).

Most rows are decided without looking at any other row: a row whose own
proto-window is retained is kept whatever it merges with (merging only
extends a session). Only the rare rows whose proto-window alone is not
retained are resolved one by one, in arrival order.

Examples
--------
>>> import numpy as np
>>> ids, n = sweep_sessions(np.array([0, 0, 0]), np.array([0, 5, 30]), np.array([10, 15, 40]),
...                         np.array([True, True, True]))
>>> ids.tolist(), n
([0, 0, 1], 2)
"""

from __future__ import annotations

import attrs
import numpy as np
import pandas as pd
import pyarrow as pa

from krishiv_py.stateful.state import WE, WS, KernelSpec, key_ids

__all__ = ["capped_groups", "kept_session_rows", "sweep_sessions"]


def sweep_sessions(
    kid: np.ndarray, ws: np.ndarray, we: np.ndarray, is_new: np.ndarray
) -> tuple[np.ndarray, int]:
    """Session id of every window (stored sessions and new proto-windows) after merging."""
    order = np.lexsort((ws, kid))
    k, s, e = kid[order], ws[order], we[order]
    running = pd.Series(e).groupby(k).cummax().to_numpy()
    prev_end = np.concatenate([[np.iinfo(np.int64).min], running[:-1]])
    starts = np.concatenate([[True], k[1:] != k[:-1]]) | (s > prev_end)
    sorted_ids = np.cumsum(starts) - 1
    ids = np.empty(len(order), np.int64)
    ids[order] = sorted_ids
    return ids, int(sorted_ids[-1]) + 1 if len(order) else 0


def kept_session_rows(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
    gap_us: int,
) -> np.ndarray:
    """Which rows are added to a session (the others are very late or invalid)."""
    if w_us is None:
        return valid.copy()
    lateness = spec.allowed_lateness_ms * 1000
    kept = valid & (ts + gap_us + lateness > w_us)
    doubtful = np.flatnonzero(valid & ~kept)
    if not len(doubtful):
        return kept
    kid_state, kid_rows = key_ids(spec, state, batch)
    stored_ws = state.column(WS).to_numpy()
    stored_we = state.column(WE).to_numpy()
    for i in doubtful[np.argsort(seq[doubtful], kind="stable")]:
        mine = kid_state == kid_rows[i]
        earlier = kept & (kid_rows == kid_rows[i]) & (seq < seq[i])
        starts = np.concatenate([stored_ws[mine], ts[earlier], [ts[i]]])
        ends = np.concatenate([stored_we[mine], ts[earlier] + gap_us, [ts[i] + gap_us]])
        if w_us < _merged_end(starts, ends, ts[i]) + lateness:
            kept[i] = True
    return kept


def _merged_end(starts: np.ndarray, ends: np.ndarray, ts: int) -> int:
    """End of the merged session that contains the proto-window starting at ``ts``."""
    order = np.argsort(starts, kind="stable")
    lo: int | None = None
    hi: int | None = None
    for s, e in zip(starts[order].tolist(), ends[order].tolist(), strict=True):
        if hi is None or s > hi:
            if lo is not None and hi is not None and lo <= ts <= hi:
                return hi
            lo, hi = s, e
        else:
            hi = max(hi, e)
    assert hi is not None
    return hi


def capped_groups(
    kid: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    is_new: np.ndarray,
    sealed: np.ndarray,
    seq: np.ndarray,
    *,
    gap_us: int,
    cap_us: int,
    w_us: int | None,
    lateness_us: int,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Capped sessions: the session of every item, which new rows are kept, which sessions are sealed.

    Items are a key's stored sessions (``is_new`` False; ``sealed`` ones take
    no more rows) and the batch's rows (proto-windows ``[ts, ts + gap)``).
    Within a batch a key's rows are added in event-time order (ties in
    arrival order ``seq``): a row merges with the open sessions it touches
    when the merged session spans less than the cap, else it seals them and
    starts its own; a row whose resulting session is not retained
    (``W >= end + lateness``) is dropped and changes nothing.

    Vectorized where the cap cannot matter: the items are grouped as
    uncapped sessions first, and a group that spans less than the cap and
    has no row in doubt about lateness is one session. Only the other groups
    are resolved row by row.

    Returns ``(ids, n_groups, kept, group_sealed)``: ``ids[i] = -1`` for a
    dropped row; ``kept`` over the items (stored sessions are always kept).

    Examples
    --------
    >>> ids, n, kept, sealed = capped_groups(
    ...     np.zeros(4, np.int64), np.array([0, 2, 5, 7]), np.array([3, 5, 8, 10]),
    ...     np.ones(4, bool), np.zeros(4, bool), np.arange(4), gap_us=3, cap_us=6, w_us=None,
    ...     lateness_us=0)
    >>> ids.tolist(), n, sealed.tolist()
    ([0, 0, 0, 1], 2, [True, False])
    """
    n = len(kid)
    ids = np.full(n, -1, np.int64)
    kept = np.ones(n, bool)
    sealed_of: list[bool] = []
    # Sealed stored sessions stay as they are.
    for i in np.flatnonzero(sealed):
        ids[i] = len(sealed_of)
        sealed_of.append(True)
    open_idx = np.flatnonzero(~sealed)
    if not len(open_idx):
        return ids, len(sealed_of), kept, np.asarray(sealed_of, bool)
    cand, n_cand = sweep_sessions(kid[open_idx], ws[open_idx], we[open_idx], is_new[open_idx])
    first = np.full(n_cand, np.iinfo(np.int64).max)
    np.minimum.at(first, cand, ws[open_idx])
    last = np.full(n_cand, np.iinfo(np.int64).min)
    np.maximum.at(last, cand, we[open_idx] - gap_us)
    doubt = np.zeros(n, bool)
    if w_us is not None:
        doubt = is_new & (ws + gap_us + lateness_us <= w_us)
    in_doubt = np.zeros(n_cand, bool)
    np.logical_or.at(in_doubt, cand, doubt[open_idx])
    resolve = (last - first >= cap_us) | in_doubt
    # Groups the cap and lateness cannot split: one session each.
    simple = ~resolve[cand]
    base = len(sealed_of)
    renumber = np.cumsum(~resolve) - 1 + base
    ids[open_idx[simple]] = renumber[cand[simple]]
    sealed_of += [False] * int((~resolve).sum())
    # The groups to resolve, each as a slice of the open items sorted by (group, start, arrival).
    order = np.lexsort((seq[open_idx], ws[open_idx], cand))
    sorted_items, sorted_groups = open_idx[order], cand[order]
    bounds = np.searchsorted(sorted_groups, np.arange(n_cand + 1))
    limits = (gap_us, cap_us, w_us, lateness_us)
    for c in np.flatnonzero(resolve).tolist():
        members = sorted_items[bounds[c] : bounds[c + 1]]
        split = None if in_doubt[c] else _split_in_order(members, ws, we, is_new, gap_us, cap_us)
        for session, is_sealed in split or _resolve_capped(members, ws, we, is_new, seq, kept, limits):
            ids[session] = len(sealed_of)
            sealed_of.append(is_sealed)
    return ids, len(sealed_of), kept, np.asarray(sealed_of, bool)


def _split_in_order(
    members: np.ndarray, ws: np.ndarray, we: np.ndarray, is_new: np.ndarray, gap_us: int, cap_us: int
) -> list[tuple[list[int], bool]] | None:
    """The common case without a row-by-row replay: rows after (at most) one stored session.

    ``members`` are sorted by start. When every row comes at or after the
    stored session's last row, no row can meet a session other than the
    current one, so the group is cut wherever a row would make the current
    session span the cap: one ``searchsorted`` per session, not per row.
    Returns None when the group is not of this shape.
    """
    new = is_new[members]
    stored = members[~new]
    rows = members[new]
    if len(stored) > 1 or not len(rows):
        return None
    ts = ws[rows]
    if len(stored) and int(we[stored[0]]) - gap_us > int(ts[0]):
        return None
    out: list[tuple[list[int], bool]] = []
    items: list[int] = [int(stored[0])] if len(stored) else []
    first = int(ws[stored[0]]) if len(stored) else int(ts[0])
    i = 0
    while i < len(rows):
        j = int(np.searchsorted(ts, first + cap_us, side="left"))
        items += rows[i:j].tolist()
        if j >= len(rows):
            out.append((items, False))
            break
        out.append((items, True))  # row j touches it (one uncapped group) but would reach the cap
        items, first, i = [], int(ts[j]), j
    return out


@attrs.define
class _Capped:
    first: int
    last: int
    items: list[int]
    sealed: bool = False


def _resolve_capped(
    members: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    is_new: np.ndarray,
    seq: np.ndarray,
    kept: np.ndarray,
    limits: tuple[int, int, int | None, int],
) -> list[tuple[list[int], bool]]:
    """One uncapped group, row by row: its sessions (item indices) and whether each is sealed.

    ``limits`` is ``(gap_us, cap_us, w_us, lateness_us)``.
    """
    gap_us, cap_us, w_us, lateness_us = limits
    sessions = [_Capped(int(ws[i]), int(we[i]) - gap_us, [int(i)]) for i in members if not is_new[i]]
    rows = sorted((int(i) for i in members if is_new[i]), key=lambda i: (int(ws[i]), int(seq[i])))
    for r in rows:
        ts = int(ws[r])
        touched = [s for s in sessions if not s.sealed and ts <= s.last + gap_us and s.first <= ts + gap_us]
        lo = min([ts, *(s.first for s in touched)])
        hi = max([ts, *(s.last for s in touched)])
        merge = hi - lo < cap_us
        end = (hi if merge else ts) + gap_us
        if w_us is not None and w_us >= end + lateness_us:
            kept[r] = False
            continue
        if merge:
            items = [r, *(i for s in touched for i in s.items)]
            sessions = [s for s in sessions if not any(s is t for t in touched)]
            sessions.append(_Capped(lo, hi, items))
        else:
            for s in touched:
                s.sealed = True
            sessions.append(_Capped(ts, ts, [r]))
    return [(s.items, s.sealed) for s in sessions]
