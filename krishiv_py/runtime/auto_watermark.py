"""A running job's automatic watermark (SPEC 3.4): the lag recorded with each micro-batch.

Spark's watermark takes a fixed delay, so a source declared with
``watermark(column, "auto")`` runs on the stateful lowering with Spark's
delay at 0 (Spark's watermark is then the highest event time seen), and
the driver computes the job's watermark itself:

1. Each key bucket of krishiv's operator reports its micro-batch's event
   times as distinct values and their counts.
2. In ``foreachBatch`` of micro-batch ``b`` (before Spark commits it), the
   driver reads the state ``b`` ran with, ``krishiv-auto-lag/<b>`` in the
   checkpoint, folds in ``b``'s times (:func:`krishiv_py.stateful.auto_lag.advance`)
   and records the result as ``krishiv-auto-lag/<b+1>``: the lag and the
   watermark micro-batch ``b + 1`` runs with.
3. Every task of micro-batch ``b + 1`` (the map tasks' merge, the
   operator's buckets, its stages) reads that record by the batch id Spark
   sets on it, the same way :mod:`krishiv_py.runtime.map_watermark` reads
   Spark's own offset log.

A micro-batch Spark runs again after a crash finds the record it ran with
the first time, and its ``foreachBatch`` writes the same next record
again (the same rows give the same bytes): a recovered run uses the lags
of an uninterrupted one. The first micro-batch has no record and no
watermark.

With several watermarked sources (a union of sources, a Kafka topic with
a watermark per partition), each row reaches the operator with its
source's index, the buckets report times per source, and the record holds
a state per source: each source's lag is chosen from its own delays, and
the micro-batch's watermark is the least of the sources' (a source that
Spark's watermark shows has promised past its data, being closed or idle,
holds nothing back: :func:`source_watermark`).

The record lives in the checkpoint, so every task must see the
checkpoint's file system (a local or shared path, as for the operator's
stages). Over Spark Connect the operator's output reaches the driver
after the micro-batch commits: an automatic lag does not run there yet.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import PlanError
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.stateful.auto_lag import AutoState, advance_each, record_bytes, record_states
from krishiv_py.stateful.delays import bucket_of

__all__ = ["AutoWatermark", "effective_watermark", "recorded_states", "source_watermark"]


def recorded_states(
    layout: CheckpointLayout, batch_id: int, sources: int | None = None
) -> tuple[AutoState, ...]:
    """The state of each watermarked source micro-batch ``batch_id`` runs with, from its record in
    ``layout``; ``sources``: how many the job has (None: as many as the record holds).

    A checkpoint without any record is a new job: no watermark yet (one
    state per source, or one when ``sources`` is None: no watermark
    either way). A missing record in a checkpoint that has others is an
    error (the watermark the micro-batch ran with cannot be known), and so
    is a record of another number of sources (the checkpoint of another
    plan).
    """
    data = layout.auto_lag_record(batch_id)
    if data is not None:
        states = record_states(data)
        if sources is not None and len(states) != sources:
            raise PlanError(
                f"the automatic lag's record of micro-batch {batch_id} in {layout.auto_lag} holds "
                f"{len(states)} source(s), this job watermarks {sources}: start it on its own checkpoint"
            )
        return states
    if batch_id == 0 or not layout.has_auto_lag_records():
        return (AutoState(),) * (sources or 1)
    raise PlanError(
        f"the automatic lag's record of micro-batch {batch_id} is missing from the checkpoint "
        f"({layout.auto_lag}): the watermark that micro-batch runs with cannot be known"
    )


def source_watermark(state: AutoState, spark_ms: int | None) -> int | None:
    """One source's watermark in a micro-batch: the recorded one, unless Spark's (the least of
    every source's highest event time, or a promise past it: ``spark_ms``) is past every event
    the record counted of this source: then a promise moved it there (``advance_watermark``
    beyond the data, the end of input, an idle source lifted), and the watermark is at least that.

    Spark's watermark is at most this source's own (its highest time or its promise), so it
    never lifts a source above what the source itself allows.

    >>> source_watermark(AutoState(highest_ms=900, watermark_ms=700), 900)
    700
    >>> source_watermark(AutoState(highest_ms=900, watermark_ms=700), 2**52)
    4503599627370496
    """
    if spark_ms is None or (state.highest_ms is not None and spark_ms <= state.highest_ms):
        return state.watermark_ms
    return spark_ms if state.watermark_ms is None else max(state.watermark_ms, spark_ms)


def effective_watermark(states: Sequence[AutoState], spark_ms: int | None) -> int | None:
    """The watermark a micro-batch runs with: the least of its sources' (:func:`source_watermark`);
    None while one of them has none.

    >>> effective_watermark([AutoState(highest_ms=900, watermark_ms=700)], 900)
    700
    >>> effective_watermark([AutoState(highest_ms=900, watermark_ms=700), AutoState()], None)
    >>> effective_watermark([AutoState(highest_ms=900, watermark_ms=700),
    ...                      AutoState(highest_ms=600, watermark_ms=500)], 900)  # the second closed
    700
    """
    marks = [source_watermark(s, spark_ms) for s in states]
    known = [m for m in marks if m is not None]
    return min(known) if known and len(known) == len(marks) else None


class AutoWatermark:
    """The driver's side: after each micro-batch, the record of the next one.

    ``specs``: each watermarked source's name and automatic lag, in the
    order of the job's watermarks (the source index its rows carry).
    """

    def __init__(self, layout: CheckpointLayout, specs: Sequence[tuple[str, AutoLag]]) -> None:
        local = layout  # (a path here or a URI the executors reach: krishiv_py.files reads both)
        self._layout = local
        self._names = tuple(name for name, _ in specs)
        self._specs = tuple(spec for _, spec in specs)
        self._lock = threading.Lock()
        try:
            committed = local.committed_batch()
        except OSError as exc:  # (FileNotFoundError is no error here: names() gives [])
            raise PlanError(
                f"an automatic lag records each micro-batch's lag in the checkpoint, which this "
                f"process cannot read ({layout.root}: {exc}): give it the store's client and "
                "credentials (docs/durability.md), or a path this machine and the executors see"
            ) from exc
        sources = len(self._specs)
        self._states = (
            recorded_states(local, committed + 1, sources) if committed >= 0 else (AutoState(),) * sources
        )

    @property
    def states(self) -> tuple[AutoState, ...]:
        """Each source's state after the newest micro-batch: the next one's lags and watermarks."""
        with self._lock:
            return self._states

    def lags(self) -> dict[str, int]:
        """The lag each source's next micro-batch runs with (the upper clamp before any row)."""
        states = self.states
        return {
            name: spec.max_lag_ms if state.lag_ms is None else state.lag_ms
            for name, spec, state in zip(self._names, self._specs, states, strict=True)
        }

    def watermarks(self, spark_ms: int | None) -> dict[str, int]:
        """Each source's watermark now (those with none are left out), Spark's being ``spark_ms``."""
        marks = {
            name: source_watermark(s, spark_ms) for name, s in zip(self._names, self.states, strict=True)
        }
        return {name: mark for name, mark in marks.items() if mark is not None}

    def after_batch(
        self,
        batch_id: int,
        sources: np.ndarray[Any, Any],
        times_ms: np.ndarray[Any, Any],
        counts: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """Fold in micro-batch ``batch_id``'s event times (``sources[i]``: the source index of
        ``times_ms[i]``, held by ``counts[i]`` rows) and record the next micro-batch's states;
        returns the delay histogram counts of its rows (:mod:`krishiv_py.stateful.delays`: each
        behind the highest time its source sent before it; none in a source's first micro-batch),
        the job's profile."""
        before = recorded_states(self._layout, batch_id, len(self._specs))
        after = advance_each(before, self._specs, sources, times_ms, counts)
        self._layout.write_auto_lag_record(batch_id + 1, record_bytes(after))
        with self._lock:
            self._states = after
        where = np.asarray(sources, np.int64)
        known = np.array([s.highest_ms is not None for s in before])[where]  # a source seen before
        if not known.any():
            return np.zeros(0, np.int64)
        highest = np.array([s.highest_ms or 0 for s in before], np.int64)[where[known]]
        behind = np.maximum(highest - np.asarray(times_ms, np.int64)[known], 0)
        weights = np.asarray(counts, np.int64)[known]
        return np.bincount(bucket_of(behind), weights=weights).astype(np.int64)
