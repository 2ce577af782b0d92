"""What an operator call costs per send, without Spark: q4's join and maximum, q16's counts.

The sustainable harness's q4 (:mod:`benchmarks.sustain_queries`) runs its
join of auctions and bids and the updating maximum per auction in one call
of krishiv's operator (a :class:`~krishiv_py.stateful.chain.ChainKernel`);
its q16 counts bids, bidders and auctions per channel and day, eight of the
counts distinct (a :class:`~krishiv_py.stateful.keyed_agg.KeyedAggKernel`).
This drives ``--query``'s kernel as the operator does, in one process: the
harness's sends at ``--rate`` events/s, two sends a micro-batch, each
micro-batch's rows split over 16 key buckets, each bucket stepped at the
watermark the micro-batch before left, then, as the operator fires ahead,
stepped again at the watermark its own rows make (when something is due
there), and its next due time read as the job reads it. The rows come as
Spark hands them over (q16's day, minute and per-rank columns computed as
its projection computes them). The figure is the CPU time of that work per
send (the median of ``--rounds`` runs; the operator's ``kernel`` timing in
the harness's records). Every run's results are checked to be the same
rows in the same order (a digest).

``--tree DIR`` runs another checkout's kernels too, taking turns, for an
A/B on one machine::

    git worktree add /tmp/before <commit>
    python -m benchmarks.studies.operator_calls --query nexmark-q4 --tree /tmp/before --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

BUCKETS = 16
SENDS_PER_BATCH = 2
#: Where each table's columns go in the operator's rows (its join's sides: left, right).
LAYOUT = {
    "auction": ("left", {c: c for c in ("id", "category", "event_time", "expires")}),
    "bid": (
        "right",
        {"id": "auction", "price": "price", "event_time_right": "event_time", "bidder": "bidder"}
        | {"sent": "sent"},
    ),
}


def run(query: str, rate: int, sends: int, seed: int = 1) -> dict[str, Any]:
    """One run in this process: CPU seconds in the operator's kernel work, and the results' digest."""
    from benchmarks.sustain_queries import LAG_MS, Q9_TABLES, Workload
    from krishiv_py.api.stream import placeholder
    from krishiv_py.names import BATCH_TS, JOIN_SIDE, SEQ
    from krishiv_py.planner.spark.lower import lower
    from krishiv_py.planner.spark.stateful import with_buckets
    from krishiv_py.stateful.grouping import group_ids
    from krishiv_py.stateful.held_state import WholeState
    from krishiv_py.stateful.protocol import EVERY_STEP

    work = Workload(query)
    if query == "nexmark-q4":
        plan = work.krishiv_tables({name: placeholder(ddl, name) for name, ddl in Q9_TABLES.items()}).plan
    else:
        plan = work.krishiv(placeholder(work.ddl, "bid")).plan
    apply = with_buckets(lower(plan, lowering="stateful"), BUCKETS).stateful
    assert apply is not None
    spec = apply.operator
    kernel = spec.kernel
    seq = 0

    def encoded(name: str, table: pa.Table) -> pa.Table:
        nonlocal seq
        n = table.num_rows
        cols: dict[str, Any] = {}
        if query == "nexmark-q4":
            side, own = LAYOUT[name]
            for c in spec.columns:
                kind = c.type
                if c.name == JOIN_SIDE:
                    cols[c.name] = pa.array([side] * n, pa.string())
                else:
                    cols[c.name] = (
                        table.column(own[c.name]).cast(kind) if c.name in own else pa.nulls(n, kind)
                    )
            cols[BATCH_TS] = table.column("event_time").cast(pa.int64())
        else:
            every = _q16_columns(table)
            cols = {c.name: every[c.name] for c in spec.columns}
            cols[BATCH_TS] = table.column("date_time").cast(pa.int64())
        cols[SEQ] = pa.array(np.arange(seq, seq + n), pa.int64())
        seq += n
        return pa.table(cols)

    rng = np.random.default_rng(seed)
    states: list[pa.Table | None] = [None] * BUCKETS
    watermark: int | None = None
    highest = 0
    cpu = 0.0
    emitted = 0
    digest = hashlib.sha1()
    pending: list[pa.Table] = []
    base = 1_700_000_000_000
    for i in range(sends):
        now = base + i * 1000
        sent, _ = work.emit(work.draw(rng, rate), now)
        tables = sent if isinstance(sent, dict) else {"bid": sent}
        fresh = [encoded(name, tables[name]) for name in ("auction", "bid") if name in tables]
        pending += fresh
        highest = max(highest, *(pc.max(t.column(BATCH_TS)).as_py() // 1000 for t in fresh))
        if (i + 1) % SENDS_PER_BATCH:
            continue
        batch, pending = pa.concat_tables(pending), []
        if query == "nexmark-q4":
            bucket = batch.column("id").to_numpy() % BUCKETS
        else:  # (any split by the key: channel and day)
            ids, _, _ = group_ids([batch.column(c).combine_chunks() for c in ("channel", "day")])
            bucket = ids % BUCKETS
        fire = highest - LAG_MS
        for b in range(BUCKETS):
            rows = batch.filter(pa.array(bucket == b))
            if not rows.num_rows:
                continue
            started = time.process_time()
            states[b], out = kernel.step(states[b], rows, watermark, now)
            held = WholeState(kernel, states[b])
            fired = None
            if EVERY_STEP < held.next_due()[0] <= fire:
                stepped, fired = kernel.step(states[b], rows.slice(0, 0), fire, now)
                states[b] = stepped
                held.put(stepped)
            held.next_due()
            cpu += time.process_time() - started
            for result in (out.results, *([] if fired is None else [fired.results])):
                hashes = pd.util.hash_pandas_object(result.to_pandas(), index=False).to_numpy()
                digest.update(hashes.tobytes())
                emitted += result.num_rows
        watermark = fire
    return {
        "cpu_s": cpu,
        "ms_per_send": round(cpu / sends * 1000, 1),
        "rows": emitted,
        "digest": digest.hexdigest(),
    }


def _q16_columns(bids: pa.Table) -> dict[str, pa.Array[Any] | pa.ChunkedArray[Any]]:
    """q16's columns as its projection gives them: the day, the minute, and per price rank the
    bid (1 or null), its bidder and its auction (null outside the rank)."""
    price = bids.column("price").to_numpy()
    at = bids.column("date_time")
    out: dict[str, pa.Array[Any] | pa.ChunkedArray[Any]] = {
        c: bids.column(c) for c in ("auction", "bidder", "channel")
    }
    out["day"], out["hm"] = pc.strftime(at, "%Y-%m-%d"), pc.strftime(at, "%H:%M")
    ranks = (price < 10_000, (price >= 10_000) & (price < 1_000_000), price >= 1_000_000)
    for i, inside in enumerate(ranks, 1):
        out[f"rank{i}_bids_filtered"] = pa.array(np.ones(len(price), np.int32), mask=~inside)
        for column, name in (("bidder", "bidders"), ("auction", "auctions")):
            out[f"rank{i}_{name}_filtered"] = pa.array(bids.column(column).to_numpy(), mask=~inside)
    return out


def _in(tree: str | None, query: str, rate: int, sends: int) -> dict[str, Any]:
    """:func:`run` in a fresh process, on ``tree``'s ``krishiv_py`` (None: this checkout's)."""
    root = os.path.abspath(tree if tree is not None else os.getcwd())
    # This file's run() over the tree's packages (its harness and krishiv_py, first on the path).
    code = (
        f"import json, runpy, sys; sys.path.insert(0, {root!r}); "
        f"run = runpy.run_path({os.path.abspath(__file__)!r})['run']; "
        f"print(json.dumps(run({query!r}, {rate}, {sends})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    record: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--query", choices=("nexmark-q4", "nexmark-q16"), default="nexmark-q4")
    parser.add_argument("--rate", type=int, default=100_000, help="events per send (a send a second)")
    parser.add_argument("--sends", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", help="another checkout, run in turn with this one")
    a = parser.parse_args(argv)
    trees = {"this": None, **({"tree": a.tree} if a.tree else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(a.rounds):
        for name, tree in trees.items():
            record = _in(tree, a.query, a.rate, a.sends)
            runs[name].append(record)
            print(f"{name}: {record['ms_per_send']} ms per send", flush=True)
    digests = {r["digest"] for records in runs.values() for r in records}
    for name, records in runs.items():
        median = statistics.median(r["ms_per_send"] for r in records)
        print(f"{name}: median {median} ms of kernel CPU per send of {a.rate:,} events")
    print("same results in every run" if len(digests) == 1 else f"RESULTS DIFFER: {sorted(digests)}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
