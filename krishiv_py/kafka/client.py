"""The Kafka client calls krishiv_py makes (confluent-kafka, imported on first use).

Offsets are always of *assigned* partitions: krishiv never relies on
consumer-group rebalancing, because Spark's checkpoint holds the offsets.

End offsets
    A partition's end offset is where a fetch reaches the end of the
    partition (:func:`end_offsets`): ``ListOffsets`` gives the high watermark
    ``h``, and a fetch from ``h - 1`` reads on to the end. On Apache Kafka
    that is one record; some Kafka-compatible brokers answer ``ListOffsets``
    with the base offset of the last record batch, and the fetch is what
    keeps a batch's last records from waiting for the next write. Under
    ``read_committed`` the fetch stops at the last stable offset.
librdkafka's log
    Every client krishiv makes (:func:`settings`) sends librdkafka's own log
    lines to the ``krishiv_py.kafka`` logger (:data:`LOG`), not to stderr: a
    broker that is down says so in krishiv's error, once, instead of a
    ``Connection refused`` line every few milliseconds. Configure logging
    (``logging.basicConfig()``) to see them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from krishiv_py.errors import MissingDependencyError

__all__ = [
    "LOG",
    "KafkaReadError",
    "broker_unreachable",
    "consumer",
    "end_offsets",
    "partition_ids",
    "read_topic",
    "require_client",
    "settings",
    "unreachable",
]

#: Seconds a metadata or offset request may take before krishiv reports the broker unreachable.
REQUEST_TIMEOUT_S = 15.0

#: The logger of librdkafka's own log lines (silent unless the application configures logging).
LOG = logging.getLogger("krishiv_py.kafka")
LOG.addHandler(logging.NullHandler())


def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` for a confluent-kafka client (consumer, producer, admin): its log to :data:`LOG`."""
    return {"logger": LOG, **config}


class KafkaReadError(RuntimeError):
    """A topic, partition or broker problem, with what to do; Spark reports it as the job's cause."""


def require_client() -> Any:
    """The ``confluent_kafka`` module; a :class:`MissingDependencyError` saying how to install it."""
    try:
        import confluent_kafka
    except ImportError:
        raise MissingDependencyError(
            "reading or writing Kafka needs the confluent-kafka client: "
            "python -m pip install '.[kafka]' (in the krishiv_py clone) "
            "(on a cluster, on every executor too)"
        ) from None
    return confluent_kafka


def consumer(bootstrap_servers: str, config: Mapping[str, str] | None = None) -> Any:
    """A consumer for assigned partitions: no auto-commit, and an out-of-range offset is an error."""
    ck = require_client()
    conf: dict[str, Any] = {
        "group.id": "krishiv",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "socket.timeout.ms": int(REQUEST_TIMEOUT_S * 1000),
        # A fetch at the end of a partition returns at once: reads stop at known end offsets,
        # and finding an end offset is a fetch that reaches it.
        "fetch.wait.max.ms": 10,
        "fetch.queue.backoff.ms": 10,
        "fetch.error.backoff.ms": 10,
        "max.partition.fetch.bytes": 16 << 20,
        **dict(config or {}),
        "bootstrap.servers": bootstrap_servers,
    }
    return ck.Consumer(settings(conf))


def partition_ids(client: Any, topic: str, bootstrap_servers: str) -> list[int]:
    """The topic's partitions; a :class:`KafkaReadError` naming the topic when it does not exist."""
    ck = require_client()
    try:
        meta = client.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    except ck.KafkaException as exc:
        said = unreachable(exc)
        if said is None:
            raise KafkaReadError(
                f"Kafka broker {bootstrap_servers} did not give the metadata of topic {topic!r}: {exc}"
            ) from exc
        raise KafkaReadError(
            broker_unreachable(bootstrap_servers, REQUEST_TIMEOUT_S, f"asking for topic {topic!r}: {said}")
        ) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        why = f" ({info.error})" if info is not None and info.error is not None else ""
        raise KafkaReadError(
            f"Kafka topic {topic!r} does not exist on {bootstrap_servers}{why}; create it, or check the "
            "name (a deleted topic stops the job: restart it once the topic is back)"
        )
    return sorted(info.partitions)


#: librdkafka's errors for a broker that does not answer.
_NO_ANSWER = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE")


def unreachable(exc: BaseException) -> str | None:
    """librdkafka's words when ``exc`` says the broker did not answer, else None."""
    ck = require_client()
    error = exc.args[0] if isinstance(exc, ck.KafkaException) and exc.args else None
    if not isinstance(error, ck.KafkaError):
        return None
    return error.str() if error.code() in {getattr(ck.KafkaError, c) for c in _NO_ANSWER} else None


def broker_unreachable(bootstrap_servers: str, timeout_s: float, doing: str) -> str:
    """The message of a broker that did not answer ``doing`` within ``timeout_s``.

    >>> broker_unreachable("127.0.0.1:1", 15, "asking for topic 't'").split(";")[0]
    "Kafka broker 127.0.0.1:1 is unreachable: no answer within 15 s (asking for topic 't')"
    """
    return (
        f"Kafka broker {bootstrap_servers} is unreachable: no answer within {timeout_s:g} s ({doing}); "
        "check bootstrap_servers and that the broker runs"
    )


def end_offsets(client: Any, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Each partition's ``(low, end)``: the first offset held, and the offset a read stops at.

    ``end`` is where a fetch reaches the end of the partition: under
    ``isolation.level=read_committed`` (librdkafka's default) the last stable
    offset, so records of a transaction still open are left for a later
    micro-batch and a batch never waits for them.
    """
    ck = require_client()
    bounds: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = client.get_watermark_offsets(
            ck.TopicPartition(topic, p), timeout=REQUEST_TIMEOUT_S, cached=False
        )
        bounds[p] = (max(0, low), max(0, low, high - 1))
    client.assign([ck.TopicPartition(topic, p, start) for p, (_, start) in bounds.items()])
    waiting = set(bounds)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    try:
        while waiting and time.monotonic() < deadline:
            # A short wait: a batch consume returns at its count or its timeout, never at the end.
            for msg in client.consume(num_messages=10_000, timeout=0.005):
                err = msg.error()
                if err is None:
                    continue
                if err.code() != ck.KafkaError._PARTITION_EOF:
                    raise KafkaReadError(f"Kafka topic {topic!r} partition {msg.partition()}: {err.str()}")
                p = msg.partition()
                if p in waiting:
                    waiting.discard(p)
                    bounds[p] = (bounds[p][0], max(bounds[p][1], msg.offset()))
    finally:
        client.unassign()
    if waiting:
        raise KafkaReadError(
            f"Kafka topic {topic!r}: the end of partitions {sorted(waiting)} was not reached within "
            f"{REQUEST_TIMEOUT_S:g} s; is the broker up?"
        )
    return bounds


def read_topic(bootstrap_servers: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic`` as ``(key, value)``, each partition in offset order."""
    ck = require_client()
    client = consumer(bootstrap_servers, {"isolation.level": "read_committed"})
    try:
        parts = partition_ids(client, topic, bootstrap_servers)
        bounds = end_offsets(client, topic, parts)
        todo = {p for p, (low, end) in bounds.items() if end > low}
        client.assign([ck.TopicPartition(topic, p, bounds[p][0]) for p in todo])
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while todo and time.monotonic() < deadline:
            # A short wait: a batch consume returns at its count or its timeout, never at the end.
            for msg in client.consume(num_messages=10_000, timeout=0.005):
                err = msg.error()
                if err is not None and err.code() == ck.KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition())
                elif err is not None:
                    raise KafkaReadError(f"Kafka topic {topic!r} partition {msg.partition()}: {err.str()}")
                else:
                    out.append((msg.key(), msg.value()))
        if todo:
            raise KafkaReadError(f"Kafka topic {topic!r}: partitions {sorted(todo)} did not reach their end")
        return out
    finally:
        client.close()
