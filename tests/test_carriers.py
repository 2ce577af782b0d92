"""What carries the stateful operator's state between micro-batches: Spark's state store, or
krishiv's own files under the checkpoint (``spark.krishiv.stateful.carrier = krishiv-files``).

The files carrier's store is checked without Spark (versions, retries, a
state that empties, what a killed write leaves, the worker's cache); on
Spark, its results equal the reference model step by step, across a
restart, and behind a stage after a join; a checkpoint keeps its carrier.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.errors import JobError
from krishiv_py.runtime.launch import CARRIER_CONF
from krishiv_py.stateful.versioned import VersionedBlobs, forget_cache
from krishiv_py.testing import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    assert_same_rows,
    run_reference,
    run_streaming,
)

SCHEMA = "k string, t bigint, v bigint"

# --- the store, without Spark ----------------------------------------------------------------


def test_a_micro_batch_reads_the_newest_version_before_its_own(tmp_path: Any) -> None:
    store = VersionedBlobs(str(tmp_path), bucket=0)
    store.save(2, b"two")
    store.save(4, b"four")
    assert store.load_before(3) == b"two"
    assert store.load_before(4) == b"two"  # micro-batch 4 run again: where 3 (here 2) ended
    assert store.load_before(5) == b"four"
    store.save(4, b"four again")  # the retry's write replaces the failed attempt's
    assert store.load_before(9) == b"four again"
    store.save(7, b"seven")
    assert store.versions() == [4, 7]  # the one before the newest is kept, older ones go


def test_an_emptied_state_is_a_version_of_its_own(tmp_path: Any) -> None:
    store = VersionedBlobs(str(tmp_path), bucket=1)
    store.save(1, b"windows")
    store.save(2, None)
    assert store.load_before(3) is None and store.load_before(2) == b"windows"


def test_another_writer_of_the_version_is_read_not_the_cache(tmp_path: Any) -> None:
    mine = VersionedBlobs(str(tmp_path), bucket=2)
    mine.save(3, b"mine")
    assert mine.load_before(4) == b"mine"
    # Another worker process (its own memory) runs micro-batch 3 again and moves its file in place.
    (tmp_path / "2" / "3.arrow.other.tmp").write_bytes(b"a retry on another worker, longer")
    os.replace(tmp_path / "2" / "3.arrow.other.tmp", tmp_path / "2" / "3.arrow")
    assert mine.load_before(4) == b"a retry on another worker, longer"
    forget_cache()
    assert VersionedBlobs(str(tmp_path), bucket=2).load_before(4) == b"a retry on another worker, longer"


def test_a_killed_write_leaves_nothing_that_is_read_and_is_cleaned_up(tmp_path: Any) -> None:
    store = VersionedBlobs(str(tmp_path), bucket=5)
    store.save(1, b"one")
    stale = tmp_path / "5" / "2.arrow.dead.tmp"
    stale.write_bytes(b"half a write")
    assert store.load_before(3) == b"one"
    store.save(3, b"three")
    assert not stale.exists() and store.versions() == [1, 3]


def test_a_step_that_moves_only_a_joins_sweep_mark_is_a_new_version() -> None:
    """A window join's padded rows fire by the watermark of its last sweep, kept in the state's
    schema metadata: a tick that fires them changes nothing else, and must still be written."""
    import pyarrow as pa

    from krishiv_py.stateful.held_state import unchanged as _unchanged
    from krishiv_py.stateful.joins import SWEPT

    stored = pa.table({"k": ["a"]}).replace_schema_metadata({SWEPT: b"20"})
    assert _unchanged(stored, stored)
    assert not _unchanged(stored, stored.replace_schema_metadata({SWEPT: b"30"}))
    assert _unchanged(None, stored.slice(0, 0))


def test_the_recipe_names_the_carrier_and_a_wrong_one_is_refused() -> None:
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.planner.spark.stateful import with_carrier
    from krishiv_py.types import to_schema

    source = n.MemorySource(name="events", schema=to_schema(SCHEMA), path="/data/events")
    build = _windows("session", 10, 0, 5, kp.Trigger.on_watermark(), "accumulating")
    recipe = build(Stream(None, source)).lower(lowering="stateful")
    assert recipe.stateful is not None and recipe.stateful.carrier == "krishiv-files"
    assert "applyInPandasWithState" in with_carrier(recipe, "state-store").render()
    files = recipe.render()
    assert "applyInArrow(" in files and "krishiv-state/<bucket>/<batch id>.arrow" in files
    assert "applyInPandasWithState" not in files
    one = with_carrier(recipe, "one-task").render()
    assert ".coalesce(1).mapInArrow(" in one and "groupBy" not in one
    with pytest.raises(kp.PlanError, match="unknown carrier"):
        with_carrier(recipe, "memory")


def test_a_checkpoint_keeps_the_carrier_it_started_with(tmp_path: Any) -> None:
    from krishiv_py.checkpoint import CheckpointLayout
    from krishiv_py.runtime.launch import operator_carrier

    new = CheckpointLayout(str(tmp_path / "new"))
    assert operator_carrier(new, None) == "krishiv-files"
    assert operator_carrier(new, "one-task") == "one-task"
    assert operator_carrier(CheckpointLayout("s3a://bucket/cp"), None) == "state-store"
    older = tmp_path / "older"  # written before carriers were recorded: Spark's state store
    older.mkdir()
    (older / "krishiv-plan.txt").write_text("lowering: stateful\nWindowAggregate ...\n")
    assert operator_carrier(CheckpointLayout(str(older)), None) == "state-store"
    (older / "krishiv-plan.txt").write_text("lowering: stateful\nWindowAggregate ...\ncarrier: one-task\n")
    assert operator_carrier(CheckpointLayout(str(older)), None) == "one-task"
    oldest = tmp_path / "oldest"  # no plan file at all, but Spark's offset log
    (oldest / "offsets").mkdir(parents=True)
    (oldest / "offsets" / "0").write_text("v1\n{}\n")
    assert operator_carrier(CheckpointLayout(str(oldest)), None) == "state-store"


# --- on Spark -----------------------------------------------------------------------------------


@pytest.fixture
def files_carrier(session: kp.Session) -> Iterator[kp.Session]:
    """The shared session with the files carrier for the jobs the test starts."""
    session.spark.conf.set(CARRIER_CONF, "krishiv-files")
    try:
        yield session
    finally:
        session.spark.conf.unset(CARRIER_CONF)


def _carried_by(session: kp.Session, carrier: str) -> None:
    session.spark.conf.set(CARRIER_CONF, carrier)


def _windows(kind: str, size: int, lag: int, lateness: int, trigger: kp.Trigger, mode: Any) -> Any:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag).key_by("k")
        if kind == "tumbling":
            windowed = w.tumbling_window(size)
        elif kind == "sliding":
            windowed = w.sliding_window(size, max(1, size // 2))
        else:
            windowed = w.session_window(size)
        windowed = windowed.allowed_lateness(lateness).trigger(trigger).accumulation(mode)
        out = windowed.agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("s"))
        return out  # type: ignore[no-any-return]

    return build


row_st = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", "c"]),
        "t": st.integers(min_value=-20, max_value=150),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9)),
    }
)
steps_st = st.lists(
    st.one_of(
        st.lists(row_st, min_size=1, max_size=6).map(Send),
        st.integers(min_value=-40, max_value=160).map(AdvanceWatermark),
    ),
    min_size=1,
    max_size=3,
).map(lambda s: [*s, Close()])


@pytest.mark.spark
@settings(max_examples=int(os.environ.get("KRISHIV_SPARK_EXAMPLES", "3")))
@given(
    kind=st.sampled_from(["tumbling", "sliding", "session"]),
    size=st.integers(5, 40),
    lag=st.integers(0, 20),
    lateness=st.sampled_from([0, 25]),
    trigger=st.sampled_from([kp.Trigger.on_watermark(), kp.Trigger.on_count(2)]),
    mode=st.sampled_from(["accumulating", "retracting"]),
    scenario=steps_st,
    carrier=st.sampled_from(["krishiv-files", "one-task"]),
)
def test_the_files_carriers_equal_the_model_after_every_step(
    files_carrier: kp.Session,
    carrier: str,
    kind: str,
    size: int,
    lag: int,
    lateness: int,
    trigger: kp.Trigger,
    mode: Any,
    scenario: list[Step],
) -> None:
    _carried_by(files_carrier, carrier)
    build = _windows(kind, size, lag, lateness, trigger, mode)
    expected = run_reference(SCHEMA, build, scenario)
    actual = run_streaming(files_carrier, SCHEMA, build, scenario, lowering="stateful")
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        try:
            assert_same_rows(got, want)
        except AssertionError as exc:
            raise AssertionError(f"after step {i} ({scenario[i]!r}): {exc}") from None


@pytest.mark.spark
@pytest.mark.parametrize("carrier", ["krishiv-files", "one-task"])
def test_the_files_carriers_keep_their_state_across_a_restart_and_in_the_checkpoint(
    files_carrier: kp.Session, tmp_path: Any, carrier: str
) -> None:
    _carried_by(files_carrier, carrier)
    checkpoint, results = str(tmp_path / "cp"), str(tmp_path / "out")
    build = _windows("tumbling", 10, 0, 60, kp.Trigger.on_watermark(), "accumulating")
    stream, sender = files_carrier.memory_stream(SCHEMA)
    job = build(stream).start(kp.ParquetSink(results), checkpoint_dir=checkpoint)
    first = [{"k": "a", "t": 3, "v": 1}, {"k": "b", "t": 4, "v": 2}]
    try:
        sender.send(first)
        job.process_all_available()
    finally:
        job.stop()
    assert os.listdir(os.path.join(checkpoint, "krishiv-state"))  # one directory per bucket with state
    assert not os.path.isdir(os.path.join(checkpoint, "state"))  # Spark keeps no state for it
    later = [{"k": "a", "t": 5, "v": 4}, {"k": "a", "t": 40, "v": 8}, {"k": "b", "t": 2, "v": 16}]
    sender.send(later)
    job = build(stream).start(kp.ParquetSink(results), checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
        sender.close()
        assert job.await_termination(timeout_s=120)
        got = job.results()
    finally:
        job.stop()
    want = run_reference(SCHEMA, build, [Send(first), Send(later), Close()])[-1]
    assert_same_rows(got, want)
    # The checkpoint keeps its carrier: Spark's state store would start it empty.
    files_carrier.spark.conf.set(CARRIER_CONF, "state-store")
    with pytest.raises(JobError, match=f"carrier: {carrier}"):
        build(stream).start(kp.ParquetSink(results), checkpoint_dir=checkpoint)
    files_carrier.spark.conf.unset(CARRIER_CONF)  # unasked: the one it started with
    build(stream).start(kp.ParquetSink(results), checkpoint_dir=checkpoint).stop()


@pytest.mark.spark
def test_an_unknown_carrier_is_named(files_carrier: kp.Session) -> None:
    files_carrier.spark.conf.set(CARRIER_CONF, "rocks")
    stream, _ = files_carrier.memory_stream(SCHEMA)
    build = _windows("tumbling", 10, 0, 0, kp.Trigger.on_watermark(), "accumulating")
    with pytest.raises(kp.PlanError, match=r"'rocks'.*state-store, krishiv-files"):
        build(stream).start(lowering="stateful")


@pytest.mark.spark
@pytest.mark.parametrize("carrier", ["krishiv-files", "one-task", "state-store"])
@pytest.mark.parametrize("kind", ["tumbling", "session"])
def test_a_micro_batch_fires_what_its_own_rows_make_due(session: kp.Session, carrier: str, kind: str) -> None:
    """One source with a fixed lag: the rows that move the watermark past a window's end fire it in
    their own micro-batch, with no second micro-batch (a tick) for it; the results equal the model's."""
    _carried_by(session, carrier)
    try:
        build = _windows(kind, 10, 2, 0, kp.Trigger.on_watermark(), "accumulating")
        steps: list[Step] = [
            Send([{"k": "a", "t": 1, "v": 1}, {"k": "b", "t": 3, "v": 2}]),
            Send([{"k": "a", "t": 4, "v": 4}, {"k": "b", "t": 30, "v": 8}]),  # watermark 28
            Send([{"k": "a", "t": 2, "v": 16}, {"k": "a", "t": 60, "v": 32}]),  # late; 58
        ]
        stream, sender = session.memory_stream(SCHEMA)
        job = build(stream).start(lowering="stateful")
        try:
            seen = []
            for step in steps:
                assert isinstance(step, Send)
                before = job.metrics().batches
                sender.send(step.rows)
                job.process_all_available()
                seen.append((job.metrics().batches - before, job.results().to_pylist()))
        finally:
            job.stop()
    finally:
        session.spark.conf.unset(CARRIER_CONF)
    expected = run_reference(SCHEMA, build, steps)
    assert [n for n, _ in seen] == [1, 1, 1]
    assert seen[1][1], "the windows the second step passed fired in its micro-batch"
    for (_, got), want in zip(seen, expected, strict=True):
        assert_same_rows(got, want)


STAGE_STEPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("v", [{"user": "u", "t": 1_000, "ad": "a1"}, {"user": "w", "t": 2_000, "ad": "a1"}]),
    ("c", [{"user": "u", "t": 3_000, "ad": "x"}, {"user": "w", "t": 4_000, "ad": "y"}]),
    ("v", [{"user": "u", "t": 12_000, "ad": "a2"}]),
    ("c", [{"user": "u", "t": 14_000, "ad": "x"}, {"user": "w", "t": 25_000, "ad": "y"}]),
    ("v", [{"user": "u", "t": 2_500, "ad": "a1"}]),  # late: a pair that corrects a fired window
]


def _stage_run(session: kp.Session) -> list[list[dict[str, Any]]]:
    """A window per ad after a join per user (a stage of its own), its results after each step."""
    tag = uuid.uuid4().hex[:6]
    clicks, click_sender = session.memory_stream("user string, t bigint, ad string", name=f"c_{tag}")
    views, view_sender = session.memory_stream("user string, t bigint, ad string", name=f"v_{tag}")
    joined = (
        clicks.watermark("t", 0)
        .key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-5_000, 0))
        .allowed_lateness(20_000)
    )
    per_ad = joined.key_by("ad").tumbling_window(10_000).agg(kp.count(kp.col("*")).alias("pairs"))
    assert "cross the cluster once more" in per_ad.explain()
    job = per_ad.start()
    out = []
    try:
        for side, rows in STAGE_STEPS:
            (click_sender if side == "c" else view_sender).send(rows)
            job.process_all_available()
            out.append(job.results().to_pylist())
    finally:
        job.stop()
    return out


@pytest.mark.spark
def test_a_stage_after_a_join_runs_behind_either_files_carrier(session: kp.Session) -> None:
    """The stage's results equal the state-store carrier's (checked against the model in
    test_composition.py) after every step, a late pair's correction included."""
    want = _stage_run(session)
    assert any(r["pairs"] for r in want[-1])
    for carrier in ("krishiv-files", "one-task"):
        session.spark.conf.set(CARRIER_CONF, carrier)
        try:
            got = _stage_run(session)
        finally:
            session.spark.conf.unset(CARRIER_CONF)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            try:
                assert_same_rows(a, b)
            except AssertionError as exc:
                raise AssertionError(f"{carrier}, after step {i}: {exc}") from None
