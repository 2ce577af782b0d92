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

The record lives in the checkpoint, so every task must see the
checkpoint's file system (a local or shared path, as for the operator's
stages). Over Spark Connect the operator's output reaches the driver
after the micro-batch commits: an automatic lag does not run there yet.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import PlanError
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.stateful.auto_lag import AutoState, advance
from krishiv_py.stateful.delays import bucket_of

__all__ = ["AutoWatermark", "effective_watermark", "recorded_state"]


def recorded_state(layout: CheckpointLayout, batch_id: int) -> AutoState:
    """The state micro-batch ``batch_id`` runs with, from its record in ``layout``.

    A checkpoint without any record is a new job: no watermark yet. A
    missing record in a checkpoint that has others is an error (the
    watermark the micro-batch ran with cannot be known).
    """
    data = layout.auto_lag_record(batch_id)
    if data is not None:
        return AutoState.from_bytes(data)
    if batch_id == 0 or not layout.has_auto_lag_records():
        return AutoState()
    raise PlanError(
        f"the automatic lag's record of micro-batch {batch_id} is missing from the checkpoint "
        f"({layout.auto_lag}): the watermark that micro-batch runs with cannot be known"
    )


def effective_watermark(state: AutoState, spark_ms: int | None) -> int | None:
    """The watermark a micro-batch runs with: the recorded one, unless Spark's (the highest event
    time seen, ``spark_ms``) is past every event the record counted: then a promise moved it
    there (``advance_watermark`` beyond the data, the end of input), and the watermark is at
    least that.

    >>> effective_watermark(AutoState(highest_ms=900, watermark_ms=700), 900)
    700
    >>> effective_watermark(AutoState(highest_ms=900, watermark_ms=700), 2**52)
    4503599627370496
    """
    if spark_ms is None or (state.highest_ms is not None and spark_ms <= state.highest_ms):
        return state.watermark_ms
    return spark_ms if state.watermark_ms is None else max(state.watermark_ms, spark_ms)


class AutoWatermark:
    """The driver's side: after each micro-batch, the record of the next one."""

    def __init__(self, layout: CheckpointLayout, spec: AutoLag) -> None:
        local = layout.on_this_machine()
        if local is None:
            raise PlanError(
                f"an automatic lag records each micro-batch's lag in the checkpoint, which must be "
                f"a path this machine and the executors see, got {layout.root!r}"
            )
        self._layout = local
        self._spec = spec
        self._lock = threading.Lock()
        committed = local.committed_batch()
        self._state = recorded_state(local, committed + 1) if committed >= 0 else AutoState()

    @property
    def state(self) -> AutoState:
        """The state after the newest micro-batch: the next one's lag and watermark."""
        with self._lock:
            return self._state

    @property
    def lag_ms(self) -> int:
        """The lag the next micro-batch runs with (the upper clamp before any row)."""
        lag = self.state.lag_ms
        return self._spec.max_lag_ms if lag is None else lag

    def after_batch(
        self, batch_id: int, times_ms: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fold in micro-batch ``batch_id``'s event times and record the next micro-batch's state;
        returns the delay histogram counts of its rows (:mod:`krishiv_py.stateful.delays`: behind
        the highest time seen before it; none in the first micro-batch), the job's profile."""
        before = recorded_state(self._layout, batch_id)
        after = advance(before, self._spec, times_ms, counts)
        self._layout.write_auto_lag_record(batch_id + 1, after.to_bytes())
        with self._lock:
            self._state = after
        if before.highest_ms is None or not len(times_ms):
            return np.zeros(0, np.int64)
        behind = np.maximum(before.highest_ms - np.asarray(times_ms, np.int64), 0)
        return np.bincount(bucket_of(behind), weights=np.asarray(counts, np.int64)).astype(np.int64)
