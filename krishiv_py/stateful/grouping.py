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
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful._arrow import Column

__all__ = ["canonical", "first_rows", "group_ids", "segment_starts", "withdrawn"]

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
    """Per-row group id (numbered by first appearance), the number of groups, each group's first row.

    Each column is hash-encoded on its own (Arrow's dictionary encoding, nulls
    as one value; pandas' factorize for plain integers); the per-column codes
    are combined and factorized again. ``columns`` must not be empty.
    """
    if not columns:
        raise ValueError("group_ids needs at least one column")
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, np.int64), 0, np.zeros(0, np.int64)
    if len(columns) == 1:  # (its codes are numbered by first appearance already)
        codes, cardinality = _encode(columns[0])
        return codes, cardinality, first_rows(codes, cardinality)
    code: npt.NDArray[np.int64] | None = None
    for column in columns:
        codes, cardinality = _encode(column)
        if code is None:
            code = codes
            continue
        if int(code.max(initial=0)) + 1 > (2**62) // max(cardinality, 1):
            code = _factorize(code)[0]  # keep the combined code inside int64
        code = code * cardinality + codes
    assert code is not None
    ids, n_groups = _factorize(code)
    return ids, n_groups, first_rows(ids, n_groups)


def first_rows(ids: npt.NDArray[np.int64], n_groups: int) -> npt.NDArray[np.int64]:
    """The first row of each group (a reversed fancy assignment: the earliest row writes last)."""
    first = np.empty(n_groups, np.int64)
    first[ids[::-1]] = np.arange(len(ids) - 1, -1, -1, dtype=np.int64)
    return first


def _encode(column: pa.Array[Any]) -> tuple[npt.NDArray[np.int64], int]:
    if pa.types.is_integer(column.type) and column.null_count == 0:
        codes, n = _factorize(column.to_numpy().astype(np.int64, copy=False))
        return codes, n
    encoded = cast("pa.DictionaryArray[Any, Any]", pc.dictionary_encode(column, null_encoding="encode"))
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return indices, len(encoded.dictionary)


def _factorize(values: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], int]:
    codes, uniques = pd.factorize(values)
    return codes.astype(np.int64, copy=False), len(uniques)


def segment_starts(sorted_ids: np.ndarray) -> np.ndarray:
    """Start index of each run of equal values in a sorted id array."""
    if len(sorted_ids) == 0:
        return np.zeros(0, np.int64)
    change = np.flatnonzero(np.diff(sorted_ids)) + 1
    return np.concatenate([[0], change]).astype(np.int64)


def withdrawn(
    held: list[pa.Table], gone: pa.Table, on: list[str]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], int]:
    """Which rows of two tables of live rows each retraction in ``gone`` withdraws (a multiset).

    A retraction withdraws one live row of equal ``on`` values (nulls equal,
    one NaN): rows of ``held[0]`` before those of ``held[1]``, earlier
    before later. Returns the rows withdrawn of each table and how many
    retractions found no row.

    >>> live = pa.table({"k": ["a", "a", "b"]})
    >>> new = pa.table({"k": ["a"]})
    >>> first, second, unmatched = withdrawn([live, new], pa.table({"k": ["a", "a", "a", "c"]}), ["k"])
    >>> first.tolist(), second.tolist(), unmatched
    ([True, True, False], [True], 1)
    """
    first, second = held
    if not gone.num_rows:
        return np.zeros(first.num_rows, bool), np.zeros(second.num_rows, bool), 0
    columns = [
        pa.concat_arrays(
            [canonical(t.column(c)).cast(first.schema.field(c).type) for t in (first, second, gone)]
        )
        for c in on
    ]
    ids, n_groups, _ = group_ids(columns)
    n_held = first.num_rows + second.num_rows
    live, wanting = ids[:n_held], ids[n_held:]
    wanted = np.bincount(wanting, minlength=n_groups)
    have = np.bincount(live, minlength=n_groups)
    taken = _rank(live) < wanted[live]
    unmatched = int((_rank(wanting) >= have[wanting]).sum())
    return taken[: first.num_rows], taken[first.num_rows :], unmatched


def _rank(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each row's occurrence number within its group (0 for the first)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    new = np.ones(len(ids), bool)
    new[1:] = sorted_ids[1:] != sorted_ids[:-1]
    starts = np.maximum.accumulate(np.where(new, np.arange(len(ids)), 0))
    rank = np.empty(len(ids), np.int64)
    rank[order] = np.arange(len(ids)) - starts
    return rank
