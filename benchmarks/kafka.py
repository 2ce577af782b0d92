"""``read_kafka`` (the Python connector) against the Parquet file source, the same query, one run.

    PYTHONPATH=. python benchmarks/kafka.py [--events 1000000] [--files 20] [--rounds 3]

The clickstream dataset (``--events`` events in ``--files`` files) is
produced, file by file, into a 4-partition topic on a local test broker
(:class:`krishiv_py.devtools.KafkaBroker`), row ``i`` to partition ``i % 4``.
Then the ``tumbling`` query (1-minute count and sum per user, native
lowering) runs over both sources, alternating, ``--rounds`` times after one
warm-up each: over the Parquet directory with one file per micro-batch, and
over the topic with ``max_records_per_batch`` = one file's rows, so that
each micro-batch holds the same rows (the admission control takes an equal
share of every partition's backlog). Both must give the same windows (the
Parquet run is checked against the reference model by the main suite).
Prints the median seconds of each, the ratio Parquet ÷ Kafka (higher is
better for Kafka; the target is ≥ 0.5), and Kafka records/s per core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from typing import Any

import pyarrow.parquet as pq

import krishiv_py as kp
from benchmarks import data
from benchmarks.arrow import rows_of
from benchmarks.digest import digest
from benchmarks.queries import QUERIES
from benchmarks.spark_runner import krishiv_query, run_krishiv_streaming
from krishiv_py.devtools import KafkaBroker

PARTITIONS = 4


def load(broker: KafkaBroker, path: str) -> tuple[str, int]:
    """Produce the dataset's files, in order, into a new topic; returns the topic and the row count."""
    topic = f"clicks_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS)
    return topic, produce_files(broker, topic, path, PARTITIONS)


def produce_files(broker: KafkaBroker, topic: str, path: str, partitions: int) -> int:
    """Produce the rows of the Parquet files in ``path``, in file order, into ``topic`` as JSON
    records (timestamps as ISO-8601 text), row ``i`` to partition ``i % partitions``; the rows."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    i = 0
    for name in files:
        for row in pq.read_table(os.path.join(path, name)).to_pylist():
            value = json.dumps(row, default=lambda v: v.isoformat()).encode()
            while True:
                try:
                    producer.produce(topic, value=value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
            i += 1
        producer.flush(60)
    return i


def run_kafka(session: kp.Session, broker: KafkaBroker, topic: str, schema: str, per_batch: int) -> Any:
    source = session.read_kafka(
        broker.bootstrap_servers, topic, schema=schema, connector="python", max_records_per_batch=per_batch
    )
    job = krishiv_query(QUERIES["tumbling"], source).start(lowering="native")
    job.process_all_available()
    job.stop()
    return job.results()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    clicks = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
    path = clicks.table_dir("events")
    with KafkaBroker() as broker, kp.Session.embedded(progress=False) as session:
        t0 = time.perf_counter()
        topic, rows = load(broker, path)
        print(f"produced {rows} records in {time.perf_counter() - t0:.1f} s")
        per_batch = -(-rows // a.files)
        times: dict[str, list[float]] = {"parquet": [], "kafka": []}
        digests: dict[str, tuple[int, str]] = {}
        for rnd in range(a.rounds + 1):
            for mode in ("parquet", "kafka") if rnd % 2 == 0 else ("kafka", "parquet"):
                t0 = time.perf_counter()
                if mode == "parquet":
                    out = run_krishiv_streaming(session, QUERIES["tumbling"], path, "native")
                else:
                    out = run_kafka(session, broker, topic, clicks.ddl("events"), per_batch)
                elapsed = time.perf_counter() - t0
                if rnd:  # the first round warms up
                    times[mode].append(elapsed)
                digests[mode] = digest(rows_of(QUERIES["tumbling"].columns)(out))
        parquet, kafka = (statistics.median(times[m]) for m in ("parquet", "kafka"))
        cores = session.spark.sparkContext.defaultParallelism if not session.is_remote else os.cpu_count()
        same = digests["parquet"] == digests["kafka"]
        print(f"parquet file source: {parquet:.2f} s (median of {a.rounds})")
        print(f"read_kafka (python): {kafka:.2f} s (median of {a.rounds})")
        print(f"ratio parquet / kafka: {parquet / kafka:.2f} (target >= 0.5)")
        print(f"kafka records/s per core: {rows / kafka / (cores or 1):,.0f} ({cores} cores)")
        print(f"same windows: {same} ({digests['kafka'][0]} rows)")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
