"""A Spark Connect server on this machine, and a remote session that takes turns with a classic one.

::

    from krishiv_py.devtools import ConnectServer, connect_client

    with ConnectServer(master="local[2]") as server, connect_client(server.url) as spark:
        print(spark.range(3).count())    # 3

``krishiv connect-server start|status|stop`` runs the same server detached
from the terminal.

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

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from krishiv_py.devtools.servers import (
    _MEMORY,
    HOST,
    QUICK_START_JVM,
    _Servers,
    _started,
    free_ports,
    server_env,
    spark_home,
)
from krishiv_py.runtime.class_archive import java_options
from krishiv_py.runtime.spark_session import find_java, local_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ConnectServer", "connect_client", "server_conf"]

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Settings of the embedded session that belong to a driver process of its own.
_NOT_FOR_SERVERS = {"spark.driver.memory", "spark.default.parallelism", "spark.driver.extraJavaOptions"}


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
    port
        The gRPC port (default: a free one). Give the ``port`` of a server
        that was stopped to start a new one where its clients connect (a
        server restart).
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
        port: int | None = None,
    ) -> None:
        if not _MEMORY.match(driver_memory):
            raise ValueError(f"driver_memory must be a Spark size such as '1g', got {driver_memory!r}")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise ValueError(f"port must be a TCP port number, got {port!r}")
        super().__init__(log_dir)
        self._fixed_port = port
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
        (self._port,) = (self._fixed_port,) if self._fixed_port is not None else free_ports(1)
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
    # UTC, and the class archive of Spark when this machine has one (``krishiv jvm-archive``).
    conf["spark.driver.extraJavaOptions"] = f"-Duser.timezone=UTC {java_options(find_java())}".strip()
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
