"""Watermark configuration and the time constants every engine shares.

A source's watermark is ``W = max(max event time seen - lag, highest
advance_watermark)``; it never moves backwards. The overall watermark of a
job is the minimum over its sources; a closed source counts as
:data:`END_OF_TIME_MS` ("+infinity").
"""

from __future__ import annotations

import attrs

from krishiv_py.plan.windows import check_ms

__all__ = ["END_OF_TIME_MS", "MAX_EVENT_MS", "MIN_EVENT_MS", "WatermarkSpec"]

#: The watermark of a closed source: later than any supported event time.
END_OF_TIME_MS = 2**47
#: Event times outside [0001-01-01, 9999-12-31] are treated as invalid, like nulls.
MIN_EVENT_MS = -62135596800000
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

    def __attrs_post_init__(self) -> None:
        check_ms("lag_ms", self.lag_ms, positive=False)

    @classmethod
    def fixed_lag_ms(cls, column: str, lag_ms: int) -> WatermarkSpec:
        return cls(column=column, lag_ms=lag_ms)
