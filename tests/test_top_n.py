"""Window top-N: ``top_n`` on window results, on the bounded and native lowerings.

Results are compared with :func:`krishiv_py.testing.top_n_rows` applied to
the reference model's windows (plain Python, independent of the lowerings).
"""

from __future__ import annotations

import random

import pytest

import krishiv_py as kp
from krishiv_py.errors import PlanError
from krishiv_py.testing import Close, Send, Step, assert_same_rows, run_reference, run_streaming, top_n_rows

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
    with pytest.raises(PlanError, match="window top-N"):
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
