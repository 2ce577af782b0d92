"""Start streaming queries and run bounded jobs from a recipe."""

from __future__ import annotations

import contextlib
import io
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from krishiv_py.planner.spark import SparkRecipe
from krishiv_py.runtime.build import build_dataframe
from krishiv_py.runtime.job import BoundedJob, StreamingJob, read_parquet_results
from krishiv_py.runtime.quarantine import Quarantine, guarded
from krishiv_py.runtime.results import conform
from krishiv_py.runtime.spark_errors import spark_call
from krishiv_py.sinks import ConsoleSink, ForeachBatchSink, MemorySink, ParquetSink, Sink

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.sender import Sender

__all__ = ["explain_spark", "run_bounded", "start_streaming"]


def start_streaming(
    spark: SparkSession,
    recipe: SparkRecipe,
    *,
    sink: Sink,
    checkpoint_dir: str,
    senders: Sequence[Sender | None],
    conf: Mapping[str, str] | None = None,
    quarantine: Quarantine | None = None,
) -> StreamingJob:
    """Start ``recipe`` as a Structured Streaming query writing to ``sink``.

    ``conf`` is its state store; with ``quarantine``, the rows of a sink or
    callback call that raises are set aside there instead of failing the job
    (:mod:`krishiv_py.runtime.quarantine`).
    """
    from krishiv_py.runtime.remote import is_remote

    if recipe.stateful is not None:
        return _start_stateful(
            spark,
            recipe,
            sink=sink,
            checkpoint_dir=checkpoint_dir,
            senders=senders,
            conf=conf,
            quarantine=quarantine,
        )
    markers = os.path.join(checkpoint_dir, "krishiv-idle")
    df = spark_call(
        "building the streaming query", lambda: build_dataframe(spark, recipe, markers_path=markers)
    )
    name = f"krishiv_{uuid.uuid4().hex[:12]}"
    writer = df.writeStream.outputMode(recipe.output_mode).option("checkpointLocation", checkpoint_dir)
    writer = writer.queryName(name)
    memory_table = None
    if isinstance(sink, MemorySink):
        if _has_offsets(checkpoint_dir):
            from krishiv_py.errors import JobError

            raise JobError(
                f"this pipeline's checkpoint ({checkpoint_dir}) holds a run already, and Spark's in-memory "
                "sink cannot resume one; resume with ParquetSink(path) (exactly once across restarts) "
                "or a ForeachBatchSink, or start without that name/checkpoint_dir for a fresh run"
            )
        writer = writer.format("memory")
        memory_table = name
    elif isinstance(sink, ParquetSink):
        writer = writer.format("parquet").option("path", os.path.abspath(sink.path))
    elif isinstance(sink, ConsoleSink):
        if is_remote(spark):
            from krishiv_py.errors import JobError

            raise JobError(
                "ConsoleSink prints from Spark's driver, which over Spark Connect is the server, so "
                "nothing would show here; use MemorySink and job.results(), or ParquetSink"
            )
        # Printed from Python, not by Spark's console sink: the JVM's output goes to the log.
        writer = writer.foreachBatch(_console(sink, recipe, quarantine))
    else:
        writer = writer.foreachBatch(_foreach(sink, recipe, quarantine))
    query = spark_call(
        "starting the streaming query", lambda: _start_single_watermark(spark, writer, conf, checkpoint_dir)
    )
    job = StreamingJob(
        spark=spark,
        query=query,
        recipe=recipe,
        sink=sink,
        memory_table=memory_table,
        senders=senders,
        markers_dir=markers,
        quarantine=quarantine,
    )
    job._start_background()
    return job


def _start_stateful(
    spark: SparkSession,
    recipe: SparkRecipe,
    *,
    sink: Sink,
    checkpoint_dir: str,
    senders: Sequence[Sender | None],
    conf: Mapping[str, str] | None = None,
    quarantine: Quarantine | None = None,
) -> StreamingJob:
    """Start krishiv's stateful operator; its output reaches the sink through ``foreachBatch``."""
    from krishiv_py.runtime.remote import is_remote
    from krishiv_py.runtime.stateful import HANDOFF_CONF, BatchCollector, StatefulJob, TickWriter

    assert recipe.stateful is not None
    ticks = TickWriter(os.path.join(checkpoint_dir, "krishiv-ticks"))
    markers = os.path.join(checkpoint_dir, "krishiv-idle")
    df = spark_call(
        "building the streaming query",
        lambda: build_dataframe(spark, recipe, ticks_path=ticks.path, markers_path=markers),
    )
    collector = BatchCollector(recipe, sink, quarantine=quarantine)
    # Over Spark Connect foreachBatch runs on the server: the payloads come back as files.
    handoff = os.path.join(checkpoint_dir, "krishiv-handoff") if is_remote(spark) else None
    writer = (
        df.writeStream.outputMode("append")
        .option("checkpointLocation", checkpoint_dir)
        .queryName(f"krishiv_{uuid.uuid4().hex[:12]}")
    )
    if handoff is None:
        writer = writer.foreachBatch(collector)
    else:
        writer = writer.format("parquet").option("path", handoff)
        conf = {**HANDOFF_CONF, **dict(conf or {})}
    query = spark_call(
        "starting the streaming query", lambda: _start_single_watermark(spark, writer, conf, checkpoint_dir)
    )
    job = StatefulJob(
        collector=collector,
        ticks=ticks,
        buckets=recipe.stateful.operator.buckets,
        handoff=handoff,
        spark=spark,
        query=query,
        recipe=recipe,
        sink=sink,
        memory_table=None,
        senders=senders,
        markers_dir=markers,
        quarantine=quarantine,
    )
    job._start_background()
    return job


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
    checkpoint.
    """
    settings = {SINGLE_WATERMARK_CONF: "false", **local_checkpoint_conf(checkpoint_dir), **dict(conf or {})}
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return writer.start()
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _has_offsets(checkpoint_dir: str) -> bool:
    offsets = os.path.join(checkpoint_dir, "offsets")
    return os.path.isdir(offsets) and any(name.isdigit() for name in os.listdir(offsets))


def _foreach(sink: ForeachBatchSink, recipe: SparkRecipe, quarantine: Quarantine | None) -> Any:
    schema = recipe.output_schema  # only what the function needs: over Connect it is pickled

    def call(batch: DataFrame, batch_id: int) -> None:
        table = conform(batch.toArrow(), schema)
        guarded(
            quarantine,
            "sink",
            batch_id,
            table,
            lambda: sink.fn(table, batch_id),
            caller="the ForeachBatchSink function",
        )

    return call


def _console(sink: ConsoleSink, recipe: SparkRecipe, quarantine: Quarantine | None) -> Any:
    schema = recipe.output_schema

    def call(batch: DataFrame, batch_id: int) -> None:
        table = conform(batch.toArrow(), schema)
        guarded(quarantine, "sink", batch_id, table, lambda: sink.show(table, batch_id), caller="ConsoleSink")

    return call


def run_bounded(spark: SparkSession, recipe: SparkRecipe, *, sink: Sink, metrics: bool = True) -> BoundedJob:
    """Run ``recipe`` as one batch job; results are kept for memory/Parquet sinks.

    ``metrics=False`` (``collect()``, which returns only the rows) skips
    computing the job's metrics.
    """
    if recipe.stateful is not None:
        from krishiv_py.runtime.stateful import run_stateful_bounded

        job: BoundedJob = run_stateful_bounded(spark, recipe, sink=sink)
        return job
    observations: dict[str, Any] = {}
    df = spark_call(
        "building the batch job", lambda: build_dataframe(spark, recipe, observations, observe=metrics)
    )
    table: pa.Table | None = None
    if isinstance(sink, MemorySink):
        table = conform(spark_call("running the batch job", df.toArrow), recipe.output_schema)
    elif isinstance(sink, ParquetSink):
        spark_call("writing Parquet", lambda: df.write.mode("append").parquet(os.path.abspath(sink.path)))
        table = conform(
            read_parquet_results(spark, os.path.abspath(sink.path), recipe.output_schema),
            recipe.output_schema,
        )
    elif isinstance(sink, ConsoleSink):
        result = conform(spark_call("running the batch job", df.toArrow), recipe.output_schema)
        sink.show(result, None)
    else:
        result = conform(spark_call("running the batch job", df.toArrow), recipe.output_schema)
        spark_call("calling the foreach-batch function", lambda: sink.fn(result, 0))
    observed = {k: _observed(o) for k, o in observations.items()}
    return BoundedJob(recipe=recipe, table=table, sink=sink, observed=observed)


def explain_spark(spark: SparkSession, recipe: SparkRecipe) -> str:
    """Spark's own extended plan for ``recipe`` (parsed, analyzed, optimized, physical)."""
    df = spark_call("building the plan", lambda: build_dataframe(spark, recipe))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        spark_call("explaining the plan", lambda: df.explain(extended=True))
    return buf.getvalue().rstrip()


def _observed(observation: Any) -> dict[str, Any]:
    return dict(spark_call("reading metrics", lambda: observation.get))
