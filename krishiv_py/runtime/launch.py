"""Launching jobs: the checkpoint policy and the steps from a recipe to a running ``Job``.

The engine (:class:`~krishiv_py.runtime.spark_engine.SparkEngine`) calls these with everything they
need as plain values (the SparkSession, the durability profile, the
checkpoint location, the senders of the plan's memory streams), so the
runtime knows nothing of the builder or the session.

Checkpoint policy
    A checkpoint holds state laid out for one plan and lowering. The first
    start records the plan's identity in ``krishiv-plan.txt`` inside the
    checkpoint; a later start with another plan is refused with a
    :class:`~krishiv_py.JobError` naming the first line that differs, and
    the checkpoint is left as it is (:func:`check_plan`).

One running job per checkpoint
    Two queries on one checkpoint write over each other's offsets and
    state. A start whose checkpoint a job of this process is still running
    on is refused with a :class:`~krishiv_py.JobError` that names the job and
    says to stop it first (:func:`claim_checkpoint`); Spark itself would
    only say that the query cannot recover from that checkpoint. Jobs of two
    processes that share a ``state_dir`` are not told apart, as in Spark.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

import krishiv_py.files as files
from krishiv_py.checkpoint import CheckpointLayout, read_json, write_json
from krishiv_py.errors import JobError, PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.stateful import BUCKETS, with_buckets, with_carrier, with_key_groups
from krishiv_py.runtime import run
from krishiv_py.runtime.bad_files import BadFileSource
from krishiv_py.runtime.durability import DurabilityProfile, is_uri
from krishiv_py.runtime.engine import StartOptions
from krishiv_py.runtime.handle import Job
from krishiv_py.runtime.job import BoundedJob, JobSetup, StreamingJob
from krishiv_py.runtime.output import open_writers
from krishiv_py.runtime.quarantine import Quarantine
from krishiv_py.runtime.remote import is_remote
from krishiv_py.runtime.rescale import rescale_spark_state, unfinished_before_rescale
from krishiv_py.runtime.spool import readers as spool_readers
from krishiv_py.runtime.watch import progress_enabled, stage_progress, watching
from krishiv_py.sinks import Sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.spool import Feed

__all__ = [
    "CARRIER_CONF",
    "PLAN_FILE",
    "check_plan",
    "claim_checkpoint",
    "is_batch",
    "launch",
    "refuse_quarantine_for_batch",
    "run_bounded",
    "start_streaming_job",
]

#: The file names of the plan and bucket records in a checkpoint (:class:`CheckpointLayout`).
PLAN_FILE = os.path.basename(CheckpointLayout("").plan_file)
BUCKETS_FILE = os.path.basename(CheckpointLayout("").buckets_file)


#: The job each checkpoint of this process was last started with (by its real path or URI).
_RUNNING: dict[str, weakref.ref[StreamingJob]] = {}
_RUNNING_LOCK = threading.Lock()


def _checkpoint_key(checkpoint_dir: str) -> str:
    return checkpoint_dir.rstrip("/") if is_uri(checkpoint_dir) else os.path.realpath(checkpoint_dir)


def claim_checkpoint(checkpoint_dir: str, name: str | None) -> None:
    """Refuse a start on a checkpoint that a job of this process still runs on: a :class:`JobError`.

    The message names the job and what to do; it never suggests deleting
    the checkpoint, which holds the running job's progress.
    """
    with _RUNNING_LOCK:
        ref = _RUNNING.get(_checkpoint_key(checkpoint_dir))
        running = ref() if ref is not None else None
    if running is None:
        return
    if not _still_running(running):
        running._retire()  # it must not start again past a bad file on the new job's checkpoint
        return
    called = f"job {name!r}" if name is not None else "a job"
    raise JobError(
        f"{called} is already running on the checkpoint {checkpoint_dir} in this process "
        f"(query {running.id}); two jobs on one checkpoint would overwrite each other's progress. "
        "Stop the running one first (job.stop()) and start this one again to resume where it "
        "stopped, or give this one another name / checkpoint_dir to start it fresh"
    )


def _still_running(job: StreamingJob) -> bool:
    """Whether ``job``'s query still runs; a job whose session or server is gone does not."""
    try:
        return bool(job.is_active)
    except Exception:  # noqa: BLE001 - its Spark (or Connect server) is gone: nothing runs there
        return False


def _record_running(checkpoint_dir: str, job: StreamingJob) -> None:
    with _RUNNING_LOCK:
        _RUNNING[_checkpoint_key(checkpoint_dir)] = weakref.ref(job)


def is_batch(recipe: SparkRecipe) -> bool:
    """True when ``recipe`` runs as one Spark batch job (bounded input)."""
    return recipe.lowering == "bounded" or (recipe.stateful is not None and not recipe.stateful.streaming)


def run_bounded(
    spark: SparkSession,
    plan: n.PlanNode,
    recipe: SparkRecipe,
    sink: Sink,
    *,
    metrics: bool = True,
    progress: bool | None = None,
    on_interrupt: Callable[[], None],
) -> BoundedJob:
    """Run a bounded recipe; Ctrl-C cancels its Spark jobs (``on_interrupt``), long runs show progress."""
    writer, late_writer = open_writers(sink, recipe, spark=spark)
    setup = JobSetup(
        plan=plan,
        recipe=recipe,
        spark=spark,
        sink=sink,
        writer=writer,
        late_writer=late_writer,
        progress=progress,
    )
    show = progress_enabled(progress) and not is_remote(spark)
    with watching(
        on_interrupt=on_interrupt,
        message="krishiv_py: interrupted; the Spark jobs were cancelled.",
        progress=stage_progress(spark) if show else None,
        description="krishiv_py running",
    ):
        return run.run_bounded(setup, metrics=metrics)


def launch(
    spark: SparkSession,
    plan: n.PlanNode,
    recipe: SparkRecipe,
    options: StartOptions,
    *,
    checkpoint_dir: str,
    profile: DurabilityProfile,
    senders: Sequence[Feed | None],
    progress: bool | None,
    on_interrupt: Callable[[], None],
) -> Job:
    """Start ``recipe``: a streaming query, or for bounded input one batch job, returned finished.

    The one place that chooses between the two (:func:`is_batch`); the
    arguments are as for :func:`start_streaming_job` and :func:`run_bounded`.
    """
    if is_batch(recipe):
        refuse_quarantine_for_batch(options)
        return run_bounded(spark, plan, recipe, options.sink, progress=progress, on_interrupt=on_interrupt)
    return start_streaming_job(
        spark,
        plan,
        recipe,
        options,
        checkpoint_dir=checkpoint_dir,
        profile=profile,
        senders=senders,
        progress=progress,
    )


def start_streaming_job(
    spark: SparkSession,
    plan: n.PlanNode,
    recipe: SparkRecipe,
    options: StartOptions,
    *,
    checkpoint_dir: str,
    profile: DurabilityProfile,
    senders: Sequence[Feed | None],
    progress: bool | None = None,
) -> Job:
    """Start a streaming recipe under ``checkpoint_dir`` with the ``profile``'s state store.

    ``senders`` are the plan's sources' senders, in :func:`~krishiv_py.plan.nodes.sources_of`
    order (None for a source that is not a memory stream): the job reads
    them, and retention keeps what it has not committed.

    A checkpoint whose Spark state must move to other shuffle partitions
    but whose last micro-batch was planned and never committed (the job
    died in it) first finishes that micro-batch where it was planned: the
    job runs on the partitions it had until what is available is
    committed, stops, and then starts on the new ones (:func:`rescale_spark_state`).
    """
    claim_checkpoint(checkpoint_dir, options.name)
    layout = CheckpointLayout(checkpoint_dir)
    with contextlib.suppress(OSError):  # (a store this process cannot open: Spark's refusal stands)
        layout.drop_unfinished_first_entries()  # a job killed in Spark's first write of its logs
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 0)
    spark_state = recipe.stateful is None or recipe.stateful.carrier == "state-store"
    before = unfinished_before_rescale(spark, layout, partitions, spark_state=spark_state)
    if before is not None:  # the micro-batch the job died in, where it was planned
        with _shuffle_partitions(spark, before, partitions):
            first = start_streaming_job(
                spark,
                plan,
                recipe,
                options,
                checkpoint_dir=checkpoint_dir,
                profile=profile,
                senders=senders,
                progress=progress,
            )
            try:
                first.process_all_available()
            finally:
                first.stop()
    file_sources = _file_sources(spark, plan, options)
    quarantine = None if options.quarantine_dir is None else Quarantine(options.quarantine_dir)
    recipe, moved = _on_checkpoint(spark, plan, recipe, layout, partitions)
    setup = _job_setup(spark, plan, recipe, options, checkpoint_dir=checkpoint_dir, progress=progress)
    if moved is not None:  # the micro-batch Spark's repartition wrote: no sink ran for it
        _skipped(setup, moved)
    # A reader of its memory streams from now on, so retention keeps what it has not committed.
    with spool_readers(senders, checkpoint_dir, resumable=options.resumable) as checked_in:
        job = run.start_streaming(
            setup,
            checkpoint=layout,
            senders=senders,
            durability=profile.name,
            conf=profile.query_conf,
            quarantine=quarantine,
            file_sources=file_sources,
        )
        checked_in(job)
    job.name = options.name or setup.query_name
    _record_running(checkpoint_dir, job)
    return job


def _skipped(setup: JobSetup, batch_id: int) -> None:
    """Tell the job's writers that no sink ran for micro-batch ``batch_id`` (Spark's repartition)."""
    for opened in (setup.writer, setup.late_writer):
        skipped = getattr(opened, "skipped_batch", None)
        if skipped is not None:
            skipped(batch_id)


def _job_setup(
    spark: SparkSession,
    plan: n.PlanNode,
    recipe: SparkRecipe,
    options: StartOptions,
    *,
    checkpoint_dir: str,
    progress: bool | None,
) -> JobSetup:
    """A new query's name and its sink's writers (results, late rows)."""
    query_name = run.new_query_name()
    writer, late_writer = open_writers(
        options.sink,
        recipe,
        spark=spark,
        checkpoint_dir=checkpoint_dir,
        query_name=query_name,
        # The stateful operator's output comes back to this process; native foreachBatch runs on the server.
        write_on_server=is_remote(spark) and recipe.stateful is None,
    )
    return JobSetup(
        plan=plan,
        recipe=recipe,
        spark=spark,
        sink=options.sink,
        writer=writer,
        late_writer=late_writer,
        query_name=query_name,
        progress=progress,
    )


@contextlib.contextmanager
def _shuffle_partitions(spark: SparkSession, during: int, after: int) -> Iterator[None]:
    """Spark's shuffle partitions ``during`` the block, ``after`` it."""
    spark.conf.set("spark.sql.shuffle.partitions", str(during))
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(after))


def _file_sources(spark: SparkSession, plan: n.PlanNode, options: StartOptions) -> list[BadFileSource]:
    """The plan's streaming file sources, a :class:`PlanError` when one sets unreadable files aside
    where the job cannot (over Spark Connect, or without a directory for them)."""
    file_sources = [
        BadFileSource(s.name, s.path, s.bad_files)
        for s in n.sources_of(plan)
        if isinstance(s, n.FileSource) and s.streaming
    ]
    quarantining = [s.name for s in file_sources if s.quarantines]
    if quarantining and is_remote(spark):
        raise PlanError(
            f"the file source {quarantining[0]!r} sets unreadable files aside (bad_files='quarantine'), "
            "which runs on a local or cluster session, not over Spark Connect yet; leave it out there"
        )
    if quarantining and options.quarantine_dir is None:
        raise PlanError(
            f"the file source {quarantining[0]!r} sets unreadable files aside (bad_files='quarantine'): "
            "give the job a directory for them with start(..., quarantine_dir=<a directory>)"
        )
    return file_sources


def _on_checkpoint(
    spark: SparkSession, plan: n.PlanNode, recipe: SparkRecipe, layout: CheckpointLayout, partitions: int
) -> tuple[SparkRecipe, int | None]:
    """``recipe`` as the checkpoint runs it (its carrier, its operator's layout: :func:`_laid_out`),
    checked against and recorded in it; and the micro-batch Spark's move of its own state to
    ``partitions`` wrote, if it moved it."""
    # krishiv's records, read and written here: a ``file://`` checkpoint's by its path.
    records = layout.on_this_machine() or layout
    if recipe.stateful is not None:
        asked = spark.conf.get(CARRIER_CONF, None)
        recipe = with_carrier(recipe, operator_carrier(records, None if asked is None else str(asked)))
    check_plan(records, recorded_identity(plan, recipe), was=recorded_identity(plan, recipe, whole=True))
    _record_job(records, recipe)
    moved = None
    if recipe.stateful is None or recipe.stateful.carrier == "state-store":  # Spark moves its own state
        moved = rescale_spark_state(spark, layout, partitions)
    return _laid_out(spark, records, recipe, partitions), moved


def _laid_out(
    spark: SparkSession, records: CheckpointLayout, recipe: SparkRecipe, partitions: int
) -> SparkRecipe:
    """``recipe`` with its stateful operator's layout: the buckets Spark's state store keeps, or the
    key groups and tasks krishiv's carrier runs (the checkpoint's, moved to ``partitions``)."""
    node = recipe.stateful
    if node is None:
        return recipe
    if node.carrier == "state-store":
        return with_buckets(recipe, operator_buckets(records, partitions))
    asked = spark.conf.get(KEY_GROUPS_CONF, None)
    chosen = operator_layout(
        records,
        1 if node.carrier == "one-task" else partitions,
        asked=None if asked is None else str(asked),
        movable=node.operator.kernel.movable,
        what=node.operator.kernel.describe(),
        stage_movable=node.operator.then is not None and node.operator.then.movable,
    )
    _record_operator(records, node.operator.kernel)
    return with_key_groups(
        recipe,
        chosen.key_groups,
        chosen.tasks,
        since=chosen.since,
        stage_buckets=chosen.stage_buckets,
        stage_key_groups=chosen.stage_key_groups,
    )


#: The Spark setting that picks what carries the stateful operator's state between micro-batches
#: (``krishiv-files``, ``one-task`` or ``state-store``; :func:`operator_carrier`).
CARRIER_CONF = "spark.krishiv.stateful.carrier"


def operator_carrier(checkpoint: CheckpointLayout, asked: str | None) -> str:
    """What carries the stateful operator's state for a job on ``checkpoint``.

    ``asked`` (:data:`CARRIER_CONF`) when set; otherwise the carrier the
    checkpoint was started with (a checkpoint written before carriers were
    recorded: Spark's state store); a new checkpoint on a file system this
    process reads gets krishiv's own files (``krishiv-files``: each micro-batch
    reads its watermark from the offset log there), one elsewhere (a URI)
    Spark's state store. A checkpoint keeps its carrier: asking another one
    for it is refused by :func:`check_plan`, which names both.
    """
    if asked is not None:
        return asked
    try:
        recorded = recorded_carrier(checkpoint)
    except OSError as exc:  # a store this process cannot open or read (no client, no credentials)
        warnings.warn(
            f"krishiv cannot read the checkpoint {checkpoint.root} itself ({type(exc).__name__}: "
            f"{exc}), so its stateful operator keeps its state in Spark's state store (slower): "
            "give this process and the executors the store's client and credentials "
            "(docs/durability.md), or set spark.krishiv.stateful.carrier=state-store to say so",
            stacklevel=2,
        )
        return "state-store"
    return recorded if recorded is not None else "krishiv-files"


def recorded_carrier(checkpoint: CheckpointLayout) -> str | None:
    """The carrier a checkpoint's job started with (None: a new checkpoint). Raises
    :class:`OSError` when the checkpoint's file system cannot be read from here."""
    try:
        text = files.read_bytes(checkpoint.plan_file).decode("utf-8")
    except FileNotFoundError:
        return "state-store" if checkpoint.has_offsets() else None
    for line in text.splitlines():
        if line.startswith("carrier: "):
            return line.removeprefix("carrier: ").strip()
    return "state-store"


def refuse_quarantine_for_batch(options: StartOptions) -> None:
    """``quarantine_dir=`` has nothing to restart past in a bounded run: a :class:`PlanError`."""
    if options.quarantine_dir is not None:
        raise PlanError(
            "quarantine_dir= is for streaming jobs: this input is bounded and runs as one batch "
            "job, with no checkpoint to restart past a failed batch from; leave it out"
        )


def operator_buckets(checkpoint: CheckpointLayout, shuffle_partitions: int) -> int:
    """The stateful operator's key buckets for a job on ``checkpoint``.

    A new job takes two per shuffle partition (at least 2, at most the
    planner's 16): on a small machine a few large bucket calls per
    micro-batch cost less than many small ones, and every partition still
    gets work. The number is recorded in the checkpoint, because the state
    is laid out by it; a checkpoint without the record (written before it
    existed) keeps the planner's 16, and so does a checkpoint on a file
    system this process cannot open (its Spark state is Spark's to read).
    """
    checkpoint_dir, path = checkpoint.root, checkpoint.buckets_file
    try:
        text: str | None = files.read_bytes(path).decode("utf-8").strip()
    except FileNotFoundError:
        text = None
    except OSError:  # a store this process cannot open: nothing recorded here
        return BUCKETS
    if text is not None:
        if not text.isdigit() or int(text) < 1:
            raise JobError(
                f"{path} holds {text!r}, not a number of key buckets: the job's state in "
                f"{checkpoint_dir} is laid out by the number it started with (16 for a checkpoint "
                "written before the file existed); write that number back, or start the job "
                "on a new checkpoint"
            )
        return int(text)
    chosen = BUCKETS if checkpoint.has_offsets() else min(BUCKETS, max(2, 2 * shuffle_partitions))
    files.write_bytes(path, f"{chosen}\n".encode())
    return chosen


#: The Spark setting of a new checkpoint's number of key groups (SPEC 3.15; at least 1, at most
#: :data:`~krishiv_py.stateful.key_groups.MAX_KEY_GROUPS`; default 128).
KEY_GROUPS_CONF = "spark.krishiv.stateful.key_groups"
_DEFAULT_KEY_GROUPS, _MAX_KEY_GROUPS = 128, 32_768


@attrs.frozen
class OperatorLayout:
    """How a run lays out the stateful operator: its key groups, its tasks (each a contiguous range
    of key groups), the first micro-batch of this layout, and a stage's buckets."""

    key_groups: int
    tasks: int
    since: int
    stage_buckets: int
    #: Whether a stage keyed by other columns runs by key group too (on the operator's tasks, its
    #: state moving with them); False: ``stage_buckets`` hashed buckets, fixed (checkpoints
    #: started before stages moved, or a stage whose state cannot move).
    stage_key_groups: bool = False


def operator_layout(
    checkpoint: CheckpointLayout,
    partitions: int,
    *,
    asked: str | None,
    movable: bool,
    what: str,
    stage_movable: bool = False,
) -> OperatorLayout:
    """The layout of the stateful operator for a run on ``partitions`` tasks (SPEC 3.15).

    A new checkpoint takes ``asked`` key groups (:data:`KEY_GROUPS_CONF`; 128
    by default) and records them; its tasks are the run's shuffle
    partitions, at most one per key group. A restart keeps the key groups
    and runs on its own partitions: when they differ from the last run's,
    the state moves by key group (``movable``: the kernel splits its state,
    ``what`` names it in the error when it cannot). A checkpoint written with
    key buckets (before key groups) reads each bucket as a key group. A new
    checkpoint's stage keyed by other columns runs by key group when its state
    can move (``stage_movable``); one recorded with hashed buckets keeps them.
    """
    checkpoint_dir, path = checkpoint.root, checkpoint.key_groups_file
    committed = checkpoint.committed_batch()
    recorded = _read_layout(path)
    if recorded is None and (files.exists(checkpoint.buckets_file) or checkpoint.has_offsets()):
        buckets = operator_buckets(checkpoint, partitions)  # its recorded number, 16 before records
        recorded = OperatorLayout(key_groups=buckets, tasks=buckets, since=0, stage_buckets=buckets)
        if not movable:  # its state stays in one directory per bucket, as it was written
            return recorded
    if recorded is None:
        groups = _key_groups(asked)
        tasks = max(1, min(partitions, groups))
        chosen = OperatorLayout(
            key_groups=groups,
            tasks=tasks,
            since=0,
            stage_buckets=min(BUCKETS, max(2, 2 * partitions)),
            stage_key_groups=stage_movable,
        )
        _write_layout(checkpoint, chosen)
        return chosen
    if asked is not None and _key_groups(asked) != recorded.key_groups:
        raise JobError(
            f"{KEY_GROUPS_CONF}={asked}, but the checkpoint {checkpoint_dir} hashes its keys into "
            f"{recorded.key_groups} key groups, fixed when it started: leave the setting out (or "
            "set it to that number), or start the job on a new checkpoint"
        )
    tasks = max(1, min(partitions, recorded.key_groups))
    if tasks == recorded.tasks:
        return recorded
    if not movable:
        raise JobError(
            f"the checkpoint {checkpoint_dir} ran on {recorded.tasks} tasks and this start asks "
            f"for {tasks} (spark.sql.shuffle.partitions), but the state of its operator ({what}) "
            "cannot move between tasks yet: start it with "
            f"spark.sql.shuffle.partitions={recorded.tasks}, or on a new checkpoint"
        )
    chosen = attrs.evolve(recorded, tasks=tasks, since=committed + 1)
    _write_layout(checkpoint, chosen)
    return chosen


def _record_job(checkpoint: CheckpointLayout, recipe: SparkRecipe) -> None:
    """Record what reading the checkpoint's watermarks takes (``krishiv state show``): the shift of
    event time in the query (Spark's watermarks are shifted by it)."""
    facts = {"time_shift_ms": recipe.time_shift_ms}
    path = checkpoint.job_file
    if read_json(path) == facts:
        return
    with contextlib.suppress(OSError):  # (a store this process cannot open: a look inside cannot either)
        write_json(path, facts)


def _record_operator(checkpoint: CheckpointLayout, kernel: Any) -> None:
    """Add what the operator keeps to the layout record, for ``krishiv state show`` and
    ``kp.read_state`` (its kind, its keys and the state columns holding them)."""
    path = checkpoint.key_groups_file
    data = read_json(path)
    if not isinstance(data, dict):
        return  # a checkpoint of key buckets: nothing recorded of its layout
    facts = {
        "operator": kernel.describe(),
        "keys": list(kernel.keys),
        "state_keys": None if kernel.state_keys is None else list(kernel.state_keys),
    }
    if all(data.get(k) == v for k, v in facts.items()):
        return
    data.update(facts)
    write_json(path, data)


def _key_groups(asked: str | None) -> int:
    if asked is None:
        return _DEFAULT_KEY_GROUPS
    text = asked.strip()
    if not text.isdigit() or not 1 <= int(text) <= _MAX_KEY_GROUPS:
        raise JobError(
            f"{KEY_GROUPS_CONF}={asked!r} is not a number of key groups: give a whole number "
            f"from 1 to {_MAX_KEY_GROUPS} (at least the most tasks the job will ever run on)"
        )
    return int(text)


def _read_layout(path: str) -> OperatorLayout | None:
    try:
        text = files.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        return OperatorLayout(
            key_groups=int(data["key_groups"]),
            tasks=int(data["tasks"]),
            since=int(data["since"]),
            stage_buckets=int(data["stage_buckets"]),
            stage_key_groups=bool(data.get("stage_key_groups", False)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise JobError(
            f"{path} is damaged ({type(exc).__name__}: {exc}): it records how the job's state is laid "
            'out, e.g. {"key_groups": 128, "tasks": 2, "since": 0, "stage_buckets": 4}; restore it, or '
            "start the job on a new checkpoint"
        ) from exc


def _write_layout(checkpoint: CheckpointLayout, chosen: OperatorLayout) -> None:
    path = checkpoint.key_groups_file
    recorded = read_json(path)
    data: dict[str, Any] = dict(recorded) if isinstance(recorded, dict) else {}
    data.update(attrs.asdict(chosen))
    write_json(path, data)


def recorded_identity(plan: n.PlanNode, recipe: SparkRecipe, *, whole: bool = False) -> str:
    """What a checkpoint records of the pipeline that writes it: the lowering, the plan's identity
    and, when the stateful operator runs more than one kernel, how its state is laid out.

    ``whole``: with the filters and projections after the last stateful operator, as checkpoints
    recorded it before those could change (:func:`check_plan` accepts either).
    """
    text = f"lowering: {recipe.lowering}\n{n.checkpoint_identity(plan, whole=whole)}\n"
    node = recipe.stateful
    if node is not None and node.carrier != "state-store":  # the state's files are laid out by it
        text = f"{text}carrier: {node.carrier}\n"
    layout = node.operator.state_layout if node is not None else None
    return text if layout is None else f"{text}operators: {layout}\n"


def check_plan(checkpoint: CheckpointLayout, plan_text: str, *, was: str | None = None) -> None:
    """Refuse to resume a checkpoint written by another pipeline; record the plan of a new one.

    A checkpoint holds state laid out for one plan and lowering (window,
    keys, aggregates, watermarks); resuming it with another gives wrong
    results or a Spark error deep in a micro-batch. The checkpoint is left
    as it is. ``was``: this pipeline as checkpoints recorded it before
    (filters and projections after the last stateful operator included); a
    record of it is this pipeline's, rewritten as ``plan_text``.
    """
    checkpoint_dir, path = checkpoint.root, checkpoint.plan_file
    try:
        recorded: str | None = files.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        recorded = None
    except OSError:
        return  # a store this process cannot open: Spark checks what it can
    if recorded is not None:
        if recorded == plan_text:
            return
        if was is None or recorded != was:
            raise JobError(_other_pipeline(checkpoint_dir, recorded, plan_text))
    files.write_bytes(path, plan_text.encode("utf-8"))


def _other_pipeline(checkpoint_dir: str, recorded: str, plan_text: str) -> str:
    old, new = recorded.splitlines(), plan_text.splitlines()
    first = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
    )
    was = old[first].strip() if first < len(old) else "(nothing)"
    now = new[first].strip() if first < len(new) else "(nothing)"
    return (
        f"the checkpoint {checkpoint_dir} was written by another pipeline, so this one cannot "
        f"resume it (left intact): it had `{was}`, this pipeline has `{now}`. Start the original "
        "pipeline to resume it, or this one under another name / checkpoint_dir"
    )
