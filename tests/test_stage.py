"""A stage keyed by other columns after an operator (krishiv_py.stateful.stage), without Spark."""

from __future__ import annotations

from pathlib import Path

import attrs
import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.errors import PlanError
from krishiv_py.names import BATCH_TS, JOIN_SIDE, LATE_CLASS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.planner.spark.lower import lower
from krishiv_py.runtime.output import conformed_late
from krishiv_py.stateful._arrow import unframed
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.protocol import NOT_DUE
from krishiv_py.stateful.stage import (
    StageSpec,
    StageState,
    StageStore,
    Upstream,
    bucket_base,
    hand_on,
    handed_from,
    levels,
    route_of,
    step,
)
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.window_kernel import WindowKernel
from krishiv_py.types import to_schema

COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)


def _spec(buckets: int = 2, upstream_buckets: int = 2) -> StageSpec:
    kernel = WindowKernel(KernelSpec(keys=("ad",), window=TumblingWindow(size_ms=10), aggs=(COUNT,)))
    return StageSpec(
        kernel=kernel,
        upstream=WindowKernel(KernelSpec(keys=("u",), window=TumblingWindow(size_ms=10), aggs=(COUNT,))),
        columns=(("ad", pa.string()),),
        buckets=buckets,
        upstream_buckets=upstream_buckets,
    )


def _results(ads: list[str | None], ts_ms: list[int]) -> pa.Table:
    return pa.table(
        {
            "ad": pa.array(ads, pa.string()),
            "u": pa.array(["x"] * len(ads), pa.string()),
            BATCH_TS: pa.array([t * 1000 for t in ts_ms], pa.int64()),
        }
    )


def test_rows_of_equal_keys_go_to_one_stage_bucket_whatever_bucket_sent_them() -> None:
    rows = pa.table({"ad": ["a", "b", None, "a", "c", None] * 50})
    routes = route_of(rows, ("ad",), 4)
    by_key: dict[object, set[int]] = {}
    for key, route in zip(rows.column("ad").to_pylist(), routes.tolist(), strict=True):
        by_key.setdefault(key, set()).add(route)
    assert all(len(r) == 1 for r in by_key.values())
    assert set(routes.tolist()) <= set(range(4))
    floats = pa.table({"x": pa.array([0.0, -0.0, float("nan"), float("nan")])})
    f = route_of(floats, ("x",), 8).tolist()
    assert f[0] == f[1] and f[2] == f[3]  # -0.0 is 0.0, NaN is NaN: as the kernels group them


def test_every_stage_bucket_gets_a_row_from_every_call_with_its_share_of_the_rows() -> None:
    spec = _spec(buckets=3)
    handed = hand_on(spec, 1, _results(["a", "b", "c", "a"], [1, 2, 3, 4]), 0, 5, 10)
    assert len(handed) == 3
    states = [step(spec, None, [blob], 0)[0] for blob in handed]
    assert sum(s.seq for s in states) == 4  # each row went to exactly one stage bucket
    assert all(s.report_map() == {1: (5, 10)} for s in states)


def test_the_stage_waits_for_every_bucket_and_below_a_due_one() -> None:
    spec = _spec(buckets=1, upstream_buckets=2)
    first = hand_on(spec, 0, _results(["a"], [5]), 20, 0, NOT_DUE)
    state, out, _, _ = step(spec, None, first, 0)
    assert state.watermark_ms is None and not out.results.num_rows  # bucket 1 never reported
    # Bucket 1 holds a window due at 10 it has not fired yet: the stage stays below 10.
    second = hand_on(spec, 1, _results([], []), 20, 1, 10)
    state, out, _, _ = step(spec, state, second, 0)
    assert state.watermark_ms == 9 and not out.results.num_rows
    # Bucket 1 fires it (its result reaches the stage at the old watermark), then the window fires.
    third = hand_on(spec, 1, _results(["a"], [9]), 20, 0, NOT_DUE)
    state, out, _, _ = step(spec, state, third, 0)
    assert state.watermark_ms == 20
    assert out.results.to_pylist() == [{"ad": "a", "window_start": 0, "window_end": 10_000, "n": 2}]


def test_a_restart_on_fewer_tasks_drops_the_reports_of_the_layout_before() -> None:
    """Five tasks reported (task 4 holds a window due at 10); the job restarts on three (a new
    layout since micro-batch 7): the gone task's report would hold the stage below 10 for ever."""
    five = _spec(buckets=1, upstream_buckets=5)
    handed = [blob for b in range(4) for blob in hand_on(five, b, _results([], []), 20, 0, NOT_DUE)]
    handed += hand_on(five, 4, _results([], []), 20, 1, 10)
    state, _, _, _ = step(five, None, handed, 0)
    assert state.watermark_ms == 9 and state.since == 0
    three = attrs.evolve(five, upstream_buckets=3, layout_since=7)
    state, _, _, _ = step(three, state, hand_on(three, 0, _results([], []), 30, 0, NOT_DUE), 0)
    assert state.since == 7 and state.report_map() == {0: (0, NOT_DUE)}
    assert state.watermark_ms == 9  # tasks 1 and 2 of the new layout have not reported yet
    handed = [blob for b in (1, 2) for blob in hand_on(three, b, _results([], []), 30, 0, NOT_DUE)]
    state, _, _, _ = step(three, state, handed, 0)
    assert state.watermark_ms == 30  # task 4's report is gone with its layout


def test_a_key_grouped_stage_moved_from_2_to_5_to_3_tasks_equals_one_task(tmp_path: Path) -> None:
    """A stage by key group (SPEC 3.15): its rows go to the task of their key group and each task
    keeps its key groups' state under their range; restarted on 5, then 3 tasks, each task
    gathers its key groups from the directories the tasks before left, and the stage's results
    are those of one task over every row."""
    import random

    from krishiv_py.stateful.key_groups import task_ranges
    from krishiv_py.stateful.stage import KeyGroupStageStore
    from krishiv_py.stateful.versioned import forget_cache, range_name

    rng = random.Random(5)
    micro_batches = []
    watermark = 0
    for _ in range(12):
        ads: list[str | None] = [f"ad{rng.randint(0, 30)}" for _ in range(rng.randint(0, 25))]
        micro_batches.append((_results(ads, [watermark + rng.randint(0, 30) for _ in ads]), watermark))
        watermark += rng.randint(0, 25)
    micro_batches.append((_results([], []), 10_000))

    def run(root: Path, layouts: list[tuple[int, range]]) -> list[tuple[object, ...]]:
        forget_cache()
        got: list[tuple[object, ...]] = []
        for tasks, batches in layouts:
            spec = attrs.evolve(
                _spec(buckets=1, upstream_buckets=1).with_buckets(
                    tasks, upstream=1, since=batches.start, key_groups=16
                ),
                path=str(root),
            )
            for b in batches:
                results, w = micro_batches[b]
                handed = hand_on(spec, 0, results, w, 0, NOT_DUE)
                for route in range(tasks):
                    store = KeyGroupStageStore(spec, route)
                    state, caught = store.load_before(b)
                    state, out, _, _ = step(spec, state, [handed[route]], 0)
                    for table in (caught.results if caught is not None else None, out.results):
                        got += [tuple(r.values()) for r in table.to_pylist()] if table is not None else []
                    store.save(b, state)
            assert {range_name(*r) for r in task_ranges(16, tasks)} <= {p.name for p in root.iterdir()}
        return sorted(got, key=repr)

    whole = run(tmp_path / "whole", [(1, range(len(micro_batches)))])
    moved = run(tmp_path / "moved", [(2, range(0, 4)), (5, range(4, 8)), (3, range(8, len(micro_batches)))])
    assert moved == whole and len(whole) > 20
    assert {p.name for p in (tmp_path / "moved").iterdir()} == {range_name(*r) for r in task_ranges(16, 3)}


def test_gathered_parts_that_stood_at_different_watermarks_fire_what_the_lagging_one_had_due() -> None:
    """Two tasks left their parts at 5 and 25 (a join stage's other side runs only the tasks its
    rows go to); the task that gathers both steps the lagging part to 25 first: its window
    [0, 10) fires then, once, before the micro-batch's own results."""
    from krishiv_py.stateful.stage import gathered, stage_blob
    from krishiv_py.stateful.versioned import Piece

    spec = attrs.evolve(_spec(buckets=1, upstream_buckets=1), key_groups=1)
    parts = []
    for ad, ts, mark in (("a", 3, 5), ("b", 21, 25)):
        state, _, _, _ = step(spec, None, hand_on(spec, 0, _results([ad], [ts]), mark, 0, NOT_DUE), 0)
        assert state.watermark_ms == mark and state.kernel is not None
        parts.append(state)
    pieces = [Piece(stage_blob(s), 0, 1, (0,)) for s in parts]
    together, caught = gathered(spec, pieces)
    assert together is not None and together.watermark_ms == 25
    assert together.seq == max(s.seq for s in parts)
    assert caught is not None
    assert caught.results.to_pylist() == [{"ad": "a", "window_start": 0, "window_end": 10_000, "n": 1}]
    assert together.kernel is not None and spec.kernel.state_rows(together.kernel) == 1  # b's [20, 30)
    assert together.reports.num_rows == 0 and together.since == spec.layout_since


def test_a_stage_hands_the_next_stage_its_rows_and_the_watermark_held_below_every_bucket_before() -> None:
    first = _spec(buckets=1, upstream_buckets=2)
    operator = first.upstream
    assert not isinstance(operator, Upstream)
    second = StageSpec(
        kernel=WindowKernel(KernelSpec(keys=("n",), window=TumblingWindow(size_ms=10), aggs=(COUNT,))),
        upstream=Upstream((operator, first.kernel)),
        columns=(("n", pa.int64()),),
        buckets=2,
        upstream_buckets=1,
    )
    spec = attrs.evolve(first, then=second)
    assert levels(spec) == [spec, second] and bucket_base(spec, 1) == -2
    # Operator bucket 0 reports at 20; bucket 1 holds a window due at 10 it has not fired.
    handed = [*hand_on(spec, 0, _results(["a", "a"], [-5, -4]), 20, 0, NOT_DUE)]
    handed += hand_on(spec, 1, _results([], []), 20, 1, 10)
    state, out, upstream, _ = step(spec, None, handed, 0)
    onward = handed_from(spec, 0, state, out, upstream, bounded=False)
    assert len(onward) == 2  # a row for every bucket of the next stage
    reports = [unframed(blob)[1].to_pylist()[0] for blob in onward]
    assert {r["watermark_ms"] for r in reports} == {9}  # 20, held below bucket 1's due window
    rows = sum(unframed(blob)[0].num_rows for blob in onward)
    assert rows == out.results.num_rows == 1  # the window [-10, 0) of "a" fired at 9, its count 2


def test_a_micro_batch_run_again_starts_from_the_version_before_it(tmp_path: Path) -> None:
    store = StageStore(str(tmp_path), 3)
    assert store.load_before(0) is None
    for batch in range(5):
        store.save(batch, StageState(seq=batch * 10, watermark_ms=batch))
    again = store.load_before(4)
    assert again is not None and again.seq == 30 and again.watermark_ms == 3
    latest = store.load_before(5)
    assert latest is not None and latest.seq == 40
    assert sorted(p.name for p in (tmp_path / "3").iterdir()) == ["3.arrow", "4.arrow"]  # older ones go
    store.save(4, StageState(seq=41, since=4))  # the micro-batch run again writes its version anew
    assert (store.load_before(5) or StageState()).seq == 41
    assert (store.load_before(5) or StageState()).since == 4
    (tmp_path / "3" / "4.arrow.123.tmp").write_bytes(b"half")  # a write killed before its move
    assert store.save(5, StageState(seq=50)) > 0
    assert sorted(p.name for p in (tmp_path / "3").iterdir()) == ["4.arrow", "5.arrow"]


def _source(name: str, ddl: str) -> Stream:
    return Stream(None, n.MemorySource(name=name, schema=to_schema(ddl), path=f"/{name}"))


def _three_streams() -> Stream:
    """``a`` joined with ``b`` by user, then with ``c`` by ad: a join of a join's rows."""
    a = _source("a", "user string, t bigint, ad string").watermark("t", 0).key_by("user")
    b = _source("b", "user string, tb bigint").watermark("tb", 0).key_by("user")
    c = _source("c", "ad string, tc bigint").watermark("tc", 0).key_by("ad")
    return a.interval_join(b, between=(-5, 0)).key_by("ad").interval_join(c, between=(-5, 5))


def test_an_expression_between_two_operators_that_arrow_cannot_evaluate_exactly_is_a_plan_error() -> None:

    def keyed(name: str) -> kp.KeyedStream:
        source = n.MemorySource(
            name=name, schema=to_schema("user string, t bigint, v string"), path=f"/{name}"
        )
        return Stream(None, source).watermark("t", 0).key_by("user")

    joined = keyed("a").interval_join(keyed("b"), between=(-5, 0))
    fine = joined.filter(kp.col("t") > kp.col("t_right")).key_by("v").agg(kp.count(kp.col("*")))
    assert "cross the cluster once more" in lower(fine.plan).reason
    parsed = joined.filter(kp.col("v").cast("int") > 1).key_by("user").agg(kp.count(kp.col("*")))
    with pytest.raises(PlanError, match=r"between two operators.*cast from string"):
        lower(parsed.plan)


def test_an_operator_after_a_join_of_a_join_runs_in_its_call_keyed_alike_and_as_a_stage_else() -> None:

    three = _three_streams()
    assert "the second join is a stage" in lower(three.plan).reason
    per_ad = lower(three.key_by("ad").agg(kp.count(kp.col("*"))).plan).stateful
    assert per_ad is not None and per_ad.operator.then is not None
    assert "then in the same call" in per_ad.operator.then.kernel.describe()
    assert per_ad.operator.then.then is None
    per_user = lower(three.key_by("user").agg(kp.count(kp.col("*"))).plan).stateful
    assert per_user is not None and per_user.operator.then is not None
    second = per_user.operator.then.then
    assert second is not None and second.then is None and second.kernel.keys == ("user",)
    assert isinstance(second.upstream, Upstream)  # held by the first join and the join stage
    assert [k.keys for k in second.upstream.kernels] == [("user",), ("ad",)]


def test_a_join_stages_other_side_is_classified_at_the_stages_watermark_and_its_very_late_rows_kept() -> None:

    three = _three_streams()
    recipe = lower(three.plan)
    assert recipe.stateful is not None and recipe.stateful.operator.then is not None
    spec = attrs.evolve(recipe.stateful.operator.then, upstream_buckets=1)

    def side(ad: str, tc_ms: int, seq: int) -> pa.Table:
        row: dict[str, object] = {name: None for name, _, _ in spec.side_input}
        row.update({JOIN_SIDE: "right", "ad": ad, "tc": tc_ms, BATCH_TS: tc_ms * 1000, SEQ: seq})
        types = {name: kind for name, kind, _ in spec.side_input} | {BATCH_TS: pa.int64(), SEQ: pa.int64()}
        return pa.table({k: pa.array([v], types[k]) for k, v in row.items()})

    results = pa.schema([*(pa.field(name, kind) for name, kind in spec.read), pa.field(BATCH_TS, pa.int64())])
    report = hand_on(spec, 0, results.empty_table(), 100, 0, NOT_DUE)
    state, out, _, late = step(spec, None, report, 0, side=[side("x", 200, 0)])
    assert out.on_time == 1 and not len(out.very_late) and state.watermark_ms == 100
    state, out, _, late = step(spec, state, report, 0, side=[side("x", 10, 1)])
    assert len(out.very_late) == 1 and late.column(LATE_CLASS).to_pylist() == ["very_late"]
    assert late.column("ad").to_pylist() == ["x"] and late.column(JOIN_SIDE).to_pylist() == ["right"]
    # As the handler gets it (the operator's layout, its own columns named).
    handed = conformed_late(late, recipe.stateful.operator.late_layout).to_pylist()
    assert [(r["ad"], r["side"], r["classification"], r["watermark_ms"]) for r in handed] == [
        ("x", "right", "very_late", 100)
    ]
