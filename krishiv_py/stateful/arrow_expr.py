"""Expressions evaluated over an Arrow table, with the values Spark gives their SQL.

A filter or a projection between two stateful operators runs in the
operator's Python worker, where there is no Spark. There it is evaluated
here, on the Arrow batch, and must give what Spark gives for the SQL the
planner writes for it (:func:`krishiv_py.planner.sql.to_sql`), in the
session's settings: ANSI mode on (Spark 4's default), time zone UTC.

The rules, as Spark applies them:

- **Nulls**: an operation with a null operand is null; ``and``/``or`` use
  SQL's three values (``null and false`` is false, ``null or true`` true);
  ``is_null`` is never null, and NaN is not null.
- **Types** follow Spark's ANSI coercion: arithmetic of an integer with a
  ``float`` is in ``double`` (:func:`result_type`).
- **Comparisons** compare in the wider of the two types: integers exactly,
  a ``float`` or a ``double`` with an integer as two ``double`` s (a
  ``bigint`` becomes the double nearest to it). NaN equals NaN and is
  greater than every other number; ``-0.0`` equals ``0.0``. Strings and
  binaries compare by their bytes, ``false < true``, and times by the
  instant (a ``date`` is its midnight in UTC).
- **Arithmetic never fails** (docs/expressions.md, "When arithmetic has no
  result"): ``+ - *`` and negation on integers are null where the exact
  result does not fit the result type; ``/`` divides two ``double`` s;
  ``/`` and ``%`` by zero (``0``, ``0.0``, ``-0.0``) are null; ``%`` has the
  dividend's sign (``-7 % 3`` is ``-1``); floating-point ``+ - * %`` keep
  IEEE results (``inf``, ``NaN``).
- **Casts** are Spark's ``TRY_CAST``: a value the cast cannot convert is
  null. A floating-point number becomes an integer by truncation when that
  lies within the type (``2.0 ** 63`` becomes ``2 ** 63 - 1``, since Spark
  compares with the bound rounded to a ``double``), otherwise null, as NaN is.

Each such null from non-null operands is a failure, counted per operation
and row as the Spark lowering counts them (``JobMetrics.arithmetic_errors``):
:func:`failures`.

What is not evaluated here (:func:`unsupported` names it): decimals in an
operation, a comparison of a string with a time (Spark parses the string),
casts from strings or to decimals, floating-point numbers or times as text,
and operations on untyped null constants only. :func:`evaluate` raises
:class:`~krishiv_py.errors.PlanError` on them rather than guess.

Examples
--------
>>> import pyarrow as pa
>>> from krishiv_py.expr import col
>>> from krishiv_py.types import Schema
>>> schema = Schema.parse("a int, b double")
>>> table = pa.table({"a": pa.array([2147483647, 1, None], pa.int32()), "b": [0.0, float("nan"), 1.0]})
>>> evaluate((col("a") + 1).node, table, schema).to_pylist()
[None, 2, None]
>>> failures([(col("a") + 1).node], table, schema)
1
>>> evaluate((col("b") > 1e308).node, table, schema).to_pylist()
[False, True, False]
>>> unsupported(col("b").cast("string").node, schema)
'the cast from double to string'
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.expr import (
    DATE_PATTERNS,
    Alias,
    BinaryOp,
    Case,
    Cast,
    Column,
    ExprNode,
    Func,
    Literal,
    Udf,
    UnaryOp,
    UserFunction,
    dtype_of,
    output_name,
)
from krishiv_py.stateful._arrow import arrow
from krishiv_py.types import DataType, Schema

__all__ = [
    "call_user_function",
    "evaluate",
    "failures",
    "filter_rows",
    "project",
    "result_type",
    "unsupported",
]

Values: TypeAlias = "npt.NDArray[Any]"
Mask: TypeAlias = "npt.NDArray[np.bool_]"

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_BOUNDS = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_NUMPY: dict[str, type[np.generic]] = {
    "tinyint": np.int8,
    "smallint": np.int16,
    "int": np.int32,
    "bigint": np.int64,
    "float": np.float32,
    "double": np.float64,
    "boolean": np.bool_,
}
_TIMES = ("timestamp", "timestamp_ntz", "date")
_DAY_US = 86_400_000_000


# --- what is supported ----------------------------------------------------------


def unsupported(node: ExprNode, schema: Schema) -> str | None:
    """None when :func:`evaluate` gives Spark's values for ``node``; else the part it cannot do.

    >>> from krishiv_py.expr import col
    >>> unsupported((col("s") > "2024-01-01").node, Schema.parse("s timestamp"))
    'the comparison of a timestamp with a string'
    """
    if isinstance(node, Column | Literal):
        return None
    if isinstance(node, Func | Udf):
        return next((r for r in (unsupported(a, schema) for a in node.args) if r is not None), None)
    if isinstance(node, Case):
        parts = [p for branch in node.branches for p in branch]
        parts += [node.otherwise] if node.otherwise is not None else []
        return next((r for r in (unsupported(p, schema) for p in parts) if r is not None), None)
    own = _own_reason(node, schema)
    if own is not None:
        return own
    children = (node.left, node.right) if isinstance(node, BinaryOp) else (node.operand,)
    return next((r for r in (unsupported(c, schema) for c in children) if r is not None), None)


def _own_reason(node: BinaryOp | UnaryOp | Cast | Alias, schema: Schema) -> str | None:
    if isinstance(node, Alias) or (isinstance(node, UnaryOp) and node.op != "neg"):
        return None
    if isinstance(node, Cast):
        source = result_type(node.operand, schema)
        return None if _castable(source, node.dtype) else f"the cast from {source} to {node.dtype}"
    if result_type(node, schema).name == "void":
        return f"an operation on null constants only ({_what(node)}: give the null a type with cast)"
    operands = [node.left, node.right] if isinstance(node, BinaryOp) else [node.operand]
    types = [result_type(o, schema) for o in operands]
    if any(t.is_decimal for t in types):
        return f"{_what(node)} of a decimal"
    names = {t.name for t in types}
    if isinstance(node, BinaryOp) and "string" in names and names & set(_TIMES):
        return f"the comparison of a {(names - {'string'}).pop()} with a string"
    return None


def _what(node: BinaryOp | UnaryOp) -> str:
    if isinstance(node, UnaryOp):
        return "the negation"
    return "the comparison" if node.op in _COMPARISONS else f"the arithmetic '{node.op}'"


def _castable(source: DataType, target: DataType) -> bool:
    """The casts evaluated here: numbers, booleans and times among themselves, integers as text."""
    if source == target or source.name == "void":
        return True
    numbers = {"tinyint", "smallint", "int", "bigint", "float", "double", "boolean"}
    if source.name in numbers and target.name in numbers:
        return True
    if target.name == "string":
        return source.is_integral or source.name == "boolean"
    return source.name in _TIMES and target.name in _TIMES


def result_type(node: ExprNode, schema: Schema) -> DataType:
    """The type of :func:`evaluate`'s column for ``node``: the type Spark gives it.

    That is :func:`~krishiv_py.expr.dtype_of`'s, except that Spark's ANSI
    type coercion computes arithmetic of an integer with a ``float`` in
    ``double`` (``f * 2`` is a ``double``), and so everything computed from it,
    a ``when()`` with such a value among its values included.

    >>> from krishiv_py.expr import col
    >>> result_type((col("f") * 2).node, Schema.parse("f float")).name
    'double'
    """
    if isinstance(node, Alias) or (isinstance(node, UnaryOp) and node.op == "neg"):
        return result_type(node.operand, schema)
    if isinstance(node, BinaryOp) and node.op in ("+", "-", "*", "%"):
        names = {result_type(node.left, schema).name, result_type(node.right, schema).name}
        if "double" in names or ("float" in names and names - {"float", "void"}):
            return DataType("double")
    if isinstance(node, Case):  # a value computed in double makes the whole a double
        whole = dtype_of(node, schema)  # (its checks first)
        values = [v for _, v in node.branches] + ([node.otherwise] if node.otherwise is not None else [])
        if whole.is_numeric and any(result_type(v, schema).name == "double" for v in values):
            return DataType("double")
        return whole
    return dtype_of(node, schema)


# --- the entry points -----------------------------------------------------------


def evaluate(node: ExprNode, table: pa.Table, schema: Schema) -> pa.Array[Any]:
    """The column of ``node``'s values over ``table`` (whose columns follow ``schema``).

    Raises :class:`~krishiv_py.errors.PlanError` when :func:`unsupported` names a part.
    """
    return _Evaluation(table, schema).value(node)


def failures(exprs: Sequence[ExprNode], table: pa.Table, schema: Schema) -> int:
    """How many operations of ``exprs`` gave null from non-null operands, over the rows of ``table``.

    The count the Spark lowering observes for a filter or a projection: one
    per failed operation and row; an operation whose operand is already such
    a null is not counted again.
    """
    evaluation = _Evaluation(table, schema)
    for node in exprs:
        evaluation.value(node)
    return evaluation.failures


def filter_rows(predicate: ExprNode, table: pa.Table, schema: Schema) -> pa.Table:
    """The rows of ``table`` where ``predicate`` is true (not false, not null)."""
    return filter_counted(predicate, table, schema)[0]


def filter_counted(predicate: ExprNode, table: pa.Table, schema: Schema) -> tuple[pa.Table, int]:
    """:func:`filter_rows`, and the failures of ``predicate`` over every row (:func:`failures`)."""
    evaluation = _Evaluation(table, schema)
    keep = _booleans(evaluation.value(predicate))
    return table.filter(keep, null_selection_behavior="drop"), evaluation.failures


def project(exprs: Sequence[ExprNode], table: pa.Table, schema: Schema) -> pa.Table:
    """One column per expression, named by :func:`~krishiv_py.expr.output_name`."""
    return project_counted(exprs, table, schema)[0]


def project_counted(exprs: Sequence[ExprNode], table: pa.Table, schema: Schema) -> tuple[pa.Table, int]:
    """:func:`project`, and the failures of ``exprs`` over every row (:func:`failures`)."""
    evaluation = _Evaluation(table, schema)
    columns = [evaluation.value(e) for e in exprs]
    return pa.Table.from_arrays(columns, names=[output_name(e) for e in exprs]), evaluation.failures


# --- the evaluation -------------------------------------------------------------


class _Evaluation:
    """One pass over a table: each node's values, and the failures met on the way."""

    def __init__(self, table: pa.Table, schema: Schema) -> None:
        self.table, self.schema, self.rows = table, schema, table.num_rows
        self.failures = 0

    def value(self, node: ExprNode) -> pa.Array[Any]:
        reason = unsupported(node, self.schema)
        if reason is not None:
            raise PlanError(f"cannot evaluate {reason} outside Spark")
        return self._value(node)

    def _value(self, node: ExprNode) -> pa.Array[Any]:
        if isinstance(node, Column):
            column = self.table.column(node.name).combine_chunks()
            return column.cast(_arrow_type(self._type(node)))
        if isinstance(node, Literal):
            return self._literal(node)
        if isinstance(node, Alias):
            return self._value(node.operand)
        if isinstance(node, UnaryOp):
            return self._unary(node)
        if isinstance(node, Cast):
            operand = self._value(node.operand)
            return self._counted(_cast(operand, self._type(node.operand), node.dtype), operand)
        if isinstance(node, Case):
            return self._case(node)
        if isinstance(node, Func):
            constants = [a.value for a in node.args[1:] if isinstance(a, Literal)]
            return _function(node.name, self._value(node.args[0]), constants)
        if isinstance(node, Udf):
            return call_user_function(node.function, [self._value(a) for a in node.args])
        return self._binary(node)

    def _case(self, node: Case) -> pa.Array[Any]:
        """Each row's first branch with a true condition (else ``otherwise``), each condition and
        value evaluated on the rows that reach it only, so that its failures count there alone."""
        whole = self._type(node)
        out_type = _arrow_type(whole)
        declared = dtype_of(node, self.schema)
        remaining = np.arange(self.rows)
        pieces: list[tuple[npt.NDArray[np.intp], pa.Array[Any]]] = []
        for condition, value in node.branches:
            if not len(remaining):
                break
            on = self._on(remaining)
            true = _booleans(on._value(condition)).fill_null(False).to_numpy(zero_copy_only=False)
            self.failures += on.failures
            taken = remaining[true]
            if len(taken):
                pieces.append((taken, self._cast_to(self._on(taken), value, declared, whole, out_type)))
            remaining = remaining[~true]
        if node.otherwise is not None and len(remaining):
            pieces.append(
                (remaining, self._cast_to(self._on(remaining), node.otherwise, declared, whole, out_type))
            )
            remaining = remaining[:0]
        if len(remaining):
            pieces.append((remaining, _nulls(len(remaining), out_type)))
        if not pieces:
            return _nulls(self.rows, out_type)
        order = np.concatenate([idx for idx, _ in pieces])
        values = pa.concat_arrays([v for _, v in pieces])
        return values.take(np.argsort(order, kind="stable"))

    def _on(self, rows: npt.NDArray[np.intp]) -> _Evaluation:
        """An evaluation over ``rows`` of this table only (its failures added by the caller)."""
        return _Evaluation(self.table.take(rows), self.schema)

    def _cast_to(
        self, on: _Evaluation, value: ExprNode, declared: DataType, whole: DataType, out_type: pa.DataType
    ) -> pa.Array[Any]:
        """A branch's ``value`` in the ``CASE``'s type: first the plan's type of the whole
        (``declared``, :func:`~krishiv_py.expr.dtype_of`'s), to which the lowering's SQL casts a
        value of another plan type, then Spark's (``whole``), which may be wider: in ``CASE WHEN
        c THEN i + f ELSE 69559603 END`` the constant becomes a float, 69559600, then a double."""
        out = on._value(value)
        self.failures += on.failures
        own = self._type(value)
        if declared.name != "void" and dtype_of(value, self.schema) != declared and own != declared:
            out, own = _cast(out, own, declared), declared
        if own == whole or whole.name == "void":
            return out.cast(out_type) if out.type != out_type else out
        return _cast(out, own, whole)

    def _type(self, node: ExprNode) -> DataType:
        return result_type(node, self.schema)

    def _literal(self, node: Literal) -> pa.Array[Any]:
        dtype = _arrow_type(self._type(node))
        if node.value is None:
            return _nulls(self.rows, dtype)
        return _constant(pa.scalar(node.value, dtype), self.rows)

    def _unary(self, node: UnaryOp) -> pa.Array[Any]:
        operand = self._value(node.operand)
        if node.op == "is_null":
            return operand.is_null()
        if node.op == "is_not_null":
            return operand.is_valid()
        if node.op == "not":
            return pc.invert(_booleans(operand))
        dtype = self._type(node)
        if not dtype.is_integral:  # -0.0 for 0.0, as Spark's unary minus
            return pc.negate(operand)
        zero = _constant(pa.scalar(0, operand.type), self.rows)
        return self._counted(_arithmetic("-", zero, operand, dtype), operand)

    def _binary(self, node: BinaryOp) -> pa.Array[Any]:
        left, right = self._value(node.left), self._value(node.right)
        if node.op in ("and", "or"):
            kleene = pc.and_kleene if node.op == "and" else pc.or_kleene
            out: pa.Array[Any] = kleene(_booleans(left), _booleans(right))
            return out
        types = (self._type(node.left), self._type(node.right))
        if node.op in _COMPARISONS:
            return _compare(node.op, (left, types[0]), (right, types[1]))
        return self._counted(_arithmetic(node.op, left, right, self._type(node)), left, right)

    def _counted(self, out: pa.Array[Any], *operands: pa.Array[Any]) -> pa.Array[Any]:
        """``out``, counting its nulls where no operand was null."""
        failed = ~_valid(out)
        for operand in operands:
            failed &= _valid(operand)
        self.failures += int(failed.sum())
        return out


# --- functions ----------------------------------------------------------------------


#: ``pyarrow.compute`` untyped: its stubs' overloads do not cover every array these functions take.
_pcx: Any = pc


def call_user_function(function: UserFunction, arrays: Sequence[pa.Array[Any]]) -> pa.Array[Any]:
    """``function`` (:func:`~krishiv_py.expr.udf`) over ``arrays``, one per argument: its result as
    an array of its type, as long as they are. Spark's Arrow UDF and krishiv's evaluation between
    stateful operators both call it, so both check the same things."""
    rows = len(arrays[0])
    out: Any
    try:
        out = function.fn(*arrays)
    except Exception as exc:
        raise ValueError(f"udf {function.name!r} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if not isinstance(out, pa.Array):
        try:
            out = pa.array(out)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise ValueError(
                f"udf {function.name!r} returned {type(out).__name__}, not a pyarrow.Array"
            ) from exc
    if len(out) != rows:
        raise ValueError(f"udf {function.name!r} returned {len(out)} values for {rows} rows")
    result: pa.Array[Any] = out
    target = _arrow_type(function.returns)
    if result.type == target:
        return result
    try:
        return result.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"udf {function.name!r} returned {out.type}, which is not its type {function.returns}: {exc}"
        ) from exc


def _function(name: str, arg: pa.Array[Any], constants: list[Any]) -> pa.Array[Any]:
    """A function of :data:`~krishiv_py.expr.FUNCTIONS` over ``arg``, as Spark computes it."""
    if arg.type == pa.null():
        out_type = pa.int32() if name in ("length", "hour") else pa.string()
        return _nulls(len(arg), out_type)
    if name in ("lower", "upper"):
        out: pa.Array[Any] = _pcx.utf8_lower(arg) if name == "lower" else _pcx.utf8_upper(arg)
        return out
    if name == "length":
        length: pa.Array[Any] = _pcx.utf8_length(arg).cast(pa.int32())
        return length
    if name == "replace":
        search, replacement = constants
        if search == "":
            return arg
        replaced: pa.Array[Any] = _pcx.replace_substring(arg, pattern=search, replacement=replacement)
        return replaced
    if name == "hour":
        hours: pa.Array[Any] = _pcx.hour(arg).cast(pa.int32())
        return hours
    if name == "date_format":
        return _date_format(arg, str(constants[0]))
    if name == "regexp_extract":
        return _by_value(arg, lambda text: _extract(text, constants[0], constants[1]))
    assert name == "split_part"
    return _by_value(arg, lambda text: _part(text, constants[0], constants[1]))


def _date_format(arg: pa.Array[Any], pattern: str) -> pa.Array[Any]:
    """Spark's ``date_format`` of the letters :data:`~krishiv_py.expr.DATE_PATTERNS`, in UTC."""
    tz = getattr(arg.type, "tz", None)
    whole = _pcx.floor_temporal(arg, unit="second").cast(pa.timestamp("s", tz=tz), safe=False)
    parts = re.split(r"(yyyy|MM|dd|HH|mm|ss)", pattern)
    text = "".join(DATE_PATTERNS.get(p, p.replace("%", "%%")) for p in parts)
    out: pa.Array[Any] = _pcx.strftime(whole, format=text)
    return out


def _by_value(arg: pa.Array[Any], fn: Callable[[str], str]) -> pa.Array[Any]:
    """``fn`` over each distinct string of ``arg`` once (null stays null)."""
    encoded = arg.dictionary_encode()
    values = [fn(str(v)) for v in encoded.dictionary.to_pylist()]
    return pa.array(values, pa.string()).take(encoded.indices)


def _extract(text: str, pattern: str, index: int) -> str:
    """Spark's ``regexp_extract``: the group of the first match, ``''`` without one."""
    match = re.search(pattern, text)
    return "" if match is None or match.group(index) is None else match.group(index)


def _part(text: str, delimiter: str, part: int) -> str:
    """Spark's ``split_part``: the part counted from 1 (negative: from the end), else ``''``."""
    parts = text.split(delimiter)
    index = part - 1 if part > 0 else len(parts) + part
    return parts[index] if 0 <= index < len(parts) else ""


# --- kernels ----------------------------------------------------------------------


def _arrow_type(dtype: DataType) -> pa.DataType:
    return pa.null() if dtype.name == "void" else dtype.to_arrow()


def _nulls(rows: int, dtype: pa.DataType) -> pa.Array[Any]:
    out: pa.Array[Any] = pa.nulls(rows, dtype)  # type: ignore[call-overload]
    return out


def _constant(value: pa.Scalar[Any], rows: int) -> pa.Array[Any]:
    out: pa.Array[Any] = pa.repeat(value, rows)  # type: ignore[call-overload]
    return out


def _valid(arr: pa.Array[Any]) -> Mask:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)


def _numbers(arr: pa.Array[Any]) -> Values:
    """The values of a number, boolean or time column (times as microseconds or days), nulls as 0."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64)
    storage = arr.type
    if pa.types.is_boolean(storage):
        storage = pa.uint8()
    elif pa.types.is_date(storage):
        storage = pa.int32()
    elif pa.types.is_timestamp(storage):
        storage = pa.int64()
    return np.asarray(arr.cast(storage).fill_null(0).to_numpy(zero_copy_only=False))


def _result(values: Values, valid: Mask, dtype: DataType) -> pa.Array[Any]:
    target = _arrow_type(dtype)
    if dtype.name in _TIMES:
        storage, numpy_type = (pa.int32(), np.int32) if dtype.name == "date" else (pa.int64(), np.int64)
        return arrow(np.where(valid, values, 0).astype(numpy_type), storage, mask=~valid).cast(target)
    return arrow(np.where(valid, values, 0).astype(_NUMPY[dtype.name]), target, mask=~valid)


def _booleans(arr: pa.Array[Any]) -> pa.Array[Any]:
    return arr.cast(pa.bool_())


# --- comparisons ------------------------------------------------------------------

_BYTES_COMPARE: dict[str, Callable[[Any, Any], pa.Array[Any]]] = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _compare(
    op: str, left: tuple[pa.Array[Any], DataType], right: tuple[pa.Array[Any], DataType]
) -> pa.Array[Any]:
    (a, a_type), (b, b_type) = left, right
    if "void" in (a_type.name, b_type.name):
        return _nulls(len(a), pa.bool_())
    if a_type.name in ("string", "binary"):
        return _BYTES_COMPARE[op](a, b)
    x, y = _comparable(a, a_type, b_type), _comparable(b, b_type, a_type)
    return arrow(_ordered(op, x, y), pa.bool_(), mask=~(_valid(a) & _valid(b)))


def _comparable(arr: pa.Array[Any], own: DataType, other: DataType) -> Values:
    """``arr``'s values in the type Spark compares ``own`` with ``other`` in."""
    values = _numbers(arr)
    if own.is_numeric:
        names = {own.name, other.name}
        if not names & {"float", "double"}:
            return values.astype(np.int64)
        # A float with an integer compares as two doubles (Spark's ANSI coercion), as with a double.
        return values.astype(np.float32 if names == {"float"} else np.float64)
    if own.name == "date" and other.name != "date":
        return _midnights(values)
    return values


def _midnights(days: Values) -> Values:
    """Dates as the microsecond of their midnight in UTC, to compare them with timestamps."""
    days = days.astype(np.int64)
    if np.any(np.abs(days) > _BOUNDS["bigint"][1] // _DAY_US):
        # Spark's exact multiply fails the query ("long overflow"): no result to give.
        raise SchemaError("a date beyond year 294,000 has no timestamp to compare with (Spark fails too)")
    return days * _DAY_US


def _ordered(op: str, x: Values, y: Values) -> Mask:
    """``x op y`` in Spark's order of numbers: NaN equal to NaN and above every other value."""
    floating = np.issubdtype(x.dtype, np.floating)
    x_nan = np.isnan(x) if floating else np.zeros(len(x), bool)
    y_nan = np.isnan(y) if floating else np.zeros(len(y), bool)
    equal = (x == y) | (x_nan & y_nan)
    less = (x < y) | (~x_nan & y_nan)
    results: dict[str, Mask] = {
        "==": equal,
        "!=": ~equal,
        "<": less,
        "<=": less | equal,
        ">": ~(less | equal),
        ">=": ~less,
    }
    return results[op]


# --- arithmetic -------------------------------------------------------------------


def _arithmetic(op: str, left: pa.Array[Any], right: pa.Array[Any], out: DataType) -> pa.Array[Any]:
    """``left op right`` with the result type ``out``; null where Spark's ``try_`` function is."""
    valid = _valid(left) & _valid(right)
    wide = np.float64 if op == "/" else _NUMPY[out.name]
    x, y = _numbers(left).astype(wide), _numbers(right).astype(wide)
    if op in ("/", "%"):
        valid &= y != 0
        y = np.where(y == 0, 1, y).astype(wide)
    if op == "/" or not out.is_integral:
        with np.errstate(all="ignore"):
            values = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "%": np.fmod}[op](x, y)
        return _result(values, valid, out)
    values, fits = _exact(op, x.astype(np.int64), y.astype(np.int64), out)
    return _result(values, valid & fits, out)


def _exact(op: str, x: Values, y: Values, out: DataType) -> tuple[Values, Mask]:
    """Integer ``x op y`` (int64 values) and where the exact result fits ``out``."""
    if op == "%":
        # The remainder by -1 is 0; computing it would overflow for the smallest value.
        return np.where(y == -1, 0, np.fmod(x, np.where(y == -1, 1, y))), np.ones(len(x), bool)
    values = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op](x, y)
    if out.name != "bigint":  # the exact result of narrower types fits an int64
        low, high = _BOUNDS[out.name]
        return values, (values >= low) & (values <= high)
    if op == "+":
        return values, ((x ^ values) & (y ^ values)) >= 0
    if op == "-":
        return values, ((x ^ y) & (x ^ values)) >= 0
    return values, _product_fits(x, y, values)


def _product_fits(x: Values, y: Values, product: Values) -> Mask:
    """Whether the wrapped int64 ``product`` of ``x`` and ``y`` is their exact product."""
    divisor = np.where((x == 0) | (x == -1), 1, x)
    exact = (product % divisor == 0) & (product // divisor == y)
    return np.where(x == 0, True, np.where(x == -1, y != _BOUNDS["bigint"][0], exact))


# --- casts ------------------------------------------------------------------------


def _cast(arr: pa.Array[Any], source: DataType, target: DataType) -> pa.Array[Any]:
    """Spark's ``TRY_CAST(arr AS target)`` for the casts :func:`_castable` allows."""
    if source == target:
        return arr
    if source.name == "void":
        return _nulls(len(arr), _arrow_type(target))
    if target.name == "string":
        return arr.cast(pa.string())
    valid, values = _valid(arr), _numbers(arr)
    if target.name in _TIMES:
        return _time_cast(values, valid, source, target)
    if target.name == "boolean":
        return _result(values != 0, valid, target)
    if target.is_integral and source.name in ("float", "double"):
        values, fits = _truncated(values.astype(np.float64), target)
        return _result(values, valid & fits, target)
    if target.is_integral:
        low, high = _BOUNDS[target.name]
        values = values.astype(np.int64)
        return _result(values, valid & (values >= low) & (values <= high), target)
    with np.errstate(all="ignore"):  # a double beyond a float's range is infinite, as in Java
        return _result(values.astype(_NUMPY[target.name]), valid, target)


def _truncated(values: Values, target: DataType) -> tuple[Values, Mask]:
    """A float's value truncated to an integer type, and where it fits.

    Spark checks ``floor(x) <= MAX`` and ``ceil(x) >= MIN`` with the bounds
    as doubles: a bigint's bound is then ``2**63``, which passes, and
    ``2**63`` becomes the largest bigint.
    """
    low, high = _BOUNDS[target.name]
    whole = np.trunc(values)
    fits = (whole >= float(low)) & (whole <= float(high))  # NaN fits nowhere
    top = whole >= 2.0**63
    safe = np.where(fits & ~top, whole, 0).astype(np.int64)
    return np.where(top, high, safe), fits


def _time_cast(values: Values, valid: Mask, source: DataType, target: DataType) -> pa.Array[Any]:
    """Times in UTC (the session's zone): a date is its midnight, an instant's date is floored."""
    if source.name == "date":
        days = values.astype(np.int64)
        fits = np.abs(days) <= _BOUNDS["bigint"][1] // _DAY_US  # else Spark's exact multiply fails
        return _result(np.where(fits, days, 0) * _DAY_US, valid & fits, target)
    if target.name == "date":
        return _result(np.floor_divide(values, _DAY_US), valid, target)
    return _result(values, valid, target)
