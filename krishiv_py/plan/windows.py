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

These classes are configuration only (frozen, validated at construction);
the engines that run them live in ``krishiv_py.planner`` and
``krishiv_py.testing``.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from krishiv_py.errors import PlanError

__all__ = [
    "SessionWindow",
    "SlidingWindow",
    "TumblingWindow",
    "WindowSpec",
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


@attrs.frozen(kw_only=True)
class TumblingWindow:
    """Fixed-size, non-overlapping windows ``[start, start + size_ms)``.

    Examples
    --------
    >>> TumblingWindow(size_ms=60_000).assign(61_000)
    ((60000, 120000),)
    >>> TumblingWindow(size_ms=10, offset_ms=3).assign(-1)
    ((-7, 3),)
    """

    size_ms: int
    offset_ms: int = 0

    def __attrs_post_init__(self) -> None:
        check_ms("size_ms", self.size_ms)
        if isinstance(self.offset_ms, bool) or not isinstance(self.offset_ms, int):
            raise PlanError(f"offset_ms must be an integer, got {self.offset_ms!r}")
        # Only the offset modulo the size matters; normalise so equal windows
        # compare equal and Spark's |startTime| < slide rule always holds.
        object.__setattr__(self, "offset_ms", self.offset_ms % self.size_ms)

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


WindowSpec: TypeAlias = TumblingWindow | SlidingWindow | SessionWindow
