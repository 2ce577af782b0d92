"""Input that Spark reads as one micro-batch per file: every file written before the job starts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_batches(folder: Path, tables: Sequence[pa.Table]) -> str:
    """``tables`` as Parquet files in ``folder``, in order (names and modification times both
    ascending: a file source with ``max_files_per_trigger=1`` reads one a micro-batch)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, table in enumerate(tables):
        path = folder / f"{i:02d}.parquet"
        pq.write_table(table, str(path))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    return str(folder)
