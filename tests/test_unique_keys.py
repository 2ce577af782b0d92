"""A table sink never loses a row silently under a key that is not unique (SPEC 3.12).

A join's rows in an upsert table are keyed by the columns the user names
with ``key=``; one click joined with two impressions is two rows under one
``click_id``. Each sink must fail that micro-batch with a ``JobError`` that
names the key, write nothing of it, and take the job back from its
checkpoint once the sink is fixed. Retractions and re-fires of the same row
are not second rows.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.devtools import KafkaBroker
from krishiv_py.model.joins import JoinModel
from krishiv_py.sinks import SinkContext
from krishiv_py.tables.changelog import second_rows, target_for
from krishiv_py.types import Schema

JOINED = "click string, ad string, kind string"
KeyedSink = Callable[[tuple[str, ...]], kp.Sink]


def _joined(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"click": c, "ad": a, "kind": k} for c, a, k in rows], schema=Schema.parse(JOINED).to_arrow()
    )


def _context(ddl: str = JOINED) -> SinkContext:
    return SinkContext(schema=Schema.parse(ddl), checkpoint_dir=f"/ck/{uuid.uuid4().hex}", join_identity=())


def _rows(writer: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in writer.results().to_pylist())


# --- the rule, without a table ------------------------------------------------------------------


def test_a_second_different_row_under_a_key_is_found_and_a_replacement_is_not() -> None:
    assert second_rows(_joined([("c1", "x", "emit"), ("c1", "y", "emit")]), ("click",)) == [{"click": "c1"}]
    replaced = _joined([("c1", "x", "retract"), ("c1", "y", "emit")])
    assert second_rows(replaced, ("click",), held=pa.table({"click": ["c1"], "ad": ["x"]})) == []
    refired = _joined([("c1", "x", "emit"), ("c2", "z", "emit")])
    assert second_rows(refired, ("click",), held=pa.table({"click": ["c1"], "ad": ["x"]})) == []
    held_other = pa.table({"click": ["c1"], "ad": ["w"]})
    assert second_rows(refired, ("click",), held=held_other) == [{"click": "c1"}]
    # an emit, its retraction and another row in one batch: one live row at a time
    swapped = _joined([("c1", "x", "emit"), ("c1", "x", "retract"), ("c1", "y", "emit")])
    assert second_rows(swapped, ("click",)) == []
    # null keys are one key to an upsert (its delete matches null to null)
    nulls = pa.table({"click": [None, None], "ad": ["x", "y"]})
    assert second_rows(nulls, ("click",)) == [{"click": None}]
    assert second_rows(nulls, ("click", "ad")) == []


# --- every sink that holds the answer ------------------------------------------------------------


def _sink(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> KeyedSink:
    """A factory of one kind of sink with ``key=``, each writing to a new table (or topic)."""

    def new(key: tuple[str, ...]) -> kp.Sink:
        name = f"t_{uuid.uuid4().hex[:8]}"
        if kind == "postgres":
            return kp.PostgresSink(request.getfixturevalue("postgres_server").dsn, name, key=key)
        if kind == "kafka":
            broker: KafkaBroker = request.getfixturevalue("kafka_broker")
            broker.create_topic(name, partitions=1)
            return kp.KafkaSink(broker.bootstrap_servers, name, key=key)
        if kind == "delta":
            return kp.DeltaSink(str(tmp_path / name), key=key)
        if kind == "iceberg":
            return kp.IcebergSink(f"krishiv.{name}", warehouse=str(tmp_path), key=key)
        return kp.DuckDBSink(str(tmp_path / "r.duckdb"), name, key=key)

    return new


@pytest.fixture(params=["delta", "duckdb", "iceberg", "postgres", "kafka"])
def keyed_sink(request: pytest.FixtureRequest, tmp_path: Path) -> KeyedSink:
    return _sink(request.param, request, tmp_path)


@pytest.fixture(params=["delta", "duckdb", "iceberg", "postgres"])
def table_sink(request: pytest.FixtureRequest, tmp_path: Path) -> KeyedSink:
    """The sinks that read back what they hold (a Kafka topic is checked per micro-batch only)."""
    return _sink(request.param, request, tmp_path)


def test_two_rows_under_one_key_in_a_batch_fail_it_and_write_nothing(keyed_sink: KeyedSink) -> None:
    writer: Any = keyed_sink(("click",)).open(_context())
    writer.write(_joined([("c0", "a", "emit")]), 0)
    batch = _joined([("c2", "z", "emit"), ("c1", "x", "emit"), ("c1", "y", "emit")])
    with pytest.raises(
        kp.JobError, match=r"batch 1 has two different live rows under one key \(click='c1'\)"
    ):
        writer.write(batch, 1)
    assert _rows(writer) == [("c0", "a")]  # nothing of batch 1, c2 included
    fixed: Any = keyed_sink(("click", "ad")).open(_context())  # the fix: a key that is unique
    fixed.write(batch, 1)
    assert _rows(fixed) == [("c1", "x"), ("c1", "y"), ("c2", "z")]


def test_a_row_that_meets_a_different_held_row_fails_the_batch(table_sink: KeyedSink) -> None:
    writer: Any = table_sink(("click",)).open(_context())
    writer.write(_joined([("c1", "x", "emit")]), 0)
    writer.write(_joined([("c1", "x", "emit"), ("c3", "q", "emit")]), 1)  # a re-fire of the same row
    writer.write(_joined([("c1", "x", "retract"), ("c1", "y", "emit")]), 2)  # a correction
    assert _rows(writer) == [("c1", "y"), ("c3", "q")]
    with pytest.raises(kp.JobError, match=r"(?s)click='c3'.*mode='append'"):
        writer.write(_joined([("c4", "n", "emit"), ("c3", "r", "emit")]), 3)
    assert _rows(writer) == [("c1", "y"), ("c3", "q")]
    writer.write(_joined([("c3", "q", "retract"), ("c3", "r", "emit"), ("c4", "n", "emit")]), 3)
    assert _rows(writer) == [("c1", "y"), ("c3", "r"), ("c4", "n")]


def test_only_a_key_the_user_names_is_checked() -> None:
    """A window's rows are unique by key and bounds: its writes read nothing back first."""
    windows = SinkContext(
        schema=Schema.parse("k string, window_start timestamp, window_end timestamp, n bigint"),
        checkpoint_dir="/ck",
        accumulation="accumulating",
    )
    assert not target_for("DuckDBSink", "upsert", windows, "t").checked
    assert target_for("DuckDBSink", "upsert", _context(), "t", ("click",)).checked


# --- random joins never lose a row silently ------------------------------------------------------


def _join_batches(seed: int, how: str) -> list[list[dict[str, Any]]]:
    """The reference model's changelog of a random disordered interval join, one list per step."""
    rng = random.Random(seed)
    model = JoinModel(
        kind="interval",
        keys=["k"],
        left_time="lt",
        right_time="rt",
        left_columns=["k", "lt", "click"],
        right_columns=["k", "rt", "ad"],
        left_lag_ms=2,
        right_lag_ms=2,
        how=how,
        between=(-3, 3),
        allowed_lateness_ms=5,
        accumulation="retracting",
    )
    batches, clicks, ads = [], 0, 0
    for step in range(6):
        left, right = [], []
        for _ in range(rng.randint(0, 3)):
            clicks += 1
            left.append(
                {"k": rng.choice("abcdefgh"), "lt": step * 4 + rng.randint(-6, 3), "click": f"c{clicks}"}
            )
        for _ in range(rng.randint(0, 3)):
            ads += 1
            right.append({"k": rng.choice("abcdefgh"), "rt": step * 4 + rng.randint(-6, 3), "ad": f"a{ads}"})
        batches.append(model.step(left=left, right=right))
    batches.append(model.close())
    return batches


def _net(changelog: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    net: Counter[tuple[Any, ...]] = Counter()
    for row in changelog:
        net[(row["click"], row["ad"])] += -1 if row["kind"] == "retract" else 1
    return +net


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["inner", "left", "full"]))
def test_random_joins_with_duplicate_partners_never_lose_a_row_silently(
    tmp_path_factory: pytest.TempPathFactory, seed: int, how: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "j.duckdb"
    columns = "k string, lt bigint, click string, rt bigint, ad string, kind string"
    writer: Any = kp.DuckDBSink(str(path), "j", key="click").open(_context(columns))
    done: list[dict[str, Any]] = []
    for batch_id, batch in enumerate(_join_batches(seed, how)):
        if not batch:
            continue
        table = pa.Table.from_pylist(batch, schema=writer.schema.append(pa.field("kind", pa.string())))
        try:
            writer.write(table, batch_id)
        except kp.JobError:
            # the batch would have put a second row under a click: true of the model's rows, and
            # nothing of the batch reached the table
            clicks = Counter(click for click, _ in _net(done + batch).elements())
            assert max(clicks.values()) > 1
            break
        done += batch
        held = Counter((r["click"], r["ad"]) for r in writer.results().to_pylist())
        assert held == _net(done)  # every live joined row is in the table, once
    assert Counter((r["click"], r["ad"]) for r in writer.results().to_pylist()) == _net(done)


@pytest.mark.spark
def test_a_left_join_with_two_impressions_per_click_fails_and_restarts_once_fixed(
    session: kp.Session, tmp_path: Path
) -> None:
    """One click, two impressions, ``key="click_id"``: the job fails naming the key, writes nothing
    of the batch, and the same checkpoint runs on with a key that is unique."""
    import duckdb

    clicks, click_sender = session.memory_stream("user string, t bigint, click_id string")
    views, view_sender = session.memory_stream("user string, t bigint, ad string")
    joined = (
        clicks.watermark("t", 0)
        .key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-10, 0), how="left")
    )
    path, checkpoint = str(tmp_path / "out.duckdb"), str(tmp_path / "ck")
    job = joined.start(kp.DuckDBSink(path, "by_click", key="click_id"), checkpoint_dir=checkpoint)
    try:
        view_sender.send([{"user": "u", "t": 5, "ad": "x"}, {"user": "u", "t": 7, "ad": "y"}])
        click_sender.send([{"user": "u", "t": 9, "click_id": "c1"}])
        with pytest.raises(kp.JobError, match=r"(?s)click_id='c1'.*key=.*mode='append'"):
            job.process_all_available()
    finally:
        job.stop()
    with duckdb.connect(path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM by_click").fetchall() == [(0,)]
    fixed = kp.DuckDBSink(path, "by_view", key=("click_id", "ad"))
    job = joined.start(fixed, checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
    finally:
        job.stop()
    with duckdb.connect(path, read_only=True) as con:
        got = sorted(con.execute("SELECT click_id, ad FROM by_view").fetchall())
    assert got == [("c1", "x"), ("c1", "y")]
