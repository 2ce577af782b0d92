"""Unit tests of the fluent builder and the logical plan it makes (no Spark, no JVM).

Streams are built on a ``MemorySource`` node with no session: ``Stream`` only
stores the session, and nothing here runs anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.expr import AggCall, BinaryOp, Column, Literal
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.planner.spark.lower import lower
from krishiv_py.types import DataType, Field, Schema, to_schema

DDL = "user_id string, event_time timestamp, amount double, x bigint, name string, ok boolean"
SCHEMA = to_schema(DDL)
SRC = n.MemorySource(name="events", schema=SCHEMA, path="/data/events")


def stream(source: n.PlanNode = SRC) -> Stream:
    return Stream(None, source)


def timed() -> Stream:
    return stream().watermark("event_time", 5_000)


def raises_plan_error(*words: str) -> Any:
    """pytest.raises(PlanError) whose message must mention every word."""
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


# --- immutability ---------------------------------------------------------------


def test_every_builder_call_returns_a_new_object_and_leaves_the_old_one_unchanged() -> None:
    s0 = stream()
    plan0, schema0 = s0.plan, s0.schema
    s1 = s0.filter(kp.col("amount") > 0)
    s2 = s1.with_column("cents", kp.col("amount") * 100)
    s3 = s2.select("user_id", "event_time", "cents")
    s4 = s3.watermark("event_time", 1_000)
    keyed = s4.key_by("user_id")
    windowed = keyed.tumbling_window(60_000)
    out = windowed.agg(kp.count(kp.col("*")))
    chain: list[object] = [s0, s1, s2, s3, s4, keyed, windowed, out]
    assert len({id(o) for o in chain}) == len(chain)
    assert s0.plan is plan0 and s0.plan == SRC and s0.schema == schema0
    assert isinstance(s1.plan, n.Filter) and s1.plan.input is plan0
    assert s1.columns == SCHEMA.names  # filter keeps the schema
    assert s2.columns == (*SCHEMA.names, "cents")
    assert s3.columns == ("user_id", "event_time", "cents")
    assert n.event_time(s3.plan) is None and n.event_time(s4.plan) is not None
    assert isinstance(out.plan, n.WindowAggregate) and out.plan.input is s4.plan


def test_window_assigners_do_not_change_the_keyed_stream() -> None:
    keyed = timed().key_by("user_id")
    tumbling = keyed.tumbling_window(10)
    sliding = keyed.sliding_window(20, 10)
    assert tumbling is not sliding
    assert tumbling.window == TumblingWindow(size_ms=10)
    assert sliding.window == SlidingWindow(size_ms=20, slide_ms=10)
    assert keyed.keys == ("user_id",)
    a = tumbling.agg(kp.count(kp.col("*")))
    b = tumbling.agg(kp.sum(kp.col("amount")))
    assert a.columns[-1] == "count" and b.columns[-1] == "sum_amount"
    assert tumbling.window == TumblingWindow(size_ms=10)


def test_builder_objects_are_immutable() -> None:
    windowed = timed().tumbling_window(10)
    with pytest.raises(AttributeError):
        windowed.keys = ("x",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        SRC.path = "/elsewhere"  # type: ignore[misc]


# --- builder output == hand-built plan -------------------------------------------


def test_builder_plan_equals_a_hand_built_plan() -> None:
    built = (
        stream()
        .watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")).alias("total"), kp.first(kp.col("x")))
    )
    expected = n.WindowAggregate(
        input=n.Watermark(input=SRC, column="event_time", lag_ms=5_000),
        keys=("user_id",),
        window=TumblingWindow(size_ms=60_000),
        aggregates=(
            AggCall("count", None, "count"),
            AggCall("sum", "amount", "total"),
            AggCall("first", "x", "first_x"),
        ),
    )
    assert built.plan == expected
    assert hash(built.plan) == hash(expected)
    # A different argument makes a different plan (the equality is not vacuous).
    other = stream().watermark("event_time", 5_001).key_by("user_id").tumbling_window(60_000)
    assert other.agg(kp.count(kp.col("*"))).plan != expected


def test_stateless_builders_equal_hand_built_nodes() -> None:
    built = (
        stream()
        .filter(kp.col("amount") > 10)
        .with_column("amount", kp.col("amount") * 2)
        .select("user_id", kp.col("amount").alias("a"))
        .plan
    )
    filtered = n.Filter(input=SRC, predicate=BinaryOp(">", Column("amount"), Literal(10)))
    with_col = n.Project(
        input=filtered,
        exprs=tuple(
            kp.col(c).node if c != "amount" else (kp.col("amount") * 2).alias("amount").node
            for c in SCHEMA.names
        ),
    )
    expected = n.Project(input=with_col, exprs=(Column("user_id"), kp.col("amount").alias("a").node))
    assert built == expected


def test_unkeyed_sliding_and_session_plans() -> None:
    sliding = timed().sliding_window(30, 10).agg(kp.max(kp.col("x")))
    assert isinstance(sliding.plan, n.WindowAggregate)
    assert sliding.plan.keys == ()
    assert sliding.plan.window == SlidingWindow(size_ms=30, slide_ms=10)
    session = timed().key_by("user_id", "name").session_window(7).agg(kp.count(kp.col("*")))
    assert isinstance(session.plan, n.WindowAggregate)
    assert session.plan.window == SessionWindow(gap_ms=7)
    assert session.columns == ("user_id", "name", "window_start", "window_end", "count")


def test_with_watermark_spec_equals_watermark() -> None:
    a = stream().with_watermark(kp.WatermarkSpec.fixed_lag_ms("event_time", 3)).plan
    b = stream().watermark("event_time", 3).plan
    assert a == b == n.Watermark(input=SRC, column="event_time", lag_ms=3)


# --- output schema and aggregate names -------------------------------------------------


def test_default_aggregate_names_types_and_column_order() -> None:
    out = (
        timed()
        .key_by("user_id", "name")
        .tumbling_window(60_000)
        .agg(
            kp.count(kp.col("*")),
            kp.sum(kp.col("amount")),
            kp.avg(kp.col("amount")),
            kp.min(kp.col("amount")),
            kp.max(kp.col("amount")),
            kp.count_distinct(kp.col("x")),
            kp.first(kp.col("x")),
            kp.last(kp.col("x")),
            kp.sum(kp.col("x")),
            kp.count(kp.col("name")),
        )
    )
    assert out.columns == (
        "user_id",
        "name",
        "window_start",
        "window_end",
        "count",
        "sum_amount",
        "avg_amount",
        "min_amount",
        "max_amount",
        "count_distinct_x",
        "first_x",
        "last_x",
        "sum_x",
        "count_name",
    )
    types = {f.name: f.dtype.name for f in out.schema}
    assert types == {
        "user_id": "string",
        "name": "string",
        "window_start": "timestamp",
        "window_end": "timestamp",
        "count": "bigint",
        "sum_amount": "double",
        "avg_amount": "double",
        "min_amount": "double",
        "max_amount": "double",
        "count_distinct_x": "bigint",
        "first_x": "bigint",
        "last_x": "bigint",
        "sum_x": "bigint",
        "count_name": "bigint",
    }
    bounds = [f for f in out.schema if f.name.startswith("window_")]
    assert all(not f.nullable for f in bounds)


def test_alias_overrides_the_default_name_and_keeps_the_order_given() -> None:
    out = (
        timed()
        .tumbling_window(10)
        .agg(kp.sum(kp.col("amount")).alias("total"), kp.count(kp.col("*")).alias("events"))
    )
    assert out.columns == ("window_start", "window_end", "total", "events")
    agg = kp.sum(kp.col("amount"))
    assert agg.alias("total").name == "total" and agg.name == "sum_amount"  # alias returns a copy


def test_agg_over_a_decimal_and_an_int_column() -> None:
    src = n.MemorySource(name="d", schema=to_schema("t bigint, d decimal(10,2), i int"), path="/p")
    out = (
        stream(src)
        .watermark("t", 0)
        .tumbling_window(10)
        .agg(kp.sum(kp.col("d")), kp.avg(kp.col("i")), kp.sum(kp.col("i")), kp.min(kp.col("i")))
    )
    assert [f.dtype.name for f in out.schema][2:] == ["decimal(10,2)", "double", "bigint", "int"]


# --- plan errors at build time -----------------------------------------------------


def test_unknown_column_in_watermark() -> None:
    with raises_plan_error("nope", "event-time column"):
        stream().watermark("nope", 0)


def test_unknown_column_in_key_by() -> None:
    with raises_plan_error("nope", "key column"):
        timed().key_by("user_id", "nope")


def test_unknown_column_in_filter() -> None:
    with raises_plan_error("nope", "available columns"):
        stream().filter(kp.col("nope") > 1)


def test_unknown_column_in_select_and_with_column() -> None:
    with raises_plan_error("nope"):
        stream().select("user_id", "nope")
    with raises_plan_error("nope"):
        stream().with_column("y", kp.col("nope") + 1)


def test_unknown_column_in_agg() -> None:
    with raises_plan_error("nope"):
        timed().tumbling_window(10).agg(kp.sum(kp.col("nope")))
    with raises_plan_error("nope"):
        timed().tumbling_window(10).agg(kp.count(kp.col("nope")))


def test_negative_lag_is_refused() -> None:
    with raises_plan_error("lag_ms", "-1"):
        stream().watermark("event_time", -1)
    assert n.event_time(stream().watermark("event_time", 0).plan) is not None


@pytest.mark.parametrize("size", [0, -5])
def test_window_size_must_be_positive(size: int) -> None:
    with raises_plan_error("size_ms", str(size)):
        timed().tumbling_window(size)
    with raises_plan_error("size_ms", str(size)):
        timed().sliding_window(size, 1)


@pytest.mark.parametrize("slide", [0, -1])
def test_slide_must_be_positive(slide: int) -> None:
    with raises_plan_error("slide_ms", str(slide)):
        timed().sliding_window(10, slide)


def test_slide_larger_than_size_is_refused_but_equal_is_fine() -> None:
    with raises_plan_error("slide_ms", "11", "size_ms", "10"):
        timed().sliding_window(10, 11)
    assert timed().sliding_window(10, 10).window == SlidingWindow(size_ms=10, slide_ms=10)


@pytest.mark.parametrize("bad", [1.5, True, "10", None, 10.0])
def test_window_arguments_must_be_integers(bad: Any) -> None:
    with raises_plan_error("size_ms", repr(bad)):
        timed().tumbling_window(bad)
    with raises_plan_error("slide_ms", repr(bad)):
        timed().sliding_window(10, bad)
    with raises_plan_error("gap_ms", repr(bad)):
        timed().session_window(bad)
    with raises_plan_error("lag_ms", repr(bad)):
        stream().watermark("event_time", bad)
    with raises_plan_error("offset_ms", repr(bad)):
        timed().tumbling_window(10, offset_ms=bad)


def test_window_without_watermark_is_refused() -> None:
    with raises_plan_error("watermark"):
        stream().tumbling_window(10)
    with raises_plan_error("watermark"):
        stream().key_by("user_id").sliding_window(10, 5)
    with raises_plan_error("watermark"):
        stream().session_window(10)
    with raises_plan_error("watermark"):
        n.WindowAggregate(
            input=SRC,
            keys=(),
            window=TumblingWindow(size_ms=1),
            aggregates=(AggCall("count", None, "count"),),
        )


@pytest.mark.parametrize("column", ["user_id", "amount", "ok"])
def test_event_time_column_of_a_wrong_type_is_refused(column: str) -> None:
    dtype = SCHEMA.field(column).dtype.name
    with raises_plan_error(column, dtype, "timestamp"):
        stream().watermark(column, 0)


def test_event_time_may_be_a_long_or_timestamp_ntz() -> None:
    src = n.MemorySource(name="e", schema=to_schema("t bigint, u timestamp_ntz"), path="/p")
    et = n.event_time(stream(src).watermark("t", 3).plan)
    assert et == n.EventTime("t", DataType("bigint"), 3)
    et2 = n.event_time(stream(src).watermark("u", 0).plan)
    assert et2 is not None and et2.dtype.is_timestamp


def test_filter_needs_a_boolean_condition() -> None:
    with raises_plan_error("filter", "double", "boolean"):
        stream().filter(kp.col("amount") * 2)
    with raises_plan_error("filter", "string"):
        stream().filter(kp.col("name"))
    with raises_plan_error("filter"):
        stream().filter(cast(Any, True))
    assert stream().filter(kp.col("ok") & (kp.col("x") > 1)).columns == SCHEMA.names


def test_not_needs_a_boolean_operand() -> None:
    with raises_plan_error("not", "boolean"):
        stream().filter(~kp.col("amount"))
    assert stream().filter(~kp.col("ok")).columns == SCHEMA.names


def test_comparing_a_string_with_a_number_is_refused() -> None:
    with raises_plan_error("user_id", "string", "int"):
        stream().filter(kp.col("user_id") > 5)
    with raises_plan_error("ok", "boolean"):
        stream().filter(kp.col("ok") == 1)
    # Comparable types stay accepted.
    stream().filter((kp.col("x") > 1.5) & (kp.col("name") == "bob") & (kp.col("name") != kp.lit(None)))
    stream().filter(kp.col("event_time") >= "2024-01-01")


def test_select_of_an_unnamed_expression_is_refused() -> None:
    with raises_plan_error("alias"):
        stream().select(kp.col("amount") * 2)
    assert stream().select((kp.col("amount") * 2).alias("double_amount")).columns == ("double_amount",)


def test_duplicate_output_names_are_refused() -> None:
    with raises_plan_error("duplicate", "user_id"):
        stream().select("user_id", "user_id")
    with raises_plan_error("duplicate", "amount"):
        stream().select("amount", kp.col("x").alias("amount"))
    with raises_plan_error("duplicate", "count"):
        timed().tumbling_window(10).agg(kp.count(kp.col("*")), kp.count(kp.col("*")))
    with raises_plan_error("duplicate", "user_id"):
        timed().key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")).alias("user_id"))
    with raises_plan_error("duplicate", "window_start"):
        timed().tumbling_window(10).agg(kp.count(kp.col("*")).alias("window_start"))
    with raises_plan_error("twice", "user_id"):
        timed().key_by("user_id", "user_id")


@pytest.mark.parametrize("name", ["__kp_kind", "__kp_et", "__kp_window", ""])
def test_reserved_or_empty_output_names_are_refused(name: str) -> None:
    with pytest.raises(kp.PlanError):
        stream().with_column(name, kp.lit(1))
    with pytest.raises(kp.PlanError):
        stream().select(kp.col("x").alias(name))
    with pytest.raises(kp.PlanError):
        timed().tumbling_window(10).agg(kp.count(kp.col("*")).alias(name))


def test_union_needs_identical_schemas() -> None:
    other = stream(n.MemorySource(name="b", schema=to_schema("user_id string"), path="/b"))
    with raises_plan_error("union", "identical schemas"):
        stream().union(other)
    same = stream(n.MemorySource(name="c", schema=SCHEMA, path="/c"))
    u = stream().union(same)
    assert isinstance(u.plan, n.Union) and u.columns == SCHEMA.names
    assert [s.name for s in n.sources_of(u.plan)] == ["events", "c"]


def test_union_watermarks_must_agree() -> None:
    same = stream(n.MemorySource(name="c", schema=SCHEMA, path="/c"))
    with raises_plan_error("union", "watermark"):
        timed().union(same)
    u = timed().union(same.watermark("event_time", 1))
    assert n.event_time(u.plan) is not None
    with raises_plan_error("already has a watermark"):
        u.watermark("event_time", 0)


def test_union_needs_an_other_stream() -> None:
    with raises_plan_error("union"):
        stream().union()
    with raises_plan_error("union", "int"):
        stream().union(cast(Any, 3))


def test_capped_session_window_needs_a_positive_cap() -> None:
    assert timed().session_window(10, max_duration_ms=100).window == SessionWindow(
        gap_ms=10, max_duration_ms=100
    )
    with raises_plan_error("max_duration_ms", "0"):
        timed().session_window(10, max_duration_ms=0)


def test_sum_and_avg_over_a_string_column_are_refused() -> None:
    with raises_plan_error("sum", "name", "string"):
        timed().tumbling_window(10).agg(kp.sum(kp.col("name")))
    with raises_plan_error("avg", "name", "numeric"):
        timed().tumbling_window(10).agg(kp.avg(kp.col("name")))
    # min/max/first/last/count of a string are fine.
    out = timed().tumbling_window(10).agg(kp.min(kp.col("name")), kp.last(kp.col("name")))
    assert [f.dtype.name for f in out.schema][2:] == ["string", "string"]


def test_count_star_is_ok_but_other_aggregates_of_star_are_refused() -> None:
    assert kp.count(kp.col("*")).call == AggCall("count", None, "count")
    for fn in (kp.sum, kp.avg, kp.min, kp.max, kp.count_distinct, kp.first, kp.last):
        with raises_plan_error("col('*')"):
            fn(kp.col("*"))


def test_aggregates_take_a_plain_column() -> None:
    with raises_plan_error("sum", "column"):
        kp.sum(kp.col("amount") * 2)
    with raises_plan_error("agg"):
        timed().tumbling_window(10).agg(cast(Any, kp.col("x")))
    with raises_plan_error("at least one aggregate"):
        timed().tumbling_window(10).agg()


def test_star_outside_count_is_refused() -> None:
    with raises_plan_error("col('*')"):
        stream().select("*")


def test_watermark_declared_twice_is_refused() -> None:
    with raises_plan_error("already has a watermark"):
        timed().watermark("event_time", 1)
    with raises_plan_error("already has a watermark"):
        timed().filter(kp.col("x") > 0).watermark("x", 1)


def test_plan_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="size_ms"):
        timed().tumbling_window(0)


def test_key_by_needs_a_column() -> None:
    with raises_plan_error("key_by"):
        timed().key_by()


def test_bad_cast_type_is_a_plan_error() -> None:
    with raises_plan_error("nope"):
        kp.col("x").cast("nope")
    assert stream().select(kp.col("x").cast("string").alias("s")).schema.field("s").dtype.name == "string"


def test_project_nullability() -> None:
    src = n.MemorySource(name="nn", schema=to_schema("a bigint NOT NULL, b bigint"), path="/p")
    s = stream(src)
    assert not s.select("a").schema.field("a").nullable
    assert not s.select(kp.col("a").alias("c")).schema.field("c").nullable
    # A replaced column can hold nulls even where the input column could not.
    assert s.with_column("a", kp.col("b")).schema.field("a").nullable
    assert s.with_column("a", kp.lit(None)).schema.field("a").nullable
    assert s.with_column("a", kp.col("a") + kp.col("b")).schema.field("a").nullable


# --- windows -----------------------------------------------------------------------


def test_tumbling_offset_is_normalised_modulo_the_size() -> None:
    assert TumblingWindow(size_ms=10, offset_ms=-3) == TumblingWindow(size_ms=10, offset_ms=7)
    assert TumblingWindow(size_ms=10, offset_ms=23).offset_ms == 3
    assert TumblingWindow(size_ms=10, offset_ms=10) == TumblingWindow(size_ms=10)
    window = timed().tumbling_window(60_000, offset_ms=-15_000).window
    assert window == TumblingWindow(size_ms=60_000, offset_ms=45_000)


def test_tumbling_assignment_uses_floor_modulo_for_negative_times() -> None:
    w = TumblingWindow(size_ms=10)
    assert w.assign(0) == ((0, 10),)
    assert w.assign(9) == ((0, 10),)
    assert w.assign(10) == ((10, 20),)
    assert w.assign(-1) == ((-10, 0),)
    assert w.assign(-10) == ((-10, 0),)
    assert w.assign(-11) == ((-20, -10),)
    assert TumblingWindow(size_ms=10, offset_ms=3).assign(2) == ((-7, 3),)
    assert TumblingWindow(size_ms=10, offset_ms=3).assign(3) == ((3, 13),)


@given(
    ts=st.integers(-(10**13), 10**13),
    size=st.integers(1, 10**6),
    offset=st.integers(-(10**6), 10**6),
)
def test_tumbling_every_event_is_in_exactly_one_aligned_window(ts: int, size: int, offset: int) -> None:
    ((start, end),) = TumblingWindow(size_ms=size, offset_ms=offset).assign(ts)
    assert start <= ts < end and end - start == size
    assert (start - offset) % size == 0


def test_sliding_assignment_examples() -> None:
    w = SlidingWindow(size_ms=30, slide_ms=10)
    assert w.assign(25) == ((0, 30), (10, 40), (20, 50))
    assert w.assign(0) == ((-20, 10), (-10, 20), (0, 30))
    assert w.assign(-5) == ((-30, 0), (-20, 10), (-10, 20))
    assert w.assign(-30) == ((-50, -20), (-40, -10), (-30, 0))
    # slide does not divide size: 2 or 3 windows.
    w2 = SlidingWindow(size_ms=25, slide_ms=10)
    assert w2.assign(25) == ((10, 35), (20, 45))
    assert w2.assign(21) == ((0, 25), (10, 35), (20, 45))
    assert SlidingWindow(size_ms=10, slide_ms=10).assign(-1) == ((-10, 0),)


@given(
    ts=st.integers(-(10**12), 10**12),
    slide=st.integers(1, 1_000),
    factor=st.integers(1, 20),
    extra=st.integers(0, 999),
)
def test_sliding_membership_matches_the_definition(ts: int, slide: int, factor: int, extra: int) -> None:
    size = slide * factor + extra % slide
    windows = SlidingWindow(size_ms=size, slide_ms=slide).assign(ts)
    # Every window with start % slide == 0 and start <= ts < start + size, in order.
    first = ts - size + 1
    first_start = first + (-first) % slide
    expected = tuple((s, s + size) for s in range(first_start, ts + 1, slide))
    assert windows == expected
    if size % slide == 0:
        assert len(windows) == size // slide


def test_session_window_proto_window_and_kind() -> None:
    assert SessionWindow(gap_ms=10).proto_window(-5) == (-5, 5)
    assert SessionWindow(gap_ms=10).kind == "session"
    assert SessionWindow(gap_ms=10, max_duration_ms=20).kind == "capped_session"


# --- derived facts ------------------------------------------------------------------


def test_bounded_and_sources() -> None:
    import pyarrow as pa

    records = n.RecordsSource(name="r", schema=to_schema("t bigint"), data=pa.table({"t": [1]}))
    files = n.FileSource(name="f", schema=to_schema("t bigint"), format="parquet", path="/f")
    live = n.FileSource(name="g", schema=to_schema("t bigint"), format="parquet", path="/g", streaming=True)
    assert stream(records).is_bounded and stream(files).is_bounded
    assert not stream(live).is_bounded and not stream().is_bounded
    assert not stream(records).union(stream(live)).is_bounded
    assert stream(records).union(stream(files)).is_bounded


def test_render_plan_mentions_every_node() -> None:
    out = (
        stream()
        .filter(kp.col("x") > 1)
        .watermark("event_time", 5)
        .key_by("user_id")
        .sliding_window(20, 10)
        .agg(kp.count(kp.col("*")).alias("c"))
    )
    text = n.render_plan(out.plan)
    lines = text.splitlines()
    assert lines[0] == (
        "WindowAggregate keys=[user_id] window=sliding(size_ms=20, slide_ms=10) aggs=[count(*) AS c]"
    )
    assert lines[1] == "  Watermark column=event_time lag_ms=5"
    assert lines[2] == "  " * 2 + "Filter (x > 1)"
    assert lines[3].startswith("      MemorySource 'events'")


def test_schema_of_a_hand_built_window_aggregate() -> None:
    plan = n.WindowAggregate(
        input=n.Watermark(input=SRC, column="event_time", lag_ms=0),
        keys=("name",),
        window=SessionWindow(gap_ms=5),
        aggregates=(AggCall("avg", "x", "mean"),),
    )
    assert n.schema_of(plan) == Schema(
        (
            Field("name", DataType("string")),
            Field("window_start", DataType("timestamp"), False),
            Field("window_end", DataType("timestamp"), False),
            Field("mean", DataType("double")),
        )
    )


def test_watermark_on_window_output_is_refused() -> None:
    windowed = timed().tumbling_window(10).agg(kp.count(kp.col("*")))
    with pytest.raises(
        kp.PlanError, match=r"carries its event time \(window_end - 1 ms\).*without \.watermark"
    ):
        windowed.watermark("window_start", 0)


def test_wrong_arguments_found_by_the_fuzz_are_plan_errors() -> None:
    windowed = timed().key_by("user_id").tumbling_window(60_000).agg(kp.count(kp.col("*")).alias("n"))
    with raises_plan_error("with_column()", "column name", "1"):
        timed().with_column(cast(Any, 1), kp.col("amount") * 2)
    with raises_plan_error("top_n(by=...)", "column name", "0"):
        windowed.top_n(1, by=cast(Any, 0))
    with raises_plan_error("top_n(keys=...)", "column name"):
        windowed.top_n(1, by="n", keys=cast(Any, [kp.col("user_id")]))
    with raises_plan_error("lowering=", "'native'", "got 3"):
        windowed.lower(lowering=cast(Any, 3))
    with raises_plan_error("lowering=", "got 'fast'"):
        windowed.lower(lowering=cast(Any, "fast"))
    # Lists of names and the default keys still work.
    assert windowed.top_n(1, by=["n"]).plan == windowed.top_n(1, by="n").plan
    ranked = windowed.top_n(1, by="n", keys=["user_id"]).plan
    assert isinstance(ranked, n.TopN) and ranked.keys == ("user_id",)


# --- joins: what goes where ---------------------------------------------------------------------


def views() -> Stream:
    return stream(n.MemorySource(name="views", schema=SCHEMA, path="/data/views")).watermark("event_time", 0)


def test_a_window_of_a_union_of_joins_rows_is_a_window_over_each_join_and_a_union_of_unions_is_refused() -> (
    None
):
    j = (
        timed()
        .key_by("user_id")
        .interval_join(views().key_by("user_id"), (-5, 0))
        .select("user_id", "amount")
    )
    counted = j.union(j).key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")))
    assert list(counted.columns) == ["user_id", "window_start", "window_end", "count"]
    assert "the union of operators' results runs as one operator" in lower(counted.plan).reason
    # Each branch is checked as if the window followed it alone: an outer join's rows in
    # accumulation("retracting") need a retracting window.
    outer = (
        timed()
        .key_by("user_id")
        .interval_join(views().key_by("user_id"), (-5, 0), how="left")
        .allowed_lateness(10)
        .accumulation("retracting")
        .select("user_id", "amount", "kind")
    )
    with raises_plan_error("a window over a join in accumulation('retracting') needs"):
        outer.union(outer).key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")))
    with raises_plan_error("not a union of unions"):
        j.union(j.union(j)).key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")))


def test_a_watermark_after_a_join_says_the_joined_rows_have_one_and_what_to_do_instead() -> None:
    """``.watermark()`` in every form after a join: one message, what the joined rows' event time is
    and what to build instead; window top-N of the joined rows (not a window's) says to rank per key."""
    j = timed().key_by("user_id").interval_join(views().key_by("user_id"), (-5, 0))
    window_join = (
        timed().key_by("user_id").tumbling_window(10).join(views().key_by("user_id").tumbling_window(10))
    )
    filtered = j.filter(kp.col("amount") > 0).key_by("user_id").session_window(5_000)
    assert filtered.agg(kp.count(kp.col("*"))).columns[-1] == "count"  # a filter between: built
    attempts: list[Callable[[], object]] = [
        lambda: j.watermark("event_time", 5_000),
        lambda: j.with_watermark(kp.WatermarkSpec.fixed_lag_ms("event_time", 5_000)),
        lambda: j.with_watermark(
            kp.MultiSourceWatermarkSpec().source("events", kp.WatermarkSpec.fixed_lag_ms("event_time", 0))
        ),
    ]
    with raises_plan_error("per='key'", "window them first"):
        window_join.top_n(1, by="amount")
    # Window top-N of a window after a join is built: it ranks that window's results.
    counts = window_join.key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")))
    assert isinstance(counts.top_n(1, by="count").plan, n.TopN)
    messages = set()
    for attempt in attempts:
        with raises_plan_error(
            "the later of its two rows'",
            "tumbling_window",
            "per='key'",
            "interval_join",
            "sink",
            "new source",
        ) as info:
            attempt()
        messages.add(str(info.value))
    assert len(messages) == 1, messages
    assert "call .watermark" not in messages.pop()  # no loop back to the watermark
    assert j.filter(kp.col("amount") > 0).select("user_id", "amount").columns == ("user_id", "amount")
    # A window right after the join is built, keyed by the join's keys, by other columns or by none.
    assert j.tumbling_window(60_000).agg(kp.count(kp.col("*"))).columns == (
        "window_start",
        "window_end",
        "count",
    )
    assert window_join.tumbling_window(10).agg(kp.count(kp.col("*"))).columns[-1] == "count"
    counted = j.key_by("user_id").tumbling_window(60_000).agg(kp.count(kp.col("*")))
    assert counted.columns == ("user_id", "window_start", "window_end", "count")


def test_a_join_before_key_by_and_a_watermark_after_it_say_where_the_call_goes() -> None:
    with raises_plan_error("interval_join() needs keyed streams", ".key_by(...) on both sides"):
        timed().interval_join(views().key_by("user_id"), between=(-5, 0))  # type: ignore[attr-defined]
    with raises_plan_error("as_of_join() needs keyed streams", ".key_by(...) on both sides"):
        timed().as_of_join(views().key_by("user_id"))  # type: ignore[attr-defined]
    with raises_plan_error("join() is a window join", "tumbling_window", "interval_join"):
        timed().join(views())  # type: ignore[attr-defined]
    with raises_plan_error("watermark(...) goes before key_by(...)", "watermark(column, lag_ms).key_by"):
        stream().key_by("user_id").watermark("event_time", 5_000)  # type: ignore[attr-defined]
    with raises_plan_error("with_watermark(...) goes before key_by(...)"):
        stream().key_by("user_id").with_watermark(  # type: ignore[attr-defined]
            kp.WatermarkSpec.fixed_lag_ms("event_time", 0)
        )
    # Still a missing attribute to Python: hasattr() and getattr() with a default work as ever.
    with pytest.raises(AttributeError):
        timed().interval_join  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(timed(), "interval_join") and not hasattr(stream().key_by("user_id"), "watermark")
    assert getattr(timed(), "as_of_join", None) is None
    # Any other missing name is Python's own AttributeError, not a PlanError.
    with pytest.raises(AttributeError, match="'KeyedStream' object has no attribute 'filtr'") as info:
        stream().key_by("user_id").filtr  # type: ignore[attr-defined]  # noqa: B018
    assert not isinstance(info.value, kp.PlanError)


@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_are_window_join_kinds(how: str) -> None:
    with raises_plan_error(f"how={how!r}", "window-join kinds", f".tumbling_window(size_ms), how={how!r})"):
        timed().key_by("user_id").interval_join(views().key_by("user_id"), (-5, 0), how=cast(Any, how))
    windows = timed().key_by("user_id").tumbling_window(10)
    semi = windows.join(views().key_by("user_id").tumbling_window(10), how=cast(Any, how))
    assert isinstance(semi.plan, n.Join) and semi.plan.how == how


def test_a_join_takes_a_window_of_a_stream_that_fires_each_window_once() -> None:
    counts = timed().key_by("user_id").tumbling_window(60_000).agg(kp.count(kp.col("*")).alias("n"))
    other = timed().key_by("user_id")
    joined = counts.key_by("user_id").interval_join(other, between=(-60_000, 0), how="left")
    assert joined.lower().lowering == "stateful"
    assert "the join is a stage after the window's operator" in joined.lower().reason
    with raises_plan_error("fires more than once", "allowed lateness"):
        timed().key_by("user_id").tumbling_window(60_000).allowed_lateness(5_000).agg(
            kp.count(kp.col("*"))
        ).key_by("user_id").interval_join(other, between=(0, 0))
    with raises_plan_error("late-event handler", "drop them on the window"):
        timed().key_by("user_id").tumbling_window(60_000).with_late_event_handler(
            kp.SideOutputLateEventHandler()
        ).agg(kp.count(kp.col("*"))).key_by("user_id").interval_join(other, between=(0, 0))
    both = counts.key_by("user_id").interval_join(counts.key_by("user_id"), between=(0, 0)).lower()
    assert "both windows run as one operator" in both.reason  # a join of two windows' results
    cascade = counts.key_by("user_id").tumbling_window(120_000).agg(kp.sum(kp.col("n")).alias("s"))
    of_cascade = cascade.key_by("user_id").interval_join(other, between=(0, 0)).lower()
    assert "a side of the join is a chain of operators" in of_cascade.reason  # a window of a window
    per_user = joined.key_by("user_id").agg(kp.count(kp.col("*")).alias("pairs"))  # in the join's call
    operator = per_user.lower().stateful
    assert operator is not None and operator.operator.then is not None
    assert "then in the same call" in operator.operator.then.kernel.describe()
    per_count = joined.key_by("n").agg(kp.count(kp.col("*"))).lower().stateful  # a stage after the stage
    assert per_count is not None and per_count.operator.then is not None
    assert per_count.operator.then.then is not None and per_count.operator.then.then.kernel.keys == ("n",)


def test_a_join_of_a_union_of_changes_and_a_windows_results_names_what_to_do_instead() -> None:
    """A union of aggregations' changes joins a stream (a stage after the union); joined with
    another operator's results it is refused on the stateful lowering, saying what to build."""
    count = kp.count(kp.col("*")).alias("n")
    changes = timed().key_by("user_id").agg(count).union(timed().key_by("user_id").agg(count))
    with_views = changes.key_by("user_id").interval_join(views().key_by("user_id"), (-5, 0))
    reason = lower(with_views.accumulation("retracting").plan).reason
    assert "a side of the join is a union of operators' results" in reason
    per_window = views().key_by("user_id").tumbling_window(10).agg(kp.count(kp.col("*")).alias("m"))
    joined = changes.key_by("user_id").interval_join(per_window.key_by("user_id"), (-5, 0))
    with pytest.raises(kp.PlanError, match="join each branch with it and union the joins' rows"):
        lower(joined.accumulation("retracting").plan)


def test_a_select_over_any_changelog_keeps_its_kind_column_last() -> None:
    """A retracting join's rows, an aggregation's or a top-N's changes per key: a select that
    leaves ``kind`` out keeps it last (a sink would else take a retraction for a new row); a
    plain stream's select keeps only what it names."""
    joined = (
        timed()
        .key_by("user_id")
        .interval_join(views().key_by("user_id"), (-5, 0), how="left")
        .allowed_lateness(10)
        .accumulation("retracting")
    )
    per_key = timed().key_by("user_id").agg(kp.count(kp.col("*")).alias("n"))
    latest = timed().top_n(1, by=("event_time",), per="key", keys=("user_id",), ties="first")
    assert list(joined.select("user_id", "amount").columns) == ["user_id", "amount", "kind"]
    assert list(per_key.select("n").columns) == ["n", "kind"]
    assert list(latest.select("amount").columns) == ["amount", "kind"]
    assert list(timed().select("amount").columns) == ["amount"]


def test_a_stream_call_on_a_window_without_agg_says_what_to_write() -> None:
    window = timed().tumbling_window(60_000)
    with raises_plan_error(
        "key_by(...) on a window", "key_by('user_id').tumbling_window", ".agg(...).key_by"
    ):
        window.key_by("user_id")  # type: ignore[attr-defined]
    for call in ("filter", "start", "collect", "top_n"):
        with raises_plan_error(f"{call}(", "call .agg(...) first"):
            getattr(window, call)
    assert isinstance(window.agg(kp.count(kp.col("*"))).key_by("count"), kp.KeyedStream)
    assert not hasattr(window, "nothing_of_the_kind")  # still a plain missing attribute


def test_an_aggregate_of_a_string_says_to_write_col() -> None:
    with raises_plan_error("count() takes a column, not a string", "count(col('*')) to count rows"):
        kp.count("*")  # type: ignore[arg-type]
    with raises_plan_error("sum() takes a column, not a string", "sum(col('amount'))"):
        kp.sum("amount")  # type: ignore[arg-type]
