"""A union of operators' results as one kernel (``stateful/union.py``), without Spark."""

from __future__ import annotations

import attrs
import pyarrow as pa

from krishiv_py.expr import col
from krishiv_py.names import BRANCH, RESULT_KIND
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.between import Between
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.union import UnionKernel
from krishiv_py.stateful.window_kernel import WindowKernel
from krishiv_py.types import to_schema

COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
SPEC = KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(COUNT,))


def _rows(keys: list[str], branches: list[int], times: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": keys,
            BRANCH: pa.array(branches, pa.int32()),
            "__kp_ts": [t * 1_000 for t in times],
            "__kp_seq": list(range(len(keys))),
        }
    )


def test_each_branchs_filter_runs_over_its_own_results_and_an_emit_only_branch_says_emit() -> None:
    """Branch 0 retracts (its results carry ``kind``), branch 1 emits only and keeps the windows
    counted more than once: the union's results all carry ``kind``, branch 1's ``emit``."""
    retracting = WindowKernel(attrs.evolve(SPEC, accumulation="retracting"))
    more_than_once = Between(steps=(("filter", ((col("n") > 1).node,), to_schema("k string, n bigint")),))
    union = UnionKernel(branches=(retracting, WindowKernel(SPEC)), betweens=(None, more_than_once))
    state, out = union.step(None, _rows(["a", "a", "b", "c"], [0, 1, 1, 1], [1, 2, 3, 4]), None, 0)
    state, out = union.step(state, _rows(["c"], [1], [5]), 0, 0)
    state, out = union.step(state, _rows([], [], []), 10, 0)
    got = sorted((r["k"], r["n"], r[RESULT_KIND]) for r in out.results.to_pylist())
    assert got == [("a", 1, "emit"), ("c", 2, "emit")]  # b's one row and a's one in branch 1: filtered


def test_without_betweens_or_retractions_the_union_passes_every_result_as_it_is() -> None:
    union = UnionKernel(branches=(WindowKernel(SPEC), WindowKernel(SPEC)))
    state, _ = union.step(None, _rows(["a", "b"], [0, 1], [1, 2]), None, 0)
    _, out = union.step(state, _rows([], [], []), 10, 0)
    assert RESULT_KIND not in out.results.column_names
    assert sorted((r["k"], r["n"]) for r in out.results.to_pylist()) == [("a", 1), ("b", 1)]
