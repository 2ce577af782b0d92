"""Group ids for rows, vectorized: the building block of every kernel.

``group_ids`` gives each row the number of its group (groups numbered in
order of first appearance), computed by Arrow's hash grouping, so nulls form
one group. Float columns are made canonical first (one NaN, ``-0.0`` as
``0.0``), as Spark's grouping does.

Examples
--------
>>> import pyarrow as pa
>>> ids, n, first = group_ids([pa.array(["a", "b", "a", None])])
>>> ids.tolist(), n, first.tolist()
([0, 1, 0, 2], 3, [0, 1, 3])
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful._arrow import Column, table_of

__all__ = ["canonical", "group_ids", "segment_starts"]

_NAN = float("nan")


def canonical(arr: Column) -> pa.Array[Any]:
    """``arr`` with one NaN and ``-0.0`` as ``0.0`` when it is a float column."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_floating(arr.type):
        return arr
    zero: pa.Scalar[Any] = pa.scalar(0.0, arr.type)
    zeroed = pc.add(arr, zero)  # -0.0 + 0.0 == +0.0
    out: pa.Array[Any] = pc.if_else(pc.is_nan(zeroed), pa.scalar(_NAN, arr.type), zeroed)
    return out


def group_ids(columns: list[pa.Array[Any]]) -> tuple[npt.NDArray[np.int64], int, npt.NDArray[np.int64]]:
    """Per-row group id, the number of groups, and each group's first row.

    With no columns every row is in group 0.
    """
    if not columns:
        raise ValueError("group_ids needs at least one column")
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, np.int64), 0, np.zeros(0, np.int64)
    names = [f"c{i}" for i in range(len(columns))]
    table = table_of({**dict(zip(names, columns, strict=True)), "__i": np.arange(n, dtype=np.int64)})
    grouped = table.group_by(names, use_threads=False).aggregate([("__i", "list")])
    lists = cast("pa.ListArray[Any]", grouped.column("__i_list").combine_chunks())
    flat = pc.list_flatten(lists).to_numpy()
    parent = pc.list_parent_indices(lists).to_numpy()
    ids = np.empty(n, np.int64)
    ids[flat] = parent
    # Each list holds its group's rows in row order: the first is the group's first row.
    first = flat[lists.offsets.to_numpy()[:-1]]
    return ids, len(lists), first.astype(np.int64)


def segment_starts(sorted_ids: np.ndarray) -> np.ndarray:
    """Start index of each run of equal values in a sorted id array."""
    if len(sorted_ids) == 0:
        return np.zeros(0, np.int64)
    change = np.flatnonzero(np.diff(sorted_ids)) + 1
    return np.concatenate([[0], change]).astype(np.int64)
