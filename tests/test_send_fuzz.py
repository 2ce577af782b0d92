"""Property: ``send()`` refuses a batch with a SchemaError and writes nothing, or writes it once, exactly.

Batches are generated in every input format ``send()`` takes (dict rows, with
plain or numpy values; pandas DataFrames; pyarrow Tables and RecordBatches)
Half of them are spoiled on
purpose: a value of the wrong type, a lone surrogate in a value or a column
name, a complex or timedelta column, an out-of-range integer or timestamp, a
null in a NOT NULL column, a missing, unknown or repeated column. A spoiled
batch must be refused with a message naming the column (and the row for
dict rows); any other must be written as one spool file holding exactly the
rows that were sent. No Spark: the Sender writes its spool directly.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.sender import Sender
from krishiv_py.types import DataType, Field, Schema, to_schema

UTC = dt.UTC
SCHEMAS = {
    "events": to_schema("label string NOT NULL, amount bigint, ratio double, at timestamp"),
    "facts": to_schema(
        "code int NOT NULL, flag boolean, day date, price decimal(10,2), at timestamp NOT NULL"
    ),
}
FORMATS = ["rows", "numpy_rows", "pandas", "arrow_table", "arrow_batch"]
HIDDEN = ["__kp_kind", "__kp_wm", "__kp_seq"]

VALUES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=6),
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "double": st.floats(),
    "boolean": st.booleans(),
    "timestamp": st.datetimes(timezones=st.none() | st.just(UTC)),
    "date": st.dates(),
    "decimal(10,2)": st.decimals(Decimal("-99999999.99"), Decimal("99999999.99"), places=2),
}

#: Values no column of that type may take (from dict rows or a pandas object column).
_ANY_BAD: list[Any] = [
    1 + 2j,
    np.complex128(1j),
    dt.timedelta(seconds=1),
    np.timedelta64(1, "s"),
    [1],
    {"a": 1},
]
BAD: dict[str, list[Any]] = {
    "string": [5, 1.5, True, b"x", "a\ud800", np.int64(1)],
    "bigint": [1.5, "1", True, np.bool_(True), 2**63, -(2**63) - 1, np.uint64(2**63), np.float64(1.0)],
    "int": [2**31, -(2**31) - 1, "1", 1.0, np.int64(2**31), np.bool_(False)],
    "double": ["1.5", True, np.bool_(True), 2**60 + 1, 2**1100, Decimal("1.5")],
    "boolean": [1, "true", np.int64(1), 0.0],
    "timestamp": [
        1_700_000_000_000,
        "2024-01-01",
        dt.date(2024, 1, 1),
        pd.Timestamp("2024-01-01 00:00:00.000000001"),
        np.datetime64("2024-01-01T00:00:00.000000001"),
        np.datetime64("2024-01-01"),
        np.datetime64(10**17, "s"),
        np.datetime64("2024-01", "M"),
    ],
    "date": [dt.datetime(2024, 1, 1), "2024-01-01", np.datetime64("2024-01-01T00:00"), 20_000],
    "decimal(10,2)": [1.5, "1.5", True, Decimal("1.255"), Decimal("NaN"), Decimal("1e20"), np.float64(2)],
}
MUTATIONS = [
    "cell",
    "null",
    "surrogate_value",
    "surrogate_name",
    "missing",
    "extra",
    "duplicate",
    "column_type",
    "range",
    "not_a_dict",
]


@attrs.frozen
class Case:
    """A generated batch, the rows ``send()`` must write (None: it must refuse), words its error names."""

    schema: str
    data: Any
    expected: list[dict[str, Any]] | None
    mention: tuple[str, ...] = ()


# --- normalisation: what a value reads back as ---------------------------------------------------


def written(dtype: DataType, value: Any, fmt: str) -> Any:
    """The value the spool holds for ``value`` sent in format ``fmt``."""
    if value is None:
        return None
    if dtype.is_timestamp:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if fmt == "pandas" and isinstance(value, float) and math.isnan(value):
        return None  # pandas' missing value, as Arrow's from_pandas reads it
    return value


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NaN equals NaN here, so rows compare by value."""
    nan = "<NaN>"
    return [{k: nan if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


# --- rendering a batch in each format ------------------------------------------------------------


def as_numpy(dtype: DataType, value: Any) -> Any:
    """The numpy scalar a user might hold for ``value``."""
    if value is None or dtype.is_decimal:
        return value
    if dtype.is_timestamp:
        return np.datetime64(written(dtype, value, "rows").replace(tzinfo=None), "us")
    if dtype.name == "date":
        return np.datetime64(value, "D")
    scalar: dict[str, Callable[[Any], Any]] = {
        "string": np.str_,
        "bigint": np.int64,
        "int": np.int32,
        "double": np.float64,
        "boolean": np.bool_,
    }
    return scalar[dtype.name](value)


def pandas_column(dtype: DataType, values: list[Any], variant: int) -> Any:
    """A pandas column of ``values`` in one of the dtypes a user might have."""
    if variant % 4 == 3 or dtype.name in ("date", "decimal(10,2)"):
        return pd.Series(values, dtype=object)
    nulls = any(v is None for v in values)
    if dtype.name == "string":
        return [pd.Series(values, dtype=object), pd.array(values, dtype="string"), pd.Categorical(values)][
            variant % 3
        ]
    if dtype.is_integral:
        bits = {"bigint": "64", "int": "32"}[dtype.name]
        return (
            pd.Series(values, dtype=f"Int{bits}") if nulls or variant % 2 else np.array(values, f"int{bits}")
        )
    if dtype.name == "double":
        return np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    if dtype.name == "boolean":
        return pd.array(values, dtype="boolean") if nulls or variant % 2 else np.array(values, dtype=bool)
    return pd.array([written(dtype, v, "rows") for v in values], dtype="datetime64[us, UTC]")


def arrow_column(dtype: DataType, values: list[Any], variant: int) -> pa.Array[Any]:
    """An Arrow column of ``values``, in the schema's type or one that maps to it cleanly."""
    if dtype.is_timestamp:
        zone = ["UTC", "America/New_York"][variant % 2]
        return pa.array([written(dtype, v, "rows") for v in values], pa.timestamp("us", tz=zone))
    if dtype.is_decimal and variant % 2:
        return pa.array(values, pa.decimal128(14, 4))
    array = pa.array(values, dtype.to_arrow())
    if dtype.name == "string" and variant % 4 == 1:
        return array.cast(pa.large_string())
    if dtype.name == "string" and variant % 4 == 2:
        return array.cast(pa.string_view())
    if dtype.name in ("string", "bigint", "int", "date") and variant % 4 == 3:
        return array.dictionary_encode()
    return array


def render(
    fmt: str, schema: Schema, columns: dict[str, Any], rows: list[dict[str, Any]], variant: int
) -> Any:
    """The batch in format ``fmt``; ``columns`` holds ready-made columns for the column formats."""
    if fmt in ("rows", "numpy_rows"):
        return rows
    if fmt == "pandas":
        names = list(columns)
        return pd.DataFrame({str(i): c for i, c in enumerate(columns.values())}).set_axis(names, axis=1)
    arrays = list(columns.values())
    if fmt == "arrow_table":
        return pa.Table.from_arrays(arrays, names=list(columns))
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


# --- generating cases -----------------------------------------------------------------------------


def column_of(fmt: str, f: Field, values: list[Any], variant: int) -> Any:
    if fmt == "pandas":
        return pandas_column(f.dtype, values, variant)
    return arrow_column(f.dtype, values, variant)


WRONG_PANDAS = [
    np.array([1 + 2j]),
    np.array([np.timedelta64(1, "s")]),
    np.array([b"x"]),
]
WRONG_ARROW = [pa.array([1], pa.duration("s")), pa.array([b"x"]), pa.array([[1]])]


def out_of_range(f: Field, fmt: str) -> Any:
    """A one-value column in range of its own type but not of the schema's."""
    if f.dtype.is_timestamp:
        if fmt == "pandas":
            return pd.Series(pd.to_datetime(["2024-01-01 00:00:00.000000001"]))
        return pa.array([10**15], pa.timestamp("s"))
    big = {"bigint": 2**63, "int": 2**31}[f.dtype.name]
    return np.array([big], dtype=np.uint64) if fmt == "pandas" else pa.array([big], pa.uint64())


def _rows(schema: Schema) -> st.SearchStrategy[list[dict[str, Any]]]:
    values = {
        f.name: VALUES[f.dtype.name] | st.none() if f.nullable else VALUES[f.dtype.name] for f in schema
    }
    return st.lists(st.fixed_dictionaries(values), max_size=5)


ROWS = {key: _rows(schema) for key, schema in SCHEMAS.items()}


def applies(mutation: str, fmt: str, field: Field, n: int) -> bool:
    """Whether a spoiling can be expressed in a format (Arrow holds no mixed column) for ``n`` rows."""
    by_row = fmt in ("rows", "numpy_rows")
    if mutation in ("cell", "surrogate_value"):
        return n > 0 and (by_row or fmt == "pandas")
    if mutation == "null":
        return n > 0 and not field.nullable
    if mutation == "not_a_dict":
        return n > 0 and by_row
    if mutation == "surrogate_name":
        return not fmt.startswith("arrow") and (n > 0 or not by_row)  # Arrow cannot hold one at all
    if mutation in ("missing", "extra"):
        return n > 0 or not by_row  # no row, no key to miss
    if mutation == "duplicate":
        return not by_row
    if mutation == "column_type":
        return n > 0 and not by_row
    if mutation == "range":
        return n > 0 and not by_row and (field.dtype.is_integral or field.dtype.is_timestamp)
    return False


@st.composite
def cases(draw: st.DrawFn, fmt: str) -> Case:
    key = draw(st.sampled_from(sorted(SCHEMAS)))
    schema = SCHEMAS[key]
    fields = list(schema)
    rows: list[Any] = draw(ROWS[key])
    sent = [{f.name: written(f.dtype, r[f.name], fmt) for f in fields} for r in rows]
    if fmt == "numpy_rows":
        rows = [{f.name: as_numpy(f.dtype, r[f.name]) for f in fields} for r in rows]
    variant = draw(st.integers(0, 11))
    mutation = draw(st.sampled_from(["none"] * len(MUTATIONS) + MUTATIONS))
    columns: dict[str, Any] = {}
    if fmt not in ("rows", "numpy_rows"):
        columns = {f.name: column_of(fmt, f, [r[f.name] for r in rows], variant) for f in fields}
    field = draw(st.sampled_from(fields))
    name, n = field.name, len(rows)
    at = draw(st.integers(0, max(n - 1, 0)))
    by_row = fmt in ("rows", "numpy_rows")
    mention: tuple[str, ...] = (repr(name),)
    expected: list[dict[str, Any]] | None = None

    if not applies(mutation, fmt, field, n):
        mutation = "none"
    if mutation == "cell":
        rows[at][name] = draw(st.sampled_from(BAD[field.dtype.name] + _ANY_BAD))
        mention += (f"row {at}",)
    elif mutation == "null":
        rows[at][name] = None
        mention += (f"row {at}",) if by_row or fmt == "pandas" else ()
    elif mutation == "surrogate_value":
        name = "label" if "label" in schema else name  # elsewhere a str is a wrong type too
        rows[at][name] = "x\ud800"
        mention = (repr(name), f"row {at}")
    elif mutation == "not_a_dict":
        rows[at] = tuple(rows[at].items())
        mention = (f"row {at}",)
    if mutation == "none":
        expected = sent

    if mutation in ("cell", "surrogate_value", "null") and fmt == "pandas":
        columns[name] = pd.Series([r[name] for r in rows], dtype=object)
    elif mutation == "null" and not by_row:
        columns[name] = arrow_column(field.dtype, [r[name] for r in rows], variant)
    bad_name = "\udc80" + name
    if mutation == "surrogate_name":
        mention = (repr(bad_name),)
        for r in rows:
            r[bad_name] = r.pop(name)
        columns = {bad_name if k == name else k: v for k, v in columns.items()}
    elif mutation == "missing":
        for r in rows:
            del r[name]
        columns.pop(name, None)
    elif mutation == "extra":
        mention = ("'bonus'",)
        for r in rows:
            r["bonus"] = 1
        columns["bonus"] = column_of(fmt, Field("bonus", DataType("bigint")), [1] * n, variant)
    elif mutation == "duplicate":
        columns = {**columns, name + " ": columns[name]}  # renamed below: dicts cannot repeat a key
    elif mutation in ("column_type", "range"):
        wrong = draw(st.sampled_from(WRONG_PANDAS if fmt == "pandas" else WRONG_ARROW))
        single = wrong if mutation == "column_type" else out_of_range(field, fmt)
        columns = {k: (single if k == name else _first(v)) for k, v in columns.items()}
    data = render(fmt, schema, columns, rows, variant)
    if mutation == "duplicate":
        data = _with_names(data, [k.rstrip(" ") for k in columns])
    return Case(key, data, expected, mention)


def _first(column: Any) -> Any:
    """The first value of a column: the batch of one row around a wrong column."""
    if isinstance(column, pa.Array):
        return column.slice(0, 1)
    return pd.Series(column).iloc[:1].reset_index(drop=True)


def _with_names(data: Any, names: list[str]) -> Any:
    if isinstance(data, pd.DataFrame):
        return data.set_axis(names, axis=1)
    if isinstance(data, pa.Table | pa.RecordBatch):
        return data.rename_columns(names)
    return data


CASES = {fmt: cases(fmt) for fmt in FORMATS}


# --- the property -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def senders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Sender, Path]]]:
    """One Sender and its spool directory per schema, for the module: each example checks what it adds."""
    root = tmp_path_factory.mktemp("spools")
    with pytest.MonkeyPatch.context() as patch:
        # Durability is tested in test_sender.py; flushing thousands of files would only be slow.
        patch.setattr(os, "fsync", lambda fd: None)
        yield {
            key: (Sender(name=key, schema=s, path=str(root / key)), root / key) for key, s in SCHEMAS.items()
        }


def check(sender: Sender, spool: Path, case: Case) -> None:
    data_dir, staging = spool / "data", spool / "staging"
    before, seq = set(os.listdir(data_dir)), sender.batches_sent
    try:
        returned = sender.send(case.data)
    except kp.SchemaError as exc:
        assert case.expected is None, f"a valid batch was refused: {exc}"
        for word in case.mention:
            assert word in str(exc), f"{word} not in: {exc}"
        assert set(os.listdir(data_dir)) == before
        assert sender.batches_sent == seq
        assert os.listdir(staging) == []
        return
    assert case.expected is not None, f"a bad batch was accepted: {case.data!r}"
    assert returned == seq
    assert sender.batches_sent == seq + 1
    (new,) = set(os.listdir(data_dir)) - before
    assert new == f"batch-{seq:012d}-data.parquet"
    back = pq.read_table(data_dir / new).drop_columns(HIDDEN)
    assert back.column_names == list(sender.schema.names)
    assert comparable(back.to_pylist()) == comparable(case.expected)


@pytest.mark.parametrize("fmt", FORMATS)
# 5 x 200 batches. No shrinking: it takes minutes on these batches; a failure shows the batch as drawn.
@settings(max_examples=200, derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
def test_a_batch_is_refused_whole_or_written_once(
    fmt: str, data: st.DataObject, senders: dict[str, tuple[Sender, Path]]
) -> None:
    case = data.draw(CASES[fmt])
    check(*senders[case.schema], case)
