"""The reference model of composition (SPEC 3.13): :class:`ComposedModel`.

1. Where it overlaps the other oracles it agrees with them, step by step: a
   window over a source is the ReferenceModel, a join of two sources the
   JoinModel (also when run as changelog operators, ``oracles=False``), a
   window over a retracting window the CascadeModel where their rules
   coincide.
2. Transcripts ported from Spark's MultiStatefulOperatorsSuite (SPARK-42376)
   and Flink's JoinITCase and AggregateITCase.
3. Properties on random disordered input with late rows, null and duplicate
   keys, over chains of two and three operators: (i) every changelog nets
   to its operator recomputed from scratch on its input's net rows, (ii) no
   retraction withdraws a row not emitted, (iii) without late rows no window
   after a join retracts, (iv) each operator's watermark is its input's
   minus its delay.
4. A window after a join fires on the watermark, whatever the join's
   allowed lateness, and a late partner corrects it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krishiv_py.errors import PlanError, SourceClosedError
from krishiv_py.model.cascade import CascadeModel
from krishiv_py.model.compose import (
    AggOf,
    AggSpec,
    Change,
    ComposedModel,
    FilterOf,
    JoinOf,
    Op,
    OverOf,
    SelectOf,
    Source,
    TopNOf,
    UnionOf,
    WindowOf,
    columns_of,
    join_model_of,
    reference_model_of,
)
from krishiv_py.model.joins import JoinModel
from krishiv_py.model.over import OverModel
from krishiv_py.model.reference import ReferenceModel
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

Row = dict[str, Any]
Step = tuple[str, str, Any]  # ("send", source, rows) | ("advance", source, ts)
S = 1000
BIG = 10**9  # an interval join this wide is a regular (unbounded) join until close()
WHEN = "when_ms"  # the event time, as a column, for recomputing from scratch

COUNT = AggSpec(name="n", func="count", column=None)


def agg(name: str, func: str, column: str | None) -> AggSpec:
    return AggSpec(name=name, func=func, column=column)  # type: ignore[arg-type]


A = Source("a", "ta", ("k", "ta", "x"))
B = Source("b", "tb", ("k", "tb", "y"))
C = Source("c", "tc", ("k", "tc", "z"))


def bag(rows: Iterable[Row]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.items()) for r in rows)


def timed_bag(rows: Iterable[tuple[Row, int]]) -> Counter[tuple[Any, ...]]:
    return Counter((*r.items(), ("@", t)) for r, t in rows)


def net(changes: Sequence[Change]) -> list[tuple[Row, int]]:
    """The net rows of a changelog; (ii): every retraction withdraws a row emitted and not withdrawn."""
    held: list[tuple[Row, int]] = []
    for c in changes:
        if c.kind == "emit":
            held.append((dict(c.row), c.ts_ms))
            continue
        equal = [i for i, (r, _) in enumerate(held) if r == c.row]
        assert equal, f"a retraction of a row not emitted: {c}"
        del held[next((i for i in equal if held[i][1] == c.ts_ms), equal[0])]
    return held


def rows_only(rows: Iterable[tuple[Row, int]]) -> list[Row]:
    return [r for r, _ in rows]


# --- random input --------------------------------------------------------------------------

KEYS = st.sampled_from([None, 0, 1, 1, 2])
#: times, often on window bounds (multiples of 5), where the watermark rules are tested hardest
TIMES = st.one_of(st.integers(0, 60), st.integers(0, 12).map(lambda i: 5 * i))


def source_rows(src: Source) -> st.SearchStrategy[list[Row]]:
    key, time, value = src.columns
    row = st.builds(lambda k, t, v: {key: k, time: t, value: v}, KEYS, TIMES, st.integers(-3, 5))
    return st.lists(row, max_size=5)


def steps_of(*sources: Source) -> st.SearchStrategy[list[Step]]:
    sends = [st.tuples(st.just("send"), st.just(s.name), source_rows(s)) for s in sources]
    marks = st.tuples(st.just("advance"), st.sampled_from([s.name for s in sources]), TIMES)
    return st.lists(st.one_of(*sends, marks), max_size=8)


def lagged(src: Source, lag: int) -> Source:
    return Source(src.name, src.time, src.columns, lag)


def interval_joins() -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.tuples(st.integers(-10, 5), st.integers(0, 15)).map(lambda b: (b[0], b[0] + b[1]))
    return st.fixed_dictionaries(
        {"between": bounds, "how": st.sampled_from(["inner", "left", "right", "full"])}
    )


JOIN_WINDOWS = st.sampled_from([TumblingWindow(size_ms=10), SlidingWindow(size_ms=20, slide_ms=10)])
JOINS = st.one_of(interval_joins(), st.fixed_dictionaries({"window": JOIN_WINDOWS}))
FIXED = st.sampled_from([TumblingWindow(size_ms=10), SlidingWindow(size_ms=20, slide_ms=5)])
WINDOWS = st.one_of(FIXED, st.sampled_from([SessionWindow(gap_ms=7)]))
LAGS = st.sampled_from([0, 0, 3, 5, 10])
LATENESS = st.sampled_from([0, 10, 30])


# --- 1. agreement with the other oracles ----------------------------------------------------

WINDOW_AGGS = [
    COUNT,
    agg("s", "sum", "x"),
    agg("lo", "min", "x"),
    agg("hi", "max", "x"),
    agg("avg", "avg", "x"),
    agg("first", "first", "x"),
    agg("last", "last", "x"),
    agg("d", "count_distinct", "x"),
]


@settings(max_examples=150)
@given(steps=steps_of(A), window=WINDOWS, lag=LAGS, lateness=LATENESS, oracles=st.booleans())
def test_a_window_over_a_source_is_the_reference_model(
    steps: list[Step], window: Any, lag: int, lateness: int, oracles: bool
) -> None:
    """Step by step, also as a changelog window (``oracles=False``), which classifies source rows alike."""
    if isinstance(window, SessionWindow) and not oracles:
        oracles = True  # a session reads source rows only through its ReferenceModel
    op = WindowOf(lagged(A, lag), window, keys=["k"], aggregates=WINDOW_AGGS, allowed_lateness_ms=lateness)
    model = ComposedModel(op, oracles=oracles)
    ref = reference_model_of(op)
    for kind, _, arg in [*steps, ("close", "a", None)]:
        if kind == "send":
            got, want = model.send(arg, source="a"), ref.send(arg, source="a")
        elif kind == "advance":
            got, want = model.advance_watermark(arg, source="a"), ref.advance_watermark(arg, source="a")
        else:
            got, want = model.close(), ref.close(source="a")
        assert bag(got) == bag(want)
        assert model.watermark_ms == ref.watermark_ms
    assert model.late_events == ref.late_events


def cascade_pair(
    up_window: Any, down_window: Any, up_lateness: int, down_lateness: int
) -> tuple[ComposedModel, CascadeModel]:
    up_aggs = [COUNT, agg("s", "sum", "x")]
    down_aggs = [agg("total", "sum", "n"), agg("peak", "max", "s"), agg("windows", "count", None)]
    first = WindowOf(A, up_window, keys=["k"], aggregates=up_aggs, allowed_lateness_ms=up_lateness)
    model = ComposedModel(WindowOf(first, down_window, keys=["k"], aggregates=down_aggs))
    upstream = reference_model_of(first)
    cascade = CascadeModel(
        upstream,
        window=down_window,
        keys=["k"],
        aggregates=down_aggs,
        allowed_lateness_ms=down_lateness,
        accumulation="retracting",
    )
    return model, cascade


@settings(max_examples=150)
@given(
    steps=steps_of(A),
    up=st.sampled_from([TumblingWindow(size_ms=10), SlidingWindow(size_ms=20, slide_ms=10)]),
    down=st.sampled_from(
        [TumblingWindow(size_ms=30), SlidingWindow(size_ms=40, slide_ms=20), SessionWindow(gap_ms=25)]
    ),
    up_lateness=st.sampled_from([0, 15, 40]),
    extra=st.sampled_from([0, 20]),
)
def test_a_window_over_a_retracting_window_is_the_cascade_model(
    steps: list[Step], up: Any, down: Any, up_lateness: int, extra: int
) -> None:
    """Where their rules coincide.

    The CascadeModel drops an upstream correction that reaches no retained
    downstream window (``W >= end + L`` of them all) and forgets windows
    once ``W >= end + L``; with the downstream lateness at least the
    upstream's, no correction comes that late. It also splits sessions whose
    results are exactly ``gap`` apart, where SPEC 3.3 (and this model) merge
    them: the gap here (25) is no multiple of the upstream ends' spacing (10).
    """
    model, cascade = cascade_pair(up, down, up_lateness, up_lateness + extra)
    for kind, _, arg in [*steps, ("close", "a", None)]:
        if kind == "send":
            got, want = model.send(arg), cascade.send(arg, source="a")
        elif kind == "advance":
            got, want = model.advance_watermark(arg), cascade.advance_watermark(arg, source="a")
        else:
            got, want = model.close(), cascade.close(source="a")
        assert bag(got) == bag(want)
    assert cascade.very_late_results == 0


def test_the_cascade_model_drops_a_correction_the_composition_applies() -> None:
    """Downstream lateness 0 under an upstream lateness of 30: the two models part.

    Upstream minute-like windows of 10 ms keep 30 ms for late rows; the
    second window (20 ms) is gone from the CascadeModel once W >= 20, so
    the late row at 5 (W = 25), which corrects upstream [0, 10), is dropped
    there; the composition applies it (SPEC 3.13: nothing sent downstream is
    dropped, the watermark is not held back by the allowed lateness).
    """
    model, cascade = cascade_pair(TumblingWindow(size_ms=10), TumblingWindow(size_ms=20), 30, 0)
    first = [{"k": 1, "ta": 1, "x": 1}, {"k": 1, "ta": 25, "x": 1}]
    fired = {"k": 1, "window_start": 0, "window_end": 20, "total": 1, "peak": 1, "windows": 1}
    assert model.send(first) == cascade.send(first, source="a") == [{**fired, "kind": "emit"}]
    late = [{"k": 1, "ta": 5, "x": 2}]
    assert cascade.send(late, source="a") == []
    assert cascade.very_late_results == 2  # the upstream's retraction and its new emit
    assert model.send(late) == [
        {**fired, "kind": "retract"},
        {**fired, "total": 2, "peak": 3, "kind": "emit"},
    ]


@settings(max_examples=200)
@given(
    steps=steps_of(A, B),
    join=JOINS,
    lags=st.tuples(LAGS, LAGS),
    lateness=LATENESS,
    oracles=st.booleans(),
)
def test_a_join_of_two_sources_is_the_join_model(
    steps: list[Step], join: dict[str, Any], lags: tuple[int, int], lateness: int, oracles: bool
) -> None:
    """Step by step, late rows listed alike; ``oracles=False`` runs the changelog join on the sources."""
    left, right = lagged(A, lags[0]), lagged(B, lags[1])
    op = JoinOf(left, right, keys=["k"], allowed_lateness_ms=lateness, **join)
    model, oracle = ComposedModel(op, oracles=oracles), join_model_of(op)
    side = {"a": "left", "b": "right"}
    for kind, name, arg in [*steps, ("close", "a", None)]:
        if kind == "send":
            got, want = model.send(arg, source=name), oracle.send(arg, side=side[name])  # type: ignore[arg-type]
        elif kind == "advance":
            got = model.advance_watermark(arg, source=name)
            want = oracle.advance_watermark(arg, side=side[name])  # type: ignore[arg-type]
        else:
            got, want = model.close(), oracle.close()
        assert bag(got) == bag(want)
    assert model.late_events == oracle.late_events


# --- 2. transcripts ---------------------------------------------------------------------------


def test_spark_join_then_window() -> None:
    """Spark MultiStatefulOperatorsSuite "join -> window agg, append mode" (SPARK-42376).

    Two streams of seconds, joined on equal event times (an interval join
    with between=(0, 0) on a constant key), counted per 5 s window of the
    joined rows' time. Spark's two sides arrive in one batch; here each side
    is a step of its own.
    """
    left = Source("in1", "t1", ("c", "t1", "value1"))
    right = Source("in2", "t2", ("c", "t2", "value2"))
    joined = JoinOf(left, right, keys=["c"], between=(0, 0))
    model = ComposedModel(
        WindowOf(joined, TumblingWindow(size_ms=5 * S), aggregates=[agg("count", "count", None)])
    )

    def values(name: str, time: str, *seconds: int) -> list[Row]:
        return [{"c": 0, time: s * S, name: s} for s in seconds]

    assert model.send(values("value1", "t1", 1, 2, 3, 4), source="in1") == []
    assert model.send(values("value2", "t2", 1, 2, 3, 4), source="in2") == []  # CheckNewAnswer()
    assert model.send(values("value1", "t1", 5), source="in1") == []
    assert model.send(values("value2", "t2", 5), source="in2") == [
        {"window_start": 0, "window_end": 5 * S, "count": 4, "kind": "emit"}  # CheckNewAnswer((0, 4))
    ]


def ms(text: str) -> int:
    return (datetime.fromisoformat(text) - datetime(1970, 1, 1)) // datetime.resolution // 1000


def test_spark_left_outer_interval_join_then_window() -> None:
    """Spark MultiStatefulOperatorsSuite "stream-stream time interval left outer join -> aggregation".

    ``left.eventTime BETWEEN right.eventTime - 40 s AND right.eventTime + 30 s``
    is ``between=(-30 s, 40 s)``; the left watermark lags 2 minutes, the
    right 4. Spark windows on the left time; the joined rows' time (the
    later of both) falls in the same 30 s windows here. A left pad holds the
    join's watermark back by 40 s (Spark's output watermark of the join).
    """
    left = Source("impressions", "eventTime", ("eventTime", "id", "comment"), lag_ms=120 * S)
    right = Source("clicks", "eventTime", ("eventTime", "id", "name"), lag_ms=240 * S)
    joined = JoinOf(left, right, keys=["id"], between=(-30 * S, 40 * S), how="left")
    model = ComposedModel(
        WindowOf(joined, TumblingWindow(size_ms=30 * S), aggregates=[agg("cnt", "count", None)])
    )

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text)

    def window(start: str) -> Row:
        return {"window_start": ms(start), "window_end": ms(start) + 30 * S, "cnt": 1, "kind": "emit"}

    lefts = [
        {"eventTime": at("2020-01-01 00:00:00"), "id": "abc", "comment": "has no join partner"},
        {"eventTime": at("2020-01-02 00:00:00"), "id": "abc", "comment": "joined with A"},
        {"eventTime": at("2020-01-02 01:00:00"), "id": "abc", "comment": "joined with B"},
    ]
    rights = [
        {"eventTime": at("2020-01-02 00:00:10"), "id": "abc", "name": "A"},
        {"eventTime": at("2020-01-02 00:59:59"), "id": "abc", "name": "B"},
        {"eventTime": at("2020-01-02 02:00:00"), "id": "abc", "name": "C"},
    ]
    assert model.send(lefts, source="impressions") == []
    first = model.send(rights, source="clicks")
    assert bag(first) == bag([window("2020-01-01 00:00:00"), window("2020-01-02 00:00:00")])
    assert model.watermark_of(joined) == ms("2020-01-02 00:57:20")  # Spark: op1 OW 00:57:20
    d_left = [{"eventTime": at("2020-01-05 00:00:00"), "id": "abc", "comment": "joined with D"}]
    d_right = [{"eventTime": at("2020-01-05 00:00:10"), "id": "abc", "name": "D"}]
    second = model.send(d_left, source="impressions") + model.send(d_right, source="clicks")
    assert second == [window("2020-01-02 01:00:00")]
    assert model.watermark_of(joined) == ms("2020-01-04 23:55:30")  # Spark: op1 OW 23:55:30


def seconds(*values: int) -> list[Row]:
    return [{"value": v, "t": v * S} for v in values]


def counts_of_counts() -> WindowOf:
    """Rows counted per 5 s, then per 10 s the number of those windows and the sum of their counts."""
    fives = WindowOf(
        Source("main", "t", ("value", "t")),
        TumblingWindow(size_ms=5 * S),
        aggregates=[agg("count", "count", None)],
    )
    return WindowOf(
        fives,
        TumblingWindow(size_ms=10 * S),
        aggregates=[agg("count", "count", None), agg("sum", "sum", "count")],
    )


def test_spark_window_then_window() -> None:
    """Spark MultiStatefulOperatorsSuite "window agg -> window agg, append mode".

    Counts per 5 s, then per 10 s the number of those windows and their sum.
    Spark's data batch and the no-data batch after it are one step here.
    """
    tens = counts_of_counts()
    model = ComposedModel(tens)
    assert model.send(seconds(*range(10, 22))) == [
        {"window_start": 10 * S, "window_end": 20 * S, "count": 2, "sum": 10, "kind": "emit"}
    ]
    assert model.send(seconds(*range(10, 30))) == []  # 10..19 are very late at the first window
    assert len(model.late_events) == 10
    assert model.send(seconds(30, 31)) == [
        {"window_start": 20 * S, "window_end": 30 * S, "count": 2, "sum": 12, "kind": "emit"}
    ]


def test_spark_window_then_window_then_window() -> None:
    """Spark MultiStatefulOperatorsSuite "agg -> agg -> agg, append mode": windows of 5, 10 and 20 s."""
    tens = counts_of_counts()
    twenties = WindowOf(
        tens,
        TumblingWindow(size_ms=20 * S),
        aggregates=[agg("count", "count", None), agg("sum", "sum", "sum")],
    )
    model = ComposedModel(twenties)

    def out(start: int, end: int, count: int, total: int) -> Row:
        return {
            "window_start": start * S,
            "window_end": end * S,
            "count": count,
            "sum": total,
            "kind": "emit",
        }

    assert model.send(seconds(*range(38))) == [out(0, 20, 2, 20)]
    assert model.send(seconds(*range(30, 61))) == [out(20, 40, 2, 23), out(40, 60, 2, 20)]


def flink_rows(src: Source, *tuples: tuple[Any, ...]) -> list[Row]:
    """Flink's test data as rows of ``src``, each row's time its position (a regular stream has none)."""
    names = [c for c in src.columns if c != src.time]
    return [{**dict(zip(names, values, strict=True)), src.time: i} for i, values in enumerate(tuples)]


def send_one_by_one(model: ComposedModel, source: str, rows: list[Row]) -> None:
    """One step per row: Flink's per-record processing without mini-batches."""
    for row in rows:
        model.send([row], source=source)


def test_flink_nested_group_by_agg() -> None:
    """Flink AggregateITCase.testNestedGroupByAgg: ``agg`` over ``agg``, retracting as counts change."""
    t = Source("T", "t", ("a", "b", "c", "t"))
    data = flink_rows(
        t,
        (1, 1, "A"), (2, 2, "B"), (3, 2, "B"), (4, 3, "C"), (5, 3, "C"), (6, 3, "C"),
        (7, 4, "B"), (8, 4, "A"), (9, 4, "D"), (10, 4, "E"), (11, 5, "A"), (12, 5, "B"),
    )  # fmt: skip
    inner = AggOf(t, keys=["b"], aggregates=[agg("c", "count", "c"), agg("a", "sum", "a")])
    outer = AggOf(
        inner,
        keys=["c"],
        aggregates=[
            agg("sb", "sum", "b"),
            agg("ca", "count", "a"),
            agg("ma", "max", "a"),
            agg("mi", "min", "a"),
        ],
    )
    model = ComposedModel(outer)
    send_one_by_one(model, "T", data)
    got = {(r["sb"], r["ca"], r["ma"], r["mi"], r["c"]) for r in rows_only(net(model.changelog()))}
    assert got == {(1, 1, 1, 1, 1), (3, 1, 15, 15, 3), (4, 1, 34, 34, 4), (7, 2, 23, 5, 2)}
    assert len(net(model.changelog())) == 4
    assert any(c.kind == "retract" for c in model.changelog(inner))


SMALL_TUPLE_DATA_3 = [(1, 1, "Hi"), (2, 2, "Hello"), (3, 2, "Hello world")]
TUPLE_DATA_5 = [
    (1, 1, 0, "Hallo", 1), (2, 2, 1, "Hallo Welt", 2), (2, 3, 2, "Hallo Welt wie", 1),
    (3, 4, 3, "Hallo Welt wie gehts?", 2), (3, 5, 4, "ABC", 2), (3, 6, 5, "BCD", 3),
    (4, 7, 6, "CDE", 2), (4, 8, 7, "DEF", 1), (4, 9, 8, "EFG", 1), (4, 10, 9, "FGH", 2),
    (5, 11, 10, "GHI", 1), (5, 12, 11, "HIJ", 3), (5, 13, 12, "IJK", 3), (5, 14, 13, "JKL", 2),
    (5, 15, 14, "KLM", 2),
]  # fmt: skip
TABLE_A = Source("A", "ta", ("a1", "a2", "a3", "ta"))
TABLE_B = Source("B", "tb", ("b1", "b2", "b3", "b4", "b5", "tb"))


def test_flink_join_then_global_aggregation() -> None:
    """Flink JoinITCase.testDataStreamJoinWithAggregation: ``COUNT(b4), COUNT(a2) ... WHERE a1 = b1``."""
    joined = JoinOf(TABLE_A, TABLE_B, keys=["a1"], right_keys=["b1"], between=(-BIG, BIG))
    model = ComposedModel(
        AggOf(joined, keys=(), aggregates=[agg("cb4", "count", "b4"), agg("ca2", "count", "a2")])
    )
    model.send(flink_rows(TABLE_A, *SMALL_TUPLE_DATA_3), source="A")
    model.send(flink_rows(TABLE_B, *TUPLE_DATA_5), source="B")
    model.close()
    assert rows_only(net(model.changelog())) == [{"cb4": 6, "ca2": 6}]


def sums_by(src: Source, key: str, column: str) -> AggOf:
    """``SELECT SUM(column) AS column, key FROM src GROUP BY key``."""
    return AggOf(src, keys=[key], aggregates=[agg(column, "sum", column)])


def test_flink_left_join_of_two_aggregations() -> None:
    """Flink JoinITCase.testLeftJoinWithPk: ``agg`` results left-joined on their sums.

    ``B``'s sum for ``b1 = 2`` passes through 2 (matching both ``a2 = 2``
    rows) before it settles at 5: the pairs are emitted, then retracted.
    A regular join is an interval join wide enough; its pads come at close.
    """
    query1, query2 = sums_by(TABLE_A, "a1", "a2"), sums_by(TABLE_B, "b1", "b2")
    joined = JoinOf(query1, query2, keys=["a2"], right_keys=["b2"], between=(-BIG, BIG), how="left")
    model = ComposedModel(joined)
    send_one_by_one(model, "A", flink_rows(TABLE_A, *SMALL_TUPLE_DATA_3))
    send_one_by_one(model, "B", flink_rows(TABLE_B, *TUPLE_DATA_5))
    model.close()
    got = [
        (r["a1"], r["a2"], r["b1"], None if r["b1"] is None else r["a2"])
        for r in rows_only(net(model.changelog()))
    ]
    assert sorted(got, key=str) == sorted([(1, 1, 1, 1), (3, 2, None, None), (2, 2, None, None)], key=str)
    assert Counter(r["kind"] for r in model.results if r["b1"] == 2) == {"emit": 2, "retract": 2}


def test_flink_three_way_join_of_aggregations() -> None:
    """Flink JoinITCase.testThreeWayMultiJoinWithoutPk: three sums, joined twice."""
    tables = [Source(n, "t", (f"{n}1", f"{n}2", "t")) for n in ("a", "b", "c")]
    data = [
        [(1, 1), (1, 2), (1, 2), (1, 5), (2, 7), (1, 9), (1, 8), (3, 8)],
        [(1, 1), (2, 2), (3, 2), (1, 4)],
        [(1, 1), (2, 2), (3, 2), (2, 1)],
    ]
    q1, q2, q3 = (sums_by(t, f"{t.name}1", f"{t.name}2") for t in tables)
    first = JoinOf(q1, q2, keys=["a1"], right_keys=["b1"], between=(-BIG, BIG))
    model = ComposedModel(JoinOf(first, q3, keys=["b2"], right_keys=["c2"], between=(-BIG, BIG)))
    for table, rows in zip(tables, data, strict=True):
        send_one_by_one(model, table.name, flink_rows(table, *rows))
    model.close()
    got = {(r["a1"], r["a1"], r["c1"]) for r in rows_only(net(model.changelog()))}  # b1 = a1
    assert got == {(2, 2, 3), (3, 3, 3)}


# --- the changelog operators, by hand -------------------------------------------------------


def test_agg_retracts_a_key_left_with_no_rows() -> None:
    """A window's corrections reach ``agg``: a key's row is retracted and emitted anew, or only retracted."""
    src = Source("main", "t", ("k", "t"))
    windows = WindowOf(
        src, TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT], allowed_lateness_ms=100
    )
    model = ComposedModel(AggOf(windows, keys=["n"], aggregates=[agg("windows", "count", None)]))
    assert model.send([{"k": "a", "t": 1}, {"k": "b", "t": 2}, {"k": "a", "t": 15}]) == [
        {"n": 1, "windows": 2, "kind": "emit"}
    ]
    assert model.send([{"k": "a", "t": 3}]) == [
        {"n": 1, "windows": 2, "kind": "retract"},
        {"n": 1, "windows": 1, "kind": "emit"},
        {"n": 2, "windows": 1, "kind": "emit"},
    ]
    assert model.send([{"k": "b", "t": 4}]) == [
        {"n": 1, "windows": 1, "kind": "retract"},
        {"n": 2, "windows": 1, "kind": "retract"},
        {"n": 2, "windows": 2, "kind": "emit"},
    ]
    # event time: the window result's that changed the key (window_end - 1)
    assert {c.ts_ms for c in model.changelog()} == {9}


def test_a_retraction_withdraws_the_equal_row_of_its_event_time() -> None:
    """Two ``agg``s send the same row at different times; the one that changes withdraws its own.

    A retraction carries the event time of the emit it withdraws, so the
    window after the union corrects [0, 10), not [10, 20).
    """
    sa, sb = Source("a", "t", ("k", "t")), Source("b", "t", ("k", "t"))
    counts = [AggOf(s, keys=["k"], aggregates=[COUNT]) for s in (sa, sb)]
    union = UnionOf(counts)
    model = ComposedModel(
        WindowOf(union, TumblingWindow(size_ms=10), keys=["k"], aggregates=[agg("rows", "count", None)])
    )
    model.send([{"k": 1, "t": 5}], source="a")
    model.send([{"k": 1, "t": 15}], source="b")
    model.send([{"k": 1, "t": 7}], source="a")
    assert model.changelog(counts[0]) == [
        Change({"k": 1, "n": 1}, "emit", 5),
        Change({"k": 1, "n": 1}, "retract", 5),
        Change({"k": 1, "n": 2}, "emit", 7),
    ]
    model.close()
    assert sorted((r["window_start"], r["rows"]) for r in rows_only(net(model.changelog()))) == [
        (0, 1),
        (10, 1),
    ]


def test_top_n_keeps_the_latest_row_per_key() -> None:
    """``top_n(1, by="t", per="key", keys=["k"])``: deduplication; each row keeps its own event time."""
    src = Source("main", "t", ("k", "t", "v"))
    model = ComposedModel(TopNOf(src, 1, by=["t"], keys=["k"]))
    assert model.send([{"k": 1, "t": 5, "v": "x"}, {"k": 2, "t": 1, "v": "y"}]) == [
        {"k": 1, "t": 5, "v": "x", "kind": "emit"},
        {"k": 2, "t": 1, "v": "y", "kind": "emit"},
    ]
    assert model.send([{"k": 1, "t": 3, "v": "old"}]) == []
    assert model.send([{"k": 1, "t": 9, "v": "new"}]) == [
        {"k": 1, "t": 5, "v": "x", "kind": "retract"},
        {"k": 1, "t": 9, "v": "new", "kind": "emit"},
    ]
    assert [c.ts_ms for c in model.changelog()] == [5, 1, 5, 9]


def test_top_n_over_corrected_windows() -> None:
    """A correction that pushes a window out of the top retracts it (SPEC 3.11); ``ties="all"`` keeps ties."""
    src = Source("main", "t", ("k", "t"))
    windows = WindowOf(
        src, TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT], allowed_lateness_ms=100
    )
    model = ComposedModel(TopNOf(windows, 1, by=["n"]))
    assert model.send([{"k": "a", "t": 1}, {"k": "b", "t": 2}, {"k": "b", "t": 3}, {"k": "a", "t": 12}]) == [
        {"k": "b", "window_start": 0, "window_end": 10, "n": 2, "kind": "emit"}
    ]
    got = model.send([{"k": "a", "t": 4}])
    assert got == [{"k": "a", "window_start": 0, "window_end": 10, "n": 2, "kind": "emit"}]  # a tie
    got = model.send([{"k": "a", "t": 5}])
    assert bag(got) == bag(
        [
            {"k": "b", "window_start": 0, "window_end": 10, "n": 2, "kind": "retract"},
            {"k": "a", "window_start": 0, "window_end": 10, "n": 2, "kind": "retract"},
            {"k": "a", "window_start": 0, "window_end": 10, "n": 3, "kind": "emit"},
        ]
    )


def test_a_filter_passes_a_retraction_when_it_passed_the_emit() -> None:
    src = Source("main", "t", ("t",))
    windows = WindowOf(src, TumblingWindow(size_ms=10), aggregates=[COUNT], allowed_lateness_ms=100)
    model = ComposedModel(FilterOf(windows, lambda row: row["n"] >= 2))  # type: ignore[operator]
    one = {"window_start": 0, "window_end": 10}
    assert model.send([{"t": 1}, {"t": 20}]) == []  # n = 1 is filtered out
    # the retraction of n = 1 is not passed: the filter did not pass its emit
    assert model.send([{"t": 2}]) == [{**one, "n": 2, "kind": "emit"}]
    assert model.send([{"t": 3}]) == [{**one, "n": 2, "kind": "retract"}, {**one, "n": 3, "kind": "emit"}]


def test_union_and_select_carry_every_change_and_the_lowest_watermark() -> None:
    sa, sb = Source("a", "t", ("k", "t")), Source("b", "t", ("k", "t"))
    per_window = [WindowOf(s, TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT]) for s in (sa, sb)]
    union = UnionOf(per_window)
    model = ComposedModel(SelectOf(union, ["k", "n"]))
    # each window fires on its own source's watermark; the union carries what they emit
    assert model.send([{"k": 1, "t": 1}, {"k": 1, "t": 30}], source="a") == [{"k": 1, "n": 1, "kind": "emit"}]
    assert model.watermark_ms is None  # b has no watermark yet
    assert model.send([{"k": 2, "t": 5}, {"k": 2, "t": 12}], source="b") == [{"k": 2, "n": 1, "kind": "emit"}]
    assert model.watermark_ms == 12
    assert model.close(source="b") == [{"k": 2, "n": 1, "kind": "emit"}]
    assert model.watermark_ms == 30  # a closed input counts as +infinity
    assert [c.ts_ms for c in model.changelog(union)] == [9, 9, 19]


def test_an_outer_join_of_changelogs_pads_again_when_its_last_partner_is_withdrawn() -> None:
    """Flink's regular outer join: a pad is withdrawn by a partner and comes back when the partner goes."""
    src_l, src_r = Source("l", "t", ("k", "t")), Source("r", "t", ("k", "t"))
    right = WindowOf(
        src_r, TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT], allowed_lateness_ms=100
    )
    kept = FilterOf(right, lambda row: row["n"] == 1)
    joined = JoinOf(src_l, kept, keys=["k"], between=(0, 20), how="left")
    model = ComposedModel(joined)
    model.send([{"k": 1, "t": 0}], source="l")
    model.send([{"k": 1, "t": 5}, {"k": 1, "t": 50}], source="r")  # right [0, 10): n = 1 at ts 9
    model.advance_watermark(60, source="l")
    assert model.watermark_of(joined) == 50 - 20  # a left pad holds the watermark back by upper
    model.send([{"k": 1, "t": 6}], source="r")  # n = 2: the filter withdraws the partner
    pad = {"k": 1, "t": 0, "window_start": None, "window_end": None, "n": None}
    pair = {"k": 1, "t": 0, "window_start": 0, "window_end": 10, "n": 1}
    assert model.results == [{**pair, "kind": "emit"}, {**pair, "kind": "retract"}, {**pad, "kind": "emit"}]


def test_plan_errors() -> None:
    src = Source("main", "t", ("k", "t"))
    with pytest.raises(PlanError, match="session window reads source rows only directly"):
        ComposedModel(WindowOf(FilterOf(src, bool), SessionWindow(gap_ms=5), aggregates=[COUNT]))
    with pytest.raises(PlanError, match=r"between=.*window=.*as_of=True"):
        ComposedModel(JoinOf(src, src, keys=["k"]))
    with pytest.raises(PlanError, match="this join is one of"):
        ComposedModel(JoinOf(src, src, keys=["k"], between=(0, 1), how="semi"))
    with pytest.raises(PlanError, match="no column"):
        ComposedModel(AggOf(src, keys=["nope"], aggregates=[COUNT]))
    with pytest.raises(PlanError, match="time column"):
        ComposedModel(Source("main", "when", ("k",)))
    with pytest.raises(PlanError, match="two different sources"):
        ComposedModel(UnionOf([src, Source("main", "t", ("k", "t"), lag_ms=5)]))
    model = ComposedModel(AggOf(src, keys=["k"], aggregates=[COUNT]))
    with pytest.raises(PlanError, match="unknown source"):
        model.send([], source="other")
    model.close()
    with pytest.raises(SourceClosedError):
        model.send([{"k": 1, "t": 1}])


# --- 3. properties --------------------------------------------------------------------------


def window_from_scratch(op: WindowOf, rows: list[tuple[Row, int]]) -> list[tuple[Row, int]]:
    """The ReferenceModel's bounded run over the rows, each at its event time."""
    results = ReferenceModel.bounded(
        [{**r, WHEN: t} for r, t in rows],
        window=op.window,
        event_time=WHEN,
        lag_ms=0,
        keys=op.keys,
        aggregates=op.aggregates,
    )
    return [(r, end - 1) for r in results if isinstance(end := r["window_end"], int)]


def join_from_scratch(
    op: JoinOf, lefts: list[tuple[Row, int]], rights: list[tuple[Row, int]]
) -> list[tuple[Row, int]]:
    """The JoinModel run over both sides' rows in one step, then closed."""
    model = JoinModel(
        kind="interval" if op.window is None else "window",
        keys=op.keys,
        right_keys=op.right_keys,
        left_time=WHEN,
        right_time=WHEN,
        left_columns=(*columns_of(op.left), WHEN),
        right_columns=(*columns_of(op.right), WHEN),
        left_lag_ms=0,
        right_lag_ms=0,
        how=op.how,
        between=op.between,
        window=op.window,
    )
    model.step(left=[{**r, WHEN: t} for r, t in lefts], right=[{**r, WHEN: t} for r, t in rights])
    model.close()
    out = []
    for row in model.results:
        times = [row.pop(WHEN), row.pop(WHEN + "_right")]
        out.append((row, max(int(t) for t in times if t is not None)))  # type: ignore[call-overload]
    return out


def agg_from_scratch(op: AggOf, rows: list[Row]) -> list[Row]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in op.keys), []).append(row)
    out = []
    for key, members in groups.items():
        result: Row = dict(zip(op.keys, key, strict=True))
        for spec in op.aggregates:
            column = spec.column
            values: list[Any] = [m if column is None else m[column] for m in members]
            values = [v for v in values if v is not None]
            if spec.func == "count":
                result[spec.name] = len(values)
            elif not values:
                result[spec.name] = None
            elif spec.func == "avg":
                result[spec.name] = sum(values) / len(values)
            else:
                result[spec.name] = (
                    sum(values) if spec.func == "sum" else min(values) if spec.func == "min" else max(values)
                )
        out.append(result)
    return out


def top_from_scratch(op: TopNOf, rows: list[tuple[Row, int]]) -> list[tuple[Row, int]]:
    """ties="all" by one column, nulls last: rows with fewer than n rows strictly before them."""
    (by,) = op.by

    def ahead(a: Row, b: Row) -> bool:
        """``b`` ranks before ``a``."""
        return b[by] is not None and (a[by] is None or a[by] < b[by])

    return [
        (r, t)
        for r, t in rows
        if sum(ahead(r, o) for o, _ in rows if all(o[k] == r[k] for k in op.keys)) < op.n
    ]


def inputs_of(op: Op) -> tuple[Op, ...]:
    if isinstance(op, Source):
        return ()
    if isinstance(op, JoinOf):
        return (op.left, op.right)
    if isinstance(op, UnionOf):
        return op.inputs
    return (op.input,)


def operators(op: Op) -> list[Op]:
    return [op, *(o for i in inputs_of(op) for o in operators(i))]


def check_from_scratch(model: ComposedModel, op: Op, oracles: bool = True) -> None:
    """(ii) for ``op``'s changelog; (i) its net rows are ``op`` recomputed on its inputs' net rows."""
    got = net(model.changelog(op))
    ins = [net(model.changelog(i)) for i in inputs_of(op)]
    for event in model.late_events_of(op):  # source rows a changelog window or join found very late
        row = {c: v for c, v in event.items() if c not in ("side", "classification", "watermark_ms")}
        side = ins[1 if event.get("side") == "right" else 0]
        side.remove(next(r for r in side if r[0] == row))
    if isinstance(op, WindowOf) and not (oracles and isinstance(op.input, Source)):
        assert timed_bag(got) == timed_bag(window_from_scratch(op, ins[0]))
    elif isinstance(op, JoinOf) and not (
        oracles and isinstance(op.left, Source) and isinstance(op.right, Source)
    ):
        # a late source row joins only the windows still retained for it (SPEC 3.12): a window
        # join reading sources is checked step by step against the JoinModel instead
        if op.window is None or not any(isinstance(i, Source) for i in inputs_of(op)):
            assert timed_bag(got) == timed_bag(join_from_scratch(op, ins[0], ins[1]))
    elif isinstance(op, AggOf):
        assert bag(rows_only(got)) == bag(agg_from_scratch(op, rows_only(ins[0])))
    elif isinstance(op, TopNOf):
        assert timed_bag(got) == timed_bag(top_from_scratch(op, ins[0]))
    elif isinstance(op, UnionOf):
        assert timed_bag(got) == timed_bag(r for rows in ins for r in rows)


class Marks:
    """The sources' watermarks, kept by the test as it sends (SPEC 3.4), and each operator's from them."""

    def __init__(self, lags: dict[str, int]) -> None:
        self.lags = lags
        self.source: dict[str, int] = {}

    def sent(self, step: Step) -> None:
        kind, name, arg = step
        if kind == "send":
            times = [v for r in arg for c, v in r.items() if c.startswith("t")]
            top = max(times) - self.lags[name] if times else None
        else:
            top = arg
        if top is not None:
            self.source[name] = max(self.source.get(name, top), top)

    def close(self) -> None:
        self.source = dict.fromkeys(self.lags, END_OF_TIME_MS)

    def of(self, op: Op) -> int | None:
        if isinstance(op, Source):
            return self.source.get(op.name)
        marks = [self.of(i) for i in inputs_of(op)]
        if any(m is None for m in marks):
            return None
        w = min(m for m in marks if m is not None)
        if not isinstance(op, JoinOf) or w == END_OF_TIME_MS:
            return w
        assert op.window is not None or op.between is not None
        lower, upper = op.between or (0, 0)
        pads = [upper] * (op.how in ("left", "full")) + [-lower] * (op.how in ("right", "full"))
        return w - (op.window.size_ms if op.window is not None else max([0, *pads]))


def run_chain(op: Op, steps: list[Step], lags: dict[str, int], oracles: bool = True) -> ComposedModel:
    """Play ``steps`` on ``op``; check (iv) after every step, (i) and (ii) for every operator at the end."""
    model = ComposedModel(op, oracles=oracles)
    marks = Marks(lags)
    for step in steps:
        kind, name, arg = step
        if kind == "send":
            model.send(arg, source=name)
        else:
            model.advance_watermark(arg, source=name)
        marks.sent(step)
        for o in operators(op):
            assert model.watermark_of(o) == marks.of(o), o
    model.close()
    marks.close()
    for o in operators(op):
        assert model.watermark_of(o) == marks.of(o), o
        check_from_scratch(model, o, oracles)
    return model


@settings(max_examples=150)
@given(
    steps=steps_of(A, B),
    join=JOINS,
    window=WINDOWS,
    lags=st.tuples(LAGS, LAGS),
    lateness=LATENESS,
    oracles=st.booleans(),
)
def test_join_then_window(
    steps: list[Step], join: dict[str, Any], window: Any, lags: tuple[int, int], lateness: int, oracles: bool
) -> None:
    joined = JoinOf(lagged(A, lags[0]), lagged(B, lags[1]), keys=["k"], allowed_lateness_ms=lateness, **join)
    aggs = [COUNT, agg("sx", "sum", "x"), agg("hy", "max", "y")]
    run_chain(
        WindowOf(joined, window, keys=["k"], aggregates=aggs), steps, {"a": lags[0], "b": lags[1]}, oracles
    )


@settings(max_examples=150)
@given(steps=steps_of(A, B), join=JOINS, lags=st.tuples(LAGS, LAGS), lateness=LATENESS)
def test_join_then_agg(steps: list[Step], join: dict[str, Any], lags: tuple[int, int], lateness: int) -> None:
    joined = JoinOf(lagged(A, lags[0]), lagged(B, lags[1]), keys=["k"], allowed_lateness_ms=lateness, **join)
    aggs = [
        COUNT,
        agg("sx", "sum", "x"),
        agg("lo", "min", "y"),
        agg("hi", "max", "y"),
        agg("avg", "avg", "x"),
    ]
    run_chain(AggOf(joined, keys=["k"], aggregates=aggs), steps, {"a": lags[0], "b": lags[1]})


@settings(max_examples=150)
@given(
    steps=steps_of(A),
    second=st.sampled_from(
        [TumblingWindow(size_ms=20), SlidingWindow(size_ms=30, slide_ms=10), SessionWindow(gap_ms=15)]
    ),
    lag=LAGS,
    lateness=LATENESS,
    keys=st.sampled_from([(), ("k",)]),
)
def test_window_then_window_then_agg(
    steps: list[Step], second: Any, lag: int, lateness: int, keys: tuple[str, ...]
) -> None:
    first = WindowOf(
        lagged(A, lag), TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT, agg("s", "sum", "x")],
        allowed_lateness_ms=lateness,
    )  # fmt: skip
    then = WindowOf(first, second, keys=["k"], aggregates=[agg("m", "sum", "n"), agg("top", "max", "s")])
    run_chain(AggOf(then, keys=keys, aggregates=[COUNT, agg("all", "sum", "m")]), steps, {"a": lag})


@settings(max_examples=150)
@given(
    steps=steps_of(A, B, C),
    first=JOINS,
    second=interval_joins(),
    lags=st.tuples(LAGS, LAGS, LAGS),
    lateness=LATENESS,
    oracles=st.booleans(),
)
def test_join_then_join(
    steps: list[Step],
    first: dict[str, Any],
    second: dict[str, Any],
    lags: tuple[int, int, int],
    lateness: int,
    oracles: bool,
) -> None:
    """A three-way join; the rows of ``c`` meet a changelog join, none very late there (L is large)."""
    ab = JoinOf(lagged(A, lags[0]), lagged(B, lags[1]), keys=["k"], allowed_lateness_ms=lateness, **first)
    abc = JoinOf(ab, lagged(C, lags[2]), keys=["k"], allowed_lateness_ms=10**6, **second)
    run_chain(abc, steps, {"a": lags[0], "b": lags[1], "c": lags[2]}, oracles)


@settings(max_examples=100)
@given(steps=steps_of(A, B), lags=st.tuples(LAGS, LAGS), lateness=LATENESS, n=st.integers(1, 2))
def test_union_filter_then_top_n(steps: list[Step], lags: tuple[int, int], lateness: int, n: int) -> None:
    per = [
        WindowOf(
            lagged(s, lag),
            TumblingWindow(size_ms=10),
            keys=["k"],
            aggregates=[COUNT],
            allowed_lateness_ms=lateness,
        )
        for s, lag in ((A, lags[0]), (B, lags[1]))
    ]
    kept = FilterOf(UnionOf(per), lambda row: row["k"] != 2)
    model = run_chain(TopNOf(kept, n, by=["n"], keys=["window_start"]), steps, {"a": lags[0], "b": lags[1]})
    assert timed_bag(net(model.changelog(kept))) == timed_bag(
        (r, t) for r, t in net(model.changelog(kept.input)) if r["k"] != 2
    )


def on_time(steps: list[Step], lags: dict[str, int]) -> list[Step]:
    """``steps`` with every row's time raised to the joined sources' watermark at its step (none late)."""
    marks, out = Marks(lags), []
    for kind, name, arg in steps:
        if kind == "send":
            w = marks.of(JoinOf(A, B, keys=["k"], between=(0, 0)))
            arg = [
                {c: max(v, w) if c.startswith("t") and w is not None else v for c, v in r.items()}
                for r in arg
            ]
        out.append((kind, name, arg))
        marks.sent(out[-1])
    return out


@settings(max_examples=200)
@given(steps=steps_of(A, B), join=JOINS, window=FIXED, lags=st.tuples(LAGS, LAGS), oracles=st.booleans())
def test_no_window_after_a_join_retracts_without_late_rows(
    steps: list[Step], join: dict[str, Any], window: Any, lags: tuple[int, int], oracles: bool
) -> None:
    """(iii): the join's watermark delay makes the window fire only when all its pairs and pads are in.

    Tumbling and sliding windows: a session that fired at ``W = end`` still
    merges with a row at exactly ``end`` (on time, and touching it).
    """
    lag = {"a": lags[0], "b": lags[1]}
    joined = JoinOf(lagged(A, lags[0]), lagged(B, lags[1]), keys=["k"], **join)
    op = WindowOf(joined, window, keys=["k"], aggregates=[COUNT, agg("sx", "sum", "x")])
    model = run_chain(op, on_time(steps, lag), lag, oracles)
    assert model.late_events == []
    assert [c for c in model.changelog(joined) if c.kind == "retract"] == []
    assert [c for c in model.changelog(op) if c.kind == "retract"] == []


# --- 4. a window after a join with a long allowed lateness -----------------------------------


def test_a_window_after_a_join_fires_on_the_watermark_and_a_late_partner_corrects_it() -> None:
    """The join keeps rows 1000 ms late; the window fires at W >= end all the same (the watermark is
    not held back by the allowed lateness), and a partner 18 ms late corrects it: retract, then emit."""
    joined = JoinOf(A, B, keys=["k"], between=(0, 5), allowed_lateness_ms=1000)
    op = WindowOf(joined, TumblingWindow(size_ms=10), keys=["k"], aggregates=[COUNT])
    model = ComposedModel(op)
    model.send([{"k": 1, "ta": 1, "x": 0}], source="a")
    model.send([{"k": 1, "tb": 3, "y": 0}], source="b")
    model.send([{"k": 1, "ta": 20, "x": 0}], source="a")
    window = {"k": 1, "window_start": 0, "window_end": 10}
    assert model.send([{"k": 1, "tb": 22, "y": 0}], source="b") == [{**window, "n": 1, "kind": "emit"}]
    assert model.watermark_of(joined) == model.watermark_ms == 20
    assert model.send([{"k": 1, "ta": 2, "x": 0}], source="a") == [
        {**window, "n": 1, "kind": "retract"},
        {**window, "n": 2, "kind": "emit"},
    ]
    assert model.changelog(joined)[-1] == Change({"k": 1, "ta": 2, "x": 0, "tb": 3, "y": 0}, "emit", 3)
    assert model.late_events == []


# --- over-aggregation in a composition --------------------------------------------------------------


def _net_rows(results: Sequence[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The rows a changelog leaves (emits less retractions), without ``kind``."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in results:
        out[tuple(v for k, v in r.items() if k != "kind")] += 1 if r["kind"] == "emit" else -1
    return +out


def test_an_over_aggregation_over_a_source_is_the_over_model_and_a_window_after_it_sums_its_results() -> None:
    src = Source("s", "t", ("k", "t", "v"))
    aggs = (AggSpec(name="s", func="sum", column="v"),)
    over = OverOf(src, keys=["k"], frame="rows", preceding=1, aggregates=aggs, allowed_lateness_ms=100)
    total = (AggSpec(name="total", func="sum", column="s"),)
    composed = ComposedModel(WindowOf(over, TumblingWindow(size_ms=10), keys=["k"], aggregates=total))
    alone = OverModel(
        keys=("k",), frame="rows", preceding=1, aggs=aggs, allowed_lateness_ms=100, accumulation="retracting"
    )
    steps = [
        [{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 5, "v": 2}, {"k": "a", "t": 12, "v": 4}],
        [{"k": "a", "t": 3, "v": 10}, {"k": "a", "t": 25, "v": 1}],  # t=3: late, within the lateness
        [{"k": "a", "t": -200, "v": 7}],  # very late: dropped
    ]
    seen = 0
    for rows in steps:
        composed.send(rows)
        watermark = composed.watermark_of(src)
        assert watermark is not None
        expected = alone.step(rows) + alone.advance(watermark)
        got = composed.changelog(over)[seen:]
        seen += len(got)
        assert [{**c.row, "kind": c.kind} for c in got] == expected
        assert all(c.ts_ms == c.row["t"] for c in got)  # each result at its row's event time
    # The window sums the net results: [0, 10) holds t=1 (1), t=3 (1+10) and t=5 (10+2).
    assert _net_rows(composed.results) == Counter({("a", 0, 10, 24): 1, ("a", 10, 20, 6): 1})
    assert [e["t"] for e in composed.late_events] == [-200]


def test_an_over_aggregation_over_a_changelog_keeps_every_row_and_corrects_its_results() -> None:
    src = Source("s", "t", ("k", "p", "t", "v"))
    latest = TopNOf(src, n=1, by=["t"], keys=["k"])
    total = AggSpec(name="s", func="sum", column="v")
    over = OverOf(latest, keys=["p"], frame="rows", preceding=1, aggregates=[total])
    composed = ComposedModel(over)
    composed.send([{"k": "x", "p": "a", "t": 10, "v": 1}, {"k": "y", "p": "a", "t": 20, "v": 2}])
    composed.advance_watermark(30)
    assert _net_rows(composed.results) == Counter({("x", "a", 10, 1, 1): 1, ("y", "a", 20, 2, 3): 1})
    # A newer reading of x withdraws its row of t=10, older than the watermark: t=20's result
    # loses it, and t=40's waits for the watermark.
    composed.send([{"k": "x", "p": "a", "t": 40, "v": 5}])
    assert _net_rows(composed.results) == Counter({("y", "a", 20, 2, 2): 1})
    composed.advance_watermark(41)
    assert _net_rows(composed.results) == Counter({("y", "a", 20, 2, 2): 1, ("x", "a", 40, 5, 7): 1})
    assert not composed.late_events
