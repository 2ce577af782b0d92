"""Kafka in and out: the decoding kernel, read_kafka's arguments, and jobs on a real broker.

The broker is the ``kafka_broker`` fixture (Tansu on 127.0.0.1, one per test
run); every test makes topics of its own. Spark's own Kafka connector cannot
run here (its jar comes from Maven): its lowering is pinned by the snapshots
in ``tests/snapshots/kafka_*.txt`` instead.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

import krishiv_py as kp
from krishiv_py.devtools import KafkaBroker
from krishiv_py.kafka.decode import decode_json, records_to_batch
from krishiv_py.plan import nodes as n
from krishiv_py.sinks import SinkContext
from krishiv_py.testing import ManualClock, Send, assert_same_rows, reference_model_for, run_reference
from krishiv_py.types import Schema

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)


def event(user: str, at_s: float, amount: float = 1.0) -> dict[str, Any]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=at_s), "amount": amount}


def as_json(row: dict[str, Any]) -> bytes:
    return json.dumps({**row, "event_time": row["event_time"].isoformat()}).encode()


def produce(broker: KafkaBroker, topic: str, rows: Sequence[dict[str, Any]], partition: int) -> None:
    """The rows of one step to one partition, keyed by user, Kafka timestamp = event time.

    One partition per step: Kafka makes a write visible atomically within a
    partition only (a transaction's commit markers reach partitions one by
    one), and a test step must be one micro-batch to compare with the model.
    """
    broker.produce(
        topic,
        [
            (
                partition,
                r["user_id"].encode(),
                as_json(r),
                int(r["event_time"].timestamp() * 1000),
            )
            for r in rows
        ],
    )


def new_topic(broker: KafkaBroker, partitions: int) -> str:
    topic = f"t{uuid.uuid4().hex[:10]}"
    broker.create_topic(topic, partitions=partitions)
    return topic


def seed_pipeline(stream: kp.Stream) -> kp.Stream:
    """The Krishiv seed's stream example: per user and minute, events and total amount."""
    return (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )


def corrected_pipeline(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("amount")).alias("total"))
    )


STEPS = [
    [event("alice", 5), event("bob", 30), event("carol", 42, 2.0), event("alice", 70, 3.0)],
    [event("bob", 50, 4.0), event("alice", 75), event("carol", 130, 5.0), event("dave", 1, 9.0)],
    [event("alice", 200), event("bob", 65, 2.5)],
]


# --- the decoding kernel (no Spark, no broker) -----------------------------------------------


def test_json_values_decode_in_one_pass_and_bad_records_stand_alone() -> None:
    schema = Schema.parse("user string, at timestamp, n bigint").to_arrow()
    values: list[bytes | None] = [
        b'{"user": "a",\n "at": "2024-01-01T00:00:05Z", "n": 1, "extra": true}',  # newline, extra field
        b'{"user": "b"}',  # missing fields are null
        b"{not json",
        None,  # a tombstone
        b"   ",
        b'{"user": "c", "n": "seven"}',  # a field of the wrong type
        b'["an", "array"]',
        b'{"user": "d", "n": 4}',
    ]
    table, bad = decode_json(values, schema)
    assert bad.tolist() == [False, False, True, True, True, True, True, False]
    assert table.schema == schema
    assert table.column("user").to_pylist() == ["a", "b", None, None, None, None, None, "d"]
    assert table.column("n").to_pylist() == [1, None, None, None, None, None, None, 4]
    assert table.column("at")[0].as_py() == T0 + dt.timedelta(seconds=5)


def test_a_batch_of_records_has_the_kafka_columns_and_marks_bad_ones() -> None:
    value_schema = Schema.parse("user string, n bigint").to_arrow()
    batch = records_to_batch(
        values=[b'{"user": "a", "n": 1}', b"oops"],
        keys=[b"a", None],
        topic="events",
        partition=2,
        offsets=[10, 11],
        timestamps_ms=[T0_MS, T0_MS + 1],
        value_schema=value_schema,
        value_format="json",
        key_format="string",
        null_time_when_bad=True,
    )
    assert batch.schema.names == [
        "user",
        "n",
        "kafka_key",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "kafka_value",
    ]
    rows = batch.to_pylist()
    assert rows[0]["kafka_value"] is None and rows[0]["kafka_timestamp"] == T0
    assert rows[1] == {
        "user": None,
        "n": None,
        "kafka_key": None,
        "kafka_topic": "events",
        "kafka_partition": 2,
        "kafka_offset": 11,
        "kafka_timestamp": None,  # event_time="kafka_timestamp": a bad record has no event time
        "kafka_value": b"oops",
    }
    # Consecutive offsets come as a range; a record without a timestamp has none.
    again = records_to_batch(
        values=[b'{"user": "a",\r\n "n": 1}', b'{"n": 2}'],
        keys=[None, None],
        topic="events",
        partition=0,
        offsets=range(7, 9),
        timestamps_ms=[None, -1],
        value_schema=value_schema,
        value_format="json",
        key_format="string",
        null_time_when_bad=False,
    )
    assert again.column("kafka_offset").to_pylist() == [7, 8]
    assert again.column("kafka_timestamp").to_pylist() == [None, None]
    assert again.column("n").to_pylist() == [1, 2] and again.column("kafka_value").null_count == 2


def test_the_sink_keys_each_window_and_turns_a_retraction_into_a_tombstone() -> None:
    schema = Schema.parse(
        "user_id string, window_start timestamp, window_end timestamp, total double, kind string"
    )
    context = SinkContext(schema=schema, checkpoint_dir="/cp", query_name="q")
    assert context.primary_key == ("user_id", "window_start", "window_end")
    writer = kp.KafkaSink("127.0.0.1:1", "out").open(context)
    end = T0 + dt.timedelta(minutes=1)
    rows = pa.table(
        {
            "user_id": ["a", "a"],
            "window_start": [T0, T0],
            "window_end": [end, end],
            "total": [1.0, 2.0],
            "kind": ["retract", "emit"],
        }
    )
    key = b'{"user_id":"a","window_start":"2024-01-01T00:00:00Z","window_end":"2024-01-01T00:01:00Z"}'
    value = key[:-1] + b',"total":2.0}'
    assert writer.records(rows) == [(key, None), (key, value)]
    late = SinkContext(schema=Schema.parse("user_id string, n bigint"), output="late events")
    assert late.primary_key is None


def test_bad_read_kafka_and_sink_arguments_are_plan_errors(session: kp.Session) -> None:
    def read(**kwargs: Any) -> None:
        args: dict[str, Any] = {"schema": SCHEMA, "connector": "python", **kwargs}
        session.read_kafka(args.pop("servers", "127.0.0.1:9"), args.pop("topic", "t"), **args)

    cases: list[tuple[dict[str, Any], str]] = [
        ({"servers": ""}, "bootstrap_servers must be a non-empty string"),
        ({"topic": None}, "topic must be a non-empty string"),
        ({"schema": None}, "value_format='json' needs the value's schema"),
        ({"value_format": "avro"}, "value_format must be one of 'json', 'raw', got 'avro'"),
        ({"value_format": "raw"}, "leave schema out"),
        ({"key_format": "int"}, "key_format must be one of"),
        ({"schema": "kafka_offset bigint"}, "value field 'kafka_offset' is a name the Kafka columns use"),
        ({"event_time": "nope"}, "nope"),
        ({"event_time": "user_id"}, "event_time column 'user_id' is string"),
        ({"starting_offsets": "now"}, "starting_offsets must be 'earliest', 'latest' or"),
        ({"starting_offsets": {0: -1}}, "starting offset of partition 0 must be an offset >= 0"),
        ({"max_records_per_batch": 0}, "max_records_per_batch must be a positive integer"),
        ({"consumer_config": {"enable.auto.commit": True}}, "may not set 'enable.auto.commit'"),
        ({"connector": "jvm"}, "connector must be one of"),
        ({"name": "not a name"}, "must be an identifier"),
    ]
    for kwargs, message in cases:
        with pytest.raises(kp.PlanError, match=message.replace("(", r"\(").replace("[", r"\[")):
            read(**kwargs)
    with pytest.raises(kp.PlanError, match="KafkaSink: delivery must be"):
        kp.KafkaSink("127.0.0.1:9", "t", delivery="twice")  # type: ignore[arg-type]
    with pytest.raises(kp.PlanError, match="key column 'nope' is not a result column"):
        kp.KafkaSink("127.0.0.1:9", "t", key=["nope"]).open(SinkContext(schema=Schema.parse("a int")))


def test_a_job_error_from_inside_spark_leads_with_krishivs_own_words() -> None:
    """An unreachable broker fails the job inside Spark; the JobError's first line is what to do.

    The cause is the one a job reading ``127.0.0.1:1`` gets (21 s to fail, so
    not run here); Spark's whole message stays in ``cause``.
    """
    said = (
        "Kafka broker 127.0.0.1:1 is unreachable: no answer within 15 s (asking for topic 'clicks': "
        "Failed to get metadata: Local: Broker transport failure); check bootstrap_servers and that "
        "the broker runs"
    )
    for cause in (
        f"krishiv_py.kafka.client.KafkaReadError: {said}",  # what the job above gets
        f"[STREAM_FAILED] Query terminated\n  krishiv_py.kafka.client.KafkaReadError: {said}",
        f"[STREAM_FAILED] Query terminated\n  krishiv_py.errors.JobError: {said}",  # a sink's writer
    ):
        error = kp.JobError(f"processing the available input failed\na hint: {cause[:3]}", cause=cause)
        first, second, third = str(error).splitlines()
        assert first == said
        assert second.startswith("processing the available input failed (")
        assert second.endswith("Error raised inside Spark; Spark's message is in the error's .cause)")
        assert third.startswith("a hint: ")  # what followed the first line stays after it
        assert error.cause == cause
    # Only krishiv's own error as Spark reports it, and not inside a failure of user code.
    for cause in (
        f"myapp.KafkaReadError: {said}",
        f"ValueError: see KafkaReadError: {said}",
        f"krishiv_py.spark_errors.UserCodeError: ForeachBatchSink(f) raised on batch 3: "
        f"krishiv_py.kafka.client.KafkaReadError: {said}",
    ):
        error = kp.JobError("processing the available input failed", cause=cause)
        assert str(error).splitlines()[0] == "processing the available input failed", cause
    # Any other cause keeps its place after what failed.
    other = kp.JobError("processing the available input failed", cause="java.lang.OutOfMemoryError: heap")
    assert str(other).splitlines() == [
        "processing the available input failed",
        "Spark cause: java.lang.OutOfMemoryError: heap",
    ]


def test_an_unreachable_broker_is_one_error_naming_it_and_librdkafka_keeps_off_stderr(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker nobody listens for: an error that names it, not librdkafka's line per connect attempt.

    librdkafka's own log goes to the ``krishiv_py.kafka`` logger of every
    client krishiv makes (timeouts shortened here from 15 s and 30 s).
    """
    import krishiv_py.kafka.client as client
    import krishiv_py.kafka.sink as sink
    from krishiv_py.devtools.servers import free_ports
    from krishiv_py.kafka.source import kafka_source

    monkeypatch.setattr(client, "REQUEST_TIMEOUT_S", 1.0)
    monkeypatch.setattr(sink, "_TIMEOUT_S", 1.0)
    monkeypatch.setattr(sink, "_PROBE_S", 1.0)
    servers = f"127.0.0.1:{free_ports(1)[0]}"
    with pytest.raises(kp.JobError) as read:  # the partitions are asked for when read_kafka is called
        kafka_source(
            name="clicks",
            bootstrap_servers=servers,
            topic="clicks",
            spark=None,
            remote=False,
            schema=SCHEMA,
            connector="python",
            watermark_per_partition=True,
        )
    first = str(read.value).splitlines()[0]
    assert first.startswith(f"Kafka broker {servers} is unreachable: no answer within 1 s"), first
    schema = Schema.parse("user_id string, window_start timestamp, window_end timestamp, n bigint")
    rows = pa.table({"user_id": ["a"], "window_start": [T0], "window_end": [T0], "n": [3]})
    for delivery in ("auto", "at-least-once"):
        writer = kp.KafkaSink(servers, "out", delivery=delivery).open(SinkContext(schema=schema))
        with pytest.raises(kp.JobError, match=rf"^KafkaSink: .*{servers}.*") as wrote:
            writer.write(rows, 0)
        writer._producer = None  # nothing to flush to a broker that is not there
        if delivery == "auto":
            assert f"Kafka broker {servers} is unreachable" in str(wrote.value)
    stderr = capfd.readouterr().err
    assert "rdkafka" not in stderr and "Connection refused" not in stderr, stderr[:500]


def test_a_kafka_stream_without_a_name_is_named_after_its_topic(tmp_path: Path) -> None:
    """The name metrics, source watermarks and SQL know it by: the topic's, unless a source has it."""
    s = kp.Session(None, owns_spark=False, state_dir=str(tmp_path), progress=False)

    def read(topic: str, **kwargs: Any) -> str:
        node = s.read_kafka("127.0.0.1:9", topic, schema=SCHEMA, connector="python", **kwargs).plan
        assert isinstance(node, n.KafkaSource)
        return node.name

    assert read("clicks") == "clicks"
    assert read("clicks") == "clicks_2"  # the same topic twice (a self-join) needs two names
    assert read("orders.v1-eu") == "orders_v1_eu"  # an identifier SQL can write
    assert read("clicks", name="mine") == "mine"
    s.stop()


@pytest.mark.spark
def test_auto_uses_the_python_connector_where_spark_cannot_load_its_own(session: kp.Session) -> None:
    stream = session.read_kafka("127.0.0.1:9", "t", schema=SCHEMA)
    assert isinstance(stream.plan, n.KafkaSource) and stream.plan.connector == "python"
    assert "connector=python" in stream.explain(show=False)
    with pytest.raises(kp.SessionError, match=r"spark\.jars\.packages.*spark-sql-kafka-0-10_2\.13"):
        session.read_kafka("127.0.0.1:9", "t", schema=SCHEMA, connector="spark")


# --- jobs on the broker ------------------------------------------------------------------------


def run_steps(
    broker: KafkaBroker,
    session: kp.Session,
    pipeline: Callable[[kp.Stream], kp.Stream],
    steps: Sequence[Sequence[dict[str, Any]]],
    *,
    partitions: int = 3,
    sink: Any = None,
) -> tuple[kp.Job, list[pa.Table]]:
    topic = new_topic(broker, partitions)
    stream = session.read_kafka(broker.bootstrap_servers, topic, schema=SCHEMA)
    job = pipeline(stream).start(sink)
    seen = []
    try:
        for i, rows in enumerate(steps):
            produce(broker, topic, rows, i % partitions)  # the steps go round the partitions
            job.process_all_available()
            seen.append(job.results())
    finally:
        job.stop()
    return job, seen


@pytest.mark.spark
@pytest.mark.parametrize("pipeline", [seed_pipeline, corrected_pipeline], ids=["native", "stateful"])
def test_a_three_partition_topic_gives_the_reference_windows(
    kafka_broker: KafkaBroker, session: kp.Session, pipeline: Callable[[kp.Stream], kp.Stream]
) -> None:
    job, seen = run_steps(kafka_broker, session, pipeline, STEPS)
    want = run_reference(SCHEMA, pipeline, [Send(rows) for rows in STEPS])
    assert job.lowering == ("native" if pipeline is seed_pipeline else "stateful")
    for got, expected in zip(seen, want, strict=True):
        assert_same_rows(got, expected)
    assert job.metrics().input_rows == sum(len(s) for s in STEPS)


@pytest.mark.spark
def test_bad_records_are_counted_and_handed_to_the_handler(
    kafka_broker: KafkaBroker, session: kp.Session
) -> None:
    topic = new_topic(kafka_broker, 2)
    good = [event("alice", s) for s in (1, 2, 3, 61)] + [event("bob", 4)]
    bad = [b"{broken", b'{"user_id": "eve", "event_time": "2024-01-01T00:00:09Z", "amount": "lots"}', None]
    records = [(1, None, as_json(r), None) for r in good] + [(1, b"k", v, None) for v in bad]
    kafka_broker.produce(topic, records)  # one partition: one micro-batch
    handler = kp.SideOutputLateEventHandler()
    stream = session.read_kafka(kafka_broker.bootstrap_servers, topic, schema=SCHEMA)
    windows = (
        stream.watermark("event_time", 0)
        .key_by("user_id")
        .tumbling_window(60_000)
        .with_late_event_handler(handler)
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    job = windows.start()
    try:
        job.process_all_available()
        results, late = job.results(), job.late_events()
        metrics = job.metrics()
    finally:
        job.stop()
    assert sorted((r["user_id"], r["n"]) for r in results.to_pylist()) == [("alice", 3), ("bob", 1)]
    assert metrics.invalid_events == 3
    assert late.column("classification").to_pylist() == ["invalid"] * 3
    assert sorted(late.column("kafka_value").to_pylist(), key=str) == sorted(
        [b"{broken", bad[1], None], key=str
    )
    # Nothing else lost: every record is in a window (fired or still open), or was handed over.
    open_window = 1  # alice's [00:01, 00:02) waits for the watermark
    assert (
        len(good) + len(bad)
        == sum(int(n or 0) for n in results.column("n").to_pylist()) + open_window + late.num_rows
    )


@pytest.mark.spark
def test_a_lagging_partition_holds_windows_back_until_it_goes_idle(
    kafka_broker: KafkaBroker, session: kp.Session
) -> None:
    topic = new_topic(kafka_broker, 2)
    stream = session.read_kafka(
        kafka_broker.bootstrap_servers, topic, schema=SCHEMA, watermark_per_partition=True, name="clicks"
    )
    counts = (
        stream.watermark("event_time", 0, idle_timeout_ms=1_500)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    assert "clicks[0]" in counts.explain(show=False) and "clicks[1]" in counts.explain(show=False)

    def send(partition: int, user: str, at_s: int) -> None:
        row = event(user, at_s)
        kafka_broker.produce(topic, [(partition, user.encode(), as_json(row), None)])

    job = counts.start()
    clock = ManualClock()  # processing time moves only when the test says so
    job._idle.restart_clock(clock)  # type: ignore[attr-defined]
    try:
        send(0, "a", 10)
        send(1, "b", 20)
        job.process_all_available()
        send(0, "a", 130)  # partition 0 is at 130 s; partition 1 lags at 20 s
        job.process_all_available()
        assert job.results().num_rows == 0  # the lagging partition holds [00:00, 00:01) back
        assert job.source_watermarks() == {"clicks[0]": T0_MS + 130_000, "clicks[1]": T0_MS + 20_000}
        clock.advance(2_000)  # partition 1 sends nothing for longer than the idle timeout ...
        send(0, "a", 140)  # ... while partition 0 goes on
        job.process_all_available()
        assert job.idle_sources() == {"clicks[1]"}
        fired = sorted((r["user_id"], r["n"]) for r in job.results().to_pylist())
        assert fired == [("a", 1), ("b", 1)]  # [00:00, 00:01) fired without waiting for partition 1
        send(1, "b", 30)  # back from idle, behind the overall watermark: late by the usual rules
        job.process_all_available()
        assert "clicks[1]" not in job.idle_sources()
        assert sorted((r["user_id"], r["n"]) for r in job.results().to_pylist()) == fired
        assert job.metrics().input_rows == 5
    finally:
        job.stop()


@pytest.mark.spark
def test_each_partition_chooses_its_own_automatic_lag(
    kafka_broker: KafkaBroker, session: kp.Session, tmp_path: Path
) -> None:
    """``watermark(column, "auto")`` on a topic read with a watermark per partition: each partition
    chooses its lag from its own records' delays (one in order, one out of order), the watermark is
    the least of theirs, as in the reference model with a source per partition."""
    topic = new_topic(kafka_broker, 2)
    auto = kp.AutoLag(quantile=0.9, window_rows=20, warmup_rows=4, min_lag_ms=0, max_lag_ms=60_000)
    stream = session.read_kafka(
        kafka_broker.bootstrap_servers, topic, schema=SCHEMA, watermark_per_partition=True, name="clicks"
    )
    windows = stream.watermark("event_time", auto).key_by("user_id").tumbling_window(10_000)
    counts = windows.agg(kp.count(kp.col("*")).alias("n"))
    assert "automatic" in counts.explain(show=False)
    model = reference_model_for(counts)  # a source per partition: clicks[0], clicks[1]
    job = counts.start(checkpoint_dir=str(tmp_path / "cp"))
    try:
        for step in range(8):
            for partition, behind in ((0, (0, 0.1, 0.2)), (1, (0, 3.0, 6.0, 1.5))):
                rows = [event(f"u{partition}", 5 * step + 5 - b) for b in behind]
                produce(kafka_broker, topic, rows, partition)
                model.send(rows, source=f"clicks[{partition}]")
                job.process_all_available()
                assert job.source_lags() == model.source_lags(), (step, partition)
                assert job.watermark_ms == model.watermark_ms, (step, partition)
        lags = job.source_lags()
        assert lags["clicks[0]"] < lags["clicks[1]"]  # each partition's own delays
        assert set(job.source_watermarks()) == {"clicks[0]", "clicks[1]"}
        assert model.results  # windows the watermarks fired so far
        assert_same_rows(job.results(), model.results)
    finally:
        job.stop()


@pytest.mark.spark
def test_kafka_sink_holds_the_latest_result_of_every_window(
    kafka_broker: KafkaBroker, session: kp.Session
) -> None:
    out = new_topic(kafka_broker, 2)
    sink = kp.KafkaSink(kafka_broker.bootstrap_servers, out)
    job, _ = run_steps(kafka_broker, session, corrected_pipeline, STEPS, sink=sink)
    want = run_reference(SCHEMA, corrected_pipeline, [Send(rows) for rows in STEPS])[-1]
    # The latest value per key: emit rows net of their retractions.
    final: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in want:
        key = (row["user_id"], row["window_start"], row["window_end"])
        if row["kind"] == "emit":
            final[key] = {k: v for k, v in row.items() if k != "kind"}
        else:
            final.pop(key, None)
    assert_same_rows(job.results(), list(final.values()))
    assert any(r["kind"] == "retract" for r in want)  # a correction happened, and was applied


def test_a_kafka_writer_lets_go_of_its_producer_when_closed(kafka_broker: KafkaBroker) -> None:
    """``close()`` (called when the job stops) drops the producer: it no longer reconnects to the broker."""
    out = new_topic(kafka_broker, 1)
    schema = Schema.parse("user_id string, window_start timestamp, window_end timestamp, n bigint")
    writer = kp.KafkaSink(kafka_broker.bootstrap_servers, out).open(SinkContext(schema=schema))
    end = T0 + dt.timedelta(minutes=1)
    writer.write(pa.table({"user_id": ["a"], "window_start": [T0], "window_end": [end], "n": [3]}), 0)
    assert writer._producer is not None
    writer.close()
    assert writer._producer is None
    writer.close()  # twice is harmless


@pytest.mark.spark
def test_a_batch_written_again_after_a_restart_is_written_once(kafka_broker: KafkaBroker) -> None:
    out = new_topic(kafka_broker, 1)
    schema = Schema.parse("user_id string, window_start timestamp, window_end timestamp, n bigint")
    context = SinkContext(schema=schema, checkpoint_dir=f"/checkpoints/{out}", query_name="q")
    end = T0 + dt.timedelta(minutes=1)
    rows = pa.table({"user_id": ["a"], "window_start": [T0], "window_end": [end], "n": [3]})
    kp.KafkaSink(kafka_broker.bootstrap_servers, out).open(context).write(rows, 0)
    again = kp.KafkaSink(kafka_broker.bootstrap_servers, out).open(context)  # the restarted job's writer
    again.write(rows, 0)  # Spark runs batch 0 again: already committed, skipped
    again.write(rows.set_column(3, "n", pa.array([4])), 1)
    from krishiv_py.kafka.client import read_topic

    assert [json.loads(v or b"")["n"] for _, v in read_topic(kafka_broker.bootstrap_servers, out)] == [3, 4]
    assert again.transactional is True


@pytest.mark.spark
def test_a_topic_that_does_not_exist_fails_the_job_naming_it(
    kafka_broker: KafkaBroker, session: kp.Session
) -> None:
    stream = session.read_kafka(kafka_broker.bootstrap_servers, "no_such_topic", schema=SCHEMA)
    job = seed_pipeline(stream).start()
    try:
        with pytest.raises(kp.JobError, match="Kafka topic 'no_such_topic' does not exist"):
            job.process_all_available()
    finally:
        job.stop()


# --- any Spark DataFrame -------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_from_spark_runs_a_streaming_file_source_built_by_hand(
    session: kp.Session, tmp_path: Path, lowering: str
) -> None:
    import pyarrow.parquet as pq

    from krishiv_py.types import to_schema

    rows = [event("a", 5), event("b", 30), event("a", 70, 3.0), event("a", 200)]
    pq.write_table(
        pa.Table.from_pylist(rows, schema=to_schema(SCHEMA).to_arrow()), tmp_path / "part-0.parquet"
    )
    df = session.spark.readStream.schema(SCHEMA).parquet(str(tmp_path))
    stream = session.from_spark(df, name="by_hand")
    assert not stream.is_bounded and stream.columns == ("user_id", "event_time", "amount")
    windows = seed_pipeline(stream)
    assert "SparkSource 'by_hand' (streaming)" in windows.explain(show=False)
    job = windows.start(lowering=lowering)  # type: ignore[arg-type]
    try:
        job.process_all_available()
        got = job.results()
    finally:
        job.stop()
    want = run_reference(SCHEMA, seed_pipeline, [Send(rows)])[-1]
    assert_same_rows(got, want)
    # A batch DataFrame is a bounded source: collect() runs the bounded lowering.
    bounded = seed_pipeline(session.from_spark(session.spark.read.schema(SCHEMA).parquet(str(tmp_path))))
    assert bounded.is_bounded
    assert bounded.collect().num_rows == 4  # every window fires at the end of bounded input


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_from_spark_reads_sparks_rate_source(session: kp.Session, lowering: str) -> None:
    rate = session.spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    ticks = session.from_spark(rate.selectExpr("timestamp", "value", "value % 2 AS parity"))
    per_second = (
        ticks.watermark("timestamp", 0)
        .key_by("parity")
        .tumbling_window(1_000)
        .agg(kp.count(kp.col("*")).alias("n"), kp.min(kp.col("value")).alias("first"))
    )
    job = per_second.start(lowering=lowering)  # type: ignore[arg-type]
    try:
        # The job runs on its own: process_all_available() waits for a source that never runs dry
        # to have nothing new, which takes as long as the micro-batches lag its clock.
        deadline = time.monotonic() + 60
        while job.results().num_rows < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        rows = job.results().to_pylist()
    finally:
        job.stop()
    assert rows, "no window of the rate source fired within 60 s"
    for row in rows:
        assert row["window_end"] - row["window_start"] == dt.timedelta(seconds=1)
        assert row["first"] % 2 == row["parity"] and row["n"] >= 1


def test_krishiv_kafka_starts_reports_and_stops_a_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from krishiv_py.cli import main
    from krishiv_py.devtools import read_state, recorded_processes

    monkeypatch.setenv("KRISHIV_STATE_DIR", str(tmp_path))
    assert main(["kafka", "start", "--log-dir", str(tmp_path / "logs")]) == 0
    state = read_state("kafka")
    assert state is not None
    procs = recorded_processes(state)
    try:
        assert main(["kafka", "status"]) == 0
        assert f"url:     {state['url']}" in capsys.readouterr().out
        broker_is_up = KafkaBroker._answers  # the same check start() waited on, against the recorded port
        probe = KafkaBroker()
        probe._port = int(str(state["url"]).rsplit(":", 1)[1])
        assert broker_is_up(probe)
    finally:
        assert main(["kafka", "stop"]) == 0
    assert not any(p.alive() for p in procs)
    assert main(["kafka", "status"]) == 1


def test_a_per_partition_stream_refuses_a_topic_whose_partitions_changed(kafka_broker: KafkaBroker) -> None:
    """The test broker cannot add partitions (no CreatePartitions): a reader built for another count."""
    from krishiv_py.kafka.client import KafkaReadError
    from krishiv_py.kafka.datasource import KafkaStreamReader

    topic = new_topic(kafka_broker, 1)
    options = {"bootstrap.servers": kafka_broker.bootstrap_servers, "topic": topic, "partitions": "0"}
    reader = KafkaStreamReader({**options, "expected.partitions": "2"}, None)
    try:
        with pytest.raises(
            KafkaReadError, match=f"Kafka topic '{topic}' has 1 partitions now; this stream reads 2"
        ):
            reader.latestOffset({"0": 0}, None)
    finally:
        reader.stop()
    same = KafkaStreamReader({**options, "expected.partitions": "1"}, None)
    try:
        assert same.latestOffset({"0": 0}, None) == {"0": 0}  # an empty partition: nothing to read
    finally:
        same.stop()


@pytest.mark.spark
def test_collect_reads_what_the_topic_holds_then_and_windows_it_as_if_it_ended(
    kafka_broker: KafkaBroker, session: kp.Session
) -> None:
    """``collect()`` of a Kafka stream is a snapshot (the bounded lowering, as for a memory
    stream): every record the partitions hold when it runs, from the starting offsets; a second
    collect() after more records reads them too. Nothing is read past what is there."""
    topic = new_topic(kafka_broker, 2)
    first = [event("a", 1), event("b", 2), event("a", 65)]
    kafka_broker.produce(topic, [(i % 2, None, as_json(r), None) for i, r in enumerate(first)])
    stream = session.read_kafka(kafka_broker.bootstrap_servers, topic, schema=SCHEMA, connector="python")
    per_minute = stream.watermark("event_time", 0).key_by("user_id").tumbling_window(60_000)
    counted = per_minute.agg(kp.count(kp.col("*")).alias("n"))
    snapshot = sorted((r["user_id"], r["window_start"].minute, r["n"]) for r in counted.collect().to_pylist())
    assert snapshot == [("a", 0, 1), ("a", 1, 1), ("b", 0, 1)]  # the last window fires: input ended
    kafka_broker.produce(topic, [(0, None, as_json(event("b", 3)), None)])
    assert sorted(r["n"] for r in counted.collect().to_pylist()) == [1, 1, 2]
    assert sorted(cast("list[int]", stream.collect().column("kafka_partition").to_pylist())) == [0, 0, 0, 1]


@pytest.mark.spark
def test_max_records_per_batch_caps_each_micro_batch(kafka_broker: KafkaBroker, session: kp.Session) -> None:
    topic = new_topic(kafka_broker, 2)
    rows = [event("a", s) for s in range(0, 60, 10)]  # 6 records, 3 per partition
    kafka_broker.produce(topic, [(i % 2, None, as_json(r), None) for i, r in enumerate(rows)])
    stream = session.read_kafka(kafka_broker.bootstrap_servers, topic, schema=SCHEMA, max_records_per_batch=2)
    job = stream.select("user_id", "kafka_partition").start()
    try:
        job.process_all_available()
        sizes = [p.input_rows for p in job.progress() if p.input_rows]
        partitions = sorted(int(p or 0) for p in job.results().column("kafka_partition").to_pylist())
    finally:
        job.stop()
    assert sizes == [2, 2, 2]  # one record of each partition's backlog per batch
    assert partitions == [0, 0, 0, 1, 1, 1]
    # The consumer group mirrors what Spark committed, so lag tools see the job's progress.
    import confluent_kafka as ck

    from krishiv_py.kafka.client import consumer

    name = cast(n.KafkaSource, stream.plan).name
    group = consumer(kafka_broker.bootstrap_servers, {"group.id": f"krishiv-{name}"})
    try:
        wanted = [ck.TopicPartition(topic, p) for p in (0, 1)]
        deadline = time.monotonic() + 10
        while [tp.offset for tp in group.committed(wanted, timeout=5)] != [
            3,
            3,
        ] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [tp.offset for tp in group.committed(wanted, timeout=5)] == [3, 3]
    finally:
        group.close()


@pytest.mark.spark
def test_bounded_runs_into_one_topic_are_each_written(kafka_broker: KafkaBroker, session: kp.Session) -> None:
    """A bounded run has no checkpoint: its batch 0 is never mistaken for another run's."""
    from krishiv_py.kafka.client import read_topic

    out = new_topic(kafka_broker, 1)
    windows = seed_pipeline(session.from_records(STEPS[0], SCHEMA))
    for _ in range(2):
        windows.start(kp.KafkaSink(kafka_broker.bootstrap_servers, out))
    written = read_topic(kafka_broker.bootstrap_servers, out)
    assert len(written) == 2 * windows.collect().num_rows


def test_a_task_reads_its_ranges_in_order_with_one_pooled_consumer(kafka_broker: KafkaBroker) -> None:
    """Ranges shared among fewer tasks than partitions; a worker's consumer serves task after task."""
    from confluent_kafka import Producer

    from krishiv_py.kafka import datasource as ds

    topic = new_topic(kafka_broker, 3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(30):
        producer.produce(topic, value=json.dumps({"user": "u", "n": i}).encode(), partition=i % 3)
    producer.flush(10)
    reader = ds.KafkaStreamReader(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "topic": topic,
            "value.schema": "user string, n bigint",
            "tasks": "2",
        },
        None,
    )
    try:
        end = reader.latestOffset({"0": 0, "1": 0, "2": 0}, None)
        tasks = reader.partitions({"0": 2, "1": 0, "2": 5}, end)
    finally:
        reader.stop()
    assert end == {"0": 10, "1": 10, "2": 10}
    # 8, 10 and 5 records: the largest range alone, the other two together, each task in partition order.
    assert [t.ranges for t in tasks] == [
        (ds.KafkaRange(1, 0, 10),),
        (ds.KafkaRange(0, 2, 10), ds.KafkaRange(2, 5, 10)),
    ]
    ds._close_pool()
    first = [b for t in tasks for b in reader.read(t)]
    again = [b for t in tasks for b in reader.read(t)]  # the pooled consumers, assigned anew
    order = [(1, o) for o in range(10)] + [(0, o) for o in range(2, 10)] + [(2, o) for o in range(5, 10)]
    for batches in (first, again):
        parts = [p for b in batches for p in b["kafka_partition"].to_pylist()]
        offsets = [o for b in batches for o in b["kafka_offset"].to_pylist()]
        assert list(zip(parts, offsets, strict=True)) == order
        assert [n for b in batches for n in b["n"].to_pylist()] == [3 * o + p for p, o in order]
    # One consumer per partition, left assigned at the end of its range.
    assert sorted(k[3] for k in ds._POOL) == [0, 1, 2]
    assert [r.position for _, r in ds._POOL.values()] == [10, 10, 10]
    # The next micro-batch reads on from there with the same consumers, which fetched ahead.
    for i in range(30, 36):
        producer.produce(topic, value=json.dumps({"user": "u", "n": i}).encode(), partition=i % 3)
    producer.flush(10)
    before = {k: r.client for k, (_, r) in ds._POOL.items()}
    task = ds.KafkaRanges([ds.KafkaRange(p, 10, 12) for p in range(3)])
    batches = list(reader.read(task))
    columns = ("kafka_partition", "kafka_offset", "n")
    rows = [row for b in batches for row in zip(*(b[c].to_pylist() for c in columns), strict=True)]
    assert rows == [(p, o, 3 * o + p) for p in range(3) for o in (10, 11)]
    assert {k: r.client for k, (_, r) in ds._POOL.items()} == before
    ds._close_pool()
    assert ds._POOL == {}


def test_a_pooled_consumer_that_waits_stops_fetching_and_then_closes(kafka_broker: KafkaBroker) -> None:
    """A stopped job's consumers must not keep asking the broker: paused after ``_PAUSE_S`` in the
    pool (records produced meanwhile are not fetched), resumed when a task takes them again (those
    records read, none twice), closed after ``_IDLE_S``."""
    import time

    from confluent_kafka import Producer

    from krishiv_py.kafka import datasource as ds

    topic = new_topic(kafka_broker, 1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})

    def produce(values: range) -> None:
        for i in values:
            producer.produce(topic, value=json.dumps({"user": "u", "n": i}).encode(), partition=0)
        producer.flush(10)

    reader = ds.KafkaStreamReader(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "topic": topic,
            "value.schema": "user string, n bigint",
        },
        None,
    )
    ds._close_pool()
    try:
        produce(range(5))
        assert [
            n for b in reader.read(ds.KafkaRanges([ds.KafkaRange(0, 0, 5)])) for n in b["n"].to_pylist()
        ] == [
            0,
            1,
            2,
            3,
            4,
        ]
        ((since, reading),) = ds._POOL.values()
        assert ds._tended(since + 1.0) == [] and not reading.paused  # a running job's: it prefetches
        assert ds._tended(since + ds._PAUSE_S + 1) == [] and reading.paused
        produce(range(5, 8))
        assert reading.client.consume(num_messages=10, timeout=1.0) == []  # paused: nothing fetched
        got = [n for b in reader.read(ds.KafkaRanges([ds.KafkaRange(0, 5, 8)])) for n in b["n"].to_pylist()]
        assert got == [5, 6, 7] and not reading.paused
        ((since, again),) = ds._POOL.values()
        assert again is reading
        assert ds._tended(since + ds._IDLE_S + 1) == [reading] and ds._POOL == {}
        ds._close([reading])
        assert any(t.name == "krishiv-kafka-pool" and t.daemon and t.is_alive() for t in ds._TENDING)
        # The pool's own thread pauses a consumer that waits, without any task using the pool.
        list(reader.read(ds.KafkaRanges([ds.KafkaRange(0, 0, 2)])))
        ((_, fresh),) = ds._POOL.values()
        deadline = time.monotonic() + ds._PAUSE_S + 5
        while not fresh.paused and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fresh.paused
    finally:
        reader.stop()
        ds._close_pool()
