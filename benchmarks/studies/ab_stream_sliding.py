"""Streaming sliding windows: pane partials vs Spark's window() over the events, alternated.

    python -m benchmarks.studies.ab_stream_sliding sliding sliding-10m

For each query: 5 rounds of the native streaming query on its 1 M-event
dataset (one file per micro-batch), with and without the pane step
(alternating, the order swapped every round), the first round dropped;
prints the median seconds of each and the speed-up. Both must return the
same rows.
"""

from __future__ import annotations

import statistics
import sys
import time

import krishiv_py as kp
from benchmarks import data
from benchmarks.arrow import rows_of
from benchmarks.digest import digest
from benchmarks.queries import QUERIES
from benchmarks.spark_runner import run_krishiv_streaming
from krishiv_py.planner.spark import sliding


def main(queries: list[str]) -> None:
    clicks = data.clickstream(data.ClickstreamSpec(events=1_000_000, files=20))
    with kp.Session.embedded(progress=False) as session:
        for name in queries:
            query = QUERIES[name]
            path = clicks.table_dir(query.table)
            times: dict[str, list[float]] = {"panes": [], "window()": []}
            digests: dict[str, tuple[int, str]] = {}
            for rnd in range(5):
                for mode in ("panes", "window()") if rnd % 2 == 0 else ("window()", "panes"):
                    sliding.MIN_STREAM_COPIES = 2 if mode == "panes" else 10**9
                    t0 = time.perf_counter()
                    out = run_krishiv_streaming(session, query, path, "native")
                    if rnd:
                        times[mode].append(time.perf_counter() - t0)
                    digests[mode] = digest(rows_of(query.columns)(out))
            med = {m: statistics.median(v) for m, v in times.items()}
            assert digests["panes"] == digests["window()"], digests
            speed_up = med["window()"] / med["panes"]
            print(name, {m: round(v, 3) for m, v in med.items()}, f"speed-up {speed_up:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["sliding", "sliding-10m"])
