"""Feed a memory stream: validated, atomic, durable batches.

Each :meth:`Sender.send` is one batch and one step of the stream. The batch
is validated against the schema first — a bad batch raises
:class:`~krishiv_py.errors.SchemaError` and writes nothing — then written as
one Parquet file: into a staging directory, flushed to disk, and renamed
into the stream's directory. A reader therefore never sees half a batch, and
a batch whose ``send`` returned survives a crash of the process.

Watermark promises (:meth:`Sender.advance_watermark`) and end of input
(:meth:`Sender.close`) travel the same way, as one-row marker batches that
the lowering turns into watermark movements without adding rows to any
window.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from krishiv_py.errors import SchemaError, SourceClosedError
from krishiv_py.names import ROW_KIND, SEQ, WM
from krishiv_py.plan.nodes import MemorySource
from krishiv_py.plan.watermarks import END_OF_TIME_MS, MIN_EVENT_MS
from krishiv_py.types import DataType, Schema, is_valid_text

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.runtime.spool import Retention, Spool

__all__ = ["Sender", "memory_source"]

KIND_DATA, KIND_WATERMARK, KIND_CLOSE = 0, 1, 2
_FILE = re.compile(r"^batch-(\d{12})-(data|watermark|close)\.parquet$")
_KIND_NAMES = {KIND_DATA: "data", KIND_WATERMARK: "watermark", KIND_CLOSE: "close"}
#: Rows of one batch get sequence numbers batch << 32 | row (arrival order).
_ROW_BITS = 32


class Sender:
    """The writing end of :meth:`Session.memory_stream`.

    Examples
    --------
        import krishiv_py as kp, datetime as dt
        stream, sender = session.memory_stream("k string, t timestamp")
        sender.send([{"k": "a", "t": dt.datetime(2024, 1, 1)}])  # -> 0, its sequence number
    """

    def __init__(self, *, name: str, schema: Schema, path: str, retention: Retention = "all") -> None:
        from krishiv_py.runtime.spool import Spool

        self._name = name
        self._schema = schema
        self._data_dir = os.path.join(path, "data")
        self._staging = os.path.join(path, "staging")
        os.makedirs(self._data_dir, exist_ok=True)
        os.makedirs(self._staging, exist_ok=True)
        self._lock = threading.Lock()
        self._last_mtime_ns = 0
        #: Which batches stay on disk (see :mod:`krishiv_py.runtime.spool`).
        self._spool = Spool(path, retention)
        self._next_seq, self._closed = self._scan()

    @property
    def name(self) -> str:
        return self._name

    @property
    def schema(self) -> Schema:
        return self._schema

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def spool(self) -> Spool:
        """Where the batches live on disk (what a job reading this stream checks in with)."""
        return self._spool

    @property
    def batches_sent(self) -> int:
        """Number of batches written so far (data and marker batches), deleted ones included."""
        return self._next_seq

    @property
    def retention(self) -> Retention:
        """``"all"`` (keep every batch) or ``"committed"`` (delete once every reading job committed it)."""
        return self._spool.retention

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Sender {self._name!r} {state}, {self._next_seq} batches sent, {self._schema!r}>"

    def _repr_html_(self) -> str:
        from krishiv_py._display import html_card

        rows = [
            ("stream", self._name),
            ("state", "closed (end of input)" if self._closed else "open"),
            ("batches sent", str(self._next_seq)),
            ("columns", ", ".join(f"{f.name} {f.dtype.name}" for f in self._schema)),
        ]
        return html_card("krishiv_py Sender", rows)

    def send(self, data: Any) -> int:
        """Validate and write one batch; returns its sequence number.

        Parameters
        ----------
        data
            A list of dicts (one per row, every schema column present, no
            others), a pandas DataFrame, or a pyarrow Table/RecordBatch.

        Raises
        ------
        SchemaError
            The batch does not match the schema (the message names the
            column and row); nothing was written.
        SourceClosedError
            ``close()`` was called before.
        """
        table = to_arrow_batch(data, self._schema)
        return self._write(table, KIND_DATA, None)

    def advance_watermark(self, ts_ms: int) -> int:
        """Promise that no event older than ``ts_ms`` follows from this source.

        The source's watermark becomes ``max(current, ts_ms)``; no row is
        added to any window.
        """
        if isinstance(ts_ms, bool) or not isinstance(ts_ms, int):
            raise SchemaError(f"advance_watermark takes epoch milliseconds as int, got {ts_ms!r}")
        if not MIN_EVENT_MS <= ts_ms < END_OF_TIME_MS:
            raise SchemaError(f"advance_watermark({ts_ms}) is outside the supported time range")
        return self._write(self._marker(ts_ms), KIND_WATERMARK, ts_ms)

    def close(self) -> None:
        """End of input: the watermark jumps to +infinity and every open window fires."""
        if self._closed:
            return
        self._write(self._marker(END_OF_TIME_MS), KIND_CLOSE, END_OF_TIME_MS)

    # --- internals -------------------------------------------------------------

    def _scan(self) -> tuple[int, bool]:
        # Retention may have deleted every file: the manifest keeps the counters.
        manifest = self._spool.manifest()
        seqs, closed = [manifest.batches_sent - 1], manifest.closed
        for fname in os.listdir(self._data_dir):
            m = _FILE.match(fname)
            if m:
                seqs.append(int(m.group(1)))
                closed = closed or m.group(2) == "close"
                # A resumed sender must stay after the batches already written,
                # even those whose modification time ran ahead of the clock.
                mtime = os.stat(os.path.join(self._data_dir, fname)).st_mtime_ns
                self._last_mtime_ns = max(self._last_mtime_ns, mtime)
        return max(seqs) + 1, closed

    def _marker(self, ts_ms: int) -> pa.Table:
        import pyarrow as pa

        arrays = [pa.nulls(1, f.dtype.to_arrow()) for f in self._schema]  # type: ignore[call-overload]
        return pa.Table.from_arrays(arrays, schema=_nullable(self._schema.to_arrow()))

    def nudge(self) -> None:
        """Add a file of no rows to the stream: every job reading it runs one micro-batch of no rows.

        No batch is sent (``batches_sent`` stays), and a closed stream takes
        it too. A job restarted on its checkpoint calls it when the
        micro-batch before the restart moved the watermark: Spark fires what
        that watermark makes due only in a micro-batch of its own run, and
        with no input left it would run none.
        """
        with self._lock:
            fname = f"nudge-{time.time_ns():020d}.parquet"
            self._put(self._marker(0).slice(0, 0), KIND_DATA, None, 0, fname)

    def _write(self, table: pa.Table, kind: int, wm: int | None) -> int:
        with self._lock:
            if self._closed:
                raise SourceClosedError(f"source {self._name!r} is closed; it takes no more data")
            seq = self._next_seq
            self._put(table, kind, wm, seq, f"batch-{seq:012d}-{_KIND_NAMES[kind]}.parquet")
            self._next_seq = seq + 1
            self._closed = kind == KIND_CLOSE
        self._spool.maybe_clean()  # retention: drop what every reading job has committed
        return seq

    def _put(self, table: pa.Table, kind: int, wm: int | None, seq: int, fname: str) -> None:
        """Write ``table`` with its hidden columns as the spool's file ``fname`` (under the lock)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = table.num_rows
        table = (
            table.append_column(ROW_KIND, pa.array(np.full(n, kind, dtype=np.int8)))
            .append_column(WM, pa.array([wm] * n, pa.int64()) if wm is not None else pa.nulls(n, pa.int64()))
            .append_column(SEQ, pa.array(np.arange(n, dtype=np.int64) + (seq << _ROW_BITS)))
        )
        staged = os.path.join(self._staging, fname)
        pq.write_table(table, staged, coerce_timestamps="us", allow_truncated_timestamps=False)
        self._commit(staged, os.path.join(self._data_dir, fname))

    def _commit(self, staged: str, final: str) -> None:
        fd = os.open(staged, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # Spark's file source orders new files by modification time: make it
        # strictly increasing so batches are read in send order.
        mtime = max(time.time_ns(), self._last_mtime_ns + 1_000_000)
        self._last_mtime_ns = mtime
        os.utime(staged, ns=(mtime, mtime))
        os.rename(staged, final)
        dfd = os.open(self._data_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# --- validation -----------------------------------------------------------------


def _nullable(schema: pa.Schema) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(f.name, f.type, True) for f in schema])


def to_arrow_batch(data: Any, schema: Schema) -> pa.Table:
    """Validate ``data`` against ``schema`` and return it as an Arrow table in schema order."""
    import pyarrow as pa

    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return _from_arrow(data, schema)
    if type(data).__module__.startswith("pandas") and hasattr(data, "columns"):
        return _from_pandas(data, schema)
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return _from_rows(data, schema)
    raise SchemaError(
        "send() takes a list of dicts, a pandas DataFrame or a pyarrow Table/RecordBatch, "
        f"got {type(data).__name__}"
    )


def _from_rows(rows: Sequence[Any], schema: Schema) -> pa.Table:
    import pyarrow as pa

    names = schema.names
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise SchemaError(f"row {i}: expected a dict, got {type(row).__name__}")
        extra = [k for k in row if k not in names]
        if extra:
            raise SchemaError(f"row {i}: unknown column {extra[0]!r}; schema columns: {', '.join(names)}")
        missing = [c for c in names if c not in row]
        if missing:
            raise SchemaError(f"row {i}: missing column {missing[0]!r} (use None for a null value)")
    arrays = [_column(f.name, f.dtype, f.nullable, [r[f.name] for r in rows]) for f in schema]
    return pa.Table.from_arrays(arrays, schema=_nullable(schema.to_arrow()))


def _column(name: str, dtype: DataType, nullable: bool, values: list[Any]) -> pa.Array[Any]:
    import pyarrow as pa

    plain = [_plain(v) for v in values]
    for i, (v, p) in enumerate(zip(values, plain, strict=True)):
        if p is None:
            if not nullable:
                raise SchemaError(f"column {name!r}, row {i}: null in a NOT NULL column")
        elif not _accepts(dtype, p):
            raise SchemaError(
                f"column {name!r}, row {i}: {v!r} ({type(v).__name__}) is not a valid {dtype} value"
                + _hint(dtype, v)
            )
    try:
        return pa.array(plain, type=dtype.to_arrow())
    except _conversion_errors() as exc:
        bad = _first_bad_value(plain, dtype.to_arrow())
        if bad is None:
            raise SchemaError(f"column {name!r}: {_reason(exc)}") from None
        i, why = bad
        raise SchemaError(
            f"column {name!r}, row {i}: {values[i]!r} is not a valid {dtype} value: {why}"
        ) from None


def _accepts(dtype: DataType, value: object) -> bool:
    """Python-side type check for dict rows (Arrow would coerce too eagerly)."""
    if dtype.is_timestamp:
        return isinstance(value, _dt.datetime) and not _has_nanos(value)
    if dtype.name == "date":
        return isinstance(value, _dt.date) and not isinstance(value, _dt.datetime)
    if dtype.name == "boolean":
        return isinstance(value, bool)
    if dtype.is_integral:
        return isinstance(value, int) and not isinstance(value, bool)
    if dtype.name in ("double", "float"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if dtype.name == "string":
        return isinstance(value, str) and is_valid_text(value)
    if dtype.name == "binary":
        return isinstance(value, bytes | bytearray)
    # decimal: Arrow checks precision and scale
    if isinstance(value, _decimal.Decimal):
        return value.is_finite()
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: object) -> object:
    """The Python value of a numpy scalar, so that a dict row treats both alike.

    A ``datetime64`` with a time unit becomes a naive (UTC) ``datetime``, one
    with a day unit a ``date``; ``NaT`` is a null. A value with no exact
    Python counterpart (sub-microsecond, out of range, other calendar units,
    ``timedelta64``, complex) is returned unchanged, to be refused.
    """
    import numpy as np

    if not isinstance(value, np.generic):
        return value
    if isinstance(value, np.datetime64):
        return _plain_datetime64(value)
    if isinstance(value, np.timedelta64):  # a np.signedinteger, but not a number of anything
        return value
    if isinstance(value, np.integer | np.floating | np.bool_ | np.str_ | np.bytes_):
        return value.item()
    return value


#: Microseconds per ``datetime64`` time unit; days per date unit.
_MICROS = {
    "h": Fraction(3_600_000_000),
    "m": Fraction(60_000_000),
    "s": Fraction(1_000_000),
    "ms": Fraction(1_000),
    "us": Fraction(1),
    "ns": Fraction(1, 10**3),
    "ps": Fraction(1, 10**6),
    "fs": Fraction(1, 10**9),
    "as": Fraction(1, 10**12),
}
_DAYS = {"D": 1, "W": 7}


def _plain_datetime64(value: Any) -> object:
    import numpy as np

    if np.isnat(value):
        return None
    unit, ticks = _datetime64_ticks(value)
    try:
        if unit in _DAYS:
            return _dt.date(1970, 1, 1) + _dt.timedelta(days=ticks * _DAYS[unit])
        micros = ticks * _MICROS[unit] if unit in _MICROS else None
        if micros is not None and micros.denominator == 1:
            return _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=int(micros))
    except OverflowError:
        pass  # beyond Python's year 1..9999
    return value


def _datetime64_ticks(value: Any) -> tuple[str, int]:
    """The unit of a ``datetime64`` and its value as a count of that unit."""
    import numpy as np

    unit, count = np.datetime_data(value.dtype)
    return unit, int(value.astype(np.int64)) * count


def _hint(dtype: DataType, value: object) -> str:
    import numpy as np

    if isinstance(value, np.datetime64):
        unit, ticks = _datetime64_ticks(value)
        if unit in _MICROS and (ticks * _MICROS[unit]).denominator != 1:
            return " (it has nanoseconds; timestamps keep microseconds)"
        return " (a date needs a day unit, a timestamp a time unit, both within years 1 to 9999)"
    if _has_nanos(value):
        return " (it has nanoseconds; timestamps keep microseconds)"
    if dtype.name == "string" and isinstance(value, str) and not is_valid_text(value):
        return " (it holds a lone surrogate, which is not valid UTF-8 text)"
    return ""


def _has_nanos(value: object) -> bool:
    """pandas Timestamps carry nanoseconds that Arrow would silently truncate."""
    return bool(getattr(value, "nanosecond", 0))


def _conversion_errors() -> tuple[type[Exception], ...]:
    """What pyarrow raises for a value it cannot convert (pyarrow is imported on first use)."""
    import pyarrow as pa

    return (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        TypeError,
        ValueError,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeError):
        return "it holds a lone surrogate, which is not valid UTF-8 text"
    return str(exc.args[0]) if exc.args else type(exc).__name__


def _first_bad_value(values: Sequence[Any], target: pa.DataType) -> tuple[int, str] | None:
    """The first value Arrow cannot convert to ``target`` on its own, and why."""
    import pyarrow as pa

    for i, v in enumerate(values):
        try:
            pa.array([v], type=target, from_pandas=True)
        except _conversion_errors() as exc:
            return i, _reason(exc)
    return None


def _check_unique(columns: Sequence[Any]) -> None:
    seen: set[Any] = set()
    for c in columns:
        if c in seen:
            raise SchemaError(f"column {c!r} appears more than once in the batch")
        seen.add(c)


def _check_columns(columns: Sequence[Any], schema: Schema) -> None:
    """A batch's columns are the schema's, each once, in any order."""
    names = schema.names
    _check_unique(columns)
    extra = [c for c in columns if c not in names]
    if extra:
        raise SchemaError(f"unknown column {extra[0]!r}; schema columns: {', '.join(names)}")
    missing = [c for c in names if c not in columns]
    if missing:
        raise SchemaError(f"missing column {missing[0]!r}")


def _from_arrow(table: pa.Table, schema: Schema) -> pa.Table:
    import pyarrow as pa

    _check_columns(table.column_names, schema)
    arrays = [_cast(f.name, f.dtype, f.nullable, table.column(f.name)) for f in schema]
    return pa.Table.from_arrays(arrays, schema=_nullable(schema.to_arrow()))


def _from_pandas(frame: Any, schema: Schema) -> pa.Table:
    """Convert a DataFrame column by column, so that a failure names its column and row.

    Labels that are not strings are read as ``str(label)``, as Arrow does. An
    ``object`` column holds Python values and is checked value by value like
    a dict row (Arrow's type inference would read ``[1.5, True]`` as doubles);
    pandas' missing values (``None``, ``NaN``, ``NaT``, ``NA``) are nulls in
    every column, as in Arrow's ``from_pandas``.
    """
    import pyarrow as pa

    labels = [c if isinstance(c, str) else str(c) for c in frame.columns]
    _check_columns(labels, schema)
    arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
    for f in schema:
        series = frame.iloc[:, labels.index(f.name)]
        if series.dtype == object:
            values = [None if _is_missing(v) else v for v in series]
            arrays.append(_column(f.name, f.dtype, f.nullable, values))
        else:
            arrays.append(_cast(f.name, f.dtype, f.nullable, _pandas_column(f.name, f.dtype, series)))
    return pa.Table.from_arrays(arrays, schema=_nullable(schema.to_arrow()))


def _pandas_column(name: str, dtype: DataType, series: Any) -> pa.ChunkedArray[Any]:
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(series.to_frame(), preserve_index=False).column(0)
    except _conversion_errors() as exc:
        bad = _first_bad_value(list(series), dtype.to_arrow())
        where = f", row {bad[0]}" if bad else ""
        why = bad[1] if bad else _reason(exc)
        raise SchemaError(
            f"column {name!r}{where}: pandas dtype {series.dtype} cannot be read as {dtype}: {why}"
        ) from None


def _is_missing(value: object) -> bool:
    import pandas as pd

    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and value != value)


def _cast(name: str, dtype: DataType, nullable: bool, column: pa.ChunkedArray[Any]) -> pa.ChunkedArray[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pat

    target = dtype.to_arrow()
    given = column.type
    column = _decoded(column)
    source = column.type
    compatible = (
        source == target
        or (dtype.is_timestamp and pat.is_timestamp(source))
        or (
            dtype.is_numeric
            and (pat.is_integer(source) or pat.is_floating(source) or pat.is_decimal(source))
            and not (dtype.is_integral and pat.is_floating(source))
        )
        or (dtype.name == "string" and (pat.is_string(source) or pat.is_large_string(source)))
        or (dtype.name == "binary" and (pat.is_binary(source) or pat.is_large_binary(source)))
        or (dtype.name == "date" and pat.is_date(source))
        or pat.is_null(source)
    )
    if not compatible:
        first = pc.index(pc.is_valid(column), True).as_py()
        where = f", row {first}" if first >= 0 else ""
        raise SchemaError(f"column {name!r}{where}: expected {dtype}, got Arrow type {given}")
    try:
        out = column.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        row = _first_bad_cast(column, target)
        where = f", row {row}" if row is not None else ""
        raise SchemaError(
            f"column {name!r}{where}: cannot convert {given} to {dtype} exactly: {exc}"
        ) from None
    if not nullable and out.null_count:
        row = pc.index(pc.is_null(out), True).as_py()
        raise SchemaError(f"column {name!r}, row {row}: null in a NOT NULL column")
    return out


def _decoded(column: pa.ChunkedArray[Any]) -> pa.ChunkedArray[Any]:
    """A dictionary-encoded column as its values; string and binary views as plain arrays.

    Then a pandas categorical or an Arrow dictionary column is checked like
    the values it stands for.
    """
    import pyarrow as pa
    import pyarrow.types as pat

    while pat.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pat.is_string_view(column.type):
        column = column.cast(pa.large_string())
    elif pat.is_binary_view(column.type):
        column = column.cast(pa.large_binary())
    return column


def _first_bad_cast(column: pa.ChunkedArray[Any], target: pa.DataType) -> int | None:
    import pyarrow as pa

    flat = column.combine_chunks()
    for i in range(len(flat)):
        try:
            flat.slice(i, 1).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i
    return None


def memory_source(
    sources_dir: str, name: str, generation: int, schema: Schema, retention: Retention = "all"
) -> tuple[MemorySource, Sender]:
    """A memory stream's plan node and its sender, its batches under ``sources_dir``.

    ``generation`` counts the streams made under ``name`` (1: the first); a
    later one gets a directory of its own, so jobs on the earlier one keep
    reading it.
    """
    path = os.path.join(sources_dir, name if generation == 1 else f"{name}.{generation}")
    sender = Sender(name=name, schema=schema, path=path, retention=retention)
    return MemorySource(name=name, schema=schema, path=os.path.join(path, "data")), sender
