"""``python -m benchmarks [--quick]``: krishiv_py against the alternatives, in one run.

Generates (or reuses) the clickstream and Nexmark datasets, then runs every
query with every runner, each runner in a process of its own (so its peak
memory is its own), and writes ``latest.json``, ``latest.md`` and
``latest.png`` to ``benchmarks/results/`` (or ``--out-dir``). Also measures
``Session.embedded()`` start-up, send-to-result latency and scaling with the
number of keys (``--keys`` to choose the key counts). ``--master
spark://host:port`` runs the Spark runners' queries on a standalone cluster
(``Session.connect``) instead of ``local[*]``; start-up and latency stay
local. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import data, report
from benchmarks.driver import RunOutput, python_for_flink, run_process, timed
from benchmarks.queries import QUERIES
from benchmarks.spark_runner import BOUNDED_RUNNERS, STREAMING_RUNNERS

BASELINE = "pyspark-streaming"
MODEL = "reference-model"
ALL_RUNNERS = (*STREAMING_RUNNERS, MODEL, *BOUNDED_RUNNERS, "duckdb", "pyflink")
# Which runner's result each runner must reproduce exactly. Spark with its
# default settings drops late rows by the previous micro-batch's watermark, so
# pyspark-default has no reference; PyFlink drops late events by its own
# watermark timing (compared with nothing, reported as is).
REFERENCE = {
    "krishiv-native": MODEL,
    "krishiv-stateful": MODEL,
    "pyspark-streaming": MODEL,
    MODEL: MODEL,
    "krishiv-bounded": "pyspark-batch",
    "duckdb": "pyspark-batch",
    "pyspark-batch": "pyspark-batch",
}
# Nexmark Q3 and Q20 in PyFlink are Nexmark's regular joins: they keep every row whatever its
# event time, so their rows are the bounded answer.
QUERY_REFERENCE = {(q, "pyflink"): "pyspark-batch" for q in ("nexmark-q3", "nexmark-q20")}
GROUP = {
    **dict.fromkeys(STREAMING_RUNNERS, "streaming"),
    MODEL: "streaming",
    **dict.fromkeys(BOUNDED_RUNNERS, "bounded"),
    "duckdb": "bounded",
    "pyflink": "peer (streaming)",
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small inputs; a few minutes")
    p.add_argument("--events", type=int, help="events per dataset (default 1,000,000; quick 50,000)")
    p.add_argument("--files", type=int, help="files (micro-batches) per dataset (default 20; quick 5)")
    p.add_argument("--repeat", type=int, help="timed runs per (query, runner) after one warm-up (3; quick 1)")
    p.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="no warm-up run: time the first (a smoke run of the suite, not a measurement)",
    )
    p.add_argument("--query", action="append", choices=sorted(QUERIES), help="only these queries")
    p.add_argument("--runner", action="append", choices=ALL_RUNNERS, help="only these runners")
    p.add_argument("--no-extras", action="store_true", help="skip start-up, latency and scaling")
    p.add_argument(
        "--keys",
        type=int,
        action="append",
        help="key counts of the scaling runs (default 1,000, 100,000 and 1,000,000)",
    )
    p.add_argument(
        "--scaling-query",
        action="append",
        choices=SCALING_QUERIES,
        help="clickstream queries of the scaling runs (default tumbling)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="run krishiv-native, krishiv-stateful and pyspark-streaming in one process per query, "
        "their timed runs taking turns (for shared machines; peak RSS is then the process's)",
    )
    p.add_argument("--no-startup", action="store_true", help="skip the start-up measurement")
    p.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    p.add_argument(
        "--master",
        help="run the Spark runners (throughput and scaling) on this standalone cluster, spark://host:port, "
        "instead of local[*]; its executors must see the dataset directory at the same path",
    )
    p.add_argument(
        "--reference-from",
        type=Path,
        help="an earlier run's latest.json (over the same datasets): the reference runners' rows "
        "of queries whose reference runner this run leaves out come from it",
    )
    p.add_argument("--flink-python", help="a Python interpreter with the 'flink' extra installed")
    p.add_argument("--out-dir", default=str(Path(__file__).parent / "results"))
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per runner process")
    a = p.parse_args(argv)
    a.events = a.events or (50_000 if a.quick else 1_000_000)
    a.files = a.files or (5 if a.quick else 20)
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.query = a.query or [q for q in QUERIES if not (a.quick and q in FULL_RUN_QUERIES)]
    a.runner = a.runner or list(ALL_RUNNERS)
    a.scaling_query = a.scaling_query or ["tumbling"]
    # Full runs give every (query, runner) a fresh process, so memory figures
    # are per query; quick runs share one process per runner.
    a.isolate = not a.quick
    return a


SHARED_SESSION = ("krishiv-native", "pyspark-streaming", "krishiv-bounded", "pyspark-batch")
# Spark's default 200 shuffle partitions make every stateful micro-batch slow:
# one run without warm-up is plenty to measure it, and quick runs (a smoke
# test of the suite) leave it out.
DEFAULT_CONFIG = "pyspark-default"
# Queries only full runs include by default (the reference model takes a
# minute on 60 windows per event); `--query` still runs them in quick mode.
FULL_RUN_QUERIES = ("sliding-10m",)
QUICK_DEFAULT_QUERIES: tuple[str, ...] = ()
# The stateful lowering's runner: quick runs time it on the queries of its
# targets only (a process of its own), full runs on every query; and on the
# join queries, which only it runs in full (krishiv-native skips the window join).
STATEFUL = "krishiv-stateful"
JOIN_QUERIES = tuple(q for q, spec in QUERIES.items() if spec.is_join)
QUICK_STATEFUL_QUERIES = ("tumbling", "session", *JOIN_QUERIES)
# Scaling with the number of keys (tumbling query): full runs measure every
# runner at every key count; quick runs time the stateful runner only at the
# key count of its target.
SCALING_KEYS = (1_000, 100_000, 1_000_000)
QUICK_SCALING_KEYS = (100_000,)
SCALING_RUNNERS = ("krishiv-native", STATEFUL, "pyspark-streaming")
# The queries a scaling run can take (`--scaling-query`): those over the clickstream,
# whose number of users the scaling runs vary.
SCALING_QUERIES = tuple(q for q, spec in QUERIES.items() if spec.dataset == "clickstream")
QUICK_STATEFUL_KEYS = (100_000,)
# --interleave: these runners share one process per query (one Spark session)
# and take turns, so load from elsewhere on a shared machine hits them alike.
INTERLEAVED = ("krishiv-native", STATEFUL, "pyspark-streaming")


def _runner_cmd(
    runners: list[str],
    queries: list[str],
    ds: dict[str, str],
    repeat: int,
    flink: str | None = None,
    warmup: bool = True,
    interleave: bool = False,
    master: str | None = None,
) -> list[str]:
    common = [*(x for q in queries for x in ("--query", q))]
    common += ["--clickstream", ds["clickstream"], "--nexmark", ds["nexmark"], "--repeat", str(repeat)]
    if not warmup:
        common.append("--no-warmup")
    if interleave:
        common.append("--interleave")
    if runners == ["duckdb"]:
        return [sys.executable, "-m", "benchmarks.duckdb_runner", *common]
    if runners == [MODEL]:
        return [sys.executable, "-m", "benchmarks.model_runner", *common]
    if runners == ["pyflink"]:
        assert flink is not None
        return [flink, "-m", "benchmarks.flink_runner", *common]
    return [
        sys.executable,
        "-m",
        "benchmarks.spark_runner",
        *(x for r in runners for x in ("--runner", r)),
        *common,
        *(["--master", master] if master else []),
    ]


def earlier_references(
    path: Path, datasets: dict[str, str], runners: list[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The reference runners' results in the run ``path`` (``latest.json``) for those not in ``runners``.

    Only from a run over the same datasets (their names, which hold every
    parameter of the deterministic inputs, in ``latest-meta.json`` next to it):
    the results of a reference runner depend on nothing else.
    """
    meta = json.loads(path.with_name("latest-meta.json").read_text())
    theirs = meta.get("datasets", {})
    ours = {k: Path(v).name for k, v in datasets.items()}
    if theirs != ours:
        raise SystemExit(f"--reference-from {path}: its datasets {theirs} are not this run's {ours}")
    wanted = set(REFERENCE.values()) - set(runners)
    return {
        (r["query"], r["runner"]): {"status": "ok", "rows": r["result_rows"], "digest": r["digest"]}
        for r in json.loads(path.read_text())
        if r["kind"] == "throughput" and r["runner"] in wanted and r["status"] == "ok"
    }


def _throughput(a: argparse.Namespace, ds: dict[str, str]) -> list[dict[str, Any]]:
    flink, flink_how = python_for_flink(a.flink_python)
    raw: dict[tuple[str, str], dict[str, Any]] = {}
    if a.reference_from:
        raw |= earlier_references(a.reference_from, ds, a.runner)

    def collect(runners: list[str], queries: list[str], interleave: bool = False) -> None:
        if runners == ["pyflink"] and flink is None:
            for q in queries:
                raw[q, "pyflink"] = {
                    "query": q,
                    "runner": "pyflink",
                    "status": "skipped",
                    "reason": flink_how,
                }
            return
        default = runners == [DEFAULT_CONFIG]
        # Quick runs leave some (query, runner) pairs out; the callers pass either one
        # runner or one query where that happens, so what is left is still a rectangle.
        skip = {(q, r): why for q in queries for r in runners if (why := _quick_skip(a, r, q))}
        for (q, r), why in skip.items():
            raw[q, r] = {"query": q, "runner": r, "status": "skipped", "reason": why}
        queries = [q for q in queries if any((q, r) not in skip for r in runners)]
        runners = [r for r in runners if any((q, r) not in skip for q in queries)]
        if not queries or not runners:
            return
        once = default or runners == [MODEL]  # slow, and not a target: one run, no warm-up
        cmd = _runner_cmd(
            runners,
            queries,
            ds,
            1 if once else a.repeat,
            flink,
            warmup=not once and a.warmup,
            interleave=interleave,
            master=a.master,
        )
        with timed(f"{', '.join(runners)}: {', '.join(queries)}"):
            out: RunOutput = run_process(cmd, timeout_s=a.timeout)
        for q in queries:
            for runner in runners:
                got = [r for r in out.results if r.get("query") == q and r.get("runner") == runner]
                rec: dict[str, Any] = (
                    got[0]
                    if got
                    else {
                        "query": q,
                        "runner": runner,
                        "status": "failed",
                        "reason": f"no result (exit code {out.returncode}): {out.log[-600:]}",
                    }
                )
                rec["peak_rss_mb"] = round(out.peak_rss_mb.get(f"{runner} {q}", out.process_peak_rss_mb), 1)
                raw[q, runner] = rec
                if rec.get("status") == "failed":
                    print(f"   {runner} / {q} failed: {rec.get('reason')}", file=sys.stderr)

    if a.interleave:
        together = [r for r in INTERLEAVED if r in a.runner]
        for q in a.query:  # one process per query: the interleaved runners, then the others
            if together:
                collect(together, [q], interleave=len(together) > 1)
            for runner in (r for r in a.runner if r not in together):
                collect([runner], [q])
    elif a.isolate:
        for q in a.query:  # the runners of one query run back to back
            for runner in a.runner:
                collect([runner], [q])
    else:
        shared = [r for r in SHARED_SESSION if r in a.runner]
        # The stateful runner joins them when it runs every query asked for (one JVM start less).
        if STATEFUL in a.runner and not any(_quick_skip(a, STATEFUL, q) for q in a.query):
            shared.append(STATEFUL)
        if shared:
            collect(shared, list(a.query))
        for runner in (r for r in a.runner if r not in shared):
            collect([runner], list(a.query))
    return report.throughput_records(raw, a.query, a.runner, BASELINE, REFERENCE, GROUP, QUERY_REFERENCE)


def _quick_skip(a: argparse.Namespace, runner: str, query: str) -> str | None:
    """Why a quick run leaves ``runner`` out on ``query`` (``None``: it runs)."""
    only = {DEFAULT_CONFIG: QUICK_DEFAULT_QUERIES, STATEFUL: QUICK_STATEFUL_QUERIES}.get(runner)
    if not a.quick or only is None or query in only:
        return None
    if not only:
        return f"full runs only: quick runs leave {runner} out"
    return f"quick runs time {runner} on {', '.join(only)} only"


def _startup(repeat: int) -> list[dict[str, Any]]:
    recs = []
    for which, runner in (("krishiv", "krishiv Session.embedded()"), ("spark", "SparkSession.getOrCreate()")):
        runs, peak = [], 0.0
        for _ in range(repeat):
            out = run_process([sys.executable, "-m", "benchmarks.startup", which], timeout_s=300)
            runs += out.results
            peak = max(peak, out.process_peak_rss_mb)
        if not runs:
            recs.append(report.record("startup", "start-up", runner, status="failed", reason="no result"))
            continue
        recs.append(
            report.record(
                "startup",
                "start-up",
                runner,
                wall_s=statistics.median(r["startup_s"] for r in runs),
                import_s=statistics.median(r["import_s"] for r in runs),
                runs=[r["startup_s"] for r in runs],
                peak_rss_mb=round(peak, 1),
            )
        )
    return recs


LATENCY_RUNNERS = ("krishiv-native", "pyspark-streaming")


def _latency(steps: int, per_step: int, *, shared: bool) -> list[dict[str, Any]]:
    """Send-to-result latency per runner: a process each, or (``shared``: quick runs) one for all."""
    recs = []
    groups = [list(LATENCY_RUNNERS)] if shared else [[r] for r in LATENCY_RUNNERS]
    for group in groups:
        out = run_process(
            [
                sys.executable,
                "-m",
                "benchmarks.spark_runner",
                "--latency",
                ",".join(group),
                str(steps),
                str(per_step),
            ],
            timeout_s=900,
        )
        for runner in group:
            got = [r for r in out.results if r.get("runner") == runner]
            if not got:
                recs.append(
                    report.record("latency", "send-to-result", runner, status="failed", reason=out.log[-600:])
                )
                continue
            recs.append(
                report.latency_record(runner, got[0]["latencies_s"], per_step, out.process_peak_rss_mb)
            )
    return report.with_latency_ratios(recs, BASELINE)


def _scaling(a: argparse.Namespace, nexmark: str, keys: tuple[int, ...]) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for query, k in ((q, k) for q in a.scaling_query for k in keys):
        runners = [r for r in SCALING_RUNNERS if r in a.runner or r == BASELINE]
        if a.quick and k not in QUICK_STATEFUL_KEYS and STATEFUL in runners:
            runners.remove(STATEFUL)
            why = (
                f"quick runs scale {STATEFUL} at {', '.join(f'{n:,}' for n in QUICK_STATEFUL_KEYS)} keys only"
            )
            recs.append(report.scaling_record(STATEFUL, k, {"status": "skipped", "reason": why}, 0.0, query))
        ds = data.clickstream(data.ClickstreamSpec(events=a.events, keys=k, files=a.files))
        paths = {"clickstream": str(ds.root), "nexmark": nexmark}
        groups = [[r] for r in runners] if a.isolate and not a.interleave else [runners]
        for group in groups:
            cmd = _runner_cmd(
                group,
                [query],
                paths,
                a.repeat,
                warmup=a.warmup,
                interleave=a.interleave,
                master=a.master,
            )
            with timed(f"scaling {query}, {k} keys: {', '.join(group)}"):
                out = run_process(cmd, timeout_s=a.timeout)
            for runner in group:
                got = [r for r in out.results if r.get("runner") == runner]
                res = got[0] if got else {"status": "failed", "reason": out.log[-600:]}
                rss = out.peak_rss_mb.get(f"{runner} {query}", out.process_peak_rss_mb)
                recs.append(report.scaling_record(runner, k, res, rss, query))
    return report.with_scaling_ratios(recs, BASELINE)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    with timed("datasets"):
        click = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
        nex = data.nexmark(data.NexmarkSpec(events=a.events, files=a.files))
    ds = {"clickstream": str(click.root), "nexmark": str(nex.root)}
    records = _throughput(a, ds)
    if not a.no_extras:
        if not a.no_startup:
            with timed("start-up"):
                records += _startup(1 if a.quick else 3)
        if not a.no_latency:
            with timed("latency"):
                records += _latency(2 if a.quick else 50, 100, shared=not a.isolate)
        with timed("scaling"):
            records += _scaling(
                a, ds["nexmark"], tuple(a.keys or (QUICK_SCALING_KEYS if a.quick else SCALING_KEYS))
            )
    meta = report.machine() | {
        "mode": "quick" if a.quick else "full",
        "events": a.events,
        "files": a.files,
        "repeat": a.repeat,
        "isolated_processes": a.isolate,
        "master": a.master or "local[*]",
        "datasets": {k: Path(v).name for k, v in ds.items()},
        **({"reference_from": str(a.reference_from)} if a.reference_from else {}),
    }
    paths = report.write(records, meta, Path(a.out_dir))
    print(Path(paths["markdown"]).read_text())
    for p in paths.values():
        print(f"wrote {p}", file=sys.stderr)
    failed = [r for r in records if r.get("status") == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
