"""Schemas, column types, expression typing and SQL rendering (no Spark, no JVM)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.expr import BinaryOp, Column, Literal, UnaryOp, columns_of, dtype_of, render
from krishiv_py.planner.sql import quote, to_sql
from krishiv_py.types import DataType, Field, Schema, to_schema

SCHEMA = to_schema(
    "s string, t timestamp, d double, b bigint, i int, f float, ok boolean, day date, m decimal(10,2)"
)


def f(name: str, dtype: str, nullable: bool = True) -> Field:
    return Field(name, DataType(dtype), nullable)


# --- DDL parsing -------------------------------------------------------------------


def test_parse_basic_ddl() -> None:
    schema = Schema.parse("user_id string, event_time timestamp, amount double")
    assert schema.fields == (f("user_id", "string"), f("event_time", "timestamp"), f("amount", "double"))
    assert schema.names == ("user_id", "event_time", "amount")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("long", "bigint"),
        ("LONG", "bigint"),
        ("integer", "int"),
        ("INT", "int"),
        ("short", "smallint"),
        ("byte", "tinyint"),
        ("varchar", "string"),
        ("bool", "boolean"),
        ("real", "float"),
        ("timestamp_ltz", "timestamp"),
        ("TIMESTAMP_NTZ", "timestamp_ntz"),
        ("decimal", "decimal(10,0)"),
        ("DECIMAL( 10 , 2 )", "decimal(10,2)"),
        ("date", "date"),
        ("binary", "binary"),
    ],
)
def test_type_aliases(text: str, name: str) -> None:
    assert DataType.parse(text) == DataType(name)
    assert Schema.parse(f"c {text}").fields == (f("c", name),)


def test_not_null_decimal_and_back_quoted_names() -> None:
    schema = Schema.parse("a bigint NOT NULL, `my col` decimal(10,2) not null, `b` string, c: int")
    assert schema.fields == (
        f("a", "bigint", False),
        f("my col", "decimal(10,2)", False),
        f("b", "string"),
        f("c", "int"),
    )
    assert schema.ddl() == "`a` bigint NOT NULL, `my col` decimal(10,2) NOT NULL, `b` string, `c` int"
    assert Schema.parse(schema.ddl()) == schema


def test_bad_type_names_the_column() -> None:
    with pytest.raises(kp.SchemaError, match=r"column 'amount'.*'dubble'"):
        Schema.parse("user_id string, amount dubble")
    with pytest.raises(kp.SchemaError, match=r"column 'tags'.*array<string>"):
        Schema.parse("tags array<string>, x int")


def test_a_column_without_a_type_names_the_whole_column() -> None:
    with pytest.raises(kp.SchemaError, match="'amount'") as info:
        Schema.parse("user_id string, amount")
    assert "'amoun'" not in str(info.value)


@pytest.mark.parametrize("text", ["decimal(39,2)", "decimal(0,0)", "decimal(5,6)"])
def test_decimal_precision_and_scale_are_checked(text: str) -> None:
    with pytest.raises(kp.SchemaError, match=r"column 'm'.*decimal"):
        Schema.parse(f"m {text}")
    Schema.parse("m decimal(38,38)").to_arrow()  # the limits themselves are fine


def test_empty_and_duplicate_schemas_are_refused() -> None:
    with pytest.raises(kp.SchemaError, match="at least one column"):
        Schema.parse("  ")
    with pytest.raises(kp.SchemaError, match="duplicate column name 'a'"):
        Schema.parse("a int, a string")


def test_reserved_names_are_refused() -> None:
    with pytest.raises(kp.SchemaError, match="__kp_seq"):
        to_schema("a int, __kp_seq bigint")
    with pytest.raises(kp.SchemaError, match="__kp_x"):
        to_schema(pa.schema([pa.field("__kp_x", pa.int64())]))
    assert to_schema("kp_x int, _kp_y int").names == ("kp_x", "_kp_y")


def test_to_schema_refuses_other_objects() -> None:
    with pytest.raises(kp.SchemaError, match="int"):
        to_schema(42)


def test_schema_field_lookup_is_a_plan_error_naming_the_choices() -> None:
    with pytest.raises(kp.PlanError, match=r"unknown column 'z'; available columns: s, t"):
        SCHEMA.field("z")
    assert "s" in SCHEMA and "z" not in SCHEMA and len(SCHEMA) == 9


# --- pyarrow -----------------------------------------------------------------------


def test_pyarrow_round_trip() -> None:
    schema = to_schema(
        "s string, t timestamp NOT NULL, n timestamp_ntz, d double, fl float, b bigint, i int, "
        "sm smallint, ti tinyint, ok boolean, day date, bin binary, m decimal(12,3)"
    )
    arrow = schema.to_arrow()
    assert arrow.field("t").type == pa.timestamp("us", tz="UTC") and not arrow.field("t").nullable
    assert arrow.field("n").type == pa.timestamp("us")
    assert arrow.field("m").type == pa.decimal128(12, 3)
    assert to_schema(arrow) == schema


def test_from_arrow_accepts_other_units_and_large_types() -> None:
    fields: list[pa.Field[Any]] = [
        pa.field("t", pa.timestamp("ns", tz="Europe/Paris")),
        pa.field("n", pa.timestamp("ms")),
        pa.field("s", pa.large_string()),
        pa.field("b", pa.large_binary()),
    ]
    arrow = pa.schema(fields)
    assert to_schema(arrow).fields == (
        f("t", "timestamp"),
        f("n", "timestamp_ntz"),
        f("s", "string"),
        f("b", "binary"),
    )


def test_unsupported_arrow_type_names_the_column() -> None:
    with pytest.raises(kp.SchemaError, match="column 'xs'"):
        to_schema(pa.schema([pa.field("a", pa.int64()), pa.field("xs", pa.list_(pa.int64()))]))


_NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=8
).filter(lambda s: not s.startswith("__kp_") and s.strip() == s)
_TYPES = st.sampled_from(
    ["string", "bigint", "int", "double", "boolean", "timestamp", "timestamp_ntz", "date", "decimal(7,2)"]
)


@given(st.lists(st.tuples(_NAMES, _TYPES, st.booleans()), min_size=1, max_size=5, unique_by=lambda c: c[0]))
def test_ddl_and_arrow_round_trip_any_names(columns: list[tuple[str, str, bool]]) -> None:
    schema = Schema(tuple(Field(name, DataType(t), nullable) for name, t, nullable in columns))
    assert Schema.parse(schema.ddl()) == schema
    assert to_schema(schema.to_arrow()) == schema


# --- expression typing ----------------------------------------------------------------


def typ(e: kp.Expr) -> str:
    return dtype_of(e.node, SCHEMA).name


def test_dtype_of_columns_literals_and_arithmetic() -> None:
    col = kp.col
    assert typ(col("d")) == "double"
    assert typ(kp.lit(1)) == "int" and typ(kp.lit(2**31)) == "bigint" and typ(kp.lit(-(2**31))) == "int"
    assert typ(kp.lit(1.5)) == "double" and typ(kp.lit("x")) == "string" and typ(kp.lit(True)) == "boolean"
    assert typ(kp.lit(dt.datetime(2024, 1, 1))) == "timestamp" and typ(kp.lit(dt.date(2024, 1, 1))) == "date"
    assert typ(kp.lit(None)) == "void"
    assert typ(col("i") + 1) == "int"
    assert typ(col("i") + col("b")) == "bigint"
    assert typ(col("b") * col("f")) == "float"
    assert typ(col("b") - col("d")) == "double"
    assert typ(col("i") / col("i")) == "double"
    assert typ(col("m") + 1) == "double"
    assert typ(-col("i")) == "int"
    assert typ(1 - col("i")) == "int"
    assert typ(col("i") % 3) == "int"
    assert typ(col("s").cast("bigint")) == "bigint"
    assert typ((col("d") * 2).alias("x")) == "double"


def test_dtype_of_boolean_expressions() -> None:
    col = kp.col
    for e in (
        col("d") > 1,
        col("s") == "a",
        col("t") >= dt.datetime(2024, 1, 1),
        col("day") < col("t"),
        col("s").is_null(),
        col("d").is_not_null(),
        (col("d") > 1) & col("ok"),
        ~col("ok") | kp.lit(None),
        col("b") != 2.5,
        col("t") > "2024-01-01",
    ):
        assert typ(e) == "boolean", render(e.node)


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        (kp.col("s") + 1, ["s", "numeric", "string"]),
        (-kp.col("ok"), ["ok", "numeric", "boolean"]),
        (kp.col("t") * 2, ["t", "numeric", "timestamp"]),
        (kp.col("d") & kp.col("ok"), ["and", "boolean", "double"]),
        (~kp.col("s"), ["not", "boolean", "string"]),
        (kp.col("s") > 1, ["compare", "string", "int"]),
        (kp.col("ok") == kp.col("b"), ["compare", "boolean", "bigint"]),
        (kp.col("t") < 5, ["compare", "timestamp", "int"]),
        (kp.col("nope") + 1, ["nope", "available columns"]),
        (kp.col("*"), ["count()"]),
    ],
)
def test_dtype_of_type_errors(expr: kp.Expr, words: list[str]) -> None:
    with pytest.raises(kp.PlanError) as info:
        dtype_of(expr.node, SCHEMA)
    for w in words:
        assert w in str(info.value)


def test_expression_misuse_is_a_plan_error() -> None:
    with pytest.raises(kp.PlanError, match="truth value"):
        bool(kp.col("a") > 1)
    with pytest.raises(kp.PlanError, match="non-empty"):
        kp.col("")
    with pytest.raises(kp.PlanError, match="object"):
        kp.col("a") + object()
    with pytest.raises(kp.PlanError, match="bigint"):
        kp.lit(2**63)
    with pytest.raises(kp.PlanError, match="bigint"):
        _ = kp.col("b") > -(2**63) - 1
    with pytest.raises(kp.PlanError, match="alias"):
        kp.col("a").alias("")
    with pytest.raises(kp.PlanError, match="alias"):
        kp.count(kp.col("*")).alias("")
    assert kp.lit(2**63 - 1).node == Literal(2**63 - 1)


def test_expr_nodes_are_structural() -> None:
    e = kp.col("d") * 2 > 10
    assert e.node == BinaryOp(">", BinaryOp("*", Column("d"), Literal(2)), Literal(10))
    assert (2 * kp.col("d")).node == BinaryOp("*", Literal(2), Column("d"))
    assert (~kp.col("ok")).node == UnaryOp("not", Column("ok"))
    assert columns_of(((kp.col("a") + kp.col("b")).alias("c") > kp.col("a")).node) == {"a", "b"}
    assert render((kp.col("a").cast("int") + 1).alias("x").node) == "(cast(a as int) + 1) AS x"


# --- SQL rendering ---------------------------------------------------------------------


def sql(value: Any) -> str:
    return to_sql(kp.lit(value).node)


def test_sql_string_literals_escape_quotes_and_backslashes() -> None:
    assert sql("plain") == "'plain'"
    assert sql("it's") == "'it\\'s'"
    assert sql("back\\slash") == "'back\\\\slash'"
    assert sql("\\'") == "'\\\\\\''"
    assert sql("") == "''"
    assert sql("é 日本") == "'é 日本'"


def test_sql_number_literals() -> None:
    assert sql(0) == "0"
    assert sql(-5) == "-5"
    assert sql(2**31 - 1) == "2147483647"
    assert sql(2**31) == "2147483648L"
    assert sql(-(2**31)) == "-2147483648"
    assert sql(-(2**31) - 1) == "-2147483649L"
    assert sql(2**63 - 1) == "9223372036854775807L"
    assert sql(1.5) == "1.5D"
    assert sql(-0.25) == "-0.25D"
    assert sql(1e20) == "1e+20D"
    assert sql(float("nan")) == "CAST('NaN' AS DOUBLE)"
    assert sql(float("inf")) == "CAST('Infinity' AS DOUBLE)"
    assert sql(float("-inf")) == "CAST('-Infinity' AS DOUBLE)"
    assert sql(True) == "TRUE" and sql(False) == "FALSE"
    assert sql(None) == "NULL"


def test_sql_float_subclasses_render_as_plain_numbers() -> None:
    np = pytest.importorskip("numpy")
    assert sql(np.float64(1.5)) == "1.5D"
    assert sql(np.float64("nan")) == "CAST('NaN' AS DOUBLE)"


def test_sql_datetime_literals() -> None:
    assert sql(dt.datetime(2024, 1, 2, 3, 4, 5)) == "TIMESTAMP '2024-01-02 03:04:05'"
    assert sql(dt.datetime(2024, 1, 2, 3, 4, 5, 6)) == "TIMESTAMP '2024-01-02 03:04:05.000006'"
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert sql(dt.datetime(2024, 1, 2, 1, 0, tzinfo=plus2)) == "TIMESTAMP '2024-01-01 23:00:00'"
    assert sql(dt.datetime(2024, 1, 2, tzinfo=dt.UTC)) == "TIMESTAMP '2024-01-02 00:00:00'"
    assert sql(dt.datetime(5, 1, 1)) == "TIMESTAMP '0005-01-01 00:00:00'"
    assert sql(dt.date(2024, 2, 29)) == "DATE '2024-02-29'"


def test_sql_operators() -> None:
    col = kp.col
    cases: list[tuple[kp.Expr, str]] = [
        (col("a") == 1, "(`a` = 1)"),
        (col("a") != 1, "(`a` <> 1)"),
        (col("a") < col("b"), "(`a` < `b`)"),
        (col("a") <= 1, "(`a` <= 1)"),
        (col("a") > 1, "(`a` > 1)"),
        (col("a") >= 1, "(`a` >= 1)"),
        ((col("a") > 1) & (col("b") < 2), "((`a` > 1) AND (`b` < 2))"),
        ((col("a") > 1) | col("ok"), "((`a` > 1) OR `ok`)"),
        (~col("ok"), "(NOT `ok`)"),
        (-col("a"), "(- `a`)"),
        (col("a") + 1, "try_add(`a`, 1)"),
        (col("a") - 1, "try_subtract(`a`, 1)"),
        (col("a") * 2, "try_multiply(`a`, 2)"),
        (col("a") / 2, "try_divide(CAST(`a` AS DOUBLE), 2)"),
        (col("a") % 2, "try_mod(`a`, 2)"),
        (col("a").is_null(), "(`a` IS NULL)"),
        (col("a").is_not_null(), "(`a` IS NOT NULL)"),
        (col("a").cast("decimal(10,2)"), "TRY_CAST(`a` AS DECIMAL(10,2))"),
        (col("a").cast("long"), "TRY_CAST(`a` AS BIGINT)"),
        ((col("a") + 1).alias("b"), "try_add(`a`, 1) AS `b`"),
        (col("a") - -1, "try_subtract(`a`, -1)"),
    ]
    for expr, expected in cases:
        assert to_sql(expr.node) == expected


def test_sql_identifiers_are_quoted() -> None:
    assert quote("a`b") == "`a``b`"
    assert to_sql(kp.col("my col").node) == "`my col`"
    assert to_sql(kp.col("x").alias("we`ird").node) == "`x` AS `we``ird`"


@given(st.text(max_size=20))
def test_sql_string_literal_unescapes_to_the_same_text(text: str) -> None:
    rendered = sql(text)
    assert rendered.startswith("'") and rendered.endswith("'")
    body = rendered[1:-1]
    # Spark's rule: a backslash escapes the next character; an unescaped quote ends the literal.
    assert re.fullmatch(r"(?:[^'\\]|\\.)*", body, flags=re.DOTALL)
    assert re.sub(r"\\(.)", r"\1", body, flags=re.DOTALL) == text
