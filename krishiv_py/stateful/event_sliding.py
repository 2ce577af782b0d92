"""Per-event sliding windows (Kafka Streams ``SlidingWindows``, KIP-450) in the kernel.

A window ``[s, s + size]`` (both ends inclusive) is a state row with
``__ws = s`` and ``__we = s + size + 1 + grace`` (µs): the watermark that
*closes* it, when it fires (``Trigger.on_watermark()``) and stops taking
rows. Kafka builds windows record by record — updating the windows that
contain a record, creating the previous record's right window and the
record's left window, copying the right window from the newest window
after it — in arrival order.

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

How a micro-batch is applied
----------------------------
Most rows of a key come *in order*: later than every row the key has seen
and not behind the closing time, so every window that holds them is open.
For a run of such rows Kafka's bookkeeping has a closed form
(:func:`_add_in_order`), computed for all keys at once with sorted arrays:

- every stored window takes the run's rows within its range;
- row ``k`` (``k >= 2``) within ``size`` of row ``k - 1`` creates the right
  window of row ``k - 1``, ``[t(k-1) + 1, t(k-1) + 1 + size]``, which takes
  row ``k`` and the later rows within its range;
- row ``k`` creates its left window ``[t(k) - size, t(k)]`` unless a window
  starts there already: the contents of the newest window that starts
  before it (as Kafka copies them) plus row ``k``; the first row of the run
  looks the previous window up among the stored ones, exactly as the
  replay does.

Every other row (out of order, near the watermark, early, or a repeated
time) is replayed one by one (:func:`_replay`). A key's rows are cut into
alternating runs of both kinds and applied run after run, so the order of
arrival is kept; the replay only moves window *contents* around as
``(stored window, batch rows)`` pairs. Either way the partial aggregates of
every window that changed are built in one vectorized merge
(:func:`~krishiv_py.stateful.aggregates.merge`).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
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

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: Runs per key applied one after the other; a key's rows past this many runs are replayed.
MAX_RUNS = 8


@attrs.define
class _Content:
    """A window in the replay: a stored window's accumulator (``base``) plus batch rows."""

    base: int | None  # state row index
    rows: list[int]
    maxts: int  # ms
    changed: bool = False
    same: bool = False  # the stored window itself (not a copy): it keeps its firing state


@attrs.frozen(kw_only=True)
class _Windows:
    """The windows of the keys a micro-batch touches, between its runs of rows.

    Each window holds at most one stored accumulator (``base``, a row of the
    step's state) plus batch rows (``rows[offsets[i]:offsets[i + 1]]``): a copy
    of a window copies both. Accumulators are merged once, at the end of the batch.
    """

    kid: Ints
    start: Ints  # ms
    maxts: Ints  # ms
    base: Ints  # -1 for none
    offsets: Ints
    rows: Ints
    same: Bools  # the stored window ``base`` itself, still in place: it keeps its firing state
    changed: Bools

    @classmethod
    def of_state(cls, state: pa.Table, kid_state: Ints, rows: Ints) -> _Windows:
        n = len(rows)
        return cls(
            kid=kid_state[rows],
            start=state.column(WS).to_numpy()[rows] // 1000,
            maxts=state.column(MAXTS).to_numpy()[rows] // 1000,
            base=rows,
            offsets=np.zeros(n + 1, np.int64),
            rows=np.zeros(0, np.int64),
            same=np.ones(n, bool),
            changed=np.zeros(n, bool),
        )

    def take(self, which: Ints) -> _Windows:
        offsets, rows = _csr_take(self.offsets, self.rows, which)
        return attrs.evolve(
            self,
            kid=self.kid[which],
            start=self.start[which],
            maxts=self.maxts[which],
            base=self.base[which],
            offsets=offsets,
            rows=rows,
            same=self.same[which],
            changed=self.changed[which],
        )

    def concat(self, other: _Windows) -> _Windows:
        return _Windows(
            kid=_cat(self.kid, other.kid),
            start=_cat(self.start, other.start),
            maxts=_cat(self.maxts, other.maxts),
            base=_cat(self.base, other.base),
            offsets=_cat(self.offsets, other.offsets[1:] + self.offsets[-1]),
            rows=_cat(self.rows, other.rows),
            same=_cat(self.same, other.same),
            changed=_cat(self.changed, other.changed),
        )


def _cat(*parts: Any) -> Any:
    """``np.concatenate`` of arrays and scalars (a scalar is a one-element array)."""
    return np.concatenate([np.atleast_1d(p) for p in parts])


def _csr_take(offsets: Ints, values: Ints, which: Ints) -> tuple[Ints, Ints]:
    """The lists ``which`` of a CSR list array (``-1``: an empty list)."""
    ok, at = which >= 0, np.maximum(which, 0)
    padded = _cat(offsets, offsets[-1])  # in bounds when there are no lists at all
    lo = np.where(ok, padded[at], 0)
    counts = np.where(ok, padded[at + 1] - lo, 0)
    out = _cat(0, np.cumsum(counts)).astype(np.int64)
    return out, values[np.arange(out[-1]) - np.repeat(out[:-1] - lo, counts)]


def _csr_join(a: tuple[Ints, Ints], b: tuple[Ints, Ints]) -> tuple[Ints, Ints]:
    """Each list of ``a`` followed by the same list of ``b``."""
    (oa, va), (ob, vb) = a, b
    ca, cb = np.diff(oa), np.diff(ob)
    out = _cat(0, np.cumsum(ca + cb)).astype(np.int64)
    values = np.empty(out[-1], np.int64)
    values[np.repeat(out[:-1] - oa[:-1], ca) + np.arange(len(va))] = va
    values[np.repeat(out[:-1] + ca - ob[:-1], cb) + np.arange(len(vb))] = vb
    return out, values


def _intervals(lo: Ints, hi: Ints) -> tuple[Ints, Ints]:
    """The lists ``[lo[i], ..., hi[i]]`` as a CSR list array."""
    counts = hi - lo + 1
    out = _cat(0, np.cumsum(counts)).astype(np.int64)
    return out, np.arange(out[-1]) - np.repeat(out[:-1] - lo, counts)


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
    close = None if w_us is None else w_us // 1000 - window.grace_ms
    kept = np.zeros(len(ts), bool)
    rows = np.flatnonzero(valid)
    if not len(rows):
        return state, kept
    kid_state, kid_rows = key_ids(spec, state, batch.take(arrow(rows)))
    kid = np.full(len(ts), -1, np.int64)
    kid[rows] = kid_rows
    involved = np.isin(kid_state, kid_rows)
    wins = _Windows.of_state(state, kid_state, np.flatnonzero(involved))
    t = np.floor_divide(ts, 1000)
    for fast, slow in _runs(window, wins, rows, kid, t, seq, close):
        if len(fast):
            wins = _add_in_order(window.size_ms, wins, fast, kid, t, seq)
            kept[fast] = True
        if len(slow):
            wins, joined = _replay(window.size_ms, wins, slow, kid, t, seq, close)
            kept[slow] = joined
    # A stored window stays as it is unless it took rows or was replaced.
    unchanged = wins.base[wins.same & ~wins.changed]
    keep = ~involved
    keep[unchanged] = True
    first_row = np.full(int(kid.max()) + 1, -1, np.int64)
    first_row[kid_rows[::-1]] = rows[::-1]
    return _rebuild(spec, state.filter(arrow(keep)), state, batch, ts, seq, wins, first_row), kept


def _runs(
    window: EventSlidingWindow,
    wins: _Windows,
    rows: Ints,
    kid: Ints,
    t: Ints,
    seq: Ints,
    close: int | None,
) -> list[tuple[Ints, Ints]]:
    """The batch's rows as passes of ``(in-order rows, rows to replay)``, each key's runs in turn.

    A row is in order when its time is later than every row its key holds
    (the stored windows' ``__maxts``) or sent before it in this batch, it is
    not early (``t >= size``) and the windows holding it are open (``t >= close``;
    a closed window before it may still be copied, as Kafka does).
    Pass ``p`` holds every key's ``p``-th run of rows of one kind.
    """
    order = np.lexsort((seq[rows], kid[rows]))
    r = rows[order]
    k, tr = kid[r], t[r]
    stored_max = np.full(int(k.max()) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(stored_max, wins.kid, wins.maxts)
    # The latest time before each row, its key's stored windows included, as a segmented
    # running maximum over ranks (keys in ascending order: key * stride + rank is monotone).
    before_stored = stored_max[k]
    values, ranks = np.unique(np.concatenate([tr, before_stored]), return_inverse=True)
    stride = len(values) + 1
    rank_t, rank_stored = ranks[: len(tr)], ranks[len(tr) :]
    running = np.maximum.accumulate(k * stride + rank_t)
    first = _cat(True, k[1:] != k[:-1])
    prior = np.where(first, -1, _cat(0, running[:-1]) - k * stride)
    has_stored = before_stored != np.iinfo(np.int64).min
    latest = np.maximum(prior, np.where(has_stored, rank_stored, -1))
    fast = (rank_t > latest) & (tr >= window.size_ms)
    if close is not None:
        fast &= tr >= close
    starts = first | _cat(False, fast[1:] != fast[:-1])
    cut = np.cumsum(starts)
    run = cut - cut[np.maximum.accumulate(np.where(first, np.arange(len(r)), 0))]
    fast &= run < MAX_RUNS
    run = np.minimum(run, MAX_RUNS)
    return [(r[(run == p) & fast], r[(run == p) & ~fast]) for p in range(int(run.max()) + 1)]


def _add_in_order(size: int, wins: _Windows, rows: Ints, kid: Ints, t_all: Ints, seq: Ints) -> _Windows:
    """Add one in-order run of rows per key (see the module docstring) with sorted arrays."""
    rows = rows[np.lexsort((seq[rows], kid[rows]))]
    k, t = kid[rows], t_all[rows]
    m = len(rows)
    pos = np.arange(m)
    first = _cat(True, k[1:] != k[:-1])
    run_start = np.maximum.accumulate(np.where(first, pos, 0))
    firsts = np.flatnonzero(first)
    run_keys = k[firsts]
    # The windows of these keys, by (key, start).
    stored = np.flatnonzero(np.isin(wins.kid, run_keys))
    s_kid, s_start, s_maxts = wins.kid[stored], wins.start[stored], wins.maxts[stored]
    low = int(min(t.min() - 2 * size, s_start.min(initial=t.min()))) - 2
    stride = int(max(t.max() + size, s_start.max(initial=t.max()))) - low + 3
    if (int(k.max()) + 1) * stride >= 2**62:
        # Times too far apart to number (key, time) pairs: replay (every window holding
        # these rows is open, so the replay needs no watermark).
        return _replay(size, wins, rows, kid, t_all, seq, None)[0]

    def at(key: Ints, ms: Ints) -> Ints:
        return key * stride + (ms - low)

    s_order = np.argsort(at(s_kid, s_start), kind="stable")
    stored, s_kid, s_start, s_maxts = stored[s_order], s_kid[s_order], s_start[s_order], s_maxts[s_order]
    s_at = at(s_kid, s_start)
    row_at = at(k, t)

    def last_row(key: Ints, ms: Ints) -> Ints:
        """The last row of key ``key`` at or before ``ms`` (-1 when none)."""
        j = np.searchsorted(row_at, at(key, ms), "right") - 1
        ok = (j >= 0) & (k[np.maximum(j, 0)] == key)
        return np.where(ok, j, -1)

    # The run's first row, against the stored windows only (Kafka's lookups, as the replay).
    # A sentinel past every (key, start) keeps the lookups in bounds.
    lookup_at = _cat(s_at, np.iinfo(np.int64).max)
    lookup_kid, lookup_start, lookup_maxts = _cat(s_kid, -1), _cat(s_start, 0), _cat(s_maxts, 0)
    t1, k1 = t[firsts], k[firsts]
    e = np.searchsorted(lookup_at, at(k1, t1 - size))
    left_stored = lookup_at[e] == at(k1, t1 - size)
    b = np.maximum(e - 1, 0)
    has_b = (e > 0) & (lookup_kid[b] == k1) & (lookup_start[b] >= t1 - 2 * size)
    prev1 = np.where(has_b, lookup_maxts[b], np.where(left_stored, lookup_maxts[e], 0))
    has_prev = has_b | left_stored
    r1_stored = lookup_at[np.searchsorted(lookup_at, at(k1, prev1 + 1))] == at(k1, prev1 + 1)
    make_r1 = has_prev & ~r1_stored & (prev1 + 1 + size >= t1) & (prev1 + 1 != t1 - size)

    # Right windows: the first row's previous row, and each row within `size` of the one before.
    near = ~first & (t - _cat(0, t[:-1]) <= size)
    r_pos = np.concatenate([firsts[make_r1], pos[near]])
    r_start = np.concatenate([prev1[make_r1] + 1, t[np.flatnonzero(near) - 1] + 1])

    # Every window start, stored > right > left where one start is both, to find each row's
    # left window and the newest window that starts before it.
    kinds = np.concatenate([np.zeros(len(stored), np.int64), np.ones(len(r_pos), np.int64), np.full(m, 2)])
    refs = np.concatenate([np.arange(len(stored)), r_pos, pos])
    u_at = np.concatenate([s_at, at(k[r_pos], r_start), at(k, t - size)])
    u_order = np.lexsort((kinds, u_at))
    u_at, kinds, refs = u_at[u_order], kinds[u_order], refs[u_order]
    unique = _cat(True, u_at[1:] != u_at[:-1])
    u_at, kinds, refs = u_at[unique], kinds[unique], refs[unique]
    mine = np.searchsorted(u_at, at(k, t - size))
    make_left = kinds[mine] == 2  # no stored or right window starts there
    b_kind, b_ref = kinds[np.maximum(mine - 1, 0)], refs[np.maximum(mine - 1, 0)]
    # Left windows: the window copied (-1: none) and the first run row they take; a near
    # row copies the newest window before its left window (same key).
    copied = np.full(m, -1, np.int64)
    lo = pos.copy()
    from_stored = near & (b_kind == 0)
    copied[from_stored] = stored[b_ref[from_stored]]
    lo[from_stored] = run_start[from_stored]
    from_right = near & (b_kind == 1)
    lo[from_right] = b_ref[from_right]
    use_b1 = has_b & (prev1 >= t1 - size)
    copied[firsts[use_b1]] = stored[b[use_b1]]
    inherit = near & (b_kind == 2)  # the previous row's left window: what it copied, its first row
    src = np.maximum.accumulate(np.where(inherit, -1, pos))
    copied, lo = copied[src], lo[src]

    # Stored windows take the run's rows up to their end.
    s_first = firsts[np.searchsorted(run_keys, s_kid)]
    s_hi = last_row(s_kid, s_start + size)
    touched = (s_hi >= 0) & (s_hi >= s_first)
    extra_lo = np.zeros(len(wins.kid), np.int64)
    extra_hi = np.full(len(wins.kid), -1, np.int64)
    extra_lo[stored[touched]], extra_hi[stored[touched]] = s_first[touched], s_hi[touched]
    extra_offsets, extra = _intervals(extra_lo, extra_hi)
    offsets, grown = _csr_join((wins.offsets, wins.rows), (extra_offsets, rows[extra]))
    grew = extra_hi >= 0
    old = attrs.evolve(
        wins,
        offsets=offsets,
        rows=grown,
        maxts=np.where(grew, t[extra_hi], wins.maxts),
        changed=wins.changed | grew,
    )
    # New windows: right windows take their rows; left windows what they copy plus theirs.
    left = np.flatnonzero(make_left)
    r_hi = last_row(k[r_pos], r_start + size)
    interval_offsets, interval = _intervals(_cat(r_pos, lo[left]), _cat(r_hi, left))
    new_rows = _csr_join(
        _csr_take(wins.offsets, wins.rows, _cat(np.full(len(r_pos), -1, np.int64), copied[left])),
        (interval_offsets, rows[interval]),
    )
    n_new = len(r_pos) + len(left)
    new = _Windows(
        kid=_cat(k[r_pos], k[left]),
        start=_cat(r_start, t[left] - size),
        maxts=t[_cat(r_hi, left)],
        base=_cat(np.full(len(r_pos), -1, np.int64), _cat(wins.base, -1)[copied[left]]),  # -1: none
        offsets=new_rows[0],
        rows=new_rows[1],
        same=np.zeros(n_new, bool),
        changed=np.ones(n_new, bool),
    )
    return old.concat(new)


def _replay(
    size: int, wins: _Windows, rows: Ints, kid: Ints, t: Ints, seq: Ints, close: int | None
) -> tuple[_Windows, Bools]:
    """Replay ``rows`` one by one in arrival order, as Kafka does; which of them joined a window.

    A row reaches only the windows starting in ``[t - 2 size, t + 1]`` (``[0, t + 1]``
    for an early row), so only its key's windows from its earliest row's reach on
    are loaded.
    """
    joined = np.zeros(len(rows), bool)
    keys, where = np.unique(kid[rows], return_inverse=True)
    earliest = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(earliest, where, t[rows])
    at = np.searchsorted(keys, wins.kid)
    ok = at < len(keys)
    theirs = ok & (keys[np.minimum(at, len(keys) - 1)] == wins.kid)
    theirs &= wins.start >= earliest[np.minimum(at, len(keys) - 1)] - 2 * size - 1
    by_key: dict[int, dict[int, _Content]] = {key: {} for key in keys.tolist()}
    originals: list[tuple[int, int, _Content]] = []
    for i in np.flatnonzero(theirs).tolist():
        content = _Content(
            base=None if wins.base[i] < 0 else int(wins.base[i]),
            rows=wins.rows[wins.offsets[i] : wins.offsets[i + 1]].tolist(),
            maxts=int(wins.maxts[i]),
            changed=bool(wins.changed[i]),
            same=bool(wins.same[i]),
        )
        key, start = int(wins.kid[i]), int(wins.start[i])
        by_key[key][start] = content
        originals.append((key, start, content))
    for j in np.argsort(seq[rows], kind="stable").tolist():
        r = int(rows[j])
        time = int(t[r])
        if close is not None and time + size < close:
            continue
        replay = _replay_early if time < size else _replay_regular
        joined[j] = replay(by_key[int(kid[r])], r, time, size, lambda s: close is None or s + size >= close)
    for key, start, content in originals:  # a stored window replaced by another one is gone
        content.same = content.same and by_key[key].get(start) is content
    contents = [(key, start, c) for key, held in by_key.items() for start, c in held.items()]
    counts = np.asarray([len(c.rows) for _, _, c in contents], np.int64)
    replayed = _Windows(
        kid=np.asarray([key for key, _, _ in contents], np.int64),
        start=np.asarray([start for _, start, _ in contents], np.int64),
        maxts=np.asarray([c.maxts for _, _, c in contents], np.int64),
        base=np.asarray([-1 if c.base is None else c.base for _, _, c in contents], np.int64),
        offsets=_cat(0, np.cumsum(counts)).astype(np.int64),
        rows=np.asarray([r for _, _, c in contents for r in c.rows], np.int64),
        same=np.asarray([c.same for _, _, c in contents], bool),
        changed=np.asarray([c.changed for _, _, c in contents], bool),
    )
    return wins.take(np.flatnonzero(~theirs)).concat(replayed), joined


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
    wins: _Windows,
    key_row: Ints,
) -> pa.Table:
    """``kept_state`` plus every changed window, all accumulators built in one merge.

    Bases are rows of the step's ``state``; ``key_row`` maps a key id to a batch
    row of that key (where its key values come from). Each batch row's partial
    is computed once, however many windows take it.
    """
    window = spec.window
    assert isinstance(window, EventSlidingWindow)
    changed = wins.take(np.flatnonzero(wins.changed))
    n = len(changed.start)
    if not n:
        return kept_state
    added = np.diff(changed.offsets)
    names = [f.name for f in agg.partial_schema(spec.aggs)]
    with_base = changed.base >= 0
    stored = state.take(arrow(changed.base[with_base]))
    row_parts = agg.row_partials(spec.aggs, batch, ts, seq)
    # Each window's partials side by side, its stored accumulator first: the ids ascend.
    size = with_base + added
    at = np.concatenate([[0], np.cumsum(size)])
    leaves = np.empty(at[-1], np.int64)
    leaves[at[:-1][with_base]] = np.arange(len(stored))
    rows_at = np.repeat(at[:-1] + with_base - changed.offsets[:-1], added) + np.arange(len(changed.rows))
    leaves[rows_at] = len(stored) + changed.rows
    order = arrow(leaves)
    parts = {
        name: pa.concat_arrays(
            [stored.column(name).combine_chunks(), row_parts[name].cast(state.schema.field(name).type)]
        ).take(order)
        for name in names
    }
    merged = agg.merge(spec.aggs, parts, np.repeat(np.arange(n, dtype=np.int64), size), n)
    reps = arrow(key_row[changed.kid])
    cols: dict[str, Any] = {
        name: canonical(batch.column(column).combine_chunks()).take(reps)
        for name, column in zip(spec.key_names(), spec.keys, strict=True)
    }
    cols[WS] = arrow(changed.start * 1000)
    cols[WE] = arrow((changed.start + window.size_ms + 1 + window.grace_ms) * 1000)
    same = changed.same
    held = state.take(arrow(np.where(same, changed.base, 0))) if state.num_rows else None

    def carried(name: str, fresh: np.ndarray) -> pa.Array[Any]:
        values = fresh
        if held is not None and same.any():
            old = np.asarray(held.column(name).combine_chunks().to_numpy(zero_copy_only=False))
            values = np.where(same, old, fresh)
        return arrow(values)

    cols[FIRED] = carried(FIRED, np.zeros(n, bool))
    if ROWS in state.schema.names:
        # Rows a window holds: its base's count plus its batch rows (a copy holds its base's
        # rows). Pending: the rows since its last firing, all of them for a new window.
        counts = state.column(ROWS).to_numpy() if state.num_rows else np.zeros(1, np.int64)
        held_rows = np.where(changed.base >= 0, counts[np.maximum(changed.base, 0)], 0) + added
        cols[ROWS] = arrow(held_rows)
        before = carried(PENDING, np.zeros(n, np.int64)).to_numpy(zero_copy_only=False)
        cols[PENDING] = arrow(np.where(same, before + added, held_rows))
    else:
        cols[PENDING] = arrow(np.ones(n, np.int64))
    cols[LAST] = carried(LAST, np.full(n, -1, np.int64))
    cols[EMITTED] = carried(EMITTED, np.zeros(n, bool))
    cols |= merged
    cols[MAXTS] = arrow(changed.maxts * 1000)
    table = pa.table(cols)
    for f in state.schema:
        if f.name not in cols:
            table = table.append_column(f, pa.nulls(n, f.type))
    new = table.select(state.schema.names).cast(state.schema)
    return pa.concat_tables([kept_state, new])
