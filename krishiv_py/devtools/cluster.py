"""A Spark standalone cluster on this machine: a master and its workers on 127.0.0.1.

::

    from krishiv_py.devtools import LocalCluster

    with LocalCluster(workers=1, cores_per_worker=2) as cluster:
        print(cluster.master_url)        # spark://127.0.0.1:<port>: a classic driver's master

``krishiv cluster start|status|stop`` runs the same cluster detached from the
terminal.

Faults for recovery tests: :meth:`LocalCluster.executor_pids` finds the
executor JVMs, :meth:`LocalCluster.kill_executor` and
:meth:`LocalCluster.kill_worker` SIGKILL one (a worker with every executor and
Python worker it started), :meth:`LocalCluster.start_worker` brings a killed
worker back.

A classic driver of a :class:`LocalCluster` needs ``spark.driver.host`` and
``spark.driver.bindAddress`` set to 127.0.0.1 and ``PYSPARK_PYTHON`` set to
this interpreter (the servers get it too), else executors start the system
Python. Executors ask for ``spark.executor.memory`` (1g by default), which must
fit in a worker's ``memory``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from typing import Any

from krishiv_py.devtools.servers import (
    _MEMORY,
    HOST,
    QUICK_START_JVM,
    ServerProcess,
    _command_line,
    _group_members,
    _prepend,
    _Servers,
    _started,
    free_ports,
    server_env,
    spark_home,
)
from krishiv_py.errors import SessionError
from krishiv_py.runtime.spark_session import _log_tail

__all__ = ["LocalCluster", "master_status"]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class LocalCluster(_Servers):
    """A Spark standalone master and ``workers`` workers on 127.0.0.1.

    Parameters
    ----------
    workers
        Number of worker processes.
    cores_per_worker
        Cores each worker offers to executors.
    memory
        Memory each worker offers to executors (``"1g"``, ``"512m"``); an
        executor asks for ``spark.executor.memory`` (1g unless the driver sets it).
    log_dir
        Directory of the log files (``master.log``, ``worker-1.log``, ...) and
        of the workers' work directories; a new directory under the system's
        temporary directory by default.
    """

    kind = "cluster"

    def __init__(
        self,
        workers: int = 1,
        cores_per_worker: int = 1,
        memory: str = "1g",
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if workers < 1 or cores_per_worker < 1:
            raise ValueError(
                f"workers and cores_per_worker must be >= 1, got {workers} and {cores_per_worker}"
            )
        if not _MEMORY.match(memory):
            raise ValueError(f"memory must be a Spark size such as '1g' or '512m', got {memory!r}")
        super().__init__(log_dir)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self._master_url: str | None = None
        self._web_ui_port: int | None = None

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the master URL for drivers."""
        return _started(self._master_url, self)

    @property
    def web_ui_url(self) -> str:
        """The master's web UI (its JSON status is at ``<web_ui_url>/json/``)."""
        return f"http://{HOST}:{_started(self._web_ui_port, self)}"

    def _start(self, deadline: float, timeout_s: float) -> None:
        env = server_env()
        # Nothing else submits to the master: no REST server on the fixed port 6066.
        _prepend(env, "SPARK_MASTER_OPTS", "-Dspark.master.rest.enabled=false")
        _prepend(env, "SPARK_DAEMON_JAVA_OPTS", QUICK_START_JVM)
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        port, self._web_ui_port = free_ports(2)
        argv = ["bash", spark_class, MASTER_CLASS, "--host", HOST, "--port", str(port)]
        self._spawn("master", [*argv, "--webui-port", str(self._web_ui_port)], env)
        # A worker that registers before the master is elected leader is ignored
        # and retries only 5-15 s later: start the workers once the master is ALIVE.
        self._wait(
            "the Spark master did not start",
            lambda: self._status().get("status") == "ALIVE",
            deadline,
            timeout_s,
        )
        self._master_url = str(self._status().get("url") or f"spark://{HOST}:{port}")
        for i in range(1, self.workers + 1):
            self._spawn_worker(i, f"worker-{i}")
        self._wait(
            f"the Spark workers did not register with {self._master_url}",
            lambda: self.alive_workers() >= self.workers,
            deadline,
            timeout_s,
        )

    def _spawn_worker(self, i: int, name: str) -> None:
        env = server_env()
        _prepend(env, "SPARK_DAEMON_JAVA_OPTS", QUICK_START_JVM)
        work_dir = os.path.join(self.log_dir, f"worker-{i}-work")
        os.makedirs(work_dir, exist_ok=True)
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        argv = ["bash", spark_class, WORKER_CLASS, self.master_url, "--host", HOST]
        argv += ["--cores", str(self.cores_per_worker), "--memory", self.memory]
        argv += ["--work-dir", work_dir, "--webui-port", "0"]
        self._spawn(name, argv, env)

    def _worker(self, worker: int) -> ServerProcess:
        """The newest process of worker ``worker`` (1-based)."""
        if not isinstance(worker, int) or not 1 <= worker <= self.workers:
            raise ValueError(f"worker must be 1..{self.workers}, got {worker!r}")
        name = f"worker-{worker}"
        procs = [p for p in self.processes if p.name == name or p.name.startswith(f"{name}.")]
        return _started(procs[-1] if procs else None, self)

    def executor_pids(self, worker: int | None = None) -> list[int]:
        """The running executor JVMs (of worker ``worker`` only, 1-based, if given)."""
        workers = [worker] if worker is not None else range(1, self.workers + 1)
        return sorted(
            pid
            for w in workers
            for pid in _group_members(self._worker(w).pid)
            if EXECUTOR_CLASS in _command_line(pid)
        )

    def kill_executor(self, pid: int) -> None:
        """SIGKILL executor JVM ``pid`` (one of :meth:`executor_pids`); its worker starts a new one."""
        if pid not in self.executor_pids():
            raise ValueError(f"process {pid} is not an executor of this cluster")
        os.kill(pid, signal.SIGKILL)

    def kill_worker(self, worker: int) -> None:
        """SIGKILL worker ``worker`` (1-based) with its executors and their Python workers.

        The master notices the worker is gone when its heartbeats stop (60 s
        by default) or at once when its connection closes, as here. Start it
        again with :meth:`start_worker`.
        """
        proc = self._worker(worker)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def start_worker(self, worker: int, timeout_s: float = 120.0) -> None:
        """Start worker ``worker`` again after :meth:`kill_worker`; return once the master lists it.

        Its log is ``worker-<n>.<restart>.log``; it offers the same cores
        and memory and has the same work directory.
        """
        proc = self._worker(worker)
        if proc.alive():
            raise SessionError(f"worker {worker} is running: kill_worker({worker}) first")
        before = self._alive_worker_ids()
        restarts = sum(1 for p in self.processes if p.name.startswith(f"worker-{worker}."))
        self.processes.remove(proc)
        self._spawn_worker(worker, f"worker-{worker}.{restarts + 1}")
        new = self.processes[-1]
        deadline = time.monotonic() + timeout_s
        while not self._alive_worker_ids() - before:
            code = new.popen.poll() if new.popen is not None else None
            if code is not None or time.monotonic() >= deadline:
                why = f"exited with code {code}" if code is not None else f"not ready within {timeout_s:g} s"
                raise SessionError(
                    f"worker {worker} did not register again with {self.master_url}: {why}"
                    + _log_tail(new.log)
                )
            time.sleep(0.25)

    def _status(self) -> dict[str, Any]:
        """The master's JSON status, ``{}`` while it does not answer."""
        if self._web_ui_port is None:
            return {}
        return master_status(self._web_ui_port)

    def alive_workers(self) -> int:
        """How many workers the master lists as ALIVE."""
        return len(self._alive_worker_ids())

    def _alive_worker_ids(self) -> set[str]:
        return {str(w.get("id")) for w in self._status().get("workers", []) if w.get("state") == "ALIVE"}

    def state(self) -> dict[str, Any]:
        return {**super().state(), "url": self.master_url, "web_ui": self.web_ui_url}


def master_status(web_ui_port: int) -> dict[str, Any]:
    """A standalone master's JSON status (``/json/`` of its web UI), ``{}`` if it does not answer."""
    # No proxy: a proxy from the environment cannot reach this machine's loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{HOST}:{web_ui_port}/json/", timeout=2) as resp:
            status = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}
