"""Watermark configuration and the time constants every engine shares.

A source's watermark is ``W = max(max event time seen - lag, highest
advance_watermark)``; it never moves backwards. The overall watermark of a
job is the minimum over its sources; a closed source counts as
:data:`END_OF_TIME_MS` ("+infinity"). A source with an idle timeout that
has sent nothing for that long (processing time) is left out of the
minimum until it sends again; the overall watermark never goes back.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.windows import check_ms

__all__ = [
    "END_OF_TIME_MS",
    "MAX_EVENT_MS",
    "MIN_EVENT_MS",
    "AutoLag",
    "MultiSourceWatermarkSpec",
    "WatermarkSpec",
]

#: The watermark of a closed source: later than the end of every window of a
#: supported event time (~year 144,000).
END_OF_TIME_MS = 2**52
#: Supported event times: from 1412-07-22 (-2**44 ms, the native lowering's
#: time shift) to 9999-12-31. Rows outside are invalid, like null event times.
MIN_EVENT_MS = -(2**44)
MAX_EVENT_MS = 253402300799999


#: Seven days: the automatic lag's upper clamp (SPEC 3.4), and its lag until it has seen enough.
SEVEN_DAYS_MS = 7 * 24 * 3_600_000


def _quantile(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise PlanError(f"AutoLag {attribute.name} is a fraction between 0 and 1 (exclusive), got {value!r}")


def _rows(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    low = 1 if attribute.name == "window_rows" else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PlanError(f"AutoLag {attribute.name} is a whole number of rows >= {low}, got {value!r}")


def _lag_bound(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_ms(attribute.name, value, positive=False)


def _min_lag(value: Duration) -> int:
    out: int = as_ms("min_lag_ms", value)
    return out


def _max_lag(value: Duration) -> int:
    out: int = as_ms("max_lag_ms", value)
    return out


def _lag(value: Duration) -> int:
    out: int = as_ms("lag_ms", value)
    return out


def _tolerance(value: Duration) -> int:
    out: int = as_ms("future_tolerance_ms", value)
    return out


@attrs.frozen(kw_only=True)
class AutoLag:
    """A lag chosen from the data as it arrives (SPEC 3.4, "Automatic lag").

    Per source, the ``quantile`` of the delays of its last ``window_rows``
    rows, clamped to ``[min_lag_ms, max_lag_ms]``; until the source has sent
    ``warmup_rows`` rows, ``max_lag_ms``. A row's delay is how far its event
    time is behind the highest event time the source sent before the row's
    micro-batch (rows of one micro-batch arrive together; the first
    micro-batch's rows count from its own highest time), 0 for a row ahead of
    it. A micro-batch runs with the lag chosen from the rows before it: the
    watermark computed at its end is ``max event time - lag``, and never moves
    back. Where the window cuts a micro-batch, that micro-batch's delays are
    thinned evenly over their sorted order (which of its rows came first is
    not defined). docs/watermarks.md, "An automatic lag".

    Examples
    --------
    >>> AutoLag()
    AutoLag(quantile=0.95, window_rows=5000, warmup_rows=250, min_lag_ms=50, max_lag_ms=604800000)
    >>> AutoLag(quantile=1.5)
    Traceback (most recent call last):
    ...
    krishiv_py.errors.PlanError: AutoLag quantile is a fraction between 0 and 1 (exclusive), got 1.5
    """

    quantile: float = attrs.field(default=0.95, validator=_quantile)
    window_rows: int = attrs.field(default=5_000, validator=_rows)
    warmup_rows: int = attrs.field(default=250, validator=_rows)
    min_lag_ms: int = attrs.field(default=50, validator=_lag_bound, converter=_min_lag)
    max_lag_ms: int = attrs.field(default=SEVEN_DAYS_MS, validator=_lag_bound, converter=_max_lag)

    def __attrs_post_init__(self) -> None:
        if self.min_lag_ms > self.max_lag_ms:
            raise PlanError(f"AutoLag min_lag_ms ({self.min_lag_ms}) is above max_lag_ms ({self.max_lag_ms})")


@attrs.frozen(kw_only=True)
class WatermarkSpec:
    """Bounded out-of-orderness: the watermark trails the largest event time by ``lag_ms``.

    Examples
    --------
    >>> WatermarkSpec.fixed_lag_ms("event_time", 5_000)
    WatermarkSpec(column='event_time', lag_ms=5000)
    """

    column: str
    lag_ms: int = attrs.field(converter=_lag)
    future_tolerance_ms: int = attrs.field(
        default=DEFAULT_FUTURE_TOLERANCE_MS, repr=False, converter=_tolerance
    )

    def __attrs_post_init__(self) -> None:
        check_ms("lag_ms", self.lag_ms, positive=False)
        check_ms("future_tolerance_ms", self.future_tolerance_ms, positive=False)

    @classmethod
    def fixed_lag_ms(
        cls, column: str, lag_ms: Duration, *, future_tolerance_ms: Duration = DEFAULT_FUTURE_TOLERANCE_MS
    ) -> WatermarkSpec:
        return cls(column=column, lag_ms=lag_ms, future_tolerance_ms=future_tolerance_ms)


@attrs.frozen(repr=False)
class MultiSourceWatermarkSpec:
    """One :class:`WatermarkSpec` per named stream of a union, and an optional idle timeout.

    Apply it with ``Stream.with_watermark`` to a union of streams that have
    no watermark yet; each stream (memory stream, file source or records,
    by its ``name``) gets its own watermark, and the job's watermark is the
    minimum over them. With ``idle_timeout_ms(n)``, a stream that has sent
    nothing for ``n`` ms of processing time is left out of that minimum, so
    a quiet source cannot hold every window back; when it sends again it
    rejoins without pulling the overall watermark back.

    Immutable: every method returns a new spec.

    Examples
    --------
    >>> spec = (
    ...     MultiSourceWatermarkSpec()
    ...     .source("clicks", WatermarkSpec.fixed_lag_ms("event_time", 5_000))
    ...     .source("orders", WatermarkSpec.fixed_lag_ms("event_time", 30_000))
    ...     .idle_timeout_ms(60_000)
    ... )
    >>> spec
    MultiSourceWatermarkSpec(clicks: lag_ms=5000, orders: lag_ms=30000; idle_timeout_ms=60000)
    >>> spec.names
    ('clicks', 'orders')
    """

    _sources: tuple[tuple[str, WatermarkSpec], ...] = ()
    _idle_timeout_ms: int | None = None

    @classmethod
    def new(cls) -> MultiSourceWatermarkSpec:
        """An empty spec (the same as ``MultiSourceWatermarkSpec()``)."""
        return cls()

    def source(self, name: str, spec: WatermarkSpec) -> MultiSourceWatermarkSpec:
        """This spec plus the watermark of the stream called ``name``."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"source() needs a stream name (a non-empty str), got {name!r}")
        if not isinstance(spec, WatermarkSpec):
            raise PlanError(
                f"source({name!r}, ...) takes a WatermarkSpec, e.g. "
                f"WatermarkSpec.fixed_lag_ms('event_time', 5_000); got {type(spec).__name__}"
            )
        if name in self.names:
            raise PlanError(
                f"source {name!r} is already in this MultiSourceWatermarkSpec; name each stream once"
            )
        return attrs.evolve(self, sources=(*self._sources, (name, spec)))

    def idle_timeout_ms(self, timeout_ms: Duration) -> MultiSourceWatermarkSpec:
        """Leave a stream out of the minimum after ``timeout_ms`` of processing time without input."""
        timeout_ms = check_ms("idle_timeout_ms", as_ms("idle_timeout_ms", timeout_ms))
        return attrs.evolve(self, idle_timeout_ms=timeout_ms)

    @property
    def names(self) -> tuple[str, ...]:
        """The stream names, in the order they were added."""
        return tuple(name for name, _ in self._sources)

    @property
    def specs(self) -> Mapping[str, WatermarkSpec]:
        """Each stream's :class:`WatermarkSpec`, by name."""
        return dict(self._sources)

    @property
    def timeout_ms(self) -> int | None:
        """The idle timeout, None when sources are never idle."""
        return self._idle_timeout_ms

    def __repr__(self) -> str:
        parts = ", ".join(f"{name}: lag_ms={spec.lag_ms}" for name, spec in self._sources)
        idle = f"; idle_timeout_ms={self._idle_timeout_ms}" if self._idle_timeout_ms is not None else ""
        return f"MultiSourceWatermarkSpec({parts}{idle})"
