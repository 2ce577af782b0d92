"""Crash recovery: a durable job SIGKILLed at random points loses and repeats nothing.

The short variants of ``nox -s chaos`` (``benchmarks/chaos.py``): one kill
(the child process and its JVM) of a stateful job writing its changelog
with retractions to a table, of a native job reading Kafka, and of a Kafka
join, each sink then compared with the reference model window by window.
A Spark Connect server killed and started again under a client's Kafka job
is the short variant of ``nox -s chaos -- --cluster --kafka``'s Connect
runs, on a server with a local master (the cluster's executors and workers
are killed in ``tests/test_chaos_cluster.py``).
"""

from __future__ import annotations

import uuid

import pytest

from benchmarks import chaos, chaos_cluster, chaos_job
from krishiv_py.devtools import KafkaBroker


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "auto-partitions"])
def test_sigkilled_kafka_job_keeps_every_window_exactly_once(
    kafka_broker: KafkaBroker, lowering: str
) -> None:
    """The input comes from a 3-partition topic; offsets come back from Spark's checkpoint.

    ``auto-partitions``: the stateful lowering with a watermark per partition, each with its lag
    chosen from the data and recorded per micro-batch; after the kill the job runs the rest at
    the lags of an uninterrupted run (the model's). One watermark with an automatic lag
    (``auto``) is the same recovery with one lag; it runs in ``nox -s chaos -- --kafka
    --lowerings auto``, and a clean restart of it in tests/test_auto_watermark.py."""
    topic = f"chaos_{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    run = chaos.run_once(
        seed={"native": 5}.get(lowering, 11),
        kills=1,
        count=6,
        size=10,
        lowering=lowering,
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


@pytest.mark.spark
def test_a_restarted_connect_server_under_a_kafka_job_keeps_every_table_row_exactly_once(
    kafka_broker: KafkaBroker,
) -> None:
    """One server restart mid-job; the client resumes the job by name from a new session.

    The client produces each step only after the job processed the one
    before; the resumed job first processes what the topic holds. Native
    results go to a DuckDB table in upsert mode, written from the server.
    """
    topic = f"chaos_connect_{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=3)
    run = chaos_cluster.connect_run(
        "local[2]",
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


def test_a_staged_chain_is_compared_by_each_keys_current_row() -> None:
    """``--staged``: both changelogs folded per key; a row held twice, lost, wrong, withdrawn unheld."""
    from collections import Counter

    from benchmarks.chaos_join import compare_current, expected

    model = expected(1, 20, 20, "staged")
    assert sum(r["kind"] == "retract" for r in model) > 5  # late rows correct windows that fired
    want: Counter[tuple[object, ...]] = Counter(
        {(0, 1, "emit"): 1, (0, 1, "retract"): 1, (0, 2, "emit"): 1, (50, 3, "emit"): 1}
    )

    def judged(changes: dict[tuple[object, ...], int]) -> tuple[int, int, int]:
        out = compare_current(Counter(changes), want)
        return out["lost"], out["duplicated"], out["wrong"]

    assert judged({(0, 2, "emit"): 1, (50, 3, "emit"): 1}) == (0, 0, 0)  # one update, not two
    assert judged({**want, (50, 3, "emit"): 2}) == (0, 1, 0)
    assert judged({**want, (50, 3, "emit"): 0}) == (1, 0, 0)
    assert judged({**want, (0, 2, "emit"): 0, (0, 5, "emit"): 1}) == (0, 0, 1)
    assert judged({**want, (70, 9, "retract"): 1}) == (0, 0, 1)
