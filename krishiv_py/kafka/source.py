"""``session.read_kafka(...)``: its arguments checked and turned into a :class:`KafkaSource` plan node.

Every argument is checked when ``read_kafka`` is called (a :class:`PlanError`
naming it); the broker is asked only for what the plan needs now — the
partition count with ``watermark_per_partition=True`` — and, with
``connector="auto"``, the session's Spark is asked whether it can load
Spark's own Kafka connector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias, TypedDict

from krishiv_py.errors import JobError, PlanError, SessionError
from krishiv_py.names import HIDDEN_PREFIX, KAFKA_COLUMNS, KAFKA_DDL
from krishiv_py.plan import nodes as n
from krishiv_py.types import Schema, to_schema

__all__ = ["SPARK_KAFKA_PACKAGE", "ConnectorChoice", "KafkaOptions", "kafka_source", "spark_connector_loads"]

ConnectorChoice: TypeAlias = Literal["auto", "spark", "python"]
#: The Maven coordinates of Spark's Kafka connector for this Spark (``spark.jars.packages``).
SPARK_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class KafkaOptions(TypedDict, total=False):
    """The keyword arguments of ``session.read_kafka(bootstrap_servers, topic, **options)``.

    ``schema``
        The JSON value's fields: a DDL string, ``pyarrow.Schema`` or
        ``StructType``. Timestamps are ISO-8601 strings; epoch milliseconds
        are a ``bigint`` field.
    ``value_format``
        ``"json"`` (default) or ``"raw"`` (one ``value binary`` column).
    ``key_format``
        ``"string"`` (default) or ``"raw"`` (``kafka_key`` as bytes).
    ``event_time``
        The event-time column, when it is ``"kafka_timestamp"``: then a
        record that does not decode has a null ``kafka_timestamp`` too.
    ``starting_offsets``
        ``"earliest"`` (default), ``"latest"``, or ``{partition: offset}``
        (other partitions from their earliest). Used by a new job only; a
        restarted one goes on from its checkpoint.
    ``max_records_per_batch``
        At most this many records per micro-batch (shared across partitions
        by backlog).
    ``consumer_config``
        Further librdkafka settings (security, ``group.id`` for the
        committed offsets lag tools read, ...).
    ``connector``
        ``"python"``: krishiv's data source (needs ``confluent-kafka``);
        ``"spark"``: Spark's ``format("kafka")`` (its jar on the classpath);
        ``"auto"`` (default): Spark's when this Spark can load it.
    ``watermark_per_partition``
        Give each partition a watermark of its own: ``.watermark(...)`` right
        on the stream applies per partition, the job's watermark is their
        minimum, and an idle timeout leaves idle partitions out.
    """

    schema: Any
    value_format: str
    key_format: str
    event_time: str | None
    starting_offsets: Any
    max_records_per_batch: int | None
    consumer_config: Mapping[str, Any] | None
    connector: str
    watermark_per_partition: bool


def kafka_source(
    *,
    name: str,
    bootstrap_servers: str,
    topic: str,
    spark: Any,
    remote: bool,
    schema: Any = None,
    value_format: str = "json",
    key_format: str = "string",
    event_time: str | None = None,
    starting_offsets: Any = "earliest",
    max_records_per_batch: int | None = None,
    consumer_config: Mapping[str, Any] | None = None,
    connector: str = "auto",
    watermark_per_partition: bool = False,
) -> n.KafkaSource:
    """The plan node of ``read_kafka``'s arguments (the options: :class:`KafkaOptions`).

    ``spark`` is asked whether it loads Spark's Kafka connector
    (``connector="auto"``; None: it cannot be asked); ``remote``: over
    Spark Connect.
    """
    _check_text("bootstrap_servers", bootstrap_servers)
    _check_text("topic", topic)
    fmt = _choice("value_format", value_format, ("json", "raw"))
    key_fmt = _choice("key_format", key_format, ("string", "raw"))
    full = _schema(schema, fmt, key_fmt)
    if event_time is not None:
        field = full.field(event_time, role="event_time column")
        if not (field.dtype.is_timestamp or field.dtype.name in ("bigint", "int")):
            raise PlanError(f"event_time column {event_time!r} is {field.dtype}; use a timestamp or bigint")
    config = _config(consumer_config)
    if max_records_per_batch is not None and (
        isinstance(max_records_per_batch, bool)
        or not isinstance(max_records_per_batch, int)
        or max_records_per_batch < 1
    ):
        raise PlanError(f"max_records_per_batch must be a positive integer, got {max_records_per_batch!r}")
    chosen = _connector(connector, spark, remote)
    partitions = _partition_count(bootstrap_servers, topic, config) if watermark_per_partition else None
    return n.KafkaSource(
        name=name,
        schema=full,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        connector=chosen,
        value_format=fmt,  # type: ignore[arg-type]
        key_format=key_fmt,  # type: ignore[arg-type]
        event_time=event_time,
        starting_offsets=_starting(starting_offsets),
        max_records_per_batch=max_records_per_batch,
        consumer_config=tuple(sorted(config.items())),
        per_partition=bool(watermark_per_partition),
        partitions=partitions,
    )


def _check_text(arg: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"read_kafka(): {arg} must be a non-empty string, got {value!r}")


def _choice(arg: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise PlanError(f"read_kafka(): {arg} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def _schema(schema: Any, fmt: str, key_fmt: str) -> Schema:
    """The value's fields followed by the Kafka columns."""
    if fmt == "raw":
        if schema is not None:
            raise PlanError(
                "read_kafka(): value_format='raw' gives a binary 'value' column; leave schema out"
            )
        value = Schema.parse("value binary")
    elif schema is None:
        raise PlanError(
            "read_kafka(): value_format='json' needs the value's schema, e.g. schema='user string, n bigint'"
        )
    else:
        value = to_schema(schema)
    clash = [f.name for f in value if f.name in KAFKA_COLUMNS or f.name.startswith(HIDDEN_PREFIX)]
    if clash:
        raise PlanError(
            f"read_kafka(): value field {clash[0]!r} is a name the Kafka columns use "
            f"({', '.join(KAFKA_COLUMNS)}); rename it in the schema"
        )
    kafka = KAFKA_DDL if key_fmt == "string" else KAFKA_DDL.replace("kafka_key string", "kafka_key binary")
    return Schema.parse(f"{value.ddl()}, {kafka}")


def _config(config: Mapping[str, Any] | None) -> dict[str, str]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise PlanError(
            f"read_kafka(): consumer_config must be a dict of librdkafka settings, got {config!r}"
        )
    fixed = {"bootstrap.servers", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof"}
    for key in config:
        if key in fixed:
            raise PlanError(
                f"read_kafka(): consumer_config may not set {key!r}: krishiv sets it "
                "(offsets live in Spark's checkpoint)"
            )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items()}


def _starting(value: Any) -> str | tuple[tuple[int, int], ...]:
    if value in ("earliest", "latest"):
        return str(value)
    if isinstance(value, Mapping) and value:
        items = []
        for p, o in value.items():
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise PlanError(f"read_kafka(): starting_offsets keys are partition numbers, got {p!r}")
            if isinstance(o, bool) or not isinstance(o, int) or o < 0:
                raise PlanError(
                    f"read_kafka(): starting offset of partition {p} must be an offset >= 0, got {o!r}"
                )
            items.append((p, o))
        return tuple(sorted(items))
    raise PlanError(
        f"read_kafka(): starting_offsets must be 'earliest', 'latest' or {{partition: offset}}, got {value!r}"
    )


def _connector(connector: str, spark: Any, remote: bool) -> n.KafkaConnector:
    choice = _choice("connector", connector, ("auto", "spark", "python"))
    if choice == "python":
        return "python"
    loads = spark_connector_loads(spark, remote)
    if choice == "auto":
        return "spark" if loads else "python"
    if loads is False:
        version = getattr(spark, "version", "<spark version>")
        raise SessionError(
            "connector='spark' needs Spark's Kafka connector on the classpath, and this Spark cannot load "
            f"{_PROVIDER}. Add it when the session starts, e.g. Session.embedded(spark_conf="
            f"{{'spark.jars.packages': '{SPARK_KAFKA_PACKAGE.format(version=version)}'}}), "
            "or use connector='python'"
        )
    return "spark"


def spark_connector_loads(spark: Any, remote: bool) -> bool | None:
    """Whether ``spark`` can load Spark's Kafka connector (None: cannot tell, over Spark Connect)."""
    if remote:
        return None
    try:
        spark._jvm.java.lang.Class.forName(_PROVIDER)
    except Exception:  # noqa: BLE001 - Py4J raises its own error for a missing class
        return False
    return True


def _partition_count(bootstrap_servers: str, topic: str, config: Mapping[str, str]) -> int:
    from krishiv_py.kafka.client import KafkaReadError, consumer, partition_ids

    client = consumer(bootstrap_servers, {k: v for k, v in config.items() if k != "group.id"})
    try:
        return len(partition_ids(client, topic, bootstrap_servers))
    except KafkaReadError as exc:
        raise JobError(
            f"{exc}\nread_kafka(watermark_per_partition=True) asks the broker for the topic's partitions"
        ) from None
    finally:
        client.close()
