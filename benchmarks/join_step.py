"""One task's join kernel per micro-batch, no Spark: Nexmark q8's window join as the harness feeds it.

``python -m benchmarks.join_step --rows 11000 --batches 30``
    A semi join of persons (keyed by id) with auctions (keyed by seller) in
    2 s tumbling windows, as :mod:`benchmarks.sustain_queries` runs q8: each
    micro-batch ``--rows`` new persons, each opening one auction at its own
    event time, over 2.2 s of event time (a micro-batch of the harness at
    160,000 events/s on 2 cores, split over 16 buckets), the watermark 0.5 s
    behind the newest row. The kernel holds the rows of the windows the
    watermark has not passed (about two micro-batches'). Prints the median
    and 95th percentile of the step's time (one core), the first third of
    the micro-batches not counted; ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import pyarrow as pa

from krishiv_py.api.stream import placeholder
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.stateful import join_spec
from krishiv_py.stateful.joins import SIDE
from krishiv_py.stateful.protocol import Kernel

WINDOW_MS = 2_000
LAG_MS = 500
STEP_MS = 2_200


def window_join() -> Kernel:
    """q8's kernel, as the planner builds it."""
    persons = placeholder("id bigint, t bigint", "person").watermark("t", LAG_MS)
    sellers = placeholder("seller bigint, t bigint", "auction").watermark("t", LAG_MS)
    joined = (
        persons.key_by("id")
        .tumbling_window(WINDOW_MS)
        .join(sellers.key_by("seller").tumbling_window(WINDOW_MS), how="semi")
    )
    assert isinstance(joined.plan, n.Join)
    kernel: Kernel = join_spec(joined.plan, shift_ms=0).kernel
    return kernel


def batch_of(kernel: Any, i: int, rows: int, rng: np.random.Generator) -> pa.Table:
    """Micro-batch ``i``: ``rows`` persons and their auctions, both sides as the operator gets them."""
    spec = kernel.spec
    ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
    t_us = (i * STEP_MS + np.sort(rng.integers(0, STEP_MS, rows))) * 1000
    columns: dict[str, Any] = {}
    for field in spec.row_schema:
        if field.name == SIDE:
            columns[field.name] = pa.array(["left"] * rows + ["right"] * rows)
        elif field.name in spec.keys:
            columns[field.name] = pa.array(np.concatenate([ids, ids]))
        else:
            columns[field.name] = pa.nulls(2 * rows, field.type)
    seq = np.arange(2 * i * rows, 2 * (i + 1) * rows, dtype=np.int64)
    return (
        pa.table(columns)
        .append_column(BATCH_TS, pa.array(np.concatenate([t_us, t_us])))
        .append_column(SEQ, pa.array(seq))
    )


def measure(rows: int, batches: int, seed: int = 1) -> dict[str, Any]:
    kernel = window_join()
    rng = np.random.default_rng(seed)
    state: pa.Table | None = None
    times: list[float] = []
    emitted = 0
    for i in range(batches):
        batch = batch_of(kernel, i, rows, rng)
        watermark = i * STEP_MS - LAG_MS if i else None
        started = time.perf_counter()
        state, out = kernel.step(state, batch, watermark, 0)
        times.append(time.perf_counter() - started)
        emitted += out.results.num_rows
    counted = np.asarray(times[batches // 3 :]) * 1000
    assert state is not None
    return {
        "query": "nexmark-q8 window join",
        "rows_per_side": rows,
        "batches": batches,
        "held_rows": state.num_rows,
        "emitted": emitted,
        "median_ms": round(float(np.median(counted)), 1),
        "p95_ms": round(float(np.percentile(counted, 95)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=11_000, help="new persons (and auctions) per micro-batch")
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    found = measure(a.rows, a.batches)
    print(
        f"{found['query']}: {a.rows:,} rows a side per micro-batch, {found['held_rows']:,} held: "
        f"median {found['median_ms']} ms, p95 {found['p95_ms']} ms a step"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(found, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
