"""The window kernel behind the :class:`~krishiv_py.stateful.protocol.Kernel` protocol.

:class:`WindowKernel` runs one windowed aggregation
(:class:`~krishiv_py.stateful.state.KernelSpec`, every window kind) with
:func:`krishiv_py.stateful.kernel.step`. Its results are identified by
their key columns and window bounds, and it passes the watermark on
unchanged: a window's result (event time ``window_end - 1`` ms) is emitted
when the watermark reaches ``window_end``, so none is late downstream.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> from krishiv_py.stateful.state import KernelSpec
>>> count = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
>>> kernel = WindowKernel(KernelSpec(keys=("k",), window=TumblingWindow(size_ms=10), aggs=(count,)))
>>> kernel.identity, kernel.output_watermark(25), kernel.mergeable
(('k', 'window_start', 'window_end'), 25, True)
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.plan.windows import EventSlidingWindow
from krishiv_py.stateful import kernel
from krishiv_py.stateful.premerge import on_time_rows, premerge, premergeable
from krishiv_py.stateful.protocol import NOT_DUE
from krishiv_py.stateful.regroup import FlatState
from krishiv_py.stateful.state import FIRED, LAST, NEWEST, PENDING, WE, WS, KernelSpec

__all__ = ["WindowKernel"]


@attrs.frozen
class WindowKernel(FlatState):
    """A windowed aggregation as a :class:`~krishiv_py.stateful.protocol.Kernel`."""

    spec: KernelSpec

    @property
    def keys(self) -> tuple[str, ...]:
        return self.spec.keys

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return tuple(self.spec.key_names())

    @property
    def accumulation(self) -> str:
        return str(self.spec.accumulation)

    @property
    def identity(self) -> tuple[str, ...]:
        return (*self.spec.keys, "window_start", "window_end")

    @property
    def mergeable(self) -> bool:
        return premergeable(self.spec)

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, kernel.StepOutput]:
        return kernel.step(self.spec, state, batch, watermark_ms, now_ms, merged=merged)

    def _due(self, state: pa.Table) -> np.ndarray:
        """Per state row, the watermark at which it fires or goes."""
        spec = self.spec
        we = state.column(WE).to_numpy() // 1000
        fired = np.asarray(state.column(FIRED).to_numpy(zero_copy_only=False), bool)
        due: np.ndarray = np.where(fired, we + spec.allowed_lateness_ms, we)
        window = spec.window
        if isinstance(window, EventSlidingWindow):  # a closed window goes once no row can look it up
            starts = state.column(WS).to_numpy() // 1000
            due = np.where(fired, starts + window.grace_ms + 3 * window.size_ms + 1, we)
        if spec.ttl_ms is not None and spec.ttl_time == "event":  # newest row ttl behind
            due = np.minimum(due, state.column(NEWEST).to_numpy() // 1000 + spec.ttl_ms)
        return np.asarray(due, np.int64)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        spec = self.spec
        if spec.trigger.kind == "interval" or (spec.ttl_ms is not None and spec.ttl_time == "processing"):
            return None  # (the wall clock changes rows too)
        if kernel.pane_state(spec):
            return None  # (every pane row holds the watermark up to which the windows of all keys fired)
        return self._due(state) if state.num_rows else np.zeros(0, np.int64)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        spec = self.spec
        if not state.num_rows:
            return NOT_DUE, NOT_DUE
        due = self._due(state)
        interval = NOT_DUE
        if spec.trigger.kind == "interval":
            pending = state.column(PENDING).to_numpy() > 0
            last = state.column(LAST).to_numpy()
            if pending.any():
                interval = int(np.min(np.where(last[pending] < 0, 0, last[pending] + spec.trigger.every)))
        if spec.ttl_ms is not None and spec.ttl_time == "processing":
            # The bucket is woken (like an interval firing) when its oldest window expires.
            expires = int(state.column(NEWEST).to_numpy().min() // 1000 + spec.ttl_ms)
            interval = expires if interval < 0 else min(interval, expires)
        return int(due.min()), interval

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return watermark_ms

    def state_rows(self, state: pa.Table) -> int:
        return state.num_rows

    def premerge(
        self, rows: pa.Table, watermark_ms: int | None, *, by: tuple[str, ...] = ()
    ) -> tuple[pa.Table, pa.Table | None]:
        return premerge(attrs.evolve(self.spec, keys=(*self.spec.keys, *by)), rows, watermark_ms)

    def on_time(self, ts_us: pa.Array[Any], watermark_ms: int) -> np.ndarray:
        return on_time_rows(self.spec, ts_us, watermark_ms)

    def describe(self) -> str:
        k = self.spec
        return (
            f"krishiv window operator: keys={list(k.keys)} window={k.window!r} "
            f"trigger={k.trigger.describe()} allowed_lateness_ms={k.allowed_lateness_ms} "
            f"accumulation={k.accumulation}"
        )
