"""Windows over a Kafka topic, corrected results back into Kafka.

Clicks arrive in a 3-partition topic. The job reads it with
``session.read_kafka`` (one watermark per partition), counts clicks per user
and minute, keeps each window open for a minute of late clicks, and writes
the results to a second topic with ``kp.KafkaSink``: one record key per
window, so a late click *replaces* its window's result (a compacted topic
keeps only the latest), and ``job.results()`` reads the topic back as a
table of the current answer.

It needs a Kafka broker: ``$KRISHIV_KAFKA_BOOTSTRAP`` if set (topics are
created), else a local test broker that the example starts and stops
(``krishiv_py.devtools.KafkaBroker``; ``python -m pip install '.[kafka,devtools]'``).

Run with ``python examples/kafka_windows.py``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import uuid
from collections.abc import Iterator

import krishiv_py as kp
from krishiv_py.devtools import KafkaBroker

SCHEMA = "user_id string, event_time timestamp, page string"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@contextlib.contextmanager
def broker() -> Iterator[KafkaBroker | str]:
    """The broker to use: ``$KRISHIV_KAFKA_BOOTSTRAP``, or a local one for the example's run."""
    given = os.environ.get("KRISHIV_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    with KafkaBroker() as local:
        yield local


def click(user: str, at_s: int, page: str = "home") -> tuple[bytes, bytes]:
    value = {"user_id": user, "event_time": (T0 + dt.timedelta(seconds=at_s)).isoformat(), "page": page}
    return user.encode(), json.dumps(value).encode()


def send(servers: str, topic: str, partition: int, clicks: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers})
    for key, value in clicks:
        producer.produce(topic, key=key, value=value, partition=partition)
    producer.flush(30)


def create_topics(servers: str, partitions: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": servers})  # let go of when this returns
    for topic, count in partitions.items():
        for future in admin.create_topics([NewTopic(topic, num_partitions=count)]).values():
            future.result(timeout=30)


def main() -> None:
    with broker() as kafka, kp.Session.embedded(app_name="krishiv-kafka") as session:
        servers = kafka if isinstance(kafka, str) else kafka.bootstrap_servers
        clicks, per_minute_topic = f"clicks_{uuid.uuid4().hex[:6]}", f"per_minute_{uuid.uuid4().hex[:6]}"
        create_topics(servers, {clicks: 3, per_minute_topic: 1})

        stream = session.read_kafka(servers, clicks, schema=SCHEMA, watermark_per_partition=True)
        per_minute = (
            stream.watermark("event_time", 5_000)  # one watermark per partition; the job's is their minimum
            .key_by("user_id")
            .tumbling_window(60_000)
            .allowed_lateness(60_000)  # a late click re-fires its window for another minute
            .agg(kp.count(kp.col("*")).alias("clicks"))
        )
        job = per_minute.start(kp.KafkaSink(servers, per_minute_topic))

        # Every partition moves on to 1:10, so the first minute fires.
        for partition, user in enumerate(("alice", "bob", "carol")):
            send(servers, clicks, partition, [click(user, 10), click(user, 20), click(user, 70)])
        job.process_all_available()
        first = {r["user_id"]: r["clicks"] for r in job.results().to_pylist() if r["window_start"] == T0}
        print("after the first minute:", first)
        assert first == {"alice": 2, "bob": 2, "carol": 2}

        send(servers, clicks, 0, [click("alice", 50, page="late")])  # late, within the allowed lateness
        job.process_all_available()
        now = {r["user_id"]: r["clicks"] for r in job.results().to_pylist() if r["window_start"] == T0}
        print("after alice's late click:", now)
        assert now == {"alice": 3, "bob": 2, "carol": 2}  # alice's window was replaced, not appended
        for source, ms in sorted(job.source_watermarks().items()):
            at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
            print(f"watermark of {source}: {at:%Y-%m-%d %H:%M:%S} UTC")
        job.stop()  # the sink's producer goes with the job, before the broker stops


if __name__ == "__main__":
    main()
