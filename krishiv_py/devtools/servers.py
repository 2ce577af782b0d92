"""What both kinds of Spark server share: their processes, start and stop, and the CLI's state files.

A server process (:class:`ServerProcess`) runs in a process group of its own,
started from the installed ``pyspark`` package (:func:`spark_home`) with the
environment of :func:`server_env`, on 127.0.0.1 and free ports
(:func:`free_ports`). :func:`end_processes` ends whole groups, executors and
Python workers included. The servers of :mod:`krishiv_py.devtools.cluster`
and :mod:`krishiv_py.devtools.connect` start and stop their processes
together, each writing one log file under ``log_dir``.

``krishiv cluster|connect-server start`` records the servers it leaves
running in a state file (:func:`write_state`, under ``~/.krishiv`` or
``$KRISHIV_STATE_DIR``), which ``status`` and ``stop`` read back.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from krishiv_py.errors import SessionError
from krishiv_py.runtime.spark_session import _log_tail, check_java

__all__ = [
    "QUICK_START_JVM",
    "ServerProcess",
    "end_processes",
    "free_ports",
    "read_state",
    "recorded_processes",
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
_MEMORY = re.compile(r"^[1-9]\d*[kmgtp]b?$", re.IGNORECASE)
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


#: What the command line of a server process of ours holds (Spark's JVMs and workers, the broker).
_OURS = ("org.apache.spark", "pyspark", "tansu")


def _is_spark_group(pgid: int) -> bool:
    """Whether group ``pgid`` still runs one of our servers (a recorded pid may have been reused since)."""
    return any(mark in cmd for cmd in map(_command_line, _group_members(pgid)) for mark in _OURS)


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
    #: Whether the processes are JVMs (``start`` checks for Java first).
    needs_java = True

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
        if self.needs_java:
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


def _started(value: T | None, servers: _Servers) -> T:
    """``value``, set by ``start()``; a :class:`SessionError` before that."""
    if value is None:
        raise SessionError(f"the {type(servers).__name__} is not started: call start() first")
    return value


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
