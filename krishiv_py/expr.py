"""Column expressions and aggregate functions.

``col``, ``lit`` and the aggregate functions return small wrapper objects
(:class:`Expr`, :class:`AggExpr`) that overload Python operators; the plan
stores only the immutable nodes inside them (:class:`ExprNode`), so plans
compare and hash structurally.

Examples
--------
>>> import krishiv_py as kp
>>> (kp.col("amount") > 10).node
BinaryOp(op='>', left=Column(name='amount'), right=Literal(value=10))
>>> kp.sum(kp.col("amount")).name
'sum_amount'
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from typing import Any, TypeAlias
from typing import Literal as _Literal

import attrs

from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.types import DataType, Schema

__all__ = [
    "EXPR_TYPES",
    "AggCall",
    "AggExpr",
    "agg_calls",
    "Case",
    "Func",
    "Expr",
    "ExprNode",
    "Udf",
    "UserFunction",
    "avg",
    "col",
    "count",
    "count_distinct",
    "date_format",
    "first",
    "hour",
    "last",
    "length",
    "lit",
    "lower",
    "max",
    "min",
    "regexp_extract",
    "replace",
    "split_part",
    "sum",
    "udf",
    "upper",
    "when",
]

LiteralValue: TypeAlias = bool | int | float | str | _dt.datetime | _dt.date | None
AggFunc: TypeAlias = _Literal["count", "sum", "avg", "min", "max", "count_distinct", "first", "last"]
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_ARITHMETIC = ("+", "-", "*", "/", "%")


@attrs.frozen
class Column:
    name: str


@attrs.frozen
class Literal:
    value: LiteralValue


@attrs.frozen
class BinaryOp:
    op: str
    left: ExprNode
    right: ExprNode


@attrs.frozen
class UnaryOp:
    op: _Literal["not", "neg", "is_null", "is_not_null"]
    operand: ExprNode


@attrs.frozen
class Cast:
    operand: ExprNode
    dtype: DataType
    #: A tolerant cast: a value that cannot be converted becomes null instead of failing the job.
    safe: bool = False


@attrs.frozen
class Alias:
    operand: ExprNode
    name: str


@attrs.frozen
class Case:
    """``CASE WHEN c1 THEN v1 [WHEN ...] [ELSE otherwise] END``: the value of the first branch whose
    condition is true (not false, not null), else ``otherwise`` (null without one)."""

    branches: tuple[tuple[ExprNode, ExprNode], ...]
    otherwise: ExprNode | None = None
    #: ``otherwise()`` was called: no branch may follow.
    closed: bool = False


@attrs.frozen
class Func:
    """A scalar function of :data:`FUNCTIONS` (``lower``, ``date_format``, ...) over ``args``;
    the arguments after the first are constants (:class:`Literal`)."""

    name: str
    args: tuple[ExprNode, ...]


@attrs.frozen(eq=False)
class UserFunction:
    """A Python function over Arrow arrays, used as a scalar expression (:func:`udf`).

    ``fn`` takes one ``pyarrow.Array`` per argument (a constant argument is
    an array of that value) and returns a ``pyarrow.Array`` of the same
    length, of type ``returns`` or one that casts to it safely. Two are the
    same function only when they are the same object.
    """

    fn: Callable[..., Any]
    returns: DataType
    name: str

    def __call__(self, *args: Expr | LiteralValue) -> Expr:
        if not args:
            raise PlanError(f"udf {self.name}() needs at least one argument (a column, an expression)")
        return Expr(Udf(self, tuple(a.node if isinstance(a, Expr) else _wrap(a) for a in args)))

    @property
    def sql_name(self) -> str:
        """The name Spark knows it by in the job's SQL (registered when the job is built)."""
        return f"krishiv_udf_{self.name}_{id(self):x}"


@attrs.frozen
class Udf:
    """A call of a :class:`UserFunction` over ``args``."""

    function: UserFunction
    args: tuple[ExprNode, ...]


ExprNode: TypeAlias = Column | Literal | BinaryOp | UnaryOp | Cast | Alias | Case | Func | Udf
#: Every expression node class (``isinstance(x, EXPR_TYPES)``: ``x`` is an :data:`ExprNode`).
EXPR_TYPES = (Column, Literal, BinaryOp, UnaryOp, Cast, Alias, Case, Func, Udf)


@attrs.frozen
class AggCall:
    """An aggregate function over one column (``column is None``: count rows); ``filter``: over
    the rows where it is true only (SQL's ``FILTER (WHERE ...)``)."""

    func: AggFunc
    column: str | None
    name: str
    filter: ExprNode | None = None


def _wrap(value: object) -> ExprNode:
    if isinstance(value, Expr):
        return value.node
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise PlanError(f"integer literal {value} does not fit in a bigint (64-bit)")
    if value is None or isinstance(value, bool | int | float | str | _dt.datetime | _dt.date):
        return Literal(value)
    raise PlanError(f"cannot use {type(value).__name__} value {value!r} in an expression")


class Expr:
    """A column expression. Build with :func:`col` and :func:`lit`."""

    __slots__ = ("node",)

    def __init__(self, node: ExprNode) -> None:
        self.node = node

    def _bin(self, op: str, other: object, *, swap: bool = False) -> Expr:
        left, right = (_wrap(other), self.node) if swap else (self.node, _wrap(other))
        node = BinaryOp(op, left, right)
        _check_divisor(node)
        return Expr(node)

    def __add__(self, other: object) -> Expr:
        return self._bin("+", other)

    def __radd__(self, other: object) -> Expr:
        return self._bin("+", other, swap=True)

    def __sub__(self, other: object) -> Expr:
        return self._bin("-", other)

    def __rsub__(self, other: object) -> Expr:
        return self._bin("-", other, swap=True)

    def __mul__(self, other: object) -> Expr:
        return self._bin("*", other)

    def __rmul__(self, other: object) -> Expr:
        return self._bin("*", other, swap=True)

    def __truediv__(self, other: object) -> Expr:
        return self._bin("/", other)

    def __mod__(self, other: object) -> Expr:
        return self._bin("%", other)

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return self._bin("==", other)

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return self._bin("!=", other)

    def __lt__(self, other: object) -> Expr:
        return self._bin("<", other)

    def __le__(self, other: object) -> Expr:
        return self._bin("<=", other)

    def __gt__(self, other: object) -> Expr:
        return self._bin(">", other)

    def __ge__(self, other: object) -> Expr:
        return self._bin(">=", other)

    def __and__(self, other: object) -> Expr:
        return self._bin("and", other)

    def __or__(self, other: object) -> Expr:
        return self._bin("or", other)

    def __invert__(self) -> Expr:
        return Expr(UnaryOp("not", self.node))

    def __neg__(self) -> Expr:
        return Expr(UnaryOp("neg", self.node))

    def __bool__(self) -> bool:
        raise PlanError("an expression has no truth value; use & | ~ instead of and/or/not")

    __hash__ = None  # type: ignore[assignment]

    def is_null(self) -> Expr:
        return Expr(UnaryOp("is_null", self.node))

    def is_not_null(self) -> Expr:
        return Expr(UnaryOp("is_not_null", self.node))

    def cast(self, dtype: str, *, safe: bool = False) -> Expr:
        """Convert to ``dtype`` (a Spark type name: ``"timestamp"``, ``"bigint"``, ...).

        A value the cast cannot convert (``'garbage'`` as a timestamp, 300 as
        a tinyint) becomes null and is counted in
        ``metrics().arithmetic_errors``; the job goes on. A null event time
        is then also counted as an invalid event and handed to the
        late-event handler. ``safe=True`` and :meth:`try_cast` give the same
        result and say in the plan that nulls are expected.
        """
        try:
            target = DataType.parse(dtype)
        except SchemaError as exc:
            raise PlanError(f"cast(): {exc}") from None
        return Expr(Cast(self.node, target, safe=bool(safe)))

    def try_cast(self, dtype: str) -> Expr:
        """A tolerant :meth:`cast`: values that cannot be converted become null."""
        return self.cast(dtype, safe=True)

    def alias(self, name: str) -> Expr:
        return Expr(Alias(self.node, _check_alias(name)))

    def when(self, condition: Expr, value: object) -> Expr:
        """One more branch of a :func:`when` expression: ``kp.when(c1, v1).when(c2, v2)``."""
        node = self.node
        if not isinstance(node, Case) or node.closed:
            raise PlanError(
                "when() continues kp.when(condition, value) before otherwise(); start one with kp.when(...)"
            )
        return Expr(attrs.evolve(node, branches=(*node.branches, _branch(condition, value))))

    def otherwise(self, value: object) -> Expr:
        """The value of a :func:`when` expression where no condition is true (else null)."""
        node = self.node
        if not isinstance(node, Case) or node.closed:
            raise PlanError("otherwise() ends kp.when(condition, value)...; call it once, last")
        return Expr(attrs.evolve(node, otherwise=_wrap(value), closed=True))

    def __repr__(self) -> str:
        return f"Expr({self.node!r})"


class AggExpr:
    """An aggregate, e.g. ``kp.sum(kp.col("amount")).alias("total")``."""

    __slots__ = ("call",)

    def __init__(self, call: AggCall) -> None:
        self.call = call

    @property
    def name(self) -> str:
        return self.call.name

    def alias(self, name: str) -> AggExpr:
        return AggExpr(attrs.evolve(self.call, name=_check_alias(name)))

    @property
    def filter(self) -> ExprNode | None:
        return self.call.filter

    def __repr__(self) -> str:
        return f"AggExpr({self.call!r})"


def agg_calls(aggregates: tuple[object, ...]) -> tuple[AggCall, ...]:
    """The calls of ``agg()``'s arguments, or a :class:`PlanError` naming one that is no aggregate."""
    for a in aggregates:
        if not isinstance(a, AggExpr):
            raise PlanError(f"agg() takes aggregates such as kp.count(kp.col('*')), got {a!r}")
    return tuple(a.call for a in aggregates if isinstance(a, AggExpr))


def _check_alias(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise PlanError(f"alias() takes a non-empty column name, got {name!r}")
    return name


def col(name: str) -> Expr:
    """Refer to a column by name (``col("*")`` only inside ``count``)."""
    if not isinstance(name, str) or not name:
        raise PlanError(f"column name must be a non-empty string, got {name!r}")
    return Expr(Column(name))


def lit(value: LiteralValue) -> Expr:
    """A constant."""
    return Expr(_wrap(value))


def _func(name: str, arg: Expr, *constants: object) -> Expr:
    if not isinstance(arg, Expr):
        raise PlanError(f"{name}() takes an expression first, e.g. {name}(kp.col('x')); got {arg!r}")
    return Expr(Func(name, (arg.node, *(_wrap(c) for c in constants))))


def udf(returns: str, *, name: str | None = None) -> Callable[[Callable[..., Any]], UserFunction]:
    """Make a Python function over Arrow arrays a scalar expression (a decorator).

    The function takes one ``pyarrow.Array`` per argument and returns a
    ``pyarrow.Array`` of as many values, of the DDL type ``returns``
    (``"bigint"``, ``"string"``, ...; one that casts to it safely will do).
    It runs once per batch of rows, never per row: in Spark as an Arrow UDF
    (one Python call per Arrow batch of a task, ~10,000 rows), and between
    krishiv's stateful operators on the rows of each step. It must be a
    pure function of its arguments (a micro-batch may run again after a
    failure), and pickle with cloudpickle (it runs in Spark's Python
    workers). An exception it raises fails the job, naming it.

    Examples
    --------
    >>> import pyarrow.compute as pc
    >>> import krishiv_py as kp
    >>> @kp.udf("bigint")
    ... def count_char(text, char):
    ...     return pc.subtract(pc.utf8_length(text), pc.utf8_length(pc.replace_substring(text, "c", "")))
    >>> count_char(kp.col("url"), "c").node.function.returns
    DataType(name='bigint')
    """
    if not isinstance(returns, str):
        raise PlanError(f"udf(returns) takes a DDL type such as 'bigint' or 'string', got {returns!r}")
    dtype = DataType.parse(returns)

    def make(fn: Callable[..., Any]) -> UserFunction:
        if not callable(fn):
            raise PlanError(f"@udf(...) decorates a function, got {fn!r}")
        label = name or getattr(fn, "__name__", "") or "udf"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label):
            raise PlanError(f"udf name= must be an identifier, got {label!r}")
        return UserFunction(fn=fn, returns=dtype, name=label)

    return make


def lower(arg: Expr) -> Expr:
    """The string in lower case."""
    return _func("lower", arg)


def upper(arg: Expr) -> Expr:
    """The string in upper case."""
    return _func("upper", arg)


def length(arg: Expr) -> Expr:
    """The number of characters of the string (an ``int``)."""
    return _func("length", arg)


def replace(arg: Expr, search: str, replacement: str = "") -> Expr:
    """The string with every ``search`` replaced by ``replacement`` (an empty ``search``: unchanged)."""
    return _func("replace", arg, search, replacement)


def hour(arg: Expr) -> Expr:
    """The hour (0-23, UTC) of a timestamp."""
    return _func("hour", arg)


def date_format(arg: Expr, pattern: str) -> Expr:
    """A timestamp as text, in UTC, by Spark's pattern letters ``yyyy MM dd HH mm ss``
    (``date_format(kp.col("t"), "yyyy-MM-dd")``)."""
    return _func("date_format", arg, pattern)


def regexp_extract(arg: Expr, pattern: str, index: int = 1) -> Expr:
    """Group ``index`` of the first match of ``pattern`` in the string (0: the whole match);
    ``''`` when it does not match."""
    return _func("regexp_extract", arg, pattern, index)


def split_part(arg: Expr, delimiter: str, part: int) -> Expr:
    """Part ``part`` (from 1; negative: from the end) of the string split at ``delimiter``;
    ``''`` when there is no such part."""
    return _func("split_part", arg, delimiter, part)


def when(condition: Expr, value: object) -> Expr:
    """A conditional value, SQL's ``CASE WHEN``: ``value`` where ``condition`` is true.

    Chain more branches with ``.when(condition, value)`` and end with
    ``.otherwise(value)`` (without it: null where no condition is true).
    The first true condition decides; a null condition is not true. The
    values share one type: numbers of any width (the widest), or one type.

    >>> import krishiv_py as kp
    >>> kp.when(kp.col("price") > 100, "high").otherwise("low").node.branches[0][1]
    Literal(value='high')
    """
    return Expr(Case(branches=(_branch(condition, value),)))


def _branch(condition: Expr, value: object) -> tuple[ExprNode, ExprNode]:
    if not isinstance(condition, Expr):
        raise PlanError(f"when() takes a condition expression, e.g. kp.col('x') > 1; got {condition!r}")
    return condition.node, _wrap(value)


def _agg(func: AggFunc, arg: Expr, where: Expr | None = None) -> AggExpr:
    if not isinstance(arg, Expr) or not isinstance(arg.node, Column):
        if isinstance(arg, str):  # a name where a column goes: say how to write it
            rows = " to count rows" if arg == "*" and func == "count" else ""
            raise PlanError(
                f"{func}() takes a column, not a string: write {func}(col({arg!r})){rows}; got {arg!r}"
            )
        raise PlanError(f"{func}() takes a column, e.g. {func}(col('amount')); got {arg!r}")
    if where is not None and not isinstance(where, Expr):
        raise PlanError(
            f"{func}(filter=...) takes a condition expression, e.g. kp.col('price') < 10; got {where!r}"
        )
    predicate = where.node if where is not None else None
    name = arg.node.name
    if name == "*":
        if func != "count":
            raise PlanError(f"{func}(col('*')) is not defined; only count(col('*')) counts rows")
        return AggExpr(AggCall("count", None, "count", predicate))
    return AggExpr(AggCall(func, name, f"{func}_{name}", predicate))


def count(arg: Expr, *, filter: Expr | None = None) -> AggExpr:
    """Number of rows (``count(col("*"))``) or of non-null values of a column."""
    return _agg("count", arg, filter)


def sum(arg: Expr, *, filter: Expr | None = None) -> AggExpr:  # noqa: A001 - mirrors SQL
    """Sum of the non-null values (null when there are none)."""
    return _agg("sum", arg, filter)


def avg(arg: Expr, *, filter: Expr | None = None) -> AggExpr:
    """Mean of the non-null values, as a double."""
    return _agg("avg", arg, filter)


def min(arg: Expr, *, filter: Expr | None = None) -> AggExpr:  # noqa: A001
    """Smallest non-null value (NaN sorts above every number, as in Spark)."""
    return _agg("min", arg, filter)


def max(arg: Expr, *, filter: Expr | None = None) -> AggExpr:  # noqa: A001
    """Largest non-null value (NaN sorts above every number, as in Spark)."""
    return _agg("max", arg, filter)


def count_distinct(arg: Expr, *, filter: Expr | None = None) -> AggExpr:
    """Number of distinct non-null values."""
    return _agg("count_distinct", arg, filter)


def first(arg: Expr, *, filter: Expr | None = None) -> AggExpr:
    """Value of the earliest row by event time (ties: arrival order where known)."""
    return _agg("first", arg, filter)


def last(arg: Expr, *, filter: Expr | None = None) -> AggExpr:
    """Value of the latest row by event time (ties: arrival order where known)."""
    return _agg("last", arg, filter)


# --- typing -----------------------------------------------------------------


def output_name(node: ExprNode) -> str:
    """The column name an expression produces in ``select``."""
    if isinstance(node, Alias):
        return node.name
    if isinstance(node, Column):
        return node.name
    raise PlanError(f"expression {render(node)} needs a name: add .alias('name')")


def dtype_of(node: ExprNode, schema: Schema) -> DataType:
    """Infer an expression's type against ``schema``; unknown columns raise PlanError."""
    if isinstance(node, Column):
        if node.name == "*":
            raise PlanError("col('*') can only be used inside count()")
        return schema.field(node.name).dtype
    if isinstance(node, Literal):
        return _literal_type(node.value)
    if isinstance(node, Alias):
        return dtype_of(node.operand, schema)
    if isinstance(node, Cast):
        dtype_of(node.operand, schema)
        return node.dtype
    if isinstance(node, Case):
        return _case_type(node, schema)
    if isinstance(node, Func):
        return _func_type(node, schema)
    if isinstance(node, Udf):
        for arg in node.args:
            dtype_of(arg, schema)
        return node.function.returns
    if isinstance(node, UnaryOp):
        inner = dtype_of(node.operand, schema)
        if node.op == "neg":
            _require_numeric(inner, node)
            return inner
        if node.op == "not" and inner.name not in ("boolean", "void"):
            raise PlanError(f"{render(node)}: 'not' needs a boolean operand, got {inner}")
        return DataType("boolean")
    return _binary_type(node, schema)


def _binary_type(node: BinaryOp, schema: Schema) -> DataType:
    left, right = dtype_of(node.left, schema), dtype_of(node.right, schema)
    if node.op in _COMPARISONS:
        if not _comparable(left, right):
            raise PlanError(f"{render(node)}: cannot compare {left} with {right}")
        return DataType("boolean")
    if node.op in ("and", "or"):
        for side in (left, right):
            if side.name not in ("boolean", "void"):
                raise PlanError(f"{render(node)}: '{node.op}' needs boolean operands, got {side}")
        return DataType("boolean")
    for side in (left, right):
        _require_numeric(side, node)
    _check_divisor(node)
    if node.op == "/":
        return DataType("double")
    if left.is_decimal or right.is_decimal:
        return DataType("double")
    return left if _WIDTHS.index(left.name) >= _WIDTHS.index(right.name) else right


_WIDTHS = ["void", "tinyint", "smallint", "int", "bigint", "float", "double"]

#: The scalar functions (SPEC 3.14, what Nexmark's queries call): each one's first argument's
#: types, its constant arguments' Python types, and its result type. Spark's names and meaning.
FUNCTIONS: dict[str, tuple[tuple[str, ...], tuple[type, ...], str]] = {
    "lower": (("string",), (), "string"),
    "upper": (("string",), (), "string"),
    "length": (("string",), (), "int"),
    "replace": (("string",), (str, str), "string"),
    "hour": (("timestamp", "timestamp_ntz"), (), "int"),
    "date_format": (("timestamp", "timestamp_ntz"), (str,), "string"),
    "regexp_extract": (("string",), (str, int), "string"),
    "split_part": (("string",), (str, int), "string"),
}

#: ``date_format``'s pattern letters (Spark's datetime patterns), each as strftime writes it.
DATE_PATTERNS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def _func_type(node: Func, schema: Schema) -> DataType:
    """A function's result type, its arguments checked (see :data:`FUNCTIONS`)."""
    spec = FUNCTIONS.get(node.name)
    if spec is None:
        raise PlanError(f"unknown function {node.name!r}; the functions are {', '.join(sorted(FUNCTIONS))}")
    takes, constants, result = spec
    if len(node.args) != 1 + len(constants):
        raise PlanError(f"{render(node)}: {node.name}() takes {1 + len(constants)} argument(s)")
    first = dtype_of(node.args[0], schema)
    if first.name not in (*takes, "void"):
        raise PlanError(f"{render(node)}: {node.name}() takes a {' or '.join(takes)}, got {first}")
    values: list[object] = []
    for arg, kind in zip(node.args[1:], constants, strict=True):
        if not isinstance(arg, Literal) or not isinstance(arg.value, kind) or isinstance(arg.value, bool):
            raise PlanError(f"{render(node)}: {node.name}()'s {kind.__name__} arguments are constants")
        values.append(arg.value)
    _check_constants(node, values)
    return DataType(result)


def _check_constants(node: Func, values: list[object]) -> None:
    """What a function's constants must be, for Spark and the operator to give one answer."""
    if node.name == "date_format":
        pattern = str(values[0])
        if re.sub(r"yyyy|MM|dd|HH|mm|ss|[-:/ .,_]", "", pattern):
            raise PlanError(
                f"{render(node)}: date_format() takes the pattern letters yyyy, MM, dd, HH, mm, ss "
                "and the separators - : / . , _ and space"
            )
    elif node.name == "regexp_extract":
        try:
            groups = re.compile(str(values[0])).groups
        except re.error as exc:
            raise PlanError(f"{render(node)}: not a regular expression ({exc})") from None
        index = values[1]
        assert isinstance(index, int)
        if not 0 <= index <= groups:
            raise PlanError(f"{render(node)}: the pattern has {groups} group(s); the index is 0 to {groups}")
    elif node.name == "split_part" and (values[0] == "" or values[1] == 0):
        raise PlanError(f"{render(node)}: split_part() takes a non-empty delimiter and a part other than 0")


def _case_type(node: Case, schema: Schema) -> DataType:
    """A :func:`when` expression's type: its values' one type, numbers of any width the widest."""
    for condition, _ in node.branches:
        kind = dtype_of(condition, schema)
        if kind.name not in ("boolean", "void"):
            raise PlanError(
                f"{render(node)}: when() needs a boolean condition, {render(condition)} is {kind}"
            )
    values = [v for _, v in node.branches] + ([node.otherwise] if node.otherwise is not None else [])
    types = [t for t in (dtype_of(v, schema) for v in values) if t.name != "void"]
    if not types:
        return DataType("void")
    if all(t == types[0] for t in types):
        return types[0]
    if all(t.name in _WIDTHS for t in types):
        return sorted(types, key=lambda t: _WIDTHS.index(t.name))[-1]
    shown = ", ".join(sorted({str(t) for t in types}))
    raise PlanError(
        f"{render(node)}: the values of when() need one type (numbers of any width are one), got "
        f"{shown}; cast them to one with .cast()"
    )


def _check_divisor(node: BinaryOp) -> None:
    """A literal zero divisor has no result on any row: refuse it when the plan is built."""
    divisor = node.right
    if node.op in ("/", "%") and isinstance(divisor, Literal):
        value = divisor.value
        if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
            what = "division" if node.op == "/" else "remainder"
            raise PlanError(
                f"{render(node)}: {what} by the constant {value!r} has no value on any row; "
                "divide by a non-zero constant or a column"
            )


def _comparable(left: DataType, right: DataType) -> bool:
    """Spark would compare these without a run-time cast that can fail (or a silent one)."""

    def group(t: DataType) -> str:
        if t.is_numeric:
            return "number"
        return "time" if t.is_timestamp or t.name == "date" else t.name

    pair = {group(left), group(right)}
    return len(pair) == 1 or "void" in pair or pair == {"string", "time"}


def _require_numeric(dtype: DataType, node: ExprNode) -> None:
    if not (dtype.is_numeric or dtype.name == "void"):
        raise PlanError(f"{render(node)}: arithmetic needs numeric operands, got {dtype}")


def _literal_type(value: LiteralValue) -> DataType:
    if value is None:
        return DataType("void")
    if isinstance(value, bool):
        return DataType("boolean")
    if isinstance(value, int):
        return DataType("int" if -(2**31) <= value < 2**31 else "bigint")
    if isinstance(value, float):
        return DataType("double")
    if isinstance(value, str):
        return DataType("string")
    if isinstance(value, _dt.datetime):
        return DataType("timestamp")
    return DataType("date")


def check_filter(call: AggCall, schema: Schema) -> None:
    """A :class:`PlanError` naming what is wrong with ``call``'s ``filter=``, if anything."""
    if call.filter is None:
        return
    if call.func in ("first", "last"):
        raise PlanError(
            f"{call.func}(filter=...) is not supported: {call.func} takes the "
            f"{'earliest' if call.func == 'first' else 'latest'} row's value, and a filter that skips "
            "rows has no column form; filter the stream before the aggregation instead"
        )
    kind = dtype_of(call.filter, schema)
    if kind.name not in ("boolean", "void"):
        raise PlanError(
            f"{call.name}: filter={render(call.filter)} is {kind}; filter= takes a condition "
            "(e.g. kp.col('price') < 10_000)"
        )


def agg_type(call: AggCall, schema: Schema) -> DataType:
    """Result type of an aggregate, following Spark SQL."""
    if call.column is None or call.func in ("count", "count_distinct"):
        if call.column is not None:
            schema.field(call.column)
        return DataType("bigint")
    arg = schema.field(call.column).dtype
    if call.func in ("sum", "avg") and not arg.is_numeric:
        raise PlanError(f"{call.func}({call.column!r}) needs a numeric column, {call.column!r} is {arg}")
    if call.func == "avg":
        return DataType("double")
    if call.func == "sum":
        if arg.is_integral:
            return DataType("bigint")
        return arg if arg.is_decimal else DataType("double")
    return arg


def columns_of(node: ExprNode) -> set[str]:
    """Names of the columns an expression reads."""
    if isinstance(node, Column):
        return {node.name}
    if isinstance(node, BinaryOp):
        return columns_of(node.left) | columns_of(node.right)
    return set().union(*(columns_of(o) for o in operands(node)))


def operands(node: ExprNode) -> tuple[ExprNode, ...]:
    """The expressions ``node`` is made of, one level down."""
    if isinstance(node, BinaryOp):
        return (node.left, node.right)
    if isinstance(node, UnaryOp | Cast | Alias):
        return (node.operand,)
    if isinstance(node, Func | Udf):
        return node.args
    if isinstance(node, Case):
        parts = tuple(p for branch in node.branches for p in branch)
        return (*parts, node.otherwise) if node.otherwise is not None else parts
    return ()


def user_functions_of(node: ExprNode) -> list[UserFunction]:
    """The :class:`UserFunction` s ``node`` calls, each once, in the order met."""
    found = [node.function] if isinstance(node, Udf) else []
    for operand in operands(node):
        found += [f for f in user_functions_of(operand) if f not in found]
    return found


def render(node: ExprNode) -> str:
    """A readable one-line form of an expression, for errors and explain()."""
    if isinstance(node, Column):
        return node.name
    if isinstance(node, Literal):
        return repr(node.value)
    if isinstance(node, BinaryOp):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    if isinstance(node, UnaryOp):
        return f"{node.op}({render(node.operand)})"
    if isinstance(node, Cast):
        return f"{'try_cast' if node.safe else 'cast'}({render(node.operand)} as {node.dtype})"
    if isinstance(node, Func):
        return f"{node.name}({', '.join(render(a) for a in node.args)})"
    if isinstance(node, Udf):
        return f"udf {node.function.name}({', '.join(render(a) for a in node.args)})"
    if isinstance(node, Case):
        parts = [f"WHEN {render(c)} THEN {render(v)}" for c, v in node.branches]
        if node.otherwise is not None:
            parts.append(f"ELSE {render(node.otherwise)}")
        return f"CASE {' '.join(parts)} END"
    return f"{render(node.operand)} AS {node.name}"
