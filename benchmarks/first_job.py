"""A user's first job in a fresh process: krishiv_py against the same job written in PySpark.

    python -m benchmarks.first_job [--rounds 3] [--events 20000]

The job is the one the getting-started page builds: per user, 1-minute
tumbling windows of ``count(*)`` and ``sum(amount)`` over event time with a
5 s watermark lag, reading the events (one Parquet file) as a stream, run
until everything available is processed, results read back. Each round
runs both in fresh processes, taking turns (the order alternates between
rounds), and times the whole process from the parent (interpreter start to
exit) and, inside the child, its phases:

``import``
    importing the library (``krishiv_py``; ``pyspark.sql``).
``session``
    ``kp.Session.embedded()``; ``SparkSession.builder.getOrCreate()`` (the
    JVM starts here): ``pyspark-tuned`` with krishiv_py's settings for one
    machine (one shuffle partition per core, no UI, ...), the baseline the
    target reads; ``pyspark`` with Spark's defaults (200 shuffle
    partitions), what a newcomer writes.
``start``
    building the pipeline and starting the streaming query.
``run``
    ``process_all_available()``: the first micro-batches, with Spark's first
    code generation and Python workers.
``results``
    reading the result rows as a pyarrow table.
``stop``
    stopping the query and the session.

Both jobs' results are checked equal. The figure the target reads is the
median whole-process time of krishiv_py ÷ that of ``pyspark-tuned`` (target ≤ 1.25).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.protocol import PREFIX

RUNNERS = ("krishiv", "krishiv-memory", "pyspark-tuned", "pyspark")
SCHEMA = "user_id string, event_time timestamp, amount double"
PHASES = ("import", "session", "start", "run", "results", "stop")


def write_events(directory: str, events: int) -> str:
    """One Parquet file of ``events`` clickstream rows in ``directory``/events; returns that directory."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    t0_us = 1_790_000_000_000_000
    times = t0_us + np.sort(rng.integers(0, 600_000_000, events))
    table = pa.table(
        {
            "user_id": pa.array([f"u{i}" for i in rng.integers(0, 100, events)]),
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "amount": pa.array(rng.random(events).round(2)),
        }
    )
    out = os.path.join(directory, "events")
    os.makedirs(out, exist_ok=True)
    pq.write_table(table, os.path.join(out, "part-0.parquet"))
    return out


def child(runner: str, events_dir: str) -> dict[str, Any]:
    """Run the job once in this process; the phases' seconds and the result rows."""
    marks = [time.perf_counter()]
    if runner.startswith("krishiv"):
        import krishiv_py as kp

        marks.append(time.perf_counter())
        session = kp.Session.embedded(app_name="krishiv-bench-first-job")
        marks.append(time.perf_counter())
        if runner == "krishiv-memory":
            import pyarrow.parquet as pq

            stream, sender = session.memory_stream(SCHEMA)
            sender.send(pq.read_table(events_dir))
        else:
            stream = session.read_parquet(events_dir, SCHEMA, streaming=True)
        job = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
            .start()
        )
        marks.append(time.perf_counter())
        job.process_all_available()
        marks.append(time.perf_counter())
        rows = job.results().to_pylist()
        marks.append(time.perf_counter())
        job.stop()
        session.stop()
    else:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        marks.append(time.perf_counter())
        builder = SparkSession.builder.appName("krishiv-bench-first-job")
        if runner == "pyspark-tuned":
            from krishiv_py.runtime.spark_session import local_conf

            builder = builder.master(f"local[{os.cpu_count() or 1}]")
            for key, value in local_conf(os.cpu_count() or 1).items():
                builder = builder.config(key, value)
        spark = builder.getOrCreate()
        marks.append(time.perf_counter())
        query = (
            spark.readStream.schema(SCHEMA)
            .parquet(events_dir)
            .withWatermark("event_time", "5 seconds")
            .groupBy("user_id", F.window("event_time", "1 minute"))
            .agg(F.count("*").alias("events"), F.sum("amount").alias("total"))
            .selectExpr(
                "user_id", "window.start AS window_start", "window.end AS window_end", "events", "total"
            )
            .writeStream.format("memory")
            .queryName("first_job")
            .outputMode("append")
            .option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-bench-first-job-"))
            .start()
        )
        marks.append(time.perf_counter())
        query.processAllAvailable()
        marks.append(time.perf_counter())
        rows = spark.table("first_job").toArrow().to_pylist()
        marks.append(time.perf_counter())
        query.stop()
        spark.stop()
    marks.append(time.perf_counter())
    phases = {p: b - a for p, a, b in zip(PHASES, marks, marks[1:], strict=False)}
    digest = sorted((r["user_id"], str(r["window_start"]), r["events"], round(r["total"], 6)) for r in rows)
    return {"phases": phases, "rows": len(rows), "digest": hash(tuple(digest))}


def run_fresh(runner: str, events_dir: str) -> dict[str, Any]:
    """``runner``'s job in a fresh interpreter; its report plus the whole process's seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_job", "--child", runner, "--events-dir", events_dir],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    wall = time.perf_counter() - started
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(PREFIX + "result ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{runner} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(lines[-1][len(PREFIX + "result ") :])
    report["process"] = wall
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--runner", action="append", choices=RUNNERS, help="default: all")
    parser.add_argument("--child", choices=RUNNERS, help=argparse.SUPPRESS)
    parser.add_argument("--events-dir", help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.child:
        print(PREFIX + "result " + json.dumps(child(a.child, a.events_dir)), flush=True)
        return 0
    events_dir = write_events(tempfile.mkdtemp(prefix="krishiv-bench-first-job-"), a.events)
    runners = tuple(a.runner or RUNNERS)
    reports: dict[str, list[dict[str, Any]]] = {r: [] for r in runners}
    for i in range(a.rounds):
        for runner in runners[i % len(runners) :] + runners[: i % len(runners)]:
            reports[runner].append(run_fresh(runner, events_dir))
    digests = {r: {x["digest"] for x in reports[r]} for r in runners}
    if len(set().union(*digests.values())) != 1:
        raise RuntimeError(f"the two jobs' results differ: {digests}")
    rows = reports["krishiv"][0]["rows"]
    print(f"{a.events:,} events, {rows} result rows, {a.rounds} fresh processes each, medians (s)")
    print(f"{'phase':10s}" + "".join(f" {r:>14s}" for r in runners))
    for phase in (*PHASES, "process"):
        med = {
            r: statistics.median(x["phases"][phase] if phase in PHASES else x[phase] for x in reports[r])
            for r in runners
        }
        print(f"{phase:10s}" + "".join(f" {med[r]:14.2f}" for r in runners))
    whole = {r: statistics.median(x["process"] for x in reports[r]) for r in runners}
    for mine in ("krishiv", "krishiv-memory"):
        for theirs in ("pyspark-tuned", "pyspark"):
            if mine in whole and theirs in whole:
                print(f"whole process, {mine} ÷ {theirs}: {whole[mine] / whole[theirs]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
