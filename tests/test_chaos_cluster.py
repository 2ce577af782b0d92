"""Faults beyond the driver: the short variants of ``nox -s chaos -- --cluster --kafka``.

On a local cluster of two workers started for this module
(``benchmarks/chaos_cluster.py``): an executor and a worker killed under a
classic driver's job reading a Kafka topic into a table sink, compared with
the reference model. A Spark Connect server killed under a client's Kafka
job runs in ``tests/test_chaos.py`` (on a local server; ``nox -s chaos --
--cluster`` runs it on the cluster too); the client's error and its resume
are checked in ``tests/test_connect_restart.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from benchmarks import chaos_cluster, chaos_job
from krishiv_py.devtools import KafkaBroker, LocalCluster
from krishiv_py.errors import SessionError


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
