"""Bounded sliding windows from pane aggregates: the same windows and values as the reference model."""

from __future__ import annotations

import math
import random

import pytest

import krishiv_py as kp
from krishiv_py.testing import assert_same_rows
from krishiv_py.testing.steps import run_reference_bounded

SCHEMA = "k string, t bigint, v bigint, x double"


def rows(seed: int, n: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(n):
        out.append(
            {
                "k": rng.choice(["a", "b", None]),
                "t": rng.choice([None, rng.randint(-50, 400)])
                if rng.random() < 0.05
                else rng.randint(-50, 400),
                "v": rng.choice([None, rng.randint(-100, 100), 2**62]),
                "x": rng.choice([None, rng.uniform(-5, 5), math.nan, 0.5]),
            }
        )
    return out


def every_aggregate(stream: kp.Stream) -> kp.Stream:
    windows = stream.watermark("t", 0).key_by("k").sliding_window(60, 20)
    return windows.agg(
        kp.count(kp.col("*")).alias("n"),
        kp.count(kp.col("x")).alias("nx"),
        kp.sum(kp.col("v")).alias("sv"),
        kp.sum(kp.col("x")).alias("sx"),
        kp.avg(kp.col("v")).alias("av"),
        kp.min(kp.col("x")).alias("lo"),
        kp.max(kp.col("x")).alias("hi"),
        kp.first(kp.col("v")).alias("first_v"),
        kp.last(kp.col("x")).alias("last_x"),
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_pane_aggregates_equal_the_reference_model(session: kp.Session, seed: int) -> None:
    data: list[dict[str, object]] = []
    seen: set[tuple[object, object]] = set()
    for r in rows(seed, 300):  # distinct event times per key keep first/last free of ties
        if (r["k"], r["t"]) not in seen:
            seen.add((r["k"], r["t"]))
            data.append(r)
    pipeline = every_aggregate(session.from_records(data, SCHEMA))
    text = pipeline.explain(show=False)
    assert "combined from 20 ms pane aggregates" in text and "sequence(" in text
    job = pipeline.start()
    expected = run_reference_bounded(SCHEMA, every_aggregate, data)
    assert_same_rows(job.results(), expected)

    def has_values(window: dict[str, object]) -> bool:
        start, end = window["window_start"], window["window_end"]
        assert isinstance(start, int) and isinstance(end, int)
        return any(
            d["v"] is not None and d["k"] == window["k"] and isinstance(d["t"], int) and start <= d["t"] < end
            for d in data
        )

    overflowed = sum(1 for r in expected if r["sv"] is None and has_values(r))
    assert overflowed > 0
    assert job.metrics().arithmetic_errors == overflowed


def test_count_distinct_keeps_spark_window_and_says_why(session: kp.Session) -> None:
    data = [{"k": "a", "t": t, "v": t % 3, "x": 1.0} for t in range(0, 100, 7)]
    windows = session.from_records(data, SCHEMA).watermark("t", 0).sliding_window(60, 20)
    distinct = windows.agg(kp.count_distinct(kp.col("v")).alias("d"))
    text = distinct.explain(show=False)
    assert "count_distinct does not combine from partial aggregates" in text and "sequence(" not in text
    expected = run_reference_bounded(
        SCHEMA,
        lambda s: s.watermark("t", 0).sliding_window(60, 20).agg(kp.count_distinct(kp.col("v")).alias("d")),
        data,
    )
    assert_same_rows(distinct.collect(), expected)
