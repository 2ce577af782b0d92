"""Outgrowing one machine (SPEC 3.15): rescaling, the tasks a run gets, a look inside at size.

``python -m benchmarks.scaling rescale``
    A keyed tumbling-window job on each lowering (a durable session: RocksDB
    holds Spark's state), restarted on its
    checkpoint with the shuffle partitions going 2 → 5 → 3 → 2, against the
    same input run uninterrupted on 2: the result rows must be equal (nothing
    lost, duplicated or wrong); prints each restart's start time.
``python -m benchmarks.scaling show --keys 1000000``
    A per-key aggregate over that many keys (the stateful lowering), stopped;
    then times ``krishiv state show`` (:func:`~krishiv_py.runtime.state_view.describe_state`)
    on its checkpoint.
``python -m benchmarks.scaling tasks --partitions 8``
    On a local standalone cluster (2 workers, 4 cores each), a keyed window
    job with that many shuffle partitions: from Spark's task list (the REST
    API of the driver's UI), the stateful operator's stage's tasks, how many
    ran at once, and each task's shuffle bytes read against the mean
    (uniform keys: the load per task).

``python -m benchmarks.scaling state --keys 10000,10000000``
    The work of one task of krishiv's operator per micro-batch (no Spark:
    reading its state, the kernel's step, writing its files) for an
    updating per-key ``count``/``sum`` holding that many live keys, each
    micro-batch 20,000 rows of random live keys: keyed state (the step sees
    the touched keys' rows, a delta is written) against the whole state (the
    layout before: the whole state stepped and written), with the time per
    micro-batch and the bytes written (snapshots included, as they come).
    ``--kernel join``: an inner interval join instead, holding one row per
    live key (a left row, open for an hour), each micro-batch 20,000 right
    rows of random live keys at the watermark (each pairs with its key's
    left row, and is dropped when the next micro-batch's watermark passes it).
    ``--kernel chain``: that join and, in the same call, each key's highest
    right row (top-N per key, Nexmark q9's shape), whose state grows with
    the keys paired.

``python -m benchmarks.scaling state-spark --keys 10000,10000000``
    The same per-key count through Spark (an embedded session, the stateful
    lowering): the time per micro-batch of 20,000 rows over each number of
    live keys, and the ratio of the largest to the smallest.
``python -m benchmarks.scaling skew``
    Nexmark's bids counted per auction (the stateful lowering): ``krishiv
    state show``'s busiest keys against the auctions with the most bids.

Writes ``benchmarks/results/scaling-<what>.json``; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from krishiv_py._typing import Lowering

SCHEMA = "k string, t bigint, v bigint"
#: A run's result rows and each (re)start's time.
Result = tuple[list[Any], list[float]]
RESULTS = Path(__file__).parent / "results"


def _batches(count: int, size: int, keys: int, seed: int = 3) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    return [
        [
            {"k": f"k{rng.randrange(keys)}", "t": 1_000 * i + rng.randint(0, 2_500), "v": rng.randint(1, 9)}
            for _ in range(size)
        ]
        for i in range(count)
    ]


def rescale(args: argparse.Namespace) -> dict[str, Any]:
    import krishiv_py as kp

    plan = [int(p) for p in args.partitions.split(",")]
    batches = _batches(4 * len(plan), args.rows, args.keys)
    out: dict[str, Any] = {"partitions": plan, "lowerings": {}}
    # A durable profile: RocksDB holds the native lowering's state, which Spark can move.
    with (
        tempfile.TemporaryDirectory() as state,
        kp.Session.embedded(durability="single-node-durable", state_dir=state) as session,
    ):
        spark = session.spark

        def run(lowering: Lowering, steps: list[tuple[int, list[int]]], root: str) -> Result:
            stream, sender = session.memory_stream(SCHEMA)
            checkpoint, sink = f"{root}/cp", f"{root}/out"
            starts = []
            for partitions, indexes in steps:
                spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
                windows = (
                    stream.watermark("t", 1_500)
                    .key_by("k")
                    .tumbling_window(3_000)
                    .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("s"))
                )
                t0 = time.perf_counter()
                job = windows.start(kp.ParquetSink(sink), checkpoint_dir=checkpoint, lowering=lowering)
                starts.append(round(time.perf_counter() - t0, 2))
                try:
                    for i in indexes:
                        sender.send(batches[i])
                        job.process_all_available()
                finally:
                    job.stop()
            rows = spark.read.parquet(sink).toArrow().to_pylist()
            return sorted(tuple(sorted(r.items())) for r in rows), starts

        lowerings: tuple[Lowering, ...] = ("stateful", "native")
        for lowering in lowerings:
            per = len(batches) // len(plan)
            steps = [(p, list(range(i * per, (i + 1) * per))) for i, p in enumerate(plan)]
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                moved, starts = run(lowering, steps, a)
                whole, _ = run(lowering, [(plan[0], list(range(len(batches))))], b)
            out["lowerings"][lowering] = {
                "windows": len(whole),
                "equal": moved == whole,
                "lost": len(set(whole) - set(moved)),
                "extra": len(set(moved) - set(whole)),
                "start_s": starts,
            }
            print(lowering, out["lowerings"][lowering], flush=True)
    out["ok"] = all(v["equal"] for v in out["lowerings"].values())
    return out


def show(args: argparse.Namespace) -> dict[str, Any]:
    import krishiv_py as kp
    from krishiv_py.runtime.state_view import describe_state

    with tempfile.TemporaryDirectory() as root, kp.Session.embedded() as session:
        stream, sender = session.memory_stream(SCHEMA)
        job = (
            stream.watermark("t", 0)
            .key_by("k")
            .agg(kp.count(kp.col("*")).alias("n"))
            .start(checkpoint_dir=f"{root}/cp", lowering="stateful")
        )
        try:
            step = 250_000
            for lo in range(0, args.keys, step):
                sender.send([{"k": f"k{i}", "t": i, "v": 1} for i in range(lo, min(lo + step, args.keys))])
                job.process_all_available()
        finally:
            job.stop()
        t0 = time.perf_counter()
        info = describe_state(f"{root}/cp")
        took = time.perf_counter() - t0
    [operator] = info["operators"]
    print(f"state show on {operator['keys']} keys, {operator['bytes']} bytes: {took:.2f} s", flush=True)
    return {"keys": operator["keys"], "bytes": operator["bytes"], "seconds": round(took, 2), "ok": took <= 10}


def state(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from krishiv_py.names import BATCH_TS, SEQ
    from krishiv_py.stateful.aggregates import AggSpec
    from krishiv_py.stateful.held_state import open_held, open_table, write_state
    from krishiv_py.stateful.joins import SIDE, JoinKernel, JoinSpec
    from krishiv_py.stateful.keyed_agg import KeyedAggKernel
    from krishiv_py.stateful.protocol import Kernel
    from krishiv_py.stateful.versioned import VersionedBlobs

    join = args.kernel in ("join", "chain")
    kernel: Kernel = KeyedAggKernel(
        keys=("k",),
        aggs=(
            AggSpec(name="n", func="count", column=None, out_type=pa.int64()),
            AggSpec(name="s", func="sum", column="v", out_type=pa.int64(), in_type=pa.int64()),
        ),
    )
    if join:
        kernel = JoinKernel(
            JoinSpec(
                kind="interval",
                how="inner",
                keys=("k",),
                left=("a",),
                right=("b",),
                key_types=(pa.int64(),),
                left_types=(pa.int64(),),
                right_types=(pa.int64(),),
                between=(0, 3_600_000),
            )
        )
    if args.kernel == "chain":
        from krishiv_py.stateful.chain import ChainKernel
        from krishiv_py.stateful.keyed_topn import KeyedTopNKernel

        best = KeyedTopNKernel(keys=("k",), n=1, by=("b",), columns=("k", "a", "b"), ties="first")
        columns = (("k", pa.int64()), ("a", pa.int64()), ("b", pa.int64()))
        kernel = ChainKernel(first=kernel, then=best, columns=columns)
    rng = np.random.default_rng(7)
    seq = 0

    def rows(keys: np.ndarray, at_ms: int = 1_000, side: str = "right") -> pa.Table:
        nonlocal seq
        n = len(keys)
        seq += n
        ones, nothing = pa.array(np.ones(n, np.int64)), pa.nulls(n, pa.int64())
        values: dict[str, pa.Array[Any]] = {"v": ones}
        if join:
            a, b = (ones, nothing) if side == "left" else (nothing, ones)
            values = {SIDE: pa.array([side] * n), "a": a, "b": b}
        return pa.table(
            {
                "k": pa.array(keys),
                **values,
                BATCH_TS: pa.array(np.full(n, at_ms * 1000, np.int64)),
                SEQ: pa.array(np.arange(seq - n, seq, dtype=np.int64)),
            }
        )

    def run(live: int, keyed: bool, batches: int) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as root:
            blobs = VersionedBlobs(root, 0)
            first, _ = kernel.step(None, rows(np.arange(live, dtype=np.int64), 0, "left"), None, 0)
            held = open_table(kernel, first, fresh=True)
            if not keyed:
                from krishiv_py.stateful.held_state import WholeState

                held = WholeState(kernel, first, fresh=True)
            write_state(held, blobs, 0)
            times, written = [], []
            for batch_id in range(1, batches + 1):
                watermark = 1_000 + batch_id if join else 1_000  # (a join drops the last batch's rows)
                batch = rows(rng.integers(0, live, args.rows), watermark)
                t0 = time.perf_counter()
                if keyed:
                    held = open_held(kernel, blobs, batch_id)  # this worker's own: no file read
                new, _ = kernel.step(held.take(batch, None, watermark), batch, watermark, 0)
                held.put(new)
                written.append(write_state(held, blobs, batch_id))
                times.append(time.perf_counter() - t0)
        ms = np.asarray(times) * 1000
        return {
            "live_keys": live,
            "layout": "chosen" if keyed else "whole",
            "batches": batches,
            "median_ms": round(float(np.median(ms)), 1),
            "p95_ms": round(float(np.percentile(ms, 95)), 1),
            "max_ms": round(float(ms.max()), 1),
            "mean_ms": round(float(ms.mean()), 1),
            "bytes_per_batch": int(np.mean(written)),
            "largest_write": int(max(written)),
        }

    sizes = [int(x) for x in args.keys.split(",")]
    found: list[dict[str, Any]] = []
    for live in sizes:
        for keyed in (True, False):
            batches = args.batches if keyed else max(3, args.batches // 10)
            found.append(run(live, keyed, batches))
            r = found[-1]
            print(
                f"{live:>11,} live keys, {r['layout']:5}: median {r['median_ms']} ms, "
                f"mean {r['mean_ms']} ms, max {r['max_ms']} ms; "
                f"{r['bytes_per_batch']:,} bytes written per micro-batch",
                flush=True,
            )
    small, large = (
        next(r for r in found if r["live_keys"] == n and r["layout"] == "chosen")
        for n in (sizes[0], sizes[-1])
    )
    ratio = large["mean_ms"] / small["mean_ms"]
    print(
        f"keyed: {sizes[-1]:,} keys ÷ {sizes[0]:,} keys per micro-batch (mean) = {ratio:.2f} (target ≤ 1.5)"
    )
    return {
        "kernel": args.kernel,
        "rows_per_batch": args.rows,
        "runs": found,
        "ratio": round(ratio, 2),
        "ok": ratio <= 1.5,
    }


def state_spark(args: argparse.Namespace) -> dict[str, Any]:
    """The cost per micro-batch through Spark of an updating per-key count over many live keys:
    an embedded session, the stateful lowering, the keys loaded in micro-batches of 1,000,000, then
    ``--batches`` micro-batches of ``--rows`` random live keys (the first 3 not counted); a first,
    untimed run of the smallest count warms the process."""
    import numpy as np
    import pyarrow as pa

    import krishiv_py as kp

    rng = np.random.default_rng(5)
    runs: list[dict[str, Any]] = []
    sizes = [int(x) for x in args.keys.split(",")]
    for warm_up, live in [(True, sizes[0])] + [(False, n) for n in sizes]:  # (a process's first run is cold)
        with tempfile.TemporaryDirectory() as root, kp.Session.embedded() as session:
            stream, sender = session.memory_stream("k bigint, t bigint, v bigint")
            job = (
                stream.watermark("t", 0)
                .key_by("k")
                .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("s"))
                .start(checkpoint_dir=f"{root}/cp", lowering="stateful")
            )

            def send(keys: np.ndarray, t: int, sender: Any = sender, job: Any = job) -> None:
                n = len(keys)
                columns = {"k": keys, "t": np.full(n, t, np.int64), "v": np.ones(n, np.int64)}
                sender.send(pa.table({name: pa.array(values) for name, values in columns.items()}))
                job.process_all_available()

            try:
                for lo in range(0, live, 1_000_000):
                    send(np.arange(lo, min(lo + 1_000_000, live), dtype=np.int64), 1_000)
                times = []
                for i in range(args.batches):
                    t0 = time.perf_counter()
                    send(rng.integers(0, live, args.rows), 2_000 + i)
                    times.append(time.perf_counter() - t0)
            finally:
                job.stop()
        if warm_up:
            continue
        ms = np.asarray(times[3:]) * 1000
        runs.append(
            {"live_keys": live, "median_ms": round(float(np.median(ms))), "mean_ms": round(float(ms.mean()))}
        )
        print(
            f"{live:>11,} live keys: per micro-batch median {runs[-1]['median_ms']} ms, "
            f"mean {runs[-1]['mean_ms']} ms",
            flush=True,
        )
    ratio = runs[-1]["mean_ms"] / runs[0]["mean_ms"]
    print(
        f"{runs[-1]['live_keys']:,} keys ÷ {runs[0]['live_keys']:,} keys (mean) = {ratio:.2f} (target ≤ 1.5)"
    )
    return {"rows_per_batch": args.rows, "runs": runs, "ratio": round(ratio, 2), "ok": ratio <= 1.5}


def skew(args: argparse.Namespace) -> dict[str, Any]:
    """Nexmark's bids (hot auctions: half the bids go to every hundredth auction) counted per
    auction, as q17 and q5 group them (the stateful lowering); ``krishiv state show``'s busiest
    keys against the auctions with the most bids in the data."""
    from collections import Counter

    import numpy as np
    import pyarrow as pa

    import krishiv_py as kp
    from benchmarks.data import NexmarkSpec, nexmark_tables
    from krishiv_py.runtime.state_view import describe_state

    bids = nexmark_tables(NexmarkSpec(events=args.events))["bid"]
    auctions = bids.column("auction").to_numpy()
    ms = bids.column("date_time").cast(pa.int64()).to_numpy() // 1000
    truth = Counter(auctions.tolist()).most_common(args.top)
    with tempfile.TemporaryDirectory() as root, kp.Session.embedded() as session:
        stream, sender = session.memory_stream("auction bigint, t bigint")
        job = (
            stream.watermark("t", 5_000)
            .key_by("auction")
            .agg(kp.count(kp.col("*")).alias("bids"))
            .start(checkpoint_dir=f"{root}/cp", lowering="stateful")
        )
        try:
            step = max(1, len(auctions) // args.batches)
            for lo in range(0, len(auctions), step):
                part = {"auction": pa.array(auctions[lo : lo + step]), "t": pa.array(ms[lo : lo + step])}
                sender.send(pa.table(part))
                job.process_all_available()
        finally:
            job.stop()
        [operator] = describe_state(f"{root}/cp")["operators"]
    named = [int(h["key"]) for h in operator["hottest_keys"][: args.top]]
    counts = Counter(auctions.tolist())
    median = float(np.median(list(counts.values())))
    # Nexmark's hot auctions (every hundredth, half the bids) tie with each other: a named key is
    # right when it is one of them, at least half the bids of the busiest auction.
    hot = [a for a in named if counts[a] >= truth[0][1] / 2]
    print(f"the {args.top} auctions with the most bids: {truth} (median auction: {median:g} bids)")
    print(f"krishiv state show's busiest keys: {[(a, counts[a]) for a in named]} (true bids)")
    print(
        f"{len(hot)} of {len(named)} named are hot auctions; "
        f"the busiest named first: {named[:1] == [truth[0][0]]}"
    )
    return {
        "bids": len(auctions),
        "truth": truth,
        "named": operator["hottest_keys"],
        "named_true_bids": [counts[a] for a in named],
        "median_bids": median,
        "ok": len(hot) == len(named) == args.top and named[0] == truth[0][0],
    }


def tasks(args: argparse.Namespace) -> dict[str, Any]:
    import krishiv_py as kp
    from krishiv_py.devtools import LocalCluster

    port = 4077
    conf = {
        "spark.sql.shuffle.partitions": str(args.partitions),
        "spark.ui.enabled": "true",
        "spark.ui.port": str(port),
    }
    batches = _batches(args.batches, args.rows, args.keys)
    with (
        LocalCluster(workers=2, cores_per_worker=4, memory="1g") as cluster,
        tempfile.TemporaryDirectory() as root,
        kp.Session.connect(cluster.master_url, spark_conf=conf) as session,
    ):
        stream, sender = session.memory_stream(SCHEMA)
        job = (
            stream.watermark("t", 1_500)
            .key_by("k")
            .tumbling_window(3_000)
            .agg(kp.count(kp.col("*")).alias("n"))
            .start(checkpoint_dir=f"{root}/cp", lowering="stateful")
        )
        try:
            for batch in batches:
                sender.send(batch)
                job.process_all_available()
        finally:
            job.stop()
        stages = _operator_stages(f"http://127.0.0.1:{port}/api/v1", args.partitions)
    if not stages:
        return {"ok": False, "error": "no stage with one task per partition"}
    busiest = max(stages, key=lambda s: sum(s["bytes"]))
    mean = sum(busiest["bytes"]) / len(busiest["bytes"])
    spread = max(busiest["bytes"]) / mean if mean else 0.0
    concurrent = max(s["concurrent"] for s in stages)
    print(
        f"{len(stages)} operator stages of {args.partitions} tasks; at most {concurrent} at once; "
        f"largest task's shuffle read {spread:.2f}x the mean (busiest stage)",
        flush=True,
    )
    return {
        "partitions": args.partitions,
        "stages": len(stages),
        "max_concurrent": concurrent,
        "load_max_over_mean": round(spread, 3),
        "ok": concurrent == args.partitions and spread <= 1.3,
    }


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _operator_stages(api: str, partitions: int) -> list[dict[str, Any]]:
    """Completed stages that ran one task per partition with a shuffle read: the operator's."""
    [app] = _get(f"{api}/applications")
    found = []
    for stage in _get(f"{api}/applications/{app['id']}/stages?status=complete"):
        if stage["numTasks"] != partitions or not stage.get("shuffleReadBytes"):
            continue
        listed = _get(
            f"{api}/applications/{app['id']}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=10000"
        )
        spans = []
        for task in listed:
            start = time.mktime(time.strptime(task["launchTime"][:19], "%Y-%m-%dT%H:%M:%S"))
            start += int(task["launchTime"][20:23]) / 1000
            spans.append((start, start + task.get("duration", 0) / 1000))
        concurrent = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        read = [
            t["taskMetrics"]["shuffleReadMetrics"]["remoteBytesRead"]
            + t["taskMetrics"]["shuffleReadMetrics"]["localBytesRead"]
            for t in listed
        ]
        found.append({"stage": stage["stageId"], "concurrent": concurrent, "bytes": read})
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rescale")
    r.add_argument("--partitions", default="2,5,3,2")
    r.add_argument("--rows", type=int, default=500)
    r.add_argument("--keys", type=int, default=2_000)
    s = sub.add_parser("show")
    s.add_argument("--keys", type=int, default=1_000_000)
    c = sub.add_parser("state")
    c.add_argument("--keys", default="10000,10000000")
    c.add_argument("--rows", type=int, default=20_000)
    c.add_argument("--batches", type=int, default=60)
    c.add_argument("--kernel", choices=("count", "join", "chain"), default="count")
    sp = sub.add_parser("state-spark")
    sp.add_argument("--keys", default="10000,10000000")
    sp.add_argument("--rows", type=int, default=20_000)
    sp.add_argument("--batches", type=int, default=20)
    k = sub.add_parser("skew")
    k.add_argument("--events", type=int, default=400_000)
    k.add_argument("--batches", type=int, default=8)
    k.add_argument("--top", type=int, default=5)
    t = sub.add_parser("tasks")
    t.add_argument("--partitions", type=int, default=8)
    t.add_argument("--batches", type=int, default=6)
    t.add_argument("--rows", type=int, default=100_000)
    t.add_argument("--keys", type=int, default=50_000)
    a = p.parse_args(argv)
    commands = {"rescale": rescale, "show": show, "skew": skew, "state": state, "state-spark": state_spark}
    result = {**commands, "tasks": tasks}[a.what](a)
    RESULTS.mkdir(exist_ok=True)
    name = a.what if getattr(a, "kernel", "count") == "count" else f"{a.what}-{a.kernel}"
    (RESULTS / f"scaling-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
