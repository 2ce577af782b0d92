"""What krishiv_py's observed metrics cost per row: the native tumbling query at large micro-batches.

    python -m benchmarks.observe_cost [--rounds 6] [--events 12000000] [--files 6]

One process, one Spark session (tuned as krishiv_py tunes it, for every
variant), the suite's clickstream in ``--files`` Parquet files read one per
micro-batch (2 M rows each by default: per-row work decides there). Each
round runs, in this order, the per-user 1-minute tumbling ``count(*)`` and
``sum(amount)`` (watermark lag 5 s) as:

``hand``
    the query written by hand: ``withWatermark`` + ``window`` +
    ``groupBy().agg()``, no metrics (the baseline of every ratio).
``krishiv-native``
    ``read_parquet(..., streaming=True, max_files_per_trigger=1)`` and the
    builder, ``start(lowering="native")``: what this checkout lowers to.
``observed above the watermark``
    krishiv's recipe by hand, the event-time select and its observation of
    ``count(1)`` and ``count_if(et IS NULL)`` above ``withWatermark``: the
    recipe before the observation moved.
``observed below the watermark``
    the same with only ``count(CASE WHEN et IS NULL THEN 1 END)``, observed
    right under ``withWatermark``: the recipe a file source's query lowers to
    now (its rows from the progress report).
``not observed``
    the same recipe without any observation: what the metrics cost at all.

The figure is the sum of Spark's ``addBatch`` over a run's micro-batches
with rows; each variant's ratio to ``hand`` in the same round, median over
the rounds after the first (the first warms the JVM up).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import krishiv_py as kp
from benchmarks import data
from krishiv_py.plan.watermarks import MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.planner.spark import SHIFT_BASE_MS

SCHEMA = data.CLICKSTREAM_DDL
LAG_S = 5


def _shift_us() -> int:
    """The native lowering's time shift for a 1-minute window, in microseconds."""
    return -(-SHIFT_BASE_MS // 60_000) * 60_000 * 1000


def _event_time() -> str:
    """The event-time select item of krishiv's recipe for a timestamp column (see ``Lowerer._event_time``)."""
    c = "CAST(`event_time` AS TIMESTAMP)"
    return (
        f"timestamp_micros(CASE WHEN unix_millis({c}) BETWEEN {MIN_EVENT_MS}L AND {MAX_EVENT_MS}L "
        f"THEN unix_micros({c}) END + {_shift_us()}L) AS et"
    )


def _aggregate(df: Any, column: str) -> Any:
    from pyspark.sql import functions as F

    window = F.window(column, "60 seconds")
    return df.groupBy("user_id", window).agg(F.count(F.lit(1)).alias("count"), F.sum("amount"))


def _recipe(spark: Any, path: str, metrics: tuple[str, ...], *, below: bool) -> Any:
    """krishiv's native recipe by hand, with ``metrics`` observed below or above the watermark."""
    from pyspark.sql import functions as F

    hidden = ("CAST(0 AS TINYINT) AS k", "CAST(NULL AS BIGINT) AS wm", "CAST(0 AS BIGINT) AS seq")
    df = _read(spark, path).selectExpr("*", *hidden).selectExpr("*", _event_time())
    observed = [F.expr(m) for m in metrics]
    if observed and below:
        df = df.observe(f"m_{uuid.uuid4().hex[:8]}", *observed)
    df = df.withWatermark("et", f"{LAG_S} seconds")
    if observed and not below:
        df = df.observe(f"m_{uuid.uuid4().hex[:8]}", *observed)
    return _aggregate(df.filter("et IS NOT NULL"), "et")


def _read(spark: Any, path: str) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(path)


def _run_spark(query: Any, scratch: str) -> float:
    """Start ``query`` to a no-op sink, run it over every file; its ``addBatch`` ms summed."""
    checkpoint = f"{scratch}/{uuid.uuid4().hex}"
    started = query.writeStream.format("noop").outputMode("append")
    handle = started.option("checkpointLocation", checkpoint).start()
    try:
        handle.processAllAvailable()
        reports = [p for p in handle.recentProgress if p["numInputRows"] > 0]
    finally:
        handle.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    return float(sum(p["durationMs"]["addBatch"] for p in reports))


def _run_krishiv(session: kp.Session, path: str) -> float:
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    count, amount = kp.count(kp.col("*")), kp.sum(kp.col("amount"))
    stream = source.watermark("event_time", LAG_S * 1000).key_by("user_id").tumbling_window(60_000)
    job = stream.agg(count, amount).start(kp.ForeachBatchSink(lambda _t, _b: None), lowering="native")
    try:
        job.process_all_available()
        reports = [p.raw for p in job.progress() if p.input_rows > 0]
    finally:
        job.stop()
    return float(sum(r["durationMs"]["addBatch"] for r in reports))


def variants(session: kp.Session, path: str, scratch: str) -> dict[str, Callable[[], float]]:
    spark = session.spark
    rows_and_invalid = ("count(1) AS rows", "count_if(et IS NULL) AS invalid")
    invalid = ("count(CASE WHEN et IS NULL THEN 1 END) AS invalid",)
    return {
        "hand": lambda: _run_spark(
            _aggregate(_read(spark, path).withWatermark("event_time", "5 seconds"), "event_time"), scratch
        ),
        "krishiv-native": lambda: _run_krishiv(session, path),
        "observed above the watermark": lambda: _run_spark(
            _recipe(spark, path, rows_and_invalid, below=False), scratch
        ),
        "observed below the watermark": lambda: _run_spark(
            _recipe(spark, path, invalid, below=True), scratch
        ),
        "not observed": lambda: _run_spark(_recipe(spark, path, (), below=True), scratch),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.observe_cost", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds of every variant (the first is a warm-up)")
    p.add_argument(
        "--events", type=int, default=12_000_000, help="events in the dataset (default 12,000,000)"
    )
    p.add_argument("--files", type=int, default=6, help="files, one per micro-batch (default 6)")
    args = p.parse_args(argv)
    dataset = data.clickstream(data.ClickstreamSpec(events=args.events, files=args.files))
    path = dataset.table_dir("events")
    times: dict[str, list[float]] = {}
    with (
        kp.Session.embedded(app_name="krishiv-observe-cost", progress=False) as session,
        tempfile.TemporaryDirectory(prefix="krishiv-observe-") as scratch,
    ):
        runs = variants(session, path, scratch)
        for r in range(args.rounds):
            for name, run in runs.items():
                times.setdefault(name, []).append(run())
                print(f"round {r} {name}: addBatch {times[name][-1]:.0f} ms", flush=True)
    print(f"\naddBatch summed over a run's micro-batches ({args.events:,} events in {args.files} files),")
    print("median over rounds 2..; ratio to hand in the same round, median:")
    print("| variant | addBatch (ms) | ÷ hand |\n|---|---:|---:|")
    hand = times["hand"][1:]
    for name, values in times.items():
        ratios = [v / h for v, h in zip(values[1:], hand, strict=True)]
        print(f"| {name} | {statistics.median(values[1:]):,.0f} | {statistics.median(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
