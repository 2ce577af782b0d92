"""Transcript tests of the pure-Python reference model (SPEC 3.2-3.8).

Every expected output below is worked out by hand in the comments: these
tests pin the boundaries (half-open windows, ``W >= end`` fires, the late
rule, triggers, allowed lateness, accumulation modes) that the Spark
lowerings are later compared against.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.errors import PlanError, SchemaError, SourceClosedError
from krishiv_py.model.reference import (
    END_OF_TIME_MS,
    AggSpec,
    ReferenceMetrics,
    ReferenceModel,
)
from krishiv_py.plan.emission import Accumulation, Trigger
from krishiv_py.plan.watermarks import MAX_EVENT_MS
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.testing.compare import assert_same_rows, normalize_rows
from krishiv_py.testing.steps import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    run_reference,
    run_reference_late_events,
)

COUNT = AggSpec(name="n", func="count", column=None)
TOTAL = AggSpec(name="total", func="sum", column="v")
Window = TumblingWindow | SlidingWindow | SessionWindow
ON_WATERMARK = Trigger.on_watermark()


def model(
    window: Window,
    *,
    lag_ms: int = 0,
    keys: Sequence[str] = (),
    aggregates: Sequence[AggSpec] = (COUNT,),
    sources: Sequence[str] = ("main",),
) -> ReferenceModel:
    return ReferenceModel(
        window=window, event_time="ts", lag_ms=lag_ms, keys=keys, aggregates=aggregates, sources=sources
    )


def tumbling(
    size_ms: int = 10, *, lag_ms: int = 0, keys: Sequence[str] = (), sources: Sequence[str] = ("main",)
) -> ReferenceModel:
    return model(TumblingWindow(size_ms=size_ms), lag_ms=lag_ms, keys=keys, sources=sources)


def win(start: int, end: int, **extra: object) -> dict[str, object]:
    return {"window_start": start, "window_end": end, **extra}


def at(*times: int) -> list[dict[str, object]]:
    return [{"ts": t} for t in times]


# --- tumbling and sliding boundaries ---------------------------------------------------


def test_event_exactly_at_window_end_goes_to_next_window() -> None:
    m = tumbling(lag_ms=100)
    m.send(at(9, 10))
    assert m.close() == [win(0, 10, n=1), win(10, 20, n=1)]


def test_watermark_exactly_at_window_end_fires_it() -> None:
    m = tumbling()
    assert m.send(at(3)) == []  # W = 3
    assert m.advance_watermark(9) == []  # 9 < end 10: still open
    assert m.advance_watermark(10) == [win(0, 10, n=1)]  # W >= end
    assert m.watermark_ms == 10


def test_data_moving_watermark_to_end_fires_in_the_same_step() -> None:
    m = tumbling()
    m.send(at(3))
    # ts=10 is classified against W=3 (on time, window [10, 20)); then W=10 fires [0, 10).
    assert m.send(at(10)) == [win(0, 10, n=1)]


def test_mildly_late_event_joins_unfired_window() -> None:
    m = tumbling(lag_ms=5)
    m.send(at(12))  # W = 7
    assert m.send(at(3)) == []  # 3 < W=7 but [0, 10) retained (7 < 10); W stays 7
    assert m.advance_watermark(10) == [win(0, 10, n=1)]
    assert m.metrics.mildly_late_events == 1
    assert m.metrics.on_time_events == 1


def test_very_late_event_is_dropped_and_counted() -> None:
    m = tumbling()
    m.send(at(15))  # W = 15 (no window [0, 10) existed)
    assert m.send(at(5)) == []  # [0, 10) not retained: 15 >= 10
    assert m.watermark_ms == 15  # a dropped event does not move the watermark (5 < 15 anyway)
    assert m.close() == [win(10, 20, n=1)]
    assert m.metrics.very_late_events == 1
    assert m.metrics.input_rows == 2


def test_late_boundary_watermark_equal_to_end_drops() -> None:
    m = tumbling()
    m.advance_watermark(9)
    m.send(at(8))  # [0, 10) retained while W=9 < 10: mildly late
    m.advance_watermark(9)
    assert m.metrics.mildly_late_events == 1
    m.advance_watermark(10)  # fires [0, 10) with the one event
    m.send(at(9))  # now W=10 >= end: very late
    assert m.results == [win(0, 10, n=1)]
    assert m.metrics.very_late_events == 1


def test_negative_timestamps_use_floor_rule() -> None:
    m = tumbling()
    # W becomes 0 after the step, so [-20, -10) and [-10, 0) fire at once (end <= 0).
    assert m.send(at(-1, -10, -11, 0)) == [win(-20, -10, n=1), win(-10, 0, n=2)]
    assert m.close() == [win(0, 10, n=1)]


def test_tumbling_offset_with_negative_timestamp() -> None:
    m = model(TumblingWindow(size_ms=10, offset_ms=3), lag_ms=100)
    m.send(at(-1, 2, 3))  # -1 and 2 in [-7, 3); 3 in [3, 13)
    assert m.close() == [win(-7, 3, n=2), win(3, 13, n=1)]


def test_sliding_membership_is_size_over_slide() -> None:
    m = model(SlidingWindow(size_ms=30, slide_ms=10))
    m.send(at(25))
    assert m.close() == [win(0, 30, n=1), win(10, 40, n=1), win(20, 50, n=1)]


def test_sliding_late_event_kept_only_in_retained_windows() -> None:
    m = model(SlidingWindow(size_ms=30, slide_ms=10))
    m.send(at(35))  # W = 35; windows [10, 40), [20, 50), [30, 60)
    # ts=15 belongs to [-10, 20), [0, 30), [10, 40): only [10, 40) is retained (35 < 40).
    m.send(at(15))
    assert m.metrics.mildly_late_events == 1
    assert m.close() == [win(10, 40, n=2), win(20, 50, n=1), win(30, 60, n=1)]


# --- steps and watermarks ----------------------------------------------------------------


def test_empty_send_changes_nothing() -> None:
    m = tumbling(lag_ms=2)
    m.send(at(5))
    before = (m.watermark_ms, m.metrics, m.source_watermarks(), m.results)
    assert m.send([]) == []
    assert (m.watermark_ms, m.metrics, m.source_watermarks(), m.results) == before


def test_advance_watermark_fires_without_adding_rows() -> None:
    m = tumbling()
    m.send(at(1, 2, 11))
    assert m.advance_watermark(25) == [win(10, 20, n=1)]
    assert m.metrics.input_rows == 3


def test_lower_watermarks_are_ignored() -> None:
    m = tumbling()
    m.advance_watermark(50)
    assert m.advance_watermark(20) == []
    m.send(at(55))  # on time; W = 55
    m.send(at(52))  # mildly late; would give 52 < 55: ignored
    assert m.watermark_ms == 55
    assert m.metrics.watermark_advances == 2


def test_close_fires_everything_and_ends_time() -> None:
    m = tumbling(lag_ms=1_000)
    m.send(at(1, 500))
    assert m.close() == [win(0, 10, n=1), win(500, 510, n=1)]
    assert m.watermark_ms == END_OF_TIME_MS
    assert m.source_watermarks() == {"main": END_OF_TIME_MS}
    with pytest.raises(SourceClosedError):
        m.send(at(1))
    with pytest.raises(SourceClosedError):
        m.advance_watermark(1)
    assert m.close() == []  # closing again is a no-op step


def test_two_sources_overall_is_minimum() -> None:
    m = tumbling(sources=("a", "b"))
    m.send(at(100), source="a")
    assert m.watermark_ms is None  # b has no watermark yet
    assert m.source_watermarks() == {"a": 100}
    assert m.send(at(25), source="b") == []  # W = min(100, 25); [20, 30) still open
    assert m.watermark_ms == 25
    assert m.advance_watermark(30, source="b") == [win(20, 30, n=1)]
    assert m.close(source="a") == []  # min(END, 30) = 30
    assert m.close(source="b") == [win(100, 110, n=1)]
    assert m.metrics.watermark_advances == 3  # None -> 25 -> 30 -> END


def test_unknown_source_is_refused() -> None:
    with pytest.raises(PlanError, match="unknown source"):
        tumbling().send(at(1), source="other")


def test_null_event_time_is_invalid() -> None:
    m = tumbling()
    m.send(at(5))
    assert m.send([{"ts": None}, {"other": 1}]) == []
    assert m.watermark_ms == 5
    assert m.metrics.invalid_events == 2
    assert m.metrics.input_rows == 3
    assert m.close() == [win(0, 10, n=1)]


def test_datetime_event_times_are_exact_to_the_microsecond() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    m = tumbling(lag_ms=1)
    m.send([{"ts": epoch + timedelta(microseconds=9_999)}, {"ts": datetime(1970, 1, 1, 0, 0, 0, 10_999)}])
    assert m.watermark_ms == 9  # floor(10_999 / 1000) - 1
    assert m.close() == [win(0, 10, n=1), win(10, 20, n=1)]


def test_bad_event_time_type_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        tumbling().send([{"ts": "yesterday"}])


def test_future_events_are_counted_and_kept() -> None:
    m = tumbling()
    m.advance_watermark(0)
    m.send(at(60_000, 60_001))  # 60_001 > W + 60_000
    assert m.metrics.future_events == 1
    assert m.metrics.on_time_events == 2
    assert len(m.close()) == 1


def test_metrics_snapshot() -> None:
    m = tumbling()
    m.send(at(1, 12))
    m.send(at(3))
    assert m.metrics == ReferenceMetrics(
        input_rows=3,
        invalid_events=0,
        on_time_events=2,
        mildly_late_events=0,
        very_late_events=1,
        future_events=0,
        windows_emitted=1,
        retractions=0,
        watermark_advances=1,
    )


# --- keys and emit order -------------------------------------------------------------


def test_one_key() -> None:
    m = tumbling(keys=["k"])
    m.send([{"k": "a", "ts": 1}, {"k": "a", "ts": 2}])
    assert m.close() == [{"k": "a", **win(0, 10, n=2)}]


def test_many_keys_ordered_by_end_start_then_key_none_first() -> None:
    m = tumbling(keys=["k", "j"], lag_ms=100)
    rows: list[dict[str, object]] = [
        {"k": "b", "j": 1, "ts": 1},
        {"k": None, "j": 1, "ts": 2},
        {"k": "a", "j": 2, "ts": 3},
        {"k": "a", "j": 1, "ts": 4},
        {"j": 1, "ts": 15},  # missing k is None
        {"k": "a", "j": 2, "ts": 5},
    ]
    m.send(rows)
    assert m.close() == [
        {"k": None, "j": 1, **win(0, 10, n=1)},
        {"k": "a", "j": 1, **win(0, 10, n=1)},
        {"k": "a", "j": 2, **win(0, 10, n=2)},
        {"k": "b", "j": 1, **win(0, 10, n=1)},
        {"k": None, "j": 1, **win(10, 20, n=1)},
    ]


def test_duplicate_output_names_are_refused() -> None:
    with pytest.raises(PlanError, match="duplicate"):
        tumbling(keys=["n"])


# --- sessions ------------------------------------------------------------------------


def test_sessions_exactly_gap_apart_merge() -> None:
    m = model(SessionWindow(gap_ms=10), lag_ms=100)
    m.send(at(0, 10))  # [0, 10) and [10, 20) touch
    assert m.close() == [win(0, 20, n=2)]


def test_sessions_gap_plus_one_apart_do_not_merge() -> None:
    m = model(SessionWindow(gap_ms=10), lag_ms=100)
    m.send(at(0, 11))
    assert m.close() == [win(0, 10, n=1), win(11, 21, n=1)]


def test_out_of_order_event_bridges_two_sessions() -> None:
    m = model(SessionWindow(gap_ms=10), lag_ms=100)
    m.send(at(0, 20))  # [0, 10) and [20, 30): 10 < 20
    m.send(at(10))  # [10, 20) touches both
    assert m.close() == [win(0, 30, n=3)]


def test_sessions_are_per_key() -> None:
    m = model(SessionWindow(gap_ms=10), keys=["k"], lag_ms=100)
    m.send([{"k": "a", "ts": 0}, {"k": "b", "ts": 5}, {"k": "a", "ts": 8}])
    assert m.close() == [{"k": "b", **win(5, 15, n=1)}, {"k": "a", **win(0, 18, n=2)}]


def test_session_late_rule_uses_the_merged_session() -> None:
    m = model(SessionWindow(gap_ms=10))
    m.send(at(100))  # W = 100; session [100, 110)
    # proto [90, 100) has end <= W, but it touches [100, 110): the merged [90, 110) is
    # retained (100 < 110), so the row is mildly late (Flink's rule; Spark would drop it).
    m.send(at(90))
    m.send(at(79))  # proto [79, 89) touches nothing stored: 89 <= W, very late
    m.send(at(91))  # merges into [90, 110)
    assert m.metrics.very_late_events == 1
    assert m.metrics.mildly_late_events == 2
    assert m.late_events == [{"ts": 79, "classification": "very_late", "watermark_ms": 100}]
    assert m.advance_watermark(110) == [win(90, 110, n=3)]


def test_fired_session_state_is_gone() -> None:
    m = model(SessionWindow(gap_ms=10))
    m.send(at(0))
    # ts=10 is classified against W=0: it merges into [0, 20) before W moves to 10.
    assert m.send(at(10)) == []
    assert m.close() == [win(0, 20, n=2)]
    # Once [0, 10) has fired, its state is gone: a touching event starts afresh.
    m2 = model(SessionWindow(gap_ms=10))
    m2.send(at(0))
    m2.advance_watermark(10)  # fires [0, 10)
    m2.send(at(10))  # proto [10, 20): retained, starts a new session
    assert m2.close() == [win(10, 20, n=1)]
    assert m2.results == [win(0, 10, n=1), win(10, 20, n=1)]


def test_capped_sessions_never_span_the_cap() -> None:
    m = model(SessionWindow(gap_ms=10, max_duration_ms=30))
    m.send([{"ts": t} for t in range(0, 100, 5)])  # a source that never pauses
    m.close()
    assert [(r["window_start"], r["window_end"], r["n"]) for r in m.results] == [
        (0, 35, 6),  # 0..25: 30 would make the span 30
        (30, 65, 6),
        (60, 95, 6),
        (90, 105, 2),
    ]


# --- aggregates ----------------------------------------------------------------------


def aggregate_of(func: str, values: Sequence[object], *, times: Sequence[int] | None = None) -> object:
    spec = AggSpec(name="out", func=func, column="v")  # type: ignore[arg-type]
    stamps = times if times is not None else range(len(values))
    rows = [{"ts": t, "v": v} for t, v in zip(stamps, values, strict=True)]
    (result,) = ReferenceModel.bounded(
        rows, window=TumblingWindow(size_ms=1_000), event_time="ts", lag_ms=0, aggregates=[spec]
    )
    return result["out"]


def test_count_column_skips_nulls_count_star_does_not() -> None:
    assert aggregate_of("count", [1, None, 3]) == 2
    rows = [{"ts": 1, "v": None}, {"ts": 2, "v": None}]
    out = ReferenceModel.bounded(
        rows, window=TumblingWindow(size_ms=10), event_time="ts", lag_ms=0, aggregates=[COUNT]
    )
    assert out == [win(0, 10, n=2)]


def test_sum_and_avg() -> None:
    total = aggregate_of("sum", [1, None, 2])
    assert total == 3 and isinstance(total, int)
    assert aggregate_of("sum", [1.5, 2.5]) == 4.0
    assert aggregate_of("sum", [None, None]) is None
    assert aggregate_of("avg", [1, 2]) == 1.5
    assert aggregate_of("avg", [None]) is None


def test_min_max_with_nan_as_largest() -> None:
    nan = float("nan")
    assert math.isnan(aggregate_of("max", [1.0, nan, 3.0]))  # type: ignore[arg-type]
    assert aggregate_of("min", [1.0, nan, 3.0]) == 1.0
    assert math.isnan(aggregate_of("min", [nan, nan]))  # type: ignore[arg-type]
    assert aggregate_of("max", [None, "a", "b"]) == "b"
    assert aggregate_of("min", [None, None]) is None


def test_count_distinct_counts_one_nan_and_ignores_null() -> None:
    nan = float("nan")
    assert aggregate_of("count_distinct", [1.0, 1.0, nan, float("nan"), None, 2.0]) == 3


def test_first_last_by_event_time_then_arrival() -> None:
    # ts order: 3 ("y"), 5 ("a", arrived before "b"), 5 ("b"), 7 ("x").
    values, times = ["x", "a", "b", "y"], [7, 5, 5, 3]
    assert aggregate_of("first", values, times=times) == "y"
    assert aggregate_of("last", values, times=times) == "x"
    assert aggregate_of("first", ["a", "b"], times=[5, 5]) == "a"
    assert aggregate_of("last", ["a", "b"], times=[5, 5]) == "b"
    assert aggregate_of("last", ["a", None], times=[5, 5]) is None  # first/last keep nulls


def test_arrival_order_spans_steps_and_sources() -> None:
    m = model(
        TumblingWindow(size_ms=10),
        lag_ms=100,
        sources=("a", "b"),
        aggregates=[AggSpec(name="f", func="first", column="v"), AggSpec(name="l", func="last", column="v")],
    )
    m.send([{"ts": 5, "v": "from-b"}], source="b")
    m.send([{"ts": 5, "v": "from-a"}], source="a")
    m.close(source="a")
    assert m.close(source="b") == [win(0, 10, f="from-b", l="from-a")]


def test_agg_spec_validation() -> None:
    with pytest.raises(PlanError):
        AggSpec(name="x", func="sum", column=None)
    with pytest.raises(PlanError):
        AggSpec(name="x", func="median", column="v")  # type: ignore[arg-type]


def test_bounded_runs_one_step_then_close() -> None:
    rows = at(1, 11, 2)
    out = ReferenceModel.bounded(
        rows, window=TumblingWindow(size_ms=10), event_time="ts", lag_ms=0, aggregates=[COUNT]
    )
    # The step moves W to 11 and fires [0, 10); close fires [10, 20). Nothing is late.
    assert out == [win(0, 10, n=2), win(10, 20, n=1)]


# --- compare helpers -----------------------------------------------------------------


class FakeTable:
    def __init__(self, rows: list[dict[str, object]]) -> None:
        self._rows = rows

    def to_pylist(self) -> list[dict[str, object]]:
        return self._rows


def test_assert_same_rows_is_a_tolerant_multiset_comparison() -> None:
    t0 = datetime(1970, 1, 1, tzinfo=UTC)
    actual = FakeTable([{"x": 0.1 + 0.2, "t": t0 + timedelta(seconds=1)}, {"x": float("nan"), "t": t0}])
    assert_same_rows(actual, [{"t": 0, "x": float("nan")}, {"t": 1_000, "x": 0.3}])
    assert_same_rows([{"n": 3}], [{"n": 3.0}])


def test_assert_same_rows_reports_both_sides() -> None:
    with pytest.raises(AssertionError) as info:
        assert_same_rows([{"n": 1}, {"n": 1}, {"n": 2}], [{"n": 1}, {"n": 3}])
    message = str(info.value)
    assert "2 only in actual, 1 only in expected" in message
    assert "only in actual:\n  {'n': 1}\n  {'n': 2}\nonly in expected:\n  {'n': 3}" in message


def test_normalize_rows_keeps_sub_millisecond_datetimes_exact() -> None:
    t = datetime(1970, 1, 1, 0, 0, 0, 1_500, tzinfo=UTC)
    (row,) = normalize_rows([{"t": t}])
    assert row == (("t", 1.5),)
    with pytest.raises(AssertionError):
        assert_same_rows([{"t": t}], [{"t": 1}])


# --- properties ----------------------------------------------------------------------

times = st.integers(min_value=-10_000, max_value=10_000)
maybe_times = st.one_of(st.none(), times)
keys = st.sampled_from(["a", "b", None])
rows_strategy = st.lists(st.fixed_dictionaries({"ts": maybe_times, "k": keys}), max_size=40)


def total_count(results: Sequence[dict[str, object]]) -> int:
    return sum(int(row["n"]) for row in results)  # type: ignore[call-overload]


def valid(rows: Sequence[dict[str, object]]) -> int:
    return sum(row["ts"] is not None for row in rows)


@given(rows=rows_strategy, size=st.integers(1, 50), lag=st.integers(0, 100))
def test_tumbling_counts_every_event_once(rows: list[dict[str, object]], size: int, lag: int) -> None:
    out = ReferenceModel.bounded(
        rows, window=TumblingWindow(size_ms=size), event_time="ts", lag_ms=lag, keys=["k"], aggregates=[COUNT]
    )
    assert total_count(out) == valid(rows)


@given(rows=rows_strategy, slide=st.integers(1, 20), factor=st.integers(1, 5))
def test_sliding_counts_every_event_size_over_slide_times(
    rows: list[dict[str, object]], slide: int, factor: int
) -> None:
    window = SlidingWindow(size_ms=slide * factor, slide_ms=slide)
    out = ReferenceModel.bounded(rows, window=window, event_time="ts", lag_ms=0, aggregates=[COUNT])
    assert total_count(out) == factor * valid(rows)


windows = st.one_of(
    st.builds(TumblingWindow, size_ms=st.integers(1, 50), offset_ms=st.integers(-50, 50)),
    st.integers(1, 10).flatmap(
        lambda s: st.builds(SlidingWindow, size_ms=st.integers(s, 50), slide_ms=st.just(s))
    ),
    st.builds(SessionWindow, gap_ms=st.integers(1, 50)),
)


@given(rows=rows_strategy, window=windows, lag=st.integers(0, 100))
def test_bounded_run_never_drops(rows: list[dict[str, object]], window: Window, lag: int) -> None:
    m = model(window, lag_ms=lag, keys=["k"])
    m.send(rows)
    m.close()
    metrics = m.metrics
    assert metrics.very_late_events == 0
    assert metrics.on_time_events == valid(rows)
    assert metrics.invalid_events == len(rows) - valid(rows)
    if isinstance(window, SessionWindow):
        assert total_count(m.results) == valid(rows)


@settings(max_examples=200)
@given(
    rows=rows_strategy,
    window=windows,
    cuts=st.lists(st.integers(0, 40), max_size=6),
)
def test_results_do_not_depend_on_step_split_without_late_events(
    rows: list[dict[str, object]], window: Window, cuts: list[int]
) -> None:
    numbered = [{**row, "v": i} for i, row in enumerate(rows)]
    aggs = [
        COUNT,
        AggSpec(name="first", func="first", column="v"),
        AggSpec(name="last", func="last", column="v"),
        AggSpec(name="sum", func="sum", column="v"),
    ]
    huge = 10**9
    expected = ReferenceModel.bounded(
        numbered, window=window, event_time="ts", lag_ms=huge, keys=["k"], aggregates=aggs
    )
    m = model(window, lag_ms=huge, keys=["k"], aggregates=aggs)
    bounds = [0, *sorted(min(c, len(numbered)) for c in cuts), len(numbered)]
    for lo, hi in itertools.pairwise(bounds):
        m.send(numbered[lo:hi])
    m.close()
    assert m.metrics.very_late_events == 0
    assert m.metrics.mildly_late_events == 0
    assert_same_rows(m.results, expected)


@given(rows=rows_strategy, gap=st.integers(1, 30))
def test_sessions_of_a_key_never_touch(rows: list[dict[str, object]], gap: int) -> None:
    out = ReferenceModel.bounded(
        rows, window=SessionWindow(gap_ms=gap), event_time="ts", lag_ms=0, keys=["k"], aggregates=[COUNT]
    )
    by_key: dict[object, list[tuple[int, int]]] = {}
    for row in out:
        by_key.setdefault(row["k"], []).append((int(row["window_start"]), int(row["window_end"])))  # type: ignore[call-overload]
    for spans in by_key.values():
        spans.sort()
        assert all(prev_end < start for (_, prev_end), (start, _) in itertools.pairwise(spans))


def brute_force_sessions(rows: Sequence[dict[str, object]], gap: int) -> list[dict[str, object]]:
    """Sessions the slow way: sort each key's times, cut where two neighbours are > gap apart."""
    by_key: dict[object, list[int]] = {}
    for row in rows:
        if isinstance(row["ts"], int):
            by_key.setdefault(row["k"], []).append(row["ts"])
    out: list[dict[str, object]] = []
    for key, stamps in by_key.items():
        stamps.sort()
        run = [stamps[0]]
        for t in stamps[1:]:
            if t - run[-1] > gap:
                out.append({"k": key, **win(run[0], run[-1] + gap, n=len(run))})
                run = []
            run.append(t)
        out.append({"k": key, **win(run[0], run[-1] + gap, n=len(run))})
    return out


@given(rows=rows_strategy, gap=st.integers(1, 30), cuts=st.lists(st.integers(0, 40), max_size=4))
def test_sessions_match_brute_force_in_any_arrival_order(
    rows: list[dict[str, object]], gap: int, cuts: list[int]
) -> None:
    m = model(SessionWindow(gap_ms=gap), lag_ms=10**9, keys=["k"])
    bounds = [0, *sorted(min(c, len(rows)) for c in cuts), len(rows)]
    for lo, hi in itertools.pairwise(bounds):
        m.send(rows[lo:hi])
    m.close()
    assert_same_rows(m.results, brute_force_sessions(rows, gap))


# --- emission: allowed lateness, triggers, accumulation (SPEC 3.5-3.8) ---------------


def emitting(
    window: Window,
    *,
    lag_ms: int = 0,
    lateness: int = 0,
    trigger: Trigger = ON_WATERMARK,
    accumulation: Accumulation = "accumulating",
    tolerance: int = 60_000,
    keys: Sequence[str] = (),
    aggregates: Sequence[AggSpec] = (COUNT,),
    clock: FakeClock | None = None,
) -> ReferenceModel:
    return ReferenceModel(
        window=window,
        event_time="ts",
        lag_ms=lag_ms,
        keys=keys,
        aggregates=aggregates,
        allowed_lateness_ms=lateness,
        trigger=trigger,
        accumulation=accumulation,
        future_tolerance_ms=tolerance,
        clock=clock,
    )


class FakeClock:
    """Processing time that only moves when a test says so."""

    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


def emit(start: int, end: int, **extra: object) -> dict[str, object]:
    return win(start, end, **extra, kind="emit")


def retract(start: int, end: int, **extra: object) -> dict[str, object]:
    return win(start, end, **extra, kind="retract")


def valued(*pairs: tuple[int, int]) -> list[dict[str, object]]:
    return [{"ts": t, "v": v} for t, v in pairs]


# The Ripple seed's example: watermark 200, allowed lateness 60, future tolerance 50.
# Tumbling windows of 10 ms, lag 10. Step 1 moves W from None to 200; steps 2-3 run at W = 200
# and W = 270. Expected rows per step, for each accumulation mode.
RIPPLE_STEPS: list[list[dict[str, object]]] = [
    valued((185, 1), (192, 2), (210, 3)),  # all on time; W' = 210 - 10 = 200
    # 195: [190, 200) is retained (200 < 200 + 60): mildly late, re-fires with a correction.
    # 130: [130, 140) is gone (200 >= 140 + 60): very late. 280 > 200 + 50: future, on time.
    valued((195, 4), (130, 5), (280, 6)),  # W' = 280 - 10 = 270
    # 199: [190, 200) evicted at W = 270 (>= 260): very late. 212: [210, 220) kept (270 < 280).
    valued((199, 7), (212, 8)),
]
RIPPLE_EXPECTED: dict[str, list[list[dict[str, object]]]] = {
    "accumulating": [
        # sweep(200): [180, 190) and [190, 200) fire; [210, 220) is still open.
        [win(180, 190, n=1, total=1), win(190, 200, n=1, total=2)],
        # sweep(200): the late firing of [190, 200); sweep(270): [210, 220) fires.
        [win(190, 200, n=2, total=6), win(210, 220, n=1, total=3)],
        [win(210, 220, n=2, total=11)],  # late firing at sweep(270)
        [win(280, 290, n=1, total=6)],  # close
    ],
    "discarding": [
        [win(180, 190, n=1, total=1), win(190, 200, n=1, total=2)],
        [win(190, 200, n=1, total=4), win(210, 220, n=1, total=3)],
        [win(210, 220, n=1, total=8)],
        [win(280, 290, n=1, total=6)],
    ],
    "retracting": [
        [emit(180, 190, n=1, total=1), emit(190, 200, n=1, total=2)],
        [retract(190, 200, n=1, total=2), emit(190, 200, n=2, total=6), emit(210, 220, n=1, total=3)],
        [retract(210, 220, n=1, total=3), emit(210, 220, n=2, total=11)],
        [emit(280, 290, n=1, total=6)],
    ],
}
RIPPLE_LATE = [
    {"ts": 130, "v": 5, "classification": "very_late", "watermark_ms": 200},
    {"ts": 199, "v": 7, "classification": "very_late", "watermark_ms": 270},
]


@pytest.mark.parametrize("accumulation", ["accumulating", "discarding", "retracting"])
def test_ripple_seed_example(accumulation: Accumulation) -> None:
    m = emitting(
        TumblingWindow(size_ms=10),
        lag_ms=10,
        lateness=60,
        tolerance=50,
        accumulation=accumulation,
        aggregates=(COUNT, TOTAL),
    )
    got = [m.send(rows) for rows in RIPPLE_STEPS]
    assert m.watermark_ms == 270
    got.append(m.close())
    assert got == RIPPLE_EXPECTED[accumulation]
    assert m.late_events == RIPPLE_LATE
    retractions = 2 if accumulation == "retracting" else 0
    assert m.metrics == ReferenceMetrics(
        input_rows=8,
        invalid_events=0,
        on_time_events=4,
        mildly_late_events=2,
        very_late_events=2,
        future_events=1,
        windows_emitted=6,
        retractions=retractions,
        watermark_advances=3,
    )


def test_ripple_seed_example_through_a_pipeline() -> None:
    """``run_reference`` gives the model the pipeline's emission options and future tolerance."""

    def build(s: kp.Stream) -> kp.Stream:
        return (
            s.watermark("ts", 10, future_tolerance_ms=50)
            .tumbling_window(10)
            .allowed_lateness(60)
            .accumulation("retracting")
            .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("total"))
        )

    steps: list[Step] = [*(Send(rows) for rows in RIPPLE_STEPS), Close()]
    cumulative = run_reference("ts bigint, v bigint", build, steps)
    assert cumulative[-1] == [row for rows in RIPPLE_EXPECTED["retracting"] for row in rows]
    late = run_reference_late_events("ts bigint, v bigint", build, steps)
    assert late == [[], RIPPLE_LATE[:1], RIPPLE_LATE, RIPPLE_LATE]


def test_allowed_lateness_keeps_windows_until_end_plus_lateness() -> None:
    m = emitting(TumblingWindow(size_ms=10), lateness=5)
    m.send(at(3))
    assert m.advance_watermark(10) == [win(0, 10, n=1)]
    assert m.send(at(4)) == [win(0, 10, n=2)]  # 10 < 15: late firing in the same step
    assert m.advance_watermark(14) == []
    assert m.send(at(5)) == [win(0, 10, n=3)]  # 14 < 15 still
    m.advance_watermark(15)  # evicts [0, 10)
    assert m.send(at(6)) == []
    assert m.metrics.very_late_events == 1
    assert m.metrics.mildly_late_events == 2


def test_late_row_for_a_window_that_never_existed_fires_it_at_once() -> None:
    m = emitting(TumblingWindow(size_ms=10), lateness=100)
    m.advance_watermark(50)
    # [20, 30) is new but retained (50 < 130); its end <= W, so the same step's sweep fires it.
    assert m.send(at(25)) == [win(20, 30, n=1)]
    assert m.metrics.mildly_late_events == 1


def test_sliding_late_row_with_lateness_joins_only_retained_windows() -> None:
    m = emitting(SlidingWindow(size_ms=30, slide_ms=10), lateness=10)
    m.advance_watermark(45)
    # ts=15 is in [-10, 20), [0, 30), [10, 40); retained while 45 < end + 10: [10, 40) only.
    assert m.send(at(15)) == [win(10, 40, n=1)]
    assert m.close() == []


def test_on_every_element_fires_after_each_row_then_finally() -> None:
    m = emitting(TumblingWindow(size_ms=10), trigger=Trigger.on_every_element())
    # Element firings in arrival order; then sweep(15) gives [0, 10) its final firing, which
    # carries the full result again in accumulating mode.
    assert m.send(at(1, 2, 15)) == [win(0, 10, n=1), win(0, 10, n=2), win(10, 20, n=1), win(0, 10, n=2)]
    assert m.close() == [win(10, 20, n=1)]


def test_on_every_element_discarding_skips_empty_final_firing() -> None:
    m = emitting(TumblingWindow(size_ms=10), trigger=Trigger.on_every_element(), accumulation="discarding")
    assert m.send(at(1, 2, 15)) == [win(0, 10, n=1), win(0, 10, n=1), win(10, 20, n=1)]
    assert m.close() == []


def test_on_every_element_retracting() -> None:
    m = emitting(TumblingWindow(size_ms=10), trigger=Trigger.on_every_element(), accumulation="retracting")
    assert m.send(at(1, 2)) == [emit(0, 10, n=1), retract(0, 10, n=1), emit(0, 10, n=2)]
    assert m.close() == [retract(0, 10, n=2), emit(0, 10, n=2)]
    assert m.metrics.retractions == 2
    assert m.metrics.windows_emitted == 3


def test_on_every_element_fires_every_window_of_a_sliding_row() -> None:
    m = emitting(SlidingWindow(size_ms=20, slide_ms=10), lag_ms=100, trigger=Trigger.on_every_element())
    assert m.send(at(15)) == [win(0, 20, n=1), win(10, 30, n=1)]


def test_on_count_fires_every_n_rows_of_a_window() -> None:
    m = emitting(TumblingWindow(size_ms=10), lag_ms=100, trigger=Trigger.on_count(2), keys=["k"])
    rows = [{"k": k, "ts": t} for k, t in [("a", 1), ("b", 2), ("a", 3), ("a", 4), ("a", 5), ("b", 6)]]
    # a fires after its 2nd and 4th rows (ts 3 and 5), b after its 2nd (ts 6).
    assert m.send(rows) == [
        {"k": "a", **win(0, 10, n=2)},
        {"k": "a", **win(0, 10, n=4)},
        {"k": "b", **win(0, 10, n=2)},
    ]
    # The final firing always emits in accumulating mode, even with nothing pending.
    assert m.close() == [{"k": "a", **win(0, 10, n=4)}, {"k": "b", **win(0, 10, n=2)}]


def test_on_count_discarding() -> None:
    m = emitting(
        TumblingWindow(size_ms=10), lag_ms=100, trigger=Trigger.on_count(2), accumulation="discarding"
    )
    assert m.send(at(1, 2, 3, 4, 5)) == [win(0, 10, n=2), win(0, 10, n=2)]
    assert m.close() == [win(0, 10, n=1)]


def test_on_interval_fires_changed_windows_at_most_once_per_interval() -> None:
    clock = FakeClock()
    m = emitting(TumblingWindow(size_ms=10), trigger=Trigger.on_interval(100), clock=clock)
    assert m.send(at(1)) == [win(0, 10, n=1)]  # sweep(1): pending, never fired -> fires at 0
    clock.now_ms = 50
    assert m.send(at(2)) == []  # 50 - 0 < 100
    clock.now_ms = 100
    assert m.advance_watermark(3) == [win(0, 10, n=2)]  # sweep(2): 100 - 0 >= 100
    clock.now_ms = 500
    assert m.advance_watermark(4) == []  # nothing pending
    clock.now_ms = 550
    # sweep(4): the new [10, 20) fires early; sweep(12): the final firing of [0, 10).
    assert m.send(at(12)) == [win(10, 20, n=1), win(0, 10, n=2)]
    clock.now_ms = 560
    assert m.send(at(13)) == []  # [10, 20) fired at 550: too soon
    clock.now_ms = 650
    assert m.advance_watermark(14) == [win(10, 20, n=2)]
    assert m.close() == [win(10, 20, n=2)]


def test_on_interval_default_clock_fires_a_new_window_once() -> None:
    m = emitting(TumblingWindow(size_ms=10), trigger=Trigger.on_interval(10**9), accumulation="retracting")
    assert m.send(at(1, 2)) == [emit(0, 10, n=2)]
    assert m.send(at(3)) == []
    # sweep(3): [10, 20) is new and fires early; sweep(10): [0, 10)'s final firing.
    assert m.send(at(10)) == [emit(10, 20, n=1), retract(0, 10, n=2), emit(0, 10, n=3)]


# --- sessions with lateness and retractions ------------------------------------------


SESSION_STEPS: list[list[dict[str, object]]] = [
    at(0),  # session [0, 10); W' = 0
    at(30),  # [30, 40); W' = 30 fires [0, 10)
    # W = 30. proto [10, 20) touches [0, 10): merged [0, 20), mildly late, retained
    # (30 < 20 + 100); [0, 10) had emitted, so it is retracted; merged end <= 30 fires at once.
    at(10),
    # proto [20, 30) bridges [0, 20) and [30, 40): merged [0, 40) (end > 30: not fired yet).
    at(20),
]
SESSION_EXPECTED: dict[str, list[list[dict[str, object]]]] = {
    "accumulating": [[], [win(0, 10, n=1)], [win(0, 20, n=2)], [], [win(0, 40, n=4)]],
    "discarding": [[], [win(0, 10, n=1)], [win(0, 20, n=1)], [], [win(0, 40, n=2)]],
    "retracting": [
        [],
        [emit(0, 10, n=1)],
        [retract(0, 10, n=1), emit(0, 20, n=2)],
        [retract(0, 20, n=2)],
        [emit(0, 40, n=4)],
    ],
}


@pytest.mark.parametrize("accumulation", ["accumulating", "discarding", "retracting"])
def test_late_row_merging_sessions_retracts_what_they_emitted(accumulation: Accumulation) -> None:
    m = emitting(SessionWindow(gap_ms=10), lateness=100, accumulation=accumulation)
    got = [m.send(rows) for rows in SESSION_STEPS]
    got.append(m.close())
    assert got == SESSION_EXPECTED[accumulation]
    assert m.metrics.mildly_late_events == 2
    assert m.metrics.retractions == (2 if accumulation == "retracting" else 0)


def test_session_retention_uses_merged_end_plus_lateness() -> None:
    m = emitting(SessionWindow(gap_ms=10), lateness=5)
    m.send(at(100))  # W = 100
    m.advance_watermark(114)  # fires [100, 110); kept while W < 115
    # proto [85, 95) alone: 114 >= 95 + 5, very late. proto [95, 105) merges with [100, 110):
    # 114 < 110 + 5, kept; the merged [95, 110) fires at once (end <= W).
    assert m.send(at(85)) == []
    assert m.send(at(95)) == [win(95, 110, n=2)]
    m.advance_watermark(115)  # evicts [95, 110)
    assert m.send(at(96)) == []  # proto [96, 106): nothing to merge with, very late
    assert [e["ts"] for e in m.late_events] == [85, 96]


def test_discarding_session_bounds_span_all_rows() -> None:
    m = emitting(
        SessionWindow(gap_ms=10), lag_ms=100, trigger=Trigger.on_every_element(), accumulation="discarding"
    )
    # ts=5 merges into [0, 15): the firing counts only the new row, the bounds cover both.
    assert m.send(at(0, 5)) == [win(0, 10, n=1), win(0, 15, n=1)]
    assert m.close() == []


# --- late events, invalid rows, future rows ------------------------------------------


def test_invalid_rows_are_late_events_with_the_watermark_they_met() -> None:
    m = tumbling()
    m.send([{"ts": None, "v": 1}])
    m.send(at(5))
    m.send([{"ts": MAX_EVENT_MS + 1}, {"v": 2}])
    assert m.late_events == [
        {"ts": None, "v": 1, "classification": "invalid", "watermark_ms": None},
        {"ts": MAX_EVENT_MS + 1, "classification": "invalid", "watermark_ms": 5},
        {"v": 2, "classification": "invalid", "watermark_ms": 5},
    ]
    assert m.watermark_ms == 5
    assert m.metrics.invalid_events == 3


def test_late_events_are_copies() -> None:
    m = tumbling()
    m.send([{"ts": None}])
    m.late_events[0]["ts"] = 1
    assert m.late_events[0]["ts"] is None


def test_future_events_with_a_custom_tolerance() -> None:
    m = emitting(TumblingWindow(size_ms=10), tolerance=10)
    m.send(at(1_000))  # W is None: nothing is in the future yet
    m.send(at(1_010, 1_011, 990))  # W = 1_000: only 1_011 > 1_000 + 10; 990 is very late
    assert m.metrics.future_events == 1
    assert m.metrics.on_time_events == 3
    assert m.metrics.very_late_events == 1
    zero = emitting(TumblingWindow(size_ms=10), tolerance=0)
    zero.advance_watermark(0)
    zero.send(at(0, 1))
    assert zero.metrics.future_events == 1


@pytest.mark.parametrize(
    "options",
    [
        {"accumulation": "upserting"},
        {"trigger": "on_count"},
        {"allowed_lateness_ms": -1},
        {"future_tolerance_ms": 1.5},
    ],
)
def test_emission_options_are_validated(options: dict[str, object]) -> None:
    with pytest.raises(PlanError):
        ReferenceModel(
            window=TumblingWindow(size_ms=10),
            event_time="ts",
            lag_ms=0,
            aggregates=[COUNT],
            **options,  # type: ignore[arg-type]
        )


def test_retracting_refuses_an_output_column_named_kind() -> None:
    with pytest.raises(PlanError, match="kind"):
        emitting(TumblingWindow(size_ms=10), keys=["kind"], accumulation="retracting")


# --- emission properties on random streams -------------------------------------------

stream_row = st.fixed_dictionaries(
    {"ts": st.one_of(st.none(), st.integers(-20, 120)), "k": st.sampled_from(["a", "b"])}
)
stream_step = st.one_of(
    st.lists(stream_row, max_size=8).map(Send),
    st.integers(-20, 130).map(AdvanceWatermark),
)
triggers = st.one_of(
    st.just(ON_WATERMARK),
    st.just(Trigger.on_every_element()),
    st.integers(2, 4).map(Trigger.on_count),
)
WindowId = tuple[object, object, object]


def play(
    steps: Sequence[Step],
    window: Window,
    *,
    lag: int,
    lateness: int,
    trigger: Trigger,
    accumulation: Accumulation,
) -> tuple[ReferenceModel, int]:
    """Play ``steps``; row ``i`` carries ``v = 2 ** i``, so a window's sum names its rows."""
    m = emitting(
        window,
        lag_ms=lag,
        lateness=lateness,
        trigger=trigger,
        accumulation=accumulation,
        keys=["k"],
        aggregates=(COUNT, TOTAL),
    )
    sent = 0
    for step in [*steps, Close()]:
        if isinstance(step, Send):
            m.send([{**row, "v": 2 ** (sent + i)} for i, row in enumerate(step.rows)])
            sent += len(step.rows)
        elif isinstance(step, AdvanceWatermark):
            m.advance_watermark(step.ts_ms)
        else:
            m.close()
    return m, sent


def window_of(row: dict[str, object]) -> WindowId:
    return (row["k"], row["window_start"], row["window_end"])


def as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def last_results(results: Sequence[dict[str, object]]) -> dict[WindowId, tuple[int, int]]:
    """The last (count, sum) each window emitted."""
    return {window_of(r): (as_int(r["n"]), as_int(r["total"])) for r in results if r.get("kind") != "retract"}


emission_cases = {
    "steps": st.lists(stream_step, max_size=6),
    "window": windows,
    "lag": st.integers(0, 20),
    "lateness": st.sampled_from([0, 10, 30, 60]),
    "trigger": triggers,
}


def check_retractions_net_to_the_accumulating_result(
    steps: list[Step], window: Window, lag: int, lateness: int, trigger: Trigger
) -> None:
    acc, _ = play(steps, window, lag=lag, lateness=lateness, trigger=trigger, accumulation="accumulating")
    ret, _ = play(steps, window, lag=lag, lateness=lateness, trigger=trigger, accumulation="retracting")
    # Retracting emits what accumulating emits, in the same order.
    emits = [{k: v for k, v in r.items() if k != "kind"} for r in ret.results if r["kind"] == "emit"]
    assert emits == acc.results
    net: dict[WindowId, list[int]] = {}
    last_kind: dict[WindowId, object] = {}
    for row in ret.results:
        sign = 1 if row["kind"] == "emit" else -1
        if sign < 0:  # a retraction repeats the window's previous emit
            assert last_kind.get(window_of(row)) == "emit"
        totals = net.setdefault(window_of(row), [0, 0])
        totals[0] += sign * as_int(row["n"])
        totals[1] += sign * as_int(row["total"])
        last_kind[window_of(row)] = row["kind"]
    final = last_results(acc.results)
    for window_id, (n, total) in net.items():
        if last_kind[window_id] == "emit":
            assert (n, total) == final[window_id]
        else:  # a session absorbed by a merge: nothing of it is left downstream
            assert (n, total) == (0, 0)


@settings(max_examples=100)
@given(**emission_cases)
def test_retractions_net_to_the_accumulating_result(
    steps: list[Step], window: Window, lag: int, lateness: int, trigger: Trigger
) -> None:
    check_retractions_net_to_the_accumulating_result(steps, window, lag, lateness, trigger)


# Dense, out-of-order session streams with long lateness: late rows often merge fired sessions.
session_steps = st.lists(
    st.lists(
        st.fixed_dictionaries({"ts": st.integers(0, 100), "k": st.sampled_from(["a", "b"])}),
        min_size=1,
        max_size=6,
    ).map(Send),
    min_size=3,
    max_size=6,
)


@settings(max_examples=100)
@given(steps=session_steps, gap=st.integers(3, 15), lateness=st.integers(20, 100), trigger=triggers)
def test_session_merges_retract_to_the_accumulating_result(
    steps: list[Step], gap: int, lateness: int, trigger: Trigger
) -> None:
    check_retractions_net_to_the_accumulating_result(steps, SessionWindow(gap_ms=gap), 0, lateness, trigger)


@settings(max_examples=100)
@given(**emission_cases)
def test_discarding_firings_add_up_to_the_final_results(
    steps: list[Step], window: Window, lag: int, lateness: int, trigger: Trigger
) -> None:
    dis, _ = play(steps, window, lag=lag, lateness=lateness, trigger=trigger, accumulation="discarding")
    acc, _ = play(steps, window, lag=lag, lateness=lateness, trigger=trigger, accumulation="accumulating")
    added: dict[WindowId, int] = {}
    seen: dict[WindowId, int] = {}
    for row in dis.results:
        added[window_of(row)] = added.get(window_of(row), 0) + as_int(row["total"])
        seen[window_of(row)] = seen.get(window_of(row), 0) | as_int(row["total"])  # rows as bits
        assert as_int(row["n"]) == bin(as_int(row["total"])).count("1")
    assert added == seen  # no row is emitted twice by a window
    final = {w: total for w, (_, total) in last_results(acc.results).items()}
    if isinstance(window, SessionWindow):
        # A merged session emits only its pending rows; over all sessions every row shows once.
        assert sum(added.values()) == functools.reduce(operator.or_, final.values(), 0)
    else:
        assert added == final


@settings(max_examples=100)
@given(**emission_cases, accumulation=st.sampled_from(["accumulating", "retracting"]))
def test_nothing_is_lost(
    steps: list[Step], window: Window, lag: int, lateness: int, trigger: Trigger, accumulation: Accumulation
) -> None:
    m, sent = play(steps, window, lag=lag, lateness=lateness, trigger=trigger, accumulation=accumulation)
    in_windows = 0
    for _, total in last_results(m.results).values():
        in_windows |= total  # a sliding row counts once however many windows hold it
    late = 0
    for event in m.late_events:
        late |= as_int(event["v"])
    assert in_windows & late == 0
    assert in_windows | late == 2**sent - 1
    metrics = m.metrics
    assert bin(in_windows).count("1") == metrics.on_time_events + metrics.mildly_late_events
    assert len(m.late_events) == metrics.very_late_events + metrics.invalid_events
    assert metrics.input_rows == sent
