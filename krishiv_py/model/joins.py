"""A small pure-Python reference model of event-time joins (docs/joins.md).

The model runs one join of two keyed streams, *left* and *right*, one
*step* (micro-batch) at a time, and handles one row at a time. It keeps
every stored row for good (only the state TTL drops rows), so it is slow
and obviously right: the oracle the Spark lowerings of the interval, window
and as-of joins are compared with, row for row. It shares no code with them;
from :mod:`krishiv_py.model.reference` it takes only the reading of event
times (:func:`~krishiv_py.model.reference.event_time_us`), and a side's
automatic lag is the model's own (:mod:`krishiv_py.model.auto_lag`).

Time
    Event times are ``int`` epoch milliseconds or ``datetime`` values (a
    naive datetime is UTC), kept in microseconds. A row whose event time is
    ``None`` or out of the supported range is *invalid*.

Watermarks
    Each side's watermark is ``max(previous, floor(max_event_us / 1000) -
    lag)`` over the valid rows it was sent (an automatic lag, SPEC 3.4: the
    lag the side's step ran with, chosen from its earlier steps' delays);
    ``advance_watermark(ts)`` makes it ``max(previous, ts)``, ``close()``
    makes it :data:`END_OF_TIME_MS`.
    The join's watermark ``W`` is the minimum of both sides' (``None``
    while either side has none); it never goes back.

Steps
    A step's rows arrive in order: its left rows, then its right rows.
    ``W`` is the watermark before the step.

    1. Every row is classified against ``W``: *invalid* (listed in
       :attr:`JoinModel.late_events`, nothing else), *very late* (listed,
       joins nothing), else *accepted* and stored: *mildly late* when
       ``t < W``, else *on time*. With allowed lateness ``L``, an interval
       or as-of row is very late when ``t < W`` and ``W - t >= L``; a
       window-join row when none of its windows is retained (a window is
       retained while ``W < end + L``), and it joins only its retained
       windows. While ``W`` is ``None`` nothing is late.
    2. Interval join: every new matching pair (one row of this step at
       least) is emitted, after the retraction of any padded row that
       gained its first match.
    3. The watermarks move to ``W'`` and, if ``W'`` is not ``None``, the
       join *sweeps* at ``W'``: outer rows are padded, windows fire or are
       corrected, as-of rows are emitted or corrected; then the state TTL
       drops rows.

Interval join, ``between=(lower, upper)``
    A left row at ``l`` and a right row at ``r`` of equal keys match when
    ``l + lower <= r <= l + upper``. An unmatched left row is padded at the
    first sweep with ``W' > l + upper``, a right row at the first with
    ``W' > r - lower`` (``how`` left/right/full). Keys that hold a null
    never match.

Window join
    A row is in every window ``[s, s + size)`` with ``s = offset + k *
    slide`` that contains it. A window (of one key) fires at the first
    sweep with ``W' >= end``: the result of its rows (pairs, padded rows,
    semi or anti rows). A window that fired and gained accepted rows in a
    step is corrected at its sweep: ``old`` is the result of its rows before
    the step, ``new`` with them; ``"retracting"`` emits ``old - new`` as
    retractions and then ``new - old`` (multisets of rows), ``"accumulating"``
    (inner joins) emits ``new - old``.

As-of join
    A left row at ``l`` takes the right row of its key *in force* at ``l``:
    the greatest ``(r, arrival)`` with ``r <= l`` (and ``r >= l - max_age``
    when given). It is emitted at the first sweep with ``W' > l`` (``how=
    "left"`` pads a row with none). In ``"retracting"`` mode an emitted left
    row for which a right row accepted in the step beats the one it used is
    corrected at the sweep: its old row retracted (if it emitted one), the
    new one emitted.

State TTL (``state_ttl_ms``, event time)
    At each sweep, after its emissions, every stored row with
    ``t + ttl <= W'`` is dropped: it never matches again and never causes a
    correction. An interval-join row of an outer side that is dropped
    unmatched and not yet padded is padded first.

Output
    A joined row holds the key columns once (left names), for a window join
    ``window_start`` and ``window_end``, the left side's other columns, the
    right side's other columns (a name already taken gets the suffix
    ``_right``), and in ``"retracting"`` mode ``kind`` (``"emit"`` or
    ``"retract"``). Semi and anti rows hold no right columns. A step returns
    the interval join's matches first, then the sweep's rows in a fixed
    order (window end and start, or event time; then key, ``None`` first;
    then arrival).

Examples
--------
An interval join: a right row meets each left row of its key within
``[l - 5, l + 5]``, in the step where the second of them arrives.

>>> model = JoinModel(kind="interval", keys=["k"], left_time="ts", right_time="ts",
...                   left_columns=["k", "ts", "x"], right_columns=["k", "ts", "y"],
...                   left_lag_ms=0, right_lag_ms=0, between=(-5, 5), how="left")
>>> model.send([{"k": "a", "ts": 10, "x": 1}, {"k": "b", "ts": 10, "x": 2}], side="left")
[]
>>> model.send([{"k": "a", "ts": 15, "y": 9}], side="right")
[{'k': 'a', 'ts': 10, 'x': 1, 'ts_right': 15, 'y': 9}]

The left row of ``"b"`` is padded once no right row can reach it, at the
first watermark past ``10 + 5``:

>>> model.advance_watermark(15)
[]
>>> model.advance_watermark(16)
[{'k': 'b', 'ts': 10, 'x': 2, 'ts_right': None, 'y': None}]

A window join fires when the watermark reaches a window's end; with
allowed lateness and retractions a late row corrects it:

>>> from krishiv_py.plan.windows import TumblingWindow
>>> model = JoinModel(kind="window", keys=["k"], left_time="ts", right_time="ts",
...                   left_columns=["k", "ts"], right_columns=["k", "ts"],
...                   left_lag_ms=0, right_lag_ms=0, window=TumblingWindow(size_ms=10),
...                   how="anti", allowed_lateness_ms=5, accumulation="retracting")
>>> model.step(left=[{"k": "a", "ts": 3}, {"k": "a", "ts": 12}], right=[{"k": "b", "ts": 11}])
[{'k': 'a', 'window_start': 0, 'window_end': 10, 'ts': 3, 'kind': 'emit'}]
>>> model.send([{"k": "a", "ts": 9}], side="right")
[{'k': 'a', 'window_start': 0, 'window_end': 10, 'ts': 3, 'kind': 'retract'}]

An as-of join takes the latest right row at or before the left row:

>>> model = JoinModel(kind="as_of", keys=["k"], left_time="ts", right_time="at",
...                   left_columns=["k", "ts"], right_columns=["k", "at", "price"],
...                   left_lag_ms=0, right_lag_ms=0)
>>> model.send([{"k": "a", "at": 1, "price": 10}, {"k": "a", "at": 5, "price": 11}], side="right")
[]
>>> model.send([{"k": "a", "ts": 4}, {"k": "a", "ts": 9}], side="left")
[{'k': 'a', 'ts': 4, 'at': 1, 'price': 10}]
>>> model.close()
[{'k': 'a', 'ts': 9, 'at': 5, 'price': 11}]
>>> model.metrics["emitted"]
2
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.model.auto_lag import AutoLagTracker
from krishiv_py.model.reference import event_time_us, late_event
from krishiv_py.plan.nodes import KIND_COLUMN, Join, PlanNode, schema_of, watermarks_of
from krishiv_py.plan.watermarks import END_OF_TIME_MS, AutoLag
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow

__all__ = ["END_OF_TIME_MS", "JoinModel", "join_model_for"]

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
Key: TypeAlias = tuple[object, ...]
Side: TypeAlias = Literal["left", "right"]
JoinKind: TypeAlias = Literal["interval", "window", "as_of"]
Window: TypeAlias = tuple[int, int]

_HOWS: dict[str, tuple[str, ...]] = {
    "interval": ("inner", "left", "right", "full"),
    "window": ("inner", "left", "right", "full", "semi", "anti"),
    "as_of": ("inner", "left"),
}
_METRICS = (
    "on_time_events",
    "mildly_late_events",
    "very_late_events",
    "invalid_events",
    "emitted",
    "retractions",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# One NaN object: containers compare items by identity first, so keys holding NaN
# are equal, as Spark's join keys (NaN = NaN, -0.0 = 0.0) are.
_NAN = float("nan")


@attrs.define(eq=False)
class _Stored:
    """One accepted row and what the join did with it."""

    side: Side
    ts_us: int
    seq: int  # arrival order, across steps
    step: int  # the step it arrived in
    row: Row
    key: Key  # canonical key values
    windows: tuple[Window, ...] = ()  # window join: the (retained) windows it joined
    dropped: bool = False  # by the state TTL
    matched: bool = False  # interval: has a partner
    padded: bool = False  # interval: its null-padded row is out (not retracted)
    decided: bool = False  # as-of left row: emitted at a sweep (inner: maybe with no row)
    in_force: _Stored | None = None  # as-of left row: the right row of its emitted result
    out: Result | None = None  # as-of left row: the row it emitted, None for none


class JoinModel:
    """Step-by-step reference run of one event-time join (interval, window or as-of).

    Parameters
    ----------
    kind
        ``"interval"``, ``"window"`` or ``"as_of"``.
    keys, right_keys
        The key columns of the left side (output names) and of the right
        side (default: the same names), matched in order.
    left_time, right_time
        Each side's event-time column (int epoch ms or ``datetime``).
    left_columns, right_columns
        All columns of each side's rows, in order, keys and time included.
    left_lag_ms, right_lag_ms
        Each side's watermark lag, ``>= 0``, or an :class:`~krishiv_py.AutoLag`.
    how
        ``inner``, ``left``, ``right``, ``full`` (interval, window),
        ``semi``, ``anti`` (window), ``inner``, ``left`` (as-of).
    between
        Interval join: ``(lower_ms, upper_ms)``, ``lower <= upper``.
    window
        Window join: the :class:`TumblingWindow` or :class:`SlidingWindow`.
    max_age_ms
        As-of join: the oldest a right row may be, ``l - r <= max_age_ms``.
    allowed_lateness_ms
        ``L``: how late a row may be and still join.
    accumulation
        ``"accumulating"`` or ``"retracting"`` (adds the ``kind`` column).
    state_ttl_ms
        Drop stored rows ``state_ttl_ms`` or more behind the watermark.

    Examples
    --------
    >>> model = JoinModel(kind="interval", keys=["k"], left_time="t", right_time="t",
    ...                   left_columns=["k", "t"], right_columns=["k", "t"],
    ...                   left_lag_ms=0, right_lag_ms=0, between=(0, 0))
    >>> model.step(left=[{"k": 1, "t": 5}], right=[{"k": 1, "t": 5}, {"k": 1, "t": 6}])
    [{'k': 1, 't': 5, 't_right': 5}]
    >>> model.watermark_ms
    5
    """

    def __init__(
        self,
        *,
        kind: JoinKind,
        keys: Sequence[str],
        right_keys: Sequence[str] | None = None,
        left_time: str,
        right_time: str,
        left_columns: Sequence[str],
        right_columns: Sequence[str],
        left_lag_ms: int | AutoLag,
        right_lag_ms: int | AutoLag,
        how: str = "inner",
        between: tuple[int, int] | None = None,
        window: TumblingWindow | SlidingWindow | None = None,
        max_age_ms: int | None = None,
        allowed_lateness_ms: int = 0,
        accumulation: Literal["accumulating", "retracting"] = "accumulating",
        state_ttl_ms: int | None = None,
    ) -> None:
        _check_kind(kind, how, accumulation)
        self._kind: JoinKind = kind
        self._how = how
        self._retracting = accumulation == "retracting"
        self._lateness_ms = _check_ms("allowed_lateness_ms", allowed_lateness_ms)
        #: A side with an automatic lag: the tracker that chooses its lag before each step.
        self._auto, self._lags = _check_lags(left_lag_ms, right_lag_ms)
        self._ttl_ms = _check_ttl(state_ttl_ms)
        _check_lateness(kind, how, self._lateness_ms, self._retracting)
        self._lower, self._upper = _check_between(kind, between)
        self._window = _check_window(kind, window)
        self._max_age_ms = _check_max_age(kind, max_age_ms)

        self._keys, self._right_keys = _check_keys(keys, right_keys)
        self._time: dict[Side, str] = {"left": left_time, "right": right_time}
        self._columns: dict[Side, tuple[str, ...]] = {
            "left": tuple(left_columns),
            "right": tuple(right_columns),
        }
        self._side_keys: dict[Side, tuple[str, ...]] = {"left": self._keys, "right": self._right_keys}
        for side in self._columns:
            _check_columns(side, self._columns[side], (*self._side_keys[side], self._time[side]))
        self._left_rest = tuple(c for c in left_columns if c not in self._keys)
        # right column -> its output name
        self._right_rest = _check_output(
            kind, how, self._retracting, (self._keys, self._left_rest), self._right_keys, right_columns
        )

        self._side_wm: dict[Side, int] = {}
        self._overall: int | None = None
        self._rows: dict[Side, list[_Stored]] = {"left": [], "right": []}
        self._fired: dict[tuple[int, int, Key], bool] = {}  # window join: (start, end, key) -> fired
        self._seq = 0
        self._step = 0
        self._results: list[Result] = []
        self._late: list[Result] = []
        self._counts = dict.fromkeys(_METRICS, 0)

    # --- public steps ------------------------------------------------------------------

    def step(self, *, left: Sequence[Row] = (), right: Sequence[Row] = ()) -> list[Result]:
        """One micro-batch with rows of both sides (left ones arrive first); return its output."""
        self._step += 1
        w_ms = self._overall
        new: list[_Stored] = []
        sides: tuple[tuple[Side, Sequence[Row]], ...] = (("left", left), ("right", right))
        for side, rows in sides:
            max_us: int | None = None
            times_ms: list[int] = []
            for row in rows:
                ts_us = event_time_us(row.get(self._time[side]))
                entry = self._accept(side, row, ts_us, w_ms)
                if entry is not None:
                    new.append(entry)
                if ts_us is not None:
                    times_ms.append(ts_us // 1000)
                if ts_us is not None and (max_us is None or ts_us > max_us):
                    max_us = ts_us
            if max_us is not None:
                self._raise(side, max_us // 1000 - self._lags[side])
            auto = self._auto.get(side)
            if auto is not None:  # this step's delays choose the side's lag for the next one
                auto.step(times_ms)
                self._lags[side] = auto.lag_ms()
        out: list[Result] = []
        if self._kind == "interval":
            self._interval_matches(new, out)
        return self._end_step(out)

    def send(self, rows: Sequence[Row], *, side: Side) -> list[Result]:
        """A step with rows of one side only."""
        _check_side(side)
        return self.step(left=rows) if side == "left" else self.step(right=rows)

    def advance_watermark(self, ts_ms: int, *, side: Side | None = None) -> list[Result]:
        """Raise a side's watermark (``None``: both) to at least ``ts_ms``: a step with no rows."""
        if isinstance(ts_ms, bool) or not isinstance(ts_ms, int):
            raise PlanError(f"ts_ms must be an integer number of milliseconds, got {ts_ms!r}")
        return self._punctuate(ts_ms, side)

    def close(self, *, side: Side | None = None) -> list[Result]:
        """End a side (``None``: both): its watermark becomes END_OF_TIME_MS; a step with no rows."""
        return self._punctuate(END_OF_TIME_MS, side)

    @property
    def results(self) -> list[Result]:
        """Every row emitted so far, in order."""
        return [dict(r) for r in self._results]

    @property
    def late_events(self) -> list[Result]:
        """Every invalid and very late row so far: its side, its columns, classification and W."""
        return [dict(r) for r in self._late]

    @property
    def watermark_ms(self) -> int | None:
        """The join's watermark ``W``; ``None`` until both sides have one."""
        return self._overall

    def source_lags(self) -> dict[str, int]:
        """Each side's lag in force for its next step (ms): its fixed lag, or the automatic one."""
        return {str(side): lag for side, lag in self._lags.items()}

    @property
    def metrics(self) -> dict[str, int]:
        """Counters: rows by classification; emitted rows and retractions."""
        return dict(self._counts)

    # --- classification ----------------------------------------------------------------

    def _accept(self, side: Side, row: Row, ts_us: int | None, w_ms: int | None) -> _Stored | None:
        """Classify one row against ``w_ms``; store and return it if accepted."""
        self._seq += 1
        if ts_us is None:
            self._late_event(side, row, "invalid", w_ms)
            return None
        windows: tuple[Window, ...] = ()
        if self._window is not None:
            windows = tuple(
                (s, e)
                for s, e in _windows_of(self._window, ts_us // 1000)
                if w_ms is None or w_ms < e + self._lateness_ms
            )
            very_late = not windows
        else:
            very_late = (
                w_ms is not None and ts_us < w_ms * 1000 and w_ms * 1000 - ts_us >= self._lateness_ms * 1000
            )
        if self._ttl_ms is not None and w_ms is not None and ts_us + self._ttl_ms * 1000 <= w_ms * 1000:
            very_late = True  # as far behind as the state TTL keeps rows: gone on arrival
        if very_late:
            self._late_event(side, row, "very_late", w_ms)
            return None
        late = w_ms is not None and ts_us < w_ms * 1000
        self._counts["mildly_late_events" if late else "on_time_events"] += 1
        key = tuple(_canonical(row.get(name)) for name in self._side_keys[side])
        entry = _Stored(side, ts_us, self._seq, self._step, dict(row), key, windows)
        self._rows[side].append(entry)
        for start, end in windows:
            self._fired.setdefault((start, end, key), False)
        return entry

    def _late_event(self, side: Side, row: Row, classification: str, w_ms: int | None) -> None:
        """List an invalid or very late row as a joined row of its side alone."""
        self._counts[f"{classification}_events"] += 1
        keys = zip(self._keys, self._side_keys[side], strict=True)
        body: Result = {name: row.get(own) for name, own in keys}
        if side == "left":
            body.update((name, row.get(name)) for name in self._left_rest)
        else:
            body.update((out_name, row.get(name)) for name, out_name in self._right_rest)
        self._late.append(late_event(body, classification, w_ms, side))

    # --- watermarks and the sweep ------------------------------------------------------

    def _punctuate(self, ts_ms: int, side: Side | None) -> list[Result]:
        self._step += 1
        sides: tuple[Side, ...] = ("left", "right") if side is None else (_check_side(side),)
        for s in sides:
            self._raise(s, ts_ms)
        return self._end_step([])

    def _raise(self, side: Side, ts_ms: int) -> None:
        self._side_wm[side] = max(self._side_wm.get(side, ts_ms), ts_ms)

    def _end_step(self, out: list[Result]) -> list[Result]:
        if len(self._side_wm) == 2:
            w = min(self._side_wm.values())
            self._overall = w if self._overall is None else max(self._overall, w)
        if self._overall is not None:
            self._sweep(self._overall, out)
        self._results.extend(out)
        return out

    def _sweep(self, x_ms: int, out: list[Result]) -> None:
        """Pad, fire, emit and correct at watermark ``x_ms``; then the state TTL."""
        chunks: list[tuple[tuple[object, ...], list[tuple[Result, str]]]] = []
        x_us = x_ms * 1000
        if self._kind == "interval":
            for entry in self._live("left") + self._live("right"):
                bound = entry.ts_us + (self._upper * 1000 if entry.side == "left" else -self._lower * 1000)
                if x_us > bound and self._pads(entry):
                    chunks.append(self._pad(entry, bound))
        elif self._kind == "window":
            for start, end, key in sorted(self._fired, key=lambda g: (g[1], g[0], _key_order(g[2]))):
                chunks.append(((end, start, _key_order(key)), self._fire(start, end, key, x_ms)))
        else:
            chunks.extend(self._as_of_sweep(x_us))
        if self._ttl_ms is not None:
            for entry in self._live("left") + self._live("right"):
                if entry.ts_us + self._ttl_ms * 1000 <= x_us:
                    if self._kind == "interval" and self._pads(entry):
                        chunks.append(self._pad(entry, entry.ts_us))
                    entry.dropped = True
        for _, rows in sorted(chunks, key=lambda c: c[0]):
            for row, kind in rows:
                self._emit(out, row, kind)

    def _live(self, side: Side) -> list[_Stored]:
        return [e for e in self._rows[side] if not e.dropped]

    def _emit(self, out: list[Result], row: Result, kind: str = "emit") -> None:
        self._counts["retractions" if kind == "retract" else "emitted"] += 1
        out.append({**row, KIND_COLUMN: kind} if self._retracting else dict(row))

    # --- interval join -----------------------------------------------------------------

    def _interval_matches(self, new: list[_Stored], out: list[Result]) -> None:
        """Emit every new pair (one row of this step at least), after retracting padded rows."""
        fresh = {id(e) for e in new}
        pairs = [
            (left, right)
            for left in self._live("left")
            for right in self._live("right")
            if (id(left) in fresh or id(right) in fresh)
            and _same_key(left.key, right.key)
            and left.ts_us + self._lower * 1000 <= right.ts_us <= left.ts_us + self._upper * 1000
        ]
        partnered = sorted({id(e): e for pair in pairs for e in pair}.values(), key=lambda e: e.seq)
        for entry in partnered:
            if entry.padded:
                entry.padded = False
                if self._retracting:
                    self._emit(out, self._padded_row(entry), "retract")
            entry.matched = True
        for left, right in pairs:
            self._emit(out, self._joined(left, right, None))

    def _pads(self, entry: _Stored) -> bool:
        """``entry`` is an unmatched, not yet padded row of a side the join keeps."""
        keeps = ("left", "full") if entry.side == "left" else ("right", "full")
        return self._how in keeps and not entry.matched and not entry.padded

    def _pad(self, entry: _Stored, at_us: int) -> tuple[tuple[object, ...], list[tuple[Result, str]]]:
        entry.padded = True
        return ((at_us, _key_order(entry.key), entry.seq), [(self._padded_row(entry), "emit")])

    def _padded_row(self, entry: _Stored) -> Result:
        return self._joined(entry, None, None) if entry.side == "left" else self._joined(None, entry, None)

    # --- window join -------------------------------------------------------------------

    def _fire(self, start: int, end: int, key: Key, x_ms: int) -> list[tuple[Result, str]]:
        """A window's first firing at ``x_ms >= end``, or its correction if it gained rows."""
        group = (start, end, key)
        lefts = [e for e in self._live("left") if e.key == key and (start, end) in e.windows]
        rights = [e for e in self._live("right") if e.key == key and (start, end) in e.windows]
        if not self._fired[group]:
            if x_ms < end:
                return []
            self._fired[group] = True
            return [(row, "emit") for row in self._window_result((start, end), lefts, rights)]
        if not any(e.step == self._step for e in lefts + rights):
            return []
        old = self._window_result(
            (start, end),
            [e for e in lefts if e.step < self._step],
            [e for e in rights if e.step < self._step],
        )
        new = self._window_result((start, end), lefts, rights)
        gone = [(row, "retract") for row in _minus(old, new)] if self._retracting else []
        return gone + [(row, "emit") for row in _minus(new, old)]

    def _window_result(self, window: Window, lefts: list[_Stored], rights: list[_Stored]) -> list[Result]:
        """The rows a window's rows (of one key) join to, as ``how`` says."""
        partners = {
            id(e): [o for o in (rights if e.side == "left" else lefts) if _same_key(e.key, o.key)]
            for e in lefts + rights
        }
        if self._how in ("semi", "anti"):
            want = self._how == "semi"
            return [self._joined(e, None, window) for e in lefts if bool(partners[id(e)]) == want]
        rows = [self._joined(left, right, window) for left in lefts for right in partners[id(left)]]
        if self._how in ("left", "full"):
            rows += [self._joined(e, None, window) for e in lefts if not partners[id(e)]]
        if self._how in ("right", "full"):
            rows += [self._joined(None, e, window) for e in rights if not partners[id(e)]]
        return rows

    # --- as-of join --------------------------------------------------------------------

    def _as_of_sweep(self, x_us: int) -> list[tuple[tuple[object, ...], list[tuple[Result, str]]]]:
        chunks: list[tuple[tuple[object, ...], list[tuple[Result, str]]]] = []
        for left in self._live("left"):
            rows: list[tuple[Result, str]] = []
            if not left.decided:
                if x_us <= left.ts_us:
                    continue
                left.decided = True
                left.in_force = self._in_force(left, self._live("right"))
                if left.in_force is not None or self._how == "left":
                    left.out = self._joined(left, left.in_force, None)
                    rows.append((left.out, "emit"))
            elif self._retracting:
                fresh = [r for r in self._live("right") if r.step == self._step]
                best = self._in_force(left, fresh)
                current = left.in_force
                if best is None or (
                    current is not None and (best.ts_us, best.seq) <= (current.ts_us, current.seq)
                ):
                    continue
                if left.out is not None:
                    rows.append((left.out, "retract"))
                left.in_force = best
                left.out = self._joined(left, best, None)
                rows.append((left.out, "emit"))
            if rows:
                chunks.append(((left.ts_us, _key_order(left.key), left.seq), rows))
        return chunks

    def _in_force(self, left: _Stored, rights: list[_Stored]) -> _Stored | None:
        """The right row of ``rights`` in force at ``left``: greatest (time, arrival) at or before it."""
        oldest = None if self._max_age_ms is None else left.ts_us - self._max_age_ms * 1000
        usable = [
            r
            for r in rights
            if _same_key(left.key, r.key) and r.ts_us <= left.ts_us and (oldest is None or r.ts_us >= oldest)
        ]
        return max(usable, key=lambda r: (r.ts_us, r.seq), default=None)

    # --- output rows -------------------------------------------------------------------

    def _joined(self, left: _Stored | None, right: _Stored | None, window: Window | None) -> Result:
        """The output row of ``left`` and ``right`` (one may be missing), in ``window`` if given."""
        out: Result = {}
        for name, right_name in zip(self._keys, self._right_keys, strict=True):
            if left is not None:
                out[name] = left.row.get(name)
            else:
                out[name] = None if right is None else right.row.get(right_name)
        if window is not None:
            out["window_start"], out["window_end"] = window
        for name in self._left_rest:
            out[name] = None if left is None else left.row.get(name)
        if self._how not in ("semi", "anti"):
            for name, out_name in self._right_rest:
                out[out_name] = None if right is None else right.row.get(name)
        return out


def _check_kind(kind: str, how: str, accumulation: str) -> None:
    """Raise unless ``kind`` is a join kind, ``how`` one it takes and ``accumulation`` a mode."""
    if kind not in _HOWS:
        raise PlanError(f"join kind must be one of {list(_HOWS)}, got {kind!r}")
    if how not in _HOWS[kind]:
        raise PlanError(f"how={how!r} is not allowed for a {kind} join; choose one of {list(_HOWS[kind])}")
    if accumulation not in ("accumulating", "retracting"):
        raise PlanError(
            f"accumulation must be 'accumulating' or 'retracting' for a join, got {accumulation!r}"
        )


def _check_lags(
    left_lag_ms: int | AutoLag, right_lag_ms: int | AutoLag
) -> tuple[dict[Side, AutoLagTracker], dict[Side, int]]:
    """Each side's lag, checked: the trackers of the automatic ones, and every side's lag to start with."""
    given: tuple[tuple[Side, int | AutoLag], ...] = (("left", left_lag_ms), ("right", right_lag_ms))
    auto: dict[Side, AutoLagTracker] = {
        side: AutoLagTracker(lag) for side, lag in given if isinstance(lag, AutoLag)
    }
    lags: dict[Side, int] = {
        side: lag.max_lag_ms if isinstance(lag, AutoLag) else _check_ms(f"{side}_lag_ms", lag)
        for side, lag in given
    }
    return auto, lags


def _check_ttl(state_ttl_ms: int | None) -> int | None:
    """The state TTL, checked: ``None`` (none) or > 0 milliseconds."""
    ttl_ms = None if state_ttl_ms is None else _check_ms("state_ttl_ms", state_ttl_ms)
    if ttl_ms == 0:
        raise PlanError("state_ttl_ms must be > 0 milliseconds, got 0")
    return ttl_ms


def _check_lateness(kind: JoinKind, how: str, lateness_ms: int, retracting: bool) -> None:
    """Raise if allowed lateness would make the join withdraw rows without retractions."""
    if lateness_ms > 0 and not retracting and (how != "inner" or kind == "as_of"):
        raise PlanError(
            f"a {kind} join with how={how!r} and allowed_lateness_ms > 0 can withdraw rows it "
            "emitted: it needs accumulation='retracting'"
        )


def _check_between(kind: JoinKind, between: tuple[int, int] | None) -> tuple[int, int]:
    """An interval join's ``(lower, upper)`` bounds, checked; ``(0, 0)`` for the other kinds."""
    if kind != "interval":
        if between is not None:
            raise PlanError(f"between= applies to interval joins only, not to a {kind} join")
        return 0, 0
    if between is None:
        raise PlanError("an interval join needs between=(lower_ms, upper_ms)")
    if len(between) != 2:
        raise PlanError(f"between must be (lower_ms, upper_ms), got {between!r}")
    lower = _check_ms("between lower_ms", between[0], negative=True)
    upper = _check_ms("between upper_ms", between[1], negative=True)
    if lower > upper:
        raise PlanError(f"between=(lower_ms, upper_ms) needs lower <= upper, got {between!r}")
    return lower, upper


def _check_window(
    kind: JoinKind, window: TumblingWindow | SlidingWindow | None
) -> TumblingWindow | SlidingWindow | None:
    """A window join's window, checked (``None`` for the other kinds)."""
    if kind == "window":
        if not isinstance(window, TumblingWindow | SlidingWindow):
            raise PlanError(
                f"a window join needs a TumblingWindow or SlidingWindow, got {type(window).__name__}"
            )
    elif window is not None:
        raise PlanError(f"window= applies to window joins only, not to a {kind} join")
    return window


def _check_max_age(kind: JoinKind, max_age_ms: int | None) -> int | None:
    """An as-of join's max age, checked (``None``: none; other kinds take none)."""
    if max_age_ms is not None:
        if kind != "as_of":
            raise PlanError(f"max_age_ms applies to as-of joins only, not to a {kind} join")
        _check_ms("max_age_ms", max_age_ms)
    return max_age_ms


def _check_keys(
    keys: Sequence[str], right_keys: Sequence[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The left and right key columns (the right ones default to the left's), checked."""
    left = tuple(keys)
    right = left if right_keys is None else tuple(right_keys)
    if not left:
        raise PlanError("a join needs at least one key column")
    if len(left) != len(right):
        raise PlanError(
            f"both sides need the same number of key columns: left {list(left)}, right {list(right)}"
        )
    return left, right


def _check_columns(side: Side, columns: tuple[str, ...], needed: tuple[str, ...]) -> None:
    """Raise if a side's columns repeat a name or lack one of its keys or its time column."""
    if len(set(columns)) != len(columns):
        raise PlanError(f"{side}_columns has a duplicate name: {list(columns)}")
    for name in needed:
        if name not in columns:
            raise PlanError(f"{side} column {name!r} is not in {side}_columns {list(columns)}")


def _check_output(
    kind: JoinKind,
    how: str,
    retracting: bool,
    left: tuple[tuple[str, ...], tuple[str, ...]],
    right_keys: tuple[str, ...],
    right_columns: Sequence[str],
) -> tuple[tuple[str, str], ...]:
    """Each right column but the keys with its output name (``_right`` added when the left side's
    keys and other columns or the window's hold it); raise if a joined row names two columns alike."""
    keys, left_rest = left
    taken = [*keys, *(("window_start", "window_end") if kind == "window" else ()), *left_rest]
    right_rest = tuple((c, f"{c}_right" if c in taken else c) for c in right_columns if c not in right_keys)
    names = [*taken, *(n for _, n in right_rest if how not in ("semi", "anti"))]
    if retracting:
        names.append(KIND_COLUMN)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(f"duplicate output column names: {duplicates}")
    return right_rest


def _check_ms(name: str, value: object, *, negative: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{name} must be an integer number of milliseconds, got {value!r}")
    if not negative and value < 0:
        raise PlanError(f"{name} must be >= 0 milliseconds, got {value}")
    return value


def _check_side(side: object) -> Side:
    if side == "left":
        return "left"
    if side == "right":
        return "right"
    raise PlanError(f"side must be 'left' or 'right', got {side!r}")


def _windows_of(window: TumblingWindow | SlidingWindow, t_ms: int) -> list[Window]:
    """Every window ``[s, s + size)`` with ``s = offset + k * slide`` that holds ``t_ms``."""
    size, slide = window.size_ms, window.slide_ms
    start = t_ms - (t_ms - window.offset_ms) % slide  # the latest start at or before t
    out = []
    while start > t_ms - size:
        out.append((start, start + size))
        start -= slide
    return sorted(out)


def _same_key(a: Key, b: Key) -> bool:
    """Join keys match: equal, and no part null."""
    return a == b and all(v is not None for v in a)


def _minus(a: list[Result], b: list[Result]) -> list[Result]:
    """Multiset difference ``a - b`` of rows."""
    rest = list(b)
    out = []
    for row in a:
        for i, other in enumerate(rest):
            if other == row:
                del rest[i]
                break
        else:
            out.append(row)
    return out


def _key_order(key: Key) -> tuple[tuple[bool, object], ...]:
    """Sort form of a key: ``None`` first."""
    return tuple((v is not None, v) for v in key)


def _canonical(value: object) -> object:
    """The matching form of a key value: one NaN, and -0.0 as 0.0."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if value == 0.0:
            return 0.0
    return value


def join_model_for(node: Join) -> JoinModel:
    """The model of a plan's join node (both sides' watermarks, keys, columns and options)."""
    left_time, right_time = node.left_time, node.right_time
    ttl = node.emission.state_ttl
    window = node.window
    if window is not None and not isinstance(window, TumblingWindow | SlidingWindow):
        raise PlanError(f"a window join takes tumbling or sliding windows, got {window.kind}")
    accumulation = node.emission.accumulation
    if accumulation not in ("accumulating", "retracting"):
        raise PlanError(f"a join's accumulation is 'accumulating' or 'retracting', got {accumulation!r}")
    return JoinModel(
        kind=node.kind,
        keys=node.left_keys,
        right_keys=node.right_keys,
        left_time=left_time.column,
        right_time=right_time.column,
        left_columns=schema_of(node.left).names,
        right_columns=schema_of(node.right).names,
        left_lag_ms=_side_lag(node.left, left_time.lag_ms),
        right_lag_ms=_side_lag(node.right, right_time.lag_ms),
        how=node.how,
        between=node.between,
        window=window,
        max_age_ms=node.max_age_ms,
        allowed_lateness_ms=node.emission.allowed_lateness_ms,
        accumulation=accumulation,
        state_ttl_ms=None if ttl is None else ttl.ttl_ms,
    )


def _side_lag(side: PlanNode, lag_ms: int) -> int | AutoLag:
    """A side's lag: its watermark's automatic lag (``watermark(column, "auto")``), else ``lag_ms``."""
    autos = [m.auto for m in watermarks_of(side) if m.auto is not None]
    return autos[0] if len(autos) == 1 else lag_ms
