"""Choosing the watermark from the data: disorder profiles, the lag advisor, what-if replay.

See docs/watermarks.md, "Choosing the lag". Nothing here starts Spark.
"""

from __future__ import annotations

from krishiv_py.advice.advise import (
    WatermarkAdvice,
    advice_from_delays,
    advise_plan,
    advise_watermark,
    what_if,
)
from krishiv_py.advice.profile import DelayHistogram, DisorderProfile, profile_event_times

__all__ = [
    "DelayHistogram",
    "DisorderProfile",
    "WatermarkAdvice",
    "advice_from_delays",
    "advise_plan",
    "advise_watermark",
    "profile_event_times",
    "what_if",
]
