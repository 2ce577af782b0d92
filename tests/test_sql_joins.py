"""SQL joins (``session.sql``): the interval, window and as-of joins against their builder twins.

Every test compares logical plans — the SQL's must equal the builder's — or
checks a refusal's words and position; none starts Spark (a catalog of plan
nodes and no session, as in tests/test_sql.py).
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
CLICKS = n.MemorySource(
    name="clicks",
    schema=to_schema("user_id string, ad string, ts timestamp, amount double, ts_ms bigint"),
    path="/data/clicks",
)
VIEWS = n.MemorySource(
    name="views",
    schema=to_schema("user_id string, ad string, ts timestamp, cost double, ts_ms bigint, amount double"),
    path="/data/views",
)
#: A stream keyed by another name, with a key column of another type.
USERS = n.MemorySource(
    name="users", schema=to_schema("uid string, code bigint, at timestamp, name string"), path="/data/users"
)

#: The as-of join's streams: each order with the rate of its currency in force at its time.
ORDERS = n.MemorySource(
    name="orders",
    schema=to_schema("order_id string, currency string, amount double, ts timestamp, ts_ms bigint"),
    path="/data/orders",
)
RATES = n.MemorySource(
    name="rates",
    schema=to_schema("currency string, rate double, ts timestamp, ts_ms bigint"),
    path="/data/rates",
)
#: Rates with two timestamp columns: which one is event time must be said.
QUOTES = n.MemorySource(
    name="quotes",
    schema=to_schema("currency string, rate double, quoted timestamp, fetched timestamp"),
    path="/data/quotes",
)

SECOND = 1_000
BETWEEN = "c.ts BETWEEN v.ts - INTERVAL '5' SECOND AND v.ts + INTERVAL '1' SECOND"


def catalog(**plans: n.PlanNode) -> SqlCatalog:
    cat = SqlCatalog()
    streams: dict[str, n.PlanNode] = {
        "clicks": CLICKS,
        "views": VIEWS,
        "users": USERS,
        "orders": ORDERS,
        "rates": RATES,
        "quotes": QUOTES,
    }
    for name, plan in (streams | plans).items():
        cat.register(name, plan)
    return cat


def sql(text: str, cat: SqlCatalog | None = None) -> Stream:
    out = execute(cat if cat is not None else catalog(), text, NO_SESSION)
    assert out is not None
    return out


def source(plan: n.PlanNode) -> Stream:
    return Stream(NO_SESSION, plan)


def clicks(lag: int = 0, column: str = "ts") -> Stream:
    return source(CLICKS).watermark(column, lag)


def views(lag: int = 0, column: str = "ts") -> Stream:
    return source(VIEWS).watermark(column, lag)


def same_plan(text: str, twin: Stream, cat: SqlCatalog | None = None) -> None:
    got = sql(text, cat).plan
    assert got == twin.plan, f"\nSQL:\n{n.render_plan(got)}\nbuilder:\n{n.render_plan(twin.plan)}"


def plan_error(*words: str) -> Any:
    """pytest.raises(PlanError) whose message mentions every word."""
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def interval(lower: int, upper: int, how: Any = "inner", *keys: str) -> Stream:
    """views ⋈ clicks, the interval join of the tests' SQL (views on the left)."""
    keys = keys or ("user_id",)
    return views().key_by(*keys).interval_join(clicks().key_by(*keys), between=(lower, upper), how=how)


def tvf(stream: str, size: str = "INTERVAL '10' SECOND", kind: str = "TUMBLE", column: str = "ts") -> str:
    return f"TABLE({kind}(TABLE {stream}, DESCRIPTOR({column}), {size}))"


WINDOW_ON = "ON V.user_id = C.user_id AND V.window_start = C.window_start AND V.window_end = C.window_end"
WINDOW_JOIN = f"SELECT * FROM {tvf('views')} V JOIN {tvf('clicks')} C {WINDOW_ON}"


# --- the interval join ----------------------------------------------------------------------


def test_the_interval_join_with_between_is_interval_join() -> None:
    text = f"SELECT * FROM views v JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    same_plan(text, interval(-5 * SECOND, SECOND))
    # The joined row: keys once, the left columns, the right ones (_right on clashes).
    assert sql(text).columns == (
        "user_id",
        "ad",
        "ts",
        "cost",
        "ts_ms",
        "amount",
        "ad_right",
        "ts_right",
        "amount_right",
        "ts_ms_right",
    )


@pytest.mark.parametrize(
    "on",
    [
        # the key equality either way round, the time range first or last, in parentheses
        f"c.user_id = v.user_id AND {BETWEEN}",
        f"({BETWEEN}) AND (v.user_id = c.user_id)",
        # >= / <= pairs, either order, either side of the comparison
        "v.user_id = c.user_id AND c.ts >= v.ts - INTERVAL '5' SECOND AND c.ts <= v.ts + INTERVAL '1' SECOND",
        "v.user_id = c.user_id AND c.ts <= v.ts + INTERVAL '1' SECOND AND c.ts >= v.ts - INTERVAL '5' SECOND",
        "v.user_id = c.user_id AND v.ts - INTERVAL '5' SECOND <= c.ts AND v.ts + INTERVAL '1' SECOND >= c.ts",
        # the bounds written on the left side's time: v.ts - 1 s <= c.ts <= v.ts + 5 s
        "v.user_id = c.user_id AND v.ts BETWEEN c.ts - INTERVAL '1' SECOND AND c.ts + INTERVAL '5' SECOND",
        "v.user_id = c.user_id AND v.ts + INTERVAL '1' SECOND >= c.ts AND c.ts + INTERVAL '5' SECOND >= v.ts",
        # offsets on both sides, and INTERVAL + column
        "v.user_id = c.user_id AND c.ts + INTERVAL '5' SECOND >= v.ts AND c.ts <= INTERVAL '1' SECOND + v.ts",
        # unqualified columns that only one side has are that side's; case does not matter
        "V.USER_ID = C.user_id AND C.TS BETWEEN v.Ts - INTERVAL 5 SECONDS AND v.ts + INTERVAL '1 second'",
    ],
)
def test_interval_join_conditions_in_every_form_make_the_same_plan(on: str) -> None:
    same_plan(f"SELECT * FROM views v JOIN clicks c ON {on}", interval(-5 * SECOND, SECOND))


def test_stream_names_qualify_their_columns_without_an_alias() -> None:
    text = (
        "SELECT * FROM views JOIN clicks ON views.user_id = clicks.user_id "
        "AND clicks.ts BETWEEN views.ts - INTERVAL '5' SECOND AND views.ts + INTERVAL '1' SECOND"
    )
    same_plan(text, interval(-5 * SECOND, SECOND))


def test_several_key_equalities_are_the_keys_in_order() -> None:
    text = f"SELECT * FROM views v JOIN clicks c ON v.ad = c.ad AND {BETWEEN} AND c.user_id = v.user_id"
    same_plan(text, interval(-5 * SECOND, SECOND, "inner", "ad", "user_id"))


@pytest.mark.parametrize(
    ("join", "how"),
    [
        ("JOIN", "inner"),
        ("INNER JOIN", "inner"),
        ("LEFT JOIN", "left"),
        ("LEFT OUTER JOIN", "left"),
        ("RIGHT JOIN", "right"),
        ("RIGHT OUTER JOIN", "right"),
        ("FULL JOIN", "full"),
        ("FULL OUTER JOIN", "full"),
    ],
)
def test_outer_interval_joins(join: str, how: str) -> None:
    text = f"SELECT * FROM views v {join} clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    same_plan(text, interval(-5 * SECOND, SECOND, how))


@pytest.mark.parametrize(
    ("low", "high", "between"),
    [
        ("v.ts - INTERVAL '10' MINUTE", "v.ts - INTERVAL '1' MINUTE", (-600_000, -60_000)),
        ("v.ts - (INTERVAL '1' MINUTE + INTERVAL '30' SECOND)", "v.ts", (-90_000, 0)),
        (
            "v.ts - INTERVAL '1' MINUTE - INTERVAL '30' SECOND",
            "v.ts + INTERVAL '250' MILLISECONDS",
            (-90_000, 250),
        ),
        ("v.ts", "v.ts + INTERVAL '2' HOUR", (0, 7_200_000)),
        ("v.ts + INTERVAL '1' DAY", "v.ts + INTERVAL '1' WEEK", (86_400_000, 604_800_000)),
        ("v.ts + -INTERVAL '3' SECOND", "v.ts + INTERVAL '-1' SECOND", (-3_000, -1_000)),
        ("v.ts", "v.ts", (0, 0)),
    ],
)
def test_interval_bounds_in_every_unit(low: str, high: str, between: tuple[int, int]) -> None:
    text = f"SELECT * FROM views v JOIN clicks c ON v.user_id = c.user_id AND c.ts BETWEEN {low} AND {high}"
    same_plan(text, interval(*between))


def test_a_bigint_event_time_takes_offsets_in_milliseconds() -> None:
    twin = (
        views(column="ts_ms")
        .key_by("user_id")
        .interval_join(clicks(column="ts_ms").key_by("user_id"), between=(-5_000, 250))
    )
    for bounds in [
        "v.ts_ms - 5000 AND v.ts_ms + 250",
        "v.ts_ms - INTERVAL '5' SECOND AND v.ts_ms + 250",
        "v.ts_ms + -5000 AND 250 + v.ts_ms",
    ]:
        text = f"SELECT * FROM views v JOIN clicks c ON v.user_id = c.user_id AND c.ts_ms BETWEEN {bounds}"
        same_plan(text, twin)


def test_a_self_join_takes_aliases() -> None:
    text = (
        "SELECT * FROM clicks a JOIN clicks b ON a.ad = b.ad "
        "AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE"
    )
    twin = clicks().key_by("ad").interval_join(clicks().key_by("ad"), between=(0, 60_000))
    same_plan(text, twin)


def test_keys_of_other_names_are_named_as_on_the_left() -> None:
    text = (
        "SELECT * FROM users u JOIN clicks c ON u.uid = c.user_id "
        "AND c.ts BETWEEN u.at AND u.at + INTERVAL '1' HOUR"
    )
    twin = (
        source(USERS)
        .watermark("at", 0)
        .key_by("uid")
        .interval_join(clicks().key_by("user_id"), between=(0, 3_600_000))
    )
    same_plan(text, twin)
    assert sql(text).columns[0] == "uid" and "user_id" not in sql(text).columns


# --- watermarks ------------------------------------------------------------------------------


def test_set_watermark_settings_give_both_sides_their_watermark() -> None:
    text = f"""SET watermark.lag = INTERVAL '2' SECOND;
               SET watermark.future_tolerance = INTERVAL '1' HOUR,
                   watermark.idle_timeout = INTERVAL '30' SECOND;
               SELECT * FROM views v LEFT JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"""

    def timed(stream: Stream) -> Stream:
        return stream.watermark("ts", 2_000, future_tolerance_ms=3_600_000, idle_timeout_ms=30_000)

    twin = (
        timed(source(VIEWS))
        .key_by("user_id")
        .interval_join(timed(source(CLICKS)).key_by("user_id"), between=(-5_000, 1_000), how="left")
    )
    same_plan(text, twin)


def test_set_watermark_column_names_the_time_columns_of_both_sides() -> None:
    text = """SET watermark.column = ts_ms;
              SELECT * FROM views v JOIN clicks c ON v.user_id = c.user_id
              AND c.ts_ms BETWEEN v.ts_ms - INTERVAL '5' SECOND AND v.ts_ms"""
    twin = (
        views(column="ts_ms")
        .key_by("user_id")
        .interval_join(clicks(column="ts_ms").key_by("user_id"), between=(-5_000, 0))
    )
    same_plan(text, twin)


def test_registered_streams_keep_their_own_watermarks() -> None:
    own_views = views(lag=5_000).filter(kp.col("cost") > 0)
    own_clicks = clicks(lag=1_000)
    cat = catalog(paid_views=own_views.plan, late_clicks=own_clicks.plan)
    text = f"SELECT * FROM paid_views v JOIN late_clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    twin = own_views.key_by("user_id").interval_join(own_clicks.key_by("user_id"), between=(-5_000, 1_000))
    same_plan(text, twin, cat)
    # one side with a watermark of its own, the other declared by the SQL
    text = f"SELECT * FROM paid_views v JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    same_plan(
        text,
        own_views.key_by("user_id").interval_join(clicks().key_by("user_id"), between=(-5_000, 1_000)),
        cat,
    )


# --- the window join -------------------------------------------------------------------------


def window_twin(how: Any = "inner", size: int = 10_000) -> Stream:
    return (
        views()
        .key_by("user_id")
        .tumbling_window(size)
        .join(clicks().key_by("user_id").tumbling_window(size), how=how)
    )


def test_the_window_join_of_flinks_window_tvfs_is_a_window_join() -> None:
    same_plan(WINDOW_JOIN, window_twin())
    assert sql(WINDOW_JOIN).columns[:3] == ("user_id", "window_start", "window_end")


@pytest.mark.parametrize(
    "on",
    [
        "V.window_end = C.window_end AND C.user_id = V.user_id AND C.window_start = V.window_start",
        "(V.window_start = C.window_start AND V.window_end = C.window_end) AND V.user_id = C.user_id",
        "v.USER_ID = c.user_id AND v.WINDOW_START = c.window_start AND v.window_end = c.WINDOW_END",
    ],
)
def test_window_join_conditions_in_any_order(on: str) -> None:
    same_plan(f"SELECT * FROM {tvf('views')} AS V JOIN {tvf('clicks')} AS C ON {on}", window_twin())


@pytest.mark.parametrize(
    ("join", "how"),
    [
        ("LEFT JOIN", "left"),
        ("RIGHT OUTER JOIN", "right"),
        ("FULL OUTER JOIN", "full"),
        ("LEFT SEMI JOIN", "semi"),
        ("LEFT ANTI JOIN", "anti"),
    ],
)
def test_window_joins_of_every_kind(join: str, how: str) -> None:
    same_plan(WINDOW_JOIN.replace(" JOIN ", f" {join} "), window_twin(how))


def test_hop_is_a_sliding_window_and_tumble_takes_an_offset() -> None:
    hop = "INTERVAL '5' SECOND, INTERVAL '1' MINUTE"
    text = f"SELECT * FROM {tvf('views', hop, 'HOP')} V JOIN {tvf('clicks', hop, 'HOP')} C {WINDOW_ON}"
    twin = (
        views()
        .key_by("user_id")
        .sliding_window(60_000, 5_000)
        .join(clicks().key_by("user_id").sliding_window(60_000, 5_000))
    )
    same_plan(text, twin)
    offset = "INTERVAL '1' HOUR, INTERVAL '15' MINUTE"
    text = f"SELECT * FROM {tvf('views', offset)} V JOIN {tvf('clicks', offset)} C {WINDOW_ON}"
    twin = (
        views()
        .key_by("user_id")
        .tumbling_window(3_600_000, offset_ms=900_000)
        .join(clicks().key_by("user_id").tumbling_window(3_600_000, offset_ms=900_000))
    )
    same_plan(text, twin)


def test_window_tvfs_take_their_time_column_and_watermark_settings() -> None:
    text = f"""SET watermark.lag = INTERVAL '1' SECOND;
               SELECT * FROM {tvf("views", column="ts_ms")} V
               JOIN {tvf("clicks", column="ts_ms")} C {WINDOW_ON}"""
    twin = (
        views(1_000, "ts_ms")
        .key_by("user_id")
        .tumbling_window(10_000)
        .join(clicks(1_000, "ts_ms").key_by("user_id").tumbling_window(10_000))
    )
    same_plan(text, twin)
    # without an alias, the stream's name qualifies the columns
    text = (
        f"SELECT * FROM {tvf('views')} JOIN {tvf('clicks')} ON views.user_id = clicks.user_id "
        "AND views.window_start = clicks.window_start AND views.window_end = clicks.window_end"
    )
    same_plan(text, window_twin())


# --- the as-of join ----------------------------------------------------------------------------

AS_OF = "SELECT * FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency"


def orders(lag: int = 0, column: str = "ts") -> Stream:
    return source(ORDERS).watermark(column, lag)


def rates(lag: int = 0, column: str = "ts") -> Stream:
    return source(RATES).watermark(column, lag)


def as_of(how: Any = "inner", max_age_ms: int | None = None, *keys: str) -> Stream:
    """orders ⋈ rates, the as-of join of the tests' SQL (orders on the left)."""
    keys = keys or ("currency",)
    return orders().key_by(*keys).as_of_join(rates().key_by(*keys), how=how, max_age_ms=max_age_ms)


def test_flinks_temporal_join_is_the_as_of_join() -> None:
    same_plan(AS_OF, as_of())
    # The joined row: the key once, the left columns, the right ones (_right on clashes).
    assert sql(AS_OF).columns == (
        "currency",
        "order_id",
        "amount",
        "ts",
        "ts_ms",
        "rate",
        "ts_right",
        "ts_ms_right",
    )


@pytest.mark.parametrize(
    ("join", "how"),
    [("JOIN", "inner"), ("INNER JOIN", "inner"), ("LEFT JOIN", "left"), ("LEFT OUTER JOIN", "left")],
)
def test_inner_and_left_as_of_joins(join: str, how: str) -> None:
    same_plan(AS_OF.replace(" JOIN ", f" {join} "), as_of(how))


@pytest.mark.parametrize(
    ("on", "max_age_ms"),
    [
        # the max age, written as r.ts >= o.ts - age in every form of an interval join's bound
        ("o.currency = r.currency AND r.ts >= o.ts - INTERVAL '1' HOUR", 3_600_000),
        ("r.ts >= o.ts - INTERVAL '1' HOUR AND r.currency = o.currency", 3_600_000),
        ("(o.currency = r.currency) AND (o.ts - INTERVAL '90' SECOND <= r.ts)", 90_000),
        ("o.currency = r.currency AND r.ts + INTERVAL '1' MINUTE >= o.ts", 60_000),
        ("o.currency = r.currency AND o.ts <= INTERVAL '1' MINUTE + r.ts", 60_000),
        (
            "o.currency = r.currency AND r.ts >= o.ts - (INTERVAL '1' MINUTE + INTERVAL '500' MILLISECONDS)",
            60_500,
        ),
        # a right row at the left row's time only
        ("o.currency = r.currency AND r.ts >= o.ts", 0),
        # no bound: no max age
        ("R.CURRENCY = o.Currency", None),
    ],
)
def test_as_of_join_conditions_and_the_max_age(on: str, max_age_ms: int | None) -> None:
    text = f"SELECT * FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON {on}"
    same_plan(text, as_of("left", max_age_ms))


def test_as_of_join_keys_names_and_time_columns() -> None:
    # several keys, in the order written
    text = (
        "SELECT * FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r "
        "ON o.currency = r.currency AND r.ts_ms = o.ts_ms"
    )
    twin = orders().key_by("currency", "ts_ms").as_of_join(rates().key_by("currency", "ts_ms"))
    same_plan(text, twin)
    # without an alias the stream's name qualifies its columns; the alias without AS
    text = (
        "SELECT * FROM orders JOIN rates FOR SYSTEM_TIME AS OF orders.ts ON orders.currency = rates.currency"
    )
    same_plan(text, as_of())
    same_plan(AS_OF.replace("o.ts AS r", "o.ts r"), as_of())
    # an unqualified AS OF column that only the left side has; keys of other names
    text = "SELECT * FROM users u JOIN clicks FOR SYSTEM_TIME AS OF at AS c ON u.uid = c.user_id"
    twin = source(USERS).watermark("at", 0).key_by("uid").as_of_join(clicks().key_by("user_id"))
    same_plan(text, twin)
    # a bigint event time: the max age may be plain milliseconds
    text = (
        "SELECT * FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts_ms AS r "
        "ON o.currency = r.currency AND r.ts_ms >= o.ts_ms - 5000"
    )
    twin = (
        orders(column="ts_ms")
        .key_by("currency")
        .as_of_join(rates(column="ts_ms").key_by("currency"), max_age_ms=5_000)
    )
    same_plan(text, twin)


def test_as_of_join_watermarks() -> None:
    # SET watermark.* declares both sides' watermarks; the right side's on its one timestamp column
    text = """SET watermark.lag = INTERVAL '2' SECOND, watermark.idle_timeout = INTERVAL '30' SECOND;
              SELECT * FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
              ON o.currency = r.currency"""

    def timed(stream: Stream) -> Stream:
        return stream.watermark("ts", 2_000, idle_timeout_ms=30_000)

    twin = (
        timed(source(ORDERS))
        .key_by("currency")
        .as_of_join(timed(source(RATES)).key_by("currency"), how="left")
    )
    same_plan(text, twin)
    # SET watermark.column names the time column of both sides
    text = f"SET watermark.column = ts_ms; {AS_OF.replace('o.ts AS', 'o.ts_ms AS')}"
    twin = orders(column="ts_ms").key_by("currency").as_of_join(rates(column="ts_ms").key_by("currency"))
    same_plan(text, twin)
    # a right side of two timestamps: the max age names its time column (or SET watermark.column)
    quotes = source(QUOTES).watermark("fetched", 0).key_by("currency")
    text = (
        "SELECT * FROM orders o JOIN quotes FOR SYSTEM_TIME AS OF o.ts AS q "
        "ON o.currency = q.currency AND q.fetched >= o.ts - INTERVAL '1' DAY"
    )
    same_plan(text, orders().key_by("currency").as_of_join(quotes, max_age_ms=86_400_000))
    # registered streams keep their own watermarks
    own_orders, own_rates = orders(lag=1_000), rates(lag=5_000, column="ts_ms")
    cat = catalog(own_orders=own_orders.plan, own_rates=own_rates.plan)
    text = (
        "SELECT * FROM own_orders o JOIN own_rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency"
    )
    same_plan(text, own_orders.key_by("currency").as_of_join(own_rates.key_by("currency")), cat)


def test_select_where_and_window_settings_over_an_as_of_join() -> None:
    a = kp.col
    text = """SELECT o.order_id, o.amount * r.rate AS converted, r.ts AS rate_ts, currency
              FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency
              WHERE r.rate IS NOT NULL AND o.amount > 0"""
    twin = (
        as_of("left")
        .filter(a("rate").is_not_null() & (a("amount") > 0))
        .select(
            "order_id",
            (a("amount") * a("rate")).alias("converted"),
            a("ts_right").alias("rate_ts"),
            "currency",
        )
    )
    same_plan(text, twin)
    same_plan(
        AS_OF.replace("SELECT *", "SELECT r.*"),
        as_of().select("currency", "rate", a("ts_right").alias("ts"), a("ts_ms_right").alias("ts_ms")),
    )
    text = f"""SET window.allowed_lateness = INTERVAL '1' MINUTE;
               SET window.accumulation = retracting;
               SET window.state_ttl = INTERVAL '1' DAY;
               {AS_OF}"""
    twin = (
        cast(kp.JoinedStream, as_of())
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .with_state_ttl(kp.StateTtlConfig(ttl_ms=86_400_000))
    )
    same_plan(text, twin)
    assert sql(text).columns[-1] == "kind"
    # a temporal join in a subquery is the pipeline so far
    same_plan(
        f"SELECT order_id FROM ({AS_OF}) j WHERE j.rate > 1",
        as_of().filter(a("rate") > 1).select("order_id"),
    )


# --- SELECT and WHERE over a join --------------------------------------------------------------


def test_select_lists_and_where_are_a_select_and_a_filter_after_the_join() -> None:
    base = f"FROM views v LEFT JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    joined = interval(-5_000, 1_000, "left")
    a = kp.col
    cases: list[tuple[str, Stream]] = [
        # Qualified and unqualified columns; a key by either side's name; a right column that
        # clashes is amount_right in the joined row, and named amount, as SQL names c.amount.
        (
            f"SELECT v.user_id, c.user_id AS k2, user_id AS k3, cost, c.amount, v.amount AS va {base}",
            joined.select(
                "user_id",
                a("user_id").alias("k2"),
                a("user_id").alias("k3"),
                "cost",
                a("amount_right").alias("amount"),
                a("amount").alias("va"),
            ),
        ),
        # expressions, and WHERE before the SELECT list
        (
            f"SELECT c.ts, c.amount * 2 AS doubled {base} WHERE c.amount IS NOT NULL AND v.cost > 1.5",
            joined.filter(a("amount_right").is_not_null() & (a("cost") > 1.5)).select(
                a("ts_right").alias("ts"), (a("amount_right") * 2).alias("doubled")
            ),
        ),
        # the joined row's own names work too
        (f"SELECT ad_right, amount_right {base}", joined.select("ad_right", "amount_right")),
        # *: the joined row as it is; WHERE alone is a filter
        (f"SELECT * {base} WHERE c.ts IS NULL", joined.filter(a("ts_right").is_null())),
        (
            f"SELECT *, cost + c.amount AS total {base}",
            joined.with_column("total", a("cost") + a("amount_right")),
        ),
        # a side's columns, keys included, named as on that side
        (f"SELECT v.* {base}", joined.select("user_id", "ad", "ts", "cost", "ts_ms", "amount")),
        (
            f"SELECT c.*, TRUE AS t {base}",
            joined.select(
                "user_id",
                a("ad_right").alias("ad"),
                a("ts_right").alias("ts"),
                a("amount_right").alias("amount"),
                a("ts_ms_right").alias("ts_ms"),
                kp.lit(True).alias("t"),
            ),
        ),
    ]
    for text, twin in cases:
        same_plan(text, twin)


def test_select_over_a_window_join_names_the_window_bounds() -> None:
    text = f"""SELECT V.window_start, window_end AS we, V.user_id, C.amount AS clicked, V.amount
               FROM {tvf("views")} V JOIN {tvf("clicks")} C {WINDOW_ON}
               WHERE C.window_start = V.window_start"""
    a = kp.col
    twin = (
        window_twin()
        .filter(a("window_start") == a("window_start"))
        .select(
            "window_start",
            a("window_end").alias("we"),
            "user_id",
            a("amount_right").alias("clicked"),
            "amount",
        )
    )
    same_plan(text, twin)
    # a semi join's rows hold the left columns; V.* has the window's bounds last, as Flink's TVF
    semi = f"SELECT V.*, C.user_id AS k FROM {tvf('views')} V LEFT SEMI JOIN {tvf('clicks')} C {WINDOW_ON}"
    twin = window_twin("semi").select(
        "user_id",
        "ad",
        "ts",
        "cost",
        "ts_ms",
        "amount",
        "window_start",
        "window_end",
        a("user_id").alias("k"),
    )
    same_plan(semi, twin)


def test_a_join_in_a_subquery_or_with_is_the_pipeline_so_far() -> None:
    join = f"SELECT v.user_id, c.amount FROM views v JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"
    inner = interval(-5_000, 1_000).select("user_id", kp.col("amount_right").alias("amount"))
    same_plan(f"SELECT * FROM ({join}) j WHERE j.amount > 1", inner.filter(kp.col("amount") > 1))
    same_plan(f"WITH j AS ({join}) SELECT user_id FROM j", inner.select("user_id"))


def test_window_settings_are_the_joins_options() -> None:
    text = f"""SET window.allowed_lateness = INTERVAL '1' MINUTE;
               SET window.accumulation = retracting;
               SET window.state_ttl = INTERVAL '1' HOUR;
               SELECT * FROM views v FULL JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}"""
    twin = (
        cast(kp.JoinedStream, interval(-5_000, 1_000, "full"))
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .with_state_ttl(kp.StateTtlConfig(ttl_ms=3_600_000))
    )
    same_plan(text, twin)
    assert sql(text).columns[-1] == "kind"
    text = f"SET window.allowed_lateness = INTERVAL '5' SECOND; {WINDOW_JOIN}"
    same_plan(text, cast(kp.JoinedStream, window_twin()).allowed_lateness(5_000))


# --- what SQL refuses, and where ----------------------------------------------------------------

J = "SELECT * FROM views v JOIN clicks c ON v.user_id = c.user_id"
TVFS = f"FROM {tvf('views')} V JOIN {tvf('clicks')} C"
ERRORS: list[tuple[str, list[str]]] = [
    # joins that are not a key equality plus one time range
    ("SELECT * FROM views, clicks", ["CROSS JOIN (and FROM a, b) is not supported", "line 1, column 20"]),
    ("SELECT * FROM views v CROSS JOIN clicks c", ["CROSS JOIN", "r.ts BETWEEN", "line 1, column 23"]),
    ("SELECT * FROM views v JOIN clicks c", ["CROSS JOIN", "line 1, column 23"]),
    ("SELECT * FROM views NATURAL JOIN clicks", ["NATURAL JOIN is not supported", "line 1, column 21"]),
    ("SELECT * FROM views JOIN clicks USING (user_id)", ["USING is not supported", "line 1, column 21"]),
    (
        f"{J.replace(' JOIN', ' ASOF JOIN')}",
        [
            "ASOF JOIN is not supported",
            "JOIN r FOR SYSTEM_TIME AS OF l.ts",
            "as_of_join()",
            "line 1, column 28",
        ],
    ),
    (J, ["an interval join needs a time range", "r.ts BETWEEN l.ts", "line 1, column 40"]),
    (
        f"{J} AND {BETWEEN} AND v.cost > 0",
        ["key equalities and one time range", "WHERE", "line 1, column 141"],
    ),
    (f"{J} AND ({BETWEEN} OR v.cost > 0)", ["key equalities and one time range", "line 1, column 67"]),
    (
        f"{J} AND c.ts > v.ts - INTERVAL '5' SECOND AND c.ts <= v.ts",
        ["are inclusive: write <= or >=", "line 1, column 66"],
    ),
    (
        f"{J} AND c.ts >= v.ts - INTERVAL '5' SECOND AND c.ts >= v.ts - INTERVAL '1' SECOND AND c.ts <= v.ts",
        ["one time range, one lower and one upper bound", "line 1, column 105"],
    ),
    (f"{J} AND c.ts >= v.ts - INTERVAL '5' SECOND", ["needs an upper bound", "line 1, column 66"]),
    (
        f"{J} AND c.ts BETWEEN c.ts - INTERVAL '5' SECOND AND v.ts",
        ["compares a time column of one side with the other side's", "line 1, column 66"],
    ),
    (
        f"{J} AND c.ts BETWEEN v.ts - INTERVAL '5' SECOND AND v.ts + c.ts",
        ["a time column plus or minus an INTERVAL", "line 1, column 110"],
    ),
    (
        f"{J} AND c.ts BETWEEN v.ts * 2 AND v.ts",
        ["a time column plus or minus an INTERVAL", "line 1, column 79"],
    ),
    (
        f"{J} AND c.ts BETWEEN v.ts - 5000 AND v.ts",
        ["a plain number is an offset in milliseconds only on a bigint event time", "line 1, column 86"],
    ),
    (
        f"{J} AND c.ts BETWEEN v.ts - INTERVAL '1' MONTH AND v.ts",
        ["unit MONTH is not supported", "line 1, column 86"],
    ),
    (
        f"{J} AND c.ts_ms BETWEEN v.ts_ms - 1.5 AND v.ts_ms",
        ["whole number of milliseconds", "line 1, column 92"],
    ),
    (
        f"{J} AND c.ts >= v.ts - INTERVAL '5' SECOND AND c.ts_ms <= v.ts_ms",
        ["compare the same two time columns", "line 1, column 105"],
    ),
    (f"SELECT * FROM views v JOIN clicks c ON {BETWEEN}", ["at least one key equality", "line 1, column 40"]),
    (
        f"SELECT * FROM views v JOIN clicks c ON v.user_id = v.ad AND {BETWEEN}",
        ["compares two columns of the left side", "line 1, column 40"],
    ),
    (
        f"SELECT * FROM views v JOIN clicks c ON user_id = c.user_id AND {BETWEEN}",
        ["'user_id' is on both sides of the join; qualify it: v.user_id or c.user_id", "line 1, column 40"],
    ),
    (
        f"{J} AND x.ts BETWEEN v.ts AND v.ts",
        ["unknown stream or alias 'x'", "joins v and c", "line 1, column 66"],
    ),
    (
        f"SELECT * FROM views v JOIN clicks c ON v.nope = c.user_id AND {BETWEEN}",
        ["unknown column 'nope'", "stream 'views': user_id, ad", "line 1, column 40"],
    ),
    # the builder's own checks, at the JOIN
    (
        f"{J} AND c.ts BETWEEN v.ts + INTERVAL '5' SECOND AND v.ts",
        ["JOIN: interval_join(between=(5000, 0)): lower_ms must be <= upper_ms", "line 1, column 23"],
    ),
    (
        "SELECT * FROM users u JOIN clicks c ON u.code = c.user_id AND c.ts BETWEEN u.at AND u.at",
        ["key 'code' is bigint on the left but 'user_id' is string", "line 1, column 23"],
    ),
    # more than two streams, subqueries and WITH names as sides, a stream twice without an alias
    (
        f"{J} AND {BETWEEN} JOIN users u ON u.uid = v.user_id",
        ["a join of three or more is not supported", "line 1, column 137"],
    ),
    (
        f"SELECT * FROM views v JOIN (SELECT * FROM clicks) c ON v.user_id = c.user_id AND {BETWEEN}",
        ["not a subquery", "stream.register(name)", "line 1, column 36"],
    ),
    (
        "WITH c AS (SELECT * FROM clicks) "
        f"SELECT * FROM views v JOIN c ON v.user_id = c.user_id AND {BETWEEN}",
        ["not a WITH subquery ('c')", "line 1, column 61"],
    ),
    (
        "SELECT * FROM views JOIN views ON views.user_id = views.user_id",
        ["both sides of the JOIN are called 'views'; give one an alias", "line 1, column 26"],
    ),
    # aggregations over a join (GROUP BY over a join: tests/test_sql_composition.py)
    (
        f"SELECT COUNT(*) AS n FROM views v JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}",
        ["aggregating the rows of a join", "line 1, column 8"],
    ),
    (
        f"SELECT v.ad, tumble_start(v.ts, INTERVAL '1' MINUTE) AS ws {J[9:]} AND {BETWEEN}",
        ["aggregating the rows of a join", "line 1, column 14"],
    ),
    (
        f"SELECT COUNT(*) FROM (SELECT v.ts {J[9:]} AND {BETWEEN}) "
        "GROUP BY tumble_start(ts, INTERVAL '1' MINUTE)",
        ["a window over the rows of a join is not supported", "line 1, column 172"],
    ),
    # kinds of join
    (
        f"SELECT * FROM views v LEFT SEMI JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}",
        ["LEFT SEMI JOIN is a window join's", "line 1, column 23"],
    ),
    (
        f"SELECT * FROM views v RIGHT ANTI JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}",
        ["RIGHT ANTI JOIN is not supported; write LEFT ANTI JOIN", "line 1, column 23"],
    ),
    # the SELECT list
    (
        f"SELECT amount {J[9:]} AND {BETWEEN}",
        ["'amount' is on both sides", "v.amount or c.amount", "line 1, column 8"],
    ),
    (
        f"SELECT v.amount, c.amount {J[9:]} AND {BETWEEN}",
        ["duplicate column names: amount", "line 1, column 1"],
    ),
    (f"SELECT x.* {J[9:]} AND {BETWEEN}", ["unknown stream or alias 'x'", "line 1, column 8"]),
    (
        f"SELECT nope {J[9:]} AND {BETWEEN}",
        ["unknown column 'nope'", "joined rows are: user_id, ad", "column 8"],
    ),
    (
        f"SELECT c.nope {J[9:]} AND {BETWEEN}",
        ["unknown column 'nope'", "stream 'clicks' are:", "line 1, column 8"],
    ),
    # watermarks: the time range names each side's event-time column
    (
        f"SELECT * FROM own_views v JOIN clicks c ON v.user_id = c.user_id AND {BETWEEN}",
        ["time column 'ts' is not the event-time column of stream 'own_views'", "on 'ts_ms'", "column 83"],
    ),
    (
        f"SET watermark.lag = INTERVAL '1' SECOND; {J.replace('views', 'own_views')} AND {BETWEEN}",
        ["already has a watermark", "SET watermark.lag is for streams without one", "line 1, column 56"],
    ),
    (
        f"SET watermark.column = ts_ms; {J} AND {BETWEEN}",
        ["time column 'ts' is not the event-time column of stream 'views'", "line 1, column 109"],
    ),
    (
        "SELECT * FROM joined t JOIN clicks c ON t.user_id = c.user_id AND c.ts BETWEEN t.ts AND t.ts",
        ["the result of a window or a join", "line 1, column 15"],
    ),
    # window.* settings take the join's rules
    (
        f"SET window.trigger = on_every_element(); {J} AND {BETWEEN}",
        ["SET window.trigger does not apply to a join", "line 1, column 64"],
    ),
    (
        f"SET window.accumulation = discarding; {J} AND {BETWEEN}",
        ["'accumulating' or 'retracting', got 'discarding'", "line 1, column 61"],
    ),
    (
        "SET window.state_ttl = INTERVAL '1' HOUR; SET window.state_ttl_time = processing; "
        f"{J} AND {BETWEEN}",
        ["state TTL is measured in event time", "line 1, column 105"],
    ),
    # window joins
    (
        f"SELECT * FROM {tvf('views')} V JOIN {tvf('clicks', 'INTERVAL 20 SECONDS')} C {WINDOW_ON}",
        ["need the same window", "TUMBLE(views, DESCRIPTOR(ts), INTERVAL '10' SECOND)", "line 1, column 93"],
    ),
    (
        f"SELECT * FROM {tvf('views')} V JOIN {tvf('clicks', '5000, 5000', 'HOP')} C {WINDOW_ON}",
        ["HOP: slide takes an INTERVAL", "line 1, column 127"],
    ),
    (
        f"SELECT * FROM {tvf('views')} V JOIN clicks C {WINDOW_ON}",
        ["a window TVF on both sides", "line 1, column 87"],
    ),
    (
        f"SELECT * {TVFS} ON V.user_id = C.user_id AND V.window_start = C.window_start",
        ["names each window bound once", "L.window_end = R.window_end", "line 1, column 158"],
    ),
    (
        f"SELECT * {TVFS} ON V.user_id = C.user_id AND V.window_start = C.window_end "
        "AND V.window_end = C.window_end",
        ["equates each bound of the two windows with itself", "line 1, column 184"],
    ),
    (
        f"SELECT * {TVFS} {WINDOW_ON} AND C.ts BETWEEN V.ts AND V.ts",
        ["meet by window, not by a time range", "line 1, column 252"],
    ),
    (
        f"SELECT * {TVFS} ON V.window_start = C.window_start AND V.window_end = C.window_end",
        ["at least one key equality", "line 1, column 158"],
    ),
    (
        f"SELECT * FROM {tvf('views', 'INTERVAL 10 SECONDS, INTERVAL 1 MINUTE', 'CUMULATE')} V "
        f"JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["window TVF CUMULATE is not supported", "TUMBLE or HOP", "line 1, column 21"],
    ),
    (
        f"SELECT * FROM {tvf('views', 'INTERVAL 1 SECOND, INTERVAL 2 SECOND, INTERVAL 3 SECOND', 'HOP')} V "
        f"JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["HOP takes (TABLE stream, DESCRIPTOR(ts), slide, size)", "line 1, column 21"],
    ),
    (
        f"SELECT * FROM {tvf('views', column='nope')} V JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["DESCRIPTOR names the event-time column of stream 'views'", "line 1, column 41"],
    ),
    (
        f"SELECT * FROM {tvf('views', 'INTERVAL 0 SECONDS')} V JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["TUMBLE: size_ms must be > 0", "line 1, column 21"],
    ),
    (
        "SELECT * FROM TABLE(TUMBLE(TABLE views, ts, INTERVAL '1' SECOND)) V "
        f"JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["the second argument of TUMBLE is DESCRIPTOR(<event-time column>)", "line 1, column 41"],
    ),
    (
        f"SELECT C.cost FROM {tvf('views')} V LEFT ANTI JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["unknown column 'cost'", "stream 'clicks' are: user_id", "line 1, column 8"],
    ),
    (
        f"SELECT C.ts FROM {tvf('views')} V LEFT ANTI JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["'ts' is a column of stream 'clicks'; the rows of this anti join hold the left side's columns only"],
    ),
    (
        f"SELECT C.* FROM {tvf('views')} V LEFT SEMI JOIN {tvf('clicks')} C {WINDOW_ON}",
        ["the rows of this semi join hold the left side's columns only", "line 1, column 8"],
    ),
    (
        f"SELECT * FROM {tvf('views')}",
        ["a window TVF", "is a side of a window join", "GROUP BY tumble_start", "line 1, column 15"],
    ),
    (
        "SELECT * FROM TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '1' SECOND)",
        ["is a side of a window join", "line 1, column 15"],
    ),
    (
        f"SELECT * FROM TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '1' SECOND) V JOIN {tvf('clicks')} C",
        ["CROSS JOIN (and FROM a, b) is not supported", "line 1, column 74"],
    ),
    (
        "SELECT * FROM TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '1' SECOND) V "
        f"JOIN {tvf('clicks')} C {WINDOW_ON}",
        [
            "a table function in FROM is not supported; a window TVF is written TABLE(TUMBLE(",
            "line 1, column 15",
        ],
    ),
    # as-of joins: the kinds of join
    (
        AS_OF.replace(" JOIN", " RIGHT JOIN"),
        [
            "RIGHT JOIN is not supported with FOR SYSTEM_TIME AS OF",
            "[INNER] JOIN or LEFT [OUTER] JOIN",
            "column 24",
        ],
    ),
    (
        AS_OF.replace(" JOIN", " FULL OUTER JOIN"),
        ["FULL OUTER JOIN is not supported with FOR SYSTEM_TIME", "column 24"],
    ),
    (
        AS_OF.replace(" JOIN", " LEFT ANTI JOIN"),
        ["LEFT ANTI JOIN is not supported with FOR SYSTEM_TIME", "column 24"],
    ),
    (
        AS_OF.replace(" JOIN", " LEFT SEMI JOIN"),
        ["LEFT SEMI JOIN is not supported with FOR SYSTEM_TIME", "column 24"],
    ),
    # the AS OF time is the left side's event-time column
    (
        AS_OF.replace("AS OF o.ts", "AS OF r.ts"),
        [
            "names the left side's event-time column",
            "'ts' is a column of stream 'rates'",
            "line 1, column 57",
        ],
    ),
    (
        AS_OF.replace("AS OF o.ts", "AS OF PROCTIME()"),  # a lookup join, of a table
        ["AS OF PROCTIME() looks rows up in a bounded table", "'rates' is a stream", "line 1, column 35"],
    ),
    (AS_OF.replace("AS OF o.ts", "AS OF ts"), ["'ts' is on both sides", "o.ts or r.ts", "line 1, column 57"]),
    (
        f"SET watermark.column = ts_ms; {AS_OF}",
        [
            "time column 'ts' is not the event-time column of stream 'orders'",
            "on 'ts_ms'",
            "line 1, column 87",
        ],
    ),
    (
        AS_OF.replace("rates", "joined").replace("o.currency = r.currency", "o.order_id = r.user_id"),
        ["the result of a window or a join", "line 1, column 29"],
    ),
    (
        AS_OF.replace("rates", "quotes"),
        ["which column of stream 'quotes' is event time", "SET watermark.column", "line 1, column 29"],
    ),
    # ON: key equalities and at most a max age, r.ts >= l.ts - age
    (
        f"{AS_OF} AND r.ts <= o.ts",
        [
            "bounds the right side's time from below only",
            "its upper bound is the AS OF time",
            "line 1, column 98",
        ],
    ),
    (
        f"{AS_OF} AND r.ts BETWEEN o.ts - INTERVAL '1' HOUR AND o.ts",
        ["from below only, its max age (r.ts >= l.ts - INTERVAL ...)", "line 1, column 98"],
    ),
    (
        f"{AS_OF} AND r.ts > o.ts - INTERVAL '1' HOUR",
        ["max age is inclusive: write <= or >=", "line 1, column 98"],
    ),
    (
        f"{AS_OF} AND r.ts >= o.ts + INTERVAL '1' SECOND",
        ["at or before the AS OF time", "this one is 1000 ms after it", "line 1, column 98"],
    ),
    (
        f"{AS_OF} AND r.ts >= o.ts - INTERVAL '1' HOUR AND r.ts >= o.ts - INTERVAL '1' DAY",
        ["an as-of join has one max age", "line 1, column 135"],
    ),
    (
        f"{AS_OF} AND r.ts_ms >= o.ts_ms - 5000",
        [
            "compares the right side's event time with the AS OF column",
            "o.ts - INTERVAL",
            "line 1, column 109",
        ],
    ),
    (f"{AS_OF} AND r.ts >= o.ts - 5000", ["only on a bigint event time", "line 1, column 113"]),
    (
        f"{AS_OF} AND r.rate > 0",
        ["key equalities and a max age", "FOR SYSTEM_TIME AS OF l.ts", "WHERE", "line 1, column 98"],
    ),
    (
        AS_OF.replace("o.currency = r.currency", "r.ts >= o.ts"),
        ["at least one key equality", "FOR SYSTEM_TIME AS OF", "line 1, column 70"],
    ),
    (
        "SELECT * FROM users u JOIN clicks FOR SYSTEM_TIME AS OF u.at AS c ON u.code = c.user_id",
        ["JOIN: as_of_join(): key 'code' is bigint on the left", "line 1, column 23"],
    ),
    # FOR SYSTEM_TIME AS OF as Flink writes it, on the right side, of a stream
    (
        AS_OF.replace("SYSTEM_TIME AS OF", "TIMESTAMP AS OF"),
        [
            "takes Flink's FOR SYSTEM_TIME AS OF",
            "time travel",
            "line 1, column 35: `FOR TIMESTAMP AS OF o.ts`",
        ],
    ),
    (
        AS_OF.replace("FOR SYSTEM_TIME", "TIMESTAMP"),
        ["time travel", "line 1, column 35: `TIMESTAMP AS OF o.ts`"],
    ),
    (AS_OF.replace("FOR SYSTEM_TIME AS OF o.ts", "VERSION AS OF 3"), ["time travel", "line 1, column 35"]),
    (
        AS_OF.replace("AS OF o.ts", "BETWEEN o.ts AND o.ts"),
        ["does not apply to streams", "line 1, column 35: `FOR SYSTEM_TIME BETWEEN`"],
    ),
    (
        "SELECT * FROM orders FOR SYSTEM_TIME AS OF rates.ts JOIN rates ON orders.currency = rates.currency",
        ["FOR SYSTEM_TIME AS OF goes on the right side of the join", "line 1, column 22"],
    ),
    (
        "SELECT * FROM rates FOR SYSTEM_TIME AS OF ts",
        ["FOR SYSTEM_TIME AS OF is not supported", "right side of an as-of join", "line 1, column 21"],
    ),
    (
        "SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' SECOND)) o "
        "JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency",
        ["an as-of join (FOR SYSTEM_TIME AS OF) joins two streams, not window TVFs", "line 1, column 15"],
    ),
    (
        "SELECT * FROM orders o JOIN TABLE(TUMBLE(TABLE rates, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
        "FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency",
        ["FOR SYSTEM_TIME AS OF follows a stream name", "line 1, column 93"],
    ),
    # what holds for every join holds for the as-of join
    (f"{AS_OF}\nGROUP BY o.currency", ["SELECT * cannot be windowed", "line 1, column 8"]),
    (
        f"SET window.trigger = on_every_element(); {AS_OF}",
        [
            "SET window.trigger does not apply to a join",
            "line 1, column 65: `JOIN rates FOR SYSTEM_TIME AS OF o.ts",
        ],
    ),
    (f"{AS_OF} JOIN users u ON u.uid = o.order_id", ["a join of three or more", "line 1, column 94"]),
]


@pytest.mark.parametrize(("text", "words"), ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_errors_name_the_construct_and_its_position(text: str, words: list[str]) -> None:
    joined = views().key_by("user_id").interval_join(clicks().key_by("user_id"), between=(0, 0))
    cat = catalog(own_views=views(lag=5_000, column="ts_ms").plan, joined=joined.plan)
    with plan_error(*words):
        execute(cat, text, NO_SESSION)


def test_a_failed_join_query_leaves_the_settings_waiting() -> None:
    cat = catalog()
    execute(cat, "SET watermark.lag = INTERVAL '3' SECOND", NO_SESSION)
    with plan_error("needs a time range"):
        execute(cat, J, NO_SESSION)
    same_plan(
        f"{J} AND {BETWEEN}",
        views(3_000)
        .key_by("user_id")
        .interval_join(clicks(3_000).key_by("user_id"), between=(-5_000, 1_000)),
        cat,
    )


# --- the examples of docs/sql.md and docs/joins.md ------------------------------------------------


def test_the_docs_examples_make_the_builders_plan() -> None:
    # docs/sql.md, Joins
    text = """SELECT *
              FROM views v LEFT JOIN clicks c
                ON v.user_id = c.user_id
               AND c.ts BETWEEN v.ts - INTERVAL '5' SECOND AND v.ts + INTERVAL '1' SECOND"""
    same_plan(text, interval(-5_000, 1_000, "left"))
    text = """SELECT *
              FROM TABLE(TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '10' SECOND)) V
              JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND)) C
                ON V.user_id = C.user_id AND V.window_start = C.window_start
               AND V.window_end = C.window_end"""
    same_plan(text, window_twin())
    text = """SELECT v.user_id, v.ts, c.ts AS clicked_at, c.amount
              FROM views v JOIN clicks c
                ON v.user_id = c.user_id AND c.ts BETWEEN v.ts AND v.ts + INTERVAL '1' MINUTE
              WHERE c.amount > 10"""
    a = kp.col
    twin = (
        views()
        .key_by("user_id")
        .interval_join(clicks().key_by("user_id"), between=(0, 60_000))
        .filter(a("amount_right") > 10)
        .select("user_id", "ts", a("ts_right").alias("clicked_at"), a("amount_right").alias("amount"))
    )
    same_plan(text, twin)
    text = """SELECT o.order_id, o.amount * r.rate AS converted
              FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
                ON o.currency = r.currency"""
    same_plan(text, as_of("left").select("order_id", (a("amount") * a("rate")).alias("converted")))
    # docs/joins.md, SQL
    text = """SELECT * FROM clicks c JOIN views v
                ON c.user_id = v.user_id AND c.ad = v.ad
               AND v.ts BETWEEN c.ts - INTERVAL '10' MINUTE AND c.ts"""
    twin = (
        clicks().key_by("user_id", "ad").interval_join(views().key_by("user_id", "ad"), between=(-600_000, 0))
    )
    same_plan(text, twin)
    persons = n.MemorySource(
        name="persons", schema=to_schema("id bigint, name string, ts timestamp"), path="/p"
    )
    auctions = n.MemorySource(
        name="auctions", schema=to_schema("id bigint, seller bigint, ts timestamp"), path="/a"
    )
    text = """SELECT * FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(ts), INTERVAL '10' SECOND)) P
              JOIN TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(ts), INTERVAL '10' SECOND)) A
                ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end"""
    twin = (
        source(persons)
        .watermark("ts", 0)
        .key_by("id")
        .tumbling_window(10_000)
        .join(source(auctions).watermark("ts", 0).key_by("seller").tumbling_window(10_000))
    )
    same_plan(text, twin, catalog(persons=persons, auctions=auctions))
    as_of_text = """SELECT * FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
                      ON o.currency = r.currency AND r.ts >= o.ts - INTERVAL '1' DAY"""
    same_plan(as_of_text, as_of("left", 86_400_000))
    assert sql(text, catalog(persons=persons, auctions=auctions)).columns == (
        "id",
        "window_start",
        "window_end",
        "name",
        "ts",
        "id_right",
        "ts_right",
    )
