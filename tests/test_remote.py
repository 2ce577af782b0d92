"""Beyond one process: a standalone cluster and a Spark Connect server on loopback.

The servers are real (``spark_cluster`` and ``connect_server`` in
``conftest.py``, one of each per test run). The transcripts run in a child
pytest whose ``session`` fixture is ``Session.connect(master)``
(``KRISHIV_TEST_MASTER``) or ``Session.remote(url)`` (``KRISHIV_TEST_REMOTE``):
a driver of the cluster cannot share this process with the run's local
session (one SparkContext per process), and the same switch runs any part
of the suite elsewhere. A Connect session can live here for the length of
this module (pyspark builds Connect columns process-wide while it does).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.errors import JobError, SessionError
from krishiv_py.runtime.remote import CONNECT_MODE_ENV
from krishiv_py.testing import AdvanceWatermark, Send

ROOT = Path(__file__).resolve().parent.parent

#: One transcript per lowering path: native tumbling (with a very late row) and
#: sliding windows, and session windows (the stateful operator); each also runs bounded.
TRANSCRIPTS = ["very_late_event_is_dropped", "sliding_membership", "sessions_exactly_gap_apart_merge"]
SCHEMA = "k string, t bigint, v bigint"
DEMO = "tests/test_remote.py::test_the_demo_runs_where_the_session_runs"
#: Table sinks where the session runs: native results are written by the Spark Connect server
#: (the writer travels there without its connections), the stateful operator's here.
NATIVE_INTO = "tests/test_table_sinks.py::test_native_results_go_to_the_table"
RIPPLE_INTO = "tests/test_table_sinks.py::test_the_ripple_example_leaves_one_row_per_window"


def transcript_ids(names: list[str]) -> list[str]:
    return [f"tests/test_transcripts.py::test_reference_native_and_bounded_agree[{n}]" for n in names]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child, without pyspark's Connect-mode switch."""
    env = {k: v for k, v in os.environ.items() if k != CONNECT_MODE_ENV}
    return {**env, **extra}


def child_pytest(env: dict[str, str], tests: list[str], timeout_s: float = 600) -> None:
    """Run ``tests`` in a child pytest with ``env`` added; fail with its output when it fails."""
    proc = subprocess.run(
        # One process: the checks share the cluster or server one driver at a time.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *tests],
        cwd=ROOT,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, f"child pytest failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"


# --- Spark Connect --------------------------------------------------------------------


@pytest.fixture(scope="module")
def remote(connect_server: Any) -> Iterator[kp.Session]:
    s = kp.Session.remote(connect_server.url, app_name="krishiv-tests-remote")
    yield s
    s.stop()


def test_transcripts_and_demo_over_connect(connect_server: Any) -> None:
    # DuckDB and Iceberg written by the server (native), Iceberg here (the stateful operator's rows).
    sinks = [f"{NATIVE_INTO}[{k}]" for k in ("duckdb", "iceberg")] + [f"{RIPPLE_INTO}[iceberg]"]
    child_pytest({"KRISHIV_TEST_REMOTE": connect_server.url}, [*transcript_ids(TRANSCRIPTS), DEMO, *sinks])


def test_a_stateful_job_over_connect_routes_results_metrics_and_late_rows_here(remote: kp.Session) -> None:
    """The operator's output comes back from the server as files: sink, handler and metrics are here."""
    stream, sender = remote.memory_stream(SCHEMA)
    late = kp.SideOutputLateEventHandler()
    job = (
        stream.watermark("t", 0)
        .key_by("k")
        .tumbling_window(10)
        .allowed_lateness(100)
        .with_late_event_handler(late)
        .agg(kp.count(kp.col("*")).alias("n"))
        .start()
    )
    try:
        steps = [
            Send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 2, "v": 2}]),
            AdvanceWatermark(30),  # [0, 10) fires
            Send([{"k": "a", "t": 3, "v": 3}]),  # mildly late: fires again
            AdvanceWatermark(200),
            Send([{"k": "a", "t": 5, "v": 5}]),  # very late: to the handler
        ]
        for step in steps:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            job.process_all_available()
        rows = job.results().to_pylist()
        assert [(r["window_start"].timestamp(), r["n"]) for r in rows] == [(0, 2), (0, 3)]
        m = job.metrics()
        assert (m.input_rows, m.on_time_events, m.mildly_late_events, m.very_late_events) == (4, 2, 1, 1)
        assert m.watermark_ms == 200
        assert job.late_events().column("t").to_pylist() == [5]
    finally:
        job.stop()


def test_bounded_runs_explain_and_errors_over_connect(remote: kp.Session, tmp_path: Path) -> None:
    records = remote.from_records([{"k": "a", "t": 1, "v": 4}, {"k": "a", "t": 12, "v": 0}], SCHEMA)
    counts = records.watermark("t", 0).tumbling_window(10).agg(kp.sum(kp.col("v")).alias("s"))
    assert [r["s"] for r in counts.collect().to_pylist()] == [4, 0]
    text = counts.explain(show=False)
    assert "== Lowering: bounded ==" in text and "== Spark plan ==" in text
    inverse = records.select(kp.col("k"), (kp.lit(1) / kp.col("v")).alias("inv")).start()
    assert [r["inv"] for r in inverse.results().to_pylist()] == [0.25, None]
    assert inverse.metrics().arithmetic_errors == 1  # Connect's observed metrics, read by name
    pq.write_table(pa.table({"k": ["a"]}), tmp_path / "good.parquet")
    (tmp_path / "torn.parquet").write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(JobError, match=r"torn\.parquet"):
        remote.read_parquet(str(tmp_path), "k string").collect()
    stream, _ = remote.memory_stream(SCHEMA)
    with pytest.raises(JobError, match="ConsoleSink prints from Spark's driver"):
        stream.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*"))).start(kp.ConsoleSink())


def test_remote_session_errors_name_what_is_wrong() -> None:
    with pytest.raises(SessionError, match="sc://host:15002"):
        kp.Session.remote("http://127.0.0.1:15002")
    with pytest.raises(SessionError, match=r"cannot reach the Spark Connect server at 127\.0\.0\.1"):
        kp.Session.remote(f"sc://127.0.0.1:{free_port()}")
    with pytest.raises(SessionError, match=r"cannot reach the Spark master at 127\.0\.0\.1"):
        kp.Session.connect(f"spark://127.0.0.1:{free_port()}")


# --- a standalone cluster --------------------------------------------------------------


def test_transcripts_and_demo_on_a_standalone_cluster(spark_cluster: Any) -> None:
    # Sliding windows run on the cluster as tumbling ones do (native); over Connect all three run.
    on_cluster = [t for t in TRANSCRIPTS if t != "sliding_membership"]
    sinks = [f"{NATIVE_INTO}[iceberg]", f"{RIPPLE_INTO}[duckdb]"]
    child_pytest(
        {"KRISHIV_TEST_MASTER": spark_cluster.master_url}, [*transcript_ids(on_cluster), DEMO, *sinks]
    )


@pytest.mark.skipif(
    not (os.environ.get("KRISHIV_TEST_MASTER") or os.environ.get("KRISHIV_TEST_REMOTE")),
    reason="runs in the child pytest of the cluster and Connect checks",
)
def test_the_demo_runs_where_the_session_runs(session: kp.Session) -> None:
    """``krishiv demo --master spark://...`` / ``--remote sc://...`` (it joins the session's Spark)."""
    from krishiv_py.demo import run_demo

    master, remote = os.environ.get("KRISHIV_TEST_MASTER"), os.environ.get("KRISHIV_TEST_REMOTE")
    lines: list[str] = []
    assert run_demo(lines.append, master=master, remote=remote) == 0
    text = "\n".join(lines)
    assert f"Spark ({master or remote}) started" in text and "Window results" in text


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_join_over_connect_equals_the_model(remote: kp.Session, how: str) -> None:
    """An inner interval join on Spark's own join, a left one on krishiv's operator, both over Connect."""
    from typing import cast

    from krishiv_py.model.joins import join_model_for
    from krishiv_py.plan import nodes as n
    from krishiv_py.testing import assert_same_rows

    left, left_sender = remote.memory_stream("k string, t bigint, a bigint")
    right, right_sender = remote.memory_stream("k string, t bigint, b bigint")
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .interval_join(right.watermark("t", 0).key_by("k"), between=(-2, 2), how=cast(Any, how))
    )
    assert joined.lower().lowering == "stateful"  # the planner's choice; Spark's join is asked for
    model = join_model_for(cast(n.Join, joined.plan))
    job = joined.start(lowering="native" if how == "inner" else None)
    try:
        for side, rows in (
            ("left", [{"k": "a", "t": 10, "a": 1}, {"k": "b", "t": 11, "a": 2}]),
            ("right", [{"k": "a", "t": 12, "b": 1}, {"k": "a", "t": 5, "b": 2}]),
            ("left", [{"k": "c", "t": 40, "a": 3}]),
            ("right", [{"k": "c", "t": 40, "b": 3}]),
        ):
            model.send(rows, side=cast(Any, side))
            (left_sender if side == "left" else right_sender).send(rows)
            job.process_all_available()
        assert_same_rows(job.results(), model.results)
        assert len(model.results) == (2 if how == "inner" else 3)
    finally:
        job.stop()
