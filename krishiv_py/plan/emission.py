"""When a window emits, what a firing carries, and what happens to late events.

These are configuration records only (frozen, validated when built); the
stateful operator (:mod:`krishiv_py.stateful`) and the reference model
(:mod:`krishiv_py.testing`) run them.

Triggers (SPEC 3.5)
    ``Trigger.on_watermark()`` (the default) fires a window once, when the
    overall watermark ``W`` reaches its end (``W >= end``).
    ``Trigger.on_every_element()`` also fires an updated result after every
    element added to a window, in arrival order within a micro-batch;
    ``Trigger.on_count(n)`` after every ``n``-th element added to a window
    since its previous firing; ``Trigger.on_interval(ms)`` at the end of a
    micro-batch for each window that changed since its previous firing, at
    most once per ``ms`` of processing time per window. These early firings
    are always followed by the final on-watermark firing.

Allowed lateness (SPEC 3.6)
    A window is *retained* while ``W < end + allowed_lateness_ms``. A late
    event (``ts < W``) that still has a retained window is added to it and
    the window fires again; one with no retained window is very late: it is
    dropped, counted and handed to the late-event handler.

Accumulation (SPEC 3.7)
    ``"accumulating"``: every firing carries the full result so far.
    ``"discarding"``: a firing carries only what arrived since the previous
    firing of that window. ``"retracting"``: like accumulating, but every
    firing after the first is preceded by a ``retract`` row carrying the
    previous result, so per window the sum of ``emit`` rows minus the sum of
    ``retract`` rows is the final result.

Examples
--------
>>> Trigger.on_count(100)
Trigger(kind='count', every=100)
>>> Emission().is_default
True
>>> Emission(allowed_lateness_ms=60_000).is_default
False
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, get_args, runtime_checkable

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.panes import PaneCallbacks
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.windows import check_ms

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "LateEventHandler",
    "counts_only",
    "DEFAULT_ALLOWED_LATENESS_MS",
    "DEFAULT_FUTURE_TOLERANCE_MS",
    "Accumulation",
    "Emission",
    "StateTtlConfig",
    "Trigger",
    "TriggerKind",
]

Accumulation: TypeAlias = Literal["accumulating", "discarding", "retracting"]
TriggerKind: TypeAlias = Literal["watermark", "element", "count", "interval"]


@runtime_checkable
class LateEventHandler(Protocol):
    """Receives the very late and invalid events of one micro-batch (see :mod:`krishiv_py.late`)."""

    def handle(self, late: pa.Table) -> None: ...


#: ``allowed_lateness()`` without an argument: the Ripple default, 60 s.
DEFAULT_ALLOWED_LATENESS_MS = 60_000
#: Events further than this ahead of the watermark are counted as future events.
DEFAULT_FUTURE_TOLERANCE_MS = 60_000


@attrs.frozen(kw_only=True)
class Trigger:
    """When a window fires. Build with the class methods.

    Examples
    --------
    >>> Trigger.on_watermark().is_early
    False
    >>> Trigger.on_interval(5_000)
    Trigger(kind='interval', every=5000)
    """

    kind: TriggerKind = "watermark"
    every: int = 0

    def __attrs_post_init__(self) -> None:
        if self.kind not in get_args(TriggerKind):
            raise PlanError(f"unknown trigger kind {self.kind!r}; valid: {', '.join(get_args(TriggerKind))}")

    @classmethod
    def on_watermark(cls) -> Trigger:
        """Fire once, when the watermark reaches the window's end (the default)."""
        return cls(kind="watermark")

    @classmethod
    def on_every_element(cls) -> Trigger:
        """An updated result after every element of a window, then the final firing."""
        return cls(kind="element", every=1)

    @classmethod
    def on_count(cls, n: int) -> Trigger:
        """An updated result after every ``n`` elements of a window, then the final firing."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PlanError(f"Trigger.on_count(n) needs a positive integer n, got {n!r}")
        return cls(kind="count", every=n)

    @classmethod
    def on_interval(cls, ms: Duration) -> Trigger:
        """Updated results of changed windows at most once per ``ms`` of processing time."""
        name = "Trigger.on_interval(ms)"
        return cls(kind="interval", every=check_ms(name, as_ms(name, ms)))

    @property
    def is_early(self) -> bool:
        """True for triggers that fire before the watermark reaches a window's end."""
        return self.kind != "watermark"

    @property
    def element_count(self) -> int:
        """Elements between element-driven firings (0: none)."""
        return self.every if self.kind in ("element", "count") else 0

    def describe(self) -> str:
        return {
            "watermark": "on_watermark()",
            "element": "on_every_element()",
            "count": f"on_count({self.every})",
            "interval": f"on_interval({self.every} ms)",
        }[self.kind]


def _ttl(value: Duration) -> int:
    out: int = as_ms("StateTtlConfig(ttl_ms)", value)
    return out


@attrs.frozen(kw_only=True)
class StateTtlConfig:
    """Drop window state (or, after ``key_by(...).with_state_ttl(...).agg(...)``, a key's) that has
    not been updated for ``ttl_ms``.

    ``time="event"`` (the default) measures in event time: a window whose
    newest row is ``ttl_ms`` or more behind the watermark expires, and a row
    already that far behind is very late. ``time="processing"`` measures in
    processing time, as Spark's state TTL does: a window no row has joined
    for ``ttl_ms`` of wall-clock time expires, and a later row for it starts
    it again. Either way an expired window that has not fired yet fires now
    (its final firing) and leaves state. Bounds the state of sessions with
    long gaps, of windows kept long for allowed lateness and of keys that go
    quiet; each removal counts in ``JobMetrics.state_evictions``.

    Examples
    --------
    >>> StateTtlConfig(ttl_ms=3_600_000)
    StateTtlConfig(ttl_ms=3600000, time='event')
    >>> StateTtlConfig(ttl_ms=60_000, time="processing").describe()
    '60000 ms of processing time'
    """

    ttl_ms: int = attrs.field(converter=_ttl)
    time: Literal["event", "processing"] = "event"

    def __attrs_post_init__(self) -> None:
        check_ms("StateTtlConfig(ttl_ms)", self.ttl_ms)
        if self.time not in ("event", "processing"):
            raise PlanError(f"StateTtlConfig(time=...) is 'event' or 'processing', got {self.time!r}")

    def describe(self) -> str:
        return f"{self.ttl_ms} ms of {self.time} time"


def _check_accumulation(_: object, __: object, value: object) -> None:
    if value not in get_args(Accumulation):
        raise PlanError(f"accumulation must be one of {', '.join(get_args(Accumulation))}; got {value!r}")


def _check_lateness(_: object, __: object, value: object) -> None:
    check_ms("allowed_lateness(ms)", value, positive=False)


@attrs.frozen(kw_only=True)
class Emission:
    """The emission options of one windowed aggregation, as one record.

    ``late_handler`` is ``None`` for the default
    :class:`~krishiv_py.late.CountingLateEventHandler` (count only).
    """

    trigger: Trigger = attrs.field(factory=Trigger)
    allowed_lateness_ms: int = attrs.field(default=0, validator=_check_lateness)
    accumulation: Accumulation = attrs.field(default="accumulating", validator=_check_accumulation)
    late_handler: LateEventHandler | None = attrs.field(default=None, eq=False)
    #: Pane-event callbacks (time-interval windows only).
    panes: PaneCallbacks = attrs.field(factory=PaneCallbacks)
    #: Event-time state TTL (None: windows live until their own retention ends).
    state_ttl: StateTtlConfig | None = None

    @property
    def is_default(self) -> bool:
        """True when only Spark's own operators are needed (fire once, nothing late kept)."""
        return not self.stateful_features()

    def stateful_features(self) -> list[str]:
        """The options in use that Spark's window operators cannot run exactly."""
        out = []
        if self.trigger.is_early:
            out.append(f"trigger {self.trigger.describe()}")
        if self.allowed_lateness_ms:
            out.append(f"allowed_lateness({self.allowed_lateness_ms} ms)")
        if self.accumulation != "accumulating":
            out.append(f"accumulation({self.accumulation!r})")
        if self.late_handler is not None and not counts_only(self.late_handler):
            out.append(f"late-event handler {type(self.late_handler).__name__}")
        if self.state_ttl is not None:
            out.append(f"state TTL ({self.state_ttl.describe()})")
        return out

    def describe(self) -> str:
        parts = [f"trigger={self.trigger.describe()}", f"allowed_lateness_ms={self.allowed_lateness_ms}"]
        parts.append(f"accumulation={self.accumulation}")
        if self.late_handler is not None:
            parts.append(f"late_handler={type(self.late_handler).__name__}")
        if self.panes.any:
            parts.append(f"pane_callbacks={','.join(self.panes.names())}")
        if self.state_ttl is not None:
            parts.append(f"state_ttl_ms={self.state_ttl.ttl_ms}")
            if self.state_ttl.time != "event":
                parts.append(f"state_ttl_time={self.state_ttl.time}")
        return " ".join(parts)


def counts_only(handler: Any) -> bool:
    """True for a handler that only counts late events (the default, ``CountingLateEventHandler``)."""
    return getattr(handler, "counts_only", False) is True
