"""The window over a changelog (``stateful/window_changes.py``), without Spark, and what the plan allows.

The property suite (tests/test_chain_properties.py) checks it after
retracting joins against the composition model; these pin its rules one by
one: a retraction withdraws one equal row, a fired window is corrected by
retraction, a session splits when its bridging row goes, ``min``/``max``
stay exact, a retraction with nothing to withdraw is counted and dropped.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.errors import PlanError
from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.window_changes import ChangesWindowKernel
from krishiv_py.types import to_schema

COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64())
TOP = AggSpec(name="top", func="max", column="v", out_type=pa.int64(), in_type=pa.int64())
LOW = AggSpec(name="low", func="min", column="v", out_type=pa.int64(), in_type=pa.int64())


class Rows:
    """Batches of changes for one kernel, numbered in arrival order."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, *changes: tuple[str, int, int | None, str]) -> pa.Table:
        """Each change: (key, event time ms, v, kind)."""
        table = pa.table(
            {
                "k": pa.array([c[0] for c in changes], pa.string()),
                "v": pa.array([c[2] for c in changes], pa.int64()),
                BATCH_TS: pa.array([c[1] * 1000 for c in changes], pa.int64()),
                RESULT_KIND: pa.array([c[3] for c in changes], pa.string()),
                SEQ: pa.array(range(self.seq, self.seq + len(changes)), pa.int64()),
            }
        )
        self.seq += len(changes)
        return table


def _kernel(
    window: Any = None, aggs: tuple[AggSpec, ...] = (COUNT,), lateness: int = 100
) -> ChangesWindowKernel:
    return ChangesWindowKernel(
        keys=("k",),
        window=window or TumblingWindow(size_ms=10),
        aggs=aggs,
        allowed_lateness_ms=lateness,
        accumulation="retracting",
    )


def _out(table: pa.Table, *names: str) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in (*names, RESULT_KIND)) for r in table.to_pylist()]


def test_a_retraction_after_the_window_fired_retracts_and_emits_the_new_value() -> None:
    kernel, rows = _kernel(), Rows()
    state, _ = kernel.step(None, rows(("a", 3, 1, "emit"), ("a", 4, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(), 10, 0)
    assert _out(out.results, "window_start", "n") == [(0, 2, "emit")]
    state, out = kernel.step(state, rows(("a", 4, 1, "retract")), 10, 0)
    assert _out(out.results, "window_start", "n") == [(0, 2, "retract"), (0, 1, "emit")]
    state, out = kernel.step(state, rows(("a", 3, 1, "retract")), 10, 0)
    assert _out(out.results, "n") == [(1, "retract")]  # the window lost its last row
    assert kernel.state_rows(state) == 0


def test_an_emit_and_its_retraction_in_one_batch_cancel() -> None:
    kernel, rows = _kernel(), Rows()
    batch = rows(("a", 3, 7, "retract"), ("a", 3, 7, "emit"), ("a", 5, 2, "emit"))  # any order
    state, out = kernel.step(None, batch, None, 0)
    state, out = kernel.step(state, rows(), 10, 0)
    assert _out(out.results, "n") == [(1, "emit")]
    assert out.arithmetic_errors == 0


def test_a_retraction_with_no_equal_row_is_counted_and_dropped() -> None:
    kernel, rows = _kernel(aggs=(TOP,)), Rows()
    state, _ = kernel.step(None, rows(("a", 3, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(("a", 3, 2, "retract"), ("b", 3, 1, "retract")), 10, 0)
    assert out.arithmetic_errors == 2
    assert _out(out.results, "k", "top") == [("a", 1, "emit")]


def test_a_retraction_withdraws_a_row_equal_in_the_columns_the_window_reads() -> None:
    kernel, rows = _kernel(), Rows()  # a count reads no column: any row of the key and time goes
    state, _ = kernel.step(None, rows(("a", 3, 1, "emit"), ("a", 3, 5, "emit")), None, 0)
    state, out = kernel.step(state, rows(("a", 3, 2, "retract")), 10, 0)
    assert out.arithmetic_errors == 0
    assert _out(out.results, "n") == [(1, "emit")]


def test_min_and_max_stay_exact_when_their_row_goes() -> None:
    kernel, rows = _kernel(aggs=(TOP, LOW)), Rows()
    state, _ = kernel.step(None, rows(("a", 1, 5, "emit"), ("a", 2, 9, "emit"), ("a", 3, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(), 10, 0)
    assert _out(out.results, "top", "low") == [(9, 1, "emit")]
    state, out = kernel.step(state, rows(("a", 2, 9, "retract"), ("a", 3, 1, "retract")), 10, 0)
    assert _out(out.results, "top", "low") == [(9, 1, "retract"), (5, 5, "emit")]


def test_a_session_splits_when_the_row_bridging_it_goes() -> None:
    kernel, rows = _kernel(window=SessionWindow(gap_ms=5)), Rows()
    state, _ = kernel.step(None, rows(("a", 0, 1, "emit"), ("a", 4, 1, "emit"), ("a", 8, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(), 20, 0)
    assert _out(out.results, "window_start", "window_end", "n") == [(0, 13_000, 3, "emit")]
    state, out = kernel.step(state, rows(("a", 4, 1, "retract")), 20, 0)
    assert sorted(_out(out.results, "window_start", "window_end", "n")) == [
        (0, 5_000, 1, "emit"),
        (0, 13_000, 3, "retract"),
        (8_000, 13_000, 1, "emit"),
    ]


def test_a_sliding_window_corrects_every_window_of_the_row() -> None:
    kernel, rows = _kernel(window=SlidingWindow(size_ms=10, slide_ms=5)), Rows()
    state, _ = kernel.step(None, rows(("a", 6, 1, "emit"), ("a", 7, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(), 15, 0)
    assert sorted(_out(out.results, "window_start", "n")) == [(0, 2, "emit"), (5_000, 2, "emit")]
    state, out = kernel.step(state, rows(("a", 7, 1, "retract")), 15, 0)
    assert sorted(_out(out.results, "window_start", "n")) == [
        (0, 1, "emit"),
        (0, 2, "retract"),
        (5_000, 1, "emit"),
        (5_000, 2, "retract"),
    ]


def test_a_row_whose_windows_went_is_very_late_and_a_window_goes_after_its_lateness() -> None:
    kernel, rows = _kernel(lateness=5), Rows()
    state, _ = kernel.step(None, rows(("a", 3, 1, "emit")), None, 0)
    state, out = kernel.step(state, rows(), 15, 0)  # fired at 10, gone at 15
    assert kernel.state_rows(state) == 0 or kernel.next_due(state)[0] > 15
    state, out = kernel.step(state, rows(("a", 4, 1, "emit"), ("a", 12, 1, "emit")), 15, 0)
    assert out.very_late.tolist() == [0]
    assert out.mildly_late == 1


def test_first_and_last_are_refused() -> None:
    first = AggSpec(name="f", func="first", column="v", out_type=pa.int64(), in_type=pa.int64())
    with pytest.raises(ValueError, match="first/last"):
        _kernel(aggs=(first,))


# --- what the plan allows after a retracting join ------------------------------------------------


def _retracting_join() -> Stream:
    def stream(name: str, ddl: str) -> Stream:
        return Stream(None, n.MemorySource(name=name, schema=to_schema(ddl), path=f"/{name}")).watermark(
            "t", 0
        )

    left = stream("views", "user string, t bigint, ad string").key_by("user")
    right = stream("clicks", "user string, t bigint, click string").key_by("user")
    joined = left.interval_join(right, between=(0, 10), how="left").allowed_lateness(50)
    return joined.accumulation("retracting")


def test_a_window_over_a_retracting_join_must_retract_itself() -> None:
    windowed = _retracting_join().key_by("ad").tumbling_window(10)
    with pytest.raises(PlanError, match=r"needs \.accumulation\('retracting'\) itself"):
        windowed.agg(kp.count(kp.col("click")).alias("clicks"))
    built = windowed.accumulation("retracting").agg(kp.count(kp.col("click")).alias("clicks"))
    assert RESULT_KIND in built.columns


def test_a_window_of_windows_that_may_lose_every_row_must_retract_itself() -> None:
    """Its windows may lose every row they fired with (the first window's results are withdrawn
    when the join's rows are): only a retraction withdraws what it emitted."""
    counts = _retracting_join().key_by("ad").tumbling_window(10).accumulation("retracting")
    per_ad = counts.agg(kp.count(kp.col("click")).alias("clicks"))
    with pytest.raises(
        PlanError, match=r"rows may be withdrawn .* needs \.accumulation\('retracting'\) itself"
    ):
        per_ad.tumbling_window(20).agg(kp.sum(kp.col("clicks")).alias("total"))
    latest = _retracting_join().top_n(1, by="t", per="key", keys=("user",))
    with pytest.raises(PlanError, match=r"over an aggregation or a top-N per key .* needs \.accumulation"):
        latest.tumbling_window(10).agg(kp.count(kp.col("*")))
    built = per_ad.tumbling_window(20).accumulation("retracting").agg(kp.sum(kp.col("clicks")).alias("total"))
    assert RESULT_KIND in built.columns


def test_a_top_n_per_key_takes_a_retracting_joins_rows() -> None:
    top = _retracting_join().top_n(1, by="t", per="key", keys=("ad",))
    assert list(top.columns).count(RESULT_KIND) == 1


def test_what_does_not_take_a_retracting_join_yet_says_so() -> None:
    joined = _retracting_join()
    with pytest.raises(PlanError, match="EventSlidingWindow there is not supported yet"):
        joined.key_by("ad").event_sliding_window(10)
    other = Stream(None, n.MemorySource(name="ads", schema=to_schema("ad string, at bigint"), path="/ads"))
    with pytest.raises(PlanError, match=r"the join needs \.accumulation\('retracting'\)"):  # it takes them
        joined.key_by("ad").interval_join(other.watermark("at", 0).key_by("ad"), between=(0, 5)).lower()
    with pytest.raises(PlanError, match="first\\(\\)/last\\(\\)"):
        joined.key_by("ad").agg(kp.first(kp.col("click")).alias("c"))
    with pytest.raises(PlanError, match="first\\(\\)/last\\(\\)"):
        joined.key_by("ad").tumbling_window(10).accumulation("retracting").agg(
            kp.last(kp.col("click")).alias("c")
        )
