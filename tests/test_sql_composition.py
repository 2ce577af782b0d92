"""Composed SQL queries (SPEC 3.13): operators after a join, and aggregations over aggregations.

Flink's forms of Nexmark q4 (an average per category of each auction's
highest bid), q9 (each auction's highest bid) and a window over a join's
rows, each against its builder twin: the SQL's logical plan must equal the
builder's. What the builder cannot express is a ``PlanError`` that names the
construct and what to write; those messages are tested too. No Spark: a
catalog of plan nodes and no session, as in tests/test_sql.py.
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import JoinedStream, Stream
from krishiv_py.plan import nodes as n
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
AUCTION = n.MemorySource(
    name="auction",
    schema=to_schema(
        "id bigint, item_name string, category bigint, initial_bid bigint, seller bigint, "
        "date_time timestamp, expires timestamp"
    ),
    path="/data/auction",
)
BID = n.MemorySource(
    name="bid",
    schema=to_schema("auction bigint, bidder bigint, price bigint, date_time timestamp"),
    path="/data/bid",
)
EVENTS = n.MemorySource(
    name="events",
    schema=to_schema("user_id string, event_time timestamp, amount double, region string"),
    path="/data/events",
)
RATES = n.MemorySource(
    name="rates", schema=to_schema("category bigint, rate double, date_time timestamp"), path="/data/rates"
)

DAY = 86_400_000
col = kp.col
COUNT = kp.count(col("*"))

#: The join of Nexmark q4 and q9, Flink's form: the condition in WHERE, an auction's bids until it
#: expires, bounded by the longest auction (a day) so that the join's state is bounded.
COMMA = (
    "FROM auction A, bid B WHERE A.id = B.auction "
    "AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY AND B.date_time <= A.expires"
)
#: The same join in the JOIN ... ON form, the filter in WHERE.
ON = (
    "FROM auction A JOIN bid B ON A.id = B.auction "
    "AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY WHERE B.date_time <= A.expires"
)


def catalog() -> SqlCatalog:
    cat = SqlCatalog()
    for plan in (AUCTION, BID, EVENTS, RATES):
        cat.register(plan.name, plan)
    return cat


def sql(text: str) -> Stream:
    out = execute(catalog(), text, NO_SESSION)
    assert out is not None
    return out


def same_plan(text: str, twin: Stream) -> None:
    got = sql(text).plan
    assert got == twin.plan, f"\nSQL:\n{n.render_plan(got)}\nbuilder:\n{n.render_plan(twin.plan)}"


def plan_error(*words: str) -> Any:
    """pytest.raises(PlanError) whose message mentions every word."""
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def timed(plan: n.PlanNode, column: str = "date_time") -> Stream:
    return Stream(NO_SESSION, plan).watermark(column, 0)


def joined(between: tuple[int, int] = (0, DAY), how: Any = "inner") -> JoinedStream:
    """auction ⋈ bid: each auction with its bids in ``between`` of its start."""
    right = timed(BID).key_by("auction")
    return timed(AUCTION).key_by("id").interval_join(right, between=between, how=how)


def until_expiry() -> Stream:
    """The joined rows of the bids before their auction expires (q4's and q9's join)."""
    return joined().filter(col("date_time_right") <= col("expires"))


# --- Nexmark q4: an aggregation per key over an aggregation per key over a join -------------------


def q4_twin() -> Stream:
    final = (
        until_expiry()
        .key_by("category", "id")
        .agg(kp.max(col("price")).alias("final"))
        .select("final", "category", "kind")
    )
    return final.key_by("category").agg(kp.avg(col("final")))


def test_nexmark_q4_in_flinks_form_is_an_average_over_a_max_over_a_join() -> None:
    text = f"""SELECT Q.category, AVG(Q.final)
               FROM (SELECT MAX(B.price) AS final, A.category {COMMA}
                     GROUP BY A.id, A.category) Q
               GROUP BY Q.category"""
    same_plan(text, q4_twin())
    assert sql(text).columns == ("category", "avg_final", "kind")
    same_plan(text.replace(COMMA, ON), q4_twin())  # the JOIN ... ON form


def test_group_by_over_a_join_in_one_query_is_key_by_agg_after_the_join() -> None:
    text = f"SELECT A.id, A.category, MAX(B.price) AS final {ON} GROUP BY A.id, A.category"
    twin = until_expiry().key_by("id", "category").agg(kp.max(col("price")).alias("final"))
    same_plan(text, twin)
    # a column of the right side keeps its SQL name, as in a SELECT list without GROUP BY
    text = f"SELECT B.date_time, COUNT(*) AS n {ON} GROUP BY B.date_time"
    per_time = until_expiry().key_by("date_time_right").agg(COUNT.alias("n"))
    same_plan(text, per_time.select(col("date_time_right").alias("date_time"), "n", "kind"))


def test_flinks_where_join_takes_the_keys_and_the_time_range_and_filters_with_the_rest() -> None:
    base = "SELECT A.id, B.price FROM auction A, bid B WHERE "
    twin = (
        joined().filter((col("price") > col("initial_bid")) & (col("category") == 10)).select("id", "price")
    )
    for where in (
        "A.id = B.auction AND B.price > A.initial_bid AND A.date_time <= B.date_time "
        "AND B.date_time <= A.date_time + INTERVAL '1' DAY AND A.category = 10",
        "B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY AND B.auction = A.id "
        "AND (B.price > A.initial_bid) AND A.category = 10",
    ):
        same_plan(base + where, twin)
    same_plan(
        "SELECT * FROM auction A, bid B WHERE A.id = B.auction "
        "AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY",
        joined(),
    )
    # the time columns are the pair bounded from below and above, whatever comes first
    same_plan(
        "SELECT * FROM auction A, bid B WHERE B.date_time <= A.expires AND A.id = B.auction "
        "AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY",
        until_expiry(),
    )


# --- Nexmark q9: top-N per key over a join ------------------------------------------------------

Q9 = f"""SELECT * FROM (
    SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
           ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time DESC) AS rownum
    {COMMA}
) WHERE rownum <= 1"""


def q9_best() -> Stream:
    return until_expiry().top_n(1, by=["price", "date_time_right"], per="key", keys=["id"], ties="first")


def test_nexmark_q9_in_flinks_form_is_a_join_a_filter_and_top_n_per_key() -> None:
    auction = [f.name for f in AUCTION.schema]
    twin = q9_best().select(
        *auction,
        col("id").alias("auction"),
        "bidder",
        "price",
        col("date_time_right").alias("bid_date_time"),
        kp.lit(1).alias("rownum"),  # every row kept ranks 1
        "kind",
    )
    same_plan(Q9, twin)
    assert sql(Q9).columns[-3:] == ("bid_date_time", "rownum", "kind")
    same_plan(Q9.replace(COMMA, ON), twin)


def test_nexmark_q9_listing_its_columns_is_the_top_n_without_the_rank() -> None:
    text = f"""SELECT id, price FROM (
        SELECT A.id, B.price, RANK() OVER (PARTITION BY A.id ORDER BY B.price DESC) AS r {ON}
    ) WHERE r <= 3"""
    twin = (
        until_expiry()
        .top_n(3, by=["price"], per="key", keys=["id"], ties="all")
        .select("id", "price", "kind")
    )
    same_plan(text, twin)


# --- a window over a join's rows ------------------------------------------------------------------

WINDOW = "tumble_start(B.date_time, INTERVAL '10' SECOND)"


def test_a_window_over_a_join_keyed_by_a_column_the_join_is_not_keyed_by() -> None:
    text = f"SELECT A.category, {WINDOW} AS window_start, COUNT(*) AS bids {ON} GROUP BY A.category, {WINDOW}"
    per_category = until_expiry().key_by("category").tumbling_window(10_000).agg(COUNT.alias("bids"))
    same_plan(text, per_category.select("category", "window_start", "bids"))
    # a range that puts the right row at or before the left one: the left side's time
    text = """SELECT B.bidder, COUNT(*) AS n
              FROM bid B JOIN auction A
                ON B.auction = A.id AND A.date_time BETWEEN B.date_time - INTERVAL '1' HOUR AND B.date_time
              GROUP BY B.bidder, tumble_start(B.date_time, INTERVAL '1' MINUTE)"""
    pairs = timed(BID).key_by("auction").interval_join(timed(AUCTION).key_by("id"), between=(-3_600_000, 0))
    per_bidder = pairs.key_by("bidder").tumbling_window(60_000).agg(COUNT.alias("n"))
    same_plan(text, per_bidder.select("bidder", "n"))


def test_a_window_over_a_join_subquery_uses_the_time_it_passes_on() -> None:
    text = f"""SELECT category, tumble_start(bid_time, INTERVAL '10' SECOND) AS window_start,
                      tumble_end(bid_time, INTERVAL '10' SECOND) AS window_end, MAX(price) AS top
               FROM (SELECT A.category, B.price, B.date_time AS bid_time {ON}) j
               GROUP BY category, tumble_start(bid_time, INTERVAL '10' SECOND)"""
    rows = until_expiry().select("category", "price", col("date_time_right").alias("bid_time"))
    same_plan(text, rows.key_by("category").tumbling_window(10_000).agg(kp.max(col("price")).alias("top")))


def test_flinks_window_tvf_over_a_join_is_the_same_window() -> None:
    text = f"""WITH j AS (SELECT A.category, B.price, B.date_time {ON})
               SELECT category, window_start, window_end, MAX(price) AS top
               FROM TABLE(HOP(TABLE j, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
               GROUP BY category, window_start, window_end"""
    rows = until_expiry().select("category", "price", col("date_time_right").alias("date_time"))
    twin = rows.key_by("category").sliding_window(10_000, 2_000).agg(kp.max(col("price")).alias("top"))
    same_plan(text, twin)


def test_a_window_tvf_over_a_stream_is_the_window_helpers_window() -> None:
    tvf = "TABLE(TUMBLE(TABLE events, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))"
    twin = timed(EVENTS, "event_time").key_by("region").tumbling_window(60_000).agg(COUNT.alias("n"))
    same_plan(f"SELECT region, window_start, window_end, COUNT(*) AS n FROM {tvf} GROUP BY 1, 2, 3", twin)
    same_plan(
        f"SELECT window_end AS we, region, COUNT(*) AS n FROM {tvf} e "
        "GROUP BY e.window_start, we, region HAVING COUNT(*) > 1",
        twin.filter(col("n") > 1).select(col("window_end").alias("we"), "region", "n"),
    )


def test_a_window_over_an_as_of_join_uses_the_left_time() -> None:
    text = """SELECT B.bidder, tumble_start(B.date_time, INTERVAL '1' MINUTE) AS ws,
                     MAX(B.price * R.rate) AS m
              FROM bid B JOIN rates FOR SYSTEM_TIME AS OF B.date_time AS R ON B.auction = R.category
              GROUP BY B.bidder, tumble_start(B.date_time, INTERVAL '1' MINUTE)"""
    with plan_error("MAX takes one column"):  # an expression is computed in a subquery
        sql(text)
    text = """SELECT bidder, tumble_start(date_time, INTERVAL '1' MINUTE) AS ws, MAX(paid) AS m
              FROM (SELECT B.bidder, B.date_time, B.price * R.rate AS paid
                    FROM bid B JOIN rates FOR SYSTEM_TIME AS OF B.date_time AS R ON B.auction = R.category)
              GROUP BY bidder, tumble_start(date_time, INTERVAL '1' MINUTE)"""
    as_of = timed(BID).key_by("auction").as_of_join(timed(RATES).key_by("category"))
    rows = as_of.select("bidder", "date_time", (col("price") * col("rate")).alias("paid"))
    twin = rows.key_by("bidder").tumbling_window(60_000).agg(kp.max(col("paid")).alias("m"))
    same_plan(text, twin.select("bidder", col("window_start").alias("ws"), "m"))


def test_window_settings_of_a_query_with_a_window_over_a_join_are_the_windows() -> None:
    text = f"""SET window.accumulation = retracting; SET window.allowed_lateness = INTERVAL '5' SECOND;
               SELECT A.category, {WINDOW} AS window_start, COUNT(*) AS bids {ON}
               GROUP BY A.category, {WINDOW}"""
    window = until_expiry().key_by("category").tumbling_window(10_000)
    counts = window.allowed_lateness(5_000).accumulation("retracting").agg(COUNT.alias("bids"))
    same_plan(text, counts.select("category", "window_start", "bids", "kind"))


def test_join_settings_give_a_join_followed_by_a_window_its_own_lateness_in_one_query() -> None:
    """SPEC 3.10: ``SET join.*`` for the join, ``SET window.*`` for the window, in one query."""
    text = f"""SET join.allowed_lateness = INTERVAL '1' MINUTE; SET join.accumulation = retracting;
               SET join.state_ttl = INTERVAL '1' HOUR;
               SET window.accumulation = retracting; SET window.allowed_lateness = INTERVAL '5' SECOND;
               SELECT A.category, {WINDOW} AS window_start, COUNT(*) AS bids {ON}
               GROUP BY A.category, {WINDOW}"""
    pairs = joined().allowed_lateness(60_000).accumulation("retracting")
    pairs = pairs.with_state_ttl(kp.StateTtlConfig(ttl_ms=3_600_000))
    rows = pairs.filter(col("date_time_right") <= col("expires"))
    window = (
        rows.key_by("category").tumbling_window(10_000).allowed_lateness(5_000).accumulation("retracting")
    )
    same_plan(text, window.agg(COUNT.alias("bids")).select("category", "window_start", "bids", "kind"))


def test_join_settings_of_a_query_without_a_join_or_set_twice_are_refused() -> None:
    with plan_error("SET join.allowed_lateness applies to a query with a join"):
        sql("SET join.allowed_lateness = INTERVAL '1' SECOND; SELECT * FROM events")
    with plan_error("SET join.allowed_lateness and SET window.allowed_lateness", "set one of them"):
        sql(
            "SET join.allowed_lateness = INTERVAL '1' SECOND; "
            f"SET window.allowed_lateness = INTERVAL '2' SECOND; SELECT A.category, B.price {ON}"
        )
    with plan_error("join.accumulation", "accumulating", "retracting"):
        sql(f"SET join.accumulation = discarding; SELECT A.category, B.price {ON}")


def test_group_by_over_a_retracting_outer_join_takes_its_retractions() -> None:
    text = (
        "SET window.accumulation = retracting; SET window.allowed_lateness = INTERVAL '1' SECOND; "
        f"SELECT A.category, COUNT(*) AS n {ON.replace('JOIN', 'LEFT JOIN')} GROUP BY A.category"
    )
    outer = joined(how="left").allowed_lateness(1_000).accumulation("retracting")
    same_plan(
        text, outer.filter(col("date_time_right") <= col("expires")).key_by("category").agg(COUNT.alias("n"))
    )


# --- aggregations stacked -------------------------------------------------------------------------


def test_a_ranked_subquery_over_a_group_by_is_a_top_n_over_its_changes() -> None:
    """Flink's Top-N over an aggregation: the three sellers with the most auctions per category."""
    text = """SET watermark.column = date_time;
              SELECT category, seller, n FROM (
                  SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY n DESC) AS rn
                  FROM (SELECT category, seller, COUNT(*) AS n FROM auction GROUP BY category, seller)
              ) WHERE rn <= 3"""
    counts = timed(AUCTION).key_by("category", "seller").agg(COUNT.alias("n"))
    top = counts.top_n(3, by="n", per="key", keys=("category",), ties="first")
    assert top.columns == ("category", "seller", "n", "kind")
    same_plan(text, top)


def test_group_by_over_a_group_by_is_an_aggregation_over_an_aggregation() -> None:
    per_user = timed(EVENTS, "event_time").key_by("user_id").agg(COUNT.alias("n"))
    inner = "SELECT user_id, COUNT(*) AS n FROM events GROUP BY user_id"
    text = f"SELECT n, COUNT(*) AS users FROM ({inner}) GROUP BY n"
    same_plan(text, per_user.key_by("n").agg(COUNT.alias("users")))
    reordered = text.replace("user_id, COUNT(*) AS n", "COUNT(*) AS n, user_id")
    same_plan(reordered, per_user.select("n", "user_id", "kind").key_by("n").agg(COUNT.alias("users")))


def test_group_by_over_window_results_is_an_aggregation_per_key_over_them() -> None:
    minute = "tumble_start(event_time, INTERVAL '1' MINUTE)"
    text = f"""SET window.accumulation = retracting;
               SELECT ws, SUM(c) AS total, MAX(c) AS most
               FROM (SELECT user_id, {minute} AS ws, COUNT(*) AS c FROM events GROUP BY user_id, {minute})
               GROUP BY ws"""
    window = timed(EVENTS, "event_time").key_by("user_id").tumbling_window(60_000).accumulation("retracting")
    per_user = window.agg(COUNT.alias("c")).select("user_id", col("window_start").alias("ws"), "c", "kind")
    twin = per_user.key_by("ws").agg(kp.sum(col("c")).alias("total"), kp.max(col("c")).alias("most"))
    same_plan(text, twin)


# --- what SQL refuses, and what to write instead ----------------------------------------------------

Q9_FLINK = """SELECT * FROM (
    SELECT A.*, B.price,
           ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
    FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
) WHERE rownum <= 1"""
JOIN_ON = "FROM auction A JOIN bid B ON A.id = B.auction AND B.date_time BETWEEN A.date_time"
ERRORS: list[tuple[str, list[str]]] = [
    # Nexmark q9 verbatim: an upper bound by a column, then two ranking directions
    (
        Q9_FLINK,
        [
            "an interval join bounds B.date_time by A.date_time plus or minus a fixed INTERVAL",
            "compares with another column, A.expires",
            "AND B.date_time <= A.date_time + INTERVAL '1' DAY",
            "line 4, column 54: `B.date_time <= A.expires`",
        ],
    ),
    (
        Q9_FLINK.replace("A.expires", "A.date_time + INTERVAL '1' DAY"),
        [
            "top-N per key ranks all ORDER BY columns the same way (all DESC, or all ASC)",
            "line 3, column 58: `ORDER BY B.price DESC, B.date_time ASC`",
        ],
    ),
    (
        f"SELECT * {JOIN_ON} AND A.expires",
        ["both bounds of the time range compare the same two time columns", "write it in WHERE"],
    ),
    (
        Q9_FLINK.replace("A.expires", "A.date_time + INTERVAL '1' DAY")
        .replace("B.date_time ASC", "B.date_time DESC")
        .replace("<= 1", "<= 2"),
        ["the rank 'rownum' is not a column of top-N results", "rownum <= 1 or = 1", "line 1, column 8"],
    ),
    # FROM l, r WHERE: what the WHERE must hold
    (
        "SELECT * FROM auction A, bid B WHERE A.id = B.auction AND A.category = 1",
        ["FROM l, r is an interval join", "no time range", "line 1, column 38"],
    ),
    (
        "SELECT * FROM auction A, bid B WHERE B.date_time BETWEEN A.date_time AND A.date_time",
        ["FROM l, r is an interval join", "no key equality"],
    ),
    (
        "SELECT * FROM auction A, bid B WHERE A.id = B.auction AND B.date_time > A.date_time "
        "AND B.date_time <= A.date_time + INTERVAL '1' DAY",
        ["inclusive: write <= or >=", "line 1, column 59"],
    ),
    (
        "SELECT * FROM bid B, rates FOR SYSTEM_TIME AS OF B.date_time AS R WHERE B.auction = R.category",
        ["an as-of join is written with JOIN and ON", "line 1, column 28"],
    ),
    (
        "SELECT * FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) A, "
        "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) B WHERE A.id = B.auction",
        ["a window join is written with JOIN and ON", "line 1, column 15"],
    ),
    # a window over a join's rows: their event time is the later of the two rows'
    (
        f"SELECT COUNT(*) AS n {ON} GROUP BY tumble_start(A.date_time, INTERVAL '1' MINUTE)",
        ["later of its two rows' times", "the right side's time, 'date_time_right'", "line 1, column 179"],
    ),
    (
        f"SELECT COUNT(*) AS n {JOIN_ON} - INTERVAL '1' SECOND AND A.date_time + INTERVAL '1' SECOND "
        "GROUP BY tumble_start(B.date_time, INTERVAL '1' MINUTE)",
        ["not supported with this time range", "between -1000 and 1000 ms", "r.ts BETWEEN l.ts AND l.ts +"],
    ),
    (
        f"SELECT COUNT(*) AS n {JOIN_ON.replace('JOIN', 'LEFT JOIN')} AND A.date_time + INTERVAL '1' SECOND "
        "GROUP BY tumble_start(B.date_time, INTERVAL '1' MINUTE)",
        ["not supported with this time range", "a LEFT join's padded rows", "Write an inner join"],
    ),
    (
        "SELECT COUNT(*) AS n "
        "FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) A "
        "JOIN TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) B ON A.id = B.auction "
        "AND A.window_start = B.window_start AND A.window_end = B.window_end "
        "GROUP BY tumble_start(A.date_time, INTERVAL '1' MINUTE)",
        ["a window over the rows of a window join is not supported", "GROUP BY window_start, window_end"],
    ),
    (
        f"SELECT A.category, {WINDOW}, COUNT(*) AS n {ON} GROUP BY A.category, {WINDOW} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) <= 1",
        ["QUALIFY over a window of a join's rows needs SET window.accumulation = retracting"],
    ),
    # aggregations over a join
    (
        f"SELECT COUNT(*) AS n {ON}",
        ["aggregating the rows of a join needs GROUP BY columns", "line 1, column 8"],
    ),
    (
        f"SELECT A.category, COUNT(*) AS n {ON} GROUP BY A.category HAVING COUNT(*) > 1",
        ["HAVING after GROUP BY without a window helper is not supported yet"],
    ),
    (f"SELECT A.id {ON} QUALIFY A.id > 1", ["QUALIFY is not supported here", "ROW_NUMBER() in a subquery"]),
    # window TVFs outside a join
    (
        "SELECT * FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))",
        ["is a side of a window join, or the input of a window aggregation", "line 1, column 15"],
    ),
    (
        "SELECT region, COUNT(*) FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(event_time), INTERVAL '1' HOUR)) "
        "GROUP BY region, window_start",
        ["GROUP BY window_start, window_end[, keys]", "line 1, column 101"],
    ),
    (
        "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(amount), INTERVAL '1' MINUTE)) "
        "GROUP BY window_start, window_end",
        ["event-time column 'amount' is double"],
    ),
]


@pytest.mark.parametrize(("text", "words"), ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_errors_name_the_construct_and_what_to_write(text: str, words: list[str]) -> None:
    with plan_error(*words):
        execute(catalog(), text, NO_SESSION)


# --- docs/sql.md, Composed queries -------------------------------------------------------------------


def test_the_docs_examples_make_the_builders_plan() -> None:
    same_plan(
        """SELECT Q.category, AVG(Q.final) AS avg_final
           FROM (SELECT MAX(B.price) AS final, A.category
                 FROM auction A, bid B
                 WHERE A.id = B.auction
                   AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY
                   AND B.date_time <= A.expires
                 GROUP BY A.id, A.category) Q
           GROUP BY Q.category""",
        q4_twin(),
    )
    same_plan(
        """SELECT id, item_name, price, bidder FROM (
               SELECT A.*, B.bidder, B.price,
                      ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time DESC) AS rownum
               FROM auction A, bid B
               WHERE A.id = B.auction
                 AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' DAY
                 AND B.date_time <= A.expires
           ) WHERE rownum <= 1""",
        q9_best()
        .select(*(f.name for f in AUCTION.schema), "bidder", "price", "kind")
        .select("id", "item_name", "price", "bidder", "kind"),
    )


def test_a_registered_windows_results_joined_with_a_stream_is_the_builders_join_nexmark_q7() -> None:
    """Nexmark q7 with the window's results registered (a join's side is a registered stream): the
    bounds on ``window_end`` are 1 ms past the results' event time, ``window_end - 1 ms``."""
    highest = timed(BID).tumbling_window(10_000).agg(kp.max(col("price")).alias("maxprice"))
    cat = catalog()
    cat.register("highest", highest.plan)
    text = (
        "SELECT B.auction, H.maxprice AS price, B.bidder, B.date_time "
        "FROM highest H JOIN bid B ON H.maxprice = B.price "
        "AND B.date_time BETWEEN H.window_end - INTERVAL '10' SECOND AND H.window_end"
    )
    got = execute(cat, "SET watermark.lag = INTERVAL '0' SECOND;\n" + text, NO_SESSION)
    joined = highest.key_by("maxprice").interval_join(timed(BID).key_by("price"), between=(-9_999, 1))
    twin = joined.select("auction", col("maxprice").alias("price"), "bidder", "date_time")
    assert got is not None and got.plan == twin.plan
    flipped = text.replace("FROM highest H JOIN bid B", "FROM bid B JOIN highest H")
    got = execute(cat, "SET watermark.lag = INTERVAL '0' SECOND;\n" + flipped, NO_SESSION)
    assert got is not None
    join = n.stateless_below(got.plan)
    assert isinstance(join, n.Join) and join.between == (-1, 9_999)  # right: the window's, 1 ms earlier
    with plan_error("window's results", "window_end"):
        execute(cat, text.replace("H.window_end", "H.window_start"), NO_SESSION)


def test_qualify_ranks_a_retracting_window_of_a_joins_rows() -> None:
    """Window top-N after a window after a join: the window retracts (SET window.accumulation), so
    a late partner's correction re-ranks the window and withdraws what left the top."""
    text = (
        f"SET window.accumulation = retracting; SELECT A.category, {WINDOW}, COUNT(*) AS n {ON} "
        f"GROUP BY A.category, {WINDOW} "
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) <= 1"
    )
    ranked = execute(catalog(), text, NO_SESSION)
    assert ranked is not None
    top = n.stateless_below(ranked.plan)
    assert isinstance(top, n.TopN) and top.n == 1 and top.ties == "first"
    assert isinstance(top.input, n.WindowAggregate) and top.input.emission.accumulation == "retracting"
    assert n.joins_of(top.input) and ranked.lower().lowering == "stateful"


def test_a_group_by_over_a_union_all_of_two_joins_is_the_builders_aggregation_over_their_union() -> None:
    """SQL 3.13's union of changelogs: a GROUP BY over a UNION ALL of two join subqueries."""
    schemas = {
        "clicks": "user string, t timestamp, ad string",
        "views": "user string, t timestamp, ad string",
        "ads": "ad string, t timestamp, campaign string",
        "budgets": "ad string, t timestamp, budget bigint",
    }
    streams = {
        name: Stream(NO_SESSION, n.MemorySource(name=name, schema=to_schema(ddl), path=f"/{name}")).watermark(
            "t", 0
        )
        for name, ddl in schemas.items()
    }
    cat = SqlCatalog()
    for name, stream in streams.items():
        cat.register(name, stream.plan)
    query = (
        "SELECT ad, COUNT(*) AS n FROM ("
        "SELECT c.ad AS ad, c.t AS t FROM clicks c JOIN views v "
        "ON c.user = v.user AND v.t BETWEEN c.t - INTERVAL '5' SECOND AND c.t "
        "UNION ALL "
        "SELECT a.ad AS ad, a.t AS t FROM ads a JOIN budgets b "
        "ON a.ad = b.ad AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t"
        ") GROUP BY ad"
    )
    out = execute(cat, query, NO_SESSION)
    assert out is not None
    first = (
        streams["clicks"].key_by("user").interval_join(streams["views"].key_by("user"), between=(-5_000, 0))
    )
    second = streams["ads"].key_by("ad").interval_join(streams["budgets"].key_by("ad"), between=(-5_000, 0))
    union = first.select("ad", "t").union(second.select("ad", "t"))
    twin = union.key_by("ad").agg(COUNT.alias("n"))
    assert out.plan == twin.plan, f"\nSQL:\n{n.render_plan(out.plan)}\nbuilder:\n{n.render_plan(twin.plan)}"


def test_a_window_over_a_union_all_of_two_joins_takes_each_joins_event_time_column() -> None:
    """The window helper's column must be each join's event time (its later row's time), branch by
    branch: the left side's time here; the right side's is refused, naming the left's."""
    schemas = {
        "clicks": "user string, t timestamp, ad string",
        "views": "user string, t timestamp, ad string",
        "ads": "ad string, t timestamp, campaign string",
        "budgets": "ad string, t timestamp, budget bigint",
    }
    cat = SqlCatalog()
    for name, ddl in schemas.items():
        node = n.MemorySource(name=name, schema=to_schema(ddl), path=f"/{name}")
        cat.register(name, Stream(NO_SESSION, node).watermark("t", 0).plan)

    def query(clicks_time: str) -> str:
        return (
            "SELECT ad, tumble_start(t, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ("
            f"SELECT c.ad AS ad, {clicks_time} AS t FROM clicks c JOIN views v "
            "ON c.user = v.user AND v.t BETWEEN c.t - INTERVAL '5' SECOND AND c.t "
            "UNION ALL "
            "SELECT a.ad AS ad, a.t AS t FROM ads a JOIN budgets b "
            "ON a.ad = b.ad AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t"
            ") GROUP BY ad, tumble_start(t, INTERVAL '10' SECOND)"
        )

    out = execute(cat, query("c.t"), NO_SESSION)
    assert out is not None
    window = next(x for x in n.walk(out.plan) if isinstance(x, n.WindowAggregate))
    assert isinstance(n.stateless_below(window.input), n.Union)
    with plan_error("the left side's time", "the window's time column 't' is not it"):
        execute(cat, query("v.t"), NO_SESSION)
