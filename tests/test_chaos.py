"""Crash recovery: a durable job SIGKILLed at random points loses and repeats nothing.

The short variants of ``nox -s chaos`` (``benchmarks/chaos.py``): one kill
(the child process and its JVM) of a stateful job writing its changelog
with retractions to a table, of a native job reading Kafka, and of a Kafka
join, each sink then compared with the reference model window by window.
And of ``nox -s chaos -- --cluster --kafka`` (``benchmarks/chaos_cluster.py``):
on a local cluster of two workers, an executor and a worker killed under a
classic driver's job, and a Spark Connect server killed and started again
under a client's job, both reading a Kafka topic into a table sink. The
client's error and its resume on local servers are checked in
``tests/test_connect_restart.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from benchmarks import chaos, chaos_cluster, chaos_job
from krishiv_py.devtools import KafkaBroker, LocalCluster
from krishiv_py.errors import SessionError


@pytest.mark.spark
def test_sigkilled_kafka_job_keeps_every_window_exactly_once(kafka_broker: KafkaBroker) -> None:
    """The input comes from a 3-partition topic; offsets come back from Spark's checkpoint."""
    topic = f"chaos_{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    run = chaos.run_once(
        seed=5,
        kills=1,
        count=6,
        size=10,
        lowering="native",
        max_delay_s=25.0,
        kafka=(kafka_broker.bootstrap_servers, topic),
    )
    assert len(run.kills) == 1
    assert run.finished and run.restarts_failed == 0
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)


@pytest.mark.spark
def test_sigkilled_job_writes_its_changelog_to_a_table_exactly_once() -> None:
    """Allowed lateness and retractions into a DuckDB table in append mode: every row once, none twice."""
    run = chaos.run_once(
        seed=7,
        kills=1,
        count=6,
        size=10,
        lowering="stateful",
        max_delay_s=12.0,
        target=chaos_job.Target("duckdb", "append"),
    )
    assert len(run.kills) == 1
    assert run.finished and run.restarts_failed == 0
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of two workers of one core each, for this module only: its workers get killed."""
    cluster = LocalCluster(
        workers=2, cores_per_worker=1, memory="1g", log_dir=tmp_path_factory.mktemp("chaos-cluster")
    )
    try:
        cluster.start(timeout_s=300)
    except SessionError as exc:
        pytest.fail(f"the cluster did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.spark
def test_killed_executor_and_worker_under_a_kafka_job_keep_every_table_row_exactly_once(
    two_workers: LocalCluster, kafka_broker: KafkaBroker
) -> None:
    """The short variant of ``nox -s chaos -- --cluster --kafka``: an executor, then a whole worker.

    The executors read a 3-partition topic; the stateful lowering writes
    its changelog with retractions to an Iceberg table in append mode,
    which must hold the model's changelog exactly.
    """
    topic = f"chaos_cluster_{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    run = chaos_cluster.cluster_run(
        two_workers,
        seed=11,
        kills=2,
        count=12,
        size=20,
        lowering="stateful",
        max_delay_s=5.0,
        kinds=("executor", "worker"),
        target=chaos_job.Target("iceberg", "append"),
        kafka=(kafka_broker.bootstrap_servers, topic),
    )
    assert [kind for kind, _ in run.faults] == ["executor", "worker"], run
    assert run.finished and not run.error, run.error
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)
    assert two_workers.alive_workers() == 2  # the killed worker came back


@pytest.mark.spark
def test_a_restarted_connect_server_under_a_kafka_job_keeps_every_table_row_exactly_once(
    two_workers: LocalCluster, kafka_broker: KafkaBroker
) -> None:
    """The Connect run of ``nox -s chaos -- --cluster --kafka``, short: one server restart mid-job.

    The client produces each step only after the job processed the one
    before; after the restart it resumes the job by name from a new
    session, which first processes what the topic holds. Native results go
    to a DuckDB table in upsert mode, written from the server.
    """
    topic = f"chaos_connect_{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    run = chaos_cluster.connect_run(
        two_workers,
        seed=12,
        restarts=1,
        count=8,
        size=20,
        lowering="native",
        max_delay_s=6.0,
        target=chaos_job.Target("duckdb", "upsert"),
        kafka=(kafka_broker.bootstrap_servers, topic),
    )
    assert [kind for kind, _ in run.faults] == ["connect server"] and run.resumed == 1, run
    assert run.finished and not run.error, run.error
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)


@pytest.mark.spark
def test_a_sigkilled_kafka_join_writes_its_changelog_to_a_table_exactly_once(
    kafka_broker: KafkaBroker,
) -> None:
    """A full outer interval join with retractions, Kafka in, DuckDB out: every row once, none twice."""
    from benchmarks import chaos_join

    topics = [f"join_l_{uuid.uuid4().hex[:8]}", f"join_r_{uuid.uuid4().hex[:8]}"]
    for topic in topics:
        kafka_broker.create_topic(topic, partitions=1)
    run = chaos_join.run_once(
        seed=4,
        kills=1,
        count=6,
        size=8,
        lowering="stateful",
        max_delay_s=20.0,
        servers=kafka_broker.bootstrap_servers,
        topics=topics,
    )
    assert len(run["kills"]) == 1
    assert run["finished"] and run["restarts_failed"] == 0
    assert run["rows"] > 0 and (run["lost"], run["duplicated"], run["wrong"]) == (0, 0, 0)
