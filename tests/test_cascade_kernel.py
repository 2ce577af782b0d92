"""The second window of a cascade as the driver runs it, against the reference model, without Spark.

The upstream reference model produces each step's window results; they go
through :func:`krishiv_py.stateful.cascade.step` as a micro-batch's results
would, and every step's output must equal :class:`CascadeModel`'s.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful import cascade as c
from krishiv_py.stateful.aggregates import AggSpec as KernelAgg
from krishiv_py.testing import AggSpec, CascadeModel, ReferenceModel, assert_same_rows

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _stamp(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _results_table(rows: list[dict[str, Any]], retracting: bool) -> pa.Table:
    cols: dict[str, Any] = {
        "k": pa.array([r["k"] for r in rows], pa.string()),
        "window_start": pa.array([_stamp(r["window_start"]) for r in rows], pa.timestamp("us", "UTC")),
        "window_end": pa.array([_stamp(r["window_end"]) for r in rows], pa.timestamp("us", "UTC")),
        "n": pa.array([r["n"] for r in rows], pa.int64()),
        "s": pa.array([r["s"] for r in rows], pa.float64()),
    }
    if retracting:
        cols["kind"] = pa.array([r["kind"] for r in rows], pa.string())
    return pa.table(cols)


def _between(row: dict[str, Any]) -> dict[str, Any] | None:
    """A filter between the windows: windows of two rows or more; the key folded to its letter."""
    if row["n"] < 2:
        return None
    return {"g": row["k"][0], "n": row["n"], "s": row["s"]}


WINDOWS = [TumblingWindow(size_ms=30), SlidingWindow(size_ms=30, slide_ms=10), SessionWindow(gap_ms=25)]


@pytest.mark.parametrize("window", WINDOWS, ids=["tumbling", "sliding", "session"])
@pytest.mark.parametrize("mode", ["accumulating", "retracting"])
@pytest.mark.parametrize("filtered", [False, True], ids=["direct", "filtered"])
def test_the_driver_step_equals_the_model_on_random_streams(window: Any, mode: Any, filtered: bool) -> None:
    rnd = random.Random(f"{window}{mode}{filtered}")
    for _ in range(25):
        aggs = [AggSpec(name="n", func="count", column=None), AggSpec(name="s", func="sum", column="v")]
        upstream = ReferenceModel(
            window=TumblingWindow(size_ms=10),
            event_time="t",
            lag_ms=rnd.choice([0, 3]),
            keys=["k"],
            aggregates=aggs,
            allowed_lateness_ms=rnd.choice([0, 15, 40]),
            accumulation=mode,
        )
        down_aggs = [
            AggSpec(name="peak", func="max", column="n"),
            AggSpec(name="total", func="sum", column="s"),
            AggSpec(name="windows", func="count", column=None),
        ]
        keys = ["g"] if filtered else ["k"]
        lateness = rnd.choice([0, 20])
        model = CascadeModel(
            upstream,
            window=window,
            keys=keys,
            aggregates=down_aggs,
            allowed_lateness_ms=lateness,
            accumulation=mode,
            between=_between if filtered else None,
        )
        spec = c.CascadeSpec(
            keys=tuple(keys),
            window=window,
            lateness_ms=lateness,
            retracting=mode == "retracting",
            identity=3,
            aggs=(
                KernelAgg(name="peak", func="max", column="n", out_type=pa.int64(), in_type=pa.int64()),
                KernelAgg(name="total", func="sum", column="s", out_type=pa.float64(), in_type=pa.float64()),
                KernelAgg(name="windows", func="count", column=None, out_type=pa.int64()),
            ),
        )
        state = None
        t = 0
        for _ in range(rnd.randrange(3, 9)):
            if rnd.random() < 0.15:
                t += rnd.randrange(5, 40)
                before = len(upstream.results)
                want = model.advance_watermark(t)
            else:
                rows = []
                for _ in range(rnd.randrange(1, 8)):
                    t_row = t + rnd.randrange(-35, 12)
                    rows.append(
                        {"k": rnd.choice(["a1", "a2", "b1"]), "t": t_row, "v": rnd.choice([1.0, 2.5, -1.0])}
                    )
                t += rnd.randrange(0, 15)
                before = len(upstream.results)
                want = model.send(rows)
            emitted = upstream.results[before:]
            table = _results_table(emitted, mode == "retracting")
            if filtered:
                kept_rows = [
                    i
                    for i, r in enumerate(emitted)
                    if _between(dict(r)) is not None and r.get("kind") != "retract"
                ]
                kept = pa.table(
                    {
                        "g": pa.array([str(emitted[i]["k"])[0] for i in kept_rows], pa.string()),
                        "n": pa.array([emitted[i]["n"] for i in kept_rows], pa.int64()),
                        "s": pa.array([emitted[i]["s"] for i in kept_rows], pa.float64()),
                    }
                )
                rows_idx = np.array(kept_rows, np.int64)
            else:
                kept = table.select(["k", "n", "s"])
                rows_idx = np.arange(table.num_rows, dtype=np.int64)
            changes = c.changes_of(
                table, ["k", "window_start", "window_end"], kept, rows_idx, retracting=mode == "retracting"
            )
            state, out = c.step(spec, state, changes, model.watermark_ms)
            assert_same_rows(out.results.to_pylist(), want)


# --- window top-N over corrected results -------------------------------------------------------


@pytest.mark.parametrize("ties", ["all", "first"])
def test_the_driver_top_n_step_equals_the_model_on_random_streams(ties: Any) -> None:
    from krishiv_py.stateful import topn
    from krishiv_py.testing import TopNModel, top_n_rows

    rnd = random.Random(ties)
    for _ in range(30):
        lateness = rnd.choice([10, 30])
        upstream = ReferenceModel(
            window=TumblingWindow(size_ms=10),
            event_time="t",
            lag_ms=0,
            keys=["k"],
            aggregates=[AggSpec(name="n", func="count", column=None)],
            allowed_lateness_ms=lateness,
            accumulation="retracting",
        )
        model = TopNModel(upstream, n=2, by=["n"], ties=ties, allowed_lateness_ms=lateness)
        spec = topn.TopNSpec(
            identity=("k", "window_start", "window_end"),
            group=("window_start", "window_end"),
            lateness_ms=lateness,
        )

        def rank(rows: pa.Table) -> pa.Table:
            top = top_n_rows(rows.to_pylist(), 2, by=["n"], ties=ties)
            return pa.Table.from_pylist(top, schema=rows.schema)

        state = None
        t = 0
        for _ in range(rnd.randrange(3, 10)):
            rows = [
                {"k": rnd.choice("abcde"), "t": max(0, t + rnd.randrange(-25, 8))}
                for _ in range(rnd.randrange(1, 9))
            ]
            t += rnd.randrange(0, 12)
            before = len(upstream.results)
            want = model.send(rows)
            emitted = upstream.results[before:]
            table = pa.table(
                {
                    "k": pa.array([r["k"] for r in emitted], pa.string()),
                    "window_start": pa.array([r["window_start"] for r in emitted], pa.int64()),
                    "window_end": pa.array([r["window_end"] for r in emitted], pa.int64()),
                    "n": pa.array([r["n"] for r in emitted], pa.int64()),
                    "kind": pa.array([r["kind"] for r in emitted], pa.string()),
                }
            )
            state, out = topn.step(spec, state, table, model.watermark_ms, rank)
            assert_same_rows(out.to_pylist(), want)
