"""A window after a join in one operator call (``stateful/chain.py``), without Spark.

The oracle is the join's reference model: every pair it emits, with the
later of its two rows' event times, is counted into the tumbling window of
that time per key. After the sources close, the chain's last result of
every window must be that count; with no allowed lateness every window
fires once, in the step whose watermark passes its end.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import pyarrow as pa
import pytest

from krishiv_py.api.stream import placeholder
from krishiv_py.model.joins import join_model_for
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.planner.spark.stateful import join_spec
from krishiv_py.stateful import joins
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.chain import ChainKernel
from krishiv_py.stateful.joins import JoinKernel
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.window_kernel import WindowKernel

SIZE = 10
COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)


def _chain(lateness: int) -> tuple[ChainKernel, Any, Any]:
    left = placeholder("k string, t bigint, a bigint", "left").watermark("t", 0).key_by("k")
    right = placeholder("k string, t bigint, b bigint", "right").watermark("t", 0).key_by("k")
    joined = left.interval_join(right, between=(-3, 3))
    node = (joined.allowed_lateness(lateness) if lateness else joined).plan
    assert isinstance(node, n.Join)
    spec = join_spec(node, shift_ms=0).kernel.spec
    first = JoinKernel(attrs.evolve(spec, event_times=True))
    window = KernelSpec(
        keys=("k",), window=TumblingWindow(size_ms=SIZE), aggs=(COUNT,), allowed_lateness_ms=lateness
    )
    chain = ChainKernel(first=first, then=WindowKernel(window), columns=(("k", pa.string()),))
    return chain, spec, join_model_for(node)


def batch_of(spec: joins.JoinSpec, side: str, rows: list[dict[str, Any]], seq0: int) -> pa.Table:
    """``rows`` of one side as the join kernel takes them (the other side's columns null)."""
    own = ("k", "t", "a") if side == "left" else ("k", "t_right", "b")
    cols: dict[str, Any] = {}
    for field in spec.row_schema:
        if field.name == joins.SIDE:
            cols[field.name] = pa.array([side] * len(rows), field.type)
            continue
        name = field.name.removesuffix("_right") if side == "right" else field.name
        values = [row.get(name) if field.name in own else None for row in rows]
        cols[field.name] = pa.array(values, field.type)
    cols[BATCH_TS] = pa.array([row["t"] * 1000 for row in rows], pa.int64())
    cols[SEQ] = pa.array(range(seq0, seq0 + len(rows)), pa.int64())
    return pa.table(cols)


def _steps(rng: random.Random, count: int) -> list[tuple[str, str, Any]]:
    steps: list[tuple[str, str, Any]] = []
    clock = 0
    for _ in range(count):
        side = rng.choice(["left", "right"])
        if rng.random() < 0.8:
            rows = [
                {"k": rng.choice("ab"), "t": clock + rng.randint(-8, 4), "a" if side == "left" else "b": 1}
                for _ in range(rng.randint(1, 3))
            ]
            steps.append(("send", side, rows))
        else:
            steps.append(("advance", side, clock))
        clock += rng.randint(0, 5)
    return [*steps, ("close", "left", None), ("close", "right", None)]


def _run(lateness: int, seed: int) -> None:
    chain, spec, model = _chain(lateness)
    state: pa.Table | None = None
    pairs: Counter[tuple[str, int]] = Counter()
    fired: dict[tuple[str, int], list[int]] = {}
    seq = 0
    for op, side, arg in _steps(random.Random(seed), 25):
        before = model.watermark_ms
        rows = arg if op == "send" else []
        if op == "send":
            emitted = model.send(arg, side=side)
        elif op == "advance":
            emitted = model.advance_watermark(arg, side=side)
        else:
            emitted = model.close(side=side)
        for pair in emitted:
            t = max(x for x in (pair["t"], pair["t_right"]) if x is not None)
            pairs[(pair["k"], t - t % SIZE)] += 1
        batch = batch_of(spec, side, rows, seq)
        seq += len(rows)
        state, out = chain.step(state, batch, before, 0)
        results = [out.results]
        if model.watermark_ms is not None:
            state, tick = chain.step(state, batch.slice(0, 0), model.watermark_ms, 0)
            results.append(tick.results)
        for table in results:
            for row in table.to_pylist():
                window = (row["k"], row["window_start"] // 1000)
                fired.setdefault(window, []).append(row["n"])
                if lateness == 0:  # fired once the downstream watermark passed the window's end
                    assert model.watermark_ms is not None and model.watermark_ms >= window[1] + SIZE
    assert {w: counts[-1] for w, counts in fired.items()} == dict(pairs)
    if lateness == 0:
        assert all(len(counts) == 1 for counts in fired.values()), fired


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("lateness", [0, 6])
def test_a_window_after_a_join_counts_every_pair_once_final(lateness: int, seed: int) -> None:
    _run(lateness, seed)


def test_the_chain_passes_on_the_watermark_both_kernels_pass_on() -> None:
    chain, _, _ = _chain(0)
    assert chain.output_watermark(50) == 50
    assert chain.identity == ("k", "window_start", "window_end")
    assert chain.keys == ("k",)
