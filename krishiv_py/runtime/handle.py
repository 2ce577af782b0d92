"""The job a user holds: what every job answers, whatever runs it.

:class:`Job` is the handle ``Stream.start()`` and ``Stream.collect()``
return. The engine protocol (:mod:`krishiv_py.runtime.engine`) and the
builder know jobs by this class alone; the jobs that run Spark queries
(:mod:`krishiv_py.runtime.job`, :mod:`krishiv_py.runtime.stateful`)
implement it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from krishiv_py._display import fmt_ms, html_card, safe, text_card
from krishiv_py.errors import NoResultsError, PlanError, SessionError
from krishiv_py.metrics import JobMetrics
from krishiv_py.runtime.metrics_endpoint import MetricsEndpoint, job_label
from krishiv_py.runtime.output import late_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from krishiv_py.advice import WatermarkAdvice
    from krishiv_py.plan.nodes import PlanNode
    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.sinks import Sink, SinkWriter

__all__ = ["Job", "JobProgress", "JobState"]

#: ``running``; ``finished`` (its input ended and everything was processed);
#: ``stopped`` (by ``stop()`` or Ctrl-C, before its input ended); ``failed``.
JobState = Literal["running", "finished", "stopped", "failed"]


@attrs.frozen(kw_only=True)
class JobProgress:
    """One micro-batch as Spark reported it (times in krishiv_py's time base)."""

    batch_id: int
    input_rows: int
    duration_ms: int
    watermark_ms: int | None
    raw: dict[str, Any] = attrs.field(repr=False)


class Job:
    """A started pipeline. Returned by ``Stream.start()``.

    A job is built complete by the runtime: the logical plan it runs, its
    recipe, the SparkSession and the sink's writer. It does not know the
    ``Stream`` that described it.
    """

    lowering: str
    #: The job's name: ``start(name=...)``'s, else its Spark query name (None: a bounded job).
    name: str | None = None
    #: The logical plan this job runs.
    plan: PlanNode
    #: The SparkSession running it.
    spark: SparkSession
    #: Spark checkpoint location of a streaming job; None for bounded jobs.
    checkpoint_dir: str | None = None
    #: The durability profile a streaming job started with (None for bounded jobs).
    durability: str | None = None
    _recipe: SparkRecipe
    _sink: Sink
    _writer: SinkWriter
    #: The writer of a late-event side output (``SideOutputLateEventHandler``), if any.
    _late_writer: SinkWriter | None = None
    _progress: bool | None = None
    _endpoint: MetricsEndpoint | None = None

    def serve_metrics(self, port: int = 0, *, host: str = "127.0.0.1") -> str:
        """Serve this job's metrics for Prometheus; returns the URL (``http://host:port/metrics``).

        ``port=0`` picks a free port. Every figure of :meth:`metrics` (a
        ``job`` label with :attr:`name`), each source's watermark, the
        watermark's lag behind the wall clock, the micro-batch durations as
        a histogram and the rows in Spark's state stores, read afresh at
        each scrape (docs/observability.md). ``host="0.0.0.0"`` serves other
        machines. The endpoint stops with :meth:`stop`; a job that finishes
        by itself keeps serving its final figures until then. Needs
        ``krishiv_py[metrics]``; a port in use is a :class:`SessionError`.
        """
        if self._endpoint is not None and self._endpoint.serving:
            raise SessionError(f"this job already serves its metrics on {self._endpoint.url}")
        self._endpoint = MetricsEndpoint(lambda: [(job_label(self, 0), self)], port=port, host=host)
        return self._endpoint.url

    def _stop_endpoint(self) -> None:
        if self._endpoint is not None:
            self._endpoint.stop()

    def process_all_available(self) -> None:
        """Block until every batch sent so far has been processed."""
        raise NotImplementedError

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait for the job to finish; True if it did within ``timeout_s``."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the job (its checkpoint stays usable)."""
        raise NotImplementedError

    def results(self) -> pa.Table:
        """All results so far (in-memory and Parquet sinks, any sink whose writer reads back)."""
        read = getattr(self._writer, "results", None)
        if read is None:
            raise NoResultsError(
                f"this job writes to {type(self._sink).__name__}, which keeps no rows for results(); "
                "use MemorySink (the default) or ParquetSink(path) to read results back"
            )
        table: pa.Table = read()
        return table

    @property
    def watermark_ms(self) -> int | None:
        """Current overall watermark, None before the first."""
        raise NotImplementedError

    def source_watermarks(self) -> dict[str, int]:
        """Watermark per source (sources without one are left out)."""
        raise NotImplementedError

    def source_lags(self) -> dict[str, int]:
        """Each watermarked source's lag in force now (ms): its fixed lag, or the one its automatic
        lag chose for the next micro-batch (``watermark(column, "auto")``, SPEC 3.4)."""
        return {t.source: t.lag_ms for t in self._recipe.tracked}

    def idle_sources(self) -> frozenset[str]:
        """The sources left out of the overall watermark now, being idle (see ``idle_timeout_ms``)."""
        return frozenset()

    def metrics(self) -> JobMetrics:
        raise NotImplementedError

    def advise_watermark(self, completeness: float = 0.999, *, caught: float = 0.9999) -> WatermarkAdvice:
        """The watermark lag and allowed lateness this job's input asks for (see ``kp.advise_watermark``).

        Reads the job's source as it arrived (a memory stream's batches, or
        its files); a Kafka or Spark DataFrame source is a ``PlanError``.
        """
        # Imported when asked: the advisor pulls in numpy and pandas, which a session need not load.
        from krishiv_py.advice import advise_plan

        return advise_plan(self.plan, completeness=completeness, caught=caught)

    def progress(self) -> list[JobProgress]:
        """The job's micro-batches, oldest first: the newest :data:`KEPT_PROGRESS` (200) of them.

        :meth:`metrics` and the watermarks count every micro-batch however
        long the job runs; only the reports listed here are bounded.
        """
        raise NotImplementedError

    def late_events(self) -> pa.Table:
        """Very late and invalid events kept by a :class:`~krishiv_py.SideOutputLateEventHandler`.

        Needs ``.with_late_event_handler(kp.SideOutputLateEventHandler())`` on
        the window (memory or Parquet sink); other jobs raise :class:`PlanError`.
        """
        if self._late_writer is None:
            raise PlanError(
                "late_events() needs .with_late_event_handler(kp.SideOutputLateEventHandler()) on the window"
            )
        read = getattr(self._late_writer, "results", None)
        if read is None:  # a sink that keeps nothing (console, foreach-batch): nothing to return
            return late_schema(self._recipe).empty_table()
        table: pa.Table = read()
        return table

    #: What draws :meth:`plot_timeline` (``krishiv_py.viz.timeline``): the engine that starts the
    #: job sets it; a job started otherwise draws nothing.
    timeline_plotter: Callable[[Job, Any], Any] | None = None

    def plot_timeline(self, *, ax: Any = None) -> Any:
        """The watermark timeline of this job: a matplotlib ``Figure`` (see :func:`krishiv_py.viz.timeline`).

        Needs matplotlib (``python -m pip install '.[viz]' (in the krishiv_py clone)``).
        """
        if self.timeline_plotter is None:
            raise SessionError(
                "this job was not started by a Session, which draws timelines; call "
                "krishiv_py.viz.timeline(job) instead"
            )
        return self.timeline_plotter(self, ax)

    @property
    def is_active(self) -> bool:
        raise NotImplementedError

    @property
    def state(self) -> JobState:
        """``running``, ``finished``, ``stopped`` (by ``stop()``/Ctrl-C) or ``failed``."""
        raise NotImplementedError

    @property
    def error(self) -> str | None:
        """Why the job failed (Spark's message), None unless :attr:`state` is ``failed``."""
        return None

    # --- displays -----------------------------------------------------------------

    def _display_rows(self) -> list[tuple[str, str]]:
        rows: list[tuple[str, str]] = [
            ("state", safe(lambda: self.state)),
            ("lowering", self.lowering),
        ]
        try:
            m: JobMetrics | None = self.metrics()
        except Exception:  # noqa: BLE001 - a display never raises
            m = None
        try:
            per_source = self.source_watermarks()
        except Exception:  # noqa: BLE001
            per_source = {}
        rows.append(("watermark", fmt_ms(m.watermark_ms if m else None, missing="none yet")))
        idle = m.idle_sources if m is not None else frozenset()
        if len(per_source) > 1 or idle:
            rows += [
                (f"  {src}", fmt_ms(wm) + (" (idle)" if src in idle else ""))
                for src, wm in sorted(per_source.items())
            ]
        if m is not None and m.source_lags:  # automatic lags: what each source chose for now
            lags = sorted(m.source_lags.items())
            text = f"{lags[0][1]:,} ms" if len(lags) == 1 else ", ".join(f"{s} {v:,} ms" for s, v in lags)
            rows.append(("lag (automatic)", text))
        if m is not None:
            rows += [
                ("batches", str(m.batches)),
                ("rows in", str(m.input_rows)),
                ("joined rows out", str(m.joined_rows))
                if m.joined_rows is not None
                else ("windows out", _opt(m.windows_emitted)),
                ("late (mild / very)", f"{_opt(m.mildly_late_events)} / {_opt(m.very_late_events)}"),
                ("invalid events", _opt(m.invalid_events)),
            ]
            if m.quarantined_batches:
                rows.append(("quarantined", f"{m.quarantined_batches} batches, {m.quarantined_rows} rows"))
            if m.quarantined_files:
                rows.append(("quarantined files", str(m.quarantined_files)))
        if self.checkpoint_dir:
            rows.append(("checkpoint", self.checkpoint_dir))
        if self.durability:
            rows.append(("durability", self.durability))
        err = safe(lambda: self.error, default="")
        if err:
            rows.append(("error", err))
        return rows

    def __repr__(self) -> str:
        return text_card(f"{type(self).__name__}", self._display_rows())

    def _repr_html_(self) -> str:
        return html_card(f"krishiv_py {type(self).__name__}", self._display_rows())

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _opt(value: int | None) -> str:
    return "n/a" if value is None else str(value)
