"""What every crash run shares: the job, its input, where it writes, and the comparison with the model.

The job: per user, 100 ms tumbling windows of count and sum over a fixed,
seeded input (:func:`batches`, some disorder, a few rows whose sum
overflows), optionally with allowed lateness and retractions
(:func:`pipeline`). It writes to Parquet or a table sink (:class:`Target`)
and is fed from a memory stream (:func:`feed`) or a Kafka topic
(:class:`KafkaSteps`), one step per micro-batch. :func:`expected` is the
reference model's changelog for the same steps; :func:`compare` and
:func:`compare_table` count, window by window, what a sink lost, holds
twice or holds wrong. :func:`kill_and_restart` SIGKILLs a child process and
starts it again.

Used by :mod:`benchmarks.chaos` (the driver killed),
:mod:`benchmarks.chaos_cluster` (executors, workers, the Connect server)
and :mod:`benchmarks.chaos_join` (a join).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
from collections.abc import Callable
from typing import Any, Protocol

import attrs

SCHEMA = "user string, t bigint, amount bigint"
LOWERINGS = ("native", "stateful")
#: A run's "lowering" ``auto``: the stateful lowering with an automatic lag (SPEC 3.4) in place
#: of the 20 ms one, learned from this input's disorder (up to 30 ms) within a few batches.
AUTO = "auto"
#: A Kafka run's "lowering" ``auto-partitions``: as ``auto``, the topic read with a watermark per
#: partition, each partition choosing its own lag (every partition is a source of the model).
AUTO_PARTITIONS = "auto-partitions"
#: The partitions of a Kafka run's topic (step ``i`` goes to partition ``i % 3``).
KAFKA_PARTITIONS = 3


def job_lowering(lowering: str) -> tuple[str, bool]:
    """The lowering a run's job starts with, and whether its watermark's lag is automatic."""
    return ("stateful", True) if lowering in (AUTO, AUTO_PARTITIONS) else (lowering, False)


def per_partition(lowering: str) -> bool:
    """Whether a run's Kafka topic is read with a watermark per partition."""
    return lowering == AUTO_PARTITIONS


TABLE_SINKS = ("duckdb", "delta", "postgres", "iceberg")


#: Every third batch also carries three rows whose window sum has no bigint value (3 * 2**62):
#: the window's total is null and counted, and no restart may fail on them.
POISON = 2**62


def batches(seed: int, count: int, size: int) -> list[list[dict[str, Any]]]:
    """The input: ``count`` batches of ``size`` rows, a few users, time moving forward, some disorder."""
    rng = random.Random(seed)
    out = []
    t = 0
    for i in range(count):
        batch = []
        for _ in range(size):
            t += rng.randint(0, 40)
            batch.append(
                {"user": f"u{rng.randint(0, 4)}", "t": t - rng.randint(0, 30), "amount": rng.randint(1, 9)}
            )
        if i % 3 == 1:
            batch += [{"user": "poison", "t": t, "amount": POISON} for _ in range(3)]
        out.append(batch)
    return out


def pipeline(stream: Any, *, corrected: bool = False, auto: bool = False) -> Any:
    """Per user, 100 ms windows; ``corrected``: late rows re-fire their window, retracting the last
    result; ``auto``: the lag chosen from the data (the 90th percentile of the last 30 rows' delays)."""
    import krishiv_py as kp

    lag = (
        kp.AutoLag(quantile=0.9, window_rows=30, warmup_rows=10, min_lag_ms=0, max_lag_ms=200) if auto else 20
    )
    windows = stream.watermark("t", lag).key_by("user").tumbling_window(100)
    if corrected:
        windows = windows.allowed_lateness(50).accumulation("retracting")
    return windows.agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("amount")).alias("total"))


@attrs.frozen
class Target:
    """Where a run's job writes: ``parquet`` or a table sink (``mode``; ``dsn`` for PostgreSQL)."""

    sink: str = "parquet"
    mode: str = "upsert"
    dsn: str = ""

    @property
    def corrected(self) -> bool:
        """Table-sink runs on the stateful lowering re-fire windows (allowed lateness, retractions)."""
        return self.sink != "parquet"

    def argv(self) -> list[str]:
        return [self.sink, self.mode, self.dsn]

    def open(self, state_dir: str) -> Any:
        import krishiv_py as kp

        mode: Any = self.mode
        if self.sink == "duckdb":
            return kp.DuckDBSink(os.path.join(state_dir, "out.duckdb"), "chaos", mode=mode)
        if self.sink == "delta":
            return kp.DeltaSink(os.path.join(state_dir, "out-delta"), mode=mode)
        if self.sink == "iceberg":
            return kp.IcebergSink("chaos.out", warehouse=os.path.join(state_dir, "out-iceberg"), mode=mode)
        if self.sink == "postgres":
            return kp.PostgresSink(
                self.dsn, f"chaos_{os.path.basename(state_dir).replace('-', '_')}", mode=mode
            )
        return kp.ParquetSink(os.path.join(state_dir, "out"))


def feed(
    job: Any, sender: Any, data: list[list[dict[str, Any]]], on_step: Callable[[], None] | None = None
) -> bool:
    """Send the batches the stream's spool does not hold yet, each processed; close; wait for the end.

    ``on_step``: called after each batch was processed.
    """
    for batch in data[sender.batches_sent :]:
        sender.send(batch)
        job.process_all_available()
        if on_step is not None:
            on_step()
    if not sender.closed:
        sender.close()
    return bool(job.await_termination(timeout_s=300))


class KafkaSteps:
    """The input's steps produced into a topic of three partitions, one transaction per step.

    Step ``i`` goes to partition ``i % 3`` in one transaction, so it is
    visible whole or not at all; the caller produces the next step only after
    the job processed this one, so that a micro-batch is one step, as in the
    reference model. Made again after a crash, it counts the records in the
    topic to find where the producer stopped (``produced``).
    """

    def __init__(self, servers: str, topic: str, data: list[list[dict[str, Any]]]) -> None:
        from confluent_kafka import Producer

        from krishiv_py.kafka.client import read_topic

        self.topic, self.data = topic, data
        self._producer = Producer({"bootstrap.servers": servers, "transactional.id": f"chaos-{topic}"})
        # First: a transaction a killed producer left half committed is completed (or aborted) here.
        self._producer.init_transactions(30)
        written, done = len(read_topic(servers, topic)), 0
        while done < len(data) and written >= sum(len(b) for b in data[: done + 1]):
            done += 1
        if written != sum(len(b) for b in data[:done]):
            raise RuntimeError(f"topic {topic!r} holds {written} records: not a whole number of steps")
        self.produced = done

    def produce_next(self) -> None:
        """Produce the next step in one transaction; ``produced`` counts it once it is committed."""
        i = self.produced
        self._producer.begin_transaction()
        for row in self.data[i]:
            self._producer.produce(self.topic, value=json.dumps(row).encode(), partition=i % KAFKA_PARTITIONS)
        self._producer.commit_transaction(30)
        self.produced = i + 1

    def feed(self, job: Any, on_step: Callable[[], None] | None = None) -> None:
        """The steps not produced yet, each processed by ``job`` before the next; then stop ``job``.

        A job (re)started first processes what the topic already holds: a
        step produced before a crash is a micro-batch of its own.
        ``on_step``: called after each step produced here was processed.
        """
        job.process_all_available()
        while self.produced < len(self.data):
            self.produce_next()
            job.process_all_available()
            if on_step is not None:
                on_step()
        job.stop()


def expected(
    seed: int,
    count: int,
    size: int,
    *,
    kafka: bool = False,
    corrected: bool = False,
    auto: bool = False,
    partitions: bool = False,
) -> list[dict[str, Any]]:
    """The reference model's results (its changelog) for the same batches (one step each, then the
    end); ``partitions``: the topic read with a watermark per partition, step ``i`` a step of the
    source ``input[i % 3]``."""
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.testing.steps import _placeholder, reference_model_for
    from krishiv_py.types import Schema

    stream = _placeholder(SCHEMA)
    if partitions:  # a placeholder of the topic: each partition a source of the model
        topic = n.KafkaSource(
            name="input",
            schema=Schema.parse(SCHEMA),
            bootstrap_servers="",
            topic="input",
            connector="python",
            per_partition=True,
            partitions=KAFKA_PARTITIONS,
        )
        stream = Stream(None, topic)
    model = reference_model_for(pipeline(stream, corrected=corrected, auto=auto))
    for i, batch in enumerate(batches(seed, count, size)):
        model.send(batch, source=f"input[{i % KAFKA_PARTITIONS}]" if partitions else "main")
    if not kafka:
        model.close()  # a Kafka topic has no end: the windows its watermark has not passed stay open
    return model.results


class Kills(Protocol):
    """What a run records of its kills and restarts."""

    kills: list[float]
    restarts_failed: int


#: The environment variable that hands ``--rescale`` to the children.
RESCALE_ENV = "KRISHIV_CHAOS_RESCALE"


def rescale_conf(state_dir: str) -> dict[str, str]:
    """With ``--rescale``: this start's shuffle partitions, the next of the list per start."""
    choices = [c for c in os.environ.get(RESCALE_ENV, "").split(",") if c]
    if not choices:
        return {}
    counter = os.path.join(state_dir, "starts")
    starts = 0
    if os.path.exists(counter):
        with open(counter) as f:
            starts = int(f.read())
    with open(counter, "w") as f:
        f.write(str(starts + 1))
    return {"spark.sql.shuffle.partitions": choices[starts % len(choices)]}


def kill_and_restart(
    cmd: list[str], kills: int, max_delay_s: float, rng: random.Random, run: Kills, log: Any = print
) -> bool:
    """Start ``cmd``, SIGKILL it ``kills`` times at random moments, let the last start finish.

    True when a start finished with exit code 0; each kill's delay and each
    failed restart is recorded on ``run``.
    """
    for attempt in range(kills + 1):
        # A process group of its own: the kill takes the child's JVM down with it, like a crash.
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        if attempt < kills:
            delay = rng.uniform(1.0, max_delay_s)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                run.kills.append(round(delay, 2))
                continue
        else:
            proc.wait(timeout=600)
        if proc.returncode != 0:
            run.restarts_failed += 1
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            log(f"  child exited {proc.returncode}: {err}")
        else:
            return True
    return False


class Tally(Protocol):
    """What a comparison counts: windows lost (and which), held twice, held wrong."""

    lost: int
    duplicated: int
    wrong: int
    lost_windows: list[tuple[Any, ...]]


def compare(run: Tally, out: str, want: list[dict[str, Any]]) -> None:
    import pyarrow.parquet as pq

    got: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    table_rows = [r for path in committed_files(out) for r in pq.read_table(path).to_pylist()]
    for row in table_rows:
        key = (row["user"], epoch_ms(row["window_start"]))
        got.setdefault(key, []).append((row["n"], row["total"]))
    tally(run, got, {(r["user"], r["window_start"]): (r["n"], r["total"]) for r in want})


def epoch_ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch of a timestamp, exactly (``timestamp() * 1000`` can be 1 ms short)."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) if value.tzinfo else dt.datetime(1970, 1, 1)
    return (value - epoch) // dt.timedelta(milliseconds=1)


def tally(run: Tally, held: dict[Any, list[Any]], wanted: dict[Any, Any]) -> None:
    """Count, window by window, what ``held`` lost, holds twice or holds wrong against ``wanted``."""
    for key, value in wanted.items():
        found = held.get(key, [])
        if not found:
            run.lost += 1
            run.lost_windows.append(key)
        elif len(found) > 1:
            run.duplicated += 1
        elif found[0] != value:
            run.wrong += 1
    run.wrong += len(set(held) - set(wanted))


def table_rows(target: Target, state_dir: str) -> list[dict[str, Any]]:
    """What the run's table sink holds, read the way a user would (a sink opened on the same table)."""
    from krishiv_py.sinks import SinkContext
    from krishiv_py.types import Schema

    ddl = "user string, window_start timestamp, window_end timestamp, n bigint, total bigint, kind string"
    context = SinkContext(schema=Schema.parse(ddl), checkpoint_dir="/reader", accumulation="retracting")
    return list(target.open(state_dir).open(context).results().to_pylist())


def compare_table(
    run: Tally, rows: list[dict[str, Any]], want: list[dict[str, Any]], *, append: bool
) -> None:
    """A table sink's rows against the model: its changelog exactly (append), or its current results."""
    from collections import Counter

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        start = r["window_start"]
        return (r["user"], start if isinstance(start, int) else epoch_ms(start))

    if append:
        got = Counter((*key(r), r.get("kind") or "emit", r["n"], r["total"]) for r in rows)
        wanted = Counter((*key(r), r.get("kind") or "emit", r["n"], r["total"]) for r in want)
        run.lost += sum((wanted - got).values())
        run.duplicated += sum(got[k] - wanted[k] for k in got if got[k] > wanted[k] > 0)
        run.wrong += sum(n for k, n in got.items() if k not in wanted)
        return
    current: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in want:  # the model's changelog folded: an emit sets the window's row, a retraction removes it
        if r.get("kind") == "retract":
            current.pop(key(r), None)
        else:
            current[key(r)] = (r["n"], r["total"])
    held: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in rows:
        held.setdefault(key(r), []).append((r["n"], r["total"]))
    tally(run, held, current)


def committed_files(out: str) -> list[str]:
    """The sink's result files: those Spark's file-sink log committed (native), or every part file.

    A micro-batch killed while writing can leave files that its log never
    committed; Spark's readers skip them, and so does this.
    """
    log_dir = os.path.join(out, "_spark_metadata")
    if not os.path.isdir(log_dir):
        return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet"))
    paths: set[str] = set()
    entries = sorted(
        (f for f in os.listdir(log_dir) if f.split(".")[0].isdigit()), key=lambda f: int(f.split(".")[0])
    )
    for name in entries:  # a .compact file holds every earlier entry; later ones add to it
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]
        if name.endswith(".compact"):
            paths = set()
        for line in lines:
            entry = json.loads(line)
            if entry.get("action") == "add":
                paths.add(entry["path"].removeprefix("file:"))
            elif entry.get("action") == "delete":
                paths.discard(entry["path"].removeprefix("file:"))
    return sorted(paths)
