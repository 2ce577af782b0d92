"""Watermark configuration and the time constants every engine shares.

A source's watermark is ``W = max(max event time seen - lag, highest
advance_watermark)``; it never moves backwards. The overall watermark of a
job is the minimum over its sources; a closed source counts as
:data:`END_OF_TIME_MS` ("+infinity").
"""

from __future__ import annotations

import attrs

from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.windows import check_ms

__all__ = ["END_OF_TIME_MS", "MAX_EVENT_MS", "MIN_EVENT_MS", "WatermarkSpec"]

#: The watermark of a closed source: later than the end of every window of a
#: supported event time (~year 144,000).
END_OF_TIME_MS = 2**52
#: Supported event times: from 1412-07-22 (-2**44 ms, the native lowering's
#: time shift) to 9999-12-31. Rows outside are invalid, like null event times.
MIN_EVENT_MS = -(2**44)
MAX_EVENT_MS = 253402300799999


@attrs.frozen(kw_only=True)
class WatermarkSpec:
    """Bounded out-of-orderness: the watermark trails the largest event time by ``lag_ms``.

    Examples
    --------
    >>> WatermarkSpec.fixed_lag_ms("event_time", 5_000)
    WatermarkSpec(column='event_time', lag_ms=5000)
    """

    column: str
    lag_ms: int
    future_tolerance_ms: int = attrs.field(default=DEFAULT_FUTURE_TOLERANCE_MS, repr=False)

    def __attrs_post_init__(self) -> None:
        check_ms("lag_ms", self.lag_ms, positive=False)
        check_ms("future_tolerance_ms", self.future_tolerance_ms, positive=False)

    @classmethod
    def fixed_lag_ms(
        cls, column: str, lag_ms: int, *, future_tolerance_ms: int = DEFAULT_FUTURE_TOLERANCE_MS
    ) -> WatermarkSpec:
        return cls(column=column, lag_ms=lag_ms, future_tolerance_ms=future_tolerance_ms)
