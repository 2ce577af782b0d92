"""Start (or attach to) Spark, tuned for event-time streaming on one machine.

Importing this module imports pyspark; :mod:`krishiv_py.session` only does so
when a session is created, so ``import krishiv_py`` stays JVM-free.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from krishiv_py.errors import SessionError
from krishiv_py.runtime.class_archive import java_options
from krishiv_py.runtime.durability import Durability, check_location
from krishiv_py.runtime.remote import (
    CONNECT_MODE_ENV,
    build_remote,
    check_reachable,
    is_loopback,
    on_this_machine,
    parse_connect_url,
    parse_master_url,
    restore_mode,
)
from krishiv_py.runtime.watch import quiet_python_loggers, verbose_default
from krishiv_py.spark_errors import log_failures_to

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "StartedSpark",
    "build_spark",
    "find_java",
    "java_major_version",
    "start_cluster",
    "start_local",
    "start_remote",
]

MIN_JAVA = 17
_LOG4J = "file:" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
_JAVA_HELP = (
    "krishiv_py runs Apache Spark 4, which needs Java {min} or newer. Install it "
    "(Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`; macOS: `brew install openjdk@17`) "
    "or point JAVA_HOME at an existing Java {min}+ installation."
)


def find_java() -> str | None:
    """Path of the ``java`` binary Spark will use: ``$JAVA_HOME/bin/java``, else PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    """Major version printed by ``java -version`` (8 for "1.8.0_x"), None if unreadable."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> None:
    """Raise :class:`SessionError` naming the fix when no usable Java is found."""
    java = find_java()
    where = "JAVA_HOME" if os.environ.get("JAVA_HOME") else "PATH"
    if java is None:
        raise SessionError(f"no Java found on {where}. " + _JAVA_HELP.format(min=MIN_JAVA))
    version = java_major_version(java)
    if version is None:
        raise SessionError(f"cannot run {java} -version. " + _JAVA_HELP.format(min=MIN_JAVA))
    if version < MIN_JAVA:
        raise SessionError(f"{java} is Java {version}. " + _JAVA_HELP.format(min=MIN_JAVA))


def driver_memory() -> str:
    """A quarter of this machine's memory, between 1 and 8 GiB (Spark's default is 1 GiB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


def local_conf(cores: int) -> dict[str, str]:
    """Spark settings for one machine (docs/lowering.md explains each)."""
    return {
        # In local mode the driver JVM runs every task; 1 GiB runs out of heap
        # on a million-row batch.
        "spark.driver.memory": driver_memory(),
        # Spark's default of 200 shuffle partitions makes every stateful
        # micro-batch schedule 200 tiny tasks; one per core is ~10x faster here.
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # What the driver keeps of finished jobs, stages, tasks and SQL executions (for the
        # UI, which is off): Spark's 1,000 / 1,000 / 100,000 / 1,000 grow the heap of a
        # long-running streaming job for hours; every micro-batch is a few of each.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "1000",
        "spark.sql.ui.retainedExecutions": "100",
        "spark.sql.session.timeZone": "UTC",
        # UTC, quiet logging, and this machine's class archive of Spark when there is one
        # (``krishiv jvm-archive``: the JVM starts in about half the time).
        "spark.driver.extraJavaOptions": " ".join(
            o
            for o in (f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG4J}", java_options(find_java()))
            if o
        ),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        # Jobs rebuild their metrics from recent progress; keep more of it.
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.sql.adaptive.enabled": "false",
        # Parquet results carry UTC microsecond timestamps, not legacy INT96.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }


def build_spark(
    *, master: str, app_name: str, conf: dict[str, str], local: bool, verbose: bool = False
) -> tuple[SparkSession, bool, str | None]:
    """Create or attach to a SparkSession.

    Returns it, whether we created it, and the log file that receives the
    JVM's output (None when the JVM was already running, or ``verbose``).
    """
    if local:
        check_java()
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a hard dependency
        raise SessionError(f"pyspark is not installed: {exc}") from exc
    from krishiv_py.runtime.watch import quiet_python_loggers

    quiet_python_loggers(verbose)
    existing = SparkSession.getActiveSession()
    log_path = None if verbose else _launch_quiet_gateway(master, app_name, conf)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SessionError(
            f"Spark failed to start ({master}): {_first_line(exc)}" + _log_tail(log_path)
        ) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark, existing is None, log_path


def _launch_quiet_gateway(master: str, app_name: str, conf: dict[str, str]) -> str | None:
    """Start the JVM with its stdout/stderr in a log file, unless one is already running.

    PySpark starts the JVM with the terminal's stdout/stderr: Spark's log
    output, Java stack traces of failed queries and the JVM's start-up
    warnings would all land in the user's terminal or notebook.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    from krishiv_py.runtime.watch import new_log_path

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in conf.items():
        spark_conf.set(key, value)
    path = new_log_path(app_name)
    with open(path, "ab") as log:
        try:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                spark_conf, popen_kwargs={"stdout": log, "stderr": subprocess.STDOUT}
            )
        except Exception as exc:
            raise SessionError(
                f"Spark failed to start ({master}): {_first_line(exc)}" + _log_tail(path)
            ) from exc
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    _JVM_LOG["path"] = path
    return path


#: The log file of the JVM this process started (``"path"``), where a failed Spark call's whole
#: text goes too (:func:`~krishiv_py.spark_errors.log_failures_to`).
_JVM_LOG: dict[str, str] = {}


def _append_to_log(text: str) -> None:
    path = _JVM_LOG.get("path")
    if path is not None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


log_failures_to(_append_to_log)


def _log_tail(path: str | None, lines: int = 15) -> str:
    """The last lines of the JVM's log, to show when Spark does not start."""
    if not path:
        return ""
    try:
        with open(path, errors="replace") as f:
            tail = [ln.rstrip() for ln in f.readlines()[-lines:] if ln.strip()]
    except OSError:
        return ""
    return f"\nSpark's log ({path}) ends with:\n" + "\n".join(tail) if tail else f"\n(Spark's log: {path})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@attrs.frozen(kw_only=True)
class StartedSpark:
    """A SparkSession ready for a session, and what goes with it."""

    spark: SparkSession = attrs.field(repr=False)
    #: This process started it, so stopping the session stops it.
    owns: bool
    master: str
    #: The file that receives Spark's own output (None: the terminal, or a JVM started elsewhere).
    log_path: str | None = None
    #: Runs when the session stops (a remote session puts pyspark's Connect-mode switch back).
    on_stop: Callable[[], None] | None = None


def start_local(
    *,
    app_name: str,
    durability: Durability,
    state_dir: str | None,
    spark_conf: Mapping[str, str] | None,
    verbose: bool | None,
) -> StartedSpark:
    """A local Spark (``local[*]``) tuned for this machine (``Session.embedded``)."""
    check_location(durability, state_dir, master="local[*]")  # before starting Spark
    conf = {**local_conf(os.cpu_count() or 2), **dict(spark_conf or {})}
    return _driver("local[*]", app_name, conf, verbose)


def start_cluster(
    master: str,
    *,
    app_name: str,
    durability: Durability,
    state_dir: str | None,
    spark_conf: Mapping[str, str] | None,
    verbose: bool | None,
) -> StartedSpark:
    """This process as the driver of the cluster at ``master`` (``Session.connect``)."""
    if not isinstance(master, str) or not re.match(r"^(spark://|local(\[[0-9*]+\])?$|yarn$|k8s://)", master):
        raise SessionError(
            f"unsupported master {master!r}: use spark://host:port, local[N], yarn or k8s://..."
        )
    check_location(durability, state_dir, master=master)  # before connecting
    standalone = parse_master_url(master)
    if standalone is not None:
        check_reachable(*standalone, "Spark master")
    loopback = standalone is not None and is_loopback(standalone[0])
    conf = {**driver_conf(master, loopback=loopback), **dict(spark_conf or {})}
    started = _driver(master, app_name, conf, verbose)
    if not master.startswith("local") and "spark.sql.shuffle.partitions" not in conf:
        parallelism = started.spark.sparkContext.defaultParallelism
        started.spark.conf.set("spark.sql.shuffle.partitions", str(max(2, parallelism)))
    return started


def _driver(master: str, app_name: str, conf: dict[str, str], verbose: bool | None) -> StartedSpark:
    """A classic SparkSession with this process as the driver of ``master``."""
    spark, owns, log_path = build_spark(
        master=master,
        app_name=app_name,
        conf=conf,
        local=master.startswith("local"),
        verbose=verbose_default() if verbose is None else verbose,
    )
    return StartedSpark(spark=spark, owns=owns, master=master, log_path=log_path)


def start_remote(
    url: str,
    *,
    app_name: str,
    durability: Durability,
    state_dir: str | None,
    spark_conf: Mapping[str, str] | None,
    verbose: bool | None,
) -> StartedSpark:
    """A Spark Connect session to the server at ``url`` (``Session.remote``)."""
    parse_connect_url(url)
    local = on_this_machine(url)
    check_location(durability, state_dir, master=url)  # before connecting
    quiet_python_loggers(verbose_default() if verbose is None else verbose)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)) if local else "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **dict(spark_conf or {}),
    }
    before = os.environ.get(CONNECT_MODE_ENV)
    spark = build_remote(url, app_name=app_name, conf=conf)
    return StartedSpark(spark=spark, owns=True, master=url, on_stop=lambda: restore_mode(before))


def driver_conf(master: str, *, loopback: bool) -> dict[str, str]:
    """Spark settings for this process as the driver of ``master``.

    It keeps the local JVM options (UTC, quiet logging) but not the local
    sizing; executors elsewhere run this process's Python; a cluster on
    this machine (``loopback``) reaches the driver on loopback too.
    """
    conf = {
        k: v
        for k, v in local_conf(os.cpu_count() or 2).items()
        if not k.startswith("spark.driver.") or k == "spark.driver.extraJavaOptions"
    }
    if not master.startswith("local"):
        conf.pop("spark.sql.shuffle.partitions")
        conf.pop("spark.default.parallelism")
        conf["spark.executorEnv.PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if loopback:
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf
