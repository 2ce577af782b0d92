"""Crash recovery: a durable job SIGKILLed at random points loses and repeats nothing.

The short variant of ``nox -s chaos`` (``benchmarks/chaos.py``): one run on
the stateful lowering with one kill (the child process and its JVM), then
the sink compared with the reference model window by window.
"""

from __future__ import annotations

import uuid

import pytest

from benchmarks import chaos
from krishiv_py.devtools import KafkaBroker


@pytest.mark.spark
def test_sigkilled_durable_job_keeps_every_window_exactly_once() -> None:
    run = chaos.run_once(seed=3, kills=1, count=6, size=10, lowering="stateful", max_delay_s=10.0)
    assert len(run.kills) == 1
    assert run.finished and run.restarts_failed == 0
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)


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
        target=chaos.Target("duckdb", "append"),
    )
    assert len(run.kills) == 1
    assert run.finished and run.restarts_failed == 0
    assert (run.lost, run.duplicated, run.wrong) == (0, 0, 0)
