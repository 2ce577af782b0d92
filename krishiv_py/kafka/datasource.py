"""The Python connector: a Kafka topic as a Spark streaming data source (``pyspark.sql.datasource``).

Offsets
    An offset is ``{"<partition>": next offset, ...}``. Spark records each
    micro-batch's end offsets in the query's checkpoint before it runs the
    batch, so a restarted query reads exactly the range that was not
    committed — exactly once into an exactly-once sink, whatever the
    consumer group says. After Spark commits a batch, :meth:`commit` commits
    the same offsets to the consumer group (``group.id`` of
    ``consumer_config``, default ``krishiv-<stream name>``) so that lag
    tools see the job's progress; nothing reads them back.
Partitions
    A micro-batch reads the Kafka partitions with records in its range in
    at most ``tasks`` Spark tasks (the option; the runtime passes Spark's
    default parallelism, so one wave of tasks on the cluster's cores): the
    ranges are shared among the tasks by record count, and a task reads its
    ranges one after the other with an assigned consumer, decoding them
    into Arrow batches (:mod:`krishiv_py.kafka.decode`). A Python worker
    keeps a consumer per partition from task to task (as Spark's own Kafka
    connector caches its consumers): it stays assigned at the end of the
    range it read, so it fetches the next micro-batch's records while Spark
    works on this one, and a task that reads on from there finds them
    waiting. Partitions that appear while the job runs are read from their
    first offset.
Batch size
    ``max_records_per_batch`` caps the records of one micro-batch, shared
    across partitions in proportion to their backlog (Spark's admission
    control, ``ReadMaxRows``; ``Trigger.AvailableNow`` reads everything).
Errors
    A topic that does not exist (or was deleted), a broker that does not
    answer, or a start offset the broker no longer holds (retention deleted
    records before the job read them) raise :class:`KafkaReadError` naming
    the topic and partition; the job fails with it as its cause.

The class runs in Spark's Python workers (the driver's, for offsets, and the
executors', for reading): confluent-kafka must be installed where they run.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from krishiv_py.kafka.client import (
    REQUEST_TIMEOUT_S,
    KafkaReadError,
    consumer,
    end_offsets,
    partition_ids,
    require_client,
)

__all__ = ["KafkaDataSource", "KafkaRange", "KafkaRanges", "KafkaSnapshotReader", "SOURCE_NAME", "share"]

#: The name the data source is registered under (``spark.readStream.format(SOURCE_NAME)``).
SOURCE_NAME = "krishiv_kafka"
#: Records one consumer call returns at most; also the largest Arrow batch a task yields.
_CHUNK = 50_000


class KafkaRange:
    """The records of one Kafka partition: offsets ``[start, end)``."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition, self.start, self.end = partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRange({self.partition}, {self.start}, {self.end})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaRange) and (self.partition, self.start, self.end) == (
            other.partition,
            other.start,
            other.end,
        )

    def __hash__(self) -> int:
        return hash((self.partition, self.start, self.end))

    @property
    def size(self) -> int:
        return self.end - self.start


class KafkaRanges(InputPartition):
    """What one Spark task reads: ranges of Kafka partitions, one after the other."""

    def __init__(self, ranges: Sequence[KafkaRange]) -> None:
        super().__init__(tuple((r.partition, r.start, r.end) for r in ranges))
        self.ranges = tuple(ranges)


def share(ranges: Sequence[KafkaRange], tasks: int | None) -> list[KafkaRanges]:
    """``ranges`` shared among at most ``tasks`` tasks by record count (largest first, to the lightest).

    Each task's ranges stay in partition order; ``None`` gives a task per range.

    >>> [t.ranges for t in share([KafkaRange(0, 0, 10), KafkaRange(1, 0, 30), KafkaRange(2, 0, 20)], 2)]
    [(KafkaRange(1, 0, 30),), (KafkaRange(0, 0, 10), KafkaRange(2, 0, 20))]
    >>> len(share([KafkaRange(0, 0, 1)], 4))
    1
    """
    if tasks is None or tasks >= len(ranges):
        return [KafkaRanges([r]) for r in ranges]
    groups: list[list[KafkaRange]] = [[] for _ in range(max(1, tasks))]
    load = [0] * len(groups)
    for r in sorted(ranges, key=lambda r: (-r.size, r.partition)):
        i = load.index(min(load))
        groups[i].append(r)
        load[i] += r.size
    return [KafkaRanges(sorted(g, key=lambda r: r.partition)) for g in groups if g]


class KafkaDataSource(DataSource):
    """``spark.readStream.format("krishiv_kafka").schema(ddl).options(...).load()``.

    Options (all strings): ``bootstrap.servers``, ``topic``, ``partitions``
    (comma-separated; empty: all), ``value.schema`` (the value fields' DDL),
    ``value.format`` (``json``/``raw``), ``key.format`` (``string``/``raw``),
    ``null.time.when.bad`` (``true``: a bad record's ``kafka_timestamp`` is
    null), ``starting.offsets`` (``earliest``, ``latest`` or a JSON object of
    partition -> offset), ``max.records`` and ``consumer.config`` (JSON).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        raise KafkaReadError("the krishiv_kafka source needs a schema: .schema(ddl)")

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options), schema)

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaSnapshotReader(dict(self.options), schema)


class KafkaSnapshotReader(DataSourceReader):
    """``spark.read`` of the topic: the records it holds when the read is planned, from the
    starting offsets on (``collect()`` of a Kafka stream: as if the topic ended there)."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.stream = KafkaStreamReader(options, schema)

    def partitions(self) -> Sequence[InputPartition]:
        try:
            start = self.stream.initialOffset()
            end = {str(p): high for p, (_, high) in self.stream._bounds().items()}
            return self.stream.partitions(start, end) or [KafkaRanges([])]
        finally:
            self.stream.stop()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRanges)
        return self.stream.read(partition)


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.options = dict(options)
        self.topic = options["topic"]
        self.servers = options["bootstrap.servers"]
        only = options.get("partitions", "")
        self.only = [int(p) for p in only.split(",")] if only else None
        expected = options.get("expected.partitions", "")
        self.expected = int(expected) if expected else None
        self.config: dict[str, str] = json.loads(options.get("consumer.config") or "{}")
        self.max_records = int(options["max.records"]) if options.get("max.records") else None
        self.tasks = int(options["tasks"]) if options.get("tasks") else None
        self._client: Any = None
        self._committer: Any = None
        self._last: dict[str, int] | None = None

    # --- the driver's side: offsets ----------------------------------------------------

    def _consumer(self) -> Any:
        if self._client is None:
            self._client = consumer(self.servers, {k: v for k, v in self.config.items() if k != "group.id"})
        return self._client

    def _bounds(self) -> dict[int, tuple[int, int]]:
        client = self._consumer()
        parts = partition_ids(client, self.topic, self.servers)
        if self.expected is not None and len(parts) != self.expected:
            raise KafkaReadError(
                f"Kafka topic {self.topic!r} has {len(parts)} partitions now; this stream reads "
                f"{self.expected} with a watermark each (watermark_per_partition=True). Build the stream "
                "again with read_kafka and start it under a new name to read every partition"
            )
        if self.only is not None:
            missing = sorted(set(self.only) - set(parts))
            if missing:
                raise KafkaReadError(
                    f"Kafka topic {self.topic!r} has no partition {missing[0]} (it has {len(parts)}); a "
                    "stream with watermark_per_partition=True reads the partitions it was built with"
                )
            parts = self.only
        return end_offsets(client, self.topic, parts)

    def initialOffset(self) -> dict[str, int]:
        start = self.options.get("starting.offsets", "earliest")
        bounds = self._bounds()
        if start == "earliest":
            return {str(p): low for p, (low, _) in bounds.items()}
        if start == "latest":
            return {str(p): end for p, (_, end) in bounds.items()}
        given = {int(p): int(o) for p, o in json.loads(start).items()}
        return {str(p): given.get(p, low) for p, (low, _) in bounds.items()}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        # Spark 4.0/4.1 call latestOffset() without arguments; 4.2+ pass the start and a read limit.
        start = start if start is not None else (self._last or self.initialOffset())
        bounds = self._bounds()
        begin = {p: int(start.get(str(p), low)) for p, (low, _) in bounds.items()}
        ends = {p: max(begin[p], end) for p, (_, end) in bounds.items()}
        cap = _max_rows(limit, self.max_records)
        if cap is not None:
            ends = _admit(begin, ends, cap)
        self._last = {str(p): o for p, o in ends.items()}
        return dict(self._last)

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[KafkaRanges]:
        ranges = [
            KafkaRange(int(p), int(start.get(p, 0)), int(o))
            for p, o in sorted(end.items(), key=lambda kv: int(kv[0]))
            if int(o) > int(start.get(p, 0))
        ]
        return share(ranges, self.tasks)

    def commit(self, end: dict[str, int]) -> None:
        """Mirror Spark's committed offsets in the consumer group (for lag tools; best effort)."""
        ck = require_client()
        group = self.config.get("group.id") or self.options.get("group.id")
        if not group or not end:
            return
        if self._committer is None:
            self._committer = consumer(self.servers, {**self.config, "group.id": group})
        offsets = [ck.TopicPartition(self.topic, int(p), int(o)) for p, o in end.items()]
        # The group's offsets are informational: Spark's checkpoint is what a restart reads. So the
        # commit is sent without waiting for the broker's answer (the next micro-batch goes on).
        with contextlib.suppress(ck.KafkaException):
            self._committer.commit(offsets=offsets, asynchronous=True)
            self._committer.poll(0)  # serve the answers of earlier commits

    def stop(self) -> None:
        for c in (self._client, self._committer):
            if c is not None:
                c.close()
        self._client = self._committer = None

    # --- the executors' side: records ------------------------------------------------------

    def read(self, partition: KafkaRanges) -> Iterator[Any]:  # type: ignore[override]
        from krishiv_py.kafka.decode import records_to_batch
        from krishiv_py.types import Schema

        value_schema = Schema.parse(self.options["value.schema"]).to_arrow()
        fmt = self.options.get("value.format", "json")
        key_fmt = self.options.get("key.format", "string")
        null_time = self.options.get("null.time.when.bad") == "true"
        for part, (values, keys, offsets, stamps) in _records(
            self.servers, self.config, self.topic, partition
        ):
            yield records_to_batch(
                values=values,
                keys=keys,
                topic=self.topic,
                partition=part,
                offsets=offsets,
                timestamps_ms=stamps,
                value_schema=value_schema,
                value_format=fmt,  # type: ignore[arg-type]
                key_format=key_fmt,  # type: ignore[arg-type]
                null_time_when_bad=null_time,
            )


Chunk = tuple[list[bytes | None], list[bytes | None], Sequence[int], list[int | None]]


def _records(
    servers: str, config: Mapping[str, str], topic: str, task: KafkaRanges
) -> Iterator[tuple[int, Chunk]]:
    """The records of ``task``'s ranges in chunks: the partition and values, keys, offsets, timestamps."""
    settings = {k: v for k, v in config.items() if k != "group.id"}
    for part in task.ranges:
        with _pooled(servers, settings, topic, part) as reading:
            for chunk in _range(reading, servers, topic, part):
                yield part.partition, chunk


class _Reading:
    """A pooled consumer of one partition and where it stands (``None``: not known, assign again),
    and whether its partition is paused (it fetches nothing while it waits in the pool)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.position: int | None = None
        self.paused = False

    def pause(self) -> None:
        with contextlib.suppress(Exception):  # (an unassigned consumer has nothing to pause)
            self.client.pause(self.client.assignment())
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.client.resume(self.client.assignment())
            self.paused = False


def _range(reading: _Reading, servers: str, topic: str, part: KafkaRange) -> Iterator[Chunk]:
    """The records of one range, read with ``reading``'s consumer.

    A consumer already at the range's start (it read the range before, and
    has fetched on since) is used as it stands; otherwise it is assigned
    the partition at the start. It stays assigned afterwards, at the end of
    the range, so it prefetches the next micro-batch's records.
    """
    ck = require_client()
    client = reading.client
    if reading.position != part.start:
        client.assign([ck.TopicPartition(topic, part.partition, part.start)])
    reading.position = None
    position, quiet_since = part.start, time.monotonic()
    while position < part.end:
        # A short wait: a range that ends in a transaction marker never fills the count.
        msgs = client.consume(num_messages=min(_CHUNK, part.end - position), timeout=0.1)
        failed = [m.error() for m in msgs if m.error() is not None]
        if failed:
            msgs = [m for m in msgs if m.error() is None]
            for err in failed:
                if err.code() != ck.KafkaError._PARTITION_EOF:
                    raise _read_error(topic, part, err)
        if msgs and (msgs[0].partition() != part.partition or msgs[0].offset() < position):
            # Never expected from a consumer of this partition, but never read twice either.
            msgs = [m for m in msgs if m.partition() == part.partition and m.offset() >= position]
        if msgs and msgs[-1].offset() >= part.end:
            msgs = [m for m in msgs if m.offset() < part.end]
            reading.position = -1  # read past the range: assign again next time
        # One list comprehension per column: the client's per-record calls, and nothing more.
        values: list[bytes | None] = [m.value() for m in msgs]
        keys: list[bytes | None] = [m.key() for m in msgs]
        stamps: list[int | None] = [m.timestamp()[1] for m in msgs]  # -1 when not available
        if msgs:
            first, last = msgs[0].offset(), msgs[-1].offset()
            # Consecutive offsets (no transaction markers, nothing compacted away): a range.
            offsets = range(first, last + 1) if last - first + 1 == len(msgs) else [m.offset() for m in msgs]
            position, quiet_since = last + 1, time.monotonic()
            yield values, keys, offsets, stamps
            continue
        # Nothing new: transaction markers and aborted records take offsets without a record.
        (pos,) = client.position([ck.TopicPartition(topic, part.partition)])
        if pos.offset >= part.end:
            reading.position = pos.offset if reading.position is None else -1
            return
        if time.monotonic() - quiet_since > REQUEST_TIMEOUT_S:
            raise KafkaReadError(
                f"Kafka topic {topic!r} partition {part.partition}: offsets {position}..{part.end - 1} "
                f"did not arrive within {REQUEST_TIMEOUT_S:g} s from {servers}; is the broker up?"
            )
    if reading.position is None:
        reading.position = part.end


# A Python worker's consumers, one per partition it has read (by servers, settings, topic and
# partition): a task takes the one of each of its ranges (or makes one) and puts it back, still
# assigned, when it ends well; it prefetches the next micro-batch's records while it waits. One
# that waited _PAUSE_S (no micro-batch of a running job came for it: the job stopped, or its
# trigger is slow) is paused, so that it stops fetching: an assigned consumer at the end of its
# partition asks the broker again every few milliseconds (fetch.wait.max.ms), which a stopped job
# must not leave running in a Python worker that lives on (Spark reuses them, and a notebook
# keeps its session). One idle longer than _IDLE_S, and the least recently used beyond
# _MAX_POOLED, are closed (Spark's Kafka connector caches consumers per partition the same way,
# 64 per executor by default). A daemon thread of the worker does both once a second.
_POOL: dict[tuple[str, str, str, int], tuple[float, _Reading]] = {}
_POOL_LOCK = threading.Lock()
_PAUSE_S = 5.0
_IDLE_S = 60.0
_MAX_POOLED = 32
_TENDING: list[threading.Thread] = []


@contextlib.contextmanager
def _pooled(servers: str, config: Mapping[str, str], topic: str, part: KafkaRange) -> Iterator[_Reading]:
    key = (servers, json.dumps(dict(config), sort_keys=True), topic, part.partition)
    with _POOL_LOCK:
        entry = _POOL.pop(key, None)
    reading = entry[1] if entry is not None else _Reading(consumer(servers, config))
    try:
        reading.resume()
        yield reading
    except BaseException:
        reading.client.close()  # its state is unknown after an error: never reused
        raise
    else:
        with _POOL_LOCK:
            _POOL[key] = (time.monotonic(), reading)
            if not _TENDING:
                tending = threading.Thread(target=_tend_pool, name="krishiv-kafka-pool", daemon=True)
                _TENDING.append(tending)
                tending.start()
        _close(_tended(time.monotonic()))


def _tended(now: float) -> list[_Reading]:
    """Pause the pooled consumers that waited :data:`_PAUSE_S`; take out those to close."""
    with _POOL_LOCK:
        by_age = sorted(_POOL, key=lambda k: _POOL[k][0])
        stale = [
            k for i, k in enumerate(by_age) if now - _POOL[k][0] > _IDLE_S or i < len(by_age) - _MAX_POOLED
        ]
        closing = [_POOL.pop(k)[1] for k in stale]
        for since, reading in _POOL.values():
            if not reading.paused and now - since > _PAUSE_S:
                reading.pause()  # (under the lock: no task takes it meanwhile)
    return closing


def _close(readings: list[_Reading]) -> None:
    for r in readings:
        with contextlib.suppress(Exception):
            r.client.close()


def _tend_pool() -> None:
    """The pool's daemon thread: pauses and closes idle consumers once a second, for good."""
    while True:
        time.sleep(1.0)
        _close(_tended(time.monotonic()))


@atexit.register
def _close_pool() -> None:
    with _POOL_LOCK:
        readings = [r for _, r in _POOL.values()]
        _POOL.clear()
    for r in readings:
        with contextlib.suppress(Exception):
            r.client.close()


def _read_error(topic: str, part: KafkaRange, err: Any) -> KafkaReadError:
    ck = require_client()
    where = f"Kafka topic {topic!r} partition {part.partition}"
    if err.code() == ck.KafkaError._AUTO_OFFSET_RESET or "out of range" in err.str().lower():
        return KafkaReadError(
            f"{where}: offset {part.start} is out of range (records were deleted, e.g. by retention, before "
            "the job read them); start the job under a new name with starting_offsets='earliest' to go on "
            "from the oldest record held"
        )
    if err.code() in (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_TOPIC):
        return KafkaReadError(f"{where} does not exist (was the topic deleted?); restart once it is back")
    return KafkaReadError(f"{where}: {err.str()}")


def _max_rows(limit: Any, default: int | None) -> int | None:
    """The row cap of Spark's read ``limit`` (None: read all available)."""
    if limit is None:
        return default
    rows = getattr(limit, "max_rows", None)
    return int(rows) if rows is not None else None


def _admit(begin: Mapping[int, int], ends: Mapping[int, int], cap: int) -> dict[int, int]:
    """End offsets that admit at most about ``cap`` records, shared in proportion to each backlog.

    Every partition with a backlog moves by at least one record, so a small
    cap still makes progress everywhere.

    >>> _admit({0: 0, 1: 0}, {0: 300, 1: 100}, 100)
    {0: 75, 1: 25}
    >>> _admit({0: 5}, {0: 7}, 100)
    {0: 7}
    """
    backlog = {p: ends[p] - begin[p] for p in ends}
    total = sum(backlog.values())
    if total <= cap:
        return dict(ends)
    return {p: begin[p] + (max(1, backlog[p] * cap // total) if backlog[p] else 0) for p in ends}
