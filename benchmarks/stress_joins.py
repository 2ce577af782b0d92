"""The join/model test under load, repeated: Nexmark Q3 and Q20 on memory streams against the model.

Each run sends the dataset's files to a streaming join one file of each side
per step (both sends, then ``process_all_available()``), closes both sides
and compares the joined rows with the reference model played on the
micro-batches Spark reports it ran (:func:`benchmarks.joins.batching_of`).
It also plays the model on the batching the test used to assume — one file
of each side per micro-batch — and counts the runs where Spark cut them
otherwise and where that assumption gives other rows: under load Spark may
start a micro-batch between the two sends of a step, a file of one side
then runs alone, and which rows are behind the watermark moves with it.

Load: ``--busy N`` processes that spin on a core, ``--jvms N`` more local
Sparks (each a streaming aggregation over a rate source), so that three
JVMs share two cores with ``--jvms 2``. Every run's micro-batches are kept
in memory; a run whose rows differ from the model on Spark's own batching
stops the harness and writes its record to ``--out`` (JSON).

``python -m benchmarks.stress_joins --runs 500 --busy 1 --jvms 2``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import krishiv_py as kp
from benchmarks import data, joins, protocol
from benchmarks.arrow import rows_of
from benchmarks.queries import QUERIES

__all__ = ["main", "one_run"]

#: The suite's smallest join dataset: 20,000 events, 3 files per table.
SPEC = data.NexmarkSpec(events=20_000, files=3)

_JVM_LOAD = """
import time, krishiv_py as kp
from pyspark.sql import functions as F
with kp.Session.embedded(app_name="krishiv-stress-load") as s:
    df = s.spark.readStream.format("rate").option("rowsPerSecond", 20000).load()
    q = (df.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second"))
         .count().writeStream.format("noop").outputMode("append").start())
    q.awaitTermination()
"""


def _spin() -> None:
    while True:
        pass


def infos_of(query: str) -> list[protocol.TableInfo]:
    args = argparse.Namespace(clickstream="", nexmark=str(data.nexmark(SPEC).root))
    return protocol.tables_info(QUERIES[query], args)


def one_run(session: kp.Session, query: str, lowering: Any) -> dict[str, Any]:
    """One run: Spark's rows, the model's on Spark's batching and on the zipped one, the batching."""
    spec, infos = QUERIES[query], infos_of(query)
    got, batching, late = joins.run_memory_join(session, spec, infos, lowering=lowering)
    on_spark = joins.run_model_batched(spec, infos, batching, close=True)
    zipped = joins.run_model_one(spec, infos, close=True)
    rows = rows_of(spec.columns)
    have, want, assumed = (Counter(rows(t)) for t in (got, on_spark, zipped))
    data_batches = [b for b in batching if any(b)]
    return {
        "query": query,
        "lowering": lowering,
        "rows": sum(have.values()),
        "model_rows": sum(want.values()),
        "zipped_model_rows": sum(assumed.values()),
        "very_late": late,
        "batching": data_batches,
        "zipped": all(b == (True, True) for b in data_batches),
        "missing": [list(r) for r in (want - have).elements()][:10],
        "extra": [list(r) for r in (have - want).elements()][:10],
        "zipped_differs": have != assumed,
    }


def _report(i: int, record: dict[str, Any]) -> None:
    differs = record["zipped_differs"]
    note = f"; the zipped model gives {record['zipped_model_rows']}" if differs else ""
    cut = "zipped" if record["zipped"] else record["batching"]
    head = f"run {i:4} {record['query']} {record['lowering']:8}"
    print(f"{head} rows {record['rows']} = model; batching {cut}{note}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    about = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stress_joins", description=about)
    parser.add_argument("--runs", type=int, default=500, help="runs in all (queries and lowerings in turn)")
    parser.add_argument("--queries", nargs="*", default=["nexmark-q20", "nexmark-q3"])
    parser.add_argument("--lowerings", nargs="*", default=["stateful", "native"])
    parser.add_argument("--busy", type=int, default=1, help="processes spinning on a core")
    parser.add_argument("--jvms", type=int, default=2, help="more local Sparks running a streaming job")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--out", type=Path, default=Path("stress-joins-failure.json"))
    parser.add_argument("--log", type=Path, default=None, help="every run's record, one JSON per line")
    args = parser.parse_args(argv)
    for query in args.queries:
        infos_of(query)  # write the dataset before the load starts
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    jvms = [subprocess.Popen([sys.executable, "-c", _JVM_LOAD]) for _ in range(args.jvms)]
    for p in spinners:
        p.start()
    counts: Counter[str] = Counter()
    started = time.monotonic()
    try:
        with kp.Session.embedded(app_name="krishiv-stress-joins") as session:
            combos = [(q, lw) for q in args.queries for lw in args.lowerings]
            for i in range(args.runs):
                if args.minutes is not None and time.monotonic() - started > 60 * args.minutes:
                    break
                query, lowering = combos[i % len(combos)]
                record = one_run(session, query, lowering)
                if args.log is not None:
                    with args.log.open("a") as f:
                        f.write(json.dumps(record) + "\n")
                counts["runs"] += 1
                counts["not zipped"] += not record["zipped"]
                counts["zipped model differs"] += record["zipped_differs"]
                if record["missing"] or record["extra"] or record["rows"] != record["model_rows"]:
                    args.out.write_text(json.dumps(record, indent=1))
                    print(f"DIFFERENCE in run {i} ({args.out}): {record}", flush=True)
                    return 1
                note = (
                    f"; the zipped model gives {record['zipped_model_rows']}"
                    if record["zipped_differs"]
                    else ""
                )
                cut = "zipped" if record["zipped"] else record["batching"]
                print(
                    f"run {i:4} {query} {lowering:8} rows {record['rows']} = model; batching {cut}{note}",
                    flush=True,
                )
    finally:
        for p in spinners:
            p.terminate()
        for j in jvms:
            j.terminate()
            j.wait(timeout=60)
    minutes = (time.monotonic() - started) / 60
    print(
        f"{counts['runs']} runs in {minutes:.0f} min, 0 differences from the model on Spark's batching; "
        f"{counts['not zipped']} runs not cut one file of each side per micro-batch, "
        f"{counts['zipped model differs']} of them where that assumption gives other rows"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
