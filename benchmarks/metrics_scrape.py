"""What a scraped Prometheus endpoint costs a job: the same job with and without one, one run.

    PYTHONPATH=. python benchmarks/metrics_scrape.py [--events 1000000] [--files 20] [--rounds 3]
        [--lowering native]
    nox -s metrics_bench

The clickstream dataset (``--events`` events in ``--files`` Parquet files)
is read as a streaming directory, one file per micro-batch, by the per-user
1-minute tumbling count and sum (lag 5 s), on the native and on the stateful
lowering. Each job runs plain, and with ``job.serve_metrics()`` scraped over
HTTP every ``--interval`` seconds (1 s: a Prometheus scrape interval well
under the usual 15 s) by a thread of this process, as Prometheus would; the
two alternate, ``--rounds`` times after one warm-up round. Prints the median
seconds of each and the ratio plain ÷ scraped (the target: ≥ 0.98, the
scraping costs at most 2 % of the throughput), and checks that both give the
same windows and that every scrape answered.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from typing import Any

import krishiv_py as kp
from benchmarks import data
from benchmarks.queries import WATERMARK_LAG_MS

LOWERINGS = ("native", "stateful")
TARGET = 0.98


def query(source: kp.Stream) -> kp.Stream:
    return (
        source.watermark("event_time", WATERMARK_LAG_MS)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")))
    )


class Scraper:
    """Scrapes ``url`` every ``interval`` seconds until :meth:`stop`; counts the answers."""

    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.scrapes = self.failures = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    r.read()
                self.scrapes += 1
            except OSError:
                self.failures += 1
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def run(
    session: kp.Session, path: str, lowering: str, interval: float | None
) -> tuple[float, list[tuple[Any, ...]], int]:
    """Seconds from start to the last micro-batch; the windows; scrapes answered (-1: one failed)."""
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    t0 = time.perf_counter()
    job = query(source).start(lowering=lowering)  # type: ignore[arg-type]
    scraper = None if interval is None else Scraper(job.serve_metrics(), interval)
    job.process_all_available()
    elapsed = time.perf_counter() - t0
    scrapes = 0
    if scraper is not None:
        scraper.stop()
        scrapes = -1 if scraper.failures else scraper.scrapes
    rows = sorted(tuple(r.values()) for r in job.results().to_pylist())
    job.stop()
    return elapsed, rows, scrapes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two scrapes")
    p.add_argument("--lowering", action="append", choices=LOWERINGS, help="only this lowering (repeatable)")
    p.add_argument("--json", help="write the figures to this file")
    a = p.parse_args(argv)
    clicks = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
    path = clicks.table_dir("events")
    ok = True
    report: dict[str, Any] = {
        "events": a.events,
        "files": a.files,
        "rounds": a.rounds,
        "interval_s": a.interval,
    }
    with kp.Session.embedded(progress=False) as session:
        for lowering in a.lowering or LOWERINGS:
            times: dict[str, list[float]] = {"plain": [], "scraped": []}
            rows: dict[str, list[tuple[Any, ...]]] = {}
            scrapes: list[int] = []
            for rnd in range(a.rounds + 1):
                order = ("plain", "scraped") if rnd % 2 else ("scraped", "plain")
                for kind in order:
                    elapsed, rows[kind], n = run(
                        session, path, lowering, a.interval if kind == "scraped" else None
                    )
                    if kind == "scraped":
                        scrapes.append(n)
                    if rnd:  # the first round warms up
                        times[kind].append(elapsed)
            medians = {k: statistics.median(v) for k, v in times.items()}
            ratio = medians["plain"] / medians["scraped"]
            same = rows["plain"] == rows["scraped"]
            answered = min(scrapes) > 0
            ok &= same and answered
            met = "met" if ratio >= TARGET else "NOT met"
            print(
                f"{lowering:8} plain {medians['plain']:6.2f} s  scraped {medians['scraped']:6.2f} s  "
                f"plain / scraped = {ratio:.3f} (target >= {TARGET}: {met})  scrapes per run {scrapes}  "
                f"same windows: {same}"
            )
            report[lowering] = {"seconds": times, "ratio": ratio, "scrapes": scrapes, "same": same}
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
