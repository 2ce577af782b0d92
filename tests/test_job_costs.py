"""What a job does per micro-batch and per bounded run, and what it leaves out (real local Spark)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.names import SUBQUERY
from krishiv_py.runtime.build import build_dataframe
from krishiv_py.runtime.run import (
    CHECKPOINT_MANAGER_CONF,
    FILESYSTEM_CHECKPOINT_MANAGER,
    local_checkpoint_conf,
)
from krishiv_py.types import to_schema

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def ev(user: str, sec: float, amount: float = 1.0) -> dict[str, Any]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=sec), "amount": amount}


def per_minute(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("event_time", 0)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/tmp/ckpt", True),
        ("relative/ckpt", True),
        ("file:///tmp/ckpt", True),
        ("hdfs://namenode:8020/ckpt", False),
        ("s3a://bucket/ckpt", False),
        ("C:/ckpt", True),  # a drive letter is not a scheme
    ],
)
def test_local_checkpoints_use_the_filesystem_manager(path: str, local: bool) -> None:
    expected = {CHECKPOINT_MANAGER_CONF: FILESYSTEM_CHECKPOINT_MANAGER} if local else {}
    assert local_checkpoint_conf(path) == expected


def test_job_runs_with_the_local_checkpoint_manager_and_leaves_the_session_alone(session: kp.Session) -> None:
    spark = session.spark
    before = spark.conf.get(CHECKPOINT_MANAGER_CONF, None)
    stream, sender = session.memory_stream(SCHEMA)
    job: Any = per_minute(stream).start()
    try:
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF, None) == before  # restored after start
        # The query's offset log writes through the FileSystem-based manager.
        offsets = job._query._jsq.streamingQuery().offsetLog()
        assert offsets.fileManager().getClass().getName() == FILESYSTEM_CHECKPOINT_MANAGER
        sender.send([ev("a", 1), ev("a", 2, 2.0)])
        sender.send([ev("a", 61)])
        job.process_all_available()
        assert job.results().to_pylist() == [
            {
                "user_id": "a",
                "window_start": T0,
                "window_end": T0 + dt.timedelta(minutes=1),
                "events": 2,
                "total": 3.0,
            }
        ]
    finally:
        job.stop()


def test_progress_is_read_once_per_report(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job: Any = per_minute(stream).start()
    try:
        for i in range(4):
            sender.send([ev("a", 60 * i + 1)])
            job.process_all_available()
        assert job._new_progress() == []
        everything = [int(p["batchId"]) for p in job._query.recentProgress]
        read = [int(raw["batchId"]) for raw, _ in job._history.recent]
        # Every executed batch Spark reported (idle reports repeat a batch id) was recorded.
        assert read == sorted({b for b in everything if b in read}) and set(read) <= set(everything)
        assert len(read) >= 4
        m = job.metrics()
        assert m.input_rows == 4 and m.windows_emitted == 3
        sender.send([ev("b", 300)])
        job.process_all_available()
        assert job.metrics().input_rows == 5
    finally:
        job.stop()


def test_collect_leaves_the_metrics_out_and_start_keeps_them(session: kp.Session, tmp_path: Path) -> None:
    rows = [ev("a", 1), ev("a", 2), ev("b", 70), {"user_id": "c", "event_time": None, "amount": 1.0}]
    pq.write_table(pa.Table.from_pylist(rows, to_schema(SCHEMA).to_arrow()), tmp_path / "part-0.parquet")
    pipeline = per_minute(session.read_parquet(str(tmp_path), schema=SCHEMA))
    recipe = pipeline.lower(force_bounded=True)
    with_metrics = build_dataframe(session.spark, recipe, {})
    without = build_dataframe(session.spark, recipe, {}, observe=False)
    assert "CollectMetrics" in with_metrics._jdf.queryExecution().optimizedPlan().toString()
    assert "CollectMetrics" not in without._jdf.queryExecution().optimizedPlan().toString()
    collected = pipeline.collect()
    job = pipeline.start()
    assert job.lowering == "bounded"
    assert job.results().equals(collected) and collected.num_rows == 2
    m = job.metrics()
    assert (m.input_rows, m.invalid_events, m.windows_emitted) == (4, 1, 2)


def test_collect_is_one_sql_query_and_falls_back_without_group_by_ordinals(
    session: kp.Session, tmp_path: Path
) -> None:
    rows = [ev("a", 1), ev("a", 2), ev("b", 70), ev("a", 95, 4.0)]
    pq.write_table(pa.Table.from_pylist(rows, to_schema(SCHEMA).to_arrow()), tmp_path / "part-0.parquet")
    source = session.read_parquet(str(tmp_path), schema=SCHEMA)
    pipeline = (
        source.watermark("event_time", 0)
        .key_by("user_id")
        .sliding_window(60_000, 30_000)
        .agg(kp.count(kp.col("*")).alias("events"), kp.max(kp.col("amount")).alias("top"))
    )
    recipe = pipeline.lower(force_bounded=True)
    one_query = build_dataframe(session.spark, recipe, {}, observe=False)
    # One spark.sql call: the parsed plan is SQL's (subquery aliases), not a chain of DataFrame steps.
    assert SUBQUERY in one_query._jdf.queryExecution().logical().toString()
    # the sources' temporary views are gone
    # (SHOW VIEWS, not catalog.listTables(): Spark cannot decode its Table rows without generated code)
    views = [row.viewName for row in session.spark.sql("SHOW VIEWS").collect()]
    assert not [v for v in views if v.startswith("__kp_src_")], views
    expected = sorted(pipeline.start().results().to_pylist(), key=str)  # DataFrame calls, metrics on
    assert sorted(pipeline.collect().to_pylist(), key=str) == expected
    session.spark.conf.set("spark.sql.groupByOrdinal", "false")
    try:
        fallback = build_dataframe(session.spark, recipe, {}, observe=False)
        assert SUBQUERY not in fallback._jdf.queryExecution().logical().toString()
        assert sorted(pipeline.collect().to_pylist(), key=str) == expected
    finally:
        session.spark.conf.unset("spark.sql.groupByOrdinal")
    assert len(expected) == 6  # a: 2 + 2 windows, b: 2
