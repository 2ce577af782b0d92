"""Window top-N: ``top_n`` on window results, on the bounded and native lowerings.

Results are compared with :func:`krishiv_py.testing.top_n_rows` applied to
the reference model's windows (plain Python, independent of the lowerings).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.errors import PlanError
from krishiv_py.testing import (
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
    run_reference,
    run_streaming,
    top_n_rows,
)

SCHEMA = "k string, cat string, t bigint, v bigint"


def counts(s: kp.Stream) -> kp.Stream:
    return (
        s.watermark("t", 5)
        .key_by("k", "cat")
        .tumbling_window(10)
        .agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))
    )


def random_steps(seed: int, batches: int = 4, rows: int = 40) -> list[Step]:
    """Rows over 10 keys and 2 categories, a few out of order; counts tie often."""
    rng = random.Random(seed)
    steps: list[Step] = []
    t = 0
    for _ in range(batches):
        batch = []
        for _ in range(rows):
            t += rng.randint(0, 2)
            batch.append(
                {
                    "k": f"k{rng.randint(0, 9)}",
                    "cat": rng.choice(["x", "y"]),
                    "t": max(0, t - rng.randint(0, 4)),
                    "v": rng.choice([None, *range(-3, 20)]),
                }
            )
        steps.append(Send(batch))
    steps.append(Close())
    return steps


def test_top_n_is_checked_when_the_plan_is_built(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    res = counts(stream)
    with pytest.raises(PlanError, match="n >= 1"):
        res.top_n(0, by="count")
    with pytest.raises(PlanError, match=r"top_n\(\) column"):
        res.top_n(3, by="nope")
    with pytest.raises(PlanError, match=r"ranks the results of a window"):
        stream.top_n(3, by="v")
    with pytest.raises(PlanError, match=r"ties=\.\.\."):
        res.top_n(3, by="count", ties="some")  # type: ignore[arg-type]
    lateness = stream.watermark("t", 5).key_by("k").tumbling_window(10).allowed_lateness(20)
    with pytest.raises(PlanError, match=r"needs \.accumulation\('retracting'\)"):
        lateness.agg(kp.count(kp.col("*"))).top_n(3, by="count").lower()
    ranked = res.top_n(3, by="count")
    with pytest.raises(PlanError, match="after the last window"):
        ranked.union(ranked).lower()


def test_the_native_recipe_ranks_each_micro_batch_and_the_bounded_one_inline(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    ranked = counts(stream).top_n(2, by=["count", "sum_v"], keys=["cat"], ties="first")
    native = ranked.lower()
    assert native.lowering == "native" and native.after is not None
    assert "top_n ranks each micro-batch's results" in native.reason
    after = native.render().split("# then, on the driver, on each micro-batch's results:\n")[1]
    assert (
        "row_number() OVER (PARTITION BY `window_start`, `window_end`, `cat` ORDER BY "
        "`count` DESC NULLS LAST, `sum_v` DESC NULLS LAST, `k` ASC NULLS FIRST, `cat` ASC NULLS FIRST"
    ) in after
    assert "filter('`__kp_rank` <= 2')" in after
    bounded = ranked.lower(force_bounded=True)
    assert bounded.lowering == "bounded" and bounded.after is None
    assert "rank" in bounded.render()
    assert "TopN n=2 by=[count, sum_v] descending per=[window_start, window_end, cat] ties=first" in (
        ranked.explain(show=False)
    )


@pytest.mark.parametrize(("ties", "keys"), [("all", ()), ("first", ("cat",))])
def test_top_n_matches_the_model_streaming_and_bounded(
    session: kp.Session, ties: str, keys: tuple[str, ...]
) -> None:
    steps = random_steps(7 if ties == "all" else 8)

    def ranked(s: kp.Stream) -> kp.Stream:
        return counts(s).top_n(2, by="count", keys=keys, ties=ties)  # type: ignore[arg-type]

    windows = run_reference(SCHEMA, counts, steps)[-1]
    want = top_n_rows(windows, 2, by=["count"], keys=keys, ties=ties)  # type: ignore[arg-type]
    assert 0 < len(want) < len(windows)
    if ties == "all":  # several keys tie for a place somewhere, or the check would be weak
        assert len(want) > 2 * len({(r["window_start"], r["window_end"]) for r in want})
    got = run_streaming(session, SCHEMA, ranked, steps, lowering="native")[-1]
    assert_same_rows(got, want)
    rows = [r for step in steps if isinstance(step, Send) for r in step.rows]
    assert_same_rows(ranked(session.from_records(rows, SCHEMA)).collect(), want)


# --- top-N over results that are corrected (the stateful lowering) ---------------------------------


def corrected_top3(s: kp.Stream) -> kp.Stream:
    """The three keys with the most rows per window, windows corrected for 30 ms."""
    w = s.watermark("t", 0).key_by("k").tumbling_window(10).allowed_lateness(30).accumulation("retracting")
    return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v"))).top_n(3, by="count")


def test_a_correction_that_pushes_a_key_out_of_the_top_retracts_it(session: kp.Session) -> None:
    """Window [0, 10): a 3, b 2, c 1, d 1 (ranks 1, 2, 3, 3: all four in the top 3).

    Three late rows of e rank it first with a: c and d fall to rank 4 and are retracted.
    """
    rows = [("a", 1), ("a", 2), ("a", 3), ("b", 4), ("b", 5), ("c", 6), ("d", 7)]
    steps: list[Step] = [
        Send([{"k": k, "t": t, "v": 1, "cat": "x"} for k, t in rows]),
        Send([{"k": "f", "t": 15, "v": 1, "cat": "x"}]),  # the watermark passes 10: [0, 10) fires
        Send([{"k": "e", "t": t, "v": 1, "cat": "x"} for t in (8, 8, 9)]),  # mildly late
        Close(),
    ]
    recipe = corrected_top3(session.memory_stream(SCHEMA)[0]).lower()
    assert recipe.lowering == "stateful" and not recipe.stages  # nothing runs on the driver
    assert "window top-N runs in krishiv's operator after the window" in recipe.reason
    assert "keyed by other columns" in recipe.reason  # ranked per window: a stage of its own
    assert "applyInArrow(<krishiv top-N per key: n=3" in recipe.render()
    assert "kept until the watermark reaches window_end + 30 ms" in recipe.render()

    def row(k: str, n: int, kind: str) -> dict[str, Any]:
        return {"k": k, "window_start": 0, "window_end": 10, "count": n, "sum_v": n, "kind": kind}

    first = [row("a", 3, "emit"), row("b", 2, "emit"), row("c", 1, "emit"), row("d", 1, "emit")]
    corrected = [row("c", 1, "retract"), row("d", 1, "retract"), row("e", 3, "emit")]
    want = run_reference(SCHEMA, corrected_top3, steps)
    assert want[:3] == [[], first, first + corrected]
    got = run_streaming(session, SCHEMA, corrected_top3, steps)
    for rows_got, rows_want in zip(got, want, strict=True):
        assert_same_rows(rows_got, rows_want)


@pytest.mark.parametrize("ties", ["all", "first"])
def test_top3_over_corrected_windows_equals_the_model_on_random_streams(
    session: kp.Session, ties: Any
) -> None:
    def pipeline(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).key_by("k").tumbling_window(10).allowed_lateness(30)
        return w.accumulation("retracting").agg(kp.count(kp.col("*"))).top_n(3, by="count", ties=ties)

    rnd = random.Random(f"corrected-{ties}-c")
    steps: list[Step] = []
    t = 0
    for _ in range(6):
        batch = []
        for _ in range(rnd.randrange(3, 10)):
            batch.append(
                {
                    "k": rnd.choice("abcdef"),
                    "t": max(0, t - rnd.choice([0, 0, 5, 15, 45])),
                    "v": 1,
                    "cat": "x",
                }
            )
        steps.append(Send(batch))
        t += rnd.randrange(2, 14)
    steps.append(Close())
    assert_lowerings_agree(session, SCHEMA, pipeline, steps)
    final = run_reference(SCHEMA, pipeline, steps)[-1]
    assert any(r["kind"] == "retract" for r in final), "the scenario should correct a top-3"


def test_the_arrow_ranking_equals_the_oracle_on_random_tables() -> None:
    """What the bounded lowering runs on the driver for ``ties="all"``: ``rank() <= n`` in Arrow."""
    import pyarrow as pa

    from krishiv_py.stateful.ranking import rank_all, ranks_exactly

    rnd = random.Random("arrow-rank")
    assert not ranks_exactly([pa.float64()]) and ranks_exactly([pa.int64(), pa.string()])
    for _ in range(200):
        rows = [
            {
                "window_start": rnd.choice([0, 10]),
                "window_end": 10,
                "cat": rnd.choice(["x", "y", None]),
                "a": rnd.choice([1, 2, 3, None]),
                "b": rnd.choice(["p", "q", None]),
            }
            for _ in range(rnd.randrange(0, 25))
        ]
        n, keys = rnd.randrange(1, 4), rnd.choice([(), ("cat",)])
        by, ascending = rnd.choice([["a"], ["a", "b"], ["b"]]), rnd.random() < 0.3
        fields: list[pa.Field[Any]] = [
            pa.field("window_start", pa.int64()),
            pa.field("window_end", pa.int64()),
            pa.field("cat", pa.string()),
            pa.field("a", pa.int64()),
            pa.field("b", pa.string()),
        ]
        schema = pa.schema(fields)
        table = pa.Table.from_pylist(rows, schema=schema)
        got = rank_all(table, n, by=by, group=("window_start", "window_end", *keys), ascending=ascending)
        assert_same_rows(got, top_n_rows(rows, n, by=by, keys=keys, ascending=ascending))


def test_the_bounded_lowering_ranks_on_the_driver_when_arrow_orders_as_spark(session: kp.Session) -> None:
    stream = session.from_records([{"k": "a", "cat": "x", "t": 1, "v": 1}], SCHEMA)
    plain = counts(stream).top_n(1, by="count").lower()
    assert plain.driver_rank is not None and "in Arrow on the driver" in plain.render()
    assert counts(stream).top_n(1, by="count", ties="first").lower().driver_rank is None
    mean = stream.watermark("t", 0).tumbling_window(10).agg(kp.avg(kp.col("v")))
    assert mean.top_n(1, by="avg_v").lower().driver_rank is None  # a double: Spark ranks NaN
