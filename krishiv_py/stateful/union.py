"""A union of operators' results as one kernel: each branch's rows into its own operator.

``stream_a.key_by(...).tumbling_window(...).agg(...).union(stream_b. ...)``,
or a union of joins' rows or of aggregations' changes, is one operator on
the stateful lowering: the rows of every branch travel in one layout (the
columns of all branches by name, a branch number in ``__kp_branch``),
bucketed by their own branch's keys, and each bucket call steps every
branch's kernel over its own rows, then the filters and projections after
that branch (``betweens``) over its results. The union's rows are the
branches' results, corrections included (retractions pass through; a
branch that emits only gets ``kind="emit"`` when another retracts), in
branch order within a call. The two operators under a join of two
operators' results run the same way (``tagged``).

State
    One row: each branch's state table as Arrow IPC, and how many rows
    they hold together.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> from krishiv_py.stateful.state import KernelSpec
>>> from krishiv_py.stateful.window_kernel import WindowKernel
>>> n = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
>>> one = WindowKernel(KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(n,)))
>>> union = UnionKernel(branches=(one, one))
>>> batch = pa.table({"k": ["a", "a", "b"], "__kp_branch": pa.array([0, 1, 1], pa.int32()),
...                   "__kp_ts": [1_000, 2_000, 3_000], "__kp_seq": [0, 1, 2]})
>>> state, out = union.step(None, batch, None, 0)
>>> state, out = union.step(state, batch.slice(0, 0), 10, 0)
>>> sorted((r["k"], r["n"]) for r in out.results.to_pylist())
[('a', 1), ('a', 1), ('b', 1)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import BRANCH, RESULT_KIND
from krishiv_py.stateful._arrow import ipc_bytes, ipc_table
from krishiv_py.stateful.between import Between
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import NOT_DUE, Kernel, Unmerged
from krishiv_py.stateful.regroup import Keep

__all__ = ["UnionKernel"]


@attrs.frozen(kw_only=True)
class UnionKernel(Unmerged):
    """The branches of a union of operators' results, each over its own rows (see the module docstring)."""

    branches: tuple[Kernel, ...]
    #: Each result says which branch made it (``__kp_branch``): the two sides of a join after it.
    tagged: bool = False
    #: The filters and projections over each branch's results (none: ``()`` or None per branch).
    betweens: tuple[Between | None, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return self.branches[0].keys

    @property
    def accumulation(self) -> str:
        return self.branches[0].accumulation

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return None  # (one row: each branch's state)

    @property
    def movable(self) -> bool:
        # Each branch's rows are bucketed by its own keys: its state splits by them.
        return all(b.movable for b in self.branches)

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        return _joined(
            [
                None if s is None else b.split_state(s, keep)
                for b, s in zip(self.branches, _split(state, len(self.branches)), strict=True)
            ]
        )

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        parts = [_split(s, len(self.branches)) for s in states]
        gathered: list[pa.Table | None] = []
        for i, branch in enumerate(self.branches):
            held = [t for p in parts if (t := p[i]) is not None]
            gathered.append(branch.gather_states(held) if held else None)
        return _joined(gathered)

    @property
    def identity(self) -> tuple[str, ...]:
        return ()  # two branches may emit rows of the same keys and window

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        del merged
        states = _split(state, len(self.branches))
        tags = (
            np.asarray(batch.column(BRANCH).to_numpy(), np.int64) if batch.num_rows else np.zeros(0, np.int64)
        )
        outs: list[StepOutput] = []
        very_late: list[np.ndarray] = []
        invalid: list[np.ndarray] = []
        for i, kernel in enumerate(self.branches):
            where = np.flatnonzero(tags == i)
            rows = batch.take(where) if len(where) != batch.num_rows else batch
            states[i], out = kernel.step(states[i], rows, watermark_ms, now_ms)
            outs.append(out)
            very_late.append(where[out.very_late])
            invalid.append(where[out.invalid])
        results = [o.results for o in outs]
        for i, between in enumerate(self.betweens):
            if between is not None:
                results[i] = between.apply(results[i])
        if any(RESULT_KIND in r.column_names for r in results):  # a branch that emits only: emits
            results = [
                r if RESULT_KIND in r.column_names else r.append_column(RESULT_KIND, _emits(r.num_rows))
                for r in results
            ]
        if self.tagged:
            numbers = [pa.array(np.full(r.num_rows, i, np.int32)) for i, r in enumerate(results)]
            results = [r.append_column(BRANCH, b) for r, b in zip(results, numbers, strict=True)]
        closed = [o.closed for o in outs if o.closed is not None]
        return _joined(states), StepOutput(
            results=pa.concat_tables(results, promote_options="permissive"),
            very_late=np.concatenate(very_late),
            invalid=np.concatenate(invalid),
            on_time=sum(o.on_time for o in outs),
            mildly_late=sum(o.mildly_late for o in outs),
            future=sum(o.future for o in outs),
            closed=pa.concat_tables(closed, promote_options="permissive") if closed else None,
            expired=sum(o.expired for o in outs),
            arithmetic_errors=sum(o.arithmetic_errors for o in outs),
        )

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        states = _split(state, len(self.branches))
        due = [k.next_due(s) for k, s in zip(self.branches, states, strict=True) if s is not None]
        events = [d[0] for d in due if d[0] != NOT_DUE]
        clocks = [d[1] for d in due if d[1] != NOT_DUE]
        return (min(events) if events else NOT_DUE), (min(clocks) if clocks else NOT_DUE)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        return None  # (its branches' states share one table)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        marks = [k.output_watermark(watermark_ms) for k in self.branches]
        known = [m for m in marks if m is not None]
        return min(known) if len(known) == len(marks) else None

    def state_rows(self, state: pa.Table) -> int:
        return int(state.column("rows")[0].as_py()) if state.num_rows else 0

    def describe(self) -> str:
        return "krishiv union of " + "; ".join(k.describe() for k in self.branches)


def _emits(count: int) -> pa.Array[Any]:
    return pa.array(["emit"] * count, pa.string())


def _split(state: pa.Table | None, count: int) -> list[pa.Table | None]:
    if state is None or not state.num_rows:
        return [None] * count
    row = state.slice(0, 1).to_pylist()[0]
    return [ipc_table(row[f"branch_{i}"]) if row[f"branch_{i}"] is not None else None for i in range(count)]


def _joined(states: list[pa.Table | None]) -> pa.Table:
    held = [s for s in states if s is not None]
    total = sum(s.num_rows for s in held)
    names = [f"branch_{i}" for i in range(len(states))]
    schema = pa.schema([(name, pa.binary()) for name in names] + [("rows", pa.int64())])
    if not total:
        return schema.empty_table()
    cols = {f"branch_{i}": [ipc_bytes(s) if s is not None else None] for i, s in enumerate(states)}
    return pa.table({**cols, "rows": [total]}, schema=schema)
