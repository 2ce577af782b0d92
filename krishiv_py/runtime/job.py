"""Running jobs: a Spark streaming query, or a finished bounded batch job.

The watermark tracker is rebuilt from Spark's own per-batch observations
(``observe`` metrics: the largest event time per source, including the
watermark marker rows of ``advance_watermark``/``close``), so
``job.watermark_ms`` and ``job.source_watermarks()`` report exactly what
Spark applies: per source ``max(event time) - lag``, monotone; overall the
minimum over the sources that have a watermark (Spark's ``min`` policy).
A source with an idle timeout also has idle markers
(:mod:`krishiv_py.runtime.idle`): they lift its watermark operator, and so
the overall minimum, but not the source's own reported watermark.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError, JobStoppedError, PlanError
from krishiv_py.metrics import JobMetrics
from krishiv_py.names import (
    IDLE_WM,
    INVALID,
    MAX_ET_US,
    OUT_OBSERVE,
    ROWS,
    counts_input,
    counts_very_late,
    is_arithmetic_metric,
)
from krishiv_py.planner.spark import SparkRecipe
from krishiv_py.planner.spark.recipe import Emits
from krishiv_py.runtime.bad_files import BadFiles, BadFileSource, disk_hint, fail_hint, quarantined_files
from krishiv_py.runtime.handle import Job, JobProgress, JobState
from krishiv_py.runtime.quarantine import Quarantine, quarantine_counts, restart_hint
from krishiv_py.runtime.remote import named_metrics
from krishiv_py.sinks import Sink, SinkWriter
from krishiv_py.spark_errors import (
    GuardedQuery,
    server_gone,
    spark_call,
    spark_cause,
    spark_error_text,
    start_query,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from krishiv_py.plan.nodes import PlanNode
    from krishiv_py.runtime.spool import Feed

__all__ = ["BoundedJob", "Job", "JobProgress", "JobSetup", "JobState", "StreamingJob"]


@attrs.frozen(kw_only=True)
class JobSetup:
    """What every job is built with: the plan, its recipe, Spark, and the sink's open writers."""

    plan: PlanNode
    recipe: SparkRecipe
    spark: SparkSession = attrs.field(repr=False)
    sink: Sink
    writer: SinkWriter
    late_writer: SinkWriter | None = None
    #: The Spark query name the writers were opened with (streaming jobs).
    query_name: str | None = None
    #: Show progress bars for long waits (the session's setting).
    progress: bool | None = None

    def apply(self, job: Job) -> None:
        job.lowering = self.recipe.lowering
        job.plan = self.plan
        job.spark = self.spark
        job._recipe = self.recipe
        job._sink = self.sink
        job._writer = self.writer
        job._late_writer = self.late_writer
        job._progress = self.progress


def last_committed(checkpoint: CheckpointLayout | None) -> int:
    """The newest committed micro-batch of ``checkpoint`` (-1: none, or a file system this process
    cannot read)."""
    if checkpoint is None:
        return -1
    try:
        return checkpoint.committed_batch()
    except OSError:
        return -1


def close_writers(*writers: object) -> None:
    """Call each writer's optional ``close()``: a writer's connections end with its job."""
    for writer in writers:
        close = getattr(writer, "close", None)
        if callable(close):
            close()


class StreamingJob(Job):
    """A Spark Structured Streaming query running a native recipe."""

    def __init__(
        self,
        *,
        setup: JobSetup,
        query: StreamingQuery,
        senders: Sequence[Feed | None],
        checkpoint_dir: str,
        durability: str | None,
        markers_dir: str | None = None,
        quarantine: Quarantine | None = None,
        file_sources: Sequence[BadFileSource] = (),
        relaunch: Callable[[], StreamingQuery] | None = None,
        layout: CheckpointLayout | None = None,
        resumed_from: int = -1,
    ) -> None:
        from krishiv_py.runtime.idle import IdleTracker

        setup.apply(self)
        recipe = setup.recipe
        self.checkpoint_dir = checkpoint_dir
        self.durability = durability
        self._query: Any = GuardedQuery(query)
        self._senders = list(senders)
        #: Where rows of user-code calls that raised go (``start(quarantine_dir=...)``).
        self.quarantine = quarantine
        self._history = _History(tracked=recipe.tracked, shift_ms=recipe.time_shift_ms)
        self._last_progress: tuple[Any, Any, Any] | None = None  # newest progress report read
        self._lock = threading.Lock()
        self._progress_lock = threading.Lock()
        self._ended: JobState | None = None  # set when krishiv_py ended the query
        self._input_done = False  # every source closed, and all of it processed
        self._writes = 0  # files written into the query's internal inputs (markers, ticks)
        self._idle = (
            IdleTracker(tracked=recipe.tracked, markers_dir=markers_dir)
            if recipe.idle and markers_dir is not None
            else None
        )
        self._background: threading.Thread | None = None
        #: The job's streaming file sources, and how each treats a file it cannot read.
        self._file_sources = tuple(file_sources)
        quarantining = any(s.quarantines for s in file_sources)
        self._bad_files = (
            BadFiles(quarantine.path, file_sources)
            if quarantine is not None and relaunch is not None and quarantining
            else None
        )
        self._relaunch = relaunch
        self._restart_lock = threading.Lock()
        #: The job's checkpoint (None: not given).
        self._layout = layout
        #: The last micro-batch committed before the query (re)started (-1: none, or looked at).
        self._resumed_from = resumed_from

    def _recover(self, failed: Any = None) -> bool:
        """If the query failed on a file of a ``bad_files="quarantine"`` source: set it aside, run again.

        ``failed`` is the query the caller saw fail (default: the current
        one). True when a query runs again now (started here, or by another
        thread since); False when the query did not fail, failed on
        something else, or the job was stopped.
        """
        if self._bad_files is None or self._relaunch is None:
            return False
        with self._restart_lock:
            if failed is not None and self._query is not failed:
                return True  # another thread started it again already
            if self._ended is not None or self._query.isActive:
                return False
            exc = self._query.exception()
            if exc is None or self._bad_files.set_aside(spark_error_text(exc)) is None:
                return False
            what = "starting the job again without the bad file"
            self._resumed_from = last_committed(self._layout)
            self._query = GuardedQuery(start_query(what, self._relaunch))
            return True

    def _retire(self) -> None:
        """This job will not run again: no restart past a bad file (another job takes its checkpoint)."""
        with self._restart_lock:
            self._ended = self._ended or "stopped"

    def _failure(self, cause: str | None, what: str = "the job") -> JobError:
        """The JobError of a failure: with the way past a failing file or user code, where there is one."""
        exc = self._query.exception()
        text = spark_error_text(exc) if exc is not None else cause
        hints = restart_hint(cause) + fail_hint(text, self._file_sources)
        hints += disk_hint(text, self.checkpoint_dir)
        return JobError(f"{what} failed{hints}", cause=cause)

    def _start_background(self) -> None:
        """Start the thread that keeps a running job's internal inputs current (if it needs one)."""
        interval = self._background_interval_s()
        if interval is None or self._background is not None:
            return
        self._background = threading.Thread(
            target=self._background_loop, args=(interval,), name="krishiv-job", daemon=True
        )
        self._background.start()

    def _background_interval_s(self) -> float | None:
        recover = 0.5 if self._bad_files is not None else None  # set bad files aside without a caller
        if self._idle is None:
            return recover
        shortest = min(t.idle_timeout_ms or 0 for t in self._recipe.idle)
        interval = min(1.0, max(0.05, shortest / 4000))
        return interval if recover is None else min(interval, recover)

    def _background_loop(self, interval: float) -> None:
        while True:
            time.sleep(interval)
            try:
                query = self._query
                if not query.isActive and not self._recover(query):
                    return
                self._background_step()
            except Exception:  # noqa: BLE001 - the query stopped or failed; its owner sees the error
                return

    def _background_step(self) -> None:
        self._refresh()
        self._idle_step()

    def _note_write(self) -> None:
        with self._lock:
            self._writes += 1

    def _idle_step(self) -> None:
        """Write the idle markers now due (see :mod:`krishiv_py.runtime.idle`)."""
        if self._idle is None:
            return
        with self._lock:
            batches = [(int(b["batchId"]), b.get("observedMetrics") or {}) for b, _ in self._history.recent]
            effective = dict(self._history.effective)
        if self._idle.step(batches, effective):
            self._note_write()

    def _pump(self) -> None:
        """After a ``processAllAvailable`` pass: write what the query needs next (markers, ticks)."""
        self._idle_step()

    def idle_sources(self) -> frozenset[str]:
        return self._idle.idle_sources() if self._idle is not None else frozenset()

    # --- control ---------------------------------------------------------------

    def process_all_available(self) -> None:
        """Block until every batch sent so far has been processed.

        Raises :class:`JobStoppedError` when the job was stopped (before or
        during the wait, also from another thread) and :class:`JobError`
        when it failed.
        """
        self._check_usable()
        with self._watch("processing"):
            self._drain()
        self._check_usable()

    def _drain(self) -> None:
        """Process everything available now (no checks, no Ctrl-C handling).

        Passes repeat until one writes nothing into the query's internal
        inputs (idle markers, ticks), here or in the background thread, so a
        watermark they move has fired its windows when this returns.
        """
        for _ in range(1000):
            before = self._writes
            closed = self._all_sources_closed()
            query = self._query
            try:
                spark_call("processing the available input", query.processAllAvailable)
            except JobError as exc:
                if self._recover(query):
                    continue
                raise self._failure(exc.cause, "processing the available input") from exc.__cause__
            self._refresh()
            self._nudge_if_stalled()
            if closed:  # everything up to end of input was processed
                self._input_done = True
            self._pump()
            if self._writes == before:
                self._trim_spools()
                return

    def _nudge_if_stalled(self) -> None:
        """Run one micro-batch where Spark would not fire what its restored watermark makes due.

        Spark runs a micro-batch without new rows (which fires the windows a
        moved watermark closes) only after a micro-batch of the same run. A
        query started on a checkpoint whose last micro-batch moved the
        watermark runs none until new input comes, and at the end of input
        none comes. So when no micro-batch ran since the (re)start and the
        last one moved the watermark, a file of no rows goes into a memory
        stream the job reads: its micro-batch runs at the restored watermark.
        A job reading no memory stream waits for its next input, as Spark does.
        """
        batch, self._resumed_from = self._resumed_from, -1  # looked at once per (re)start
        if batch < 0:
            return
        layout = self._layout
        feed = next((s for s in self._senders if s is not None), None)
        try:
            if layout is None or feed is None or layout.committed_batch() != batch:
                return
            moved = layout.next_watermark_ms(batch) > layout.batch_watermark_ms(batch)
        except (OSError, PlanError):
            return
        if moved:
            feed.nudge()
            self._note_write()

    def _trim_spools(self) -> None:
        """Retention: delete the memory-stream batches that every job reading them has committed."""
        for sender in self._senders:
            if sender is not None:
                sender.spool.maybe_clean(throttle=False)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until the input has ended (every source closed) and all of it was processed.

        Returns True when the job finished, False when ``timeout_s`` passed
        first. Raises :class:`JobStoppedError` for a stopped job (it can no
        longer finish) and :class:`JobError` for a failed one.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._watch("waiting for the end of input"):
            while True:
                if self._ended == "finished":
                    return True
                query = self._query
                if not query.isActive:
                    if self._recover(query):
                        continue
                    self._check_usable()
                    return True
                if self._all_sources_closed():
                    self._drain()
                    self._check_usable()
                    self._finish()
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                step = 0.2 if remaining is None else max(0.001, min(0.2, remaining))
                try:
                    spark_call("awaiting termination", functools.partial(self._wait, step))
                except JobError:
                    if not self._recover(query):
                        self._check_usable()
                        raise

    def _finish(self) -> None:
        """All input ended and was processed: stop the query as finished."""
        if self._ended is None:
            self._ended = "finished"
        if self._query.isActive:
            spark_call("stopping the job", self._query.stop)
        self._refresh()

    def _watch(self, what: str) -> Any:
        from krishiv_py.runtime.watch import progress_enabled, watching

        show = progress_enabled(self._progress)
        return watching(
            on_interrupt=self._interrupted,
            message="krishiv_py: interrupted; job stopped (state: stopped). Results so far: job.results().",
            progress=self._batch_progress if show else None,
            description=f"krishiv_py {what}",
        )

    def _interrupted(self) -> None:
        with self._restart_lock:  # no restart past a bad file after this
            self._ended = "stopped"
            self._query.stop()

    def _batch_progress(self) -> tuple[int, int | None, str]:
        last = self._query.lastProgress
        if not last:
            return 0, None, ""
        return int(last["batchId"]) + 1, None, f"batch {last['batchId']}, {last.get('numInputRows', 0)} rows"

    def _check_usable(self) -> None:
        self._check_failed()
        if self._ended == "stopped" or (self._ended is None and not self._query.isActive):
            self._ended = "stopped"
            raise JobStoppedError(
                "the job was stopped (stop() or Ctrl-C) and processes nothing more; its results so far "
                "stay readable with results(). Start the pipeline again to go on (the same "
                "checkpoint_dir resumes it)"
            )

    def _wait(self, seconds: float) -> None:
        wait: Any = self._query.awaitTermination  # takes float seconds at run time
        wait(seconds)

    def stop(self) -> None:
        """Stop the job. Its results so far stay readable; it processes nothing more.

        A job whose Spark Connect server is gone has stopped already: stopping
        it does nothing. A metrics endpoint (:meth:`serve_metrics`) stops too.
        """
        self._stop_endpoint()
        with self._restart_lock:  # a restart past a bad file does not undo it
            try:
                active = self._query.isActive
            except JobError as exc:
                if exc.__cause__ is not None and server_gone(exc.__cause__):
                    self._ended = self._ended or "stopped"
                    return
                raise
            if self._ended is None:
                self._ended = "finished" if active and self._input_done else "stopped"
            if active:
                spark_call("stopping the job", self._query.stop)
        self._refresh()  # a stopped query still reports its progress
        close_writers(self._writer, self._late_writer)

    @property
    def is_active(self) -> bool:
        return bool(self._query.isActive)

    @property
    def state(self) -> JobState:
        if self._query.exception() is not None:
            return "failed"
        if self._query.isActive:
            return "running"
        return self._ended or "stopped"

    @property
    def error(self) -> str | None:
        exc = self._query.exception()
        return None if exc is None else spark_cause(exc)

    @property
    def id(self) -> str:
        return str(self._query.id)

    def _all_sources_closed(self) -> bool:
        return bool(self._senders) and all(s is not None and s.closed for s in self._senders)

    def _check_failed(self) -> None:
        query = self._query
        exc = query.exception()
        if exc is not None and not self._recover(query):
            raise self._failure(spark_cause(exc))

    # --- tracking ------------------------------------------------------------------

    def _refresh(self) -> None:
        with self._progress_lock:  # the background thread refreshes too
            recent = spark_call("reading progress", self._new_progress)
        with self._lock:
            for raw in recent:
                if raw.get("observedMetrics"):  # Spark Connect's form -> named fields
                    raw["observedMetrics"] = named_metrics(raw["observedMetrics"])
                # Spark also posts "idle" progress (no observed metrics) under the
                # id of the batch it waits to run; only executed batches count.
                if raw.get("observedMetrics"):
                    self._history.add(raw)

    def _new_progress(self) -> list[dict[str, Any]]:
        """The progress reports Spark posted since the last call, oldest first.

        Spark keeps the last ``numRecentProgressUpdates`` reports; reading
        them all (``recentProgress``) costs two Py4J calls and a JSON parse
        each, every batch. Here the JVM's list is read from its newest end
        back to the newest report already seen, so a batch costs a few calls
        however long the job has run. (Spark Connect sends them all at once.)
        """
        jsq = getattr(self._query, "_jsq", None)
        if jsq is None:
            return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in self._query.recentProgress]
        reports = jsq.recentProgress()
        fresh: list[dict[str, Any]] = []
        for i in range(len(reports) - 1, -1, -1):
            raw = json.loads(reports[i].json())
            key = (raw.get("batchId"), raw.get("timestamp"), raw.get("runId"))
            if key == self._last_progress:
                break
            fresh.append(raw)
        if fresh:
            self._last_progress = (fresh[0].get("batchId"), fresh[0].get("timestamp"), fresh[0].get("runId"))
        fresh.reverse()
        return fresh

    def _folded(self) -> _History:
        """The job's history with every progress report Spark posted so far folded in."""
        self._refresh()
        return self._history

    @property
    def watermark_ms(self) -> int | None:
        history = self._folded()
        with self._lock:
            return history.watermark_ms

    def source_watermarks(self) -> dict[str, int]:
        history = self._folded()
        with self._lock:
            return dict(history.per_source)

    def metrics(self) -> JobMetrics:
        history = self._folded()
        with self._lock:
            totals = dict(history.totals)
            batches, advances = history.batches, history.advances
            watermark, per_source = history.watermark_ms, dict(history.per_source)
        quarantined = quarantine_counts(self.quarantine.path) if self.quarantine is not None else (0, 0)
        files = quarantined_files(self.quarantine.path) if self.quarantine is not None else None
        return JobMetrics(
            input_rows=totals["rows"],
            batches=batches,
            invalid_events=totals["invalid"] if self._recipe.tracked else None,
            on_time_events=None,
            mildly_late_events=None,
            very_late_events=totals["very_late"] if self._recipe.counts_very_late else None,
            future_events=None,
            windows_emitted=_emitted(self._recipe, "windows", totals["emitted"]),
            joined_rows=_emitted(self._recipe, "joined", totals["emitted"]),
            retractions=0,
            state_evictions=0,
            arithmetic_errors=totals["arith"],
            quarantined_batches=quarantined[0],
            quarantined_rows=quarantined[1],
            quarantined_files=files,
            watermark_ms=watermark,
            watermark_advances=advances,
            source_watermarks=per_source,
            idle_sources=self.idle_sources(),
        )

    def progress(self) -> list[JobProgress]:
        history = self._folded()
        with self._lock:
            recent = list(history.recent)
        return [
            JobProgress(
                batch_id=int(b["batchId"]),
                input_rows=int(b.get("numInputRows") or 0),
                duration_ms=int((b.get("durationMs") or {}).get("triggerExecution") or 0),
                watermark_ms=w,
                raw=b,
            )
            for b, w in recent
        ]


#: How many micro-batches' progress reports a job keeps for :meth:`Job.progress` (the newest).
#: Its metrics and watermarks cover every micro-batch however long it runs: each report is folded
#: into running figures as it arrives, so a job's memory and the cost of reading them stay flat.
KEPT_PROGRESS = 200


class _History:
    """What a streaming job's micro-batches add up to, folded in one progress report at a time.

    Per tracked source, its watermark is its newest event time seen minus
    its lag (``per_source``, by stream name; ``effective``, by observe
    name, also lifted by idle markers); the job's watermark after a batch
    is the minimum of the effective ones once every source has one (Spark's
    minimum counts a source without data as "no watermark yet").
    """

    def __init__(self, tracked: Sequence[Any], shift_ms: int, kept: int = KEPT_PROGRESS) -> None:
        self._tracked = tuple(tracked)
        self._shift_ms = shift_ms
        self.totals = {"rows": 0, "invalid": 0, "emitted": 0, "arith": 0, "very_late": 0}
        self.per_source: dict[str, int] = {}
        self.effective: dict[str, int] = {}
        self.watermark_ms: int | None = None
        self.advances = 0
        self.batches = 0
        self._last_batch = -1
        #: The newest progress reports and the job's watermark after each, oldest first.
        self.recent: collections.deque[tuple[dict[str, Any], int | None]] = collections.deque(maxlen=kept)

    def add(self, raw: dict[str, Any]) -> None:
        """Fold in the progress report of an executed micro-batch (reports come in batch order)."""
        batch = int(raw["batchId"])
        if batch <= self._last_batch:  # posted again (a report read twice): already counted
            return
        self._last_batch = batch
        observed = raw.get("observedMetrics") or {}
        for key, value in _sum_observed([observed]).items():
            self.totals[key] += value
        for t in self._tracked:
            if t.rows_in_progress:  # the query's one source: Spark counted the rows it read
                self.totals["rows"] += int(raw.get("numInputRows") or 0)
            m = observed.get(t.observe_name) or {}
            max_ms = _max_event_ms(raw, t, m)
            if max_ms is not None:
                w = max_ms - t.lag_ms - self._shift_ms
                self.per_source[t.source] = max(self.per_source.get(t.source, w), w)
                self.effective[t.observe_name] = max(self.effective.get(t.observe_name, w), w)
            marker = m.get(IDLE_WM)
            if marker is not None:
                self.effective[t.observe_name] = max(
                    self.effective.get(t.observe_name, int(marker)), int(marker)
                )
        complete = bool(self.effective) and len(self.effective) == len(self._tracked)
        watermark = min(self.effective.values()) if complete else None
        if watermark is not None and (self.watermark_ms is None or watermark > self.watermark_ms):
            self.advances += 1
        self.watermark_ms = watermark
        self.batches += 1
        self.recent.append((raw, watermark))


def _max_event_ms(raw: dict[str, Any], tracked: Any, observed: dict[str, Any]) -> int | None:
    """A tracked source's maximum (shifted) event time in a micro-batch, in ms; None without data.

    From the observed metric, or from Spark's own watermark operator when the
    query has only that one (``eventTime.max`` of the progress report, a UTC
    time in ms precision).
    """
    if not tracked.max_in_progress:
        max_us = observed.get(MAX_ET_US)
        return None if max_us is None else int(max_us) // 1000
    text = (raw.get("eventTime") or {}).get("max")
    return None if text is None else utc_millis(text)


_ISO = re.compile(r"([+-]?\d{4,})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")


def utc_millis(text: str) -> int:
    """Epoch ms of a time as Spark's progress reports print it (``2024-01-01T00:00:00.000Z``).

    Years past 9999 (``+10400-...``, a far-future event time plus the
    lowering's shift) are read too, on the proleptic Gregorian calendar.

    >>> utc_millis("1970-01-01T00:00:01.250Z"), utc_millis("+10000-01-01T00:00:00.000Z")
    (1250, 253402300800000)
    """
    m = _ISO.fullmatch(text)
    if m is None:
        raise ValueError(f"not a UTC time of a progress report: {text!r}")
    year, month, day, hh, mm, ss = (int(g) for g in m.groups()[:6])
    # 400 Gregorian years are exactly 146,097 days: move the year into datetime's range.
    cycles = (year - 2000) // 400
    days = (dt.date(year - 400 * cycles, month, day) - dt.date(1970, 1, 1)).days + cycles * 146_097
    frac = (m.group(7) or "0").ljust(3, "0")[:3]
    return ((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + int(frac)


def _emitted(recipe: SparkRecipe, kind: Emits, count: int) -> int | None:
    """``count``, the rows out of the query, when they are of ``kind`` (:attr:`SparkRecipe.emits`), else None.

    Window results are ``windows_emitted``, a join's rows ``joined_rows``.
    """
    return count if recipe.emits == kind else None


def _sum_observed(observed: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Totals of input rows, invalid rows, rows out of the query and arithmetic errors over observations."""
    totals = {"rows": 0, "invalid": 0, "emitted": 0, "arith": 0, "very_late": 0}
    for obs in observed:
        for name, m in obs.items():
            totals["arith"] += sum(int(v or 0) for k, v in m.items() if is_arithmetic_metric(k))
            if counts_very_late(name):
                totals["very_late"] += int(m.get(ROWS) or 0)
            elif counts_input(name):
                totals["rows"] += int(m.get(ROWS) or 0)
                totals["invalid"] += int(m.get(INVALID) or 0)
            elif name == OUT_OBSERVE:
                totals["emitted"] += int(m.get(ROWS) or 0)
    return totals


class BoundedJob(Job):
    """A bounded pipeline run as one Spark batch job (already finished)."""

    def __init__(self, *, setup: JobSetup, observed: dict[str, dict[str, Any]]) -> None:
        setup.apply(self)
        self._observed = observed

    def process_all_available(self) -> None:
        return None

    def await_termination(self, timeout_s: float | None = None) -> bool:
        return True

    def stop(self) -> None:
        self._stop_endpoint()

    @property
    def is_active(self) -> bool:
        return False

    @property
    def state(self) -> JobState:
        return "finished"

    @property
    def watermark_ms(self) -> int | None:
        from krishiv_py.plan.watermarks import END_OF_TIME_MS

        return END_OF_TIME_MS if self._recipe.tracked else None

    def source_watermarks(self) -> dict[str, int]:
        from krishiv_py.plan.watermarks import END_OF_TIME_MS

        return {t.source: END_OF_TIME_MS for t in self._recipe.tracked}

    def metrics(self) -> JobMetrics:
        totals = _sum_observed([self._observed])
        rows, invalid = totals["rows"], totals["invalid"]
        tracked = bool(self._recipe.tracked)
        return JobMetrics(
            input_rows=rows,
            batches=1,
            invalid_events=invalid if tracked else None,
            # One step with no prior watermark: nothing can be late or in the future.
            on_time_events=rows - invalid if tracked else None,
            mildly_late_events=0 if tracked else None,
            very_late_events=0 if tracked else None,
            future_events=0 if tracked else None,
            windows_emitted=_emitted(self._recipe, "windows", totals["emitted"]),
            joined_rows=_emitted(self._recipe, "joined", totals["emitted"]),
            retractions=0,
            state_evictions=0,
            arithmetic_errors=totals["arith"],
            watermark_ms=self.watermark_ms,
            watermark_advances=1 if tracked else 0,
            source_watermarks=self.source_watermarks(),
        )

    def progress(self) -> list[JobProgress]:
        return []
