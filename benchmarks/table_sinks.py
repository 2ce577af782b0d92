"""What a table that holds the corrected answer costs: table sinks against the memory sink, one run.

    PYTHONPATH=. python benchmarks/table_sinks.py [--events 1000000] [--files 20] [--rounds 3]

The clickstream dataset (``--events`` events in ``--files`` Parquet files,
1 % of them late) is read as a streaming directory, one file per
micro-batch, by the tumbling query with allowed lateness: per user, 1-minute
windows, count and sum, watermark lag 5 s, ``allowed_lateness(60 s)``,
``retracting`` (the stateful lowering; late events re-fire their windows).
The same job runs into ``MemorySink`` (the baseline), ``DuckDBSink``,
``DeltaSink``, ``PostgresSink`` (a server started for the run) and ``IcebergSink``, in a
rotating order, ``--rounds`` times after one warm-up round. Prints the
median seconds of each and the ratio memory ÷ sink (the targets: DuckDB,
Delta and Iceberg ≥ 0.7, PostgreSQL ≥ 0.5); checks that every table holds the memory
sink's changelog folded to one row per window, and exits 1 when one does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

import krishiv_py as kp
from benchmarks import data
from benchmarks.queries import WATERMARK_LAG_MS
from krishiv_py.devtools import PostgresServer

SINKS = ("memory", "duckdb", "delta", "postgres", "iceberg")
TARGETS = {"duckdb": 0.7, "delta": 0.7, "postgres": 0.5, "iceberg": 0.7}
COLUMNS = ("user_id", "window_start", "window_end", "count", "sum_amount")


def query(source: kp.Stream) -> kp.Stream:
    return (
        source.watermark("event_time", WATERMARK_LAG_MS)
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")))
    )


def make_sink(name: str, tmp: str, dsn: str) -> kp.Sink:
    table = f"t_{uuid.uuid4().hex[:8]}"
    if name == "duckdb":
        return kp.DuckDBSink(os.path.join(tmp, "bench.duckdb"), table)
    if name == "delta":
        return kp.DeltaSink(os.path.join(tmp, table))
    if name == "postgres":
        return kp.PostgresSink(dsn, table)
    if name == "iceberg":
        return kp.IcebergSink(f"bench.{table}", warehouse=os.path.join(tmp, "iceberg"))
    return kp.MemorySink()


def folded(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A changelog folded to the current results (an emit sets its window's row, a retraction removes it)."""
    current: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in rows:
        key = (r["user_id"], r["window_start"], r["window_end"])
        if r.get("kind") == "retract":
            current.pop(key, None)
        else:
            current[key] = tuple(r[c] for c in COLUMNS)
    return sorted(current.values())


def run(session: kp.Session, path: str, sink: kp.Sink) -> tuple[float, list[tuple[Any, ...]], int]:
    """Seconds from start to the last micro-batch; the table's rows (folded for memory); batches."""
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    t0 = time.perf_counter()
    job = query(source).start(sink, lowering="stateful")
    job.process_all_available()
    elapsed = time.perf_counter() - t0
    rows = job.results().to_pylist()
    batches = job.metrics().batches
    job.stop()
    if isinstance(sink, kp.MemorySink):
        return elapsed, folded(rows), batches
    return elapsed, sorted(tuple(r[c] for c in COLUMNS) for r in rows), batches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the figures to this file")
    a = p.parse_args(argv)
    clicks = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
    path = clicks.table_dir("events")
    times: dict[str, list[float]] = {s: [] for s in SINKS}
    batches = 0
    results: dict[str, list[tuple[Any, ...]]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        PostgresServer() as pg,
        kp.Session.embedded(progress=False) as session,
    ):
        for rnd in range(a.rounds + 1):
            order = SINKS[rnd % len(SINKS) :] + SINKS[: rnd % len(SINKS)]
            for name in order:
                elapsed, rows, batches = run(session, path, make_sink(name, tmp, pg.dsn))
                if rnd:  # the first round warms up
                    times[name].append(elapsed)
                results[name] = rows
    medians = {s: statistics.median(times[s]) for s in SINKS}
    ok = True
    report: dict[str, Any] = {"events": a.events, "files": a.files, "rounds": a.rounds, "batches": batches}
    for name in SINKS:
        same = results[name] == results["memory"]
        ok &= same
        ratio = medians["memory"] / medians[name]
        target = TARGETS.get(name)
        verdict = (
            "" if target is None else f" (target >= {target}: {'met' if ratio >= target else 'NOT met'})"
        )
        print(
            f"{name:9} {medians[name]:6.2f} s  memory / {name} = {ratio:.2f}{verdict}  same windows: {same}"
        )
        report[name] = {"seconds": times[name], "median_s": medians[name], "ratio": ratio, "same": same}
    print(f"{len(results['memory'])} windows, {batches} micro-batches")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
