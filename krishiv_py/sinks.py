"""Where a job's results go. Configuration only; the runtime applies them.

``MemorySink`` (the default)
    Results stay in memory on the driver; read them with ``job.results()``.
``ParquetSink(path)``
    Spark's file sink: Parquet files plus a ``_spark_metadata`` log, so each
    micro-batch is committed exactly once, also across restarts from the
    same checkpoint. ``job.results()`` reads the committed files back.
``ConsoleSink()``
    Prints every micro-batch (for notebooks and debugging).
``ForeachBatchSink(fn)``
    Calls ``fn(table, batch_id)`` on the driver with each micro-batch as a
    ``pyarrow.Table``. A function that raises fails the job with
    :class:`~krishiv_py.errors.JobError`.
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
    """Print each micro-batch's results."""

    num_rows: int = 20
    truncate: bool = False


@attrs.frozen
class ForeachBatchSink:
    """Call ``fn(table, batch_id)`` with each micro-batch as a ``pyarrow.Table``."""

    fn: Callable[[pa.Table, int], None]


Sink: TypeAlias = MemorySink | ParquetSink | ConsoleSink | ForeachBatchSink
