"""Crash recovery under SIGKILL: nothing lost, nothing counted twice.

A *child* process runs a real streaming job — a memory stream, a durable
session (``single-node-durable``), a named job writing to ``ParquetSink`` —
and feeds it a fixed, seeded input one batch at a time, resuming where the
stream's spool says it stopped (``sender.batches_sent``). The *parent*
starts the child, kills it with SIGKILL after a random delay, and starts it
again, until a child finishes the input. The sink then holds every window
exactly once: the parent compares it with the reference model's results for
the same batches.

    python -m benchmarks.chaos --runs 10 --kills 5 --seed 1      # the long run (nox -s chaos)
    python -m benchmarks.chaos --sink duckdb --runs 4 --kills 3  # duckdb, delta, postgres, iceberg
    python -m benchmarks.chaos --cluster   # executors, workers, the Connect server: chaos_cluster.py
    python -m benchmarks.chaos --join --runs 4 --kills 3   # a Kafka -> DuckDB join: chaos_join.py

With a table sink (``--sink``), runs alternate the native lowering (one
firing per window) and the stateful lowering with allowed lateness and
``retracting`` (late rows re-fire their windows), and every other pair of
runs writes in ``append`` mode instead of ``upsert``. An append-mode table
must hold the reference model's changelog exactly — every emit and
retraction once — which shows that no batch was written twice; an
upsert-mode table must hold the model's current results, one row per
window. ``--sink postgres`` starts a PostgreSQL server for the runs.

``--rescale 2,5,3`` starts each (re)start of a child on the next of those
shuffle partitions (the children read them from ``KRISHIV_CHAOS_RESCALE``
and count their starts in the state directory), so every kill after the
first lands in a restart that moves the job's state to another number of
tasks: krishiv's operator by key group, Spark's own state with Spark's
repartition (SPEC 3.15).

``--kafka`` reads each run's input from a new 3-partition topic of a test
broker started for the runs; ``--lowerings`` names the runs' lowerings in
turn, among them ``auto`` (the stateful lowering with an automatic lag) and,
with ``--kafka``, ``auto-partitions`` (a watermark and a lag per partition):

    python -m benchmarks.chaos --kafka --lowerings native,auto,auto-partitions --runs 3 --kills 3

``--carrier one-task`` (or ``krishiv-files``, ``state-store``) starts every
job with that carrier of the stateful operator's state
(``spark.krishiv.stateful.carrier``; the children read it from
``KRISHIV_CHAOS_CARRIER``); the native runs do not use it.

Reports runs, kills, the kill times and the outcome of each run; exits 1
when a window was lost, duplicated or wrong, or a restart failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

import attrs

from benchmarks.chaos_job import (
    AUTO,
    AUTO_PARTITIONS,
    LOWERINGS,
    RESCALE_ENV,
    SCHEMA,
    TABLE_SINKS,
    KafkaSteps,
    Target,
    batches,
    compare,
    compare_table,
    expected,
    feed,
    job_lowering,
    kill_and_restart,
    per_partition,
    pipeline,
    rescale_conf,
    table_rows,
)


def child(
    state_dir: str, seed: int, count: int, size: int, lowering: str, target: Target | None = None
) -> int:
    """Run (or resume) the job and feed the rest of the input; exit 0 once the input ended."""
    import krishiv_py as kp

    target = target or Target()
    lowering, auto = job_lowering(lowering)
    corrected = target.corrected and lowering == "stateful"
    with kp.Session.embedded(
        durability="single-node-durable",
        state_dir=state_dir,
        spark_conf=_carrier_conf() | rescale_conf(state_dir),
    ) as session:
        stream, sender = session.memory_stream(SCHEMA, name="input")
        job = pipeline(stream, corrected=corrected, auto=auto).start(
            target.open(state_dir),
            name="chaos",
            lowering=lowering,
        )
        return 0 if feed(job, sender, batches(seed, count, size)) else 2


#: The environment variable that hands ``--carrier`` to the children.
CARRIER_ENV = "KRISHIV_CHAOS_CARRIER"


def _carrier_conf() -> dict[str, str]:
    """The Spark setting of the carrier ``--carrier`` asked for (none: the default carrier)."""
    from krishiv_py.runtime.launch import CARRIER_CONF

    carrier = os.environ.get(CARRIER_ENV)
    return {CARRIER_CONF: carrier} if carrier else {}


def child_kafka(
    state_dir: str,
    servers: str,
    topic: str,
    seed: int,
    count: int,
    size: int,
    lowering: str,
    target: Target | None = None,
) -> int:
    """The same job over a Kafka topic (:class:`KafkaSteps`): produce the steps not yet in the topic."""
    import krishiv_py as kp

    target = target or Target()
    partitioned = per_partition(lowering)
    lowering, auto = job_lowering(lowering)
    with kp.Session.embedded(durability="single-node-durable", state_dir=state_dir) as session:
        stream = session.read_kafka(
            servers, topic, schema=SCHEMA, name="input", watermark_per_partition=partitioned
        )
        corrected = target.corrected and lowering == "stateful"
        job = pipeline(stream, corrected=corrected, auto=auto).start(
            target.open(state_dir), name="chaos", lowering=lowering
        )
        KafkaSteps(servers, topic, batches(seed, count, size)).feed(job)
    return 0


@attrs.define
class Run:
    lowering: str
    sink: str = "parquet"
    kills: list[float] = attrs.field(factory=list)
    restarts_failed: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    finished: bool = False
    #: The (user, window start ms) of each window lost, for finding why.
    lost_windows: list[tuple[Any, ...]] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return self.finished and not (self.restarts_failed or self.lost or self.duplicated or self.wrong)


def run_once(
    *,
    seed: int,
    kills: int,
    count: int,
    size: int,
    lowering: str,
    max_delay_s: float,
    log: Any = print,
    kafka: tuple[str, str] | None = None,
    target: Target | None = None,
) -> Run:
    """One run: start, SIGKILL ``kills`` times at random moments, finish, compare with the model.

    ``lowering``: ``native``, ``stateful``, ``auto`` (the stateful lowering, the watermark's lag
    automatic: :func:`~benchmarks.chaos_job.job_lowering`) or, with ``kafka``, ``auto-partitions``
    (as ``auto``, a watermark and an automatic lag per partition).

    ``kafka``: ``(bootstrap servers, topic)`` of an empty 3-partition topic to
    read the input from, instead of a memory stream. ``target``: a table
    sink to write to instead of Parquet.
    """
    rng = random.Random(seed)
    target = target or Target()
    run = Run(lowering=lowering, sink=f"{target.sink}" + (f" ({target.mode})" if target.corrected else ""))
    with tempfile.TemporaryDirectory(prefix="krishiv-chaos-") as state_dir:
        where = ["child-kafka", state_dir, *kafka] if kafka else ["child", state_dir]
        cmd = [sys.executable, "-m", "benchmarks.chaos", *where, str(seed), str(count), str(size), lowering]
        cmd += target.argv()
        run.finished = kill_and_restart(cmd, kills, max_delay_s, rng, run, log)
        if run.finished:
            started_with, auto = job_lowering(lowering)
            corrected = target.corrected and started_with == "stateful"
            want = expected(
                seed,
                count,
                size,
                kafka=kafka is not None,
                corrected=corrected,
                auto=auto,
                partitions=per_partition(lowering),
            )
            if not target.corrected:
                compare(run, os.path.join(state_dir, "out"), want)
            else:
                compare_table(run, table_rows(target, state_dir), want, append=target.mode == "append")
    return run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--cluster" in argv:  # executors, workers and the Connect server die instead of the driver
        from benchmarks import chaos_cluster

        return chaos_cluster.main([a for a in argv if a != "--cluster"])
    if "--join" in argv:  # a join of two Kafka topics into a DuckDB table
        from benchmarks import chaos_join

        return chaos_join.main([a for a in argv if a != "--join"])
    if argv and argv[0] == "child":
        _, state_dir, seed, count, size, lowering, *target = argv
        return child(state_dir, int(seed), int(count), int(size), lowering, Target(*target))
    if argv and argv[0] == "child-kafka":
        _, state_dir, servers, topic, seed, count, size, lowering, *target = argv
        return child_kafka(
            state_dir, servers, topic, int(seed), int(count), int(size), lowering, Target(*target)
        )
    p = argparse.ArgumentParser(
        description="SIGKILL a durable streaming job at random points; compare its sink"
    )
    p.add_argument("--runs", type=int, default=10, help="runs, alternating the native and stateful lowerings")
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs per run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--rows", type=int, default=40, help="rows per batch")
    p.add_argument("--max-delay", type=float, default=25.0, help="latest kill, seconds after a (re)start")
    p.add_argument(
        "--sink", choices=("parquet", *TABLE_SINKS), default="parquet", help="where the job writes"
    )
    p.add_argument(
        "--carrier",
        choices=("krishiv-files", "one-task", "state-store"),
        help="the stateful operator's carrier (default: the session's default)",
    )
    p.add_argument(
        "--lowerings",
        default=",".join(LOWERINGS),
        help="the runs' lowerings in turn: native, stateful, auto; with --kafka also auto-partitions",
    )
    p.add_argument(
        "--kafka",
        action="store_true",
        help="read the input from a Kafka topic (a test broker, a new 3-partition topic per run)",
    )
    p.add_argument(
        "--rescale",
        help="shuffle partitions of each (re)start in turn, e.g. 2,5,3: every restart moves the state",
    )
    a = p.parse_args(argv)
    lowerings = [x.strip() for x in a.lowerings.split(",") if x.strip()]
    allowed = ("native", "stateful", AUTO, *((AUTO_PARTITIONS,) if a.kafka else ()))
    if not lowerings or any(x not in allowed for x in lowerings):
        p.error(f"--lowerings: {', '.join(allowed)}; got {a.lowerings!r}")
    if a.carrier:
        os.environ[CARRIER_ENV] = a.carrier
    if a.rescale:
        os.environ[RESCALE_ENV] = a.rescale
    runs = []
    with contextlib.ExitStack() as stack:
        dsn = ""
        if a.sink == "postgres":
            from krishiv_py.devtools import PostgresServer

            dsn = stack.enter_context(PostgresServer()).dsn
        broker = None
        if a.kafka:
            from krishiv_py.devtools import KafkaBroker

            broker = stack.enter_context(KafkaBroker())
        for i in range(a.runs):
            lowering = lowerings[i % len(lowerings)]
            mode = ("upsert", "append")[(i // len(lowerings)) % 2]
            kafka = None
            if broker is not None:
                broker.create_topic(f"chaos_{i}", partitions=3)
                kafka = (broker.bootstrap_servers, f"chaos_{i}")
            run = run_once(
                seed=a.seed + i,
                kills=a.kills,
                count=a.batches,
                size=a.rows,
                lowering=lowering,
                max_delay_s=a.max_delay,
                target=Target(a.sink, mode, dsn),
                kafka=kafka,
            )
            runs.append(run)
            print(json.dumps(attrs.asdict(run) | {"ok": run.ok}), flush=True)
    kills = sum(len(r.kills) for r in runs)
    bad = [r for r in runs if not r.ok]
    print(
        f"{len(runs)} runs, {kills} SIGKILLs: lost {sum(r.lost for r in runs)}, duplicated "
        f"{sum(r.duplicated for r in runs)}, wrong {sum(r.wrong for r in runs)}, failed restarts "
        f"{sum(r.restarts_failed for r in runs)}, unfinished {sum(not r.finished for r in runs)}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    t0 = time.monotonic()
    code = main()
    print(f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    raise SystemExit(code)
