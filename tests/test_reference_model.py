"""Transcript tests of the pure-Python reference model (SPEC 3.2-3.4, 3.6 with L = 0).

Every expected output below is worked out by hand in the comments: these
tests pin the boundaries (half-open windows, ``W >= end`` fires, the late
rule) that the Spark lowerings are later compared against.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krishiv_py.errors import PlanError, SchemaError, SourceClosedError
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.testing.compare import assert_same_rows, normalize_rows
from krishiv_py.testing.reference import (
    END_OF_TIME_MS,
    AggSpec,
    ReferenceMetrics,
    ReferenceModel,
)

COUNT = AggSpec(name="n", func="count", column=None)
Window = TumblingWindow | SlidingWindow | SessionWindow


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


def test_session_late_rule_uses_the_event_proto_window() -> None:
    m = model(SessionWindow(gap_ms=10))
    m.send(at(100))  # W = 100; session [100, 110)
    m.send(at(90))  # proto [90, 100): end <= W, very late
    m.send(at(91))  # proto [91, 101): kept (mildly late), merges into [91, 110)
    assert m.metrics.very_late_events == 1
    assert m.metrics.mildly_late_events == 1
    assert m.advance_watermark(110) == [win(91, 110, n=2)]


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


def test_capped_sessions_are_not_modelled() -> None:
    with pytest.raises(PlanError, match="capped sessions"):
        model(SessionWindow(gap_ms=10, max_duration_ms=100))


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
