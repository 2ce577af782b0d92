"""A two-level cascade (10 s clicks per user, then the busiest 10 s per minute) against hand-written Spark.

    PYTHONPATH=. python benchmarks/cascade.py [--events 1000000] [--files 20] [--rounds 3]

The clickstream dataset (``--events`` events, one file per micro-batch, 2 s
disorder, 1 % of events 5-60 s late, a 5 s watermark lag) spans about 17
minutes at the default size, so the levels are 10 seconds and 1 minute
(an hour window would never close within the data). Four runners, each
timed ``--rounds`` times after one warm-up, alternating:

``krishiv``
    The pipeline streamed over the Parquet directory; the planner picks the
    stateful lowering (the operator runs the first window and the second
    over its changes, in the same call: both are keyed by the user).
``pyspark-chain``
    The same two windows written by hand as Spark users chain them:
    ``groupBy(window(...))`` then ``groupBy(window(window_time(window), ...))``
    in append mode, Spark's default multiple-operator watermark mode.
``krishiv-bounded`` / ``pyspark-batch``
    The same query over the whole directory as one batch job.

Prints the median seconds of each and the ratios hand-written ÷ krishiv
(higher is better for krishiv), and checks results: both bounded runs must
give the same rows. Streaming, Spark's chain drops late rows at the first
window by the *previous* micro-batch's watermark (its multiple-operator
mode), krishiv by the current one (the specification), so the streamed
results may differ by the few windows a late event reaches in one and not
the other; the number of differing rows is printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa

import krishiv_py as kp
from benchmarks import data
from benchmarks.arrow import rows_of
from benchmarks.digest import digest
from benchmarks.queries import WATERMARK_LAG_MS

FIRST_MS, SECOND_MS = 10_000, 60_000
COLUMNS = ("user_id", "window_start", "window_end", "peak", "busy")
SCHEMA = "user_id string, event_time timestamp, amount double"


def krishiv_pipeline(source: kp.Stream) -> kp.Stream:
    tens = (
        source.watermark("event_time", WATERMARK_LAG_MS)
        .key_by("user_id")
        .tumbling_window(FIRST_MS)
        .agg(kp.count(kp.col("*")).alias("clicks"))
    )
    return (
        tens.key_by("user_id")
        .tumbling_window(SECOND_MS)
        .agg(kp.max(kp.col("clicks")).alias("peak"), kp.count(kp.col("*")).alias("busy"))
    )


def pyspark_chain(df: Any) -> Any:
    from pyspark.sql import functions as F

    tens = (
        df.withWatermark("event_time", f"{WATERMARK_LAG_MS // 1000} seconds")
        .groupBy("user_id", F.window("event_time", f"{FIRST_MS // 1000} seconds"))
        .agg(F.count(F.lit(1)).alias("clicks"))
    )
    minutes = tens.groupBy("user_id", F.window(F.window_time("window"), f"{SECOND_MS // 1000} seconds")).agg(
        F.max("clicks").alias("peak"), F.count(F.lit(1)).alias("busy")
    )
    return minutes.select(
        "user_id",
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "peak",
        "busy",
    )


def run(session: kp.Session, runner: str, path: str, ddl: str) -> pa.Table:
    spark = session.spark
    if runner == "krishiv":
        job = krishiv_pipeline(session.read_parquet(path, streaming=True, max_files_per_trigger=1)).start()
        job.process_all_available()
        job.stop()
        return job.results()
    if runner == "krishiv-bounded":
        return krishiv_pipeline(session.read_parquet(path)).collect()
    if runner == "pyspark-batch":
        out: pa.Table = pyspark_chain(spark.read.schema(ddl).parquet(path)).toArrow()
        return out
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(path)
    name = f"bench_{uuid.uuid4().hex}"
    writer = pyspark_chain(df).writeStream.outputMode("append").format("memory").queryName(name)
    q = writer.option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-bench-")).start()
    q.processAllAvailable()
    q.stop()
    table: pa.Table = spark.table(name).toArrow()
    spark.catalog.dropTempView(name)
    return table


RUNNERS = ("krishiv", "pyspark-chain", "krishiv-bounded", "pyspark-batch")


def model_rows(path: str) -> set[tuple[Any, ...]]:
    """The reference model's windows: one step per file, in order, like the streamed runs (no close)."""
    import os

    import pyarrow.parquet as pq

    from krishiv_py.testing import JoinModel, model_for
    from krishiv_py.testing.steps import _placeholder

    model = model_for(krishiv_pipeline(_placeholder(SCHEMA)))
    assert not isinstance(model, JoinModel)
    for name in sorted(f for f in os.listdir(path) if f.endswith(".parquet")):
        table = pq.read_table(os.path.join(path, name), columns=["user_id", "event_time"])
        model.send(table.to_pylist())
    return {
        (
            r["user_id"],
            int(str(r["window_start"])) * 1_000,
            int(str(r["window_end"])) * 1_000,
            r["peak"],
            r["busy"],
        )
        for r in model.results
    }


def _micros(rows: set[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    import datetime as dt

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return {
        (u, (s - epoch) // dt.timedelta(microseconds=1), (e - epoch) // dt.timedelta(microseconds=1), p, b)
        for u, s, e, p, b in rows
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--check", action="store_true", help="check krishiv's streamed windows against the model")
    a = p.parse_args(argv)
    clicks = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
    path, ddl = clicks.table_dir("events"), clicks.ddl("events")
    times: dict[str, list[float]] = {r: [] for r in RUNNERS}
    rows: dict[str, set[tuple[Any, ...]]] = {}
    with kp.Session.embedded(progress=False) as session:
        for rnd in range(a.rounds + 1):
            for runner in RUNNERS if rnd % 2 == 0 else tuple(reversed(RUNNERS)):
                t0 = time.perf_counter()
                out = run(session, runner, path, ddl)
                elapsed = time.perf_counter() - t0
                if rnd:  # the first round warms up
                    times[runner].append(elapsed)
                rows[runner] = {tuple(r) for r in rows_of(COLUMNS)(out)}
    med = {r: statistics.median(t) for r, t in times.items()}
    for r in RUNNERS:
        print(f"{r:16s} {med[r]:6.2f} s (median of {a.rounds}), {len(rows[r])} windows")
    print(f"streaming: pyspark-chain / krishiv = {med['pyspark-chain'] / med['krishiv']:.2f}")
    print(f"bounded:   pyspark-batch / krishiv-bounded = {med['pyspark-batch'] / med['krishiv-bounded']:.2f}")
    same_bounded = digest(rows["krishiv-bounded"]) == digest(rows["pyspark-batch"])
    differ = len(rows["krishiv"] ^ rows["pyspark-chain"])
    print(f"bounded results equal: {same_bounded}")
    print(f"streamed results differing between krishiv and the hand-written chain: {differ} rows")
    ok = same_bounded
    if a.check:
        want = model_rows(path)
        got = _micros(rows["krishiv"])
        ok = ok and got == want
        print(f"krishiv's streamed windows equal the reference model's: {got == want} ({len(want)} windows)")
        chain = len(_micros(rows["pyspark-chain"]) ^ want)
        print(f"rows where the hand-written chain differs from the model: {chain}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
