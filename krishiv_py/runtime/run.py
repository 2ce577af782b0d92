"""Start streaming queries and run bounded jobs from a recipe."""

from __future__ import annotations

import contextlib
import io
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import PlanError
from krishiv_py.planner.spark import SparkRecipe
from krishiv_py.runtime.auto_watermark import AutoWatermark
from krishiv_py.runtime.build import build_dataframe
from krishiv_py.runtime.collector import BatchCollector
from krishiv_py.runtime.handoff import HANDOFF_CONF
from krishiv_py.runtime.job import BoundedJob, JobSetup, StreamingJob, close_writers, last_committed
from krishiv_py.runtime.output import deliver
from krishiv_py.runtime.quarantine import Quarantine
from krishiv_py.runtime.remote import is_remote
from krishiv_py.runtime.sources import arrow_frame
from krishiv_py.runtime.stages import Stages
from krishiv_py.runtime.stateful import StatefulJob, TickWriter, run_stateful_bounded
from krishiv_py.sinks import SinkWriter, user_code
from krishiv_py.spark_errors import spark_call, start_query
from krishiv_py.types import conform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from krishiv_py.runtime.bad_files import BadFileSource
    from krishiv_py.runtime.spool import Feed

__all__ = ["explain_spark", "run_bounded", "start_streaming"]


def start_streaming(
    setup: JobSetup,
    *,
    checkpoint: CheckpointLayout,
    senders: Sequence[Feed | None],
    durability: str | None = None,
    conf: Mapping[str, str] | None = None,
    quarantine: Quarantine | None = None,
    file_sources: Sequence[BadFileSource] = (),
) -> StreamingJob:
    """Start ``setup.recipe`` as a Structured Streaming query writing to ``setup.writer``.

    ``conf`` is its state store; with ``quarantine``, the rows of a sink or
    callback call that raises are set aside there instead of failing the job
    (:mod:`krishiv_py.runtime.quarantine`), and a file of a
    ``bad_files="quarantine"`` source in ``file_sources`` that cannot be read
    is set aside there and the query started again
    (:mod:`krishiv_py.runtime.bad_files`). Both lowerings start the same
    way: build the DataFrame, point Spark's writer at the output, start the
    query, then the job's background thread.
    """
    spark, recipe, checkpoint_dir = setup.spark, setup.recipe, checkpoint.root
    assert setup.query_name is not None, "a streaming job's writers are opened with its query name"
    # The files this process writes for the query to read: a ``file://`` checkpoint's by its path.
    local = checkpoint.on_this_machine() or checkpoint
    markers = local.idle_markers
    ticks = None
    if recipe.stateful is not None:
        ticks = TickWriter(local.ticks)
    writer = _query_writer(setup, checkpoint, markers, ticks)
    collector, handoff = None, None
    if ticks is None:
        restarts = any(s.quarantines for s in file_sources)
        writer = _native_output(writer, setup, quarantine, restarts=restarts)
    else:
        collector = _collector(setup, checkpoint, quarantine)
        writer, handoff, conf = _stateful_output(writer, collector, checkpoint, conf, remote=is_remote(spark))

    def launch() -> StreamingQuery:
        """Start the query on its checkpoint (again, after a bad file was set aside)."""
        started: StreamingQuery = _start_single_watermark(spark, writer, conf, checkpoint_dir)
        return started

    resumed_from = last_committed(checkpoint)
    query = start_query("starting the streaming query", launch)
    common: dict[str, Any] = {
        "layout": checkpoint,
        "resumed_from": resumed_from,
        "setup": setup,
        "query": query,
        "senders": senders,
        "checkpoint_dir": checkpoint_dir,
        "durability": durability,
        "markers_dir": markers,
        "quarantine": quarantine,
        "file_sources": file_sources,
        "relaunch": launch,
    }
    job: StreamingJob
    if collector is None:
        job = StreamingJob(**common)
    else:
        assert ticks is not None and recipe.stateful is not None
        buckets = recipe.stateful.operator.buckets
        job = StatefulJob(collector=collector, ticks=ticks, buckets=buckets, handoff=handoff, **common)
    job._start_background()
    return job


def _query_writer(
    setup: JobSetup, checkpoint: CheckpointLayout, markers: str, ticks: TickWriter | None
) -> Any:
    """The query's DataFrame, built from the recipe, and its ``writeStream`` on the checkpoint."""
    spark, recipe = setup.spark, setup.recipe
    assert setup.query_name is not None, "a streaming job's writers are opened with its query name"
    df = spark_call(
        "building the streaming query",
        lambda: build_dataframe(
            spark,
            recipe,
            markers_path=markers,
            ticks_path=ticks.path if ticks is not None else None,
            checkpoint=checkpoint,
        ),
    )
    return (
        df.writeStream.outputMode("append" if ticks is not None else recipe.output_mode)
        .option("checkpointLocation", checkpoint.root)
        .queryName(setup.query_name)
    )


def _stateful_output(
    writer: Any,
    collector: BatchCollector,
    checkpoint: CheckpointLayout,
    conf: Mapping[str, str] | None,
    *,
    remote: bool,
) -> tuple[Any, str | None, Mapping[str, str] | None]:
    """The stateful query's writer: each micro-batch's payloads to ``collector`` (foreachBatch);
    over Spark Connect, where foreachBatch runs on the server, to files it reads back (their
    directory, and the query's settings for them)."""
    if not remote:
        return writer.foreachBatch(collector), None, conf
    handoff = checkpoint.handoff
    return writer.format("parquet").option("path", handoff), handoff, {**HANDOFF_CONF, **dict(conf or {})}


def _collector(
    setup: JobSetup, checkpoint: CheckpointLayout, quarantine: Quarantine | None
) -> BatchCollector:
    """What takes the stateful operator's payloads of each micro-batch on the driver."""
    recipe = setup.recipe
    auto_lags = [(t.source, t.auto) for t in recipe.tracked if t.auto is not None]
    if auto_lags and is_remote(setup.spark):
        raise PlanError(
            "an automatic lag does not run over Spark Connect yet (the driver records each "
            "micro-batch's lag before Spark commits it, and foreachBatch runs on the server): "
            "give the watermark a fixed lag"
        )
    return BatchCollector(
        recipe,
        setup.writer,
        late_writer=setup.late_writer,
        quarantine=quarantine,
        spark=setup.spark,
        auto=AutoWatermark(checkpoint, auto_lags) if auto_lags else None,
        hot_keys_file=_hot_keys_file(checkpoint),
    )


def new_query_name() -> str:
    """A fresh, unique Spark query name (a memory sink's table is named after it)."""
    return f"krishiv_{uuid.uuid4().hex[:12]}"


def _native_output(
    writer: Any, setup: JobSetup, quarantine: Quarantine | None, *, restarts: bool = False
) -> Any:
    """Spark writes the rows itself where the sink can take them so, else ``foreachBatch`` hands them over.

    ``restarts``: the job may start its query again on its checkpoint (to go
    past a bad source file), which a sink's Spark stream must then allow.
    """
    spark_stream = getattr(setup.writer, "spark_stream", None)
    if restarts and not getattr(setup.writer, "stream_restarts", True):
        spark_stream = None
    if spark_stream is not None and not setup.recipe.stages:
        return spark_stream(writer)
    return writer.foreachBatch(_arrow_batches(setup.writer, setup.recipe, quarantine))


SINGLE_WATERMARK_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"

#: Spark's checkpoint file manager on the plain FileSystem API. Its default,
#: the FileContext one, checks every renamed file's link status, which the
#: local file system of the Hadoop client Spark ships answers by starting a
#: ``readlink`` process: several process starts per micro-batch (offset log,
#: commit log, file-source log, each state-store file). The FileSystem API
#: renames a local file with one ``rename(2)``, just as atomic on a local disk.
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
FILESYSTEM_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


#: How many micro-batches a query's checkpoint keeps: its offset and commit logs and its state
#: store versions. Spark keeps 100; recovery needs only the last, and with state rewritten every
#: micro-batch, 100 versions of it made a checkpoint follow the history of the state's size
#: rather than its size now (docs/durability.md "What a checkpoint keeps").
RETAINED_BATCHES_CONF = "spark.sql.streaming.minBatchesToRetain"
RETAINED_BATCHES = 10
#: How often the state store's background maintenance runs: it uploads RocksDB's newest
#: snapshot and only then deletes the versions before the snapshot before last, so the
#: checkpoint holds the changelogs of about two intervals. Spark's default is 60 s.
MAINTENANCE_CONF = "spark.sql.streaming.stateStore.maintenanceInterval"
MAINTENANCE_INTERVAL = "15s"
#: What every streaming query starts with unless its session sets the setting itself
#: (``spark_conf=`` of the session, or ``spark.conf.set``).
QUERY_DEFAULTS = {RETAINED_BATCHES_CONF: str(RETAINED_BATCHES), MAINTENANCE_CONF: MAINTENANCE_INTERVAL}


def local_checkpoint_conf(checkpoint_dir: str | None) -> dict[str, str]:
    """Settings for a query whose checkpoint is on a local disk (none for other file systems)."""
    if checkpoint_dir is None:
        return {}
    scheme = checkpoint_dir.split(":", 1)[0] if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", checkpoint_dir) else ""
    if scheme not in ("", "file"):
        return {}
    return {CHECKPOINT_MANAGER_CONF: FILESYSTEM_CHECKPOINT_MANAGER}


def _start_single_watermark(
    spark: SparkSession,
    writer: Any,
    conf: Mapping[str, str] | None = None,
    checkpoint_dir: str | None = None,
) -> Any:
    """Start ``writer`` with Spark's single-watermark mode and ``conf``, then restore the session settings.

    By default (since Spark 3.4) a stateful operator drops late rows by the
    watermark of the batch *before* the one it evicts state with, so an
    event behind the watermark can still join a window that closes in the
    same micro-batch (it happens when micro-batches follow each other with no
    empty batch in between). Our plans have one stateful operator, so the
    single-watermark mode, where both use the current watermark, is exactly
    the specified semantics. ``conf`` is the job's durability profile (its
    state store); a checkpoint on a local disk gets
    :func:`local_checkpoint_conf`. A query reads these settings when it
    starts (its own copy of the session), and records the SQL ones in its
    checkpoint. Its sources, though, are created on the query's thread after
    ``start()`` returns, from this session: the settings stay until they
    exist (:func:`_await_sources`), so each file source's log of the files it
    read is written through the same checkpoint manager as the query's logs.
    :data:`QUERY_DEFAULTS` apply where the session has no setting of its own.
    """
    settings = {SINGLE_WATERMARK_CONF: "false", **local_checkpoint_conf(checkpoint_dir), **dict(conf or {})}
    with _SETTINGS_LOCK:  # a job's background restart may start a query while another job starts
        for key, value in QUERY_DEFAULTS.items():
            if spark.conf.get(key, None) is None:
                settings.setdefault(key, value)
        previous = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            query = writer.start()
            _await_sources(query)
            return query
        finally:
            for key, old in previous.items():
                if old is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, old)


_SETTINGS_LOCK = threading.RLock()


#: What a query reports before it has created its sources (Spark's ``StreamExecution``).
_INITIALIZING = ("Initializing StreamExecution", "Initializing sources")


def _await_sources(query: Any, timeout_s: float = 60.0) -> None:
    """Return once ``query`` has created its sources (or stopped, or after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.isActive:
        if query.status.get("message") not in _INITIALIZING:
            return
        time.sleep(0.005)


def _arrow_batches(writer: SinkWriter, recipe: SparkRecipe, quarantine: Quarantine | None) -> Any:
    """A ``foreachBatch`` function handing each micro-batch to ``writer`` as a ``pyarrow.Table``."""
    # The stages that rank each micro-batch (top_n) and what follows them, in the batch's
    # own session; only what the function needs: over Connect it is pickled.
    stages = Stages(recipe)

    def call(batch: DataFrame, batch_id: int) -> None:
        deliver(writer, stages.run_frame(batch).table, batch_id, quarantine)

    return call


def run_bounded(setup: JobSetup, *, metrics: bool = True) -> BoundedJob:
    """Run ``setup.recipe`` as one batch job, its rows to ``setup.writer``.

    ``metrics=False`` (``collect()``, which returns only the rows) skips
    computing the job's metrics. The job is over when this returns (or
    raises): its writers are closed (their optional ``close()``); a close
    that fails after a failed run does not hide the run's error.
    """
    writers = (setup.writer, setup.late_writer)
    try:
        job = _run_bounded(setup, metrics=metrics)
    except BaseException:
        with contextlib.suppress(Exception):
            close_writers(*writers)
        raise
    spark_call("closing the sink's writer", lambda: close_writers(*writers))
    return job


def _run_bounded(setup: JobSetup, *, metrics: bool) -> BoundedJob:
    spark, recipe, writer = setup.spark, setup.recipe, setup.writer
    if recipe.stateful is not None:
        return run_stateful_bounded(setup)
    observations: dict[str, Any] = {}
    df = spark_call(
        "building the batch job", lambda: build_dataframe(spark, recipe, observations, observe=metrics)
    )
    spark_batch = getattr(writer, "spark_batch", None)
    if spark_batch is not None and not recipe.stages:
        spark_batch(df)
    else:
        table = conform(spark_call("running the batch job", df.toArrow), recipe.output_schema)
        if recipe.stages:  # a bounded recipe's: top_n ranked on the driver, the columns kept
            table = Stages(recipe, spark=spark).run(table).table
            if spark_batch is not None:
                ranked = arrow_frame(spark, table, schema=df.schema)
                spark_call("writing the results", lambda: spark_batch(ranked))
                return BoundedJob(setup=setup, observed={k: _observed(o) for k, o in observations.items()})
        caller = user_code(writer)
        spark_call(f"calling {caller}" if caller else "writing the results", lambda: writer.write(table, 0))
    observed = {k: _observed(o) for k, o in observations.items()}
    return BoundedJob(setup=setup, observed=observed)


def explain_spark(spark: SparkSession, recipe: SparkRecipe, *, scratch: str | None = None) -> str:
    """Spark's own extended plan for ``recipe`` (parsed, analyzed, optimized, physical).

    ``scratch``: where the directories the plan would read are made (see
    :func:`~krishiv_py.runtime.build.build_dataframe`).
    """
    df = spark_call("building the plan", lambda: build_dataframe(spark, recipe, scratch=scratch))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        spark_call("explaining the plan", lambda: df.explain(extended=True))
    return buf.getvalue().rstrip()


def _observed(observation: Any) -> dict[str, Any]:
    return dict(spark_call("reading metrics", lambda: observation.get))


def _hot_keys_file(checkpoint: CheckpointLayout) -> str | None:
    """Where the job writes down its busiest keys (a path here or a URI)."""
    return checkpoint.hot_keys_file
