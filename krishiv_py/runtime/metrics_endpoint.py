"""A Prometheus endpoint: ``/metrics`` over HTTP for one job or every job of a session.

``Job.serve_metrics()`` and ``Session.serve_metrics()`` start one. Every
scrape reads the jobs afresh (:meth:`Job.metrics`, :meth:`Job.progress`):
the endpoint keeps no copy of a figure but the micro-batch duration
histogram, which it fills from the micro-batches reported since the last
scrape (a job keeps its newest 200 reports, so a scrape at least every 200
micro-batches sees them all). Built on ``prometheus_client`` (the
``metrics`` extra): its HTTP server, its text format, its metric families.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from krishiv_py.errors import KrishivError, SessionError
from krishiv_py.metrics import JobMetrics

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["BATCH_SECONDS_BUCKETS", "MetricsEndpoint", "job_label"]

#: The micro-batch duration histogram's upper bounds, seconds (``le``): a 100 ms micro-batch to
#: a two-minute one.
BATCH_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
PREFIX = "krishiv_window_"


class _Progress(Protocol):
    @property
    def batch_id(self) -> int: ...
    @property
    def duration_ms(self) -> int: ...
    @property
    def raw(self) -> dict[str, Any]: ...


class Job(Protocol):
    """What the endpoint reads of a job (:class:`krishiv_py.Job` has it all)."""

    @property
    def name(self) -> str | None: ...
    @property
    def state(self) -> str: ...
    def metrics(self) -> JobMetrics: ...
    def progress(self) -> Sequence[_Progress]: ...


def job_label(job: Job, index: int) -> str:
    """The ``job`` label: the name the job was started under, else its Spark query name, else its place."""
    return job.name or f"job-{index}"


@attrs.define
class _Histogram:
    """The micro-batches one job reported, counted into :data:`BATCH_SECONDS_BUCKETS`."""

    last_batch: int = -1
    counts: list[int] = attrs.field(factory=lambda: [0] * len(BATCH_SECONDS_BUCKETS))
    total: int = 0
    sum_s: float = 0.0

    def observe(self, batch_id: int, seconds: float) -> None:
        if batch_id <= self.last_batch:
            return
        self.last_batch = batch_id
        self.total += 1
        self.sum_s += seconds
        for i, bound in enumerate(BATCH_SECONDS_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1


class _JobsCollector:
    """A ``prometheus_client`` collector over the jobs ``jobs()`` names at each scrape."""

    def __init__(self, jobs: Callable[[], Iterable[tuple[str, Job]]], clock: Callable[[], float]) -> None:
        self._jobs = jobs
        self._clock = clock
        self._histograms: dict[int, _Histogram] = {}
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (  # the optional dependency, only when serving
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        with self._lock:  # two scrapes at once must not count a micro-batch twice
            return iter(self._collect(CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily))

    def _collect(self, counter: Any, gauge: Any, histogram: Any) -> list[Metric]:
        families: dict[str, Any] = {}

        def family(name: str, kind: str, text: str, labels: tuple[str, ...] = ("job",)) -> Any:
            if name not in families:
                families[name] = {"counter": counter, "gauge": gauge}[kind](name, text, labels=list(labels))
            return families[name]

        now_ms = self._clock() * 1000
        durations = histogram(
            "krishiv_job_batch_duration_seconds",
            "Wall time of each micro-batch the job ran (as Spark reported it).",
            labels=["job"],
        )
        for name, job in self._jobs():
            running = job.state == "running"
            family("krishiv_job_running", "gauge", "1 while the job runs, else 0.").add_metric(
                [name], int(running)
            )
            try:
                m, progress = job.metrics(), job.progress()
            except KrishivError:  # a job whose server is gone: its figures are unknown, not zero
                continue
            for field, (kind, text, value) in m.figures().items():
                family(PREFIX + field, kind, text).add_metric([name], value)
            for field, (text, values) in m.source_figures().items():
                for source, value in sorted(values.items()):
                    family(PREFIX + field, "gauge", text, ("job", "source")).add_metric([name, source], value)
            if m.watermark_ms is not None and not m.end_of_input:
                family(
                    "krishiv_job_watermark_lag_seconds",
                    "gauge",
                    "How far the overall watermark is behind the wall clock, seconds.",
                ).add_metric([name], (now_ms - m.watermark_ms) / 1000)
            rows = _state_rows(progress[-1].raw) if progress else None
            if rows is not None:
                family(
                    "krishiv_job_state_rows",
                    "gauge",
                    "Rows in the job's Spark state stores after its last micro-batch.",
                ).add_metric([name], rows)
            h = self._histograms.setdefault(id(job), _Histogram())
            for p in progress:
                h.observe(p.batch_id, p.duration_ms / 1000)
            buckets = [(str(b), c) for b, c in zip(BATCH_SECONDS_BUCKETS, h.counts, strict=True)]
            durations.add_metric([name], [*buckets, ("+Inf", h.total)], sum_value=h.sum_s)
        return [*families.values(), durations]


def _state_rows(raw: Mapping[str, Any]) -> int | None:
    operators = raw.get("stateOperators") or []
    if not operators:
        return None
    return sum(int(op.get("numRowsTotal") or 0) for op in operators)


class MetricsEndpoint:
    """``/metrics`` for the jobs ``jobs()`` returns, on ``http://host:port/metrics`` until :meth:`stop`."""

    def __init__(
        self,
        jobs: Callable[[], Iterable[tuple[str, Job]]],
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.time,
    ) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError as exc:
            raise SessionError(
                "serving metrics needs prometheus_client: "
                "python -m pip install '.[metrics]' (in the krishiv_py clone)"
            ) from exc
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise SessionError(f"port must be an integer from 0 (any free port) to 65535, not {port!r}")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_JobsCollector(jobs, clock))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise SessionError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
        address = self._server.server_address
        bound_host, bound_port = str(address[0]), int(address[1])
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        #: Where Prometheus scrapes: ``http://host:port/metrics``.
        self.url = f"http://{shown}:{bound_port}/metrics"
        self._stopped = False

    def stop(self) -> None:
        """Stop serving (again: nothing)."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def serving(self) -> bool:
        return not self._stopped
