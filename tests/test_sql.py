"""SQL front end (``session.sql``): every SQL form against its builder twin.

Most tests compare logical plans — the SQL's and the builder's must be equal,
which means one planner and the same rows everywhere — with no Spark (a
catalog of plan nodes and no session). A few run real Spark: the seed's SQL
example on a memory stream and on a Parquet source (bounded and streaming),
and a keyed query with a filter, a subquery and HAVING next to its builder
twin. A hypothesis property generates small queries from the supported
grammar and compares their plans with the builder's.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import attrs
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.testing import Send, assert_same_rows, run_reference, run_reference_bounded
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
DDL = "user_id string, event_time timestamp, amount double, region string, ts_ms bigint"
SCHEMA = to_schema(DDL)
EVENTS = n.MemorySource(name="events", schema=SCHEMA, path="/data/events")
CLICKS = n.MemorySource(name="clicks", schema=SCHEMA, path="/data/clicks")

#: The SQL example of ../shared/seeds/krishiv-windows-and-watermarks.txt, verbatim.
SEED = """SELECT
tumble_start(event_time, INTERVAL '1 minute') AS window_start,
tumble_end(event_time, INTERVAL '1 minute') AS window_end,
COUNT(*) AS events
FROM events
GROUP BY
tumble_start(event_time, INTERVAL '1 minute'),
tumble_end(event_time, INTERVAL '1 minute');"""

MINUTE = "INTERVAL '1' MINUTE"
START, END = f"tumble_start(event_time, {MINUTE})", f"tumble_end(event_time, {MINUTE})"


def catalog(**plans: n.PlanNode) -> SqlCatalog:
    cat = SqlCatalog()
    for name, plan in (plans or {"events": EVENTS}).items():
        cat.register(name, plan)
    return cat


def sql(text: str, cat: SqlCatalog | None = None) -> Stream:
    out = execute(cat if cat is not None else catalog(), text, NO_SESSION)
    assert out is not None
    return out


def events(source: n.PlanNode = EVENTS) -> Stream:
    return Stream(NO_SESSION, source)


def timed(lag: int = 0, source: n.PlanNode = EVENTS) -> Stream:
    return events(source).watermark("event_time", lag)


def same_plan(text: str, twin: Stream, cat: SqlCatalog | None = None) -> None:
    got = sql(text, cat).plan
    assert got == twin.plan, f"\nSQL:\n{n.render_plan(got)}\nbuilder:\n{n.render_plan(twin.plan)}"


def plan_error(*words: str) -> Any:
    """pytest.raises(PlanError) whose message mentions every word."""
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


COUNT = kp.count(kp.col("*"))

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
SEED_DDL = "user_id string, event_time timestamp, amount double"


def seed_rows(*seconds: int) -> list[dict[str, Any]]:
    users = ["alice", "bob", "carol"]
    return [
        {"user_id": users[i % 3], "event_time": T0 + dt.timedelta(seconds=s), "amount": float(i + 1)}
        for i, s in enumerate(seconds)
    ]


def seed_builder(stream: kp.Stream) -> kp.Stream:
    """The seed's SQL example, as the builder writes it."""
    return stream.watermark("event_time", 0).tumbling_window(60_000).agg(COUNT.alias("events"))


# --- every SQL form and its builder twin ------------------------------------------------


def test_the_seed_example_is_a_tumbling_window_with_lag_0() -> None:
    same_plan(SEED, timed().tumbling_window(60_000).agg(COUNT.alias("events")))


def test_keyed_tumbling_windows() -> None:
    text = f"""
        SELECT user_id, {START} AS window_start,
               {END} AS window_end,
               COUNT(*) AS events, SUM(amount) AS total
        FROM events
        GROUP BY user_id, {START}"""
    twin = (
        timed()
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(COUNT.alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )
    same_plan(text, twin)


def test_tumbling_windows_with_an_offset() -> None:
    text = """SELECT tumble_start(event_time, INTERVAL '1' HOUR, INTERVAL '15' MINUTE), COUNT(*) FROM events
              GROUP BY tumble_start(event_time, INTERVAL '1' HOUR, INTERVAL '15' MINUTE)"""
    twin = timed().tumbling_window(3_600_000, offset_ms=900_000).agg(COUNT).select("window_start", "count")
    same_plan(text, twin)


def test_hop_windows_take_slide_then_size() -> None:
    text = """SELECT region, hop_start(event_time, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) AS window_start,
                     hop_end(event_time, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) AS window_end,
                     MAX(amount)
              FROM events GROUP BY region, hop_end(event_time, INTERVAL '10' SECOND, INTERVAL '1' MINUTE)"""
    twin = timed().key_by("region").sliding_window(60_000, 10_000).agg(kp.max(kp.col("amount")))
    same_plan(text, twin)


def test_session_windows_and_capped_sessions() -> None:
    text = """SELECT user_id, session_start(event_time, INTERVAL '30' SECOND) AS window_start,
                     session_end(event_time, INTERVAL '30' SECOND) AS window_end, COUNT(*)
              FROM events GROUP BY user_id, session_start(event_time, INTERVAL '30' SECOND)"""
    same_plan(text, timed().key_by("user_id").session_window(30_000).agg(COUNT))
    capped = text.replace("INTERVAL '30' SECOND", "INTERVAL '30' SECOND, INTERVAL '2' MINUTE")
    same_plan(capped, timed().key_by("user_id").session_window(30_000, max_duration_ms=120_000).agg(COUNT))
    counted = "SET window.trigger = on_count(2); " + capped
    twin = timed().key_by("user_id").session_window(30_000, max_duration_ms=120_000)
    same_plan(counted, twin.trigger(kp.Trigger.on_count(2)).agg(COUNT))


def test_every_aggregate_with_default_names_and_aliases() -> None:
    text = f"""
        SELECT {START} AS window_start, {END} AS window_end,
               COUNT(*), COUNT(amount), COUNT(DISTINCT region), SUM(amount), AVG(amount) AS mean,
               MIN(amount), MAX(amount) AS top, FIRST(region), LAST(region) AS last_region
        FROM events GROUP BY {START}"""
    a = kp.col("amount")
    twin = (
        timed()
        .tumbling_window(60_000)
        .agg(
            COUNT,
            kp.count(a),
            kp.count_distinct(kp.col("region")),
            kp.sum(a),
            kp.avg(a).alias("mean"),
            kp.min(a),
            kp.max(a).alias("top"),
            kp.first(kp.col("region")),
            kp.last(kp.col("region")).alias("last_region"),
        )
    )
    same_plan(text, twin)
    assert sql(text).columns[2:5] == ("count", "count_amount", "count_distinct_region")
    assert sql(text.replace("COUNT(*)", "COUNT(1)")).plan == twin.plan


def test_row_number_over_a_stream_is_top_n_per_key_and_dedup() -> None:
    """Flink's deduplication and Top-N forms over a stream's rows: the builder's top_n(per="key")."""
    dedup = timed().top_n(1, by="event_time", per="key", keys=("user_id",), ties="first")
    same_plan(
        "SELECT user_id, event_time, amount, region, ts_ms FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY user_id ORDER BY event_time DESC) AS rn FROM events) WHERE rn = 1",
        dedup,
    )
    top = sql(
        "SELECT user_id, amount FROM (SELECT *, RANK() OVER (PARTITION BY region ORDER BY amount DESC) "
        "AS r FROM events) WHERE r <= 2"
    )
    assert top.columns == ("user_id", "amount", "kind")  # the kind of each change comes along


def test_group_by_without_a_window_helper_is_an_aggregation_per_key() -> None:
    """Flink's regular GROUP BY: one updating row per key, the builder's key_by(...).agg(...)."""
    a = kp.col("amount")
    twin = timed().key_by("user_id").agg(COUNT.alias("n"), kp.sum(a).alias("total"))
    same_plan("SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM events GROUP BY user_id", twin)
    reordered = sql("SELECT COUNT(*) AS n, user_id FROM events GROUP BY user_id")
    assert reordered.columns == ("n", "user_id", "kind")


def test_where_filters_before_the_window() -> None:
    text = f"""
        SELECT user_id, {START} AS window_start,
               {END} AS window_end, SUM(amount)
        FROM events
        WHERE amount > 0 AND region IN ('eu', 'us') AND NOT (user_id IS NULL)
        GROUP BY user_id, {START}"""
    r = kp.col("region")
    keep = (kp.col("amount") > 0) & ((r == "eu") | (r == "us")) & kp.col("user_id").is_not_null()
    twin = timed().filter(keep).key_by("user_id").tumbling_window(60_000).agg(kp.sum(kp.col("amount")))
    same_plan(text, twin)


def test_projections_before_the_window_are_a_subquery() -> None:
    text = f"""
        SELECT e.user_id, tumble_start(cents_at, {MINUTE}) AS window_start,
               tumble_end(cents_at, {MINUTE}) AS window_end, SUM(cents) AS total
        FROM (SELECT user_id, event_time AS cents_at, amount * 100 AS cents FROM events WHERE amount > 0) AS e
        GROUP BY e.user_id, tumble_start(cents_at, {MINUTE})"""
    cat = catalog()
    with plan_error("cents_at", "not a column of stream 'events'", "SET watermark.column"):
        sql(text, cat)
    twin = (
        timed()
        .filter(kp.col("amount") > 0)
        .select("user_id", kp.col("event_time").alias("cents_at"), (kp.col("amount") * 100).alias("cents"))
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.sum(kp.col("cents")).alias("total"))
    )
    same_plan("SET watermark.column = event_time;" + text, twin, cat)


def test_a_select_list_in_another_order_is_a_select_after_the_window() -> None:
    text = f"""
        SELECT COUNT(*) AS n, {END} AS closes, user_id AS who
        FROM events GROUP BY 3, closes"""
    twin = (
        timed()
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(COUNT.alias("n"))
        .select("n", kp.col("window_end").alias("closes"), kp.col("user_id").alias("who"))
    )
    same_plan(text, twin)


def test_keys_come_in_select_order_then_group_by_order() -> None:
    text = f"""SELECT region, user_id, {START} AS window_start,
                      {END} AS window_end, COUNT(*)
               FROM events GROUP BY user_id, region, {START}"""
    same_plan(text, timed().key_by("region", "user_id").tumbling_window(60_000).agg(COUNT))


def test_having_filters_the_results() -> None:
    text = f"""
        SELECT user_id, {START} AS window_start,
               {END} AS window_end, COUNT(*) AS n, SUM(amount)
        FROM events GROUP BY user_id, {START}
        HAVING COUNT(*) > 2 AND sum(amount) >= 10 AND n < 100"""
    result = kp.col("n")
    keep = (result > 2) & (kp.col("sum_amount") >= 10) & (result < 100)
    twin = (
        timed()
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(COUNT.alias("n"), kp.sum(kp.col("amount")))
        .filter(keep)
    )
    same_plan(text, twin)


def test_union_all_of_streams_gives_each_its_watermark() -> None:
    text = f"""
        SET watermark.lag = INTERVAL '2' SECOND;
        SELECT {START} AS window_start, {END} AS window_end,
               COUNT(*) FROM (SELECT * FROM events UNION ALL SELECT * FROM clicks)
        GROUP BY {START}"""
    twin = timed(2_000).union(timed(2_000, CLICKS)).tumbling_window(60_000).agg(COUNT)
    same_plan(text, twin, catalog(events=EVENTS, clicks=CLICKS))
    both = (
        "SELECT user_id FROM events UNION ALL SELECT user_id FROM clicks UNION ALL SELECT user_id FROM events"
    )
    twin_union = (
        events().select("user_id").union(events(CLICKS).select("user_id"), events().select("user_id"))
    )
    same_plan(both, twin_union, catalog(events=EVENTS, clicks=CLICKS))


def test_with_names_a_subquery() -> None:
    text = f"""
        WITH paid AS (SELECT * FROM events WHERE amount > 0)
        SELECT {START} AS window_start, {END} AS window_end,
               COUNT(*) FROM paid GROUP BY {START}"""
    same_plan(text, timed().filter(kp.col("amount") > 0).tumbling_window(60_000).agg(COUNT))


def test_queries_without_a_window_are_stateless() -> None:
    same_plan("SELECT * FROM events", events())
    same_plan("SELECT * FROM events WHERE amount > 1.5", events().filter(kp.col("amount") > 1.5))
    same_plan("select USER_ID, Amount from EVENTS", events().select("user_id", "amount"))
    same_plan(
        "SELECT *, amount * 2 AS doubled FROM events", events().with_column("doubled", kp.col("amount") * 2)
    )
    text = """SELECT amount BETWEEN -5 AND 10 AS small, CAST(ts_ms AS double) / 1000 AS secs,
                     TRY_CAST(region AS bigint) AS code, -amount % 7 AS m, region IS NULL AS blank
              FROM events WHERE NOT amount = 3"""
    a = kp.col("amount")
    twin = (
        events()
        .filter(~(a == 3))
        .select(
            ((a >= -5) & (a <= 10)).alias("small"),
            (kp.col("ts_ms").cast("double") / 1000).alias("secs"),
            kp.col("region").try_cast("bigint").alias("code"),
            (-a % 7).alias("m"),
            kp.col("region").is_null().alias("blank"),
        )
    )
    same_plan(text, twin)


def test_set_watermark_options() -> None:
    text = """SET watermark.lag = INTERVAL '1' MINUTE + INTERVAL '30' SECOND;
              SET watermark.future_tolerance = INTERVAL '2' HOUR,
                  watermark.idle_timeout = INTERVAL 10 SECONDS;
              SELECT * FROM events WHERE amount > 0"""
    twin = events().watermark("event_time", 90_000, future_tolerance_ms=7_200_000, idle_timeout_ms=10_000)
    same_plan(text, twin.filter(kp.col("amount") > 0))


def test_set_watermark_lag_auto_is_the_builders_automatic_lag() -> None:
    text = """SET watermark.lag = 'auto'; SELECT * FROM events WHERE amount > 0"""
    same_plan(text, events().watermark("event_time", "auto").filter(kp.col("amount") > 0))
    with pytest.raises(
        kp.PlanError, match=re.escape("takes an INTERVAL, e.g. INTERVAL '5' SECOND, or 'auto'")
    ):
        same_plan("SET watermark.lag = 'soon'; SELECT * FROM events", events())


def test_set_watermark_column_names_a_bigint_event_time() -> None:
    text = f"""SET watermark.column = ts_ms; SET watermark.lag = INTERVAL '500' MILLISECONDS;
               SELECT tumble_start(ts_ms, {MINUTE}) AS window_start,
                      tumble_end(ts_ms, {MINUTE}) AS window_end, COUNT(*)
               FROM events GROUP BY tumble_start(ts_ms, {MINUTE})"""
    same_plan(text, events().watermark("ts_ms", 500).tumbling_window(60_000).agg(COUNT))
    # Without SET watermark.column the window helper names the column.
    same_plan(text.split(";", 1)[1], events().watermark("ts_ms", 500).tumbling_window(60_000).agg(COUNT))


def test_set_window_options_are_the_builders_emission_options() -> None:
    text = """SET window.allowed_lateness = INTERVAL '1' MINUTE;
              SET window.accumulation = retracting;
              SET window.trigger = on_count(10);
              SET window.state_ttl = INTERVAL '1' HOUR;
              SET window.state_ttl_time = 'processing';
              SELECT user_id, hop_start(event_time, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE) AS window_start,
                     hop_end(event_time, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE) AS window_end, COUNT(*)
              FROM events GROUP BY user_id, hop_start(event_time, INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)"""
    twin = (
        timed()
        .key_by("user_id")
        .sliding_window(300_000, 60_000)
        .trigger(kp.Trigger.on_count(10))
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .with_state_ttl(kp.StateTtlConfig(ttl_ms=3_600_000, time="processing"))
        .agg(COUNT)
    )
    same_plan(text, twin)
    assert sql(text).columns[-1] == "kind"
    for trigger, built in [
        ("on_every_element()", kp.Trigger.on_every_element()),
        ("on_interval(INTERVAL '5' SECOND)", kp.Trigger.on_interval(5_000)),
        ("on_watermark()", kp.Trigger.on_watermark()),
    ]:
        query = f"SET window.trigger = {trigger}; " + SEED
        same_plan(query, timed().tumbling_window(60_000).trigger(built).agg(COUNT.alias("events")))


def test_a_registered_stream_with_its_own_watermark_keeps_it(session: kp.Session) -> None:
    stream, _ = session.memory_stream(DDL, name="sql_own_watermark")
    paid = stream.watermark("event_time", 7_000).filter(kp.col("amount") > 0)
    assert paid.register("paid") is paid
    got = session.sql(SEED.replace("FROM events", "FROM paid"))
    assert got is not None
    assert got.plan == paid.tumbling_window(60_000).agg(COUNT.alias("events")).plan
    with plan_error("stream 'paid' already has a watermark", "watermark.lag"):
        session.sql("SET watermark.lag = INTERVAL '1' SECOND; SELECT * FROM paid")


def test_sources_register_under_their_name(session: kp.Session, tmp_path: Path) -> None:
    stream, _ = session.memory_stream(DDL, name="sql_memory")
    records = session.from_records([], DDL, name="sql_records")
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA.to_arrow()), tmp_path / "part-0.parquet")
    files = session.read_parquet(str(tmp_path), name="sql_files")
    for name, source in [("sql_memory", stream), ("sql_records", records), ("sql_files", files)]:
        got = session.sql(f"SELECT * FROM {name}")
        assert got is not None and got.plan == source.plan
    again, _ = session.memory_stream(DDL, name="sql_memory")  # made again: the new stream
    got = session.sql("SELECT * FROM sql_memory")
    assert got is not None and got.plan == again.plan != stream.plan
    with plan_error("stream name", "identifier"):
        stream.register("not a name")


def test_explain_shows_the_sql_with_the_settings_it_took(session: kp.Session) -> None:
    session.from_records(seed_rows(5), SEED_DDL, name="events")
    session.sql("SET watermark.lag = INTERVAL '5' SECOND")
    stream = session.sql(SEED)
    assert stream is not None
    text = stream.explain(show=False)
    sections = [line for line in text.splitlines() if line.startswith("== ")]
    assert sections[:3] == ["== SQL ==", "== Logical plan ==", "== Lowering: bounded =="]
    shown = text.split("== SQL ==\n")[1].split("\n\n== Logical plan ==")[0]
    assert shown == "SET watermark.lag = INTERVAL '5' SECOND;\n" + SEED.rstrip(";")
    assert "Watermark column=event_time lag_ms=5000" in text
    assert "== SQL ==" not in stream.filter(kp.col("events") > 1).explain(show=False)


# --- SET scoping ------------------------------------------------------------------------


def lag_of(stream: Stream) -> int:
    et = n.event_time(stream.plan.input if isinstance(stream.plan, n.WindowAggregate) else stream.plan)
    assert et is not None
    return et.lag_ms


def test_set_applies_to_the_next_query_only() -> None:
    cat = catalog()
    assert execute(cat, "SET watermark.lag = INTERVAL '5' SECOND", NO_SESSION) is None
    assert lag_of(sql(SEED, cat)) == 5_000
    assert lag_of(sql(SEED, cat)) == 0  # taken by the query before
    assert lag_of(sql("SET watermark.lag = INTERVAL '3' SECOND;\n" + SEED, cat)) == 3_000
    assert lag_of(sql(SEED, cat)) == 0


def test_a_later_set_replaces_an_earlier_one_and_sets_after_the_query_wait() -> None:
    cat = catalog()
    execute(
        cat, "SET watermark.lag = INTERVAL '5' SECOND; SET watermark.lag = INTERVAL '6' SECOND", NO_SESSION
    )
    assert lag_of(sql(SEED.rstrip(";") + "; SET watermark.lag = INTERVAL '9' SECOND", cat)) == 6_000
    assert lag_of(sql(SEED, cat)) == 9_000


def test_a_failed_query_leaves_the_settings_waiting() -> None:
    cat = catalog()
    execute(cat, "SET watermark.lag = INTERVAL '5' SECOND", NO_SESSION)
    with plan_error("unknown column 'nope'"):
        sql(SEED.replace("COUNT(*)", "COUNT(nope)"), cat)
    assert lag_of(sql(SEED, cat)) == 5_000


def test_settings_belong_to_their_session() -> None:
    first, second = catalog(), catalog()
    execute(first, "SET watermark.lag = INTERVAL '5' SECOND", NO_SESSION)
    assert lag_of(sql(SEED, second)) == 0
    assert lag_of(sql(SEED, first)) == 5_000


def test_session_sql_keeps_settings_per_session(session: kp.Session) -> None:
    session.memory_stream(DDL, name="events")
    assert session.sql("SET watermark.lag = INTERVAL '4' SECOND") is None
    first, second = session.sql(SEED), session.sql(SEED)
    assert first is not None and second is not None
    assert (lag_of(first), lag_of(second)) == (4_000, 0)


# --- errors: the construct and where it is ---------------------------------------------

ERRORS = [
    (
        "SELECT * FROM events e JOIN clicks c ON e.user_id = c.user_id",
        ["an interval join needs a time range", "r.ts BETWEEN", "line 1, column 41"],
    ),
    ("SELECT * FROM events e JOIN clicks c", ["CROSS JOIN", "is not supported", "line 1, column 24"]),
    ("SELECT * FROM events, clicks", ["CROSS JOIN (and FROM a, b) is not supported", "line 1, column 21"]),
    (
        "SELECT *\nFROM events\nORDER BY amount",
        ["ORDER BY is not supported", "a stream has no order", "line 3, column 1"],
    ),
    ("SELECT * FROM events LIMIT 10", ["LIMIT is not supported", "line 1, column 22"]),
    ("SELECT DISTINCT user_id FROM events", ["SELECT DISTINCT is not supported", "line 1, column 8"]),
    (
        f"SELECT tumble_start(event_time, INTERVAL '2' MINUTE), COUNT(*) FROM events\nGROUP BY {START}",
        [
            "arguments differ from GROUP BY",
            "line 1, column 8",
            "TUMBLE_START(event_time, INTERVAL '2' MINUTE)",
        ],
    ),
    (
        f"SELECT hop_start(event_time, {MINUTE}, {MINUTE}), COUNT(*) FROM events GROUP BY {START}",
        ["arguments differ from GROUP BY"],
    ),
    ("SELECT initcap(user_id) AS u FROM events", ["unknown function INITCAP", "line 1, column"]),
    ("SELECT my_udf(user_id) AS u FROM events", ["unknown function MY_UDF"]),
    (
        "SELECT amount FROM events WHERE nope > 1",
        ["unknown column 'nope'", "line 1, column 33", "user_id, event_time"],
    ),
    ("SELECT x.amount FROM events AS e", ["unknown stream or alias 'x'"]),
    ("SELECT * FROM nothere", ["unknown stream 'nothere'", "events", "register"]),
    ("SELECT COUNT(*) FROM events", ["needs GROUP BY columns", "tumble_start"]),
    (
        "SELECT user_id, COUNT(*) FROM events GROUP BY user_id HAVING COUNT(*) > 1",
        ["HAVING after GROUP BY without a window helper is not supported yet"],
    ),
    (
        f"SELECT SUM(amount * 2) FROM events GROUP BY {START}",
        ["SUM takes one column", "subquery", "line 1, column 8"],
    ),
    (
        f"SELECT user_id, COUNT(*) FROM events GROUP BY {START}",
        ["'user_id' must be in GROUP BY or inside an aggregate"],
    ),
    (
        f"SELECT STDDEV(amount) FROM events GROUP BY {START}",
        ["aggregate STDDEV is not supported", "COUNT(DISTINCT x)"],
    ),
    ("SELECT amount * 2 FROM events", ["name this SELECT expression with AS"]),
    ("SELECT * FROM events WHERE COUNT(*) > 1", ["aggregate is not allowed in WHERE", "HAVING"]),
    (
        f"SELECT * FROM events WHERE {START} > 0",
        ["window helpers are not allowed in WHERE"],
    ),
    ("SELECT * FROM events WHERE", ["SQL syntax error", "line 1, column", "WHERE is incomplete"]),
    (
        "SELCT user_id FROM events",
        ["SQL syntax error", "\n  SELCT user_id FROM events\n", "did you mean SELECT"],
    ),
    (
        "SELECT COUNT(*) AS n\nFROM events GRUP BY user_id",
        ["line 2, column", "\n  FROM events GRUP BY user_id\n", "did you mean GROUP where it says GRUP?"],
    ),
    ("SELECT 'abc FROM events", ["SQL syntax error", "Missing '"]),
    ("SET watermark.lagg = INTERVAL '1' SECOND", ["unknown setting 'watermark.lagg'", "watermark.lag,"]),
    ("SET watermark.lag = INTERVAL '1' MONTH", ["unit MONTH is not supported", "line 1, column 21"]),
    ("SET watermark.lag = 5000", ["takes an INTERVAL"]),
    ("SET watermark.lag = INTERVAL '-1' SECOND", ["must be >= 0"]),
    ("SET window.trigger = on_count(0)", ["on_count(n) needs a positive integer"]),
    ("SET window.accumulation = sometimes", ["one of accumulating, discarding, retracting"]),
    ("SELECT * FROM events; SELECT * FROM events", ["one query per call", "line 1, column 23"]),
    ("SELECT * FROM events UNION SELECT * FROM events", ["UNION (distinct) is not supported", "UNION ALL"]),
    ("INSERT INTO events SELECT * FROM events", ["not a query"]),
    ("SELECT * FROM db.events", ["one-part names"]),
    ("SELECT 1 AS one", ["add FROM"]),
    ("   ;  ", ["no statement"]),
    (
        "SELECT tumble_start(event_time, INTERVAL '0' SECOND), COUNT(*) FROM events "
        "GROUP BY tumble_start(event_time, INTERVAL '0' SECOND)",
        ["tumble_start: size_ms must be > 0"],
    ),
    (
        f"SELECT COUNT(*) FROM events GROUP BY hop_start(event_time, INTERVAL '2' MINUTE, {MINUTE})",
        ["slide_ms (120000) must be <= size_ms (60000)"],
    ),
    (
        "SELECT COUNT(*) FROM events GROUP BY tumble_start(event_time)",
        ["tumble_start takes (ts, size [, offset])"],
    ),
    (f"SELECT COUNT(*) FROM events GROUP BY tumble_start('x', {MINUTE})", ["first argument of tumble_start"]),
    ("SELECT COUNT(*) FROM events GROUP BY tumble_start(event_time, '1 minute')", ["takes an INTERVAL"]),
    (
        f"SELECT COUNT(*), COUNT(*) FROM events GROUP BY {START}",
        ["two columns called 'count'"],
    ),
    (
        f"SELECT user_id FROM events GROUP BY user_id, {START}",
        ["at least one aggregate"],
    ),
    (f"SELECT * FROM events GROUP BY {START}", ["SELECT * cannot be windowed"]),
    (
        f"SELECT COUNT(*) FROM events GROUP BY {START}, tumble_start(event_time, INTERVAL '2' MINUTE)",
        ["two different windows"],
    ),
    (
        f"SELECT COUNT(*) FROM events GROUP BY {START} HAVING MAX(amount) > 1",
        ["HAVING can use the aggregates of the SELECT list"],
    ),
    (
        "SET window.trigger = on_every_element(); SELECT * FROM events",
        ["SET window.trigger applies to a windowed query"],
    ),
    (
        "SET watermark.lag = INTERVAL '1' SECOND; SELECT user_id FROM twotimes",
        ["event time?", "has 2 (a, b)", "SET watermark.column"],
    ),
    ("SET watermark.lag = INTERVAL '1' SECOND; SELECT user_id FROM notime", ["event time?", "has none"]),
    (
        f"""SELECT COUNT(*) FROM (SELECT {START} AS window_start,
                   {END} AS window_end, COUNT(*) FROM events
                   GROUP BY {START}) GROUP BY tumble_start(window_start, {MINUTE})""",
        ["chained windows"],
    ),
    ("SET watermark.column = amount; SELECT * FROM events", ["event-time column 'amount' is double"]),
    (
        f"SELECT COUNT(*) FROM (SELECT event_time + 1 AS event_time FROM events) GROUP BY {START}",
        ["arithmetic needs numeric operands"],
    ),
]


@pytest.mark.parametrize(("text", "words"), ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_errors_name_the_construct_and_its_position(text: str, words: list[str]) -> None:
    cat = catalog(
        events=EVENTS,
        clicks=CLICKS,
        twotimes=n.MemorySource(
            name="twotimes", schema=to_schema("user_id string, a timestamp, b timestamp"), path="/x"
        ),
        notime=n.MemorySource(name="notime", schema=to_schema("user_id string"), path="/y"),
    )
    with plan_error(*words):
        execute(cat, text, NO_SESSION)


def test_sql_takes_text() -> None:
    with plan_error("takes the SQL text as a str"):
        execute(catalog(), cast(Any, 42), NO_SESSION)


def test_a_window_helper_must_use_the_event_time_column() -> None:
    text = f"""SET watermark.column = event_time;
               SELECT COUNT(*) FROM (SELECT ts_ms FROM events) GROUP BY tumble_start(ts_ms, {MINUTE})"""
    with plan_error("time column 'ts_ms' is not the event-time column", "'event_time'"):
        sql(text)


def test_import_krishiv_py_does_not_import_sqlglot() -> None:
    import subprocess
    import sys

    probe = "import sys, krishiv_py; print(any(m.split('.')[0] == 'sqlglot' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the property: random queries of the grammar, SQL and builder ------------------------

SIZES = [1_000, 2_000, 5_000, 10_000, 60_000]
AGGS: list[tuple[str, str | None]] = [
    ("count", None),
    ("count", "amount"),
    ("count_distinct", "region"),
    ("sum", "amount"),
    ("avg", "amount"),
    ("min", "amount"),
    ("max", "amount"),
    ("first", "amount"),
    ("last", "region"),
]
PREDICATES: list[tuple[str, Callable[[], kp.Expr]]] = [
    ("amount > 2", lambda: kp.col("amount") > 2),
    ("region = 'eu'", lambda: kp.col("region") == "eu"),
    ("amount BETWEEN 1 AND 4", lambda: (kp.col("amount") >= 1) & (kp.col("amount") <= 4)),
    ("user_id IN ('a', 'b')", lambda: (kp.col("user_id") == "a") | (kp.col("user_id") == "b")),
    ("amount IS NOT NULL", lambda: kp.col("amount").is_not_null()),
]


def interval(ms: int, style: int) -> str:
    """``ms`` as an INTERVAL, in one of the spellings SQL users write."""
    if ms % 1000:
        return f"INTERVAL '{ms}' MILLISECOND"
    seconds = ms // 1000
    if style == 1 and seconds % 60 == 0:
        return f"INTERVAL '{seconds // 60} minute'"
    return [f"INTERVAL '{seconds}' SECOND", f"INTERVAL '{seconds} seconds'", f"INTERVAL {seconds} SECONDS"][
        style % 3
    ]


@attrs.frozen
class Query:
    """One generated query: what it says, rendered as SQL and as builder calls."""

    kind: str
    durations: tuple[int, ...]
    group_keys: tuple[str, ...]
    #: SELECT items: ("key", name, alias) | ("helper", "start"|"end", alias) | ("agg", index, alias)
    items: tuple[tuple[str, Any, str | None], ...]
    predicate: int | None
    lag_ms: int | None
    #: SET window.allowed_lateness and window.accumulation (None: not set).
    lateness_ms: int | None
    accumulation: str | None
    style: int

    def helper(self, part: str) -> str:
        args = ", ".join(interval(d, self.style) for d in self.durations)
        return f"{self.kind}_{part}(event_time, {args})"

    def to_sql(self) -> str:
        select = []
        for what, value, alias in self.items:
            text = {
                "key": lambda v: str(v),
                "helper": lambda v: self.helper(v),
                "agg": lambda v: _agg_sql(*AGGS[v]),
            }[what](value)
            select.append(text + (f" AS {alias}" if alias else ""))
        group = [*self.group_keys, self.helper("start" if self.style % 2 else "end")]
        where = f" WHERE {PREDICATES[self.predicate][0]}" if self.predicate is not None else ""
        sets = [f"SET watermark.lag = {interval(self.lag_ms, self.style)};\n"] if self.lag_ms else []
        if self.lateness_ms is not None:
            sets.append(f"SET window.allowed_lateness = {interval(self.lateness_ms, self.style)};\n")
        if self.accumulation is not None:
            sets.append(f"SET window.accumulation = '{self.accumulation}';\n")
        return f"{''.join(sets)}SELECT {', '.join(select)}\nFROM events{where}\nGROUP BY {', '.join(group)}"

    def to_builder(self) -> Stream:
        s = timed(self.lag_ms or 0)
        if self.predicate is not None:
            s = s.filter(PREDICATES[self.predicate][1]())
        shown = [v for what, v, _ in self.items if what == "key"]
        keys = list(dict.fromkeys([*shown, *self.group_keys]))
        base = s.key_by(*keys) if keys else s
        d = self.durations
        windowed = {
            "tumble": lambda: base.tumbling_window(d[0]),
            "hop": lambda: base.sliding_window(d[1], d[0]),
            "session": lambda: base.session_window(d[0]),
        }[self.kind]()
        if self.lateness_ms is not None:
            windowed = windowed.allowed_lateness(self.lateness_ms)
        if self.accumulation is not None:
            windowed = windowed.accumulation(cast(Any, self.accumulation))
        aggs = []
        outputs = []
        for what, value, alias in self.items:
            if what == "agg":
                func, column = AGGS[value]
                agg = getattr(kp, func)(kp.col(column or "*"))
                agg = agg.alias(alias) if alias else agg
                aggs.append(agg)
                outputs.append((agg.name, agg.name))
            else:
                source = value if what == "key" else f"window_{value}"
                outputs.append((alias or source, source))
        out = windowed.agg(*aggs)
        if outputs == [(c, c) for c in out.columns if c != "kind"]:
            return out
        shown_columns = [kp.col(src) if name == src else kp.col(src).alias(name) for name, src in outputs]
        return out.select(*shown_columns, *(["kind"] if "kind" in out.columns else []))


def _agg_sql(func: str, column: str | None) -> str:
    if func == "count_distinct":
        return f"COUNT(DISTINCT {column})"
    return f"{func.upper()}({column or '*'})"


@st.composite
def queries(draw: st.DrawFn) -> Query:
    kind = draw(st.sampled_from(["tumble", "hop", "session"]))
    size = draw(st.sampled_from(SIZES))
    durations: tuple[int, ...] = (size,)
    if kind == "hop":
        durations = (size, size * draw(st.integers(1, 4)))
    group_keys = tuple(draw(st.permutations(["user_id", "region"]))[: draw(st.integers(0, 2))])
    shown = draw(st.lists(st.sampled_from(group_keys), unique=True)) if group_keys else []
    helpers = draw(st.sampled_from([[], ["start"], ["end"], ["start", "end"]]))
    agg_picks = draw(st.lists(st.integers(0, len(AGGS) - 1), min_size=1, max_size=3, unique=True))
    items: list[tuple[str, Any, str | None]] = [
        *(("key", k, None) for k in shown),
        *(("helper", h, None) for h in helpers),
        *(("agg", a, None) for a in agg_picks),
    ]
    items = draw(st.permutations(items)) if draw(st.booleans()) else items
    renamed = draw(st.lists(st.booleans(), min_size=len(items), max_size=len(items)))
    items = [
        (w, v, f"c{i}" if r else None) for i, ((w, v, _), r) in enumerate(zip(items, renamed, strict=True))
    ]
    predicate = draw(st.none() | st.integers(0, len(PREDICATES) - 1))
    lag = draw(st.none() | st.sampled_from([500, 1_000, 5_000]))
    lateness = draw(st.none() | st.sampled_from([0, 1_000, 60_000]))
    accumulation = draw(st.none() | st.sampled_from(["accumulating", "discarding", "retracting"]))
    return Query(
        kind,
        durations,
        group_keys,
        tuple(items),
        predicate,
        lag,
        lateness,
        accumulation,
        draw(st.integers(0, 5)),
    )


ROWS_SCHEMA = "user_id string, event_time timestamp, amount double, region string, ts_ms bigint"


def _rows(values: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "user_id": "ab"[u],
            "event_time": t0 + dt.timedelta(milliseconds=ms),
            "amount": float(a),
            "region": ["eu", "us"][u ^ (a % 2)],
            "ts_ms": ms,
        }
        for u, ms, a in values
    ]


@settings(max_examples=150)
@given(
    query=queries(),
    values=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 120_000), st.integers(0, 5)), max_size=12),
)
def test_random_queries_make_the_builders_plan(query: Query, values: list[tuple[int, int, int]]) -> None:
    text = query.to_sql()
    got = sql(text)
    twin = query.to_builder()
    assert got.plan == twin.plan, (
        f"\n{text}\nSQL:\n{n.render_plan(got.plan)}\nbuilder:\n{n.render_plan(twin.plan)}"
    )
    if isinstance(got.plan, n.WindowAggregate) and isinstance(got.plan.input, n.Watermark):
        # The reference model runs what it covers (no filter, no select): the SQL plan runs as the builder's.
        rows = _rows(values)
        from_sql = run_reference_bounded(ROWS_SCHEMA, lambda s: _rebase(got, s), rows)
        assert_same_rows(from_sql, run_reference_bounded(ROWS_SCHEMA, lambda s: _rebase(twin, s), rows))


def _rebase(stream: Stream, source: Stream) -> Stream:
    """``stream``'s plan over ``source`` instead of the catalog's ``events``."""

    def swap(node: n.PlanNode) -> n.PlanNode:
        if node == EVENTS:
            return source.plan
        return n.with_children(node, tuple(swap(c) for c in n.children(node)))

    return Stream(source.session, swap(stream.plan))


# --- real Spark: the seed example on every kind of source, and a keyed query ------------


def test_the_seed_example_on_a_memory_stream_streaming_and_collected(session: kp.Session) -> None:
    rows = seed_rows(5, 30, 61, 20, 90, 130)
    source, sender = session.memory_stream(SEED_DDL, name="events")
    stream = session.sql(SEED)
    assert stream is not None and stream.plan == seed_builder(source).plan
    job = stream.start()
    try:
        sender.send(rows)
        job.process_all_available()  # the watermark reaches 130 s: [0 s, 60 s) and [60 s, 120 s) fire
        assert_same_rows(job.results(), run_reference(SEED_DDL, seed_builder, [Send(rows)])[-1])
    finally:
        job.stop()
    assert_same_rows(stream.collect(), run_reference_bounded(SEED_DDL, seed_builder, rows))


def test_the_seed_example_on_a_parquet_source_bounded_and_streaming(
    session: kp.Session, tmp_path: Path
) -> None:
    rows = seed_rows(5, 30, 61, 90, 130, 200)
    schema = to_schema(SEED_DDL).to_arrow()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "part-0.parquet")
    files = session.read_parquet(str(tmp_path), name="events")
    bounded = session.sql(SEED)
    assert bounded is not None and bounded.plan == seed_builder(files).plan
    assert_same_rows(bounded.collect(), run_reference_bounded(SEED_DDL, seed_builder, rows))
    directory = session.read_parquet(str(tmp_path), name="events", streaming=True)
    streaming = session.sql(SEED)
    assert streaming is not None and streaming.plan == seed_builder(directory).plan
    assert not streaming.is_bounded
    job = streaming.start()
    try:
        job.process_all_available()
        assert_same_rows(job.results(), run_reference(SEED_DDL, seed_builder, [Send(rows)])[-1])
    finally:
        job.stop()


def test_a_keyed_query_with_where_a_subquery_and_having_gives_the_builders_rows(session: kp.Session) -> None:
    rows = seed_rows(1, 2, 3, 14, 15, 16, 17, 31, 40, 44, 59, 61)
    session.from_records(rows, SEED_DDL, name="payments")
    text = """
        SET watermark.lag = INTERVAL '2' SECOND;
        SELECT p.user_id AS who, hop_start(event_time, INTERVAL '10' SECOND, INTERVAL '20' SECOND) AS opens,
               COUNT(*) AS n, SUM(cents) AS cents, FIRST(cents) AS first_cents, MAX(amount)
        FROM (SELECT user_id, event_time, amount, CAST(amount * 100 AS bigint) AS cents
              FROM payments WHERE amount <> 4) AS p
        GROUP BY p.user_id, hop_start(event_time, INTERVAL '10' SECOND, INTERVAL '20' SECOND)
        HAVING COUNT(*) >= 1 AND MAX(amount) > 2"""
    stream = session.sql(text)
    assert stream is not None
    base = session.from_records(rows, SEED_DDL)
    twin = (
        base.watermark("event_time", 2_000)
        .filter(kp.col("amount") != 4)
        .with_column("cents", (kp.col("amount") * 100).cast("bigint"))
        .key_by("user_id")
        .sliding_window(20_000, 10_000)
        .agg(
            COUNT.alias("n"),
            kp.sum(kp.col("cents")).alias("cents"),
            kp.first(kp.col("cents")).alias("first_cents"),
            kp.max(kp.col("amount")),
        )
        .filter((kp.col("n") >= 1) & (kp.col("max_amount") > 2))
        .select(
            kp.col("user_id").alias("who"),
            kp.col("window_start").alias("opens"),
            "n",
            "cents",
            "first_cents",
            "max_amount",
        )
    )
    got, want = stream.collect(), twin.collect()
    assert (
        got.column_names == want.column_names == ["who", "opens", "n", "cents", "first_cents", "max_amount"]
    )
    assert got.num_rows > 0
    assert_same_rows(got, want)


def test_qualify_rank_is_window_top_n_before_the_select_list() -> None:
    text = f"""SELECT region, {START} AS ws, COUNT(*) AS n, SUM(amount) AS spent FROM events
               GROUP BY region, {START}
               QUALIFY RANK() OVER (PARTITION BY ws, window_end ORDER BY n DESC, SUM(amount) DESC) <= 3"""
    twin = (
        timed()
        .key_by("region")
        .tumbling_window(60_000)
        .agg(COUNT.alias("n"), kp.sum(kp.col("amount")).alias("spent"))
        .top_n(3, by=["n", "spent"], ties="all")
        .select("region", kp.col("window_start").alias("ws"), "n", "spent")
    )
    same_plan(text, twin)


def test_qualify_row_number_with_keys_ascending_and_less_than() -> None:
    text = f"""SELECT region, user_id, {START}, MIN(amount) AS low FROM events
               GROUP BY region, user_id, {START}
               QUALIFY ROW_NUMBER() OVER (
                   PARTITION BY window_start, window_end, region ORDER BY low ASC NULLS LAST) < 3"""
    twin = (
        timed()
        .key_by("region", "user_id")
        .tumbling_window(60_000)
        .agg(kp.min(kp.col("amount")).alias("low"))
        .top_n(2, by=["low"], keys=["region"], ties="first", ascending=True)
        .select("region", "user_id", "window_start", "low")
    )
    same_plan(text, twin)


FLINK_TOP_N = f"""SELECT region, window_start, window_end, n FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rownum
    FROM (SELECT region, {START} AS window_start, {END} AS window_end, COUNT(*) AS n
          FROM events GROUP BY region, {START})
) WHERE rownum <= 3"""


def test_flink_top_n_form_is_window_top_n() -> None:
    twin = (
        timed()
        .key_by("region")
        .tumbling_window(60_000)
        .agg(COUNT.alias("n"))
        .top_n(3, by=["n"], ties="first")
        .select("region", "window_start", "window_end", "n")
    )
    same_plan(FLINK_TOP_N, twin)
    for bound in ("rownum < 4", "3 >= rownum", "(rownum <= 3)"):
        same_plan(FLINK_TOP_N.replace("rownum <= 3", bound), twin)
    ranked = FLINK_TOP_N.replace("ROW_NUMBER()", "RANK()").replace("rownum <= 3", "rownum = 1")
    counts = timed().key_by("region").tumbling_window(60_000).agg(COUNT.alias("n"))
    same_plan(
        ranked, counts.top_n(1, by=["n"], ties="all").select("region", "window_start", "window_end", "n")
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            ("SELECT region, window_start", "SELECT *, window_start"),
            ["rank 'rownum' is not a column", "list the columns"],
        ),
        (("window_end, n FROM (", "window_end, n, rownum FROM ("), ["rank 'rownum' is not a column"]),
        (("WHERE rownum <= 3", "WHERE rownum <= 3 AND n > 1"), ["WHERE rownum <= n", "nothing else"]),
        (("WHERE rownum <= 3", ""), ["WHERE rownum <= n"]),
        (("WHERE rownum <= 3", "WHERE rownum >= 3"), ["WHERE rownum <= n"]),
        (("PARTITION BY window_start, window_end", "PARTITION BY region"), ["starts with window_start"]),
        (("ORDER BY n DESC", "ORDER BY nope DESC"), ["nope"]),
    ],
)
def test_flink_top_n_form_errors_name_the_fix(change: tuple[str, str], words: list[str]) -> None:
    assert change[0] in FLINK_TOP_N
    with plan_error(*words):
        sql(FLINK_TOP_N.replace(*change))


@pytest.mark.parametrize(
    ("clause", "words"),
    [
        ("QUALIFY n > 1", ["QUALIFY takes window top-N"]),
        ("QUALIFY SUM(n) OVER (PARTITION BY window_start, window_end) <= 1", ["QUALIFY takes window top-N"]),
        ("QUALIFY RANK() OVER (PARTITION BY region ORDER BY n DESC) <= 1", ["starts with the window"]),
        ("QUALIFY RANK() OVER (PARTITION BY window_start, window_end) <= 1", ["ORDER BY says what ranks"]),
        ("QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY n) <= 1", ["NULLS LAST"]),
        (
            "QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) <= 'x'",
            ["whole number"],
        ),
        (
            "QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY MAX(amount) DESC) <= 1",
            ["add this"],
        ),
        ("QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) <= 0", ["n >= 1"]),
    ],
)
def test_qualify_that_is_not_window_top_n_is_refused(clause: str, words: list[str]) -> None:
    text = f"SELECT region, {START}, COUNT(*) AS n FROM events GROUP BY region, {START} {clause}"
    with plan_error(*words):
        sql(text)


def test_qualify_without_a_window_is_refused() -> None:
    with plan_error("QUALIFY is not supported here", "GROUP BY and a window helper", "line 1"):
        sql("SELECT * FROM events QUALIFY ROW_NUMBER() OVER (ORDER BY amount) <= 1")


def test_a_statement_sqlglot_cannot_read_is_refused_without_its_warning_on_stderr(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(kp.PlanError, match="SET"):
        sql("SET watermark.lag '5 seconds'")
    assert capsys.readouterr().err == ""
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]
