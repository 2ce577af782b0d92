"""Compile expression nodes to Spark SQL expression strings.

The lowering keeps expressions as SQL text so a recipe can be printed,
snapshot-tested and applied with ``selectExpr``/``expr`` without a JVM at
planning time. Identifiers are always back-quoted and literals rendered in
a form Spark parses back to the same value and type.
"""

from __future__ import annotations

import datetime as _dt

from krishiv_py.expr import Alias, BinaryOp, Cast, Column, ExprNode, Literal, UnaryOp

__all__ = ["quote", "to_sql"]

_OPS = {"==": "=", "!=": "<>", "and": "AND", "or": "OR"}


def quote(name: str) -> str:
    """Back-quote an identifier (doubling any back-quote inside it)."""
    return "`" + name.replace("`", "``") + "`"


def to_sql(node: ExprNode) -> str:
    """Spark SQL text for ``node``."""
    if isinstance(node, Column):
        return quote(node.name)
    if isinstance(node, Literal):
        return _literal(node.value)
    if isinstance(node, BinaryOp):
        if node.op == "/":
            # Spark's `/` is already double division; force it so int/int matches Python.
            return f"(CAST({to_sql(node.left)} AS DOUBLE) / {to_sql(node.right)})"
        return f"({to_sql(node.left)} {_OPS.get(node.op, node.op)} {to_sql(node.right)})"
    if isinstance(node, UnaryOp):
        inner = to_sql(node.operand)
        return {
            "not": f"(NOT {inner})",
            "neg": f"(- {inner})",
            "is_null": f"({inner} IS NULL)",
            "is_not_null": f"({inner} IS NOT NULL)",
        }[node.op]
    if isinstance(node, Cast):
        return f"{'TRY_CAST' if node.safe else 'CAST'}({to_sql(node.operand)} AS {node.dtype.name.upper()})"
    assert isinstance(node, Alias)
    return f"{to_sql(node.operand)} AS {quote(node.name)}"


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
