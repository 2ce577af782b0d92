"""Windows in processing time behind the :class:`~krishiv_py.stateful.protocol.Kernel` protocol.

:class:`ProcessingTimeKernel` runs a tumbling window in processing time
(``tumbling_window(size, time="processing")``, SPEC 3.14) with the window
kernel it wraps, by one rule: the step's ``now_ms`` — on Spark the time its
micro-batch started, ``GroupState.getCurrentProcessingTimeMs()``, the same
value on a re-run of the micro-batch — is every row's time *and* the
watermark. So a row joins the window open at ``now_ms``, and a window fires
in the first step whose ``now_ms`` reaches its end: no row is ever late,
since no later step can have an earlier time. ``next_due`` reports window
ends as processing-time firings, so the job wakes the bucket (a tick) once
the wall clock passes them, with or without input. When every source has
closed (the input's watermark is the end of time) every window fires.

The event time of the input, if it has one, plays no part.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.stateful.aggregates import AggSpec
>>> from krishiv_py.stateful.state import KernelSpec
>>> from krishiv_py.stateful.window_kernel import WindowKernel
>>> count = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
>>> window = TumblingWindow(size_ms=10, time="processing")
>>> kernel = ProcessingTimeKernel(WindowKernel(KernelSpec(keys=("k",), window=window, aggs=(count,))))
>>> rows = pa.table({"k": ["a", "a", "b"], "__kp_ts": [0, 5, 99_000_000], "__kp_seq": [0, 1, 2]})
>>> state, out = kernel.step(None, rows, None, 23)   # every row at 23 ms, whatever its event time
>>> out.results.num_rows, kernel.next_due(state)
(0, (-4611686018427387904, 30))
>>> state, out = kernel.step(state, rows.slice(0, 0), None, 30)   # the clock reaches 30: it fires
>>> out.results.select(["k", "window_start", "window_end", "n"]).to_pylist()[0]["n"]
2
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import BATCH_TS
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import in_processing_time
from krishiv_py.stateful._arrow import replaced
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.protocol import NOT_DUE, Unmerged
from krishiv_py.stateful.regroup import Keep
from krishiv_py.stateful.window_kernel import WindowKernel

__all__ = ["ProcessingTimeKernel"]


@attrs.frozen
class ProcessingTimeKernel(Unmerged):
    """A window kernel whose rows and watermark are the step's processing time."""

    inner: WindowKernel

    def __attrs_post_init__(self) -> None:
        if not in_processing_time(self.inner.spec.window):
            raise ValueError(f"not a processing-time window: {self.inner.spec.window!r}")

    @property
    def keys(self) -> tuple[str, ...]:
        return self.inner.keys

    @property
    def state_keys(self) -> tuple[str, ...] | None:
        return self.inner.state_keys

    @property
    def movable(self) -> bool:
        return self.inner.movable

    def split_state(self, state: pa.Table, keep: Keep) -> pa.Table:
        return self.inner.split_state(state, keep)

    def gather_states(self, states: Sequence[pa.Table]) -> pa.Table | None:
        return self.inner.gather_states(states)

    @property
    def accumulation(self) -> str:
        return self.inner.accumulation

    @property
    def identity(self) -> tuple[str, ...]:
        return self.inner.identity

    def step(
        self,
        state: pa.Table | None,
        batch: pa.Table,
        watermark_ms: int | None,
        now_ms: int,
        *,
        merged: pa.Table | None = None,
    ) -> tuple[pa.Table, StepOutput]:
        if merged is not None:
            raise ValueError("a processing-time window takes no rows merged before the shuffle")
        if batch.num_rows:
            batch = replaced(batch, BATCH_TS, pa.array(np.full(batch.num_rows, now_ms * 1000, np.int64)))
        ended = watermark_ms is not None and watermark_ms >= END_OF_TIME_MS
        return self.inner.step(state, batch, END_OF_TIME_MS if ended else now_ms, now_ms)

    def next_due(self, state: pa.Table) -> tuple[int, int]:
        due, interval = self.inner.next_due(state)
        clocks = [t for t in (due, interval) if t != NOT_DUE]
        return NOT_DUE, (min(clocks) if clocks else NOT_DUE)

    def row_due(self, state: pa.Table) -> np.ndarray | None:
        return None  # (the wall clock fires and expires its rows)

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        return None  # results timed by the wall clock: nothing after them runs on event time

    def state_rows(self, state: pa.Table) -> int:
        return self.inner.state_rows(state)

    def describe(self) -> str:
        return f"{self.inner.describe()} time=processing (rows and firing by the micro-batch's start time)"
