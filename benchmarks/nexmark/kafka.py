"""A Nexmark dataset in Kafka topics, one per table, and its streams read from them.

:func:`produce` writes each table's rows, in arrival order (part by part),
as JSON records (timestamps as ISO-8601 text) into a topic of its own with
``partitions`` partitions, row ``i`` to partition ``i % partitions``;
:func:`kafka_streams` reads them back with ``session.read_kafka`` (the
Python connector: Spark's Kafka jar comes from Maven only), each with its
watermark on ``date_time``, so a query module's ``build`` runs on Kafka as
on files. ``python -m benchmarks.nexmark --kafka`` runs every query that
way, on a local broker it starts (:class:`krishiv_py.devtools.KafkaBroker`).
"""

from __future__ import annotations

import re

import krishiv_py as kp
from benchmarks.data import Dataset
from benchmarks.kafka import produce_files
from benchmarks.nexmark._streams import LAG_MS
from benchmarks.nexmark.check import SIDE_INPUT_DDL, TABLES, DatasetStreams, side_input
from krishiv_py.devtools import KafkaBroker

__all__ = ["PARTITIONS", "kafka_streams", "produce", "topic_of"]

PARTITIONS = 4


def topic_of(dataset: Dataset, table: str) -> str:
    """The topic of ``table`` of ``dataset``: ``nexmark_<table>_<dataset name>``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"nexmark_{table}_{dataset.root.name}")


def produce(dataset: Dataset, broker: KafkaBroker, *, partitions: int = PARTITIONS) -> dict[str, int]:
    """Write each table of ``dataset`` into its topic on ``broker``; the records per table."""
    counts = {}
    for table in TABLES:
        topic = topic_of(dataset, table)
        broker.create_topic(topic, partitions=partitions)
        counts[table] = produce_files(broker, topic, dataset.table_dir(table), partitions)
    return counts


def kafka_streams(session: kp.Session, dataset: Dataset, bootstrap_servers: str) -> DatasetStreams:
    """The dataset's tables as read from their topics (:func:`produce`), each with its watermark on
    ``date_time``; q13's side table from its Parquet file, as for files."""
    read = {
        t: session.read_kafka(
            bootstrap_servers, topic_of(dataset, t), schema=dataset.ddl(t), connector="python"
        ).watermark("date_time", LAG_MS)
        for t in TABLES
    }
    tag = re.sub(r"\W", "_", dataset.root.name)
    side = session.read_parquet(side_input(dataset), SIDE_INPUT_DDL, name=f"side_input_kafka_{tag}")
    return DatasetStreams(**read, side_input=side)
