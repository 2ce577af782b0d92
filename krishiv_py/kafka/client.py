"""The Kafka client calls krishiv_py makes (confluent-kafka, imported on first use).

Offsets are always of *assigned* partitions: krishiv never relies on
consumer-group rebalancing, because Spark's checkpoint holds the offsets.

End offsets
    A partition's end offset (the next offset to be written) is read from a
    fetch, not only from ``ListOffsets``: :func:`end_offsets` asks
    ``ListOffsets`` for the high watermark ``h`` and then fetches from
    ``h - 1``, taking the high watermark that fetch reports. On Apache Kafka
    both agree; some Kafka-compatible brokers answer ``ListOffsets`` with
    the base offset of the last record batch, and the fetch is what keeps a
    batch's last records from waiting for the next write.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from krishiv_py.errors import SessionError

__all__ = [
    "KafkaReadError",
    "consumer",
    "end_offsets",
    "partition_ids",
    "require_client",
]

#: Seconds a metadata or offset request may take before krishiv reports the broker unreachable.
REQUEST_TIMEOUT_S = 15.0


class KafkaReadError(RuntimeError):
    """A topic, partition or broker problem, with what to do; Spark reports it as the job's cause."""


def require_client() -> Any:
    """The ``confluent_kafka`` module; a :class:`SessionError` saying how to install it otherwise."""
    try:
        import confluent_kafka
    except ImportError:
        raise SessionError(
            "reading or writing Kafka needs the confluent-kafka client: pip install 'krishiv_py[kafka]' "
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
        **dict(config or {}),
        "bootstrap.servers": bootstrap_servers,
    }
    return ck.Consumer(conf)


def partition_ids(client: Any, topic: str, bootstrap_servers: str) -> list[int]:
    """The topic's partitions; a :class:`KafkaReadError` naming the topic when it does not exist."""
    ck = require_client()
    try:
        meta = client.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    except ck.KafkaException as exc:
        raise KafkaReadError(
            f"Kafka broker {bootstrap_servers} did not answer within {REQUEST_TIMEOUT_S:g} s "
            f"(asking for topic {topic!r}): {exc}; check bootstrap_servers and that the broker runs"
        ) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        why = f" ({info.error})" if info is not None and info.error is not None else ""
        raise KafkaReadError(
            f"Kafka topic {topic!r} does not exist on {bootstrap_servers}{why}; create it, or check the "
            "name (a deleted topic stops the job: restart it once the topic is back)"
        )
    return sorted(info.partitions)


def end_offsets(client: Any, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Each partition's ``(low, end)`` offsets: the first offset held and the next to be written."""
    ck = require_client()
    bounds: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = client.get_watermark_offsets(
            ck.TopicPartition(topic, p), timeout=REQUEST_TIMEOUT_S, cached=False
        )
        bounds[p] = (low, high)
    fetch = [
        ck.TopicPartition(topic, p, max(low, high - 1)) for p, (low, high) in bounds.items() if high > low
    ]
    if not fetch:
        return bounds
    client.assign(fetch)
    waiting = {tp.partition for tp in fetch}
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while waiting and time.monotonic() < deadline:
        for msg in client.consume(num_messages=1000, timeout=0.5):
            err = msg.error()
            if err is not None and err.code() != ck.KafkaError._PARTITION_EOF:
                raise KafkaReadError(f"Kafka topic {topic!r} partition {msg.partition()}: {err.str()}")
            if err is not None:
                waiting.discard(msg.partition())
    client.unassign()
    for p, (low, high) in list(bounds.items()):
        _, fetched = client.get_watermark_offsets(ck.TopicPartition(topic, p), cached=True)
        if fetched is not None and fetched > high:
            bounds[p] = (low, fetched)
    return bounds
