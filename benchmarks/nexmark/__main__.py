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

With ``--rate R`` each query runs streaming instead, fed R events/s in real
time for ``--seconds`` by the sustainable harness's generator
(:mod:`benchmarks.sustainable`, one trial, no search; every query of the
harness, q4, q7, q8, q9, q20 and q23 included): krishiv on the lowering
``explain()`` chooses, and PyFlink with ``--flink-python``; the table gives
each one's p50 and p99 latency, the share of the events its results counted
and whether it kept up at p99 <= ``--budget-s``. The highest rate a runner
sustains is ``python -m benchmarks.sustainable``'s search.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from tqdm import tqdm

import krishiv_py as kp
from benchmarks import data
from benchmarks.nexmark import NAMES, query
from benchmarks.nexmark.check import Outcome, flink_outcome, run, run_flink, streams_of
from benchmarks.nexmark.kafka import kafka_streams, produce
from benchmarks.nexmark_compose import QUERIES as COMPOSED
from benchmarks.nexmark_compose import NexmarkQuery, duckdb_rows, rows_agree, run_krishiv, untied
from benchmarks.sustain_queries import WORKLOADS
from krishiv_py.devtools import KafkaBroker

#: The queries the sustainable harness runs that have no module here: bounded through
#: :mod:`benchmarks.nexmark_compose` (q4, q7, q9, q23) or the benchmark suite's own form
#: (:data:`SUITE`: q3, q5, q8, q20).
HARNESS_ONLY = ("q3", "q4", "q5", "q7", "q8", "q9", "q20", "q23")
#: Every query the command runs without a module of its own: the harness's and q6 (an ``OVER``
#: query after a join, bounded through :mod:`benchmarks.nexmark_compose`).
WITHOUT_MODULE = (*HARNESS_ONLY, "q6")
#: Harness queries whose bounded run is the benchmark suite's (``nexmark-qN`` of
#: :mod:`benchmarks.queries`): krishiv's bounded lowering against DuckDB's SQL of the same query.
SUITE = ("q3", "q5", "q8", "q20")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark", description=__doc__)
    parser.add_argument(
        "--query", action="append", choices=(*NAMES, *WITHOUT_MODULE), help="a query (default: all)"
    )
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
        names = args.query or [q for q in (*NAMES, *HARNESS_ONLY) if f"nexmark-{q}" in WORKLOADS]
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
                if name in NAMES
                else run_suite(name, session, dataset)
                if name in SUITE
                else run_composed(COMPOSED[name], session, dataset)
                for _ in range(args.repeat + (1 if args.flink_python else 0))
            ]
            best = min(runs[1:] or runs, key=lambda o: o.krishiv_s)  # (with Flink: after a warm-up run)
            outcomes.append(replace(best, equal=all(o.equal for o in runs)))
    finally:
        session.stop()
        servers.close()
    own = [n for n in names if n in NAMES]  # (a composed query's PyFlink run: nexmark_compose)
    flink = {}
    if args.flink_python and own:
        flink = run_flink(args.flink_python, dataset, own, repeat=args.repeat)
    print(f"{'query':<6} {'rows':>10} {'krishiv s':>10} {'duckdb s':>10}  equal", end="")
    print(f" {'flink s':>9}  flink equal  flink / krishiv" if flink else "")
    ok = True
    for o in outcomes:
        equal = "yes" if o.equal else "NO"
        line = f"{o.name:<6} {o.rows:>10} {o.krishiv_s:>10.2f} {o.duckdb_s:>10.2f}  {equal:<5}"
        ok &= o.equal
        if flink and o.name not in flink:
            line += f" {'-':>9}  {'-':<11}  - (python -m benchmarks.nexmark_compose --query {o.name})"
        elif flink:
            f = flink_outcome(query(o.name), flink[o.name], dataset)
            if f.seconds is None:
                line += f" {'-':>9}  {'-':<11}  - ({f.note})"
            else:
                line += f" {f.seconds:>9.2f}  {'yes' if f.equal else 'NO':<11}  {f.seconds / o.krishiv_s:.2f}"
                ok &= bool(f.equal)
        print(line)
    return 0 if ok else 1


def run_composed(q: NexmarkQuery, session: kp.Session, dataset: data.Dataset) -> Outcome:
    """A query of :mod:`benchmarks.nexmark_compose` (a join composed with more) bounded, against
    DuckDB's rows of Nexmark's SQL, as :func:`~benchmarks.nexmark.check.run` checks the others."""
    got = run_krishiv(q, session, dataset, streaming=False)
    start = time.perf_counter()
    want = duckdb_rows(q, dataset)
    duckdb_s = time.perf_counter() - start
    untie = untied(q, dataset)  # (q6: the rows of a seller whose winning bids tie in time, by count)
    equal = rows_agree(untie(want), untie(got.rows))
    return Outcome(
        name=q.name,
        rows=len(want),
        krishiv_s=got.seconds,
        duckdb_s=duckdb_s,
        equal=equal,
        only_krishiv=[] if equal else [tuple(r) for r in got.rows[:5]],
        only_duckdb=[] if equal else [tuple(r) for r in want[:5]],
    )


def run_suite(name: str, session: kp.Session, dataset: data.Dataset) -> Outcome:
    """A query of :data:`SUITE` bounded as the benchmark suite runs it (``nexmark-<name>``:
    krishiv's bounded lowering, then DuckDB's SQL of the same query), compared row for row."""
    import duckdb

    from benchmarks import joins, protocol, spark_runner
    from benchmarks.arrow import rows_of
    from benchmarks.digest import digest, norm
    from benchmarks.duckdb_runner import join_sql, query_sql
    from benchmarks.queries import QUERIES

    q = QUERIES[f"nexmark-{name}"]
    infos = protocol.tables_info(q, argparse.Namespace(nexmark=str(dataset.root), clickstream=None))
    start = time.perf_counter()
    if q.is_join:
        got = joins.run_krishiv_bounded(session, q, infos)
    else:
        got = spark_runner.run_krishiv_bounded(session, q, infos[0].files())
    krishiv_s = time.perf_counter() - start
    paths = {t: i.files() + "/*.parquet" for t, i in zip(q.tables, infos, strict=True)}
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    start = time.perf_counter()
    want = con.sql(join_sql(q, paths) if q.is_join else query_sql(q, paths[q.table])).to_arrow_table()
    duckdb_s = time.perf_counter() - start
    mine, theirs = list(rows_of(q.columns)(got)), list(rows_of(q.columns)(want))
    left = Counter(tuple(norm(v) for v in r) for r in mine)
    right = Counter(tuple(norm(v) for v in r) for r in theirs)
    return Outcome(
        name=name,
        rows=len(theirs),
        krishiv_s=krishiv_s,
        duckdb_s=duckdb_s,
        equal=digest(mine) == digest(theirs),
        only_krishiv=list((left - right).elements())[:5],
        only_duckdb=list((right - left).elements())[:5],
    )


def at_rate(names: list[str], rate: int, seconds: float, budget_s: float, flink_python: str | None) -> int:
    """Each query streaming at ``rate`` events/s for ``seconds``: krishiv (its chosen lowering) and,
    with ``flink_python``, PyFlink; a table of their latencies."""
    from benchmarks import sustainable as sb

    rows: list[dict[str, Any]] = []
    session = kp.Session.embedded()
    try:
        for name in tqdm(names, unit="query"):
            work = WORKLOADS.get(f"nexmark-{name}")
            if work is None:
                rows.append({"query": name, "runner": "-", "note": "not in the sustainable harness"})
                continue
            runners = [next(r for r in sb.runners_of(work) if r.startswith("krishiv-"))]
            flink = sb.FlinkProcess(flink_python, work.name) if flink_python else None
            try:
                for runner in [*runners, *(["pyflink"] if flink else [])]:
                    r = sb.trial(session, runner, rate, seconds, budget_s, 1, flink=flink, query=work.name)
                    rows.append({"query": name, **r})
            finally:
                if flink is not None:
                    flink.close()
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
