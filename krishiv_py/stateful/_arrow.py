"""Typed helpers where the kernels hand numpy arrays to Arrow.

Each helper is the plain pyarrow call it wraps; it only states the types
that pyarrow's stubs get wrong: they type ``pa.array`` of a numpy array as a
boolean array, list offsets as a ``pa.Int32Array`` only, and the columns of
``pa.table`` as neither numpy nor chunked arrays.

Examples
--------
>>> import numpy as np
>>> list_array(np.array([0, 2, 3], np.int32), arrow(np.array([1, 2, 3]))).to_pylist()
[[1, 2], [3]]
>>> table_of({"a": np.array([1, 2]), "b": arrow(np.array([3, 4]))}).num_rows
2
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "Column",
    "HashAggregation",
    "arrow",
    "cell_table",
    "framed",
    "ipc_bytes",
    "ipc_cell",
    "ipc_table",
    "list_array",
    "replaced",
    "table_of",
    "unframed",
]

#: An Arrow column as the kernels receive it: a table's column or a plain array.
Column: TypeAlias = "pa.Array[Any] | pa.ChunkedArray[Any]"

#: The Arrow hash aggregations the kernels run (pyarrow's stubs take only literal names).
HashAggregation: TypeAlias = Literal["any", "first", "list", "max", "min", "sum"]


def arrow(
    values: npt.NDArray[Any], dtype: pa.DataType | None = None, *, mask: npt.NDArray[np.bool_] | None = None
) -> pa.Array[Any]:
    """``pa.array(values, dtype, mask=mask)``."""
    out: pa.Array[Any] = pa.array(values, dtype, mask=mask)
    return out


def list_array(offsets: npt.NDArray[np.int32], values: pa.Array[Any]) -> pa.ListArray[Any]:
    """``pa.ListArray.from_arrays(pa.array(offsets), values)``."""
    return pa.ListArray.from_arrays(cast(pa.Int32Array, pa.array(offsets)), values)


def table_of(columns: Mapping[str, Column | npt.NDArray[Any]]) -> pa.Table:
    """``pa.table(columns)``: a table of named columns, numpy arrays converted by Arrow."""
    return pa.table(cast("Mapping[str, pa.Array[Any]]", columns))


def replaced(table: pa.Table, name: str, arr: Column) -> pa.Table:
    """``table`` with its column ``name`` replaced by ``arr`` (same field, same place)."""
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), arr)


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def ipc_table(blob: bytes) -> pa.Table:
    """The table of one Arrow IPC stream (:func:`ipc_bytes`)."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def ipc_cell(table: pa.Table) -> pa.Array[Any]:
    """``pa.array([ipc_bytes(table)], pa.binary())`` without copying the stream: the one value of
    a binary array over the buffer Arrow wrote it into (:func:`cell_table` reads it back).

    >>> cell = ipc_cell(pa.table({"a": [1, 2]}))
    >>> cell.type, len(cell), cell_table(cell[0]).to_pydict()
    (DataType(binary), 1, {'a': [1, 2]})
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue()
    if data.size >= 2**31:  # (past a binary value's 32-bit offsets: as pa.array would fail)
        return pa.array([data.to_pybytes()], pa.binary())
    offsets = pa.py_buffer(np.array([0, data.size], np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])


def cell_table(value: pa.Scalar[Any]) -> pa.Table:
    """The table of one binary value holding an Arrow IPC stream, read over its buffer (no copy)."""
    return pa.ipc.open_stream(cast(pa.BinaryScalar, value).as_buffer()).read_all()


def framed(tables: Sequence[pa.Table]) -> bytes:
    """Several tables in one value: each IPC stream after its length (8 bytes, little-endian)."""
    parts = [ipc_bytes(t) for t in tables]
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def unframed(blob: bytes) -> list[pa.Table]:
    """The tables of :func:`framed`, in order.

    >>> [t.num_rows for t in unframed(framed([pa.table({"a": [1]}), pa.table({"b": []})]))]
    [1, 0]
    """
    out, pos = [], 0
    while pos < len(blob):
        (size,) = struct.unpack_from("<Q", blob, pos)
        pos += 8
        out.append(ipc_table(blob[pos : pos + size]))
        pos += size
    return out
