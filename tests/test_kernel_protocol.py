"""Every stateful operator is a kernel behind one protocol, and the glue never asks which.

The operator glue (``stateful/operator.py``) runs a kernel through
:class:`~krishiv_py.stateful.protocol.Kernel` alone: these tests hold that
every kernel implements it, that the glue imports no kernel of its own, and
that each kernel passes on the watermark SPEC 3.13 gives it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from join_kernels import join_kernel

import krishiv_py.stateful.operator as glue
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.joins import JoinKernel
from krishiv_py.stateful.keyed_agg import KeyedAggKernel
from krishiv_py.stateful.keyed_topn import KeyedTopNKernel
from krishiv_py.stateful.over import OverKernel
from krishiv_py.stateful.protocol import NOT_DUE, Kernel
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.window_kernel import WindowKernel

COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)


def _join(kind: str = "interval", how: str = "inner", **more: object) -> JoinKernel:
    return join_kernel(kind, how, **more)


def _kernels() -> list[Kernel]:
    window = WindowKernel(KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(COUNT,)))
    return [
        window,
        _join(between=(-1, 1)),
        _join("window", window=TumblingWindow(size_ms=10)),
        _join("as_of"),
        KeyedAggKernel(keys=("k",), aggs=(COUNT,)),
        KeyedTopNKernel(keys=("k",), n=1, by=("k",), columns=("k",)),
        OverKernel(keys=("k",), columns=("k",), frame="rows", preceding=2, aggs=(COUNT,)),
    ]


def test_every_kernel_implements_the_protocol() -> None:
    for kernel in _kernels():
        assert isinstance(kernel, Kernel)
        state, out = kernel.step(None, _empty_batch(kernel), None, 0)
        assert out.results.num_rows == 0
        assert kernel.next_due(state)[0] == NOT_DUE


def _empty_batch(kernel: Kernel) -> pa.Table:
    from krishiv_py.names import BATCH_TS, SEQ

    columns: dict[str, pa.Array[Any]] = {BATCH_TS: pa.array([], pa.int64()), SEQ: pa.array([], pa.int64())}
    if isinstance(kernel, JoinKernel):
        columns = {f.name: pa.array([], f.type) for f in kernel.spec.row_schema} | columns
    else:
        columns = {"k": pa.array([], pa.string())} | columns
    return pa.table(columns)


def test_the_operator_glue_knows_kernels_only_by_the_protocol() -> None:
    tree = ast.parse(Path(glue.__file__).read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("krishiv_py.stateful")
    }
    assert not imported & {"krishiv_py.stateful.joins", "krishiv_py.stateful.window_kernel"}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not names & {"KernelSpec", "JoinSpec", "WindowKernel", "JoinKernel", "isinstance"}


@pytest.mark.parametrize(
    ("kernel", "passed"),
    [
        (WindowKernel(KernelSpec(keys=(), window=SessionWindow(gap_ms=50), aggs=(COUNT,))), 100),
        (
            WindowKernel(KernelSpec(keys=(), window=SlidingWindow(size_ms=30, slide_ms=10), aggs=(COUNT,))),
            100,
        ),
        (_join(between=(-5, 3)), 100),  # inner: a match is emitted as soon as both rows are there
        (_join(how="left", between=(-5, 3)), 97),  # a left pad waits for upper
        (_join(how="right", between=(-5, 3)), 95),  # a right pad for -lower
        (_join(how="full", between=(-5, 3)), 95),
        (_join(how="left", between=(2, 3)), 97),  # -lower < 0: only the left pad's upper
        (_join("window", window=TumblingWindow(size_ms=10)), 90),  # the window's length
        (_join("as_of", how="left"), 100),  # emitted when W reaches the left row's own time
    ],
)
def test_a_kernel_holds_the_watermark_back_by_its_structural_delay_only(kernel: Kernel, passed: int) -> None:
    assert kernel.output_watermark(100) == passed
    assert kernel.output_watermark(None) is None


def test_the_allowed_lateness_never_holds_the_watermark_back() -> None:
    late = _join(how="left", between=(-5, 3), allowed_lateness_ms=60_000, accumulation="retracting")
    assert late.output_watermark(100) == _join(how="left", between=(-5, 3)).output_watermark(100)
    window = KernelSpec(keys=(), window=TumblingWindow(size_ms=10), aggs=(COUNT,), allowed_lateness_ms=60_000)
    assert WindowKernel(window).output_watermark(100) == 100


def test_every_plan_node_has_its_stateful_lowering() -> None:
    """A node kind added to the plan without a place in the stateful lowering fails here."""
    from typing import get_args

    import krishiv_py.kafka  # noqa: F401  (registers the Kafka source's read rule)
    from krishiv_py.plan import nodes as n
    from krishiv_py.planner.spark.kinds import KINDS
    from krishiv_py.planner.spark.lower import STATEFUL_ROLES
    from krishiv_py.planner.spark.sources import read_rule

    kinds = {k for alias in get_args(n.PlanNode) for k in (get_args(alias) or (alias,))}
    assert set(STATEFUL_ROLES) == kinds
    for kind, role in STATEFUL_ROLES.items():
        if role == "operator":
            assert kind in KINDS
    for source in n.SOURCE_TYPES:
        assert read_rule(object.__new__(source)) is not None


def _samples() -> dict[type, Any]:
    """A plan of every operator kind, that kind on top (a window's top-N after its window)."""
    import krishiv_py as kp
    from krishiv_py.api.stream import placeholder

    s = placeholder("k string, v bigint, t bigint", "s").watermark("t", 0)
    r = placeholder("k string, w bigint, t bigint", "r").watermark("t", 0)
    count = kp.count(kp.col("*")).alias("n")
    window = s.key_by("k").tumbling_window(10).accumulation("retracting").agg(count)
    plans = [
        window,
        s.key_by("k").interval_join(r.key_by("k"), between=(-5, 0)),
        s.key_by("k").agg(count),
        s.top_n(1, by="t", per="key", keys=("k",)),
        window.top_n(1, by="n", keys=("k",)),
        s.key_by("k").over_rows(2).agg(count),
    ]
    return {type(p.plan): p for p in plans}


def test_every_operator_kinds_descriptor_builds_its_kernel_and_lowers_its_plan() -> None:
    """A kind added without a sample here fails; each sample lowers to a kernel behind the protocol,
    the top operator's (a stage's, or the last of a chain's) named as its descriptor says."""
    from krishiv_py.planner.spark.kinds import KINDS
    from krishiv_py.stateful.chain import ChainKernel

    samples = _samples()
    assert set(samples) == set(KINDS)
    for node_type, stream in samples.items():
        kind = KINDS[node_type]
        if kind.kernel is not None:
            kernel, columns = kind.kernel(stream.plan)
            assert isinstance(kernel, Kernel) and columns, kind.what
        apply = stream.lower(lowering="stateful").stateful
        assert apply is not None, kind.what
        top = apply.operator.then.kernel if apply.operator.then is not None else apply.operator.kernel
        while isinstance(top, ChainKernel):
            top = top.then
        assert isinstance(top, Kernel), kind.what
        assert kind.noun.split("-")[0].lower() in top.describe().lower(), (
            kind.what,
            top.describe(),
        )
