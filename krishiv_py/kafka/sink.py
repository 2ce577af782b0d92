"""``KafkaSink``: a job's results as records of a Kafka topic, one key per window.

Keys and values
    Each result row is one record. Its key is a JSON object of the row's
    primary key — the key columns, ``window_start`` and ``window_end``
    (SPEC §3.11; ``key=`` chooses other columns) — and its value a JSON
    object of the whole row (timestamps as ISO-8601 strings in UTC). A
    re-fired window is a new value under the same key, so a compacted topic
    (``cleanup.policy=compact``) holds the latest result of every window.
    With ``accumulation("retracting")`` a ``retract`` row is a *tombstone*
    (the key with a null value): it deletes the window's previous result; an
    ``emit`` that follows it in the same batch writes the corrected one. The
    ``kind`` column is therefore not in the values.
Delivery
    ``delivery="exactly-once"`` writes each micro-batch in one Kafka
    transaction that also records the batch id (as the committed offset of
    the consumer group ``krishiv-sink-<id>`` on the topic's partition 0,
    ``id`` derived from the job's checkpoint and the topic). A batch Spark
    runs again after a crash finds its id committed and writes nothing; a
    batch whose transaction did not commit was aborted by the broker (or is
    aborted when the restarted job's producer, under the same transactional
    id, starts), so consumers with ``isolation.level=read_committed`` (the
    librdkafka default) see every result exactly once.
    ``"at-least-once"`` writes without transactions: a rerun after a crash
    writes the same keys and values again, which a compacted topic, or any
    reader that keeps the latest value per key, absorbs. ``"auto"`` (the
    default) uses transactions where the broker supports them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from krishiv_py.errors import JobError, PlanError
from krishiv_py.names import RESULT_KIND
from krishiv_py.tables.changelog import non_unique_key, second_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["KafkaSink"]

Delivery = Literal["exactly-once", "at-least-once", "auto"]
_TIMEOUT_S = 30.0
#: Seconds a metadata request may take once a transaction could not start (is the broker there?).
_PROBE_S = 5.0


def _columns(key: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if key is None else tuple(key)


def _settings(config: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in dict(config).items()))


@attrs.frozen(kw_only=True)
class KafkaSink:
    """Write results to ``topic``, keyed per window (see :mod:`krishiv_py.kafka.sink`).

    Parameters
    ----------
    bootstrap_servers, topic
        Where to write; the topic must exist.
    format
        ``"json"``: keys and values are JSON objects.
    key
        The columns of the record key; default: the result's primary key
        (key columns, ``window_start``, ``window_end``), or no key for rows
        that are not window results.
    delivery
        ``"exactly-once"`` (Kafka transactions), ``"at-least-once"``, or
        ``"auto"``: transactions where the broker supports them.
    producer_config
        Further librdkafka producer settings (security, compression, ...).

    Examples
    --------
        job = per_minute.start(kp.KafkaSink("127.0.0.1:9092", "per-minute"), name="per_minute")
    """

    bootstrap_servers: str = attrs.field(kw_only=False)
    topic: str = attrs.field(kw_only=False)
    format: Literal["json"] = "json"
    key: tuple[str, ...] | None = attrs.field(default=None, converter=_columns)
    delivery: Delivery = "auto"
    producer_config: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_settings)

    def __attrs_post_init__(self) -> None:
        for arg in ("bootstrap_servers", "topic"):
            value = getattr(self, arg)
            if not isinstance(value, str) or not value.strip():
                raise PlanError(f"KafkaSink: {arg} must be a non-empty string, got {value!r}")
        if self.format != "json":
            raise PlanError(f"KafkaSink: format must be 'json', got {self.format!r}")
        if self.delivery not in ("exactly-once", "at-least-once", "auto"):
            raise PlanError(
                "KafkaSink: delivery must be 'exactly-once', 'at-least-once' or 'auto', "
                f"got {self.delivery!r}"
            )

    def open(self, context: SinkContext) -> KafkaWriter:
        names = context.schema.names
        key = self.key if self.key is not None else context.primary_key
        for column in key or ():
            if column not in names:
                raise PlanError(
                    f"KafkaSink: key column {column!r} is not a result column ({', '.join(names)})"
                )
        return KafkaWriter(self, context, tuple(key or ()), checked=context.joined and self.key is not None)


class KafkaWriter:
    """Produces each micro-batch; picklable (a Spark Connect server runs it), the producer made on use."""

    user_code = None

    def __init__(
        self, sink: KafkaSink, context: SinkContext, key: tuple[str, ...], *, checked: bool = False
    ) -> None:
        self.sink = sink
        self.key = key
        #: The key is the user's claim on a join's rows (``key=``): each micro-batch is checked.
        self.checked = checked
        self.columns = tuple(c for c in context.schema.names if c != RESULT_KIND)
        self.retracting = RESULT_KIND in context.schema.names and context.output == "results"
        self.schema = context.schema
        #: A streaming job's batches can come again after a restart; a bounded run's cannot.
        self.resumable = context.checkpoint_dir is not None
        origin = f"{context.checkpoint_dir or uuid.uuid4().hex}|{sink.topic}|{context.output}"
        self.id = hashlib.sha256(origin.encode()).hexdigest()[:16]
        #: The next batch id to write, once read from the broker (None: not read yet).
        self._next: int | None = None
        self.transactional: bool | None = {"exactly-once": True, "at-least-once": False}.get(sink.delivery)
        self._producer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_producer": None, "_next": None}

    # --- writing -------------------------------------------------------------------------

    def write(self, table: pa.Table, batch_id: int) -> None:
        producer = self._ready()
        marked = self.transactional and self.resumable and batch_id >= 0
        if marked and batch_id < self._committed_batches():
            return  # written and committed before a restart: Spark runs the batch again
        found = second_rows(table, self.key) if self.checked else []
        if found:
            fix = "leave key= out (records without a key keep every row)"
            raise non_unique_key("KafkaSink", self.key, found, batch_id, fix=fix)
        records = list(self.records(table))
        if self.transactional:
            producer.begin_transaction()
        try:
            self._produce(producer, records)
            if marked:
                self._mark(producer, batch_id)
            if self.transactional:
                producer.commit_transaction(_TIMEOUT_S)
            if marked:
                self._next = batch_id + 1
        except Exception as exc:
            if self.transactional:
                producer.abort_transaction(_TIMEOUT_S)
            raise JobError(
                f"KafkaSink: writing batch {batch_id} to topic {self.sink.topic!r} on "
                f"{self.sink.bootstrap_servers} failed: {exc}"
            ) from exc

    def records(self, table: pa.Table) -> list[tuple[bytes | None, bytes | None]]:
        """The ``(key, value)`` records of ``table``, in row order (a retraction is a tombstone)."""
        rows = table.to_pylist()
        out: list[tuple[bytes | None, bytes | None]] = []
        for row in rows:
            key = _json({c: row[c] for c in self.key}) if self.key else None
            if self.retracting and row.get(RESULT_KIND) == "retract":
                out.append((key, None))
            else:
                out.append((key, _json({c: row[c] for c in self.columns})))
        return out

    def _produce(self, producer: Any, records: list[tuple[bytes | None, bytes | None]]) -> None:
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        for key, value in records:
            while True:
                try:
                    producer.produce(self.sink.topic, key=key, value=value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
        left = producer.flush(_TIMEOUT_S)
        if errors or left:
            raise RuntimeError(errors[0] if errors else f"{left} records not delivered in {_TIMEOUT_S:g} s")

    def close(self) -> None:
        """Let go of the producer when the job stops (it reconnects no more, to a broker that may be gone)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5)

    # --- transactions -----------------------------------------------------------------------

    def _ready(self) -> Any:
        if self._producer is not None:
            return self._producer
        from krishiv_py.kafka.client import require_client, settings

        ck = require_client()
        base = {**dict(self.sink.producer_config), "bootstrap.servers": self.sink.bootstrap_servers}
        if self.transactional is not False:
            producer = ck.Producer(settings({**base, "transactional.id": f"krishiv-{self.id}"}))
            try:
                producer.init_transactions(_TIMEOUT_S)
                self.transactional = True
                self._producer = producer
                return producer
            except ck.KafkaException as exc:
                self._check_answers(producer, exc)
                if self.transactional:
                    raise JobError(
                        f"KafkaSink(delivery='exactly-once'): the broker at {self.sink.bootstrap_servers} "
                        f"refused Kafka transactions ({exc}); use delivery='at-least-once'"
                    ) from exc
                warnings.warn(
                    f"KafkaSink: the broker does not support transactions ({exc}); writing at least once",
                    stacklevel=2,
                )
        self.transactional = False
        self._producer = ck.Producer(settings({**base, "enable.idempotence": True}))
        return self._producer

    def _check_answers(self, producer: Any, exc: BaseException) -> None:
        """A :class:`JobError` naming the broker when ``exc`` is a broker that does not answer at all.

        A broker that answers but keeps no transactions times out too: a
        metadata request tells them apart.
        """
        from krishiv_py.kafka.client import broker_unreachable, require_client, unreachable

        if unreachable(exc) is None:
            return
        try:
            producer.list_topics(timeout=_PROBE_S)
        except require_client().KafkaException as probe:
            said = unreachable(probe)
            if said is not None:
                servers, waited = self.sink.bootstrap_servers, _TIMEOUT_S + _PROBE_S
                raise JobError(
                    f"KafkaSink: {broker_unreachable(servers, waited, f'starting a producer: {said}')}"
                ) from exc

    @property
    def group(self) -> str:
        """The consumer group whose committed offset records the batches written."""
        return f"krishiv-sink-{self.id}"

    def _committed_batches(self) -> int:
        """How many batches are committed: the next batch id to write (asked once, then known).

        Only this writer's transactional id commits them, and a restarted
        job's producer fences the one before, so after the first answer
        the count changes only here.
        """
        if self._next is not None:
            return self._next
        from krishiv_py.kafka.client import consumer, require_client

        ck = require_client()
        client = consumer(
            self.sink.bootstrap_servers, {**dict(self.sink.producer_config), "group.id": self.group}
        )
        try:
            (tp,) = client.committed([ck.TopicPartition(self.sink.topic, 0)], timeout=_TIMEOUT_S)
        finally:
            client.close()
        self._next = max(0, int(tp.offset))
        return self._next

    def _mark(self, producer: Any, batch_id: int) -> None:
        """Commit ``batch_id + 1`` as the group's offset, in the open transaction."""
        from krishiv_py.kafka.client import consumer, require_client

        ck = require_client()
        client = consumer(self.sink.bootstrap_servers, {"group.id": self.group})
        try:
            offsets = [ck.TopicPartition(self.sink.topic, 0, batch_id + 1)]
            producer.send_offsets_to_transaction(offsets, client.consumer_group_metadata(), _TIMEOUT_S)
        finally:
            client.close()

    # --- reading back -------------------------------------------------------------------------

    def results(self) -> pa.Table:
        """The topic as a table: the latest committed value of every key, tombstones removed."""
        from krishiv_py.kafka.client import read_topic
        from krishiv_py.kafka.decode import decode_json

        latest: dict[bytes | None, bytes | None] = {}
        unkeyed: list[bytes] = []
        for key, value in read_topic(self.sink.bootstrap_servers, self.sink.topic):
            if key is None:
                if value is not None:
                    unkeyed.append(value)
            else:
                latest[key] = value
        values = [v for v in latest.values() if v is not None] + unkeyed
        schema = self.schema.to_arrow()
        schema = schema.remove(schema.get_field_index(RESULT_KIND)) if RESULT_KIND in schema.names else schema
        table, _ = decode_json(values, schema)
        return table


def _json(row: dict[str, Any]) -> bytes:
    return json.dumps(row, default=_encode, separators=(",", ":"), ensure_ascii=False).encode()


def _encode(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        utc = value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return utc.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "as_tuple"):  # Decimal: exact, as a string
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
