"""The engine of Spark: where a session's streams run.

:class:`SparkEngine` owns one SparkSession and everything a job of it
needs that is not in its plan: the state directory (memory streams under
``sources/``, checkpoints under ``checkpoints/``), the durability profile,
the feeds of the memory streams, the jobs it started, and stopping them
all. It implements :class:`~krishiv_py.runtime.engine.Engine`; a
:class:`~krishiv_py.Session` hands its streams' calls to it, and
:func:`krishiv_py.runtime.launch.launch` makes the batch-or-streaming
choice for every start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from krishiv_py._display import safe
from krishiv_py.errors import SessionError
from krishiv_py.plan import nodes as n
from krishiv_py.runtime import launch
from krishiv_py.runtime.build import build_dataframe
from krishiv_py.runtime.durability import DurabilityProfile, is_uri, profile
from krishiv_py.runtime.metrics_endpoint import MetricsEndpoint, job_label
from krishiv_py.runtime.remote import is_remote
from krishiv_py.runtime.run import explain_spark
from krishiv_py.spark_errors import spark_call

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.engine import StartOptions
    from krishiv_py.runtime.handle import Job
    from krishiv_py.runtime.spool import Feed
    from krishiv_py.sinks import Sink

__all__ = ["SparkEngine"]


class SparkEngine:
    """Runs recipes on one SparkSession, keeping its jobs' files under one state directory.

    ``state_dir`` None: a temporary directory, removed by :meth:`stop`.
    ``on_stop`` runs last in :meth:`stop` (a remote session restores
    pyspark's Connect-mode switch there); ``register`` makes a plan
    readable by name (``Stream.register``: the session's SQL catalog).
    """

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        owns_spark: bool,
        state_dir: str | None,
        profile: DurabilityProfile,
        progress: bool | None = None,
        on_stop: Callable[[], None] | None = None,
        register: Callable[[str, n.PlanNode], None] | None = None,
        timeline: Callable[[Job, Any], Any] | None = None,
    ) -> None:
        self._spark = spark
        #: What draws a job's timeline (the session's ``krishiv_py.viz.timeline``), handed to each job.
        self._timeline = timeline
        self._register = register
        self._owns_spark = owns_spark
        self.profile = profile
        self.progress = progress
        self._on_stop = on_stop
        #: True when :attr:`state_dir` is a temporary directory of this engine's.
        self.temporary = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="krishiv-")
        if not is_uri(self.state_dir):
            os.makedirs(self.state_dir, exist_ok=True)
        self._feeds: dict[str, Feed] = {}
        #: The streaming jobs started, oldest first (stopped with the engine).
        self.jobs: list[Job] = []
        self._endpoint: MetricsEndpoint | None = None
        #: Where DataFrames built outside a job (to_spark()) keep the directories they read.
        self._scratch: str | None = None

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise SessionError("this session was stopped; create a new one")
        return self._spark

    @property
    def stopped(self) -> bool:
        return self._spark is None

    @property
    def is_remote(self) -> bool:
        return self._spark is not None and is_remote(self._spark)

    @property
    def sources_dir(self) -> str:
        """Where memory streams keep their batches: ``<state_dir>/sources/<name>``."""
        return os.path.join(self.state_dir, "sources")

    def add_feed(self, path: str, feed: Feed) -> None:
        """Jobs reading the memory source at ``path`` read ``feed`` (its sender)."""
        self._feeds[path] = feed

    def feed(self, path: str) -> Feed | None:
        return self._feeds.get(path)

    def checkpoint_dir(self, name: str | None = None) -> str:
        """Where a job's checkpoint goes: ``checkpoints/<name>`` (a fresh one when no name)."""
        return os.path.join(self.state_dir, "checkpoints", name or uuid.uuid4().hex)

    def serve_metrics(self, port: int = 0, *, host: str = "127.0.0.1") -> str:
        """Serve every streaming job's metrics (those started so far and later); the URL.

        A name started again (a job resumed under the same name) is labelled
        by its newest job. Stopped with the engine.
        """
        if self._endpoint is not None and self._endpoint.serving:
            raise SessionError(f"this session already serves its jobs' metrics on {self._endpoint.url}")

        def jobs() -> list[tuple[str, Job]]:
            newest = {job_label(job, i): job for i, job in enumerate(self.jobs)}
            return list(newest.items())

        self._endpoint = MetricsEndpoint(jobs, port=port, host=host)
        return self._endpoint.url

    def cancel_spark_jobs(self) -> None:
        """Cancel the Spark jobs running now (Ctrl-C during a bounded run)."""
        if self.is_remote:
            self.spark.interruptAll()
        else:
            self.spark.sparkContext.cancelAllJobs()

    # --- the Engine protocol ---------------------------------------------------------

    def run_bounded(self, plan: n.PlanNode, recipe: SparkRecipe, sink: Sink, *, metrics: bool = True) -> Job:
        job = launch.run_bounded(
            self.spark,
            plan,
            recipe,
            sink,
            metrics=metrics,
            progress=self.progress,
            on_interrupt=self.cancel_spark_jobs,
        )
        job.timeline_plotter = self._timeline
        return job

    def start_job(self, plan: n.PlanNode, recipe: SparkRecipe, options: StartOptions) -> Job:
        job = launch.launch(
            self.spark,
            plan,
            recipe,
            options,
            checkpoint_dir=options.checkpoint_dir or self.checkpoint_dir(options.name),
            profile=self.profile if options.durability is None else profile(options.durability),
            senders=[_feed(self, s) for s in n.sources_of(plan)],
            progress=self.progress,
            on_interrupt=self.cancel_spark_jobs,
        )
        job.timeline_plotter = self._timeline
        if job.checkpoint_dir is not None:
            self.jobs.append(job)
        return job

    def spark_dataframe(self, recipe: SparkRecipe) -> DataFrame:
        """The DataFrame of ``recipe``; the directories it reads (ticks, idle markers) go at :meth:`stop`."""
        spark = self.spark
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="krishiv-frames-")
        scratch = self._scratch
        return spark_call("building the DataFrame", lambda: build_dataframe(spark, recipe, scratch=scratch))

    def explain_spark(self, recipe: SparkRecipe) -> str:
        """Spark's plan of ``recipe``; the directories the plan would read go once it is explained."""
        with tempfile.TemporaryDirectory(prefix="krishiv-explain-") as scratch:
            return explain_spark(self.spark, recipe, scratch=scratch)

    def durability_text(self, *, bounded: bool) -> str:
        if bounded:
            return "a bounded run: one Spark batch job, no checkpoint"
        where = os.path.join(self.state_dir, "checkpoints", "<job name or a fresh id>")
        return f"{self.profile.describe()}; checkpoint: {where}"

    def register_stream(self, name: str, plan: n.PlanNode) -> None:
        if self._register is None:
            raise SessionError("this engine has no catalog to register streams in")
        self._register(name, plan)

    def display_rows(self, front: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The rows of a session's card: its state, ``front`` (the session's own), Spark, state and jobs."""
        running = [j for j in self.jobs if getattr(j, "state", None) == "running"]
        return [
            ("state", "stopped" if self.stopped else "active"),
            *front,
            ("spark", "—" if self._spark is None else safe(lambda: self.spark.version)),
            ("state dir", self.state_dir + (" (temporary)" if self.temporary else "")),
            ("jobs", f"{len(self.jobs)} started, {len(running)} running"),
        ]

    # --- stopping ---------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the running jobs, Spark (when this engine started it) and remove its temporary directories.

        They are a temporary ``state_dir`` and the directories that the
        DataFrames of :meth:`spark_dataframe` read.
        """
        if self._endpoint is not None:
            self._endpoint.stop()
        spark, self._spark = self._spark, None
        if spark is None:
            return
        for job in self.jobs:
            with contextlib.suppress(Exception):  # best effort while shutting down
                job.stop()
        if self._owns_spark:
            spark.stop()
        if self._on_stop is not None:
            self._on_stop()
        if self.temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _feed(engine: SparkEngine, source: n.SourceNode) -> Feed | None:
    return engine.feed(source.path) if isinstance(source, n.MemorySource) else None
