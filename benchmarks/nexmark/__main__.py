"""``python -m benchmarks.nexmark --query q15 [--query q16 ...] --events 1000000``.

Generates (or reuses) the dataset, runs each query krishiv's way and
DuckDB's (:mod:`benchmarks.nexmark.check`) and prints a table: rows, both
times, and whether the rows agree. Without ``--query``: every query.
"""

from __future__ import annotations

import argparse

from tqdm import tqdm

import krishiv_py as kp
from benchmarks import data
from benchmarks.nexmark import NAMES, query
from benchmarks.nexmark.check import run, streams_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark", description=__doc__)
    parser.add_argument("--query", action="append", choices=NAMES, help="a query (default: all)")
    parser.add_argument("--events", type=int, default=200_000, help="events of the dataset")
    parser.add_argument("--files", type=int, default=4, help="Parquet files per table")
    args = parser.parse_args(argv)
    dataset = data.nexmark(data.NexmarkSpec(events=args.events, files=args.files))
    session = kp.Session.embedded()
    try:
        streams = streams_of(session, dataset)
        outcomes = [run(query(name), streams, dataset) for name in tqdm(args.query or NAMES, unit="query")]
    finally:
        session.stop()
    print(f"{'query':<6} {'rows':>10} {'krishiv s':>10} {'duckdb s':>10}  equal")
    for o in outcomes:
        print(
            f"{o.name:<6} {o.rows:>10} {o.krishiv_s:>10.2f} {o.duckdb_s:>10.2f}  {'yes' if o.equal else 'NO'}"
        )
    return 0 if all(o.equal for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
