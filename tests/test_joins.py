"""Joins on event time on real Spark: the stateful lowering and the bounded run against the model.

Each scenario runs a join step by step on memory streams (one ``send`` or
watermark move, then ``process_all_available()``: one micro-batch and its
ticks), and after every step the job's results so far must equal the
reference model's, as multisets. The bounded run of the same rows must
equal the model's one step followed by ``close()``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, cast

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.model.joins import join_model_for
from krishiv_py.plan import nodes as n

LEFT = "k string, t bigint, a bigint"
RIGHT = "k string, t bigint, b bigint"


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    out = []
    for row in table.to_pylist():
        for c in ("window_start", "window_end"):
            if c in row:
                row[c] = int(row[c].timestamp() * 1000)
        out.append(tuple(sorted(row.items())))
    return Counter(out)


def model_rows(results: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in results)


def streams(session: kp.Session) -> tuple[Any, Any, kp.Sender, kp.Sender]:
    tag = uuid.uuid4().hex[:6]
    left, ls = session.memory_stream(LEFT, name=f"left_{tag}")
    right, rs = session.memory_stream(RIGHT, name=f"right_{tag}")
    return left, right, ls, rs


def run_steps(
    joined: kp.JoinedStream, senders: dict[str, kp.Sender], steps: list[tuple[str, Any, Any]]
) -> None:
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    job = joined.start()
    try:
        for i, (op, side, arg) in enumerate(steps):
            if op == "send":
                model.send(arg, side=side)
                senders[side].send(arg)
            elif op == "advance":
                model.advance_watermark(arg, side=side)
                senders[side].advance_watermark(arg)
            else:
                model.close(side=side)
                senders[side].close()
            job.process_all_available()
            assert rows(job.results()) == model_rows(model.results), f"after step {i}: {steps[: i + 1]}"
        assert model.metrics["retractions"] > 0  # a late row corrected what was emitted
        metrics = job.metrics()
        assert metrics.very_late_events == model.metrics["very_late_events"]
        assert metrics.mildly_late_events == model.metrics["mildly_late_events"]
        assert metrics.retractions == model.metrics["retractions"]
        # A join's rows are counted as joined rows, not as window results (a window join's too).
        assert (metrics.joined_rows, metrics.windows_emitted) == (model.metrics["emitted"], None)
        assert "krishiv_window_joined_rows_total" in metrics.to_prometheus()
        assert "windows_emitted" not in metrics.to_prometheus()
    finally:
        job.stop()


#: Disorder, a late row within the lateness, a very late row, duplicate and null keys.
STEPS: list[tuple[str, Any, Any]] = [
    (
        "send",
        "left",
        [
            {"k": "a", "t": 10, "a": 1},
            {"k": "a", "t": 12, "a": 2},
            {"k": None, "t": 11, "a": 3},
            {"k": "a", "t": 22, "a": 5},
        ],
    ),
    (
        "send",
        "right",
        [{"k": "a", "t": 11, "b": 10}, {"k": "b", "t": 13, "b": 11}, {"k": "a", "t": 9, "b": 12}],
    ),
    ("advance", "left", 30),
    ("advance", "right", 30),
    ("send", "right", [{"k": "a", "t": 20, "b": 13}, {"k": "a", "t": 2, "b": 14}]),  # mildly late; very late
    ("send", "left", [{"k": "b", "t": 28, "a": 4}]),
    ("close", "left", None),
    ("close", "right", None),
]


@pytest.mark.parametrize(
    ("kind", "how", "options"),
    [
        ("interval", "full", {"between": (-2, 3)}),
        ("window", "left", {"window": 10}),
        ("window", "anti", {"window": 10}),
        ("as_of", "left", {"max_age_ms": 5}),
    ],
)
def test_a_join_on_spark_equals_the_model_step_by_step(
    session: kp.Session, kind: str, how: str, options: dict[str, Any]
) -> None:
    left, right, ls, rs = streams(session)
    lk, rk = left.watermark("t", 0).key_by("k"), right.watermark("t", 0).key_by("k")
    if kind == "interval":
        joined = lk.interval_join(rk, options["between"], how=how)
    elif kind == "window":
        joined = lk.tumbling_window(options["window"]).join(rk.tumbling_window(options["window"]), how=how)
    else:
        joined = lk.as_of_join(rk, how=how, max_age_ms=options["max_age_ms"])
    joined = joined.allowed_lateness(15).accumulation("retracting")
    run_steps(joined, {"left": ls, "right": rs}, STEPS)


def test_an_inner_interval_join_without_lateness_drops_late_rows_and_keeps_state_small(
    session: kp.Session,
) -> None:
    left, right, ls, rs = streams(session)
    joined = (
        left.watermark("t", 2)
        .key_by("k")
        .interval_join(right.watermark("t", 1).key_by("k"), between=(0, 5))
        .filter(kp.col("a") > 0)
    )
    steps: list[tuple[str, Any, Any]] = [
        ("send", "left", [{"k": "a", "t": 1, "a": 1}, {"k": "a", "t": 5, "a": 0}]),
        (
            "send",
            "right",
            [{"k": "a", "t": 1, "b": 1}, {"k": "a", "t": 6, "b": 2}, {"k": "a", "t": 7, "b": 3}],
        ),
        ("send", "left", [{"k": "a", "t": 40, "a": 5}]),
        ("send", "right", [{"k": "a", "t": 42, "b": 4}, {"k": "a", "t": 3, "b": 5}]),  # 3: very late
    ]
    node = joined.plan.input  # the join under the filter
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    assert joined.lower().lowering == "stateful"  # krishiv's join operator, the planner's choice
    job = joined.start(lowering="stateful")
    try:
        for _op, side, arg in steps:
            model.send(arg, side=side)
            {"left": ls, "right": rs}[side].send(arg)
            job.process_all_available()
        expected = [r for r in model.results if cast(int, r["a"]) > 0]
        assert rows(job.results()) == model_rows(expected)
        assert model.metrics["very_late_events"] == job.metrics().very_late_events == 1
        assert job.metrics().state_windows is not None and job.metrics().state_windows <= 3
    finally:
        job.stop()


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_a_bounded_join_equals_one_step_then_close(session: kp.Session, how: Any) -> None:
    left_rows = [
        {"k": k, "t": t, "a": i} for i, (k, t) in enumerate([("a", 1), ("a", 7), ("b", 3), (None, 2)])
    ]
    right_rows = [
        {"k": k, "t": t, "b": i} for i, (k, t) in enumerate([("a", 2), ("a", 3), ("c", 4), ("b", 9)])
    ]
    left = session.from_records(left_rows, LEFT).watermark("t", 0).key_by("k")
    right = session.from_records(right_rows, RIGHT).watermark("t", 0).key_by("k")
    joined = left.interval_join(right, between=(-1, 2), how=how)
    # An inner join is one Spark batch join; the others run through krishiv's operator.
    assert joined.lower().lowering == ("bounded" if how == "inner" else "stateful")
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    model.step(left=left_rows, right=right_rows)
    model.close()
    assert rows(joined.collect()) == model_rows(model.results)
    if how == "inner":  # the operator agrees with Spark's batch join
        assert rows(joined.start(lowering="stateful").results()) == model_rows(model.results)
        assert joined.start().metrics().joined_rows == len(model.results)
        late = joined.allowed_lateness(60_000)  # nothing is late in one step: the same batch join
        assert late.lower().lowering == "bounded"
        assert rows(late.collect()) == model_rows(model.results)


def test_a_window_join_collect_reads_what_was_sent_so_far(session: kp.Session) -> None:
    left, right, ls, rs = streams(session)
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .sliding_window(10, 5)
        .join(right.watermark("t", 0).key_by("k").sliding_window(10, 5), how="semi")
    )
    ls.send([{"k": "a", "t": 3, "a": 1}, {"k": "b", "t": 4, "a": 2}])
    rs.send([{"k": "a", "t": 8, "b": 1}])
    got = sorted(
        (r["k"], r["a"], int(r["window_start"].timestamp() * 1000)) for r in joined.collect().to_pylist()
    )
    assert got == [("a", 1, 0)]  # [0, 10) holds both; [-5, 5) has no right row; b has none


def _as_of_kept(left: Any, right: Any) -> tuple[Any, list[pa.Table]]:
    """An as-of join of ``left`` and ``right`` on ``k`` (times ``t``, no lag), and the list its
    late-event handler adds every table it gets to."""
    seen: list[pa.Table] = []

    class Keep:
        def handle(self, late: pa.Table) -> None:
            seen.append(late)

    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .as_of_join(right.watermark("t", 0).key_by("k"))
        .with_late_event_handler(Keep())
    )
    return joined, seen


def test_very_late_rows_of_both_sides_reach_the_handler_with_their_side(session: kp.Session) -> None:
    left, right, ls, rs = streams(session)
    joined, seen = _as_of_kept(left, right)
    job = joined.start()
    try:
        ls.send([{"k": "a", "t": 100, "a": 1}])
        rs.send([{"k": "a", "t": 100, "b": 1}])
        job.process_all_available()
        ls.send([{"k": "a", "t": 5, "a": 2}])
        rs.send([{"k": "a", "t": 6, "b": 2}, {"k": "a", "t": None, "b": 3}])
        job.process_all_available()
    finally:
        job.stop()
    late = pa.concat_tables(seen).to_pylist()
    got = sorted(
        (r["side"], r["classification"], r["t"] if r["side"] == "left" else r["t_right"]) for r in late
    )
    assert got == [("left", "very_late", 5), ("right", "invalid", None), ("right", "very_late", 6)]
    assert job.metrics().very_late_events == 2


def test_an_input_column_named_side_reaches_the_handler_beside_the_rows_side(session: kp.Session) -> None:
    """A trade's ``side`` column (buy, sell) is listed as ``side_input`` beside the late row's
    ``side`` (left, right), as the model lists it; the job goes on."""
    tag = uuid.uuid4().hex[:6]
    left, ls = session.memory_stream("k string, t bigint, side string", name=f"trades_{tag}")
    right, rs = session.memory_stream("k string, t bigint, side string", name=f"quotes_{tag}")
    joined, seen = _as_of_kept(left, right)
    steps = [
        ([{"k": "a", "t": 100, "side": "buy"}], [{"k": "a", "t": 90, "side": "bid"}]),
        ([{"k": "a", "t": 5, "side": "sell"}], [{"k": "a", "t": 6, "side": "ask"}]),
        ([{"k": "a", "t": 200, "side": "buy"}], [{"k": "a", "t": 150, "side": "ask"}]),
    ]
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    job = joined.start()
    try:
        for lefts, rights in steps:
            model.step(left=lefts, right=rights)
            ls.send(lefts)
            rs.send(rights)
            job.process_all_available()
        results = job.results()
    finally:
        job.stop()
    late = pa.concat_tables(seen)
    assert late.column_names[:1] == ["side"] and "side_input" in late.column_names
    listed = [{k: v for k, v in r.items() if v is not None} for r in late.to_pylist()]
    want = [{k: v for k, v in r.items() if v is not None} for r in model.late_events]
    assert sorted(listed, key=repr) == sorted(want, key=repr)
    assert {(r["side"], r["side_input"] if r["side"] == "left" else r["side_right"]) for r in listed} == {
        ("left", "sell"),
        ("right", "ask"),
    }
    assert rows(results) == model_rows(model.results) and results.num_rows == 1  # (t=100; 200 waits)


def test_explain_shows_the_join_and_why_it_runs_on_the_stateful_lowering(session: kp.Session) -> None:
    left, right, _, _ = streams(session)
    lk, rk = left.watermark("t", 0).key_by("k"), right.watermark("t", 0).key_by("k")
    text = lk.interval_join(rk, (-5, 0), how="left").explain(show=False)
    assert "Join interval how=left keys=[k] between=(-5, 0)" in text
    assert "krishiv join operator: interval how=left" in text
    assert "Spark's stream-stream join" in text
    assert "FlatMapGroupsInArrow" in text
    inner = lk.interval_join(rk, (-5, 0))
    assert "== Lowering: stateful ==" in inner.explain(show=False)
    native = inner.explain(show=False, lowering="native")
    assert "== Lowering: native ==" in native
    assert "StreamingSymmetricHashJoin" in native
    assert "flag rows behind the micro-batch's watermark" in native
    assert "test_native_join_over_batchings" in native


def test_an_inner_interval_join_runs_on_spark_s_own_join_exactly_and_bounds_its_state(
    session: kp.Session,
) -> None:
    """Asked for, Spark's join: krishiv's filter drops a row at ``t < W``; a row at ``W`` joins."""
    left, right, ls, rs = streams(session)
    joined = left.watermark("t", 0).key_by("k").interval_join(right.watermark("t", 0).key_by("k"), (-5, 5))
    assert joined.lower().lowering == "stateful"
    assert joined.lower(lowering="native").lowering == "native"
    steps: list[tuple[str, Any, Any]] = [
        ("send", "left", [{"k": "a", "t": 100, "a": 1}, {"k": None, "t": 100, "a": 0}]),
        ("send", "right", [{"k": "a", "t": 100, "b": 1}, {"k": None, "t": 100, "b": 0}]),
        ("send", "left", [{"k": "b", "t": 30, "a": 2}]),  # very late
        ("send", "right", [{"k": "b", "t": 32, "b": 2}]),  # very late
        ("send", "left", [{"k": "c", "t": 100, "a": 3}]),  # at W: on time
        (
            "send",
            "right",
            [{"k": "c", "t": 100, "b": 3}, {"k": "c", "t": 105, "b": 4}, {"k": "c", "t": 106, "b": 5}],
        ),
        ("send", "left", [{"k": "d", "t": 99, "a": 4}]),  # late by 1 ms
        ("send", "right", [{"k": "d", "t": 101, "b": 4}, {"k": "a", "t": 95, "b": 6}]),
        ("send", "left", [{"k": "e", "t": 5_000, "a": 5}]),
        ("send", "right", [{"k": "e", "t": 5_004, "b": 5}]),
    ]
    run_native(joined, {"left": ls, "right": rs}, steps)


def run_native(
    joined: kp.JoinedStream, senders: dict[str, kp.Sender], steps: list[tuple[str, Any, Any]]
) -> None:
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    job = joined.start(lowering="native")
    try:
        for i, (_, side, arg) in enumerate(steps):
            model.send(arg, side=side)
            senders[side].send(arg)
            job.process_all_available()
            assert rows(job.results()) == model_rows(model.results), f"after step {i}"
        last = job.progress()[-1].raw
        state = last["stateOperators"][0]["numRowsTotal"]
        assert state <= 4, state  # rows far behind the watermark are gone
        metrics = job.metrics()  # Spark's join counts its rows too, krishiv's filter the very late
        assert (metrics.joined_rows, metrics.windows_emitted) == (len(model.results), None)
        assert metrics.very_late_events == model.metrics["very_late_events"] > 0
    finally:
        job.stop()


def test_the_testing_scenarios_play_a_join_on_the_model_and_on_spark(session: kp.Session) -> None:
    """``krishiv_py.testing``: each source of the scenario is a side of the join."""
    from krishiv_py import testing as t

    steps: list[Any] = [
        t.Send([{"k": "a", "t": 3, "a": 1, "b": None}, {"k": "b", "t": 4, "a": 2, "b": None}], source="lhs"),
        t.Send([{"k": "a", "t": 8, "a": None, "b": 1}, {"k": "c", "t": 9, "a": None, "b": 2}], source="rhs"),
        t.AdvanceWatermark(20, source="lhs"),
        t.AdvanceWatermark(20, source="rhs"),
        t.Send([{"k": "b", "t": 12, "a": 3, "b": None}], source="lhs"),
        t.Close(source="lhs"),
        t.Close(source="rhs"),
    ]
    schema = "k string, t bigint, a bigint, b bigint"

    def pipeline(lhs: kp.Stream, rhs: kp.Stream) -> kp.JoinedStream:
        w = lhs.watermark("t", 0).key_by("k").tumbling_window(10)
        return w.join(rhs.watermark("t", 0).key_by("k").tumbling_window(10), how="right")

    expected = t.run_reference(schema, pipeline, steps, sources=("lhs", "rhs"))
    got = t.run_streaming(session, schema, pipeline, steps, sources=("lhs", "rhs"))
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected, strict=True):
        t.assert_same_rows(actual, wanted)
    assert len(expected[-1]) == 2  # a's pair, c padded; b has no right row


def test_a_table_sink_upserts_a_joins_rows_by_the_columns_the_user_names(
    session: kp.Session, tmp_path: Any
) -> None:
    """A late partner replaces the padded row in place: the table holds each left row's current match."""
    import duckdb

    from krishiv_py.errors import PlanError

    left, right, ls, rs = streams(session)
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .interval_join(right.watermark("t", 0).key_by("k"), between=(0, 5), how="left")
        .allowed_lateness(20)
        .accumulation("retracting")
    )
    path = str(tmp_path / "out.duckdb")
    with pytest.raises(PlanError, match="key="):
        joined.start(kp.DuckDBSink(path, "joined"))
    with pytest.raises(PlanError, match="no column 'id'"):
        joined.start(kp.DuckDBSink(path, "joined", key="id"))
    job = joined.start(kp.DuckDBSink(path, "joined", key="a"))  # a: unique per left row here
    try:
        ls.send([{"k": "x", "t": 10, "a": 1}, {"k": "y", "t": 11, "a": 2}])
        rs.send([{"k": "x", "t": 12, "b": 7}])
        ls.advance_watermark(30)
        rs.advance_watermark(30)
        job.process_all_available()  # x matched; y padded
        rs.send([{"k": "y", "t": 14, "b": 8}])  # late by 16 ms < 20: y's padded row is replaced
        job.process_all_available()
    finally:
        job.stop()
    with duckdb.connect(path, read_only=True) as con:
        got = sorted(con.execute("SELECT k, a, t_right, b FROM joined").fetchall())
    assert got == [("x", 1, 12, 7), ("y", 2, 14, 8)]


def test_key_is_for_a_joins_rows_only() -> None:
    from krishiv_py.errors import PlanError
    from krishiv_py.sinks import SinkContext
    from krishiv_py.tables.changelog import target_for
    from krishiv_py.types import Schema

    windows = SinkContext(
        schema=Schema.parse("k string, window_start timestamp, window_end timestamp, n bigint")
    )
    with pytest.raises(PlanError, match="leave key= out"):
        target_for("DuckDBSink", "upsert", windows, "t", ("n",))
    pairs = SinkContext(
        schema=Schema.parse("k string, window_start timestamp, window_end timestamp, a bigint, b bigint"),
        join_identity=("k", "window_start", "window_end"),
    )
    assert target_for("DuckDBSink", "upsert", pairs, "t", ("a", "b")).key == (
        "k",
        "window_start",
        "window_end",
        "a",
        "b",
    )
    assert target_for("DuckDBSink", "append", pairs, "t").key == ()
    with pytest.raises(PlanError, match="key= takes column names"):
        kp.DuckDBSink("x.duckdb", "t", key=[1])


#: One file a side per micro-batch (``(left rows, right rows)``, ``(k, t, v)`` each): disorder, a
#: late pair that corrects a padded row, a very late row, a micro-batch of one side's rows only.
BOTH_SIDES: list[tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]] = [
    ([("a", 1, 1), ("e", 5, 12)], [("a", 3, 2)]),
    ([("b", 12, 3)], [("c", 14, 4)]),  # the watermarks after it: 12 and 12 - [0, 10) is due
    ([("a", 25, 5)], [("b", 9, 6), ("e", 8, 13), ("c", 37, 7)]),  # late: e's pair withdraws its pad
    ([("c", 29, 8)], []),  # one side only (the lower is 29: nothing is due)
    ([("b", 2, 9), ("d", 52, 10)], [("d", 53, 11)]),  # very late; 52 and 51: [30, 40) is due
]


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_join_fires_in_the_micro_batch_whose_rows_of_both_sides_move_its_watermark(
    session: kp.Session, tmp_path: Any, how: Any
) -> None:
    """Each side's watermark with a fixed lag: what the lower of the two after a micro-batch makes
    due fires in it, without a tick micro-batch, when both sides had rows in it; the results
    equal the model's stepped with both sides' rows of each micro-batch."""
    import os

    import pyarrow.parquet as pq

    dirs = {side: tmp_path / side for side in ("left", "right")}
    for i, step in enumerate(BOTH_SIDES):  # every file there before the job starts: one a side per batch
        for (side, folder), rows_of in zip(dirs.items(), step, strict=True):
            folder.mkdir(exist_ok=True)
            value = "a" if side == "left" else "b"
            table = pa.table(
                {
                    "k": pa.array([k for k, _, _ in rows_of], pa.string()),
                    "t": pa.array([t for _, t, _ in rows_of], pa.int64()),
                    value: pa.array([v for _, _, v in rows_of], pa.int64()),
                }
            )
            pq.write_table(table, str(folder / f"{i:02d}.parquet"))
            os.utime(folder / f"{i:02d}.parquet", (1_000_000 + i, 1_000_000 + i))
    left = session.read_parquet(str(dirs["left"]), LEFT, streaming=True, max_files_per_trigger=1)
    right = session.read_parquet(str(dirs["right"]), RIGHT, streaming=True, max_files_per_trigger=1)
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .join(right.watermark("t", 2).key_by("k").tumbling_window(10), how=how)
        .allowed_lateness(5)
        .accumulation("retracting")
    )
    assert "the highest event time of each side to every bucket" in joined.explain()
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    for lefts, rights in BOTH_SIDES:
        model.step(
            left=[{"k": k, "t": t, "a": v} for k, t, v in lefts],
            right=[{"k": k, "t": t, "b": v} for k, t, v in rights],
        )
    job = joined.start(lowering="stateful")
    try:
        job.process_all_available()
        assert rows(job.results()) == model_rows(model.results)
        # One micro-batch a file, and no tick after the last: it fired [20, 30) and [30, 40) itself.
        assert job.metrics().batches == len(BOTH_SIDES)
    finally:
        job.stop()
    assert model.metrics["very_late_events"] == 1 and model.metrics["mildly_late_events"] == 2
    assert model.metrics["retractions"] == (1 if how == "left" else 0)
