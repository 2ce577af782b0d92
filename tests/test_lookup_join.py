"""``stream.lookup_join(table, on=..., how=...)`` (SPEC 3.14): a stream's rows with a bounded table's.

The table is read again for every micro-batch: a row meets the table as it
is when its micro-batch runs (a Parquet file added or a file changed in
place counts from the next micro-batch on). The plan checks need no Spark;
the rest runs the three lowerings against a per-row reference written here.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.runtime.lookup import files_of
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
CLICKS = "ad string, t bigint, user string"
ADS = "ad string, campaign string, user string"


def plan_error(*words: str) -> Any:
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def _clicks() -> Stream:
    return Stream(NO_SESSION, n.MemorySource(name="clicks", schema=to_schema(CLICKS), path="/c")).watermark(
        "t", 0
    )


def _ads(streaming: bool = False) -> Stream:
    node = n.FileSource(name="ads", schema=to_schema(ADS), path="/ads", format="parquet", streaming=streaming)
    return Stream(NO_SESSION, node)


def test_the_joined_row_has_the_streams_columns_then_the_tables_and_keeps_its_event_time() -> None:
    joined = _clicks().lookup_join(_ads(), on="ad", how="left")
    schema = n.schema_of(joined.plan)
    assert schema.names == ("ad", "t", "user", "campaign", "user_right")
    assert schema.field("campaign").nullable
    assert n.event_time(joined.plan) is not None
    counted = joined.key_by("campaign").tumbling_window(10).agg(kp.count(kp.col("*")))
    assert list(counted.columns) == ["campaign", "window_start", "window_end", "count"]
    assert "LookupJoin how=left on=[ad] table='ads'" in n.render_plan(joined.plan)


def test_the_planner_says_a_lookup_join_without_a_window_keeps_no_state() -> None:
    from krishiv_py.planner.spark.choose import choose

    lowering, why = choose(_clicks().lookup_join(_ads(), on="ad").plan)
    assert lowering == "native" and "lookup joins" in why and "keeps no state" in why
    assert "window" not in why.replace("no window", "")
    windowed = _clicks().lookup_join(_ads(), on="ad").key_by("campaign").tumbling_window(10)
    assert "event-time windows" in choose(windowed.agg(kp.count(kp.col("*"))).plan)[1]


def test_what_a_lookup_join_does_not_take_is_named() -> None:
    with plan_error("takes a bounded table"):
        _clicks().lookup_join(_ads(streaming=True), on="ad")
    timed = n.FileSource(name="t", schema=to_schema(CLICKS), path="/t", format="parquet")
    with plan_error("table is a source", "no watermark"):
        _clicks().lookup_join(Stream(NO_SESSION, timed).watermark("t", 0), on="ad")
    with plan_error("unknown lookup_join() key 'nope'", "available columns: ad, t, user"):
        _clicks().lookup_join(_ads(), on="nope")
    with plan_error("how=...) is 'inner' or 'left'"):
        _clicks().lookup_join(_ads(), on="ad", how="full")
    typed = Stream(
        NO_SESSION, n.FileSource(name="t", schema=to_schema("ad bigint"), path="/t", format="parquet")
    )
    with plan_error("key 'ad' is string in the stream and bigint in the table"):
        _clicks().lookup_join(typed, on="ad")


def _catalog() -> SqlCatalog:
    catalog = SqlCatalog()
    catalog.register("clicks", _clicks().plan)
    catalog.register("ads", _ads().plan)
    renamed = n.FileSource(name="ads2", schema=to_schema("ad_id string, campaign string"), path="/a2",
                           format="parquet")  # fmt: skip
    catalog.register("ads2", renamed)
    catalog.register("stream_ads", _ads(streaming=True).plan)
    return catalog


def _sql(query: str, catalog: SqlCatalog | None = None) -> Stream:
    out = execute(catalog or _catalog(), query, NO_SESSION)
    assert out is not None
    return out


def test_sql_for_system_time_as_of_proctime_is_a_lookup_join() -> None:
    """Flink's processing-time temporal join: the builder's plan, a table column renamed to its
    stream key, an expression as the key (Nexmark q13's), LEFT as how="left"."""
    left = _sql(
        "SELECT c.ad, c.t, a.campaign, a.user FROM clicks AS c "
        "LEFT JOIN ads FOR SYSTEM_TIME AS OF PROCTIME() AS a ON c.ad = a.ad"
    )
    built = _clicks().lookup_join(_ads(), on="ad", how="left")
    assert left.plan == built.select("ad", "t", "campaign", kp.col("user_right").alias("user")).plan
    renamed = _sql(
        "SELECT * FROM clicks JOIN ads2 FOR SYSTEM_TIME AS OF PROCTIME() ON clicks.ad = ads2.ad_id"
    )
    ads2 = _catalog().lookup("ads2")
    assert ads2 is not None
    table = Stream(NO_SESSION, ads2).select(kp.col("ad_id").alias("ad"), "campaign")
    assert n.stateless_below(renamed.plan) == _clicks().lookup_join(table, on="ad").plan
    keyed = _sql(
        "SELECT s.t, a.campaign FROM clicks s JOIN ads2 FOR SYSTEM_TIME AS OF PROCTIME() AS a "
        "ON UPPER(s.ad) = a.ad_id"
    )
    by_upper = _clicks().with_column("ad_id", kp.upper(kp.col("ad")))
    plain = Stream(NO_SESSION, ads2)
    assert keyed.plan == by_upper.lookup_join(plain, on="ad_id").select("t", "campaign").plan


def test_sql_lookup_joins_that_cannot_be_are_named() -> None:
    with plan_error("bounded table", "'stream_ads' is a stream"):
        _sql("SELECT * FROM clicks c JOIN stream_ads FOR SYSTEM_TIME AS OF PROCTIME() s ON c.ad = s.ad")
    with plan_error("FULL JOIN is not supported with a lookup join"):
        _sql("SELECT * FROM clicks c FULL JOIN ads FOR SYSTEM_TIME AS OF PROCTIME() a ON c.ad = a.ad")
    with plan_error("equates each table key with the stream's"):
        _sql("SELECT * FROM clicks c JOIN ads FOR SYSTEM_TIME AS OF PROCTIME() a ON c.ad = a.ad AND c.t > 5")
    with plan_error("has a column 'ad' already", "rename the table's key"):
        _sql("SELECT * FROM clicks c JOIN ads FOR SYSTEM_TIME AS OF PROCTIME() a ON UPPER(c.ad) = a.ad")


def test_a_tables_files_are_its_visible_files_at_any_depth(tmp_path: Path) -> None:
    for name in ("b.parquet", "_SUCCESS", ".a.crc", "sub/c.parquet", "_tmp/d.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert [Path(f).relative_to(tmp_path).as_posix() for f in files_of(str(tmp_path))] == [
        "b.parquet",
        "sub/c.parquet",
    ]


# --- on Spark -----------------------------------------------------------------------------------


def _reference(rows: list[dict[str, Any]], table: list[dict[str, Any]], how: str) -> Counter[tuple[Any, ...]]:
    """Each row with each table row of its key (a null key matches none); ``left`` keeps the rest."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        matches = [a for a in table if r["ad"] is not None and a["ad"] == r["ad"]]
        for a in matches:
            out[(r["ad"], r["t"], r["user"], a["campaign"], a["user"])] += 1
        if not matches and how == "left":
            out[(r["ad"], r["t"], r["user"], None, None)] += 1
    return out


FIRST: list[dict[str, Any]] = [
    {"ad": "a1", "t": 1_000, "user": "u"},
    {"ad": "a3", "t": 2_000, "user": "v"},
    {"ad": None, "t": 3_000, "user": "w"},
]
LATER: list[dict[str, Any]] = [{"ad": "a3", "t": 4_000, "user": "x"}, {"ad": "a1", "t": 15_000, "user": "y"}]
TABLE: list[dict[str, Any]] = [
    {"ad": "a1", "campaign": "spring", "user": "s1"},
    {"ad": "a1", "campaign": "summer", "user": "s2"},
    {"ad": None, "campaign": "none", "user": None},
]
ADDED: list[dict[str, Any]] = [{"ad": "a3", "campaign": "autumn", "user": "s3"}]


def _table(path: Path, name: str, rows: list[dict[str, Any]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=to_schema(ADS).to_arrow()), path / name)


@pytest.mark.spark
@pytest.mark.parametrize("how", ["inner", "left"])
def test_each_micro_batch_meets_the_table_as_it_is_then_streamed_and_bounded(
    session: kp.Session, tmp_path: Path, how: str
) -> None:
    _table(tmp_path / "ads", "part-0.parquet", TABLE)
    clicks, sender = session.memory_stream(CLICKS, name=f"clicks_{uuid.uuid4().hex[:6]}")
    ads = session.read_parquet(str(tmp_path / "ads"), ADS)
    joined = clicks.watermark("t", 0).lookup_join(ads, on="ad", how=how)
    assert "krishiv_lookup" in joined.explain()  # the table's reader that lists its files each time
    names = list(joined.columns)
    job = joined.start()
    try:
        sender.send(FIRST)
        job.process_all_available()
        _table(tmp_path / "ads", "part-1.parquet", ADDED)  # a file added: from the next micro-batch on
        sender.send(LATER)
        job.process_all_available()
        got = Counter(tuple(r[c] for c in names) for r in job.results().to_pylist())
    finally:
        job.stop()
    assert got == _reference(FIRST, TABLE, how) + _reference(LATER, TABLE + ADDED, how)
    bounded = Counter(tuple(r[c] for c in names) for r in joined.collect().to_pylist())
    assert bounded == _reference(FIRST + LATER, TABLE + ADDED, how)


@pytest.mark.spark
def test_a_window_after_a_lookup_join_counts_per_campaign_on_the_stateful_lowering(
    session: kp.Session, tmp_path: Path
) -> None:
    """A window per campaign after the lookup, which runs before the watermark: the source's marker
    rows (a watermark promise) pass the inner join, so the windows fire; the stateful lowering joins
    below its operator, the native one agrees."""
    _table(tmp_path / "ads", "part-0.parquet", TABLE + ADDED)
    counts: list[Counter[tuple[Any, ...]]] = []
    for lowering in ("stateful", "native"):
        clicks, sender = session.memory_stream(CLICKS, name=f"clicks_{uuid.uuid4().hex[:6]}")
        ads = session.read_parquet(str(tmp_path / "ads"), ADS)
        per_campaign = (
            clicks.lookup_join(ads, on="ad")  # before the watermark: its marker rows pass the join
            .watermark("t", 0)
            .key_by("campaign")
            .tumbling_window(10_000)
            .agg(kp.count(kp.col("*")).alias("clicks"))
        )
        job = per_campaign.start(lowering=lowering)
        try:
            sender.send(FIRST + LATER)
            sender.advance_watermark(30_000)  # a marker row: it passes the join and fires the windows
            job.process_all_available()
            rows = job.results().to_pylist()
        finally:
            job.stop()
        counts.append(Counter((r["campaign"], r["window_start"].timestamp(), r["clicks"]) for r in rows))
    want: Counter[tuple[Any, ...]] = Counter()
    for (_, t, _, campaign, _), k in _reference(FIRST + LATER, TABLE + ADDED, "inner").items():
        start = (t // 10_000) * 10
        want[(campaign, float(start))] += k
    expected = Counter({(c, s, v): 1 for (c, s), v in want.items()})
    assert counts[0] == expected and counts[1] == expected
