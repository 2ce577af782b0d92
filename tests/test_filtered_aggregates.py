"""Filtered aggregates (SPEC 3.14) and ``kp.when``: the plan, SQL's form, and every lowering on Spark.

``kp.count(kp.col("*"), filter=cond)`` is SQL's ``COUNT(*) FILTER (WHERE
cond)``: the aggregate over the rows where ``cond`` is true. Every lowering
runs it as the aggregate of a column that holds the value where ``cond`` is
true and null elsewhere (``krishiv_py/plan/filtered.py``), built with
``kp.when``; the reference model filters the rows itself.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any, cast

import pytest

import krishiv_py as kp
from krishiv_py._typing import Lowering
from krishiv_py.api.stream import Stream
from krishiv_py.model.compose import AggOf, ComposedModel, JoinOf, Source, WindowOf
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.planner.spark.lower import lower
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
BIDS = "auction bigint, bidder string, price bigint, t bigint"
BID = n.MemorySource(name="bid", schema=to_schema(BIDS), path="/data/bid")
col = kp.col


def plan_error(*words: str) -> Any:
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def bids() -> Stream:
    return Stream(NO_SESSION, BID).watermark("t", 0)


def per_auction(stream: Stream) -> Stream:
    """Nexmark q15's kind: each auction's bids, its cheap ones, its bidders of cheap bids, per 10 s."""
    return (
        stream.key_by("auction")
        .tumbling_window(10_000)
        .agg(
            kp.count(col("*")).alias("bids"),
            kp.count(col("*"), filter=col("price") < 10).alias("cheap"),
            kp.sum(col("price"), filter=col("price") >= 10).alias("dear_total"),
            kp.count_distinct(col("bidder"), filter=col("price") < 10).alias("cheap_bidders"),
            kp.max(col("price"), filter=col("bidder") != "b0").alias("top_not_b0"),
            kp.count(col("*"), filter=col("price").is_null()).alias("unpriced"),
        )
    )


def _cheap(r: Mapping[str, Any]) -> bool | None:
    return None if r["price"] is None else bool(r["price"] < 10)


def model_aggs() -> list[ModelAgg]:
    cheap = _cheap

    def dear(r: Mapping[str, Any]) -> bool | None:
        return None if r["price"] is None else r["price"] >= 10

    def not_b0(r: Mapping[str, Any]) -> bool | None:
        return None if r["bidder"] is None else r["bidder"] != "b0"

    return [
        ModelAgg(name="bids", func="count", column=None),
        ModelAgg(name="cheap", func="count", column=None, where=cheap),
        ModelAgg(name="dear_total", func="sum", column="price", where=dear),
        ModelAgg(name="cheap_bidders", func="count_distinct", column="bidder", where=cheap),
        ModelAgg(name="top_not_b0", func="max", column="price", where=not_b0),
        ModelAgg(name="unpriced", func="count", column=None, where=lambda r: r["price"] is None),
    ]


# --- the plan ---------------------------------------------------------------------------------


def test_a_filtered_aggregate_shows_its_filter_and_keeps_its_type() -> None:
    plan = per_auction(bids()).plan
    assert "count(*) FILTER (WHERE (price < 10)) AS cheap" in n.render_plan(plan)
    schema = n.schema_of(plan)
    assert [schema.field(c).dtype.name for c in ("cheap", "dear_total", "cheap_bidders")] == ["bigint"] * 3


def test_every_lowering_runs_the_aggregate_of_a_column_null_where_the_filter_is_not_true() -> None:
    recipe = lower(per_auction(bids()).plan)
    text = repr(recipe.root)
    assert "(CASE WHEN (`price` < 10) THEN 1 END) AS `cheap_filtered`" in text
    assert "count(`cheap_filtered`)" in text


def test_a_filter_that_is_not_a_condition_or_names_no_column_is_refused() -> None:
    with plan_error("filter=(price + 1) is bigint", "takes a condition"):
        bids().key_by("auction").tumbling_window(10).agg(kp.count(col("*"), filter=col("price") + 1))
    with plan_error("unknown column", "nope"):
        bids().key_by("auction").agg(kp.sum(col("price"), filter=col("nope") > 1))
    with plan_error("takes a condition expression"):
        kp.count(col("*"), filter=cast(Any, "price < 10"))


def test_first_and_last_take_no_filter_and_say_what_to_do_instead() -> None:
    with plan_error("first(filter=...) is not supported", "filter the stream before"):
        bids().key_by("auction").tumbling_window(10).agg(kp.first(col("price"), filter=col("price") > 1))


def test_sql_count_filter_where_is_the_builders_filtered_aggregate() -> None:
    catalog = SqlCatalog()
    catalog.register("bid", BID)
    query = (
        "SELECT auction, window_start, window_end, COUNT(*) AS bids, "
        "COUNT(*) FILTER (WHERE price < 10) AS cheap, "
        "SUM(price) FILTER (WHERE price >= 10) AS dear_total, "
        "COUNT(DISTINCT bidder) FILTER (WHERE price < 10) AS cheap_bidders, "
        "MAX(price) FILTER (WHERE bidder <> 'b0') AS top_not_b0, "
        "COUNT(*) FILTER (WHERE price IS NULL) AS unpriced "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(t), INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end"
    )
    got = execute(catalog, "SET watermark.column = t", NO_SESSION)
    assert got is None
    out = execute(catalog, query, NO_SESSION)
    assert out is not None
    assert [a.filter for a in _aggs(out.plan)] == [a.filter for a in _aggs(per_auction(bids()).plan)]


def _aggs(plan: n.PlanNode) -> tuple[Any, ...]:
    window = next(x for x in n.walk(plan) if isinstance(x, n.WindowAggregate))
    return window.aggregates


def test_when_takes_the_first_true_branch_and_names_what_is_wrong() -> None:
    schema = to_schema(BIDS)
    expr = kp.when(col("price") < 10, "cheap").when(col("price") < 100, "fair").otherwise("dear")
    assert n.schema_of(bids().select(expr.alias("band")).plan).field("band").dtype.name == "string"
    assert kp.when(col("price") > 1, col("price")).otherwise(0.5).node is not None
    with plan_error("when() needs a boolean condition"):
        bids().select(kp.when(col("price"), 1).alias("x"))
    with plan_error("the values of when() need one type", "cast them to one"):
        bids().select(kp.when(col("price") > 1, "x").otherwise(1).alias("x"))
    with plan_error("otherwise() ends"):
        kp.when(col("price") > 1, 1).otherwise(2).otherwise(3)
    with plan_error("when() continues kp.when"):
        col("price").when(col("price") > 1, 1)
    del schema


# --- on Spark ----------------------------------------------------------------------------------

STEPS: list[list[dict[str, Any]]] = [
    [
        {"auction": 1, "bidder": "b0", "price": 5, "t": 1_000},
        {"auction": 1, "bidder": "b1", "price": 50, "t": 2_000},
        {"auction": 2, "bidder": "b1", "price": None, "t": 3_000},
    ],
    [
        {"auction": 1, "bidder": "b1", "price": 7, "t": 4_000},
        {"auction": 1, "bidder": None, "price": 8, "t": 5_000},
        {"auction": 2, "bidder": "b0", "price": 99, "t": 12_000},
    ],
    [
        {"auction": 2, "bidder": "b2", "price": 1, "t": 15_000},
        {"auction": 1, "bidder": "b0", "price": 2, "t": 25_000},
    ],
]


def _rows(rows: list[dict[str, Any]], names: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[c] for c in names) for r in rows if r.get("kind") != "retract") - Counter(
        tuple(r[c] for c in names) for r in rows if r.get("kind") == "retract"
    )


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_filtered_window_aggregates_equal_the_model_streamed_and_bounded(
    session: kp.Session, lowering: Lowering
) -> None:
    stream, sender = session.memory_stream(BIDS, name=f"bid_{uuid.uuid4().hex[:6]}")
    query = per_auction(stream.watermark("t", 0))
    model = ComposedModel(
        WindowOf(
            Source("bid", "t", ("auction", "bidder", "price", "t")),
            TumblingWindow(size_ms=10_000),
            ("auction",),
            model_aggs(),
        )
    )
    names = [c for c in query.columns if c not in ("window_start", "window_end")]
    expected: list[dict[str, Any]] = []
    job = query.start(lowering=lowering)
    try:
        for rows in STEPS:
            expected += model.send(rows, source="bid")
            sender.send(rows)
            job.process_all_available()
        sender.close()
        expected += model.close()
        assert job.await_termination(timeout_s=120)
        got = job.results().to_pylist()
    finally:
        job.stop()
    assert _rows(got, names) == _rows(expected, names) and got
    assert _rows(query.collect().to_pylist(), names) == _rows(expected, names)


@pytest.mark.spark
def test_a_filtered_running_count_per_key_and_a_filtered_window_over_a_join_equal_the_model(
    session: kp.Session,
) -> None:
    """An aggregation per key without a window (its changes retract) and a window over a join's
    rows (the filter evaluated in krishiv's operator, in Arrow) take their filters too."""
    tag = uuid.uuid4().hex[:6]
    (bid, to_bid), (joined_bid, to_joined), (ask, to_ask) = (
        session.memory_stream(BIDS, name=f"{name}_{tag}") for name in ("bid", "joined_bid", "ask")
    )
    per_key = (
        bid.watermark("t", 0)
        .key_by("auction")
        .agg(
            kp.count(col("*"), filter=col("price") < 10).alias("cheap"),
            kp.avg(col("price"), filter=col("bidder").is_not_null()).alias("mean"),
        )
    )
    joined = (
        joined_bid.watermark("t", 0)
        .key_by("auction")
        .interval_join(ask.watermark("t", 0).key_by("auction"), between=(-5_000, 5_000))
    )
    over_join = (
        joined.key_by("auction")
        .tumbling_window(10_000)
        .agg(
            kp.count(col("*"), filter=col("price") < col("price_right")).alias("under"),
        )
    )
    source = Source("bid", "t", ("auction", "bidder", "price", "t"))
    where_cheap = ModelAgg(
        name="cheap",
        func="count",
        column=None,
        where=_cheap,
    )
    mean = ModelAgg(name="mean", func="avg", column="price", where=lambda r: r["bidder"] is not None)
    keyed = ComposedModel(AggOf(source, keys=("auction",), aggregates=[where_cheap, mean]))
    pairs = JoinOf(
        source,
        Source("ask", "t", ("auction", "bidder", "price", "t")),
        keys=("auction",),
        between=(-5_000, 5_000),
    )

    def under(r: Mapping[str, Any]) -> bool | None:
        return None if r["price"] is None or r["price_right"] is None else r["price"] < r["price_right"]

    windowed = ComposedModel(
        WindowOf(
            pairs,
            TumblingWindow(size_ms=10_000),
            ("auction",),
            [ModelAgg(name="under", func="count", column=None, where=under)],
        )
    )
    asks = [[{**r, "price": None if r["price"] is None else r["price"] + 3} for r in rows] for rows in STEPS]
    for query, model, sender in ((per_key, keyed, None), (over_join, windowed, to_joined)):
        names = [c for c in query.columns if c not in ("kind", "window_start", "window_end")]
        expected: list[dict[str, Any]] = []
        job = query.start()
        try:
            for rows, other in zip(STEPS, asks, strict=True):
                expected += model.send(rows, source="bid")
                (sender or to_bid).send(rows)
                if sender is not None:
                    expected += model.send(other, source="ask")
                    to_ask.send(other)
                job.process_all_available()
            got = job.results().to_pylist()
        finally:
            job.stop()
        assert _rows(got, names) == _rows(expected, names) and got
