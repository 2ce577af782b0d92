"""Restarting past a micro-batch that user code fails on every time: ``start(quarantine_dir=...)``."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.runtime.quarantine import BATCH_COLUMN, ERROR_COLUMN

SCHEMA = "k string, t bigint, v bigint"
#: The micro-batch that emits window [0, 10), by lowering: see `events`.
POISON_BATCH = {"native": 3, "stateful": 1}


def durable(shared: kp.Session, state_dir: Path) -> kp.Session:
    """A session keeping its state under ``state_dir`` on the shared Spark (as a new process would)."""
    return kp.Session(
        shared.spark, owns_spark=False, state_dir=str(state_dir), durability="dev-local", master="local[*]"
    )


def events(step: int) -> list[dict[str, Any]]:
    """Step ``step`` opens window ``[10 step, 10 step + 10)`` for keys a and b (closing the one before).

    Natively each send runs two micro-batches (its rows, then the watermark's move), so
    window ``[0, 10)`` comes out of batch 3; the stateful operator fires it in the micro-batch
    of the rows that move the watermark, batch 1.
    """
    return [{"k": "a", "t": 10 * step + 1, "v": step}, {"k": "b", "t": 10 * step + 2, "v": 10 * step}]


def expected(steps: int) -> set[tuple[str, int, int, int]]:
    return {(r["k"], r["t"] // 10 * 10, 1, r["v"]) for s in range(steps) for r in events(s)}


def windows(rows: list[dict[str, Any]]) -> set[tuple[str, int, int, int]]:
    return {(r["k"], int(r["window_start"].timestamp() * 1000), r["n"], r["sum_v"]) for r in rows}


class Deliver:
    """A sink function that fails on batch ``poison`` every time; keeps what it delivered, by batch."""

    def __init__(self, poison: int) -> None:
        self.poison = poison
        self.delivered: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, table: pa.Table, batch_id: int) -> None:
        if batch_id == self.poison:
            raise ValueError("downstream rejects this batch")
        self.delivered[batch_id] = table.to_pylist()  # a batch run again replaces its rows


class RejectLate:
    """A late-event handler that fails on any event at t=3, every time."""

    def handle(self, late: pa.Table) -> None:
        if 3 in late.column("t").to_pylist():
            raise RuntimeError("cannot route t=3")


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_job_failing_on_one_batch_restarts_past_it(
    session: kp.Session, tmp_path: Path, lowering: str
) -> None:
    state = durable(session, tmp_path / "state")
    stream, sender = state.memory_stream(SCHEMA, name="events")
    windowed = stream.watermark("t", 0).key_by("k").tumbling_window(10)
    if lowering == "stateful":  # a late-event handler runs on the stateful lowering
        windowed = windowed.with_late_event_handler(RejectLate())
    pipeline = windowed.agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")))
    poison = POISON_BATCH[lowering]
    sink = Deliver(poison)
    job = pipeline.start(kp.ForeachBatchSink(sink), name="per-10")
    assert job.lowering == lowering
    sender.send(events(0))
    job.process_all_available()
    sender.send(events(1))  # closes [0, 10)
    with pytest.raises(kp.JobError, match="quarantine_dir=") as failed:
        job.process_all_available()
    assert f"raised on batch {poison}: ValueError: downstream rejects this batch" in str(failed.value)
    job.stop()

    quarantine = tmp_path / "quarantine"
    job = pipeline.start(kp.ForeachBatchSink(sink), name="per-10", quarantine_dir=str(quarantine))
    try:
        late = [{"k": "a", "t": 3, "v": 0}] if lowering == "stateful" else []  # [0, 10) has closed
        sender.send(events(2) + late)
        sender.close()
        assert job.await_termination(timeout_s=120)
        metrics = job.metrics()
    finally:
        job.stop()

    set_aside = pq.read_table(quarantine / f"batch-{poison:012d}-sink.parquet").to_pylist()
    assert {r[BATCH_COLUMN] for r in set_aside} == {poison}
    assert {r[ERROR_COLUMN] for r in set_aside} == {"ValueError: downstream rejects this batch"}
    delivered = [r for rows in sink.delivered.values() for r in rows]
    assert windows(set_aside) == {w for w in expected(3) if w[1] == 0}  # window [0, 10)
    assert windows(delivered) == expected(3) - windows(set_aside)  # every other window, once
    assert len(delivered) + len(set_aside) == len(expected(3))
    files = sorted(p.name for p in quarantine.iterdir())
    if lowering == "native":
        assert files == [f"batch-{poison:012d}-sink.parquet"]
        assert (metrics.quarantined_batches, metrics.quarantined_rows) == (1, 2)
        return
    late_file = next(name for name in files if name.endswith("-late-events.parquet"))
    late_rows = pq.read_table(quarantine / late_file).to_pylist()
    assert [(r["k"], r["t"], r[ERROR_COLUMN]) for r in late_rows] == [
        ("a", 3, "RuntimeError: cannot route t=3")
    ]
    assert (metrics.quarantined_batches, metrics.quarantined_rows) == (2, 3)
    assert metrics.very_late_events == 1


def test_quarantine_dir_is_checked(session: kp.Session, tmp_path: Path) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    windowed = stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))
    for bad in (42, "", "s3a://bucket/quarantine"):
        with pytest.raises(kp.PlanError, match="quarantine_dir must be"):
            windowed.start(quarantine_dir=bad)  # type: ignore[arg-type]
    bounded = session.from_records([{"k": "a", "t": 1, "v": 1}], SCHEMA)
    with pytest.raises(kp.PlanError, match="quarantine_dir= is for streaming jobs"):
        bounded.start(quarantine_dir=str(tmp_path / "q"))


def test_without_a_quarantine_a_failing_sink_still_fails_the_job_and_says_how_to_go_on(
    session: kp.Session,
) -> None:
    calls: defaultdict[int, int] = defaultdict(int)

    def boom(table: pa.Table, batch_id: int) -> None:
        calls[batch_id] += 1
        if table.num_rows:
            raise KeyError("no route")

    stream, sender = session.memory_stream(SCHEMA)
    job = stream.start(kp.ForeachBatchSink(boom))  # stateless: each send is one batch
    sender.send(events(0))
    with pytest.raises(kp.JobError, match=r"quarantine_dir=<a directory>") as info:
        job.process_all_available()
    assert "the ForeachBatchSink function raised on batch 0: KeyError: 'no route'" in str(info.value)
    assert job.metrics().quarantined_batches == 0
    job.stop()


def test_a_raising_pane_callback_sets_its_panes_aside(session: kp.Session, tmp_path: Path) -> None:
    def boom(event: kp.PaneEvent) -> None:
        raise RuntimeError(f"no thanks: {event.window_start_ms}")

    stream, sender = session.memory_stream(SCHEMA)
    panes = stream.watermark("t", 0).time_interval_window(10, 5, 0).on_trigger(boom)
    job = panes.agg(kp.count(kp.col("*")).alias("n")).start(quarantine_dir=str(tmp_path))
    try:
        sender.send([{"k": "a", "t": 7, "v": 1}])
        sender.advance_watermark(20)
        job.process_all_available()
        results = [(int(r["window_start"].timestamp() * 1000), r["n"]) for r in job.results().to_pylist()]
        metrics = job.metrics()
    finally:
        job.stop()
    assert job.state != "failed"
    (name,) = (p.name for p in tmp_path.iterdir())
    assert name.endswith("-panes.parquet")
    set_aside = pq.read_table(tmp_path / name).to_pylist()
    assert [(int(r["window_start"].timestamp() * 1000), r["n"], r["__kp_pane"]) for r in set_aside] == [
        (ws, n, "fired")
        for ws, n in results  # the sink still got them: only the callback failed
    ]
    assert {r[ERROR_COLUMN] for r in set_aside} == {"RuntimeError: no thanks: 0"}
    assert (metrics.quarantined_batches, metrics.quarantined_rows) == (1, len(results))
