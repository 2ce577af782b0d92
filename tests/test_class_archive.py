"""The class archive of Spark: where it is, the driver's options, and a JVM that starts from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from krishiv_py.devtools.connect import server_conf
from krishiv_py.runtime import class_archive as ca
from krishiv_py.runtime.spark_session import find_java, local_conf

#: Set by the run's start (conftest.py) when it could not write the archive: why.
ARCHIVE_ERROR_ENV = "KRISHIV_TEST_ARCHIVE_ERROR"

# A child process's session: start, run one query, print the JVM's log file, stop.
CHILD = (
    "import sys\n"
    "import krishiv_py as kp\n"
    "conf = {'spark.driver.extraClassPath': sys.argv[1]} if len(sys.argv) > 1 else {}\n"
    "s = kp.Session.embedded(app_name='archive-check', spark_conf=conf)\n"
    "assert s.spark.range(3).count() == 3\n"
    "print(s.log_path)\n"
    "s.stop()\n"
)


def test_the_archive_is_keyed_by_pyspark_and_java_and_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pyspark

    monkeypatch.delenv(ca.ARCHIVE_ENV, raising=False)
    monkeypatch.setenv(ca.CACHE_ENV, str(tmp_path))
    path = ca.archive_path("/usr/bin/java")
    assert path is not None and path.startswith(str(tmp_path / "jvm" / f"spark-{pyspark.__version__}-java-"))
    assert ca.archive_path("/opt/other/java") != path  # another Java, another archive
    assert ca.archive_path(None) is None
    for off in ("off", "0", "False"):
        monkeypatch.setenv(ca.ARCHIVE_ENV, off)
        assert ca.archive_path("/usr/bin/java") is None and ca.java_options("/usr/bin/java") == ""
    monkeypatch.setenv(ca.ARCHIVE_ENV, str(tmp_path / "mine.jsa"))
    assert ca.archive_path(None) == str(tmp_path / "mine.jsa")


def test_the_driver_maps_an_archive_that_exists_and_dumps_one_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.delenv(ca.DUMP_ENV, raising=False)
    monkeypatch.setenv(ca.ARCHIVE_ENV, str(archive))
    assert ca.java_options(find_java()) == ""  # not written yet: nothing to map
    assert "SharedArchiveFile" not in local_conf(2)["spark.driver.extraJavaOptions"]
    archive.write_bytes(b"x")
    options = local_conf(2)["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={archive}" in options and "-Xlog:cds=off" in options
    assert options.startswith("-Duser.timezone=UTC")  # the other driver options stay
    assert f"-XX:SharedArchiveFile={archive}" in server_conf(2)["spark.driver.extraJavaOptions"]  # Connect
    monkeypatch.setenv(ca.DUMP_ENV, str(tmp_path / "dump.jsa"))
    assert ca.java_options(find_java()).startswith(f"-XX:ArchiveClassesAtExit={tmp_path / 'dump.jsa'} ")


def test_a_failed_build_names_its_output_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "a.jsa"
    with pytest.raises(OSError, match=r"(?s)no class archive was written.*boom"):
        ca.build_archive(str(target), [sys.executable, "-c", "import sys; sys.exit('boom')"])
    assert list(tmp_path.iterdir()) == []


def _start(tmp_path: Path, archive: str, name: str, *args: str) -> tuple[str, str]:
    """A child process's session with ``archive``: the JVM's log, and the classes it loaded (and whence).

    ``args``: a directory the driver's class path starts with (the archive's class path then differs).
    """
    classes = tmp_path / f"{name}-classes.log"
    env = {
        **os.environ,
        ca.ARCHIVE_ENV: archive,
        "SPARK_SUBMIT_OPTS": " ".join(
            [os.environ.get("SPARK_SUBMIT_OPTS", ""), f"-Xlog:class+load=info:file={classes}"]
        ),
    }
    cmd = [sys.executable, "-c", CHILD, *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = Path(proc.stdout.strip().splitlines()[-1]).read_text(errors="replace")
    return log, classes.read_text(errors="replace")


@pytest.mark.spark
def test_a_local_spark_starts_from_the_archive_and_quietly_without_a_stale_one(tmp_path: Path) -> None:
    assert ARCHIVE_ERROR_ENV not in os.environ, os.environ.get(ARCHIVE_ERROR_ENV)
    path = ca.archive_path(find_java())
    assert path is not None and os.path.isfile(path)  # the run's start wrote it (conftest)
    _, loaded = _start(tmp_path, path, "archive")
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in loaded
    # Stale: the archive's class path is no longer the JVM's (as after an upgrade of pyspark).
    log, loaded = _start(tmp_path, path, "stale", str(tmp_path))
    assert "org.apache.spark.SparkContext source: file:" in loaded  # from its jar: no archive
    assert "cds" not in log.lower()  # the JVM said nothing of the archive it could not use
