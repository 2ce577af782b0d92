"""What passes from one operator to the next: filters and projections, event time, kind.

:func:`handed_rows` turns an operator's results into the next operator's
input rows (in the same call, :mod:`krishiv_py.stateful.chain`, or in a
stage of its own, :mod:`krishiv_py.stateful.stage`): the filters and
projections between the two (:class:`Between`, evaluated in Arrow as Spark
SQL would, :mod:`krishiv_py.stateful.arrow_expr`), then the columns the
next one reads, its event time and, when it takes retractions, ``kind``.

Event time
    A join's result carries its own (``__kp_ts``, the later of its rows'),
    a window's is ``window_end - 1`` ms (µs in the kernels' results). An
    aggregation's or a top-N's change per key carries its own when a window
    reads it (``event_times``: the latest of the rows that made it, a
    retraction the one of the emit it withdraws); else it has none and takes
    the watermark it is handed on at, so it is on time.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.expr import col
>>> from krishiv_py.types import to_schema
>>> between = Between(steps=(("filter", ((col("n") > 1).node,), to_schema("k string, n bigint")),))
>>> results = pa.table({"k": ["a", "b"], "n": [1, 2], "__kp_ts": [5_000, 6_000]})
>>> handed_rows(results, (("k", pa.string()),), between=between, retracting=False, at=None).to_pylist()
[{'k': 'b', '__kp_ts': 6000}]

A projection between keeps the event time and ``kind``:

>>> select = Between(steps=(("select", (col("k").node,), to_schema("k string, n bigint")),))
>>> changes = pa.table({"k": ["a"], "n": [1], "kind": ["retract"]})
>>> handed_rows(changes, (("k", pa.string()),), between=select, retracting=True, at=7).to_pylist()
[{'k': 'a', '__kp_ts': 7000, 'kind': 'retract'}]
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.expr import ExprNode
from krishiv_py.names import BATCH_TS, HANDED_TS, RESULT_KIND
from krishiv_py.stateful.arrow_expr import filter_counted, project_counted
from krishiv_py.types import Schema

__all__ = ["Between", "handed_rows"]


@attrs.frozen
class Between:
    """Filters and projections between two operators, first to last.

    Each step: ``("filter", (predicate,), schema)`` or ``("select", exprs,
    schema)``, ``schema`` the columns the step reads.
    """

    steps: tuple[tuple[str, tuple[ExprNode, ...], Schema], ...]

    def apply(self, rows: pa.Table) -> pa.Table:
        return self.apply_counted(rows)[0]

    def apply_counted(self, rows: pa.Table) -> tuple[pa.Table, int]:
        """:meth:`apply`, and the failures of every step over the rows it read (the count the
        Spark lowering observes for the same stages, ``JobMetrics.arithmetic_errors``)."""
        hidden = [c for c in (BATCH_TS, RESULT_KIND, HANDED_TS) if c in rows.column_names]
        failed = 0
        for kind, exprs, schema in self.steps:
            if kind == "filter":
                rows, n = filter_counted(exprs[0], rows, schema)
            else:
                out, n = project_counted(exprs, rows, schema)
                for c in hidden:
                    if c not in out.column_names:  # (a select may name ``kind`` itself)
                        out = out.append_column(c, rows.column(c))
                rows = out
            failed += n
        return rows, failed


def handed_rows(
    results: pa.Table,
    columns: tuple[tuple[str, pa.DataType], ...],
    *,
    between: Between | None,
    retracting: bool,
    at: int | None,
) -> pa.Table:
    """``results`` as the next operator's rows (see the module docstring); ``at``: the watermark now."""
    if RESULT_KIND in results.column_names and not retracting:
        raise ValueError("these results retract, and the operator after them takes emits only")
    times = _event_times(results, at)
    if between is not None:
        results = between.apply(results.append_column(HANDED_TS, times))
        times = results.column(HANDED_TS)
    cols: dict[str, Any] = {name: results.column(name).cast(kind) for name, kind in columns}
    cols[BATCH_TS] = times
    if retracting:
        kinds = results.column(RESULT_KIND) if RESULT_KIND in results.column_names else None
        cols[RESULT_KIND] = kinds if kinds is not None else pa.array(["emit"] * results.num_rows, pa.string())
    return pa.table(cols)


def _event_times(results: pa.Table, at: int | None) -> pa.ChunkedArray[Any] | pa.Array[Any]:
    if BATCH_TS in results.column_names:
        return results.column(BATCH_TS)
    if "window_end" in results.column_names:
        return pc.subtract(results.column("window_end").cast(pa.int64()), 1_000)
    return pa.array(np.full(results.num_rows, max(at or 0, 0) * 1000, np.int64))
