"""Compile expression nodes to Spark SQL expression strings.

The lowering keeps expressions as SQL text so a recipe can be printed,
snapshot-tested and applied with ``selectExpr``/``expr`` without a JVM at
planning time. Identifiers are always back-quoted and literals rendered in
a form Spark parses back to the same value and type.

Arithmetic never fails a job (docs/expressions.md, "When arithmetic has no
result"): ``+ - *`` and negation become Spark's ``try_add``,
``try_subtract``, ``try_multiply``; ``/`` and ``%`` become ``try_divide`` and
``try_mod``; every cast is a ``TRY_CAST``. Each gives null where Spark's ANSI
mode would raise (an overflow, a zero divisor, a value the cast cannot
convert). :func:`failure_checks` gives, per such operation, a condition that
is true exactly when it produced a null from non-null operands; the lowering
counts them (``JobMetrics.arithmetic_errors``).

Examples
--------
>>> from krishiv_py.expr import col, lit
>>> to_sql((col("a") + 1).node)
'try_add(`a`, 1)'
>>> failure_checks((col("a") / col("b")).node, None)
['(`a` IS NOT NULL AND `b` IS NOT NULL AND try_divide(CAST(`a` AS DOUBLE), `b`) IS NULL)']
>>> failure_checks((col("a") / 2).node, None)
[]
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from krishiv_py.errors import PlanError
from krishiv_py.expr import (
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
    dtype_of,
)
from krishiv_py.types import DataType, Schema

__all__ = ["failure_checks", "joined_sum", "quote", "sum_halves", "to_sql"]

_OPS = {"==": "=", "!=": "<>", "and": "AND", "or": "OR"}
_TRY = {"+": "try_add", "-": "try_subtract", "*": "try_multiply", "%": "try_mod"}
_WIDENING = {
    "tinyint": ("smallint", "int", "bigint", "float", "double"),
    "smallint": ("int", "bigint", "float", "double"),
    "int": ("bigint", "float", "double"),
    "bigint": ("float", "double"),
    "float": ("double",),
}


def quote(name: str) -> str:
    """Back-quote an identifier (doubling any back-quote inside it)."""
    return "`" + name.replace("`", "``") + "`"


def to_sql(node: ExprNode, schema: Schema | None = None) -> str:
    """Spark SQL text for ``node`` (``schema``: the input's, to type negation exactly)."""
    if isinstance(node, Column):
        return quote(node.name)
    if isinstance(node, Literal):
        return _literal(node.value)
    if isinstance(node, BinaryOp):
        left, right = to_sql(node.left, schema), to_sql(node.right, schema)
        if node.op == "/":
            # Spark's `/` is already double division; force it so int/int matches Python.
            return f"try_divide(CAST({left} AS DOUBLE), {right})"
        if node.op in _TRY:
            return f"{_TRY[node.op]}({left}, {right})"
        target = _string_time_target(node, schema)
        if target is not None:  # Spark would cast the string side, failing on a malformed one
            if _type(node.left, schema) == DataType("string"):
                left = f"TRY_CAST({left} AS {target})"
            else:
                right = f"TRY_CAST({right} AS {target})"
        return f"({left} {_OPS.get(node.op, node.op)} {right})"
    if isinstance(node, UnaryOp):
        inner = to_sql(node.operand, schema)
        if node.op == "neg":
            dtype = _type(node.operand, schema)
            if dtype is not None and dtype.is_integral:
                # -(-2**63) has no bigint value: null, as the other operators.
                return f"try_subtract(CAST(0 AS {dtype.name.upper()}), {inner})"
            return f"(- {inner})"
        return {
            "not": f"(NOT {inner})",
            "is_null": f"({inner} IS NULL)",
            "is_not_null": f"({inner} IS NOT NULL)",
        }[node.op]
    if isinstance(node, Cast):
        return f"TRY_CAST({to_sql(node.operand, schema)} AS {node.dtype.name.upper()})"
    if isinstance(node, Func):  # Spark's function of the same name and meaning
        return f"{node.name}({', '.join(to_sql(a, schema) for a in node.args)})"
    if isinstance(node, Udf):  # registered under this name when the job is built
        return f"{node.function.sql_name}({', '.join(to_sql(a, schema) for a in node.args)})"
    if isinstance(node, Case):
        parts = [
            f"WHEN {_condition(c, schema)} THEN {_case_value(v, node, schema)}" for c, v in node.branches
        ]
        if node.otherwise is not None:
            parts.append(f"ELSE {_case_value(node.otherwise, node, schema)}")
        return f"(CASE {' '.join(parts)} END)"
    assert isinstance(node, Alias)
    return f"{to_sql(node.operand, schema)} AS {quote(node.name)}"


def _condition(condition: ExprNode, schema: Schema | None) -> str:
    """A ``WHEN`` condition, a null constant typed (Spark wants a boolean there)."""
    text = to_sql(condition, schema)
    kind = _type(condition, schema)
    if (isinstance(condition, Literal) and condition.value is None) or (
        kind is not None and kind.name == "void"
    ):
        return f"CAST({text} AS BOOLEAN)"
    return text


def _case_value(value: ExprNode, case: Case, schema: Schema | None) -> str:
    """A branch's value in the type of the whole ``CASE`` (a widening, never a failing cast)."""
    text = to_sql(value, schema)
    own, whole = _type(value, schema), _type(case, schema)
    if own is None or whole is None or own == whole or whole.name == "void":
        return text
    return f"CAST({text} AS {whole.name.upper()})"


def _reached(case: Case, index: int, schema: Schema | None) -> str:
    """True on a row exactly where ``case`` evaluates its branch ``index`` (the ``ELSE``: the
    number of branches): no condition before it is true."""
    before = [f"coalesce({to_sql(c, schema)}, FALSE)" for c, _ in case.branches[:index]]
    return " AND ".join(f"NOT {b}" for b in before) or "TRUE"


def sum_halves(value: str) -> tuple[str, str]:
    """The sums of a bigint's high and low 32 bits: exact, they cannot overflow (< 2**31 rows).

    >>> sum_halves("`v`")
    ('sum(shiftright(`v`, 32))', 'sum(`v` & 4294967295L)')
    """
    return f"sum(shiftright({value}, 32))", f"sum({value} & 4294967295L)"


def joined_sum(high: str, low: str) -> str:
    """The exact sum from the columns of :func:`sum_halves`: null when it does not fit a bigint."""
    carried = f"({high} + shiftright({low}, 32))"
    return (
        f"CASE WHEN {carried} BETWEEN -2147483648L AND 2147483647L "
        f"THEN shiftleft({carried}, 32) | ({low} & 4294967295L) END"
    )


def failure_checks(node: ExprNode, schema: Schema | None) -> list[str]:
    """One SQL condition per operation in ``node`` that can lack a result.

    Each is true on a row exactly when that operation gave null although its
    operands were not null; an operation whose operand is such a null is not
    counted again. With ``schema`` (the input's), operations that cannot fail
    on their types — floating-point ``+ - *``, widening casts — are left out.
    """
    out: list[str] = []
    _checks(node, schema, out)
    return out


def _checks(node: ExprNode, schema: Schema | None, out: list[str]) -> None:
    if isinstance(node, Column | Literal):
        return
    if isinstance(node, BinaryOp):
        _checks(node.left, schema, out)
        _checks(node.right, schema, out)
        if _can_fail_binary(node, schema):
            operands = [o for o in (node.left, node.right) if not isinstance(o, Literal)]
            out.append(_check(operands, node, schema))
        elif _string_time_target(node, schema) is not None:
            side = node.left if _type(node.left, schema) == DataType("string") else node.right
            target = _string_time_target(node, schema)
            text = to_sql(side, schema)
            out.append(f"({text} IS NOT NULL AND TRY_CAST({text} AS {target}) IS NULL)")
        return
    if isinstance(node, Case):  # an operation counts only on the rows that reach it
        for i, (condition, value) in enumerate(node.branches):
            reach = _reached(node, i, schema)
            inner: list[str] = []
            _checks(condition, schema, inner)
            out += [f"({reach} AND {check})" for check in inner]
            taken = f"{reach} AND coalesce({to_sql(condition, schema)}, FALSE)"
            inner = []
            _checks(value, schema, inner)
            out += [f"({taken} AND {check})" for check in inner]
        if node.otherwise is not None:
            inner = []
            _checks(node.otherwise, schema, inner)
            reach = _reached(node, len(node.branches), schema)
            out += [f"({reach} AND {check})" for check in inner]
        return
    if isinstance(node, Func | Udf):  # a function has a value for every value (a udf's own failure fails)
        for arg in node.args:
            _checks(arg, schema, out)
        return
    if isinstance(node, UnaryOp | Alias):
        _checks(node.operand, schema, out)
        if isinstance(node, UnaryOp) and node.op == "neg":
            dtype = _type(node.operand, schema)
            if dtype is not None and dtype.is_integral:
                out.append(_check([node.operand], node, schema))
        return
    _checks(node.operand, schema, out)
    if _can_fail_cast(node, schema):
        out.append(_check([node.operand], node, schema))


def _check(operands: Sequence[ExprNode], node: ExprNode, schema: Schema | None) -> str:
    parts = [f"{to_sql(o, schema)} IS NOT NULL" for o in operands]
    return "(" + " AND ".join([*parts, f"{to_sql(node, schema)} IS NULL"]) + ")"


def _string_time_target(node: BinaryOp, schema: Schema | None) -> str | None:
    """For a comparison of a string with a timestamp or date: the type the string is cast to."""
    if node.op not in ("==", "!=", "<", "<=", ">", ">="):
        return None
    types = [_type(o, schema) for o in (node.left, node.right)]
    others = [t for t in types if t is not None and t != DataType("string")]
    if None in types or len(others) != 1:
        return None
    other = others[0]
    if other.name == "date":
        return "DATE"
    return other.name.upper() if other.is_timestamp else None


def _can_fail_binary(node: BinaryOp, schema: Schema | None) -> bool:
    if any(isinstance(o, Literal) and o.value is None for o in (node.left, node.right)):
        return False
    if node.op in ("/", "%"):
        return not (isinstance(node.right, Literal) and _nonzero_number(node.right.value))
    if node.op not in ("+", "-", "*"):
        return False
    if schema is None:
        return True
    types = [_type(o, schema) for o in (node.left, node.right)]
    return not any(t is not None and t.name in ("float", "double") for t in types)


def _can_fail_cast(node: Cast, schema: Schema | None) -> bool:
    source = _type(node.operand, schema)
    if source is None:
        return not (isinstance(node.operand, Literal) and node.operand.value is None)
    target = node.dtype
    if source.name == "void" or target.name == "string" or source == target:
        return False
    return target.name not in _WIDENING.get(source.name, ())


def _nonzero_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value != 0


def _type(node: ExprNode, schema: Schema | None) -> DataType | None:
    if schema is None:
        return None
    try:
        return dtype_of(node, schema)
    except PlanError:
        return None


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, float):
        if value != value:
            return "CAST('NaN' AS DOUBLE)"
        if value in (float("inf"), float("-inf")):
            return f"CAST('{'' if value > 0 else '-'}Infinity' AS DOUBLE)"
        return f"{float(value)!r}D"  # float(): numpy's repr is 'np.float64(1.5)'
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    assert isinstance(value, _dt.date)
    return f"DATE '{value.isoformat()}'"
