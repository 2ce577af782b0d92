"""Table sinks that hold the corrected answer: the changelog contract, DuckDB, Delta, Iceberg, PostgreSQL.

The oracle is the reference model's changelog folded row by row (an emit
sets its window's row, a retraction removes it): after every step the
table must hold exactly that, one row per window.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.sinks import SinkContext
from krishiv_py.tables.changelog import changelog_rows, net_changes, target_for
from krishiv_py.testing import Close, Send, Step, assert_same_rows, run_reference, run_streaming
from krishiv_py.types import Schema

SCHEMA = "k string, t bigint, v bigint"
KEY = ("k", "window_start", "window_end")
Pipeline = Callable[[kp.Stream], kp.Stream]
SinkFactory = Callable[[str], kp.Sink]


def ripple(mode: Any) -> Pipeline:
    """The Ripple seed's example: 10 ms windows, lag 0, allowed lateness 60 (a late event re-fires)."""

    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).key_by("k").tumbling_window(10).allowed_lateness(60).accumulation(mode)
        return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))

    return build


RIPPLE_STEPS: list[Step] = [
    Send([{"k": "a", "t": 191, "v": 1}, {"k": "a", "t": 200, "v": 2}]),  # [190, 200) fires
    Send([{"k": "a", "t": 195, "v": 10}, {"k": "a", "t": 130, "v": 20}, {"k": "a", "t": 280, "v": 30}]),
    Close(),
]


def sessions(s: kp.Stream) -> kp.Stream:
    """Sessions of gap 10 with allowed lateness: a late event merges two fired sessions."""
    w = s.watermark("t", 0).key_by("k").session_window(10).allowed_lateness(100).accumulation("retracting")
    return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))


SESSION_STEPS: list[Step] = [
    Send([{"k": "a", "t": 0, "v": 1}, {"k": "a", "t": 20, "v": 2}, {"k": "b", "t": 5, "v": 7}]),
    Send([{"k": "a", "t": 60, "v": 4}]),  # both sessions of a fire
    Send([{"k": "a", "t": 10, "v": 8}]),  # late: merges [0, 10) and [20, 30) into [0, 30)
    Close(),
]


def seed(s: kp.Stream) -> kp.Stream:
    """The Krishiv seed's pipeline: one firing per window (the native lowering)."""
    w = s.watermark("t", 5).key_by("k").tumbling_window(10)
    return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))


SEED_STEPS: list[Step] = [
    Send([{"k": "a", "t": 1, "v": 1}, {"k": "b", "t": 4, "v": 2}, {"k": "a", "t": 12, "v": 3}]),
    Send([{"k": "a", "t": 30, "v": 4}, {"k": "b", "t": 9, "v": 5}]),
    Close(),
]


def current(changelog: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold a changelog, row by row: an emit sets its window's row, a retraction removes it."""
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in changelog:
        key = tuple(row[c] for c in KEY)
        if row.get("kind") == "retract":
            table.pop(key, None)
        else:
            table[key] = {c: v for c, v in row.items() if c != "kind"}
    return list(table.values())


# --- the changelog contract (no Spark) -------------------------------------------------------


def test_the_last_row_of_a_window_in_a_batch_decides() -> None:
    batch = pa.table(
        {
            "k": ["a", "a", "b", "c", "c", None, None],
            "window_start": [0, 0, 0, 0, 0, 0, 0],
            "window_end": [10, 10, 10, 10, 10, 10, 10],
            "sum_v": [1, 3, 5, 6, 6, 7, 8],
            "kind": ["retract", "emit", "emit", "emit", "retract", "emit", "emit"],
        }
    )
    changes = net_changes(batch, KEY)
    assert changes.upserts.to_pylist() == [
        {"k": "a", "window_start": 0, "window_end": 10, "sum_v": 3},  # retract + emit: a replace
        {"k": "b", "window_start": 0, "window_end": 10, "sum_v": 5},
        {"k": None, "window_start": 0, "window_end": 10, "sum_v": 8},  # a null key is one key
    ]
    assert changes.deletes.to_pylist() == [{"k": "c", "window_start": 0, "window_end": 10}]
    assert changes.keys.num_rows == 4
    plain = net_changes(batch.drop_columns(["kind"]), KEY)
    assert [r["sum_v"] for r in plain.upserts.to_pylist()] == [3, 5, 6, 8]
    assert plain.deletes.num_rows == 0


def test_append_mode_rows_carry_kind_and_batch_id() -> None:
    rows = changelog_rows(pa.table({"k": ["a"], "n": [1]}), 7)
    assert rows.to_pylist() == [{"k": "a", "n": 1, "kind": "emit", "batch_id": 7}]


def _context(
    ddl: str, *, accumulation: str | None = "accumulating", checkpoint: str | None = "/ck"
) -> SinkContext:
    return SinkContext(schema=Schema.parse(ddl), checkpoint_dir=checkpoint, accumulation=accumulation)


WINDOWS = "k string, window_start timestamp, window_end timestamp, count bigint"


def test_upsert_needs_window_results_and_refuses_discarding() -> None:
    with pytest.raises(
        kp.PlanError, match=r"DuckDBSink\(mode='upsert'\) needs window results.*mode='append'"
    ):
        target_for("DuckDBSink", "upsert", _context("k string, n bigint", accumulation=None), "t")
    with pytest.raises(kp.PlanError, match=r"accumulation\('discarding'\).*mode='append'"):
        target_for("DuckDBSink", "upsert", _context(WINDOWS, accumulation="discarding"), "t")
    with pytest.raises(kp.PlanError, match="mode must be 'upsert' or 'append', got 'merge'"):
        target_for("DuckDBSink", "merge", _context(WINDOWS), "t")
    assert (
        target_for("DuckDBSink", "append", _context(WINDOWS, accumulation="discarding"), "t").mode == "append"
    )
    upsert = target_for("DuckDBSink", "upsert", _context(WINDOWS), "t")
    assert upsert.key == KEY
    assert upsert.sink_id == target_for("DuckDBSink", "upsert", _context(WINDOWS), "t").sink_id
    bounded = [target_for("DuckDBSink", "upsert", _context(WINDOWS, checkpoint=None), "t") for _ in range(2)]
    assert bounded[0].sink_id != bounded[1].sink_id  # two bounded runs both write


# --- the sinks ----------------------------------------------------------------------------


def duckdb_sink(tmp: Path) -> SinkFactory:
    return lambda mode: kp.DuckDBSink(str(tmp / "results.duckdb"), f"t_{uuid.uuid4().hex[:8]}", mode=mode)  # type: ignore[arg-type]


def delta_sink(tmp: Path) -> SinkFactory:
    return lambda mode: kp.DeltaSink(str(tmp / f"delta_{uuid.uuid4().hex[:8]}"), mode=mode)  # type: ignore[arg-type]


def iceberg_sink(tmp: Path) -> SinkFactory:
    def make(mode: str) -> kp.Sink:
        table = f"krishiv.t_{uuid.uuid4().hex[:8]}"
        return kp.IcebergSink(table, warehouse=str(tmp / "wh"), mode=mode)  # type: ignore[arg-type]

    return make


@pytest.fixture(params=["delta", "duckdb", "iceberg", "postgres"])
def make_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkFactory]:
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_server").dsn
        yield lambda mode: kp.PostgresSink(dsn, f"t_{uuid.uuid4().hex[:8]}", mode=mode)  # type: ignore[arg-type]
    else:
        yield {"delta": delta_sink, "duckdb": duckdb_sink, "iceberg": iceberg_sink}[request.param](tmp_path)


def _window_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=Schema.parse(WINDOWS + ", kind string").to_arrow())


def test_a_batch_written_again_is_written_once(make_sink: SinkFactory) -> None:
    writer: Any = make_sink("upsert").open(_context(WINDOWS + ", kind string", accumulation="retracting"))
    first = _window_table([{"k": "a", "window_start": 0, "window_end": 10_000, "count": 1, "kind": "emit"}])
    again = _window_table(
        [
            {"k": "a", "window_start": 0, "window_end": 10_000, "count": 1, "kind": "retract"},
            {"k": "a", "window_start": 0, "window_end": 10_000, "count": 2, "kind": "emit"},
        ]
    )
    writer.write(first, 0)
    writer.write(again, 1)
    writer.write(first, 0)  # Spark runs batch 0 again after a restart: already committed
    writer.write(again, 1)
    assert [(r["k"], r["count"]) for r in writer.results().to_pylist()] == [("a", 2)]


def test_append_mode_keeps_the_changelog(make_sink: SinkFactory) -> None:
    writer: Any = make_sink("append").open(_context(WINDOWS + ", kind string", accumulation="retracting"))
    rows = [
        {"k": "a", "window_start": 0, "window_end": 10_000, "count": 1, "kind": "retract"},
        {"k": "a", "window_start": 0, "window_end": 10_000, "count": 2, "kind": "emit"},
    ]
    writer.write(_window_table(rows), 3)
    writer.write(_window_table(rows), 3)
    got = sorted(writer.results().to_pylist(), key=lambda r: r["count"])
    assert [(r["count"], r["kind"], r["batch_id"]) for r in got] == [(1, "retract", 3), (2, "emit", 3)]


@pytest.mark.spark
def test_the_ripple_example_leaves_one_row_per_window(session: kp.Session, make_sink: SinkFactory) -> None:
    _ripple_into(session, make_sink, "retracting")


@pytest.mark.spark
def test_accumulating_refirings_replace_the_row(session: kp.Session, tmp_path: Path) -> None:
    """Without retractions every firing is the window's whole result: the last one is the row."""
    _ripple_into(session, duckdb_sink(tmp_path), "accumulating")


def _ripple_into(session: kp.Session, make_sink: SinkFactory, mode: str) -> None:
    expected = run_reference(SCHEMA, ripple(mode), RIPPLE_STEPS)
    actual = run_streaming(session, SCHEMA, ripple(mode), RIPPLE_STEPS, sink=make_sink("upsert"))
    for got, want in zip(actual, expected, strict=True):
        assert_same_rows(got, current(want))
    # The late event re-fired [190, 200): the table holds its corrected result only.
    fired = {r["window_start"]: r["sum_v"] for r in actual[-1]}
    assert [v for start, v in fired.items() if getattr(start, "microsecond", None) == 190_000] == [11]


@pytest.mark.spark
def test_a_session_merge_retracts_its_parts(session: kp.Session, make_sink: SinkFactory) -> None:
    expected = run_reference(SCHEMA, sessions, SESSION_STEPS)
    actual = run_streaming(session, SCHEMA, sessions, SESSION_STEPS, sink=make_sink("upsert"))
    for got, want in zip(actual, expected, strict=True):
        assert_same_rows(got, current(want))
    assert sorted((r["k"], r["count"]) for r in actual[2]) == [("a", 3), ("b", 1)]


@pytest.mark.spark
def test_native_results_go_to_the_table(session: kp.Session, make_sink: SinkFactory) -> None:
    expected = run_reference(SCHEMA, seed, SEED_STEPS)
    actual = run_streaming(session, SCHEMA, seed, SEED_STEPS, sink=make_sink("upsert"), lowering="native")
    for got, want in zip(actual, expected, strict=True):
        assert_same_rows(got, current(want))


@pytest.mark.spark
def test_a_discarding_pipeline_is_refused_in_upsert_mode(session: kp.Session, tmp_path: Path) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    with pytest.raises(kp.PlanError, match=r"accumulation\('discarding'\)"):
        ripple("discarding")(stream).start(duckdb_sink(tmp_path)("upsert"))


# --- bad targets: a clear error, nothing committed lost -----------------------------------------


def test_a_duckdb_path_under_a_file_is_a_job_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    sink = kp.DuckDBSink(str(tmp_path / "afile" / "out.duckdb"), table="t")
    with pytest.raises(kp.JobError, match=r"DuckDBSink: cannot create the directory of .*afile.*File exists"):
        sink.open(_context(WINDOWS))


def test_spark_cause_leads_with_the_java_exception_not_py4js_call() -> None:
    from krishiv_py.spark_errors import spark_cause

    raised = RuntimeError(
        "An error occurred while calling o105.start.\n: org.apache.hadoop.fs.ParentNotDirectoryException:"
        " Parent path is not a directory: file:/tmp/afile\n\tat org.apache.hadoop.fs.RawLocalFileSystem"
        ".mkdirs(RawLocalFileSystem.java:892)\n"
    )
    assert spark_cause(raised) == (
        "org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: file:/tmp/afile"
    )


def test_a_table_that_does_not_fit_is_refused_before_the_first_batch(make_sink: SinkFactory) -> None:
    sink = make_sink("upsert")
    writer: Any = sink.open(_context(WINDOWS))
    row = {"k": "a", "window_start": 0, "window_end": 10, "count": 1}
    writer.write(_window_table([row | {"kind": "emit"}]).drop_columns(["kind"]), 0)
    assert sink.open(_context(WINDOWS)) is not None  # the same columns: the table is taken as it is
    with pytest.raises(
        kp.PlanError, match=r"Sink: .* does not fit the results: it has .*count.* need .*total"
    ):
        sink.open(_context(WINDOWS.replace("count bigint", "total double")))
    assert writer.results().num_rows == 1  # what was committed stays


def test_an_unreachable_database_is_a_job_error_naming_it(tmp_path: Path) -> None:
    from krishiv_py.devtools import free_ports

    (port,) = free_ports(1)
    sink = kp.PostgresSink(f"postgresql://app:secret@127.0.0.1:{port}/metrics", "t", retries=1)
    with pytest.raises(kp.JobError, match=rf"PostgresSink: .*127.0.0.1:{port}.* after 2 attempts") as info:
        sink.open(_context(WINDOWS))
    assert "secret" not in str(info.value)
    assert "secret" not in repr(sink)


def test_a_dropped_connection_is_opened_again(postgres_server: Any) -> None:
    import psycopg

    writer: Any = kp.PostgresSink(postgres_server.dsn, f"t_{uuid.uuid4().hex[:8]}").open(_context(WINDOWS))
    row = {"k": "a", "window_start": 0, "window_end": 10, "count": 1}
    writer.write(_window_table([row | {"kind": "emit"}]).drop_columns(["kind"]), 0)
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:  # the server ends the session
        admin.execute("SELECT pg_terminate_backend(%s)", (writer._conn.info.backend_pid,))
    writer.write(_window_table([row | {"count": 2, "kind": "emit"}]).drop_columns(["kind"]), 1)
    assert [r["count"] for r in writer.results().to_pylist()] == [2]
    backend = writer._conn.info.backend_pid
    writer.close()  # when the job stops: the server's session ends
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        alive = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend,)).fetchone()
    assert alive == (0,)
    assert [r["count"] for r in writer.results().to_pylist()] == [2]  # results() connects again


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Callable[[bool], None]]:
    """A directory and a switch that makes it read-only (a read-only tmpfs as root, chmod otherwise)."""
    import os
    import subprocess

    path = tmp_path / "ro"
    path.mkdir()
    root = os.geteuid() == 0
    if root:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], check=True)

    def read_only(on: bool) -> None:
        if root:
            subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(path)], check=True)
        else:
            path.chmod(0o555 if on else 0o755)
            for sub in path.rglob("*"):
                sub.chmod((0o555 if on else 0o755) if sub.is_dir() else (0o444 if on else 0o644))

    try:
        yield read_only
    finally:
        read_only(False)
        if root:
            subprocess.run(["umount", str(path)], check=True)


def test_a_read_only_delta_path_fails_the_batch_and_keeps_the_table(
    tmp_path: Path, read_only_dir: Callable[[bool], None]
) -> None:
    sink = kp.DeltaSink(str(tmp_path / "ro" / "table"))
    writer: Any = sink.open(_context(WINDOWS))
    row = {"k": "a", "window_start": 0, "window_end": 10, "count": 1}
    writer.write(_window_table([row | {"kind": "emit"}]).drop_columns(["kind"]), 0)
    read_only_dir(True)
    with pytest.raises(kp.JobError, match=r"DeltaSink: writing batch 1 to .*table.*write access"):
        writer.write(_window_table([row | {"count": 2, "kind": "emit"}]).drop_columns(["kind"]), 1)
    assert [r["count"] for r in writer.results().to_pylist()] == [1]  # batch 0 is still there
    read_only_dir(False)
    writer.write(_window_table([row | {"count": 2, "kind": "emit"}]).drop_columns(["kind"]), 1)  # the rerun
    assert [r["count"] for r in writer.results().to_pylist()] == [2]


@pytest.mark.spark
def test_a_bounded_run_writes_its_windows_once(session: kp.Session, make_sink: SinkFactory) -> None:
    """Bounded input started into a table sink: one batch, the final windows, one row each."""
    rows = [r for step in SEED_STEPS if isinstance(step, Send) for r in step.rows]
    want = current(run_reference(SCHEMA, seed, [Send(rows), Close()])[-1])
    sink = make_sink("upsert")
    job = seed(session.from_records(rows, SCHEMA)).start(sink)
    job.await_termination()
    assert_same_rows(job.results(), want)
    again = seed(session.from_records(rows, SCHEMA)).start(sink)  # a second bounded run writes again
    again.await_termination()
    assert_same_rows(again.results(), want)  # the same windows, replaced: still one row each


# --- Iceberg: read back with pyiceberg and DuckDB (Spark's Iceberg reader needs a jar) -----------------


def _iceberg_table(writer: Any) -> Any:
    """The writer's table, loaded afresh from its catalog."""
    return writer._catalog().load_table(writer.identifier)


def _row(k: str | None, start: int, end: int, count: int, kind: str = "emit") -> dict[str, Any]:
    return {"k": k, "window_start": start, "window_end": end, "count": count, "kind": kind}


def test_an_iceberg_batch_is_one_commit_that_records_its_batch_id(tmp_path: Path) -> None:
    sink = kp.IcebergSink("krishiv.per_10s", warehouse=str(tmp_path / "wh"))
    context = _context(WINDOWS + ", kind string", accumulation="retracting")
    writer: Any = sink.open(context)
    writer.write(_window_table([_row("a", 0, 10, 1), _row("b", 0, 10, 1)]), 0)
    commits = len(_iceberg_table(writer).metadata.metadata_log)
    batch = _window_table(
        [_row("a", 0, 10, 1, "retract"), _row("a", 0, 10, 2), _row("b", 0, 10, 1, "retract")]
    )
    writer.write(batch, 1)
    table = _iceberg_table(writer)
    assert len(table.metadata.metadata_log) == commits + 1  # the delete and the append: one commit
    made = [s for s in table.metadata.snapshots if s.summary["krishiv.batch-id"] == "1"]
    assert len(made) >= 2 and all(s.summary["krishiv.sink-id"] == writer.target.sink_id for s in made)
    assert table.current_snapshot().summary["krishiv.batch-id"] == "1"
    # A new writer on the same table (a restart of the job) reads the batch id back from the snapshots.
    again: Any = sink.open(context)
    assert again.last_batch(_iceberg_table(again)) == 1
    snapshots = len(_iceberg_table(again).metadata.snapshots)
    again.write(_window_table([_row("a", 0, 10, 3)]), 1)  # batch 1 run again: already committed
    assert len(_iceberg_table(again).metadata.snapshots) == snapshots
    assert [(r["k"], r["count"]) for r in again.results().to_pylist()] == [("a", 2)]
    again.write(_window_table([_row("a", 0, 10, 3)]), 2)
    assert [(r["k"], r["count"]) for r in again.results().to_pylist()] == [("a", 3)]
    other: Any = sink.open(_context(WINDOWS + ", kind string", checkpoint="/other"))  # another job
    assert other.last_batch(_iceberg_table(other)) is None


def test_iceberg_deletes_match_null_keys_and_duckdb_reads_the_table(tmp_path: Path) -> None:
    import duckdb

    writer: Any = kp.IcebergSink("krishiv.nulls", warehouse=str(tmp_path / "wh")).open(
        _context(WINDOWS + ", kind string", accumulation="retracting")
    )
    first = [_row(k, s, s + 10, 1) for k in ("a", None, "b") for s in (0, 10)]
    writer.write(_window_table(first), 0)
    writer.write(
        _window_table([_row(None, 0, 10, 5), _row("a", 10, 20, 1, "retract"), _row("c", 0, 10, 7)]), 1
    )
    con = duckdb.connect()
    con.register("t", _iceberg_table(writer).scan().to_arrow())  # the table's current data files
    got = con.execute(
        "SELECT k, epoch_us(window_start) AS s, count FROM t ORDER BY k NULLS FIRST, s"
    ).fetchall()
    assert got == [(None, 0, 5), (None, 10, 1), ("a", 0, 1), ("b", 0, 1), ("b", 10, 1), ("c", 0, 7)]
    assert writer.results().schema == writer.schema  # read back as the results' types


def test_the_iceberg_key_filter_is_exact(tmp_path: Path) -> None:
    from krishiv_py.tables.iceberg_sink import key_filter

    keys = pa.Table.from_pylist(
        [
            {"k": "a", "window_start": 0, "window_end": 10},
            {"k": "b", "window_start": 0, "window_end": 10},
            {"k": None, "window_start": 0, "window_end": 10},
            {"k": "a", "window_start": 10, "window_end": 20},
        ],
        schema=Schema.parse("k string, window_start timestamp, window_end timestamp").to_arrow(),
    )
    where = key_filter(keys)
    assert key_filter(keys.slice(0, 0)) is None
    assert str(where).count("In(") == 1  # the keys of window [0, 10) in one In, grouped by its bounds
    writer: Any = kp.IcebergSink("krishiv.keys", warehouse=str(tmp_path / "wh")).open(_context(WINDOWS))
    rows = [_row(k, s, s + 10, 1) for k in ("a", "b", "c", None) for s in (0, 10)]
    writer.write(_window_table(rows).drop_columns(["kind"]), 0)
    hit = _iceberg_table(writer).scan(row_filter=where).to_arrow()
    got = sorted((r["k"] or "", r["window_start"].microsecond) for r in hit.to_pylist())
    assert got == [("", 0), ("a", 0), ("a", 10), ("b", 0)]


def test_iceberg_append_mode_keeps_every_row_of_a_batch(tmp_path: Path) -> None:
    sink = kp.IcebergSink("krishiv.changelog", warehouse=str(tmp_path / "wh"), mode="append")
    writer: Any = sink.open(_context(WINDOWS + ", kind string", accumulation="retracting"))
    writer.write(_window_table([_row("a", 0, 10, 1), _row("a", 0, 10, 1, "retract"), _row("a", 0, 10, 2)]), 0)
    got = [(r["count"], r["kind"], r["batch_id"]) for r in writer.results().to_pylist()]
    assert sorted(got) == [(1, "emit", 0), (1, "retract", 0), (2, "emit", 0)]
    assert _iceberg_table(writer).current_snapshot().summary["krishiv.batch-id"] == "0"


def test_iceberg_partitions_by_the_day_of_window_start(tmp_path: Path) -> None:
    from pyiceberg.transforms import DayTransform

    sink = kp.IcebergSink("krishiv.daily", warehouse=str(tmp_path / "wh"), partition_by="window_date")
    writer: Any = sink.open(_context(WINDOWS))
    day = 86_400_000_000
    rows = [_row("a", 0, 10, 1), _row("a", day, day + 10, 2), _row("b", day, day + 10, 3)]
    writer.write(_window_table(rows).drop_columns(["kind"]), 0)
    table = _iceberg_table(writer)
    (field,) = table.spec().fields
    assert isinstance(field.transform, DayTransform)
    assert table.schema().find_field(field.source_id).name == "window_start"
    assert table.schema().column_names == ["k", "window_start", "window_end", "count"]  # hidden: no column
    assert len(list(table.scan().plan_files())) == 2  # a data file per day
    writer.write(_window_table([_row("b", day, day + 10, 4)]).drop_columns(["kind"]), 1)
    assert sorted(r["count"] for r in writer.results().to_pylist()) == [1, 2, 4]
    with pytest.raises(kp.PlanError, match=r"partition_by='window_date' needs window results"):
        attrs.evolve(sink, mode="append").open(_context("k string, n bigint", accumulation=None))


def test_iceberg_sink_arguments_are_checked(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    for bad in ("per_10s", "a.b.c", ".t", "krishiv."):
        with pytest.raises(kp.PlanError, match=rf"table must be 'namespace.name'.*got '{re.escape(bad)}'"):
            kp.IcebergSink(bad, warehouse=wh)
    with pytest.raises(kp.PlanError, match=r"partition_by takes 'window_date' .*got \('k',\)"):
        kp.IcebergSink("krishiv.t", warehouse=wh, partition_by="k")
    with pytest.raises(kp.PlanError, match=r"give warehouse= .* or catalog= .*one of them$"):
        kp.IcebergSink("krishiv.t")
    with pytest.raises(kp.PlanError, match=r"one of them, not both"):
        kp.IcebergSink("krishiv.t", warehouse=wh, catalog={"uri": "sqlite:///x.db"})
    with pytest.raises(kp.PlanError, match=r"a local directory or a file:// URI .*catalog="):
        kp.IcebergSink("krishiv.t", warehouse="s3://bucket/wh")
    with pytest.raises(kp.PlanError, match=r"catalog= takes a pyiceberg Catalog or a mapping"):
        kp.IcebergSink("krishiv.t", catalog="http://localhost:8181")  # type: ignore[arg-type]
    with pytest.raises(kp.PlanError, match=r"mode must be 'upsert' or 'append'"):
        kp.IcebergSink("krishiv.t", warehouse=wh, mode="merge").open(_context(WINDOWS))  # type: ignore[arg-type]
    secret = kp.IcebergSink("krishiv.t", catalog={"type": "rest", "uri": "http://x", "token": "s3cr3t"})
    assert "s3cr3t" not in repr(secret) and "http://x" in repr(secret)


def test_iceberg_sink_without_pyiceberg_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = kp.IcebergSink("krishiv.t", warehouse=str(tmp_path / "wh"))  # made without pyiceberg
    monkeypatch.setitem(sys.modules, "pyiceberg", None)  # import pyiceberg now raises ImportError
    with pytest.raises(
        kp.MissingDependencyError, match=r"IcebergSink needs pyiceberg: python -m pip install '\.\[iceberg\]'"
    ):
        sink.open(_context(WINDOWS))
    assert not (tmp_path / "wh").exists()


def test_iceberg_takes_a_catalog_by_properties_or_as_an_object(tmp_path: Path) -> None:
    import pickle

    from pyiceberg.catalog.sql import SqlCatalog

    (tmp_path / "wh").mkdir()
    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'cat.db'}",
        "warehouse": (tmp_path / "wh").as_uri(),
    }
    by_props: Any = kp.IcebergSink("krishiv.t", catalog=props).open(_context(WINDOWS))
    by_props.write(_window_table([_row("a", 0, 10, 1)]).drop_columns(["kind"]), 0)
    assert (tmp_path / "cat.db").is_file()
    catalog = SqlCatalog("krishiv", uri=props["uri"], warehouse=props["warehouse"])
    live: Any = kp.IcebergSink("krishiv.t", catalog=catalog).open(_context(WINDOWS))
    assert live.last_batch(_iceberg_table(live)) == 0  # the same catalog and table: the same job's record
    assert [r["count"] for r in live.results().to_pylist()] == [1]
    shipped: Any = pickle.loads(pickle.dumps(live))  # as Spark Connect ships a writer: no catalog inside
    assert shipped._conn_catalog is None
    shipped.write(_window_table([_row("a", 0, 10, 2)]).drop_columns(["kind"]), 1)
    assert [r["count"] for r in by_props.results().to_pylist()] == [2]


def test_an_iceberg_table_that_does_not_fit_names_the_fix(tmp_path: Path) -> None:
    sink = kp.IcebergSink("krishiv.t", warehouse=str(tmp_path / "wh"))
    sink.open(_context(WINDOWS))
    with pytest.raises(kp.PlanError, match=r"count long.* need .*count string.*drop this one"):
        sink.open(_context(WINDOWS.replace("count bigint", "count string")))


def test_a_read_only_iceberg_warehouse_fails_the_batch_and_keeps_the_table(
    tmp_path: Path, read_only_dir: Callable[[bool], None]
) -> None:
    warehouse = str(tmp_path / "ro" / "wh")
    writer: Any = kp.IcebergSink("krishiv.t", warehouse=warehouse).open(_context(WINDOWS))
    writer.write(_window_table([_row("a", 0, 10, 1)]).drop_columns(["kind"]), 0)
    read_only_dir(True)
    with pytest.raises(
        kp.JobError, match=r"IcebergSink: writing batch 1 to .*not writable.*stay in the table"
    ):
        writer.write(_window_table([_row("a", 0, 10, 2)]).drop_columns(["kind"]), 1)
    assert [r["count"] for r in writer.results().to_pylist()] == [1]  # batch 0 is still there
    with pytest.raises(kp.JobError, match=r"IcebergSink: .*not writable"):
        kp.IcebergSink("krishiv.other", warehouse=warehouse).open(_context(WINDOWS))
    read_only_dir(False)
    writer.write(_window_table([_row("a", 0, 10, 2)]).drop_columns(["kind"]), 1)  # the rerun
    assert [r["count"] for r in writer.results().to_pylist()] == [2]


def test_a_delta_table_under_a_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    pytest.importorskip("deltalake")
    (tmp_path / "notes").write_text("a file, not a directory")
    for path in (tmp_path / "notes", tmp_path / "notes" / "t"):
        with pytest.raises(kp.JobError, match=r"notes is a file; give the sink a path whose parents"):
            kp.DeltaSink(str(path)).open(_context(WINDOWS))


def test_an_iceberg_warehouse_under_a_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("a file, not a directory")
    for warehouse in (tmp_path / "notes", tmp_path / "notes" / "wh"):
        with pytest.raises(kp.JobError, match=r"notes is a file; choose a warehouse= path"):
            kp.IcebergSink("krishiv.t", warehouse=str(warehouse)).open(_context(WINDOWS))
