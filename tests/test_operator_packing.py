"""The stateful operator's input packing: a map task's rows as one Arrow IPC stream per key bucket.

No Spark: the encoded rows are built here the way the SQL step encodes them
(a value column and a null flag per numeric, boolean or timestamp column;
strings, binary, decimals and dates as they are), then packed as the map
tasks pack them and read back as the bucket calls read them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import krishiv_py as kp
from krishiv_py.model.steps import reference_model_for
from krishiv_py.names import BATCH_TS, BUCKET, PACKED, SEQ, TS_VALUE
from krishiv_py.runtime.output import conformed_late
from krishiv_py.stateful import operator as op
from krishiv_py.testing.steps import _placeholder

SCHEMA = (
    "k string, t timestamp, n bigint, small tinyint, x double, ok boolean, "
    "price decimal(12,2), day date, raw binary"
)
UTC = dt.UTC


def _spec() -> Any:
    """A late-event handler receives whole rows, so every column travels to the operator."""
    stream = _placeholder(SCHEMA).watermark("t", 5_000).key_by("k").tumbling_window(60_000)
    handled = stream.with_late_event_handler(kp.SideOutputLateEventHandler())
    recipe = handled.agg(kp.count(kp.col("*"))).lower(lowering="stateful")
    assert recipe.stateful is not None
    return recipe.stateful.operator


def _rows() -> pa.Table:
    """Exact rows with a null in every column, extremes and times past pandas' year 2262."""
    return pa.table(
        {
            "k": pa.array(["a", None, "b", "a", "c"]),
            "t": pa.array(
                [
                    dt.datetime(2027, 1, 1, tzinfo=UTC),
                    dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
                    None,
                    dt.datetime(1, 1, 1, tzinfo=UTC),
                    dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "n": pa.array([2**63 - 1, None, -(2**63), 0, 7], pa.int64()),
            "small": pa.array([127, -128, None, 0, 1], pa.int8()),
            "x": pa.array([float("nan"), -0.0, None, float("inf"), 1.5]),
            "ok": pa.array([True, None, False, True, False]),
            "price": pa.array(
                [Decimal("9999999999.99"), None, Decimal("-0.01"), Decimal(0), None], pa.decimal128(12, 2)
            ),
            "day": pa.array([dt.date(1, 1, 1), None, dt.date(9999, 12, 31), dt.date(2027, 1, 1), None]),
            "raw": pa.array([b"\x00", None, b"", b"xyz", b"\xff" * 3]),
        }
    )


def _encode(spec: Any, rows: pa.Table, buckets: list[int], ts_us: list[int | None]) -> pa.Table:
    """``rows`` as the SQL step hands them to the packer (Spark gives timestamps the session's zone)."""
    cols: dict[str, Any] = {BUCKET: pa.array(buckets, pa.int32())}
    for c in spec.columns:
        column = rows.column(c.name).combine_chunks()
        if pa.types.is_timestamp(c.type):
            column = column.cast(pa.timestamp("us", tz="America/New_York"))
        cols[c.value] = column
    cols[TS_VALUE] = pa.array(ts_us, pa.int64())
    cols[SEQ] = pa.array(np.arange(len(buckets), dtype=np.int64) + 100)
    return pa.table(cols)


def _frames(packed: list[pa.RecordBatch], bucket: int) -> list[pd.DataFrame]:
    """The pandas frames Spark would hand bucket ``bucket``'s call (with a tick row)."""
    table = pa.Table.from_batches(packed)
    frame = table.filter(pc.equal(table.column(BUCKET), pa.scalar(bucket, pa.int32()))).to_pandas()
    tick = pd.DataFrame({BUCKET: [bucket], PACKED: [None]})
    return [frame, tick]


def test_packed_rows_arrive_exact_in_their_bucket() -> None:
    spec = _spec()
    rows = _rows()
    buckets = [3, 1, 3, 0, 1]
    ts_us = [1_000, None, -5, 2**62, 0]
    encoded = _encode(spec, rows, buckets, ts_us)
    # Two Arrow batches from Spark, packed together: one stream per bucket.
    packed = list(op.pack_rows(spec, encoded.to_batches(max_chunksize=2)))
    assert len(packed) == 2 and sorted(packed[0].column(0).to_numpy().tolist()) == [0, 1, 3]
    # Then the highest event time, to every bucket (one watermark with a fixed lag: it fires ahead).
    assert packed[1].column(0).to_pylist() == list(range(spec.buckets))
    for bucket in range(spec.buckets):
        assert op.decode_input(spec, _frames(packed, bucket)).highest_us == (2**62,)
    for bucket in (0, 1, 3):
        got = op.decode_input(spec, _frames(packed, bucket)).rows
        mine = [i for i, b in enumerate(buckets) if b == bucket]
        want = rows.take(pa.array(mine))
        assert got.select(rows.column_names).schema == rows.schema
        for name in rows.column_names:  # repr: NaN equals NaN, -0.0 differs from 0.0
            assert repr(got.column(name).to_pylist()) == repr(want.column(name).to_pylist()), name
        assert got.column(BATCH_TS).to_pylist() == [ts_us[i] for i in mine]
        assert got.column(SEQ).to_pylist() == [100 + i for i in mine]


def test_a_tick_alone_is_an_empty_batch_of_the_input_schema() -> None:
    spec = _spec()
    got = op.decode_input(spec, [pd.DataFrame({BUCKET: [2], PACKED: [None]})]).rows
    assert got.num_rows == 0
    assert got.schema.names == [*(c.name for c in spec.columns), BATCH_TS, SEQ]


def test_a_map_task_packs_again_past_its_row_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec()
    rows = pa.concat_tables([_rows()] * 4)
    encoded = _encode(spec, rows, [i % 2 for i in range(20)], list(range(20)))
    monkeypatch.setattr(op, "PACK_ROWS", 8)
    packed = list(op.pack_rows(spec, encoded.to_batches(max_chunksize=5)))
    assert len(packed) == 3  # 10 rows held, then the other 10, then the highest time of all
    assert op.decode_input(spec, _frames(packed, 7)).highest_us == (19,)
    got = op.decode_input(spec, _frames(packed, 1)).rows
    assert got.column(SEQ).to_pylist() == [100 + i for i in range(1, 20, 2)]
    assert op.decode_input(spec, _frames(packed, 0)).rows.num_rows == 10


# --- on-time rows merged per key and pane in the map task ---------------------------------


def _keyed_rows(ts_ms: list[int | None]) -> tuple[pa.Table, list[int], list[int | None]]:
    keys = ["a", "b", "c", "a", "b", "a", None, "c"]
    rows = pa.concat_tables([_rows(), _rows()]).slice(0, len(ts_ms))
    rows = rows.set_column(0, "k", pa.array(keys[: len(ts_ms)]))
    buckets = [{"a": 0, "b": 1, "c": 1, None: 2}[k] for k in keys[: len(ts_ms)]]
    return rows, buckets, [None if t is None else t * 1000 for t in ts_ms]


def _run(spec: Any, batch: pa.Table, merged: pa.Table | None, watermark: int) -> list[dict[str, Any]]:
    """The bucket's step at ``watermark``, then the end of input: every window's final result."""
    from krishiv_py.plan.watermarks import END_OF_TIME_MS

    state, first = spec.kernel.step(None, batch, watermark, 0, merged=merged)
    _, last = spec.kernel.step(state, batch.slice(0, 0), END_OF_TIME_MS, 0)
    rows = pa.concat_tables([first.results, last.results]).to_pylist()
    return sorted(rows, key=repr)


def test_a_map_task_merges_its_on_time_rows_and_the_bucket_gets_the_same_windows() -> None:
    spec = _spec()
    watermark = 120_000
    ts = [130_000, 125_000, 60_000, 179_999, None, 120_000, 200_000, 119_999]
    rows, buckets, ts_us = _keyed_rows(ts)
    encoded = _encode(spec, rows, buckets, ts_us)
    plain = list(op.pack_rows(spec, encoded.to_batches(max_chunksize=3)))
    packed = list(
        op.pack_rows(spec, encoded.to_batches(max_chunksize=3), merge_under=lambda: (True, watermark))
    )
    on_time = {i for i, t in enumerate(ts) if t is not None and t >= watermark}
    for bucket in (0, 1, 2):
        mine = [i for i, b in enumerate(buckets) if b == bucket]
        got = op.decode_input(spec, _frames(packed, bucket))
        assert got.rows.column(SEQ).to_pylist() == [100 + i for i in mine if i not in on_time]
        merged_here = [i for i in mine if i in on_time]
        if merged_here:
            assert got.merged is not None and got.merged_under == {watermark}
            assert pc.sum(got.merged.column("__kp_rows")).as_py() == len(merged_here)
            assert int(got.merged_delays.sum()) == len(merged_here)  # the profile counts merged rows
        else:
            assert got.merged is None and got.merged_under == frozenset()
        got.check_watermark(watermark)
        whole = op.decode_input(spec, _frames(plain, bucket))
        assert whole.merged is None
        assert _run(spec, got.rows, got.merged, watermark) == _run(spec, whole.rows, None, watermark)
    assert spec.profile_lag_ms is not None


def test_partials_merged_by_two_map_tasks_combine_in_their_bucket() -> None:
    """Each task's merge may take another path (keys in order or not): the columns line up all the same."""
    stream = _placeholder(SCHEMA).watermark("t", 5_000).key_by("k").tumbling_window(60_000)
    aggs = [kp.count(kp.col("*")), kp.min(kp.col("n")), kp.avg(kp.col("x")), kp.sum(kp.col("n"))]
    recipe = stream.agg(*aggs).lower(lowering="stateful")
    assert recipe.stateful is not None
    spec = recipe.stateful.operator
    watermark = 120_000
    # Task one's keys come in order (a, a, b), task two's do not (b, a, b).
    tasks = [(["a", "a", "b"], [130_000, 131_000, 125_000]), (["b", "a", "b"], [126_000, 132_000, 127_000])]
    merged_packs: list[pa.RecordBatch] = []
    plain_packs: list[pa.RecordBatch] = []
    for keys, ts in tasks:
        rows = _rows().slice(0, 3).set_column(0, "k", pa.array(keys))
        rows = rows.set_column(rows.schema.get_field_index("x"), "x", pa.array([0.5, None, -2.0]))
        encoded = _encode(spec, rows, [0, 0, 0], [t * 1000 for t in ts])
        merged_packs += op.pack_rows(spec, encoded.to_batches(), merge_under=lambda: (True, watermark))
        plain_packs += op.pack_rows(spec, encoded.to_batches())
    got = op.decode_input(spec, _frames(merged_packs, 0))
    assert got.merged is not None and got.rows.num_rows == 0
    assert np.sort(got.merged.column("__kp_rows").to_numpy()).tolist() == [1, 1, 2, 2]
    whole = op.decode_input(spec, _frames(plain_packs, 0))
    assert whole.merged is None and whole.rows.num_rows == 6
    assert _run(spec, got.rows, got.merged, watermark) == _run(spec, whole.rows, None, watermark)


def test_a_map_task_that_cannot_learn_the_watermark_packs_rows_only() -> None:
    spec = _spec()
    rows, buckets, ts_us = _keyed_rows([130_000, 125_000, 60_000])
    encoded = _encode(spec, rows, buckets, ts_us)
    packed = list(op.pack_rows(spec, encoded.to_batches(), merge_under=lambda: (False, None)))
    got = [op.decode_input(spec, _frames(packed, b)) for b in (0, 1)]
    assert [g.merged for g in got] == [None, None] and [g.rows.num_rows for g in got] == [1, 2]


def test_partials_merged_under_another_watermark_stop_the_bucket() -> None:
    spec = _spec()
    rows, buckets, ts_us = _keyed_rows([130_000, 125_000])
    encoded = _encode(spec, rows, buckets, ts_us)
    packed = list(op.pack_rows(spec, encoded.to_batches(), merge_under=lambda: (True, None)))
    got = op.decode_input(spec, _frames(packed, 0))
    got.check_watermark(None)
    with pytest.raises(kp.KrishivError, match="merged under watermark None"):
        got.check_watermark(120_000)


def test_a_map_task_reads_the_watermark_of_its_micro_batch(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    from krishiv_py.checkpoint import CheckpointLayout
    from krishiv_py.runtime.map_watermark import BATCH_ID_PROPERTY, BatchWatermark, local_path

    offsets = tmp_path / "offsets"
    offsets.mkdir()
    (offsets / "7").write_text('v1\n{"batchWatermarkMs":125000,"batchTimestampMs":1}\n{"logOffset":7}\n')
    (offsets / "8").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n-\n')
    (offsets / "9").write_text("v2\n{}\n")

    class Task:
        def __init__(self, batch: str | None) -> None:
            self.batch = batch

        def getLocalProperty(self, key: str) -> str | None:
            return self.batch if key == BATCH_ID_PROPERTY else None

    under = BatchWatermark(checkpoint=CheckpointLayout(str(tmp_path)), shift_ms=5_000)
    assert under() == (False, None)  # not in a task
    for batch, want in [
        ("7", (True, 120_000)),
        ("8", (True, None)),
        ("9", (False, None)),
        ("10", (False, None)),
    ]:
        monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda b=batch: Task(b)))
        assert under() == want, batch
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Task(None)))
    assert under() == (False, None)  # a task outside a micro-batch
    assert BatchWatermark(checkpoint=None, streaming=False)() == (
        True,
        None,
    )  # bounded: none until the end
    assert BatchWatermark(checkpoint=CheckpointLayout("hdfs://nn/ckpt"))() == (False, None)
    assert local_path("file:///tmp/x") == "/tmp/x" and local_path("file:/tmp/x") == "/tmp/x"
    assert local_path("s3a://bucket/x") is None and local_path("/tmp/x") == "/tmp/x"


def test_an_operator_that_reads_no_input_column_still_reports_its_late_rows() -> None:
    """A global count(*) without a late-event handler sends no input column; late rows are still counted."""
    stream = _placeholder(SCHEMA).watermark("t", 0).tumbling_window(10)
    recipe = stream.agg(kp.count(kp.col("*"))).lower(lowering="stateful")
    assert recipe.stateful is not None
    spec = recipe.stateful.operator
    assert spec.columns == ()
    batch = pa.table({BATCH_TS: pa.array([None, 5_000], pa.int64()), SEQ: pa.array([0, 1], pa.int64())})
    _, out = spec.kernel.step(None, batch, 20, 0)
    late = conformed_late(op._late_rows(spec, batch, out, 20), spec.late_layout)
    assert late.to_pylist() == [
        {"classification": "invalid", "watermark_ms": 20},
        {"classification": "very_late", "watermark_ms": 20},
    ]


def test_an_input_column_named_as_a_late_table_column_is_listed_beside_it() -> None:
    """A window's input column ``classification`` reaches the handler as ``classification_input``
    (the row's own value) beside the classification, as the model lists it."""
    schema = "k string, t bigint, classification string, classification_input string"
    stream = _placeholder(schema).watermark("t", 0).key_by("k").tumbling_window(10)
    recipe = (
        stream.with_late_event_handler(kp.CountingLateEventHandler())
        .agg(kp.count(kp.col("t")).alias("n"))
        .lower(lowering="stateful")
    )
    assert recipe.stateful is not None
    spec = recipe.stateful.operator
    row = {"k": "a", "t": 5, "classification": "mine", "classification_input": "also mine"}
    batch = pa.table(
        {
            **{c.name: pa.array([row[c.name]], c.type) for c in spec.row_columns},
            BATCH_TS: pa.array([5_000], pa.int64()),
            SEQ: pa.array([0], pa.int64()),
        }
    )
    _, out = spec.kernel.step(None, batch, 20, 0)
    late = conformed_late(op._late_rows(spec, batch, out, 20), spec.late_layout)
    assert late.schema == spec.handed_late_schema
    listed = {
        "k": "a",
        "t": 5,
        "classification_input_input": "mine",  # (its first new name is an input column's)
        "classification_input": "also mine",
        "classification": "very_late",
        "watermark_ms": 20,
    }
    assert late.to_pylist() == [listed]
    model = reference_model_for(stream.agg(kp.count(kp.col("t")).alias("n")).plan)
    model.send([{"k": "a", "t": 100, "classification": "x", "classification_input": "y"}])
    model.send([row])
    assert model.late_events == [{**listed, "watermark_ms": 100}]


# --- firing in the micro-batch that moves the watermark (the glue, without Spark) -------------


def _bucket_table(packed: list[pa.RecordBatch], bucket: int) -> pa.Table:
    table = pa.Table.from_batches(packed)
    return table.filter(pc.equal(table.column(BUCKET), pa.scalar(bucket, pa.int32())))


def _highest_only(spec: Any, highest_us: int) -> list[pa.RecordBatch]:
    """A map task's packed values when all it sends is its highest event time (no row of its own
    is in the buckets looked at)."""
    marker = op.HIGHEST + highest_us.to_bytes(8, "little", signed=True)
    return [
        pa.RecordBatch.from_pydict(
            {
                BUCKET: pa.array(range(spec.buckets), pa.int32()),
                PACKED: pa.array([marker] * spec.buckets, pa.binary()),
            }
        )
    ]


def test_a_bucket_fires_what_the_micro_batchs_highest_time_makes_due_and_writes_only_changes(
    tmp_path: Any,
) -> None:
    from krishiv_py.stateful.versioned import VersionedBlobs

    spec = _spec()  # 60 s tumbling windows per key, a 5 s lag
    assert spec.fires_ahead and spec.fire_lag_ms == 5_000
    root = str(tmp_path)

    def run(batch_id: int, packed: list[pa.RecordBatch], bucket: int, watermark: int | None) -> Any:
        payload = op.run_bucket_files(
            spec, (bucket,), _bucket_table(packed, bucket), batch_id, lambda: (watermark, 0), root
        )
        return op.decode_payloads(bytes(b) for b in payload.column("__kp_payload").to_pylist() if b)

    first = list(op.pack_rows(spec, _encode(spec, _rows().slice(0, 1), [0], [1_000_000]).to_batches()))
    opened = run(1, first, 0, None)
    assert opened is not None and opened.results.num_rows == 0  # 1 s - 5 s: no watermark yet
    quiet = run(1, first, 1, None)  # another bucket: only the highest time, nothing to hold
    assert quiet is not None and quiet.results.num_rows == 0
    assert VersionedBlobs(root, 0).versions() == [1] and VersionedBlobs(root, 1).versions() == []

    # 30 s: the watermark after it is 25 s, before the window's end; the state stays as it was.
    assert run(2, _highest_only(spec, 30_000_000), 0, None).results.num_rows == 0
    assert VersionedBlobs(root, 0).versions() == [1]

    # 70 s: the micro-batch runs at 25 s, leaves 65 s behind, and the window [0, 60 s) fires in it.
    fired = run(3, _highest_only(spec, 70_000_000), 0, 25_000)
    assert fired.results.num_rows == 1
    assert VersionedBlobs(root, 0).versions() == [1, 3] and VersionedBlobs(root, 0).load_before(4) is None


def _with_ticks(rows: pa.Table, ticks: list[int]) -> list[pa.RecordBatch]:
    """Encoded rows and tick rows as the ``one-task`` carrier's union hands them over."""
    from krishiv_py.names import TICK

    flagged = rows.append_column(TICK, pa.nulls(rows.num_rows, pa.bool_()))
    woken = {
        f.name: pa.nulls(len(ticks), f.type) if f.name != BUCKET else pa.array(ticks, pa.int32())
        for f in flagged.schema
    }
    woken[TICK] = pa.array([True] * len(ticks))
    return [*flagged.to_batches(), *pa.table(woken, schema=flagged.schema).to_batches()]


def _results(out: Any) -> list[dict[str, Any]]:
    tables = [pa.Table.from_batches([b]) for b in out]
    payloads = [bytes(b) for t in tables for b in t.column("__kp_payload").to_pylist() if b]
    decoded = op.decode_payloads(payloads)
    return [] if decoded is None else decoded.results.to_pylist()


def test_the_one_task_carrier_packs_and_runs_in_one_call_as_the_two_calls_do(tmp_path: Any) -> None:
    """``run_one_task`` equals ``pack_rows`` then ``run_buckets_files``, ticks included: a bucket a tick
    alone wakes fires what the watermark makes due."""
    spec = _spec()
    rows = _encode(spec, _rows().slice(0, 1), [0], [1_000_000])  # bucket 0, 1 s: window [0, 60 s)

    def two_calls(batch_id: int, batches: list[pa.RecordBatch], ticks: list[int], wm: int | None) -> Any:
        packed = list(op.pack_rows(spec, batches))
        if ticks:
            packed.append(
                pa.RecordBatch.from_pydict(
                    {BUCKET: pa.array(ticks, pa.int32()), PACKED: pa.nulls(len(ticks), pa.binary())}
                )
            )
        return _results(op.run_buckets_files(spec, packed, batch_id, lambda: (wm, 0), str(tmp_path / "two")))

    def one_call(batch_id: int, batches: list[pa.RecordBatch], wm: int | None) -> Any:
        return _results(op.run_one_task(spec, batches, batch_id, lambda: (wm, 0), str(tmp_path / "one")))

    assert one_call(1, _with_ticks(rows, []), None) == two_calls(1, rows.to_batches(), [], None) == []
    no_rows = rows.slice(0, 0)
    fired = one_call(2, _with_ticks(no_rows, [0]), 70_000)  # only a tick for bucket 0, at 70 s
    assert fired == two_calls(2, [], [0], 70_000)
    assert len(fired) == 1


def _join_spec() -> Any:
    """A window join whose sides have watermarks of 5 s (left) and 1 s (right)."""
    from krishiv_py.api.stream import placeholder

    left = placeholder("k string, t bigint, a bigint", "left").watermark("t", 5_000)
    right = placeholder("k string, t bigint, b bigint", "right").watermark("t", 1_000)
    joined = left.key_by("k").tumbling_window(10_000).join(right.key_by("k").tumbling_window(10_000))
    recipe = joined.lower(lowering="stateful")
    assert recipe.stateful is not None
    return recipe.stateful.operator


def _join_rows(spec: Any, rows: list[tuple[str, str, int]]) -> list[pa.RecordBatch]:
    """Encoded ``(side, key, t ms)`` rows of ``spec``'s join, all in bucket 0, packed by a map task."""
    from krishiv_py.names import JOIN_SIDE

    table = pa.table(
        {
            JOIN_SIDE: [side for side, _, _ in rows],
            "k": [k for _, k, _ in rows],
            "t": pa.array([t if side == "left" else None for side, _, t in rows], pa.int64()),
            "a": pa.array([1 if side == "left" else None for side, _, _ in rows], pa.int64()),
            "t_right": pa.array([t if side == "right" else None for side, _, t in rows], pa.int64()),
            "b": pa.array([2 if side == "right" else None for side, _, _ in rows], pa.int64()),
        }
    )
    encoded = _encode(spec, table, [0] * len(rows), [t * 1000 for _, _, t in rows])
    return list(op.pack_rows(spec, encoded.to_batches()))


def test_a_join_fires_in_the_micro_batch_once_both_sides_rows_move_its_watermark(tmp_path: Any) -> None:
    """Each map task sends the highest event time of each side; a bucket fires at the lower of the
    two sides' ``highest - lag`` when both had rows, else in the next micro-batch as before."""
    spec = _join_spec()
    assert spec.fires_ahead and spec.side_fire_lags_ms == (5_000, 1_000)
    root = str(tmp_path)

    def run(batch_id: int, packed: list[pa.RecordBatch], watermark: int | None) -> list[dict[str, Any]]:
        payload = op.run_bucket_files(
            spec, (0,), _bucket_table(packed, 0), batch_id, lambda: (watermark, 0), root
        )
        out = op.decode_payloads(bytes(b) for b in payload.column("__kp_payload").to_pylist() if b)
        return [] if out is None else out.results.to_pylist()

    first = _join_rows(spec, [("left", "a", 1_000), ("right", "a", 2_000)])
    assert op.decode_input(spec, _frames(first, 5)).highest_us == (1_000_000, 2_000_000)
    assert run(1, first, None) == []
    # Only the left side moves (30 s - 5 s): the right side's watermark is unknown here, nothing fires.
    alone = _join_rows(spec, [("left", "b", 30_000)])
    assert op.decode_input(spec, _frames(alone, 5)).highest_us == (30_000_000, None)
    assert run(2, alone, 0) == []
    # Both: left 30 s - 5 s, right 12 s - 1 s: the watermark after it is at least 11 s; [0, 10 s) fires.
    both = _join_rows(spec, [("left", "c", 30_000), ("right", "c", 12_000)])
    fired = run(3, both, 0)
    assert [(r["k"], r["window_start"], r["a"], r["b"]) for r in fired] == [("a", 0, 1, 2)]
    # The lower of the two: left 60 s - 5 s would close [40 s, 50 s), right 50.5 s - 1 s does not.
    assert run(4, _join_rows(spec, [("left", "e", 41_000), ("right", "e", 42_000)]), 11_000) == []
    assert run(5, _join_rows(spec, [("left", "f", 60_000), ("right", "f", 50_500)]), 11_000) == []
    closed = run(6, _join_rows(spec, [("right", "g", 51_500), ("left", "g", 60_000)]), 49_500)
    assert [(r["k"], r["window_start"] // 1000) for r in closed] == [("e", 40_000)]  # (µs)
