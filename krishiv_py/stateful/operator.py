"""The thin glue between Spark and the kernel.

Spark groups the rows of a micro-batch by *key bucket* (a hash of the key
columns modulo a small number) and calls the operator once per bucket that
has rows: :func:`run_bucket_files` through ``applyInArrow``, the bucket's
state krishiv's own versioned files (:mod:`krishiv_py.stateful.versioned`),
the micro-batch's watermark read from the offset log; or, with Spark's
state store as the carrier, :func:`run_bucket` through
``applyInPandasWithState`` with no timeout, the watermark from
``state.getCurrentWatermarkMs()``. The bucket's state is one Arrow IPC blob
(every open window of every key in the bucket), so there is one state
round-trip per bucket and micro-batch, never per key or row.

Input packing
    Spark hands ``applyInPandasWithState`` its rows as pandas frames, one
    row at a time through the shuffle. So the rows are packed before the
    shuffle instead: :func:`pack_rows` runs in the map tasks
    (``mapInArrow``), splits the task's rows by key bucket and emits one
    row per bucket holding them as an Arrow IPC stream (``__kp_packed``).
    The shuffle and the pandas hand-over then move a few large values per
    bucket instead of every row, and :func:`decode_input` reads the streams
    back without a conversion. The rows reach the packer as exact Arrow
    columns (``mapInArrow`` keeps nulls, NaN, -0.0 and timestamps of any
    year), renamed so that no user column meets an internal one, with the
    event time in µs (null: invalid) and the arrival order.
Merging before the shuffle
    Where the packer learns the micro-batch's watermark (``merge_under``:
    the job reads it from the query's offset log, which Spark writes before
    the micro-batch runs) and the windows allow it, it merges the on-time
    rows per key and pane (:mod:`krishiv_py.stateful.premerge`) and packs
    them as a second stream per bucket, marked with the watermark they were
    merged under and the delay counts of their rows. The bucket call checks
    that watermark against its own and adds the partials to the step.
Output
    One row per bucket call: a binary payload holding three Arrow IPC
    streams — result rows, late/invalid rows, and a one-row statistics
    table — decoded on the driver by :func:`decode_payloads`.
Ticks
    Rows with a null ``__kp_packed`` carry only a bucket number. The job adds one
    per bucket holding state after a micro-batch moved the watermark, so the
    bucket runs with the new watermark and fires what it passed.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.errors import JobError
from krishiv_py.names import (
    AUTO_SOURCE,
    BATCH_TS,
    BUCKET,
    JOIN_SIDE,
    LATE_CLASS,
    LATE_WM,
    PACKED,
    PAYLOAD,
    ROUTE,
    SEQ,
    TICK,
    TS_VALUE,
    encoded_value,
    late_names,
)
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.stateful import kernel, stage
from krishiv_py.stateful._arrow import arrow, framed, ipc_bytes, ipc_table, table_of, unframed
from krishiv_py.stateful.chain import kinds_of
from krishiv_py.stateful.delays import bucket_of
from krishiv_py.stateful.held_state import KeyedState, WholeState, open_held, open_table, write_state
from krishiv_py.stateful.key_groups import task_ranges
from krishiv_py.stateful.premerge import MERGED_ROWS
from krishiv_py.stateful.protocol import EVERY_STEP, Kernel
from krishiv_py.stateful.regroup import followed, gather_stepped
from krishiv_py.stateful.stage import StageSpec
from krishiv_py.stateful.state import WINDOW_END, WINDOW_START
from krishiv_py.stateful.versioned import KeyGroupStore, Piece, VersionedBlobs, piece_keep, range_name

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BucketInput",
    "InputColumn",
    "OperatorSpec",
    "Payloads",
    "decode_input",
    "decode_payloads",
    "pack_rows",
    "run_bounded_bucket",
    "run_bucket",
    "run_bucket_files",
    "run_buckets_files",
    "route_side",
    "run_stage",
]

#: The statistics column of a bucket's delay histogram (with ``profile_lag_ms``).
DELAY_COUNTS = "delay_counts"
#: With an automatic lag, the statistics columns of a bucket's event times (ms): per source (its
#: index) the distinct values and how many rows hold each (krishiv_py.runtime.auto_watermark sums
#: them per batch).
AUTO_SOURCES, AUTO_TIMES, AUTO_COUNTS = "auto_sources", "auto_times", "auto_counts"
#: The statistics columns of a bucket's busiest keys in the micro-batch: each key's values joined
#: by ``", "``, and the rows it received (merged partials by the rows they hold).
HOT_KEYS, HOT_COUNTS = "hot_keys", "hot_counts"
#: How many of its busiest keys a bucket reports per micro-batch.
HOT_PER_BUCKET = 8
#: The most rows of a micro-batch a bucket counts its busiest keys over (a sample beyond).
HOT_SAMPLE = 2_048
STAT_NAMES = (
    "bucket",
    "on_time",
    "mildly_late",
    "very_late",
    "future",
    "invalid",
    "emitted",
    "retracted",
    "state_windows",
    "state_bytes",
    "next_due_ms",
    "next_interval_ms",
    "expired",
    "arith",
    "watermark_ms",
    "merged",
)
#: The statistics that count something per micro-batch (the job sums them over batches).
COUNTER_NAMES = tuple(
    n
    for n in STAT_NAMES
    if n not in ("bucket", "state_windows", "state_bytes", "next_due_ms", "next_interval_ms", "watermark_ms")
)
#: Microseconds a bucket call spent in the Python worker: reading its state blob, receiving
#: its packed rows from Spark (as pandas frames), reading them as Arrow, the kernel, writing the
#: state blob, encoding the payload (diagnostics: the job sums them per micro-batch, see
#: ``BatchCollector.timings``).
TIMING_NAMES = ("load_us", "receive_us", "decode_us", "kernel_us", "store_us", "encode_us")
#: ``watermark_ms`` of a micro-batch that had no watermark yet.
NO_WATERMARK = -(2**63)


@attrs.frozen(kw_only=True)
class InputColumn:
    """One input column of the window and how it travels to the operator."""

    name: str
    type: pa.DataType
    index: int

    @property
    def value(self) -> str:
        """The column's name in the packer's input."""
        return encoded_value(self.index)


@attrs.frozen(kw_only=True)
class OperatorSpec:
    """What every bucket call needs: the kernel spec, the input layout, the time shift."""

    #: The operator's kernel: the glue runs any kernel alike, through the protocol.
    kernel: Kernel
    columns: tuple[InputColumn, ...]
    shift_ms: int
    #: The calls per micro-batch: key buckets, or with :attr:`key_groups` the tasks.
    buckets: int
    #: The key groups the rows hash into (SPEC 3.15), each task a contiguous range of them
    #: (:func:`~krishiv_py.stateful.key_groups.task_ranges`); 0: one bucket per call, the layout
    #: of Spark's state store as the carrier.
    key_groups: int = 0
    #: The first micro-batch of this run's layout of tasks (a restart on another number of tasks
    #: reads the state the layout before left; see :class:`KeyGroupStore`).
    layout_since: int = 0
    #: The source's watermark lag, to profile each event's delay behind the stream as of the
    #: previous micro-batch (``W + lag - ts``); ``None``: no profile (several sources).
    profile_lag_ms: int | None = None
    #: A stage keyed by other columns that takes the results (:mod:`krishiv_py.stateful.stage`).
    then: StageSpec | None = None
    #: The step's ``now_ms`` is the micro-batch's start (Spark's processing time of the trigger,
    #: the same on a re-run), not the clock when the task runs: a processing-time window's.
    batch_time: bool = False
    #: An automatic lag: the micro-batch's watermark is the one the driver recorded for it
    #: (``run_bucket``'s ``watermark``), Spark's is the highest event time seen before it, and
    #: each bucket reports its event times (:data:`AUTO_TIMES`).
    auto: AutoLag | None = None
    #: One source with a fixed lag (Spark's watermark ``highest - lag`` after each micro-batch):
    #: the operator fires what a micro-batch's rows make due in that micro-batch
    #: (:func:`fire_watermark`), not in the next one. ``None``: it fires when Spark's watermark
    #: reaches it (several sources, an automatic lag, a lag per partition).
    fire_lag_ms: int | None = None
    #: A join whose sides each have one watermark of a fixed lag (the left's, the right's): Spark's
    #: watermark after a micro-batch is at least the lower of ``highest - lag`` of the two sides'
    #: rows in it, which the operator fires in that micro-batch when both sides had rows.
    side_fire_lags_ms: tuple[int, int] | None = None

    @property
    def layout_dirs(self) -> frozenset[str]:
        """The state directories of this run's tasks."""
        return frozenset(range_name(lo, hi) for lo, hi in task_ranges(self.key_groups, self.buckets))

    @property
    def fires_ahead(self) -> bool:
        """Whether a micro-batch fires what its own rows make due (:attr:`fire_lags`). A stage
        after the operator moves to the watermark it fired at (the report it is handed), unless
        a join stage reads a source of its own: that source's watermark holds Spark's too."""
        return bool(self.fire_lags) and not any(level.side_input for level in stage.levels(self.then))

    @property
    def fire_lags(self) -> tuple[int, ...]:
        """The lag of each source whose highest event time the map tasks send: one, or a join's two
        sides (their rows by :data:`~krishiv_py.names.JOIN_SIDE`); none: no firing ahead."""
        if self.fire_lag_ms is not None:
            return (self.fire_lag_ms,)
        return self.side_fire_lags_ms or ()

    @property
    def input_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @property
    def state_layout(self) -> str | None:
        """How the state is laid out when the operator runs more than one kernel: the kernels'
        kinds in the order they run, `` > `` between two in one call, `` | `` before a stage
        (None: one kernel). A checkpoint records it, so that state laid out for other kernels is
        never read as this one's."""
        calls = [self.kernel, *(s.kernel for s in stage.levels(self.then))]
        kinds = [" > ".join(kinds_of(k)) for k in calls]
        return None if kinds == [type(self.kernel).__name__] else " | ".join(kinds)

    @property
    def row_columns(self) -> tuple[InputColumn, ...]:
        """The input columns of the rows (not the source index an automatic lag reads)."""
        return tuple(c for c in self.columns if c.name != AUTO_SOURCE)

    @property
    def sent_late_schema(self) -> pa.Schema:
        """The operator's late rows as it sends them: its input columns (a join's side, a union's
        branch under their hidden names), the classification and the watermark they met."""
        fields = [pa.field(c.name, c.type) for c in self.row_columns]
        return pa.schema([*fields, pa.field(LATE_CLASS, pa.string()), pa.field(LATE_WM, pa.int64())])

    @property
    def late_layout(self) -> tuple[tuple[str, pa.Field[Any]], ...]:
        """Every late row's columns, the operator's input's then a join stage's other side's (a
        column of both once): each as it is sent, and as the late-event table has it
        (:func:`~krishiv_py.names.late_names`). Each late row has those it comes with, the
        others null."""
        fields = {f.name: f.type for f in self.sent_late_schema if f.name not in (LATE_CLASS, LATE_WM)}
        for level in stage.levels(self.then):  # every join stage's other side
            for name, kind, _ in level.side_input:
                fields.setdefault(name, kind)
        fields[LATE_CLASS], fields[LATE_WM] = pa.string(), pa.int64()
        public = late_names(list(fields))
        return tuple((name, pa.field(public[name], kind)) for name, kind in fields.items())

    @property
    def handed_late_schema(self) -> pa.Schema:
        """The late-event table a handler gets (SPEC 3.8): :attr:`late_layout`'s public names."""
        return pa.schema([field for _, field in self.late_layout])


# --- the Spark entry points -----------------------------------------------------------


def run_bucket(
    spec: OperatorSpec,
    key: tuple[Any, ...],
    frames: Iterable[pd.DataFrame],
    state: Any,
    watermark_of: Callable[[], MapWatermark] | None = None,
) -> Iterator[pd.DataFrame]:
    """``applyInPandasWithState`` function: one micro-batch of one bucket.

    ``watermark_of``: with an automatic lag, tells the micro-batch's watermark (the record the
    driver wrote for it).
    """

    clock = _Clock()
    spark_wm = int(state.getCurrentWatermarkMs())
    watermark = None if spark_wm <= 0 else spark_wm - spec.shift_ms
    if spec.auto is not None:  # (Spark's delay is 0: its watermark is the highest time seen)
        watermark = _recorded_watermark(watermark_of)
    stored = ipc_table(state.get[0]) if state.exists else None
    load_us = clock.lap()
    received = list(frames)  # Spark's iterator: the rows arrive from the JVM as pandas frames
    receive_us = clock.lap()
    given = decode_input(spec, received)
    # Processing-time windows time their rows by the micro-batch's start, the same on a re-run.
    now = int(state.getCurrentProcessingTimeMs()) if spec.batch_time else int(time.time() * 1000)

    def keep(held: WholeState | KeyedState) -> int:
        if not held.changed:
            return 0
        table = held.table()
        if table is None:
            if state.exists:
                state.remove()
            return 0
        blob = ipc_bytes(table)
        state.update((blob,))
        return len(blob)

    before = (load_us, receive_us)
    whole = WholeState(spec.kernel, stored)
    payload, handed = _step(spec, int(key[0]), whole, given, watermark, now, keep, clock, before)
    yield _output(spec, int(key[0]), payload, handed)


def run_bucket_files(
    spec: OperatorSpec,
    key: tuple[Any, ...],
    table: pa.Table,
    batch_id: int,
    batch_of: Callable[[], tuple[int | None, int]],
    root: str,
) -> pa.Table:
    """``applyInArrow`` function: one micro-batch of one bucket, its state krishiv's own files.

    The ``krishiv-files`` carrier (:mod:`krishiv_py.stateful.versioned`): the
    bucket's state is the version the micro-batch before ``batch_id`` left
    under ``root``; the new one is written before the task ends, so before
    the micro-batch commits. ``batch_of`` tells the micro-batch's watermark
    and start time (ms), as Spark wrote them into its offset log.
    """
    clock = _Clock()
    bucket = int(key[0])
    watermark, started_ms = batch_of()
    given = decode_blobs(spec, [b for b in table.column(PACKED).to_pylist() if b is not None])
    now = started_ms if spec.batch_time else int(time.time() * 1000)
    store, held, caught = open_state(spec, root, bucket, batch_id, watermark, now, given.rows.slice(0, 0))
    load_us = clock.lap()

    def keep(state: WholeState | KeyedState) -> int:
        return write_state(state, store, batch_id)

    payload, handed = _step(spec, bucket, held, given, watermark, now, keep, clock, (load_us, 0), caught)
    return _output_table(spec, bucket, payload, handed)


def open_state(
    spec: OperatorSpec,
    root: str,
    bucket: int,
    batch_id: int,
    watermark: int | None = None,
    now: int = 0,
    empty: pa.Table | None = None,
) -> tuple[VersionedBlobs | KeyGroupStore, WholeState | KeyedState, kernel.StepOutput | None]:
    """Where task ``bucket``'s versions go, and its state as the micro-batches before ``batch_id``
    left it (after a restart on another number of tasks, gathered from the directories of the
    layout before, each part stepped to ``watermark``: then written whole by this micro-batch,
    and what that step fired, which comes before the micro-batch's results)."""
    if not spec.key_groups:
        blobs = VersionedBlobs(root, bucket)
        return blobs, open_held(spec.kernel, blobs, batch_id), None
    lo, hi = task_ranges(spec.key_groups, spec.buckets)[bucket]
    store = KeyGroupStore(root, lo, hi, since=spec.layout_since, current=spec.layout_dirs)
    pieces = store.moved_before(batch_id)
    if pieces is None:
        return store, open_held(spec.kernel, store.own, batch_id), None
    moved = len(pieces) > 1 or pieces[0].groups is not None or (pieces[0].lo, pieces[0].hi) != (lo, hi)
    state, caught = assemble_state(spec, pieces, watermark, now, empty)
    return store, open_table(spec.kernel, state, fresh=moved), caught


def assemble_state(
    spec: OperatorSpec,
    pieces: list[Piece],
    watermark: int | None = None,
    now: int = 0,
    empty: pa.Table | None = None,
) -> tuple[pa.Table | None, kernel.StepOutput | None]:
    """A task's state from the :class:`Piece`\\ s its key groups were left in (after a restart on
    another number of tasks, several): each piece's rows of the key groups it gives, together;
    and what stepping them there emitted.

    A piece's rows are split by their key group (:mod:`krishiv_py.stateful.key_groups`), each
    checked against the range it was stored for. The tasks that left the pieces stepped only
    when they had rows, so their parts may stand at different watermarks (a window join's fired
    windows, a chain's marks): each part is first stepped over no rows (``empty``: the batch's
    columns) to the micro-batch's ``watermark``, as a tick would have stepped it, and what that
    fires comes before the micro-batch's own results
    (:mod:`krishiv_py.stateful.regroup`).
    """
    if len(pieces) == 1 and pieces[0].groups is None:
        blob = pieces[0].blob
        return (ipc_table(blob) if blob is not None else None), None
    k = spec.kernel
    if not k.movable:
        raise JobError(
            f"the state of this job's operator ({k.describe()}) cannot move between "
            "tasks: start it with the spark.sql.shuffle.partitions it ran with, or on a new checkpoint"
        )
    parts = []
    for piece in pieces:
        if piece.blob is None:
            continue
        table = ipc_table(piece.blob)
        parts.append(
            table if piece.groups is None else k.split_state(table, piece_keep(spec.key_groups, piece))
        )
    return gather_stepped(k, parts, watermark, now, empty)


def run_buckets_files(
    spec: OperatorSpec,
    batches: Iterable[pa.RecordBatch],
    batch_id: int,
    batch_of: Callable[[], tuple[int | None, int]],
    root: str,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the ``one-task`` carrier: every bucket of a micro-batch in one
    task (the input coalesced into one partition, no shuffle), each as :func:`run_bucket_files`."""
    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    rows = pa.concat_tables(tables)
    buckets = rows.column(BUCKET).to_numpy()
    for bucket in np.unique(buckets).tolist():
        table = rows.filter(pa.array(buckets == bucket))
        out = run_bucket_files(spec, (bucket,), table, batch_id, batch_of, root)
        yield from out.to_batches()


def run_one_task(
    spec: OperatorSpec,
    batches: Iterable[pa.RecordBatch],
    batch_id: int,
    batch_of: Callable[[], tuple[int | None, int]],
    root: str,
    *,
    merge_under: Callable[[], MapWatermark] | None = None,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the ``one-task`` carrier: a micro-batch's encoded rows packed
    (:func:`pack_rows`) and every bucket run (:func:`run_buckets_files`) in the same call.

    Tick rows come among the rows, :data:`~krishiv_py.names.TICK` set (their
    other columns null but the bucket's): each wakes its bucket. One hand-over
    to Python per micro-batch, and the packed rows never go back to the JVM.
    """
    woken: list[int] = []

    def rows() -> Iterator[pa.RecordBatch]:
        for b in batches:
            flag = b.column(b.schema.get_field_index(TICK)).fill_null(False)
            tick = np.asarray(flag.to_numpy(zero_copy_only=False), dtype=bool)
            if tick.any():
                buckets = b.column(b.schema.get_field_index(BUCKET)).to_numpy()
                woken.extend(int(x) for x in buckets[tick])
                b = b.filter(pa.array(~tick))
            yield b.drop_columns([TICK])

    packed = list(pack_rows(spec, rows(), merge_under=merge_under))
    if woken:
        buckets = sorted(set(woken))
        packed.append(
            pa.RecordBatch.from_pydict(
                {BUCKET: pa.array(buckets, pa.int32()), PACKED: pa.nulls(len(buckets), pa.binary())}
            )
        )
    yield from run_buckets_files(spec, packed, batch_id, batch_of, root)


class _Clock:
    """Microseconds between laps (a bucket call's timings)."""

    def __init__(self) -> None:
        self._last = time.perf_counter_ns()

    def lap(self) -> int:
        now = time.perf_counter_ns()
        elapsed, self._last = (now - self._last) // 1000, now
        return elapsed


def _recorded_watermark(watermark_of: Callable[[], MapWatermark] | None) -> int | None:
    """An automatic lag's watermark for the micro-batch: the record the driver wrote for it."""
    known, watermark = watermark_of() if watermark_of is not None else (False, None)
    if not known:
        raise RuntimeError(
            "krishiv's operator could not read the automatic lag's record of this micro-batch "
            "(krishiv-auto-lag/<batch> in the checkpoint, which the executors must see)"
        )
    return watermark


def _step(
    spec: OperatorSpec,
    bucket: int,
    held: WholeState | KeyedState,
    given: BucketInput,
    watermark: int | None,
    now: int,
    keep: Callable[[WholeState | KeyedState], int],
    clock: _Clock,
    before: tuple[int, int],
    caught: kernel.StepOutput | None = None,
) -> tuple[bytes, list[bytes]]:
    """The kernel's step over one bucket's input (over the rows of the keys it touches, for keyed
    state: :mod:`~krishiv_py.stateful.held_state`); its new state to ``keep``, which writes it when
    it changed; the payload and the rows handed on to a stage. ``caught``: what stepping a moved
    state's parts to the watermark fired (:func:`assemble_state`), emitted first."""
    given.check_watermark(watermark)
    batch = given.rows
    decode_us = clock.lap()
    taken = held.take(batch, given.merged, watermark)
    new_state, out = spec.kernel.step(taken, batch, watermark, now, merged=given.merged)
    held.put(new_state)
    if caught is not None:
        out = _after(caught, out)
    fire = fire_watermark(spec, given.highest_us, watermark)
    if fire is not None and EVERY_STEP < held.next_due()[0] <= fire:
        # What the watermark after this micro-batch makes due fires now, not in the next one.
        none = batch.slice(0, 0)
        new_state, fired = spec.kernel.step(held.take(none, None, fire), none, fire, now)
        held.put(new_state)
        out = followed(out, fired)
    # A stage after it moves to that watermark too: every bucket runs with the micro-batch's
    # highest times and reports it, each with what it holds still due after it.
    out, handed = _handed_on(spec, bucket, out, held, watermark if fire is None else fire)
    kernel_us = clock.lap()
    keep(held)
    store_us = clock.lap()
    payload = encode_payload(
        spec,
        bucket,
        batch,
        out,
        held,
        watermark,
        held.state_bytes(),
        stat_watermark=watermark,
        timings=(*before, decode_us, kernel_us, store_us),
        merged_delays=given.merged_delays,
        merged_rows=given.merged_rows,
        merged_times=given.merged_times,
        merged=given.merged,
    )
    return payload, handed


def fire_watermark(
    spec: OperatorSpec, highest_us: tuple[int | None, ...], watermark: int | None
) -> int | None:
    """The watermark a micro-batch leaves behind when its rows' highest event time per source
    (:attr:`OperatorSpec.fire_lags`) is ``highest_us`` (None: the operator does not fire ahead,
    or a source had no row with a time).

    Spark's own rule for one watermark operator: its highest event time in ms (µs divided by
    1,000, as Spark does) less the lag, where that is above both the watermark the micro-batch
    ran at and 0 (Spark's watermark before any); for several, the lowest of theirs (Spark's
    default policy; under ``max`` its watermark is higher still). The operator's rows are those
    Spark's watermark operators saw, less any that a filter between them dropped, and each
    operator's highest time is at least that of this micro-batch's rows: this is never above
    the watermark Spark moves to, so what fires here fires in the next micro-batch all the same
    (a tick fires the rest when it is higher).

    >>> spec = OperatorSpec(kernel=None, columns=(), shift_ms=0, buckets=4, fire_lag_ms=5_000)
    >>> fire_watermark(spec, (12_000_999,), 1_000), fire_watermark(spec, (5_000_000,), None)
    (7000, None)
    >>> fire_watermark(spec, (12_000_999,), 9_000), fire_watermark(spec, (None,), 1_000)
    (None, None)
    >>> join = OperatorSpec(kernel=None, columns=(), shift_ms=0, buckets=4, side_fire_lags_ms=(5_000, 0))
    >>> fire_watermark(join, (12_000_000, 4_000_000), 1_000), fire_watermark(join, (12_000_000, None), 1_000)
    (4000, None)
    """
    lags = spec.fire_lags if spec.fires_ahead else ()
    if not lags or len(highest_us) != len(lags) or any(h is None for h in highest_us):
        return None
    spark_ms = min(
        (cast(int, h) + spec.shift_ms * 1000) // 1000 - lag for h, lag in zip(highest_us, lags, strict=True)
    )
    if spark_ms <= 0:
        return None
    fire = spark_ms - spec.shift_ms
    return fire if watermark is None or fire > watermark else None


def _after(caught: kernel.StepOutput, out: kernel.StepOutput) -> kernel.StepOutput:
    """A step's output after what a moved state's parts fired when stepped to its watermark: their
    results first; the rows' indices and counts the step's."""
    closed = [c for c in (caught.closed, out.closed) if c is not None]
    return attrs.evolve(
        out,
        results=pa.concat_tables([caught.results, out.results], promote_options="permissive"),
        closed=pa.concat_tables(closed) if closed else None,
        expired=caught.expired + out.expired,
        arithmetic_errors=caught.arithmetic_errors + out.arithmetic_errors,
    )


def run_bounded_bucket(spec: OperatorSpec, key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
    """``applyInPandas`` function for bounded input: every row in one step, then end of input."""

    from krishiv_py.plan.watermarks import END_OF_TIME_MS

    given = decode_input(spec, [frame])
    given.check_watermark(None)
    batch = given.rows
    now = int(time.time() * 1000)
    state, first = spec.kernel.step(None, batch, None, now, merged=given.merged)
    state, last = spec.kernel.step(state, batch.slice(0, 0), END_OF_TIME_MS, now)
    merged = attrs.evolve(
        first,
        results=pa.concat_tables([first.results, last.results]),
        closed=last.closed,
        arithmetic_errors=first.arithmetic_errors + last.arithmetic_errors,
    )
    whole = WholeState(spec.kernel, state)
    merged, handed = _handed_on(spec, int(key[0]), merged, whole, END_OF_TIME_MS)
    payload = encode_payload(
        spec,
        int(key[0]),
        batch,
        merged,
        whole,
        None,
        0,
        stat_watermark=END_OF_TIME_MS,
        merged_rows=given.merged_rows,
    )
    return _output(spec, int(key[0]), payload, handed)


def _handed_on(
    spec: OperatorSpec,
    bucket: int,
    out: kernel.StepOutput,
    held: WholeState | KeyedState,
    watermark: int | None,
) -> tuple[kernel.StepOutput, list[bytes]]:
    """With a stage after the operator: its results go to the stage (:func:`stage.hand_on`), not out."""
    if spec.then is None:
        return out, []
    due, _ = held.next_due()
    handed = stage.hand_on(spec.then, bucket, out.results, watermark, held.state_rows(), due)
    # Its own payload then holds no results, and no columns of them: the stage's are the job's.
    return attrs.evolve(out, results=pa.schema([]).empty_table()), handed


def _output(spec: OperatorSpec, bucket: int, payload: bytes, handed: list[bytes]) -> pd.DataFrame:
    """The rows of one bucket call: its payload; with a stage, the rows handed on (route >= 0)."""
    import pandas as pd

    return pd.DataFrame(_output_columns(spec, bucket, payload, handed))


def _output_table(spec: OperatorSpec, bucket: int, payload: bytes, handed: list[bytes]) -> pa.Table:
    """:func:`_output` as an Arrow table."""
    cols = _output_columns(spec, bucket, payload, handed)
    types = {BUCKET: pa.int32(), PAYLOAD: pa.binary(), ROUTE: pa.int32()}
    return pa.table({name: pa.array(values, types[name]) for name, values in cols.items()})


def _output_columns(
    spec: OperatorSpec, bucket: int, payload: bytes, handed: list[bytes]
) -> dict[str, list[Any]]:
    if spec.then is None:
        return {BUCKET: [bucket], PAYLOAD: [payload]}
    return {
        BUCKET: [bucket] * (1 + len(handed)),
        PAYLOAD: [payload, *handed],
        ROUTE: [-1, *range(len(handed))],
    }


def run_stage(
    spec: OperatorSpec,
    key: tuple[Any, ...],
    table: pa.Table,
    batch_id: int | None,
    watermark: Callable[[], MapWatermark] | None = None,
    *,
    level: int = 0,
) -> pa.Table:
    """``applyInArrow`` function after the operator: the payloads before passed on (route -1), or
    one bucket of the stage ``level`` (0: the first) for a micro-batch (route >= 0) as a payload
    of its own; with a stage after it, its results handed on to that stage's buckets instead.

    ``batch_id``: the micro-batch (its state is read and written under the
    stage's path); None: a bounded run, all in one step, then end of input.
    ``watermark``: tells the micro-batch's watermark (as ``merge_under`` of
    :func:`pack_rows`), for a join stage's other side in a micro-batch that
    calls no bucket of the operator.
    """
    route = int(key[0])
    assert spec.then is not None
    then = stage.levels(spec.then)[level]
    last = then.then is None
    if route < 0:
        return table.select([BUCKET, PAYLOAD] if last else [BUCKET, PAYLOAD, ROUTE])
    blobs = table.column(PAYLOAD).to_pylist()
    kinds = table.column(BUCKET).to_pylist()
    # A join stage's other side, routed to it by its keys (marked for its level).
    is_side = [k == side_rows_of(level) for k in kinds]
    handed = [bytes(b) for b, s in zip(blobs, is_side, strict=True) if b is not None and not s]
    side = [ipc_table(bytes(b)) for b, s in zip(blobs, is_side, strict=True) if b is not None and s]
    now = int(time.time() * 1000)
    store: stage.StageStore | stage.KeyGroupStageStore | None = None
    caught = None
    before = None
    if batch_id is not None and then.key_groups is not None:  # its state moves by key group
        store = stage.KeyGroupStageStore(then, route)
        before, caught = store.load_before(batch_id, now)
    elif batch_id is not None:
        store = stage.StageStore(then.path, route)
        before = store.load_before(batch_id)
    # The first stage's other side in a micro-batch without an operator call runs at the
    # micro-batch's watermark; a later stage's at the watermark it last ran at (stage.step).
    read = bool(side) and level == 0
    known, batch_wm = watermark() if read and watermark is not None else (False, None)
    state, out, upstream_wm, late = stage.step(
        then,
        before,
        handed,
        now,
        bounded=batch_id is None,
        side=side,
        watermark_ms=(batch_wm if known else None),
    )
    if caught is not None:  # what gathering a moved state fired, before the micro-batch's own
        out = _after(caught, out)
    size = 0
    if store is not None and batch_id is not None:
        size = store.save(batch_id, state)
    due, interval = stage.next_due(then, state, upstream_wm)
    number = stage.bucket_base(spec.then, level) - route
    onward: list[bytes] = []
    if not last:
        onward = stage.handed_from(then, route, state, out, upstream_wm, bounded=batch_id is None)
        out = attrs.evolve(out, results=pa.schema([]).empty_table())  # the next stage's are the job's
    payload = _stage_payload(then, number, out, state, (due, interval), upstream_wm, late, size)
    cols: dict[str, pa.Array[Any]] = {
        BUCKET: pa.array([number] * (1 + len(onward)), pa.int32()),
        PAYLOAD: pa.array([payload, *onward], pa.binary()),
    }
    if not last:
        cols[ROUTE] = pa.array([-1, *range(len(onward))], pa.int32())
    return pa.table(cols)


#: ``BUCKET`` of a row routed to the first join stage from its other side (not from an operator
#: call); a later stage's are below ``SIDE_ROWS_AFTER`` (:func:`side_rows_of`), far below any
#: stage bucket's number (:func:`~krishiv_py.stateful.stage.bucket_base`).
SIDE_ROWS = -2
SIDE_ROWS_AFTER = -(2**30)


def side_rows_of(level: int) -> int:
    """The ``BUCKET`` that marks the rows of the join stage ``level``'s other side."""
    return SIDE_ROWS if level == 0 else SIDE_ROWS_AFTER - level


def route_side(
    spec: OperatorSpec, batches: Iterable[pa.RecordBatch], *, level: int = 0
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: the other side of the join stage ``level``, its rows as one stream
    per stage bucket."""
    then = stage.levels(spec.then)[level]
    for batch in batches:
        if not batch.num_rows:
            continue
        routed = stage.side_rows(then, pa.Table.from_batches([batch]))
        yield pa.RecordBatch.from_pydict(
            {
                BUCKET: pa.array([side_rows_of(level)] * len(routed), pa.int32()),
                PAYLOAD: pa.array([blob for _, blob in routed], pa.binary()),
                ROUTE: pa.array([r for r, _ in routed], pa.int32()),
            }
        )


def _stage_payload(
    then: StageSpec,
    bucket: int,
    out: kernel.StepOutput,
    state: stage.StageState,
    due: tuple[int, int],
    watermark: int | None,
    late: pa.Table,
    state_bytes: int,
) -> bytes:
    """A stage bucket's payload: its results, a join stage's other side's late rows, its statistics.

    The statistics' ``bucket`` is negative; its event counts are those of a
    join stage's other side (the rows handed on were counted where they came in).
    """
    rows = then.kernel.state_rows(state.kernel) if state.kernel is not None else 0
    values = dict.fromkeys(STAT_NAMES, 0)
    values.update(
        bucket=bucket,
        on_time=out.on_time,
        mildly_late=out.mildly_late,
        very_late=len(out.very_late),
        future=out.future,
        invalid=len(out.invalid),
        emitted=out.emitted,
        retracted=out.retracted,
        state_windows=rows,
        state_bytes=state_bytes,
        next_due_ms=due[0],
        next_interval_ms=due[1],
        expired=out.expired,
        arith=out.arithmetic_errors,
        watermark_ms=NO_WATERMARK if watermark is None else watermark,
    )
    values.update(dict.fromkeys(TIMING_NAMES, 0))
    stats = pa.table({name: pa.array([v], pa.int64()) for name, v in values.items()})
    return framed([out.results, late, stats])


# --- input ------------------------------------------------------------------------------------

#: A packed value that holds no rows but the highest event time (µs, a little-endian int64 after
#: this prefix per source of :attr:`OperatorSpec.fire_lags`, :data:`NO_TIME` for none) of a map
#: task's rows: every map task sends one to every bucket when the operator fires ahead (an Arrow
#: IPC stream never starts with these bytes).
HIGHEST = b"krishiv.highest:"
#: A source without a row with a time in a :data:`HIGHEST` value.
NO_TIME = -(2**63)
#: A map task packs its rows once this many have arrived (and at its end): the packed
#: values stay far below Arrow's 2 GiB per binary array.
PACK_ROWS = 1 << 18


#: What a map task knows of its micro-batch's watermark: ``(True, ms)``, ``(True, None)``
#: (no watermark yet) or ``(False, None)`` (unknown: its rows are not merged).
MapWatermark = tuple[bool, int | None]
#: Schema metadata of a stream of merged partials: the watermark they were merged under
#: (``none``: no watermark yet) and the delay histogram counts of their rows (little-endian
#: int64s).
MERGED_UNDER, MERGED_DELAYS = b"krishiv.merged_under", b"krishiv.merged_delays"
#: With an automatic lag, on one merged stream of a map task: the event times (ms) of every row
#: the task merged, per source: its ``n`` (source, time) pairs as ``[n, sources..., times...,
#: counts...]`` (little-endian int64s). The driver folds every row's time into the lag.
MERGED_TIMES = b"krishiv.merged_times"


def pack_rows(
    spec: OperatorSpec,
    batches: Iterable[pa.RecordBatch],
    *,
    merge_under: Callable[[], MapWatermark] | None = None,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: a map task's encoded rows as one Arrow IPC stream per key bucket.

    Yields ``(__kp_bucket, __kp_packed)`` rows (:data:`~krishiv_py.names.PACKED_DDL`);
    each stream holds the bucket's rows decoded (:func:`decode_encoded`).
    ``merge_under`` tells the micro-batch's watermark (read once, when the
    first rows arrive); when it is known and the windows allow it, on-time
    rows are merged per key and pane into a second stream per bucket.
    """
    held: list[pa.RecordBatch] = []
    count = 0
    known: MapWatermark | None = None
    highest: tuple[int | None, ...] = (None,) * len(spec.fire_lags) if spec.fires_ahead else ()
    for b in batches:
        if b.num_rows:
            held.append(b)
            count += b.num_rows
            if highest:
                highest = _highest(spec, b, highest)
        if count >= PACK_ROWS:
            known = known or _merging(spec, merge_under)
            yield _pack(spec, held, known)
            held, count = [], 0
    if count:
        yield _pack(spec, held, known or _merging(spec, merge_under))
    if any(h is not None for h in highest):  # every bucket learns the highest times: each fires
        # what they make due
        marker = HIGHEST + struct.pack(f"<{len(highest)}q", *(NO_TIME if h is None else h for h in highest))
        yield pa.RecordBatch.from_pydict(
            {
                BUCKET: pa.array(range(spec.buckets), pa.int32()),
                PACKED: pa.array([marker] * spec.buckets, pa.binary()),
            }
        )


def _highest(
    spec: OperatorSpec, batch: pa.RecordBatch, before: tuple[int | None, ...]
) -> tuple[int | None, ...]:
    """The highest event time (µs) of ``batch``'s rows per source (one, or a join's sides) and ``before``."""
    times = batch.column(batch.schema.get_field_index(TS_VALUE))
    if len(before) == 1:
        values = [pc.max(times).as_py()]
    else:
        side = batch.column(batch.schema.get_field_index(_side_column(spec)))
        left = np.asarray(pc.equal(side, pa.scalar("left")).fill_null(False), np.bool_)
        values = [pc.max(times.filter(pa.array(mask))).as_py() for mask in (left, ~left)]
    return _higher(before, [None if v is None else int(v) for v in values])


def _higher(before: tuple[int | None, ...], values: Iterable[int | None]) -> tuple[int | None, ...]:
    """Per source, the higher of ``before`` and ``values`` (None: no time yet)."""
    pairs = zip(values, before, strict=True)
    return tuple(b if v is None else v if b is None else max(b, v) for v, b in pairs)


def _side_column(spec: OperatorSpec) -> str:
    """The packer's input column of a join's side."""
    return next(c.value for c in spec.columns if c.name == JOIN_SIDE)


def _merging(spec: OperatorSpec, merge_under: Callable[[], MapWatermark] | None) -> MapWatermark:
    if merge_under is None or not spec.kernel.mergeable:
        return False, None
    return merge_under()


def _pack(spec: OperatorSpec, batches: list[pa.RecordBatch], under: MapWatermark) -> pa.RecordBatch:
    table = pa.Table.from_batches(batches)
    buckets = table.column(BUCKET).to_numpy()
    rows = decode_encoded(spec, table)
    known, watermark = under
    if not known or not spec.kernel.mergeable:
        out_buckets, blobs = _by_bucket(rows, buckets)
    else:
        # The bucket rides along as a key: it is a function of the keys, so the groups are the same.
        bucketed = rows.append_column(BUCKET, pa.array(buckets))
        rest, merged = spec.kernel.premerge(bucketed, watermark, by=(BUCKET,))
        out_buckets, blobs = _by_bucket(rest.drop_columns([BUCKET]), rest.column(BUCKET).to_numpy())
        if merged is not None:
            delays = _merged_delays(spec, rows, buckets, watermark)
            merged_buckets = merged.column(BUCKET).to_numpy()
            times = _merged_times(spec, rows, watermark)
            more_buckets, more = _by_bucket(
                merged.drop_columns([BUCKET]), merged_buckets, watermark, delays, times
            )
            out_buckets = np.concatenate([out_buckets, more_buckets])
            blobs += more
    return pa.RecordBatch.from_pydict(
        {BUCKET: pa.array(out_buckets, pa.int32()), PACKED: pa.array(blobs, pa.binary())}
    )


def _by_bucket(
    rows: pa.Table,
    buckets: np.ndarray,
    merged_under: int | None = None,
    delays: dict[int, np.ndarray] | None = None,
    times: bytes | None = None,
) -> tuple[np.ndarray, list[bytes]]:
    """One Arrow IPC stream of ``rows`` per bucket; with ``delays``, marked as merged partials
    (``times``: the merged rows' event times, :data:`MERGED_TIMES`, on the first stream)."""
    if not len(buckets):
        return np.zeros(0, np.int32), []
    order = np.argsort(buckets, kind="stable")
    sorted_buckets = buckets[order]
    firsts = np.flatnonzero(np.concatenate([[True], sorted_buckets[1:] != sorted_buckets[:-1]]))
    bounds = np.append(firsts, len(order))
    blobs: list[bytes] = []
    for bucket, (lo, hi) in zip(
        sorted_buckets[firsts].tolist(), itertools.pairwise(bounds.tolist()), strict=True
    ):
        part = rows.take(arrow(order[lo:hi]))
        if delays is not None:
            counts = delays.get(int(bucket), np.zeros(0, np.int64))
            meta = {
                MERGED_UNDER: b"none" if merged_under is None else str(merged_under).encode(),
                MERGED_DELAYS: np.asarray(counts, "<i8").tobytes(),
            }
            if times is not None and not blobs:
                meta[MERGED_TIMES] = times
            part = part.replace_schema_metadata(meta)
        blobs.append(ipc_bytes(part))
    return sorted_buckets[firsts].astype(np.int32), blobs


def _merged_delays(
    spec: OperatorSpec, rows: pa.Table, buckets: np.ndarray, watermark: int | None
) -> dict[int, np.ndarray]:
    """Per bucket, the delay histogram counts of its merged rows (the profile the operator keeps)."""
    if spec.profile_lag_ms is None or watermark is None or not spec.kernel.mergeable:
        return {}
    ts_col = rows.column(BATCH_TS).combine_chunks()
    merged = spec.kernel.on_time(ts_col, watermark)
    ts = np.asarray(ts_col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)[merged]
    slots = _delay_slots(ts, watermark, spec.profile_lag_ms)
    width = int(slots.max(initial=0)) + 1
    owners = buckets[merged].astype(np.int64)
    counts = np.bincount(owners * width + slots, minlength=(int(owners.max(initial=0)) + 1) * width)
    table = counts.reshape(-1, width)
    return {int(b): table[int(b)] for b in np.unique(owners)}


def _merged_times(spec: OperatorSpec, rows: pa.Table, watermark: int | None) -> bytes | None:
    """With an automatic lag, the event times of the rows the map task merged (:data:`MERGED_TIMES`)."""
    if spec.auto is None:
        return None
    ts_col = rows.column(BATCH_TS).combine_chunks()
    merged = spec.kernel.on_time(ts_col, cast(int, watermark))  # (None: every valid row merged)
    sources, times, counts = _time_counts(rows, merged)
    return np.concatenate([[len(times)], sources, times, counts]).astype("<i8").tobytes()


def decode_encoded(spec: OperatorSpec, table: pa.Table) -> pa.Table:
    """The rows of ``table`` (as SQL hands them to the packer) by name, plus ``__kp_ts``/``__kp_seq``."""
    cols: dict[str, pa.Array[Any]] = {c.name: _exact(table.column(c.value), c.type) for c in spec.columns}
    cols[BATCH_TS] = _exact(table.column(TS_VALUE), pa.int64())
    cols[SEQ] = _exact(table.column(SEQ), pa.int64())
    return pa.table(cols)


def _exact(column: pa.ChunkedArray[Any], to: pa.DataType) -> pa.Array[Any]:
    """``column`` as one array of type ``to`` (a timestamp's zone is metadata: the values stay)."""
    one = column.combine_chunks()
    return one if one.type == to else one.cast(to)


@attrs.frozen(kw_only=True)
class BucketInput:
    """What one bucket call receives: its rows, and partials its map tasks merged."""

    #: The rows, plus ``__kp_ts``/``__kp_seq`` (none for a tick).
    rows: pa.Table
    #: Merged on-time rows (:func:`~krishiv_py.stateful.premerge.premerge`), or None.
    merged: pa.Table | None = None
    #: The watermarks the partials were merged under.
    merged_under: frozenset[int | None] = frozenset()
    #: The delay histogram counts of the merged rows.
    merged_delays: np.ndarray = attrs.field(factory=lambda: np.zeros(0, np.int64))
    #: With an automatic lag, the merged rows' event times: sources, times (ms), counts.
    merged_times: tuple[np.ndarray, np.ndarray, np.ndarray] = attrs.field(
        factory=lambda: (np.zeros(0, np.int64),) * 3
    )
    #: When the operator fires ahead: the highest event time (µs) of the micro-batch's rows per
    #: source, from every map task that had any (None: none; empty: no map task sent any).
    highest_us: tuple[int | None, ...] = ()

    @property
    def merged_rows(self) -> int:
        """How many rows the partials hold."""
        return 0 if self.merged is None else int(np.sum(self.merged.column(MERGED_ROWS).to_numpy()))

    def check_watermark(self, watermark: int | None) -> None:
        """Partials merged under another watermark than the step's would be misclassified: refuse."""
        wrong = self.merged_under - {watermark}
        if wrong:
            raise JobError(
                f"krishiv's window operator runs a micro-batch at watermark {watermark}, but its input "
                f"rows were merged under watermark {sorted(wrong, key=str)[0]}; the results of this "
                "micro-batch would be wrong, so it stops. Start the job again on its checkpoint."
            )


def decode_input(spec: OperatorSpec, frames: list[pd.DataFrame]) -> BucketInput:
    """A bucket's packed rows (tick rows have none) and merged partials."""
    return decode_blobs(spec, [b for f in frames if len(f) for b in f[PACKED].tolist() if b is not None])


def decode_blobs(spec: OperatorSpec, blobs: list[Any]) -> BucketInput:
    """A bucket's packed rows and merged partials from its packed values (ticks have none)."""
    rows: list[pa.Table] = []
    merged: list[pa.Table] = []
    under: set[int | None] = set()
    delays = np.zeros(0, np.int64)
    times: list[np.ndarray] = []
    highest: tuple[int | None, ...] = ()
    for blob in blobs:
        raw = bytes(blob)
        if raw.startswith(HIGHEST):
            sent = struct.unpack_from(f"<{(len(raw) - len(HIGHEST)) // 8}q", raw, len(HIGHEST))
            highest = _higher(highest or (None,) * len(sent), (None if v == NO_TIME else v for v in sent))
            continue
        table = ipc_table(raw)
        meta = table.schema.metadata or {}
        if MERGED_UNDER not in meta:
            rows.append(table)
            continue
        mark = meta[MERGED_UNDER].decode()
        under.add(None if mark == "none" else int(mark))
        counts = np.frombuffer(meta[MERGED_DELAYS], "<i8").astype(np.int64)
        delays = _added(delays, counts)
        if MERGED_TIMES in meta:
            times.append(np.frombuffer(meta[MERGED_TIMES], "<i8").astype(np.int64))
        merged.append(table.replace_schema_metadata(None))
    return BucketInput(
        rows=_empty_input(spec) if not rows else rows[0] if len(rows) == 1 else pa.concat_tables(rows),
        merged=None if not merged else merged[0] if len(merged) == 1 else pa.concat_tables(merged),
        merged_under=frozenset(under),
        merged_delays=delays,
        merged_times=_joined_times(times),
        highest_us=highest,
    )


def _joined_times(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (sources, times, counts) of several :data:`MERGED_TIMES` arrays, one after the other."""
    cols: list[list[np.ndarray]] = [[np.zeros(0, np.int64)] for _ in range(3)]
    for part in parts:
        n = int(part[0])
        for i in range(3):
            cols[i].append(part[1 + i * n : 1 + (i + 1) * n])
    sources, times, counts = (np.concatenate(c) for c in cols)
    return sources, times, counts


def _added(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two histograms' counts added (the shorter one padded with zeros)."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    out[: len(b)] += b
    return out


def _empty_input(spec: OperatorSpec) -> pa.Table:
    fields = [*spec.input_schema, pa.field(BATCH_TS, pa.int64()), pa.field(SEQ, pa.int64())]
    return pa.schema(fields).empty_table()


# --- output ------------------------------------------------------------------------------------


def encode_payload(
    spec: OperatorSpec,
    bucket: int,
    batch: pa.Table,
    out: kernel.StepOutput,
    held: WholeState | KeyedState,
    watermark: int | None,
    state_bytes: int,
    *,
    stat_watermark: int | None = None,
    timings: tuple[int, ...] = (0, 0, 0, 0, 0),
    merged_delays: np.ndarray | None = None,
    merged_rows: int = 0,
    merged_times: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    merged: pa.Table | None = None,
) -> bytes:
    encode_started = time.perf_counter_ns()
    late = _late_rows(spec, batch, out, watermark)
    due, interval = held.next_due()
    stats = pa.table(
        {
            name: pa.array([value], pa.int64())
            for name, value in zip(
                STAT_NAMES,
                (
                    bucket,
                    out.on_time,
                    out.mildly_late,
                    len(out.very_late),
                    out.future,
                    len(out.invalid),
                    out.emitted,
                    out.retracted,
                    held.state_rows(),
                    state_bytes,
                    due,
                    interval,
                    out.expired,
                    out.arithmetic_errors,
                    NO_WATERMARK if stat_watermark is None else stat_watermark,
                    merged_rows,
                ),
                strict=True,
            )
        }
    )
    results = ipc_bytes(out.results)
    encode_us = (time.perf_counter_ns() - encode_started) // 1000  # all but the small tables after it
    for name, value in zip(TIMING_NAMES, (*timings, encode_us), strict=True):
        stats = stats.append_column(name, pa.array([value], pa.int64()))
    merged_delays = np.zeros(0, np.int64) if merged_delays is None else merged_delays
    if spec.profile_lag_ms is not None and (batch.num_rows or len(merged_delays)) and watermark is not None:
        counts = pa.array(_added(delay_counts(batch, watermark, spec.profile_lag_ms), merged_delays))
        stats = stats.append_column(DELAY_COUNTS, pa.ListArray.from_arrays([0, len(counts)], counts))
    if spec.auto is not None:  # the rows' event times: its own rows', and those merged before
        sources, times, counts = _time_counts(batch)
        if merged_times is not None and len(merged_times[0]):
            own = (sources, times, counts)
            sources, times, counts = (np.concatenate(p) for p in zip(own, merged_times, strict=True))
        for name, values in ((AUTO_SOURCES, sources), (AUTO_TIMES, times), (AUTO_COUNTS, counts)):
            stats = stats.append_column(name, pa.ListArray.from_arrays([0, len(values)], pa.array(values)))
    keys, counts = hot_keys(spec.kernel.keys, batch, merged)
    if keys:
        stats = stats.append_column(HOT_KEYS, pa.ListArray.from_arrays([0, len(keys)], pa.array(keys)))
        stats = stats.append_column(HOT_COUNTS, pa.ListArray.from_arrays([0, len(counts)], pa.array(counts)))
    tables = [late, stats] + ([out.closed] if out.closed is not None else [])
    return struct.pack("<Q", len(results)) + results + framed(tables)


def hot_keys(
    keys: tuple[str, ...], batch: pa.Table, merged: pa.Table | None, top: int = HOT_PER_BUCKET
) -> tuple[list[str], list[int]]:
    """The ``top`` keys of ``batch`` and ``merged`` by rows received (a merged partial counts the
    rows it holds), as their values joined by ``", "``, and their rows; most first.

    Of a table of more than :data:`HOT_SAMPLE` rows, every n-th row is counted, n times: an
    estimate that names the keys that take a large share of the rows at a fraction of the cost.

    >>> rows = pa.table({"k": ["a", "b", "a", "a"], "x": [1, 2, 3, 4]})
    >>> hot_keys(("k",), rows, pa.table({"k": ["b"], "__kp_rows": [5]}), top=1)
    (['b'], [6])
    """
    if not keys:
        return [], []
    parts = []
    for table, weight in ((batch, None), (merged, MERGED_ROWS)):
        if table is None or not table.num_rows or not set(keys) <= set(table.column_names):
            continue
        step = -(-table.num_rows // HOT_SAMPLE)
        if step > 1:
            table = table.take(np.arange(0, table.num_rows, step))
        ones = pa.array(np.full(table.num_rows, step, np.int64))
        n = pc.multiply(table.column(weight).cast(pa.int64()), step) if weight is not None else ones
        try:
            columns = {f"k{i}": table.column(k).cast(pa.string()) for i, k in enumerate(keys)}
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return [], []  # (a key of a type without a text form: no report)
        parts.append(table_of({**columns, "n": n.cast(pa.int64())}))
    if not parts:
        return [], []
    rows = pa.concat_tables(parts)
    names = [f"k{i}" for i in range(len(keys))]
    summed = rows.group_by(names).aggregate([("n", "sum")]).sort_by([("n_sum", "descending")]).slice(0, top)
    labels = [
        ", ".join("null" if v is None else v for v in values)
        for values in zip(*(summed.column(c).to_pylist() for c in names), strict=True)
    ]
    return labels, [int(c or 0) for c in summed.column("n_sum").to_pylist()]


def delay_counts(batch: pa.Table, watermark: int | None, lag_ms: int) -> np.ndarray:
    """The histogram counts (:class:`~krishiv_py.advice.DelayHistogram`) of the batch's delays.

    A row's delay is how far it lies behind the highest event time the
    stream had reached by the previous micro-batch: ``watermark + lag - ts``
    (0 when ahead). Rows of a batch without a watermark yet, and rows
    without a valid event time, are not counted.
    """
    if watermark is None or not batch.num_rows:
        return np.zeros(0, np.int64)
    ts = batch.column(BATCH_TS).combine_chunks()
    us = np.asarray(ts.to_numpy(zero_copy_only=False))
    if ts.null_count:
        us = us[np.asarray(ts.is_valid().to_numpy(zero_copy_only=False), bool)].astype(np.int64)
    return np.bincount(_delay_slots(us, watermark, lag_ms)).astype(np.int64)


def _time_counts(
    batch: pa.Table, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The valid event times in ms per source of the batch (of its ``rows``, a mask): the source
    index, the distinct values of each source and how many of its rows hold each (every row
    source 0 without a source column)."""
    ts = batch.column(BATCH_TS).combine_chunks()
    keep = np.asarray(ts.is_valid().to_numpy(zero_copy_only=False), bool)
    if rows is not None:
        keep &= rows
    ms = np.floor_divide(np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False), np.int64)[keep], 1000)
    if AUTO_SOURCE in batch.column_names:
        src = np.asarray(batch.column(AUTO_SOURCE).combine_chunks().fill_null(0).to_numpy(), np.int64)[keep]
    else:
        src = np.zeros(len(ms), np.int64)
    return counted_pairs(src, ms)


def counted_pairs(src: np.ndarray, ms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(src[i], ms[i])`` pairs (sorted) and how often each occurs: one key per pair
    (``src * span + ms - lowest``), counted by ``bincount`` when the keys are dense, else sorted.

    >>> counted_pairs(np.array([1, 0, 1, 1]), np.array([7, 9, 5, 7]))
    (array([0, 1, 1]), array([9, 5, 7]), array([1, 1, 2]))
    """
    if not len(ms):
        return (np.zeros(0, np.int64),) * 3
    lowest = int(ms.min())
    span = int(ms.max()) - lowest + 1
    key = src * span + (ms - lowest)
    if (int(src.max()) + 1) * span <= 4 * len(ms) + 4_096:  # dense: one pass
        counts = np.bincount(key)
        keys = np.flatnonzero(counts)
        counts = counts[keys]
    else:
        keys, counts = np.unique(key, return_counts=True)
    return keys // span, keys % span + lowest, counts.astype(np.int64)


def _delay_slots(ts_us: np.ndarray, watermark: int, lag_ms: int) -> np.ndarray:
    """Each event time's histogram bucket: its delay behind ``watermark + lag_ms`` (0 when ahead)."""
    return bucket_of(np.maximum((watermark + lag_ms) - np.floor_divide(ts_us, 1000), 0))


def _late_rows(
    spec: OperatorSpec, batch: pa.Table, out: kernel.StepOutput, watermark: int | None
) -> pa.Table:
    names = [c.name for c in spec.row_columns]
    pieces = []
    for label, idx in (("invalid", out.invalid), ("very_late", out.very_late)):
        if len(idx):
            # Column by column: without a late-event handler the operator may read no input column.
            take = pa.array(idx)
            cols: dict[str, pa.Array[Any]] = {c: batch.column(c).combine_chunks().take(take) for c in names}
            cols[LATE_CLASS] = pa.array([label] * len(idx), pa.string())
            cols[LATE_WM] = pa.array([watermark] * len(idx), pa.int64())
            pieces.append(pa.table(cols))
    if not pieces:
        return spec.sent_late_schema.empty_table()
    return pa.concat_tables(pieces)


@attrs.frozen(kw_only=True)
class Payloads:
    """The decoded output of one micro-batch: results, late rows, per-bucket statistics."""

    results: pa.Table
    late: pa.Table
    stats: pa.Table
    #: With pane events: the windows evicted, with their final aggregates.
    closed: pa.Table | None = None


def decode_payloads(blobs: Iterable[bytes]) -> Payloads | None:
    """Concatenate the payloads of one micro-batch (``None`` when there are none)."""
    results, late, stats, closed = [], [], [], []
    for blob in blobs:
        tables = unframed(blob)
        results.append(tables[0])
        late.append(tables[1])
        stats.append(tables[2])
        closed += tables[3:]
    if not stats:
        return None
    return Payloads(
        results=pa.concat_tables(results, promote_options="permissive"),
        late=pa.concat_tables(late, promote_options="permissive"),
        stats=pa.concat_tables(stats, promote_options="default"),  # delay counts: some buckets only
        closed=pa.concat_tables(closed, promote_options="permissive") if closed else None,
    )


def to_output(results: pa.Table, schema: pa.Schema) -> pa.Table:
    """Result rows in the plan's output types (window bounds from µs to UTC timestamps)."""
    cols = []
    for field in schema:
        col = results.column(field.name)
        if field.name in (WINDOW_START, WINDOW_END):
            col = pc.cast(col, pa.timestamp("us")).cast(field.type) if col.type != field.type else col
        elif col.type != field.type:
            col = col.cast(field.type)
        cols.append(col)
    return pa.table(cols, schema=schema)
