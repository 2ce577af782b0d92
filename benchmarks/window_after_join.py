"""What a window after a join costs: the join alone against the join with a window after it.

    PYTHONPATH=. python benchmarks/window_after_join.py [--events 400000] [--files 10] [--rounds 3]

Clicks and views of ``--events`` rows in all (a tenth of them views), over
5,000 users, one file per micro-batch on each side, up to 2 s of disorder;
an inner interval join of each click with the views of its user in the 5 s
before it, with 10 s of allowed lateness (so both runners take the stateful
lowering). Runners, each timed ``--rounds`` times after a warm-up,
alternating:

``join``
    The joined rows, written to the memory sink.
``join+window``
    The same join with a one-minute tumbling window per user after it,
    counting the pairs: both kernels run in the same operator call.
``join+window by campaign``
    The same join with a one-minute tumbling window per campaign (a column
    of the views, 100 values): keyed by other columns than the join's, the
    window is a stage of its own, its rows moved to its key buckets.

``--retracting``: the join is a left join in ``accumulation("retracting")``
(a click's padded row, emitted once the watermark passes it, is retracted
when a view of it comes within the allowed lateness), and both windows
retract too: windows over retractions, which hold their open windows' rows.

Prints the median seconds of each and the ratios to the join alone; the
target is at most 1.3 (the chain must not double the per-micro-batch cost).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import krishiv_py as kp

USERS = 5_000
SPAN_MS = 20 * 60_000


def write_files(root: str, events: int, files: int, seed: int = 7) -> tuple[str, str]:
    """Clicks and views in ``files`` files each, in event-time order but for up to 2 s of disorder."""
    rng = np.random.default_rng(seed)
    out = []
    for name, count, value in (("clicks", events - events // 10, "click"), ("views", events // 10, "ad")):
        ts = np.sort(rng.integers(0, SPAN_MS, count)) + rng.integers(-2_000, 0, count)
        users = rng.integers(0, USERS, count).astype(str)
        table = pa.table(
            {
                "user_id": pa.array(np.char.add("u", users)),
                "t": pa.array(ts, pa.int64()),
                value: pa.array(np.arange(count).astype(str)),
                f"{value}_group": pa.array(np.char.add("c", (np.arange(count) % 100).astype(str))),
            }
        )
        path = os.path.join(root, name)
        os.makedirs(path)
        for i, part in enumerate(np.array_split(np.arange(count), files)):
            pq.write_table(table.take(part), os.path.join(path, f"part-{i:04d}.parquet"))
        out.append(path)
    return out[0], out[1]


def pipelines(
    session: kp.Session, clicks: str, views: str, *, retracting: bool = False
) -> dict[str, kp.Stream]:
    left = session.read_parquet(clicks, streaming=True, max_files_per_trigger=1).watermark("t", 2_000)
    right = session.read_parquet(views, streaming=True, max_files_per_trigger=1).watermark("t", 2_000)
    how: Literal["inner", "left"] = "left" if retracting else "inner"
    joined = (
        left.key_by("user_id")
        .interval_join(right.key_by("user_id"), between=(-5_000, 0), how=how)
        .allowed_lateness(10_000)
    )
    pairs = kp.count(kp.col("*")).alias("pairs")
    by_user = joined.key_by("user_id").tumbling_window(60_000)
    by_campaign = joined.key_by("ad_group").tumbling_window(60_000)
    if retracting:
        joined = joined.accumulation("retracting")
        by_user = joined.key_by("user_id").tumbling_window(60_000).accumulation("retracting")
        by_campaign = joined.key_by("ad_group").tumbling_window(60_000).accumulation("retracting")
    counted, staged = by_user.agg(pairs), by_campaign.agg(pairs)
    return {"join": joined, "join+window": counted, "join+window by campaign": staged}


def run(stream: kp.Stream) -> int:
    job = stream.start()
    try:
        job.process_all_available()
    finally:
        job.stop()
    return job.results().num_rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--retracting", action="store_true", help="a left join and windows that retract")
    a = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="krishiv-bench-")
    clicks, views = write_files(root, a.events, a.files)
    times: dict[str, list[float]] = {"join": [], "join+window": [], "join+window by campaign": []}
    rows: dict[str, int] = {}
    with kp.Session.embedded(progress=False) as session:
        for rnd in range(a.rounds + 1):
            order = list(times) if rnd % 2 == 0 else list(reversed(times))
            for runner in order:
                stream = pipelines(session, clicks, views, retracting=a.retracting)[runner]
                t0 = time.perf_counter()
                rows[runner] = run(stream)
                if rnd:  # the first round warms up
                    times[runner].append(time.perf_counter() - t0)
    med = {r: statistics.median(t) for r, t in times.items()}
    for r, m in med.items():
        print(f"{r:24s} {m:6.2f} s (median of {a.rounds}), {rows[r]} rows")
    for r in list(med)[1:]:
        print(f"{r} / join = {med[r] / med['join']:.2f} (target <= 1.3)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
