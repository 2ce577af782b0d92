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
from typing import TYPE_CHECKING

from krishiv_py.errors import SessionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_spark", "find_java", "java_major_version"]

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
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG4J}",
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
    return path


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
