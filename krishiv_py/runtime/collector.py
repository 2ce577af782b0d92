"""The driver side of the stateful operator: each micro-batch's output, routed.

Every micro-batch's output reaches :class:`BatchCollector` through
``foreachBatch`` (over Spark Connect, through the hand-off:
:mod:`krishiv_py.runtime.handoff`): the per-bucket payloads are decoded
once, the result rows run through the recipe's stages after the window
(:mod:`krishiv_py.runtime.stages`: the filters and projections after the
last operator, which keep no state) to the job's sink, very late and
invalid rows go to the late-event handler, pane events to their callbacks,
and the statistics (event classification, firings, state size) to the
job's metrics. Everything is keyed by batch id, so a micro-batch that Spark
runs again after a restart replaces what it wrote instead of adding to it.

Each key bucket's report (the state it holds, the watermark at which it
next fires or evicts) tells the job which buckets to tick
(:mod:`krishiv_py.runtime.stateful`). An operator after the first one runs
in krishiv's operator, never here: in its call, or as a stage of its own
that holds its watermark below every bucket that can still fire
(:mod:`krishiv_py.stateful.stage`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np

from krishiv_py.checkpoint import read_json, write_json
from krishiv_py.metrics import JobMetrics
from krishiv_py.names import PANE, PAYLOAD
from krishiv_py.runtime.output import conformed_late, deliver
from krishiv_py.runtime.quarantine import Quarantine, guarded
from krishiv_py.runtime.stages import Stages

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.panes import PaneCallbacks
    from krishiv_py.planner.spark.recipe import SparkRecipe
    from krishiv_py.runtime.auto_watermark import AutoWatermark
    from krishiv_py.sinks import SinkWriter
    from krishiv_py.stateful.operator import Payloads

__all__ = ["BatchCollector", "call_pane_events"]

log = logging.getLogger("krishiv_py")


@attrs.define
class _Bucket:
    state_windows: int = 0
    state_bytes: int = 0
    next_due_ms: int = 0  # meaningful only while state_windows > 0
    next_interval_ms: int = -1


#: Micro-batches whose timings a job's collector keeps (the newest).
KEPT_TIMINGS = 1_000
#: The busiest keys a job keeps count of (and writes into its checkpoint).
HOT_KEPT = 100


def _read_hot(path: str | None) -> dict[str, int]:
    """The busiest keys a checkpoint's earlier runs counted (``krishiv-hot-keys.json``)."""
    data = read_json(path)
    if not isinstance(data, dict):
        return {}
    return {str(e["key"]): int(e["rows"]) for e in data.get("hottest", []) if isinstance(e, dict)}


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
        auto: AutoWatermark | None = None,
        hot_keys_file: str | None = None,
    ) -> None:
        self._recipe = recipe
        #: The keys the operator received most rows of (estimated), over every micro-batch, kept in
        #: ``hot_keys_file`` (the checkpoint's: ``krishiv state show`` names them).
        self._hot_file = hot_keys_file
        self._hot: Counter[str] = Counter(_read_hot(hot_keys_file))
        #: An automatic lag: after each micro-batch, the next one's lag and watermark recorded.
        self.auto = auto
        #: The stages after the window.
        self._stages = Stages(recipe, spark=spark)
        #: The operator's own result columns (before any stage after the window).
        self._window_schema = self._stages.input_schema.to_arrow()
        self._writer = writer
        self._late_writer = late_writer
        self._late_layout = recipe.stateful.operator.late_layout if recipe.stateful is not None else None
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
        elif self.auto is not None:  # no bucket ran (no rows): the next micro-batch's record all the same
            self.auto.after_batch(batch_id, *(np.zeros(0, np.int64),) * 3)
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
            AUTO_COUNTS,
            AUTO_SOURCES,
            AUTO_TIMES,
            COUNTER_NAMES,
            DELAY_COUNTS,
            HOT_COUNTS,
            HOT_KEYS,
            TIMING_NAMES,
            to_output,
        )

        results = to_output(payloads.results, self._window_schema)
        stats = payloads.stats.to_pydict()
        staged = self._stages.run(results)
        deliver(self._writer, staged.table, batch_id, self._quarantine)
        self._call_panes(payloads, batch_id)
        if payloads.late.num_rows:
            self._hand_late(payloads.late, batch_id)
        delays = _summed(stats.pop(DELAY_COUNTS, []))
        if self.auto is not None:  # (before the micro-batch commits: the next one reads it)
            columns = (stats.pop(AUTO_SOURCES, []), stats.pop(AUTO_TIMES, []), stats.pop(AUTO_COUNTS, []))
            times = _times(*columns)
            delays = _summed([delays, self.auto.after_batch(batch_id, *times).tolist()])
        hot: Counter[str] = Counter()
        for labels, counts in zip(stats.pop(HOT_KEYS, []), stats.pop(HOT_COUNTS, []), strict=True):
            hot.update(dict(zip(labels or [], counts or [], strict=True)))
        timing = {name: int(sum(v or 0 for v in stats.get(name, []))) for name in TIMING_NAMES}
        timing["buckets"] = len(stats["bucket"])
        totals = {name: int(sum(stats[name])) for name in COUNTER_NAMES}
        totals["arith"] += staged.arithmetic_failures
        with self._lock:
            if batch_id > self._counted:
                self._counted = batch_id
                for name, value in totals.items():
                    self._totals[name] = self._totals.get(name, 0) + value
                self._delays = _summed([self._delays, delays])
                if hot:
                    self._count_hot(hot)
            self._timing(batch_id).update(timing)
            for i, b in enumerate(stats["bucket"]):
                self.buckets[int(b)] = _Bucket(
                    state_windows=int(stats["state_windows"][i]),
                    state_bytes=int(stats["state_bytes"][i]),
                    next_due_ms=int(stats["next_due_ms"][i]),
                    next_interval_ms=int(stats["next_interval_ms"][i]),
                )
        if totals["future"]:
            self._warn_future(batch_id, totals["future"])

    def _call_panes(self, payloads: Payloads, batch_id: int) -> None:
        """The pane callbacks of a micro-batch's panes (none asked for: nothing)."""
        callbacks = self._recipe.pane_callbacks
        if callbacks is None:
            return
        guarded(
            self._quarantine,
            "panes",
            batch_id,
            lambda: _pane_rows(callbacks, payloads, self._window_schema),
            lambda: call_pane_events(callbacks, self._keys, payloads),
            caller="a pane callback",
        )

    def _warn_future(self, batch_id: int, future: int) -> None:
        """Log a micro-batch's events more than the future tolerance ahead of the watermark."""
        lags = self.auto.lags() if self.auto is not None else {}
        if lags:  # an automatic lag holds the watermark back while it learns the delays
            log.warning(
                "batch %d: %d events more than the future tolerance ahead of the watermark; "
                "the automatic lag holds the watermark %d ms behind the newest events while it "
                "learns their delays, so early events count as future events until it narrows",
                batch_id,
                future,
                max(lags.values()),
            )
        else:
            log.warning(
                "batch %d: %d events more than the future tolerance ahead of the watermark (clock skew?)",
                batch_id,
                future,
            )

    def _count_hot(self, hot: Counter[str]) -> None:
        """Add a micro-batch's busiest keys; keep the :data:`HOT_KEPT` busiest; write them down."""
        self._hot.update(hot)
        if len(self._hot) > 2 * HOT_KEPT:
            self._hot = Counter(dict(self._hot.most_common(HOT_KEPT)))
        if self._hot_file is not None:
            label = ", ".join(self._keys)
            top = [{"key": k, "rows": n} for k, n in self._hot.most_common(HOT_KEPT)]
            with contextlib.suppress(OSError):  # (a report: a full disk must not stop the job)
                write_json(self._hot_file, {"keys": label, "hottest": top})

    def hot_keys(self, top: int = 10) -> list[tuple[str, int]]:
        """The keys the operator received most rows of so far (estimated), most first."""
        with self._lock:
            return self._hot.most_common(top)

    def _hand_late(self, late: pa.Table, batch_id: int) -> None:
        handler, writer = self._handler, self._late_writer
        if self._late_layout is not None:  # one layout, whichever operator or stage the rows met
            late = conformed_late(late, self._late_layout)
        if writer is not None:
            call = functools.partial(writer.write, late, batch_id)
        elif handler is not None:
            call = functools.partial(handler.handle, late)
        else:
            return
        guarded(self._quarantine, "late-events", batch_id, late, call, caller="the late-event handler")

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
            # The operator's rows are the job's window results or a join's rows, as ``metrics`` says.
            windows_emitted=None if metrics.windows_emitted is None else totals["emitted"],
            joined_rows=None if metrics.joined_rows is None else totals["emitted"],
            retractions=totals["retracted"],
            state_evictions=totals["expired"],
            # Expressions before the window are counted by Spark, its sums here.
            arithmetic_errors=(metrics.arithmetic_errors or 0) + totals["arith"],
            state_windows=sum(b.state_windows for b in buckets),
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


def _times(*columns: list[list[int] | None]) -> tuple[Any, ...]:
    """Every bucket's event times per source, one after the other (None: a bucket without rows):
    the source indexes, the distinct times and their counts, each column flattened."""
    return tuple(np.asarray([v for part in column if part for v in part], np.int64) for column in columns)


def _summed(parts: list[list[int] | None]) -> list[int]:
    """Histogram counts added bucket by bucket."""
    width = max((len(p) for p in parts if p), default=0)
    out = [0] * width
    for p in parts:
        for i, c in enumerate(p or ()):
            out[i] += int(c)
    return out


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
