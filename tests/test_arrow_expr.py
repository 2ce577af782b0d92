"""Expressions over Arrow in the operator's worker give Spark's values (``stateful.arrow_expr``).

Three kinds of test: cases with their values written out (checked without
Spark, and the table itself checked against Spark in one query);
properties that need no Spark; and random expressions over random rows
compared with Spark's own evaluation of the SQL the planner writes for them
(``to_sql``), with the failure counts of ``failure_checks``, many
expressions to one Spark query.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException

import krishiv_py as kp
from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.expr import (
    Alias,
    BinaryOp,
    Cast,
    Column,
    ExprNode,
    Literal,
    LiteralValue,
    UnaryOp,
    dtype_of,
    render,
)
from krishiv_py.expr import Case as CaseWhen
from krishiv_py.planner.sql import failure_checks, quote, to_sql
from krishiv_py.stateful.arrow_expr import evaluate, failures, filter_rows, project, result_type, unsupported
from krishiv_py.types import DataType, Schema

SCHEMA = Schema.parse(
    "i8 tinyint, i16 smallint, i32 int, i64 bigint, f32 float, f64 double, s string, b boolean, "
    "bin binary, bin2 binary, ts timestamp, ntz timestamp_ntz, d date, dec decimal(10,2)"
)
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
NAN, INF = float("nan"), float("inf")
UTC = dt.UTC


def table_of(columns: dict[str, list[Any]]) -> pa.Table:
    """A table of every column of SCHEMA: those given, the others null."""
    rows = len(next(iter(columns.values())))
    arrays = [pa.array(columns.get(f.name, [None] * rows), f.dtype.to_arrow()) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA.to_arrow())


def comparable(values: Sequence[Any]) -> list[Any]:
    """Values with NaN equal to NaN and -0.0 told from 0.0."""

    def key(v: Any) -> Any:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else (v, math.copysign(1.0, v))
        return v

    return [key(v) for v in values]


# --- cases ------------------------------------------------------------------------


@attrs.frozen
class Case:
    name: str
    expr: kp.Expr
    columns: dict[str, list[Any]]
    expected: list[Any]
    failures: int = 0


c, lit = kp.col, kp.lit
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
CASES = [
    Case("column", c("i32"), {"i32": [1, None]}, [1, None]),
    Case("null constant", lit(None).is_null(), {"b": [True, None]}, [True, True]),
    Case("int overflow", (c("i32") + 1).alias("x"), {"i32": [2**31 - 1, 5, None]}, [None, 6, None], 1),
    Case("tinyint overflow", c("i8") + c("i8"), {"i8": [100, -64, 1]}, [None, -128, 2], 1),
    Case("tinyint and an int", c("i8") + 100, {"i8": [100]}, [200]),
    Case("bigint product", c("i64") * 2, {"i64": [2**62, -(2**62), 3]}, [None, I64_MIN, 6], 1),
    Case("bigint difference", c("i64") - c("i32"), {"i64": [I64_MIN, 5], "i32": [1, -1]}, [None, 6], 1),
    Case("negation of the smallest", -c("i64"), {"i64": [I64_MIN, 5, None]}, [None, -5, None], 1),
    Case("negation of zero", -c("f64"), {"f64": [0.0, -1.5]}, [-0.0, 1.5]),
    Case("division", c("i32") / c("i64"), {"i32": [7, 1, None], "i64": [2, 0, 1]}, [3.5, None, None], 1),
    Case("division by -0.0", lit(1) / c("f64"), {"f64": [-0.0, INF]}, [None, 0.0], 1),
    Case("remainder", c("i32") % c("i32"), {"i32": [-7, 0]}, [0, None], 1),
    Case("remainder's sign", c("i64") % 3, {"i64": [-7, 7, I64_MIN]}, [-1, 1, -2]),
    Case("remainder by -1", c("i64") % c("i8"), {"i64": [I64_MIN, 7], "i8": [-1, -2]}, [0, 1]),
    Case("float remainder", c("f64") % 2.0, {"f64": [-7.5, INF, NAN]}, [-1.5, NAN, NAN]),
    Case("remainder by infinity", c("f64") % c("f32"), {"f64": [7.5], "f32": [INF]}, [7.5]),
    Case("float overflow", c("f64") * 10, {"f64": [1e308, -1e308]}, [INF, -INF]),
    Case(
        "NaN equals NaN",
        c("f64") == c("f32"),
        {"f64": [NAN, NAN, -0.0], "f32": [NAN, 1.0, 0.0]},
        [True, False, True],
    ),
    Case("NaN is the greatest", c("f64") > c("f32"), {"f64": [NAN, 1.0], "f32": [INF, NAN]}, [True, False]),
    Case("NaN less than nothing", c("f64") < 1e308, {"f64": [NAN, INF, -INF]}, [False, False, True]),
    Case(
        "bigint with float",
        c("i64") == c("f32"),
        {"i64": [2**24 + 1, 2**24], "f32": [2.0**24] * 2},
        [False, True],
    ),
    Case("float and an integer", c("f32") + c("i32"), {"f32": [0.0], "i32": [2**24 + 1]}, [2.0**24 + 1]),
    Case("float times a constant", c("f32") * 1, {"f32": [0.1]}, [float(np.float32(0.1))]),
    Case("bigint with double", c("i64") == c("f64"), {"i64": [2**53 + 1], "f64": [2.0**53]}, [True]),
    Case("bigint with int", c("i64") > c("i32"), {"i64": [2**40, -(2**40)], "i32": [5, 5]}, [True, False]),
    Case("strings by bytes", c("s") < "b", {"s": ["a", "é", "B", None, ""]}, [True, False, True, None, True]),
    Case("booleans", c("b") < True, {"b": [False, True, None]}, [True, False, None]),
    Case(
        "binary by bytes",
        c("bin") > c("bin2"),
        {"bin": [b"\xff", b"a", None], "bin2": [b"a", b"ab", b""]},
        [True, False, None],
    ),
    Case("timestamps", c("ts") > T0, {"ts": [T0, T0 + dt.timedelta(microseconds=1)]}, [False, True]),
    Case("naive constant is UTC", c("ts") == dt.datetime(2024, 1, 1), {"ts": [T0]}, [True]),
    Case(
        "aware constant",
        c("ts") == dt.datetime(2024, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        {"ts": [T0]},
        [True],
    ),
    Case("timestamp with ntz", c("ts") == c("ntz"), {"ts": [T0], "ntz": [dt.datetime(2024, 1, 1)]}, [True]),
    Case(
        "date with timestamp",
        c("d") < c("ts"),
        {"d": [dt.date(2024, 1, 1)] * 2, "ts": [T0, None]},
        [False, None],
    ),
    Case("date constant", c("ntz") >= dt.date(2024, 1, 2), {"ntz": [dt.datetime(2024, 1, 2)]}, [True]),
    Case("and", c("b") & lit(None), {"b": [False, True, None]}, [False, None, None]),
    Case("or", c("b") | lit(None), {"b": [False, True, None]}, [None, True, None]),
    Case("not", ~c("b"), {"b": [True, None]}, [False, None]),
    Case("NaN is not null", c("f64").is_null(), {"f64": [NAN, None]}, [False, True]),
    Case("is not null", c("dec").is_not_null(), {"dec": [Decimal("1.25"), None]}, [True, False]),
    Case(
        "double to bigint",
        c("f64").cast("bigint"),
        {"f64": [2.0**63, -(2.0**63), 2.0**64, NAN, -1.9, INF]},
        [I64_MAX, I64_MIN, None, None, -1, None],
        3,
    ),
    Case("double to int", c("f64").cast("int"), {"f64": [2147483647.9, 2147483648.0]}, [2147483647, None], 1),
    Case("float to tinyint", c("f32").try_cast("tinyint"), {"f32": [-128.5, -129.0]}, [-128, None], 1),
    Case("int to tinyint", c("i32").cast("tinyint"), {"i32": [300, -128, None]}, [None, -128, None], 1),
    Case("double to float", c("f64").cast("float"), {"f64": [1e300, 0.1]}, [INF, float(np.float32(0.1))]),
    Case("bigint to float", c("i64").cast("float"), {"i64": [2**24 + 1]}, [2.0**24]),
    Case("boolean to int", c("b").cast("int"), {"b": [True, False]}, [1, 0]),
    Case("double to boolean", c("f64").cast("boolean"), {"f64": [NAN, -0.0, 2.5]}, [True, False, True]),
    Case("bigint to string", c("i64").cast("string"), {"i64": [-5, I64_MIN]}, ["-5", str(I64_MIN)]),
    Case("boolean to string", c("b").cast("string"), {"b": [True, None]}, ["true", None]),
    Case(
        "timestamp to date",
        c("ts").cast("date"),
        {"ts": [T0 - dt.timedelta(microseconds=1)]},
        [dt.date(2023, 12, 31)],
    ),
    Case("date to timestamp", c("d").cast("timestamp"), {"d": [dt.date(2024, 1, 1)]}, [T0]),
    Case("ntz to timestamp", c("ntz").cast("timestamp"), {"ntz": [dt.datetime(2024, 1, 1)]}, [T0]),
    Case("typed null", lit(None).cast("int"), {"b": [None]}, [None]),
    Case("nested failures", (c("i32") + 1) * 2, {"i32": [2**31 - 1, 2**30]}, [None, None], 2),
    Case(
        "when: the first true branch",
        kp.when(c("i32") > 1, "big").when(c("i32") > 0, "one").otherwise("none"),
        {"i32": [5, 1, None, -1]},
        ["big", "one", "none", "none"],
    ),
    Case(
        "when without otherwise",
        kp.when(c("b"), c("i64")),
        {"b": [True, None, False], "i64": [1, 2, 3]},
        [1, None, None],
    ),
    Case(
        "when widens",
        kp.when(c("b"), c("i8")).otherwise(c("f64")),
        {"b": [True, False], "i8": [3, 3], "f64": [0.5, 0.5]},
        [3.0, 0.5],
    ),
    Case(
        "when counts failures where taken only",
        kp.when(c("i32") < 0, c("i32") + 1).otherwise(c("i32") * 2),
        {"i32": [2**31 - 1, -5, -(2**31)]},
        [None, -4, -(2**31) + 1],
        1,
    ),
    Case("lower", kp.lower(c("s")), {"s": ["AbC", None, "É"]}, ["abc", None, "é"]),
    Case("upper", kp.upper(c("s")), {"s": ["AbC", ""]}, ["ABC", ""]),
    Case("length", kp.length(c("s")), {"s": ["aé", "", None]}, [2, 0, None]),
    Case("replace", kp.replace(c("s"), "c", ""), {"s": ["cacc", "b", None]}, ["a", "b", None]),
    Case("replace nothing", kp.replace(c("s"), "", "x"), {"s": ["ab"]}, ["ab"]),
    Case("hour", kp.hour(c("ts")), {"ts": [T0 + dt.timedelta(hours=13, minutes=5), None]}, [13, None]),
    Case(
        "hour before 1970", kp.hour(c("ntz")), {"ntz": [dt.datetime(1969, 12, 31, 23, 59, 59, 500_000)]}, [23]
    ),
    Case(
        "date_format",
        kp.date_format(c("ts"), "yyyy-MM-dd HH:mm:ss"),
        {"ts": [T0 + dt.timedelta(hours=1, seconds=5, microseconds=999_999), None]},
        ["2024-01-01 01:00:05", None],
    ),
    Case(
        "date_format before 1970",
        kp.date_format(c("ntz"), "yyyy/MM/dd, HH.mm"),
        {"ntz": [dt.datetime(1969, 12, 31, 23, 59, 59, 500_000)]},
        ["1969/12/31, 23.59"],
    ),
    Case(
        "regexp_extract",
        kp.regexp_extract(c("s"), "(&|^)channel_id=([^&]*)", 2),
        {"s": ["a=1&channel_id=12&b", "channel_id=x", "none", None]},
        ["12", "x", "", None],
    ),
    Case("regexp_extract of an unused group", kp.regexp_extract(c("s"), "(a)|(b)", 1), {"s": ["b"]}, [""]),
    Case(
        "split_part",
        kp.split_part(c("s"), "/", 4),
        {"s": ["https://x.com/a/b", "a/b", None, "////"]},
        ["a", "", None, ""],
    ),
    Case(
        "split_part from the end", kp.split_part(c("s"), "/", -1), {"s": ["a/b/c", "", "a"]}, ["c", "", "a"]
    ),
    Case(
        "a failed condition is not true",
        kp.when((c("i32") + 1) > 0, 1).otherwise(2),
        {"i32": [2**31 - 1, 0]},
        [2, 1],
        1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_cases(case: Case) -> None:
    table = table_of(case.columns)
    out = evaluate(case.expr.node, table, SCHEMA)
    assert out.type == arrow_type_of(case.expr.node)
    assert comparable(out.to_pylist()) == comparable(case.expected)
    assert failures([case.expr.node], table, SCHEMA) == case.failures


def arrow_type_of(node: ExprNode) -> pa.DataType:
    dtype = result_type(node, SCHEMA)
    return pa.null() if dtype.name == "void" else dtype.to_arrow()


@pytest.mark.spark
def test_the_cases_are_what_spark_gives(session: kp.Session) -> None:
    """The cases' expected values and counts, from Spark: all cases' rows in one table, one query."""
    tables = [table_of(case.columns) for case in CASES]
    values, failed = spark_run(session.spark, pa.concat_tables(tables), [case.expr.node for case in CASES])
    start = 0
    for case, table, column, rows in zip(CASES, tables, values, failed, strict=True):
        part = slice(start, start + table.num_rows)
        start += table.num_rows
        assert column.type == arrow_type_of(case.expr.node), case.name
        assert comparable(column.to_pylist()[part]) == comparable(case.expected), case.name
        assert int(rows[part].sum()) == case.failures, case.name


# --- what is not evaluated --------------------------------------------------------

UNSUPPORTED = [
    (c("f64").cast("string"), "the cast from double to string"),
    (c("s").cast("int"), "the cast from string to int"),
    (c("i32").cast("decimal(10,2)"), "the cast from int to decimal(10,2)"),
    (c("ts").cast("bigint"), "the cast from timestamp to bigint"),
    (c("dec") + 1, "the arithmetic '+' of a decimal"),
    ((c("i32") + c("dec")) > 1, "the arithmetic '+' of a decimal"),
    (c("dec") > 1, "the comparison of a decimal"),
    (-c("dec"), "the negation of a decimal"),
    (c("ts") > "2024-01-01", "the comparison of a timestamp with a string"),
    (c("s") == dt.date(2024, 1, 1), "the comparison of a date with a string"),
    (-lit(None), "an operation on null constants only"),
    ((lit(None) + lit(None)).alias("x"), "an operation on null constants only"),
]


@pytest.mark.parametrize("expr, reason", UNSUPPORTED, ids=[render(e.node) for e, _ in UNSUPPORTED])
def test_what_is_not_evaluated_is_named_and_refused(expr: kp.Expr, reason: str) -> None:
    assert (unsupported(expr.node, SCHEMA) or "").startswith(reason)
    with pytest.raises(PlanError, match="cannot evaluate " + re.escape(reason)):
        evaluate(expr.node, table_of({"b": [None]}), SCHEMA)


def test_decimals_pass_through_untouched() -> None:
    assert unsupported(c("dec").node, SCHEMA) is None
    table = table_of({"dec": [Decimal("1.25")]})
    assert project([c("dec").alias("x").node], table, SCHEMA).to_pylist() == [{"x": Decimal("1.25")}]


def far_date() -> pa.Table:
    """A row whose date (year 549,000) has no timestamp."""
    table = table_of({"ts": [T0]})
    return table.set_column(table.schema.get_field_index("d"), "d", pa.array([200_000_000], pa.date32()))


def test_a_date_beyond_every_timestamp_fails_a_comparison_and_a_cast_gives_null() -> None:
    with pytest.raises(SchemaError, match="no timestamp"):
        evaluate((c("d") < c("ts")).node, far_date(), SCHEMA)
    cast = c("d").cast("timestamp").node
    assert evaluate(cast, far_date(), SCHEMA).to_pylist() == [None]
    assert failures([cast], far_date(), SCHEMA) == 1


@pytest.mark.spark
def test_spark_too_fails_the_comparison_and_gives_null_for_the_cast(session: kp.Session) -> None:
    values, failed = spark_run(session.spark, far_date(), [c("d").cast("timestamp").node])
    assert values[0].to_pylist() == [None] and failed[0].tolist() == [1]
    with pytest.raises(PySparkException, match="overflow"):
        spark_run(session.spark, far_date(), [(c("d") < c("ts")).node])


# --- filter and project -----------------------------------------------------------


def test_filter_keeps_the_rows_where_the_predicate_is_true() -> None:
    table = table_of({"i32": [1, 5, None, 9], "b": [True, True, True, None]})
    kept = filter_rows(((c("i32") > 2) & c("b")).node, table, SCHEMA)
    assert kept.column("i32").to_pylist() == [5]
    assert kept.schema == table.schema


def test_project_names_its_columns_by_output_name() -> None:
    table = table_of({"i32": [1, None], "s": ["a", "b"]})
    out = project([c("s").node, (c("i32") * 2).alias("double").node], table, SCHEMA)
    assert out.column_names == ["s", "double"]
    assert out.to_pylist() == [{"s": "a", "double": 2}, {"s": "b", "double": None}]


# --- random expressions over random rows -------------------------------------------

ROWS = 12
INTEGRAL = {"i8": "tinyint", "i16": "smallint", "i32": "int", "i64": "bigint"}
NUMBER_COLUMNS = (*INTEGRAL, "f32", "f64")
NUMBER_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double")
TIME_TYPES = ("timestamp", "timestamp_ntz", "date")
#: Integers at the edges of each type, and where a float or a double stops being exact.
INT_EDGES = [0, 1, -1, 2, -7, 127, -128, 32767, -32768, 2**31 - 1, -(2**31)]
INT_EDGES += [2**24 + 1, 2**53 + 1, I64_MAX, I64_MIN]
FLOAT_EDGES = [0.0, -0.0, 1.5, -7.5, NAN, INF, -INF, 2.0**24, 2.0**31, 2.0**63, 127.9, -128.9, 2147483647.5]
BIG_FLOATS = [1e300, -1e300, 3.4e38, 5e-324]
MIN_US = int(dt.datetime(1, 1, 2, tzinfo=UTC).timestamp() * 10**6)
MAX_US = int(dt.datetime(9999, 12, 30, tzinfo=UTC).timestamp() * 10**6)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=4)


def integers(name: str) -> st.SearchStrategy[int]:
    bits = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}[name]
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.one_of(st.sampled_from([v for v in INT_EDGES if low <= v <= high]), st.integers(low, high))


def microseconds() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([0, -1, 1, 86_400_000_000]), st.integers(MIN_US, MAX_US))


VALUES: dict[str, st.SearchStrategy[Any]] = {
    **{name: integers(t) for name, t in INTEGRAL.items()},
    "f32": st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(width=32)),
    "f64": st.one_of(st.sampled_from(FLOAT_EDGES + BIG_FLOATS), st.floats()),
    "s": TEXT,
    "b": st.booleans(),
    "bin": st.binary(max_size=3),
    "bin2": st.binary(max_size=3),
    "ts": microseconds(),
    "ntz": microseconds(),
    "d": st.integers(MIN_US // 86_400_000_000, MAX_US // 86_400_000_000),
    "dec": st.sampled_from([Decimal("1.25"), Decimal("-3.00")]),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    arrays = []
    for f in SCHEMA:
        values = draw(st.lists(st.one_of(st.none(), VALUES[f.name]), min_size=ROWS, max_size=ROWS))
        storage = {"timestamp": pa.int64(), "timestamp_ntz": pa.int64(), "date": pa.int32()}.get(f.dtype.name)
        target = f.dtype.to_arrow()
        arrays.append(pa.array(values, storage).cast(target) if storage else pa.array(values, target))
    return pa.Table.from_arrays(arrays, schema=SCHEMA.to_arrow())


def literal(values: st.SearchStrategy[LiteralValue]) -> st.SearchStrategy[ExprNode]:
    return values.map(Literal)


NUMBER_LITERALS = literal(
    st.one_of(
        st.sampled_from(INT_EDGES + FLOAT_EDGES + BIG_FLOATS), st.integers(I64_MIN, I64_MAX), st.floats()
    )
)
NULL = st.just(Literal(None))
TIME_LITERALS = literal(
    st.one_of(
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1)),
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1), timezones=st.just(UTC)),
        st.dates(dt.date(1900, 1, 1), dt.date(2100, 1, 1)),
    )
)


def columns(*names: str) -> st.SearchStrategy[ExprNode]:
    return st.sampled_from([Column(n) for n in names])


def binary(ops: Sequence[str], left: st.SearchStrategy[ExprNode], right: st.SearchStrategy[ExprNode]) -> Any:
    return st.builds(BinaryOp, st.sampled_from(list(ops)), left, right)


def casts(operand: st.SearchStrategy[ExprNode], targets: Sequence[str]) -> st.SearchStrategy[ExprNode]:
    return st.builds(Cast, operand, st.sampled_from([DataType(t) for t in targets]), st.booleans())


@functools.cache
def numbers(depth: int) -> st.SearchStrategy[ExprNode]:
    leaves = st.one_of(columns(*NUMBER_COLUMNS), NUMBER_LITERALS, NULL)
    if depth == 0:
        return leaves
    inner = numbers(depth - 1)
    return st.one_of(
        leaves,
        binary(["+", "-", "*", "/", "%"], inner, inner),
        st.builds(UnaryOp, st.just("neg"), inner),
        casts(st.one_of(inner, booleans(depth - 1)), NUMBER_TYPES),
        whens(inner, depth - 1),
    )


def whens(values: st.SearchStrategy[ExprNode], depth: int) -> st.SearchStrategy[ExprNode]:
    """``kp.when(...)`` of one to three branches, with an ``otherwise`` or not."""
    branches = st.lists(st.tuples(booleans(depth), values), min_size=1, max_size=3).map(tuple)
    return st.builds(
        lambda b, o: CaseWhen(branches=b, otherwise=o, closed=o is not None),
        branches,
        st.one_of(st.none(), values),
    )


@functools.cache
def times(depth: int) -> st.SearchStrategy[ExprNode]:
    leaves = st.one_of(columns("ts", "ntz", "d"), TIME_LITERALS)
    return leaves if depth == 0 else st.one_of(leaves, casts(times(depth - 1), TIME_TYPES))


def strings() -> st.SearchStrategy[ExprNode]:
    return st.one_of(columns("s"), literal(TEXT), casts(columns(*INTEGRAL, "b"), ["string"]))


COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


@functools.cache
def booleans(depth: int) -> st.SearchStrategy[ExprNode]:
    leaves = st.one_of(columns("b"), literal(st.sampled_from([True, False, None])))
    if depth == 0:
        return leaves
    inner = booleans(depth - 1)
    return st.one_of(
        leaves,
        binary(COMPARISONS, numbers(depth - 1), numbers(depth - 1)),
        binary(COMPARISONS, strings(), strings()),
        binary(COMPARISONS, times(depth - 1), times(depth - 1)),
        binary(COMPARISONS, inner, inner),
        binary(COMPARISONS, columns("bin", "bin2"), columns("bin", "bin2")),
        binary(["and", "or"], inner, inner),
        st.builds(UnaryOp, st.just("not"), inner),
        st.builds(UnaryOp, st.sampled_from(["is_null", "is_not_null"]), anything(depth - 1)),
        casts(numbers(depth - 1), ["boolean"]),
    )


def anything(depth: int) -> st.SearchStrategy[ExprNode]:
    return st.one_of(numbers(depth), booleans(depth), times(depth), strings(), columns("bin", "dec"))


def supported(node: ExprNode) -> bool:
    try:
        dtype_of(node, SCHEMA)  # a constant zero divisor is refused when the plan is built
    except PlanError:
        return False
    return unsupported(node, SCHEMA) is None


def evaluable(nodes: st.SearchStrategy[ExprNode]) -> st.SearchStrategy[ExprNode]:
    """``nodes``, with the few that are not evaluated (a null negated, a zero divisor) as a column."""
    return nodes.map(lambda node: node if supported(node) else Column("b"))


EXPRESSIONS = evaluable(anything(3))
#: For Spark, where a query holds many: an operation at the top, over operands of depth 2.
OPERATIONS = evaluable(
    st.one_of(
        binary(["+", "-", "*", "/", "%"], numbers(2), numbers(2)),
        binary(COMPARISONS, numbers(2), numbers(2)),
        casts(numbers(2), [*NUMBER_TYPES, "boolean"]),
        st.builds(UnaryOp, st.just("neg"), numbers(2)),
        binary(["and", "or"], booleans(2), booleans(2)),
        binary(COMPARISONS, times(1), times(1)),
        binary(COMPARISONS, strings(), strings()),
        casts(times(1), TIME_TYPES),
        st.builds(UnaryOp, st.sampled_from(["is_null", "is_not_null"]), anything(2)),
        whens(numbers(1), 1),
        whens(strings(), 1),
    )
)


@st.composite
def mixed_tables(draw: st.DrawFn) -> pa.Table:
    """A random table, in chunks of random sizes (empty ones too)."""
    table = draw(tables())
    cuts = sorted(draw(st.lists(st.integers(0, ROWS), max_size=3)))
    bounds = [0, *cuts, ROWS]
    return pa.concat_tables([table.slice(a, b - a) for a, b in itertools.pairwise(bounds)])


@settings(max_examples=100)
@given(table=mixed_tables(), node=EXPRESSIONS, cut=st.integers(0, ROWS))
def test_each_row_is_evaluated_on_its_own(table: pa.Table, node: ExprNode, cut: int) -> None:
    """Chunks, slices and whole tables give the same values, types and failure counts."""
    whole = evaluate(node, table.combine_chunks(), SCHEMA)
    assert whole.type == arrow_type_of(node)
    assert len(whole) == ROWS
    parts = [table.slice(0, cut), table.slice(cut)]
    pieces = [evaluate(node, p, SCHEMA) for p in parts]
    assert comparable(pa.concat_arrays(pieces).to_pylist()) == comparable(whole.to_pylist())
    assert comparable(evaluate(node, table, SCHEMA).to_pylist()) == comparable(whole.to_pylist())
    assert sum(failures([node], p, SCHEMA) for p in parts) == failures([node], table, SCHEMA)


@settings(max_examples=60)
@given(table=tables(), node=evaluable(booleans(3)))
def test_filter_rows_keeps_exactly_the_true_rows(table: pa.Table, node: ExprNode) -> None:
    mask = evaluate(node, table, SCHEMA).to_pylist()
    kept = filter_rows(node, table, SCHEMA)
    true_rows = [i for i, m in enumerate(mask) if m is True]
    assert kept.schema == table.schema
    assert rows_of(kept) == rows_of(table.take(pa.array(true_rows, pa.int64())))


def rows_of(table: pa.Table) -> list[list[Any]]:
    return [comparable(list(row.values())) for row in table.to_pylist()]


def kleene_and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


@given(st.lists(st.tuples(st.sampled_from([True, False, None]), st.sampled_from([True, False, None]))))
def test_and_or_not_follow_sql_three_valued_logic(pairs: list[tuple[bool | None, bool | None]]) -> None:
    xs = [p[0] for p in pairs] or [None]
    ys = [p[1] for p in pairs] or [None]
    schema = Schema.parse("x boolean, y boolean")
    table = pa.table({"x": pa.array(xs, pa.bool_()), "y": pa.array(ys, pa.bool_())})

    def run(e: kp.Expr) -> list[Any]:
        return evaluate(e.node, table, schema).to_pylist()

    def neg(v: bool | None) -> bool | None:
        return None if v is None else not v

    assert run(c("x") & c("y")) == [kleene_and(x, y) for x, y in zip(xs, ys, strict=True)]
    assert run(c("x") | c("y")) == [neg(kleene_and(neg(x), neg(y))) for x, y in zip(xs, ys, strict=True)]
    assert run(~c("x")) == [neg(x) for x in xs]


BOUNDS = {"tinyint": 2**7, "smallint": 2**15, "int": 2**31, "bigint": 2**63}
ARITHMETIC: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
}


@given(
    st.sampled_from(list(ARITHMETIC)),
    st.sampled_from(list(INTEGRAL)),
    st.sampled_from(list(INTEGRAL)),
    st.data(),
)
def test_integer_arithmetic_is_exact_or_null(op: str, left: str, right: str, data: st.DataObject) -> None:
    xs = data.draw(st.lists(st.one_of(st.none(), VALUES[left]), min_size=1, max_size=20))
    ys = data.draw(st.lists(st.one_of(st.none(), VALUES[right]), min_size=len(xs), max_size=len(xs)))
    ys = xs if left == right else ys
    node = BinaryOp(op, Column(left), Column(right))
    bound = BOUNDS[dtype_of(node, SCHEMA).name]
    exact = [None if x is None or y is None else ARITHMETIC[op](x, y) for x, y in zip(xs, ys, strict=True)]
    expected = [v if v is not None and -bound <= v < bound else None for v in exact]
    table = table_of({left: xs, right: ys})
    assert evaluate(node, table, SCHEMA).to_pylist() == expected
    assert failures([node], table, SCHEMA) == sum(
        e is not None and v is None for e, v in zip(exact, expected, strict=True)
    )


def order(value: float) -> tuple[int, float]:
    """Spark's order of doubles: NaN above everything, -0.0 equal to 0.0."""
    return (1, 0.0) if math.isnan(value) else (0, value)


@given(st.lists(st.tuples(VALUES["i64"], VALUES["f64"]), min_size=1, max_size=20))
def test_numbers_compare_in_spark_order(pairs: list[tuple[int, float]]) -> None:
    """A bigint compares with a double as the double nearest to it, and NaN is the greatest."""
    table = table_of({"i64": [p[0] for p in pairs], "f64": [p[1] for p in pairs]})
    results = {
        op: evaluate(BinaryOp(op, Column("i64"), Column("f64")), table, SCHEMA).to_pylist()
        for op in COMPARISONS
    }
    for i, (x, y) in enumerate(pairs):
        a, b = order(float(x)), order(y)
        expected = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
        assert {op: results[op][i] for op in COMPARISONS} == expected


@given(VALUES["f64"])
def test_a_double_becomes_a_bigint_by_truncation_within_its_bounds(value: float) -> None:
    table = table_of({"f64": [value]})
    got = evaluate(Cast(Column("f64"), DataType("bigint")), table, SCHEMA)
    if not math.isfinite(value) or not -(2.0**63) <= math.trunc(value) <= 2.0**63:
        assert got.to_pylist() == [None]
    else:
        assert got.to_pylist() == [max(I64_MIN, min(I64_MAX, math.trunc(value)))]


# --- against Spark ----------------------------------------------------------------


def spark_run(
    spark: Any, table: pa.Table, nodes: Sequence[ExprNode]
) -> tuple[list[pa.Array[Any]], list[npt.NDArray[np.int64]]]:
    """Spark's values of ``nodes`` over ``table`` (one query), and per node the failed operations per row."""
    frame = spark.createDataFrame(table.combine_chunks(), schema=SCHEMA.ddl())
    bare = [node.operand if isinstance(node, Alias) else node for node in nodes]
    values = [f"{to_sql(node, SCHEMA)} AS {quote(f'v{i}')}" for i, node in enumerate(bare)]
    checks = [
        [f"({check}) AS {quote(f'c{i}_{j}')}" for j, check in enumerate(failure_checks(node, SCHEMA))]
        for i, node in enumerate(nodes)
    ]
    out = frame.selectExpr(*values, *(check for group in checks for check in group)).toArrow()
    failed = []
    for i, group in enumerate(checks):
        rows = np.zeros(table.num_rows, np.int64)
        for j in range(len(group)):
            rows += np.asarray(
                out.column(f"c{i}_{j}").fill_null(False).to_numpy(zero_copy_only=False), np.int64
            )
        failed.append(rows)
    return [out.column(f"v{i}").combine_chunks() for i in range(len(nodes))], failed


@pytest.mark.spark
@settings(max_examples=4)
@given(table=tables(), nodes=st.lists(OPERATIONS, min_size=100, max_size=100))
def test_random_expressions_give_what_spark_gives(
    session: kp.Session, table: pa.Table, nodes: list[ExprNode]
) -> None:
    values, failed = spark_run(session.spark, table, nodes)
    for node, theirs, rows in zip(nodes, values, failed, strict=True):
        ours = evaluate(node, table, SCHEMA)
        assert ours.type == theirs.type, render(node)
        assert comparable(ours.to_pylist()) == comparable(theirs.to_pylist()), render(node)
        assert failures([node], table, SCHEMA) == int(rows.sum()), render(node)


@pytest.mark.spark
def test_a_when_with_a_value_spark_computes_in_double_is_a_double(session: kp.Session) -> None:
    """Spark's ANSI coercion computes ``f % 5`` (a float and an integer) in double, and a ``CASE``
    with such a value is a double; an integer constant beside a float keeps the float."""
    table = table_of({"b": [True, False, None], "f32": [1.5, -0.25, None], "i64": [7, None, -3]})
    f, i, b = kp.col("f32"), kp.col("i64"), kp.col("b")
    nodes = [
        kp.when(b, kp.lit(-2737)).otherwise(f).node,
        kp.when(b, i).otherwise(f % kp.lit(-19305932386)).node,
        (-kp.when(b, f).otherwise(f)).node,  # one float type: a float
        # The lowering's SQL casts the constant to the plan's float first (69559600), then Spark
        # widens it to the double of the sum.
        kp.when(b, i + f).otherwise(kp.lit(69559603)).node,
    ]
    values, _ = spark_run(session.spark, table, nodes)
    for node, theirs in zip(nodes, values, strict=True):
        ours = evaluate(node, table, SCHEMA)
        assert ours.type == theirs.type == result_type(node, SCHEMA).to_arrow(), render(node)
        assert comparable(ours.to_pylist()) == comparable(theirs.to_pylist()), render(node)
    assert [result_type(n, SCHEMA).name for n in nodes] == ["float", "double", "float", "double"]
