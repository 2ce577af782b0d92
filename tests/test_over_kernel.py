"""Over-aggregation's kernel (``krishiv_py/stateful/over.py``) against the reference model.

The kernel is driven as the operator drives it: a batch at the watermark
the step had, then, when the watermark moved, a step over no rows at the
new one. The model (:class:`krishiv_py.model.over.OverModel`) sends the
same rows one by one and advances the same watermarks. After every step
the retracting changelogs must net to the same rows: the model corrects a
row once per late row of a batch, the kernel once per batch (what a
micro-batch emits is the batch's net change). The accumulating kernel emits
exactly the retracting one's emits.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any, Literal, cast

import attrs
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from krishiv_py.model.over import OverModel
from krishiv_py.model.reference import END_OF_TIME_MS
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.over import OverKernel
from krishiv_py.stateful.protocol import NOT_DUE, Kernel

EXAMPLES = int(os.environ.get("KERNEL_EXAMPLES", "150"))
COLUMNS = ("k", "t", "v")
I64, F64 = pa.int64(), pa.float64()
OUT_TYPES: dict[str, pa.DataType] = {"count": I64, "sum": I64, "avg": F64, "min": I64, "max": I64}
OUT_TYPES |= {"count_distinct": I64, "first": I64, "last": I64}

Step = tuple[str, Any]  # ("send", rows) | ("advance", watermark) | ("close", None)


def _aggs(funcs: list[str]) -> tuple[tuple[ModelAgg, ...], tuple[AggSpec, ...]]:
    model, kernel = [], []
    for i, f in enumerate(funcs):
        column = None if f == "count*" else "v"
        func = "count" if f == "count*" else f
        model.append(ModelAgg(name=f"a{i}", func=cast(Any, func), column=column))
        kernel.append(AggSpec(name=f"a{i}", func=func, column=column, out_type=OUT_TYPES[func], in_type=I64))
    return tuple(model), tuple(kernel)


def _batch(rows: list[dict[str, Any]], kinds: bool) -> pa.Table:
    cols: dict[str, Any] = {
        "k": pa.array([r["k"] for r in rows], pa.string()),
        "t": pa.array([r["t"] for r in rows], I64),
        "v": pa.array([r["v"] for r in rows], I64),
        BATCH_TS: pa.array([None if r["t"] is None else r["t"] * 1000 for r in rows], I64),
        SEQ: pa.array(np.arange(len(rows), dtype=np.int64)),
    }
    if kinds:
        cols[RESULT_KIND] = pa.array([r.get("kind", "emit") for r in rows], pa.string())
    return pa.table(cols)


def _key(row: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    out = []
    for n in names:
        v = row.get(n)
        out.append(round(v, 9) if isinstance(v, float) and not math.isnan(v) else v)
    return tuple(out)


def _steps(kernel: OverKernel, steps: list[Step], *, kinds: bool) -> list[list[dict[str, Any]]]:
    """The kernel's rows of each step, driven as the operator drives it."""
    state: pa.Table | None = None
    watermark: int | None = None
    out = []
    for what, arg in steps:
        got: list[dict[str, Any]] = []
        if what == "send":
            state, res = kernel.step(state, _batch(arg, kinds), watermark, 0)
            got += res.results.to_pylist()
        else:
            target = END_OF_TIME_MS if what == "close" else arg
            if watermark is None or target > watermark:
                watermark = target
                state, res = kernel.step(state, _batch([], kinds), watermark, 0)
                got += res.results.to_pylist()
        out.append(got)
    assert state is not None
    if kernel.frame == "rows" and watermark == END_OF_TIME_MS:  # each key keeps what a frame reaches
        assert all(n <= kernel.preceding for n in Counter(state.column("k").to_pylist()).values())
    if kernel.frame == "range" and watermark == END_OF_TIME_MS:
        assert state.num_rows == 0
    return out


def _model_steps(model: OverModel, steps: list[Step]) -> list[list[dict[str, Any]]]:
    out = []
    for what, arg in steps:
        if what == "send":
            out.append(model.send(arg))
        else:
            out.append(model.close() if what == "close" else model.advance(arg))
    return out


def _net(rows: list[dict[str, Any]], names: list[str], view: Counter[tuple[Any, ...]]) -> None:
    for r in rows:
        view[_key(r, names)] += -1 if r.get(RESULT_KIND) == "retract" else 1


@st.composite
def scenarios(draw: Any) -> tuple[OverKernel, OverModel, list[Step], bool]:
    frame: Literal["rows", "range"] = draw(st.sampled_from(["rows", "range"]))
    preceding = draw(st.integers(0, 3)) if frame == "rows" else draw(st.integers(0, 15))
    choices = ["count*", "count", "sum", "avg", "min", "max", "count_distinct"]
    if frame == "rows":
        choices += ["first", "last"]
    funcs = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3))
    lateness = draw(st.sampled_from([0, 5, 20]))
    mode: Literal["accumulating", "retracting"] = draw(st.sampled_from(["accumulating", "retracting"]))
    kinds = draw(st.booleans())
    model_aggs, kernel_aggs = _aggs(funcs)
    kernel = OverKernel(
        keys=("k",),
        columns=COLUMNS,
        frame=frame,
        preceding=preceding,
        aggs=kernel_aggs,
        allowed_lateness_ms=lateness,
        mode=mode,
        retracting_input=kinds,
    )
    model = OverModel(
        keys=("k",),
        frame=frame,
        preceding=preceding,
        aggs=model_aggs,
        allowed_lateness_ms=lateness,
        accumulation=mode,
    )
    steps: list[Step] = []
    sent: list[dict[str, Any]] = []
    watermark = 0
    for _ in range(draw(st.integers(1, 10))):
        if draw(st.integers(0, 2)) == 0:
            watermark += draw(st.integers(0, 15))
            steps.append(("advance", watermark))
            continue
        rows = [
            {
                "k": draw(st.sampled_from(["a", "b"])),
                "t": draw(st.one_of(st.integers(0, 60), st.just(None))) if draw(st.integers(0, 9)) == 0
                else draw(st.integers(max(0, watermark - 25), watermark + 20)),
                "v": draw(st.one_of(st.integers(0, 4), st.none())),
            }
            for _ in range(draw(st.integers(0, 4)))
        ]  # fmt: skip
        if kinds and sent and draw(st.booleans()):
            gone = draw(st.sampled_from(sent))
            rows.append({**gone, "kind": "retract"})
        sent += [r for r in rows if r.get("kind") != "retract"]
        steps.append(("send", rows))
    steps.append(("close", None))
    return kernel, model, steps, kinds


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_kernel_emits_what_the_model_emits_step_by_step(
    scenario: tuple[OverKernel, OverModel, list[Step], bool],
) -> None:
    kernel, model, steps, kinds = scenario
    retracting = attrs.evolve(kernel, mode="retracting")
    model = attrs.evolve(model, accumulation="retracting")
    names = [*COLUMNS, *(a.name for a in kernel.aggs)]
    got, want = Counter[tuple[Any, ...]](), Counter[tuple[Any, ...]]()
    changes = _steps(retracting, steps, kinds=kinds)
    for i, (mine, its) in enumerate(zip(changes, _model_steps(model, steps), strict=True)):
        _net(mine, names, got)
        _net(its, names, want)
        assert +got == +want and not -got, f"after step {i} ({steps[i]!r}): {got - want} {want - got}"
    if kernel.mode == "accumulating":
        emits = [
            [{k: v for k, v in r.items() if k != RESULT_KIND} for r in s if r[RESULT_KIND] == "emit"]
            for s in changes
        ]
        assert _steps(kernel, steps, kinds=kinds) == emits


def _kernel(**changes: Any) -> OverKernel:
    spec = AggSpec(name="s", func="sum", column="v", out_type=I64, in_type=I64)
    base: dict[str, Any] = {
        "keys": ("k",),
        "columns": COLUMNS,
        "frame": "rows",
        "preceding": 1,
        "aggs": (spec,),
    }
    return OverKernel(**(base | changes))


def test_a_late_row_corrects_the_rows_after_it_retracting_first() -> None:
    kernel = _kernel(allowed_lateness_ms=50, mode="retracting")
    state, _ = kernel.step(
        None, _batch([{"k": "a", "t": 10, "v": 1}, {"k": "a", "t": 30, "v": 4}], False), None, 0
    )
    state, out = kernel.step(state, _batch([], False), 40, 0)
    assert [(r["t"], r["s"], r["kind"]) for r in out.results.to_pylist()] == [
        (10, 1, "emit"),
        (30, 5, "emit"),
    ]
    state, out = kernel.step(state, _batch([{"k": "a", "t": 20, "v": 2}], False), 40, 0)
    assert sorted((r["t"], r["s"], r["kind"]) for r in out.results.to_pylist()) == [
        (20, 3, "emit"),
        (30, 5, "retract"),
        (30, 6, "emit"),
    ]
    assert out.mildly_late == 1 and not len(out.very_late)
    # Behind the watermark by more than the lateness: very late, counted, dropped.
    state, out = kernel.step(
        state, _batch([{"k": "a", "t": 5, "v": 9}, {"k": "a", "t": None, "v": 1}], False), 100, 0
    )
    assert out.very_late.tolist() == [0] and out.invalid.tolist() == [1]


def test_the_state_keeps_what_a_frame_can_still_reach_and_says_when_it_changes() -> None:
    rows = [{"k": "a", "t": t, "v": 1} for t in (10, 20, 30, 40)]
    kernel = _kernel(preceding=2, allowed_lateness_ms=5)
    state, _ = kernel.step(None, _batch(rows, False), None, 0)
    assert kernel.next_due(state) == (11, NOT_DUE)  # the first row's result, when the watermark passes 10
    state, _ = kernel.step(state, _batch([], False), 100, 0)
    assert state.column("t").to_pylist() == [30, 40]  # the last two rows: the next row's frame
    assert kernel.next_due(state)[0] == NOT_DUE
    ranged = _kernel(frame="range", preceding=15, allowed_lateness_ms=5)
    state, _ = ranged.step(None, _batch(rows, False), None, 0)
    state, _ = ranged.step(state, _batch([], False), 35, 0)
    assert state.column("t").to_pylist() == [20, 30, 40]  # 10 + 15 is behind 35 - 5
    assert ranged.next_due(state)[0] == 30 + 5 + 1  # the row at 30 turns final (20's frames: 41)
    state, _ = ranged.step(state, _batch([], False), 36, 0)
    assert ranged.next_due(state)[0] == 20 + 15 + 5 + 1


def test_it_is_a_kernel_that_moves_by_key_group() -> None:
    kernel = _kernel()
    assert isinstance(kernel, Kernel) and kernel.movable and kernel.state_keys == ("k",)
    with pytest.raises(ValueError, match="peers have no order"):
        _kernel(frame="range", aggs=(AggSpec(name="f", func="first", column="v", out_type=I64, in_type=I64),))
    with pytest.raises(ValueError, match="takes emits only"):
        kernel.step(None, _batch([{"k": "a", "t": 1, "v": 1, "kind": "retract"}], True), None, 0)
