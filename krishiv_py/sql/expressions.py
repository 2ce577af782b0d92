"""SQL scalar expressions and aggregates as the builder's expression nodes.

Each SQL form maps to the node the builder makes for the same thing, so a
``WHERE`` clause and ``.filter(...)`` give equal plans:

=================================  ==========================================
SQL                                builder
=================================  ==========================================
``amount``, ``e.amount``           ``col("amount")``
``5``, ``1.5``, ``'x'``, ``TRUE``  ``lit(5)``, ``lit(1.5)`` (a double),
``NULL``, ``-5``                   ``lit("x")``, ``lit(True)``, ``lit(None)``,
                                   ``lit(-5)``
``=  <> != < <= > >=``             ``== != != < <= > >=``
``AND OR NOT``                     ``& | ~``
``+ - * / %``, ``-x``              ``+ - * / %``, ``-x``
``x IS NULL``, ``x IS NOT NULL``   ``x.is_null()``, ``x.is_not_null()``
``x BETWEEN a AND b``              ``(x >= a) & (x <= b)``
``x IN (a, b)``                    ``(x == a) | (x == b)``
``CAST(x AS t)``, ``TRY_CAST``     ``x.cast("t")``, ``x.try_cast("t")``
=================================  ==========================================

Column names match exactly, or else ignoring case when that names one
column. Aggregates: ``COUNT(*)`` (also ``COUNT(1)``), ``COUNT(x)``, ``COUNT(DISTINCT x)``,
``SUM``, ``AVG``, ``MIN``, ``MAX``, ``FIRST`` and ``LAST`` (the builder's
``first``/``last``: the value of the earliest/latest row by event time), each
over one column.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING

from krishiv_py.errors import SchemaError
from krishiv_py.expr import (
    DATE_PATTERNS,
    AggFunc,
    Alias,
    BinaryOp,
    Case,
    Cast,
    Column,
    ExprNode,
    Func,
    Literal,
    UnaryOp,
)
from krishiv_py.types import DataType

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.sql.source import SqlText

__all__ = ["Resolver", "Special", "aggregate", "is_aggregate", "scalar"]

#: Resolves a column reference to a column name of the input (or raises).
Resolver = Callable[["exp.Column"], str]
#: Translates a node the caller handles itself (an aggregate in HAVING, ...), or returns None.
Special = Callable[["exp.Expression"], ExprNode | None]

_SUPPORTED = (
    "comparisons, AND/OR/NOT, + - * / %, IS [NOT] NULL, BETWEEN, IN (...), CASE WHEN, CAST and TRY_CAST, "
    "LOWER, UPPER, LENGTH, REPLACE, HOUR, DATE_FORMAT, REGEXP_EXTRACT, SPLIT_PART"
)
_AGGREGATES = (
    "COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, AVG, MIN, MAX, FIRST, LAST "
    "(all but FIRST and LAST with FILTER (WHERE ...) or not)"
)


def _binary_ops() -> dict[type[exp.Expression], str]:
    from sqlglot import exp

    return {
        exp.EQ: "==",
        exp.NEQ: "!=",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
        exp.And: "and",
        exp.Or: "or",
        exp.Add: "+",
        exp.Sub: "-",
        exp.Mul: "*",
        exp.Div: "/",
        exp.Mod: "%",
    }


def scalar(node: exp.Expression, sql: SqlText, resolve: Resolver, special: Special, clause: str) -> ExprNode:
    """The expression node for ``node``; ``clause`` names where it is, for errors."""
    from sqlglot import exp

    replaced = special(node)
    if replaced is not None:
        return replaced

    def sub(x: exp.Expression) -> ExprNode:
        return scalar(x, sql, resolve, special, clause)

    op = _binary_ops().get(type(node))
    if op is not None:
        return BinaryOp(op, sub(node.this), sub(node.expression))
    if isinstance(node, exp.Paren):
        return sub(node.this)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            raise sql.error(node, f"* is not an expression; {clause} takes columns and expressions")
        return Column(resolve(node))
    if isinstance(node, exp.Literal | exp.Boolean | exp.Null):
        return Literal(_literal(node))
    if isinstance(node, exp.Neg):
        inner = sub(node.this)
        if isinstance(inner, Literal) and isinstance(inner.value, int | float) and inner.value is not True:
            return Literal(-inner.value)
        return UnaryOp("neg", inner)
    if isinstance(node, exp.Not):
        inner = node.this.unnest()  # NOT (x IS NULL) is x IS NOT NULL
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return UnaryOp("is_not_null", sub(inner.this))
        return UnaryOp("not", sub(node.this))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return UnaryOp("is_null", sub(node.this))
    compound = _compound(node, sub, sql)
    if compound is not None:
        return compound
    called = _function(node, sub, sql)
    if called is not None:
        return called
    if is_aggregate(node):
        raise sql.error(node, f"an aggregate is not allowed in {clause}")
    if isinstance(node, exp.Func):
        raise sql.error(
            node, f"unknown function {_function_name(node)} in {clause}; expressions support {_SUPPORTED}"
        )
    raise sql.error(
        node, f"{type(node).__name__} is not supported in {clause}; expressions support {_SUPPORTED}"
    )


def _compound(
    node: exp.Expression, sub: Callable[[exp.Expression], ExprNode], sql: SqlText
) -> ExprNode | None:
    """``BETWEEN``, ``IN (...)``, ``CAST``/``TRY_CAST`` and ``CASE`` as the builder's nodes, else None."""
    from sqlglot import exp

    if isinstance(node, exp.Between):
        value = sub(node.this)
        return BinaryOp(
            "and", BinaryOp(">=", value, sub(node.args["low"])), BinaryOp("<=", value, sub(node.args["high"]))
        )
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        value = sub(node.this)
        out: ExprNode | None = None
        for item in node.expressions:
            test = BinaryOp("==", value, sub(item))
            out = test if out is None else BinaryOp("or", out, test)
        assert out is not None
        return out
    if isinstance(node, exp.Cast):
        return Cast(sub(node.this), _dtype(node.to, sql), safe=_is_safe(node))
    if isinstance(node, exp.Case):  # CASE [x] WHEN ... THEN ... [ELSE ...] END
        operand = sub(node.this) if node.this is not None else None
        branches = []
        for branch in node.args.get("ifs") or []:
            tested = sub(branch.this)
            branches.append(
                (tested if operand is None else BinaryOp("==", operand, tested), sub(branch.args["true"]))
            )
        default = node.args.get("default")
        otherwise = sub(default) if default is not None else None
        return Case(branches=tuple(branches), otherwise=otherwise, closed=otherwise is not None)
    return None


def _function(
    node: exp.Expression, sub: Callable[[exp.Expression], ExprNode], sql: SqlText
) -> ExprNode | None:
    """A scalar function of :data:`~krishiv_py.expr.FUNCTIONS` (Spark's names), else None."""
    from sqlglot import exp

    def args(*names: str) -> tuple[ExprNode, ...]:
        return tuple(sub(node.args[a]) for a in names if node.args.get(a) is not None)

    plain: dict[type[exp.Expression], str] = {
        exp.Lower: "lower",
        exp.Upper: "upper",
        exp.Length: "length",
        exp.Hour: "hour",
    }
    name = plain.get(type(node))
    if name is not None:
        return Func(name, args("this"))
    if isinstance(node, exp.Replace):
        return Func("replace", (*args("this", "expression"), *(args("replacement") or (Literal(""),))))
    if isinstance(node, exp.RegexpExtract):
        group = args("group") or (Literal(1),)
        return Func("regexp_extract", (*args("this", "expression"), *group))
    if isinstance(node, exp.SplitPart):
        return Func("split_part", args("this", "delimiter", "part_index"))
    if isinstance(node, exp.TimeToStr):  # DATE_FORMAT(t, 'yyyy-MM-dd'), read back from sqlglot's form
        value = node.this
        if isinstance(value, exp.TimeStrToTime) or (
            isinstance(value, exp.Cast) and value.to.this == exp.DataType.Type.TIMESTAMP
        ):
            value = value.this  # (sqlglot adds the conversion)
        text = str(node.args["format"].this).replace("strict", "")
        back = {v: k for k, v in DATE_PATTERNS.items()}
        pattern = re.sub(r"%[YmdHMS]", lambda m: back[m.group(0)], text)
        return Func("date_format", (sub(value), Literal(pattern)))
    if isinstance(node, exp.Anonymous) and str(node.name).upper() == "SPLIT_INDEX":
        raise sql.error(
            node,
            "SPLIT_INDEX (Flink's, from 0) is SPLIT_PART(s, delimiter, index + 1) here (Spark's, from 1)",
        )
    if isinstance(node, exp.Anonymous) and str(node.name).upper() == "PROCTIME":
        raise sql.error(
            node,
            "PROCTIME() is no column here: it names processing time in a window helper, GROUP BY "
            "tumble_start(PROCTIME(), INTERVAL '10' SECOND) (Flink's TUMBLE(PROCTIME(), ...))",
        )
    return None


def _literal(node: exp.Expression) -> bool | int | float | str | None:
    from sqlglot import exp

    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    assert isinstance(node, exp.Literal)
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    number = Decimal(text)
    if number == number.to_integral_value() and not any(c in text for c in ".eE"):
        return int(number)
    return float(number)


def _is_safe(node: exp.Cast) -> bool:
    """``TRY_CAST`` (sqlglot reads Spark's plain ``CAST`` as a try-cast without the ``safe`` flag)."""
    return bool(node.args.get("safe"))


def _dtype(node: exp.DataType, sql: SqlText) -> DataType:
    text = node.sql(dialect="spark")
    try:
        return DataType.parse(text)
    except SchemaError as exc:
        raise sql.error(node, f"CAST: {exc}") from None


def _function_name(node: exp.Func) -> str:
    from sqlglot import exp

    return str(node.name).upper() if isinstance(node, exp.Anonymous) else node.sql_name()


def is_aggregate(node: exp.Expression) -> bool:
    """True for an aggregate function call (supported or not), ``FILTER (WHERE ...)`` or not."""
    from sqlglot import exp

    return isinstance(node, exp.AggFunc) or (
        isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc)
    )


def filter_of(node: exp.Expression) -> tuple[exp.Expression, exp.Expression | None]:
    """An aggregate call and the condition of its ``FILTER (WHERE ...)`` (None: none)."""
    from sqlglot import exp

    if isinstance(node, exp.Filter):
        where = node.expression
        return node.this, where.this if isinstance(where, exp.Where) else where
    return node, None


def aggregate(node: exp.Expression, sql: SqlText, resolve: Resolver) -> tuple[AggFunc, str | None]:
    """``(function, column)`` of a supported aggregate (column None: ``COUNT(*)``), its
    ``FILTER (WHERE ...)`` aside (:func:`filter_of`)."""
    from sqlglot import exp

    node, _ = filter_of(node)

    funcs: dict[type[exp.Expression], AggFunc] = {
        exp.Count: "count",
        exp.Sum: "sum",
        exp.Avg: "avg",
        exp.Min: "min",
        exp.Max: "max",
        exp.First: "first",
        exp.Last: "last",
    }
    func = funcs.get(type(node))
    if func is None:
        raise sql.error(
            node, f"aggregate {_function_name_of(node)} is not supported; the aggregates are {_AGGREGATES}"
        )
    arg = node.this
    if isinstance(node, exp.Min | exp.Max) and node.expressions:
        raise sql.error(node, f"{func.upper()} takes one column")
    if isinstance(arg, exp.Distinct):
        if func != "count" or len(arg.expressions) != 1:
            raise sql.error(node, "DISTINCT is supported as COUNT(DISTINCT column), over one column")
        func, arg = "count_distinct", arg.expressions[0]
    if func == "count" and isinstance(arg, exp.Literal | exp.Boolean):
        arg = exp.Star()  # COUNT(1) counts rows, as COUNT(*) does
    if isinstance(arg, exp.Star):
        if func != "count":
            raise sql.error(node, f"{func.upper()}(*) is not defined; COUNT(*) counts rows")
        return "count", None
    if isinstance(arg, exp.Paren):
        arg = arg.this
    if not isinstance(arg, exp.Column) or isinstance(arg.this, exp.Star):
        raise sql.error(
            node,
            f"{_function_name_of(node)} takes one column; compute an expression in a subquery first: "
            "FROM (SELECT ..., <expression> AS name FROM stream)",
        )
    return func, resolve(arg)


def _function_name_of(node: exp.Expression) -> str:
    from sqlglot import exp

    return _function_name(node) if isinstance(node, exp.Func) else type(node).__name__.upper()


def alias_of(node: ExprNode, name: str) -> ExprNode:
    """``node`` named ``name``: a plain column of that name stays as it is, as in the builder."""
    if isinstance(node, Column) and node.name == name:
        return node
    return Alias(node, name)
