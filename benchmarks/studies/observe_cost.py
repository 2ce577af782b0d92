"""What krishiv_py's observed metrics cost per row: the native lowering at large micro-batches.

    python -m benchmarks.studies.observe_cost [--query tumbling|nexmark-q7|nexmark-q7-narrow] [--rounds 6]
                                              [--events 12000000] [--files 6]

One process, one Spark session (tuned as krishiv_py tunes it, for every
variant), the suite's clickstream in ``--files`` Parquet files read one per
micro-batch (2 M rows each by default: per-row work decides there). Each
round runs, in this order, the query — ``tumbling``, the per-user 1-minute
``count(*)`` and ``sum(amount)`` over the clickstream, or ``nexmark-q7``,
the highest price and the bid count per 10 s window without keys over the
bids (Nexmark's tables, all their columns), or ``nexmark-q7-narrow``, the
same over rows of three columns (``auction``, ``event_time``, ``price``: the
sustainable harness's Q7 rows, written once under ``benchmarks/.cache``) —
with a watermark lag of 5 s, as:

``hand``
    the query written by hand: ``withWatermark`` + ``window`` +
    ``groupBy().agg()``, no metrics (the baseline of every ratio).
``krishiv-native``
    ``read_parquet(..., streaming=True, max_files_per_trigger=1)`` and the
    builder, ``start(lowering="native")``: what this checkout lowers to.
``observed above the watermark``
    krishiv's recipe by hand (its event-time select item taken from the
    lowering), the event-time select and its observation of
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
from dataclasses import dataclass
from typing import Any

import krishiv_py as kp
from benchmarks import data
from krishiv_py.names import ET
from krishiv_py.planner.spark import SelectExprs

LAG_S = 5
NARROW_DDL = "auction bigint, event_time timestamp, price bigint"


@dataclass(frozen=True)
class Query:
    """One query of the benchmark: its table, event-time column, window and aggregates."""

    name: str
    ddl: str
    event_time: str
    window_ms: int
    keys: tuple[str, ...]

    def aggregate(self, df: Any, column: str) -> Any:
        """The query's window aggregation by hand over ``df``, the window on ``column``."""
        from pyspark.sql import functions as F

        window = F.window(column, f"{self.window_ms // 1000} seconds")
        count = F.count(F.lit(1)).alias("count")
        if self.name == "tumbling":
            return df.groupBy(*self.keys, window).agg(count, F.sum("amount"))
        return df.groupBy(window).agg(F.max("price").alias("max_price"), count)  # Nexmark Q7

    def krishiv(self, source: kp.Stream) -> kp.Stream:
        """The same query with the builder."""
        s = source.watermark(self.event_time, LAG_S * 1000)
        count = kp.count(kp.col("*"))
        if self.name == "tumbling":
            return s.key_by(*self.keys).tumbling_window(self.window_ms).agg(count, kp.sum(kp.col("amount")))
        return s.tumbling_window(self.window_ms).agg(kp.max(kp.col("price")).alias("max_price"), count)


QUERIES = {
    "tumbling": Query("tumbling", data.CLICKSTREAM_DDL, "event_time", 60_000, ("user_id",)),
    "nexmark-q7": Query("nexmark-q7", data.BID_DDL, "date_time", 10_000, ()),
    "nexmark-q7-narrow": Query("nexmark-q7-narrow", NARROW_DDL, "event_time", 10_000, ()),
}


def dataset_path(query: Query, events: int, files: int) -> str:
    """The directory of the query's table in the suite's datasets (written once, then cached)."""
    if query.name == "tumbling":
        return data.clickstream(data.ClickstreamSpec(events=events, files=files)).table_dir("events")
    if query.name == "nexmark-q7-narrow":
        return _narrow_bids(events, files)
    return data.nexmark(data.NexmarkSpec(events=events, files=files)).table_dir("bid")


def _narrow_bids(events: int, files: int) -> str:
    """Bids of three columns in ``files`` Parquet files, a second of event time each (up to 2 s behind)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = data.CACHE / f"observe-narrow-bids-n{events}-f{files}"
    if (root / "_done").exists():
        return str(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    per = events // files
    for i in range(files):
        ms = (
            1_700_000_000_000 + i * 1_000 + np.sort(rng.integers(0, 1_000, per)) - rng.integers(0, 2_001, per)
        )
        table = pa.table(
            {
                "auction": pa.array(rng.integers(0, 10_000, per)),
                "event_time": pa.array(ms * 1000, pa.timestamp("us", tz="UTC")),
                "price": pa.array(rng.integers(1, 10_000_000, per)),
            }
        )
        pq.write_table(table, root / f"part-{i:05d}.parquet")
    (root / "_done").touch()
    return str(root)


def lowered_event_time(session: kp.Session, query: Query, path: str) -> str:
    """The event-time select item krishiv's native lowering gives ``query`` over ``path`` (``AS __kp_et``)."""
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    node: Any = query.krishiv(source).lower(lowering="native").root
    pending = [node]
    while pending:
        node = pending.pop()
        if isinstance(node, SelectExprs):
            item = next((e for e in node.exprs if e.endswith(f" AS `{ET}`")), None)
            if item is not None:
                return item
        pending += [
            c for c in (getattr(node, "child", None), *getattr(node, "children", ())) if c is not None
        ]
    raise RuntimeError(f"{query.name}: the native recipe has no event-time select")


def _recipe(
    spark: Any, query: Query, path: str, event_time: str, metrics: tuple[str, ...], *, below: bool
) -> Any:
    """krishiv's native recipe by hand, ``event_time`` its select item, ``metrics`` observed below or
    above the watermark."""
    from pyspark.sql import functions as F

    hidden = ("CAST(0 AS TINYINT) AS k", "CAST(NULL AS BIGINT) AS wm", "CAST(0 AS BIGINT) AS seq")
    df = _read(spark, query, path).selectExpr("*", *hidden).selectExpr("*", event_time)
    observed = [F.expr(m) for m in metrics]
    if observed and below:
        df = df.observe(f"m_{uuid.uuid4().hex[:8]}", *observed)
    df = df.withWatermark(ET, f"{LAG_S} seconds")
    if observed and not below:
        df = df.observe(f"m_{uuid.uuid4().hex[:8]}", *observed)
    return query.aggregate(df.filter(f"`{ET}` IS NOT NULL"), ET)


def _read(spark: Any, query: Query, path: str) -> Any:
    return spark.readStream.schema(query.ddl).option("maxFilesPerTrigger", 1).parquet(path)


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


def _run_krishiv(session: kp.Session, query: Query, path: str) -> float:
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    job = query.krishiv(source).start(kp.ForeachBatchSink(lambda _t, _b: None), lowering="native")
    try:
        job.process_all_available()
        reports = [p.raw for p in job.progress() if p.input_rows > 0]
    finally:
        job.stop()
    return float(sum(r["durationMs"]["addBatch"] for r in reports))


def variants(session: kp.Session, query: Query, path: str, scratch: str) -> dict[str, Callable[[], float]]:
    spark = session.spark
    event_time = lowered_event_time(session, query, path)
    rows_and_invalid = ("count(1) AS rows", f"count_if(`{ET}` IS NULL) AS invalid")
    invalid = (f"count(CASE WHEN `{ET}` IS NULL THEN 1 END) AS invalid",)

    def hand() -> float:
        df = _read(spark, query, path).withWatermark(query.event_time, f"{LAG_S} seconds")
        return _run_spark(query.aggregate(df, query.event_time), scratch)

    def recipe(metrics: tuple[str, ...], *, below: bool) -> Callable[[], float]:
        return lambda: _run_spark(_recipe(spark, query, path, event_time, metrics, below=below), scratch)

    return {
        "hand": hand,
        "krishiv-native": lambda: _run_krishiv(session, query, path),
        "observed above the watermark": recipe(rows_and_invalid, below=False),
        "observed below the watermark": recipe(invalid, below=True),
        "not observed": recipe((), below=True),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.observe_cost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--rounds", type=int, default=6, help="rounds of every variant (the first is a warm-up)")
    p.add_argument(
        "--events", type=int, default=12_000_000, help="events in the dataset (default 12,000,000)"
    )
    p.add_argument("--files", type=int, default=6, help="files, one per micro-batch (default 6)")
    p.add_argument(
        "--query", choices=sorted(QUERIES), default="tumbling", help="the query (default tumbling)"
    )
    args = p.parse_args(argv)
    query = QUERIES[args.query]
    path = dataset_path(query, args.events, args.files)
    times: dict[str, list[float]] = {}
    with (
        kp.Session.embedded(app_name="krishiv-observe-cost", progress=False) as session,
        tempfile.TemporaryDirectory(prefix="krishiv-observe-") as scratch,
    ):
        runs = variants(session, query, path, scratch)
        for r in range(args.rounds):
            for name, run in runs.items():
                times.setdefault(name, []).append(run())
                print(f"round {r} {name}: addBatch {times[name][-1]:.0f} ms", flush=True)
    where = f"{args.events:,} events in {args.files} files"
    print(f"\n{query.name}: addBatch summed over a run's micro-batches ({where}),")
    print("median over rounds 2..; ratio to hand in the same round, median:")
    print("| variant | addBatch (ms) | ÷ hand |\n|---|---:|---:|")
    hand = times["hand"][1:]
    for name, values in times.items():
        ratios = [v / h for v, h in zip(values[1:], hand, strict=True)]
        print(f"| {name} | {statistics.median(values[1:]):,.0f} | {statistics.median(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
