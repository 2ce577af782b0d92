"""krishiv_py.devtools, the ``krishiv cluster``/``connect-server`` commands and their fixtures.

Real Spark servers on 127.0.0.1: the ``spark_cluster`` and ``connect_server``
fixtures, one cluster started and stopped through the command line, and two
start-ups that fail on purpose.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from krishiv_py.devtools import (
    ConnectServer,
    LocalCluster,
)
from krishiv_py.errors import SessionError

pytestmark = pytest.mark.spark


def _running(pids: list[int]) -> list[int]:
    """The processes, among ``pids`` and the members of their process groups, that still run."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            in_group = os.getpgid(proc.pid) in pids
        except OSError:
            continue
        if (proc.pid in pids or in_group) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            alive.append(proc.pid)
    return alive


def _krishiv(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "krishiv_py.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, check=False)


def test_cli_cluster_start_status_stop_leaves_no_process(tmp_path: Path) -> None:
    env = {**os.environ, "KRISHIV_STATE_DIR": str(tmp_path / "state")}
    state_file = tmp_path / "state" / "cluster.json"
    started = _krishiv(env, "cluster", "start", "--log-dir", str(tmp_path / "logs"))
    try:
        assert started.returncode == 0, started.stderr
        assert re.search(r"^url: +spark://127\.0\.0\.1:\d+$", started.stdout, re.MULTILINE), started.stdout
        assert f"logs:    {tmp_path / 'logs'}" in started.stdout
        state = json.loads(state_file.read_text())
        assert [p["name"] for p in state["processes"]] == ["master", "worker-1"]
        pids = [p["pid"] for p in state["processes"]]
        assert set(pids) <= set(_running(pids))  # they outlive the command that started them
        assert {p.name for p in (tmp_path / "logs").iterdir()} >= {"master.log", "worker-1.log"}

        status = _krishiv(env, "cluster", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "master ALIVE, 1 worker(s) alive, 1 cores" in status.stdout
        again = _krishiv(env, "cluster", "start")
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = _krishiv(env, "cluster", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert _running(pids) == []
    assert not state_file.exists()
    assert _krishiv(env, "cluster", "status").returncode == 1
    assert "nothing to stop" in _krishiv(env, "cluster", "stop").stdout


def test_a_server_that_exits_is_a_session_error_with_the_end_of_its_log(tmp_path: Path) -> None:
    server = ConnectServer(master="bogus://nowhere", log_dir=tmp_path)
    with pytest.raises(SessionError, match="the connect-server process exited with code") as info:
        server.start(timeout_s=120)
    message = str(info.value)
    assert str(tmp_path / "connect-server.log") in message
    assert "Master must either be yarn or start with spark, k8s, or local" in message
    assert not server.running


def test_a_start_up_timeout_is_a_session_error_and_leaves_no_process(tmp_path: Path) -> None:
    cluster = LocalCluster(log_dir=tmp_path)
    with pytest.raises(
        SessionError, match=r"the Spark master did not start: not ready within 0\.5 s"
    ) as info:
        cluster.start(timeout_s=0.5)
    assert str(tmp_path / "master.log") in str(info.value)
    assert [p.name for p in cluster.processes] == ["master"]  # no worker is started before the master
    assert _running([p.pid for p in cluster.processes]) == []


def test_arguments_are_checked_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="memory must be a Spark size"):
        LocalCluster(memory="lots")
    with pytest.raises(ValueError, match="workers and cores_per_worker must be >= 1"):
        LocalCluster(workers=0)
    with pytest.raises(SessionError, match="not started"):
        _ = LocalCluster().master_url


def test_faults_name_a_worker_of_a_started_cluster() -> None:
    cluster = LocalCluster(workers=2)
    with pytest.raises(ValueError, match=r"worker must be 1\.\.2, got 3"):
        cluster.kill_worker(3)
    with pytest.raises(ValueError, match=r"worker must be 1\.\.2, got 0"):
        cluster.start_worker(0)
    with pytest.raises(SessionError, match="not started"):
        cluster.kill_worker(1)
    with pytest.raises(SessionError, match="not started"):
        cluster.executor_pids()
