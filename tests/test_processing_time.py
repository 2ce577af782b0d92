"""``tumbling_window(size, time="processing")`` (SPEC 3.14): windows timed by the wall clock.

A row's time is its micro-batch's start and a window fires when the clock
passes its end, with or without more input. Results depend on when rows
arrive, so the Spark tests check what holds whatever the timing: every row
is counted once, in a window of the given size that was open when its
micro-batch started, fired only after its end, and rows sent after a window
fired never join it. The kernel's rule is checked on a clock the test moves.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any, cast

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.planner.spark.choose import choose
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.processing_time import ProcessingTimeKernel
from krishiv_py.stateful.protocol import NOT_DUE
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.window_kernel import WindowKernel
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
BIDS = "bidder bigint, price bigint, t bigint"


def plan_error(*words: str) -> Any:
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def _bids(watermark: bool = False) -> Stream:
    stream = Stream(NO_SESSION, n.MemorySource(name="bids", schema=to_schema(BIDS), path="/b"))
    return stream.watermark("t", 0) if watermark else stream


def _kernel(size_ms: int = 10) -> ProcessingTimeKernel:
    count = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
    window = TumblingWindow(size_ms=size_ms, time="processing")
    return ProcessingTimeKernel(WindowKernel(KernelSpec(keys=("k",), window=window, aggs=(count,))))


def _rows(keys: list[str], event_ms: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": keys,
            BATCH_TS: pa.array([t * 1000 for t in event_ms], pa.int64()),
            SEQ: pa.array(range(len(keys)), pa.int64()),
        }
    )


def _fired(out: Any) -> list[tuple[str, int, int, int]]:
    rows = out.results.to_pylist()
    return sorted((r["k"], _ms(r["window_start"]), _ms(r["window_end"]), r["n"]) for r in rows)


def _ms(value: Any) -> int:
    return int(value) // 1000 if isinstance(value, int) else int(value.timestamp() * 1000)


# --- the kernel, on a clock the test moves --------------------------------------------------


def test_rows_are_timed_by_the_step_and_a_window_fires_when_the_clock_reaches_its_end() -> None:
    kernel = _kernel(10)
    # Event times far apart and out of order: ignored, every row is at the step's time (23).
    state, out = kernel.step(None, _rows(["a", "a", "b"], [900_000, 5, -40]), None, 23)
    assert _fired(out) == [] and out.on_time == 3 and len(out.very_late) == 0
    assert kernel.next_due(state) == (NOT_DUE, 30)  # a clock firing, not a watermark one
    state, out = kernel.step(state, _rows(["a"], [0]), 10_000, 29)  # the input's watermark: no part
    assert _fired(out) == []
    state, out = kernel.step(state, _rows(["b"], [0]), None, 30)  # this row opens [30, 40)
    assert _fired(out) == [("a", 20, 30, 3), ("b", 20, 30, 1)]
    assert kernel.next_due(state) == (NOT_DUE, 40)
    state, out = kernel.step(state, _rows([], []), None, 55)  # no input: the clock alone fires it
    assert _fired(out) == [("b", 30, 40, 1)]
    assert kernel.next_due(state) == (NOT_DUE, NOT_DUE) and state.num_rows == 0


def test_when_every_source_closes_the_open_windows_fire() -> None:
    kernel = _kernel(1_000)
    state, _ = kernel.step(None, _rows(["a", "b"], [1, 2]), None, 1_500)
    state, out = kernel.step(state, _rows([], []), END_OF_TIME_MS, 1_600)
    assert _fired(out) == [("a", 1_000, 2_000, 1), ("b", 1_000, 2_000, 1)]


def test_the_kernel_takes_only_a_processing_time_window() -> None:
    count = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
    event = KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(count,))
    with pytest.raises(ValueError, match="not a processing-time window"):
        ProcessingTimeKernel(WindowKernel(event))


# --- the plan ---------------------------------------------------------------------------------


def test_a_processing_time_window_needs_no_watermark_and_runs_on_the_stateful_lowering() -> None:
    counted = _bids().key_by("bidder").tumbling_window(10_000, time="processing").agg(kp.count(kp.col("*")))
    assert list(counted.columns) == ["bidder", "window_start", "window_end", "count"]
    assert "tumbling(size_ms=10000, time=processing)" in n.render_plan(counted.plan)
    lowering, reason = choose(counted.plan)
    assert lowering == "stateful"
    assert "processing-time tumbling window" in reason and "not reproducible" in reason
    with plan_error("native lowering", "processing-time tumbling window"):
        counted.lower(lowering="native")
    # A watermark on the stream is allowed and plays no part in the window.
    assert choose(_bids(watermark=True).tumbling_window(10_000, time="processing").agg(kp.count(kp.col("*")))
                  .plan)[0] == "stateful"  # fmt: skip


def test_what_a_processing_time_window_does_not_take_is_named() -> None:
    windowed = _bids().key_by("bidder").tumbling_window(10_000, time="processing")
    count = kp.count(kp.col("*"))
    with plan_error("time=", "'event' or 'processing'", "'wall'"):
        _bids().tumbling_window(10, time=cast(Any, "wall"))
    with plan_error("processing-time window fires once", "allowed_lateness(5000 ms)"):
        windowed.allowed_lateness(5_000).agg(count)
    with plan_error("processing-time window fires once", "trigger"):
        windowed.trigger(kp.Trigger.on_every_element()).agg(count)
    with plan_error("processing-time window fires once", "accumulation('retracting')"):
        windowed.accumulation("retracting").agg(count)
    after = windowed.agg(count)
    with plan_error("an aggregation per key after a processing-time window", "write them to a sink"):
        after.key_by("bidder").agg(kp.count(kp.col("*")))
    with plan_error("a window after a processing-time window"):
        after.tumbling_window(60_000, time="processing")
    with plan_error("top_n() after a processing-time window"):
        after.top_n(1, by="count")
    events = _bids(watermark=True).key_by("bidder").tumbling_window(10).agg(count)
    with plan_error("processing-time window takes a stream's rows", "not a window's"):
        events.tumbling_window(10_000, time="processing")


def test_sql_names_processing_time_with_proctime_in_a_tumble_helper() -> None:
    catalog = SqlCatalog()
    catalog.register("bid", _bids().plan)  # no watermark: processing time needs none
    window = "tumble_start(PROCTIME(), INTERVAL '10' SECOND)"
    out = execute(
        catalog,
        f"SELECT bidder, COUNT(*) AS bid_count, {window} AS starttime, "
        f"tumble_end(PROCTIME(), INTERVAL '10' SECOND) AS endtime FROM bid GROUP BY bidder, {window}",
        NO_SESSION,
    )
    assert out is not None
    built = (
        _bids()
        .key_by("bidder")
        .tumbling_window(10_000, time="processing")
        .agg(kp.count(kp.col("*")).alias("bid_count"))
    )
    assert n.stateless_below(out.plan) == built.plan
    assert list(out.columns) == ["bidder", "bid_count", "starttime", "endtime"]
    with pytest.raises(kp.PlanError, match="a window in processing time is tumbling"):
        execute(catalog, "SELECT COUNT(*) FROM bid GROUP BY hop_start(PROCTIME(), INTERVAL '1' SECOND, "
                "INTERVAL '10' SECOND)", NO_SESSION)  # fmt: skip
    with pytest.raises(kp.PlanError, match=r"PROCTIME\(\) is no column here.*tumble_start\(PROCTIME\(\)"):
        execute(catalog, "SELECT *, PROCTIME() AS p_time FROM bid", NO_SESSION)


# --- on Spark ------------------------------------------------------------------------------------


def _total(rows: list[dict[str, Any]]) -> int:
    return sum(int(r["n"]) for r in rows)


def _until_fired(job: Any, want: int, limit_s: float = 20.0) -> list[dict[str, Any]]:
    """Results once ``want`` rows are counted: the clock fires the windows, no row is sent."""
    deadline = time.monotonic() + limit_s
    while True:
        job.process_all_available()
        rows = cast("list[dict[str, Any]]", job.results().to_pylist())
        if _total(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


@pytest.mark.spark
def test_windows_fire_by_the_clock_without_input_and_later_rows_open_later_windows(
    session: kp.Session,
) -> None:
    size = 1_000
    bids, sender = session.memory_stream(BIDS, name=f"bids_{uuid.uuid4().hex[:6]}")
    per_bidder = (
        bids.watermark("t", 0)  # event times from 1970: a window by them would be far in the past
        .key_by("bidder")
        .tumbling_window(size, time="processing")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    assert "not reproducible" in per_bidder.explain()
    job = per_bidder.start()
    try:
        sent_at = datetime.now(UTC)
        sender.send([{"bidder": 1, "price": 5, "t": 10}, {"bidder": 1, "price": 7, "t": 20}])
        sender.send([{"bidder": 2, "price": 9, "t": 5}])
        first = _until_fired(job, 3)
        fired_at = datetime.now(UTC)
        sender.send([{"bidder": 1, "price": 1, "t": 30}, {"bidder": 3, "price": 2, "t": 31}])
        rows = _until_fired(job, 5)
        seen_at = datetime.now(UTC)
    finally:
        job.stop()
    assert _total(first) == 3 and _total(rows) == 5, rows
    for r in rows:
        start, end = r["window_start"], r["window_end"]
        assert (end - start).total_seconds() * 1000 == size and _ms(start) % size == 0
        assert start.year == datetime.now(UTC).year  # processing time, not the rows' event time
        assert sent_at.timestamp() - 1 <= start.timestamp() and end <= seen_at
    first_ends = {r["window_end"] for r in first}
    assert max(first_ends) <= fired_at  # fired only once the clock passed its end
    later = [r for r in rows if r not in first]
    assert sorted((r["bidder"], r["n"]) for r in later) == [(1, 1), (3, 1)]
    # Sent after the first windows fired, so their micro-batch started after those windows' ends.
    assert all(r["window_start"] >= max(first_ends) for r in later)


@pytest.mark.spark
def test_bounded_input_is_one_window_at_the_time_the_job_ran(session: kp.Session) -> None:
    rows = [{"bidder": b % 3, "price": b, "t": b} for b in range(30)]
    bids = session.from_records(rows, schema=BIDS)
    per_bidder = (
        bids.key_by("bidder")
        .tumbling_window(3_600_000, time="processing")
        .agg(kp.count(kp.col("*")).alias("n"), kp.max(kp.col("price")).alias("top"))
    )
    before = datetime.now(UTC)
    got = per_bidder.collect().to_pylist()
    after = datetime.now(UTC)
    assert sorted((r["bidder"], r["n"], r["top"]) for r in got) == [(0, 10, 27), (1, 10, 28), (2, 10, 29)]
    assert len({(r["window_start"], r["window_end"]) for r in got}) == 1
    start = got[0]["window_start"]
    assert (
        start.timestamp() <= after.timestamp() and got[0]["window_end"].timestamp() > before.timestamp() - 1
    )
