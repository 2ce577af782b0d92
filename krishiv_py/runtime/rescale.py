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
from typing import TYPE_CHECKING

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.runtime.remote import is_remote
from krishiv_py.spark_errors import spark_call

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["recorded_partitions", "rescale_spark_state", "unfinished_before_rescale"]

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def _recorded_conf(checkpoint: CheckpointLayout, name: str) -> str | None:
    """A Spark setting the checkpoint's last micro-batch recorded in the offset log (None: none)."""
    if not os.path.isdir(checkpoint.offsets):
        return None
    batches = [int(n) for n in os.listdir(checkpoint.offsets) if n.isdigit()]
    if not batches:
        return None
    try:
        with open(os.path.join(checkpoint.offsets, str(max(batches))), encoding="utf-8") as f:
            lines = f.read().splitlines()
        value = json.loads(lines[1]).get("conf", {}).get(name)
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return None if value is None else str(value)


def recorded_partitions(checkpoint: CheckpointLayout) -> int | None:
    """The shuffle partitions Spark recorded for the checkpoint's last micro-batch (None: none)."""
    value = _recorded_conf(checkpoint, SHUFFLE_PARTITIONS)
    return None if value is None else int(value)


def _holds_spark_state(checkpoint: CheckpointLayout) -> bool:
    state = checkpoint.state
    return os.path.isdir(state) and any(name.isdigit() for name in os.listdir(state))


def unfinished_before_rescale(
    checkpoint: CheckpointLayout, partitions: int, *, spark_state: bool
) -> int | None:
    """The partitions to finish a checkpoint's last micro-batch on before its Spark state moves to
    ``partitions``: the ones it was planned on, when it was planned and never committed (None: none
    to finish, or nothing to move)."""
    local = checkpoint.on_this_machine()
    if not spark_state or local is None or not _holds_spark_state(local):
        return None
    before = recorded_partitions(local)
    if before is None or before == partitions or _planned_batch(local) <= local.committed_batch():
        return None
    return before


def rescale_spark_state(spark: SparkSession, checkpoint: CheckpointLayout, partitions: int) -> int | None:
    """Repartition the Spark state of ``checkpoint`` to ``partitions`` before its query starts.

    Returns the micro-batch the move wrote, which read nothing and ran no
    sink (None: nothing moved: a new checkpoint, no Spark state, or already
    ``partitions``); the job's writers hear of it (``skipped_batch``).
    """
    local = checkpoint.on_this_machine()
    if local is None:
        return None  # not readable from here: Spark runs it on the partitions it recorded
    before = recorded_partitions(local)
    if before is None or before == partitions or not _holds_spark_state(local):
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
    provider = _recorded_conf(local, PROVIDER) or ""
    if not provider.endswith("RocksDBStateStoreProvider"):
        raise JobError(
            f"the checkpoint {checkpoint.root} holds Spark state on {before} partitions and this "
            f"session asks for {partitions}, but Spark moves only RocksDB state and this one is "
            f"kept by {provider.rsplit('.', 1)[-1] or 'the default state store'}: {keep} "
            "(a job started with durability='single-node-durable' or 'distributed-durable' keeps "
            "RocksDB state and can move)"
        )
    committed, planned = local.committed_batch(), _planned_batch(local)
    if planned > committed:
        raise JobError(
            f"the checkpoint {checkpoint.root} has micro-batch {planned} planned but not committed, "
            f"so its state cannot move from {before} to {partitions} partitions yet: {keep}, let it "
            "commit, then restart with the new number"
        )
    spark_call(
        f"moving the checkpoint's Spark state from {before} to {partitions} partitions",
        lambda: manager.repartition(local.root, partitions),
    )
    return committed + 1


def _planned_batch(checkpoint: CheckpointLayout) -> int:
    if not os.path.isdir(checkpoint.offsets):
        return -1
    return max((int(n) for n in os.listdir(checkpoint.offsets) if n.isdigit()), default=-1)
