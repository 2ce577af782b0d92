"""Where a job's results go. Configuration only; the runtime applies them.

``MemorySink`` (the default)
    Results stay in memory on the driver; read them with ``job.results()``.
``ParquetSink(path)``
    Spark's file sink: Parquet files plus a ``_spark_metadata`` log, so each
    micro-batch is committed exactly once, also across restarts from the
    same checkpoint. ``job.results()`` reads the committed files back.
``ConsoleSink()``
    Prints each micro-batch that has rows (for notebooks and debugging),
    timestamps in UTC with their zone; empty micro-batches print nothing.
``ForeachBatchSink(fn)``
    Calls ``fn(table, batch_id)`` on the driver with each micro-batch as a
    ``pyarrow.Table``. A function that raises fails the job with
    :class:`~krishiv_py.errors.JobError`, unless the job was started with
    ``quarantine_dir=``: then that batch's rows are set aside there
    (:mod:`krishiv_py.runtime.quarantine`) and the job goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

import attrs

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ConsoleSink", "ForeachBatchSink", "MemorySink", "ParquetSink", "Sink"]


@attrs.frozen
class MemorySink:
    """Keep results in memory (the default sink)."""


@attrs.frozen
class ParquetSink:
    """Append results to Parquet files under ``path``, exactly once."""

    path: str


@attrs.frozen(kw_only=True)
class ConsoleSink:
    """Print each micro-batch's results (``num_rows`` at most; empty batches are skipped)."""

    num_rows: int = 20
    truncate: bool = False

    def show(self, table: pa.Table, batch_id: int | None, *, what: str = "results") -> None:
        """Print ``table`` under a header naming the batch; nothing when it is empty."""
        from krishiv_py._display import table_text

        if table.num_rows == 0:
            return
        header = f"-- {what}" + (f", batch {batch_id}" if batch_id is not None else "") + " --"
        print(header)
        print(table_text(table, limit=self.num_rows, truncate=20 if self.truncate else None), flush=True)


@attrs.frozen
class ForeachBatchSink:
    """Call ``fn(table, batch_id)`` with each micro-batch as a ``pyarrow.Table``."""

    fn: Callable[[pa.Table, int], None]


Sink: TypeAlias = MemorySink | ParquetSink | ConsoleSink | ForeachBatchSink
