"""Over-aggregation from the builder (SPEC 3.16): ``keyed.over_rows(n)`` / ``keyed.over_range(ms)``.

The plan's checks need no Spark. On Spark, a job's results are compared
after every step with the reference model's
(:class:`krishiv_py.model.over.OverModel`) fed the same rows and moved to
the same watermark: the retracting changelogs net to the same rows (the
operator corrects a row once per micro-batch, the model once per late row),
over several batchings of the same events, and a snapshot (``collect()``)
gives the model's answer at the end of input. Over a changelog (the latest
row per key, ``top_n(1, per="key")``), the model is fed the composed
model's changes of that top-N at their event times.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any, Literal

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import placeholder
from krishiv_py.model.compose import AggOf, ComposedModel, OverOf, Source, TopNOf, WindowOf
from krishiv_py.model.over import OverModel
from krishiv_py.model.reference import END_OF_TIME_MS, AggSpec
from krishiv_py.plan.windows import TumblingWindow

SCHEMA = "k string, t bigint, v bigint"
LAG_MS = 5
LATENESS_MS = 20

#: Rows of two keys in one order of arrival: ties in time, rows late within the lateness (which
#: correct the results after them) and one very late (t=1 once the watermark passed 30).
EVENTS: list[dict[str, Any]] = [
    {"k": "a", "t": 10, "v": 1},
    {"k": "b", "t": 12, "v": 100},
    {"k": "a", "t": 20, "v": 2},
    {"k": "a", "t": 20, "v": 4},
    {"k": "a", "t": 40, "v": 8},
    {"k": "a", "t": 15, "v": 16},  # late (W = 35): corrects t=20, 20
    {"k": "b", "t": 50, "v": 200},
    {"k": "a", "t": 1, "v": 32},  # very late (W = 45)
    {"k": "b", "t": 30, "v": 400},  # late: corrects nothing emitted after it but its own
    {"k": "a", "t": 60, "v": 64},
]

#: The same events in steps of different sizes (one micro-batch each).
BATCHINGS = {
    "one-by-one": [1] * len(EVENTS),
    "pairs": [2] * (len(EVENTS) // 2),
    "uneven": [5, 1, 4],
}


def _steps(sizes: list[int]) -> list[list[dict[str, Any]]]:
    out, at = [], 0
    for size in sizes:
        out.append(EVENTS[at : at + size])
        at += size
    assert at == len(EVENTS)
    return out


def _net(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> Counter[tuple[Any, ...]]:
    """The rows a retracting changelog leaves: emits less retractions."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[tuple(r[c] for c in columns)] += -1 if r.get("kind") == "retract" else 1
    assert all(n >= 0 for n in out.values()), out
    return +out


def _plan(stream: kp.Stream, frame: Literal["rows", "range"]) -> kp.Stream:
    keyed = stream.watermark("t", LAG_MS).key_by("k")
    over = keyed.over_rows(2) if frame == "rows" else keyed.over_range(10)
    return (
        over.allowed_lateness(LATENESS_MS)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("v")).alias("s"), kp.count(kp.col("*")).alias("n"))
    )


def _model(frame: Literal["rows", "range"]) -> OverModel:
    return OverModel(
        keys=("k",),
        frame=frame,
        preceding=2 if frame == "rows" else 10,
        aggs=(AggSpec(name="s", func="sum", column="v"), AggSpec(name="n", func="count", column=None)),
        allowed_lateness_ms=LATENESS_MS,
        accumulation="retracting",
    )


COLUMNS = ("k", "t", "v", "s", "n")


# --- the plan, without Spark ---------------------------------------------------------------------


def _bids() -> kp.Stream:
    return placeholder("seller bigint, price bigint, t bigint", "bids").watermark("t", 1_000)


def test_the_results_carry_the_rows_columns_then_the_aggregates_then_kind_when_retracting() -> None:
    keyed = _bids().key_by("seller")
    avg = kp.avg(kp.col("price")).alias("avg_price")
    assert keyed.over_rows(10).agg(avg).columns == ("seller", "price", "t", "avg_price")
    retracting = keyed.over_range("1m").accumulation("retracting").agg(avg)
    assert retracting.columns == ("seller", "price", "t", "avg_price", "kind")
    assert retracting.plan.preceding == 60_000  # type: ignore[union-attr]
    # Over a changelog the results carry kind whatever the accumulation.
    latest = _bids().top_n(1, by="t", per="key", keys=("seller",))
    assert latest.key_by("seller").over_rows(1).agg(avg).columns == (
        "seller",
        "price",
        "t",
        "avg_price",
        "kind",
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda k: k.over_rows(-1), "rows >= 0"),
        (lambda k: k.over_rows(1.5), "rows >= 0"),
        (lambda k: k.over_range(-5), "over_range"),
        (lambda k: k.over_rows(1, order_by="price"), "orders by the event time, 't'"),
        (lambda k: k.over_rows(1).agg(), "at least one aggregate"),
        (lambda k: k.over_rows(1).agg("price"), "takes aggregates"),
        (lambda k: k.over_range(10).agg(kp.first(kp.col("price"))), "peers"),
        (lambda k: k.over_rows(1).accumulation("discarding"), "nothing to discard"),
        (
            lambda k: k.over_rows(1).agg(kp.max(kp.col("price")).alias("price")),
            "duplicate column names: price",
        ),
    ],
)
def test_a_bad_over_aggregation_is_a_plan_error_naming_what_is_wrong(build: Any, message: str) -> None:
    with pytest.raises(kp.PlanError, match=message):
        build(_bids().key_by("seller"))


def test_an_over_aggregation_needs_event_time_and_what_follows_it_is_checked() -> None:
    plain = placeholder("seller bigint, price bigint, t bigint", "bids")
    with pytest.raises(kp.PlanError, match="watermark"):
        plain.key_by("seller").over_rows(1)
    over = _bids().key_by("seller").over_rows(1).agg(kp.sum(kp.col("price")).alias("s"))
    assert over.filter(kp.col("s") > 10).select("seller", "s").columns == ("seller", "s")
    # Its results carry their rows' event times: a window, an aggregation or a top-N per key, or
    # another over-aggregation may follow it.
    window = over.key_by("seller").tumbling_window(10_000).agg(kp.max(kp.col("s")).alias("m"))
    assert window.columns == ("seller", "window_start", "window_end", "m")
    assert over.key_by("price").agg(kp.count(kp.col("*"))).columns == ("price", "count", "kind")
    assert over.top_n(1, by="s", per="key", keys=("seller",)).columns[-1] == "kind"
    assert over.key_by("seller").over_rows(2).agg(kp.sum(kp.col("s")).alias("s2")).columns[-1] == "s2"
    # One that may correct its results (allowed lateness) needs a retracting window after it.
    late = (
        _bids().key_by("seller").over_rows(1).allowed_lateness(5_000).agg(kp.sum(kp.col("price")).alias("s"))
    )
    with pytest.raises(kp.PlanError, match="accumulation\\('retracting'\\)"):
        late.key_by("seller").tumbling_window(10_000).agg(kp.max(kp.col("s")))
    # Not yet: a join, a union or a watermark after it, or an operator after the one after it.
    other = _bids().key_by("seller")
    with pytest.raises(kp.PlanError, match=r"after an over-aggregation .* not supported yet"):
        over.key_by("seller").interval_join(other, between=(-1_000, 0))
    with pytest.raises(kp.PlanError, match=r"after an over-aggregation .* not supported yet"):
        over.union(over)
    with pytest.raises(kp.PlanError, match=r"after an over-aggregation .* not supported yet"):
        window.key_by("seller").tumbling_window(60_000).agg(kp.max(kp.col("m")))


def test_explain_says_it_runs_in_krishivs_operator_by_key_bucket() -> None:
    over = _bids().key_by("seller").over_rows(10).agg(kp.avg(kp.col("price")))
    recipe = over.lower()
    assert recipe.lowering == "stateful"
    assert "over-aggregation runs in krishiv's operator" in recipe.reason
    assert "over the row and 10 rows before it" in recipe.render()
    with pytest.raises(kp.PlanError, match="over-aggregation"):
        over.lower(lowering="native")


# --- on Spark ---------------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("frame", ["rows", "range"])
@pytest.mark.parametrize("batching", list(BATCHINGS))
def test_a_job_nets_to_the_models_rows_after_every_step_in_every_batching(
    session: kp.Session, frame: Literal["rows", "range"], batching: str
) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    job = _plan(stream, frame).start()
    model, seen, expected = _model(frame), 0, []
    top = None
    try:
        for rows in _steps(BATCHINGS[batching]):
            expected += model.send(rows)
            top = max([top or 0, *(r["t"] for r in rows)])
            expected += model.advance(top - LAG_MS)
            sender.send(rows)
            job.process_all_available()
            got = job.results().to_pylist()
            assert _net(got, COLUMNS) == _net(expected, COLUMNS), (batching, len(got) - seen)
            seen = len(got)
        sender.close()
        job.await_termination()
        expected += model.close()
        assert _net(job.results().to_pylist(), COLUMNS) == _net(expected, COLUMNS)
        assert job.metrics().very_late_events == model.very_late == 1
    finally:
        job.stop()


@pytest.mark.spark
def test_a_snapshot_gives_every_rows_result_as_at_the_end_of_input(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    plan = stream.watermark("t", LAG_MS).key_by("k").over_rows(1).agg(kp.sum(kp.col("v")).alias("s"))
    for rows in _steps(BATCHINGS["uneven"]):
        sender.send(rows)
    # One step with every row, then the end of input: nothing is late, so every row counts.
    model = OverModel(
        keys=("k",), frame="rows", preceding=1, aggs=(AggSpec(name="s", func="sum", column="v"),)
    )
    expected = model.send(EVENTS) + model.close()
    got = plan.collect().to_pylist()
    assert Counter(tuple(r[c] for c in ("k", "t", "v", "s")) for r in got) == Counter(
        tuple(r[c] for c in ("k", "t", "v", "s")) for r in expected
    )


#: Readings of sensors (k) at places (p): the latest reading per sensor is a changelog, averaged
#: per place over its last two sensors' readings.
READINGS: list[list[dict[str, Any]]] = [
    [{"k": "s1", "p": "x", "t": 10, "v": 1}, {"k": "s2", "p": "x", "t": 11, "v": 2}],
    [{"k": "s1", "p": "x", "t": 20, "v": 4}, {"k": "s3", "p": "x", "t": 21, "v": 8}],
    [{"k": "s2", "p": "x", "t": 30, "v": 16}, {"k": "s4", "p": "y", "t": 31, "v": 32}],
    [{"k": "s1", "p": "x", "t": 40, "v": 64}],
]


@pytest.mark.spark
def test_over_a_changelog_a_withdrawn_row_leaves_the_order_and_the_rows_after_it_are_corrected(
    session: kp.Session,
) -> None:
    stream, sender = session.memory_stream(
        "k string, p string, t bigint, v bigint", name=f"s_{uuid.uuid4().hex[:6]}"
    )
    latest = stream.watermark("t", 0).top_n(1, by="t", per="key", keys=("k",))
    plan = latest.key_by("p").over_rows(1).agg(kp.sum(kp.col("v")).alias("s"))
    assert plan.columns == ("k", "p", "t", "v", "s", "kind")
    source = Source("s", "t", ("k", "p", "t", "v"))
    top = TopNOf(source, n=1, by=("t",), keys=("k",))
    composed = ComposedModel(top)
    # The over-aggregation after a changelog keeps its rows while the job runs (a change may
    # withdraw a row of any age): the model's lateness is the end of time.
    over = OverModel(
        keys=("p",),
        frame="rows",
        preceding=1,
        aggs=(AggSpec(name="s", func="sum", column="v"),),
        event_time="__t",
        allowed_lateness_ms=END_OF_TIME_MS,
        accumulation="retracting",
    )
    columns = ("k", "p", "t", "v", "s")
    job = plan.start()
    expected: list[dict[str, Any]] = []
    fed = 0
    try:
        for rows in READINGS:
            composed.send(rows, source="s")
            changes = composed.changelog(top)
            expected += over.send([{**c.row, "__t": c.ts_ms, "kind": c.kind} for c in changes[fed:]])
            fed = len(changes)
            watermark = composed.watermark_ms
            assert watermark is not None
            expected += over.advance(watermark)
            sender.send(rows)
            job.process_all_available()
            assert _net(job.results().to_pylist(), columns) == _net(expected, columns)
    finally:
        job.stop()
    # Live at the end: s3@21, s2@30 and s1@40 at x (the readings before them withdrawn), s4@31 at
    # y; the watermark (40) has passed all but s1@40.
    final = _net(expected, columns)
    assert {(r[0], r[2], r[4]) for r in final} == {("s3", 21, 8), ("s2", 30, 24), ("s4", 31, 32)}


# --- SQL ---------------------------------------------------------------------------------------------

ROWS_SQL = (
    "SELECT k, t, v, SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s, "
    "COUNT(*) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS n FROM {name}"
)
RANGE_SQL = (
    "SELECT k, t, v, SUM(v) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN INTERVAL '10' MILLISECOND "
    "PRECEDING AND CURRENT ROW) AS s, COUNT(*) OVER (PARTITION BY k ORDER BY t RANGE BETWEEN INTERVAL "
    "'10' MILLISECOND PRECEDING AND CURRENT ROW) AS n FROM {name}"
)


def _sql(session: kp.Session, text: str) -> kp.Stream:
    stream = session.sql(text)
    assert stream is not None
    return stream


@pytest.mark.parametrize("frame", ["rows", "range"])
def test_sqls_over_is_the_builders_over_aggregation(
    session: kp.Session, frame: Literal["rows", "range"]
) -> None:
    name = f"s_{uuid.uuid4().hex[:6]}"
    stream, _ = session.memory_stream(SCHEMA, name=name)
    settings = (
        f"SET watermark.lag = INTERVAL '{LAG_MS}' MILLISECOND; "
        f"SET window.allowed_lateness = INTERVAL '{LATENESS_MS}' MILLISECOND; "
        "SET window.accumulation = 'retracting'; "
    )
    query = _sql(session, settings + (ROWS_SQL if frame == "rows" else RANGE_SQL).format(name=name))
    assert query.plan == _plan(stream, frame).plan
    assert query.columns == ("k", "t", "v", "s", "n", "kind")
    # A SELECT list of its own runs after it; kind stays.
    picked = _sql(
        session,
        f"SELECT k, AVG(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS a "
        f"FROM {name}",
    )
    assert (
        picked.plan
        == stream.watermark("t", 0)
        .key_by("k")
        .over_rows(1)
        .agg(kp.avg(kp.col("v")).alias("a"))
        .select("k", "a")
        .plan
    )


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ("SUM(v) OVER (PARTITION BY k ORDER BY t) AS s", "give the OVER window its frame"),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS s",
            "UNBOUNDED PRECEDING is not supported yet",
        ),
        ("SUM(v) OVER (ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s", "needs PARTITION BY"),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t DESC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s",
            "ascending",
        ),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
            "name each aggregate",
        ),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS s",
            "ends at CURRENT ROW",
        ),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s, "
            "MAX(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS m",
            "share one window",
        ),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) + 1 AS s",
            "stands alone",
        ),
        (
            "SUM(v) OVER (PARTITION BY k ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s",
            "event time",
        ),
    ],
)
def test_an_over_clause_sql_cannot_run_is_a_plan_error_saying_why(
    session: kp.Session, over: str, message: str
) -> None:
    name = f"s_{uuid.uuid4().hex[:6]}"
    stream, _ = session.memory_stream(SCHEMA, name=name)
    stream.watermark("t", 0).register(f"{name}_t")
    with pytest.raises(kp.PlanError, match=message):
        session.sql(f"SELECT k, {over} FROM {name}_t")


@pytest.mark.spark
@pytest.mark.parametrize("frame", ["rows", "range"])
def test_a_sql_over_aggregation_gives_duckdbs_answer_at_the_end_of_input(
    session: kp.Session, frame: Literal["rows", "range"]
) -> None:
    import duckdb

    name = f"s_{uuid.uuid4().hex[:6]}"
    _, sender = session.memory_stream(SCHEMA, name=name)
    # Distinct times per key: DuckDB breaks ties by no arrival order.
    rows = [{"k": "ab"[i % 2], "t": (i * 7) % 50 + 100 * (i % 2), "v": i * i} for i in range(30)]
    rows = list({(r["k"], r["t"]): r for r in rows}.values())
    sender.send(rows)
    sender.close()
    text = (ROWS_SQL if frame == "rows" else RANGE_SQL).format(name=name)
    got = _sql(session, text).collect().to_pylist()
    con = duckdb.connect()
    con.execute("CREATE TABLE s (k VARCHAR, t BIGINT, v BIGINT)")
    con.executemany("INSERT INTO s VALUES (?, ?, ?)", [(r["k"], r["t"], r["v"]) for r in rows])
    template = ROWS_SQL if frame == "rows" else RANGE_SQL
    reference = template.format(name="s").replace("INTERVAL '10' MILLISECOND", "10")
    expected = con.execute(reference).fetchall()
    assert sorted((r["k"], r["t"], r["v"], r["s"], r["n"]) for r in got) == sorted(expected)
    assert len(got) == len(rows)


def test_sql_over_a_joins_rows_points_to_the_builder(session: kp.Session) -> None:
    name = f"s_{uuid.uuid4().hex[:6]}"
    session.memory_stream(SCHEMA, name=name)
    session.memory_stream(SCHEMA, name=f"{name}_r")
    with pytest.raises(kp.PlanError, match="write it with the builder"):
        session.sql(
            f"SELECT l.k, SUM(l.v) OVER (PARTITION BY l.k ORDER BY l.t ROWS BETWEEN 1 PRECEDING AND "
            f"CURRENT ROW) AS s FROM {name} l JOIN {name}_r r ON l.k = r.k AND l.t BETWEEN r.t AND r.t + "
            "INTERVAL '1' SECOND"
        )


#: Clicks (k, g, t, v) and views (k, t, w): each click joined with the views of its key up to 10 ms
#: before it, then each joined row with the rows before it per key (k: in the join's call) or per
#: group (g: a stage of its own).
CLICKS: list[list[dict[str, Any]]] = [
    [{"k": "a", "g": "x", "t": 10, "v": 1}, {"k": "b", "g": "x", "t": 12, "v": 2}],
    [{"k": "a", "g": "y", "t": 20, "v": 4}, {"k": "a", "g": "x", "t": 25, "v": 8}],
    [{"k": "b", "g": "y", "t": 40, "v": 16}],
    [{"k": "a", "g": "x", "t": 60, "v": 32}],
]
VIEWS: list[list[dict[str, Any]]] = [
    [{"k": "a", "t": 5, "w": 100}, {"k": "b", "t": 11, "w": 200}],
    [{"k": "a", "t": 18, "w": 300}],
    [{"k": "b", "t": 35, "w": 400}, {"k": "a", "t": 30, "w": 500}],
    [{"k": "a", "t": 58, "w": 600}],
]


@pytest.mark.spark
@pytest.mark.parametrize("key", ["k", "g"])
def test_over_a_joins_rows_orders_them_by_their_event_time_in_the_joins_call_or_a_stage(
    session: kp.Session, key: str
) -> None:
    from krishiv_py.model.compose import JoinOf

    suffix = uuid.uuid4().hex[:6]
    clicks, click_sender = session.memory_stream("k string, g string, t bigint, v bigint", name=f"c_{suffix}")
    views, view_sender = session.memory_stream("k string, t bigint, w bigint", name=f"v_{suffix}")
    joined = (
        clicks.watermark("t", 0)
        .key_by("k")
        .interval_join(views.watermark("t", 0).key_by("k"), between=(-10, 0))
    )
    plan = joined.key_by(key).over_rows(1).agg(kp.sum(kp.col("w")).alias("s"))
    assert ("keyed by other columns than the join" in plan.lower().reason) == (key == "g")
    left, right = Source("c", "t", ("k", "g", "t", "v")), Source("v", "t", ("k", "t", "w"))
    join = JoinOf(left, right, keys=("k",), between=(-10, 0))
    composed = ComposedModel(join)
    over = OverModel(
        keys=(key,),
        frame="rows",
        preceding=1,
        aggs=(AggSpec(name="s", func="sum", column="w"),),
        event_time="__t",
    )
    columns = ("k", "g", "t", "v", "t_right", "w", "s")
    job = plan.start()
    expected: list[dict[str, Any]] = []
    fed = 0
    try:
        for c_rows, v_rows in zip(CLICKS, VIEWS, strict=True):
            composed.send(c_rows, source="c")
            composed.send(v_rows, source="v")
            changes = composed.changelog(join)
            expected += over.send([{**ch.row, "__t": ch.ts_ms} for ch in changes[fed:]])
            fed = len(changes)
            watermark = composed.watermark_ms
            assert watermark is not None
            expected += over.advance(watermark)
            click_sender.send(c_rows)
            view_sender.send(v_rows)
            job.process_all_available()
            assert _net(job.results().to_pylist(), columns) == _net(expected, columns)
    finally:
        job.stop()
    assert len(_net(expected, columns)) >= 3


# --- krishiv_py.testing: the model of a plan, every lowering against it -----------------------------


@pytest.mark.spark
@pytest.mark.parametrize("accumulation", ["accumulating", "retracting"])
def test_the_testing_helpers_run_an_over_aggregation_on_the_model_streaming_and_bounded(
    session: kp.Session, accumulation: Literal["accumulating", "retracting"]
) -> None:
    """Timestamps for event time, two keys, late rows: each micro-batch's corrections are its net
    change in the model too (:meth:`OverModel.step`), so the changelogs agree step by step."""
    import datetime as dt

    from krishiv_py.testing import Close, Send, Step, assert_lowerings_agree, run_reference

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def at(ms: int) -> dt.datetime:
        return t0 + dt.timedelta(milliseconds=ms)

    def pipeline(s: kp.Stream) -> kp.Stream:
        over = s.watermark("ts", LAG_MS).key_by("k").over_range(10).allowed_lateness(LATENESS_MS)
        return over.accumulation(accumulation).agg(
            kp.max(kp.col("v")).alias("m"), kp.avg(kp.col("v")).alias("a")
        )

    rows = [{"k": r["k"], "ts": at(r["t"]), "v": r["v"]} for r in EVENTS]
    steps: list[Step] = [Send(rows[:5]), Send(rows[5:6]), Send(rows[6:9]), Send(rows[9:]), Close()]
    schema = "k string, ts timestamp, v bigint"
    assert_lowerings_agree(session, schema, pipeline, steps)
    # The late row at 15 corrected the rows after it within 10 ms (20, 20): in the model as well.
    final = run_reference(schema, pipeline, steps)[-1]
    assert len(final) > len(EVENTS) - 1


@pytest.mark.spark
def test_every_aggregate_over_two_keys_with_nulls_agrees_with_the_model(session: kp.Session) -> None:
    from krishiv_py.testing import Close, Send, Step, assert_lowerings_agree, run_reference_late_events

    def pipeline(s: kp.Stream) -> kp.Stream:
        return (
            s.watermark("t", 0)
            .key_by("k", "j")
            .over_rows(2)
            .allowed_lateness(100)
            .agg(
                kp.count(kp.col("*")).alias("n"),
                kp.count(kp.col("v")).alias("nv"),
                kp.sum(kp.col("x")).alias("sx"),
                kp.min(kp.col("s")).alias("lo"),
                kp.max(kp.col("v")).alias("hi"),
                kp.count_distinct(kp.col("v")).alias("d"),
                kp.first(kp.col("s")).alias("f"),
                kp.last(kp.col("v")).alias("l"),
            )
        )

    def row(k: str, j: int, t: int | None, v: int | None, x: float, s: str | None) -> dict[str, Any]:
        return {"k": k, "j": j, "t": t, "v": v, "x": x, "s": s}

    steps: list[Step] = [
        Send([row("a", 1, 10, 5, 0.5, "p"), row("a", 2, 11, None, 1.5, "q"), row("a", 1, 12, 5, -0.0, None)]),
        Send([row("a", 1, 30, 7, 2.0, "b"), row("a", 1, None, 1, 1.0, "z"), row("b", 1, 31, 2, 3.0, "c")]),
        Send([row("a", 1, 11, 9, 4.0, "a")]),  # late: between 10 and 12
        Send([row("a", 1, 40, None, 0.25, "d")]),
        Close(),
    ]
    schema = "k string, j int, t bigint, v bigint, x double, s string"
    assert_lowerings_agree(session, schema, pipeline, steps)
    late = run_reference_late_events(schema, pipeline, steps)[-1]
    assert [e["classification"] for e in late] == ["invalid"]


@pytest.mark.spark
def test_over_an_aggregations_changes_keyed_otherwise_runs_as_a_stage(session: kp.Session) -> None:
    """Each user's running count, and per region each change with the one before it: a user's new
    count retracts the old one, which leaves the region's order."""
    stream, sender = session.memory_stream(
        "user string, region string, t bigint", name=f"s_{uuid.uuid4().hex[:6]}"
    )
    counts = stream.watermark("t", 0).key_by("user", "region").agg(kp.count(kp.col("*")).alias("n"))
    plan = counts.key_by("region").over_rows(1).agg(kp.sum(kp.col("n")).alias("s"))
    assert plan.columns == ("user", "region", "n", "s", "kind")
    assert "keyed by other columns" in plan.lower().reason
    job = plan.start()
    try:
        sender.send([{"user": "u1", "region": "x", "t": 10}, {"user": "u2", "region": "x", "t": 20}])
        job.process_all_available()
        sender.send([{"user": "u1", "region": "x", "t": 30}, {"user": "u3", "region": "y", "t": 40}])
        job.process_all_available()
        sender.close()
        job.await_termination()
        live = _net(job.results().to_pylist(), ("user", "region", "n", "s"))
    finally:
        job.stop()
    # Live changes: u2's count (1, at 20), u1's second (2, at 30), u3's (1, at 40); x's order is
    # u2 then u1, so u1's frame is u2's 1 and its own 2.
    assert live == Counter({("u2", "x", 1, 1): 1, ("u1", "x", 2, 3): 1, ("u3", "y", 1, 1): 1})


def _after_over(stream: kp.Stream, accumulation: Literal["accumulating", "retracting"]) -> kp.Stream:
    keyed = stream.watermark("t", LAG_MS).key_by("k")
    over = keyed.over_rows(1).allowed_lateness(LATENESS_MS).accumulation(accumulation)
    return over.agg(kp.sum(kp.col("v")).alias("s"), kp.count(kp.col("*")).alias("n"))


def _composed_over() -> OverOf:
    source = Source("s", "t", ("k", "t", "v"), lag_ms=LAG_MS)
    aggs = [AggSpec(name="s", func="sum", column="v"), AggSpec(name="n", func="count", column=None)]
    return OverOf(
        source, keys=["k"], frame="rows", preceding=1, aggregates=aggs, allowed_lateness_ms=LATENESS_MS
    )


def _in_ms(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's rows with their timestamps in epoch milliseconds, as the model gives them."""
    return [
        {k: int(v.timestamp() * 1000) if isinstance(v, datetime) else v for k, v in r.items()} for r in rows
    ]


def _run_against(
    job: Any, sender: Any, model: ComposedModel, batching: str, columns: tuple[str, ...]
) -> None:
    """Each step into the job and the composed model; their changelogs net to the same rows after
    every step and at the end."""
    for rows in _steps(BATCHINGS[batching]):
        model.send(rows)
        sender.send(rows)
        job.process_all_available()
        assert _net(_in_ms(job.results().to_pylist()), columns) == _net(model.results, columns), batching
    sender.close()
    job.await_termination()
    model.close()
    assert _net(_in_ms(job.results().to_pylist()), columns) == _net(model.results, columns)


@pytest.mark.spark
@pytest.mark.parametrize("batching", list(BATCHINGS))
def test_a_window_after_an_over_aggregation_sums_its_results_and_takes_their_corrections(
    session: kp.Session, batching: str
) -> None:
    """SPEC 3.13 after 3.16: each row's result reaches the window at the row's event time, in the
    micro-batch whose watermark passes the row; a late row's corrections of the results after it
    (within the over-aggregation's lateness) re-fire the windows they are in."""
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    over = _after_over(stream, "accumulating")  # (it runs retracting under the window)
    plan = (
        over.key_by("k")
        .tumbling_window(20)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("s")).alias("total"), kp.max(kp.col("n")).alias("most"))
    )
    reason = plan.lower().reason
    assert "over-aggregation whose results another operator takes" in reason
    assert "runs in the same call" in reason
    window = WindowOf(
        _composed_over(),
        TumblingWindow(size_ms=20),
        keys=["k"],
        aggregates=[
            AggSpec(name="total", func="sum", column="s"),
            AggSpec(name="most", func="max", column="n"),
        ],
    )
    job = plan.start()
    try:
        _run_against(job, sender, ComposedModel(window), batching, plan.columns[:-1])
    finally:
        job.stop()


@pytest.mark.spark
def test_an_aggregation_after_an_over_aggregation_keyed_otherwise_runs_as_a_stage(
    session: kp.Session,
) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    plan = _after_over(stream, "retracting").key_by("n").agg(kp.sum(kp.col("s")).alias("total"))
    assert plan.columns == ("n", "total", "kind")
    assert "keyed by other columns" in plan.lower().reason
    per_count = AggOf(
        _composed_over(), keys=["n"], aggregates=[AggSpec(name="total", func="sum", column="s")]
    )
    job = plan.start()
    try:
        _run_against(job, sender, ComposedModel(per_count), "uneven", ("n", "total"))
    finally:
        job.stop()


@pytest.mark.spark
def test_an_over_aggregation_and_a_top_n_after_an_over_aggregation_agree_with_the_composed_model(
    session: kp.Session,
) -> None:
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    over = _after_over(stream, "accumulating")
    twice = over.key_by("k").over_rows(1).agg(kp.max(kp.col("s")).alias("m"))
    assert twice.columns == ("k", "t", "v", "s", "n", "m", "kind")
    model = ComposedModel(
        OverOf(
            _composed_over(),
            keys=["k"],
            frame="rows",
            preceding=1,
            aggregates=[AggSpec(name="m", func="max", column="s")],
        )
    )
    job = twice.start()
    try:
        _run_against(job, sender, model, "pairs", ("k", "t", "v", "s", "n", "m"))
    finally:
        job.stop()
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    top = _after_over(stream, "retracting").top_n(1, by="s", per="key", keys=("k",))
    model = ComposedModel(TopNOf(_composed_over(), n=1, by=["s"], keys=["k"]))
    job = top.start()
    try:
        _run_against(job, sender, model, "uneven", ("k", "t", "v", "s", "n"))
    finally:
        job.stop()


@pytest.mark.spark
def test_a_late_event_handler_gets_the_very_late_and_invalid_rows_the_model_drops(
    session: kp.Session,
) -> None:
    from krishiv_py.testing import Send, Step, run_reference_late_events

    def pipeline(s: kp.Stream, handler: kp.LateEventHandler | None = None) -> kp.Stream:
        over = s.watermark("t", LAG_MS).key_by("k").over_rows(1).allowed_lateness(LATENESS_MS)
        if handler is not None:
            over = over.with_late_event_handler(handler)
        return over.agg(kp.sum(kp.col("v")).alias("s"))

    steps = [*_steps(BATCHINGS["uneven"]), [{"k": "a", "t": None, "v": 0}]]
    model_steps: list[Step] = [Send(rows) for rows in steps]
    expected = run_reference_late_events(SCHEMA, pipeline, model_steps)[-1]
    assert sorted(str(e["classification"]) for e in expected) == ["invalid", "very_late"]
    stream, sender = session.memory_stream(SCHEMA, name=f"s_{uuid.uuid4().hex[:6]}")
    handler = kp.SideOutputLateEventHandler()
    job = pipeline(stream, handler).start()
    try:
        for rows in steps:
            sender.send(rows)
            job.process_all_available()
        got = job.late_events().to_pylist()
    finally:
        job.stop()
    key = ("k", "t", "v", "classification", "watermark_ms")
    assert Counter(tuple(r[c] for c in key) for r in got) == Counter(
        tuple(e[c] for c in key) for e in expected
    )
    with pytest.raises(kp.PlanError, match="takes a source's rows"):
        latest = stream.watermark("t", 0).top_n(1, by="t", per="key", keys=("k",))
        latest.key_by("k").over_rows(1).with_late_event_handler(handler).agg(kp.sum(kp.col("v")))


def test_every_builder_refuses_a_late_event_handler_without_handle_and_an_agg_of_no_aggregate() -> None:
    keyed = _bids().key_by("seller")
    other = placeholder("seller bigint, price bigint, t bigint", "other").watermark("t", 0).key_by("seller")
    takers: list[Any] = [
        keyed.over_rows(1),
        keyed.tumbling_window(1_000),
        keyed.interval_join(other, between=(-5, 0)),
    ]
    for taker in takers:
        with pytest.raises(kp.PlanError, match=r"handle\(table\) method, got int"):
            taker.with_late_event_handler(3)
    for builder in (keyed, keyed.tumbling_window(1_000), keyed.over_rows(1)):
        with pytest.raises(kp.PlanError, match=r"agg\(\) takes aggregates such as .* got 'price'"):
            builder.agg("price")  # type: ignore[arg-type]
