"""A class-data archive of Spark's classes, so a local Spark starts in about half the time.

Starting Spark's JVM is mostly loading and verifying the classes in
Spark's jars. The JVM can map them from an archive written by an earlier run
instead (HotSpot's class-data sharing, a "dynamic archive": JDK 13 and newer).
``krishiv jvm-archive`` writes one for this machine's Java and pyspark; every
local Spark krishiv_py starts afterwards (``Session.embedded()``, and the
driver of ``Session.connect()``, the devtools' Spark Connect server) maps it.
On 2 cores: start-up 10.5 s of wall clock and 10.7 s of JVM CPU without,
5-6 s of each with (docs/performance.md).

- Where: ``$KRISHIV_CLASS_ARCHIVE``, else
  ``<cache>/jvm/spark-<pyspark version>-<java>.jsa`` under ``$KRISHIV_CACHE_DIR``
  (default ``$XDG_CACHE_HOME/krishiv`` or ``~/.cache/krishiv``). About 190 MB.
  ``KRISHIV_CLASS_ARCHIVE=off`` turns it off.
- Safe when stale: the JVM checks the archive against its own build and
  against the jars' sizes and times, and runs without it when they differ (an
  upgraded Java or pyspark); krishiv_py silences that warning, so nothing is
  printed. Delete the file, or run ``krishiv jvm-archive`` again, to refresh it.
- Written the way a commit is: the JVM dumps to a temporary file when it
  exits, which then replaces the archive in one move.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Sequence

__all__ = [
    "ARCHIVE_ENV",
    "CACHE_ENV",
    "DUMP_ENV",
    "archive_path",
    "build_archive",
    "cache_dir",
    "exit_jvm",
    "java_options",
]

#: The archive's path, or ``off`` (also ``0``, ``false``, ``no``) for none.
ARCHIVE_ENV = "KRISHIV_CLASS_ARCHIVE"
#: The directory of krishiv_py's caches.
CACHE_ENV = "KRISHIV_CACHE_DIR"
#: Set for the process that writes an archive: its JVM dumps its classes here when it exits.
DUMP_ENV = "KRISHIV_CLASS_ARCHIVE_DUMP"
_OFF = {"off", "0", "false", "no"}
#: The JVM's own messages about an archive it cannot use (stale, another build) stay quiet.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> str:
    """``$KRISHIV_CACHE_DIR``, else ``$XDG_CACHE_HOME/krishiv``, else ``~/.cache/krishiv``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "krishiv")


def archive_path(java: str | None) -> str | None:
    """Where this machine's archive for ``java`` and the installed pyspark is (None: turned off)."""
    explicit = os.environ.get(ARCHIVE_ENV, "").strip()
    if explicit.lower() in _OFF:
        return None
    if explicit:
        return explicit
    if java is None:
        return None
    import pyspark

    real = os.path.realpath(java)
    tag = hashlib.sha256(real.encode()).hexdigest()[:12]
    return os.path.join(cache_dir(), "jvm", f"spark-{pyspark.__version__}-java-{tag}.jsa")


def java_options(java: str | None) -> str:
    """The JVM options for the driver: dump the archive, map it, or nothing."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {_QUIET}"
    path = archive_path(java)
    if path is None or not os.path.isfile(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build_archive(path: str, workload: Sequence[str], *, timeout_s: float = 600.0) -> None:
    """Run ``workload`` (a command) with its driver JVM dumping its classes; the dump becomes ``path``.

    The workload starts a local Spark session, runs what should start fast,
    and exits the JVM cleanly (the dump is written at exit):
    :func:`exit_jvm`. Raises :class:`OSError` naming the log's end when no
    archive was written.
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    env = {**os.environ, DUMP_ENV: tmp}
    env.pop(ARCHIVE_ENV, None)
    proc = subprocess.run(list(workload), env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not os.path.isfile(tmp):
        with contextlib.suppress(OSError):
            os.remove(tmp)
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise OSError(f"no class archive was written (exit code {proc.returncode}):\n{tail}")
    os.replace(tmp, path)


def exit_jvm(timeout_s: float = 300.0) -> None:
    """End this process's Spark JVM cleanly and wait for it (it writes its archive as it exits).

    Call it after the session stopped; no Spark can start in this process afterwards.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.jvm.java.lang.System.exit(0)  # the call does not return: the JVM is gone
    if proc is not None:
        proc.wait(timeout=timeout_s)
