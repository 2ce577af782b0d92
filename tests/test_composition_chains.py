"""Chains of operators on Spark (SPEC 3.13), each step checked against the composition model.

Filters between a join and the operator after it run in krishiv's operator
(in Arrow); an aggregation over another aggregation takes its changes
(retractions included), in the same call when keyed alike, else as a stage
of its own; Nexmark q9 and q4 are these shapes.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import pyarrow as pa
import pytest
from batch_files import write_batches

import krishiv_py as kp
from krishiv_py.errors import PlanError
from krishiv_py.model.compose import (
    AggOf,
    ComposedModel,
    FilterOf,
    JoinOf,
    SelectOf,
    Source,
    TopNOf,
    UnionOf,
    WindowOf,
)
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import TumblingWindow

pytestmark = pytest.mark.spark

CLICKS = "user string, t bigint, click string"
VIEWS = "user string, t bigint, ad string"
STEPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("views", [{"user": "u", "t": 1_000, "ad": "a1"}, {"user": "v", "t": 2_000, "ad": "a2"}]),
    ("clicks", [{"user": "u", "t": 3_000, "click": "c1"}, {"user": "v", "t": 4_000, "click": "c2"}]),
    ("views", [{"user": "u", "t": 12_000, "ad": "a1"}, {"user": "w", "t": 12_500, "ad": "a3"}]),
    ("clicks", [{"user": "u", "t": 14_000, "click": "c3"}, {"user": "w", "t": 13_000, "click": "c6"}]),
    ("views", [{"user": "v", "t": 21_000, "ad": "a1"}, {"user": "u", "t": 2_500, "ad": "a2"}]),  # late
    ("clicks", [{"user": "v", "t": 25_000, "click": "c4"}, {"user": "u", "t": 31_000, "click": "c5"}]),
    ("views", [{"user": "u", "t": 33_000, "ad": "a2"}, {"user": "w", "t": 30_000, "ad": "a3"}]),
]


def _clicks_and_views(session: kp.Session) -> tuple[tuple[Any, kp.Sender], tuple[Any, kp.Sender]]:
    """A clicks and a views memory stream of names of their own, each with its sender."""
    tag = uuid.uuid4().hex[:6]
    clicks = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views = session.memory_stream(VIEWS, name=f"views_{tag}")
    return clicks, views


def _streams(session: kp.Session) -> tuple[Any, Any, kp.Sender, kp.Sender]:
    """Clicks, the clicks joined with the views of their user in the 5 s before, and both senders."""
    (clicks, to_clicks), (views, to_views) = _clicks_and_views(session)
    left, right = (s.watermark("t", 0).key_by("user") for s in (clicks, views))
    return (
        clicks,
        left.interval_join(right, between=(-5_000, 0)).allowed_lateness(20_000),
        to_clicks,
        to_views,
    )


def _model_join() -> JoinOf:
    clicks = Source("clicks", "t", ("user", "t", "click"))
    views = Source("views", "t", ("user", "t", "ad"))
    return JoinOf(clicks, views, keys=("user",), between=(-5_000, 0), allowed_lateness_ms=20_000)


def _run(session: kp.Session, pipeline: Any, model: ComposedModel, senders: dict[str, kp.Sender]) -> int:
    """Send the steps; after each, the job's new rows equal the model's (as multisets). Rows seen."""
    names = list(pipeline.columns)
    job = pipeline.start()
    seen = 0
    try:
        for side, rows in STEPS:
            if side not in senders:
                continue
            expected = model.send(rows, source=side)
            senders[side].send(rows)
            job.process_all_available()
            got = job.results().to_pylist()
            assert Counter(_key(r, names) for r in got[seen:]) == Counter(_key(r, names) for r in expected), (
                side
            )
            seen = len(got)
    finally:
        job.stop()
    return seen


def _closed(
    job: Any, senders: tuple[kp.Sender, ...], model: ComposedModel, names: list[str], expected: list[Any]
) -> list[tuple[Any, ...]]:
    """Close every source (the model too, its rows added to ``expected``); the job's rows once it ends."""
    for sender in senders:
        sender.close()
    expected += [_key(r, names) for r in model.close()]
    assert job.await_termination(timeout_s=120)
    return [_key(r, names) for r in job.results().to_pylist()]


def _pairs_per(joined: Any, key: str) -> Any:
    """The joined pairs counted per ``key`` and 10 s, retracting (the join's corrections flow on)."""
    windows = joined.key_by(key).tumbling_window(10_000).accumulation("retracting")
    return windows.agg(kp.count(kp.col("*")).alias("pairs"))


def _key(row: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    def plain(v: Any) -> Any:
        if isinstance(v, datetime):
            return int(v.timestamp() * 1000)
        return round(v, 9) if isinstance(v, float) else v

    return tuple(plain(row.get(c)) for c in names)


def test_nexmark_q9_shape_a_filter_between_a_join_and_its_top_n_runs_in_the_operator(
    session: kp.Session,
) -> None:
    _, joined, clicks, views = _streams(session)
    best = joined.filter(kp.col("ad") != "a3").top_n(1, by="t_right", per="key", keys=("user",))
    assert "same operator call as the join" in best.explain()
    model = ComposedModel(
        TopNOf(FilterOf(_model_join(), lambda r: r["ad"] != "a3"), n=1, by=("t_right",), keys=("user",))
    )
    assert _run(session, best, model, {"clicks": clicks, "views": views}) > 0


def test_nexmark_q4_shape_an_aggregation_over_an_aggregation_keyed_otherwise_takes_its_retractions(
    session: kp.Session,
) -> None:
    _, joined, clicks, views = _streams(session)
    per_pair = (
        joined.filter(kp.col("ad") != "a3").key_by("user", "ad").agg(kp.count(kp.col("*")).alias("pairs"))
    )
    per_ad = per_pair.key_by("ad").agg(
        kp.avg(kp.col("pairs")).alias("mean"),
        kp.max(kp.col("pairs")).alias("most"),
        kp.count(kp.col("*")).alias("users"),
    )
    plan = per_ad.explain()
    assert "same operator call as the join" in plan and "cross the cluster once more" in plan
    first = AggOf(
        FilterOf(_model_join(), lambda r: r["ad"] != "a3"),
        keys=("user", "ad"),
        aggregates=[ModelAgg(name="pairs", func="count", column=None)],
    )
    second = AggOf(
        first,
        keys=("ad",),
        aggregates=[
            ModelAgg(name="mean", func="avg", column="pairs"),
            ModelAgg(name="most", func="max", column="pairs"),
            ModelAgg(name="users", func="count", column=None),
        ],
    )
    assert _run(session, per_ad, ComposedModel(second), {"clicks": clicks, "views": views}) > 0


def test_three_operators_each_keyed_otherwise_move_their_rows_across_the_cluster_twice(
    session: kp.Session,
) -> None:
    """A join by user, a window per ad after it (a stage), then per window how many ads had how
    many pairs (a stage after the stage): streamed step by step and as one batch, equal the model."""
    _, joined, clicks, views = _streams(session)
    per_ad = _pairs_per(joined, "ad")
    spread = per_ad.key_by("window_start", "pairs").agg(kp.count(kp.col("*")).alias("ads"))
    plan = spread.explain()
    assert plan.count(".groupBy('__kp_route').applyInArrow(") == 2, plan  # two stages, each a move
    assert "a stage after the stage" in plan
    windows = WindowOf(
        _model_join(),
        TumblingWindow(size_ms=10_000),
        keys=("ad",),
        aggregates=[ModelAgg(name="pairs", func="count", column=None)],
    )
    ads = [ModelAgg(name="ads", func="count", column=None)]
    model = ComposedModel(AggOf(windows, keys=("window_start", "pairs"), aggregates=ads))
    senders = {"clicks": clicks, "views": views}
    names = [c for c in spread.columns if c != "kind"]
    want: Counter[tuple[Any, ...]] = Counter()
    got: Counter[tuple[Any, ...]] = Counter()
    job = spread.start()
    try:
        seen = 0
        for side, rows in STEPS:
            _net(want, model.send(rows, source=side), names)
            senders[side].send(rows)
            job.process_all_available()
            rows_now = job.results().to_pylist()
            _net(got, rows_now[seen:], names)
            seen = len(rows_now)
            assert +got == +want, side
        for sender in senders.values():
            sender.close()
        _net(want, model.close(), names)
        assert job.await_termination(timeout_s=120)
        got = Counter()
        _net(got, job.results().to_pylist(), names)
    finally:
        job.stop()
    assert +got == +want and len(+want) > 1
    bounded: Counter[tuple[Any, ...]] = Counter()
    _net(bounded, spread.collect().to_pylist(), names)  # the same stages in one batch job
    assert +bounded == +want


def test_a_histogram_of_running_counts_an_aggregation_over_an_aggregation_of_a_source(
    session: kp.Session,
) -> None:
    clicks, _, click_sender, view_sender = _streams(session)
    per_user = clicks.watermark("t", 0).key_by("user").agg(kp.count(kp.col("*")).alias("n"))
    histogram = per_user.key_by("n").agg(kp.count(kp.col("*")).alias("users"))
    assert "cross the cluster once more" in histogram.explain()
    source = Source("clicks", "t", ("user", "t", "click"))
    first = AggOf(source, keys=("user",), aggregates=[ModelAgg(name="n", func="count", column=None)])
    second = AggOf(first, keys=("n",), aggregates=[ModelAgg(name="users", func="count", column=None)])
    assert _run(session, histogram, ComposedModel(second), {"clicks": click_sender}) > 0
    view_sender.close()
    # A projection between the two operators keeps the changes' event time and kind.
    selected = per_user.select("n", "user", "kind").key_by("n").agg(kp.count(kp.col("*")).alias("users"))
    assert selected.collect().to_pylist() == histogram.collect().to_pylist()


def test_a_join_then_a_retracting_window_then_an_aggregation_keyed_otherwise(session: kp.Session) -> None:
    _, joined, clicks, views = _streams(session)
    per_user = _pairs_per(joined, "user")
    per_window = per_user.key_by("window_start").agg(
        kp.sum(kp.col("pairs")).alias("total"), kp.max(kp.col("pairs")).alias("most")
    )
    plan = per_window.explain()
    assert "same operator call as the join" in plan and "cross the cluster once more" in plan
    windows = WindowOf(
        _model_join(),
        TumblingWindow(size_ms=10_000),
        keys=("user",),
        aggregates=[ModelAgg(name="pairs", func="count", column=None)],
    )
    second = AggOf(
        windows,
        keys=("window_start",),
        aggregates=[
            ModelAgg(name="total", func="sum", column="pairs"),
            ModelAgg(name="most", func="max", column="pairs"),
        ],
    )
    assert _run(session, per_window, ComposedModel(second), {"clicks": clicks, "views": views}) > 0
    # A window that fires again without retracting runs retracting under the aggregation.
    plain = joined.key_by("user").tumbling_window(10_000).agg(kp.count(kp.col("*")).alias("pairs"))
    recipe = plain.key_by("window_start").agg(kp.count(kp.col("*"))).lower()
    assert "accumulation=retracting" in recipe.render().split("krishiv window operator")[1]
    assert "runs retracting there" in recipe.reason


ADS = "ad string, at bigint, campaign string"
AD_STEPS: list[list[dict[str, Any]]] = [
    [{"ad": "a1", "at": 500, "campaign": "spring"}, {"ad": "a2", "at": 1_500, "campaign": "summer"}],
    [{"ad": "a3", "at": 12_000, "campaign": "spring"}, {"ad": "a1", "at": 20_000, "campaign": "autumn"}],
    [{"ad": "a2", "at": 30_000, "campaign": "winter"}],
]


def test_a_join_of_a_join_three_streams_equals_the_model(session: kp.Session) -> None:
    """Clicks joined with views by user, then with the ads they saw by ad: a join stage after the join."""
    _, joined, clicks, views = _streams(session)
    ads, to_ads = session.memory_stream(ADS, name=f"ads_{uuid.uuid4().hex[:6]}")
    three = (
        joined.key_by("ad")
        .interval_join(ads.watermark("at", 0).key_by("ad"), between=(-15_000, 15_000))
        .allowed_lateness(40_000)
    )
    assert "the second join is a stage after the first join" in three.explain()
    first = _model_join()
    model = ComposedModel(
        JoinOf(
            first,
            Source("ads", "at", ("ad", "at", "campaign")),
            keys=("ad",),
            between=(-15_000, 15_000),
            allowed_lateness_ms=60_000,
        )
    )
    names = list(three.columns)
    expected: list[tuple[Any, ...]] = []
    job = three.start()
    try:
        for i, (side, rows) in enumerate(STEPS):
            expected += [_key(r, names) for r in model.send(rows, source=side)]
            (clicks if side == "clicks" else views).send(rows)
            if i < len(AD_STEPS):
                expected += [_key(r, names) for r in model.send(AD_STEPS[i], source="ads")]
                to_ads.send(AD_STEPS[i])
            job.process_all_available()
        got = _closed(job, (clicks, views, to_ads), model, names, expected)
    finally:
        job.stop()
    assert got and Counter(got) == Counter(expected)
    bounded = [_key(r, names) for r in three.collect().to_pylist()]  # the same operator, as one batch job
    assert Counter(bounded) == Counter(expected)
    # An aggregation keyed by the second join's key runs in the join stage's call.
    per_ad = three.key_by("ad").agg(kp.count(kp.col("*")).alias("rows"))
    assert "same operator call as the join" in per_ad.explain()
    counts: Counter[Any] = Counter()
    for row in per_ad.collect().to_pylist():
        counts[(row["ad"], row["rows"])] += 1 if row["kind"] == "emit" else -1
    wanted = Counter(r[names.index("ad")] for r in expected)
    assert +counts == Counter({(ad, n): 1 for ad, n in wanted.items()})


def _windows_joined_model() -> ComposedModel:
    return ComposedModel(_windows_joined())


def _windows_joined() -> JoinOf:
    return JoinOf(
        WindowOf(
            Source("clicks", "t", ("user", "t", "click")),
            TumblingWindow(size_ms=10_000),
            keys=("user",),
            aggregates=[ModelAgg(name="n", func="count", column=None)],
        ),
        Source("views", "t", ("user", "t", "ad")),
        keys=("user",),
        between=(-8_000, 0),
        how="left",
    )


def test_each_windows_clicks_left_joined_with_the_views_before_it_equals_the_model(
    session: kp.Session,
) -> None:
    """A join of a window's results: clicks counted per user and 10 s, each count with its user's
    views of the 8 s before the window's end (a window with none padded)."""
    tag = uuid.uuid4().hex[:6]
    clicks, to_clicks = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views, to_views = session.memory_stream(VIEWS, name=f"views_{tag}")
    counts = (
        clicks.watermark("t", 0).key_by("user").tumbling_window(10_000).agg(kp.count(kp.col("*")).alias("n"))
    )
    joined = counts.key_by("user").interval_join(
        views.watermark("t", 0).key_by("user"), between=(-8_000, 0), how="left"
    )
    assert "the join is a stage after the window's operator" in joined.explain()
    model = _windows_joined_model()
    names = list(joined.columns)
    expected: list[tuple[Any, ...]] = []
    job = joined.start()
    try:
        for side, rows in STEPS:
            expected += [_key(r, names) for r in model.send(rows, source=side)]
            (to_clicks if side == "clicks" else to_views).send(rows)
            job.process_all_available()
            got = [_key(r, names) for r in job.results().to_pylist()]
            # The window fires at the query's watermark (the least of both sources', SPEC 3.4), the
            # model's at its own source's: a row may come a step later, none other than the model's.
            assert not Counter(got) - Counter(expected), side
        got = _closed(job, (to_clicks, to_views), model, names, expected)
    finally:
        job.stop()
    assert any(r[names.index("ad")] is None for r in expected) and any(r[names.index("ad")] for r in expected)
    assert Counter(got) == Counter(expected)
    # The same operators as one batch job: every row in one step (the late view is on time there).
    whole = _windows_joined_model()
    for side in ("clicks", "views"):
        whole.send([r for s, rows in STEPS if s == side for r in rows], source=side)
    once = [_key(r, names) for r in [*whole.results, *whole.close()]]
    assert Counter(_key(r, names) for r in joined.collect().to_pylist()) == Counter(once)
    # A window after it, keyed by the join's key: in the join stage's call (one batch job here).
    per_user = joined.key_by("user").tumbling_window(30_000).agg(kp.count(kp.col("ad")).alias("seen"))
    windows = ComposedModel(
        WindowOf(
            _windows_joined(),
            TumblingWindow(size_ms=30_000),
            keys=("user",),
            aggregates=[ModelAgg(name="seen", func="count", column="ad")],
        )
    )
    for side in ("clicks", "views"):
        windows.send([r for s, rows in STEPS if s == side for r in rows], source=side)
    windows.close()
    cols = list(per_user.columns)
    assert Counter(_key(r, cols) for r in per_user.collect().to_pylist()) == Counter(
        _key(r, cols) for r in windows.results
    )


#: Clicks and views; a late click (the last one) corrects a window that was fired already.
LATE_CLICK: list[tuple[str, list[dict[str, Any]]]] = [
    ("clicks", [{"user": "u", "t": 3_000, "click": "c1"}, {"user": "v", "t": 4_000, "click": "c2"}]),
    ("views", [{"user": "u", "t": 1_000, "ad": "a1"}, {"user": "v", "t": 2_000, "ad": "a2"}]),
    ("views", [{"user": "u", "t": 12_000, "ad": "a1"}, {"user": "v", "t": 21_000, "ad": "a3"}]),
    ("clicks", [{"user": "u", "t": 14_000, "click": "c3"}, {"user": "w", "t": 23_000, "click": "c4"}]),
    ("clicks", [{"user": "u", "t": 5_000, "click": "c5"}]),  # late: [0 s, 10 s) fired at 14 s
]


def test_a_corrected_windows_filtered_results_joined_retract_the_pairs_of_the_value_withdrawn(
    session: kp.Session,
) -> None:
    """A window with allowed lateness in accumulation('retracting') re-fires when a late click
    comes: the join after it (a filter between) withdraws the pairs of the count it retracts and
    pairs the new one."""
    tag = uuid.uuid4().hex[:6]
    clicks, to_clicks = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views, to_views = session.memory_stream(VIEWS, name=f"views_{tag}")
    counts = (
        clicks.watermark("t", 0)
        .key_by("user")
        .tumbling_window(10_000)
        .allowed_lateness(20_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    joined = (
        counts.filter(kp.col("user") != "v")  # runs in the join stage, over emits and retractions
        .key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-10_000, 0))
        .accumulation("retracting")
    )
    with pytest.raises(PlanError, match=r"needs \.accumulation"):
        counts.key_by("user").interval_join(views.watermark("t", 0).key_by("user"), between=(0, 0)).lower()
    model = ComposedModel(
        JoinOf(
            FilterOf(
                WindowOf(
                    Source("clicks", "t", ("user", "t", "click")),
                    TumblingWindow(size_ms=10_000),
                    keys=("user",),
                    aggregates=[ModelAgg(name="n", func="count", column=None)],
                    allowed_lateness_ms=20_000,
                ),
                lambda r: r["user"] != "v",
            ),
            Source("views", "t", ("user", "t", "ad")),
            keys=("user",),
            between=(-10_000, 0),
            allowed_lateness_ms=20_001,  # the window's corrections come as late as its lateness
        )
    )
    names = [c for c in joined.columns if c != "kind"]
    want: Counter[tuple[Any, ...]] = Counter()
    got: Counter[tuple[Any, ...]] = Counter()
    job = joined.start()
    try:
        for side, rows in LATE_CLICK:
            _net(want, model.send(rows, source=side), names)
            (to_clicks if side == "clicks" else to_views).send(rows)
            job.process_all_available()
        to_clicks.close()
        to_views.close()
        _net(want, model.close(), names)
        assert job.await_termination(timeout_s=120)
        results = job.results().to_pylist()
    finally:
        job.stop()
    _net(got, results, names)
    assert +got == +want
    withdrawn = [r for r in results if r["kind"] == "retract"]
    assert [(r["user"], r["n"], r["ad"]) for r in withdrawn] == [("u", 1, "a1")]
    assert {r["user"] for r in results} == {"u"}  # v's pairs filtered out before the join


def test_a_union_of_retracting_windows_over_two_streams_runs_as_one_operator(session: kp.Session) -> None:
    clicks, _, to_clicks, to_views = _streams(session)
    views = session.memory_stream(VIEWS, name=f"views_{uuid.uuid4().hex[:6]}")
    per_click = clicks.watermark("t", 0).key_by("user").tumbling_window(10_000).allowed_lateness(20_000)
    per_view = views[0].watermark("t", 0).key_by("user").tumbling_window(10_000).allowed_lateness(20_000)
    count = kp.count(kp.col("*")).alias("n")
    both = (
        per_click.accumulation("retracting").agg(count).union(per_view.accumulation("retracting").agg(count))
    )
    assert "the union of windows runs as one operator" in both.explain()
    window = TumblingWindow(size_ms=10_000)
    n = [ModelAgg(name="n", func="count", column=None)]
    branches = [
        WindowOf(Source(name, "t", ("user", "t", other)), window, ("user",), n, allowed_lateness_ms=20_000)
        for name, other in (("clicks", "click"), ("views", "ad"))
    ]
    model = ComposedModel(UnionOf(branches))
    to_views.close()
    # Each branch fires at the query's one watermark (the least of both streams'), where the
    # model fires it at its own stream's: the same results, some in a later step; compared net.
    senders = {"clicks": to_clicks, "views": views[1]}
    names = [c for c in both.columns if c != "kind"]
    want: Counter[tuple[Any, ...]] = Counter()
    job = both.start()
    try:
        for side, rows in STEPS:
            _net(want, model.send(rows, source=side), names)
            senders[side].send(rows)
            job.process_all_available()
        for sender in senders.values():
            sender.close()
        _net(want, model.close(), names)
        assert job.await_termination(timeout_s=120)
        got: Counter[tuple[Any, ...]] = Counter()
        _net(got, job.results().to_pylist(), names)
    finally:
        job.stop()
    assert +got == +want and +want
    bounded: Counter[tuple[Any, ...]] = Counter()
    _net(bounded, both.collect().to_pylist(), names)  # the same operator as one batch job
    assert +bounded == +want


def _net(into: Counter[tuple[Any, ...]], rows: list[dict[str, Any]], names: list[str]) -> None:
    """Add emits and take away retractions: what a retracting changelog leaves."""
    for r in rows:
        into[_key(r, names)] += -1 if r.get("kind") == "retract" else 1


def test_views_left_join_clicks_then_a_window_per_ad_is_corrected_by_retractions(session: kp.Session) -> None:
    """The view without a click is emitted padded; a click within the join's lateness retracts the
    pad, and the window per ad (a stage: keyed otherwise) retracts its count and emits the new one."""
    tag = uuid.uuid4().hex[:6]
    (views, to_views), (clicks, to_clicks) = (
        session.memory_stream(ddl, name=f"{name}_{tag}")
        for name, ddl in (("views", VIEWS), ("clicks", CLICKS))
    )
    joined = (
        views.watermark("t", 0)
        .key_by("user")
        .interval_join(clicks.watermark("t", 0).key_by("user"), between=(0, 5_000), how="left")
        .allowed_lateness(20_000)
        .accumulation("retracting")
    )
    per_ad = (
        joined.key_by("ad")
        .tumbling_window(10_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("views"), kp.count(kp.col("click")).alias("clicks"))
    )
    assert "window over retractions" in per_ad.explain()
    model = ComposedModel(
        WindowOf(
            JoinOf(
                Source("views", "t", ("user", "t", "ad")),
                Source("clicks", "t", ("user", "t", "click")),
                keys=("user",),
                between=(0, 5_000),
                how="left",
                allowed_lateness_ms=20_000,
            ),
            TumblingWindow(size_ms=10_000),
            keys=("ad",),
            aggregates=[
                ModelAgg(name="views", func="count", column=None),
                ModelAgg(name="clicks", func="count", column="click"),
            ],
        )
    )
    assert _run(session, per_ad, model, {"clicks": to_clicks, "views": to_views}) > 0


def test_a_join_stages_late_rows_of_both_layouts_reach_the_handler_in_one(session: kp.Session) -> None:
    """A very late click (the window's input) and a very late view (the join stage's other side) have
    different columns; the handler gets both in the job's one late-event layout."""
    tag = uuid.uuid4().hex[:6]
    clicks, to_clicks = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views, to_views = session.memory_stream(VIEWS, name=f"views_{tag}")
    counts = (
        clicks.watermark("t", 0).key_by("user").tumbling_window(10_000).agg(kp.count(kp.col("*")).alias("n"))
    )
    joined = (
        counts.key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-8_000, 0), how="left")
        .with_late_event_handler(kp.SideOutputLateEventHandler())
    )
    job = joined.start()
    try:
        to_clicks.send([{"user": "u", "t": 30_000, "click": "c"}])
        to_views.send([{"user": "u", "t": 30_000, "ad": "a"}])
        job.process_all_available()
        to_clicks.send([{"user": "u", "t": 1_000, "click": "late"}])
        job.process_all_available()
        to_views.send([{"user": "v", "t": 1_000, "ad": "late"}])
        job.process_all_available()
        late = job.late_events()
    finally:
        job.stop()
    assert job.metrics().very_late_events == 2
    rows = sorted(late.to_pylist(), key=lambda r: str(r["side"]))
    assert [(r["user"], r["side"], r["ad"], r["classification"]) for r in rows] == [
        ("u", None, None, "very_late"),  # the window reads the key only: the rest is null
        ("v", "right", "late", "very_late"),
    ]


def _streamed(query: Any, senders: dict[str, kp.Sender]) -> list[dict[str, Any]]:
    """Send every step, then close the sources: the job's rows once it ends."""
    job = query.start()
    try:
        for side, rows in STEPS:
            senders[side].send(rows)
            job.process_all_available()
        for sender in senders.values():
            sender.close()
        assert job.await_termination(timeout_s=120)
        rows = job.results().to_pylist()
    finally:
        job.stop()
    return list(rows)


def test_a_window_of_the_windows_after_a_join_and_their_top_n_take_the_joins_corrections(
    session: kp.Session,
) -> None:
    """Joined pairs counted per ad and 10 s (retracting: the join's late partner corrects them),
    then the counts summed per 30 s over all ads (a window of the windows' results, a stage after
    the stage), and apart from that the top ad of each 10 s (ranked on the driver)."""
    count = [ModelAgg(name="n", func="count", column=None)]
    per_ad_model = WindowOf(_model_join(), TumblingWindow(size_ms=10_000), keys=("ad",), aggregates=count)
    total = [ModelAgg(name="total", func="sum", column="n")]
    model = ComposedModel(WindowOf(per_ad_model, TumblingWindow(size_ms=30_000), aggregates=total))
    for side, rows in STEPS:
        model.send(rows, source=side)
    model.close()
    _, joined, clicks, views = _streams(session)
    per_ad = joined.key_by("ad").tumbling_window(10_000).accumulation("retracting")
    counts = per_ad.agg(kp.count(kp.col("*")).alias("n"))
    summed = counts.tumbling_window(30_000).accumulation("retracting").agg(kp.sum(kp.col("n")).alias("total"))
    assert summed.explain().count("applyInArrow") >= 2  # no row through the driver
    names = [c for c in summed.columns if c != "kind"]
    want: Counter[tuple[Any, ...]] = Counter()
    got: Counter[tuple[Any, ...]] = Counter()
    _net(want, model.results, names)
    _net(got, _streamed(summed, {"clicks": clicks, "views": views}), names)
    assert +got == +want and want
    # The top ad of each 10 s: the late view's pair makes a2 the only top of [0 s, 10 s).
    per_ad_counts = ComposedModel(per_ad_model)
    for side, rows in STEPS:
        per_ad_counts.send(rows, source=side)
    per_ad_counts.close()
    windows: Counter[tuple[Any, ...]] = Counter()
    _net(windows, per_ad_counts.results, ["window_start", "ad", "n"])
    best = {ws: max(n for (w, _, n) in +windows if w == ws) for (ws, _, _) in +windows}
    expected = Counter({(ws, ad, n): 1 for (ws, ad, n) in +windows if n == best[ws]})
    _, joined, clicks, views = _streams(session)
    top = (
        joined.key_by("ad")
        .tumbling_window(10_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
        .top_n(1, by="n", per="window")
    )
    ranked: Counter[tuple[Any, ...]] = Counter()
    rows = _streamed(top, {"clicks": clicks, "views": views})
    _net(ranked, rows, ["window_start", "ad", "n"])
    assert +ranked == expected
    assert any(r["kind"] == "retract" for r in rows)  # a2's count of 1 and a1's pushed out


def test_clicks_and_views_counted_per_user_and_window_joined_by_window_one_operator_then_a_stage(
    session: kp.Session,
) -> None:
    """A join of two windows' results (clicks and views per user and 10 s, by user and window_end,
    right outer: a window of views without clicks is padded): both windows run as one operator. A
    filter between the clicks' window and the join runs in the join stage, over that side only."""
    tag = uuid.uuid4().hex[:6]
    clicks, to_clicks = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views, to_views = session.memory_stream(VIEWS, name=f"views_{tag}")
    count = kp.count(kp.col("*"))
    per_click = clicks.watermark("t", 0).key_by("user").tumbling_window(10_000).agg(count.alias("clicks"))
    per_view = views.watermark("t", 0).key_by("user").tumbling_window(10_000).agg(count.alias("views"))
    ctr = (
        per_click.filter(kp.col("user") != "v")
        .key_by("user", "window_end")
        .interval_join(per_view.key_by("user", "window_end"), between=(0, 0), how="right")
    )
    assert "both windows run as one operator" in ctr.explain()
    windows = [
        WindowOf(
            Source(name, "t", columns),
            TumblingWindow(size_ms=10_000),
            keys=("user",),
            aggregates=[ModelAgg(name=name, func="count", column=None)],
        )
        for name, columns in (("clicks", ("user", "t", "click")), ("views", ("user", "t", "ad")))
    ]
    not_v = FilterOf(windows[0], lambda r: r["user"] is not None and r["user"] != "v")
    model = ComposedModel(JoinOf(not_v, windows[1], keys=("user", "window_end"), between=(0, 0), how="right"))
    for side, rows in STEPS:
        model.send(rows, source=side)
    model.close()
    names = list(ctr.columns)
    want: Counter[tuple[Any, ...]] = Counter()
    _net(want, model.results, names)
    got: Counter[tuple[Any, ...]] = Counter()
    _net(got, _streamed(ctr, {"clicks": to_clicks, "views": to_views}), names)
    assert +got == +want
    assert any(k[names.index("clicks")] is None for k in want)  # a padded window of views


def test_a_union_of_corrected_windows_then_an_aggregation_keyed_otherwise_takes_their_corrections(
    session: kp.Session,
) -> None:
    """Clicks and views counted per user and 10 s (corrected by the late view), their union, then
    how many windows have each count: a stage after the union's operator, over retractions."""
    tag = uuid.uuid4().hex[:6]
    (clicks, to_clicks), (views, to_views) = (
        session.memory_stream(ddl, name=f"{name}_{tag}") for name, ddl in (("c", CLICKS), ("v", VIEWS))
    )
    count = kp.count(kp.col("*"))
    per_user = [
        s.watermark("t", 0).key_by("user").tumbling_window(10_000).allowed_lateness(20_000)
        for s in (clicks, views)
    ]
    both = (
        per_user[0]
        .accumulation("retracting")
        .agg(count.alias("n"))
        .union(per_user[1].accumulation("retracting").agg(count.alias("n")))
    )
    histogram = both.key_by("n").agg(count.alias("windows"))
    assert "the operator after the union is keyed by other columns" in histogram.explain()
    n = [ModelAgg(name="n", func="count", column=None)]
    branches = [
        WindowOf(
            Source(name, "t", ("user", "t", other)),
            TumblingWindow(size_ms=10_000),
            ("user",),
            n,
            allowed_lateness_ms=20_000,
        )
        for name, other in (("clicks", "click"), ("views", "ad"))
    ]
    windows = [ModelAgg(name="windows", func="count", column=None)]
    model = ComposedModel(AggOf(UnionOf(branches), keys=("n",), aggregates=windows))
    for side, rows in STEPS:
        model.send(rows, source=side)
    model.close()
    names = [c for c in histogram.columns if c != "kind"]
    want: Counter[tuple[Any, ...]] = Counter()
    got: Counter[tuple[Any, ...]] = Counter()
    _net(want, model.results, names)
    rows = _streamed(histogram, {"clicks": to_clicks, "views": to_views})
    _net(got, rows, names)
    assert +got == +want and any(r["kind"] == "retract" for r in rows)


def test_users_counted_by_the_window_of_their_latest_view_a_window_over_a_dedup(session: kp.Session) -> None:
    """The latest view per user (``top_n(1, by="t", per="key")``: deduplication), then per 10 s
    window the users whose latest view falls in it. A newer view moves its user to a later window
    (a retraction at the old view's time, an emit at the new one's), and the windows fire when the
    watermark passes their end, not when the last update could come."""
    stream, to_views = session.memory_stream(VIEWS, name=f"views_{uuid.uuid4().hex[:6]}")
    latest = stream.watermark("t", 0).top_n(1, by="t", per="key", keys=("user",))
    per_window = (
        latest.tumbling_window(10_000).accumulation("retracting").agg(kp.count(kp.col("*")).alias("users"))
    )
    recipe = per_window.lower()
    assert recipe.lowering == "stateful" and "krishiv window over retractions" in recipe.render()
    assert "keeps its windows while the job runs" in recipe.reason
    model = WindowOf(
        TopNOf(Source("views", "t", ("user", "t", "ad")), n=1, by=("t",), keys=("user",)),
        TumblingWindow(size_ms=10_000),
        aggregates=[ModelAgg(name="users", func="count", column=None)],
    )
    assert _run(session, per_window, ComposedModel(model), {"views": to_views}) > 0


def test_each_users_running_click_count_joined_with_their_views_around_it_takes_its_retractions(
    session: kp.Session,
) -> None:
    """A running count of clicks per user (an aggregation without a window: each click retracts the
    user's count and emits the new one, at the click's time), joined with the user's views 5 s
    either side: a new count withdraws the pairs of the old one (a join stage after the aggregation)."""
    (clicks, to_clicks), (views, to_views) = _clicks_and_views(session)
    counts = clicks.watermark("t", 0).key_by("user").agg(kp.count(kp.col("*")).alias("clicks"))
    joined = (
        counts.key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-5_000, 5_000))
        .accumulation("retracting")
    )
    reason = joined.lower().reason
    assert "a stage after the aggregation's" in reason and "while the job runs" in reason
    model = JoinOf(
        AggOf(
            Source("clicks", "t", ("user", "t", "click")),
            keys=("user",),
            aggregates=[ModelAgg(name="clicks", func="count", column=None)],
        ),
        Source("views", "t", ("user", "t", "ad")),
        keys=("user",),
        between=(-5_000, 5_000),
        allowed_lateness_ms=END_OF_TIME_MS,
    )
    assert _run(session, joined, ComposedModel(model), {"clicks": to_clicks, "views": to_views}) > 0


BUDGETS = "ad string, bt bigint, budget bigint"
BUDGET_STEPS: list[list[dict[str, Any]]] = [
    [{"ad": "a1", "bt": 1_000, "budget": 10}, {"ad": "a2", "bt": 5_000, "budget": 20}],
    [{"ad": "a3", "bt": 15_000, "budget": 5}],
    [{"ad": "a1", "bt": 25_000, "budget": 15}],
]


def _four_streams(session: kp.Session) -> tuple[Any, Any, Any, dict[str, kp.Sender]]:
    """Clicks joined with views (as :func:`_streams`), the ads and the budgets, and their senders."""
    _, joined, clicks, views = _streams(session)
    tag = uuid.uuid4().hex[:6]
    (ads, to_ads), (budgets, to_budgets) = (
        session.memory_stream(ddl, name=f"{name}_{tag}") for name, ddl in (("ads", ADS), ("budgets", BUDGETS))
    )
    senders = {"clicks": clicks, "views": views, "ads": to_ads, "budgets": to_budgets}
    return joined, ads.watermark("at", 0), budgets.watermark("bt", 0), senders


def _run_four(
    pipeline: Any, model: ComposedModel, senders: dict[str, kp.Sender], *, net: bool = False
) -> list[tuple[Any, ...]]:
    """Send the steps of the four streams (those of ``senders``), close them; the job's rows equal
    the model's, streamed and bounded (the same operators as one batch job). The job's rows.

    ``net``: compare the rows net of retractions (the job runs every operator at the query's
    watermark, the model each at its own sources': a window may fire once corrected in one and
    fire, then be corrected, in the other)."""
    names = list(pipeline.columns)
    expected: list[tuple[Any, ...]] = []
    job = pipeline.start()
    try:
        for i, (side, rows) in enumerate(STEPS):
            more = [(side, rows)]
            if i < len(AD_STEPS):
                more += [("ads", AD_STEPS[i]), ("budgets", BUDGET_STEPS[i])]
            for name, batch in more:
                if name in senders:
                    expected += [_key(r, names) for r in model.send(batch, source=name)]
                    senders[name].send(batch)
            job.process_all_available()
        got = _closed(job, tuple(senders.values()), model, names, expected)
    finally:
        job.stop()
    bounded = [_key(r, names) for r in pipeline.collect().to_pylist()]
    if net:
        got, expected, bounded = (_net_rows(rows) for rows in (got, expected, bounded))
    assert got and Counter(got) == Counter(expected)
    assert Counter(bounded) == Counter(expected)
    return got


def _net_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Changelog rows (``kind`` last) net of retractions."""
    count: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        count[row[:-1]] += -1 if row[-1] == "retract" else 1
    assert all(v >= 0 for v in count.values()), count
    return list(count.elements())


def test_a_join_of_two_joins_four_streams_equals_the_model_streamed_and_bounded(session: kp.Session) -> None:
    """Clicks with the views of their user, joined by ad with each ad's campaign changes and the
    budgets set around them: both joins run as one operator, the third a stage after it."""
    joined, ads, budgets, senders = _four_streams(session)
    funded = ads.key_by("ad").interval_join(budgets.key_by("ad"), between=(-10_000, 10_000))
    four = joined.key_by("ad").interval_join(funded.key_by("ad"), between=(-20_000, 20_000))
    assert "both operators under the join run as one" in four.explain()
    model = JoinOf(
        _model_join(),
        JoinOf(
            Source("ads", "at", ("ad", "at", "campaign")),
            Source("budgets", "bt", ("ad", "bt", "budget")),
            keys=("ad",),
            between=(-10_000, 10_000),
        ),
        keys=("ad",),
        between=(-20_000, 20_000),
        allowed_lateness_ms=20_000,  # the first join's: the third keeps rows as long (docs/joins.md)
    )
    _run_four(four, ComposedModel(model), senders)


def test_a_chain_of_three_joins_routes_the_fourth_streams_rows_into_the_second_stage(
    session: kp.Session,
) -> None:
    """Clicks with the views of their user, with the ads they saw, then with the budgets set
    around each ad: a join stage after a join stage, the budgets routed into the second by ad."""
    joined, ads, budgets, senders = _four_streams(session)
    three = joined.key_by("ad").interval_join(ads.key_by("ad"), between=(-15_000, 15_000))
    four = three.key_by("ad").interval_join(budgets.key_by("ad"), between=(-10_000, 10_000), how="left")
    assert "a stage after that stage" in four.lower().reason
    ads_model = Source("ads", "at", ("ad", "at", "campaign"))
    second = JoinOf(
        _model_join(), ads_model, keys=("ad",), between=(-15_000, 15_000), allowed_lateness_ms=20_000
    )
    model = JoinOf(
        second,
        Source("budgets", "bt", ("ad", "bt", "budget")),
        keys=("ad",),
        between=(-10_000, 10_000),
        how="left",
        allowed_lateness_ms=20_000,  # the joins' below: each join keeps rows as long (docs/joins.md)
    )
    got = _run_four(four, ComposedModel(model), senders)
    assert any(r[list(four.columns).index("budget")] is None for r in got)  # a pad of the third join


def test_joined_clicks_counted_per_ad_and_window_then_joined_with_the_ads_a_chain_as_a_joins_side(
    session: kp.Session,
) -> None:
    """Clicks with the views of their user (by user), counted per ad and 10 s (a stage keyed by
    ad, retracting: the join's late pairs correct it), each count joined with the ad's campaign
    changes in its window: the second join is a stage after the window's stage."""
    joined, ads, _, senders = _four_streams(session)
    per_ad = (
        joined.key_by("ad")
        .tumbling_window(10_000)
        .allowed_lateness(5_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("pairs"))
    )
    with_ads = (
        per_ad.key_by("ad").interval_join(ads.key_by("ad"), between=(-10_000, 0)).accumulation("retracting")
    )
    reason = with_ads.lower().reason
    assert "a chain of operators" in reason
    # The ads' watermark holds Spark's too: the join does not fire ahead of it (nor the stages).
    assert "highest event time" not in with_ads.explain(show=False)
    window = WindowOf(
        _model_join(),
        TumblingWindow(size_ms=10_000),
        keys=("ad",),
        aggregates=[ModelAgg(name="pairs", func="count", column=None)],
        allowed_lateness_ms=5_000,
    )
    model = JoinOf(
        window,
        Source("ads", "at", ("ad", "at", "campaign")),
        keys=("ad",),
        between=(-10_000, 0),
        allowed_lateness_ms=25_001,  # the window keeps its windows 5 s + the join's 20 s, and 1 ms
    )
    del senders["budgets"]
    got = _run_four(with_ads, ComposedModel(model), senders, net=True)
    assert any(r[list(with_ads.columns).index("campaign")] is not None for r in got)


def test_a_running_click_count_window_joined_with_views_takes_its_retractions(session: kp.Session) -> None:
    """Each user's running click count (a change at the time of the clicks that made it, which
    retracts the count before it) window-joined with the user's views per 10 s, left: a new
    count withdraws the old one's pairs in every window that fired, and pads a view left alone."""
    (clicks, to_clicks), (views, to_views) = _clicks_and_views(session)
    counts = clicks.watermark("t", 0).key_by("user").agg(kp.count(kp.col("*")).alias("clicks"))
    joined = (
        views.watermark("t", 0)
        .key_by("user")
        .tumbling_window(10_000)
        .join(counts.key_by("user").tumbling_window(10_000), how="left")
        .accumulation("retracting")
    )
    model = JoinOf(
        Source("views", "t", ("user", "t", "ad")),
        AggOf(
            Source("clicks", "t", ("user", "t", "click")),
            keys=("user",),
            aggregates=[ModelAgg(name="clicks", func="count", column=None)],
        ),
        keys=("user",),
        window=TumblingWindow(size_ms=10_000),
        how="left",
        allowed_lateness_ms=END_OF_TIME_MS,
    )
    got = _run_four(joined, ComposedModel(model), {"clicks": to_clicks, "views": to_views}, net=True)
    assert any(r[list(joined.columns).index("clicks")] is None for r in got)  # a view without a count


def test_each_click_with_the_users_view_count_in_force_an_as_of_join_of_changes(session: kp.Session) -> None:
    """Each click with its user's running view count in force at the click (an as-of join of an
    aggregation's changes): a count withdrawn by the next view decides the clicks it was in force
    for again, with the count before it or padded."""
    (clicks, to_clicks), (views, to_views) = _clicks_and_views(session)
    seen = views.watermark("t", 0).key_by("user").agg(kp.count(kp.col("*")).alias("views"))
    joined = (
        clicks.watermark("t", 0)
        .key_by("user")
        .as_of_join(seen.key_by("user"), how="left")
        .accumulation("retracting")
    )
    model = JoinOf(
        Source("clicks", "t", ("user", "t", "click")),
        AggOf(
            Source("views", "t", ("user", "t", "ad")),
            keys=("user",),
            aggregates=[ModelAgg(name="views", func="count", column=None)],
        ),
        keys=("user",),
        as_of=True,
        how="left",
        allowed_lateness_ms=END_OF_TIME_MS,
    )
    got = _run_four(joined, ComposedModel(model), {"clicks": to_clicks, "views": to_views}, net=True)
    assert any(r[list(joined.columns).index("views")] is not None for r in got)


def test_a_union_of_two_joins_rows_counted_per_ad_and_window_equals_the_model(session: kp.Session) -> None:
    """Clicks with the views of their user and the ads with the budgets set around them, each as
    (ad, what), their union counted per ad and 10 s: one operator steps both joins (a branch
    each, the projections after them in its call), the window a stage keyed by ad after it; the
    first join's late pairs (within its 20 s) correct the window, which retracts."""
    joined, ads, budgets, senders = _four_streams(session)
    clicks = joined.select(kp.col("ad"), kp.col("click").alias("what"), kp.col("t"))
    funded = (
        ads.key_by("ad")
        .interval_join(budgets.key_by("ad"), between=(-10_000, 10_000))
        .select(kp.col("ad"), kp.col("campaign").alias("what"), kp.col("at").alias("t"))
    )
    counted = (
        clicks.union(funded)
        .key_by("ad")
        .tumbling_window(10_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"), kp.max(kp.col("t")).alias("last"))
    )
    reason = counted.lower().reason
    assert "the union of operators' results runs as one operator" in reason
    assert "a stage of its own" in reason
    ad_rows = JoinOf(
        Source("ads", "at", ("ad", "at", "campaign")),
        Source("budgets", "bt", ("ad", "bt", "budget")),
        keys=("ad",),
        between=(-10_000, 10_000),
    )
    branches = (
        SelectOf(
            _model_join(), ("ad", "what", "t"), fn=lambda r: {"ad": r["ad"], "what": r["click"], "t": r["t"]}
        ),
        SelectOf(
            ad_rows, ("ad", "what", "t"), fn=lambda r: {"ad": r["ad"], "what": r["campaign"], "t": r["at"]}
        ),
    )
    model = WindowOf(
        UnionOf(branches),
        TumblingWindow(size_ms=10_000),
        keys=("ad",),
        aggregates=[
            ModelAgg(name="n", func="count", column=None),
            ModelAgg(name="last", func="max", column="t"),
        ],
    )
    got = _run_four(counted, ComposedModel(model), senders, net=True)
    assert {r[0] for r in got} >= {"a1", "a2"}


BIDS = "auction string, cat string, t bigint, price bigint"
#: One Parquet file a micro-batch: (auction, category, event time, price); a 2 ms lag.
BID_FILES: list[list[tuple[str, str, int, int]]] = [
    [("a1", "x", 1, 5), ("a2", "y", 3, 7)],
    [("a1", "x", 12, 9), ("a3", "x", 8, 4)],  # 12 - 2 = 10: [0, 10) is due in this micro-batch
    [("a2", "y", 14, 2), ("a3", "x", 9, 6)],  # 9 is late (W = 10): very late, no lateness
    [("a2", "y", 25, 1), ("a1", "x", 21, 3)],  # 23: [10, 20) is due
    [("a4", "y", 26, 8), ("a1", "x", 33, 2)],  # 31: [20, 30) is due
]


@pytest.mark.parametrize("after", ["window", "agg"])
def test_a_stage_after_a_window_moves_in_the_micro_batch_that_moves_the_watermark(
    session: kp.Session, tmp_path: Any, after: str
) -> None:
    """Each auction's highest bid per window, then per category (a stage: keyed otherwise): the
    window fires what a micro-batch's rows make due in it, and the stage moves to that watermark
    in it too: no tick micro-batch, and every step equals the model's."""
    columns = ("auction", "cat", "t", "price")
    rows_of = [[dict(zip(columns, bid, strict=True)) for bid in rows] for rows in BID_FILES]
    schema = pa.schema([(c, pa.string() if c in ("auction", "cat") else pa.int64()) for c in columns])
    folder = write_batches(tmp_path / "bids", [pa.Table.from_pylist(rows, schema) for rows in rows_of])
    bids = session.read_parquet(folder, BIDS, streaming=True, max_files_per_trigger=1)
    top = (
        bids.watermark("t", 2)
        .key_by("auction", "cat")
        .tumbling_window(10)
        .agg(kp.max(kp.col("price")).alias("top"))
    )
    source = Source("bids", "t", columns, lag_ms=2)
    tens = TumblingWindow(size_ms=10)
    top_bid = ModelAgg(name="top", func="max", column="price")
    highest = WindowOf(source, tens, keys=("auction", "cat"), aggregates=[top_bid])
    total = ModelAgg(name="total", func="sum", column="top")
    if after == "window":
        query = top.key_by("cat").tumbling_window(10).agg(kp.sum(kp.col("top")).alias("total"))
        model = ComposedModel(WindowOf(highest, tens, keys=("cat",), aggregates=[total]))
    else:
        query = top.key_by("cat").agg(kp.sum(kp.col("top")).alias("total"))
        model = ComposedModel(AggOf(highest, keys=("cat",), aggregates=[total]))
    text = query.explain()
    assert "cross the cluster once more" in text and "the highest event time to every bucket" in text
    names = [c for c in query.columns if c != "kind"] + (["kind"] if "kind" in query.columns else [])
    want = Counter(_key(r, names) for rows in rows_of for r in model.send(rows, source="bids"))
    job = query.start(lowering="stateful")
    try:
        job.process_all_available()
        got = Counter(_key(r, names) for r in job.results().to_pylist())
        batches = job.metrics().batches
    finally:
        job.stop()
    assert got == want and sum(want.values()) >= 3
    assert batches == len(BID_FILES)  # one a file: the window and the stage fired in it
