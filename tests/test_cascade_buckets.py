"""A cascade's second window waits for the first window's results of every key bucket.

The stateful operator runs the first window once per key bucket and
micro-batch; a bucket runs only when it has rows or a tick. A bucket whose
window is due may miss a micro-batch (its tick lands in a later one, while
another bucket's rows run at the new watermark), so the second window on
the driver must not run ahead of it: the result that bucket fires later
is on time upstream and must count downstream, as in :class:`CascadeModel`.

The first tests drive the real operator glue bucket by bucket without Spark
(:class:`FakeOperator` plays Spark's part: it packs the rows per bucket,
calls :func:`~krishiv_py.stateful.operator.run_bucket` with a group state
and the micro-batch's watermark, and hands the payloads to the job's
:class:`~krishiv_py.runtime.collector.BatchCollector`); the last one delays a
tick of a real job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import krishiv_py as kp
from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.names import BUCKET, PACKED, PAYLOAD, SEQ, TS_VALUE, cascade_identity
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.planner.spark.recipe import SparkRecipe
from krishiv_py.planner.spark.stateful import with_buckets
from krishiv_py.runtime.collector import BatchCollector
from krishiv_py.runtime.stateful import StatefulJob, TickWriter
from krishiv_py.stateful import cascade as c
from krishiv_py.stateful import operator as op
from krishiv_py.stateful.aggregates import AggSpec as KernelAgg
from krishiv_py.testing import CascadeModel, assert_same_rows, model_for
from krishiv_py.testing.steps import _placeholder

SCHEMA = "k string, t bigint"


def tens_into_hundreds(s: kp.Stream) -> kp.Stream:
    """Counts per key and 10 ms (kept 5 ms for corrections), then totals over all keys per 100 ms."""
    tens = (
        s.watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .allowed_lateness(5)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    return (
        tens.tumbling_window(100)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("n")).alias("total"), kp.count(kp.col("*")).alias("windows"))
    )


def _model() -> CascadeModel:
    model = model_for(tens_into_hundreds(_placeholder(SCHEMA)))
    assert isinstance(model, CascadeModel)
    return model


class _GroupState:
    """What ``applyInPandasWithState`` hands a bucket call: its state and the watermark."""

    def __init__(self, blob: bytes | None, spark_watermark_ms: int) -> None:
        self.blob = blob
        self._watermark = spark_watermark_ms

    @property
    def exists(self) -> bool:
        return self.blob is not None

    @property
    def get(self) -> tuple[bytes]:
        assert self.blob is not None
        return (self.blob,)

    def update(self, value: tuple[bytes]) -> None:
        self.blob = value[0]

    def remove(self) -> None:
        self.blob = None

    def getCurrentWatermarkMs(self) -> int:
        return self._watermark


class _Writer:
    """The job's sink: every micro-batch's rows, by batch id."""

    user_code = None

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}

    def write(self, table: pa.Table, batch_id: int) -> None:
        self.batches[batch_id] = table.to_pylist()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for batch in self.batches.values() for row in batch]


class FakeOperator:
    """Spark's part of a stateful job, one micro-batch at a time, without Spark.

    ``bucket_of`` says which key bucket a key's rows go to. The watermark of
    a micro-batch is the one computed after the previous one (SPEC 3.4):
    the largest event time seen minus the lag (0 here).
    """

    def __init__(
        self, recipe: SparkRecipe, bucket_of: dict[str, int], checkpoint: CheckpointLayout | None = None
    ) -> None:
        assert recipe.stateful is not None
        self.recipe = recipe
        self.spec = recipe.stateful.operator
        self.bucket_of = bucket_of
        self.checkpoint = checkpoint
        self.writer = _Writer()
        self.restart()
        self.states: dict[int, bytes] = {}
        self.watermark: int | None = None
        self.next_watermark: int | None = None
        self.batch_id = 0

    def restart(self) -> None:
        """A new driver: a new collector, the second window's state read back from the checkpoint."""
        self.collector = BatchCollector(
            self.recipe, self.writer, checkpoint=self.checkpoint, buckets=self.spec.buckets
        )

    def micro_batch(self, rows: Sequence[dict[str, Any]] = (), ticks: Iterable[int] = ()) -> None:
        """One micro-batch: ``rows`` in their buckets, one tick row per bucket in ``ticks``."""
        self.watermark = self.next_watermark
        packed = self._packed(rows)
        called = sorted({*self._buckets(packed), *ticks})
        spark_watermark = 0 if self.watermark is None else self.watermark + self.spec.shift_ms
        payloads = []
        for bucket in called:
            frames = [self._frame(packed, bucket), pd.DataFrame({BUCKET: [bucket], PACKED: [None]})]
            state = _GroupState(self.states.get(bucket), spark_watermark)
            for out in op.run_bucket(self.spec, (bucket,), frames, state):
                payloads.append(bytes(out[PAYLOAD].iloc[0]))
            if state.blob is None:
                self.states.pop(bucket, None)
            else:
                self.states[bucket] = state.blob
        decoded = op.decode_payloads(payloads)
        if decoded is not None:
            self.collector.accept(decoded, self.batch_id)
        self.batch_id += 1
        seen = [int(r["t"]) for r in rows]
        if seen:
            mark = max(seen)
            self.next_watermark = mark if self.next_watermark is None else max(self.next_watermark, mark)

    def close(self) -> None:
        """The source ends: its watermark goes to the end of time."""
        self.next_watermark = END_OF_TIME_MS

    def due(self) -> list[int]:
        """The buckets the job ticks once the watermark moved (``StatefulJob._maybe_tick``)."""
        wm = self.next_watermark
        assert wm is not None
        due = {b for b, s in self.collector.buckets.items() if s.state_windows and s.next_due_ms <= wm}
        due |= set(range(self.spec.buckets)) - set(self.collector.buckets)
        cascade_due = self.collector.next_due_ms()
        if cascade_due is not None and cascade_due <= wm:
            due.add(0)
        return sorted(due)

    def _packed(self, rows: Sequence[dict[str, Any]]) -> pa.Table:
        buckets = [self.bucket_of[r["k"]] for r in rows]
        encoded = pa.table(
            {
                BUCKET: pa.array(buckets, pa.int32()),
                self.spec.columns[0].value: pa.array([r["k"] for r in rows], pa.string()),
                TS_VALUE: pa.array([int(r["t"]) * 1000 for r in rows], pa.int64()),
                SEQ: pa.array(np.arange(len(rows), dtype=np.int64) + 1000 * self.batch_id),
            }
        )
        schema = pa.table({BUCKET: pa.array([], pa.int32()), PACKED: pa.array([], pa.binary())}).schema
        return pa.Table.from_batches(list(op.pack_rows(self.spec, encoded.to_batches())), schema)

    @staticmethod
    def _buckets(packed: pa.Table) -> set[int]:
        return {int(b) for b in packed.column(BUCKET).to_pylist() if b is not None}

    @staticmethod
    def _frame(packed: pa.Table, bucket: int) -> pd.DataFrame:
        mine = packed.filter(pc.equal(packed.column(BUCKET), pa.scalar(bucket, pa.int32())))
        frame: pd.DataFrame = mine.to_pandas()
        return frame


def _operator(bucket_of: dict[str, int], checkpoint: CheckpointLayout | None = None) -> FakeOperator:
    recipe = tens_into_hundreds(_placeholder(SCHEMA)).lower(lowering="stateful")
    return FakeOperator(with_buckets(recipe, 2), bucket_of, checkpoint)


def _row(k: str, t: int) -> dict[str, Any]:
    return {"k": k, "t": t}


# Keys a and b in different buckets. Both fill the ten [90, 100); at watermark 105 both are due,
# and the hundred [0, 100) fires (total 2) and is deleted (100 + 5 <= 105).
STEPS: list[list[dict[str, Any]]] = [[_row("a", 95), _row("b", 97)], [_row("a", 105)], [_row("a", 150)]]


def _model_results() -> list[dict[str, Any]]:
    model = _model()
    for rows in STEPS:
        model.send(rows)
    model.close()
    assert model.very_late_results == 0
    return model.results


def test_every_due_bucket_ticked_at_once_gives_the_model() -> None:
    ops = _operator({"a": 0, "b": 1})
    model = _model()
    for rows in STEPS:
        ops.micro_batch(rows)
        ops.micro_batch(ticks=ops.due())
        model.send(rows)
        assert_same_rows(ops.writer.rows, model.results)
    ops.close()
    ops.micro_batch(ticks=ops.due())
    model.close()
    assert_same_rows(ops.writer.rows, model.results)
    hundred = {"window_start": 0, "window_end": 100, "total": 2, "windows": 2, "kind": "emit"}
    assert hundred in model.results


def test_a_bucket_whose_tick_comes_a_micro_batch_late_still_counts_downstream() -> None:
    """Bucket 1's tick for watermark 105 misses the micro-batch that runs bucket 0 there."""
    ops = _operator({"a": 0, "b": 1})
    ops.micro_batch(STEPS[0])  # watermark None; then 97: nothing due
    ops.micro_batch(STEPS[1])  # watermark 97; then 105: both buckets' [90, 100) due
    assert ops.due() == [0, 1]
    ops.micro_batch(ticks=[0])  # watermark 105: bucket 0 fires a's [90, 100), b's tick is late
    ops.micro_batch(STEPS[2], ticks=[1])  # watermark 105: b's [90, 100) fires now
    ops.micro_batch(ticks=ops.due())  # watermark 150
    ops.close()
    ops.micro_batch(ticks=ops.due())
    assert_same_rows(ops.writer.rows, _model_results())


@pytest.mark.parametrize("late_bucket", [0, 1])
def test_the_second_window_stays_below_what_a_due_bucket_can_still_fire(late_bucket: int) -> None:
    """While a bucket's window ending at 100 waits for its tick, the second window stays at 99."""
    ops = _operator({"a": 0, "b": 1})
    ops.micro_batch(STEPS[0])
    ops.micro_batch(STEPS[1])
    ops.micro_batch(ticks=[1 - late_bucket])
    assert ops.writer.rows == []  # the hundred [0, 100) waits: a bucket can still send to it
    ops.micro_batch(ticks=[late_bucket])
    assert_same_rows(
        ops.writer.rows, [{"window_start": 0, "window_end": 100, "total": 2, "windows": 2, "kind": "emit"}]
    )


def test_a_restarted_job_holds_the_second_window_until_every_bucket_reported(tmp_path: Path) -> None:
    """After a restart, bucket 1's state is unknown until it runs: the second window waits for it."""
    ops = _operator({"a": 0, "b": 1}, CheckpointLayout(str(tmp_path / "job")))
    ops.micro_batch(STEPS[0])
    ops.micro_batch(STEPS[1])  # then watermark 105: both buckets due
    ops.restart()
    ops.micro_batch(STEPS[2])  # watermark 105, bucket 0 only (its rows): a's [90, 100) fires
    assert ops.writer.rows == []
    assert ops.due() == [0, 1]  # the job wakes the bucket that has not reported
    ops.micro_batch(ticks=ops.due())
    ops.close()
    ops.micro_batch(ticks=ops.due())
    assert_same_rows(ops.writer.rows, _model_results())


def test_a_watermark_lower_than_the_last_step_is_ignored() -> None:
    spec = c.CascadeSpec(
        keys=(),
        window=TumblingWindow(size_ms=100),
        aggs=(KernelAgg(name="total", func="sum", column="n", out_type=pa.int64(), in_type=pa.int64()),),
        lateness_ms=0,
        retracting=False,
        identity=1,
    )

    def changes(*ends: int) -> pa.Table:
        return pa.table(
            {
                cascade_identity(0): [str(e) for e in ends],
                c.EVENT_TIME: pa.array([e - 1 for e in ends], pa.int64()),
                c.DELETE: [False] * len(ends),
                "n": pa.array([1] * len(ends), pa.int64()),
            }
        )

    state, out = c.step(spec, None, changes(100), 100)
    assert out.results.to_pylist() == [{"window_start": 0, "window_end": 100, "total": 1}]
    state, out = c.step(spec, state, changes(150), 99)
    assert state.watermark_ms == 100 and not out.results.num_rows
    state, out = c.step(spec, state, changes(100), 120)  # a version of [0, 100) after its end: very late
    assert out.very_late == 1


class DelayedTick(TickWriter):
    """The job's tick writer, holding back the first tick of ``bucket`` until its next write."""

    def __init__(self, path: str, bucket: int) -> None:
        super().__init__(path)
        self.bucket = bucket
        self.held = self.delayed = False

    def write(self, buckets: Sequence[int]) -> None:
        woken = set(buckets)
        if self.held:
            woken.add(self.bucket)
            self.held = False
        elif not self.delayed and self.bucket in woken:
            woken.discard(self.bucket)
            self.held = self.delayed = True
        if woken:
            super().write(sorted(woken))


@pytest.mark.spark
def test_a_job_whose_tick_for_one_bucket_comes_late_gives_the_model(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = tens_into_hundreds(stream).start()
    try:
        assert isinstance(job, StatefulJob)
        # Two keys in different buckets (pmod(hash(k), buckets)); the second one's tick comes late.
        keys = session.spark.sql(
            f"SELECT k, CAST(pmod(hash(k), {job._buckets}) AS INT) AS b "
            "FROM VALUES ('a'), ('b'), ('c'), ('d'), ('e'), ('f'), ('g'), ('h') AS v(k)"
        ).collect()
        bucket_of = {str(r["k"]): int(r["b"]) for r in keys}
        late = next(k for k in bucket_of if bucket_of[k] != bucket_of["a"])
        job._ticks = DelayedTick(job._ticks.path, bucket_of[late])
        steps = [[{**r, "k": late} if r["k"] == "b" else r for r in rows] for rows in STEPS]
        got = []
        for rows in steps:
            sender.send(rows)
            job.process_all_available()
            got.append(job.results().to_pylist())
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert isinstance(job._ticks, DelayedTick) and job._ticks.delayed
        assert_same_rows(job.results(), _model_results())
        assert got[1] == []  # at watermark 105 the late bucket has not fired [90, 100): nothing yet
    finally:
        job.stop()
