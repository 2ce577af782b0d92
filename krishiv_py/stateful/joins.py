"""Event-time joins in the kernel: state in, batch in, watermark in -> state out, rows out.

One operator serves both inputs of a join (SPEC 3.12, docs/joins.md): the
rows of both sides arrive in one batch, tagged by :data:`SIDE`, laid out as
a joined row of their side (the key columns, the left side's columns, the
right side's, the other side's null). :func:`step` classifies a batch's
rows against the watermark ``W``, stores the accepted ones, emits the new
matches, then *sweeps* at ``W``: outer rows whose partner can no longer
arrive, windows that fire, results that late rows changed, and state that
no accepted row can reach any more. Everything is vectorized over Arrow and
numpy: matches come from sorting key ids, never from a loop over rows.

The state is one Arrow table (both sides' rows, with a few bookkeeping
columns per join kind) whose schema metadata holds the watermark of the
previous sweep; it is the bucket's state blob in Spark.

Examples
--------
>>> import pyarrow as pa
>>> spec = JoinSpec(kind="interval", how="inner", keys=("k",), left=("a",), right=("b",),
...                 key_types=(pa.string(),), left_types=(pa.int64(),), right_types=(pa.int64(),),
...                 between=(0, 5))
>>> batch = pa.table({SIDE: ["left", "right", "right"], "k": ["x", "x", "x"], "a": [1, None, None],
...                   "b": [None, 10, 20], BATCH_TS: [1_000, 4_000, 9_000], SEQ: [0, 0, 1]})
>>> state, out = step(spec, None, batch, None, 0)
>>> out.results.to_pylist()
[{'k': 'x', 'a': 1, 'b': 10}]
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import BATCH_TS, JOIN_SIDE, RESULT_KIND, SEQ
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow
from krishiv_py.stateful.grouping import canonical, group_ids, withdrawn
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import FlatState

__all__ = ["SIDE", "JoinKernel", "JoinSpec", "next_due", "step"]

SIDE = JOIN_SIDE
#: Bookkeeping columns of the state table.
ARR = "__j_arr"  # arrival order within the bucket
MATCHED = "__j_matched"  # interval: the row has met a partner
PADDED = "__j_padded"  # interval: the row was emitted null-padded
PARTNERS = "__j_partners"  # interval over changes: how many held partners the row is paired with
WS = "__j_ws"  # window: the window start (ms) this copy of the row belongs to
EMITTED = "__j_emitted"  # as-of: the left row was emitted
MTS, MARR = "__j_mts", "__j_marr"  # as-of: event time and arrival of the right row it emitted with
#: Schema metadata: the watermark of the previous sweep (``none``: no watermark yet).
SWEPT = b"krishiv.join.swept"
NONE = -(2**62)
NEVER = 2**62

JoinKind = Literal["interval", "window", "as_of"]


@attrs.frozen(kw_only=True)
class JoinSpec:
    """Everything the join kernel knows about one join (picklable)."""

    kind: JoinKind
    how: str
    keys: tuple[str, ...]
    #: The left side's and the right side's non-key columns, by their names in the joined row.
    left: tuple[str, ...]
    right: tuple[str, ...]
    key_types: tuple[pa.DataType, ...]
    left_types: tuple[pa.DataType, ...]
    right_types: tuple[pa.DataType, ...]
    between: tuple[int, int] = (0, 0)
    window: TumblingWindow | SlidingWindow | None = None
    max_age_ms: int | None = None
    allowed_lateness_ms: int = 0
    accumulation: str = "accumulating"
    ttl_ms: int | None = None
    #: Results carry their event time (``__kp_ts``, µs: the later of the two rows'), for an
    #: operator after the join (:mod:`krishiv_py.stateful.chain`).
    event_times: bool = False
    #: Rows may carry ``kind`` (an interval join over a changelog, SPEC 3.13): a retraction
    #: withdraws one held row of its side with equal values and event time, and the pairs
    #: (or the pad) it was emitted in.
    changes: bool = False

    @property
    def retracting(self) -> bool:
        return self.accumulation == "retracting"

    @property
    def output_names(self) -> tuple[str, ...]:
        """The result columns, in order (window bounds as µs, ``kind`` when retracting)."""
        names: tuple[str, ...] = self.keys
        if self.kind == "window":
            names += ("window_start", "window_end")
        names += self.left
        if self.how not in ("semi", "anti"):
            names += self.right
        names += (BATCH_TS,) if self.event_times else ()
        return names + ((RESULT_KIND,) if self.retracting else ())

    @property
    def row_schema(self) -> pa.Schema:
        """A row of either side as the kernel receives it (the late-event handler's layout)."""
        return pa.schema(
            [pa.field(SIDE, pa.string())]
            + [
                pa.field(name, t)
                for name, t in zip(
                    (*self.keys, *self.left, *self.right),
                    (*self.key_types, *self.left_types, *self.right_types),
                    strict=True,
                )
            ]
        )

    def accept_floor_us(self, watermark: int) -> int:
        """The least event time (µs) a row may have and not be very late at ``watermark``.

        A row is late when ``t < W``; with allowed lateness ``L > 0`` it is very
        late when ``W - t >= L``; with ``L = 0`` every late row is.
        """
        lateness = self.allowed_lateness_ms
        return watermark * 1000 if lateness == 0 else (watermark - lateness) * 1000 + 1


# --- the step ---------------------------------------------------------------------------


def step(
    spec: JoinSpec,
    state: pa.Table | None,
    batch: pa.Table,
    watermark_ms: int | None,
    now_ms: int,
    *,
    merged: pa.Table | None = None,
) -> tuple[pa.Table, StepOutput]:
    """Add ``batch`` to ``state`` under watermark ``watermark_ms``, emit, sweep at it, evict."""
    del now_ms, merged  # joins use neither processing time nor premerged partials
    old = state if state is not None and state.num_rows else _empty_state(spec)
    swept = _swept(state)
    run = {"interval": _interval, "window": _window, "as_of": _as_of}[spec.kind]
    results: list[pa.Table] = []
    expired = 0
    if watermark_ms is not None and old.num_rows and swept != watermark_ms:
        # What the previous micro-batch's new watermark made due, before this batch's rows meet
        # the state (done already when a tick ran at this watermark).
        old, due, expired = run(
            spec, old, _as_state(spec, batch.slice(0, 0), np.zeros(0, bool), 0, None), watermark_ms, swept
        )
        results.append(due)
        swept = watermark_ms
    retract = _retractions(spec, batch)
    ts = _int64(batch.column(BATCH_TS), NONE)
    valid = _bool(batch.column(BATCH_TS).is_valid()) | retract
    late = valid & ~retract & (watermark_ms is not None) & (ts < (watermark_ms or 0) * 1000)
    very = valid & ~retract & _very_late(spec, ts, watermark_ms)
    accepted = valid & ~very & ~retract
    if spec.kind in ("interval", "as_of") and batch.num_rows:
        accepted &= _worth_keeping(spec, batch)
    rows = _as_state(spec, batch, accepted, _next_arrival(old), watermark_ms)
    unmatched = 0
    if retract.any():  # withdrawn before the new rows meet the state (a row never kept: nothing)
        kept = _worth_keeping(spec, batch) if spec.kind in ("interval", "as_of") else True  # as accepted
        gone = batch.filter(pa.array(retract & kept))
        if spec.kind == "window":
            old, rows, undone, unmatched = _withdraw_window(spec, old, rows, gone, swept)
        elif spec.kind == "as_of":
            old, rows, undone, unmatched = _withdraw_as_of(spec, old, rows, gone)
        else:
            old, rows, undone, unmatched = _withdraw(spec, old, rows, gone)
        results.append(undone)
    new_state, out_rows, more = run(spec, old, rows, watermark_ms, swept)
    results.append(out_rows)
    expired += more
    mark = b"none" if watermark_ms is None else str(watermark_ms).encode()
    new_state = new_state.replace_schema_metadata({SWEPT: mark})
    out = StepOutput(
        results=pa.concat_tables(results) if len(results) > 1 else results[0],
        very_late=np.flatnonzero(very).astype(np.int64),
        invalid=np.flatnonzero(~valid).astype(np.int64),
        on_time=int(np.sum(valid & ~very & ~late & ~retract)),
        mildly_late=int(np.sum(valid & ~very & late)),
        expired=expired,
        arithmetic_errors=unmatched,
    )
    return new_state, out


def _retractions(spec: JoinSpec, batch: pa.Table) -> np.ndarray:
    """The rows of ``batch`` that are retractions (none unless the join takes changes)."""
    if not spec.changes or RESULT_KIND not in batch.column_names or not batch.num_rows:
        return np.zeros(batch.num_rows, bool)
    kinds = batch.column(RESULT_KIND)
    out: np.ndarray = np.asarray(pc.equal(kinds, pa.scalar("retract")).fill_null(False), np.bool_)
    return out


def _withdraw(
    spec: JoinSpec, old: pa.Table, new: pa.Table, gone: pa.Table
) -> tuple[pa.Table, pa.Table, pa.Table, int]:
    """Withdraw a held row for each retraction in ``gone``: its pairs (or its pad) are retracted.

    A retraction takes one row of its side with equal keys, columns and
    event time: of the state first, earlier before later, else one of this
    batch's new rows (they cancel: nothing was emitted for it). A row that
    loses its last partner is unpadded, so the sweep pads it again once its
    partner's bound has passed (Flink's outer joins). Returns the state and
    the new rows left, the retractions, and how many retractions found no
    row (counted as errors: a row withdrawn twice, or after it was dropped).
    """
    on = [SIDE, *spec.keys, *spec.left, *spec.right, BATCH_TS]
    gone = gone.select(on).cast(pa.schema([old.schema.field(c) for c in on]))
    taken_old, taken_new, unmatched = withdrawn([old, new], gone, on)
    li, ri = _pairs_of(spec, old, taken_old)  # every pair a withdrawn row was in
    partners = _int64(old.column(PARTNERS), 0)
    padded = _bool(old.column(PADDED))
    pad_out = padded & (partners == 0)
    pieces = [_pair_rows(spec, old, li, ri, "retract")]
    pieces.append(_padded_rows(spec, old, np.flatnonzero(taken_old & pad_out), "retract"))
    after = partners.copy()
    np.subtract.at(after, li, 1)
    np.subtract.at(after, ri, 1)
    padded = padded & ~((partners > 0) & (after == 0))  # alone again: padded anew when due
    old = old.set_column(old.schema.get_field_index(PARTNERS), PARTNERS, pa.array(after, pa.int64()))
    old = old.set_column(old.schema.get_field_index(MATCHED), MATCHED, pa.array(after > 0))
    old = old.set_column(old.schema.get_field_index(PADDED), PADDED, pa.array(padded))
    old = old.filter(pa.array(~taken_old))
    return old, new.filter(pa.array(~taken_new)), _concat(spec, pieces), unmatched


def _withdraw_window(
    spec: JoinSpec, old: pa.Table, new: pa.Table, gone: pa.Table, swept: int | None
) -> tuple[pa.Table, pa.Table, pa.Table, int]:
    """A window join's :func:`_withdraw`: each retraction takes its row from every window it is
    held in (a sliding window's copies), and every window that fired already and lost a row
    retracts what it emitted and emits what it holds now (its pairs, pads, semi or anti rows).

    A row is held in the windows it was retained for (a late row in those still open), so a
    retraction looks for it in each window of its event time and takes it from those it finds
    it in (a retraction that finds none is not counted, unlike an interval join's: a window
    that was never retained holds nothing to find). Returns the state and the new rows left,
    the changes, and 0.
    """
    window = spec.window
    assert window is not None
    copies = _as_state(spec, gone, np.ones(gone.num_rows, bool), 0, None)
    on = [SIDE, *spec.keys, *spec.left, *spec.right, BATCH_TS, WS]
    copies = copies.select(on).cast(pa.schema([old.schema.field(c) for c in on]))
    taken_old, taken_new, _ = withdrawn([old, new], copies, on)
    pieces: list[pa.Table] = []
    if swept is not None and taken_old.any():
        ws = _int64(old.column(WS), 0)
        fired = ws + window.size_ms <= swept
        groups = _group(ws, _key_ids(spec, old))
        hit = taken_old & fired
        keyed = groups >= 0
        affected = fired & ((keyed & np.isin(groups, groups[hit & keyed])) | (hit & ~keyed))
        idx = np.flatnonzero(affected)
        sub, sub_groups, stays = old.take(pa.array(idx, pa.int64())), groups[idx], ~taken_old[idx]
        left = _is_left(sub)
        every = np.ones(len(idx), bool)
        pieces += _window_results(spec, sub, sub_groups, every, left, kind="retract")
        kept = sub.filter(pa.array(stays))
        pieces += _window_results(spec, kept, sub_groups[stays], every[stays], left[stays])
    return old.filter(pa.array(~taken_old)), new.filter(pa.array(~taken_new)), _concat(spec, pieces), 0


def _withdraw_as_of(
    spec: JoinSpec, old: pa.Table, new: pa.Table, gone: pa.Table
) -> tuple[pa.Table, pa.Table, pa.Table, int]:
    """An as-of join's :func:`_withdraw`: a withdrawn left row retracts what it emitted; a withdrawn
    right row retracts the rows of the left rows it was in force for, which are decided again at
    the next sweep (with the right row in force without it, or padded, or nothing).

    A left row is held with the right columns it was emitted with, so a retraction finds it by its
    own columns (and a right row by its own). Returns the state and the new rows left, the
    retractions, and how many retractions found no row.
    """
    unmatched = 0
    taken: list[tuple[np.ndarray, np.ndarray]] = []
    for side, own in (("left", spec.left), ("right", spec.right)):
        on = [SIDE, *spec.keys, *own, BATCH_TS]
        mine = gone.filter(pc.equal(gone.column(SIDE), pa.scalar(side)))
        mine = mine.select(on).cast(pa.schema([old.schema.field(c) for c in on]))
        taken_old, taken_new, missed = withdrawn([old, new], mine, on)
        taken.append((taken_old, taken_new))
        unmatched += missed
    (left_old, left_new), (right_old, right_new) = taken
    # ``EMITTED``: decided (an inner join's row without a match emitted nothing).
    emitted = _bool(old.column(EMITTED))
    mts, marr = _int64(old.column(MTS), NONE), _int64(old.column(MARR), -1)
    sent = emitted & ((marr >= 0) | (spec.how == "left"))
    pieces = [_stored_rows(spec, old, np.flatnonzero(left_old & sent), "retract")]
    # The left rows a withdrawn right row was in force for (a held row's arrival number is its
    # own): retracted, decided again.
    arr = _int64(old.column(ARR), 0)
    again = _is_left(old) & emitted & ~left_old & (marr >= 0) & np.isin(marr, arr[right_old])
    pieces.append(_stored_rows(spec, old, np.flatnonzero(again), "retract"))
    for name, values in (
        (EMITTED, emitted & ~again),
        (MTS, np.where(again, NONE, mts)),
        (MARR, np.where(again, -1, marr)),
    ):
        old = old.set_column(old.schema.get_field_index(name), name, pa.array(values))
    keep_old, keep_new = ~(left_old | right_old), ~(left_new | right_new)
    return old.filter(pa.array(keep_old)), new.filter(pa.array(keep_new)), _concat(spec, pieces), unmatched


def _very_late(spec: JoinSpec, ts: np.ndarray, watermark_ms: int | None) -> np.ndarray:
    if watermark_ms is None:
        return np.zeros(len(ts), bool)
    if spec.ttl_ms is not None:  # already as far behind as the state TTL keeps rows
        gone: np.ndarray = _very_late(attrs.evolve(spec, ttl_ms=None), ts, watermark_ms)
        both: np.ndarray = gone | _ttl_drop(spec, ts, watermark_ms)
        return both
    if spec.kind != "window":
        return ts < spec.accept_floor_us(watermark_ms)
    # A window join's row is very late when none of its windows is retained (W < end + L):
    # its last window ends at the start of the slide it falls in plus the size.
    window = spec.window
    assert window is not None
    ends = _last_start(window, ts) + window.size_ms
    out: np.ndarray = watermark_ms >= ends + spec.allowed_lateness_ms
    return out


def _worth_keeping(spec: JoinSpec, batch: pa.Table) -> np.ndarray:
    """Rows that can produce output: an inner side's rows with a null key can never match."""
    null_key = _null_key(spec, batch)
    left = _is_left(batch)
    kept = np.where(left, spec.how in ("left", "full"), spec.how in ("right", "full"))
    out: np.ndarray = ~null_key | kept
    return out


def _null_key(spec: JoinSpec, table: pa.Table) -> np.ndarray:
    out = np.zeros(table.num_rows, bool)
    for k in spec.keys:
        out |= np.asarray(table.column(k).is_null(), np.bool_)
    return out


# --- state layout -------------------------------------------------------------------------


def _state_schema(spec: JoinSpec) -> pa.Schema:
    fields = [*spec.row_schema, pa.field(BATCH_TS, pa.int64()), pa.field(ARR, pa.int64())]
    if spec.kind == "interval":
        fields += [pa.field(MATCHED, pa.bool_()), pa.field(PADDED, pa.bool_())]
        fields += [pa.field(PARTNERS, pa.int64())] if spec.changes else []
    elif spec.kind == "window":
        fields += [pa.field(WS, pa.int64())]
    else:
        fields += [pa.field(EMITTED, pa.bool_()), pa.field(MTS, pa.int64()), pa.field(MARR, pa.int64())]
    return pa.schema(fields)


def _empty_state(spec: JoinSpec) -> pa.Table:
    return _state_schema(spec).empty_table()


def _swept(state: pa.Table | None) -> int | None:
    meta = (state.schema.metadata or {}) if state is not None else {}
    mark = meta.get(SWEPT, b"none")
    return None if mark == b"none" else int(mark)


def _next_arrival(state: pa.Table) -> int:
    return int(pc.max(state.column(ARR)).as_py()) + 1 if state.num_rows else 0


def _as_state(
    spec: JoinSpec, batch: pa.Table, accepted: np.ndarray, first: int, watermark: int | None
) -> pa.Table:
    """The accepted rows of ``batch`` as state rows (window joins: one per retained window they fall in)."""
    idx = np.flatnonzero(accepted)
    rows = batch if len(idx) == batch.num_rows else batch.take(pa.array(idx, pa.int64()))
    seq = _int64(rows.column(SEQ), 0)
    order = np.lexsort((np.arange(len(idx)), seq))
    arrival = np.empty(len(idx), np.int64)
    arrival[order] = first + np.arange(len(idx))
    cols: dict[str, Any] = {f.name: rows.column(f.name).cast(f.type) for f in spec.row_schema}
    cols[BATCH_TS] = rows.column(BATCH_TS).cast(pa.int64())
    cols[ARR] = pa.array(arrival, pa.int64())
    n = len(idx)
    if spec.kind == "interval":
        cols[MATCHED] = pa.array(np.zeros(n, bool))
        cols[PADDED] = pa.array(np.zeros(n, bool))
        if spec.changes:
            cols[PARTNERS] = pa.array(np.zeros(n, np.int64))
        return pa.table(cols, schema=_state_schema(spec))
    if spec.kind == "as_of":
        cols[EMITTED] = pa.array(np.zeros(n, bool))
        cols[MTS] = pa.array(np.full(n, NONE, np.int64))
        cols[MARR] = pa.array(np.full(n, -1, np.int64))
        return pa.table(cols, schema=_state_schema(spec))
    window = spec.window
    assert window is not None
    table = pa.table(cols)
    ts = _int64(table.column(BATCH_TS), 0)
    last = _last_start(window, ts)
    copies = -(-window.size_ms // window.slide_ms)  # windows a row can fall in
    rep = np.repeat(np.arange(n), copies)
    starts = np.repeat(last, copies) - np.tile(np.arange(copies), n) * window.slide_ms
    inside = starts * 1000 + window.size_ms * 1000 > ts[rep]
    if watermark is not None:  # a late row joins only the windows still retained (W < end + L)
        inside &= watermark < starts + window.size_ms + spec.allowed_lateness_ms
    rep, starts = rep[inside], starts[inside]
    out = table.take(pa.array(rep, pa.int64())).append_column(WS, pa.array(starts, pa.int64()))
    return out.cast(_state_schema(spec))


def _last_start(window: TumblingWindow | SlidingWindow, ts_us: np.ndarray) -> np.ndarray:
    """The start (ms) of the last window that holds each event time."""
    ms = np.floor_divide(ts_us, 1000)
    offset = getattr(window, "offset_ms", 0)
    out: np.ndarray = ms - np.mod(ms - offset, window.slide_ms)
    return out


# --- the three joins ----------------------------------------------------------------------


def _interval(
    spec: JoinSpec, old: pa.Table, new: pa.Table, watermark: int | None, swept: int | None
) -> tuple[pa.Table, pa.Table, int]:
    del swept  # every row carries its own flags
    lower, upper = spec.between[0] * 1000, spec.between[1] * 1000
    table = pa.concat_tables([old, new])
    is_new = np.arange(table.num_rows) >= old.num_rows
    left = _is_left(table)
    ts = _int64(table.column(BATCH_TS), 0)
    if new.num_rows:
        li, ri = _pairs_of(spec, table, is_new, left=left, ts=ts)
    else:  # (a sweep: no new row, no pair)
        li = ri = np.zeros(0, np.int64)
    matched = _bool(table.column(MATCHED))
    padded = _bool(table.column(PADDED))
    now_matched = matched.copy()
    now_matched[li] = True
    now_matched[ri] = True
    if spec.changes:  # a row withdrawn later takes its pairs with it: count them
        partners = _int64(table.column(PARTNERS), 0)
        np.add.at(partners, li, 1)
        np.add.at(partners, ri, 1)
        table = table.set_column(table.schema.get_field_index(PARTNERS), PARTNERS, pa.array(partners))
    pieces = []
    if spec.retracting:  # a padded row that met a partner is withdrawn first
        gone = padded & ~matched & now_matched
        pieces.append(_padded_rows(spec, table, np.flatnonzero(gone), "retract"))
    pieces.append(_pair_rows(spec, table, li, ri, "emit"))
    sweep_pad = np.zeros(table.num_rows, bool)
    drop = np.zeros(table.num_rows, bool)
    expired = 0
    if watermark is not None:
        x = watermark * 1000
        due = np.where(left, ts + upper, ts - lower)  # the partner's bound
        outer = np.where(left, spec.how in ("left", "full"), spec.how in ("right", "full"))
        ttl = _ttl_drop(spec, ts, watermark)
        sweep_pad = outer & ~now_matched & ~padded & ((x > due) | ttl)
        pieces.append(_padded_rows(spec, table, np.flatnonzero(sweep_pad), "emit"))
        drop = (due < spec.accept_floor_us(watermark)) | ttl
        expired = int(np.sum(ttl & ~(due < spec.accept_floor_us(watermark))))
    state = table.set_column(table.schema.get_field_index(MATCHED), MATCHED, pa.array(now_matched))
    state = state.set_column(state.schema.get_field_index(PADDED), PADDED, pa.array(padded | sweep_pad))
    state = _staying(state, ~drop)
    return state, _concat(spec, pieces), expired


def _pairs_of(
    spec: JoinSpec,
    table: pa.Table,
    marked: np.ndarray,
    *,
    left: np.ndarray | None = None,
    ts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of rows of ``table`` inside the interval with a ``marked`` row in it: a marked left
    row with any right row, an unmarked left row with a marked right row (index arrays; the first
    kind, then the second, each by left row, then right row). ``left``, ``ts``: :func:`_is_left`
    and the event times of ``table``, when the caller has them.

    Only the rows of a key some marked row has can be in such a pair, so only they are paired:
    a micro-batch's cost follows its keys' rows, not the whole state's."""
    lower, upper = spec.between[0] * 1000, spec.between[1] * 1000
    left = _is_left(table) if left is None else left
    ts = _int64(table.column(BATCH_TS), 0) if ts is None else ts
    rows, k = _rows_of_marked_keys(spec, table, marked)
    lt, mk = left[rows], marked[rows]
    li1, ri1 = _pairs(k, lt & mk, ~lt)
    li2, ri2 = _pairs(k, lt & ~mk, ~lt & mk)
    li, ri = rows[np.concatenate([li1, li2])], rows[np.concatenate([ri1, ri2])]
    inside = (ts[ri] >= ts[li] + lower) & (ts[ri] <= ts[li] + upper)
    return li[inside], ri[inside]


def _rows_of_marked_keys(
    spec: JoinSpec, table: pa.Table, marked: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``table`` whose key (not null) a ``marked`` row has, and their key ids."""
    if len(spec.keys) == 1 and table.num_rows:  # (one column: a hash lookup, then only those grouped)
        column = canonical(table.column(spec.keys[0]))
        wanted = pc.unique(column.filter(pa.array(marked))).drop_null()
        rows = np.flatnonzero(np.asarray(pc.is_in(column, value_set=wanted).fill_null(False), np.bool_))
        return rows, _key_ids(spec, table.select(list(spec.keys)).take(pa.array(rows, pa.int64())))
    kid = _key_ids(spec, table)
    of_marked = np.zeros(int(kid.max(initial=-1)) + 2, bool)
    of_marked[kid[marked & (kid >= 0)]] = True
    rows = np.flatnonzero((kid >= 0) & of_marked[np.maximum(kid, 0)])
    return rows, kid[rows]


def _window(
    spec: JoinSpec, old: pa.Table, new: pa.Table, watermark: int | None, swept: int | None
) -> tuple[pa.Table, pa.Table, int]:
    window = spec.window
    assert window is not None
    table = pa.concat_tables([old, new])
    if watermark is None or not table.num_rows:
        return table, _concat(spec, []), 0
    is_new = np.arange(table.num_rows) >= old.num_rows
    ws = _int64(table.column(WS), 0)
    end = ws + window.size_ms
    fired_before = np.zeros(table.num_rows, bool) if swept is None else end <= swept
    due = end <= watermark
    # A window's rows are compared with what it emitted: nothing before its first firing.
    counted_new = is_new | ~fired_before
    # Only due rows are grouped: a (key, window) group is due whole or not at all, and numbering
    # the due rows' groups by first appearance keeps the order of the whole table's numbering.
    pieces: list[pa.Table] = []
    at = np.flatnonzero(due)
    if at.size:
        rows = table.take(pa.array(at, pa.int64()))
        groups = _group(ws[at], _key_ids(spec, rows))
        counted = counted_new[at]
        # The groups with a row not counted yet (index 0: the null keys'), dense from -1.
        of_touched = np.zeros(int(groups.max(initial=-1)) + 2, bool)
        of_touched[groups[counted] + 1] = True
        touched = np.flatnonzero(of_touched[groups + 1] | ((groups < 0) & counted))
        sub = rows.take(pa.array(touched, pa.int64()))
        pieces = _window_results(spec, sub, groups[touched], counted[touched], _is_left(sub))
    ttl = _ttl_drop(spec, _int64(table.column(BATCH_TS), 0), watermark)
    evicted = watermark >= end + spec.allowed_lateness_ms
    state = _staying(table, ~(evicted | ttl))
    return state, _concat(spec, pieces), int(np.sum(ttl & ~evicted))


def _window_results(
    spec: JoinSpec,
    rows: pa.Table,
    groups: np.ndarray,
    fresh: np.ndarray,
    left: np.ndarray,
    *,
    kind: str = "emit",
) -> list[pa.Table]:
    """The change in the results of the windows ``rows`` belong to; ``fresh``: rows not yet counted
    (every row fresh: the windows' whole results, as ``kind``).

    Whether a row has a partner comes from counting the other side's rows of
    its group (all, and those counted before); only the pairs with a fresh
    row are built, so a late row costs what it changes, not the window's size.
    """
    valid = groups >= 0
    size = int(groups.max(initial=0)) + 1
    rights = np.bincount(groups[valid & ~left], minlength=size)
    lefts = np.bincount(groups[valid & left], minlength=size)
    old_rights = np.bincount(groups[valid & ~left & ~fresh], minlength=size)
    old_lefts = np.bincount(groups[valid & left & ~fresh], minlength=size)
    g = np.maximum(groups, 0)
    partners = np.where(left, rights[g], lefts[g])
    old_partners = np.where(left, old_rights[g], old_lefts[g])
    any_match = valid & (partners > 0)
    old_match = valid & (old_partners > 0)
    gained = ~fresh & ~old_match & any_match  # counted rows that met their first partner now
    retract: list[pa.Table] = []
    emit: list[pa.Table] = []
    how = spec.how
    if how in ("semi", "anti"):
        wanted = any_match if how == "semi" else ~any_match
        fresh_rows = _semi_rows(spec, rows, np.flatnonzero(left & fresh & wanted), kind)
        changed = np.flatnonzero(left & gained)  # semi: now a match; anti: no longer without one
        if how == "semi":
            return [fresh_rows, _semi_rows(spec, rows, changed, "emit")]
        return [_semi_rows(spec, rows, changed, "retract"), fresh_rows]
    # The new pairs: a fresh left row with any right row, a counted left row with a fresh right row.
    li1, ri1 = _pairs(groups, left & fresh, ~left)
    li2, ri2 = _pairs(groups, left & ~fresh, ~left & fresh)
    emit.append(_pair_rows(spec, rows, np.concatenate([li1, li2]), np.concatenate([ri1, ri2]), kind))
    for side_mask, kept in ((left, how in ("left", "full")), (~left, how in ("right", "full"))):
        if not kept:
            continue
        retract.append(_padded_rows(spec, rows, np.flatnonzero(side_mask & gained), "retract"))
        emit.append(_padded_rows(spec, rows, np.flatnonzero(side_mask & fresh & ~any_match), kind))
    return [*retract, *emit]


def _as_of(
    spec: JoinSpec, old: pa.Table, new: pa.Table, watermark: int | None, swept: int | None
) -> tuple[pa.Table, pa.Table, int]:
    del swept  # every row carries its own flags
    table = pa.concat_tables([old, new])
    if watermark is None or not table.num_rows:
        return table, _concat(spec, []), 0
    x = watermark * 1000
    is_new = np.arange(table.num_rows) >= old.num_rows
    left = _is_left(table)
    ts = _int64(table.column(BATCH_TS), 0)
    arr = _int64(table.column(ARR), 0)
    kid = _key_ids(spec, table)
    emitted = _bool(table.column(EMITTED))
    mts, marr = _int64(table.column(MTS), NONE), _int64(table.column(MARR), -1)
    pending = left & ~emitted & (x > ts)
    keys_with_new = np.unique(kid[~left & is_new & (kid >= 0)])
    recheck = left & emitted & spec.retracting & np.isin(kid, keys_with_new) & (kid >= 0)
    ask = np.flatnonzero(pending | recheck)
    found = _latest_at_or_before(kid, ts, arr, left, ask)
    if spec.max_age_ms is not None:
        ok = found >= 0
        ok[ok] = ts[found[ok]] >= ts[ask[ok]] - spec.max_age_ms * 1000
        found = np.where(ok, found, -1)
    has = found >= 0
    f_ts = np.where(has, ts[np.maximum(found, 0)], NONE)
    f_arr = np.where(has, arr[np.maximum(found, 0)], -1)
    first = pending[ask]
    newer = ~first & has & ((f_ts > mts[ask]) | ((f_ts == mts[ask]) & (f_arr > marr[ask])))
    # What the changed rows emitted before: their stored row (matched, or null-padded by a left join).
    withdrawn = ask[newer & ((marr[ask] >= 0) | (spec.how == "left"))]
    pieces = [_stored_rows(spec, table, withdrawn, "retract")] if spec.retracting else []
    out_rows = ask[(first & (has | (spec.how == "left"))) | newer]
    out_found = found[(first & (has | (spec.how == "left"))) | newer]
    updated = _fill_right(spec, table, out_rows, out_found)
    pieces.append(_stored_rows(spec, updated, out_rows, "emit"))
    emitted = emitted.copy()
    emitted[ask[first]] = True
    mts = mts.copy()
    marr = marr.copy()
    change = ask[first | newer]
    mts[change] = f_ts[first | newer]
    marr[change] = f_arr[first | newer]
    state = updated
    for name, values in ((EMITTED, emitted), (MTS, mts), (MARR, marr)):
        state = state.set_column(state.schema.get_field_index(name), name, pa.array(values))
    floor = spec.accept_floor_us(watermark)
    ttl = _ttl_drop(spec, ts, watermark)
    drop = (left & emitted & (ts < floor)) | ttl | (~left & _stale_versions(spec, kid, ts, arr, left, floor))
    return _staying(state, ~drop), _concat(spec, pieces), int(np.sum(ttl))


def _latest_at_or_before(
    kid: np.ndarray, ts: np.ndarray, arr: np.ndarray, left: np.ndarray, ask: np.ndarray
) -> np.ndarray:
    """For each left row in ``ask``: the right row of its key with the greatest (ts, arrival) <= its ts."""
    right = np.flatnonzero(~left & (kid >= 0))
    rows = np.concatenate([right, ask])
    is_query = np.concatenate([np.zeros(len(right), bool), np.ones(len(ask), bool)])
    # Sorted by key, then time; at equal times right rows (by arrival) come before the query.
    order = np.lexsort((np.where(is_query, NEVER, arr[rows]), is_query, ts[rows], kid[rows]))
    pos = np.arange(len(order))
    last_right = np.maximum.accumulate(np.where(~is_query[order], pos, -1))
    found_sorted = np.where(last_right >= 0, rows[order][np.maximum(last_right, 0)], -1)
    same_key = (found_sorted >= 0) & (kid[np.maximum(found_sorted, 0)] == kid[rows[order]])
    found_sorted = np.where(same_key & (kid[rows[order]] >= 0), found_sorted, -1)
    out = np.full(len(rows), -1, np.int64)
    out[order] = found_sorted
    return out[len(right) :]


def _stale_versions(
    spec: JoinSpec, kid: np.ndarray, ts: np.ndarray, arr: np.ndarray, left: np.ndarray, floor: int
) -> np.ndarray:
    """Right rows no retained or future left row can use: all but the latest before ``floor``, per key."""
    below = ~left & (ts < floor)
    idx = np.flatnonzero(below)
    keep = np.zeros(len(ts), bool)
    if len(idx):
        order = np.lexsort((arr[idx], ts[idx], kid[idx]))
        sorted_idx = idx[order]
        last_of_key = np.append(kid[sorted_idx][1:] != kid[sorted_idx][:-1], True)
        keep[sorted_idx[last_of_key]] = True
    stale = below & ~keep
    if spec.max_age_ms is not None:
        stale |= ~left & (ts < floor - spec.max_age_ms * 1000)
    return stale


# --- rows out -----------------------------------------------------------------------------------


def _taken(
    spec: JoinSpec, table: pa.Table, idx: np.ndarray, columns: tuple[str, ...], *, bounds: bool = True
) -> pa.Table:
    """Rows ``idx`` of ``table``, only ``columns`` and what a row out needs besides (its window's
    start, its event time): not the state's other columns."""
    extra = ([WS] if bounds and spec.kind == "window" else []) + ([BATCH_TS] if spec.event_times else [])
    return table.select(list(dict.fromkeys([*columns, *extra]))).take(pa.array(idx, pa.int64()))


def _pair_rows(spec: JoinSpec, table: pa.Table, li: np.ndarray, ri: np.ndarray, kind: str) -> pa.Table:
    lt = _taken(spec, table, li, (*spec.keys, *spec.left))
    rt = _taken(spec, table, ri, spec.right, bounds=False)
    cols: dict[str, Any] = {k: lt.column(k) for k in spec.keys}
    if spec.kind == "window":
        cols.update(_bounds(spec, lt))
    cols.update({c: lt.column(c) for c in spec.left})
    cols.update({c: rt.column(c) for c in spec.right})
    if spec.event_times:
        cols[BATCH_TS] = pc.max_element_wise(lt.column(BATCH_TS), rt.column(BATCH_TS))
    return _with_kind(spec, pa.table(cols), kind)


def _padded_rows(spec: JoinSpec, table: pa.Table, idx: np.ndarray, kind: str) -> pa.Table:
    """Rows of one side without a partner: the other side's columns are null already."""
    if not len(idx):
        return _output_schema(spec).empty_table()
    rows = _taken(spec, table, idx, (*spec.keys, *spec.left, *spec.right))
    cols: dict[str, Any] = {k: rows.column(k) for k in spec.keys}
    if spec.kind == "window":
        cols.update(_bounds(spec, rows))
    cols.update({c: rows.column(c) for c in (*spec.left, *spec.right)})
    if spec.event_times:
        cols[BATCH_TS] = rows.column(BATCH_TS)
    return _with_kind(spec, pa.table(cols), kind)


def _semi_rows(spec: JoinSpec, table: pa.Table, idx: np.ndarray, kind: str) -> pa.Table:
    rows = _taken(spec, table, idx, (*spec.keys, *spec.left))
    cols: dict[str, Any] = {k: rows.column(k) for k in spec.keys}
    cols.update(_bounds(spec, rows))
    cols.update({c: rows.column(c) for c in spec.left})
    if spec.event_times:
        cols[BATCH_TS] = rows.column(BATCH_TS)
    return _with_kind(spec, pa.table(cols), kind)


def _stored_rows(spec: JoinSpec, table: pa.Table, idx: np.ndarray, kind: str) -> pa.Table:
    """As-of: left rows as stored, with the right columns they were emitted with."""
    return _padded_rows(spec, table, idx, kind)


def _fill_right(spec: JoinSpec, table: pa.Table, rows: np.ndarray, found: np.ndarray) -> pa.Table:
    """``table`` with the right columns of each of ``rows`` taken from ``found`` (-1: null)."""
    if not len(rows):
        return table
    src = np.arange(table.num_rows)
    src[rows] = np.where(found >= 0, found, -1)
    take = pa.array(np.maximum(src, 0), pa.int64())
    null = np.zeros(table.num_rows, bool)
    null[rows] = found < 0
    mask = pa.array(null)
    for c in spec.right:
        i = table.schema.get_field_index(c)
        column = table.column(c)
        values = column.take(take)
        values = pc.if_else(mask, pa.scalar(None, column.type), values)
        table = table.set_column(i, c, values)
    return table


def _bounds(spec: JoinSpec, rows: pa.Table) -> dict[str, pa.Array[Any]]:
    window = spec.window
    assert window is not None
    ws = _int64(rows.column(WS), 0)
    return {
        "window_start": pa.array(ws * 1000, pa.int64()),
        "window_end": pa.array((ws + window.size_ms) * 1000, pa.int64()),
    }


def _with_kind(spec: JoinSpec, table: pa.Table, kind: str) -> pa.Table:
    if not spec.retracting:
        return table
    if RESULT_KIND in table.column_names:
        table = table.drop_columns([RESULT_KIND])
    return table.append_column(RESULT_KIND, pa.array([kind] * table.num_rows, pa.string()))


def _concat(spec: JoinSpec, pieces: list[pa.Table]) -> pa.Table:
    schema = _output_schema(spec)
    parts = [p.select(list(schema.names)).cast(schema) for p in pieces if p.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _output_schema(spec: JoinSpec) -> pa.Schema:
    types = dict(
        zip(
            (*spec.keys, *spec.left, *spec.right),
            (*spec.key_types, *spec.left_types, *spec.right_types),
            strict=True,
        )
    )
    types.update(
        {"window_start": pa.int64(), "window_end": pa.int64(), RESULT_KIND: pa.string(), BATCH_TS: pa.int64()}
    )
    return pa.schema([pa.field(name, types[name]) for name in spec.output_names])


# --- when the bucket is due ---------------------------------------------------------------------


def next_due(spec: JoinSpec, state: pa.Table) -> int:
    """The least watermark (ms) at which a sweep changes ``state``: output due, or rows to drop."""
    if not state.num_rows:
        return NOT_DUE
    return int(row_due(spec, state).min())


def row_due(spec: JoinSpec, state: pa.Table) -> np.ndarray:
    """Per row of ``state``, the least watermark (ms) at which a sweep changes it."""
    if not state.num_rows:
        return np.zeros(0, np.int64)
    ts = _int64(state.column(BATCH_TS), 0)
    left = _is_left(state)
    lateness = spec.allowed_lateness_ms
    if spec.kind == "interval":
        bound = np.where(left, ts + spec.between[1] * 1000, ts - spec.between[0] * 1000)
        due = _evict_due(bound, lateness)
        outer = np.where(left, spec.how in ("left", "full"), spec.how in ("right", "full"))
        pad = outer & ~_bool(state.column(PADDED)) & ~_bool(state.column(MATCHED))
        due = np.where(pad, np.floor_divide(bound, 1000) + 1, due)
    elif spec.kind == "window":
        window = spec.window
        assert window is not None
        end = _int64(state.column(WS), 0) + window.size_ms
        swept = _swept(state)
        fired = np.zeros(len(end), bool) if swept is None else end <= swept
        due = np.where(fired, end + lateness, end)
    else:
        emitted = _bool(state.column(EMITTED))
        due = np.where(left & ~emitted, np.floor_divide(ts, 1000) + 1, NEVER)
        due = np.where(left & emitted, _evict_due(ts, lateness), due)
    if spec.ttl_ms is not None:
        due = np.minimum(due, -np.floor_divide(-ts, 1000) + spec.ttl_ms)
    out: np.ndarray = np.asarray(due, np.int64)
    return out


def _evict_due(bound_us: np.ndarray, lateness: int) -> np.ndarray:
    """The least watermark whose accept floor passes ``bound_us`` (see :meth:`JoinSpec.accept_floor_us`)."""
    out: np.ndarray = (
        np.floor_divide(bound_us, 1000) + 1
        if lateness == 0
        else np.floor_divide(bound_us - 1, 1000) + 1 + lateness
    )
    return out


# --- small vector helpers -------------------------------------------------------------------------


def _staying(state: pa.Table, keep: np.ndarray) -> pa.Table:
    """The rows of a step's state that stay, each column one chunk: a state made of the one before
    and a batch's rows would otherwise hold a chunk more each micro-batch (a filter keeps them,
    empty ones too), and every later step would pay for them."""
    return state.take(pa.array(np.flatnonzero(keep), pa.int64()))


def _ttl_drop(spec: JoinSpec, ts: np.ndarray, watermark: int) -> np.ndarray:
    if spec.ttl_ms is None:
        return np.zeros(len(ts), bool)
    out: np.ndarray = ts + spec.ttl_ms * 1000 <= watermark * 1000
    return out


def _key_ids(spec: JoinSpec, table: pa.Table) -> np.ndarray:
    """One id per distinct key (floats canonical); -1 where a key column is null (never matches)."""
    if not table.num_rows:
        return np.zeros(0, np.int64)
    ids, _, _ = group_ids([canonical(table.column(k)) for k in spec.keys])
    return np.where(_null_key(spec, table), -1, ids).astype(np.int64)


def _group(ws: np.ndarray, kid: np.ndarray) -> np.ndarray:
    """One id per (key, window); -1 for a null key."""
    if not len(ws):
        return np.zeros(0, np.int64)
    ids, _, _ = group_ids([pa.array(kid), pa.array(ws)])
    return np.where(kid >= 0, ids, -1).astype(np.int64)


def _pairs(group: np.ndarray, lefts: np.ndarray, rights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of a row in ``lefts`` and one in ``rights`` of the same group ``>= 0`` (index arrays)."""
    li_all = np.flatnonzero(lefts & (group >= 0))
    ri_all = np.flatnonzero(rights & (group >= 0))
    of_rights = group[ri_all]
    if int(of_rights.max(initial=0)) < 2**16:  # (numpy sorts 16-bit values by radix: the same order)
        of_rights = of_rights.astype(np.uint16)
    order = np.argsort(of_rights, kind="stable")
    sorted_groups = group[ri_all][order]
    lo = np.searchsorted(sorted_groups, group[li_all], "left")
    hi = np.searchsorted(sorted_groups, group[li_all], "right")
    counts = hi - lo
    total = int(counts.sum())
    li = np.repeat(li_all, counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    ri = ri_all[order][np.repeat(lo, counts) + offsets]
    return li.astype(np.int64), ri.astype(np.int64)


def _is_left(table: pa.Table) -> np.ndarray:
    if not table.num_rows:
        return np.zeros(0, bool)
    side = table.column(SIDE).combine_chunks()
    out: np.ndarray = np.asarray(pc.equal(side, pa.scalar("left")).fill_null(False), np.bool_)
    return out


def _bool(column: Any) -> np.ndarray:
    if not len(column):
        return np.zeros(0, bool)
    out: np.ndarray = np.asarray(column.fill_null(False), np.bool_)
    return out


def _int64(column: Any, fill: int) -> np.ndarray:
    if not len(column):
        return np.zeros(0, np.int64)
    out: np.ndarray = np.asarray(column.cast(pa.int64()).fill_null(fill), np.int64)
    return out


# --- the kernel ---------------------------------------------------------------------------


@attrs.frozen
class JoinKernel(FlatState, Unmerged):
    """A join as a :class:`~krishiv_py.stateful.protocol.Kernel`: both sides' rows in one batch.

    Its results have no identity of their own but a window join's keys and
    bounds. It passes on the watermark held back by its structural delay
    (SPEC 3.13): none for an inner interval or as-of join, the pad bound of
    an outer interval join (``upper`` for left pads, ``-lower`` for right
    pads), a window join's window length.

    >>> import pyarrow as pa
    >>> spec = JoinSpec(kind="interval", how="left", keys=("k",), left=("a",), right=("b",),
    ...                 key_types=(pa.string(),), left_types=(pa.int64(),), right_types=(pa.int64(),),
    ...                 between=(-5, 3))
    >>> inner = attrs.evolve(spec, how="inner")
    >>> JoinKernel(spec).output_watermark(100), JoinKernel(inner).output_watermark(100)
    (97, 100)
    """

    spec: JoinSpec

    @property
    def keys(self) -> tuple[str, ...]:
        return self.spec.keys

    @property
    def accumulation(self) -> str:
        return self.spec.accumulation

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        # Every stored row holds its keys. An interval or as-of join's rows carry their own flags
        # (matched, padded, emitted); a window join's fired windows are those ending at or before
        # its one sweep mark, which the parts of a moved state agree on once each was stepped to
        # the micro-batch's watermark (krishiv_py.stateful.regroup).
        return self.spec.keys

    @property
    def identity(self) -> tuple[str, ...]:
        return (*self.spec.keys, "window_start", "window_end") if self.spec.kind == "window" else ()

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        return step(self.spec, state, batch, watermark_ms, now_ms, merged=merged)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        # An interval join is key-local: a row meets only rows of its keys, and each stored row
        # carries its own flags (matched, padded, partners) and its own due watermark, so a step
        # over the rows of the keys a micro-batch touches, and of the rows due, is the step over
        # the whole state for those keys. A window join keeps the watermark of its last sweep
        # in the state's schema, and an as-of join numbers its rows' arrivals across keys: both
        # are stepped whole.
        if self.spec.kind != "interval":
            return None
        return row_due(self.spec, state)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        return next_due(self.spec, state), NOT_DUE

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        if watermark_ms is None:
            return None
        spec = self.spec
        if spec.kind == "window":
            assert spec.window is not None
            return watermark_ms - spec.window.size_ms
        lower, upper = spec.between if spec.kind == "interval" else (0, 0)
        delay = max(
            upper if spec.how in ("left", "full") else 0,
            -lower if spec.how in ("right", "full") else 0,
            0,
        )
        return watermark_ms - delay

    def describe(self) -> str:
        k = self.spec
        rule = {"interval": f"between={k.between}", "window": f"window={k.window!r}", "as_of": "as of"}
        return (
            f"krishiv join operator: {k.kind} how={k.how} keys={list(k.keys)} {rule[k.kind]} "
            f"allowed_lateness_ms={k.allowed_lateness_ms} accumulation={k.accumulation}"
        )
