"""The memory-stream Sender: validation before writing, atomic numbered batches (no Spark)."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.sender import Sender
from krishiv_py.types import to_schema

SCHEMA = to_schema("k string, t timestamp, v double, n bigint NOT NULL")
UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
HIDDEN = ["__kp_kind", "__kp_wm", "__kp_seq"]


def make(tmp_path: Path, ddl: str | None = None) -> Sender:
    return Sender(name="s", schema=to_schema(ddl) if ddl else SCHEMA, path=str(tmp_path))


def row(k: str = "a", t: Any = T0, v: Any = 1.5, n: Any = 1) -> dict[str, Any]:
    return {"k": k, "t": t, "v": v, "n": n}


def data_files(tmp_path: Path) -> list[str]:
    return sorted(os.listdir(tmp_path / "data"))


def read(tmp_path: Path, seq: int) -> pa.Table:
    (name,) = [f for f in data_files(tmp_path) if f.startswith(f"batch-{seq:012d}-")]
    return pq.read_table(tmp_path / "data" / name)


def user_rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.drop_columns(HIDDEN).to_pylist()


# --- accepted inputs -----------------------------------------------------------------


def test_list_of_dicts_is_written_in_schema_order(tmp_path: Path) -> None:
    sender = make(tmp_path)
    rows = [{"n": 7, "v": 2.5, "t": T0, "k": "x"}, row("y", T0 + dt.timedelta(microseconds=1), None, 8)]
    assert sender.send(rows) == 0
    table = read(tmp_path, 0)
    assert table.column_names == ["k", "t", "v", "n", *HIDDEN]
    assert table.schema.field("t").type == pa.timestamp("us", tz="UTC")
    assert user_rows(table) == [
        {"k": "x", "t": T0, "v": 2.5, "n": 7},
        {"k": "y", "t": T0 + dt.timedelta(microseconds=1), "v": None, "n": 8},
    ]


def test_pandas_input(tmp_path: Path) -> None:
    sender = make(tmp_path)
    frame = pd.DataFrame(
        {
            "n": [1, 2],
            "k": ["a", "b"],
            "v": [0.5, float("nan")],
            "t": pd.to_datetime(["2024-01-01 12:00:00.123456", "1969-12-31 23:59:59.999999"]),
        }
    )
    assert sender.send(frame) == 0
    table = read(tmp_path, 0)
    assert table.column_names[:4] == ["k", "t", "v", "n"]
    values = user_rows(table)
    assert values[0] == {"k": "a", "t": T0, "v": 0.5, "n": 1}
    assert values[1]["t"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert values[1]["v"] is None  # pandas' missing-value NaN arrives as null (Arrow's from_pandas rule)


def test_nan_in_a_list_of_dicts_stays_nan(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row(v=float("nan")), row(v=float("inf"))])
    values = read(tmp_path, 0).column("v").to_pylist()
    assert values[0] != values[0] and values[1] == float("inf")


def test_pyarrow_table_and_record_batch_input(tmp_path: Path) -> None:
    sender = make(tmp_path)
    table = pa.table(
        {
            "v": pa.array([1, 2], pa.int32()),  # widened to double exactly
            "n": pa.array([10, 20], pa.int64()),
            "t": pa.array([T0, T0], pa.timestamp("us", tz="America/New_York")),
            "k": pa.array(["a", None], pa.large_string()),
        }
    )
    assert sender.send(table) == 0
    assert sender.send(table.to_batches()[0]) == 1
    for seq in (0, 1):
        written = read(tmp_path, seq)
        assert written.schema.field("v").type == pa.float64()
        assert user_rows(written) == [
            {"k": "a", "t": T0, "v": 1.0, "n": 10},
            {"k": None, "t": T0, "v": 2.0, "n": 20},
        ]


# --- refused inputs: SchemaError naming column and row, nothing written -----------------------


def assert_refused(sender: Sender, tmp_path: Path, data: Any, *words: str) -> None:
    before = data_files(tmp_path)
    seq = sender.batches_sent
    with pytest.raises(kp.SchemaError) as info:
        sender.send(data)
    message = str(info.value)
    for w in words:
        assert w in message, message
    assert data_files(tmp_path) == before
    assert os.listdir(tmp_path / "staging") == []
    assert sender.batches_sent == seq


@pytest.mark.parametrize(
    ("bad", "column", "value"),
    [
        ({"v": "1.5"}, "v", "'1.5'"),  # string in double
        ({"t": 1_700_000_000_000}, "t", "1700000000000"),  # int in timestamp
        ({"n": 1.0}, "n", "1.0"),  # float in bigint
        ({"n": True}, "n", "True"),  # bool in bigint
        ({"k": 5}, "k", "5"),  # int in string
        ({"t": "2024-01-01"}, "t", "2024-01-01"),  # string in timestamp
        ({"n": 2**63}, "n", str(2**63)),  # out of range
    ],
)
def test_wrong_type_names_column_and_row(
    tmp_path: Path, bad: dict[str, Any], column: str, value: str
) -> None:
    sender = make(tmp_path)
    sender.send([row()])
    rows = [row(), row(), {**row(), **bad}]
    assert_refused(sender, tmp_path, rows, f"column {column!r}", "row 2", value)


def test_unknown_and_missing_keys_name_column_and_row(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert_refused(sender, tmp_path, [row(), {**row(), "extra": 1}], "'extra'", "row 1")
    missing = row()
    del missing["v"]
    assert_refused(sender, tmp_path, [row(), row(), missing], "'v'", "row 2")
    assert_refused(sender, tmp_path, [row(), "not a dict"], "row 1", "dict")


def test_null_in_not_null_column(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert_refused(sender, tmp_path, [row(), row(n=None)], "column 'n'", "row 1", "NOT NULL")
    frame = pd.DataFrame({"k": ["a", "b"], "t": [T0, T0], "v": [1.0, 2.0], "n": pd.array([1, None], "Int64")})
    assert_refused(sender, tmp_path, frame, "column 'n'", "row 1", "NOT NULL")
    table = pa.table({"k": ["a"], "t": [T0], "v": [1.0], "n": pa.array([None], pa.int64())})
    assert_refused(sender, tmp_path, table, "column 'n'", "row 0", "NOT NULL")


def test_nullable_columns_accept_nulls(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row(k=None, t=None, v=None)])  # type: ignore[arg-type]
    assert user_rows(read(tmp_path, 0)) == [{"k": None, "t": None, "v": None, "n": 1}]


def test_sub_microsecond_timestamps_are_refused(tmp_path: Path) -> None:
    sender = make(tmp_path)
    ns = pa.array([0, 1_704_067_200_000_000_000, 1_704_067_200_000_000_001], pa.timestamp("ns", tz="UTC"))
    table = pa.table({"k": ["a"] * 3, "t": ns, "v": [1.0] * 3, "n": [1, 2, 3]})
    assert_refused(sender, tmp_path, table, "column 't'", "row 2")
    frame = table.to_pandas()
    assert_refused(sender, tmp_path, frame, "column 't'", "row 2")
    stamp = pd.Timestamp("2024-01-01 00:00:00.000000001", tz="UTC")
    assert_refused(sender, tmp_path, [row(), row(t=stamp)], "column 't'", "row 1")
    # Whole microseconds in a nanosecond column are exact and accepted.
    sender.send(table.slice(0, 2))
    assert read(tmp_path, 0).column("t").to_pylist()[1] == dt.datetime(2024, 1, 1, tzinfo=UTC)


def test_arrow_and_pandas_column_errors(tmp_path: Path) -> None:
    sender = make(tmp_path)
    base: dict[str, list[Any]] = {"k": ["a", "b"], "t": [T0, T0], "v": [1.0, 2.0], "n": [1, 2]}
    assert_refused(sender, tmp_path, pa.table({**base, "x": [1, 2]}), "unknown column 'x'")
    without_v = pa.table({k: v for k, v in base.items() if k != "v"})
    assert_refused(sender, tmp_path, without_v, "missing column 'v'")
    assert_refused(
        sender, tmp_path, pd.DataFrame({**base, "v": ["1", "2"]}), "column 'v'", "'1' (str)", "row 0"
    )
    assert_refused(sender, tmp_path, pd.DataFrame({**base, "n": [1.0, 2.5]}), "column 'n'", "double", "row 0")
    inexact = pa.table({**base, "v": pa.array([1, 2**60 + 1], pa.int64())})
    assert_refused(sender, tmp_path, inexact, "column 'v'", "row 1")


def test_duplicate_input_columns_are_a_schema_error(tmp_path: Path) -> None:
    sender = make(tmp_path)
    frame = pd.DataFrame([["a", T0, 1.0, 1, 2]], columns=["k", "t", "v", "n", "n"])
    assert_refused(sender, tmp_path, frame, "'n'")
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array([T0]), pa.array([1.0]), pa.array([1]), pa.array([2])],
        names=["k", "t", "v", "n", "n"],
    )
    assert_refused(sender, tmp_path, table, "'n'")


def test_other_inputs_are_refused(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert_refused(sender, tmp_path, row(), "list of dicts")
    assert_refused(sender, tmp_path, "k,t,v,n", "str")
    assert_refused(sender, tmp_path, 5, "int")
    assert_refused(sender, tmp_path, {"k": ["a"], "t": [T0], "v": [1.0], "n": [1]}, "list of dicts", "dict")


def frame(**columns: Any) -> pd.DataFrame:
    """A two-row batch of SCHEMA as a DataFrame, with some columns replaced."""
    base: dict[str, Any] = {"k": ["a", "b"], "t": [T0, T0], "v": [1.0, 2.0], "n": [1, 2]}
    return pd.DataFrame({**base, **columns})


def test_lone_surrogates_are_a_schema_error_in_every_format(tmp_path: Path) -> None:
    sender = make(tmp_path)
    bad = "b\ud800"
    assert_refused(sender, tmp_path, [row(), row(k=bad)], "column 'k', row 1", "lone surrogate")
    assert_refused(sender, tmp_path, frame(k=["a", bad]), "column 'k', row 1", "lone surrogate")
    as_string = pd.array(["a", bad], dtype="string")
    assert_refused(sender, tmp_path, frame(k=as_string), "column 'k', row 1", "lone surrogate")
    assert_refused(sender, tmp_path, frame(k=pd.Categorical(["a", bad])), "column 'k', row 1")
    assert_refused(sender, tmp_path, [{**row(), bad: 1}], "row 0", f"unknown column {bad!r}")
    named = frame().rename(columns={"k": bad})
    assert_refused(sender, tmp_path, named, f"unknown column {bad!r}")
    with pytest.raises(kp.SchemaError, match="valid UTF-8"):
        to_schema(f"`{bad}` string")


def test_unsupported_pandas_dtypes_are_a_schema_error(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert_refused(sender, tmp_path, frame(v=np.array([1.0, 1 + 2j])), "column 'v'", "complex128")
    assert_refused(sender, tmp_path, frame(n=pd.to_timedelta([1, 2], unit="s")), "column 'n'", "duration")
    assert_refused(sender, tmp_path, frame(k=[b"a", b"b"]), "column 'k', row 0", "bytes")
    assert_refused(sender, tmp_path, frame(k=["a", object()]), "column 'k', row 1", "object")
    sparse = pd.arrays.SparseArray([1.0, 0.0])
    assert_refused(sender, tmp_path, frame(v=sparse), "column 'v'", "Sparse")
    # An object column is checked value by value, as dict rows are: no bool read as 1.0, no int as a time.
    assert_refused(sender, tmp_path, frame(v=[1.5, True]), "column 'v', row 1", "True")
    assert_refused(sender, tmp_path, frame(t=[T0, 5]), "column 't', row 1")


def test_numpy_scalars_in_dict_rows_count_as_their_python_values(tmp_path: Path) -> None:
    sender = make(tmp_path, "i int, n bigint, f float, d double, b boolean, s string, t timestamp, day date")
    values = {
        "i": np.int32(-5),
        "n": np.int64(2**62),
        "f": np.float32(0.5),
        "d": np.float64(2.5),
        "b": np.bool_(True),
        "s": np.str_("x"),
        "t": np.datetime64("2024-01-01T12:00:00.123456"),
        "day": np.datetime64("2024-02-29"),
    }
    sender.send([values, dict.fromkeys(values, np.datetime64("NaT"))])
    assert user_rows(read(tmp_path, 0)) == [
        {
            "i": -5,
            "n": 2**62,
            "f": 0.5,
            "d": 2.5,
            "b": True,
            "s": "x",
            "t": dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
            "day": dt.date(2024, 2, 29),
        },
        dict.fromkeys(values),
    ]
    for column, bad, words in [
        ("n", np.uint64(2**63), "column 'n', row 0"),
        ("i", np.int64(2**31), "column 'i', row 0"),
        ("n", np.float64(1.0), "float64"),
        ("b", np.int64(1), "int64"),
        ("t", np.datetime64("2024-01-01T00:00:00.000000001"), "nanoseconds"),
        ("t", np.datetime64("2024-01-01"), "time unit"),
        ("day", np.datetime64("2024-01-01T00:00"), "day unit"),
        ("t", np.datetime64(10**17, "s"), "years 1 to 9999"),
        ("n", np.timedelta64(5, "s"), "timedelta64"),
    ]:
        assert_refused(sender, tmp_path, [{**values, column: bad}], words)


def test_dictionary_and_view_strings_are_read_as_their_values(tmp_path: Path) -> None:
    sender = make(tmp_path)
    base: dict[str, Any] = {"t": [T0, T0], "v": [1.0, 2.0], "n": pa.array([1, 2]).dictionary_encode()}
    encoded = [pa.array(["a", None]).dictionary_encode(), pa.array(["a", None], pa.string_view())]
    for seq, k in enumerate(encoded):
        sender.send(pa.table({"k": k, **base}))
        assert read(tmp_path, seq).column("k").to_pylist() == ["a", None]
    sender.send(frame(k=pd.Categorical(["a", None]), n=pd.Categorical([3, 4])))
    assert user_rows(read(tmp_path, 2))[1] == {"k": None, "t": T0, "v": 2.0, "n": 4}
    numbers_as_text = pa.table({**base, "k": ["a", "b"], "n": pa.array(["1", "2"]).dictionary_encode()})
    assert_refused(sender, tmp_path, numbers_as_text, "column 'n'", "dictionary<values=string")


def test_decimal_values_must_be_finite_numbers(tmp_path: Path) -> None:
    from decimal import Decimal

    sender = make(tmp_path, "d decimal(10,2)")
    for bad in (Decimal("NaN"), Decimal("Infinity"), "1.5", 1.5, True):
        assert_refused(sender, tmp_path, [{"d": Decimal("1")}, {"d": bad}], "column 'd', row 1")


def test_decimal_and_date_columns(tmp_path: Path) -> None:
    from decimal import Decimal

    sender = make(tmp_path, "d decimal(10,2), day date")
    sender.send([{"d": Decimal("1.25"), "day": dt.date(2024, 2, 29)}])
    assert user_rows(read(tmp_path, 0)) == [{"d": Decimal("1.25"), "day": dt.date(2024, 2, 29)}]
    assert_refused(sender, tmp_path, [{"d": Decimal("1.255"), "day": None}], "column 'd'", "row 0")
    assert_refused(sender, tmp_path, [{"d": None, "day": dt.datetime(2024, 1, 1)}], "column 'day'", "row 0")


# --- batches, sequence numbers and markers -----------------------------------------------------


def test_sequence_numbers_and_hidden_columns(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert [sender.send([row(), row()]) for _ in range(3)] == [0, 1, 2]
    assert sender.batches_sent == 3
    assert data_files(tmp_path) == [f"batch-{i:012d}-data.parquet" for i in range(3)]
    table = read(tmp_path, 2)
    assert table.schema.field("__kp_kind").type == pa.int8()
    assert table.column("__kp_kind").to_pylist() == [0, 0]
    assert table.column("__kp_wm").to_pylist() == [None, None]
    assert table.column("__kp_seq").to_pylist() == [2 << 32, (2 << 32) + 1]


def test_empty_batch_is_written_and_numbered(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert sender.send([]) == 0
    assert (
        sender.send(
            pa.table(
                {
                    c: pa.array([], t)
                    for c, t in zip(
                        SCHEMA.names,
                        [pa.string(), pa.timestamp("us", tz="UTC"), pa.float64(), pa.int64()],
                        strict=True,
                    )
                }
            )
        )
        == 1
    )
    for seq in (0, 1):
        table = read(tmp_path, seq)
        assert table.num_rows == 0 and table.column_names == ["k", "t", "v", "n", *HIDDEN]
    assert sender.send([row()]) == 2


def test_microsecond_timestamps_are_exact(tmp_path: Path) -> None:
    sender = make(tmp_path, "t timestamp, u timestamp_ntz")
    stamps = [
        dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(2024, 6, 1, 14, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    ]
    sender.send([{"t": s, "u": s.replace(tzinfo=None)} for s in stamps])
    table = read(tmp_path, 0)
    assert table.column("t").to_pylist() == stamps  # aware datetimes compare by instant
    assert table.column("u").to_pylist() == [s.replace(tzinfo=None) for s in stamps]
    micros = table.column("t").cast(pa.int64()).to_pylist()
    assert micros[1] == -1 and micros[3] == 1_717_243_200_000_001


def test_naive_datetimes_are_utc(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row(t=dt.datetime(1970, 1, 1, 0, 0, 1))])
    assert read(tmp_path, 0).column("t").cast(pa.int64()).to_pylist() == [1_000_000]


def test_advance_watermark_writes_a_marker_batch(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row()])
    assert sender.advance_watermark(-5) == 1
    assert data_files(tmp_path)[-1] == "batch-000000000001-watermark.parquet"
    marker = read(tmp_path, 1)
    assert marker.num_rows == 1
    assert marker.column("__kp_kind").to_pylist() == [1]
    assert marker.column("__kp_wm").to_pylist() == [-5]
    assert marker.column("__kp_seq").to_pylist() == [1 << 32]
    assert user_rows(marker) == [{"k": None, "t": None, "v": None, "n": None}]
    for bad in (1.5, True, "10", END_OF_TIME_MS, -(2**62)):
        with pytest.raises(kp.SchemaError):
            sender.advance_watermark(bad)  # type: ignore[arg-type]
    assert sender.batches_sent == 2


def test_close_then_send_is_refused_and_close_is_idempotent(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row()])
    assert not sender.closed
    sender.close()
    assert sender.closed
    files = data_files(tmp_path)
    assert files[-1] == "batch-000000000001-close.parquet"
    marker = read(tmp_path, 1)
    assert marker.column("__kp_kind").to_pylist() == [2]
    assert marker.column("__kp_wm").to_pylist() == [END_OF_TIME_MS]
    sender.close()
    assert data_files(tmp_path) == files
    with pytest.raises(kp.SourceClosedError, match="'s'"):
        sender.send([row()])
    with pytest.raises(kp.SourceClosedError):
        sender.advance_watermark(10)
    assert data_files(tmp_path) == files and sender.batches_sent == 2


def test_a_new_sender_on_the_same_path_resumes(tmp_path: Path) -> None:
    first = make(tmp_path)
    first.send([row()])
    first.advance_watermark(3)
    second = make(tmp_path)
    assert second.batches_sent == 2 and not second.closed
    assert second.send([row()]) == 2
    second.close()
    third = make(tmp_path)
    assert third.closed and third.batches_sent == 4
    with pytest.raises(kp.SourceClosedError):
        third.send([row()])


def test_a_nudge_is_a_file_of_no_rows_and_no_batch_even_after_close(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row()])
    sender.close()
    sender.nudge()  # what a restarted job adds: a micro-batch of no rows, no batch of the stream
    (nudge,) = [f for f in data_files(tmp_path) if f.startswith("nudge-")]
    table = pq.read_table(tmp_path / "data" / nudge)
    assert table.num_rows == 0 and table.schema.names == read(tmp_path, 0).schema.names
    assert sender.batches_sent == 2 and sender.closed
    again = make(tmp_path)  # a sender in the next process counts the batches, not the nudge
    assert again.batches_sent == 2 and again.closed
    mtimes = [os.stat(tmp_path / "data" / f).st_mtime_ns for f in ("batch-000000000001-close.parquet", nudge)]
    assert mtimes[0] < mtimes[1]  # read after every batch


def test_modification_times_increase_in_send_order(tmp_path: Path) -> None:
    sender = make(tmp_path)
    for _ in range(20):
        sender.send([row()])
    sender.advance_watermark(1)
    sender.close()
    mtimes = [os.stat(tmp_path / "data" / f).st_mtime_ns for f in data_files(tmp_path)]
    assert len(mtimes) == 22
    assert all(a < b for a, b in pairwise(mtimes))
    # Spark's file source compares modification times in milliseconds.
    assert all(b // 1_000_000 > a // 1_000_000 for a, b in pairwise(mtimes))


def test_a_resumed_sender_keeps_modification_times_increasing(tmp_path: Path) -> None:
    first = make(tmp_path)
    first.send([row()])
    # The previous process wrote faster than the clock: its last file is "in the future".
    ahead = time.time_ns() + 10 * 1_000_000_000
    last = tmp_path / "data" / data_files(tmp_path)[-1]
    os.utime(last, ns=(ahead, ahead))
    second = make(tmp_path)
    second.send([row()])
    new = tmp_path / "data" / data_files(tmp_path)[-1]
    assert os.stat(new).st_mtime_ns // 1_000_000 > ahead // 1_000_000


def test_no_file_is_left_in_staging(tmp_path: Path) -> None:
    sender = make(tmp_path)
    sender.send([row()])
    sender.advance_watermark(0)
    sender.close()
    assert os.listdir(tmp_path / "staging") == []
    assert all(re.fullmatch(r"batch-\d{12}-(data|watermark|close)\.parquet", f) for f in data_files(tmp_path))


def test_duplicate_sends_are_two_batches(tmp_path: Path) -> None:
    sender = make(tmp_path)
    rows = [row("a"), row("b")]
    assert sender.send(rows) == 0
    assert sender.send(rows) == 1
    assert user_rows(read(tmp_path, 0)) == user_rows(read(tmp_path, 1))
    seqs = [read(tmp_path, i).column("__kp_seq").to_pylist() for i in (0, 1)]
    assert seqs == [[0, 1], [1 << 32, (1 << 32) + 1]]


def test_send_does_not_mutate_its_input(tmp_path: Path) -> None:
    sender = make(tmp_path)
    rows = [{"n": 1, "k": "a", "t": T0, "v": 1.0}]
    frame = pd.DataFrame(rows)
    sender.send(rows)
    sender.send(frame)
    assert rows == [{"n": 1, "k": "a", "t": T0, "v": 1.0}]
    assert list(frame.columns) == ["n", "k", "t", "v"]


def test_properties(tmp_path: Path) -> None:
    sender = make(tmp_path)
    assert sender.name == "s" and sender.schema == SCHEMA
    assert (tmp_path / "data").is_dir() and (tmp_path / "staging").is_dir()
