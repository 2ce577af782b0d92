"""A small pure-Python reference model of windowed aggregation (SPEC 3.2-3.4, 3.6).

The model runs a pipeline ``watermark -> key_by -> window -> agg`` with the
default ``on_watermark`` trigger and ``allowed_lateness = 0`` one *step* at a
time, exactly as the tests reason about a Spark job: one ``send``,
``advance_watermark`` or ``close`` call is one micro-batch. The Spark
lowerings are checked against it row for row.

Steps
    The rows of a step are classified against the overall watermark ``W``
    that held *before* the step (Spark applies the watermark computed at the
    end of the previous micro-batch). After the step the source's watermark
    becomes ``max(previous, floor(max_event_us / 1000) - lag)``;
    ``advance_watermark(ts)`` makes it ``max(previous, ts)`` and ``close()``
    makes it :data:`END_OF_TIME_MS`. The overall ``W`` is the minimum over
    all declared sources, and ``None`` while any of them has none. Then every
    window with ``end <= W`` fires once and its state is deleted.

Time
    Event times are ``int`` epoch milliseconds or ``datetime`` values (a naive
    datetime is UTC). They are kept in microseconds, so sub-millisecond
    datetimes are placed exactly; window bounds are whole milliseconds.
    A row whose event time is ``None`` is invalid: counted, never windowed,
    and it does not move the watermark.

Lateness (``allowed_lateness = 0``)
    A window is *retained* while ``W is None or W < window.end``. A tumbling
    or sliding event goes into each of its retained windows; with none it is
    very late (dropped, counted). A kept event with ``ts < W`` is mildly
    late, otherwise on time. A session event is very late when its own
    proto-window ``[ts, ts + gap)`` has ``end <= W`` (Spark's rule, checked
    before merging). Events with ``ts > W + FUTURE_TOLERANCE_MS`` are also
    counted as future events and processed normally.

Output
    One dict per (key, window): the key columns, ``window_start`` and
    ``window_end`` (int epoch ms), then the aggregates. Within a step rows come
    in ``(window_end, window_start, key)`` order, ``None`` keys first.

Examples
--------
>>> from krishiv_py.plan.windows import TumblingWindow
>>> model = ReferenceModel(window=TumblingWindow(size_ms=10), event_time="ts",
...                        lag_ms=0, aggregates=[AggSpec(name="n", func="count", column=None)])
>>> model.send([{"ts": 3}, {"ts": 12}])
[{'window_start': 0, 'window_end': 10, 'n': 1}]
>>> model.close()
[{'window_start': 10, 'window_end': 20, 'n': 1}]
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeAlias, get_args

import attrs

from krishiv_py.errors import PlanError, SchemaError, SourceClosedError
from krishiv_py.expr import AggFunc
from krishiv_py.plan.watermarks import END_OF_TIME_MS, MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow, check_ms

__all__ = [
    "END_OF_TIME_MS",
    "FUTURE_TOLERANCE_MS",
    "AggFunc",
    "AggSpec",
    "ReferenceMetrics",
    "ReferenceModel",
    "event_time_us",
]

FUTURE_TOLERANCE_MS = 60_000
"""Events more than this far ahead of the watermark are counted as future events."""

Row: TypeAlias = Mapping[str, object]
Key: TypeAlias = tuple[object, ...]
ModelWindow: TypeAlias = TumblingWindow | SlidingWindow | SessionWindow

_AGG_FUNCS: frozenset[str] = frozenset(get_args(AggFunc))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# One NaN object: containers compare items by identity first, so equal keys
# holding NaN meet in one group, as Spark's grouping does.
_NAN = float("nan")


@attrs.frozen(kw_only=True)
class AggSpec:
    """One aggregate of the model's output, named ``name``.

    Parameters
    ----------
    name
        Output column name.
    func
        One of ``count``, ``sum``, ``avg``, ``min``, ``max``,
        ``count_distinct``, ``first``, ``last``.
    column
        Input column; ``None`` only with ``count`` (count rows, ``count(*)``).

    Examples
    --------
    >>> AggSpec(name="total", func="sum", column="amount").func
    'sum'
    """

    name: str
    func: AggFunc
    column: str | None

    def __attrs_post_init__(self) -> None:
        if self.func not in _AGG_FUNCS:
            raise PlanError(f"unknown aggregate function {self.func!r}; valid: {sorted(_AGG_FUNCS)}")
        if self.column is None and self.func != "count":
            raise PlanError(f"aggregate {self.name!r}: {self.func} needs a column")


@attrs.frozen(kw_only=True)
class ReferenceMetrics:
    """Counters of a :class:`ReferenceModel` (a snapshot).

    ``input_rows`` counts every data row sent, invalid ones included;
    ``future_events`` is counted in addition to the on-time/late split.
    """

    input_rows: int
    invalid_events: int
    on_time_events: int
    mildly_late_events: int
    very_late_events: int
    future_events: int
    windows_emitted: int
    watermark_advances: int


_METRIC_NAMES: tuple[str, ...] = tuple(a.name for a in attrs.fields(ReferenceMetrics))


@attrs.frozen
class _Entry:
    """One accepted event: time in µs, arrival sequence, and the row."""

    ts_us: int
    seq: int
    row: Row


@attrs.frozen
class _Pane:
    """The events of one key in one window ``[start_us, end_us)``."""

    start_us: int
    end_us: int
    key: Key
    entries: list[_Entry]


class _WindowState(Protocol):
    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> bool: ...

    def pop_fired(self, w_ms: int) -> list[_Pane]: ...


@attrs.define
class _FixedWindows:
    """State of tumbling and sliding windows: panes by (start, end, key)."""

    window: TumblingWindow | SlidingWindow
    panes: dict[tuple[int, int, Key], list[_Entry]] = attrs.field(factory=dict)

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> bool:
        """Add ``entry`` to its retained windows; ``False`` if there are none."""
        kept = False
        # Window bounds are whole ms, so flooring the µs time keeps membership exact.
        for start, end in self.window.assign(entry.ts_us // 1000):
            if w_ms is None or w_ms < end:
                self.panes.setdefault((start, end, key), []).append(entry)
                kept = True
        return kept

    def pop_fired(self, w_ms: int) -> list[_Pane]:
        """Remove and return every pane with ``end <= w_ms``."""
        done = [slot for slot in self.panes if slot[1] <= w_ms]
        return [
            _Pane(start_us=s * 1000, end_us=e * 1000, key=k, entries=self.panes.pop((s, e, k)))
            for s, e, k in done
        ]


@attrs.define
class _Sessions:
    """State of session windows: the open sessions of each key."""

    gap_us: int
    sessions: dict[Key, list[_Pane]] = attrs.field(factory=dict)

    def add(self, key: Key, entry: _Entry, w_ms: int | None) -> bool:
        """Merge ``entry``'s proto-window into its key's sessions, unless very late."""
        start, end = entry.ts_us, entry.ts_us + self.gap_us
        if w_ms is not None and end <= w_ms * 1000:
            return False
        entries, rest = [entry], []
        # Open sessions of a key never touch each other, so one pass finds
        # every session the merged one covers (merging is transitive already).
        for pane in self.sessions.get(key, []):
            if start <= pane.end_us and pane.start_us <= end:
                start, end = min(start, pane.start_us), max(end, pane.end_us)
                entries.extend(pane.entries)
            else:
                rest.append(pane)
        rest.append(_Pane(start_us=start, end_us=end, key=key, entries=entries))
        self.sessions[key] = rest
        return True

    def pop_fired(self, w_ms: int) -> list[_Pane]:
        """Remove and return every session with ``end <= w_ms``."""
        fired: list[_Pane] = []
        for key, panes in list(self.sessions.items()):
            fired.extend(p for p in panes if p.end_us <= w_ms * 1000)
            kept = [p for p in panes if p.end_us > w_ms * 1000]
            if kept:
                self.sessions[key] = kept
            else:
                del self.sessions[key]
        return fired


class ReferenceModel:
    """Step-by-step reference run of one windowed aggregation.

    Parameters
    ----------
    window
        The window assigner; capped sessions are not modelled.
    event_time
        Name of the event-time column (int epoch ms or ``datetime``).
    lag_ms
        Watermark lag (bounded out-of-orderness), ``>= 0``.
    keys
        Key columns; empty for one global group.
    aggregates
        The output aggregates, in output order.
    sources
        Names of the sources whose watermarks make the overall one.

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
    """

    def __init__(
        self,
        *,
        window: ModelWindow,
        event_time: str,
        lag_ms: int,
        keys: Sequence[str] = (),
        aggregates: Sequence[AggSpec],
        sources: Sequence[str] = ("main",),
    ) -> None:
        self._state = _make_state(window)
        self._event_time = event_time
        self._lag_ms = check_ms("lag_ms", lag_ms, positive=False)
        self._keys = tuple(keys)
        self._aggregates = tuple(aggregates)
        self._sources = _check_sources(sources)
        _check_output_names(self._keys, self._aggregates)
        self._watermarks: dict[str, int] = {}
        self._closed: set[str] = set()
        self._overall: int | None = None
        self._seq = 0
        self._results: list[dict[str, object]] = []
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
    ) -> list[dict[str, object]]:
        """What a bounded (batch) run gives: one step with every row, then ``close()``.

        Examples
        --------
        >>> from krishiv_py.plan.windows import TumblingWindow
        >>> ReferenceModel.bounded([{"ts": 1}, {"ts": 2}], window=TumblingWindow(size_ms=10),
        ...                        event_time="ts", lag_ms=0,
        ...                        aggregates=[AggSpec(name="n", func="count", column=None)])
        [{'window_start': 0, 'window_end': 10, 'n': 2}]
        """
        model = cls(window=window, event_time=event_time, lag_ms=lag_ms, keys=keys, aggregates=aggregates)
        model.send(rows)
        model.close()
        return model.results

    def send(self, rows: Sequence[Row], *, source: str = "main") -> list[dict[str, object]]:
        """Process ``rows`` as one step from ``source``; return the rows fired by it."""
        self._check_open(source)
        w_ms = self._overall
        max_us: int | None = None
        for row in rows:
            ts_us = self._ingest(row, w_ms)
            if ts_us is not None and (max_us is None or ts_us > max_us):
                max_us = ts_us
        if max_us is not None:
            self._raise_source(source, max_us // 1000 - self._lag_ms)
        return self._end_step()

    def advance_watermark(self, ts_ms: int, *, source: str = "main") -> list[dict[str, object]]:
        """Promise no event older than ``ts_ms`` follows from ``source`` (one step)."""
        self._check_open(source)
        if isinstance(ts_ms, bool) or not isinstance(ts_ms, int):
            raise PlanError(f"ts_ms must be an integer number of milliseconds, got {ts_ms!r}")
        self._raise_source(source, ts_ms)
        return self._end_step()

    def close(self, *, source: str = "main") -> list[dict[str, object]]:
        """End ``source``: its watermark becomes END_OF_TIME_MS (one step; idempotent)."""
        self._check_source(source)
        self._closed.add(source)
        self._raise_source(source, END_OF_TIME_MS)
        return self._end_step()

    @property
    def results(self) -> list[dict[str, object]]:
        """Every row emitted so far, in emit order."""
        return list(self._results)

    @property
    def watermark_ms(self) -> int | None:
        """The overall watermark, ``None`` until every source has one."""
        return self._overall

    def source_watermarks(self) -> dict[str, int]:
        """The watermark of each source that has one."""
        return dict(self._watermarks)

    @property
    def metrics(self) -> ReferenceMetrics:
        """A snapshot of the counters."""
        return ReferenceMetrics(**self._counts)

    def _check_source(self, source: str) -> None:
        if source not in self._sources:
            raise PlanError(f"unknown source {source!r}; declared sources: {list(self._sources)}")

    def _check_open(self, source: str) -> None:
        self._check_source(source)
        if source in self._closed:
            raise SourceClosedError(f"source {source!r} is closed")

    def _ingest(self, row: Row, w_ms: int | None) -> int | None:
        """Classify and store one row; return its event time in µs (None if invalid)."""
        self._counts["input_rows"] += 1
        ts_us = event_time_us(row.get(self._event_time))
        if ts_us is None:
            self._counts["invalid_events"] += 1
            return None
        entry = _Entry(ts_us, self._seq, dict(row))
        self._seq += 1
        kept = self._state.add(self._key_of(row), entry, w_ms)
        self._counts[_classify(ts_us, w_ms, kept=kept)] += 1
        if w_ms is not None and ts_us > (w_ms + FUTURE_TOLERANCE_MS) * 1000:
            self._counts["future_events"] += 1
        return ts_us

    def _key_of(self, row: Row) -> Key:
        return tuple(_canonical(row.get(name)) for name in self._keys)

    def _raise_source(self, source: str, ts_ms: int) -> None:
        self._watermarks[source] = max(self._watermarks.get(source, ts_ms), ts_ms)

    def _end_step(self) -> list[dict[str, object]]:
        """Move the overall watermark and fire every window it passed."""
        self._move_overall()
        if self._overall is None:
            return []
        fired = sorted(self._state.pop_fired(self._overall), key=_emit_order)
        out = [self._result_row(pane) for pane in fired]
        self._counts["windows_emitted"] += len(out)
        self._results.extend(out)
        return out

    def _move_overall(self) -> None:
        if any(source not in self._watermarks for source in self._sources):
            return
        new = min(self._watermarks[source] for source in self._sources)
        if self._overall is None or new > self._overall:
            self._counts["watermark_advances"] += 1
            self._overall = new

    def _result_row(self, pane: _Pane) -> dict[str, object]:
        out: dict[str, object] = dict(zip(self._keys, pane.key, strict=True))
        # Session bounds may fall between milliseconds; floor like Spark's unix_millis.
        out["window_start"] = pane.start_us // 1000
        out["window_end"] = pane.end_us // 1000
        for spec in self._aggregates:
            out[spec.name] = _aggregate(spec, pane.entries)
        return out


def _make_state(window: ModelWindow) -> _WindowState:
    if isinstance(window, SessionWindow):
        if window.max_duration_ms is not None:
            raise PlanError("capped sessions are not modelled yet")
        return _Sessions(gap_us=window.gap_ms * 1000)
    if isinstance(window, TumblingWindow | SlidingWindow):
        return _FixedWindows(window=window)
    raise PlanError(f"the reference model cannot run window {window!r}")


def _check_sources(sources: Sequence[str]) -> tuple[str, ...]:
    names = tuple(sources)
    if not names or len(set(names)) != len(names):
        raise PlanError(f"sources must be non-empty and distinct, got {names!r}")
    return names


def _check_output_names(keys: tuple[str, ...], aggregates: tuple[AggSpec, ...]) -> None:
    names = [*keys, "window_start", "window_end", *(spec.name for spec in aggregates)]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PlanError(f"duplicate output column names: {duplicates}")


def _classify(ts_us: int, w_ms: int | None, *, kept: bool) -> str:
    """The metric a stored (or dropped) event counts in."""
    if not kept:
        return "very_late_events"
    if w_ms is not None and ts_us < w_ms * 1000:
        return "mildly_late_events"
    return "on_time_events"


def _emit_order(pane: _Pane) -> tuple[int, int, tuple[tuple[bool, object], ...]]:
    return (pane.end_us, pane.start_us, tuple((v is not None, v) for v in pane.key))


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


def _aggregate(spec: AggSpec, entries: Sequence[_Entry]) -> object:
    """The value of ``spec`` over the events of one pane, as Spark SQL computes it."""
    if spec.column is None:
        return len(entries)
    column = spec.column
    if spec.func in ("first", "last"):
        pick = min if spec.func == "first" else max
        return pick(entries, key=lambda e: (e.ts_us, e.seq)).row.get(column)
    values = [v for v in (e.row.get(column) for e in entries) if v is not None]
    return _VALUE_AGGS[spec.func](values)


def _sum(values: list[Any]) -> object:
    # reduce, not sum(): sum() starts at int 0, which turns a lone -0.0 into 0.0.
    return functools.reduce(operator.add, values) if values else None


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
