"""A small pure-Python reference model of windowed aggregation (SPEC 3.2-3.8).

The model runs a pipeline ``watermark -> key_by -> window -> agg`` with its
emission options (trigger, allowed lateness, accumulation) one *step* at a
time, exactly as the tests reason about a Spark job: one ``send``,
``advance_watermark`` or ``close`` call is one micro-batch. It handles one
event at a time and shares no code with the Spark lowerings, which are
checked against it row for row.

Steps
    ``W`` is the overall watermark that held *before* the step (Spark applies
    the watermark computed at the end of the previous micro-batch). The rows
    of the step are handled one at a time, in arrival order, against ``W``.
    Then the source's watermark becomes
    ``max(previous, floor(max_event_us / 1000) - lag)``;
    ``advance_watermark(ts)`` makes it ``max(previous, ts)`` and ``close()``
    makes it :data:`END_OF_TIME_MS`. The new overall watermark ``W'`` is the
    minimum over the sources that are not idle, and ``None`` while any of
    them has none; it never goes back (``W' >= W``). Last, the windows are
    *swept* at ``W`` and, if it differs, at ``W'`` (see Firing).

Idleness
    A source with an idle timeout ``T`` that has not sent (rows,
    ``advance_watermark``) for ``T`` ms of processing time — ``clock()``
    plus every :meth:`ReferenceModel.advance_processing_time` — is *idle*
    and left out of the minimum (a closed source is never idle). While every
    source is idle, the overall watermark stays. A source is active again at
    its next ``send``; its rows meet the overall watermark as usual, and
    since ``W`` never goes back, a returning source behind it cannot move it
    back. Processing time starts when the model is made (the job's start);
    ``advance_processing_time(ms)`` is a step of its own, with no input.

Time
    Event times are ``int`` epoch milliseconds or ``datetime`` values (a naive
    datetime is UTC). They are kept in microseconds, so sub-millisecond
    datetimes are placed exactly; window bounds are whole milliseconds.

Lateness (``allowed_lateness_ms = L``)
    A row whose event time is ``None`` or out of range is *invalid*: counted,
    listed in :attr:`ReferenceModel.late_events`, never windowed, and it does
    not move the watermark. A window is *retained* while
    ``W is None or W < end + L``. A tumbling or sliding row joins each of its
    retained windows. A session row's window is its proto-window
    ``[ts, ts + gap)`` merged with every session of its key that it touches,
    transitively (Flink's rule); the merge happens only if that merged
    session is retained. A row with no retained window is *very late*:
    dropped, counted and listed in ``late_events``. A row that joined a
    window is *mildly late* when ``ts < W``, otherwise *on time*. A row with
    ``ts > W + future_tolerance_ms`` is also counted as a *future* event and
    handled normally.

Firing
    A window's *pending* rows are those added since its last firing; a merged
    session takes over the pending rows of the sessions it absorbed. With
    ``Trigger.on_every_element()`` or ``Trigger.on_count(n)`` a window fires
    as soon as a row brings its pending count to ``1`` (``n``). A sweep at
    ``X`` fires some windows, then deletes some:

    a. a window with ``end <= X`` gets its final firing, once;
    b. a window with ``end <= X`` that got rows after its final firing fires
       again (a late firing);
    c. with ``Trigger.on_interval(ms)``, a window with ``end > X`` and pending
       rows fires, unless it fired less than ``ms`` ago by ``clock()`` (read
       once per sweep);
    c'. per-event sliding windows take their element firings here instead of
       as rows arrive (Kafka's record cache): a window with ``end > X`` fires
       when it has pending rows (``on_every_element()``) or at least ``n`` of
       them (``on_count(n)``); a window a row creates holds its rows as
       pending;
    d. then every window with ``X >= end + L`` is deleted.

Accumulation
    ``"accumulating"``: a firing carries the window's full result.
    ``"discarding"``: a firing carries only its pending rows, and one with no
    pending rows emits nothing (a session's bounds still span all its rows).
    ``"retracting"``: like accumulating, and each row gets a last column
    ``kind``: a firing of a window that emitted before is preceded by its
    previous result with ``kind="retract"``. When a row merges sessions,
    every absorbed session that emitted is retracted at once, and the merged
    session has emitted nothing. A final firing always emits, except in
    discarding mode; the other firings need pending rows.

Log
    With ``record=True`` the model also keeps :attr:`ReferenceModel.log`:
    every step (its kind, rows and the watermarks after it), every row's
    classification and every firing (early, final or late), each with the
    index of its step. :func:`krishiv_py.viz.timeline` draws it.

Output
    One dict per result row: the key columns, ``window_start`` and
    ``window_end`` (int epoch ms), the aggregates, then ``kind`` in
    retracting mode. Within a step, element firings and merge retractions
    come first, in arrival order; then the sweeps' rows, in
    ``(window_end, window_start, key)`` order with ``None`` keys first.

Examples
--------
>>> from krishiv_py.plan.windows import TumblingWindow
>>> model = ReferenceModel(window=TumblingWindow(size_ms=10), event_time="ts",
...                        lag_ms=0, aggregates=[AggSpec(name="n", func="count", column=None)])
>>> model.send([{"ts": 3}, {"ts": 12}])
[{'window_start': 0, 'window_end': 10, 'n': 1}]
>>> model.close()
[{'window_start': 10, 'window_end': 20, 'n': 1}]

With allowed lateness a late row corrects a window that already fired,
and a row whose windows are all gone is listed as very late:

>>> model = ReferenceModel(window=TumblingWindow(size_ms=10), event_time="ts", lag_ms=0,
...                        aggregates=[AggSpec(name="n", func="count", column=None)],
...                        allowed_lateness_ms=5, accumulation="retracting")
>>> model.send([{"ts": 3}, {"ts": 12}])
[{'window_start': 0, 'window_end': 10, 'n': 1, 'kind': 'emit'}]
>>> for row in model.send([{"ts": 4}, {"ts": -1}]):
...     print(row)
{'window_start': 0, 'window_end': 10, 'n': 1, 'kind': 'retract'}
{'window_start': 0, 'window_end': 10, 'n': 2, 'kind': 'emit'}
>>> model.late_events
[{'ts': -1, 'classification': 'very_late', 'watermark_ms': 12}]
"""

from __future__ import annotations

import functools
import math
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeAlias, get_args

import attrs

from krishiv_py.errors import PlanError, SchemaError, SourceClosedError
from krishiv_py.expr import AggFunc
from krishiv_py.model.auto_lag import AutoLagTracker
from krishiv_py.panes import PaneEvent, PaneEventKind
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS, Accumulation, Trigger
from krishiv_py.plan.nodes import KIND_COLUMN
from krishiv_py.plan.watermarks import END_OF_TIME_MS, MAX_EVENT_MS, MIN_EVENT_MS, AutoLag
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    SlidingWindow,
    TimeIntervalWindow,
    TumblingWindow,
    check_ms,
)

__all__ = [
    "END_OF_TIME_MS",
    "FUTURE_TOLERANCE_MS",
    "AggFunc",
    "AggSpec",
    "Classification",
    "LoggedEvent",
    "LoggedFiring",
    "LoggedStep",
    "ReferenceLog",
    "ReferenceMetrics",
    "ReferenceModel",
    "StateWindow",
    "aggregate_rows",
    "event_time_us",
    "late_event",
]

FUTURE_TOLERANCE_MS = DEFAULT_FUTURE_TOLERANCE_MS
"""The default ``future_tolerance_ms``: events further ahead of the watermark are future events."""

Row: TypeAlias = Mapping[str, object]
Key: TypeAlias = tuple[object, ...]
ModelWindow: TypeAlias = (
    TumblingWindow | SlidingWindow | SessionWindow | TimeIntervalWindow | EventSlidingWindow
)
Result: TypeAlias = dict[str, object]
LateClass: TypeAlias = Literal["invalid", "very_late"]
Classification: TypeAlias = Literal["on_time", "mildly_late", "very_late", "invalid"]
FiringKind: TypeAlias = Literal["early", "final", "late"]
StepKind: TypeAlias = Literal["send", "advance_watermark", "close", "processing_time"]

_AGG_FUNCS: frozenset[str] = frozenset(get_args(AggFunc))
_ON_WATERMARK = Trigger.on_watermark()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# One NaN object: containers compare items by identity first, so equal keys
# holding NaN meet in one group, as Spark's grouping does.
_NAN = float("nan")


@attrs.frozen(kw_only=True)
class AggSpec:
    """One aggregate of the model's output, named ``name``.

    Attributes
    ----------
    name
        Output column name.
    func
        One of ``count``, ``sum``, ``avg``, ``min``, ``max``,
        ``count_distinct``, ``first``, ``last``.
    column
        Input column; ``None`` only with ``count`` (count rows, ``count(*)``).
    where
        The rows aggregated: those where it returns True (SQL's ``FILTER
        (WHERE ...)``; None or False leaves a row out); ``None``: every row.

    Examples
    --------
    >>> AggSpec(name="total", func="sum", column="amount").func
    'sum'
    """

    name: str
    func: AggFunc
    column: str | None
    #: The rows it aggregates (SQL's ``FILTER (WHERE ...)``): those where it is true; None: all.
    where: Callable[[Mapping[str, object]], bool | None] | None = None

    def __attrs_post_init__(self) -> None:
        if self.func not in _AGG_FUNCS:
            raise PlanError(f"unknown aggregate function {self.func!r}; valid: {sorted(_AGG_FUNCS)}")
        if self.column is None and self.func != "count":
            raise PlanError(f"aggregate {self.name!r}: {self.func} needs a column")


@attrs.frozen(kw_only=True)
class ReferenceMetrics:
    """Counters of a :class:`ReferenceModel` (a snapshot).

    ``input_rows`` counts every data row sent, invalid ones included, so
    ``input_rows = invalid_events + on_time_events + mildly_late_events +
    very_late_events``; ``future_events`` is counted in addition to that
    split. ``windows_emitted`` counts result rows, retract rows excepted;
    ``retractions`` counts the retract rows.
    """

    input_rows: int
    invalid_events: int
    on_time_events: int
    mildly_late_events: int
    very_late_events: int
    future_events: int
    windows_emitted: int
    retractions: int
    watermark_advances: int
    state_evictions: int = 0  # windows removed by the state TTL
    #: Emitted aggregates without a value: an integer sum beyond a bigint is null.
    arithmetic_errors: int = 0


_METRIC_NAMES: tuple[str, ...] = tuple(a.name for a in attrs.fields(ReferenceMetrics))


@attrs.frozen(kw_only=True)
class LoggedStep:
    """One step of a recording model: what it was and the watermarks after it."""

    kind: StepKind
    source: str
    rows: int  # data rows of a ``send``; 0 for the punctuations
    watermark_ms: int | None  # the overall watermark after the step
    source_watermarks: Mapping[str, int] = attrs.field(hash=False)  # after the step
    #: The automatic lag of each source that has one, in force after the step (ms).
    source_lags: Mapping[str, int] = attrs.field(factory=dict, hash=False)


@attrs.frozen(kw_only=True)
class LoggedEvent:
    """One row as the model classified it; ``step`` is the index of its step, from 0."""

    step: int
    source: str
    ts_us: int | None  # None: no valid event time
    key: Key
    classification: Classification
    watermark_ms: int | None  # the watermark the row met


@attrs.frozen(kw_only=True)
class LoggedFiring:
    """One firing of a window: ``early`` (before its final firing), ``final`` or ``late`` (after it).

    A final firing in discarding mode with nothing new emits no row, but is
    logged all the same.
    """

    step: int
    key: Key
    start_ms: int
    end_ms: int
    kind: FiringKind


@attrs.define
class ReferenceLog:
    """What a model created with ``record=True`` saw and did, in order."""

    steps: list[LoggedStep] = attrs.field(factory=list)
    events: list[LoggedEvent] = attrs.field(factory=list)
    firings: list[LoggedFiring] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class StateWindow:
    """A window held by the model: open, or fired and retained for late rows."""

    key: Key
    start_ms: int
    end_ms: int
    fired: bool  # had its final firing


@attrs.frozen
class _Entry:
    """One accepted event: time in µs, arrival sequence, and the row."""

    ts_us: int
    seq: int
    row: Row


@attrs.define(eq=False)
class _Pane:
    """One key's window ``[start_us, end_us)``: its rows and its firing state."""

    start_us: int
    end_us: int
    key: Key
    entries: list[_Entry] = attrs.field(factory=list)
    pending: list[_Entry] = attrs.field(factory=list)  # added since the last firing
    emitted: Result | None = None  # the last result row emitted
    final_fired: bool = False
    fired_at_ms: float | None = None  # clock() at the last interval firing
    sealed: bool = False  # a capped session that takes no more rows
    shown_end_us: int | None = None  # the reported end when it differs from the firing bound
    touched_ms: float | None = None  # processing time a row last joined it

    def add(self, entry: _Entry) -> None:
        self.entries.append(entry)
        self.pending.append(entry)


class _WindowState(Protocol):
    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> tuple[list[_Pane], list[_Pane]]:
        """The windows ``entry`` joined (none: very late) and the sessions it merged away."""
        ...

    def panes(self) -> list[_Pane]: ...

    def evict(self, x_ms: int) -> None:
        """Delete every window with ``x_ms >= end + allowed lateness``."""
        ...

    def remove(self, panes: Sequence[_Pane]) -> None:
        """Delete these windows (the state TTL)."""
        ...


@attrs.define
class _FixedWindows:
    """State of tumbling and sliding windows: panes by (start, end, key), in ms."""

    window: TumblingWindow | SlidingWindow | TimeIntervalWindow
    lateness_ms: int
    slots: dict[tuple[int, int, Key], _Pane] = attrs.field(factory=dict)

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> tuple[list[_Pane], list[_Pane]]:
        joined = []
        # Window bounds are whole ms, so flooring the µs time keeps membership exact.
        for start, end in self.window.assign(entry.ts_us // 1000):
            if w_ms is None or w_ms < end + self.lateness_ms:
                slot = (start, end, key)
                if slot not in self.slots:
                    self.slots[slot] = _Pane(start * 1000, end * 1000, key)
                self.slots[slot].add(entry)
                joined.append(self.slots[slot])
        return joined, []

    def panes(self) -> list[_Pane]:
        return list(self.slots.values())

    def remove(self, panes: Sequence[_Pane]) -> None:
        gone = {id(p) for p in panes}
        self.slots = {slot: p for slot, p in self.slots.items() if id(p) not in gone}

    def evict(self, x_ms: int) -> None:
        for slot in [slot for slot in self.slots if x_ms >= slot[1] + self.lateness_ms]:
            del self.slots[slot]


@attrs.define
class _Sessions:
    """State of session windows: the sessions of each key, in µs."""

    gap_us: int
    lateness_us: int
    sessions: dict[Key, list[_Pane]] = attrs.field(factory=dict)

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> tuple[list[_Pane], list[_Pane]]:
        start, end = entry.ts_us, entry.ts_us + self.gap_us
        absorbed, rest = [], []
        # Sessions of a key never touch each other, so one pass finds every
        # session the merged one covers (merging is transitive already).
        for pane in self.sessions.get(key, []):
            if start <= pane.end_us and pane.start_us <= end:
                start, end = min(start, pane.start_us), max(end, pane.end_us)
                absorbed.append(pane)
            else:
                rest.append(pane)
        if w_ms is not None and w_ms * 1000 >= end + self.lateness_us:
            return [], []
        merged = _Pane(start, end, key)
        for pane in absorbed:
            merged.entries += pane.entries
            merged.pending += pane.pending
        merged.add(entry)
        self.sessions[key] = [*rest, merged]
        return [merged], absorbed

    def panes(self) -> list[_Pane]:
        return [pane for panes in self.sessions.values() for pane in panes]

    def remove(self, panes: Sequence[_Pane]) -> None:
        gone = {id(p) for p in panes}
        for key, kept in [(k, [p for p in v if id(p) not in gone]) for k, v in self.sessions.items()]:
            if kept:
                self.sessions[key] = kept
            else:
                del self.sessions[key]

    def evict(self, x_ms: int) -> None:
        for key, panes in list(self.sessions.items()):
            kept = [p for p in panes if x_ms * 1000 < p.end_us + self.lateness_us]
            if kept:
                self.sessions[key] = kept
            else:
                del self.sessions[key]


@attrs.define
class _CappedSessions(_Sessions):
    """State of capped sessions (``max_duration_ms``): sessions of each key, some sealed, in µs.

    A row merges with the open sessions its proto-window touches when the
    merged session would span less than the cap (``last - first < cap``);
    otherwise those sessions are sealed — they take no more rows and merge
    with nothing — and the row starts a session of its own. A row whose
    resulting session is not retained is very late and changes nothing.
    """

    cap_us: int = 0

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> tuple[list[_Pane], list[_Pane]]:
        ts, gap = entry.ts_us, self.gap_us
        panes = self.sessions.get(key, [])
        touched = [p for p in panes if not p.sealed and ts <= p.end_us and p.start_us <= ts + gap]
        first = min([ts, *(p.start_us for p in touched)])
        last = max([ts, *(p.end_us - gap for p in touched)])
        merge = last - first < self.cap_us
        start, end = (first, last + gap) if merge else (ts, ts + gap)
        if w_ms is not None and w_ms * 1000 >= end + self.lateness_us:
            return [], []
        new = _Pane(start, end, key)
        absorbed = touched if merge else []
        for pane in absorbed:
            new.entries += pane.entries
            new.pending += pane.pending
        for pane in touched if not merge else []:
            pane.sealed = True
        new.add(entry)
        self.sessions[key] = [p for p in panes if p not in absorbed] + [new]
        return [new], absorbed


@attrs.define
class _EventSliding:
    """Kafka Streams' sliding windows (KIP-450), row by row as ``KStreamSlidingWindowAggregate`` does.

    A window ``[s, s + size]`` (both ends inclusive) is a pane whose firing
    bound is ``s + size + 1 + grace``: it fires once the watermark passes
    ``end + grace``, when it *closes*. ``close = W - grace`` for the step.
    A row with ``t + size < close`` is very late. Otherwise, for one key:

    - ``t < size`` (early): the row updates every window with
      ``0 < start <= t``, creates its right window ``[t + 1, t + 1 + size]``
      as a copy of the newest such window (or of ``[0, size]``) holding rows
      after ``t``, creates the previous row's right window, and last updates
      (or creates) ``[0, size]``;
    - otherwise the windows with start in ``[t - 2 size, t + 1]`` are visited
      newest first: ``start == t + 1`` marks the right window as existing;
      ``end > t`` windows are updated (the first one is kept, before the
      update, as the copy for the right window); ``end == t`` is the row's
      left window: updated, and if it already held a row at ``t`` nothing
      else is created; the first window with ``end < t`` gives the previous
      row's time and its contents. Then, in order: the previous row's right
      window ``[prev + 1, prev + 1 + size]`` if it does not exist and reaches
      ``t``; the left window ``[t - size, t]`` (from the previous contents
      when ``t - size <= prev``); the row's own right window, a copy.

    Only open windows (``end >= close``) are updated or created (the right
    copy always is). Windows stay in state for lookups until their start is
    more than ``grace + 3 size`` behind the watermark.
    """

    size: int
    grace: int
    windows: dict[Key, dict[int, _Pane]] = attrs.field(factory=dict)

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> tuple[list[_Pane], list[_Pane]]:
        t, size = entry.ts_us // 1000, self.size
        close = None if w_ms is None else w_ms - self.grace
        if close is not None and t + size < close:
            return [], []
        wins = self.windows.setdefault(key, {})
        joined: list[_Pane] = []

        def update(start: int) -> None:
            """Add the row to the stored window ``start`` (if it is open)."""
            if close is None or start + size >= close:
                wins[start].add(entry)
                joined.append(wins[start])

        def create(start: int, base: list[_Entry] | None = None) -> None:
            """(Re)create window ``start`` as ``base`` plus the row (if it is open)."""
            if close is None or start + size >= close:
                pane = wins[start] = self._pane(key, start, list(base or []))
                pane.add(entry)
                joined.append(pane)

        def copy(start: int, source: list[_Entry]) -> None:
            """Create window ``start`` as a copy of ``source`` (without the row, which it does not hold)."""
            wins[start] = self._pane(key, start, list(source))

        if t < size:
            self._early(t, wins, update, create, copy)
        else:
            self._regular(t, wins, update, create, copy)
        return joined, []

    def _pane(self, key: Key, start: int, entries: list[_Entry]) -> _Pane:
        end = start + self.size
        pane = _Pane((start) * 1000, (end + 1 + self.grace) * 1000, key, shown_end_us=end * 1000)
        pane.entries = entries
        pane.pending = list(entries)
        return pane

    def _regular(self, t: int, wins: dict[int, _Pane], update: Any, create: Any, copy: Any) -> None:
        size = self.size
        right_copy: list[_Entry] | None = None
        right_max = 0
        left_exists = right_exists = False
        prev: int | None = None
        left_base: list[_Entry] = []
        starts = sorted((s for s in wins if max(0, t - 2 * size) <= s <= t + 1), reverse=True)
        for s in starts:
            pane, end = wins[s], s + size
            newest = _max_ms(pane)
            if s == t + 1:
                right_exists = True
            elif end > t:
                if right_copy is None:
                    right_copy, right_max = list(pane.entries), newest
                update(s)
            elif end == t:
                left_exists = True
                update(s)
                if newest < t:
                    prev = newest
                else:
                    return  # a row at t was here already: no new window
            else:
                left_base, prev = list(pane.entries), newest
                break
        if prev is not None and prev + 1 not in starts and prev + 1 + size >= t:
            create(prev + 1)
        if not left_exists:
            create(t - size, left_base if prev is not None and t - size <= prev else None)
        if not right_exists and right_copy is not None and right_max > t:
            copy(t + 1, right_copy)

    def _early(self, t: int, wins: dict[int, _Pane], update: Any, create: Any, copy: Any) -> None:
        combined = wins.get(0)
        prev = None if combined is None or _max_ms(combined) >= t else _max_ms(combined)
        copied: tuple[list[_Entry], int] | None = None
        right_exists = False
        for s in sorted(s for s in wins if 0 < s <= t + 1):
            if s == t + 1:
                right_exists = True
            else:
                copied = (list(wins[s].entries), _max_ms(wins[s]))  # before this row joins it
                update(s)
        if copied is None and combined is not None and _max_ms(combined) > t:
            copied = (list(combined.entries), _max_ms(combined))
        if not right_exists and copied is not None and copied[1] > t:
            copy(t + 1, copied[0])
        if prev is not None and prev + 1 not in wins:
            create(prev + 1)
        if combined is None:
            create(0)
        else:
            update(0)

    def panes(self) -> list[_Pane]:
        return [pane for wins in self.windows.values() for pane in wins.values()]

    def remove(self, panes: Sequence[_Pane]) -> None:
        gone = {id(p) for p in panes}
        for wins in self.windows.values():
            for start in [s for s, p in wins.items() if id(p) in gone]:
                del wins[start]

    def evict(self, x_ms: int) -> None:
        horizon = x_ms - self.grace - 3 * self.size
        for key, wins in list(self.windows.items()):
            for s in [s for s in wins if s < horizon]:
                del wins[s]
            if not wins:
                del self.windows[key]


def _max_ms(pane: _Pane) -> int:
    """The largest event time (ms) in a window: Kafka's window timestamp."""
    return max(e.ts_us for e in pane.entries) // 1000


class ReferenceModel:
    """Step-by-step reference run of one windowed aggregation.

    Parameters
    ----------
    window
        The window assigner; capped sessions are not modelled.
    event_time
        Name of the event-time column (int epoch ms or ``datetime``).
    lag_ms
        Watermark lag (bounded out-of-orderness), ``>= 0``, or an
        :class:`~krishiv_py.plan.watermarks.AutoLag` (the lag of each step
        chosen from the delays of the steps before it, SPEC 3.4): one for
        every source, or a mapping from each source name to its own.
    keys
        Key columns; empty for one global group.
    aggregates
        The output aggregates, in output order.
    sources
        Names of the sources whose watermarks make the overall one.
    allowed_lateness_ms
        How long after the watermark passes its end a window is kept for
        late rows (``L`` in the module docstring).
    trigger
        When windows fire besides their final firing (:class:`Trigger`).
    accumulation
        ``"accumulating"``, ``"discarding"`` or ``"retracting"``.
    future_tolerance_ms
        Rows further than this ahead of the watermark count as future events.
    state_ttl_ms
        State TTL: a window not updated for this long fires (if it never
        did) and is removed, counted in ``state_evictions`` when its own
        retention would have kept it.
    state_ttl_time
        What the TTL measures: ``"event"`` (default) — the window's newest
        row behind the watermark (a row already that far behind is very
        late); ``"processing"`` — processing time since a row last joined it,
        checked at every step before its rows are added.
    idle_timeout_ms
        Processing time without input after which a source is idle: one
        for every source, a mapping from source name to its timeout
        (``None``: never idle), or ``None`` (default: no source is idle).
    clock
        Processing time in ms, read by ``Trigger.on_interval`` and for
        idleness; default ``time.monotonic() * 1000``.
    record
        Keep :attr:`log`, every step, classification and firing (for
        :mod:`krishiv_py.viz`); results are the same either way.

    Examples
    --------
    >>> from krishiv_py.plan.windows import SessionWindow
    >>> model = ReferenceModel(window=SessionWindow(gap_ms=5), event_time="ts", lag_ms=0,
    ...                        keys=["k"], aggregates=[AggSpec(name="n", func="count", column=None)])
    >>> model.send([{"k": "a", "ts": 0}, {"k": "a", "ts": 5}, {"k": "b", "ts": 1}])
    []
    >>> for row in model.close():
    ...     print(row)
    {'k': 'b', 'window_start': 1, 'window_end': 6, 'n': 1}
    {'k': 'a', 'window_start': 0, 'window_end': 10, 'n': 2}

    An early trigger fires updated results before the final one:

    >>> from krishiv_py.plan.emission import Trigger
    >>> model = ReferenceModel(window=SessionWindow(gap_ms=5), event_time="ts", lag_ms=0,
    ...                        aggregates=[AggSpec(name="n", func="count", column=None)],
    ...                        trigger=Trigger.on_count(2), accumulation="discarding")
    >>> model.send([{"ts": 0}, {"ts": 1}, {"ts": 2}])
    [{'window_start': 0, 'window_end': 6, 'n': 2}]
    >>> model.close()
    [{'window_start': 0, 'window_end': 7, 'n': 1}]
    """

    def __init__(
        self,
        *,
        window: ModelWindow,
        event_time: str,
        lag_ms: int | AutoLag | Mapping[str, int | AutoLag],
        keys: Sequence[str] = (),
        aggregates: Sequence[AggSpec],
        sources: Sequence[str] = ("main",),
        allowed_lateness_ms: int = 0,
        trigger: Trigger = _ON_WATERMARK,
        accumulation: Accumulation = "accumulating",
        future_tolerance_ms: int = FUTURE_TOLERANCE_MS,
        idle_timeout_ms: int | Mapping[str, int | None] | None = None,
        state_ttl_ms: int | None = None,
        state_ttl_time: Literal["event", "processing"] = "event",
        clock: Callable[[], float] | None = None,
        record: bool = False,
    ) -> None:
        lateness = check_ms("allowed_lateness_ms", allowed_lateness_ms, positive=False)
        self._state = _make_state(window, lateness)
        self._lateness_ms = lateness
        self._ttl_ms = None if state_ttl_ms is None else check_ms("state_ttl_ms", state_ttl_ms)
        if state_ttl_time not in ("event", "processing"):
            raise PlanError(f"state_ttl_time is 'event' or 'processing', got {state_ttl_time!r}")
        self._ttl_time = state_ttl_time
        self._pane_events: list[PaneEvent] | None = [] if isinstance(window, TimeIntervalWindow) else None
        self._event_time = event_time
        self._keys = tuple(keys)
        self._aggregates = tuple(aggregates)
        self._sources = _check_sources(sources)
        lags = _check_lags(lag_ms, self._sources)
        #: Per source, its fixed lag, or the tracker that chooses it before each step (SPEC 3.4).
        self._auto = {s: AutoLagTracker(v) for s, v in lags.items() if isinstance(v, AutoLag)}
        self._lags = {s: v.max_lag_ms if isinstance(v, AutoLag) else v for s, v in lags.items()}
        self._trigger = _check_trigger(trigger)
        self._accumulation = _check_accumulation(accumulation)
        self._future_tolerance_ms = check_ms("future_tolerance_ms", future_tolerance_ms, positive=False)
        self._clock = clock if clock is not None else _monotonic_ms
        self._idle_timeouts = _check_idle(idle_timeout_ms, self._sources)
        self._pt_offset_ms = 0.0
        self._last_active = dict.fromkeys(self._sources, self._now())
        _check_output_names(self._keys, self._aggregates, retracting=accumulation == "retracting")
        self._watermarks: dict[str, int] = {}
        self._closed: set[str] = set()
        self._overall: int | None = None
        self._seq = 0
        self._step = 0
        self._log = ReferenceLog() if record else None
        self._results: list[Result] = []
        self._late_events: list[Result] = []
        self._counts = dict.fromkeys(_METRIC_NAMES, 0)

    @classmethod
    def bounded(
        cls,
        rows: Sequence[Row],
        *,
        window: ModelWindow,
        event_time: str,
        lag_ms: int,
        keys: Sequence[str] = (),
        aggregates: Sequence[AggSpec],
        allowed_lateness_ms: int = 0,
        trigger: Trigger = _ON_WATERMARK,
        accumulation: Accumulation = "accumulating",
        future_tolerance_ms: int = FUTURE_TOLERANCE_MS,
    ) -> list[Result]:
        """What a bounded (batch) run gives: one step with every row, then ``close()``.

        Examples
        --------
        >>> from krishiv_py.plan.windows import TumblingWindow
        >>> ReferenceModel.bounded([{"ts": 1}, {"ts": 2}], window=TumblingWindow(size_ms=10),
        ...                        event_time="ts", lag_ms=0,
        ...                        aggregates=[AggSpec(name="n", func="count", column=None)])
        [{'window_start': 0, 'window_end': 10, 'n': 2}]
        """
        model = cls(
            window=window,
            event_time=event_time,
            lag_ms=lag_ms,
            keys=keys,
            aggregates=aggregates,
            allowed_lateness_ms=allowed_lateness_ms,
            trigger=trigger,
            accumulation=accumulation,
            future_tolerance_ms=future_tolerance_ms,
        )
        model.send(rows)
        model.close()
        return model.results

    def send(self, rows: Sequence[Row], *, source: str = "main") -> list[Result]:
        """Process ``rows`` as one step from ``source``; return the rows emitted by it."""
        self._check_open(source)
        w_ms = self._overall
        out: list[Result] = []
        max_us: int | None = None
        order: list[int] = list(range(len(rows)))
        if isinstance(self._state, _CappedSessions):  # a step's rows join capped sessions in event-time order
            order = sorted(order, key=lambda i: (event_time_us(rows[i].get(self._event_time)) or 0, i))
        base = self._seq
        if self._ttl_ms is not None and self._ttl_time == "processing":
            self._sweep(w_ms, out, interval=False)  # windows that expired before these rows came
        times_ms: list[int] = []  # the step's event times that move the watermark, in arrival order
        for i in order:
            ts_us = self._ingest(rows[i], w_ms, out, source, seq=base + i)
            if ts_us is not None:
                times_ms.append(ts_us // 1000)
            if ts_us is not None and (max_us is None or ts_us > max_us):
                max_us = ts_us
        self._seq = base + len(rows)
        if rows:
            self._last_active[source] = self._now()
        if max_us is not None:
            self._raise_source(source, max_us // 1000 - self._lags[source])
        auto = self._auto.get(source)
        if auto is not None:  # this step's delays choose the lag of the next one
            auto.step(times_ms)
            self._lags[source] = auto.lag_ms()
        return self._end_step(w_ms, out, "send", source, len(rows))

    def source_lags(self) -> dict[str, int]:
        """Each source's lag in force for its next step (ms): its fixed lag, or the automatic one."""
        return dict(self._lags)

    def advance_watermark(self, ts_ms: int, *, source: str = "main") -> list[Result]:
        """Promise no event older than ``ts_ms`` follows from ``source`` (one step)."""
        self._check_open(source)
        if isinstance(ts_ms, bool) or not isinstance(ts_ms, int):
            raise PlanError(f"ts_ms must be an integer number of milliseconds, got {ts_ms!r}")
        w_ms = self._overall
        self._last_active[source] = self._now()
        self._raise_source(source, ts_ms)
        return self._end_step(w_ms, [], "advance_watermark", source)

    def advance_processing_time(self, ms: float) -> list[Result]:
        """Let ``ms`` of processing time pass with no input (one step): sources may go idle.

        Interval firings that became due fire, and if idleness moved the
        overall watermark, the windows it passed fire.
        """
        if isinstance(ms, bool) or not isinstance(ms, int | float) or ms < 0:
            raise PlanError(f"advance_processing_time() takes milliseconds >= 0, got {ms!r}")
        self._pt_offset_ms += ms
        return self._end_step(self._overall, [], "processing_time", "")

    def idle_sources(self) -> frozenset[str]:
        """The sources idle now (left out of the overall watermark)."""
        now = self._now()
        return frozenset(
            s
            for s, timeout in self._idle_timeouts.items()
            if timeout is not None and s not in self._closed and now - self._last_active[s] >= timeout
        )

    def close(self, *, source: str = "main") -> list[Result]:
        """End ``source``: its watermark becomes END_OF_TIME_MS (one step; idempotent)."""
        self._check_source(source)
        w_ms = self._overall
        self._closed.add(source)
        self._raise_source(source, END_OF_TIME_MS)
        return self._end_step(w_ms, [], "close", source)

    @property
    def results(self) -> list[Result]:
        """Every row emitted so far, in emit order."""
        return list(self._results)

    @property
    def late_events(self) -> list[Result]:
        """Every invalid and very late row so far, in arrival order.

        Each is the input row plus ``classification`` (``"invalid"`` or
        ``"very_late"``) and ``watermark_ms`` (the ``W`` it met; ``None``
        before the first watermark).
        """
        return [dict(event) for event in self._late_events]

    @property
    def watermark_ms(self) -> int | None:
        """The overall watermark, ``None`` until every source has one."""
        return self._overall

    def source_watermarks(self) -> dict[str, int]:
        """The watermark of each source that has one."""
        return dict(self._watermarks)

    @property
    def sources(self) -> tuple[str, ...]:
        """The declared sources, in order."""
        return self._sources

    @property
    def metrics(self) -> ReferenceMetrics:
        """A snapshot of the counters."""
        return ReferenceMetrics(**self._counts)

    @property
    def pane_events(self) -> list[PaneEvent]:
        """Every pane event so far (time-interval windows; see :mod:`krishiv_py.panes`)."""
        return list(self._pane_events or [])

    @property
    def log(self) -> ReferenceLog | None:
        """Every step, classification and firing so far; ``None`` unless made with ``record=True``."""
        return self._log

    def state_windows(self) -> list[StateWindow]:
        """The windows held now, in firing order: open, or fired and retained for late rows."""
        return [
            StateWindow(key=p.key, start_ms=p.start_us // 1000, end_ms=p.end_us // 1000, fired=p.final_fired)
            for p in sorted(self._state.panes(), key=_emit_order)
        ]

    def _check_source(self, source: str) -> None:
        if source not in self._sources:
            raise PlanError(f"unknown source {source!r}; declared sources: {list(self._sources)}")

    def _check_open(self, source: str) -> None:
        self._check_source(source)
        if source in self._closed:
            raise SourceClosedError(f"source {source!r} is closed")

    def _ingest(self, row: Row, w_ms: int | None, out: list[Result], source: str, *, seq: int) -> int | None:
        """Classify, store and maybe fire one row; return its event time in µs (None if invalid).

        ``seq`` is the row's arrival order (orders ``first``/``last`` among equal times).
        """
        self._counts["input_rows"] += 1
        ts_us = event_time_us(row.get(self._event_time))
        if ts_us is not None and ts_us < 0 and isinstance(self._state, _EventSliding):
            # Kafka's sliding windows have no windows before the epoch: such a row is
            # invalid, though its (valid) event time still moves the watermark.
            self._late(row, "invalid", w_ms)
            self._record(row, source, None, "invalid", w_ms)
            return ts_us
        if ts_us is None:
            self._late(row, "invalid", w_ms)
            self._record(row, source, None, "invalid", w_ms)
            return None
        if w_ms is not None and ts_us > (w_ms + self._future_tolerance_ms) * 1000:
            self._counts["future_events"] += 1
        if (
            self._ttl_ms is not None
            and self._ttl_time == "event"
            and w_ms is not None
            and ts_us <= (w_ms - self._ttl_ms) * 1000
        ):
            joined: list[_Pane] = []  # already past the state TTL: it would expire at once
            absorbed: list[_Pane] = []
        else:
            joined, absorbed = self._state.add(self._key_of(row), _Entry(ts_us, seq, dict(row)), w_ms)
        if not joined:
            self._late(row, "very_late", w_ms)
            self._record(row, source, ts_us, "very_late", w_ms)
            return ts_us
        late = w_ms is not None and ts_us < w_ms * 1000
        self._counts["mildly_late_events" if late else "on_time_events"] += 1
        self._record(row, source, ts_us, "mildly_late" if late else "on_time", w_ms)
        now = self._now()
        for pane in joined:
            pane.touched_ms = now
        for pane in absorbed:
            if pane.emitted is not None and self._accumulation == "retracting":
                self._retract(pane, out)
        # Per-event sliding windows collapse element firings per step (at the sweep), like
        # Kafka Streams' record cache flushed at every commit.
        every = 0 if isinstance(self._state, _EventSliding) else self._trigger.element_count
        for pane in joined:
            if every and len(pane.pending) >= every:
                self._fire(pane, out, "late" if pane.final_fired else "early")
        return ts_us

    def _late(self, row: Row, classification: LateClass, w_ms: int | None) -> None:
        self._counts[f"{classification}_events"] += 1
        self._late_events.append(late_event(row, classification, w_ms))

    def _record(
        self, row: Row, source: str, ts_us: int | None, classification: Classification, w_ms: int | None
    ) -> None:
        if self._log is not None:
            self._log.events.append(
                LoggedEvent(
                    step=self._step,
                    source=source,
                    ts_us=ts_us,
                    key=self._key_of(row),
                    classification=classification,
                    watermark_ms=w_ms,
                )
            )

    def _key_of(self, row: Row) -> Key:
        return tuple(_canonical(row.get(name)) for name in self._keys)

    def _raise_source(self, source: str, ts_ms: int) -> None:
        self._watermarks[source] = max(self._watermarks.get(source, ts_ms), ts_ms)

    def _end_step(
        self, w_ms: int | None, out: list[Result], kind: StepKind, source: str, rows: int = 0
    ) -> list[Result]:
        """Sweep at the old watermark (only interval firings while there is none), move it, sweep again."""
        self._sweep(w_ms, out)
        self._move_overall()
        if self._overall is not None and self._overall != w_ms:
            self._sweep(self._overall, out)
        self._results.extend(out)
        if self._log is not None:
            self._log.steps.append(
                LoggedStep(
                    kind=kind,
                    source=source,
                    rows=rows,
                    watermark_ms=self._overall,
                    source_watermarks=dict(self._watermarks),
                    source_lags={source: self._lags[source] for source in self._auto},
                )
            )
        self._step += 1
        return out

    def _now(self) -> float:
        return self._clock() + self._pt_offset_ms

    def _move_overall(self) -> None:
        idle = self.idle_sources()
        counted = [s for s in self._sources if s not in idle]
        if not counted or any(source not in self._watermarks for source in counted):
            return
        new = min(self._watermarks[source] for source in counted)
        if self._overall is None or new > self._overall:
            self._counts["watermark_advances"] += 1
            self._overall = new

    def _sweep(self, x_ms: int | None, out: list[Result], *, interval: bool = True) -> None:
        """Final, late and interval firings at watermark ``x_ms``, then eviction.

        With a state TTL, a window not updated for ``ttl`` (its newest row
        that far behind ``x_ms``, or no row for that long by the clock) is
        *stale*: it fires as if its end had passed, then leaves state.
        ``interval=False`` leaves interval and element firings out.
        """
        now: float | None = None
        stale = self._stale(x_ms)
        for pane in sorted(self._state.panes(), key=_emit_order):
            if (x_ms is not None and pane.end_us <= x_ms * 1000) or id(pane) in stale:
                if not pane.final_fired or pane.pending:
                    kind: FiringKind = "late" if pane.final_fired else "final"
                    pane.final_fired = True
                    if self._pane_events is not None:
                        if kind == "final":
                            self._pane_event("initial_full", pane)
                        self._pane_event("trigger", pane)
                    self._fire(pane, out, kind)
            elif not interval:
                continue
            elif isinstance(self._state, _EventSliding) and self._trigger.element_count:
                # on_every_element(): any pending row; on_count(n): n of them
                if len(pane.pending) >= self._trigger.element_count:
                    self._fire(pane, out, "early")
            elif self._trigger.kind == "interval" and pane.pending:
                now = self._clock() if now is None else now
                if pane.fired_at_ms is None or now - pane.fired_at_ms >= self._trigger.every:
                    pane.fired_at_ms = now
                    self._fire(pane, out, "early")
        if stale:
            panes = [p for p in self._state.panes() if id(p) in stale]
            # Counted when its own retention would have kept it.
            self._counts["state_evictions"] += sum(
                x_ms is None or x_ms * 1000 < p.end_us + self._lateness_ms * 1000 for p in panes
            )
            self._state.remove(panes)
        if x_ms is not None:
            if self._pane_events is not None:
                for pane in sorted(self._state.panes(), key=_emit_order):
                    if x_ms * 1000 >= pane.end_us + self._lateness_ms * 1000:
                        self._pane_event("close", pane)
            self._state.evict(x_ms)

    def _stale(self, x_ms: int | None) -> set[int]:
        """``id()`` of the windows the state TTL expires at ``x_ms`` (or now, in processing time)."""
        if self._ttl_ms is None:
            return set()
        if self._ttl_time == "processing":
            now = self._now()
            return {
                id(p)
                for p in self._state.panes()
                if p.touched_ms is not None and now - p.touched_ms >= self._ttl_ms
            }
        if x_ms is None:
            return set()
        horizon_us = (x_ms - self._ttl_ms) * 1000
        return {id(p) for p in self._state.panes() if max(e.ts_us for e in p.entries) <= horizon_us}

    def _pane_event(self, kind: PaneEventKind, pane: _Pane) -> None:
        assert self._pane_events is not None
        values = {spec.name: _value(spec, pane.entries) for spec in self._aggregates}
        self._pane_events.append(
            PaneEvent(
                kind=kind,
                key=pane.key,
                window_start_ms=pane.start_us // 1000,
                window_end_ms=pane.end_us // 1000,
                values=values,
            )
        )

    def _fire(self, pane: _Pane, out: list[Result], kind: FiringKind) -> None:
        """Emit ``pane``'s result as its accumulation mode says, then clear its pending rows."""
        if self._log is not None:
            self._log.firings.append(
                LoggedFiring(
                    step=self._step,
                    key=pane.key,
                    start_ms=pane.start_us // 1000,
                    end_ms=pane.end_us // 1000,
                    kind=kind,
                )
            )
        rows = pane.pending if self._accumulation == "discarding" else pane.entries
        pane.pending = []
        if not rows:
            return
        result = self._result_row(pane, rows)
        if self._accumulation == "retracting":
            if pane.emitted is not None:
                self._retract(pane, out)
            result[KIND_COLUMN] = "emit"
        pane.emitted = result
        self._counts["windows_emitted"] += 1
        out.append(result)

    def _retract(self, pane: _Pane, out: list[Result]) -> None:
        assert pane.emitted is not None
        self._counts["retractions"] += 1
        out.append({**pane.emitted, KIND_COLUMN: "retract"})

    def _result_row(self, pane: _Pane, entries: Sequence[_Entry]) -> Result:
        out: Result = dict(zip(self._keys, pane.key, strict=True))
        # Session bounds may fall between milliseconds; floor like Spark's unix_millis.
        out["window_start"] = pane.start_us // 1000
        out["window_end"] = (pane.end_us if pane.shown_end_us is None else pane.shown_end_us) // 1000
        for spec in self._aggregates:
            out[spec.name] = _aggregate(spec, entries)
            if out[spec.name] is _NO_VALUE:
                out[spec.name] = None
                self._counts["arithmetic_errors"] += 1
        return out


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


def _make_state(window: ModelWindow, lateness_ms: int) -> _WindowState:
    if isinstance(window, SessionWindow):
        if window.max_duration_ms is not None:
            return _CappedSessions(
                gap_us=window.gap_ms * 1000,
                cap_us=window.max_duration_ms * 1000,
                lateness_us=lateness_ms * 1000,
            )
        return _Sessions(gap_us=window.gap_ms * 1000, lateness_us=lateness_ms * 1000)
    if isinstance(window, TumblingWindow | SlidingWindow | TimeIntervalWindow):
        return _FixedWindows(window=window, lateness_ms=lateness_ms)
    if isinstance(window, EventSlidingWindow):
        return _EventSliding(size=window.size_ms, grace=window.grace_ms)
    raise PlanError(f"the reference model cannot run window {window!r}")


def _check_sources(sources: Sequence[str]) -> tuple[str, ...]:
    names = tuple(sources)
    if not names or len(set(names)) != len(names):
        raise PlanError(f"sources must be non-empty and distinct, got {names!r}")
    return names


def _check_idle(
    timeout: int | Mapping[str, int | None] | None, sources: tuple[str, ...]
) -> dict[str, int | None]:
    if timeout is None:
        return dict.fromkeys(sources)
    if isinstance(timeout, Mapping):
        if set(timeout) != set(sources):
            raise PlanError(
                f"idle_timeout_ms names sources {sorted(timeout)}; declared sources: {list(sources)}"
            )
        return {
            s: None if timeout[s] is None else check_ms(f"idle_timeout_ms[{s!r}]", timeout[s])
            for s in sources
        }
    return dict.fromkeys(sources, check_ms("idle_timeout_ms", timeout))


def _check_lags(
    lag_ms: int | AutoLag | Mapping[str, int | AutoLag], sources: tuple[str, ...]
) -> dict[str, int | AutoLag]:
    def one(name: str, value: int | AutoLag) -> int | AutoLag:
        return value if isinstance(value, AutoLag) else check_ms(name, value, positive=False)

    if isinstance(lag_ms, Mapping):
        if set(lag_ms) != set(sources):
            raise PlanError(f"lag_ms names sources {sorted(lag_ms)}; declared sources: {list(sources)}")
        return {s: one(f"lag_ms[{s!r}]", lag_ms[s]) for s in sources}
    return dict.fromkeys(sources, one("lag_ms", lag_ms))


def _check_trigger(trigger: object) -> Trigger:
    if not isinstance(trigger, Trigger):
        raise PlanError(f"trigger must be a Trigger (e.g. Trigger.on_count(10)), got {trigger!r}")
    return trigger


def _check_accumulation(accumulation: Accumulation) -> Accumulation:
    valid = get_args(Accumulation)
    if accumulation not in valid:
        raise PlanError(f"accumulation must be one of {', '.join(valid)}; got {accumulation!r}")
    return accumulation


def _check_output_names(keys: tuple[str, ...], aggregates: tuple[AggSpec, ...], *, retracting: bool) -> None:
    names = [*keys, "window_start", "window_end", *(spec.name for spec in aggregates)]
    names += [KIND_COLUMN] if retracting else []
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PlanError(f"duplicate output column names: {duplicates}")


def _emit_order(pane: _Pane) -> tuple[int, int, tuple[tuple[bool, object], ...]]:
    return (pane.end_us, pane.start_us, tuple((v is not None, v) for v in pane.key))


def late_event(row: Row, classification: str, w_ms: int | None, side: str | None = None) -> Result:
    """A row as the late-event table lists it (SPEC 3.8): its columns, ``side`` (a join's),
    ``classification`` and ``watermark_ms``; a column of the row named as one of those three
    is listed with ``_input`` added (again while taken), never overwritten."""
    own = {"classification": classification, "watermark_ms": w_ms}
    if side is not None:
        own["side"] = side
    out: Result = {}
    for name, value in row.items():
        listed = name
        while listed in own or (listed != name and listed in row):
            listed += "_input"
        out[listed] = value
    return {**out, **own}


def event_time_us(value: object) -> int | None:
    """Event time in µs since the epoch; ``None`` for a missing (invalid) time.

    Examples
    --------
    >>> event_time_us(1_500)
    1500000
    >>> event_time_us(datetime(1970, 1, 1, 0, 0, 1, 7))
    1000007
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        us: int = (aware - _EPOCH) // _ONE_US
    elif isinstance(value, int) and not isinstance(value, bool):
        us = value * 1000
    else:
        raise SchemaError(f"event time must be an int (epoch ms) or a datetime, got {value!r}")
    # Outside the supported range an event time is invalid, like a missing one.
    return us if MIN_EVENT_MS <= us // 1000 <= MAX_EVENT_MS else None


def _canonical(value: object) -> object:
    """The grouping form of a value: one NaN, and -0.0 as 0.0 (as Spark normalises)."""
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if value == 0.0:
            return 0.0
    return value


def aggregate_rows(spec: AggSpec, rows: Sequence[tuple[int, int, Row]]) -> object:
    """``spec``'s value over ``rows`` (each its event time in µs, arrival number, row), as Spark SQL
    computes it over a window's rows (None: no value). For the model's other operators."""
    return _value(spec, [_Entry(ts_us=t, seq=s, row=r) for t, s, r in rows])


def _value(spec: AggSpec, entries: Sequence[_Entry]) -> object:
    value = _aggregate(spec, entries)
    return None if value is _NO_VALUE else value


def _aggregate(spec: AggSpec, entries: Sequence[_Entry]) -> object:
    """The value of ``spec`` over the events of one pane, as Spark SQL computes it."""
    if spec.where is not None:
        where = spec.where
        entries = [e for e in entries if where(e.row) is True]
    if spec.column is None:
        return len(entries)
    column = spec.column
    if spec.func in ("first", "last"):
        pick = min if spec.func == "first" else max
        return pick(entries, key=lambda e: (e.ts_us, e.seq)).row.get(column)
    values = [v for v in (e.row.get(column) for e in entries) if v is not None]
    return _VALUE_AGGS[spec.func](values)


#: An aggregate with no value: an integer sum beyond a bigint (null, and counted).
_NO_VALUE = object()


def _sum(values: list[Any]) -> object:
    # reduce, not sum(): sum() starts at int 0, which turns a lone -0.0 into 0.0.
    total = functools.reduce(operator.add, values) if values else None
    if isinstance(total, int) and not isinstance(total, bool) and not -(2**63) <= total < 2**63:
        return _NO_VALUE
    return total


def _avg(values: list[Any]) -> float | None:
    return float(functools.reduce(operator.add, values)) / len(values) if values else None


def _nan_last(value: Any) -> tuple[bool, Any]:
    """Sort key with Spark's order: NaN above every number."""
    return (isinstance(value, float) and math.isnan(value), value)


def _min(values: list[Any]) -> object:
    return min(values, key=_nan_last) if values else None


def _max(values: list[Any]) -> object:
    return max(values, key=_nan_last) if values else None


def _count_distinct(values: list[Any]) -> int:
    return len({_canonical(v) for v in values})


_VALUE_AGGS: dict[str, Callable[[list[Any]], object]] = {
    "count": len,
    "sum": _sum,
    "avg": _avg,
    "min": _min,
    "max": _max,
    "count_distinct": _count_distinct,
}
