"""Bounded sliding windows: pane aggregates vs Spark's window(), alternated in one process.

    python -m benchmarks.studies.ab_sliding sliding sliding-10m

For each query: 5 rounds of ``collect()`` on its 1 M-event dataset, the
two plans alternating (and swapping order every round), the first round
dropped; prints the median seconds of each and the speed-up. Both plans
must return the same number of rows.
"""

from __future__ import annotations

import statistics
import sys
import time

import krishiv_py as kp
from benchmarks import data
from benchmarks.queries import QUERIES
from benchmarks.spark_runner import krishiv_query
from krishiv_py.planner.spark import sliding


def main(queries: list[str]) -> None:
    datasets = {
        "clickstream": data.clickstream(data.ClickstreamSpec(events=1_000_000, files=20)),
        "nexmark": data.nexmark(data.NexmarkSpec(events=1_000_000, files=20)),
    }
    with kp.Session.embedded(progress=False) as session:
        for name in queries:
            query = QUERIES[name]
            path = datasets[query.dataset].table_dir(query.table)
            times: dict[str, list[float]] = {"panes": [], "window()": []}
            rows: dict[str, int] = {}
            for rnd in range(5):
                for mode in ("panes", "window()") if rnd % 2 == 0 else ("window()", "panes"):
                    sliding.MIN_COPIES = 2 if mode == "panes" else 10**9
                    t0 = time.perf_counter()
                    out = krishiv_query(query, session.read_parquet(path)).collect()
                    if rnd:
                        times[mode].append(time.perf_counter() - t0)
                    rows[mode] = out.num_rows
            med = {m: statistics.median(v) for m, v in times.items()}
            assert rows["panes"] == rows["window()"], rows
            speed_up = med["window()"] / med["panes"]
            print(name, {m: round(v, 3) for m, v in med.items()}, f"speed-up {speed_up:.2f}", rows)


if __name__ == "__main__":
    main(sys.argv[1:] or ["sliding", "sliding-10m"])
