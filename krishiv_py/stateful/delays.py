"""Log-spaced buckets of delays (ms): the bins of :class:`~krishiv_py.advice.DelayHistogram`.

Bucket 0 holds delay 0; bucket ``b >= 1`` holds the delays in
``(ceil((1 + r)^(b-1)), ceil((1 + r)^b)]`` ms with ``r =``
:data:`RESOLUTION`, so a bucket's upper bound is at most ``1 + r`` times
anything in it. Shared by the stateful operator, which counts each
micro-batch's delays per bucket (vectorized), and the advisor.

>>> [upper_ms(b) for b in bucket_of(np.array([0, 1, 100, 101]))]
[0, 1, 101, 102]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RESOLUTION", "bucket_of", "upper_ms"]

#: Relative width of a bucket: quantiles are at most this much above the true value.
RESOLUTION = 0.01
_LOG_BASE = math.log1p(RESOLUTION)


def bucket_of(delays_ms: np.ndarray) -> np.ndarray:
    """The bucket of each delay (non-negative integers, ms)."""
    out = np.zeros(len(delays_ms), np.int64)
    positive = delays_ms > 0
    logs = np.log(delays_ms[positive].astype(np.float64)) / _LOG_BASE
    out[positive] = np.ceil(logs - 1e-9).astype(np.int64) + 1
    return out


def upper_ms(bucket: int) -> int:
    """The largest delay (ms) in ``bucket``."""
    return 0 if bucket == 0 else math.ceil(math.exp((bucket - 1) * _LOG_BASE) - 1e-9)
