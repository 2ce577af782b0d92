"""Shared fixtures: one SparkSession for the whole test run, and Spark servers on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings

import krishiv_py as kp
from krishiv_py.devtools import QUICK_START_JVM, ConnectServer, KafkaBroker, LocalCluster, PostgresServer

settings.register_profile(
    "krishiv",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "krishiv"))

# Every driver JVM spark-submit starts for the tests (the shared session's, and those of the
# child processes: notebooks, benchmark and chaos runs, the remote checks), and spark-submit's
# own launcher JVM, start with QUICK_START_JVM (C1 JIT only, serial GC): the tests run short
# queries, where start-up and compilation dominate. Options set in the environment are kept
# as they are (a second garbage collector would stop the JVM from starting).
for _name in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS"):
    os.environ.setdefault(_name, QUICK_START_JVM)

# What Spark's JVMs (the shared session's, the child processes', the test servers') and the child
# processes' krishiv sessions leave in the temporary directory goes to one directory of this test
# process, removed when the run ends (pytest_unconfigure): Spark's local directories (spark-*,
# blockmgr-*), which outlive a JVM that pyspark kills at exit, and java.io.tmpdir; the child
# processes' TMPDIR. This process keeps its own temporary directory (pytest's tmp_path, and the
# sessions that the fixtures stop): tempfile reads it once, here, before TMPDIR changes; so do
# Spark's log files (krishiv-logs, the newest 20 kept), which a failed test's message may name.
_OWN_TMP = tempfile.gettempdir()
os.environ.setdefault("KRISHIV_LOG_DIR", os.path.join(_OWN_TMP, "krishiv-logs"))
RUN_TMP = tempfile.mkdtemp(prefix="krishiv-tests-")
os.environ.setdefault("SPARK_LOCAL_DIRS", RUN_TMP)
os.environ.setdefault("TMPDIR", RUN_TMP)
for _name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    if "java.io.tmpdir" not in os.environ.get(_name, ""):
        os.environ[_name] = f"{os.environ.get(_name, '')} -Djava.io.tmpdir={RUN_TMP}".strip()


#: The test files that take longest (seconds of one run, 2 cores, 2026-11-30, late), longest first. The
#: run's workers take files in collection order (``--no-loadscope-reorder``), so these start
#: first and the short files fill the end: no worker idles while another finishes a long file.
LONGEST_FIRST = (
    "test_composition_chains.py",
    "test_benchmarks.py",
    "test_remote.py",
    "test_chaos.py",
    "test_key_groups.py",
    "test_examples.py",
    "test_kafka.py",
    "test_differential.py",
    "test_held_state.py",
    "test_over.py",
    "test_joins.py",
    "test_composition.py",
    "test_chain_properties.py",
    "test_transcripts.py",
    "test_chaos_cluster.py",
    "test_stateful_kernel.py",
    "test_nexmark_queries.py",
    "test_auto_watermark.py",
    "test_durability.py",
    "test_stateful.py",
    "test_table_sinks.py",
    "test_emission_transcripts.py",
    "test_idle_sources.py",
    "test_jobs.py",
    "test_carriers.py",
    "test_notebooks.py",
    "test_first_hour.py",
    "test_multi_source.py",
    "test_class_archive.py",
    "test_keyed_agg_retract.py",
    "test_nexmark_chains.py",
    "test_join_kernel.py",
    "test_top_n.py",
    "test_parity.py",
    "test_connect_restart.py",
)


#: Why this run's class archive of Spark could not be written (``None``: it exists); the test of
#: the archive reports it.
ARCHIVE_ERROR_ENV = "KRISHIV_TEST_ARCHIVE_ERROR"


def pytest_configure(config: pytest.Config) -> None:
    """Once per run, before any worker starts: write this machine's class archive of Spark if missing.

    Every Spark JVM the tests start (the workers' sessions, the child
    processes') then starts from it: about half the CPU of a start-up
    (docs/performance.md). ``krishiv jvm-archive`` writes it, as a user would.
    """
    if hasattr(config, "workerinput"):  # a worker: the controller did this before starting it
        return
    if config.getoption("markexpr", "") == "not spark":  # no Spark in this run
        return
    from krishiv_py.runtime.class_archive import archive_path
    from krishiv_py.runtime.spark_session import find_java

    path = archive_path(find_java())
    if path is None or os.path.isfile(path):
        return
    proc = subprocess.run(
        [sys.executable, "-m", "krishiv_py.cli", "jvm-archive"], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        os.environ[ARCHIVE_ERROR_ENV] = (proc.stderr or proc.stdout)[-2000:] or f"exit code {proc.returncode}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (:data:`LONGEST_FIRST`), the rest in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's temporary directory (every fixture's servers and sessions have stopped)."""
    shutil.rmtree(RUN_TMP, ignore_errors=True)


#: Run the tests that use ``session`` on a standalone cluster / over Spark Connect instead.
MASTER_ENV, REMOTE_ENV = "KRISHIV_TEST_MASTER", "KRISHIV_TEST_REMOTE"


#: Spark settings of the test run's shared session: Spark evaluates expressions without generating
#: code. The tests' micro-batches hold a few rows, where compiling each new plan's generated code
#: (and the JVM's compiling of the classes) costs more than it saves: 23 % of the JVM's CPU and
#: 16 % of the time of tests/test_composition_chains.py (docs/testing.md). The child processes
#: (examples, notebooks, benchmark and crash runs) run Spark's defaults, generated code included.
SESSION_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

#: Settings of a classic session only (a Spark Connect session cannot change them): how long the
#: JVM waits for this process to connect back when it hands over a result (a memory sink's rows),
#: 15 s by default. On two saturated cores a connection came later than that, a slow client then
#: reached a reused port and failed the JVM's authentication, after which Spark waits for that
#: result for ever (a hung test run).
CLASSIC_SPARK_CONF = {"spark.python.authenticate.socketTimeout": "300s"}


@pytest.fixture(scope="session")
def session() -> Iterator[kp.Session]:
    """The test run's one Spark session (started on first use).

    Embedded by default; ``Session.connect($KRISHIV_TEST_MASTER)`` or
    ``Session.remote($KRISHIV_TEST_REMOTE)`` when set (docs/deployment.md).
    """
    conf = SESSION_SPARK_CONF
    classic = {**conf, **CLASSIC_SPARK_CONF}
    if os.environ.get(MASTER_ENV):
        s = kp.Session.connect(os.environ[MASTER_ENV], app_name="krishiv-tests", spark_conf=classic)
    elif os.environ.get(REMOTE_ENV):
        s = kp.Session.remote(os.environ[REMOTE_ENV], app_name="krishiv-tests", spark_conf=conf)
    else:
        s = kp.Session.embedded(app_name="krishiv-tests", spark_conf=classic)
    yield s
    s.stop()


Servers = TypeVar("Servers", LocalCluster, ConnectServer, KafkaBroker)


def _serve(servers: Servers) -> Iterator[Servers]:
    """Start ``servers``, yield them, stop them; a start-up failure fails the test with the log's end."""
    try:
        servers.start(timeout_s=300)
    except kp.SessionError as exc:
        pytest.fail(f"{type(servers).__name__} did not start: {exc}", pytrace=False)
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A Spark standalone cluster on 127.0.0.1: a master and one worker of 2 cores and 1 GiB.

    Started on first use, stopped at the end of the run; its logs are in the
    test run's temporary directory (``spark_cluster.log_dir``). A classic
    driver cannot share this process with the ``session`` fixture's JVM: run
    it in a subprocess, with ``spark.driver.host`` and ``spark.driver.bindAddress``
    set to 127.0.0.1 and the environment of ``krishiv_py.devtools.server_env()``.
    """
    yield from _serve(
        LocalCluster(
            workers=1, cores_per_worker=2, memory="1g", log_dir=tmp_path_factory.mktemp("spark-cluster")
        )
    )


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server on 127.0.0.1 with master ``local[2]`` (``connect_server.url``).

    Started on first use, stopped at the end of the run. Talk to it with
    ``krishiv_py.devtools.connect_client(url)``, which can take turns with
    the ``session`` fixture's classic session in this process.
    """
    yield from _serve(ConnectServer(master="local[2]", log_dir=tmp_path_factory.mktemp("connect-server")))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server (temporary directory, Unix socket); started on first use, stopped at the end."""
    server = PostgresServer()
    try:
        server.start()
    except kp.SessionError as exc:
        pytest.fail(f"PostgresServer did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_bucket() -> Iterator[str]:
    """A new bucket on an S3-protocol server (moto) on 127.0.0.1, started for the test module and
    always stopped, with the environment pyarrow's S3 client reads its endpoint and credentials
    from (restored after); ``s3a://<bucket>``."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "krishiv",
        "AWS_SECRET_ACCESS_KEY": "krishiv-secret",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    name = f"krishiv-{uuid.uuid4().hex[:12]}"  # (file systems are kept per bucket and process)
    try:
        from pyarrow import fs

        fs.S3FileSystem(
            access_key="krishiv",
            secret_key="krishiv-secret",
            endpoint_override=env["AWS_ENDPOINT_URL"],
            region="us-east-1",
            allow_bucket_creation=True,
        ).create_dir(name)
        yield f"s3a://{name}"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A Kafka-protocol broker (Tansu, memory storage) on 127.0.0.1 and a free port.

    Started on first use, stopped at the end of the run; a start-up failure
    fails the test with the end of its log. Tests create topics of their own.
    """
    yield from _serve(KafkaBroker(log_dir=tmp_path_factory.mktemp("kafka-broker")))
