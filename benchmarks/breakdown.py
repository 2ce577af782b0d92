"""Where a native micro-batch's time goes: Spark's ``durationMs`` per phase, krishiv_py vs hand-written.

    python -m benchmarks.breakdown [--query tumbling --query session --query nexmark-q7]
                                   [--repeat 2] [--tree DIR] [--events N --files F]
                                                                    (nox -s breakdown_bench)

Runs ``python -m benchmarks.spark_runner --phases`` once per query with
the ``krishiv-native`` and ``pyspark-streaming`` runners interleaved in one
process (1 M events in 20 files, the suite's datasets; ``--events`` and
``--files`` for larger micro-batches, where per-row work decides), and prints, per
query and runner, the mean milliseconds per executed micro-batch of each
phase Spark reports (``latestOffset``, ``walCommit``, ``queryPlanning``,
``getBatch``, ``addBatch``, ``commitOffsets``, ``triggerExecution``), the
wall time per micro-batch of the whole run, and the Python time outside
Spark's triggers. ``--tree`` runs another checkout's runner (e.g. a
``git worktree`` of an earlier commit) on the same datasets, for a
before/after comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import data
from benchmarks.protocol import PREFIX

PHASES = (
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
RUNNERS = ("krishiv-native", "pyspark-streaming")
#: The stateful operator's own parts, summed over its bucket calls (``operator.TIMING_NAMES``),
#: then the driver's: collecting the payloads (which runs the micro-batch's Spark job, the
#: operator included), decoding and routing them.
OPERATOR_PARTS = (
    "load_us",
    "receive_us",
    "decode_us",
    "kernel_us",
    "store_us",
    "encode_us",
    "collect_us",
    "decode_payloads_us",
    "route_us",
)


def run(
    queries: list[str],
    repeat: int,
    tree: Path,
    runners: tuple[str, ...] = RUNNERS,
    *,
    events: int = 1_000_000,
    files: int = 20,
) -> list[dict[str, Any]]:
    """The ``phases`` details of every timed run (warm-up left out).

    ``events`` in ``files`` files per dataset: a micro-batch reads one file.
    """
    clicks = data.clickstream(data.ClickstreamSpec(events=events, files=files))
    nexmark = data.nexmark(data.NexmarkSpec(events=events, files=files))
    cmd = [sys.executable, "-m", "benchmarks.spark_runner", "--phases", "--interleave"]
    cmd += [f"--runner={r}" for r in runners] + [f"--query={q}" for q in queries]
    cmd += ["--clickstream", str(clicks.root), "--nexmark", str(nexmark.root), "--repeat", str(repeat)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    details = []
    for line in out.stdout.splitlines():
        if line.startswith(PREFIX + "detail "):
            d = json.loads(line[len(PREFIX + "detail ") :])
            if d.get("kind") == "phases" and not d.get("warmup") and "duration_ms" in d:
                details.append(d)
    if out.returncode != 0 or not details:
        raise SystemExit(f"the runner failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    return details


def table(details: list[dict[str, Any]], queries: list[str], runners: tuple[str, ...] = RUNNERS) -> str:
    """Markdown: ms per micro-batch per phase, one row per (query, runner)."""
    head = ["query", "runner", "batches", *PHASES, "wall", "outside triggers"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for q in queries:
        for r in runners:
            runs = [d for d in details if d["query"] == q and d["runner"] == r]
            if not runs:
                continue
            n = statistics.median(d["micro_batches"] for d in runs)

            def per_batch(values: list[float], batches: list[int]) -> float:
                return statistics.median(v / max(1, b) for v, b in zip(values, batches, strict=True))

            batches = [int(d["micro_batches"]) for d in runs]
            cells = [per_batch([d["duration_ms"].get(p, 0) for d in runs], batches) for p in PHASES]
            wall = per_batch([d["wall_s"] * 1000 for d in runs], batches)
            trig = per_batch([d["duration_ms"].get("triggerExecution", 0) for d in runs], batches)
            row = [q, r, f"{n:.0f}", *(f"{c:.1f}" for c in cells), f"{wall:.1f}", f"{wall - trig:.1f}"]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def operator_table(details: list[dict[str, Any]], queries: list[str]) -> str:
    """Markdown: the stateful operator's parts, ms per executed micro-batch (median over runs)."""
    parts = [p.removesuffix("_us") for p in OPERATOR_PARTS]
    head = ["query", "batches", "tick batches", "bucket calls", *parts]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for q in queries:
        runs = [d for d in details if d["query"] == q and "operator_ms" in d]
        if not runs:
            continue
        cells = [
            statistics.median(d["operator_ms"].get(p, 0.0) / max(1, d["micro_batches"]) for d in runs)
            for p in OPERATOR_PARTS
        ]
        n = statistics.median(d["micro_batches"] for d in runs)
        ticks = statistics.median(d["tick_batches"] for d in runs)
        calls = statistics.median(d["bucket_calls"] for d in runs)
        row = [q, f"{n:.0f}", f"{ticks:.0f}", f"{calls:.0f}", *(f"{c:.1f}" for c in cells)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__.splitlines()[0])
    p.add_argument("--query", action="append", help="queries (default tumbling, session, nexmark-q7)")
    p.add_argument("--repeat", type=int, default=2, help="timed runs per runner (default 2)")
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="checkout to run")
    p.add_argument(
        "--stateful",
        action="store_true",
        help="add krishiv's stateful lowering (krishiv-stateful) and its operator's parts",
    )
    p.add_argument("--events", type=int, default=1_000_000, help="events per dataset (default 1,000,000)")
    p.add_argument(
        "--files", type=int, default=20, help="files per dataset, one per micro-batch (default 20)"
    )
    args = p.parse_args(argv)
    queries = args.query or ["tumbling", "session", "nexmark-q7"]
    runners = (*RUNNERS, "krishiv-stateful") if args.stateful else RUNNERS
    details = run(queries, args.repeat, args.tree.resolve(), runners, events=args.events, files=args.files)
    print(f"ms per executed micro-batch (median over {args.repeat} runs), tree {args.tree}:")
    print(table(details, queries, runners))
    if args.stateful:
        print("\nkrishiv-stateful, the operator's parts (ms per executed micro-batch; Python workers summed")
        print("over bucket calls, which run in parallel on the cores; then the driver):")
        print(operator_table(details, queries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
