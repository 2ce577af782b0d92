"""Moving a kernel's state between tasks by key group (SPEC 3.15): split, then gather.

After a restart on another number of tasks, a task's key groups may lie in
the states several tasks of the run before left. The operator takes from
each such state the rows of its own key groups
(:meth:`~krishiv_py.stateful.protocol.Kernel.split_state`), steps every part
to the micro-batch's watermark (each task of the run before stepped only
when it had rows, so their parts may stand at different watermarks: a
window join's fired windows, a chain's or a union's marks), and only then
gathers them into one state
(:meth:`~krishiv_py.stateful.protocol.Kernel.gather_states`).

A *flat* kernel keeps one row per key (or per stored row) with its key
columns (:attr:`~krishiv_py.stateful.protocol.Kernel.state_keys`):
:class:`FlatState` splits and gathers it. A kernel whose state nests others'
(a union, a chain, a window over a changelog) splits and gathers each of its
parts with the same two functions.

Examples
--------
>>> import numpy as np
>>> import pyarrow as pa
>>> a = pa.table({"k": ["x", "y"], "v": [1, 2]}).replace_schema_metadata({"mark": "5"})
>>> b = pa.table({"k": ["z"], "v": [3]}).replace_schema_metadata({"mark": "5"})
>>> keep = lambda columns, rows: np.asarray([v != "y" for v in columns[0].to_pylist()], bool)
>>> part = split_table(a, ("k",), keep)
>>> part.column("k").to_pylist(), part.schema.metadata
(['x'], {b'mark': b'5'})
>>> together = gather_tables([part, b])
>>> together.column("k").to_pylist(), together.schema.metadata
(['x', 'z'], {b'mark': b'5'})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import Keep

if TYPE_CHECKING:
    from krishiv_py.stateful.protocol import Kernel

__all__ = ["FlatState", "Keep", "followed", "gather_stepped", "gather_tables", "split_table"]


def split_table(state: pa.Table, names: Sequence[str], keep: Keep) -> pa.Table:
    """The rows of ``state`` whose key columns ``names`` ``keep`` keeps; its schema's marks kept."""
    mask = keep([state.column(k) for k in names], state.num_rows)
    return state.filter(pa.array(np.asarray(mask, bool)))


def gather_tables(states: Sequence[pa.Table]) -> pa.Table | None:
    """Tables of disjoint keys as one (None: no table); a mark of the whole table (schema
    metadata, e.g. a join's sweep mark) kept when all agree — they do once each was stepped to
    the same watermark — and dropped otherwise."""
    if not states:
        return None
    marks = [s.schema.metadata or {} for s in states]
    held = [s for s in states if s.num_rows] or list(states[:1])
    if len(held) == 1:
        together = held[0].replace_schema_metadata(None)
    else:
        together = pa.concat_tables(
            [s.replace_schema_metadata(None) for s in held], promote_options="permissive"
        )
    return together.replace_schema_metadata(marks[0]) if all(m == marks[0] for m in marks) else together


def followed(first: StepOutput, fired: StepOutput) -> StepOutput:
    """A step's output followed by a step over no rows that fired what a higher watermark made due."""
    closed = [c for c in (first.closed, fired.closed) if c is not None]
    return attrs.evolve(
        first,
        results=pa.concat_tables([first.results, fired.results]),
        closed=pa.concat_tables(closed) if closed else None,
        expired=first.expired + fired.expired,
        arithmetic_errors=first.arithmetic_errors + fired.arithmetic_errors,
    )


def gather_stepped(
    kernel: Kernel, parts: list[pa.Table], watermark: int | None, now_ms: int, empty: pa.Table | None
) -> tuple[pa.Table | None, StepOutput | None]:
    """States of disjoint keys as one, each first stepped over no rows (``empty``: the batch's
    columns) to ``watermark``, as a tick would have stepped it; and what that fired, in order
    (None: one part, or nothing to step to)."""
    if len(parts) < 2 or watermark is None or empty is None:
        return kernel.gather_states(parts), None
    caught: StepOutput | None = None
    stepped = []
    for part in parts:
        part, out = kernel.step(part, empty, watermark, now_ms)
        stepped.append(part)
        caught = out if caught is None else followed(caught, out)
    return kernel.gather_states(stepped), caught


class FlatState:
    """What a kernel whose state rows hold their keys (:attr:`state_keys`) says and does to move
    (a mixin)."""

    @property
    def state_keys(self) -> tuple[str, ...] | None:  # pragma: no cover - each kernel says
        raise NotImplementedError

    @property
    def movable(self) -> bool:
        return self.state_keys is not None

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        names = self.state_keys
        if names is None:
            raise ValueError("this kernel's state does not hold its keys: it cannot be split")
        return split_table(state, names, keep)

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        return gather_tables(states)
