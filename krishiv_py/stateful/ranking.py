"""Window top-N with ``ties="all"`` over an Arrow table: SQL ``rank() <= n`` without Spark.

The bounded lowering ranks a batch job's window results here, on the
driver, when the ordering is one Arrow sorts exactly as Spark does: every
``by`` column is an integer, decimal, boolean, string, date or timestamp
(no floating point, whose NaN Spark orders above every number), nulls last.
A row's rank is one more than the rows of its window (and keys) that order
strictly before it.

>>> import pyarrow as pa
>>> t = pa.table({"window_start": [0, 0, 0, 0, 10], "window_end": [10, 10, 10, 10, 20],
...               "k": ["a", "b", "c", "d", "e"], "n": [3, 5, 5, None, None]})
>>> rank_all(t, 1, by=("n",), group=("window_start", "window_end")).column("k").to_pylist()
['b', 'c', 'e']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful.grouping import group_ids

__all__ = ["rank_all", "ranks_exactly"]


def ranks_exactly(types: Sequence[pa.DataType]) -> bool:
    """True when Arrow orders values of ``types`` as Spark does (not floating point)."""
    return all(
        pa.types.is_integer(t)
        or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        for t in types
    )


def rank_all(
    table: pa.Table, n: int, *, by: Sequence[str], group: Sequence[str], ascending: bool = False
) -> pa.Table:
    """The rows of ``table`` whose rank within their ``group`` by ``by`` is at most ``n``."""
    if not table.num_rows:
        return table
    gid = group_ids([table.column(c).combine_chunks() for c in group])[0]
    columns: dict[str, Any] = {"__g": pa.array(gid)}
    columns.update({f"__b{i}": table.column(c) for i, c in enumerate(by)})
    keyed = pa.table(columns)
    way = "ascending" if ascending else "descending"
    keys: list[tuple[str, Any]] = [("__g", "ascending"), *((f"__b{i}", way) for i in range(len(by)))]
    order = pc.sort_indices(keyed, sort_keys=keys).to_numpy()  # nulls last: the default
    codes = group_ids([pa.array(gid), *(table.column(c).combine_chunks() for c in by)])[0][order]
    g = gid[order]
    pos = np.arange(len(order))
    new_group = np.ones(len(order), bool)
    new_group[1:] = g[1:] != g[:-1]
    new_run = np.ones(len(order), bool)
    new_run[1:] = codes[1:] != codes[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, pos, 0))
    run_start = np.maximum.accumulate(np.where(new_run, pos, 0))
    keep = run_start - group_start + 1 <= n
    return table.take(pa.array(np.sort(order[keep]), pa.int64()))
