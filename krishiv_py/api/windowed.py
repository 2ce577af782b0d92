"""Window assignment and :class:`WindowedStream`.

``Stream`` and ``KeyedStream`` share the window assigners through
:class:`WindowAssigners`; the windowed stream then takes the aggregates.
Every call validates its arguments and returns a new object.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Literal

import attrs

from krishiv_py.errors import PlanError, attribute_error
from krishiv_py.expr import AggExpr, agg_calls
from krishiv_py.late import LateEventHandler, checked_handler
from krishiv_py.panes import PaneCallback
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import (
    DEFAULT_ALLOWED_LATENESS_MS,
    Accumulation,
    Emission,
    StateTtlConfig,
    Trigger,
)
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    SlidingWindow,
    TimeIntervalWindow,
    TumblingWindow,
    WindowSpec,
    in_processing_time,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.api.stream import JoinedStream, Stream

__all__ = ["WindowAssigners", "WindowedStream"]


class WindowAssigners:
    """Mixin: the window assigners of ``Stream`` and ``KeyedStream``."""

    def _windowed(self, window: WindowSpec) -> WindowedStream:
        raise NotImplementedError

    def tumbling_window(
        self, size_ms: Duration, *, offset_ms: Duration = 0, time: Literal["event", "processing"] = "event"
    ) -> WindowedStream:
        """Fixed, non-overlapping windows ``[start, start + size_ms)``.

        ``start = ts - ((ts - offset_ms) mod size_ms)``, aligned to the epoch.

        ``time="processing"``: ``ts`` is the time the row's micro-batch
        started (Spark's ``current_timestamp()`` of that micro-batch), not a
        column, and a window fires when the wall clock passes its end, with
        or without more input (Flink's ``TUMBLE(PROCTIME(), ...)``). No
        watermark is needed and no row is late; when every source closes the
        open windows fire. Such results depend on when rows arrive and are
        not reproducible (``explain()`` says so). It runs on the stateful
        lowering, with the default emission only (no allowed lateness, early
        trigger, other accumulation, late-event handler or state TTL), and
        no window, join or aggregation after it.

        Examples
        --------
            per_minute = stream.watermark("t", 5_000).tumbling_window(60_000)
            per_10s_now = bids.key_by("bidder").tumbling_window(10_000, time="processing")
        """
        window = TumblingWindow(
            size_ms=as_ms("size_ms", size_ms), offset_ms=as_ms("offset_ms", offset_ms), time=time
        )
        return _checked_units(self._windowed(window), "tumbling_window", size_ms=size_ms)

    def sliding_window(self, size_ms: Duration, slide_ms: Duration) -> WindowedStream:
        """Windows of ``size_ms`` starting every ``slide_ms`` (hopping windows)."""
        window = SlidingWindow(size_ms=as_ms("size_ms", size_ms), slide_ms=as_ms("slide_ms", slide_ms))
        return _checked_units(self._windowed(window), "sliding_window", size_ms=size_ms, slide_ms=slide_ms)

    def session_window(self, gap_ms: Duration, *, max_duration_ms: Duration | None = None) -> WindowedStream:
        """Sessions that close after ``gap_ms`` without events, optionally capped.

        On unbounded input sessions run on the stateful lowering, which
        follows the specified merge and lateness rules exactly. With
        ``max_duration_ms = M`` a session never spans ``M`` or more
        (``last_ts - first_ts < M``): a row that would stretch it that far
        closes it and starts a new session — the bound that keeps a source
        that never pauses from growing one session forever (see
        ``docs/windows.md`` for out-of-order rows).
        """
        capped = as_ms("max_duration_ms", max_duration_ms)
        windowed = self._windowed(SessionWindow(gap_ms=as_ms("gap_ms", gap_ms), max_duration_ms=capped))
        return _checked_units(windowed, "session_window", gap_ms=gap_ms)

    def event_sliding_window(self, size_ms: Duration, *, grace_ms: Duration = 0) -> WindowedStream:
        """Kafka Streams' sliding windows (KIP-450): one window per distinct set of rows within ``size_ms``.

        Windows are closed at both ends, ``[t - size_ms, t]``; a row at ``t``
        has its left window and, once a later row falls within ``size_ms``,
        its right window ``[t + 1, t + 1 + size_ms]``; rows at
        ``0 <= t < size_ms`` share ``[0, size_ms]`` (rows before the epoch are
        invalid). A window closes when the watermark passes
        ``end + grace_ms``; out-of-order rows update the open windows, and
        rows whose windows have all closed are very late. Results report
        ``window_end`` as the inclusive end ``start + size_ms``, as Kafka does.
        ``Trigger.on_watermark()`` (default) emits each window once when it
        closes (Kafka's ``EmitStrategy.onWindowClose()``, nothing at the end of
        input for windows still open is the difference: krishiv fires them);
        ``Trigger.on_every_element()`` emits every update (``onWindowUpdate()``).
        Runs on the stateful lowering.

        Examples
        --------
            near = stream.watermark("t", 0).key_by("user").event_sliding_window(30_000, grace_ms=5_000)
        """
        window = EventSlidingWindow(size_ms=as_ms("size_ms", size_ms), grace_ms=as_ms("grace_ms", grace_ms))
        return self._windowed(window)

    def time_interval_window(
        self, interval_ms: Duration, creation_period_ms: Duration, discard_age_ms: Duration
    ) -> WindowedStream:
        """IBM Streams SPL time-interval panes ``[k * creation_period_ms, ... + interval_ms)``.

        A pane fires when the watermark reaches its end, fires again on a
        later watermark only if rows were inserted since its last firing
        (only the keys that changed), and is deleted when the watermark
        reaches ``end + discard_age_ms``; rows for a deleted pane are very
        late. Pane events are observable with :meth:`WindowedStream.on_initial_full`,
        :meth:`WindowedStream.on_trigger` and :meth:`WindowedStream.on_close`.
        Runs on the stateful lowering.

        Examples
        --------
            panes = stream.watermark("t", 0).time_interval_window(10_000, 5_000, 15_000)
        """
        window = TimeIntervalWindow(
            interval_ms=as_ms("interval_ms", interval_ms),
            creation_period_ms=as_ms("creation_period_ms", creation_period_ms),
            discard_age_ms=as_ms("discard_age_ms", discard_age_ms),
        )
        windowed = self._windowed(window)
        return windowed._emit(allowed_lateness_ms=window.discard_age_ms)


def _checked_units(windowed: WindowedStream, call: str, **given: Duration) -> WindowedStream:
    """Warn when a window's length is a bare number under 1,000 on a stream whose event times are
    timestamps: an int is milliseconds, and ``tumbling_window(60)`` meant as a minute makes 60 ms
    windows without a word otherwise. Seconds written as such (``"500 ms"``, a ``timedelta``), or
    event times that are numbers, are taken as meant.

    >>> import warnings
    >>> from krishiv_py.api.stream import placeholder
    >>> timed = placeholder("t timestamp, k string").watermark("t", "5 seconds")
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     _ = timed.tumbling_window(60), timed.tumbling_window("60 ms")
    >>> len(seen), str(seen[0].message).split("; ")[1]
    (1, "did you mean 60_000 or '60 seconds'?")
    """
    if in_processing_time(windowed.window):
        return windowed
    time = facts(windowed.stream.plan).event_time
    if time is None or time.from_window or time.from_join or time.from_change:
        return windowed  # (an operator's results: their times are its input's, whatever their type)
    if time.dtype.name not in ("timestamp", "timestamp_ntz", "date"):
        return windowed
    for name, value in given.items():
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000:
            warnings.warn(
                f"{call}({value}): {name}={value} is {value} milliseconds (an int is milliseconds) "
                f"over the timestamps of {time.column!r}; did you mean {value}_000 or '{value} seconds'?",
                stacklevel=3,
            )
    return windowed


@attrs.frozen
class WindowedStream:
    """A stream with keys and an event-time window, waiting for ``agg``.

    The emission options (:meth:`trigger`, :meth:`allowed_lateness`,
    :meth:`accumulation`, :meth:`with_late_event_handler`) each return a new
    ``WindowedStream``; any of them other than the defaults makes the plan
    run on the stateful lowering.

    Examples
    --------
        corrected = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .allowed_lateness(60_000)                # late events re-fire their window
            .accumulation("retracting")              # ... preceded by a retraction
            .agg(kp.count(kp.col("*")))
        )
    """

    stream: Stream
    keys: tuple[str, ...]
    window: WindowSpec
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        n.over_below(self.stream.plan, "a window")
        if in_processing_time(self.window):  # timed by the wall clock: no event time needed
            n.check_processing_time_input(self.stream.plan)
            return
        if n.joins_of(self.stream.plan):
            n.check_window_after_join(self.stream.plan, self.keys, window=self.window)
        if facts(self.stream.plan).event_time is None:
            if n.window_aggregates(self.stream.plan):
                raise PlanError(n.NO_RESULT_TIME)
            raise PlanError(
                f"{self.window.kind} windows need event time: call "
                ".watermark(column, lag_ms) on the stream before the window"
            )

    def _emit(self, **changes: Any) -> WindowedStream:
        return attrs.evolve(self, emission=attrs.evolve(self.emission, **changes))

    def trigger(self, trigger: Trigger) -> WindowedStream:
        """When windows fire: ``Trigger.on_watermark()`` (default), ``on_every_element()``,
        ``on_count(n)`` or ``on_interval(ms)``; early firings are followed by the final one.
        """
        if not isinstance(trigger, Trigger):
            raise PlanError(f"trigger() takes a Trigger such as kp.Trigger.on_count(10), got {trigger!r}")
        if isinstance(self.window, TimeIntervalWindow) and trigger.is_early:
            raise PlanError(
                f"trigger {trigger.describe()} does not apply to time-interval panes: they fire when "
                "the watermark reaches their end and again on later watermarks after new rows"
            )
        return self._emit(trigger=trigger)

    def allowed_lateness(self, ms: Duration = DEFAULT_ALLOWED_LATENESS_MS) -> WindowedStream:
        """Keep windows ``ms`` past their end: late events re-fire them instead of being dropped."""
        if isinstance(self.window, EventSlidingWindow):
            raise PlanError(
                "allowed_lateness() does not apply to per-event sliding windows: their grace_ms "
                f"({self.window.grace_ms}) is how long they stay open after their end"
            )
        if isinstance(self.window, TimeIntervalWindow):
            raise PlanError(
                "allowed_lateness() does not apply to time-interval panes: their discard_age_ms "
                f"({self.window.discard_age_ms}) is how long they are kept after their end"
            )
        return self._emit(allowed_lateness_ms=as_ms("allowed_lateness(ms)", ms))

    def accumulation(self, mode: Accumulation) -> WindowedStream:
        """What a firing carries: ``"accumulating"`` (default), ``"discarding"`` or ``"retracting"``."""
        if isinstance(self.window, TimeIntervalWindow | EventSlidingWindow) and mode != "accumulating":
            kind = (
                "time-interval panes"
                if isinstance(self.window, TimeIntervalWindow)
                else "per-event sliding windows"
            )
            raise PlanError(
                f"accumulation({mode!r}) does not apply to {kind}: every firing carries the whole window"
            )
        return self._emit(accumulation=mode)

    def with_state_ttl(self, config: StateTtlConfig) -> WindowedStream:
        """Expire windows not updated for ``config.ttl_ms`` (event time by default, or processing time).

        With ``time="event"`` a window expires when its newest row is
        ``ttl_ms`` behind the watermark (later rows for it are very late);
        with ``time="processing"`` when no row has joined it for ``ttl_ms``
        of wall-clock time (a later row starts it again). An expired window
        that has not fired fires now, then leaves state; expirations count
        in ``JobMetrics.state_evictions``. For sessions with long gaps,
        windows kept long by ``allowed_lateness`` and keys that go quiet.
        Runs on the stateful lowering.
        """
        if not isinstance(config, StateTtlConfig):
            raise PlanError(f"with_state_ttl() takes a StateTtlConfig(ttl_ms=...), got {config!r}")
        if isinstance(self.window, TimeIntervalWindow | EventSlidingWindow):
            raise PlanError(
                f"with_state_ttl() does not apply to {self.window.kind.replace('_', '-')} windows, which "
                "keep their state for a fixed time after their end already"
            )
        return self._emit(state_ttl=config)

    def on_initial_full(self, callback: PaneCallback) -> WindowedStream:
        """Call ``callback(PaneEvent)`` when the watermark first reaches a pane's end (time-interval panes).

        Called on the driver just before the pane's first ``on_trigger``; see
        :mod:`krishiv_py.panes` for the order of events.
        """
        return self._pane_callback("on_initial_full", callback)

    def on_trigger(self, callback: PaneCallback) -> WindowedStream:
        """Call ``callback(PaneEvent)`` every time a pane fires (time-interval panes)."""
        return self._pane_callback("on_trigger", callback)

    def on_close(self, callback: PaneCallback) -> WindowedStream:
        """Call ``callback(PaneEvent)`` when a pane is deleted, with its final aggregates.

        Time-interval panes only; the pane's last ``on_trigger`` comes first.
        """
        return self._pane_callback("on_close", callback)

    def _pane_callback(self, name: str, callback: PaneCallback) -> WindowedStream:
        if not isinstance(self.window, TimeIntervalWindow):
            raise PlanError(
                f"{name}() observes the panes of time_interval_window(...); "
                f"this stream has {self.window.kind} windows"
            )
        return self._emit(panes=attrs.evolve(self.emission.panes, **{name: callback}))

    def with_late_event_handler(self, handler: LateEventHandler) -> WindowedStream:
        """Hand very late and invalid events to ``handler`` (see :mod:`krishiv_py.late`)."""
        return self._emit(late_handler=checked_handler(handler))

    def agg(self, *aggregates: AggExpr) -> Stream:
        """Aggregate each window (per key); returns a stream of window results.

        Result columns: the keys, ``window_start``, ``window_end`` (UTC
        timestamps) and the aggregates in the order given.
        """
        plan = n.WindowAggregate(
            input=self.stream.plan,
            keys=self.keys,
            window=self.window,
            aggregates=agg_calls(aggregates),
            emission=self.emission,
        )
        return self.stream._with(plan)

    def join(
        self,
        right: WindowedStream,
        *,
        how: Literal["inner", "left", "right", "full", "semi", "anti"] = "inner",
    ) -> JoinedStream:
        """A window join: the rows of each key and window of both sides, joined when the window fires.

        Both sides need the same window (tumbling or sliding). Joined rows
        hold the keys, ``window_start``, ``window_end``, the left columns, then
        the right ones; ``"semi"`` keeps each left row with a partner once,
        ``"anti"`` each left row without one. The window's emission options
        do not apply: set lateness and accumulation on the join.

        Examples
        --------
            # persons and the auctions they opened in the same 10 s (Nexmark Q8)
            persons.watermark("ts", 0).key_by("id").tumbling_window(10_000).join(
                auctions.watermark("ts", 0).key_by("seller").tumbling_window(10_000))
        """
        if not isinstance(right, WindowedStream):
            raise PlanError(
                "join() takes the other side windowed the same way: "
                f"right.watermark(...).key_by(...).tumbling_window(...), got {type(right).__name__}"
            )
        if right.window != self.window:
            raise PlanError(
                f"join(): both sides need the same window, got {self.window!r} and {right.window!r}"
            )
        if not self.emission.is_default or not right.emission.is_default:
            raise PlanError(
                "join(): set allowed_lateness, accumulation, a late-event handler or a state TTL on the "
                "join's result (.join(...).allowed_lateness(...)), not on the windows"
            )
        return self.stream._joined(
            self.keys,
            right.stream,
            right.keys,
            "join()",
            kind="window",
            how=how,
            window=self.window,
        )

    def collect_with_aggs(self, aggs: list[AggExpr] | tuple[AggExpr, ...]) -> pa.Table:
        """``agg(*aggs).collect()``: the windows of the input available now."""
        return self.agg(*aggs).collect()

    if not TYPE_CHECKING:  # at run time only: a type checker still flags these calls

        def __getattr__(self, name: str) -> Any:
            raise attribute_error(self, name, _WINDOWED_HINTS)


def _after_agg(call: str) -> str:
    return (
        f"{call} applies to a window's results: call .agg(...) first, e.g. "
        f".tumbling_window(60_000).agg(kp.count(kp.col('*'))).{call}"
    )


#: What the methods of a stream say when called on a window that has no ``agg()`` yet.
_WINDOWED_HINTS = {
    "key_by": (
        "key_by(...) on a window: key the stream before its window, "
        "stream.key_by('user_id').tumbling_window(60_000).agg(...), or key the window's results, "
        ".tumbling_window(60_000).agg(...).key_by('user_id')"
    ),
    **{
        name: _after_agg(f"{name}(...)")
        for name in ("filter", "select", "with_column", "union", "top_n", "interval_join", "as_of_join")
    },
    **{name: _after_agg(f"{name}()") for name in ("start", "collect", "to_spark", "explain", "lower")},
}
