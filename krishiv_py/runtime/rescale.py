"""Rescaling Spark's own state before a restart (SPEC 3.15): the native lowering's operators.

Spark restores a restarted query's ``spark.sql.shuffle.partitions`` from its
offset log, because its state is partitioned by it: a job restarted with 8
partitions on a checkpoint of 2 would run on 2 without a word. Before the
query starts, :func:`rescale_spark_state` compares the session's partitions
with the checkpoint's and, when they differ and the checkpoint holds Spark
state, moves it with Spark's own ``StreamingCheckpointManager.repartition``
(Spark 4.2+; RocksDB state, which the durable profiles keep). That writes
one more micro-batch into the checkpoint, which reads no input and writes
no rows; Spark's file sink log then has no entry for it, so the job tells
its writers (``skipped_batch``): the Parquet sink
writes the empty entry (:func:`krishiv_py.sinks.fill_sink_log`) and its
directory still reads. A micro-batch that was planned and never committed (the job died in
it) is finished on the partitions it was planned on first
(:func:`unfinished_before_rescale`; the launcher runs the job until it
commits). Where the move cannot be done (Spark Connect, an older Spark, a
micro-batch still uncommitted), the start is a :class:`~krishiv_py.JobError`
that says why and what to do, never a silent run on the old count.

krishiv's own operator moves its state by key group as it runs
(:mod:`krishiv_py.stateful.key_groups`); nothing here is for it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.runtime.remote import is_remote
from krishiv_py.spark_errors import spark_call

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Logs", "logs_of", "recorded_partitions", "rescale_spark_state", "unfinished_before_rescale"]

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


class Logs:
    """Spark's logs of a checkpoint (``offsets/``, ``commits/``, ``state/``), read from here:
    with this machine's file system for a local one (:meth:`local`), through Spark's Hadoop file
    system for any other URI Spark reads (``hdfs://``, ``s3a://``, ...: :meth:`hadoop`)."""

    def __init__(
        self, layout: CheckpointLayout, names: Callable[[str], list[str]], read: Callable[[str], str]
    ) -> None:
        self.layout = layout
        self.root = layout.root
        self._names = names
        self._read = read

    @classmethod
    def local(cls, checkpoint: CheckpointLayout) -> Logs:
        def names(path: str) -> list[str]:
            return os.listdir(path) if os.path.isdir(path) else []

        def read(path: str) -> str:
            with open(path, encoding="utf-8") as f:
                return f.read()

        return cls(checkpoint, names, read)

    @classmethod
    def hadoop(cls, spark: SparkSession, checkpoint: CheckpointLayout) -> Logs:
        jvm: Any = spark._jvm
        conf: Any = spark._jsc.hadoopConfiguration()

        def names(path: str) -> list[str]:
            at = jvm.org.apache.hadoop.fs.Path(path)
            fs = at.getFileSystem(conf)
            if not fs.exists(at):
                return []
            return [str(status.getPath().getName()) for status in fs.listStatus(at)]

        def read(path: str) -> str:
            at = jvm.org.apache.hadoop.fs.Path(path)
            stream = at.getFileSystem(conf).open(at)
            try:
                return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
            finally:
                stream.close()

        return cls(checkpoint, names, read)

    def batches(self, folder: str) -> list[int]:
        """The micro-batch ids with a file under ``folder`` (the layout's offsets, commits, state)."""
        return sorted(int(n) for n in self._names(folder) if n.isdigit())

    def planned_batch(self) -> int:
        return max(self.batches(self.layout.offsets), default=-1)

    def committed_batch(self) -> int:
        return max(self.batches(self.layout.commits), default=-1)

    def holds_spark_state(self) -> bool:
        return bool(self.batches(self.layout.state))

    def recorded_conf(self, name: str) -> str | None:
        """A Spark setting the last micro-batch recorded in the offset log (None: none)."""
        last = self.planned_batch()
        if last < 0:
            return None
        try:
            lines = self._read(f"{self.layout.offsets}/{last}").splitlines()
            value = json.loads(lines[1]).get("conf", {}).get(name)
        except (OSError, IndexError, ValueError, AttributeError):
            return None
        return None if value is None else str(value)

    def recorded_partitions(self) -> int | None:
        value = self.recorded_conf(SHUFFLE_PARTITIONS)
        return None if value is None else int(value)


def logs_of(spark: SparkSession, checkpoint: CheckpointLayout) -> Logs | None:
    """Where to read ``checkpoint``'s logs from here (None: over Spark Connect, a checkpoint not
    on this machine, which only the server reads)."""
    local = checkpoint.on_this_machine()
    if local is not None:
        return Logs.local(local)
    if is_remote(spark):
        return None
    return Logs.hadoop(spark, checkpoint)


def recorded_partitions(checkpoint: CheckpointLayout) -> int | None:
    """The shuffle partitions Spark recorded for the checkpoint's last micro-batch (None: none)."""
    return Logs.local(checkpoint).recorded_partitions()


def unfinished_before_rescale(
    spark: SparkSession, checkpoint: CheckpointLayout, partitions: int, *, spark_state: bool
) -> int | None:
    """The partitions to finish a checkpoint's last micro-batch on before its Spark state moves to
    ``partitions``: the ones it was planned on, when it was planned and never committed (None: none
    to finish, or nothing to move)."""
    logs = logs_of(spark, checkpoint) if spark_state else None
    if logs is None or not logs.holds_spark_state():
        return None
    before = logs.recorded_partitions()
    if before is None or before == partitions or logs.planned_batch() <= logs.committed_batch():
        return None
    return before


def rescale_spark_state(spark: SparkSession, checkpoint: CheckpointLayout, partitions: int) -> int | None:
    """Repartition the Spark state of ``checkpoint`` to ``partitions`` before its query starts.

    Returns the micro-batch the move wrote, which read nothing and ran no
    sink (None: nothing moved: a new checkpoint, no Spark state, or already
    ``partitions``); the job's writers hear of it (``skipped_batch``).
    """
    logs = logs_of(spark, checkpoint)
    if logs is None:
        warnings.warn(
            f"the checkpoint {checkpoint.root} is not on this machine and this session is a Spark "
            "Connect client, so krishiv cannot read which shuffle partitions it ran on: if they "
            f"were not {partitions}, Spark runs its state on those (restart it once from a classic "
            "session to move it)",
            stacklevel=3,
        )
        return None
    before = logs.recorded_partitions()
    if before is None or before == partitions or not logs.holds_spark_state():
        return None
    keep = f"start it with spark.sql.shuffle.partitions={before}, as it ran, or on a new checkpoint"
    if is_remote(spark):
        raise JobError(
            f"the checkpoint {checkpoint.root} holds Spark state on {before} partitions and this "
            f"session asks for {partitions}; Spark moves its state only from a classic session "
            f"(not over Spark Connect): rescale it once from a local or cluster session, or {keep}"
        )
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        raise JobError(
            f"the checkpoint {checkpoint.root} holds Spark state on {before} partitions and this "
            f"session asks for {partitions}, but this Spark ({spark.version}) cannot move it "
            f"(Spark 4.2 or later can): {keep}"
        )
    provider = logs.recorded_conf(PROVIDER) or ""
    if not provider.endswith("RocksDBStateStoreProvider"):
        raise JobError(
            f"the checkpoint {checkpoint.root} holds Spark state on {before} partitions and this "
            f"session asks for {partitions}, but Spark moves only RocksDB state and this one is "
            f"kept by {provider.rsplit('.', 1)[-1] or 'the default state store'}: {keep} "
            "(a job started with durability='single-node-durable' or 'distributed-durable' keeps "
            "RocksDB state and can move)"
        )
    committed, planned = logs.committed_batch(), logs.planned_batch()
    if planned > committed:
        raise JobError(
            f"the checkpoint {checkpoint.root} has micro-batch {planned} planned but not committed, "
            f"so its state cannot move from {before} to {partitions} partitions yet: {keep}, let it "
            "commit, then restart with the new number"
        )
    spark_call(
        f"moving the checkpoint's Spark state from {before} to {partitions} partitions",
        lambda: manager.repartition(logs.root, partitions),
    )
    return committed + 1
