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

Examples
--------
>>> import pyarrow as pa
>>> handler = SideOutputLateEventHandler()
>>> handler.handle(pa.table({"t": [1], "classification": ["very_late"], "watermark_ms": [5]}))
>>> handler.table().num_rows
1
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from krishiv_py.errors import PlanError
from krishiv_py.sinks import ConsoleSink, ForeachBatchSink, MemorySink, ParquetSink, Sink

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CLASSIFICATION_COLUMN",
    "WATERMARK_COLUMN",
    "CountingLateEventHandler",
    "LateEventHandler",
    "SideOutputLateEventHandler",
]

CLASSIFICATION_COLUMN = "classification"
WATERMARK_COLUMN = "watermark_ms"


@runtime_checkable
class LateEventHandler(Protocol):
    """Receives the very late and invalid events of one micro-batch."""

    def handle(self, late: pa.Table) -> None: ...


class CountingLateEventHandler:
    """The default: late events are counted in the job's metrics, nothing else."""

    def handle(self, late: pa.Table) -> None:
        return None

    def __repr__(self) -> str:
        return "CountingLateEventHandler()"


class SideOutputLateEventHandler:
    """Write late and invalid events to ``sink`` (default: in memory, see ``job.late_events()``).

    With :class:`~krishiv_py.ParquetSink` each micro-batch's late events are
    one Parquet file named after the batch, written atomically, so a batch
    that Spark runs again after a restart replaces its file instead of
    adding rows twice.
    """

    def __init__(self, sink: Sink | None = None) -> None:
        sink = sink if sink is not None else MemorySink()
        if not isinstance(sink, MemorySink | ParquetSink | ConsoleSink | ForeachBatchSink):
            raise PlanError(f"SideOutputLateEventHandler takes a krishiv sink, got {type(sink).__name__}")
        self.sink = sink
        self._tables: dict[int, pa.Table] = {}
        self._lock = threading.Lock()
        self._calls = 0

    def handle(self, late: pa.Table) -> None:
        with self._lock:
            self._calls += 1
            batch = -self._calls  # not from a job: a fresh slot per call
        self.handle_batch(late, batch)

    def handle_batch(self, late: pa.Table, batch_id: int) -> None:
        """Write ``late`` as micro-batch ``batch_id`` (idempotent per batch id)."""
        if isinstance(self.sink, MemorySink):
            with self._lock:
                self._tables[batch_id] = late
        elif isinstance(self.sink, ParquetSink):
            _write_atomic(late, self.sink.path, batch_id)
        elif isinstance(self.sink, ConsoleSink):
            self.sink.show(late, batch_id, what="late events")
        else:
            self.sink.fn(late, batch_id)

    def table(self) -> pa.Table | None:
        """Every late event written so far (memory and Parquet sinks), None if none yet."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if isinstance(self.sink, ParquetSink):
            if not os.path.isdir(self.sink.path):
                return None
            files = sorted(f for f in os.listdir(self.sink.path) if f.endswith(".parquet"))
            if not files:
                return None
            return pa.concat_tables([pq.read_table(os.path.join(self.sink.path, f)) for f in files])
        with self._lock:
            tables = [self._tables[k] for k in sorted(self._tables, key=_batch_order)]
        return pa.concat_tables(tables) if tables else None

    def __repr__(self) -> str:
        return f"SideOutputLateEventHandler({self.sink!r})"


def _batch_order(batch_id: int) -> tuple[bool, int]:
    return (batch_id < 0, abs(batch_id))


def _write_atomic(table: pa.Table, path: str, batch_id: int) -> None:
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    name = f"late-{'m' if batch_id < 0 else 'b'}{abs(batch_id):012d}.parquet"
    tmp = os.path.join(path, f".{name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(path, name))
