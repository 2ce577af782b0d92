"""Arithmetic on accepted rows never fails a job: a defined result (exact or null), counted.

Spark's ANSI mode raises on an integer overflow, a zero divisor or a cast it
cannot do; a checkpointed job would then fail on the same batch at every
restart. Every lowering instead gives the result docs/expressions.md
defines, the same as the reference model, and counts it in
``JobMetrics.arithmetic_errors``.
"""

from __future__ import annotations

import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.stateful import aggregates as agg
from krishiv_py.testing import AggSpec, ReferenceModel, Send, assert_same_rows
from krishiv_py.testing.steps import run_reference

SCHEMA = "k string, t bigint, v bigint"
BIG = 2**62
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
#: Window [0, 10) of "a" overflows (3 * 2**62); "b" comes back in range; "c" sits at the edges.
ROWS = [
    {"k": "a", "t": 1, "v": BIG},
    {"k": "b", "t": 2, "v": BIG},
    {"k": "a", "t": 3, "v": BIG},
    {"k": "b", "t": 4, "v": BIG},
    {"k": "c", "t": 5, "v": I64_MAX},
    {"k": "a", "t": 6, "v": BIG},
    {"k": "b", "t": 7, "v": -BIG},
    {"k": "c", "t": 8, "v": I64_MIN},
    {"k": "a", "t": 12, "v": 5},
    {"k": "a", "t": 15, "v": 7},
]
EXPECTED = [
    {"k": "a", "window_start": 0, "window_end": 10, "s": None, "n": 3},
    {"k": "b", "window_start": 0, "window_end": 10, "s": BIG, "n": 3},
    {"k": "c", "window_start": 0, "window_end": 10, "s": -1, "n": 2},
    {"k": "a", "window_start": 10, "window_end": 20, "s": 12, "n": 2},
]


def sums(stream: kp.Stream) -> kp.Stream:
    windows = stream.watermark("t", 0).key_by("k").tumbling_window(10)
    return windows.agg(kp.sum(kp.col("v")).alias("s"), kp.count(kp.col("*")).alias("n"))


def test_the_reference_model_sums_exactly_and_counts_an_overflow() -> None:
    results = run_reference(SCHEMA, sums, [Send(ROWS[:5]), Send(ROWS[5:])])
    assert_same_rows(results[-1], EXPECTED[:3])  # [10, 20) is still open
    model = ReferenceModel(
        window=TumblingWindow(size_ms=10),
        event_time="t",
        lag_ms=0,
        keys=["k"],
        aggregates=[AggSpec(name="s", func="sum", column="v")],
    )
    model.send(ROWS)
    model.close()
    assert model.metrics.arithmetic_errors == 1


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_sum_beyond_a_bigint_is_null_and_counted_while_streaming(
    session: kp.Session, lowering: str
) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = sums(stream).start(lowering=lowering)  # type: ignore[arg-type]
    try:
        sender.send(ROWS[:5])
        job.process_all_available()
        sender.send(ROWS[5:])
        sender.close()
        assert job.await_termination(timeout_s=180)
        assert_same_rows(job.results(), EXPECTED)
        assert job.metrics().arithmetic_errors == 1
        assert "krishiv_window_arithmetic_errors_total 1" in job.metrics().to_prometheus()
    finally:
        job.stop()


def test_a_sum_beyond_a_bigint_is_null_and_counted_in_a_bounded_run(session: kp.Session) -> None:
    job = sums(session.from_records(ROWS, SCHEMA)).start()
    assert_same_rows(job.results(), EXPECTED)
    assert job.metrics().arithmetic_errors == 1


DECIMAL_ROWS = [
    {"k": "a", "t": 1, "d": Decimal("999.99")},
    {"k": "a", "t": 2, "d": Decimal("1.00")},
    {"k": "b", "t": 3, "d": Decimal("-5.50")},
]


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_decimal_sum_beyond_its_type_is_null_and_counted(session: kp.Session, lowering: str) -> None:
    stream, sender = session.memory_stream("k string, t bigint, d decimal(5,2)")
    windows = stream.watermark("t", 0).key_by("k").tumbling_window(10)
    job = windows.agg(kp.sum(kp.col("d")).alias("s")).start(lowering=lowering)  # type: ignore[arg-type]
    try:
        sender.send(DECIMAL_ROWS)
        sender.close()
        assert job.await_termination(timeout_s=180)
        assert {r["k"]: r["s"] for r in job.results().to_pylist()} == {"a": None, "b": Decimal("-5.50")}
        assert job.metrics().arithmetic_errors == 1
    finally:
        job.stop()


EXPR_SCHEMA = "k string, t bigint, a bigint, b bigint, i int, x double, y double, txt string"
EXPR_ROWS = [
    # nothing fails
    {"k": "ok", "t": 1, "a": 7, "b": 2, "i": 3, "x": 1.5, "y": 0.5, "txt": "12"},
    # b = 0, y = 0.0: division and remainder by zero; txt not a number; i + i overflows an int
    {"k": "zero", "t": 2, "a": 7, "b": 0, "i": 2**31 - 1, "x": 1.5, "y": 0.0, "txt": "garbage"},
    # a * 4 overflows a bigint; -a has no bigint value
    {"k": "big", "t": 3, "a": I64_MIN, "b": 1, "i": 1, "x": 2.0, "y": 4.0, "txt": None},
]


def derived(stream: kp.Stream) -> kp.Stream:
    return stream.select(
        kp.col("k"),
        (kp.col("a") / kp.col("b")).alias("q"),
        (kp.col("a") % kp.col("b")).alias("r"),
        (kp.col("x") / kp.col("y")).alias("xq"),
        (kp.col("x") % kp.col("y")).alias("xr"),
        (kp.col("i") + kp.col("i")).alias("ii"),
        (kp.col("a") * 4).alias("a4"),
        (-kp.col("a")).alias("neg"),
        kp.col("txt").cast("bigint").alias("n"),
        (kp.col("x") * 1e308 * 10).alias("inf"),  # doubles overflow to infinity, no error
    )


EXPR_EXPECTED: list[dict[str, object]] = [
    {
        "k": "ok",
        "q": 3.5,
        "r": 1,
        "xq": 3.0,
        "xr": 0.0,
        "ii": 6,
        "a4": 28,
        "neg": -7,
        "n": 12,
        "inf": float("inf"),
    },
    {
        "k": "zero",
        "q": None,
        "r": None,
        "xq": None,
        "xr": None,
        "ii": None,
        "a4": 28,
        "neg": -7,
        "n": None,
        "inf": float("inf"),
    },
    {
        "k": "big",
        "q": float(I64_MIN),
        "r": 0,
        "xq": 0.5,
        "xr": 2.0,
        "ii": 2,
        "a4": None,
        "neg": None,
        "n": None,
        "inf": float("inf"),
    },
]
#: q, r, xq, xr, ii, n of "zero"; a4 and neg of "big" ("big"'s txt is null: nothing to convert).
EXPR_ERRORS = 8


def test_expressions_give_null_where_spark_would_fail_streaming(session: kp.Session) -> None:
    stream, sender = session.memory_stream(EXPR_SCHEMA)
    job = derived(stream).start()
    try:
        sender.send(EXPR_ROWS)
        job.process_all_available()
        assert_same_rows(job.results(), EXPR_EXPECTED)
        assert job.metrics().arithmetic_errors == EXPR_ERRORS
    finally:
        job.stop()


def test_expressions_give_null_where_spark_would_fail_bounded(session: kp.Session) -> None:
    job = derived(session.from_records(EXPR_ROWS, EXPR_SCHEMA)).start()
    assert_same_rows(job.results(), EXPR_EXPECTED)
    assert job.metrics().arithmetic_errors == EXPR_ERRORS


def test_a_filter_on_a_failed_division_drops_the_row_and_counts_it(session: kp.Session) -> None:
    records = session.from_records(EXPR_ROWS, EXPR_SCHEMA)
    kept = records.filter(kp.col("a") / kp.col("b") > 0).select(kp.col("k"))
    job = kept.start()
    assert [r["k"] for r in job.results().to_pylist()] == ["ok"]
    assert job.metrics().arithmetic_errors == 1


def test_expressions_before_a_stateful_window_are_counted(session: kp.Session) -> None:
    stream, sender = session.memory_stream(EXPR_SCHEMA)
    ratio = stream.with_column("q", kp.col("a") / kp.col("b"))
    windows = ratio.watermark("t", 0).key_by("k").tumbling_window(10).allowed_lateness(5)
    job = windows.agg(kp.sum(kp.col("q")).alias("s")).start()
    try:
        sender.send(EXPR_ROWS)
        sender.close()
        assert job.await_termination(timeout_s=180)
        by_key = {r["k"]: r["s"] for r in job.results().to_pylist()}
        assert by_key == {"ok": 3.5, "zero": None, "big": float(I64_MIN)}
        assert job.metrics().arithmetic_errors == 1
    finally:
        job.stop()


def test_a_string_compared_with_a_timestamp_never_fails(session: kp.Session) -> None:
    import datetime as dt

    rows = [
        {"ts": dt.datetime(2024, 1, 1, 0, 0, 5), "since": "2024-01-01 00:00:00"},
        {"ts": dt.datetime(2024, 1, 1, 0, 0, 5), "since": "not a time"},
    ]
    records = session.from_records(rows, "ts timestamp, since string")
    job = records.filter(kp.col("ts") > kp.col("since")).start()
    assert job.results().num_rows == 1
    assert job.metrics().arithmetic_errors == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda: kp.col("v") / 0,
        lambda: kp.col("v") / kp.lit(0.0),
        lambda: kp.col("v") % 0,
        lambda: kp.lit(1) % kp.lit(-0.0),
    ],
)
def test_a_literal_zero_divisor_is_a_plan_error(build: object) -> None:
    with pytest.raises(kp.PlanError, match="by the constant"):
        build()  # type: ignore[operator]


def test_a_literal_zero_divisor_in_sql_is_a_plan_error(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA, name="arith_sql")
    del stream
    with pytest.raises(kp.PlanError, match="by the constant 0"):
        session.sql("SELECT k, v / 0 AS q FROM arith_sql")


def test_the_kernel_sums_integers_exactly_like_python() -> None:
    """Random sums around the bigint limits: the kernel's halves against Python's integers."""
    rng = random.Random(7)
    spec = agg.AggSpec(name="s", func="sum", column="x", out_type=pa.int64(), in_type=pa.int64())
    for _ in range(200):
        groups = rng.randint(1, 6)
        extremes = [I64_MIN, I64_MAX, BIG, -BIG, 0, 1, -1]
        values = [
            rng.choice([None, rng.randint(I64_MIN, I64_MAX), rng.choice(extremes)])
            for _ in range(groups + rng.randint(0, 12))
        ]
        # The first rows hold every group once (the state); the rest arrive later (a batch).
        ids = np.array(rng.sample(range(groups), groups) + [rng.randrange(groups) for _ in values[groups:]])
        parts = agg.row_partials([spec], pa.table({"x": pa.array(values, pa.int64())}), None, None)
        state = agg.merge([spec], {k: v.slice(0, groups) for k, v in parts.items()}, ids[:groups], groups)
        both = {k: pa.concat_arrays([state[k], parts[k].slice(groups)]) for k in parts}
        merged = agg.merge([spec], both, np.concatenate([np.arange(groups), ids[groups:]]), groups)
        got = agg.finalize([spec], merged)["s"].to_pylist()
        errors = agg.overflows([spec], merged)
        for g in range(groups):
            mine = [v for v, i in zip(values, ids, strict=True) if i == g and v is not None]
            exact = sum(mine) if mine else None
            fits = exact is None or I64_MIN <= exact <= I64_MAX
            assert got[g] == (exact if fits else None), (values, ids, g)
            assert errors[g] == (0 if fits else 1)
