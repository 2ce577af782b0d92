"""Running the stateful lowering: the job that drives krishiv's operator.

Each micro-batch's output goes to the job's :class:`~krishiv_py.runtime.collector.BatchCollector`
(over Spark Connect through the hand-off files of :mod:`krishiv_py.runtime.handoff`),
which routes the rows, late rows and statistics; this module keeps the
query moving and answers for it.

Ticks
    Spark calls the operator only for buckets that have rows in a
    micro-batch, and runs no micro-batch when only the watermark moved. So
    after a micro-batch that advanced the watermark, :class:`StatefulJob`
    writes one *tick* row per bucket that holds something the new watermark
    makes due (a window to fire or evict) into an internal source; the next
    micro-batch calls those buckets with the new watermark. The same
    mechanism wakes buckets whose ``on_interval`` firing is due.
    ``process_all_available()`` runs until no tick is needed, so one
    ``send`` + ``process_all_available()`` is one step, as in the native
    lowering; a background thread does the same for jobs left running.

Over Spark Connect
    The job routes the payload files the server left to its collector
    (:func:`~krishiv_py.runtime.handoff.take_handoff`) as it pumps, when
    asked for results or metrics, and from its background thread; a routing
    failure fails the job, the files staying to be routed when it starts again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from krishiv_py.errors import JobError
from krishiv_py.metrics import JobMetrics
from krishiv_py.names import BUCKET, PAYLOAD
from krishiv_py.runtime.auto_watermark import effective_watermark
from krishiv_py.runtime.build import build_dataframe
from krishiv_py.runtime.collector import BatchCollector
from krishiv_py.runtime.handoff import take_handoff
from krishiv_py.runtime.idle import FileFeed
from krishiv_py.runtime.job import BoundedJob, JobSetup, JobState, StreamingJob
from krishiv_py.runtime.quarantine import restart_hint
from krishiv_py.spark_errors import spark_call
from krishiv_py.stateful.protocol import EVERY_STEP

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.advice import WatermarkAdvice

__all__ = ["StatefulJob", "TickWriter", "run_stateful_bounded"]


class TickWriter(FileFeed):
    """Writes tick rows (one per bucket to wake) into the operator's internal source."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "tick")

    def write(self, buckets: Sequence[int]) -> None:
        import numpy as np

        self.write_column(BUCKET, list(buckets), np.int32)


class StatefulJob(StreamingJob):
    """A streaming query running krishiv's stateful operator."""

    def __init__(
        self,
        *,
        collector: BatchCollector,
        ticks: TickWriter,
        buckets: int,
        handoff: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._collector = collector
        self._ticks = ticks
        self._buckets = buckets
        self._tick_lock = threading.Lock()
        self._ticked_wm: int | None = None
        self._seen_batch = -1
        #: Over Spark Connect: where the server leaves each batch's payloads.
        self._handoff = handoff
        self._handoff_lock = threading.Lock()
        self._handoff_error: BaseException | None = None
        self._handed_off = -1

    def _take_handoff(self) -> None:
        """Route the payloads the server left (Spark Connect); a routing failure fails the job."""
        if self._handoff is None or self._handoff_error is not None:
            return
        with self._handoff_lock:
            try:
                self._handed_off = take_handoff(self._handoff, self._collector, self._handed_off)
            except Exception as exc:
                self._handoff_error = exc
                if self._query.isActive:
                    self._query.stop()  # the file stays: routed when the job starts again
                cause = f"{type(exc).__name__}: {exc}"
                raise JobError(f"the job failed{restart_hint(cause)}", cause=cause) from exc

    def _check_failed(self) -> None:
        if self._handoff_error is not None:
            exc = self._handoff_error
            cause = f"{type(exc).__name__}: {exc}"
            raise JobError(f"the job failed{restart_hint(cause)}", cause=cause)
        super()._check_failed()

    @property
    def state(self) -> JobState:
        return "failed" if self._handoff_error is not None else super().state

    @property
    def error(self) -> str | None:
        exc = self._handoff_error
        return f"{type(exc).__name__}: {exc}" if exc is not None else super().error

    def advise_watermark(self, completeness: float = 0.999, *, caught: float = 0.9999) -> WatermarkAdvice:
        """Advice from the delays the operator measured as the job ran (see ``kp.advise_watermark``).

        Each event's delay is measured against the stream as of the previous
        micro-batch (the watermark it met plus the lag): what decided its
        lateness in this run. Before the operator measured anything, the
        job's input is read again instead.
        """
        from krishiv_py.advice import advice_from_delays

        counts = self._collector.delay_counts()
        if not sum(counts):
            return super().advise_watermark(completeness, caught=caught)
        return advice_from_delays(
            self.plan,
            counts,
            completeness=completeness,
            caught=caught,
            invalid=self.metrics().invalid_events or 0,
        )

    # --- control -------------------------------------------------------------------

    def _pump(self) -> None:
        super()._pump()
        self._check_failed()
        self._take_handoff()
        self._maybe_tick()

    def _maybe_tick(self) -> bool:
        """Write a tick for the buckets the current watermark (or the clock) makes due."""
        with self._tick_lock:
            wm = self.watermark_ms
            due: set[int] = set()
            if wm is not None and (self._ticked_wm is None or wm > self._ticked_wm):
                with self._collector._lock:
                    known = dict(self._collector.buckets)
                # A bucket that has not reported since this job started (a restart from a
                # checkpoint) may hold state: wake it until it reports.
                due |= set(range(self._buckets)) - set(known)
                # (A kernel with nothing due reports NOT_DUE, far below any watermark.)
                due |= {b for b, s in known.items() if s.state_windows and EVERY_STEP < s.next_due_ms <= wm}
                self._ticked_wm = wm
            now = int(time.time() * 1000)
            with self._collector._lock:
                due |= {b for b, s in self._collector.buckets.items() if 0 <= s.next_interval_ms <= now}
                for b in due:  # woken: wait for its next report before waking it again
                    if b in self._collector.buckets:
                        self._collector.buckets[b].next_interval_ms = -1
            if not due:
                return False
            # A stage bucket (a negative number) runs in any micro-batch that runs one of the
            # operator's buckets: every bucket call hands each stage bucket a row.
            self._ticks.write(sorted({max(b, 0) for b in due}))
            self._note_write()
            return True

    def _background_interval_s(self) -> float | None:
        base = super()._background_interval_s()
        return 0.2 if base is None else min(base, 0.2)

    def _background_step(self) -> None:
        progress = self._query.lastProgress
        batch = int(progress["batchId"]) if progress else -1
        interval_due = any(
            0 <= s.next_interval_ms <= time.time() * 1000 for s in list(self._collector.buckets.values())
        )
        if self._idle is not None:
            super()._background_step()
        self._take_handoff()
        if batch != self._seen_batch or interval_due:
            self._seen_batch = batch
            self._maybe_tick()

    # --- results and metrics --------------------------------------------------------------

    def results(self) -> pa.Table:
        self._check_failed()
        self._take_handoff()
        return super().results()

    def metrics(self) -> JobMetrics:
        if self._handoff_error is None:
            self._take_handoff()
        base = super().metrics()
        auto = self._collector.auto
        if auto is not None:  # the watermark the driver computes from the recorded lag
            base = attrs.evolve(
                base,
                watermark_ms=self.watermark_ms,
                source_watermarks=self.source_watermarks(),
                source_lags=self.source_lags(),
            )
        return self._collector.fold_into(base)

    # --- an automatic lag: the watermark the driver records for each micro-batch -------------

    @property
    def watermark_ms(self) -> int | None:
        auto = self._collector.auto
        if auto is None:
            return super().watermark_ms
        # Spark's watermark (delay 0): the least highest event time seen, or a promise past it.
        return effective_watermark(auto.states, super().watermark_ms)

    def source_watermarks(self) -> dict[str, int]:
        auto = self._collector.auto
        if auto is None:
            return super().source_watermarks()
        return auto.watermarks(super().watermark_ms)

    def source_lags(self) -> dict[str, int]:
        auto = self._collector.auto
        return super().source_lags() if auto is None else auto.lags()


def run_stateful_bounded(setup: JobSetup) -> BoundedJob:
    """Run a stateful recipe over bounded input as one batch job; returns a finished job."""
    from krishiv_py.stateful.operator import decode_payloads

    spark, recipe = setup.spark, setup.recipe
    observations: dict[str, Any] = {}
    df = spark_call("building the batch job", lambda: build_dataframe(spark, recipe, observations))
    table = spark_call("running the batch job", lambda: df.select(PAYLOAD).toArrow())
    collector = BatchCollector(recipe, setup.writer, late_writer=setup.late_writer, spark=spark)
    payloads = decode_payloads(cast("list[bytes]", table.column(PAYLOAD).to_pylist()))
    if payloads is not None:
        spark_call("handing over the results", lambda: collector.accept(payloads, 0))
    observed = {k: _observed(o) for k, o in observations.items()}
    return StatefulBoundedJob(setup=setup, observed=observed, collector=collector)


def _observed(observation: Any) -> dict[str, Any]:
    return dict(spark_call("reading metrics", lambda: observation.get))


class StatefulBoundedJob(BoundedJob):
    """A bounded run of the stateful operator (already finished)."""

    def __init__(self, *, collector: BatchCollector, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._collector = collector

    def metrics(self) -> JobMetrics:
        return self._collector.fold_into(super().metrics())
