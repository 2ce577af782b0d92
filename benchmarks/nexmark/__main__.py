"""``python -m benchmarks.nexmark --query q15 [--query q16 ...] --events 1000000``.

Generates (or reuses) the dataset, runs each query krishiv's way and
DuckDB's (:mod:`benchmarks.nexmark.check`) and prints a table: rows, both
times, and whether the rows agree. Without ``--query``: every query. With
``--flink-python`` (a PyFlink environment's interpreter; ``nox -s bench``
makes ``.nox/flink``), Nexmark's Flink SQL runs in PyFlink too, batch, on
the dataset's CSV files (:mod:`benchmarks.nexmark.flink`): its best time of
``--repeat`` runs after a warm-up, whether its rows equal DuckDB's, and
``flink / krishiv``, PyFlink's time over krishiv's best of as many runs
(above 1: krishiv is faster). Both are bounded runs on this machine's cores.
With ``--kafka`` krishiv reads the tables from Kafka topics instead
(:mod:`benchmarks.nexmark.kafka`, a broker started for the run): each
query's ``collect()`` reads what the topics hold.

Every query is a module of :mod:`benchmarks.nexmark` (``qN.py``, q0 to
q23), and the command reads what it runs from it: the pipeline, the
reference and how the rows compare (:mod:`benchmarks.nexmark.check`), and
its workload in the sustainable harness. A query PyFlink's batch run does
not take (:data:`~benchmarks.nexmark.flink_sql.NOT_RUN`) has its reason in
the Flink columns, which names the runner that takes it.

With ``--rate R`` each query runs streaming instead, fed R events/s in real
time for ``--seconds`` by the sustainable harness's generator
(:mod:`benchmarks.sustainable`, one trial, no search; each query whose
module names a ``WORKLOAD``, which may be the harness's own form of the
query): krishiv on the lowering ``explain()`` chooses, and PyFlink with
``--flink-python``; the table gives each one's p50 and p99 latency, the
share of the events its results counted and whether it kept up at p99 <=
``--budget-s``. The highest rate a runner sustains is ``python -m
benchmarks.sustainable``'s search.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace
from typing import Any

from tqdm import tqdm

import krishiv_py as kp
from benchmarks import data
from benchmarks.nexmark import NAMES, query
from benchmarks.nexmark.check import flink_outcome, run, run_flink, streams_of
from benchmarks.nexmark.kafka import kafka_streams, produce
from benchmarks.sustain_queries import WORKLOADS
from krishiv_py.devtools import KafkaBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark", description=__doc__)
    parser.add_argument("--query", action="append", choices=NAMES, help="a query (default: all)")
    parser.add_argument("--events", type=int, default=200_000, help="events of the dataset")
    parser.add_argument("--files", type=int, default=4, help="Parquet files per table")
    parser.add_argument("--flink-python", help="a PyFlink environment's interpreter: run Flink's SQL too")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per query (after a warm-up)")
    parser.add_argument(
        "--kafka", action="store_true", help="read the tables from Kafka topics, on a local broker it starts"
    )
    parser.add_argument("--extra", action="store_true", help="rows padded by Nexmark's extra column")
    parser.add_argument("--rate", type=int, help="streaming: this many events/s in real time, one trial each")
    parser.add_argument("--seconds", type=float, default=30.0, help="with --rate: the trial's length")
    parser.add_argument("--budget-s", type=float, default=5.0, help="with --rate: the p99 latency budget")
    args = parser.parse_args(argv)
    if args.rate is not None:
        names = args.query or [q for q in NAMES if workload_of(q) in WORKLOADS]
        return at_rate(names, args.rate, args.seconds, args.budget_s, args.flink_python)
    dataset = data.nexmark(data.NexmarkSpec(events=args.events, files=args.files, extra=args.extra))
    names = args.query or list(NAMES)
    session = kp.Session.embedded()
    servers = contextlib.ExitStack()
    try:
        if args.kafka:
            broker = servers.enter_context(KafkaBroker())
            produce(dataset, broker)
            streams = kafka_streams(session, dataset, broker.bootstrap_servers)
        else:
            streams = streams_of(session, dataset)
        outcomes = []
        for name in tqdm(names, unit="query"):
            runs = [
                run(query(name), streams, dataset)
                for _ in range(args.repeat + (1 if args.flink_python else 0))
            ]
            best = min(runs[1:] or runs, key=lambda o: o.krishiv_s)  # (with Flink: after a warm-up run)
            outcomes.append(replace(best, equal=all(o.equal for o in runs)))
    finally:
        session.stop()
        servers.close()
    flink = {}
    if args.flink_python:
        flink = run_flink(args.flink_python, dataset, names, repeat=args.repeat)
    print(f"{'query':<6} {'rows':>10} {'krishiv s':>10} {'duckdb s':>10}  equal", end="")
    print(f" {'flink s':>9}  flink equal  flink / krishiv" if flink else "")
    ok = True
    for o in outcomes:
        equal = "yes" if o.equal else "NO"
        line = f"{o.name:<6} {o.rows:>10} {o.krishiv_s:>10.2f} {o.duckdb_s:>10.2f}  {equal:<5}"
        ok &= o.equal
        if flink:
            f = flink_outcome(query(o.name), flink.get(o.name, {"failed": "no record"}), dataset)
            if f.seconds is None:
                line += f" {'-':>9}  {'-':<11}  - ({f.note})"
            else:
                line += f" {f.seconds:>9.2f}  {'yes' if f.equal else 'NO':<11}  {f.seconds / o.krishiv_s:.2f}"
                ok &= bool(f.equal)
        print(line)
    return 0 if ok else 1


def workload_of(name: str) -> str | None:
    """The sustainable harness's workload of query ``name`` (its module's ``WORKLOAD``), if any."""
    workload: str | None = getattr(query(name), "WORKLOAD", None)
    return workload


def at_rate(names: list[str], rate: int, seconds: float, budget_s: float, flink_python: str | None) -> int:
    """Each query streaming at ``rate`` events/s for ``seconds``: krishiv (its chosen lowering) and,
    with ``flink_python``, PyFlink; a table of their latencies."""
    from benchmarks import sustainable as sb

    rows: list[dict[str, Any]] = []
    session = kp.Session.embedded()
    try:
        for name in tqdm(names, unit="query"):
            workload = workload_of(name)
            work = None if workload is None else WORKLOADS.get(workload)
            if work is None:
                rows.append({"query": name, "runner": "-", "note": "not in the sustainable harness"})
                continue
            runners = [next(r for r in sb.runners_of(work) if r.startswith("krishiv-"))]
            flink = sb.flink_processes(flink_python, sb.runners_of(work), work.name)
            try:
                for runner in [*runners, *flink]:
                    r = sb.trial(session, runner, rate, seconds, budget_s, 1, flink=flink, query=work.name)
                    rows.append({"query": name, **r})
            finally:
                for process in flink.values():
                    process.close()
    finally:
        session.stop()
    print_rates(rows, seconds)
    return 0


def print_rates(rows: list[dict[str, Any]], seconds: float) -> None:
    """The table of ``at_rate``: per query and runner its latencies, the share counted, whether it
    kept up; a trial in which no result of the steady state reached the sink says what to try."""
    print(f"{'query':<6} {'runner':<17} {'events/s':>10} {'p50 s':>7} {'p99 s':>7} {'counted':>8}  kept up")
    for r in rows:
        if "note" in r:
            print(f"{r['query']:<6} {r['note']}")
            continue
        kept_up = "yes" if r["sustained"] else "NO"
        print(
            f"{r['query']:<6} {r['runner']:<17} {r['rate']:>10,} {r['p50_s']:>7.2f} {r['p99_s']:>7.2f} "
            f"{r['counted_share']:>8.1%}  {kept_up}"
        )
        if r["p99_s"] == float("inf"):  # no result of the steady state reached the sink
            print(
                f"{'':<6} no result reached the sink after the first third of the {seconds:g} s trial: "
                "the query needs longer to close its windows or state (try --seconds 60 or more), "
                "or the runner could not keep up at this rate"
            )


if __name__ == "__main__":
    raise SystemExit(main())
