"""Restarting a streaming job past a micro-batch that user code fails on every time.

User code runs inside a job: a :class:`~krishiv_py.ForeachBatchSink`
function, a :class:`~krishiv_py.ConsoleSink`, and on the stateful lowering a
late-event handler or pane callbacks. When it raises, the micro-batch does
not commit, the job fails with :class:`~krishiv_py.JobError`, and its
checkpoint stays usable; starting the job again runs the same batch again,
so a function that raises on that batch's rows every time fails it every
time. Its message says so (:func:`restart_hint`).

``Stream.start(..., quarantine_dir=path)`` is the way past it. A call of user
code that raises does not fail the job: the rows that call was given are
written to ``path`` as one Parquet file per micro-batch and kind of call
(:meth:`Quarantine.file_name`), with two more columns, :data:`BATCH_COLUMN`
(the micro-batch id) and :data:`ERROR_COLUMN` (the exception's type and
message); a warning is logged, and the batch commits. A batch that runs again
(after a crash before its commit) overwrites its file, or removes it when the
call now succeeds, so every quarantined row is in exactly one file and no
delivered row is in one. The job's metrics count the files
(:func:`quarantine_counts`), so the counts include earlier runs of the job.

Over Spark Connect, ``foreachBatch`` functions run on the server: there the
server writes the files of the native lowering, so ``path`` must be a
directory the server sees at the same path (as ``state_dir`` is).

Examples
--------
>>> Quarantine("/var/lib/clicks/quarantine").file_name(3, "sink")
'batch-000000000003-sink.parquet'
>>> restart_hint("UserCodeError: the ForeachBatchSink function raised on batch 3: ...").split(":")[0]
'\\nThe failure is in user code'
>>> restart_hint("Py4JError: the connection closed")
''
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from krishiv_py.names import QUARANTINE_BATCH as BATCH_COLUMN
from krishiv_py.names import QUARANTINE_ERROR as ERROR_COLUMN
from krishiv_py.spark_errors import UserCodeError, restart_hint

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BATCH_COLUMN",
    "ERROR_COLUMN",
    "Quarantine",
    "UserCodeError",
    "guarded",
    "quarantine_counts",
    "restart_hint",
]

log = logging.getLogger("krishiv_py")

#: What failed: the sink, the late-event handler, or a pane callback.
Failed = Literal["sink", "late-events", "panes"]

_FILE = re.compile(r"^batch-(\d{12})-(sink|late-events|panes)\.parquet$")


@attrs.frozen
class Quarantine:
    """Where a job sets aside the rows of user-code calls that raised (an absolute local path)."""

    path: str

    @staticmethod
    def file_name(batch_id: int, what: Failed) -> str:
        return f"batch-{batch_id:012d}-{what}.parquet"

    def write(self, rows: pa.Table, batch_id: int, what: Failed, error: str) -> None:
        """Write ``rows`` of ``batch_id`` with the error, atomically (a rerun replaces the file)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = rows.num_rows
        table = rows.append_column(BATCH_COLUMN, pa.array([batch_id] * n, pa.int64())).append_column(
            ERROR_COLUMN, pa.array([error] * n, pa.string())
        )
        name = self.file_name(batch_id, what)
        os.makedirs(self.path, exist_ok=True)
        tmp = os.path.join(self.path, f".{name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, os.path.join(self.path, name))

    def clear(self, batch_id: int, what: Failed) -> None:
        """Remove the file of a batch whose call succeeded when it ran again."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.path, self.file_name(batch_id, what)))


def guarded(
    quarantine: Quarantine | None,
    what: Failed,
    batch_id: int,
    rows: pa.Table | Callable[[], pa.Table],
    call: Callable[[], None],
    *,
    caller: str,
) -> None:
    """Run ``call`` (user code handed ``rows`` in micro-batch ``batch_id``).

    When it raises: without a quarantine, :class:`UserCodeError` naming
    ``caller``, the batch and the exception (the job fails); with one, the
    rows go to the quarantine with the error and the batch goes on.
    """
    try:
        call()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        if quarantine is None:
            one_line = " ".join(error.splitlines())
            raise UserCodeError(f"{caller} raised on batch {batch_id}: {one_line}") from exc
        table = rows() if callable(rows) else rows
        quarantine.write(table, batch_id, what, error)
        log.warning(
            "batch %d: %s raised (%s); its %d rows were set aside to %s",
            batch_id,
            caller,
            error,
            table.num_rows,
            os.path.join(quarantine.path, quarantine.file_name(batch_id, what)),
        )
    else:
        if quarantine is not None:
            quarantine.clear(batch_id, what)


def quarantine_counts(path: str) -> tuple[int, int]:
    """``(micro-batches, rows)`` set aside under ``path`` so far (by any run of the job)."""
    import pyarrow.parquet as pq

    if not os.path.isdir(path):
        return 0, 0
    batches: set[int] = set()
    rows = 0
    for name in os.listdir(path):
        m = _FILE.match(name)
        if m is None:
            continue
        with contextlib.suppress(FileNotFoundError):  # replaced or removed by a batch running now
            rows += pq.read_metadata(os.path.join(path, name)).num_rows
            batches.add(int(m.group(1)))
    return len(batches), rows
