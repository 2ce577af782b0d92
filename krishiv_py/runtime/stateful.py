"""Running the stateful lowering: the driver side of krishiv's operator.

Every micro-batch's output reaches :class:`BatchCollector` through
``foreachBatch``: the per-bucket payloads are decoded once, the result rows
go to the job's sink, very late and invalid rows to the late-event handler,
and the statistics (event classification, firings, state size) to the job's
metrics. Everything is keyed by batch id, so a micro-batch that Spark runs
again after a restart replaces what it wrote instead of adding to it.

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
    ``foreachBatch`` functions run on the server, not in this process, so
    the operator's payloads go to Spark's own Parquet file sink under the
    checkpoint (``krishiv-handoff/``, exactly once per batch, its metadata
    log naming each batch's files) and the job routes them to its collector
    here in batch order (:func:`take_handoff`), deleting each file once
    routed. Files left by a process that died (or by a handler that raised)
    are routed when the job starts again; routing is keyed by batch id, so a
    batch is never counted twice.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.metrics import JobMetrics
from krishiv_py.names import BUCKET, PANE, PAYLOAD, RESULT_KIND, RESULT_ROW
from krishiv_py.runtime.idle import FileFeed
from krishiv_py.runtime.job import BoundedJob, JobSetup, JobState, StreamingJob
from krishiv_py.runtime.output import deliver
from krishiv_py.runtime.quarantine import Quarantine, guarded, restart_hint
from krishiv_py.spark_errors import spark_call

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.advice import WatermarkAdvice
    from krishiv_py.panes import PaneCallbacks
    from krishiv_py.planner.spark.recipe import AfterWindow, CascadeStage, SparkRecipe, TopNStage
    from krishiv_py.sinks import SinkWriter
    from krishiv_py.stateful.operator import Payloads

__all__ = ["HANDOFF_CONF", "BatchCollector", "StatefulJob", "TickWriter", "take_handoff"]

log = logging.getLogger("krishiv_py")


@attrs.define
class _Bucket:
    state_windows: int = 0
    state_bytes: int = 0
    next_due_ms: int = 0  # meaningful only while state_windows > 0
    next_interval_ms: int = -1


#: Micro-batches whose timings a job's collector keeps (the newest).
KEPT_TIMINGS = 1_000


class BatchCollector:
    """Receives each micro-batch's decoded output on the driver (``foreachBatch``)."""

    def __init__(
        self,
        recipe: SparkRecipe,
        writer: SinkWriter,
        *,
        late_writer: SinkWriter | None = None,
        quarantine: Quarantine | None = None,
        spark: SparkSession | None = None,
        checkpoint: CheckpointLayout | None = None,
    ) -> None:
        self._recipe = recipe
        self._spark = spark
        after = recipe.after
        #: The operator's own result columns (before any stage after the window).
        if recipe.cascade is not None:
            self._window_schema = recipe.cascade.upstream_schema.to_arrow()
        else:
            self._window_schema = (recipe.output_schema if after is None else after.window_schema).to_arrow()
        cascade_dir = None if checkpoint is None else checkpoint.cascade
        top_dir = None if checkpoint is None else checkpoint.top_n
        self._cascade = _Cascade(recipe.cascade, cascade_dir) if recipe.cascade is not None else None
        self._top_n = _TopN(recipe.top_n, top_dir, self._run_stages) if recipe.top_n is not None else None
        self._writer = writer
        self._late_writer = late_writer
        self._quarantine = quarantine
        self._handler = recipe.late_handler
        self._keys = list(recipe.stateful.operator.kernel.keys) if recipe.stateful is not None else []
        self._lock = threading.Lock()
        #: The operator's counters over every micro-batch routed so far, folded in as each one
        #: arrives (a job that runs for days holds no per-batch record of them).
        self._totals: dict[str, int] = {}
        #: The delay histogram counts the operator measured, over every micro-batch (all buckets).
        self._delays: list[int] = []
        #: The newest micro-batch counted: one Spark runs again (after a restart, before its
        #: commit) gives the same counts and is not counted twice.
        self._counted = -1
        self.buckets: dict[int, _Bucket] = {}
        #: Per micro-batch, the newest :data:`KEPT_TIMINGS`, microseconds (diagnostics for
        #: benchmarks): the operator's time in the Python workers summed over buckets
        #: (``operator.TIMING_NAMES``), ``buckets`` called, and on the driver: collecting the
        #: payloads (``collect_us``: this runs the micro-batch's Spark job, the operator
        #: included), decoding and routing them.
        self.timings: dict[int, dict[str, int]] = {}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from krishiv_py.stateful.operator import decode_payloads

        started = time.perf_counter_ns()
        table = batch.select(PAYLOAD).toArrow()  # runs the micro-batch
        fetched = time.perf_counter_ns()
        payloads = decode_payloads(cast("list[bytes]", table.column(PAYLOAD).to_pylist()))
        decoded = time.perf_counter_ns()
        if payloads is not None:
            self.accept(payloads, batch_id)
        with self._lock:
            timing = self._timing(batch_id)
            timing["collect_us"] = (fetched - started) // 1000
            timing["decode_payloads_us"] = (decoded - fetched) // 1000
            timing["route_us"] = (time.perf_counter_ns() - decoded) // 1000

    def _timing(self, batch_id: int) -> dict[str, int]:
        """The timings of ``batch_id`` (under the lock), dropping the oldest past :data:`KEPT_TIMINGS`."""
        timing = self.timings.setdefault(batch_id, {})
        while len(self.timings) > KEPT_TIMINGS:
            del self.timings[next(iter(self.timings))]
        return timing

    def accept(self, payloads: Payloads, batch_id: int) -> None:
        """Route one micro-batch's results, late rows and statistics."""
        from krishiv_py.stateful.operator import (
            COUNTER_NAMES,
            DELAY_COUNTS,
            NO_WATERMARK,
            TIMING_NAMES,
            to_output,
        )

        results = to_output(payloads.results, self._window_schema)
        failures = 0
        cascade_counts: dict[str, int] = {}
        column: list[Any] = payloads.stats.column("watermark_ms").to_pylist()
        marks = [int(w) for w in column if w is not None and w != NO_WATERMARK]
        if self._cascade is not None:
            between_failures = 0
            if self._recipe.cascade is not None and self._recipe.cascade.between is not None:
                kept, between_failures = self._run_stages(self._recipe.cascade.between, results, carry=True)
            else:
                kept = None
            results, cascade_counts = self._cascade.step(
                results, kept, batch_id, max(marks) if marks else None
            )
            failures += between_failures
        if self._top_n is not None:
            results, rank_failures = self._top_n.step(results, batch_id, max(marks) if marks else None)
            failures += rank_failures
        if self._recipe.after is not None:
            results, after_failures = self._after(results)
            failures += after_failures
        deliver(self._writer, results, batch_id, self._quarantine)
        if self._recipe.pane_callbacks is not None:
            callbacks = self._recipe.pane_callbacks
            guarded(
                self._quarantine,
                "panes",
                batch_id,
                lambda: _pane_rows(callbacks, payloads, self._window_schema),
                lambda: call_pane_events(callbacks, self._keys, payloads),
                caller="a pane callback",
            )
        if payloads.late.num_rows:
            self._hand_late(payloads.late, batch_id)
        stats = payloads.stats.to_pydict()
        delays = _summed(stats.pop(DELAY_COUNTS, []))
        timing = {name: int(sum(v or 0 for v in stats.get(name, []))) for name in TIMING_NAMES}
        timing["buckets"] = len(stats["bucket"])
        totals = {name: int(sum(stats[name])) for name in COUNTER_NAMES}
        totals["arith"] += failures
        if cascade_counts:  # the job's results are the second window's
            totals["emitted"], totals["retracted"] = cascade_counts["emitted"], cascade_counts["retracted"]
        with self._lock:
            if batch_id > self._counted:
                self._counted = batch_id
                for name, value in totals.items():
                    self._totals[name] = self._totals.get(name, 0) + value
                self._delays = _summed([self._delays, delays])
            self._timing(batch_id).update(timing)
            for i, b in enumerate(stats["bucket"]):
                self.buckets[int(b)] = _Bucket(
                    state_windows=int(stats["state_windows"][i]),
                    state_bytes=int(stats["state_bytes"][i]),
                    next_due_ms=int(stats["next_due_ms"][i]),
                    next_interval_ms=int(stats["next_interval_ms"][i]),
                )
        if totals["future"]:
            log.warning(
                "batch %d: %d events more than the future tolerance ahead of the watermark (clock skew?)",
                batch_id,
                totals["future"],
            )

    def _after(self, results: pa.Table) -> tuple[pa.Table, int]:
        """The stages after the window over one micro-batch's results, and their arithmetic failures.

        They run as a small Spark batch job on the results, so every
        expression means what it means in the other lowerings.
        """
        after = self._recipe.after
        assert after is not None
        return self._run_stages(after, results)

    def _run_stages(
        self, stages: AfterWindow, results: pa.Table, *, carry: bool = False
    ) -> tuple[pa.Table, int]:
        """``stages`` over ``results`` as a small Spark batch job; ``carry``: keep each row's index."""
        import pyarrow as pa

        from krishiv_py.runtime.build import build_after
        from krishiv_py.types import conform

        if carry:
            results = results.append_column(RESULT_ROW, pa.array(range(results.num_rows), pa.int64()))
        if not results.num_rows:
            return _empty(stages, carry), 0
        spark = self._spark
        if spark is None:
            raise JobError("stages after the window need the job's SparkSession")
        observations: dict[str, Any] = {}
        frame = spark.createDataFrame(results)
        table = build_after(spark, stages, frame, observations).toArrow()
        failures = sum(int(v or 0) for o in observations.values() for v in o.get.values())
        if carry:
            rows = table.column(RESULT_ROW)
            return conform(table.drop_columns([RESULT_ROW]), stages.schema).append_column(
                RESULT_ROW, rows
            ), failures
        return conform(table, stages.schema), failures

    def _hand_late(self, late: pa.Table, batch_id: int) -> None:
        handler, writer = self._handler, self._late_writer
        if writer is not None:
            call = functools.partial(writer.write, late, batch_id)
        elif handler is not None:
            call = functools.partial(handler.handle, late)
        else:
            return
        guarded(self._quarantine, "late-events", batch_id, late, call, caller="the late-event handler")

    def next_due_ms(self) -> int | None:
        """When the second window of a cascade has something to fire or delete (None: nothing)."""
        return None if self._cascade is None else self._cascade.next_due_ms

    def fold_into(self, metrics: JobMetrics) -> JobMetrics:
        """``metrics`` with the operator's exact counts and state size."""
        totals = self.totals()
        with self._lock:
            buckets = list(self.buckets.values())
        return attrs.evolve(
            metrics,
            invalid_events=totals["invalid"],
            on_time_events=totals["on_time"],
            mildly_late_events=totals["mildly_late"],
            very_late_events=totals["very_late"],
            future_events=totals["future"],
            windows_emitted=totals["emitted"],
            retractions=totals["retracted"],
            state_evictions=totals["expired"],
            # Expressions before the window are counted by Spark, its sums here.
            arithmetic_errors=(metrics.arithmetic_errors or 0) + totals["arith"],
            state_windows=sum(b.state_windows for b in buckets)
            + (self._cascade.held if self._cascade else 0),
            state_bytes=sum(b.state_bytes for b in buckets),
        )

    def delay_counts(self) -> list[int]:
        """The delay histogram counts of every micro-batch this process routed."""
        with self._lock:
            return list(self._delays)

    def totals(self) -> dict[str, int]:
        from krishiv_py.stateful.operator import COUNTER_NAMES

        with self._lock:
            return {name: self._totals.get(name, 0) for name in COUNTER_NAMES}


def _summed(parts: list[list[int] | None]) -> list[int]:
    """Histogram counts added bucket by bucket."""
    width = max((len(p) for p in parts if p), default=0)
    out = [0] * width
    for p in parts:
        for i, c in enumerate(p or ()):
            out[i] += int(c)
    return out


def _empty(stages: AfterWindow, carry: bool) -> pa.Table:
    import pyarrow as pa

    from krishiv_py.types import conform

    table = conform(stages.schema.to_arrow().empty_table(), stages.schema)
    return table.append_column(RESULT_ROW, pa.array([], pa.int64())) if carry else table


class _Cascade:
    """The second window of a cascade on the driver: its state, kept per batch id in the checkpoint."""

    def __init__(self, stage: CascadeStage, path: str | None) -> None:
        from krishiv_py.runtime.driver_state import DriverStateStore

        self._stage = stage
        self._store = DriverStateStore(path, ("emitted", "live")) if path is not None else None
        self._state: Any = None
        self._batch: int | None = None
        self.next_due_ms: int | None = None
        self.held = 0

    def step(
        self, results: pa.Table, kept: pa.Table | None, batch_id: int, watermark: int | None
    ) -> tuple[pa.Table, dict[str, int]]:
        import numpy as np

        from krishiv_py.stateful import cascade
        from krishiv_py.types import conform

        stage = self._stage
        if self._batch is None or self._batch != batch_id - 1:  # a restart, or a batch run again
            loaded = self._store.load_before(batch_id) if self._store is not None else None
            self._state = None
            if loaded is not None:
                tables, mark = loaded
                self._state = cascade.CascadeState(tables["live"], tables["emitted"], mark)
        if kept is None:
            names = [c for c in results.column_names if c != RESULT_KIND]
            kept, rows = results.select(names), np.arange(results.num_rows, dtype=np.int64)
        else:
            rows = kept.column(RESULT_ROW).to_numpy().astype(np.int64)
            kept = kept.drop_columns([RESULT_ROW])
        changes = cascade.changes_of(
            results, stage.identity, kept, rows, retracting=stage.upstream_retracting
        )
        state, out = cascade.step(stage.spec, self._state, changes, watermark)
        if self._store is not None:
            self._store.save(batch_id, {"emitted": state.emitted, "live": state.live}, state.watermark_ms)
        self._state, self._batch = state, batch_id
        self.next_due_ms = out.next_due_ms if out.next_due_ms >= 0 else None
        self.held = state.live.num_rows
        table = _with_timestamps(out.results)
        counts = {"emitted": out.emitted, "retracted": out.retracted, "very_late_results": out.very_late}
        return conform(table, stage.schema), counts


class _TopN:
    """Window top-N on the driver: its state kept per batch id in the checkpoint."""

    def __init__(self, stage: TopNStage, path: str | None, run: Any) -> None:
        from krishiv_py.runtime.driver_state import DriverStateStore

        self._stage = stage
        self._run = run
        self._store = DriverStateStore(path, ("shown", "live")) if path is not None else None
        self._state: Any = None
        self._batch: int | None = None
        self.held = 0

    def step(self, results: pa.Table, batch_id: int, watermark: int | None) -> tuple[pa.Table, int]:
        from krishiv_py.stateful import topn
        from krishiv_py.types import conform

        stage = self._stage
        if self._batch is None or self._batch != batch_id - 1:  # a restart, or a batch run again
            loaded = self._store.load_before(batch_id) if self._store is not None else None
            self._state = None if loaded is None else topn.TopNState(loaded[0]["live"], loaded[0]["shown"])
        failures = 0

        def rank(rows: pa.Table) -> pa.Table:
            nonlocal failures
            ranked, failed = self._run(stage.rank, rows)
            failures += failed
            return cast("pa.Table", ranked)

        state, out = topn.step(stage.spec, self._state, results, watermark, rank)
        if self._store is not None:
            self._store.save(batch_id, {"shown": state.shown, "live": state.live}, watermark)
        self._state, self._batch = state, batch_id
        self.held = state.live.num_rows
        return conform(out, stage.schema), failures


def _with_timestamps(results: pa.Table) -> pa.Table:
    """``window_start``/``window_end`` from int ms to timestamps."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in ("window_start", "window_end"):
        i = results.schema.get_field_index(name)
        us = pc.multiply(results.column(name), pa.scalar(1000, pa.int64()))
        results = results.set_column(i, name, us.cast(pa.timestamp("us", "UTC")))
    return results


def call_pane_events(callbacks: PaneCallbacks, keys: Sequence[str], payloads: Payloads) -> None:
    """Hand one micro-batch's pane events to the callbacks, in the order of :mod:`krishiv_py.panes`."""
    from krishiv_py.panes import PaneEvent
    from krishiv_py.stateful.state import FIRST, WINDOW_END, WINDOW_START

    def rows(table: pa.Table | None) -> list[dict[str, Any]]:
        if table is None or not table.num_rows:
            return []
        out = table.to_pylist()
        # Keys order like the reference model's: null first, then by value.
        return sorted(
            out, key=lambda r: (r[WINDOW_END], r[WINDOW_START], *((r[k] is not None, r[k]) for k in keys))
        )

    def event(kind: Any, row: dict[str, Any]) -> PaneEvent:
        skip = {*keys, WINDOW_START, WINDOW_END, FIRST}
        return PaneEvent(
            kind=kind,
            key=tuple(row[k] for k in keys),
            window_start_ms=int(row[WINDOW_START]) // 1000,
            window_end_ms=int(row[WINDOW_END]) // 1000,
            values={k: v for k, v in row.items() if k not in skip},
        )

    for row in rows(payloads.results):
        if row.get(FIRST) and callbacks.on_initial_full is not None:
            callbacks.on_initial_full(event("initial_full", row))
        if callbacks.on_trigger is not None:
            callbacks.on_trigger(event("trigger", row))
    if callbacks.on_close is not None:
        for row in rows(payloads.closed):
            callbacks.on_close(event("close", row))


def _pane_rows(callbacks: PaneCallbacks, payloads: Payloads, schema: pa.Schema) -> pa.Table:
    """The rows pane callbacks were handed in one micro-batch, ``__kp_pane`` saying fired or closed."""
    import pyarrow as pa

    from krishiv_py.stateful.operator import to_output

    parts = []
    if callbacks.on_initial_full is not None or callbacks.on_trigger is not None:
        parts.append((to_output(payloads.results, schema), "fired"))
    if callbacks.on_close is not None and payloads.closed is not None:
        present = pa.schema([f for f in schema if f.name in payloads.closed.column_names])
        parts.append((to_output(payloads.closed, present), "closed"))
    tables = [t.append_column(PANE, pa.array([kind] * t.num_rows, pa.string())) for t, kind in parts]
    if not tables:  # pragma: no cover - a pane callback raised, so one is registered
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="permissive")


#: Spark's file sink writes one metadata file per micro-batch with this (never compacts).
HANDOFF_CONF = {"spark.sql.streaming.fileSink.log.compactInterval": str(2**31 - 1)}


def take_handoff(path: str, collector: BatchCollector, after: int) -> int:
    """Route the payloads of batches after ``after`` that Spark's file sink left under ``path``.

    Each batch's Parquet files (listed in the sink's ``_spark_metadata/<batch id>``)
    go to ``collector`` in batch order and are deleted once routed. Returns the
    last batch id routed.
    """
    import json
    from urllib.parse import unquote, urlparse

    import pyarrow as pa
    import pyarrow.parquet as pq

    from krishiv_py.stateful.operator import decode_payloads

    log_dir = os.path.join(path, "_spark_metadata")
    if not os.path.isdir(log_dir):
        return after
    for batch_id in sorted(int(f) for f in os.listdir(log_dir) if f.isdigit() and int(f) > after):
        with open(os.path.join(log_dir, str(batch_id)), encoding="utf-8") as f:
            entries = [json.loads(line) for line in f.read().splitlines()[1:] if line.strip()]
        files = [unquote(urlparse(e["path"]).path) for e in entries if e.get("action", "add") == "add"]
        files = [f for f in files if os.path.exists(f)]  # routed (and deleted) by an earlier run
        if files:
            table = pa.concat_tables([pq.read_table(f, columns=[PAYLOAD]) for f in files])
            payloads = decode_payloads(cast("list[bytes]", table.column(PAYLOAD).to_pylist()))
            if payloads is not None:
                collector.accept(payloads, batch_id)
            for name in files:
                os.remove(name)
        after = batch_id
    return after


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
                due |= {b for b, s in known.items() if s.state_windows and s.next_due_ms <= wm}
                cascade_due = self._collector.next_due_ms()
                if cascade_due is not None and cascade_due <= wm:
                    due.add(0)  # any bucket: its micro-batch runs the second window at wm
                self._ticked_wm = wm
            now = int(time.time() * 1000)
            with self._collector._lock:
                due |= {b for b, s in self._collector.buckets.items() if 0 <= s.next_interval_ms <= now}
                for b in due:  # woken: wait for its next report before waking it again
                    if b in self._collector.buckets:
                        self._collector.buckets[b].next_interval_ms = -1
            if not due:
                return False
            self._ticks.write(sorted(due))
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
        return self._collector.fold_into(base)


def run_stateful_bounded(setup: JobSetup) -> BoundedJob:
    """Run a stateful recipe over bounded input as one batch job; returns a finished job."""
    from krishiv_py.runtime.build import build_dataframe
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
