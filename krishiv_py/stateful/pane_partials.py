"""Pane partial aggregates of one micro-batch: the vectorized step of streaming sliding windows.

:class:`PanePartials` runs in Spark's Python workers through ``mapInArrow``,
once per partition of every micro-batch: it groups the partition's data
rows by key and *pane* (the slide-sized interval ``[p, p + slide)`` their
event time falls in) and emits one row per group — the group's latest event
time and its partial aggregates. Rows that are not data (watermark
promises, close and idle markers) pass through unchanged; rows without a
valid event time are left out (no window takes them; the watermark's
metrics counted them before this step).

A pane row carries the group's *latest* event time, so the maximum event
time of a micro-batch — and with it Spark's watermark — is the same as
without this step, and the row falls into exactly the windows its events
fall into (the slide divides the size). Spark's ``window()`` then copies the
pane row into those windows and drops a copy only when its window has
closed: lateness is decided per window, as for single events.

Examples
--------
>>> import pyarrow as pa
>>> step = PanePartials(keys=("k",), slide_us=10, parts=(("n", "count_all", None), ("s", "sum", "v")))
>>> batch = pa.record_batch({
...     "k": ["a", "a", "b", None], "v": [1.0, 2.0, 3.0, None],
...     "__kp_kind": pa.array([0, 0, 0, 1], pa.int8()), "__kp_wm": pa.array([None, None, None, 7]),
...     "__kp_et": pa.array([3, 12, 5, 9], pa.timestamp("us", tz="UTC"))})
>>> out = pa.Table.from_batches(list(step(iter([batch]))))
>>> out.column("__kp_et").cast(pa.int64()).to_pylist(), out.column("n").to_pylist()
([3, 12, 5, 9], [1, 1, 1, None])
>>> out.column("k").to_pylist(), out.column("s").to_pylist(), out.column("__kp_kind").to_pylist()
(['a', 'a', 'b', None], [1.0, 2.0, 3.0, None], [0, 0, 0, 1])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, TypeAlias

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import ET, PANE, ROW_KIND, WM, pane_input

__all__ = ["PanePartials", "PartialOp"]

#: ``count`` (valid values), ``count_all`` (rows), ``sum`` (64-bit integers or doubles),
#: ``sum_double`` (as doubles), ``sum_high``/``sum_low`` (the sums of a bigint's high and
#: low 32 bits), ``min``, ``max``.
PartialOp: TypeAlias = Literal["count", "count_all", "sum", "sum_double", "sum_high", "sum_low", "min", "max"]


@attrs.frozen(kw_only=True)
class PanePartials:
    """Group a partition's data rows by key and pane; one row per group with its partials.

    ``parts`` are ``(output column, operation, input column)``; the output
    columns are ``keys``, ``__kp_kind``, ``__kp_wm``, ``__kp_et`` (the
    group's latest event time), then the parts in order.
    """

    keys: tuple[str, ...]
    slide_us: int
    parts: tuple[tuple[str, PartialOp, str | None], ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if not got:
            return
        table = pa.Table.from_batches(got)
        kind = table.column(ROW_KIND).to_numpy(zero_copy_only=False)
        data = (kind == 0) & pc.is_valid(table.column(ET)).to_numpy(zero_copy_only=False)
        other = table.filter(pa.array(kind != 0))
        out = [self._groups(table.filter(pa.array(data)))]
        if other.num_rows:
            out.append(self._passed(other, out[0].schema))
        yield from pa.concat_tables(out).combine_chunks().to_batches()

    def _groups(self, data: pa.Table) -> pa.Table:
        et = data.column(ET)
        micros = pc.cast(et, pa.int64()).to_numpy(zero_copy_only=False)
        inputs: dict[str, Any] = {k: data.column(k) for k in self.keys}
        inputs[PANE] = pa.array(micros - np.mod(micros, self.slide_us))
        inputs[ET] = et
        aggs: list[tuple[Any, str]] = [(ET, "max")]
        for i, (_, op, column) in enumerate(self.parts):
            name = pane_input(i)
            if op == "count_all":  # rows: a count of a column without nulls
                inputs[name] = pa.array(np.ones(data.num_rows, np.int8))
            else:
                assert column is not None
                inputs[name] = _input(data.column(column), op)
            aggs.append((name, _ARROW_OP[op]))
        by = pa.table(inputs).group_by([*self.keys, PANE], use_threads=False)
        grouped = by.aggregate(aggs)  # type: ignore[arg-type]  # the stubs list literal names only
        n = grouped.num_rows
        cols: dict[str, Any] = {k: grouped.column(k) for k in self.keys}
        cols[ROW_KIND] = pa.array(np.zeros(n, np.int8))
        cols[WM] = pa.nulls(n, pa.int64())
        cols[ET] = grouped.column(f"{ET}_max")
        for i, (out_name, op, _) in enumerate(self.parts):
            cols[out_name] = grouped.column(f"{pane_input(i)}_{_ARROW_OP[op]}")
        return pa.table(cols)

    def _passed(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        n = rows.num_rows
        cols = [
            rows.column(f.name) if f.name in (*self.keys, ROW_KIND, WM, ET) else pa.nulls(n, f.type)
            for f in schema
        ]
        return pa.table(cols, schema=schema)


_ARROW_OP = {
    "count": "count",
    "count_all": "count",
    "sum": "sum",
    "sum_double": "sum",
    "sum_high": "sum",
    "sum_low": "sum",
    "min": "min",
    "max": "max",
}


def _input(column: pa.ChunkedArray[Any], op: PartialOp) -> pa.Array[Any]:
    """The column an operation aggregates: 64-bit for sums, a bigint's 32-bit halves."""
    values = column.combine_chunks()
    if op in ("count", "min", "max"):
        return values
    if op in ("sum", "sum_double"):
        wide = pa.float64() if op == "sum_double" or pa.types.is_floating(values.type) else pa.int64()
        return values.cast(wide, safe=False)  # a bigint beyond 2**53 rounds, as Spark's cast does
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    raw = values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    half = np.right_shift(raw, 32) if op == "sum_high" else np.bitwise_and(raw, 0xFFFFFFFF)
    return pa.array(half, mask=~valid)
