"""The first hour in a notebook or a terminal: displays, quiet failures, lifecycle, bad input."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def ev(user: str, second: int, amount: float = 1.0) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=second), "amount": amount}


def per_minute(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"))
    )


# --- displays without Spark -------------------------------------------------------------


def test_schema_displays_as_a_column_list() -> None:
    schema = kp.Schema.parse("user_id string, `odd name` bigint NOT NULL")
    assert repr(schema) == "Schema(user_id string, `odd name` bigint not null)"
    html = schema._repr_html_()
    assert "<table" in html and "user_id" in html and "bigint not null" in html
    assert "Field(" not in repr(schema) and "DataType(" not in repr(schema)


def _metrics(watermark_ms: int | None) -> kp.JobMetrics:
    return kp.JobMetrics(
        input_rows=3,
        batches=2,
        invalid_events=0,
        on_time_events=None,
        mildly_late_events=None,
        very_late_events=None,
        future_events=None,
        windows_emitted=1,
        retractions=0,
        state_evictions=0,
        watermark_ms=watermark_ms,
        watermark_advances=1,
    )


def test_metrics_spell_out_end_of_input() -> None:
    ended = _metrics(kp.END_OF_TIME_MS)
    assert ended.end_of_input
    assert "watermark_ms=<end of input>" in repr(ended)
    assert str(kp.END_OF_TIME_MS) not in repr(ended)
    assert "end of input" in ended._repr_html_()
    running = _metrics(60_000)
    assert not running.end_of_input
    assert "watermark_ms=60000 (1970-01-01 00:01:00 UTC)" in repr(running)
    assert "n/a" not in running._repr_html_()  # unobservable figures are left out of the card


def test_displays_start_no_jvm() -> None:
    code = textwrap.dedent(
        """
        import sys
        import krishiv_py as kp
        from krishiv_py.testing import reference_model_for
        s = kp.Schema.parse("k string, t timestamp")
        repr(s); s._repr_html_()
        assert not any(m.startswith(("pyspark", "py4j")) for m in sys.modules), "pyspark imported"
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# --- displays of live objects ----------------------------------------------------------------


def test_session_stream_sender_and_job_display(session: kp.Session) -> None:
    assert "Session active" in repr(session) and "dev-local" in repr(session)
    html = session._repr_html_()
    assert "spark log" in html and "<table" in html
    stream, sender = session.memory_stream(SCHEMA, name="display_events")
    assert repr(sender) == (
        "<Sender 'display_events' open, 0 batches sent, "
        "Schema(user_id string, event_time timestamp, amount double)>"
    )
    assert "batches sent" in sender._repr_html_()
    windowed = per_minute(stream)
    text = repr(windowed)
    assert text.startswith("Stream (unbounded, lowering: native)")
    assert "WindowAggregate keys=[user_id]" in text and "MemorySource 'display_events'" in text
    assert "lowering" in windowed._repr_html_() and "WindowAggregate" in windowed._repr_html_()

    job = windowed.start()
    sender.send([ev("a", 1), ev("a", 70)])
    job.process_all_available()
    shown = repr(job)
    assert "state               running" in shown
    assert "watermark           2024-01-01 00:01:05 UTC" in shown
    assert "windows out         1" in shown
    sender.close()
    assert job.await_termination(timeout_s=120)
    shown = repr(job)  # current when displayed again
    assert "state               finished" in shown and "watermark           end of input" in shown
    assert "windows out         2" in shown
    assert "finished" in job._repr_html_()
    assert "end of input" in job.metrics()._repr_html_()


def test_result_tables_display_window_bounds_as_utc_times() -> None:
    from krishiv_py._display import table_html, table_text

    table = pa.table(
        {
            "user_id": ["a"],
            "window_start": pa.array([T0], pa.timestamp("us", tz="UTC")),
            "window_end": pa.array([T0 + dt.timedelta(minutes=1)], pa.timestamp("us", tz="UTC")),
            "events": [3],
        }
    )
    assert "2024-01-01 00:01:00 UTC" in table_html(table)
    lines = table_text(table).splitlines()
    assert lines[0].split() == ["user_id", "window_start", "window_end", "events"]
    assert "2024-01-01 00:00:00 UTC" in lines[2] and lines[-1] == "(1 rows)"


def test_explain_returns_the_text_and_prints_nothing(
    session: kp.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    text = per_minute(stream).explain()
    assert capsys.readouterr().out == ""  # print(stream.explain()) shows it once
    assert isinstance(text, str) and "== Lowering: native ==" in text and "== Spark plan ==" in text
    assert repr(text) == str(text)  # the REPL and a notebook display the text itself, real newlines
    shown = per_minute(stream).explain(show=True)
    assert capsys.readouterr().out.strip() == shown.strip()
    assert shown.split("== Spark plan ==")[0] == text.split("== Spark plan ==")[0]


# --- lifecycle ---------------------------------------------------------------------------------


def test_recreating_a_named_stream_replaces_it(session: kp.Session) -> None:
    first, first_sender = session.memory_stream(SCHEMA, name="rerun_cell")
    old_job = first.start()
    first_sender.send([ev("old", 1)])
    old_job.process_all_available()
    # The same notebook cell, run again: a fresh, empty stream under the same name.
    second, second_sender = session.memory_stream(SCHEMA, name="rerun_cell")
    assert second_sender.batches_sent == 0 and not second_sender.closed
    job = second.start()
    second_sender.send([ev("new", 2)])
    job.process_all_available()
    assert job.results().column("user_id").to_pylist() == ["new"]
    old_job.process_all_available()  # the earlier job keeps its own stream
    assert old_job.results().column("user_id").to_pylist() == ["old"]
    job.stop()
    old_job.stop()


def test_a_stopped_job_says_so(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start()
    sender.send([ev("a", 1)])
    job.process_all_available()
    job.stop()
    assert job.state == "stopped"
    with pytest.raises(kp.JobStoppedError, match="stopped"):
        job.process_all_available()
    with pytest.raises(kp.JobStoppedError):
        job.await_termination(1)
    assert job.results().num_rows == 0  # results so far stay readable


def test_a_job_stopped_from_another_thread_mid_wait_raises(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start()
    sender.send([ev("a", 1)])
    job.process_all_available()
    stopper = threading.Timer(2.0, job.stop)
    stopper.start()
    with pytest.raises(kp.JobStoppedError):
        job.await_termination()  # the sender is still open: only stop() can end this wait
    stopper.join()
    assert job.state == "stopped"


def test_finished_and_stopped_are_told_apart(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start()
    sender.send([ev("a", 1)])
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.state == "finished"
    job.process_all_available()  # nothing more to do: no error
    assert job.await_termination(1)
    bounded = per_minute(session.from_records([ev("a", 1)], SCHEMA)).start()
    assert bounded.state == "finished"


def test_results_of_a_sink_that_keeps_none_is_a_runtime_error(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start(kp.ConsoleSink())
    sender.close()
    assert job.await_termination(timeout_s=120)
    with pytest.raises(kp.NoResultsError, match="ConsoleSink, which keeps no rows") as info:
        job.results()
    assert isinstance(info.value, kp.JobError) and not isinstance(info.value, kp.PlanError)


def test_console_sink_prints_only_batches_with_rows_and_zoned_times(
    session: kp.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = per_minute(stream).start(kp.ConsoleSink())
    sender.send([ev("a", 1)])
    job.process_all_available()  # no window fires: nothing printed
    sender.send([ev("a", 70)])
    job.process_all_available()
    sender.close()
    assert job.await_termination(timeout_s=120)
    out = capsys.readouterr().out
    headers = re.findall(r"^-- results, batch \d+ --$", out, flags=re.MULTILINE)
    assert len(headers) == 2, out  # the two windows' batches; the empty batches print nothing
    assert "2024-01-01 00:00:00 UTC" in out and "2024-01-01 00:01:00 UTC" in out


# --- bad input ------------------------------------------------------------------------------


def test_try_cast_counts_malformed_timestamps_as_invalid(session: kp.Session) -> None:
    stream, sender = session.memory_stream("user_id string, ts string")
    parsed = stream.with_column("event_time", kp.col("ts").try_cast("timestamp"))
    job = per_minute(parsed).start()
    sender.send(
        [
            {"user_id": "a", "ts": "2024-01-01 00:00:05"},
            {"user_id": "a", "ts": "garbage"},
            {"user_id": "a", "ts": "2024-01-01 00:00:30"},
        ]
    )
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.results().column("events").to_pylist() == [2]
    assert job.metrics().invalid_events == 1
    assert "try_cast(ts as timestamp)" in repr(parsed)
    strict = stream.with_column("event_time", kp.col("ts").cast("timestamp", safe=True))
    assert strict.schema == parsed.schema


def test_a_cast_of_garbage_is_null_and_counted_and_the_job_goes_on(session: kp.Session) -> None:
    stream, sender = session.memory_stream("user_id string, ts string")
    job = per_minute(stream.with_column("event_time", kp.col("ts").cast("timestamp"))).start()
    sender.send([{"user_id": "a", "ts": "garbage"}, {"user_id": "a", "ts": "2024-01-01 00:00:05"}])
    sender.close()
    assert job.await_termination(timeout_s=120)
    assert job.results().column("events").to_pylist() == [1]
    m = job.metrics()
    assert (m.invalid_events, m.arithmetic_errors) == (1, 1)


@pytest.mark.parametrize("reader", ["read_parquet", "read_csv", "read_json"])
def test_a_missing_path_fails_at_read_time(session: kp.Session, tmp_path: Path, reader: str) -> None:
    missing = tmp_path / "nope"
    read = getattr(session, reader)
    with pytest.raises(kp.PlanError, match=r"does not exist") as info:
        read(str(missing))
    assert str(info.value).count(str(missing)) == 1
    with pytest.raises(kp.PlanError, match=r"does not exist"):
        read(str(missing), schema=SCHEMA)  # with a schema too, not at collect()
    with pytest.raises(kp.PlanError, match="no file matches"):
        read(str(tmp_path / "*.parquet"), schema=SCHEMA)


def test_schema_inference_error_names_the_path_once(session: kp.Session, tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(kp.SchemaError, match="pass schema=") as info:
        session.read_parquet(str(bad))
    assert str(info.value).count(str(bad)) == 1


# --- quiet failures and Ctrl-C, in a process of their own -------------------------------------

_QUIET_SCRIPT = textwrap.dedent(
    """
    import datetime as dt, pathlib, sys, tempfile
    import pyarrow as pa, pyarrow.parquet as pq
    import krishiv_py as kp

    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with kp.Session.embedded(app_name="quiet", progress=False) as session:
        print("LOG", session.log_path, flush=True)
        files = pathlib.Path(tempfile.mkdtemp())
        pq.write_table(pa.table({"k": ["a"]}), files / "good.parquet")
        job = session.read_parquet(str(files), streaming=True).start()
        (files / "torn.parquet").write_bytes(b"PAR1 not a parquet file")
        try:
            job.process_all_available()
        except kp.JobError as exc:
            print("ERROR", type(exc).__name__, str(exc).splitlines()[0], flush=True)
        (files / "afile").write_text("a file, not a directory")
        stream3, _ = session.memory_stream("k string")
        try:
            stream3.start(kp.ParquetSink(str(files / "afile" / "out")))
        except kp.JobError as exc:
            print("SINK", str(exc).splitlines()[0], flush=True)
        stream2, sender2 = session.memory_stream("k string, t timestamp")
        windows = stream2.watermark("t", 0).key_by("k").tumbling_window(60_000)
        job2 = windows.agg(kp.count(kp.col("*"))).start()
        sender2.send([{"k": "a", "t": t0}])
        job2.process_all_available()
        print("READY", flush=True)
        try:
            job2.await_termination()
        except KeyboardInterrupt:
            print("INTERRUPTED", job2.state, flush=True)
    """
)


@pytest.mark.spark
def test_failures_and_ctrl_c_are_quiet(tmp_path: Path) -> None:
    env = {**os.environ, "KRISHIV_LOG_DIR": str(tmp_path / "logs"), "KRISHIV_VERBOSE": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _QUIET_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith("READY"):
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)
            break
    rest, stderr = proc.communicate(timeout=120)
    lines += rest.splitlines()
    out = "\n".join(lines)
    assert "ERROR JobError processing the available input failed" in out, (out, stderr)
    assert "INTERRUPTED stopped" in out, (out, stderr)
    # On the terminal: krishiv's one line about Ctrl-C, nothing from Java, Py4J or Spark.
    assert (
        stderr.strip()
        == "krishiv_py: interrupted; job stopped (state: stopped). Results so far: job.results()."
    ), stderr
    log_path = next(ln.split(" ", 1)[1] for ln in lines if ln.startswith("LOG "))
    assert log_path.startswith(str(tmp_path / "logs"))
    log = Path(log_path).read_text()
    assert "torn.parquet" in log and "at org.apache.spark" in log  # the Java trace went to the log
    # A start that failed in Spark: the JobError in brief, its whole text in the log.
    assert "SINK starting the streaming query failed" in out, out
    assert "krishiv: starting the streaming query failed:" in log
    assert "ParentNotDirectoryException" in log


# --- progress and Ctrl-C handling, without Spark ----------------------------------------------


def test_progress_is_on_when_interactive_and_switchable(monkeypatch: pytest.MonkeyPatch) -> None:
    from krishiv_py.runtime.watch import progress_enabled

    monkeypatch.delenv("KRISHIV_PROGRESS", raising=False)
    assert progress_enabled(None) is False  # pytest's stderr is not a terminal, no notebook
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress_enabled(None) is True
    assert progress_enabled(False) is False  # the session's switch wins
    monkeypatch.setenv("KRISHIV_PROGRESS", "0")
    assert progress_enabled(None) is False
    monkeypatch.setenv("KRISHIV_PROGRESS", "1")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert progress_enabled(None) is True


def test_long_waits_show_a_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    from krishiv_py.runtime.watch import watching

    done = iter(range(1000))
    with watching(
        on_interrupt=lambda: None,
        message="",
        progress=lambda: (next(done), 100, "2 stages"),
        description="krishiv_py running",
    ):
        time.sleep(1.6)  # bars appear after one second
    err = capsys.readouterr().err
    assert "krishiv_py running" in err and "/100" in err and "2 stages" in err
    with watching(on_interrupt=lambda: None, message="", progress=None, description="quiet"):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_ctrl_c_runs_the_stop_action_off_the_main_thread(capsys: pytest.CaptureFixture[str]) -> None:
    from krishiv_py.runtime.watch import interruptible

    calls: list[str] = []
    released = threading.Event()

    def stop() -> None:
        calls.append(threading.current_thread().name)
        released.set()

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), interruptible(stop, "stopped cleanly"):
        signal.raise_signal(signal.SIGINT)
        assert released.wait(10)  # the blocked call returns once the stop action ran
    assert calls == ["krishiv-interrupt"]
    assert capsys.readouterr().err == "stopped cleanly\n"
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back


def test_the_extras_in_the_readme_exist_and_dev_installs_the_devtools() -> None:
    """The README's table of extras names real extras; the test command's ``.[dev]`` holds ``devtools``."""
    import re
    import tomllib

    root = Path(__file__).parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["devtools"]) <= set(extras["dev"])
    readme = (root / "README.md").read_text()
    table = readme[readme.index("| extra | for |") :].split("\n\n")[0]
    named = set(re.findall(r"`([a-z]+)`", "".join(line.split("|")[1] for line in table.splitlines()[2:])))
    assert named and named <= set(extras), named - set(extras)


def test_krishiv_doctor_checks_each_part_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import socket

    from krishiv_py.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("KRISHIV_KAFKA", f"127.0.0.1:{port}")
    monkeypatch.delenv("KRISHIV_POSTGRES_DSN", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setenv("KRISHIV_STATE_DIR", str(tmp_path / "state"))
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv("KRISHIV_CLASS_ARCHIVE", str(archive))
    assert main(["doctor"]) == 1
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["class"].startswith("--") and "krishiv jvm-archive" in lines["class"], lines["class"]
    archive.write_bytes(b"\0" * 2**21)
    assert main(["doctor"]) == 1
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["class"].startswith("ok") and f"{archive} (2 MiB)" in lines["class"], lines["class"]
    assert lines["java"].startswith("ok") and "Java" in lines["java"]
    assert lines["pyspark"].startswith("ok")
    assert lines["state"].startswith("ok")
    assert (
        lines["KRISHIV_KAFKA"].startswith("FAIL")
        and f"127.0.0.1:{port} is unreachable" in lines["KRISHIV_KAFKA"]
    )
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KRISHIV_STATE_DIR", str(tmp_path / "file" / "state"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    monkeypatch.delenv("KRISHIV_KAFKA")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL java" in out and "install Java 17+" in out
    assert "FAIL state dir" in out and "KRISHIV_STATE_DIR" in out
    monkeypatch.setenv("KRISHIV_CLASS_ARCHIVE", "off")
    main(["doctor"])
    assert "--   class archive  turned off" in capsys.readouterr().out
