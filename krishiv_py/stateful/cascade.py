"""A window over versioned rows, as a pure Arrow step: the core of the window over a changelog.

:class:`~krishiv_py.stateful.window_changes.ChangesWindowKernel`, the
window over a changelog (a window over a retracting window's results, a
retracting join's or aggregation's rows; SPEC 3.11, 3.13), turns each batch
of emits and retractions into *changes* and :func:`step` computes the
window over the rows held. The rules are those of
:mod:`krishiv_py.model.cascade` (the reference model): each row held is the
current *version* of its identity (the hidden ``__kp_id_*`` columns; the
kernel gives every emit one of its own) with its event time ``__kp_t``
(ms); a change flagged ``__kp_del`` removes its identity (the kernel's
retraction of the row it withdraws), and a change whose windows all went
at the last step's watermark is very late and dropped. Every step
recomputes the windows from the versions held, fires the due ones that are
new or changed (retracting the previous value in retracting mode),
retracts fired windows that no longer exist, and deletes windows (and
versions) past ``end + allowed lateness``; a watermark lower than the last
step's is ignored.

Everything is vectorized over the versions held (Arrow hash grouping,
numpy); the aggregates are the operator's own partials
(:mod:`krishiv_py.stateful.aggregates`), so values follow Spark SQL exactly
as every window's do.

State
    ``live``: one row per version — hidden identity columns, the event
    time ``__kp_t`` (ms) and the columns the window reads.
    ``emitted``: one row per fired window — its keys, bounds (ms) and the
    values it last emitted. Both are Arrow tables, which the kernel keeps
    in its state row (Arrow IPC) in the operator's state.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> spec = CascadeSpec(keys=("k",), window=TumblingWindow(size_ms=20), lateness_ms=0, retracting=False,
...                    aggs=(AggSpec(name="peak", func="max", column="n", out_type=pa.int64(),
...                                  in_type=pa.int64()),), identity=1)
>>> changes = pa.table({"__kp_id_0": ["a|0", "a|10"], "__kp_t": [9, 19], "__kp_del": [False, False],
...                     "k": ["a", "a"], "n": [2, 5]})
>>> state, out = step(spec, None, changes, 25)
>>> out.results.to_pylist()
[{'k': 'a', 'window_start': 0, 'window_end': 20, 'peak': 5}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import CASCADE_DELETE as DELETE
from krishiv_py.names import CASCADE_EVENT_TIME as EVENT_TIME
from krishiv_py.names import cascade_identity
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful.aggregates import AggSpec, finalize, merge, row_partials
from krishiv_py.stateful.grouping import group_ids
from krishiv_py.stateful.protocol import NOT_DUE

__all__ = [
    "DELETE",
    "EVENT_TIME",
    "CascadeSpec",
    "CascadeState",
    "StepOutput",
    "last_end",
    "step",
]

_WS, _WE = "window_start", "window_end"
_NO_DUE = NOT_DUE


@attrs.frozen(kw_only=True)
class CascadeSpec:
    """The second window: keys, window, aggregates, lateness, mode; ``identity`` columns to match."""

    keys: tuple[str, ...]
    window: TumblingWindow | SlidingWindow | SessionWindow
    aggs: tuple[AggSpec, ...]
    lateness_ms: int
    retracting: bool
    #: How many identity columns (``__kp_id_0`` ...) a change carries.
    identity: int

    @property
    def identity_names(self) -> list[str]:
        return [cascade_identity(i) for i in range(self.identity)]


@attrs.frozen
class CascadeState:
    live: pa.Table
    emitted: pa.Table
    #: The watermark of the last step (None: none yet).
    watermark_ms: int | None


@attrs.frozen
class StepOutput:
    #: keys, window_start/window_end (int ms), the values, then ``kind`` in retracting mode.
    results: pa.Table
    very_late: int
    emitted: int
    retracted: int
    #: The least watermark at which something fires or is deleted (``NOT_DUE``: nothing held).
    next_due_ms: int


def step(
    spec: CascadeSpec,
    state: CascadeState | None,
    changes: pa.Table,
    watermark_ms: int | None,
    *,
    since_ms: int | None = None,
) -> tuple[CascadeState, StepOutput]:
    """One micro-batch: apply ``changes`` (in arrival order), then fire and delete at ``watermark_ms``.

    ``since_ms``: without ``state``, the watermark the changes come at (a window whose end plus
    the allowed lateness is at or below it went already, and never fires).
    """
    before = since_ms if state is None else state.watermark_ms
    very_late = 0
    if before is not None and changes.num_rows:
        t = changes.column(EVENT_TIME).to_numpy()
        late = last_end(spec.window, t) + spec.lateness_ms <= before
        very_late = int(late.sum())
        if very_late:
            changes = changes.filter(pa.array(~late))
    old_live = None if state is None else state.live
    live = _upsert(spec, old_live, changes)
    emitted = state.emitted if state is not None else None
    # Watermarks never go back: one lower than the last step's is ignored (SPEC 3.4).
    wm = before if watermark_ms is None or (before is not None and watermark_ms < before) else watermark_ms
    if wm is None:
        empty = _result_schema(spec, live).empty_table()
        # Nothing fires before the first watermark, but the windows held are due at theirs.
        return CascadeState(live, _emitted_or_empty(spec, live, emitted), None), StepOutput(
            empty, very_late, 0, 0, _next_due(spec, live, NOT_DUE)
        )
    emitted = _emitted_or_empty(spec, live, emitted)
    # Only keys whose versions changed, or whose windows fire or go at this watermark, are
    # computed again: the cost of a step follows what it changes, not the state held.
    in_live, in_emitted = _affected(spec, old_live, changes, live, emitted, before, wm)
    rest, live = live.filter(pa.array(~in_live)), live.filter(pa.array(in_live))
    emitted_rest, emitted = emitted.filter(pa.array(~in_emitted)), emitted.filter(pa.array(in_emitted))
    current, members = _windows(spec, live)
    if before is not None:  # deleted at an earlier step: never again (a version may live on)
        kept = current.column(_WE).to_numpy() + spec.lateness_ms > before
        if not kept.all():
            current = current.filter(pa.array(kept))
            members = _renumber(members, kept)
    results, new_emitted, n_emit, n_retract = _diff(spec, current, emitted, wm)
    ends = current.column(_WE).to_numpy()
    gone = ends + spec.lateness_ms <= wm
    if gone.any():
        new_emitted = new_emitted.filter(pa.array(new_emitted.column(_WE).to_numpy() + spec.lateness_ms > wm))
        live = _forget(spec, live, members, gone, wm)
    live = pa.concat_tables([rest, live])
    new_emitted = pa.concat_tables([emitted_rest, new_emitted.cast(emitted_rest.schema)])
    out = StepOutput(results, very_late, n_emit, n_retract, _next_due(spec, live, wm))
    return CascadeState(live, new_emitted, wm), out


def _points(
    spec: CascadeSpec, t: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per version (row index) and point: the watermarks at which a window of a version fires or goes.

    A session's candidates are every member's ``t + gap`` (its end is its last member's).
    """
    w, lateness = spec.window, spec.lateness_ms
    if isinstance(w, SessionWindow):
        ends, rows = t + w.gap_ms, np.arange(len(t))
    else:
        k = -(-w.size_ms // w.slide_ms)
        rows = np.repeat(np.arange(len(t)), k)
        start = np.repeat(t - np.mod(t - w.offset_ms, w.slide_ms), k) - np.tile(
            np.arange(k) * w.slide_ms, len(t)
        )
        ok = start + w.size_ms > t[rows]
        rows, ends = rows[ok], start[ok] + w.size_ms
    return np.concatenate([rows, rows]), np.concatenate([ends, ends + lateness])


def _next_due(spec: CascadeSpec, live: pa.Table, wm: int) -> int:
    """The least watermark after ``wm`` at which a window of ``live`` fires or goes (``NOT_DUE``: none)."""
    if not live.num_rows:
        return _NO_DUE
    _, points = _points(spec, live.column(EVENT_TIME).to_numpy().astype(np.int64))
    later = points[points > wm]
    return int(later.min()) if len(later) else _NO_DUE


def _affected(
    spec: CascadeSpec,
    old_live: pa.Table | None,
    changes: pa.Table,
    live: pa.Table,
    emitted: pa.Table,
    before: int | None,
    wm: int,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which versions held and which fired windows belong to keys this step must compute again."""
    if before is None or not spec.keys:
        return np.ones(live.num_rows, bool), np.ones(emitted.num_rows, bool)
    old = old_live if old_live is not None else live.slice(0, 0)
    upserts = changes.filter(pa.array(~changes.column(DELETE).to_numpy(zero_copy_only=False).astype(bool)))
    # The key of a removed version is its old version's.
    ids = group_ids(
        [
            pa.concat_arrays([old.column(c).combine_chunks(), changes.column(c).combine_chunks()])
            for c in spec.identity_names
        ]
    )[0]
    changed_ids = np.zeros(int(ids.max()) + 1 if len(ids) else 0, bool)
    changed_ids[ids[old.num_rows :]] = True
    old_changed = old.filter(pa.array(changed_ids[ids[: old.num_rows]])) if old.num_rows else old
    parts = [old_changed, upserts, live, emitted]
    keys = group_ids(
        [
            pa.concat_arrays([p.column(k).combine_chunks().cast(live.schema.field(k).type) for p in parts])
            for k in spec.keys
        ]
    )[0]
    sizes = np.cumsum([0, *(p.num_rows for p in parts)])
    touched = np.zeros(int(keys.max()) + 1 if len(keys) else 0, bool)
    touched[keys[: sizes[2]]] = True  # keys whose versions changed
    rows, points = _points(spec, live.column(EVENT_TIME).to_numpy().astype(np.int64))
    due = (points > before) & (points <= wm)
    touched[keys[sizes[2] + rows[due]]] = True
    ends = emitted.column(_WE).to_numpy().astype(np.int64) + spec.lateness_ms
    touched[keys[sizes[3] :][(ends > before) & (ends <= wm)]] = True
    return touched[keys[sizes[2] : sizes[3]]], touched[keys[sizes[3] :]]


# --- versions ------------------------------------------------------------------------------------


def last_end(
    window: TumblingWindow | SlidingWindow | SessionWindow, t: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """The end of the last window an event time falls in (a session: its proto-window's)."""
    if isinstance(window, SessionWindow):
        return t + window.gap_ms
    return t - np.mod(t - window.offset_ms, window.slide_ms) + window.size_ms


def _upsert(spec: CascadeSpec, live: pa.Table | None, changes: pa.Table) -> pa.Table:
    """The versions held after ``changes``: a later change of an identity replaces the earlier."""
    value_names = [c for c in changes.column_names if c != DELETE]
    if live is None:
        live = changes.schema.empty_table().select(value_names)
    dels = changes.column(DELETE).to_numpy(zero_copy_only=False).astype(bool)
    return _upsert_versions(live, changes.select(value_names), dels, spec.identity_names)


def _upsert_versions(
    live: pa.Table, values: pa.Table, removed: npt.NDArray[np.bool_], identity: Sequence[str]
) -> pa.Table:
    """``live`` after one micro-batch's ``values``: the last row of an identity is its version.

    A row flagged in ``removed`` removes its identity. Within one batch a
    retraction precedes the emit that replaces it, so removals apply first.
    """
    if not values.num_rows:
        return live
    order = np.concatenate([np.flatnonzero(removed), np.flatnonzero(~removed)])
    values, removed = values.take(pa.array(order, pa.int64())), removed[order]
    both = pa.concat_tables([live, values], promote_options="permissive")
    flags = np.concatenate([np.zeros(live.num_rows, bool), removed])
    ids, n_groups, _ = group_ids([both.column(c).combine_chunks() for c in identity])
    last = np.full(n_groups, -1, np.int64)
    np.maximum.at(last, ids, np.arange(len(ids), dtype=np.int64))
    keep = np.sort(last[~flags[last]])
    return both.take(pa.array(keep, pa.int64()))


def _windows(spec: CascadeSpec, live: pa.Table) -> tuple[pa.Table, tuple[Any, Any]]:
    """Every window of the versions held: keys, bounds, values; and (version, window) pairs."""
    t = live.column(EVENT_TIME).to_numpy().astype(np.int64)
    n = len(t)
    key_cols = [live.column(k).combine_chunks() for k in spec.keys]
    kid = group_ids(key_cols)[0] if key_cols and n else np.zeros(n, np.int64)
    w = spec.window
    if isinstance(w, SessionWindow):
        order = np.lexsort((t, kid))
        ts, ks = t[order], kid[order]
        new = np.ones(n, bool)
        if n:
            new[1:] = (ks[1:] != ks[:-1]) | (ts[1:] - ts[:-1] >= w.gap_ms)
        sid = np.cumsum(new) - 1
        n_sessions = int(sid[-1]) + 1 if n else 0
        starts = ts[new]
        last = ts[np.append(new[1:], True)] if n else np.zeros(0, np.int64)  # sorted: a session's last
        rows, win, n_win = order, sid, n_sessions
        ws, we = starts, last + w.gap_ms
        first = order[new]
    else:
        k = -(-w.size_ms // w.slide_ms)
        base = t - np.mod(t - w.offset_ms, w.slide_ms)
        rows = np.repeat(np.arange(n), k)
        start = np.repeat(base, k) - np.tile(np.arange(k) * w.slide_ms, n)
        ok = start + w.size_ms > np.repeat(t, k)
        rows, start = rows[ok], start[ok]
        packed = np.stack([kid[rows], start]).T
        uniq, win = np.unique(packed, axis=0, return_inverse=True) if len(rows) else (packed, rows)
        win = np.asarray(win).reshape(-1)
        n_win = len(uniq)
        ws = uniq[:, 1] if n_win else np.zeros(0, np.int64)
        we = ws + w.size_ms
        first = np.empty(n_win, np.int64)
        first[win[::-1]] = rows[::-1]
    values: dict[str, pa.Array[Any]] = {}
    if spec.aggs:
        picked = live.take(pa.array(rows, pa.int64()))
        parts = row_partials(spec.aggs, picked, None, None)
        values = finalize(spec.aggs, merge(spec.aggs, parts, np.asarray(win, np.int64), n_win))
    firsts = pa.array(first, pa.int64())
    cols: dict[str, Any] = {k: live.column(k).take(firsts) for k in spec.keys}
    cols[_WS] = pa.array(np.asarray(ws, np.int64))
    cols[_WE] = pa.array(np.asarray(we, np.int64))
    cols.update(values)
    return pa.table(cols), (np.asarray(rows), np.asarray(win))


def _renumber(members: tuple[Any, Any], kept: npt.NDArray[np.bool_]) -> tuple[Any, Any]:
    """The (version, window) pairs of the ``kept`` windows, windows numbered anew."""
    rows, win = members
    new_id = np.cumsum(kept) - 1
    inside = kept[win]
    return rows[inside], new_id[win[inside]]


def _forget(
    spec: CascadeSpec, live: pa.Table, members: tuple[Any, Any], gone: npt.NDArray[np.bool_], wm: int
) -> pa.Table:
    """Drop the versions whose windows are all deleted."""
    rows, win = members
    alive = np.zeros(live.num_rows, bool)
    alive[rows[~gone[win]]] = True
    return live.filter(pa.array(alive))


# --- firing --------------------------------------------------------------------------------------


def _emitted_or_empty(spec: CascadeSpec, live: pa.Table, emitted: pa.Table | None) -> pa.Table:
    if emitted is not None:
        return emitted
    return _windows(spec, live.slice(0, 0))[0]


def _diff(
    spec: CascadeSpec, current: pa.Table, emitted: pa.Table, wm: int
) -> tuple[pa.Table, pa.Table, int, int]:
    """The rows to emit at ``wm``: new and changed due windows, retractions; the fired windows after."""
    due = current.filter(pa.array(current.column(_WE).to_numpy() <= wm))
    names = [*spec.keys, _WS, _WE]
    both = pa.concat_tables([due.select(names), emitted.select(names)], promote_options="permissive")
    ids, n_groups, _ = (
        group_ids([both.column(c).combine_chunks() for c in names])
        if both.num_rows
        else (
            np.zeros(0, np.int64),
            0,
            None,
        )
    )
    due_ids, old_ids = ids[: due.num_rows], ids[due.num_rows :]
    old_at = np.full(n_groups, -1, np.int64)
    old_at[old_ids] = np.arange(len(old_ids))
    match = old_at[due_ids]  # the fired row of each due window, or -1
    had = match >= 0
    same = np.zeros(due.num_rows, bool)
    if had.any():
        same[had] = _equal_values(spec, due.filter(pa.array(had)), emitted.take(match[had]))
    fire = ~same
    still = np.zeros(emitted.num_rows, bool)
    still[match[had]] = True
    retract = np.zeros(emitted.num_rows, bool)
    if spec.retracting:
        retract[match[had & fire]] = True
        retract |= ~still
    out_names = [*names, *(a.name for a in spec.aggs)]
    parts = []
    if retract.any():
        parts.append(_kinded(emitted.filter(pa.array(retract)).select(out_names), "retract", spec))
    if fire.any():
        parts.append(_kinded(due.filter(pa.array(fire)).select(out_names), "emit", spec))
    schema = _kinded(due.select(out_names).slice(0, 0), "emit", spec).schema
    results = pa.concat_tables(parts) if parts else schema.empty_table()
    return results, due.select(out_names), int(fire.sum()), int(retract.sum())


def _kinded(table: pa.Table, kind: str, spec: CascadeSpec) -> pa.Table:
    if not spec.retracting:
        return table
    return table.append_column("kind", pa.array([kind] * table.num_rows, pa.string()))


def _equal_values(spec: CascadeSpec, a: pa.Table, b: pa.Table) -> npt.NDArray[np.bool_]:
    same = np.ones(a.num_rows, bool)
    for agg in spec.aggs:
        x: Any = a.column(agg.name).combine_chunks()
        y: Any = b.column(agg.name).combine_chunks()
        eq: Any = pc.fill_null(pc.equal(x, y), False)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        eq = pc.or_(eq, both_null)
        if pa.types.is_floating(x.type):
            eq = pc.or_(eq, pc.and_(pc.is_nan(x).fill_null(False), pc.is_nan(y).fill_null(False)))
        same &= eq.to_numpy(zero_copy_only=False).astype(bool)
    return same


def _result_schema(spec: CascadeSpec, live: pa.Table) -> pa.Schema:
    table = _windows(spec, live.slice(0, 0))[0]
    return _kinded(table.select([*spec.keys, _WS, _WE, *(a.name for a in spec.aggs)]), "emit", spec).schema
