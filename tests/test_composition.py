"""Operators after a join on Spark (SPEC 3.13): keyed by the join's keys, beside the join; keyed
by other columns, as a stage of their own (its rows moved, its state under the checkpoint).

The oracle is the join's reference model: every pair it emits counts, with
the later of its two rows' event times, into the tumbling window of that
time. The window fires when the join's watermark passes its end (not after
the join's allowed lateness), and a late partner's pair corrects a window
that fired already.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.model.joins import join_model_for
from krishiv_py.plan import nodes as n

pytestmark = pytest.mark.spark

CLICKS = "user string, t bigint, click string"
VIEWS = "user string, t bigint, ad string"
SIZE = 10_000


def _pipeline(session: kp.Session, lateness: int) -> tuple[Any, Any, kp.Sender, kp.Sender]:
    tag = uuid.uuid4().hex[:6]
    clicks, click_sender = session.memory_stream(CLICKS, name=f"clicks_{tag}")
    views, view_sender = session.memory_stream(VIEWS, name=f"views_{tag}")
    joined = (
        clicks.watermark("t", 0)
        .key_by("user")
        .interval_join(views.watermark("t", 0).key_by("user"), between=(-5_000, 0))
        .allowed_lateness(lateness)
    )
    counted = joined.key_by("user").tumbling_window(SIZE).agg(kp.count(kp.col("*")).alias("pairs"))
    return joined, counted, click_sender, view_sender


STEPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("views", [{"user": "u", "t": 1_000, "ad": "a1"}, {"user": "v", "t": 2_000, "ad": "a2"}]),
    ("clicks", [{"user": "u", "t": 3_000, "click": "c1"}, {"user": "v", "t": 4_000, "click": "c2"}]),
    ("views", [{"user": "u", "t": 12_000, "ad": "a3"}]),
    ("clicks", [{"user": "u", "t": 14_000, "click": "c3"}, {"user": "v", "t": 25_000, "click": "c4"}]),
    ("views", [{"user": "v", "t": 21_000, "ad": "a4"}, {"user": "u", "t": 2_500, "ad": "a5"}]),  # a5 late
    ("clicks", [{"user": "u", "t": 31_000, "click": "c5"}]),
    ("views", [{"user": "u", "t": 33_000, "ad": "a6"}]),
]


def _expected(joined: Any) -> tuple[list[Counter[tuple[str, int]]], Counter[tuple[str, int]]]:
    """Per step, the pairs the model emits by (user, window start); and all pairs, with the close."""
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    per_step: list[Counter[tuple[str, int]]] = []
    for side, rows in STEPS:
        emitted = model.send(rows, side="left" if side == "clicks" else "right")
        per_step.append(Counter(_pair_window(p) for p in emitted))
    total = sum(per_step, Counter[tuple[str, int]]()) + Counter(_pair_window(p) for p in model.close())
    return per_step, total


def _pair_window(pair: dict[str, Any]) -> tuple[str, int]:
    """A joined row's key and window: the window of the later of its two rows' times."""
    t = max(int(pair["t"]), int(pair["t_right"]))
    return str(pair["user"]), t // SIZE * SIZE


def _window(row: dict[str, Any]) -> tuple[str, int]:
    return row["user"], int(row["window_start"].timestamp() * 1000)


@pytest.mark.parametrize("lateness", [0, 20_000])
def test_a_window_after_a_join_fires_on_time_and_is_corrected_by_late_pairs(
    session: kp.Session, lateness: int
) -> None:
    joined, counted, clicks, views = _pipeline(session, lateness)
    assert "same operator call as the join" in counted.explain()
    per_step, total = _expected(joined)
    job = counted.start()
    fired: dict[tuple[str, int], list[int]] = {}
    seen = 0
    try:
        for side, rows in STEPS:
            (clicks if side == "clicks" else views).send(rows)
            job.process_all_available()
            results = job.results().to_pylist()
            for row in results[seen:]:
                fired.setdefault(_window(row), []).append(row["pairs"])
                watermark = job.watermark_ms
                assert watermark is not None and watermark >= _window(row)[1] + SIZE  # fired on time
            seen = len(results)
        clicks.close()
        views.close()
        job.await_termination(60)
        for row in job.results().to_pylist()[seen:]:
            fired.setdefault(_window(row), []).append(row["pairs"])
    finally:
        job.stop()
    assert {w: counts[-1] for w, counts in fired.items()} == dict(total)
    late_pair = ("u", 0)  # a5 (t=2.5 s, late) meets c1 (t=3 s): window [0, 10 s) of u again
    if lateness:
        assert fired[late_pair] == [1, 2]  # fired on time, then corrected
    else:
        assert fired[late_pair] == [1]  # a5 is very late for the join: dropped there, counted
        assert job.metrics().very_late_events == 1
    assert per_step  # the model ran every step


def test_a_window_after_a_join_collects_as_one_step_then_close(session: kp.Session) -> None:
    joined, counted, clicks, views = _pipeline(session, 20_000)
    for side, rows in STEPS:
        (clicks if side == "clicks" else views).send(rows)
    _, total = _expected(joined)
    got = Counter({_window(r): r["pairs"] for r in counted.collect().to_pylist()})
    assert got == total  # one step: a5 is not late there, and c1 meets a1 and a5 as the steps did


def _after_join(kind: str, joined: Any) -> Any:
    if kind == "agg":
        return joined.key_by("user").agg(
            kp.count(kp.col("*")).alias("pairs"), kp.max(kp.col("ad")).alias("top_ad")
        )
    return joined.top_n(1, by="t_right", per="key", keys=("user",))


def _model_after_join(kind: str, lateness: int) -> Any:
    return _model(kind, key="user", column="ad", name="top_ad", by="t_right", lateness=lateness)


def _model(kind: str, *, key: str, column: str, name: str, by: str, lateness: int) -> Any:
    """The reference model of the join, then a window, an aggregation or a top-N per ``key``."""
    from krishiv_py.model.compose import AggOf, ComposedModel, JoinOf, Source, TopNOf, WindowOf
    from krishiv_py.model.reference import AggSpec as ModelAgg
    from krishiv_py.plan.windows import TumblingWindow

    clicks = Source("clicks", "t", ("user", "t", "click"))
    views = Source("views", "t", ("user", "t", "ad"))
    join = JoinOf(clicks, views, keys=("user",), between=(-5_000, 0), allowed_lateness_ms=lateness)
    pairs = ModelAgg(name="pairs", func="count", column=None)
    if kind == "window":
        return ComposedModel(WindowOf(join, TumblingWindow(size_ms=SIZE), keys=(key,), aggregates=[pairs]))
    if kind == "agg":
        most = ModelAgg(name=name, func="max", column=column)
        return ComposedModel(AggOf(join, keys=(key,), aggregates=[pairs, most]))
    return ComposedModel(TopNOf(join, n=1, by=(by,), keys=(key,)))


@pytest.mark.parametrize("kind", ["agg", "top_n"])
def test_an_aggregation_or_top_n_per_key_after_a_join_equals_the_model_step_by_step(
    session: kp.Session, kind: str
) -> None:
    joined, _, clicks, views = _pipeline(session, 20_000)
    after = _after_join(kind, joined)
    assert "same operator call as the join" in after.explain()
    model = _model_after_join(kind, 20_000)
    job = after.start()
    seen = 0
    try:
        for side, rows in STEPS:
            expected = model.send(rows, source=side)
            (clicks if side == "clicks" else views).send(rows)
            job.process_all_available()
            got = job.results().to_pylist()
            names = [c for c in after.columns if c != "kind"]
            assert Counter(tuple(r[c] for c in (*names, "kind")) for r in got[seen:]) == Counter(
                tuple(r[c] for c in (*names, "kind")) for r in expected
            )
            seen = len(got)
    finally:
        job.stop()


def _by_ad(kind: str, joined: Any) -> Any:
    """An operator after the join keyed by another column than the join's (the view's ad)."""
    if kind == "window":
        return joined.key_by("ad").tumbling_window(SIZE).agg(kp.count(kp.col("*")).alias("pairs"))
    if kind == "agg":
        return joined.key_by("ad").agg(
            kp.count(kp.col("*")).alias("pairs"), kp.max(kp.col("t")).alias("last")
        )
    return joined.top_n(1, by="t", per="key", keys=("ad",))


def _model_by_ad(kind: str, lateness: int) -> Any:
    return _model(kind, key="ad", column="t", name="last", by="t", lateness=lateness)


def _comparable(row: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    values: list[Any] = [row.get(c) for c in names]
    return tuple(int(v.timestamp() * 1000) if isinstance(v, datetime) else v for v in values)


@pytest.mark.parametrize("kind", ["window", "agg", "top_n"])
def test_an_operator_after_a_join_keyed_by_other_columns_runs_as_a_stage_and_equals_the_model(
    session: kp.Session, kind: str
) -> None:
    joined, _, clicks, views = _pipeline(session, 20_000)
    after = _by_ad(kind, joined)
    assert "cross the cluster once more" in after.explain()
    model = _model_by_ad(kind, 20_000)
    names = [c for c in after.columns if c != "kind"] + (["kind"] if "kind" in after.columns else [])
    job = after.start()
    got_all: list[tuple[Any, ...]] = []
    want_all: list[tuple[Any, ...]] = []
    seen = 0
    try:
        for side, rows in STEPS:
            expected = model.send(rows, source=side)
            (clicks if side == "clicks" else views).send(rows)
            job.process_all_available()
            got = job.results().to_pylist()
            got_all += [_comparable(r, names) for r in got[seen:]]
            want_all += [_comparable(r, names) for r in expected]
            seen = len(got)
            assert Counter(got_all) == Counter(want_all)  # step by step
    finally:
        job.stop()


def test_a_stage_after_a_join_restarted_on_its_checkpoint_keeps_its_state(
    session: kp.Session, tmp_path: Any
) -> None:
    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    joined, _, clicks, views = _pipeline(session, 20_000)
    after = _by_ad("window", joined)
    model = _model_by_ad("window", 20_000)
    final: dict[tuple[Any, ...], int] = {}
    for r in [r for side, rows in STEPS for r in model.send(rows, source=side)] + model.close():
        final[(r["ad"], int(r["window_start"]))] = r["pairs"]  # the last firing of each window
    job = after.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        for side, rows in STEPS[:4]:
            (clicks if side == "clicks" else views).send(rows)
            job.process_all_available()
    finally:
        job.stop()
    for side, rows in STEPS[4:]:
        (clicks if side == "clicks" else views).send(rows)
    job = after.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
        clicks.close()
        views.close()
        assert job.await_termination(timeout_s=120)
        got: dict[tuple[Any, ...], int] = {}
        for r in job.results().to_pylist():
            got[(r["ad"], int(r["window_start"].timestamp() * 1000))] = r["pairs"]
    finally:
        job.stop()
    assert got == final and final


def test_a_stage_after_a_join_collects_as_one_step_then_close(session: kp.Session) -> None:
    joined, _, clicks, views = _pipeline(session, 20_000)
    for side, rows in STEPS:
        (clicks if side == "clicks" else views).send(rows)
    model = join_model_for(joined.plan)
    pairs = [
        p for side, rows in STEPS for p in model.send(rows, side="left" if side == "clicks" else "right")
    ]
    total = Counter(_pair_window({**p, "user": p["ad"]}) for p in pairs + model.close())
    got = {
        (r["ad"], int(r["window_start"].timestamp() * 1000)): r["pairs"]
        for r in _by_ad("window", joined).collect().to_pylist()
    }
    assert got == dict(total)
