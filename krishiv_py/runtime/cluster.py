"""Spark servers on this machine: a standalone cluster and a Spark Connect server.

:class:`LocalCluster` runs a Spark standalone master and its workers;
:class:`ConnectServer` runs a Spark Connect server. Both come from the
installed ``pyspark`` package (no separate Spark download), listen on
127.0.0.1 only, pick free ports, and own their processes: each process runs in
a process group of its own, and :meth:`~LocalCluster.stop` (leaving the
``with`` block, or the interpreter exiting) ends the whole group, executors
and Python workers included. Each process writes one log file under
``log_dir``::

    from krishiv_py.runtime.cluster import ConnectServer, LocalCluster, connect_client

    with LocalCluster(workers=1, cores_per_worker=2) as cluster:
        print(cluster.master_url)        # spark://127.0.0.1:<port>: a classic driver's master

    with ConnectServer(master="local[2]") as server, connect_client(server.url) as spark:
        print(spark.range(3).count())    # 3

``krishiv cluster start|status|stop`` and ``krishiv connect-server
start|status|stop`` run the same servers detached from the terminal and
record them in a state file (``~/.krishiv/``, or ``$KRISHIV_STATE_DIR``).

A classic driver of a :class:`LocalCluster` needs ``spark.driver.host`` and
``spark.driver.bindAddress`` set to 127.0.0.1 and ``PYSPARK_PYTHON`` set to
this interpreter (the servers get it too), else executors start the system
Python. Executors ask for ``spark.executor.memory`` (1g by default), which must
fit in a worker's ``memory``.

A remote and a classic SparkSession in one process (pyspark 4.3)
----------------------------------------------------------------

* ``SparkSession.builder.remote(url).getOrCreate()`` fails with
  ``[SESSION_ALREADY_EXIST]`` while a classic session runs in the process;
  ``SparkSession.builder.remote(url).create()`` works.
* Creating a remote session (either way) sets ``SPARK_CONNECT_MODE_ENABLED=1``
  in ``os.environ``, and its ``stop()`` leaves it set. While it is set,
  ``pyspark.sql.functions`` and ``Column`` build Spark Connect objects, so
  classic DataFrame code fails (``[NOT_EXPECTED_TYPE] Argument `col` should be
  Column or str, got Column``), ``SparkSession.getActiveSession()`` returns the
  remote session, and no new classic SparkContext can start.

So the two can take turns in one process, not work side by side.
:func:`connect_client` does the turn-taking: it creates the remote session
with ``create()`` and, when the block ends, stops it and puts
``SPARK_CONNECT_MODE_ENABLED`` back as it was, after which the classic session
works again. To use both at once, run the remote client in another process.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from krishiv_py.errors import SessionError
from krishiv_py.runtime.spark_session import _log_tail, check_java, local_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "QUICK_START_JVM",
    "ConnectServer",
    "LocalCluster",
    "ServerProcess",
    "connect_client",
    "end_processes",
    "free_ports",
    "master_status",
    "read_state",
    "recorded_processes",
    "server_conf",
    "server_env",
    "spark_home",
    "state_dir",
    "state_path",
    "stop_recorded",
    "write_state",
]

T = TypeVar("T")
HOST = "127.0.0.1"
DEFAULT_TIMEOUT_S = 180.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_MEMORY = re.compile(r"^[1-9]\d*[kmgtp]b?$", re.IGNORECASE)
# Settings of the embedded session that belong to a driver process of its own.
_NOT_FOR_SERVERS = {"spark.driver.memory", "spark.default.parallelism", "spark.driver.extraJavaOptions"}
# JVM flags for a quick start-up: C1 JIT only and one GC thread start a Spark
# JVM about twice as fast on a busy 2-core machine. The master and workers only
# coordinate, so they lose nothing; a Connect server's driver trades some peak
# speed of long queries (ConnectServer(quick_start=False) keeps the full JIT).
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Variables that tie a process to this one's Py4J gateway or Spark Connect mode.
_PARENT_ONLY = (
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_LOCAL_REMOTE",
    "SPARK_REMOTE",
)


def spark_home() -> str:
    """The installed ``pyspark`` package directory, which is a Spark home (``bin/``, ``jars/``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SessionError("pyspark is not installed")
    return os.path.abspath(next(iter(spec.submodule_search_locations)))


def server_env() -> dict[str, str]:
    """The environment of a Spark server or driver process started from this one."""
    env = {k: v for k, v in os.environ.items() if k not in _PARENT_ONLY}
    env["SPARK_HOME"] = spark_home()
    env["SPARK_LOCAL_IP"] = HOST
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # spark-class first runs a small JVM that only builds the server's command line.
    _prepend(env, "SPARK_LAUNCHER_OPTS", QUICK_START_JVM)
    return env


def _prepend(env: dict[str, str], name: str, options: str) -> None:
    """Put ``options`` before those already in ``env[name]`` (a later JVM flag wins)."""
    env[name] = f"{options} {env.get(name, '')}".strip()


def free_ports(n: int) -> list[int]:
    """``n`` different TCP ports on 127.0.0.1 that nothing listens on right now."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((HOST, 0))
            ports.append(int(s.getsockname()[1]))
        return ports


# --- processes -------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """One server process: the leader of a process group of its own (its pid is the group id)."""

    name: str
    pid: int
    log: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        """Whether any process of its group is still running."""
        if self.popen is not None:
            self.popen.poll()  # reap the leader, so that it does not linger as a zombie
        return bool(_group_members(self.pid))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "log": self.log}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerProcess:
        return cls(name=str(data["name"]), pid=int(data["pid"]), log=str(data["log"]))


def _spawn(name: str, argv: list[str], log_path: str, env: Mapping[str, str]) -> ServerProcess:
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=os.path.dirname(log_path),
            start_new_session=True,  # a process group of its own, out of reach of the terminal's Ctrl-C
        )
    return ServerProcess(name=name, pid=popen.pid, log=log_path, popen=popen)


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    if os.path.isdir("/proc/self"):
        members = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                members.append(int(entry))
        return members
    try:
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=,pgid=,stat="], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.SubprocessError):
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    rows = (line.split() for line in out.stdout.splitlines())
    return [int(r[0]) for r in rows if len(r) >= 3 and int(r[1]) == pgid and not r[2].startswith("Z")]


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        pass
    out = subprocess.run(
        ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return out.stdout


def _is_spark_group(pgid: int) -> bool:
    """Whether group ``pgid`` still runs Spark (a recorded pid may have been reused since)."""
    return any(
        "org.apache.spark" in cmd or "pyspark" in cmd for cmd in map(_command_line, _group_members(pgid))
    )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def end_processes(procs: list[ServerProcess], *, timeout_s: float = 15.0, owned: bool = True) -> None:
    """SIGTERM the process groups of ``procs``, then SIGKILL what is left after ``timeout_s``.

    With ``owned=False`` (processes read from a state file) a group is
    signalled only if it still runs Spark.
    """
    groups = [p for p in procs if p.alive() and (owned or _is_spark_group(p.pid))]
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        for p in groups:
            _signal_group(p.pid, sig)
        deadline = time.monotonic() + wait_s
        while groups and time.monotonic() < deadline:
            groups = [p for p in groups if p.alive()]
            if groups:
                time.sleep(0.1)
        if not groups:
            break
    for p in procs:
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=1)


# --- servers ---------------------------------------------------------------------------


class _Servers:
    """Processes started together, stopped together (the base of the two server kinds)."""

    kind = "servers"

    def __init__(self, log_dir: str | os.PathLike[str] | None) -> None:
        self._log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.processes: list[ServerProcess] = []
        #: Seconds the last :meth:`start` took, until the servers answered.
        self.startup_s: float | None = None
        self._registered = False
        self._started_at: str | None = None

    @property
    def log_dir(self) -> str:
        """The directory of the log files (one per process); created by ``start()``."""
        if self._log_dir is None:
            self._log_dir = tempfile.mkdtemp(prefix=f"krishiv-{self.kind}-", dir=tempfile.gettempdir())
        return self._log_dir

    @property
    def running(self) -> bool:
        """Whether any of the processes is still running."""
        return any(p.alive() for p in self.processes)

    def start(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Self:
        """Start the servers; return once they answer (at once if they already run).

        Raises :class:`SessionError`, with the end of the relevant log, when a
        process exits or the servers do not answer within ``timeout_s``; what
        was started is stopped again.
        """
        if self.running:
            return self
        check_java()
        os.makedirs(self.log_dir, exist_ok=True)
        self.processes = []
        if not self._registered:
            atexit.register(self.stop)
            self._registered = True
        self._started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        t0 = time.monotonic()
        try:
            self._start(t0 + timeout_s, timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str]) -> ServerProcess:
        proc = _spawn(name, argv, os.path.join(self.log_dir, f"{name}.log"), env)
        self.processes.append(proc)
        return proc

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float, timeout_s: float) -> None:
        """Poll ``ready`` until it holds; fail if a process exits or the deadline passes."""
        while True:
            for p in self.processes:
                code = p.popen.poll() if p.popen is not None else None
                if code is not None:
                    raise SessionError(
                        f"{what}: the {p.name} process exited with code {code}" + _log_tail(p.log)
                    )
            if ready():
                return
            if time.monotonic() >= deadline:
                tails = "".join(_log_tail(p.log) for p in self.processes)
                raise SessionError(f"{what}: not ready within {timeout_s:g} s" + tails)
            time.sleep(0.25)

    def stop(self, timeout_s: float = 15.0) -> None:
        """End every process group (SIGTERM, then SIGKILL after ``timeout_s``); the logs stay."""
        if self._registered:
            atexit.unregister(self.stop)
            self._registered = False
        end_processes(self.processes, timeout_s=timeout_s)

    def state(self) -> dict[str, Any]:
        """What ``krishiv ... stop`` needs to find the processes again (see :func:`write_state`)."""
        return {
            "kind": self.kind,
            "log_dir": self.log_dir,
            "started_at": self._started_at,
            "processes": [p.to_json() for p in self.processes],
        }

    def detach(self) -> dict[str, Any]:
        """Leave the processes running after this interpreter exits; returns :meth:`state`."""
        if self._registered:
            atexit.unregister(self.stop)
            self._registered = False
        return self.state()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self, deadline: float, timeout_s: float) -> None:  # pragma: no cover - overridden
        """Start the processes and wait until they answer (before ``deadline``, a ``time.monotonic()``)."""
        raise NotImplementedError


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
            work_dir = os.path.join(self.log_dir, f"worker-{i}-work")
            os.makedirs(work_dir, exist_ok=True)
            argv = ["bash", spark_class, WORKER_CLASS, self._master_url, "--host", HOST]
            argv += ["--cores", str(self.cores_per_worker), "--memory", self.memory]
            argv += ["--work-dir", work_dir, "--webui-port", "0"]
            self._spawn(f"worker-{i}", argv, env)
        self._wait(
            f"the Spark workers did not register with {self._master_url}",
            lambda: self.alive_workers() >= self.workers,
            deadline,
            timeout_s,
        )

    def _status(self) -> dict[str, Any]:
        """The master's JSON status, ``{}`` while it does not answer."""
        if self._web_ui_port is None:
            return {}
        return master_status(self._web_ui_port)

    def alive_workers(self) -> int:
        """How many workers the master lists as ALIVE."""
        return sum(1 for w in self._status().get("workers", []) if w.get("state") == "ALIVE")

    def state(self) -> dict[str, Any]:
        return {**super().state(), "url": self.master_url, "web_ui": self.web_ui_url}


def _started(value: T | None, servers: _Servers) -> T:
    """``value``, set by ``start()``; a :class:`SessionError` before that."""
    if value is None:
        raise SessionError(f"the {type(servers).__name__} is not started: call start() first")
    return value


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


class ConnectServer(_Servers):
    """A Spark Connect server on 127.0.0.1, for ``SparkSession.builder.remote(server.url)``.

    Parameters
    ----------
    master
        The server's own Spark master: ``local[N]``, or a cluster's ``master_url``.
    log_dir
        Directory of its log file, ``connect-server.log``; a new directory
        under the system's temporary directory by default.
    driver_memory
        Memory of the server's driver JVM (with a ``local`` master it runs the tasks too).
    conf
        Further Spark settings; they override the defaults, which mirror the
        embedded session (UTC session time zone, ``shuffle_partitions`` shuffle
        partitions, the streaming settings krishiv_py relies on).
    shuffle_partitions
        ``spark.sql.shuffle.partitions`` of the server's sessions.
    quick_start
        Start the driver JVM with :data:`QUICK_START_JVM` (C1 JIT only, serial
        GC): about a third faster to start on a busy machine, slower on long
        queries. False keeps the JVM's defaults (for benchmarks).
    """

    kind = "connect"

    def __init__(
        self,
        master: str = "local[2]",
        log_dir: str | os.PathLike[str] | None = None,
        *,
        driver_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        shuffle_partitions: int = 4,
        quick_start: bool = True,
    ) -> None:
        if not _MEMORY.match(driver_memory):
            raise ValueError(f"driver_memory must be a Spark size such as '1g', got {driver_memory!r}")
        super().__init__(log_dir)
        self.master = master
        self.driver_memory = driver_memory
        self.conf = server_conf(shuffle_partitions) | dict(conf or {})
        if quick_start:
            options = self.conf.get("spark.driver.extraJavaOptions", "")
            self.conf["spark.driver.extraJavaOptions"] = f"{QUICK_START_JVM} {options}".strip()
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The gRPC port clients connect to."""
        return _started(self._port, self)

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``, for ``SparkSession.builder.remote(url)``."""
        return f"sc://{HOST}:{self.port}"

    def _start(self, deadline: float, timeout_s: float) -> None:
        (self._port,) = free_ports(1)
        conf = {
            **self.conf,
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self._port),
        }
        # What sbin/start-connect-server.sh runs, in the foreground: this process owns it.
        argv = ["bash", os.path.join(spark_home(), "bin", "spark-submit"), "--class", CONNECT_CLASS]
        argv += ["--name", "Spark Connect server", "--master", self.master]
        argv += ["--driver-memory", self.driver_memory]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        env = server_env()
        env["SPARK_CONNECT_MODE"] = "0"  # as sbin/start-connect-server.sh: the server is a classic driver
        self._spawn("connect-server", argv, env)
        what = f"the Spark Connect server did not start ({self.master})"
        self._wait(what, lambda: _accepts(self._port), deadline, timeout_s)
        self._wait(what, lambda: _answers(self.url, deadline), deadline, timeout_s)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "url": self.url, "master": self.master}


def server_conf(shuffle_partitions: int) -> dict[str, str]:
    """Spark settings of a server's driver: the embedded session's, for a JVM of its own."""
    conf = {k: v for k, v in local_conf(shuffle_partitions).items() if k not in _NOT_FOR_SERVERS}
    conf["spark.driver.extraJavaOptions"] = "-Duser.timezone=UTC"
    return conf


def _accepts(port: int | None) -> bool:
    if port is None:
        return False
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _answers(url: str, deadline: float) -> bool:
    """Whether the Connect server at ``url`` answers a config request (True without grpcio)."""
    try:
        import grpc
        from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc
    except ImportError:  # the pyspark[connect] extra is not installed: the open port must do
        return True
    session_id = str(uuid.uuid4())
    user = base_pb2.UserContext(user_id="krishiv")
    get = base_pb2.ConfigRequest.Get(keys=["spark.sql.session.timeZone"])
    request = base_pb2.ConfigRequest(
        session_id=session_id,
        user_context=user,
        client_type="krishiv-probe",
        operation=base_pb2.ConfigRequest.Operation(get=get),
    )
    timeout = max(1.0, deadline - time.monotonic())
    with grpc.insecure_channel(url.removeprefix("sc://")) as channel:
        stub = base_pb2_grpc.SparkConnectServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Config(request, timeout=timeout)
        except grpc.RpcError:
            return False
        with contextlib.suppress(grpc.RpcError):
            release = base_pb2.ReleaseSessionRequest(session_id=session_id, user_context=user)
            stub.ReleaseSession(release, timeout=10)
    return True


@contextlib.contextmanager
def connect_client(url: str) -> Iterator[SparkSession]:
    """A remote SparkSession on ``url`` that can take turns with a classic one in this process.

    Created with ``SparkSession.builder.remote(url).create()``; on exit it is
    stopped and ``SPARK_CONNECT_MODE_ENABLED`` is put back as it was (see the
    module docstring for why).
    """
    from pyspark.sql import SparkSession

    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    try:
        spark = SparkSession.builder.remote(url).create()
    except BaseException:
        _restore_env("SPARK_CONNECT_MODE_ENABLED", before)
        raise
    try:
        yield spark
    finally:
        try:
            spark.stop()
        finally:
            _restore_env("SPARK_CONNECT_MODE_ENABLED", before)


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# --- state files (krishiv cluster / connect-server) ------------------------------------


def state_dir() -> str:
    """Where the CLI records detached servers: ``$KRISHIV_STATE_DIR``, else ``~/.krishiv``."""
    return os.environ.get("KRISHIV_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".krishiv")


def state_path(name: str) -> str:
    """The state file ``<state_dir>/<name>.json`` (``cluster``, ``connect-server``)."""
    return os.path.join(state_dir(), f"{name}.json")


def write_state(name: str, state: Mapping[str, Any]) -> str:
    """Record detached servers (a :meth:`LocalCluster.state`); returns the file's path."""
    path = state_path(name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=2)
    os.replace(tmp, path)
    return path


def read_state(name: str) -> dict[str, Any] | None:
    """The recorded servers, None if nothing is recorded (or the file is unreadable)."""
    try:
        with open(state_path(name)) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def recorded_processes(state: Mapping[str, Any]) -> list[ServerProcess]:
    """The processes of a recorded state (without a ``popen``: this process did not start them)."""
    return [ServerProcess.from_json(p) for p in state.get("processes", [])]


def stop_recorded(name: str, timeout_s: float = 15.0) -> dict[str, Any] | None:
    """Stop the servers recorded in state file ``name`` and remove it; returns the state (None: none)."""
    state = read_state(name)
    if state is not None:
        end_processes(recorded_processes(state), timeout_s=timeout_s, owned=False)
    with contextlib.suppress(FileNotFoundError):
        os.remove(state_path(name))
    return state
