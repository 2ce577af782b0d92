"""Kafka records to Arrow: the decoding kernel, pure functions with no Kafka client and no Spark.

A batch of records of one partition arrives as parallel lists (values, keys,
offsets, timestamps in ms); :func:`records_to_batch` turns it into one
``pyarrow.RecordBatch`` of the source's columns: the value's fields, then
the Kafka columns (:data:`krishiv_py.names.KAFKA_COLUMNS`).

JSON values are decoded for the whole batch at once by ``pyarrow.json``
against the value's schema (fields not in the schema are ignored, missing
fields are null). A record that does not decode — not JSON, not an object,
a field of the wrong type, a null or empty value — becomes an *invalid
row*: its value fields are null, its raw bytes are in ``kafka_value``, and
with ``event_time="kafka_timestamp"`` its timestamp is null too, so the
row's event time is null and the job counts it and hands it to the
late-event handler (SPEC §5). Only a batch that holds a bad record is
decoded again, in halves, until each bad record stands alone: a batch of
``n`` records with ``b`` bad ones costs ``O(b log n)`` extra parses.

Examples
--------
>>> import pyarrow as pa
>>> schema = pa.schema([("user", pa.string()), ("n", pa.int64())])
>>> values = [b'{"user": "a", "n": 1}', b"not json", b'{"user": "b", "n": "x"}', b'{"n": 4}']
>>> table, bad = decode_json(values, schema)
>>> table.to_pylist()
[{'user': 'a', 'n': 1}, {'user': None, 'n': None}, {'user': None, 'n': None}, {'user': None, 'n': 4}]
>>> bad.tolist()
[False, True, True, False]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from krishiv_py.names import KAFKA_COLUMNS

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["decode_json", "records_to_batch"]


def decode_json(
    values: Sequence[bytes | None] | pa.Array[Any], schema: pa.Schema
) -> tuple[pa.Table, np.ndarray]:
    """Decode JSON ``values`` against ``schema``: the rows (null where bad) and a mask of bad ones.

    Vectorized: the values become one Arrow binary array, raw newlines in
    them become spaces (whitespace in JSON; inside a string they must be
    escaped) and they are joined by newlines into one text, all in Arrow.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    arr: Any = values if isinstance(values, pa.Array) else pa.array(values, type=pa.binary())
    empty: Any = pc.fill_null(pc.equal(pc.binary_length(arr), pa.scalar(0, pa.int32())), True)
    bad: np.ndarray = np.array(empty.to_numpy(zero_copy_only=False), dtype=bool)  # a writable copy
    good = np.flatnonzero(~bad)
    clean = pc.replace_substring(pc.replace_substring(arr, b"\n", b" "), b"\r", b" ")
    parsed: list[tuple[np.ndarray, pa.Table]] = []
    _decode_range(clean if len(good) == len(arr) else clean.take(good), good, schema, parsed, bad)
    if not parsed:
        return _nulls(schema, len(arr)), bad
    rows = pa.concat_tables([t for _, t in parsed])
    where = np.concatenate([idx for idx, _ in parsed])
    if len(where) == len(arr):  # every record decoded: the common case, no scatter
        return rows, bad
    # Scatter the decoded rows to their places; bad records get a null row.
    take = np.full(len(arr), -1, dtype=np.int64)
    take[where] = np.arange(len(where))
    indices = pa.array(take, type=pa.int64(), mask=take < 0)
    return rows.take(indices), bad


def _decode_range(
    values: pa.Array[Any],
    where: np.ndarray,
    schema: pa.Schema,
    out: list[tuple[np.ndarray, pa.Table]],
    bad: np.ndarray,
) -> None:
    """Decode ``values`` (records ``where`` of the batch, none null); on a failure split in halves.

    A value that is only whitespace gives no row, so its range fails too
    and it ends up alone, and bad.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not len(values):
        return
    lines = pa.ListArray.from_arrays(pa.array([0, len(values)], type=pa.int32()), values)
    joined: Any = pc.binary_join(lines, b"\n")
    text = joined[0].as_buffer()
    try:
        table = pj.read_json(
            cast(Any, pa.BufferReader(text)),
            read_options=pj.ReadOptions(block_size=max(1 << 20, text.size + 1)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
        ok = table.num_rows == len(values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = False
    if ok:
        out.append((where, table.select(schema.names).cast(schema)))
    elif len(values) == 1:
        bad[where[0]] = True
    else:
        half = len(values) // 2
        _decode_range(values.slice(0, half), where[:half], schema, out, bad)
        _decode_range(values.slice(half), where[half:], schema, out, bad)


def _nulls(schema: pa.Schema, n: int) -> pa.Table:
    import pyarrow as pa

    return pa.table({f.name: pa.nulls(n, f.type) for f in schema}, schema=schema)


def records_to_batch(
    *,
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps_ms: Sequence[int | None],
    value_schema: pa.Schema,
    value_format: Literal["json", "raw"],
    key_format: Literal["string", "raw"],
    null_time_when_bad: bool,
) -> pa.RecordBatch:
    """One batch of records as the source's columns (value fields, then the Kafka columns)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    arr = pa.array(values, type=pa.binary())
    if value_format == "json":
        decoded, bad = decode_json(arr, value_schema)
        columns = [c.combine_chunks() for c in decoded.columns]
    else:
        bad = np.zeros(n, dtype=bool)
        columns = [arr]
    ts = _millis(timestamps_ms)
    ts_mask = (ts < 0) | bad if null_time_when_bad else ts < 0
    offs = np.arange(offsets.start, offsets.stop) if isinstance(offsets, range) else np.asarray(offsets)
    columns += [
        _keys(keys, key_format),
        pa.array([topic] * n, type=pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offs.astype(np.int64, copy=False)),
        pa.array(ts * 1000, type=pa.timestamp("us", tz="UTC"), mask=ts_mask),
        # The raw bytes of the bad records only.
        pc.if_else(pa.array(bad), arr, pa.scalar(None, pa.binary()))
        if bad.any()
        else pa.nulls(n, pa.binary()),
    ]
    names = [*value_schema.names, *KAFKA_COLUMNS]
    return pa.RecordBatch.from_arrays(columns, names=names)


def _millis(timestamps_ms: Sequence[int | None]) -> np.ndarray:
    """Record timestamps as int64 ms, -1 where there is none."""
    import numpy as np

    try:
        ts = np.asarray(timestamps_ms, dtype=np.int64)
    except TypeError:  # a None among them
        return np.fromiter((-1 if t is None or t < 0 else t for t in timestamps_ms), dtype=np.int64)
    return np.where(ts < 0, -1, ts)


def _keys(keys: Sequence[bytes | None], key_format: Literal["string", "raw"]) -> pa.Array[Any]:
    import pyarrow as pa

    raw = pa.array(keys, type=pa.binary())
    if key_format == "raw":
        return raw
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decode each key, replacing what is not
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys], pa.string())
