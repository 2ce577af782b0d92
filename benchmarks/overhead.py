"""Per-micro-batch overhead: ms per tiny batch, krishiv_py's native job vs hand-written PySpark.

    python -m benchmarks.overhead [--batches 30] [--rows 10] [--rounds 3]    (nox -s overhead_bench)

One process, one Spark session (tuned as krishiv_py tunes it, for both). Each
round runs the same query — per-user 1-minute tumbling ``count(*)`` and
``sum(amount)``, watermark lag 5 s — twice, in alternating order:

``krishiv-native``
    a memory stream; per batch ``sender.send(rows)`` then
    ``job.process_all_available()``.
``pyspark-streaming``
    Spark's file source on a directory (``maxFilesPerTrigger`` 1), the
    query written by hand; per batch one Parquet file written, then
    ``query.processAllAvailable()``.

Each batch is ``--rows`` rows whose event times move forward by a minute, so
every batch closes a window (Spark runs the extra no-data batch that fires
it in both). The first batch of each job (planning, state-store start) is
left out; the figure is the median time per batch over the rest, and the
ratio krishiv ÷ hand-written (lower is better; the target is <= 0.8).
Both jobs' results are checked equal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import krishiv_py as kp
from krishiv_py.runtime.run import SINGLE_WATERMARK_CONF
from krishiv_py.types import to_schema

DDL = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def batch(i: int, rows: int) -> list[dict[str, Any]]:
    return [
        {
            "user_id": f"u{j % 5}",
            "event_time": T0 + dt.timedelta(minutes=i, seconds=j % 50),
            "amount": float(j),
        }
        for j in range(rows)
    ]


def phases(query: Any, skip: int) -> dict[str, float]:
    """Spark's ``durationMs`` per phase, summed over the query's batches after the first ``skip``."""
    totals: dict[str, float] = {}
    count = 0
    for p in query.recentProgress:
        if int(p.batchId) < skip or not p.durationMs.get("triggerExecution"):
            continue
        count += 1
        for phase, ms in p.durationMs.items():
            totals[phase] = totals.get(phase, 0.0) + float(ms)
    totals["batches"] = count
    return totals


def run_krishiv(
    session: kp.Session, batches: list[list[dict[str, Any]]]
) -> tuple[list[float], int, dict[str, float]]:
    stream, sender = session.memory_stream(DDL, name=f"overhead_{uuid.uuid4().hex[:8]}")
    windows = stream.watermark("event_time", 5_000).key_by("user_id").tumbling_window(60_000)
    job: Any = windows.agg(kp.count(kp.col("*")), kp.sum(kp.col("amount"))).start()
    times = []
    try:
        for rows in batches:
            t = time.perf_counter()
            sender.send(rows)
            job.process_all_available()
            times.append(time.perf_counter() - t)
        return times, job.results().num_rows, phases(job._query, 2)
    finally:
        job.stop()


def run_pyspark(spark: Any, batches: list[list[dict[str, Any]]]) -> tuple[list[float], int, dict[str, float]]:
    from pyspark.sql import functions as F

    src = tempfile.mkdtemp(prefix="krishiv-overhead-")
    schema = to_schema(DDL).to_arrow()
    df = spark.readStream.schema(DDL).option("maxFilesPerTrigger", 1).parquet(src)
    out = (
        df.withWatermark("event_time", "5 seconds")
        .groupBy("user_id", F.window("event_time", "60 seconds"))
        .agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("sum_amount"))
    )
    name = f"overhead_{uuid.uuid4().hex}"
    query = (
        out.writeStream.outputMode("append")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-overhead-ckpt-"))
        .format("memory")
        .queryName(name)
        .start()
    )
    times = []
    try:
        for i, rows in enumerate(batches):
            t = time.perf_counter()
            staged = os.path.join(src, f".part-{i:06d}.parquet")
            pq.write_table(pa.Table.from_pylist(rows, schema), staged)
            os.rename(staged, os.path.join(src, f"part-{i:06d}.parquet"))
            query.processAllAvailable()
            times.append(time.perf_counter() - t)
        return times, spark.table(name).count(), phases(query, 2)
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=30, help="micro-batches per job (default 30)")
    p.add_argument("--rows", type=int, default=10, help="rows per batch (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each runs both jobs (default 3)")
    args = p.parse_args(argv)
    batches = [batch(i, args.rows) for i in range(args.batches)]
    per: dict[str, list[float]] = {"krishiv-native": [], "pyspark-streaming": []}
    phase_ms: dict[str, dict[str, float]] = {"krishiv-native": {}, "pyspark-streaming": {}}
    with kp.Session.embedded(app_name="krishiv-overhead", progress=False) as session:
        # The hand-written query runs tuned as krishiv_py's: its session, single-watermark mode.
        session.spark.conf.set(SINGLE_WATERMARK_CONF, "false")
        for rnd in range(args.rounds):
            order = (
                ("krishiv-native", "pyspark-streaming")
                if rnd % 2 == 0
                else ("pyspark-streaming", "krishiv-native")
            )
            rows: dict[str, int] = {}
            for runner in order:
                if runner == "krishiv-native":
                    times, rows[runner], spent = run_krishiv(session, batches)
                else:
                    times, rows[runner], spent = run_pyspark(session.spark, batches)
                per[runner] += times[1:]
                for phase, ms in spent.items():
                    phase_ms[runner][phase] = phase_ms[runner].get(phase, 0.0) + ms
            assert rows["krishiv-native"] == rows["pyspark-streaming"], rows
            print(f"round {rnd + 1}: {rows['krishiv-native']} windows each", flush=True)
    med = {r: statistics.median(v) * 1000 for r, v in per.items()}
    for runner, ms in med.items():
        print(f"{runner:18s} {ms:8.1f} ms per micro-batch (median of {len(per[runner])})")
    print(f"krishiv ÷ hand-written: {med['krishiv-native'] / med['pyspark-streaming']:.2f} (target <= 0.8)")
    sends = args.rounds * (args.batches - 1)
    names = sorted({k for v in phase_ms.values() for k in v if k != "batches"})
    print(f"Spark's durationMs per send (mean over {sends} sends; batches = Spark micro-batches per send):")
    print(f"{'phase':24s} {'krishiv-native':>15s} {'pyspark-streaming':>18s}")
    for phase in ["batches", *names]:
        k, h = (phase_ms[r].get(phase, 0.0) / sends for r in ("krishiv-native", "pyspark-streaming"))
        print(f"{phase:24s} {k:15.2f} {h:18.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
