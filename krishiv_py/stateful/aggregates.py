"""Partial aggregates: per-row partials, merging by group, final values.

A window's accumulator is a row of *partial* columns per aggregate; the
partial of one input row is the row's own contribution, and partials of one
group merge into one. Every operation is vectorized over all groups of a
batch (Arrow hash aggregation, numpy), so the cost is per batch, not per row
or per key.

========================  ===============================  =======================
aggregate                 partial columns                  merge
========================  ===============================  =======================
``count``                 ``c`` rows (non-null values)     sum
``sum``                   ``s`` sum, ``c`` non-null count  sum, sum
``sum`` of integers       ``s`` sum of the low 32 bits,    sum, sum, sum
                          ``h`` of the high 32 bits, ``c``
``avg``                   ``s`` double sum, ``c``          sum, sum
``min`` / ``max``         ``v``; ``n`` NaN count (max)     min / max (NaN largest)
``count_distinct``        ``d`` list of distinct values    union
``first`` / ``last``      ``v`` value, ``t`` time, ``q``   the row with the least /
                          arrival sequence                 greatest ``(t, q)``
========================  ===============================  =======================

Values follow Spark SQL: nulls are skipped, ``NaN`` is larger than every
number (``max`` is NaN when any value is), ``sum`` of no values is null,
``count_distinct`` counts one NaN and treats ``-0.0`` as ``0.0``. A ``sum``
of integers is exact: its two halves cannot overflow (fewer than 2**31 rows
per window), and the result is null when the exact sum does not fit in a
bigint (:func:`overflows` counts those).

Examples
--------
>>> import numpy as np, pyarrow as pa
>>> spec = AggSpec(name="n", func="count", column=None, out_type=pa.int64())
>>> parts = row_partials([spec], pa.table({"x": [1, 2, 3]}), None, None)
>>> merged = merge([spec], parts, np.array([0, 0, 1]), 2)
>>> finalize([spec], merged)["n"].to_pylist()
[2, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, cast

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful._arrow import HashAggregation, arrow, list_array, table_of
from krishiv_py.stateful.grouping import canonical

__all__ = [
    "AggSpec",
    "empty_partials",
    "finalize",
    "merge",
    "overflows",
    "partial_schema",
    "reset",
    "row_partials",
]

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min
_LOW = np.int64(0xFFFFFFFF)


@attrs.frozen(kw_only=True)
class AggSpec:
    """One aggregate as the kernel runs it: input column, its Arrow type, output type."""

    name: str
    func: str
    column: str | None
    out_type: pa.DataType
    in_type: pa.DataType | None = None

    def prefix(self, i: int) -> str:
        return self.prefix_of(i)

    @staticmethod
    def prefix_of(i: int) -> str:
        return f"p{i}_"


def _sum_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_decimal(t):
        return pa.decimal128(38, t.scale)
    return pa.float64()


def partial_schema(specs: Sequence[AggSpec]) -> list[pa.Field[Any]]:
    """The partial columns of ``specs``, in order."""
    fields: list[pa.Field[Any]] = []
    for i, s in enumerate(specs):
        p = s.prefix(i)
        t = s.in_type or pa.null()
        if s.func == "count":
            fields.append(pa.field(p + "c", pa.int64()))
        elif s.func in ("sum", "avg"):
            st = pa.float64() if s.func == "avg" else _sum_type(t)
            fields += [pa.field(p + "s", st), pa.field(p + "c", pa.int64())]
            if _split(s, t):
                fields.append(pa.field(p + "h", pa.int64()))
        elif s.func in ("min", "max"):
            fields += [pa.field(p + "v", t), pa.field(p + "n", pa.int64())]
        elif s.func == "count_distinct":
            fields.append(pa.field(p + "d", pa.list_(t)))
        else:
            fields += [pa.field(p + "v", t), pa.field(p + "t", pa.int64()), pa.field(p + "q", pa.int64())]
    return fields


def empty_partials(specs: Sequence[AggSpec], n: int) -> dict[str, pa.Array[Any]]:
    """``n`` empty accumulators (no rows)."""
    out: dict[str, pa.Array[Any]] = {}
    for f in partial_schema(specs):
        suffix = f.name.rsplit("_", 1)[1]
        if suffix in ("c", "n"):
            out[f.name] = pa.array(np.zeros(n, np.int64))
        elif suffix == "d":
            out[f.name] = list_array(np.zeros(n + 1, np.int32), pa.nulls(0, f.type.value_type))
        else:
            out[f.name] = pa.nulls(n, f.type)
    return out


def row_partials(
    specs: Sequence[AggSpec],
    rows: pa.Table,
    ts_us: npt.NDArray[np.int64] | None,
    seq: npt.NDArray[np.int64] | None,
) -> dict[str, pa.Array[Any]]:
    """The partial of each row of ``rows`` on its own."""
    n = rows.num_rows
    out: dict[str, pa.Array[Any]] = {}
    for i, s in enumerate(specs):
        p = s.prefix(i)
        if s.column is None:
            out[p + "c"] = pa.array(np.ones(n, np.int64))
            continue
        col = rows.column(s.column).combine_chunks()
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.int64)
        if s.func == "count":
            out[p + "c"] = pa.array(valid)
        elif s.func in ("sum", "avg"):
            st = pa.float64() if s.func == "avg" else _sum_type(col.type)
            out[p + "s"], out[p + "c"] = col.cast(st), pa.array(valid)
            if _split(s, col.type):
                v = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
                missing = pc.is_null(col)
                out[p + "s"] = _nulls_where(missing, v & _LOW)
                out[p + "h"] = _nulls_where(missing, v >> 32)
        elif s.func in ("min", "max"):
            out[p + "v"] = col
            out[p + "n"] = pa.array(_nan_flags(col))
        elif s.func == "count_distinct":
            offsets = np.concatenate([[0], np.cumsum(valid)]).astype(np.int32)
            values = canonical(col).filter(pc.is_valid(col))
            out[p + "d"] = list_array(offsets, values)
        else:
            assert ts_us is not None and seq is not None
            out[p + "v"], out[p + "t"], out[p + "q"] = col, pa.array(ts_us), pa.array(seq)
    return out


def _nan_flags(col: pa.Array[Any]) -> npt.NDArray[np.int64]:
    if not pa.types.is_floating(col.type):
        return np.zeros(len(col), np.int64)
    return pc.is_nan(col).fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)


def merge(
    specs: Sequence[AggSpec], parts: dict[str, pa.Array[Any]], ids: npt.NDArray[np.int64], n_groups: int
) -> dict[str, pa.Array[Any]]:
    """Merge the partials of rows with equal ``ids`` into ``n_groups`` accumulators.

    The columns come in the order of ``specs`` whatever path merged them,
    so the merges of different batches concatenate as they are.
    """
    simple: list[tuple[str, HashAggregation]] = []
    out: dict[str, pa.Array[Any]] = {}
    names: list[str] = []
    for i, s in enumerate(specs):
        p = s.prefix(i)
        if s.func in ("count", "sum", "avg"):
            mine: list[tuple[str, HashAggregation]] = [(p + "c", "sum")]
            if s.func != "count":
                mine.append((p + "s", "sum"))
            if p + "h" in parts:
                mine.append((p + "h", "sum"))
            simple += mine
            names += [c for c, _ in mine]
        elif s.func in ("min", "max"):
            simple += [(p + "v", cast(HashAggregation, s.func)), (p + "n", "sum")]
            names += [p + "v", p + "n"]
        elif s.func == "count_distinct":
            out[p + "d"] = merge_distinct(parts[p + "d"], ids, n_groups)
            names.append(p + "d")
        else:
            picked = _merge_pick(p, parts, ids, n_groups, last=s.func == "last")
            out.update(picked)
            names += list(picked)
    if simple and _ascending(ids, n_groups):
        # Ids in ascending order (every group present): integer sums without hashing.
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        exact = [(c, how) for c, how in simple if how == "sum" and pa.types.is_integer(parts[c].type)]
        for c, _ in exact:
            out[c] = _sorted_sum(parts[c], starts)
        simple = [(c, how) for c, how in simple if (c, how) not in exact]
    if simple:
        table = table_of({"g": ids, **{c: parts[c] for c, _ in simple}})
        grouped = table.group_by("g", use_threads=False).aggregate(simple)
        grouped = grouped.take(np.argsort(grouped.column("g").to_numpy()))
        for c, how in simple:
            merged = grouped.column(f"{c}_{how}").combine_chunks()
            out[c] = merged.cast(parts[c].type) if merged.type != parts[c].type else merged
    return {c: out[c] for c in names}


def _ascending(ids: npt.NDArray[np.int64], n_groups: int) -> bool:
    """Whether ``ids`` are ``0, ..., n_groups - 1`` in ascending order, each at least once."""
    if not len(ids) or ids[0] != 0 or ids[-1] != n_groups - 1:
        return False
    steps = np.diff(ids)
    return bool(((steps == 0) | (steps == 1)).all())


def _sorted_sum(col: pa.Array[Any], starts: npt.NDArray[np.intp]) -> pa.Array[Any]:
    """Sums of the runs of ``col`` beginning at ``starts``; null where a run has no value (as Arrow)."""
    values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    sums = np.add.reduceat(values, starts)
    if not col.null_count:
        return arrow(sums, col.type)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.int64)
    return arrow(sums, col.type, mask=np.add.reduceat(valid, starts) == 0)


def _merge_pick(
    p: str, parts: dict[str, pa.Array[Any]], ids: npt.NDArray[np.int64], n_groups: int, *, last: bool
) -> dict[str, pa.Array[Any]]:
    t = parts[p + "t"]
    sentinel = _I64_MIN if last else _I64_MAX
    tv = t.fill_null(sentinel).to_numpy(zero_copy_only=False)
    qv = parts[p + "q"].fill_null(sentinel).to_numpy(zero_copy_only=False)
    order = np.lexsort((qv, tv, ids))
    sorted_ids = ids[order]
    if last:
        pick = order[np.concatenate([np.flatnonzero(np.diff(sorted_ids)), [len(order) - 1]])]
    else:
        pick = order[np.concatenate([[0], np.flatnonzero(np.diff(sorted_ids)) + 1])]
    assert len(pick) == n_groups
    idx = arrow(pick)
    return {p + "v": parts[p + "v"].take(idx), p + "t": t.take(idx), p + "q": parts[p + "q"].take(idx)}


def merge_distinct(lists: pa.Array[Any], ids: npt.NDArray[np.int64], n_groups: int) -> pa.Array[Any]:
    """The distinct values of the lists of each group (``ids``: each list's group), a list per group.

    Values of 64 bits or fewer (integers, times, floats by their bits: made canonical before)
    are sorted, not hashed: the lists held in state are sorted already, so a step costs a pass
    over them and a sort of what came (the sort's runs), where hashing every held value each
    step grew with the state. Other types (strings) are grouped by Arrow's hash.
    """
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    values = pc.list_flatten(lists)
    owner = ids[pc.list_parent_indices(lists).to_numpy()] if len(values) else np.zeros(0, np.int64)
    bits = _as_bits(values)
    if bits is not None:
        keep = _sorted_distinct(owner, bits)
        if keep is not None:
            g, order = keep
            offsets = np.concatenate([[0], np.cumsum(np.bincount(g, minlength=n_groups))]).astype(np.int32)
            return list_array(offsets, values.take(arrow(order)))
    pairs = table_of({"g": owner, "v": values}).group_by(["g", "v"], use_threads=False).aggregate([])
    g = pairs.column("g").to_numpy()
    order = np.argsort(g, kind="stable")
    counts = np.bincount(g, minlength=n_groups)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return list_array(offsets, pairs.column("v").combine_chunks().take(arrow(order)))


def _as_bits(values: pa.Array[Any]) -> npt.NDArray[np.int64] | None:
    """``values`` (no nulls) as 64-bit integers equal exactly where the values are (None: not such a type)."""
    kind = values.type
    if values.null_count:
        return None
    width = kind.bit_width if pa.types.is_primitive(kind) and not pa.types.is_boolean(kind) else 0
    if width not in (8, 16, 32, 64) or pa.types.is_decimal(kind):
        return None
    if pa.types.is_unsigned_integer(kind) and width == 64:
        return None  # (above 2**63 they would wrap)
    signed = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[width]
    same = values if pa.types.is_integer(kind) else values.view(signed)
    return np.asarray(same.to_numpy(zero_copy_only=False), np.int64)


def _sorted_distinct(
    owner: npt.NDArray[np.int64], bits: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The first of each distinct (owner, value), ordered by owner then value: their owners and
    their places in the input; None when the two do not fit one 64-bit key."""
    if not len(bits):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(bits.min()), int(bits.max())
    span = hi - lo + 1
    if (int(owner.max()) + 1) * span >= 2**62:
        return None
    key = owner * span + (bits - lo)
    order = np.argsort(key, kind="stable")  # (sorted runs, as held lists are, cost a pass)
    ordered = key[order]
    first = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    return owner[order[first]], order[first]


def finalize(specs: Sequence[AggSpec], parts: dict[str, pa.Array[Any]]) -> dict[str, pa.Array[Any]]:
    """The result value of each aggregate, typed as its output column."""
    out: dict[str, pa.Array[Any]] = {}
    for i, s in enumerate(specs):
        p = s.prefix(i)
        if s.func == "count":
            value = parts[p + "c"]
        elif p + "h" in parts:
            total, fits = _exact_sum(parts[p + "s"], parts[p + "h"])
            has = pc.and_(pc.greater(parts[p + "c"], pa.scalar(0)), pa.array(fits))
            value = pc.if_else(has, total, pa.nulls(len(total), pa.int64()))
        elif s.func in ("sum", "avg"):
            has = pc.greater(parts[p + "c"], pa.scalar(0))
            total = parts[p + "s"]
            if s.func == "sum" and pa.types.is_decimal(s.out_type):
                has = pc.and_(has, pa.array(_fits_decimal(total, s.out_type)))
            if s.func == "avg":
                total = pc.divide(total, pc.cast(parts[p + "c"], pa.float64()))
            value = pc.if_else(has, total, pa.nulls(len(total), total.type))
        elif s.func == "max" and pa.types.is_floating(parts[p + "v"].type):
            v = parts[p + "v"]
            value = pc.if_else(pc.greater(parts[p + "n"], pa.scalar(0)), pa.scalar(float("nan"), v.type), v)
        elif s.func == "count_distinct":
            value = pc.list_value_length(parts[p + "d"]).fill_null(0)
        else:
            value = parts[p + "v"]
        out[s.name] = value.cast(s.out_type) if value.type != s.out_type else value
    return out


def overflows(specs: Sequence[AggSpec], parts: dict[str, pa.Array[Any]]) -> npt.NDArray[np.int64]:
    """Per accumulator, how many of its sums have no value in their type (finalize gives null)."""
    n = len(next(iter(parts.values()))) if parts else 0
    out = np.zeros(n, np.int64)
    for i, spec in enumerate(specs):
        p = AggSpec.prefix_of(i)
        if p + "c" not in parts:
            continue
        has = parts[p + "c"].to_numpy(zero_copy_only=False) > 0
        if p + "h" in parts:
            _, fits = _exact_sum(parts[p + "s"], parts[p + "h"])
            out += has & ~fits
        elif spec.func == "sum" and pa.types.is_decimal(spec.out_type):
            out += has & ~_fits_decimal(parts[p + "s"], spec.out_type)
    return out


def _fits_decimal(total: pa.Array[Any], out_type: pa.DataType) -> npt.NDArray[np.bool_]:
    """Where a decimal sum fits its result type (Spark's sum of a ``decimal(p, s)`` is cast back to it)."""
    digits = out_type.precision - out_type.scale  # type: ignore[attr-defined]
    bound = pa.scalar(Decimal(10) ** digits, pa.decimal128(38, out_type.scale))  # type: ignore[attr-defined]
    within = pc.less(pc.abs(total.cast(bound.type)), bound).fill_null(True)
    return np.asarray(within.to_numpy(zero_copy_only=False), bool)


def _split(spec: AggSpec, in_type: pa.DataType) -> bool:
    """An integer ``sum`` is kept as two 32-bit halves, so it is exact and never wraps."""
    return spec.func == "sum" and pa.types.is_integer(in_type)


def _nulls_where(missing: pa.Array[Any], values: npt.NDArray[np.int64]) -> pa.Array[Any]:
    out: pa.Array[Any] = pc.if_else(missing, pa.scalar(None, pa.int64()), pa.array(values))
    return out


def _exact_sum(low: pa.Array[Any], high: pa.Array[Any]) -> tuple[pa.Array[Any], npt.NDArray[np.bool_]]:
    """``high * 2**32 + low`` where it fits in a bigint, and where it does."""
    lo = low.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    hi = high.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) + (lo >> 32)
    fits = (hi >= -(2**31)) & (hi < 2**31)
    total = np.where(fits, (hi << 32) | (lo & _LOW), 0)
    return pa.array(total, pa.int64()), fits


def reset(
    specs: Sequence[AggSpec], parts: dict[str, pa.Array[Any]], mask: npt.NDArray[np.bool_]
) -> dict[str, pa.Array[Any]]:
    """``parts`` with the accumulators at ``mask`` emptied (discarding mode)."""
    if not mask.any():
        return parts
    keep = pa.array(~mask)
    empty = empty_partials(specs, len(mask))
    out = {}
    for name, arr in parts.items():
        out[name] = pc.if_else(keep, arr, empty[name].cast(arr.type))
    return out
