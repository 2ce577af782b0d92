"""What a Python stateful operator costs Spark per micro-batch: the candidates for the stateful lowering.

One Spark session (the machine's cores, the RocksDB state store that
``single-node-durable`` uses, which ``transformWithStateInPandas``
requires), one streaming query per candidate over the same Parquet files,
one file of ``--rows`` rows per micro-batch, rows hashed into ``--buckets``
key buckets as the stateful lowering hashes them. Each candidate does the
least its API allows: count the bucket's rows, keep the running count in
state, emit one row. So the figure is the API's own cost per micro-batch,
not krishiv_py's kernel's:

``mapInArrow``
    the floor: a stateless Python step over every row, no state, no shuffle.
``jvm-aggregate``
    Spark's own stateful aggregation (``groupBy(bucket).count()``, update
    mode): no Python, the JVM's state store per shuffle partition.
``applyInPandasWithState``
    the API the stateful lowering runs on.
``transformWithStateInPandas``
    Spark 4's stateful processor (value state), the candidate to replace it.

Candidates take turns for ``--rounds`` rounds; the first two micro-batches
of each query (planning, state store start) are left out, and the figure is
the median ``addBatch`` (the micro-batch's Spark job) over the rest and over
the rounds after the first. ``python -m benchmarks.operator_api [--rows N]
[--rounds N] [--buckets N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

CANDIDATES = ("mapInArrow", "jvm-aggregate", "applyInPandasWithState", "transformWithStateInPandas")
OUTPUT = "bucket int, n long"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def counted(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """``applyInPandasWithState``: the bucket's running row count."""
    total = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((total,))
    yield pd.DataFrame({"bucket": [int(key[0])], "n": [total]})


def arrow_count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: one row per Arrow batch with its row count."""
    for b in batches:
        counts: dict[str, pa.Array[Any]] = {
            "bucket": pa.array([0], pa.int32()),
            "n": pa.array([b.num_rows], pa.int64()),
        }
        yield pa.record_batch(counts)


def processor() -> Any:
    """``transformWithStateInPandas``: the bucket's running row count in a value state."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
            total = (self.count.get()[0] if self.count.exists() else 0) + sum(len(f) for f in rows)
            self.count.update((total,))
            yield pd.DataFrame({"bucket": [int(key[0])], "n": [total]})

        def close(self) -> None:
            return None

    return Counter()


def run(spark: Any, src: str, base: str, name: str, buckets: int) -> list[float]:
    """``addBatch`` ms of each micro-batch with rows, after the first two."""
    rows = (
        spark.readStream.schema("user_id bigint, amount double")
        .option("maxFilesPerTrigger", "1")
        .parquet(src)
        .selectExpr("*", f"CAST(pmod(hash(user_id), {buckets}) AS INT) AS bucket")
    )
    mode = "append"
    if name == "mapInArrow":
        query = rows.mapInArrow(arrow_count, OUTPUT)
    elif name == "jvm-aggregate":
        query, mode = rows.groupBy("bucket").count().withColumnRenamed("count", "n"), "update"
    elif name == "applyInPandasWithState":
        query = rows.groupBy("bucket").applyInPandasWithState(
            counted, OUTPUT, "n long", "append", "NoTimeout"
        )
    else:
        query = rows.groupBy("bucket").transformWithStateInPandas(processor(), OUTPUT, "append", "None")
    sink: Callable[[Any, int], None] = lambda df, _id: df.count()  # noqa: E731
    handle = (
        query.writeStream.outputMode(mode)
        .option("checkpointLocation", tempfile.mkdtemp(dir=base))
        .foreachBatch(sink)
        .start()
    )
    handle.processAllAvailable()
    reports = [p for p in handle.recentProgress if p.numInputRows > 0]
    handle.stop()
    return [float(p.durationMs.get("addBatch", 0)) for p in reports][2:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows per micro-batch")
    parser.add_argument("--files", type=int, default=14, help="micro-batches per query")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args(argv)
    import krishiv_py as kp

    base = tempfile.mkdtemp(prefix="krishiv-operator-api-")
    src = os.path.join(base, "src")
    os.makedirs(src)
    rng = np.random.default_rng(0)
    for i in range(a.files):
        table = pa.table({"user_id": rng.integers(0, 1000, a.rows), "amount": rng.random(a.rows)})
        pq.write_table(table, os.path.join(src, f"part-{i:04d}.parquet"))
    times: dict[str, list[float]] = {c: [] for c in CANDIDATES}
    with kp.Session.embedded(app_name="krishiv-bench-operator-api") as session:
        # What single-node-durable jobs run on; transformWithStateInPandas takes no other store.
        session.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        for r in range(a.rounds):
            for name in CANDIDATES:
                batches = run(session.spark, src, base, name, a.buckets)
                if r:  # the first round warms up the Python workers and the JIT
                    times[name] += batches
    floor = statistics.median(times["mapInArrow"])
    print(f"{a.rows:,} rows per micro-batch, {a.buckets} buckets, medians of rounds 2-{a.rounds} (ms):")
    for name in CANDIDATES:
        m = statistics.median(times[name])
        print(f"  {name:28s} addBatch {m:7.1f}   above the mapInArrow floor {m - floor:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
