"""Snapshots of the Spark recipes representative pipelines lower to (no JVM).

Each snapshot in ``tests/snapshots/`` holds the chosen lowering, the reason,
the time shift and the rendered recipe. Run with ``KRISHIV_UPDATE_SNAPSHOTS=1``
to (re)write them, then read the diff: a snapshot is only as good as the eye
that checked it. The structural tests below pin the invariants the snapshots
were checked for, so a wrong snapshot cannot be accepted silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py._typing import Lowering
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark import SHIFT_BASE_MS, SparkRecipe
from krishiv_py.types import to_schema

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("KRISHIV_UPDATE_SNAPSHOTS") == "1"


EVENTS = to_schema("user_id string, event_time timestamp, amount double")


def events() -> Stream:
    return Stream(None, n.MemorySource(name="events", schema=EVENTS, path="/data/events"))


def clicks() -> Stream:
    schema = to_schema("page string, ts bigint, n bigint")
    return Stream(None, n.MemorySource(name="clicks", schema=schema, path="/data/clicks"))


def records() -> Stream:
    data = pa.table({"k": ["a", "b"], "t": pa.array([1, 12], pa.int64()), "v": [1.0, 2.0]})
    schema = to_schema("k string, t bigint, v double")
    return Stream(None, n.RecordsSource(name="recs", schema=schema, data=data))


def keyed_tumbling() -> Stream:
    return (
        events()
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")), kp.first(kp.col("amount")))
    )


def sliding_epoch_ms() -> Stream:
    return (
        clicks()
        .watermark("ts", 1_000)
        .sliding_window(30_000, 10_000)
        .agg(kp.count(kp.col("*")), kp.max(kp.col("n")).alias("peak"))
    )


def keyed_session() -> Stream:
    return (
        events()
        .watermark("event_time", 0)
        .key_by("user_id")
        .session_window(30_000)
        .agg(kp.count(kp.col("*")), kp.avg(kp.col("amount")), kp.count_distinct(kp.col("amount")))
    )


def files() -> Stream:
    """The clicks of :func:`events`, as a directory of Parquet files read as a stream."""
    source = n.FileSource(name="files", schema=EVENTS, format="parquet", path="/data/files", streaming=True)
    return Stream(None, source)


def files_tumbling() -> Stream:
    """One streaming file source right under its watermark: Spark's progress counts its rows."""
    return (
        files()
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")))
    )


def global_session() -> Stream:
    return events().watermark("event_time", 10).session_window(7_000).agg(kp.last(kp.col("amount")))


def filter_before_watermark() -> Stream:
    return (
        events()
        .filter((kp.col("amount") > 0) & (kp.col("user_id") != "it's"))
        .with_column("cents", kp.col("amount") * 100)
        .watermark("event_time", 2_000)
        .tumbling_window(60_000, offset_ms=-15_000)
        .agg(kp.sum(kp.col("cents")).alias("total"))
    )


def bounded_records() -> Stream:
    return (
        records()
        .watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .agg(kp.count_distinct(kp.col("v")), kp.last(kp.col("v")))
    )


def lateness_retracting() -> Stream:
    return (
        events()
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")), kp.max(kp.col("event_time")))
    )


def stateful_session() -> Stream:
    return keyed_session()


def kafka(*, connector: n.KafkaConnector, per_partition: bool = False) -> Stream:
    """A Kafka topic as ``read_kafka`` builds it, without asking a broker or a JVM."""
    from krishiv_py.kafka.source import kafka_source

    node = kafka_source(
        name="events",
        bootstrap_servers="broker:9092",
        topic="events",
        schema="user_id string, event_time timestamp, amount double",
        value_format="json",
        key_format="string",
        event_time=None,
        starting_offsets={0: 10},
        max_records_per_batch=50_000,
        consumer_config={"security.protocol": "SSL"},
        connector=connector,
        watermark_per_partition=False,
        spark=None,
        remote=True,  # "cannot tell" whether Spark loads the connector: an explicit choice is kept
    )
    if per_partition:
        node = attrs.evolve(node, per_partition=True, partitions=2)
    return Stream(None, node)


def kafka_spark_connector() -> Stream:
    """Spark's ``format("kafka")``: this path runs only where the connector jar is on the classpath."""
    return (
        kafka(connector="spark")
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")))
    )


def kafka_per_partition() -> Stream:
    """One read, watermark and idle marker input per partition, under the stateful lowering."""
    return (
        kafka(connector="spark", per_partition=True)
        .watermark("event_time", 5_000, idle_timeout_ms=10_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)
        .agg(kp.sum(kp.col("amount")))
    )


def views() -> Stream:
    schema = to_schema("page string, ts bigint, user string")
    return Stream(None, n.MemorySource(name="views", schema=schema, path="/data/views"))


def interval_join_native() -> Stream:
    return (
        clicks()
        .watermark("ts", 1_000)
        .key_by("page")
        .interval_join(views().watermark("ts", 2_000).key_by("page"), between=(-60_000, 0))
    )


def window_join_stateful() -> Stream:
    return (
        clicks()
        .watermark("ts", 1_000)
        .key_by("page")
        .tumbling_window(10_000)
        .join(views().watermark("ts", 1_000).key_by("page").tumbling_window(10_000), how="left")
        .allowed_lateness(5_000)
        .accumulation("retracting")
    )


PIPELINES: dict[str, Callable[[], Stream]] = {
    "interval_join_native": interval_join_native,
    "window_join_stateful": window_join_stateful,
    "keyed_tumbling": keyed_tumbling,
    "files_tumbling": files_tumbling,
    "sliding_epoch_ms": sliding_epoch_ms,
    "keyed_session": keyed_session,
    "global_session": global_session,
    "filter_before_watermark": filter_before_watermark,
    "bounded_records": bounded_records,
    "lateness_retracting": lateness_retracting,
    "stateful_session": stateful_session,
    "kafka_spark_connector": kafka_spark_connector,
    "kafka_per_partition": kafka_per_partition,
}
#: Spark's own session operator and stream-stream join, forced (the planner picks the stateful
#: lowering for sessions and joins).
FORCED: dict[str, Lowering] = {
    "keyed_session": "native",
    "global_session": "native",
    "interval_join_native": "native",
}


def snapshot_text(recipe: SparkRecipe) -> str:
    return "\n".join(
        [
            f"lowering: {recipe.lowering}",
            f"reason: {recipe.reason}",
            f"output_mode: {recipe.output_mode}",
            f"time_shift_ms: {recipe.time_shift_ms}",
            f"output_schema: {recipe.output_schema}",
            "",
            recipe.render(),
            "",
        ]
    )


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_lowering_matches_snapshot(name: str) -> None:
    actual = snapshot_text(PIPELINES[name]().lower(lowering=FORCED.get(name)))
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    if not path.exists():
        pytest.fail(f"no snapshot {path}; run with KRISHIV_UPDATE_SNAPSHOTS=1 and review it")
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{name}: the lowering changed; if intended, rerun with KRISHIV_UPDATE_SNAPSHOTS=1"
    )


# --- invariants the snapshots were reviewed for --------------------------------------------


def test_lowering_is_deterministic() -> None:
    for build in PIPELINES.values():
        assert build().lower().render() == build().lower().render()


@pytest.mark.parametrize(
    ("name", "period"),
    [
        ("keyed_tumbling", 60_000),
        ("sliding_epoch_ms", 10_000),
        ("filter_before_watermark", 60_000),
    ],
)
def test_time_shift_is_a_multiple_of_the_slide(name: str, period: int) -> None:
    recipe = PIPELINES[name]().lower()
    assert recipe.lowering == "native"
    assert recipe.time_shift_ms % period == 0
    assert SHIFT_BASE_MS <= recipe.time_shift_ms < SHIFT_BASE_MS + period
    text = recipe.render()
    shift_us = f"{recipe.time_shift_ms * 1000}L"
    assert f"+ {shift_us})" in text  # event time shifted forward ...
    assert text.count(f"- {shift_us})") == 2  # ... and window_start/window_end back


def test_punctuation_rows_are_removed_above_the_watermark() -> None:
    for name in ("keyed_tumbling", "sliding_epoch_ms", "keyed_session", "filter_before_watermark"):
        lines = PIPELINES[name]().lower().render().splitlines()
        wm = next(i for i, line in enumerate(lines) if ".withWatermark('__kp_et'" in line)
        removal = next(
            i for i, line in enumerate(lines) if re.search(r"\.filter\('\(`__kp_kind` = 0 OR `__kp_et`", line)
        )
        assert removal > wm, name
        group = next(i for i, line in enumerate(lines) if ".groupBy(" in line)
        assert wm < removal < group, name


def test_user_filters_before_the_watermark_let_punctuation_through() -> None:
    text = filter_before_watermark().lower().render()
    assert "`__kp_kind` <> 0 OR ((`amount` > 0) AND (`user_id` <> 'it\\\\'s'))" in text


def test_punctuation_event_time_adds_lag_and_shift() -> None:
    recipe = filter_before_watermark().lower()
    assert f"(`__kp_wm` + {2_000 + recipe.time_shift_ms}L) * 1000L" in recipe.render()


def test_bounded_lowering_has_no_watermark_and_no_shift() -> None:
    recipe = bounded_records().lower()
    assert recipe.lowering == "bounded" and recipe.time_shift_ms == 0
    text = recipe.render()
    assert "withWatermark" not in text and "readStream" not in text
    assert "count(DISTINCT `v`)" in text


def test_streaming_count_distinct_avoids_distinct_aggregates() -> None:
    text = keyed_session().lower(lowering="native").render()
    assert "size(collect_set(`amount`))" in text and "DISTINCT" not in text


def test_global_session_groups_by_a_constant_key_that_is_not_output() -> None:
    recipe = global_session().lower(lowering="native")
    (group,) = [line for line in recipe.render().splitlines() if ".groupBy(" in line]
    key = r"\.groupBy\('[^']+ AS `__kp_global`', "
    assert re.search(key + r"\"session_window\(`__kp_et`, '7000 milliseconds'\)", group)
    assert recipe.output_schema.names == ("window_start", "window_end", "last_amount")


def test_collect_forces_the_bounded_lowering_of_a_memory_stream() -> None:
    recipe = keyed_tumbling().lower(force_bounded=True)
    assert recipe.lowering == "bounded" and recipe.time_shift_ms == 0
    assert "spark.read.format('parquet')" in recipe.render()
    assert "collect()" in recipe.reason


def test_stateless_stream_drops_marker_rows_and_hidden_columns() -> None:
    recipe = events().filter(kp.col("amount") > 1).lower()
    last_lines = recipe.render().splitlines()[-3:]
    assert last_lines[0].endswith(".filter('`__kp_kind` = 0')")
    assert last_lines[1].endswith(".selectExpr('`user_id`', '`event_time`', '`amount`')")
    assert not recipe.windowed and recipe.tracked == ()


def test_stateful_recipe_keeps_invalid_rows_and_buckets_keys() -> None:
    recipe = lateness_retracting().lower()
    assert recipe.lowering == "stateful" and recipe.stateful is not None
    text = recipe.render()
    assert "IS NOT NULL" not in text  # rows without event time reach the operator (late-event handler)
    assert "pmod(hash(`user_id`), 16)" in text
    # The operator's state: krishiv's versioned files under the checkpoint, Spark's state store not used.
    assert ".groupBy('__kp_bucket').applyInArrow(" in text and "krishiv-state/<bucket>" in text
    # Columns reach the packer as mapInArrow's exact Arrow columns, the event time as µs (null: invalid);
    # only those the operator reads: the keys and the aggregates' inputs (no late-event handler here).
    assert "'`user_id` AS `__kp_c0`'" in text and "'`event_time` AS `__kp_c1`'" in text  # max(event_time)
    assert "`amount` AS `__kp_c2`" not in text
    assert "unix_micros(`__kp_et`) - " in text and "coalesce(" not in text
    assert recipe.output_schema.names[-1] == "kind"


def test_a_late_event_handler_gets_every_column_to_the_operator() -> None:
    handled = (
        events()
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)
        .with_late_event_handler(kp.SideOutputLateEventHandler())
        .agg(kp.count(kp.col("*")))
    )
    text = handled.lower().render()
    assert "'`event_time` AS `__kp_c1`'" in text and "'`amount` AS `__kp_c2`'" in text


def test_the_invalid_count_is_observed_below_the_watermark_operator() -> None:
    """Spark runs the observation and the watermark operator without generated code: adjacent,
    the rows pass from one to the other with no code-generated stage between them."""
    for name in ("keyed_tumbling", "files_tumbling", "filter_before_watermark", "sliding_epoch_ms"):
        lines = PIPELINES[name]().lower(lowering=FORCED.get(name)).render().splitlines()
        observe = next(i for i, line in enumerate(lines) if ".observe('kp_src_" in line)
        assert ".withWatermark('__kp_et'" in lines[observe + 1], name
        assert "count(CASE WHEN" in lines[observe] and "count_if(`__kp_et`" not in lines[observe], name


def test_rows_of_one_file_source_are_sparks_count_and_of_anything_else_observed() -> None:
    recipe = files_tumbling().lower()
    (tracked,) = recipe.tracked
    assert tracked.rows_in_progress and tracked.max_in_progress
    (observe,) = [line for line in recipe.render().splitlines() if ".observe('kp_src_0'" in line]
    assert " AS rows" not in observe and " AS invalid" in observe
    others = {
        "a memory stream (punctuation rows)": keyed_tumbling(),
        "a filter between the source and its watermark": files()
        .filter(kp.col("amount") > 0)
        .watermark("event_time", 5_000)
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*"))),
        "two file sources": files()
        .union(files())
        .watermark("event_time", 5_000)
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*"))),
        "idle markers": files()
        .watermark("event_time", 5_000, idle_timeout_ms=1_000)
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*"))),
    }
    for why, stream in others.items():
        recipe = stream.lower(lowering="native")
        assert not any(t.rows_in_progress for t in recipe.tracked), why
        assert " AS rows" in recipe.render(), why
