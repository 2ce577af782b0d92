"""What the stateful kernels share: the spec, the column names, result rows.

The kernel (:mod:`~krishiv_py.stateful.kernel`) and the modules it calls
(:mod:`~krishiv_py.stateful.elements`, :mod:`~krishiv_py.stateful.sessions`,
:mod:`~krishiv_py.stateful.event_sliding`) all read and write the same state
table and build the same result rows. The definitions they share live here,
below all of them, so none of them imports another to reach them:

- :class:`KernelSpec`, everything the kernel knows about one aggregation;
- the column names of the state table (``WS``, ``WE``, ``FIRED``, ``PENDING``,
  ``LAST``, ``EMITTED``, ``SEALED``, ``NEWEST``, ``MAXTS``, ``ROWS``) and of result rows
  (``WINDOW_START``, ``WINDOW_END``, ``FIRST``); the batch's columns and the
  other result columns are in :mod:`krishiv_py.names` (``BATCH_TS``, ``SEQ``,
  ``RESULT_KIND``, ``RESULT_ARITH``);
- :func:`result_table` and :func:`retract_rows`, which build result rows;
- :func:`key_ids`, one numbering of the keys of state rows and batch rows.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import RESULT_ARITH, RESULT_KIND
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS, Accumulation, Trigger
from krishiv_py.plan.windows import SessionWindow, WindowSpec
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful._arrow import Column, table_of
from krishiv_py.stateful.grouping import canonical, group_ids

__all__ = [
    "EMITTED",
    "FIRED",
    "FIRED_TO",
    "FIRST",
    "LAST",
    "MAXTS",
    "NEWEST",
    "PENDING",
    "ROWS",
    "SEALED",
    "WE",
    "WINDOW_END",
    "WINDOW_START",
    "WS",
    "KernelSpec",
    "key_ids",
    "result_table",
    "retract_rows",
]

WS, WE, FIRED, PENDING, LAST, EMITTED = "__ws", "__we", "__fired", "__pending", "__last", "__emitted"
#: Pane state (:mod:`~krishiv_py.stateful.pane_layout`): the watermark (µs) up to which its windows fired.
FIRED_TO = "__fired_to"
FIRST = "__first"  # with pane events: True on a result row that is its window's first firing
SEALED = "__sealed"  # capped sessions: a session that takes no more rows
NEWEST = "__newest"  # with a state TTL: the window's last update (µs; event or processing time)
#: Per-event sliding windows: the largest event time (ms) in a window, Kafka's window timestamp.
MAXTS = "__maxts"
#: Per-event sliding windows under ``on_count(n)``: how many rows a window holds.
ROWS = "__rows"
WINDOW_START, WINDOW_END = "window_start", "window_end"


@attrs.frozen(kw_only=True)
class KernelSpec:
    """Everything the kernel needs to know about one windowed aggregation."""

    keys: tuple[str, ...]
    window: WindowSpec
    aggs: tuple[agg.AggSpec, ...]
    trigger: Trigger = attrs.field(factory=Trigger)
    allowed_lateness_ms: int = 0
    accumulation: Accumulation = "accumulating"
    future_tolerance_ms: int = DEFAULT_FUTURE_TOLERANCE_MS
    #: Report pane events: a ``__first`` column on results, and the windows evicted
    #: (``StepOutput.closed``, result-shaped with their final aggregates).
    pane_events: bool = False
    #: State TTL: a window not updated for this long fires (if it never did) and
    #: leaves state.
    ttl_ms: int | None = None
    #: What the TTL measures: ``"event"`` — the window's newest row behind the
    #: watermark; ``"processing"`` — processing time since a row last joined it.
    ttl_time: Literal["event", "processing"] = "event"

    @property
    def retracting(self) -> bool:
        return self.accumulation == "retracting"

    @property
    def capped(self) -> bool:
        return isinstance(self.window, SessionWindow) and self.window.max_duration_ms is not None

    def key_names(self) -> list[str]:
        return [f"k{i}" for i in range(len(self.keys))]


def key_ids(spec: KernelSpec, state: pa.Table, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Group ids of the keys of ``state`` rows and ``batch`` rows, in one numbering."""
    if not spec.keys:
        return np.zeros(state.num_rows, np.int64), np.zeros(batch.num_rows, np.int64)
    cols = [
        pa.concat_arrays([state.column(k).combine_chunks(), canonical(batch.column(name))])
        for k, name in zip(spec.key_names(), spec.keys, strict=True)
    ]
    ids, _, _ = group_ids(cols)
    return ids[: state.num_rows], ids[state.num_rows :]


def retract_rows(spec: KernelSpec, rows: pa.Table) -> pa.Table:
    """Retractions of the last results of the windows in ``rows`` (the ``__r_*`` state columns)."""
    values = {a.name: rows.column(f"__r_{i}").combine_chunks() for i, a in enumerate(spec.aggs)}
    return result_table(spec, rows, rows.column("__r_ws"), rows.column("__r_we"), values, "retract")


def result_table(
    spec: KernelSpec,
    rows: pa.Table,
    ws: Column,
    we: Column,
    values: dict[str, pa.Array[Any]],
    kind: str,
    *,
    errors: np.ndarray | None = None,
) -> pa.Table:
    """Result rows: keys, ``window_start``/``window_end`` (µs), aggregates, ``kind`` if retracting.

    The last column, :data:`~krishiv_py.names.RESULT_ARITH`, holds each row's
    count of aggregates without a value (an integer sum beyond a bigint);
    :func:`~krishiv_py.stateful.kernel.step` sums and drops it.
    """
    cols: dict[str, Column] = {
        name: rows.column(k) for name, k in zip(spec.keys, spec.key_names(), strict=True)
    }
    cols[WINDOW_START] = ws
    cols[WINDOW_END] = we
    cols |= {a.name: values[a.name] for a in spec.aggs}
    if spec.retracting:
        cols[RESULT_KIND] = pa.array([kind] * rows.num_rows, pa.string())
    cols[RESULT_ARITH] = pa.array(
        errors if errors is not None else np.zeros(rows.num_rows, np.int64), pa.int64()
    )
    return table_of(cols)
