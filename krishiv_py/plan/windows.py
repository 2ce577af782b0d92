"""Window assigners: which event-time windows an event belongs to.

All times are integers in milliseconds since the epoch (UTC).

Tumbling windows
    Half-open intervals ``[start, start + size)`` with
    ``start = ts - ((ts - offset) mod size)`` (floor modulo, so negative
    timestamps fall in the window below them). Every event is in exactly one
    window.

Sliding (hopping) windows
    Windows of ``size`` that start every ``slide`` milliseconds, aligned to
    the epoch. An event is in every window with ``start <= ts < start + size``:
    ``size / slide`` windows when ``slide`` divides ``size``. ``slide > size``
    is refused (it would leave gaps that silently drop events).

Session windows
    Each event opens a proto-window ``[ts, ts + gap)``; proto-windows of one
    key that touch or overlap merge, so a session is
    ``[first_ts, last_ts + gap)`` and two events belong to one session when
    their times differ by at most ``gap`` (transitively). With
    ``max_duration_ms = M`` a session is also closed when adding an event
    would make ``last_ts - first_ts >= M``.

Time-interval panes (IBM Streams SPL ``timeInterval``)
    Panes ``[k * creation_period, k * creation_period + interval)``, aligned
    to the epoch; an event is in every pane that contains it (T(7) with
    interval 10 and period 5 is in ``[0, 10)`` and ``[5, 15)``; T(10) is not
    in ``[0, 10)``). A pane fires when the watermark reaches its end, fires
    again on a later watermark only if rows were inserted since its last
    firing, and is deleted once the watermark reaches ``end + discard_age``;
    rows for a deleted pane are very late. ``creation_period > interval`` is
    refused (gaps between panes).

Per-event sliding windows (Kafka Streams ``SlidingWindows``, KIP-450)
    Windows closed at both ends, ``[start, start + size]``, one per distinct
    set of rows within ``size`` of each other: a row at ``t`` has its left
    window ``[t - size, t]`` and, once a later row falls within ``size`` of
    it, its right window ``[t + 1, t + 1 + size]``; rows at ``0 <= t < size``
    share the window ``[0, size]``. A window closes once the watermark passes
    ``end + grace``; rows for closed windows only are very late.

These classes are configuration only (frozen, validated at construction);
the engines that run them live in ``krishiv_py.planner`` and
``krishiv_py.testing``.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError

__all__ = [
    "SessionWindow",
    "SlidingWindow",
    "EventSlidingWindow",
    "TimeIntervalWindow",
    "TumblingWindow",
    "WindowSpec",
    "in_processing_time",
    "window_text",
]


def check_ms(name: str, value: object, *, positive: bool = True) -> int:
    """Return ``value`` if it is an integer (> 0 when ``positive``), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{name} must be an integer number of milliseconds, got {value!r}")
    if positive and value <= 0:
        raise PlanError(f"{name} must be > 0 milliseconds, got {value}")
    if not positive and value < 0:
        raise PlanError(f"{name} must be >= 0 milliseconds, got {value}")
    return value


@attrs.frozen(kw_only=True, repr=False)
class TumblingWindow:
    """Fixed-size, non-overlapping windows ``[start, start + size_ms)``.

    ``time="processing"``: a row's time is when its micro-batch started, not
    a column of it, and a window fires when the wall clock passes its end
    (SPEC 3.14); its results depend on when rows arrive.

    Examples
    --------
    >>> TumblingWindow(size_ms=60_000).assign(61_000)
    ((60000, 120000),)
    >>> TumblingWindow(size_ms=10, offset_ms=3).assign(-1)
    ((-7, 3),)
    >>> TumblingWindow(size_ms=10_000, time="processing")
    TumblingWindow(size_ms=10000, offset_ms=0, time='processing')
    """

    size_ms: int
    offset_ms: int = 0
    time: Literal["event", "processing"] = "event"

    def __attrs_post_init__(self) -> None:
        check_ms("size_ms", self.size_ms)
        if isinstance(self.offset_ms, bool) or not isinstance(self.offset_ms, int):
            raise PlanError(f"offset_ms must be an integer, got {self.offset_ms!r}")
        if self.time not in ("event", "processing"):
            raise PlanError(f"time= is 'event' or 'processing', got {self.time!r}")
        # Only the offset modulo the size matters; normalise so equal windows
        # compare equal and Spark's |startTime| < slide rule always holds.
        object.__setattr__(self, "offset_ms", self.offset_ms % self.size_ms)

    def __repr__(self) -> str:
        time = "" if self.time == "event" else f", time={self.time!r}"
        return f"TumblingWindow(size_ms={self.size_ms}, offset_ms={self.offset_ms}{time})"

    @property
    def processing_time(self) -> bool:
        return self.time == "processing"

    @property
    def slide_ms(self) -> int:
        return self.size_ms

    @property
    def kind(self) -> str:
        return "tumbling"

    def assign(self, ts: int) -> tuple[tuple[int, int], ...]:
        start = ts - ((ts - self.offset_ms) % self.size_ms)
        return ((start, start + self.size_ms),)


@attrs.frozen(kw_only=True)
class SlidingWindow:
    """Windows of ``size_ms`` starting every ``slide_ms``, aligned to the epoch.

    Examples
    --------
    >>> SlidingWindow(size_ms=30, slide_ms=10).assign(25)
    ((0, 30), (10, 40), (20, 50))
    """

    size_ms: int
    slide_ms: int

    def __attrs_post_init__(self) -> None:
        check_ms("size_ms", self.size_ms)
        check_ms("slide_ms", self.slide_ms)
        if self.slide_ms > self.size_ms:
            raise PlanError(
                f"slide_ms ({self.slide_ms}) must be <= size_ms ({self.size_ms}); "
                "a larger slide leaves gaps between windows"
            )

    @property
    def offset_ms(self) -> int:
        return 0

    @property
    def kind(self) -> str:
        return "sliding"

    def assign(self, ts: int) -> tuple[tuple[int, int], ...]:
        last_start = ts - (ts % self.slide_ms)
        out = []
        start = last_start
        while start > ts - self.size_ms:
            out.append((start, start + self.size_ms))
            start -= self.slide_ms
        return tuple(reversed(out))


@attrs.frozen(kw_only=True)
class SessionWindow:
    """Gap-based sessions ``[first_ts, last_ts + gap_ms)``, optionally capped.

    Examples
    --------
    >>> SessionWindow(gap_ms=10).proto_window(5)
    (5, 15)
    """

    gap_ms: int
    max_duration_ms: int | None = None

    def __attrs_post_init__(self) -> None:
        check_ms("gap_ms", self.gap_ms)
        if self.max_duration_ms is not None:
            check_ms("max_duration_ms", self.max_duration_ms)

    @property
    def kind(self) -> str:
        return "session" if self.max_duration_ms is None else "capped_session"

    def proto_window(self, ts: int) -> tuple[int, int]:
        return (ts, ts + self.gap_ms)


@attrs.frozen(kw_only=True)
class TimeIntervalWindow:
    """SPL time-interval panes: ``[k * creation_period_ms, ... + interval_ms)``, kept ``discard_age_ms``.

    Examples
    --------
    >>> panes = TimeIntervalWindow(interval_ms=10, creation_period_ms=5, discard_age_ms=15)
    >>> panes.assign(7)
    ((0, 10), (5, 15))
    >>> panes.assign(10)
    ((5, 15), (10, 20))
    """

    interval_ms: int
    creation_period_ms: int
    discard_age_ms: int

    def __attrs_post_init__(self) -> None:
        check_ms("interval_ms", self.interval_ms)
        check_ms("creation_period_ms", self.creation_period_ms)
        check_ms("discard_age_ms", self.discard_age_ms, positive=False)
        if self.creation_period_ms > self.interval_ms:
            raise PlanError(
                f"creation_period_ms ({self.creation_period_ms}) must be <= interval_ms "
                f"({self.interval_ms}); a longer period leaves gaps between panes"
            )

    @property
    def size_ms(self) -> int:
        return self.interval_ms

    @property
    def slide_ms(self) -> int:
        return self.creation_period_ms

    @property
    def offset_ms(self) -> int:
        return 0

    @property
    def kind(self) -> str:
        return "time_interval"

    def assign(self, ts: int) -> tuple[tuple[int, int], ...]:
        return SlidingWindow(size_ms=self.interval_ms, slide_ms=self.creation_period_ms).assign(ts)


@attrs.frozen(kw_only=True)
class EventSlidingWindow:
    """Kafka Streams' per-event sliding windows: ``[t - size_ms, t]``, closing ``grace_ms`` after their end.

    Examples
    --------
    >>> w = EventSlidingWindow(size_ms=10, grace_ms=5)
    >>> w.left_window(25), w.right_window(25), w.left_window(4)
    ((15, 25), (26, 36), (0, 10))
    """

    size_ms: int
    grace_ms: int = 0

    def __attrs_post_init__(self) -> None:
        check_ms("size_ms", self.size_ms)
        check_ms("grace_ms", self.grace_ms, positive=False)

    @property
    def kind(self) -> str:
        return "event_sliding"

    def left_window(self, ts: int) -> tuple[int, int]:
        """The window ``[start, end]`` (both inclusive) a row at ``ts`` ends, or ``[0, size]`` if early."""
        start = max(0, ts - self.size_ms)
        return (start, start + self.size_ms)

    def right_window(self, ts: int) -> tuple[int, int]:
        return (ts + 1, ts + 1 + self.size_ms)


WindowSpec: TypeAlias = (
    TumblingWindow | SlidingWindow | SessionWindow | TimeIntervalWindow | EventSlidingWindow
)


def in_processing_time(window: WindowSpec) -> bool:
    """Whether ``window`` runs in processing time (``tumbling_window(size, time="processing")``).

    >>> in_processing_time(TumblingWindow(size_ms=10, time="processing"))
    True
    >>> in_processing_time(SlidingWindow(size_ms=10, slide_ms=5))
    False
    """
    return isinstance(window, TumblingWindow) and window.processing_time


def window_text(window: WindowSpec) -> str:
    """``window`` as a plan's text names it.

    >>> window_text(TumblingWindow(size_ms=60_000))
    'tumbling(size_ms=60000)'
    >>> window_text(SessionWindow(gap_ms=30_000))
    'session(gap_ms=30000)'
    """
    if isinstance(window, SessionWindow):
        cap = f", max_duration_ms={window.max_duration_ms}" if window.max_duration_ms else ""
        return f"session(gap_ms={window.gap_ms}{cap})"
    if isinstance(window, EventSlidingWindow):
        return f"event_sliding(size_ms={window.size_ms}, grace_ms={window.grace_ms})"
    if isinstance(window, TimeIntervalWindow):
        return (
            f"time_interval(interval_ms={window.interval_ms}, "
            f"creation_period_ms={window.creation_period_ms}, discard_age_ms={window.discard_age_ms})"
        )
    if window.kind == "tumbling":
        off = f", offset_ms={window.offset_ms}" if window.offset_ms else ""
        time = ", time=processing" if in_processing_time(window) else ""
        return f"tumbling(size_ms={window.size_ms}{off}{time})"
    return f"sliding(size_ms={window.size_ms}, slide_ms={window.slide_ms})"
