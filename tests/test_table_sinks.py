"""Table sinks that hold the corrected answer: the changelog contract, DuckDB, Delta Lake, PostgreSQL.

The oracle is the reference model's changelog folded row by row (an emit
sets its window's row, a retraction removes it): after every step the
table must hold exactly that, one row per window.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(params=["delta", "duckdb", "postgres"])
def make_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkFactory]:
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_server").dsn
        yield lambda mode: kp.PostgresSink(dsn, f"t_{uuid.uuid4().hex[:8]}", mode=mode)  # type: ignore[arg-type]
    else:
        yield (delta_sink if request.param == "delta" else duckdb_sink)(tmp_path)


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
