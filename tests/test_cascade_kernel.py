"""The window over a changelog against the reference model of a cascade, without Spark.

The upstream reference model produces each step's window results, as a
retracting window does when it fires again (the planner makes it so before
a window over its results). They reach :class:`ChangesWindowKernel` as
:class:`~krishiv_py.stateful.chain.ChainKernel` hands them on: each
result's event time ``window_end - 1`` ms, applied at the watermark before
the step, then the kernel moved to the new one; it keeps its windows for
its own allowed lateness plus the first window's (as the planner makes it),
or less. Every step's output must
equal :class:`CascadeModel`'s, for tumbling, sliding and session windows
(:func:`krishiv_py.stateful.cascade.step` computes them).
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ, cascade_identity
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful import cascade as c
from krishiv_py.stateful.aggregates import AggSpec as KernelAgg
from krishiv_py.stateful.window_changes import ChangesWindowKernel
from krishiv_py.testing import AggSpec, CascadeModel, ReferenceModel, assert_same_rows


def _between(row: dict[str, Any]) -> dict[str, Any] | None:
    """A filter between the windows: windows of two rows or more; the key folded to its letter."""
    if row["n"] < 2:
        return None
    return {"g": row["k"][0], "n": row["n"], "s": row["s"]}


def _handed_on(results: list[dict[str, Any]], *, filtered: bool, seq: int) -> pa.Table:
    """Upstream results as the kernel takes them: the columns it reads, event time (µs), kind."""
    rows = [
        {**kept, "t": r["window_end"] - 1, RESULT_KIND: r[RESULT_KIND]}
        for r in results
        if (kept := _between(r) if filtered else {"k": r["k"], "n": r["n"], "s": r["s"]}) is not None
    ]
    key = "g" if filtered else "k"
    return pa.table(
        {
            key: pa.array([r[key] for r in rows], pa.string()),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "s": pa.array([r["s"] for r in rows], pa.float64()),
            RESULT_KIND: pa.array([r[RESULT_KIND] for r in rows], pa.string()),
            BATCH_TS: pa.array([r["t"] * 1000 for r in rows], pa.int64()),
            SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
        }
    )


def _in_ms(results: pa.Table) -> list[dict[str, Any]]:
    """The kernel's results with their window bounds in ms, as the model's."""
    return [
        {**r, "window_start": r["window_start"] // 1000, "window_end": r["window_end"] // 1000}
        for r in results.to_pylist()
    ]


WINDOWS = [TumblingWindow(size_ms=30), SlidingWindow(size_ms=30, slide_ms=10), SessionWindow(gap_ms=25)]


@pytest.mark.parametrize("window", WINDOWS, ids=["tumbling", "sliding", "session"])
@pytest.mark.parametrize("mode", ["accumulating", "retracting"])
@pytest.mark.parametrize("filtered", [False, True], ids=["direct", "filtered"])
def test_the_window_over_changes_equals_the_model_on_random_streams(
    window: Any, mode: Any, filtered: bool
) -> None:
    rnd = random.Random(f"{window}{mode}{filtered}")
    for _ in range(25):
        aggs = [AggSpec(name="n", func="count", column=None), AggSpec(name="s", func="sum", column="v")]
        kept = rnd.choice([0, 15, 40])
        upstream = ReferenceModel(
            window=TumblingWindow(size_ms=10),
            event_time="t",
            lag_ms=rnd.choice([0, 3]),
            keys=["k"],
            aggregates=aggs,
            allowed_lateness_ms=kept,
            accumulation="retracting",
        )
        down_aggs = [
            AggSpec(name="peak", func="max", column="n"),
            AggSpec(name="total", func="sum", column="s"),
            AggSpec(name="windows", func="count", column=None),
        ]
        keys = ["g"] if filtered else ["k"]
        lateness = rnd.choice([0, 5, kept, kept + 20])  # the planner's: its own and the first window's
        model = CascadeModel(
            upstream,
            window=window,
            keys=keys,
            aggregates=down_aggs,
            allowed_lateness_ms=lateness,
            accumulation=mode,
            between=_between if filtered else None,
        )
        kernel = ChangesWindowKernel(
            keys=tuple(keys),
            window=window,
            allowed_lateness_ms=lateness,
            accumulation=mode,
            aggs=(
                KernelAgg(name="peak", func="max", column="n", out_type=pa.int64(), in_type=pa.int64()),
                KernelAgg(name="total", func="sum", column="s", out_type=pa.float64(), in_type=pa.float64()),
                KernelAgg(name="windows", func="count", column=None, out_type=pa.int64()),
            ),
        )
        state = None
        t = seq = 0
        for _ in range(rnd.randrange(3, 9)):
            before = model.watermark_ms
            if rnd.random() < 0.15:
                t += rnd.randrange(5, 40)
                start = len(upstream.results)
                want = model.advance_watermark(t)
            else:
                rows = []
                for _ in range(rnd.randrange(1, 8)):
                    t_row = t + rnd.randrange(-35, 12)
                    rows.append(
                        {"k": rnd.choice(["a1", "a2", "b1"]), "t": t_row, "v": rnd.choice([1.0, 2.5, -1.0])}
                    )
                t += rnd.randrange(0, 15)
                start = len(upstream.results)
                want = model.send(rows)
            batch = _handed_on(upstream.results[start:], filtered=filtered, seq=seq)
            seq += batch.num_rows
            state, out = kernel.step(state, batch, before, 0)
            got = _in_ms(out.results)
            if model.watermark_ms != before:
                state, fired = kernel.step(state, batch.slice(0, 0), model.watermark_ms, 0)
                got += _in_ms(fired.results)
            assert_same_rows(got, want)


def test_a_watermark_lower_than_the_last_step_is_ignored() -> None:
    spec = c.CascadeSpec(
        keys=(),
        window=TumblingWindow(size_ms=100),
        aggs=(KernelAgg(name="total", func="sum", column="n", out_type=pa.int64(), in_type=pa.int64()),),
        lateness_ms=0,
        retracting=False,
        identity=1,
    )

    def changes(*ends: int) -> pa.Table:
        return pa.table(
            {
                cascade_identity(0): [str(e) for e in ends],
                c.EVENT_TIME: pa.array([e - 1 for e in ends], pa.int64()),
                c.DELETE: [False] * len(ends),
                "n": pa.array([1] * len(ends), pa.int64()),
            }
        )

    state, out = c.step(spec, None, changes(100), 100)
    assert out.results.to_pylist() == [{"window_start": 0, "window_end": 100, "total": 1}]
    state, out = c.step(spec, state, changes(150), 99)
    assert state.watermark_ms == 100 and not out.results.num_rows
    state, out = c.step(spec, state, changes(100), 120)  # a version of [0, 100) after its end: very late
    assert out.very_late == 1
