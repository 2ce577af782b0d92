"""A source's rows in arrival order, in the micro-batches a job reads them in, without Spark.

- A memory stream: the sender's batches (one ``send`` is one micro-batch).
- Files (``read_parquet``/``read_csv``/``read_json``, bounded or streaming):
  one file per micro-batch, files in name order (a streaming file source
  with ``max_files_per_trigger=1`` reads them so when they are named in the
  order they were written).
- In-memory records (``from_records``): ``batch_rows`` rows per micro-batch
  (default :data:`DEFAULT_BATCH_ROWS`); a bounded Spark run reads them as one
  batch, in which nothing is late, so the replay cuts them into arrival-order
  steps instead.

``batch_rows`` cuts every source into steps of that many rows instead.
Kafka and Spark DataFrame sources are not read here (a :class:`PlanError`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n

__all__ = ["DEFAULT_BATCH_ROWS", "event_ms", "file_format", "read_batches", "read_files"]

#: Rows per replayed micro-batch for in-memory records.
DEFAULT_BATCH_ROWS = 1_000
_SENDER_FILE = re.compile(r"^batch-(\d{12})-data\.parquet$")
_SUFFIXES: dict[n.FileFormat, tuple[str, ...]] = {
    "parquet": (".parquet",),
    "csv": (".csv",),
    "json": (".json", ".jsonl", ".ndjson"),
}


def read_batches(source: n.PlanNode, batch_rows: int | None = None) -> list[pa.Table]:
    """The micro-batches of ``source``, in arrival order (see the module's rules)."""
    if batch_rows is not None and (isinstance(batch_rows, bool) or batch_rows < 1):
        raise PlanError(f"batch_rows must be a positive number of rows, got {batch_rows!r}")
    names = [f.name for f in source.schema] if isinstance(source, n.SOURCE_TYPES) else []
    if isinstance(source, n.RecordsSource):
        batches = [source.data]
        batch_rows = batch_rows or DEFAULT_BATCH_ROWS
    elif isinstance(source, n.MemorySource):
        files = sorted(p for p in Path(source.path).iterdir() if _SENDER_FILE.match(p.name))
        batches = [_read(p, "parquet").select(names) for p in files]
    elif isinstance(source, n.FileSource):
        batches = [t.select(names) for t in read_files(source.path, source.format)]
    else:
        kind = type(source).__name__
        raise PlanError(
            f"watermark advice and what-if replay read memory streams, files and records; {kind} is not "
            "read here (write a sample of it to Parquet and point read_parquet at it)"
        )
    if batch_rows is None:
        return batches
    whole = pa.concat_tables(batches) if batches else pa.table({})
    return [whole.slice(i, batch_rows) for i in range(0, whole.num_rows, batch_rows)]


def read_files(path: str, fmt: str | None = None) -> list[pa.Table]:
    """Each data file under ``path`` (or ``path`` itself), in name order, read with Arrow."""
    fmt = fmt or file_format(path)
    if fmt not in _SUFFIXES:
        raise PlanError(f"file format must be parquet, csv or json, got {fmt!r}")
    root = Path(path)
    if root.is_file():
        return [_read(root, fmt)]
    suffixes = _SUFFIXES[fmt]
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if not files:
        raise PlanError(f"{path}: no {fmt} files in it")
    return [_read(p, fmt) for p in files if not p.name.startswith((".", "_"))]


def file_format(path: str) -> n.FileFormat:
    """``parquet``, ``csv`` or ``json``: from the name of ``path`` or of the data files in it."""
    root = Path(path)
    if not root.exists():
        raise PlanError(f"no such file or directory: {path}")
    if root.is_file():
        return _format_of(root)
    known = tuple(s for suffixes in _SUFFIXES.values() for s in suffixes)
    formats = {_format_of(p) for p in root.iterdir() if p.is_file() and p.suffix.lower() in known}
    if len(formats) != 1:
        raise PlanError(
            f"{path}: cannot tell the file format (found {sorted(formats) or 'no data files'}); "
            "name it (--format, or the reader you use)"
        )
    return formats.pop()


def _format_of(path: Path) -> n.FileFormat:
    for fmt, suffixes in _SUFFIXES.items():
        if path.suffix.lower() in suffixes:
            return fmt
    raise PlanError(f"{path}: cannot tell the file format from its name (.parquet, .csv or .json)")


def _read(path: Path, file_format: str) -> pa.Table:
    try:
        if file_format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if file_format == "csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(path)
        import pyarrow.json as pjson

        return pjson.read_json(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise PlanError(f"cannot read {path} as {file_format}: {exc}") from None


def event_ms(table: pa.Table, column: str) -> np.ndarray:
    """``column`` as epoch milliseconds (float, NaN for null): bigint ms or a timestamp."""
    if column not in table.column_names:
        raise PlanError(f"no column {column!r}; the columns are: {', '.join(table.column_names)}")
    values: Any = table.column(column)
    if pa.types.is_timestamp(values.type):
        values = pc.cast(values, pa.timestamp("ms", values.type.tz), safe=False).cast(pa.int64())
    elif not pa.types.is_integer(values.type):
        raise PlanError(f"event-time column {column!r} is {values.type}; it must be a timestamp or epoch ms")
    return np.asarray(values.to_numpy(zero_copy_only=False), np.float64)
