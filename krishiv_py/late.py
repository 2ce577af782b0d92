"""Late-event handlers: where very late and invalid events go instead of nowhere.

An event is *very late* when none of its windows is retained any more
(``W >= window.end + allowed_lateness``); an event without a valid event
time (null, or outside the supported range) is *invalid*. Neither is added
to a window. Under the stateful lowering both reach the pipeline's
late-event handler, on the driver, once per micro-batch that had any, as one
``pyarrow.Table``: the input columns plus

``classification``
    ``"very_late"`` or ``"invalid"``;
``watermark_ms``
    the overall watermark that applied to the event's micro-batch (null
    before the first watermark).

So for every job: input rows = rows counted in windows + rows handed to
the handler (a sliding-window event counts once however many windows it is
in).

Handlers
    :class:`CountingLateEventHandler` (the default) only counts them
    (``JobMetrics.very_late_events``, ``invalid_events``).
    :class:`SideOutputLateEventHandler` writes them to a sink; with the
    default in-memory sink, ``job.late_events()`` returns them.
    Any object with a ``handle(late: pyarrow.Table) -> None`` method is a
    handler; one that raises fails the job with :class:`~krishiv_py.JobError`.
    A handler that also has ``open(context) -> writer`` (a
    :class:`~krishiv_py.sinks.Sink`'s method, as
    :class:`SideOutputLateEventHandler` has) is opened once per job, and
    its writer gets each micro-batch's late events with the batch id
    instead of ``handle``.

Examples
--------
>>> import pyarrow as pa
>>> handler = SideOutputLateEventHandler()
>>> handler.handle(pa.table({"t": [1], "classification": ["very_late"], "watermark_ms": [5]}))
>>> handler.table().num_rows
1
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from krishiv_py.errors import PlanError
from krishiv_py.names import LATE_COLUMNS
from krishiv_py.plan.emission import LateEventHandler
from krishiv_py.sinks import MemorySink, Sink, SinkContext, SinkWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CLASSIFICATION_COLUMN",
    "WATERMARK_COLUMN",
    "CountingLateEventHandler",
    "LateEventHandler",
    "SideOutputLateEventHandler",
    "checked_handler",
]

# (krishiv_py.names keeps them, beside the hidden names the late rows travel under)
CLASSIFICATION_COLUMN, WATERMARK_COLUMN = LATE_COLUMNS


def checked_handler(handler: object) -> LateEventHandler:
    """``handler`` for ``with_late_event_handler()``, or a :class:`PlanError` saying what it lacks."""
    if not isinstance(handler, LateEventHandler):
        raise PlanError(
            "with_late_event_handler() takes an object with a handle(table) method, "
            f"got {type(handler).__name__}"
        )
    return handler


class CountingLateEventHandler:
    """The default: late events are counted in the job's metrics, nothing else."""

    #: Only counts (so ``explain()`` and the planner treat it as no handler at all).
    counts_only = True

    def handle(self, late: pa.Table) -> None:
        return None

    def __repr__(self) -> str:
        return "CountingLateEventHandler()"


class SideOutputLateEventHandler:
    """Write late and invalid events to ``sink`` (default: in memory, see ``job.late_events()``).

    ``sink`` is any :class:`~krishiv_py.sinks.Sink`. A job opens it once
    (its output is ``"late events"``) and writes each micro-batch's late
    events with the batch id, so a batch that Spark runs again after a
    restart replaces what it wrote: with :class:`~krishiv_py.ParquetSink`
    each micro-batch's late events are one Parquet file named after the
    batch, written atomically. The handler itself is configuration: what a
    job wrote is read with ``job.late_events()``; :meth:`handle` and
    :meth:`table` serve calls made outside a job.
    """

    def __init__(self, sink: Sink | None = None) -> None:
        sink = sink if sink is not None else MemorySink()
        if not isinstance(sink, Sink):
            raise PlanError(
                "SideOutputLateEventHandler takes a krishiv sink (an object with open(context), such as "
                f"kp.MemorySink() or kp.ParquetSink(path)), got {type(sink).__name__}"
            )
        self.sink = sink
        self._lock = threading.Lock()
        self._calls = 0
        self._writer: SinkWriter | None = None

    def open(self, context: SinkContext) -> SinkWriter:
        """Open the sink for one job's late events (``context.output`` is ``"late events"``)."""
        return self.sink.open(context)

    def handle(self, late: pa.Table) -> None:
        from krishiv_py.types import Schema

        with self._lock:
            self._calls += 1
            batch = -self._calls  # not from a job: a fresh slot per call
            if self._writer is None:
                context = SinkContext(schema=Schema.from_arrow(late.schema), output="late events")
                self._writer = self.sink.open(context)
            writer = self._writer
        writer.write(late, batch)

    def table(self) -> pa.Table | None:
        """Every late event handed to :meth:`handle` so far (memory and Parquet sinks), None if none."""
        read = getattr(self._writer, "results", None)
        if read is None:
            return None
        table: pa.Table = read()
        return table if table.num_rows else None

    def __repr__(self) -> str:
        return f"SideOutputLateEventHandler({self.sink!r})"
