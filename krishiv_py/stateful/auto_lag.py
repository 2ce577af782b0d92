"""The automatic lag of a running job (SPEC 3.4): each source's delays, a micro-batch at a time.

Pure functions over numpy arrays: :func:`advance` takes the state after
the micro-batches so far and one micro-batch's event times, as distinct
values (ms) and how many rows hold each (what the operator's buckets
report, summed on the driver), and gives the state after it; :func:`lag_ms`
the lag it chooses for the next micro-batch. A micro-batch's delays are
counted per distinct value, so a batch of a million rows costs what its
distinct delays cost, and the state holds at most the window's rows' worth
of (delay, count) pairs per micro-batch in it.

The rule is :class:`~krishiv_py.plan.watermarks.AutoLag`'s: a row's delay
is its lag behind the highest event time the source sent before its
micro-batch (the first micro-batch's: its own highest), the window is the
last ``window_rows`` delays (a micro-batch the window cuts thinned evenly
over its sorted delays), the lag is their ``quantile`` by nearest rank,
clamped, ``max_lag_ms`` before ``warmup_rows`` rows. The watermark of the
next micro-batch is ``max(previous, highest of this one - the lag this one
ran with)``: it never moves back.

>>> from krishiv_py.plan.watermarks import AutoLag
>>> spec = AutoLag(window_rows=4, warmup_rows=2, min_lag_ms=0)
>>> s = advance(AutoState(), spec, np.array([900, 1_000]), np.array([1, 1]))
>>> s.highest_ms, s.watermark_ms, lag_ms(s, spec)  # the first ran with the upper clamp
(1000, -604799000, 100)
>>> s = advance(s, spec, np.array([700, 1_200, 1_300]), np.array([1, 1, 1]))
>>> s.watermark_ms, lag_ms(s, spec)  # ran with 100; its delays 300, 0, 0 and one of 0, 100
(1200, 300)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from krishiv_py.plan.watermarks import AutoLag

__all__ = ["AutoState", "advance", "advance_each", "lag_ms", "record_bytes", "record_states", "value_counts"]

_I64 = np.dtype(np.int64)


def _steps(value: Any) -> tuple[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], ...]:
    return tuple((np.asarray(d, _I64), np.asarray(c, _I64)) for d, c in value)


@attrs.frozen(kw_only=True)
class AutoState:
    """One source's automatic lag after some micro-batches.

    ``steps``: per micro-batch in the window, oldest first, its distinct
    delays (ascending) and how many rows had each; ``lag_ms``: the lag the
    next micro-batch runs with; ``watermark_ms``: the source's watermark
    for the next micro-batch (None before any event time).
    """

    highest_ms: int | None = None
    rows: int = 0
    steps: tuple[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], ...] = attrs.field(
        default=(), converter=_steps, eq=False
    )
    lag_ms: int | None = None
    watermark_ms: int | None = None

    def to_bytes(self) -> bytes:
        """The state as JSON (what the checkpoint records per micro-batch)."""
        body = {
            "highest_ms": self.highest_ms,
            "rows": self.rows,
            "lag_ms": self.lag_ms,
            "watermark_ms": self.watermark_ms,
            "steps": [[d.tolist(), c.tolist()] for d, c in self.steps],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> AutoState:
        return cls.from_body(json.loads(data))

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> AutoState:
        """The state of a parsed record (:meth:`to_bytes`'s JSON object)."""
        return cls(
            highest_ms=body["highest_ms"],
            rows=int(body["rows"]),
            steps=body["steps"],
            lag_ms=body["lag_ms"],
            watermark_ms=body["watermark_ms"],
        )


def value_counts(times_ms: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The distinct values of ``times_ms`` (ascending) and how often each occurs."""
    values, counts = np.unique(np.asarray(times_ms, _I64), return_counts=True)
    return values.astype(_I64), counts.astype(_I64)


def advance(
    state: AutoState, spec: AutoLag, times_ms: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]
) -> AutoState:
    """``state`` after a micro-batch whose rows' event times are ``times_ms`` (distinct, any
    order), ``counts[i]`` rows at ``times_ms[i]``; a micro-batch without rows changes nothing."""
    times = np.asarray(times_ms, _I64)
    weights = np.asarray(counts, _I64)
    keep = weights > 0
    times, weights = times[keep], weights[keep]
    if not len(times):
        return state
    top = int(times.max())
    since = state.highest_ms if state.highest_ms is not None else top
    delays, where = np.unique(np.maximum(since - times, 0), return_inverse=True)
    step = (delays.astype(_I64), np.bincount(where, weights=weights).astype(_I64))
    steps = [*state.steps, step]
    held = sum(int(c.sum()) for _, c in steps)
    while len(steps) > 1 and held - int(steps[0][1].sum()) >= spec.window_rows:
        held -= int(steps.pop(0)[1].sum())
    ran_with = state.lag_ms if state.lag_ms is not None else spec.max_lag_ms
    mark = top - ran_with
    watermark = mark if state.watermark_ms is None else max(state.watermark_ms, mark)
    after = AutoState(
        highest_ms=top if state.highest_ms is None else max(state.highest_ms, top),
        rows=state.rows + int(weights.sum()),
        steps=steps,
        watermark_ms=watermark,
    )
    return attrs.evolve(after, lag_ms=lag_ms(after, spec))


def advance_each(
    states: Sequence[AutoState],
    specs: Sequence[AutoLag],
    sources: np.ndarray[Any, Any],
    times_ms: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
) -> tuple[AutoState, ...]:
    """Each source's state after a micro-batch: :func:`advance` over the times of its own rows
    (``sources[i]``: the source index of ``times_ms[i]``; a source without rows is unchanged).

    >>> spec = AutoLag(window_rows=4, warmup_rows=1, min_lag_ms=0)
    >>> a, b = advance_each((AutoState(), AutoState()), (spec, spec), np.array([0, 1, 1]),
    ...                     np.array([500, 900, 1_000]), np.array([1, 1, 1]))
    >>> (a.highest_ms, lag_ms(a, spec)), (b.highest_ms, lag_ms(b, spec))
    ((500, 0), (1000, 100))
    """
    where = np.asarray(sources, _I64)
    times, weights = np.asarray(times_ms, _I64), np.asarray(counts, _I64)
    return tuple(
        advance(state, spec, times[where == i], weights[where == i])
        for i, (state, spec) in enumerate(zip(states, specs, strict=True))
    )


def record_bytes(states: Sequence[AutoState]) -> bytes:
    """What the checkpoint records for a micro-batch: one source's state as it is, several as
    ``{"sources": [...]}`` in the order of the job's watermarks."""
    if len(states) == 1:
        return states[0].to_bytes()
    return b'{"sources":[' + b",".join(s.to_bytes() for s in states) + b"]}"


def record_states(data: bytes) -> tuple[AutoState, ...]:
    """The states of a record (:func:`record_bytes`).

    >>> s = AutoState(highest_ms=9, rows=1, steps=[([0], [1])], lag_ms=50, watermark_ms=4)
    >>> record_states(record_bytes((s,))) == (s,), record_states(record_bytes((s, AutoState())))[1]
    (True, AutoState(highest_ms=None, rows=0, steps=(), lag_ms=None, watermark_ms=None))
    """
    body = json.loads(data)
    if "sources" not in body:
        return (AutoState.from_body(body),)
    return tuple(AutoState.from_body(b) for b in body["sources"])


def lag_ms(state: AutoState, spec: AutoLag) -> int:
    """The lag ``state`` chooses for the next micro-batch."""
    if state.rows < spec.warmup_rows or state.rows == 0 or not state.steps:
        return spec.max_lag_ms
    (oldest, oldest_counts), *rest = state.steps
    newer = sum(int(c.sum()) for _, c in rest)
    total_oldest = int(oldest_counts.sum())
    room = spec.window_rows - newer
    if room < total_oldest:  # thinned evenly over its sorted order: the (2i+1)n/2room-th of it
        picks = (2 * np.arange(room, dtype=_I64) + 1) * total_oldest // (2 * room)
        chosen = oldest[np.searchsorted(np.cumsum(oldest_counts), picks, side="right")]
        oldest, oldest_counts = value_counts(chosen)
    values = np.concatenate([oldest, *(d for d, _ in rest)])
    counts = np.concatenate([oldest_counts, *(c for _, c in rest)])
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    n = int(counts.sum())
    rank = max(1, math.ceil(spec.quantile * n)) - 1
    value = int(values[np.searchsorted(np.cumsum(counts), rank, side="right")])
    return min(max(value, spec.min_lag_ms), spec.max_lag_ms)
