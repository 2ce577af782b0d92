"""The reference model's automatic lag (SPEC 3.4): one source's delays, one step at a time.

Written from the rule of :class:`~krishiv_py.plan.watermarks.AutoLag`, in
plain Python and independent of any lowering: a step's rows get their
delays against the highest event time the source sent before the step (the
first step with times: against its own highest), the last ``window_rows``
delays are kept (a step cut by the window is thinned evenly over its sorted
delays), and the lag for the next step is their ``quantile`` by nearest rank
(the ``ceil(quantile * n)``-th smallest), clamped; ``max_lag_ms`` until
``warmup_rows`` rows were seen.
"""

from __future__ import annotations

import math
from collections import deque

from krishiv_py.plan.watermarks import AutoLag

__all__ = ["AutoLagTracker"]


class AutoLagTracker:
    """The delays of one source and the lag they choose.

    Examples
    --------
    >>> t = AutoLagTracker(AutoLag(window_rows=4, warmup_rows=2, min_lag_ms=0))
    >>> t.lag_ms()  # nothing seen: the upper clamp
    604800000
    >>> t.step([1_000, 900])  # the first step counts from its own highest time: delays 0, 100
    >>> t.lag_ms()
    100
    >>> t.step([1_300, 700, 1_200])  # against 1,000: delays 0, 300, 0
    >>> t.lag_ms()  # the last 4 delays: 100 (thinned from the first step), 0, 300, 0
    300
    """

    def __init__(self, spec: AutoLag) -> None:
        self.spec = spec
        #: The highest event time (ms) sent before the next step, None before any.
        self.highest_ms: int | None = None
        self.rows = 0
        #: Per step, its delays (ms), oldest first; together at least the window's rows, if seen.
        self._steps: deque[list[int]] = deque()

    def step(self, times_ms: list[int]) -> None:
        """A step's rows (their event times, ms; rows without one left out)."""
        if not times_ms:
            return
        since = self.highest_ms if self.highest_ms is not None else max(times_ms)
        self._steps.append([max(0, since - t) for t in times_ms])
        self.rows += len(times_ms)
        self.highest_ms = max(times_ms) if self.highest_ms is None else max(self.highest_ms, *times_ms)
        held = sum(map(len, self._steps))
        while len(self._steps) > 1 and held - len(self._steps[0]) >= self.spec.window_rows:
            held -= len(self._steps.popleft())

    def window(self) -> list[int]:
        """The last ``window_rows`` delays (fewer before that many were seen), sorted."""
        if not self._steps:
            return []
        oldest, *rest = self._steps
        newer = [d for s in rest for d in s]
        oldest = sorted(oldest)
        room = self.spec.window_rows - len(newer)
        if room < len(oldest):  # thinned evenly over its sorted order
            oldest = [oldest[(2 * i + 1) * len(oldest) // (2 * room)] for i in range(room)]
        return sorted(oldest + newer)

    def lag_ms(self) -> int:
        """The lag for the next step."""
        spec = self.spec
        if self.rows < spec.warmup_rows or self.rows == 0:
            return spec.max_lag_ms
        values = self.window()
        chosen = values[max(1, math.ceil(spec.quantile * len(values))) - 1]
        return min(max(chosen, spec.min_lag_ms), spec.max_lag_ms)
