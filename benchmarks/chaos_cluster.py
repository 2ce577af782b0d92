"""Faults beyond the driver: executors, workers and the Spark Connect server die mid-job.

``python -m benchmarks.chaos --cluster`` (``nox -s chaos -- --cluster``)
starts a :class:`~krishiv_py.devtools.LocalCluster` of two workers (one core
each) and runs the job of :mod:`benchmarks.chaos` (a memory stream, 100 ms
tumbling windows per user, ``ParquetSink``), alternating the native and the
stateful lowering, in two kinds of run:

``cluster``
    The child process is a classic driver (``Session.connect(<master>)``)
    that feeds the whole input and is never killed. The parent SIGKILLs, at
    random moments, an executor JVM (its worker starts a new one) or a
    whole worker with its executors and their Python workers (started again
    a moment later), at most one fault per batch processed (so no task
    fails more often than Spark's retry budget allows). Spark retries the lost tasks and recomputes lost
    shuffle output. In one run the first killed worker never comes back:
    the job goes on with the remaining one.
``connect``
    A Spark Connect server (its master is the cluster) runs the job for a
    client child (``Session.remote``). The parent SIGKILLs the server at
    random moments and starts a new one on the same port. The client's
    next call raises a ``JobError`` that says the server is gone; the client
    opens a new ``Session.remote`` and starts the same pipeline under the
    same name, which resumes from its last committed micro-batch.

The runs write to the sinks of ``--sinks`` in turn (Parquet and the table
sinks). ``--kafka``: the input is a Kafka topic of three partitions on a
test broker started for the runs, produced step by step by the child
(:class:`~benchmarks.chaos_job.KafkaSteps`) and read by the executors.

Each run ends with the sink compared window by window with the reference
model: nothing lost, nothing twice, nothing wrong.

    python -m benchmarks.chaos --cluster                       # 4 cluster + 2 connect runs
    python -m benchmarks.chaos --cluster --runs 2 --connect-runs 1 --kills 2 --restarts 1
    python -m benchmarks.chaos --cluster --kafka --sinks duckdb,delta,postgres,iceberg \
        --runs 4 --kills 6 --connect-runs 4 --restarts 1     # Kafka into every table sink

Exits 1 when a window was lost, duplicated or wrong, a child failed or a
run did not finish.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs

from benchmarks.chaos_job import (
    LOWERINGS,
    SCHEMA,
    TABLE_SINKS,
    KafkaSteps,
    Target,
    batches,
    compare,
    compare_table,
    expected,
    feed,
    pipeline,
    table_rows,
)

#: What the child prints when it resumed after its Connect server went away.
RESUMED = "@@RESUMED"
#: What a child prints each time its job (re)started and runs.
RUNNING = "@@RUNNING"
#: What a classic driver child prints after each batch it fed was processed.
FED = "@@FED"
#: What a classic driver child prints at its end: Spark's failed tasks and stage retries.
TASKS = "@@TASKS"


@attrs.define
class FaultRun:
    """One run and what happened to it: the faults (``kind``, seconds after the start) and the outcome."""

    kind: str  # "cluster" or "connect"
    lowering: str
    sink: str = "parquet"
    source: str = "memory"
    faults: list[tuple[str, float]] = attrs.field(factory=list)
    resumed: int = 0
    failed_tasks: int = 0
    stage_retries: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    finished: bool = False
    error: str = ""
    #: The (user, window start ms) of each window lost.
    lost_windows: list[tuple[Any, ...]] = attrs.field(factory=list)
    seconds: float = 0.0
    kept: str = ""  # the run's directory, kept when the run failed

    @property
    def ok(self) -> bool:
        return self.finished and not (self.lost or self.duplicated or self.wrong or self.error)

    def count(self, *kinds: str) -> int:
        return sum(1 for k, _ in self.faults if k in kinds)


# --- the children ---------------------------------------------------------------------


#: A run's input: None for a memory stream, else ``(bootstrap servers, topic)`` of a 3-partition topic.
Kafka = tuple[str, str] | None


def child_cluster(
    state_dir: str,
    master: str,
    seed: int,
    count: int,
    size: int,
    lowering: str,
    target: Target,
    kafka: Kafka = None,
) -> int:
    """A classic driver of the cluster: run the job and feed the whole input; exit 0 once it ended.

    A table sink on the stateful lowering gets allowed lateness and
    retractions (``Target.corrected``), as in :mod:`benchmarks.chaos`.
    ``kafka``: the input is produced into that topic step by step
    (:class:`~benchmarks.chaos_job.KafkaSteps`) and read by the executors.
    """
    import krishiv_py as kp

    data = batches(seed, count, size)
    # Every stage attempt of the run stays in the driver's status store, for task_failures().
    keep = {"spark.ui.retainedStages": "100000", "spark.ui.retainedJobs": "100000"}
    with kp.Session.connect(
        master, durability="single-node-durable", state_dir=state_dir, spark_conf=keep
    ) as session:
        if kafka:
            stream, steps = session.read_kafka(*kafka, schema=SCHEMA, name="input"), KafkaSteps(*kafka, data)
        else:
            stream, sender = session.memory_stream(SCHEMA, name="input")
        corrected = target.corrected and lowering == "stateful"
        job = pipeline(stream, corrected=corrected).start(
            target.open(state_dir), name="chaos", lowering=lowering
        )
        print(RUNNING, flush=True)
        for batch in data:
            if kafka:
                steps.produce_next()
            else:
                sender.send(batch)
            job.process_all_available()
            print(FED, flush=True)
        if kafka:
            job.stop()  # a topic has no end: the windows its watermark has not passed stay open
        else:
            sender.close()
            if not job.await_termination(timeout_s=300):
                return 2
        print(f"{TASKS} {json.dumps(task_failures(session.spark))}", flush=True)
    return 0


def task_failures(spark: Any) -> dict[str, int]:
    """Spark's failed tasks and stage attempts after the first, over every stage attempt of the app.

    Read from the driver's status store (kept with the UI off, up to
    ``spark.ui.retainedStages`` stages).
    """
    sc = spark.sparkContext
    jvm = sc._jvm
    no_quantiles = sc._gateway.new_array(jvm.double, 0)
    stages = sc._jsc.sc().statusStore().stageList(None, False, False, no_quantiles, jvm.java.util.ArrayList())
    attempts = [stages.apply(i) for i in range(stages.size())]
    return {
        "failed_tasks": sum(int(s.numFailedTasks()) for s in attempts),
        "stage_retries": sum(1 for s in attempts if s.attemptId() > 0),
    }


def child_connect(
    state_dir: str,
    url: str,
    seed: int,
    count: int,
    size: int,
    lowering: str,
    target: Target,
    kafka: Kafka = None,
) -> int:
    """A Spark Connect client: run the job; whenever its server went away, resume it from a new session.

    ``kafka``: the client produces the input into that topic, a step only
    after the job processed the one before (the producer outlives the
    server; a resumed job first processes what the topic holds).
    """
    import krishiv_py as kp
    from krishiv_py.spark_errors import server_gone

    data = batches(seed, count, size)
    steps = KafkaSteps(*kafka, data) if kafka else None
    corrected = target.corrected and lowering == "stateful"
    deadline = time.monotonic() + 900
    while True:
        session: Any = None
        try:
            session = kp.Session.remote(url, state_dir=state_dir, durability="single-node-durable")
            if kafka:
                stream = session.read_kafka(*kafka, schema=SCHEMA, name="input")
            else:
                stream, sender = session.memory_stream(SCHEMA, name="input")
            job = pipeline(stream, corrected=corrected).start(
                target.open(state_dir), name="chaos", lowering=lowering
            )
            print(RUNNING, flush=True)
            if steps is not None:
                steps.feed(job, on_step=_fed)
            elif not feed(job, sender, data, on_step=_fed):
                return 2
            with contextlib.suppress(kp.KrishivError):
                session.stop()
            return 0
        except kp.KrishivError as exc:
            # Only the server's going away is survivable here; any other error is the run's failure.
            if not server_gone(exc) and "Spark Connect server" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            print(f"{RESUMED} {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
            if session is not None:
                with contextlib.suppress(Exception):
                    session.stop()
            time.sleep(1.0)


def _fed() -> None:
    print(FED, flush=True)


# --- the parent -----------------------------------------------------------------------


def _child_cmd(
    kind: str,
    state_dir: str,
    where: str,
    seed: int,
    count: int,
    size: int,
    lowering: str,
    target: Target | None = None,
    kafka: Kafka = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks.chaos_cluster", f"child-{kind}", state_dir, where]
    source = list(kafka) if kafka else ["-", "-"]
    return [*cmd, str(seed), str(count), str(size), lowering, *source, *(target or Target()).argv()]


class _Child:
    """A child process whose output is read as it comes (a full pipe would stall it)."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        self.out: list[str] = []
        self.err: collections.deque[str] = collections.deque(maxlen=20_000)
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out.append), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, keep: Any) -> None:
        for line in iter(stream.readline, b""):
            keep(line.decode(errors="replace").rstrip("\n"))

    def count(self, marker: str) -> int:
        return sum(1 for line in list(self.out) if line.startswith(marker))

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the child; True once it has ended."""
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def wait_for(self, marker: str, times: int, timeout_s: float = 600.0) -> None:
        """Until the child printed ``marker`` ``times`` times (or ended)."""
        deadline = time.monotonic() + timeout_s
        while self.count(marker) < times and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)

    def end(self, timeout_s: float = 900.0) -> None:
        """Wait for the child to end (SIGKILL its group after ``timeout_s``), and for its output."""
        if not self.wait(timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)

    def finish(
        self,
        run: FaultRun,
        state_dir: str,
        seed: int,
        count: int,
        size: int,
        target: Target | None = None,
        kafka: Kafka = None,
    ) -> None:
        """Read the child's report into ``run`` and compare its sink with the model."""
        run.resumed = self.count(RESUMED)
        for line in self.out:
            if line.startswith(TASKS):
                tasks = json.loads(line.removeprefix(TASKS))
                run.failed_tasks, run.stage_retries = tasks["failed_tasks"], tasks["stage_retries"]
        if self.proc.returncode != 0:
            # The whole of it next to the run's files (kept because the run failed).
            with open(os.path.join(state_dir, "child.stderr"), "w", encoding="utf-8") as f:
                f.write("\n".join(self.err))
            cause = [line for line in self.err if re.search(r"Caused by|Error|Exception|Failure", line)][-6:]
            run.error = f"child exited {self.proc.returncode}: " + " | ".join(cause)[-3000:]
            return
        run.finished = True
        target = target or Target()
        if not target.corrected:
            compare(run, os.path.join(state_dir, "out"), expected(seed, count, size, kafka=bool(kafka)))
            return
        want = expected(seed, count, size, kafka=bool(kafka), corrected=run.lowering == "stateful")
        compare_table(run, table_rows(target, state_dir), want, append=target.mode == "append")


@contextlib.contextmanager
def _run_dir(run: FaultRun, prefix: str) -> Iterator[str]:
    """A new directory for the run; removed afterwards unless the run failed (then in ``run.kept``)."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        if run.ok:
            shutil.rmtree(path, ignore_errors=True)
        else:
            run.kept = path


def cluster_run(
    cluster: Any,
    *,
    seed: int,
    kills: int,
    count: int,
    size: int,
    lowering: str,
    max_delay_s: float,
    worker_stays_down: bool = False,
    kinds: tuple[str, ...] = (),
    target: Target | None = None,
    kafka: Kafka = None,
    log: Any = print,
) -> FaultRun:
    """A classic driver's job on ``cluster`` while executors and workers are SIGKILLed ``kills`` times.

    ``worker_stays_down``: the first killed worker is not started again
    before the run ends (it is started after the comparison). ``kinds``:
    the faults in this order (``"executor"``, ``"worker"``) instead of
    drawn at random. ``target``: a table sink instead of Parquet.
    ``kafka``: ``(bootstrap servers, topic)`` of an empty topic of three
    partitions to read the input from, instead of a memory stream.
    """
    rng = random.Random(seed)
    target = target or Target()
    run = FaultRun(kind="cluster", lowering=lowering, sink=_sink_name(target), source=_source_name(kafka))
    down: set[int] = set()
    t0 = time.monotonic()
    with _run_dir(run, "krishiv-chaos-cluster-") as state_dir:
        child = _Child(
            _child_cmd("cluster", state_dir, cluster.master_url, seed, count, size, lowering, target, kafka)
        )
        try:
            # The first fault only once the job runs on its executors, so that it hits a micro-batch.
            child.wait_for(RUNNING, 1)
            while not cluster.executor_pids() and child.proc.poll() is None:
                time.sleep(0.2)
            fed = 0
            while len(run.faults) < kills and not child.wait(rng.uniform(1.0, max_delay_s)):
                # At most one fault per batch processed: a task fails once per fault at most, within
                # Spark's retry budget (spark.task.maxFailures, 4), even with one executor left.
                if child.count(FED) <= fed:
                    child.wait_for(FED, fed + 1)
                    time.sleep(rng.uniform(0.2, 1.5))  # into the next batch, not between two
                if child.proc.poll() is not None:
                    break
                fed = child.count(FED)
                up = [w for w in range(1, cluster.workers + 1) if w not in down]
                executors = [pid for w in up for pid in cluster.executor_pids(w)]
                drawn = "executor" if rng.random() < 0.5 else "worker"
                kind = kinds[len(run.faults)] if len(run.faults) < len(kinds) else drawn
                # A worker only while another one is up: a cluster of no workers stalls, it does not fail.
                if kind == "executor" or len(up) < 2:
                    if not executors:  # between an executor's death and its successor's start
                        continue
                    cluster.kill_executor(rng.choice(executors))
                    run.faults.append(("executor", round(time.monotonic() - t0, 1)))
                    continue
                worker = rng.choice(up)
                cluster.kill_worker(worker)
                if worker_stays_down and not down:
                    down.add(worker)
                    run.faults.append(("worker, never back", round(time.monotonic() - t0, 1)))
                    continue
                run.faults.append(("worker", round(time.monotonic() - t0, 1)))
                time.sleep(rng.uniform(0.0, 3.0))
                cluster.start_worker(worker)
        finally:
            child.end()
            for worker in down:
                cluster.start_worker(worker)
        run.seconds = round(time.monotonic() - t0, 1)
        child.finish(run, state_dir, seed, count, size, target, kafka)
    if run.error:
        log(f"  {run.error}")
    return run


def _sink_name(target: Target) -> str:
    return target.sink + (f" ({target.mode})" if target.corrected else "")


def _source_name(kafka: Kafka) -> str:
    return "kafka" if kafka else "memory"


def connect_run(
    master: str,
    *,
    seed: int,
    restarts: int,
    count: int,
    size: int,
    lowering: str,
    max_delay_s: float,
    target: Target | None = None,
    kafka: Kafka = None,
    log: Any = print,
) -> FaultRun:
    """A Connect client's job while its server dies and starts again ``restarts`` times.

    ``master``: the server's Spark master (a cluster's ``master_url``, or
    ``local[N]``: the server runs the tasks itself). ``target`` and ``kafka``
    as for :func:`cluster_run`. Each restart comes a number of the job's steps
    after the last one (drawn at random, leaving steps for the next), then up
    to ``max_delay_s`` (at most a second) into the next step.
    """
    from krishiv_py.devtools import ConnectServer

    rng = random.Random(seed)
    target = target or Target()
    run = FaultRun(kind="connect", lowering=lowering, sink=_sink_name(target), source=_source_name(kafka))
    t0 = time.monotonic()
    with _run_dir(run, "krishiv-chaos-connect-") as state_dir:
        logs = os.path.join(state_dir, "servers")
        server = ConnectServer(master=master, log_dir=os.path.join(logs, "0")).start()
        child: _Child | None = None
        try:
            child = _Child(
                _child_cmd("connect", state_dir, server.url, seed, count, size, lowering, target, kafka)
            )
            # Each fault only once the job runs again (the client resumed it), so that it hits the job,
            # and after a number of its steps drawn at random: a fault drawn in seconds alone can come
            # after a fast job's end. Then up to ``max_delay_s`` into the next step.
            child.wait_for(RUNNING, 1)
            while len(run.faults) < restarts:
                fed = child.count(FED)
                room = (count - fed) // (restarts - len(run.faults) + 1)
                child.wait_for(FED, fed + rng.randint(1, max(1, room)))
                if child.wait(rng.uniform(0.0, min(1.0, max_delay_s))):
                    break
                for p in server.processes:  # the server dies: no clean shutdown
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                server.stop()
                run.faults.append(("connect server", round(time.monotonic() - t0, 1)))
                time.sleep(rng.uniform(0.0, 2.0))
                server = ConnectServer(
                    master=master,
                    log_dir=os.path.join(logs, str(len(run.faults))),
                    port=server.port,
                ).start()
                child.wait_for(RUNNING, len(run.faults) + 1)
        finally:
            if child is not None:
                child.end()
            server.stop()
        run.seconds = round(time.monotonic() - t0, 1)
        if child is not None:
            child.finish(run, state_dir, seed, count, size, target, kafka)
    # Every restart hit a running job (the child was waited for), so each one must have been resumed.
    if not run.error and run.resumed < len(run.faults):
        run.error = f"{len(run.faults)} server restarts, but the client resumed {run.resumed} times"
    if run.error:
        log(f"  {run.error}")
    return run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("child-cluster", "child-connect"):
        kind, state_dir, where, seed, count, size, lowering, servers, topic, *sink = argv
        target, kafka = Target(*sink), None if servers == "-" else (servers, topic)
        args = (state_dir, where, int(seed), int(count), int(size), lowering, target, kafka)
        if kind == "child-cluster":
            return child_cluster(*args)
        code = child_connect(*args)
        if kind == "child-connect":
            # pyspark's threads that release a gone server's operations retry for minutes, and the
            # interpreter's exit would wait for them: leave at once, everything is written.
            sys.stdout.flush()
            os._exit(code)
        return code
    p = argparse.ArgumentParser(description="Kill executors, workers and the Connect server under a job")
    p.add_argument("--runs", type=int, default=4, help="executor/worker runs (native and stateful in turn)")
    p.add_argument("--kills", type=int, default=6, help="executor/worker kills per run")
    p.add_argument("--connect-runs", type=int, default=2, help="Connect server runs")
    p.add_argument("--restarts", type=int, default=3, help="Connect server restarts per run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--rows", type=int, default=40, help="rows per batch")
    p.add_argument(
        "--max-delay", type=float, default=8.0, help="most seconds between two executor or worker faults"
    )
    p.add_argument(
        "--sinks",
        default="parquet,duckdb,delta,postgres",
        help="the runs' sinks in turn (parquet and the table sinks: duckdb, delta, postgres, iceberg)",
    )
    p.add_argument(
        "--kafka",
        action="store_true",
        help="read the input from a Kafka topic (a test broker, a new 3-partition topic per run)",
    )
    a = p.parse_args(argv)
    sinks = [x.strip() for x in a.sinks.split(",") if x.strip()]
    if not sinks or any(x not in ("parquet", *TABLE_SINKS) for x in sinks):
        p.error(f"--sinks: parquet, {', '.join(TABLE_SINKS)}; got {a.sinks!r}")
    from krishiv_py.devtools import KafkaBroker, LocalCluster, PostgresServer

    runs: list[FaultRun] = []
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        dsn = stack.enter_context(PostgresServer()).dsn if "postgres" in sinks else ""
        broker = stack.enter_context(KafkaBroker()) if a.kafka else None

        def source_of(name: str) -> Kafka:
            if broker is None:
                return None
            broker.create_topic(name, partitions=3)
            return (broker.bootstrap_servers, name)

        def target_of(i: int) -> Target:
            sink = sinks[i % len(sinks)]
            # Table sinks take append mode (the model's changelog exactly) and upsert in turn.
            return Target(sink, ("append", "upsert")[(i // 2) % 2] if sink != "parquet" else "upsert", dsn)

        cluster = stack.enter_context(LocalCluster(workers=2, cores_per_worker=1, memory="1g"))
        print(f"cluster {cluster.master_url}, logs in {cluster.log_dir}", flush=True)
        for i in range(a.runs):
            run = cluster_run(
                cluster,
                seed=a.seed + i,
                kills=a.kills,
                count=a.batches,
                size=a.rows,
                lowering=LOWERINGS[i % len(LOWERINGS)],
                max_delay_s=a.max_delay,
                worker_stays_down=i == 1,
                target=target_of(i),
                kafka=source_of(f"chaos_cluster_{i}"),
            )
            runs.append(run)
            print(json.dumps(attrs.asdict(run) | {"ok": run.ok}), flush=True)
        for i in range(a.connect_runs):
            run = connect_run(
                cluster.master_url,
                seed=a.seed + 100 + i,
                restarts=a.restarts,
                count=a.batches,
                size=a.rows,
                # The other lowering than the cluster run into the same sink had.
                lowering=LOWERINGS[(i + 1) % len(LOWERINGS)],
                max_delay_s=a.max_delay * 2,
                target=target_of(i),
                kafka=source_of(f"chaos_connect_{i}"),
            )
            runs.append(run)
            print(json.dumps(attrs.asdict(run) | {"ok": run.ok}), flush=True)
    print(summary(runs) + f" in {time.monotonic() - t0:.0f} s")
    return 0 if all(r.ok for r in runs) else 1


def summary(runs: list[FaultRun]) -> str:
    executors = sum(r.count("executor") for r in runs)
    workers = sum(r.count("worker", "worker, never back") for r in runs)
    servers = sum(r.count("connect server") for r in runs)
    return (
        f"{len(runs)} runs, {executors} executor kills, {workers} worker kills, {servers} Connect "
        f"server restarts: lost {sum(r.lost for r in runs)}, duplicated {sum(r.duplicated for r in runs)}, "
        f"wrong {sum(r.wrong for r in runs)}, failed {sum(bool(r.error) for r in runs)}, "
        f"unfinished {sum(not r.finished for r in runs)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
