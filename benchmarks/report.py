"""Benchmark records -> ``latest.json``, a Markdown table and a PNG chart.

Every record has ``query, runner, events, wall_s, events_per_s, peak_rss_mb,
ratio_vs_baseline`` (``None`` where a figure does not apply) plus ``kind``
(``throughput``, ``startup``, ``latency`` or ``scaling``), ``status``
(``ok``, ``skipped``, ``failed``) and kind-specific fields.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REQUIRED = ("query", "runner", "events", "wall_s", "events_per_s", "peak_rss_mb", "ratio_vs_baseline")
STATEFUL_TARGET = "krishiv stateful >= 0.8x krishiv native"
TARGETS: tuple[tuple[str, str, str, float, tuple[str, ...] | None], ...] = (
    # (label, runner, against, minimum ratio of events/s, the queries it applies to: None = all),
    # both runners measured in the same run
    (
        "krishiv native >= 1.2x tuned PySpark streaming",
        "krishiv-native",
        "pyspark-streaming",
        1.2,
        ("tumbling", "session", "nexmark-q5", "nexmark-q7", "nexmark-q11"),
    ),
    (
        "krishiv native >= 1.5x tuned PySpark streaming",
        "krishiv-native",
        "pyspark-streaming",
        1.5,
        ("sliding",),
    ),
    (
        "krishiv native >= 3x tuned PySpark streaming",
        "krishiv-native",
        "pyspark-streaming",
        3.0,
        ("sliding-10m",),
    ),
    ("krishiv native >= 1.0x PyFlink", "krishiv-native", "pyflink", 1.0, ("tumbling",)),
    ("krishiv native >= 1.5x default-config PySpark", "krishiv-native", "pyspark-default", 1.5, None),
    ("krishiv bounded >= 1.0x hand-written Spark batch", "krishiv-bounded", "pyspark-batch", 1.0, None),
    ("krishiv bounded >= 1.5x Spark window() batch", "krishiv-bounded", "pyspark-batch", 1.5, ("sliding",)),
    ("krishiv bounded >= 3x Spark window() batch", "krishiv-bounded", "pyspark-batch", 3.0, ("sliding-10m",)),
    (STATEFUL_TARGET, "krishiv-stateful", "krishiv-native", 0.8, ("tumbling", "session")),
)
SCALING_TARGETS: tuple[tuple[str, str, str, float, tuple[str, ...], tuple[int, ...]], ...] = (
    # (label, runner, against, minimum ratio, the queries and the key counts of the scaling
    # runs it applies to); the throughput runs' clickstream queries have 1,000 keys
    (STATEFUL_TARGET, "krishiv-stateful", "krishiv-native", 0.8, ("tumbling", "session"), (100_000,)),
)


def record(kind: str, query: str, runner: str, **fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(REQUIRED)
    rec.update(kind=kind, query=query, runner=runner, status="ok")
    rec.update(fields)
    return rec


def _ratio(num: float | None, den: float | None) -> float | None:
    if not num or not den:
        return None
    return round(num / den, 3)


def throughput_records(
    raw: Mapping[tuple[str, str], dict[str, Any]],
    queries: Iterable[str],
    runners: Iterable[str],
    baseline: str,
    reference: Mapping[str, str],
    group: Mapping[str, str],
    query_reference: Mapping[tuple[str, str], str] | None = None,
) -> list[dict[str, Any]]:
    """One record per (query, runner): medians, ratios, and agreement with the reference runner.

    ``reference``: each runner's reference runner; ``query_reference``: for
    some (query, runner), another one (or a reference where the runner has none).
    """
    out = []
    runners = list(runners)
    for q in queries:
        eps: dict[str, float] = {}
        for r in runners:
            res = raw.get((q, r), {})
            if res.get("status") == "ok" and res.get("walls"):
                eps[r] = res["events"] / statistics.median(res["walls"])
        for r in runners:
            res = raw.get((q, r), {"status": "failed", "reason": "not run"})
            rec = record(
                "throughput",
                q,
                r,
                group=group.get(r),
                status=res.get("status", "failed"),
                reason=res.get("reason"),
            )
            rec["peak_rss_mb"] = res.get("peak_rss_mb")
            if rec["status"] == "ok":
                wall = statistics.median(res["walls"])
                ref_runner = (query_reference or {}).get((q, r), reference.get(r))
                ref = raw.get((q, ref_runner or ""), {})
                agrees = None
                if ref_runner is not None and ref.get("status") == "ok":
                    agrees = (res["rows"], res["digest"]) == (ref["rows"], ref["digest"])
                rec.update(
                    events=res["events"],
                    # µs precision: a run of a few ms still reproduces events_per_s from wall_s
                    wall_s=round(wall, 6),
                    walls=[round(w, 6) for w in res["walls"]],
                    events_per_s=round(eps[r]),
                    ratio_vs_baseline=_ratio(eps[r], eps.get(baseline)),
                    result_rows=res["rows"],
                    digest=res["digest"],
                    reference=ref_runner,
                    agrees_with_reference=agrees,
                )
            out.append(rec)
    return out


def latency_record(runner: str, latencies_s: list[float], per_step: int, rss_mb: float) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in latencies_s)
    return record(
        "latency",
        "send-to-result",
        runner,
        events=len(ms) * (per_step + 1),
        wall_s=round(sum(latencies_s), 3),
        peak_rss_mb=round(rss_mb, 1),
        steps=len(ms),
        p50_ms=round(_pct(ms, 50), 1),
        p95_ms=round(_pct(ms, 95), 1),
        max_ms=round(ms[-1], 1),
    )


def _pct(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_values) - 1, int(-(-p * len(sorted_values) // 100)) - 1))
    return sorted_values[k]


def with_latency_ratios(recs: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    base = next((r for r in recs if r["runner"] == baseline and r["status"] == "ok"), None)
    for r in recs:
        if base and r["status"] == "ok":
            r["ratio_vs_baseline"] = _ratio(base["p50_ms"], r["p50_ms"])  # > 1: faster than baseline
    return recs


def scaling_record(
    runner: str, keys: int, res: Mapping[str, Any], rss_mb: float, query: str = "tumbling"
) -> dict[str, Any]:
    rec = record("scaling", query, runner, keys=keys, status=res.get("status", "failed"))
    if rec["status"] != "ok":
        rec["reason"] = res.get("reason")
        return rec
    wall = statistics.median(res["walls"])
    rec.update(
        events=res["events"],
        wall_s=round(wall, 6),
        walls=[round(w, 6) for w in res["walls"]],
        events_per_s=round(res["events"] / wall),
        peak_rss_mb=round(rss_mb, 1),
        result_rows=res["rows"],
        digest=res["digest"],
    )
    return rec


def with_scaling_ratios(recs: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    for r in recs:
        base = next(
            (
                b
                for b in recs
                if b["runner"] == baseline and (b["query"], b["keys"]) == (r["query"], r["keys"])
            ),
            None,
        )
        if base and base["status"] == "ok" and r["status"] == "ok":
            r["ratio_vs_baseline"] = _ratio(r["events_per_s"], base["events_per_s"])
            r["agrees_with_reference"] = (r["result_rows"], r["digest"]) == (
                base["result_rows"],
                base["digest"],
            )
    return recs


def machine() -> dict[str, Any]:
    import pyspark

    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pyspark": pyspark.__version__,
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        info["java"] = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["java"] = None
    try:
        import duckdb

        info["duckdb"] = duckdb.__version__
    except ImportError:
        info["duckdb"] = None
    return info


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def targets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target per query (and key count): the measured ratio and whether it is met."""
    tp = {(r["query"], r["runner"]): r for r in records if r["kind"] == "throughput" and r["status"] == "ok"}
    sc = {
        (r["query"], r["keys"], r["runner"]): r
        for r in records
        if r["kind"] == "scaling" and r["status"] == "ok"
    }
    out = []

    def check(
        label: str, query: str, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, m: float
    ) -> None:
        ratio = _ratio(a["events_per_s"], b["events_per_s"]) if a and b else None
        out.append(
            {"target": label, "query": query, "ratio": ratio, "met": None if ratio is None else ratio >= m}
        )

    measured = list(dict.fromkeys(r["query"] for r in records if r["kind"] == "throughput"))
    for label, runner, against, minimum, only in TARGETS:
        for q in (q for q in measured if only is None or q in only):
            check(label, q, tp.get((q, runner)), tp.get((q, against)), minimum)
    scaled = list(dict.fromkeys((r["query"], r["keys"]) for r in records if r["kind"] == "scaling"))
    for label, runner, against, minimum, queries, keys in SCALING_TARGETS:
        for q, k in ((q, k) for q, k in scaled if q in queries and k in keys):
            check(label, f"{q}, {k:,} keys", sc.get((q, k, runner)), sc.get((q, k, against)), minimum)
    return out


def markdown(records: list[dict[str, Any]], meta: Mapping[str, Any]) -> str:
    processes = (
        "a fresh process per (query, runner)" if meta["isolated_processes"] else "one process per runner"
    )
    lines = [
        f"# Benchmark results ({meta['mode']} run, {meta['date']})",
        "",
        f"Machine: {meta.get('cpu') or 'unknown CPU'}, {meta['cpus']} cores, "
        f"{meta.get('memory_gb', '?')} GiB; {meta['platform']}; Python {meta['python']}; "
        f"PySpark {meta['pyspark']}; {meta.get('java')}; "
        f"DuckDB {meta.get('duckdb')}.",
        f"Inputs: {meta['events']:,} events per dataset in {meta['files']} files "
        f"({', '.join(meta['datasets'].values())}); {meta['repeat']} timed run(s) after one warm-up, "
        f"median reported; {processes}.",
        *(
            [
                f"Spark runners on the cluster {meta['master']} (their peak RSS is the driver's process "
                "tree only, without the executors)."
            ]
            if meta.get("master", "local[*]") != "local[*]"
            else []
        ),
        "",
        "## Throughput",
        "",
        "ratio = events/s ÷ events/s of hand-written, tuned PySpark Structured Streaming "
        "(`pyspark-streaming`) on the same query. *agrees* = same result rows as the reference "
        "runner of its group "
        "(streaming: `reference-model`, the specification's model; bounded: `pyspark-batch`; "
        "PyFlink on Nexmark's regular joins, Q3 and Q20: `pyspark-batch`).",
        *(
            [
                "",
                "The reference runners this run leaves out agree or not by their rows in the "
                f"earlier run `{meta['reference_from']}`, over the same datasets.",
            ]
            if meta.get("reference_from")
            else []
        ),
        "",
        "| query | runner | group | events/s | wall (s) | peak RSS (MB) | ratio | agrees | rows |",
        "|---|---|---|---:|---:|---:|---:|:---:|---:|",
    ]
    for r in (r for r in records if r["kind"] == "throughput"):
        group = r.get("group") or ""
        if r["status"] != "ok":
            lines.append(
                f"| {r['query']} | {r['runner']} | {group} | {r['status']}: {r.get('reason')} ||||||"
            )
            continue
        lines.append(
            f"| {r['query']} | {r['runner']} | {group} | {r['events_per_s']:,} | {r['wall_s']:.3f} | "
            f"{_fmt(r['peak_rss_mb'], '.0f')} | {_fmt(r['ratio_vs_baseline'], '.3f')} | "
            f"{_fmt(r.get('agrees_with_reference'))} | {r['result_rows']:,} |"
        )
    lines += ["", "## Targets", "", "| target | query | ratio | met |", "|---|---|---:|:---:|"]
    for t in targets(records):
        lines.append(f"| {t['target']} | {t['query']} | {_fmt(t['ratio'], '.3f')} | {_fmt(t['met'])} |")
    start = [r for r in records if r["kind"] == "startup"]
    if start:
        lines += ["", "## Start-up (fresh process, import + start)", "", "| what | median (s) | import (s) |"]
        lines.append("|---|---:|---:|")
        for r in start:
            lines.append(f"| {r['runner']} | {_fmt(r['wall_s'], '.2f')} | {_fmt(r.get('import_s'), '.2f')} |")
    lat = [r for r in records if r["kind"] == "latency"]
    if lat:
        lines += [
            "",
            "## Latency: send() to the window result in the sink",
            "",
            "| runner | steps | p50 (ms) | p95 (ms) | max (ms) | ratio (p50, >1 = faster) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in lat:
            if r["status"] != "ok":
                lines.append(f"| {r['runner']} | {r['status']} |||||")
                continue
            lines.append(
                f"| {r['runner']} | {r['steps']} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | "
                f"{r['max_ms']:.0f} | {_fmt(r['ratio_vs_baseline'], '.3f')} |"
            )
    sc = [r for r in records if r["kind"] == "scaling"]
    if sc:
        lines += [
            "",
            "## Scaling with the number of keys",
            "",
            "| query | keys | runner | events/s | wall (s) | peak RSS (MB) | ratio | agrees | rows |",
            "|---|---:|---|---:|---:|---:|---:|:---:|---:|",
        ]
        for r in sc:
            row = f"| {r['query']} | {r['keys']:,} | {r['runner']} |"
            if r["status"] != "ok":
                lines.append(f"{row} {r['status']}: {r.get('reason')} ||||||")
                continue
            lines.append(
                f"{row} {r['events_per_s']:,} | {r['wall_s']:.3f} | "
                f"{r['peak_rss_mb']:.0f} | {_fmt(r['ratio_vs_baseline'], '.3f')} | "
                f"{_fmt(r.get('agrees_with_reference'))} | {r['result_rows']:,} |"
            )
    return "\n".join(lines) + "\n"


def chart(records: list[dict[str, Any]], path: Path) -> None:
    """Throughput per runner per query, grouped bars, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tp = [r for r in records if r["kind"] == "throughput" and r["status"] == "ok"]
    queries = list(dict.fromkeys(r["query"] for r in records if r["kind"] == "throughput"))
    runners = list(dict.fromkeys(r["runner"] for r in records if r["kind"] == "throughput"))
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(queries)), 4.8), dpi=110)
    width = 0.8 / max(1, len(runners))
    for i, runner in enumerate(runners):
        xs, ys = [], []
        for j, q in enumerate(queries):
            r = next((r for r in tp if r["query"] == q and r["runner"] == runner), None)
            if r:
                xs.append(j + (i - (len(runners) - 1) / 2) * width)
                ys.append(r["events_per_s"])
        ax.bar(xs, ys, width=width, label=runner, color=f"C{i % 10}")
    ax.set_xticks(range(len(queries)), queries)
    ax.set_yscale("log")
    ax.set_ylabel("events/s (log scale)")
    ax.set_title("Throughput per runner and query (higher is better)")
    ax.legend(fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write(records: list[dict[str, Any]], meta: Mapping[str, Any], out_dir: Path) -> dict[str, str]:
    """``latest.json`` (the record list), ``latest.md``, ``latest.png``, ``latest-meta.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "latest.json",
        "meta": out_dir / "latest-meta.json",
        "markdown": out_dir / "latest.md",
        "chart": out_dir / "latest.png",
    }
    paths["json"].write_text(json.dumps(records, indent=2) + "\n")
    paths["meta"].write_text(json.dumps({**meta, "targets": targets(records)}, indent=2) + "\n")
    paths["markdown"].write_text(markdown(records, meta))
    chart(records, paths["chart"])
    return {k: str(v) for k, v in paths.items()}
