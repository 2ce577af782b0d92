"""How disordered a stream is: each event's delay behind the stream, as a mergeable histogram.

An event's *delay* is how far its event time lies behind the highest event
time seen before it (``max_seen - event_time``, 0 for an event that moves
the stream forward). A watermark with lag ``L`` puts an event on time when
its delay is at most ``L`` (per event; the micro-batches of a real run
apply the previous batch's watermark, which :func:`~krishiv_py.advice.what_if`
replays exactly). So the ``q``-quantile of the delays is the lag that puts a
share ``q`` of the events on time.

Everything here is vectorized numpy over event times in arrival order. The
histogram has log-spaced buckets (a bucket's upper bound is at most
``1 + RESOLUTION`` times its lower bound), so a quantile it reports is
never below the true one and at most 1 % above it; histograms of two parts
of a stream add up.

Examples
--------
>>> import numpy as np
>>> p = profile_event_times(np.array([0, 5_000, 4_000, 10_000, 1_000]))
>>> p.delays.quantile(0.8), p.behind, p.max_delay_ms  # 1000 ms, to the 1 % of a bucket
(1008, 2, 9000)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from krishiv_py.stateful.delays import RESOLUTION, bucket_of, upper_ms

__all__ = ["RESOLUTION", "DelayHistogram", "DisorderProfile", "profile_event_times"]


@attrs.frozen(kw_only=True)
class DelayHistogram:
    """Counts of delays (ms) in log-spaced buckets; ``counts[b]`` is bucket ``b``."""

    counts: tuple[int, ...] = ()

    @classmethod
    def of(cls, delays_ms: np.ndarray) -> DelayHistogram:
        """The histogram of ``delays_ms`` (non-negative integers)."""
        if not len(delays_ms):
            return cls()
        return cls(counts=tuple(int(c) for c in np.bincount(bucket_of(np.asarray(delays_ms, np.int64)))))

    @property
    def total(self) -> int:
        return sum(self.counts)

    def merge(self, other: DelayHistogram) -> DelayHistogram:
        """The histogram of both streams' delays."""
        n = max(len(self.counts), len(other.counts))
        a = list(self.counts) + [0] * (n - len(self.counts))
        b = list(other.counts) + [0] * (n - len(other.counts))
        return DelayHistogram(counts=tuple(x + y for x, y in zip(a, b, strict=True)))

    def quantile(self, q: float) -> int:
        """The smallest bucket bound (ms) that at least a share ``q`` of the delays stay within."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be between 0 and 1, got {q!r}")
        total = self.total
        if total == 0:
            return 0
        need = math.ceil(q * total - 1e-9)
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= need:
                return upper_ms(bucket)
        return upper_ms(len(self.counts) - 1)

    def share_within(self, lag_ms: int) -> float:
        """The share of delays surely at most ``lag_ms``: whole buckets up to it (never above the truth)."""
        total = self.total
        if total == 0:
            return 1.0
        within = sum(c for b, c in enumerate(self.counts) if upper_ms(b) <= lag_ms)
        return within / total

    def curve(self) -> list[tuple[int, float]]:
        """(lag ms, share of events on time) at each bucket bound: the completeness curve."""
        total, seen, out = self.total, 0, []
        for bucket, count in enumerate(self.counts):
            seen += count
            if count:
                out.append((upper_ms(bucket), seen / total))
        return out


@attrs.frozen(kw_only=True)
class DisorderProfile:
    """How disordered one source is. ``events`` counts rows with a valid event time."""

    source: str
    events: int
    invalid: int
    #: Events behind the highest event time seen before them (arrival-order inversions).
    behind: int
    max_delay_ms: int
    delays: DelayHistogram
    #: Keyed: number of keys and the share of events of the busiest key.
    keys: int | None = None
    busiest_key_share: float | None = None
    #: With a window and the stream's lag: events that came after their (first) window fired.
    after_first_firing: int | None = None

    def describe(self) -> str:
        """A few lines of text."""
        lines = [
            f"source {self.source!r}: {self.events:,} events ({self.invalid:,} without a valid event time)",
            f"  behind the stream: {self.behind:,} ({_share(self.behind, self.events)}), "
            f"largest delay {self.max_delay_ms:,} ms",
            "  delay quantiles: "
            + ", ".join(f"p{_pct(q)} {self.delays.quantile(q):,} ms" for q in (0.5, 0.9, 0.99, 0.999)),
        ]
        if self.keys is not None and self.busiest_key_share is not None:
            lines.append(f"  keys: {self.keys:,}; the busiest has {self.busiest_key_share:.1%} of the events")
        if self.after_first_firing is not None:
            lines.append(
                f"  after their window's first firing (current lag): {self.after_first_firing:,} "
                f"({_share(self.after_first_firing, self.events)})"
            )
        return "\n".join(lines)


def profile_event_times(
    event_ms: np.ndarray,
    *,
    source: str = "main",
    keys: Sequence[Any] | np.ndarray | None = None,
    first_window_end_ms: np.ndarray | None = None,
    lag_ms: int | None = None,
) -> DisorderProfile:
    """The profile of event times (ms, arrival order; NaN or a masked value: invalid).

    ``keys`` (one per event, any comparable values; the advisor passes
    integer key ids) adds the key counts; ``first_window_end_ms`` (the
    end of the first window each event belongs to) with ``lag_ms`` counts the
    events that came after that window fired (``max_seen - lag >= end``).
    """
    values = np.ma.getdata(event_ms).astype(np.float64, copy=False)
    valid = ~np.isnan(values) & ~np.ma.getmaskarray(event_ms)
    ts = values[valid].astype(np.int64)
    delays = np.zeros(len(ts), np.int64)
    before = np.empty(0, np.int64)
    if len(ts):
        before = np.maximum.accumulate(ts)
        delays[1:] = np.maximum(before[:-1] - ts[1:], 0)
    n_keys = share = None
    if keys is not None:
        _, counts = np.unique(np.asarray(keys)[valid], return_counts=True)
        n_keys = len(counts)
        share = float(counts.max() / counts.sum()) if len(counts) else 0.0
    after = None
    if first_window_end_ms is not None and lag_ms is not None:
        ends = np.asarray(first_window_end_ms, np.int64)[valid]
        seen = np.concatenate([[np.iinfo(np.int64).min + lag_ms], before[:-1]]) if len(ts) else before
        after = int(((seen - lag_ms) >= ends).sum())
    return DisorderProfile(
        source=source,
        events=len(ts),
        invalid=int((~valid).sum()),
        behind=int((delays > 0).sum()),
        max_delay_ms=int(delays.max()) if len(delays) else 0,
        delays=DelayHistogram.of(delays),
        keys=n_keys,
        busiest_key_share=share,
        after_first_firing=after,
    )


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.3%}" if whole else "0%"


def _pct(q: float) -> str:
    return f"{q * 100:g}"
