"""How Spark reads a Kafka source: its read rule (plan node → recipe) and its two readers.

:func:`register` registers both with the planner and the runtime
(``import krishiv_py.kafka`` does), the way any source of one's own comes
in; nothing in the planner or the runtime names Kafka.

Both give the same columns: the value's fields, then
:data:`krishiv_py.names.KAFKA_COLUMNS`.

``connector="python"``
    A ``ReadSource`` of kind ``"kafka"``: the runtime reads it with
    :class:`krishiv_py.kafka.datasource.KafkaDataSource`, which decodes the
    values in Python workers (Arrow batches) and marks the records that do
    not decode.
``connector="spark"``
    A ``ReadSource`` of kind ``"kafka-spark"``: Spark's connector
    (``format("kafka")``, the ``spark-sql-kafka-0-10`` package), values
    parsed by ``from_json`` in ``PERMISSIVE`` mode with a corrupt-record
    column, so a record that does not parse gets null fields and keeps its
    raw bytes in ``kafka_value``, as with the Python connector.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from krishiv_py.kafka.client import require_client
from krishiv_py.names import KAFKA_CORRUPT, KAFKA_PARSED
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.recipe import ReadSource, RecipeNode, SelectExprs
from krishiv_py.planner.spark.sources import data_rows, register_read_rule
from krishiv_py.planner.sql import quote
from krishiv_py.runtime.sources import ReadPaths, parallelism, register_reader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KafkaReader", "KafkaRule", "SparkKafkaReader", "kafka_read", "register"]


def register() -> None:
    """Lower ``KafkaSource`` nodes with :class:`KafkaRule`; read kinds ``kafka`` and ``kafka-spark``."""
    register_read_rule(n.KafkaSource, KafkaRule())
    register_reader("kafka", KafkaReader())
    register_reader("kafka-spark", SparkKafkaReader())


class KafkaRule:
    """A Kafka topic: krishiv's Python data source, or Spark's ``kafka`` format."""

    punctuated = False

    def read(self, node: n.KafkaSource, *, streaming: bool) -> RecipeNode:
        return data_rows(kafka_read(node, streaming=streaming))


def kafka_read(node: n.KafkaSource, *, streaming: bool = True) -> RecipeNode:
    """The recipe that reads ``node``'s records as its columns (no hidden columns yet); not
    ``streaming``: what the topic holds when the read is planned (``collect()``)."""
    if node.connector == "spark":
        return _spark_read(node, streaming=streaming)
    return _python_read(node, streaming=streaming)


def _python_read(node: n.KafkaSource, *, streaming: bool) -> ReadSource:
    config = dict(node.consumer_config)
    options = {
        "bootstrap.servers": node.bootstrap_servers,
        "topic": node.topic,
        "partitions": ",".join(map(str, node.only_partitions or ())),
        "expected.partitions": str(node.partitions or "") if node.per_partition else "",
        "value.schema": node.value_fields.ddl(),
        "value.format": node.value_format,
        "key.format": node.key_format,
        "null.time.when.bad": "true" if node.event_time == "kafka_timestamp" else "false",
        "starting.offsets": _starting(node),
        "max.records": str(node.max_records_per_batch or ""),
        "consumer.config": json.dumps(config, sort_keys=True),
        "group.id": config.get("group.id", f"krishiv-{node.name.split('[')[0]}"),
    }
    return ReadSource(
        name=node.name, kind="kafka", schema=node.schema, streaming=streaming, options=tuple(options.items())
    )


def _starting(node: n.KafkaSource) -> str:
    if isinstance(node.starting_offsets, str):
        return node.starting_offsets
    return json.dumps({str(p): o for p, o in node.starting_offsets}, sort_keys=True)


def _spark_read(node: n.KafkaSource, *, streaming: bool) -> RecipeNode:
    options: dict[str, str] = {f"kafka.{k}": v for k, v in node.consumer_config if k != "group.id"}
    options["kafka.bootstrap.servers"] = node.bootstrap_servers
    if node.only_partitions is None:
        options["subscribe"] = node.topic
    else:
        options["assign"] = json.dumps({node.topic: list(node.only_partitions)})
    if isinstance(node.starting_offsets, str):
        options["startingOffsets"] = node.starting_offsets
    else:
        offsets = {str(p): o for p, o in node.starting_offsets}
        options["startingOffsets"] = json.dumps({node.topic: offsets}, sort_keys=True)
    if node.max_records_per_batch is not None and streaming:
        options["maxOffsetsPerTrigger"] = str(node.max_records_per_batch)
    options["failOnDataLoss"] = "true"
    read = ReadSource(
        name=node.name,
        kind="kafka-spark",
        schema=node.schema,
        streaming=streaming,
        format="kafka",
        options=tuple(sorted(options.items())),
    )
    return SelectExprs(child=_parsed(node, read), exprs=_columns(node))


def _parsed(node: n.KafkaSource, read: ReadSource) -> RecipeNode:
    """Spark's Kafka rows with the value parsed into one struct column."""
    if node.value_format == "raw":
        return SelectExprs(child=read, exprs=("*",))
    ddl = f"{node.value_fields.ddl()}, {quote(KAFKA_CORRUPT)} string".replace("'", "\\'")
    parse = (
        f"from_json(CAST(value AS STRING), '{ddl}', "
        f"map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', '{KAFKA_CORRUPT}')) AS {quote(KAFKA_PARSED)}"
    )
    return SelectExprs(child=read, exprs=("*", parse))


def _columns(node: n.KafkaSource) -> tuple[str, ...]:
    """The source's columns over Spark's Kafka rows (``key, value, topic, partition, offset, timestamp``)."""
    if node.value_format == "raw":
        bad = "false"
        fields: tuple[str, ...] = ("value AS value",)
    else:
        parsed = quote(KAFKA_PARSED)
        bad = f"(value IS NULL OR {parsed}.{quote(KAFKA_CORRUPT)} IS NOT NULL)"
        fields = tuple(
            f"CASE WHEN {bad} THEN NULL ELSE {parsed}.{quote(f.name)} END AS {quote(f.name)}"
            for f in node.value_fields
        )
    key = "key" if node.key_format == "raw" else "CAST(key AS STRING)"
    stamp = "timestamp"
    if node.event_time == "kafka_timestamp":
        stamp = f"CASE WHEN {bad} THEN NULL ELSE timestamp END"
    return (
        *fields,
        f"{key} AS kafka_key",
        "topic AS kafka_topic",
        "partition AS kafka_partition",
        "offset AS kafka_offset",
        f"{stamp} AS kafka_timestamp",
        f"CASE WHEN {bad} THEN value END AS kafka_value",
    )


class KafkaReader:
    """A Kafka topic through krishiv's Python data source (:mod:`krishiv_py.kafka.datasource`)."""

    batch_sql = False

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        require_client()
        # The data source subclasses pyspark's: imported when a job reads Kafka, not with krishiv_py.
        from krishiv_py.kafka.datasource import SOURCE_NAME, KafkaDataSource

        spark.dataSource.register(KafkaDataSource)
        # Bounded (collect()): what the topic holds now, read once (KafkaSnapshotReader).
        reader = (
            (spark.readStream if node.streaming else spark.read).format(SOURCE_NAME).schema(node.schema.ddl())
        )
        options = dict(node.options)
        cores = parallelism(spark)
        if cores and not options.get("tasks"):
            options["tasks"] = str(cores)  # one wave of read tasks per micro-batch
        return reader.options(**options).load()


class SparkKafkaReader:
    """A Kafka topic through Spark's own connector (``format("kafka")``; its schema is fixed)."""

    batch_sql = False

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        reader = spark.readStream if node.streaming else spark.read  # (bounded: up to the latest offsets)
        return reader.format(node.format).options(**dict(node.options)).load()
