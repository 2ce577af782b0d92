"""Transcript tests of the pure-Python reference model of event-time joins (docs/joins.md).

Each test is a small scenario whose expected rows are worked out by hand in
the comments, from the rules in docs/joins.md ("The rules, precisely"):
rows meet the watermark ``W`` that held before their step; a match is
emitted in the step where its second row arrives; outer rows wait for the
first sweep with ``W' > bound``; windows fire at ``W' >= end``; as-of rows
at ``W' > l``. Some scenarios are ported from peers (Flink's
IntervalJoinOperatorTest, Spark's StreamingInnerJoinSuite, Kafka Streams'
KStreamKStreamJoinTest), translated to these rules. Rows are compared per
step as multisets; a row's column order is part of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.model.joins import END_OF_TIME_MS, JoinModel
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

Rows = Sequence[dict[str, object]]


def make(kind: str, **options: Any) -> JoinModel:
    """A join keyed on ``k``: left rows (k, lt, lv), right rows (k, rt, rv), no lag."""
    settings: dict[str, Any] = {
        "kind": kind,
        "keys": ["k"],
        "left_time": "lt",
        "right_time": "rt",
        "left_columns": ["k", "lt", "lv"],
        "right_columns": ["k", "rt", "rv"],
        "left_lag_ms": 0,
        "right_lag_ms": 0,
    }
    settings.update(options)
    return JoinModel(**settings)


def interval(between: tuple[int, int], how: str = "inner", **options: Any) -> JoinModel:
    return make("interval", between=between, how=how, **options)


def windowed(window: TumblingWindow | SlidingWindow, how: str = "inner", **options: Any) -> JoinModel:
    return make("window", window=window, how=how, **options)


def as_of(how: str = "inner", **options: Any) -> JoinModel:
    return make("as_of", how=how, **options)


def L(k: object, t: object, v: object = None) -> dict[str, object]:
    return {"k": k, "lt": t, "lv": v}


def R(k: object, t: object, v: object = None) -> dict[str, object]:
    return {"k": k, "rt": t, "rv": v}


def J(
    k: object, lt: object, rt: object, lv: object = None, rv: object = None, kind: str | None = None
) -> dict[str, object]:
    """A joined row of an interval or as-of join (a padded one has None for the missing side)."""
    row: dict[str, object] = {"k": k, "lt": lt, "lv": lv, "rt": rt, "rv": rv}
    return row if kind is None else {**row, "kind": kind}


def WJ(
    k: object,
    window: tuple[int, int],
    lt: object,
    rt: object,
    lv: object = None,
    rv: object = None,
    kind: str | None = None,
) -> dict[str, object]:
    """A joined row of a window join."""
    row: dict[str, object] = {"k": k, "window_start": window[0], "window_end": window[1]}
    row.update({"lt": lt, "lv": lv, "rt": rt, "rv": rv})
    return row if kind is None else {**row, "kind": kind}


def WS(
    k: object, window: tuple[int, int], lt: object, lv: object = None, kind: str | None = None
) -> dict[str, object]:
    """A semi or anti row of a window join: left columns only."""
    row: dict[str, object] = {"k": k, "window_start": window[0], "window_end": window[1], "lt": lt, "lv": lv}
    return row if kind is None else {**row, "kind": kind}


def same(actual: Rows, expected: Rows) -> None:
    """Equal as multisets of rows, column order included."""
    assert Counter(map(repr, actual)) == Counter(map(repr, expected)), (
        f"\nactual:   {list(actual)}\nexpected: {list(expected)}"
    )


def late(side: str, classification: str, w: int | None, **columns: object) -> dict[str, object]:
    return {"side": side, **columns, "classification": classification, "watermark_ms": w}


# --- interval join: bounds ---------------------------------------------------------------


def test_interval_bounds_are_inclusive_at_both_edges() -> None:
    # between=(-5, 10): a left row at 100 meets right rows in [95, 110].
    m = interval((-5, 10))
    out = m.step(left=[L("a", 100)], right=[R("a", 94), R("a", 95), R("a", 110), R("a", 111)])
    same(out, [J("a", 100, 95), J("a", 100, 110)])


@pytest.mark.parametrize(
    ("between", "inside", "outside"),
    [
        ((-10, -5), [90, 95], [89, 96]),  # both bounds negative: the right row comes first
        ((5, 10), [105, 110], [104, 111]),  # both positive: it comes after
        ((0, 0), [100], [99, 101]),  # equal times only
    ],
)
def test_interval_negative_and_positive_bounds(
    between: tuple[int, int], inside: list[int], outside: list[int]
) -> None:
    m = interval(between)
    out = m.step(left=[L("a", 100)], right=[R("a", t) for t in inside + outside])
    same(out, [J("a", 100, t) for t in inside])


@pytest.mark.parametrize(
    ("between", "pairs"),
    [
        # Flink IntervalJoinOperatorTest: left and right at 1..4, bounds inclusive.
        ((-1, 1), [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3), (3, 4), (4, 3), (4, 4)]),
        ((1, 2), [(1, 2), (1, 3), (2, 3), (2, 4), (3, 4)]),
        ((-2, -1), [(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)]),
    ],
)
def test_flink_interval_join_one_to_four(between: tuple[int, int], pairs: list[tuple[int, int]]) -> None:
    m = interval(between)
    same(
        m.step(left=[L("k", t) for t in (1, 2, 3, 4)], right=[R("k", t) for t in (1, 2, 3, 4)]),
        [J("k", lt, rt) for lt, rt in pairs],
    )


def test_flink_interval_join_interleaved_steps_match_when_the_second_row_arrives() -> None:
    # between=(-1, 1); left 1, right 1, left 2, right 2, ... one row per step, lag 0.
    m = interval((-1, 1))
    assert m.send([L("k", 1)], side="left") == []  # W None: the right side has no watermark yet
    same(m.send([R("k", 1)], side="right"), [J("k", 1, 1)])  # W' = min(1, 1) = 1
    same(m.send([L("k", 2)], side="left"), [J("k", 2, 1)])  # W = 1: on time
    same(m.send([R("k", 2)], side="right"), [J("k", 1, 2), J("k", 2, 2)])
    same(m.send([L("k", 3)], side="left"), [J("k", 3, 2)])
    same(m.send([R("k", 3)], side="right"), [J("k", 2, 3), J("k", 3, 3)])
    same(m.send([L("k", 4)], side="left"), [J("k", 4, 3)])
    same(m.send([R("k", 4)], side="right"), [J("k", 3, 4), J("k", 4, 4)])
    assert len(m.results) == 10
    assert m.metrics == {
        "on_time_events": 8,
        "mildly_late_events": 0,
        "very_late_events": 0,
        "invalid_events": 0,
        "emitted": 10,
        "retractions": 0,
    }
    assert m.watermark_ms == 4


def test_kafka_streams_join_window_is_inclusive_both_ways() -> None:
    # KStreamKStreamJoinTest (JoinWindows of 100 ms before and after): keys 0..3 on the left
    # at 1000; on the right key 0 at 899, key 1 at 900, key 2 at 1100, key 3 at 1101.
    m = interval((-100, 100))
    out = m.step(
        left=[L(k, 1000, f"A{k}") for k in range(4)],
        right=[R(0, 899, "a0"), R(1, 900, "a1"), R(2, 1100, "a2"), R(3, 1101, "a3")],
    )
    same(out, [J(1, 1000, 900, "A1", "a1"), J(2, 1000, 1100, "A2", "a2")])


def test_spark_time_range_join_with_watermark_two_side_conditions() -> None:
    # Spark StreamingInnerJoinSuite, "stream stream inner join with time range - with
    # watermark - two side conditions": leftTime BETWEEN rightTime - 10s AND rightTime + 5s,
    # i.e. r in [l - 5s, l + 10s]; left lag 20s, right lag 30s. Times in seconds * 1000.
    s = 1000
    m = interval((-5 * s, 10 * s), left_lag_ms=20 * s, right_lag_ms=30 * s)
    assert m.send([L(1, 20 * s)], side="left") == []
    out = m.send([R(1, t * s) for t in (14, 15, 25, 26, 30, 31)], side="right")
    same(out, [J(1, 20 * s, t * s) for t in (15, 25, 26, 30)])
    assert m.send([R(1, 60 * s)], side="right") == []  # matches nothing on the left
    # W = min(20 - 20, 60 - 30) = 0: nothing is late.
    out = m.send([L(1, t * s) for t in (49, 50, 65, 66)], side="left")
    same(out, [J(1, 50 * s, 60 * s), J(1, 65 * s, 60 * s)])
    # W = min(66 - 20, 60 - 30) = 30s. Left rows at 10s and 11s would match the right rows at
    # 14s and 15s, but they are late (L = 0): very late, as Spark drops them.
    assert m.watermark_ms == 30 * s
    assert m.send([L(1, 10 * s), L(1, 11 * s)], side="left") == []
    assert m.late_events == [
        late("left", "very_late", 30 * s, k=1, lt=10 * s, lv=None),
        late("left", "very_late", 30 * s, k=1, lt=11 * s, lv=None),
    ]


def test_interval_duplicate_keys_on_both_sides_give_every_pair() -> None:
    m = interval((0, 0))
    out = m.step(
        left=[L("a", 10, 1), L("a", 10, 2), L("b", 10, 3)],
        right=[R("a", 10, "x"), R("a", 10, "y"), R("c", 10, "z")],
    )
    same(
        out, [J("a", 10, 10, 1, "x"), J("a", 10, 10, 1, "y"), J("a", 10, 10, 2, "x"), J("a", 10, 10, 2, "y")]
    )


def test_interval_null_keys_never_match_and_outer_joins_pad_them() -> None:
    inner = interval((0, 0))
    assert inner.step(left=[L(None, 10)], right=[R(None, 10)]) == []
    assert inner.close() == []

    full = interval((0, 0), how="full")
    assert full.step(left=[L(None, 10, "l")], right=[R(None, 10, "r")]) == []  # W' = 10, not > 10
    # W' = 11 > 10 + 0 (left bound) and > 10 - 0 (right bound): both padded.
    same(full.advance_watermark(11), [J(None, 10, None, lv="l"), J(None, None, 10, rv="r")])


def test_interval_multi_column_keys_with_a_null_part_never_match() -> None:
    m = make(
        "interval",
        keys=["k", "j"],
        left_columns=["k", "j", "lt"],
        right_columns=["k", "j", "rt"],
        between=(0, 0),
    )
    out = m.step(
        left=[{"k": "a", "j": None, "lt": 1}, {"k": "a", "j": 2, "lt": 1}],
        right=[{"k": "a", "j": None, "rt": 1}, {"k": "a", "j": 2, "rt": 1}],
    )
    assert out == [{"k": "a", "j": 2, "lt": 1, "rt": 1}]


# --- interval join: outer rows -----------------------------------------------------------


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
def test_interval_outer_rows_are_padded_at_the_first_step_past_their_bound(how: str) -> None:
    # between=(-2, 3): left "a" at 10 can meet right rows in [8, 13], so it is padded at the
    # first sweep with W' > 13; right "b" at 20 can meet left rows in [17, 22]: W' > 22.
    m = interval((-2, 3), how=how)
    assert m.step(left=[L("a", 10)], right=[R("b", 20)]) == []  # W' = 10
    assert m.advance_watermark(13) == []
    left_pad = [J("a", 10, None)] if how in ("left", "full") else []
    same(m.advance_watermark(14), left_pad)
    assert m.advance_watermark(22) == []
    right_pad = [J("b", None, 20)] if how in ("right", "full") else []
    same(m.advance_watermark(23), right_pad)
    assert m.close() == []  # nothing twice
    same(m.results, left_pad + right_pad)


def test_interval_matched_rows_are_never_padded() -> None:
    m = interval((0, 5), how="full")
    same(m.step(left=[L("a", 10)], right=[R("a", 12)]), [J("a", 10, 12)])
    assert m.close() == []


def test_interval_outer_row_padded_once_watermark_jumps_past_bound() -> None:
    # One step can move W' past several bounds at once: each row is padded once, in that step.
    m = interval((0, 1), how="left")
    assert m.step(left=[L("a", 1), L("a", 5), L("a", 9)], right=[R("z", 0)]) == []  # W' = 0
    same(m.send([R("z", 7)], side="right"), [J("a", 1, None), J("a", 5, None)])  # W' = 7 > 2, > 6
    same(m.close(), [J("a", 9, None)])


def test_interval_right_keys_with_other_names_pad_under_the_left_names() -> None:
    m = JoinModel(
        kind="interval",
        keys=["user"],
        right_keys=["uid"],
        left_time="ts",
        right_time="ts",
        left_columns=["user", "ts", "ad"],
        right_columns=["ts", "uid", "ad"],
        left_lag_ms=0,
        right_lag_ms=0,
        between=(0, 0),
        how="full",
    )
    out = m.step(left=[{"user": "u1", "ts": 5, "ad": "x"}], right=[{"ts": 5, "uid": "u2", "ad": "y"}])
    assert out == []
    assert m.close() == [
        {"user": "u1", "ts": 5, "ad": "x", "ts_right": None, "ad_right": None},
        {"user": "u2", "ts": None, "ad": None, "ts_right": 5, "ad_right": "y"},
    ]


# --- interval join: lateness -------------------------------------------------------------


def test_interval_late_rows_with_no_allowed_lateness_are_very_late_and_listed() -> None:
    m = interval((0, 5))
    same(m.step(left=[L("a", 10, "l")], right=[R("a", 10, "r")]), [J("a", 10, 10, "l", "r")])  # W' = 10
    # W = 10: a right row at 9 is late, and with L = 0 very late (it would have matched nothing
    # anyway); a left row at 9 would have matched right 10: it joins nothing.
    assert m.step(left=[L("a", 9, "late")], right=[R("a", 9, "late")]) == []
    # A row at exactly W is on time.
    same(m.send([R("a", 10, "r2")], side="right"), [J("a", 10, 10, "l", "r2")])
    assert m.late_events == [
        late("left", "very_late", 10, k="a", lt=9, lv="late"),
        late("right", "very_late", 10, k="a", rt=9, rv="late"),
    ]
    assert m.metrics["very_late_events"] == 2
    assert m.metrics["on_time_events"] == 3


def test_interval_late_right_row_retracts_the_padded_left_row() -> None:
    # between=(0, 5), L = 10, retracting. Left "a" at 10 is padded at the first W' > 15.
    m = interval((0, 5), how="left", allowed_lateness_ms=10, accumulation="retracting")
    assert m.step(left=[L("a", 10, "l")], right=[R("b", 20)]) == []  # W' = 10
    same(m.advance_watermark(16), [J("a", 10, None, "l", kind="emit")])
    # W = 16; right "a" at 12: late by 4 < 10, accepted (mildly late). It meets left 10.
    out = m.send([R("a", 12, "r")], side="right")
    assert out == [J("a", 10, None, "l", kind="retract"), J("a", 10, 12, "l", "r", kind="emit")]
    # A second late partner only adds its match (the padded row is gone already).
    same(m.send([R("a", 13, "r2")], side="right"), [J("a", 10, 13, "l", "r2", kind="emit")])
    # Late by exactly L (16 - 6 = 10): very late. Late by 9: accepted, but matches nothing.
    assert m.send([R("a", 6, "x"), R("a", 7, "y")], side="right") == []
    assert m.late_events == [late("right", "very_late", 16, k="a", rt=6, rv="x")]
    assert m.metrics == {
        "on_time_events": 2,
        "mildly_late_events": 3,
        "very_late_events": 1,
        "invalid_events": 0,
        "emitted": 3,
        "retractions": 1,
    }


def test_interval_full_join_late_left_row_retracts_a_padded_right_row() -> None:
    # between=(-3, 0): right "a" at 20 meets left rows in [20, 23]; padded at W' > 23.
    m = interval((-3, 0), how="full", allowed_lateness_ms=5, accumulation="retracting")
    assert m.step(left=[L("z", 30)], right=[R("a", 20, "r")]) == []  # W' = 20
    same(m.advance_watermark(24, side="right"), [J("a", None, 20, rv="r", kind="emit")])  # W' = 24
    # W = 24: left "a" at 21 (late by 3 < 5) matches right 20 (21 - 3 <= 20 <= 21). Left 21's own
    # bound is 21 + 0 < 24, but it is matched, so never padded.
    out = m.send([L("a", 21, "l")], side="left")
    assert out == [J("a", None, 20, rv="r", kind="retract"), J("a", 21, 20, "l", "r", kind="emit")]


def test_interval_late_outer_row_without_partner_is_padded_in_its_own_step() -> None:
    # An accepted late row whose bound is already behind W' is padded at this step's sweep.
    m = interval((0, 1), how="left", allowed_lateness_ms=10, accumulation="retracting")
    assert m.step(left=[L("z", 20)], right=[R("z", 20)]) == [J("z", 20, 20, kind="emit")]  # W' = 20
    same(m.send([L("a", 15)], side="left"), [J("a", 15, None, kind="emit")])  # 20 > 16


def test_interval_idle_side_holds_the_watermark_back() -> None:
    m = interval((0, 0), how="full")
    # Only the left side sends: W stays None, nothing is late and nothing is padded.
    assert m.send([L("a", 10), L("a", 50)], side="left") == []
    assert m.send([L("a", 5)], side="left") == []  # behind the left watermark (50), but W is None
    assert m.watermark_ms is None
    assert m.late_events == []
    assert m.metrics["on_time_events"] == 3
    # The right side's first rows give W' = min(50, 60) = 50: left 5 and 10 are padded, 50 not.
    same(m.send([R("b", 60)], side="right"), [J("a", 5, None), J("a", 10, None)])
    assert m.watermark_ms == 50
    # Left to 51 (the right side is at 60): W' = 51 > 50, so left 50 is padded.
    same(m.advance_watermark(51, side="left"), [J("a", 50, None)])
    assert m.watermark_ms == 51


def test_interval_invalid_rows_are_listed_and_do_not_move_the_watermark() -> None:
    m = interval((0, 0))
    assert m.step(left=[L("a", None, "n")], right=[R("a", 3)]) == []
    assert m.watermark_ms is None  # the left side has no valid row yet
    assert m.late_events == [late("left", "invalid", None, k="a", lt=None, lv="n")]
    assert m.metrics["invalid_events"] == 1


def test_interval_very_late_rows_still_move_their_side_watermark() -> None:
    m = interval((0, 0))
    m.step(left=[L("a", 10)], right=[R("a", 10)])  # W' = 10
    m.advance_watermark(30, side="left")
    assert m.send([R("a", 2), R("a", 25)], side="right") == []  # 2 is very late; 25 is on time
    assert m.watermark_ms == 25


def test_interval_datetimes_pass_through_and_compare_in_microseconds() -> None:
    m = make(
        "interval",
        left_columns=["k", "lt"],
        right_columns=["k", "rt"],
        between=(0, 1),
    )
    t0 = datetime(2024, 1, 1, 12, 0, 0)
    just_in = t0 + timedelta(milliseconds=1)
    just_out = t0 + timedelta(milliseconds=1, microseconds=1)
    out = m.step(left=[{"k": "a", "lt": t0}], right=[{"k": "a", "rt": just_in}, {"k": "a", "rt": just_out}])
    assert out == [{"k": "a", "lt": t0, "rt": just_in}]


def test_interval_state_ttl_drops_rows_and_pads_an_unmatched_outer_row_as_it_drops_it() -> None:
    # between=(0, 10), TTL 5: left "a" at 0 is dropped at the first sweep with 0 + 5 <= W'; being
    # unmatched, it is padded then (before its bound, 10), and never matches again.
    m = interval((0, 10), how="left", state_ttl_ms=5)
    assert m.step(left=[L("a", 0)], right=[R("z", 0)]) == []  # W' = 0
    same(m.advance_watermark(5), [J("a", 0, None)])
    assert m.send([R("a", 7)], side="right") == []  # on time (W = 5), but left 0 is gone
    assert m.close() == []


def test_interval_state_ttl_keeps_rows_younger_than_the_ttl() -> None:
    m = interval((0, 10), state_ttl_ms=6)
    assert m.step(left=[L("a", 0)], right=[R("z", 0)]) == []
    assert m.advance_watermark(5) == []  # 0 + 6 > 5: kept
    same(m.send([R("a", 7)], side="right"), [J("a", 0, 7)])


# --- window join -------------------------------------------------------------------------

TEN = TumblingWindow(size_ms=10)
W0 = (0, 10)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("inner", [WJ("a", W0, 1, 5, "l1", "r1"), WJ("a", W0, 2, 5, "l2", "r1")]),
        (
            "left",
            [WJ("a", W0, 1, 5, "l1", "r1"), WJ("a", W0, 2, 5, "l2", "r1"), WJ("b", W0, 3, None, "l3")],
        ),
        (
            "right",
            [WJ("a", W0, 1, 5, "l1", "r1"), WJ("a", W0, 2, 5, "l2", "r1"), WJ("c", W0, None, 7, rv="r2")],
        ),
        (
            "full",
            [
                WJ("a", W0, 1, 5, "l1", "r1"),
                WJ("a", W0, 2, 5, "l2", "r1"),
                WJ("b", W0, 3, None, "l3"),
                WJ("c", W0, None, 7, rv="r2"),
            ],
        ),
        ("semi", [WS("a", W0, 1, "l1"), WS("a", W0, 2, "l2")]),
        ("anti", [WS("b", W0, 3, "l3")]),
    ],
)
def test_window_join_tumbling_fires_at_window_end(how: str, expected: Rows) -> None:
    # Window [0, 10): left a1 a2 b3, right a5 c7.
    m = windowed(TEN, how)
    out = m.step(
        left=[L("a", 1, "l1"), L("a", 2, "l2"), L("b", 3, "l3")], right=[R("a", 5, "r1"), R("c", 7, "r2")]
    )
    assert out == []  # W' = min(3, 7) = 3
    assert m.advance_watermark(9) == []
    same(m.advance_watermark(10), expected)  # W' >= end
    assert m.close() == []


SLIDE = SlidingWindow(size_ms=10, slide_ms=5)


@pytest.mark.parametrize(
    ("how", "at_7", "at_10", "at_15", "at_20"),
    [
        # left a7 and b8 are in [0,10) and [5,15); right a3 in [-5,5) and [0,10); a12 in [5,15), [10,20).
        ("inner", [], [WJ("a", (0, 10), 7, 3)], [WJ("a", (5, 15), 7, 12)], []),
        (
            "left",
            [],
            [WJ("a", (0, 10), 7, 3), WJ("b", (0, 10), 8, None)],
            [WJ("a", (5, 15), 7, 12), WJ("b", (5, 15), 8, None)],
            [],
        ),
        (
            "right",
            [WJ("a", (-5, 5), None, 3)],
            [WJ("a", (0, 10), 7, 3)],
            [WJ("a", (5, 15), 7, 12)],
            [WJ("a", (10, 20), None, 12)],
        ),
        (
            "full",
            [WJ("a", (-5, 5), None, 3)],
            [WJ("a", (0, 10), 7, 3), WJ("b", (0, 10), 8, None)],
            [WJ("a", (5, 15), 7, 12), WJ("b", (5, 15), 8, None)],
            [WJ("a", (10, 20), None, 12)],
        ),
        ("semi", [], [WS("a", (0, 10), 7)], [WS("a", (5, 15), 7)], []),
        ("anti", [], [WS("b", (0, 10), 8)], [WS("b", (5, 15), 8)], []),
    ],
)
def test_window_join_sliding_row_joins_every_window_holding_it(
    how: str, at_7: Rows, at_10: Rows, at_15: Rows, at_20: Rows
) -> None:
    m = windowed(SLIDE, how)
    # W' = min(left 8, right 12) = 8: window [-5, 5) fires already.
    same(m.step(left=[L("a", 7), L("b", 8)], right=[R("a", 3), R("a", 12)]), at_7)
    same(m.advance_watermark(10), at_10)
    same(m.advance_watermark(14), [])
    same(m.advance_watermark(15), at_15)
    same(m.advance_watermark(20), at_20)
    assert m.close() == []


def test_window_join_tumbling_offset() -> None:
    # Offset 3: windows [-7, 3), [3, 13), ...; left at 2 and right at 3 are in different windows.
    m = windowed(TumblingWindow(size_ms=10, offset_ms=3), "full")
    # W' = min(12, 3) = 3 >= 3: window [-7, 3) fires in the first step.
    same(m.step(left=[L("a", 2), L("a", 12)], right=[R("a", 3)]), [WJ("a", (-7, 3), 2, None)])
    same(m.close(), [WJ("a", (3, 13), 12, 3)])


def test_window_join_null_keys_never_pair() -> None:
    for how, expected in [
        ("inner", []),
        ("full", [WJ(None, W0, 1, None, "l"), WJ(None, W0, None, 2, rv="r")]),
        ("semi", []),
        ("anti", [WS(None, W0, 1, "l")]),
    ]:
        m = windowed(TEN, how)
        m.step(left=[L(None, 1, "l")], right=[R(None, 2, "r")])
        same(m.close(), expected)


def test_window_join_mildly_late_row_into_an_open_window_joins_with_no_lateness() -> None:
    m = windowed(TEN)
    assert m.step(left=[L("a", 5)], right=[R("a", 8)]) == []  # W' = 5
    # W = 5: right 2 is late (2 < 5) but its window [0, 10) is retained (5 < 10 + 0): accepted.
    assert m.send([R("a", 2)], side="right") == []
    assert m.metrics["mildly_late_events"] == 1
    same(m.advance_watermark(10), [WJ("a", W0, 5, 8), WJ("a", W0, 5, 2)])
    # W = 10: window [0, 10) is no longer retained (10 < 10 is false): left 9 is very late.
    assert m.send([L("a", 9)], side="left") == []
    assert m.late_events == [late("left", "very_late", 10, k="a", lt=9, lv=None)]


@pytest.mark.parametrize(
    ("how", "first", "second", "third"),
    [
        # first: window [0,10) fires with left a3 only; second: late right a8; third: late right a4.
        ("inner", [], [WJ("a", W0, 3, 8, kind="emit")], [WJ("a", W0, 3, 4, kind="emit")]),
        (
            "left",
            [WJ("a", W0, 3, None, kind="emit")],
            [WJ("a", W0, 3, None, kind="retract"), WJ("a", W0, 3, 8, kind="emit")],
            [WJ("a", W0, 3, 4, kind="emit")],
        ),
        (
            "full",
            [WJ("a", W0, 3, None, kind="emit")],
            [WJ("a", W0, 3, None, kind="retract"), WJ("a", W0, 3, 8, kind="emit")],
            [WJ("a", W0, 3, 4, kind="emit")],
        ),
        ("right", [], [WJ("a", W0, 3, 8, kind="emit")], [WJ("a", W0, 3, 4, kind="emit")]),
        ("semi", [], [WS("a", W0, 3, kind="emit")], []),  # a3 has a partner: once is enough
        ("anti", [WS("a", W0, 3, kind="emit")], [WS("a", W0, 3, kind="retract")], []),
    ],
)
def test_window_join_late_row_into_a_fired_window_retracts(
    how: str, first: Rows, second: Rows, third: Rows
) -> None:
    m = windowed(TEN, how, allowed_lateness_ms=5, accumulation="retracting")
    # W' = min(12, 12) = 12: window [0, 10) of "a" fires (left a3 only); [10, 20) stays open.
    same(m.step(left=[L("a", 3), L("a", 12)], right=[R("a", 12)]), first)
    # W = 12: right a8 is late, but [0, 10) is retained while W < 10 + 5: accepted, the window
    # fires again with what its result lost (retract) and gained (emit).
    same(m.send([R("a", 8)], side="right"), second)
    same(m.send([R("a", 4)], side="right"), third)
    # W' = 15: [0, 10) is no longer retained (15 < 10 + 5 is false): right a9 is very late.
    assert m.advance_watermark(15) == []
    assert m.send([R("a", 9)], side="right") == []
    assert m.late_events == [late("right", "very_late", 15, k="a", rt=9, rv=None)]
    # W' = 20: [10, 20) fires.
    pair = WS("a", (10, 20), 12, kind="emit") if how == "semi" else WJ("a", (10, 20), 12, 12, kind="emit")
    same(m.advance_watermark(20), [] if how == "anti" else [pair])


def test_window_join_inner_accumulating_late_row_adds_its_pairs() -> None:
    m = windowed(TEN, allowed_lateness_ms=5)
    same(m.step(left=[L("a", 3), L("a", 12)], right=[R("a", 1), R("a", 12)]), [WJ("a", W0, 3, 1)])
    # W = 12: left a7 joins [0, 10) late; the window adds the pairs it gained, no kind column.
    same(m.send([L("a", 7)], side="left"), [WJ("a", W0, 7, 1)])
    assert m.metrics["retractions"] == 0


def test_window_join_correction_is_one_net_diff_per_step() -> None:
    # Two late rows in one step: one retraction of the result before the step.
    m = windowed(TEN, "left", allowed_lateness_ms=5, accumulation="retracting")
    same(m.step(left=[L("a", 3)], right=[R("z", 12)]), [])  # W' = 3
    same(m.advance_watermark(12), [WJ("a", W0, 3, None, kind="emit")])
    out = m.send([R("a", 8), R("a", 9)], side="right")
    assert out[0] == WJ("a", W0, 3, None, kind="retract")
    same(
        out,
        [
            WJ("a", W0, 3, None, kind="retract"),
            WJ("a", W0, 3, 8, kind="emit"),
            WJ("a", W0, 3, 9, kind="emit"),
        ],
    )


def test_window_join_output_layout_and_suffixes() -> None:
    # A right column named like a left column, or like window_start, gets "_right".
    m = JoinModel(
        kind="window",
        keys=["k"],
        left_time="ts",
        right_time="ts",
        left_columns=["ts", "k", "v"],
        right_columns=["window_start", "k", "v", "ts", "w"],
        left_lag_ms=0,
        right_lag_ms=0,
        window=TEN,
        accumulation="retracting",
    )
    m.step(left=[{"k": "a", "ts": 1, "v": 1}], right=[{"k": "a", "ts": 2, "v": 2, "w": 3, "window_start": 4}])
    row = m.close()[0]
    assert list(row) == [
        "k",
        "window_start",
        "window_end",
        "ts",
        "v",
        "window_start_right",
        "v_right",
        "ts_right",
        "w",
        "kind",
    ]
    assert row == {
        "k": "a",
        "window_start": 0,
        "window_end": 10,
        "ts": 1,
        "v": 1,
        "window_start_right": 4,
        "v_right": 2,
        "ts_right": 2,
        "w": 3,
        "kind": "emit",
    }


# --- as-of join --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["inner", "left"])
def test_as_of_takes_the_latest_right_row_at_or_before_within_max_age(how: str) -> None:
    m = as_of(how, max_age_ms=15)
    assert m.send([R("a", 10, "p1"), R("a", 20, "p2")], side="right") == []  # W None
    pad = how == "left"
    # W' = min(36, 20) = 20: left rows with l < 20 are emitted: a5 (no right row yet at 5), a15.
    out = m.send([L("a", 5), L("a", 15), L("a", 20), L("a", 35), L("a", 36), L("b", 25)], side="left")
    same(out, [J("a", 5, None)] * pad + [J("a", 15, 10, rv="p1")])
    # W' = 36: a20 takes p2 (r <= l), b25 has no right row, a35 takes p2 (35 - 15 = 20 <= 20).
    out = m.advance_watermark(36, side="right")
    same(out, [J("a", 20, 20, rv="p2"), J("a", 35, 20, rv="p2")] + [J("b", 25, None)] * pad)
    same(m.close(), [J("a", 36, None)] * pad)  # 36 - 15 = 21 > 20: p2 is too old


def test_as_of_left_row_waits_for_the_watermark_past_it() -> None:
    m = as_of()
    assert m.step(left=[L("a", 10)], right=[R("a", 5, "p1"), R("z", 10)]) == []  # W' = 10, not > 10
    # W = 10: a right row at exactly 10 is on time and takes over.
    assert m.send([R("a", 10, "p2")], side="right") == []
    same(m.advance_watermark(11), [J("a", 10, 10, rv="p2")])


def test_as_of_ties_go_to_the_later_arrival() -> None:
    m = as_of()
    m.step(right=[R("a", 10, "p1"), R("a", 10, "p2")])  # same time: p2 arrived later
    m.send([R("a", 10, "p3")], side="right")  # later still, in a later step
    m.send([R("a", 9, "p4")], side="right")  # arrives last but is older
    assert m.send([L("a", 12)], side="left") == []  # W' = min(12, 10) = 10
    same(m.close(), [J("a", 12, 10, rv="p3")])


def test_as_of_null_keys_find_no_right_row() -> None:
    m = as_of("left")
    m.step(left=[L(None, 5)], right=[R(None, 1)])
    same(m.close(), [J(None, 5, None)])


def test_as_of_late_right_version_retracts_and_emits_with_retracting() -> None:
    m = as_of(allowed_lateness_ms=10, accumulation="retracting")
    assert m.step(left=[L("a", 20), L("c", 20)], right=[R("a", 10, "p1"), R("b", 30)]) == []  # W' = 20
    same(m.advance_watermark(25), [J("a", 20, 10, rv="p1", kind="emit")])  # c20 emits nothing (inner)
    # W = 25: right a16 is late by 9 < 10: accepted; it beats p1 (16 > 10, 16 <= 20).
    out = m.send([R("a", 16, "p2")], side="right")
    assert out == [J("a", 20, 10, rv="p1", kind="retract"), J("a", 20, 16, rv="p2", kind="emit")]
    # Same time, later arrival: it takes over.
    out = m.send([R("a", 16, "p3")], side="right")
    assert out == [J("a", 20, 16, rv="p2", kind="retract"), J("a", 20, 16, rv="p3", kind="emit")]
    # After the left row (21 > 20): it changes nothing.
    assert m.send([R("a", 21, "p4")], side="right") == []
    # Late by exactly L (25 - 15 = 10): very late.
    assert m.send([R("a", 15, "p5")], side="right") == []
    assert m.late_events == [late("right", "very_late", 25, k="a", rt=15, rv="p5")]
    # Two versions in one step: one net correction, to the last of them.
    out = m.send([R("a", 18, "p7"), R("a", 17, "p6")], side="right")
    assert out == [J("a", 20, 16, rv="p3", kind="retract"), J("a", 20, 18, rv="p7", kind="emit")]
    # The inner left row that emitted nothing: an emit only.
    assert m.send([R("c", 19, "q")], side="right") == [J("c", 20, 19, rv="q", kind="emit")]
    assert m.metrics["retractions"] == 3
    assert m.metrics["emitted"] == 5


def test_as_of_left_join_late_right_row_retracts_the_padded_row() -> None:
    m = as_of("left", allowed_lateness_ms=10, accumulation="retracting")
    m.step(left=[L("a", 20)], right=[R("z", 25)])
    same(m.advance_watermark(21), [J("a", 20, None, kind="emit")])
    out = m.send([R("a", 12, "p")], side="right")
    assert out == [J("a", 20, None, kind="retract"), J("a", 20, 12, rv="p", kind="emit")]


def test_as_of_late_left_row_is_emitted_in_its_own_step() -> None:
    m = as_of(allowed_lateness_ms=10, accumulation="retracting")
    m.step(left=[L("z", 20)], right=[R("a", 1, "p"), R("z", 20)])  # W' = 20
    same(m.send([L("a", 15)], side="left"), [J("a", 15, 1, rv="p", kind="emit")])  # 20 > 15


def test_as_of_state_ttl_drops_a_right_row() -> None:
    for ttl, found in [(None, True), (10, False)]:
        m = as_of("left", accumulation="retracting", state_ttl_ms=ttl)
        assert m.step(left=[L("a", 5)], right=[R("a", 0, "p1")]) == []  # W' = 0
        # W' = 10: a5 is emitted with p1 first; then (TTL 10) p1 (0 + 10 <= 10) and a5 are dropped,
        # and that retracts nothing.
        same(m.advance_watermark(10), [J("a", 5, 0, rv="p1", kind="emit")])
        assert m.send([L("a", 15)], side="left") == []  # W' = min(15, 10) = 10
        expected = J("a", 15, 0, rv="p1", kind="emit") if found else J("a", 15, None, kind="emit")
        same(m.close(), [expected])


# --- watermarks, layout, errors --------------------------------------------------------


def test_watermark_is_the_minimum_of_both_sides_and_close_ends_a_side() -> None:
    m = interval((0, 0), left_lag_ms=2, right_lag_ms=5)
    m.step(left=[L("a", 100)], right=[R("a", 100)])
    assert m.watermark_ms == 95  # min(100 - 2, 100 - 5)
    m.advance_watermark(99, side="right")
    assert m.watermark_ms == 98
    m.close(side="left")
    assert m.watermark_ms == 99
    m.close()
    assert m.watermark_ms == END_OF_TIME_MS


def test_late_events_of_the_right_side_use_the_output_names() -> None:
    m = make(
        "interval",
        left_time="ts",
        right_time="ts",
        left_columns=["k", "ts", "v"],
        right_columns=["k", "ts", "v"],
        between=(0, 0),
    )
    m.step(left=[{"k": "a", "ts": 10, "v": 1}], right=[{"k": "a", "ts": 10, "v": 2}])
    m.send([{"k": "b", "ts": 3, "v": 9}], side="right")
    m.send([{"k": "c", "ts": None, "v": 8}], side="left")
    assert m.late_events == [
        {
            "side": "right",
            "k": "b",
            "ts_right": 3,
            "v_right": 9,
            "classification": "very_late",
            "watermark_ms": 10,
        },
        {"side": "left", "k": "c", "ts": None, "v": 8, "classification": "invalid", "watermark_ms": 10},
    ]
    assert m.results == [{"k": "a", "ts": 10, "v": 1, "ts_right": 10, "v_right": 2}]


def test_event_time_of_a_wrong_type_is_a_schema_error() -> None:
    m = interval((0, 0))
    with pytest.raises(SchemaError):
        m.send([L("a", "10")], side="left")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "interval", "how": "semi", "between": (0, 1)}, "how='semi' is not allowed"),
        ({"kind": "as_of", "how": "full"}, "how='full' is not allowed"),
        ({"kind": "cross"}, "join kind"),
        ({"kind": "interval"}, "needs between"),
        ({"kind": "interval", "between": (2, 1)}, "lower <= upper"),
        ({"kind": "window"}, "TumblingWindow or SlidingWindow"),
        ({"kind": "window", "window": SessionWindow(gap_ms=5)}, "TumblingWindow or SlidingWindow"),
        ({"kind": "as_of", "window": TEN}, "window joins only"),
        ({"kind": "window", "window": TEN, "between": (0, 1)}, "interval joins only"),
        ({"kind": "interval", "between": (0, 1), "max_age_ms": 5}, "as-of joins only"),
        ({"kind": "as_of", "max_age_ms": -1}, "max_age_ms must be >= 0"),
        (
            {"kind": "interval", "between": (0, 1), "how": "left", "allowed_lateness_ms": 5},
            "needs accumulation='retracting'",
        ),
        (
            {"kind": "window", "window": TEN, "how": "semi", "allowed_lateness_ms": 5},
            "needs accumulation='retracting'",
        ),
        (
            {"kind": "window", "window": TEN, "how": "anti", "allowed_lateness_ms": 5},
            "needs accumulation='retracting'",
        ),
        ({"kind": "as_of", "allowed_lateness_ms": 5}, "needs accumulation='retracting'"),
        ({"kind": "as_of", "accumulation": "discarding"}, "accumulation must be"),
        ({"kind": "as_of", "keys": []}, "at least one key"),
        ({"kind": "as_of", "right_keys": ["k", "rt"]}, "same number of key columns"),
        ({"kind": "as_of", "left_lag_ms": -1}, "left_lag_ms must be >= 0"),
        ({"kind": "as_of", "state_ttl_ms": 0}, "state_ttl_ms must be > 0"),
        ({"kind": "as_of", "left_columns": ["k", "lv"]}, "'lt' is not in left_columns"),
        ({"kind": "as_of", "left_columns": ["k", "lt", "kind"], "accumulation": "retracting"}, "duplicate"),
    ],
)
def test_bad_parameters_raise_plan_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        make(**options)


def test_inner_interval_and_window_joins_with_lateness_may_stay_accumulating() -> None:
    interval((0, 1), allowed_lateness_ms=5)
    windowed(TEN, allowed_lateness_ms=5)


def test_unknown_side_is_a_plan_error() -> None:
    m = interval((0, 0))
    with pytest.raises(PlanError, match="side must be"):
        m.send([], side="middle")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="side must be"):
        m.advance_watermark(5, side="middle")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="side must be"):
        m.close(side="up")  # type: ignore[arg-type]
