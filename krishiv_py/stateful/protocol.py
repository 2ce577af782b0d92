"""The one protocol of krishiv's stateful operator: a :class:`Kernel`.

A kernel is one stateful operator (a window, a join, ...) as a pure
function over Arrow: state in, a batch of rows in, the watermark in →
state out, rows out. The operator glue (:mod:`krishiv_py.stateful.operator`)
knows kernels only through this protocol: it runs any kernel the same way,
in one call per key bucket and micro-batch, and never asks which kind it
has. A new operator kind is a new class that implements the protocol, not
a branch in the glue.

What a kernel says about itself
    ``keys``: the columns its rows are bucketed by (rows of equal keys meet
    in one call); ``state_keys``: where its state keeps them; ``movable``:
    whether a restart on another number of tasks moves each key's state
    (SPEC 3.15), by :meth:`Kernel.split_state` and
    :meth:`Kernel.gather_states` (:mod:`krishiv_py.stateful.regroup`);
    ``accumulation``: how its firings relate; ``identity``:
    the result columns that identify one result row (what a downstream
    operator or a table sink replaces or withdraws by), ``()`` when its
    rows have none of their own; :meth:`Kernel.output_watermark`: the
    watermark it passes on, the input watermark held back only by its
    structural delay (SPEC 3.13: a window or an inner interval join holds
    back nothing, an outer interval join its pad bound, a window join its
    window's length; never the allowed lateness).
What a kernel does
    :meth:`Kernel.step` (one micro-batch), :meth:`Kernel.next_due` (when the
    watermark or the wall clock next makes the state change, so that the
    job wakes the bucket), :meth:`Kernel.row_due` (the same per state row,
    for kernels that can be stepped a few keys at a time), and, for kernels that take rows merged before
    the shuffle (``mergeable``), :meth:`Kernel.premerge` and
    :meth:`Kernel.on_time`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from krishiv_py.stateful.kernel import StepOutput

__all__ = ["EVERY_STEP", "NOT_DUE", "Keep", "Kernel", "Unmerged"]

#: Which state rows a task keeps when a state moves (:meth:`Kernel.split_state`): given the
#: state's key columns and its number of rows, a boolean mask.
Keep = Callable[[Sequence["pa.ChunkedArray[Any]"], int], "np.ndarray"]

#: What :meth:`Kernel.next_due` answers for nothing due: far below any watermark (a window
#: ending at 0 is due at -1, a legitimate watermark).
NOT_DUE = -(2**62)
#: What :meth:`Kernel.row_due` answers for a row every step must be given, though it is never
#: due: a kernel's own bookkeeping across keys (a chain's watermark of its last step and its next
#: arrival number), held as a row of null keys.
EVERY_STEP = NOT_DUE + 1


@runtime_checkable
class Kernel(Protocol):
    """One stateful operator as a pure step over Arrow (see the module docstring)."""

    @property
    def keys(self) -> tuple[str, ...]:
        """The columns rows are bucketed by: rows of equal keys meet in one call."""
        ...

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        """The state's columns that hold :attr:`keys`, in order: each state row's key group is
        their hash (:mod:`krishiv_py.stateful.key_groups`), so its state can move to another
        task. None: its state rows do not hold their keys (a state that nests others' states,
        or one that cannot move)."""
        ...

    @property
    def movable(self) -> bool:
        """Whether its state can move between tasks by key group (:meth:`split_state`,
        :meth:`gather_states`); False: a job keeps its number of tasks."""
        ...

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        """The part of ``state`` whose keys ``keep`` keeps (every nested state split the same way)."""
        ...

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        """One state from states of disjoint keys that were each stepped to the same watermark."""
        ...

    @property
    def accumulation(self) -> str:
        """``"accumulating"``, ``"discarding"`` or ``"retracting"``."""
        ...

    @property
    def identity(self) -> tuple[str, ...]:
        """The result columns that identify a result row; ``()``: its rows have none."""
        ...

    @property
    def mergeable(self) -> bool:
        """Whether map tasks may merge rows before the shuffle (:meth:`premerge`)."""
        ...

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        """Add ``batch`` to ``state`` under ``watermark_ms``; emit what is due; evict."""
        ...

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        """The least watermark at which ``state`` changes, and the next processing-time firing (ms).

        Either is :data:`NOT_DUE` when nothing is due.
        """
        ...

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        """Per row of ``state``, the least watermark at which a step changes it (:data:`NOT_DUE`:
        none), so that :meth:`next_due` is their least.

        An array promises that the kernel is *key-local*: a step over the rows of some keys
        (every row of each, by :attr:`state_keys`) and a batch of rows of those keys gives those
        keys the state and the results a step over the whole state would, as long as every row due
        at the step's watermark is among them. The operator then steps only the keys a micro-batch
        touches (:mod:`krishiv_py.stateful.held_state`). None: a step may change any row (the wall
        clock, rows of other keys), and the operator steps the whole state. A row due at
        :data:`EVERY_STEP` is given to every step and counted in no :meth:`state_rows`.
        """
        ...

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        """The watermark the kernel's results pass on downstream when its input's is ``watermark_ms``."""
        ...

    def state_rows(self, state: pa.Table) -> int:
        """The rows (windows, stored join rows) ``state`` holds, for the job's metrics."""
        ...

    def premerge(
        self, rows: pa.Table, watermark_ms: int | None, *, by: tuple[str, ...] = ()
    ) -> tuple[pa.Table, pa.Table | None]:
        """Split a map task's ``rows`` into rows for the step and partials merged per key (and ``by``)."""
        ...

    def on_time(self, ts_us: pa.Array[Any], watermark_ms: int) -> np.ndarray:
        """Which rows (by event time) :meth:`premerge` merges under ``watermark_ms``."""
        ...

    def describe(self) -> str:
        """One line for ``explain()``: the kernel and its settings."""
        ...


class Unmerged:
    """What a kernel that takes no rows merged before the shuffle says of it (a mixin)."""

    @property
    def mergeable(self) -> bool:
        return False

    def premerge(
        self, rows: pa.Table, watermark_ms: int | None, *, by: tuple[str, ...] = ()
    ) -> tuple[pa.Table, pa.Table | None]:
        return rows, None

    def on_time(self, ts_us: pa.Array[Any], watermark_ms: int) -> np.ndarray:
        import numpy as np

        return np.zeros(len(ts_us), bool)
