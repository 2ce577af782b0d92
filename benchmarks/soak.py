"""A long run of the stateful lowering: live state, heap, RSS and checkpoint bytes stay flat.

One job on the stateful lowering under ``single-node-durable`` (RocksDB):
sessions per key (1-hour gap, so none closes by itself) with event-time
state TTL (20 s), allowed lateness (10 s) and a watermark lag of 5 s, into
a ``ParquetSink``. Its input is ``--keys`` distinct keys (1M by default)
over ``--batches`` batches (200) of 10 s of event time: each key sends one
row in each of three consecutive batches and then goes quiet, a new cohort
of keys starting in every batch, so the keys in play at any time are about
the same while every key is new once. 1 % of the rows arrive one batch
late (their event time is the previous batch's): some within the allowed
lateness, some behind it.

After every ``--every`` batches (5) it records:

* live state: ``JobMetrics.state_windows`` and ``state_bytes``;
* the JVM's heap in use after a full GC, and the JVM's resident memory
  outside its committed heap (RocksDB's native memory, code, threads,
  buffers): the committed heap itself moves with the collector's choices,
  growing and giving memory back, so the JVM's whole RSS is recorded and
  drawn but not judged;
* the resident memory of Spark's Python workers (the daemon and its
  forked workers, which run the operator's kernels) and of this process
  (the driver's Python side);
* the bytes on disk of the job's checkpoint, by part (``state/``, the
  offset and commit logs, the sources' logs), and of the memory stream's
  spool (``retention="committed"``: it deletes what the job committed).

Flat after warm-up means: over the batches after ``--warmup`` (60), the
median of each figure over the last quarter of the run is at most
``FLAT_RATIO`` times its median over the first quarter after warm-up.
JVM heap and RSS are noisy (GC, the JIT, RocksDB's caches), so the ratio is
a median's, not a maximum's.

    python -m benchmarks.soak                     # 1M keys, 200 batches: about 10 minutes on 2 cores
    python -m benchmarks.soak --spark-defaults    # Spark's own retention settings (for comparison)
    python -m benchmarks.soak --keys 100000 --batches 60 --warmup 20   # a quick look
    python -m benchmarks.soak --join --keys 100000 --batches 60 --warmup 20   # a join's state
    python -m benchmarks.soak --chain campaign --keys 100000 --batches 80 --warmup 20 --every 4

``--chain BY``: the join (inner, allowed lateness 10 s), a 10 s tumbling
window per key in retracting mode after it in the same operator call, then
an aggregation per ``BY`` over the windows' changes: ``campaign`` (a column
of 16 values, ``key % 16``, the window keyed by key and campaign) or
``window_start`` (a new key every window). Keyed by other columns than the
join, the aggregation is a stage of its own, its state one Arrow file per
stage bucket and micro-batch under the checkpoint's ``krishiv-stages/``; the
run also records the rows of its state (``stage_rows``, part of
``state_windows``) and its files' bytes (``stage_bytes``, part of the
checkpoint, not of ``state_bytes``).

Writes ``benchmarks/results/soak-latest.json`` and ``docs/soak.png`` (with
``--plot``), prints the table as markdown; exits 1 when a figure is not
flat or a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.durability import dir_bytes
from benchmarks.report import machine

RESULTS = Path(__file__).parent / "results" / "soak-latest.json"
PLOT = Path(__file__).parent.parent / "docs" / "soak.png"
SCHEMA = "key bigint, t bigint, amount bigint"
#: ``--chain``: the first stream's rows carry a campaign, ``key % CAMPAIGNS``.
CAMPAIGNS = 16
APPEARANCES = 3  # consecutive batches each key sends a row in
PERIOD_MS = 10_000  # event time one batch covers
GAP_MS = 3_600_000  # longer than the run: only TTL ends a session
TTL_MS = 20_000
LATENESS_MS = 10_000
LAG_MS = 5_000
LATE_SHARE = 0.01
T0_MS = 1_700_000_000_000
FLAT_RATIO = 1.25
#: The figures that must stay flat, and how each is shown.
FIGURES = {
    "state_windows": "windows in state",
    "state_bytes": "state bytes",
    "jvm_heap_bytes": "JVM heap after GC",
    "jvm_native_bytes": "JVM RSS outside the heap",
    "python_workers_rss_bytes": "Python workers RSS",
    "driver_rss_bytes": "driver Python RSS",
    "checkpoint_bytes": "checkpoint on disk",
    "spool_bytes": "memory stream spool",
}
#: ``--chain``'s stage after the operator (its rows are counted in ``state_windows`` too).
STAGE_FIGURES = {
    "stage_rows": "rows in the stage's state",
    "stage_bytes": "the stage's files on disk",
}


def workload(keys: int, batches: int, seed: int = 1) -> Iterator[pa.Table]:
    """The batches: a cohort of new keys each batch, each key 3 batches running; 1 % of rows a batch late."""
    rng = np.random.default_rng(seed)
    cohorts = batches - APPEARANCES + 1
    start = np.arange(keys, dtype=np.int64) * cohorts // keys  # nondecreasing: each batch a key range
    held: pa.Table | None = None
    for b in range(batches):
        lo = int(np.searchsorted(start, b - APPEARANCES + 1, side="left"))
        hi = int(np.searchsorted(start, b, side="right"))
        n = hi - lo
        t = T0_MS + b * PERIOD_MS + rng.integers(0, PERIOD_MS, n)
        batch = pa.table(
            {
                "key": pa.array(np.arange(lo, hi, dtype=np.int64)),
                "t": pa.array(t.astype(np.int64)),
                "amount": pa.array(rng.integers(1, 100, n).astype(np.int64)),
            }
        )
        late = rng.random(n) < LATE_SHARE
        on_time = batch.filter(pa.array(~late))
        yield on_time if held is None else pa.concat_tables([on_time, held])
        held = batch.filter(pa.array(late))


# --- measuring ----------------------------------------------------------------------------


#: The directory of a stage's state under a checkpoint (``CheckpointLayout.stages``).
STAGES = "krishiv-stages"


def checkpoint_parts(checkpoint: str) -> dict[str, int]:
    """Bytes on disk of a checkpoint by part: state, stages, logs (offsets, commits), sources, other."""
    parts = {"state": 0, "stages": 0, "logs": 0, "sources": 0, "other": 0}
    names = {"state": "state", "sources": "sources", STAGES: "stages", "offsets": "logs", "commits": "logs"}
    for entry in os.listdir(checkpoint) if os.path.isdir(checkpoint) else ():
        path = os.path.join(checkpoint, entry)
        size = dir_bytes(path) if os.path.isdir(path) else os.path.getsize(path)
        parts[names.get(entry, "other")] += size
    return parts


def stage_state(checkpoint: str) -> tuple[int, int]:
    """Rows of the newest state of every stage bucket under ``checkpoint``, and its files' count."""
    root = os.path.join(checkpoint, STAGES)
    buckets = [int(b) for b in os.listdir(root) if b.isdigit()] if os.path.isdir(root) else []
    rows = 0
    for bucket in buckets:
        kernel = _newest_stage(root, bucket)
        rows += kernel.num_rows if kernel is not None else 0
    files = sum(len(fs) for _, _, fs in os.walk(root))
    return rows, files


def _newest_stage(root: str, bucket: int) -> pa.Table | None:
    """A stage bucket's newest kernel state; read again if a micro-batch deleted it meanwhile."""
    from krishiv_py.stateful.stage import StageStore

    for _ in range(2):
        with contextlib.suppress(FileNotFoundError):
            state = StageStore(root, bucket).load_before(2**62)
            return None if state is None else state.kernel
    state = StageStore(root, bucket).load_before(2**62)
    return None if state is None else state.kernel


def jvm_pid() -> int:
    """The JVM this process drives (its child ``java`` process)."""
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "java":
                return child.pid
        except psutil.Error:
            continue
    raise RuntimeError("no JVM under this process")


def python_workers_rss(jvm: int) -> tuple[int, int]:
    """Resident bytes and count of the JVM's Python worker processes (the daemon and its forks)."""
    total = count = 0
    for proc in psutil.Process(jvm).children(recursive=True):
        try:
            if "pyspark" in " ".join(proc.cmdline()):
                total += proc.memory_info().rss
                count += 1
        except psutil.Error:
            continue
    return total, count


def heap_after_gc(spark: Any) -> tuple[int, int]:
    """The driver JVM's heap right after a full GC: bytes in use (what is live), bytes committed."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return int(runtime.totalMemory() - runtime.freeMemory()), int(runtime.totalMemory())


def sample(job: Any, spark: Any, jvm: int, spool: str, batch: int, seconds: float) -> dict[str, Any]:
    m = job.metrics()
    parts = checkpoint_parts(job.checkpoint_dir)
    stage_rows, stage_files = stage_state(job.checkpoint_dir)
    workers_rss, workers = python_workers_rss(jvm)
    heap, committed = heap_after_gc(spark)
    rss = psutil.Process(jvm).memory_info().rss
    return {
        "batch": batch,
        "seconds": round(seconds, 1),
        "micro_batches": m.batches,
        "state_windows": m.state_windows or 0,
        "state_bytes": m.state_bytes or 0,
        "state_evictions": m.state_evictions or 0,
        "jvm_heap_bytes": heap,
        "jvm_heap_committed_bytes": committed,
        "jvm_rss_bytes": rss,
        # The heap's committed size moves with the collector's choices (it grows, it gives memory
        # back); what is outside it (RocksDB, code, threads, buffers) is where native memory leaks.
        "jvm_native_bytes": rss - committed,
        "python_workers_rss_bytes": workers_rss,
        "python_workers": workers,
        "driver_rss_bytes": psutil.Process().memory_info().rss,
        "checkpoint_bytes": sum(parts.values()),
        "checkpoint_parts": parts,
        "spool_bytes": dir_bytes(spool),
        "stage_rows": stage_rows,
        "stage_bytes": parts["stages"],
        "stage_files": stage_files,
    }


# --- the run ------------------------------------------------------------------------------


#: Spark's own values of the settings krishiv_py changes for long-running jobs.
SPARK_DEFAULTS = {
    "spark.sql.streaming.minBatchesToRetain": "100",
    "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
    "spark.ui.retainedJobs": "1000",
    "spark.ui.retainedStages": "1000",
    "spark.ui.retainedTasks": "100000",
    "spark.sql.ui.retainedExecutions": "1000",
}


def soak(
    *,
    keys: int,
    batches: int,
    every: int,
    spark_defaults: bool = False,
    join: bool = False,
    chain: str | None = None,
    log: Any = print,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the job over the workload; the samples and the job's end figures.

    ``join``: instead of sessions, a full outer interval join (±5 s, allowed
    lateness 10 s, retracting) of the workload with a second stream that
    holds the same keys 1 s later: its state is bounded by the watermark alone.
    ``chain``: an inner join of the same streams, a window after it and an
    aggregation per ``chain`` after that (:func:`chained`).
    """
    import krishiv_py as kp

    conf = dict(SPARK_DEFAULTS) if spark_defaults else {}
    root = tempfile.mkdtemp(prefix="krishiv-soak-")
    samples: list[dict[str, Any]] = []
    try:
        with kp.Session.embedded(
            durability="single-node-durable", state_dir=os.path.join(root, "state"), spark_conf=conf
        ) as session:
            # "committed": the spool deletes what the job committed, as a long-running job needs.
            first = f"{SCHEMA}, campaign bigint" if chain else SCHEMA
            stream, sender = session.memory_stream(first, name="events", retention="committed")
            other, other_sender = session.memory_stream(SCHEMA, name="others", retention="committed")
            if chain:
                pipeline: Any = chained(stream, other, chain)
            elif join:
                pipeline = (
                    stream.watermark("t", LAG_MS)
                    .key_by("key")
                    .interval_join(
                        other.watermark("t", LAG_MS).key_by("key"), between=(-5_000, 5_000), how="full"
                    )
                    .allowed_lateness(LATENESS_MS)
                    .accumulation("retracting")
                )
            else:
                windows = (
                    stream.watermark("t", LAG_MS)
                    .key_by("key")
                    .session_window(GAP_MS)
                    .allowed_lateness(LATENESS_MS)
                    .with_state_ttl(kp.StateTtlConfig(ttl_ms=TTL_MS))
                )
                pipeline = windows.agg(
                    kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("amount")).alias("total")
                )
            job = pipeline.start(kp.ParquetSink(os.path.join(root, "out")), name="soak", lowering="stateful")
            jvm = jvm_pid()
            spool = os.path.join(root, "state", "sources")
            t0 = time.monotonic()
            sent = 0
            for b, batch in enumerate(workload(keys, batches), start=1):
                if chain:
                    campaign = pc.bit_wise_and(batch.column("key"), CAMPAIGNS - 1)
                    sender.send(batch.append_column("campaign", campaign))
                else:
                    sender.send(batch)
                sent += batch.num_rows
                if join or chain:
                    later = pc.add(batch.column("t"), 1_000)
                    other_sender.send(batch.set_column(1, "t", later))
                    sent += batch.num_rows
                job.process_all_available()
                if b % every == 0 or b == batches:
                    samples.append(sample(job, session.spark, jvm, spool, b, time.monotonic() - t0))
                    s = samples[-1]
                    shown = figures_of(chain)
                    log(f"  batch {b:>4}: " + ", ".join(f"{shown[k]} {_show(k, s[k])}" for k in shown))
            sender.close()
            other_sender.close()
            job.await_termination(timeout_s=600)
            m = job.metrics()
            stage_rows, stage_files = stage_state(job.checkpoint_dir)
            end = {
                "rows_sent": sent,
                "micro_batches": m.batches,
                "state_windows_at_end": m.state_windows or 0,
                "state_evictions": m.state_evictions or 0,
                "mildly_late_events": m.mildly_late_events,
                "very_late_events": m.very_late_events,
                "seconds": round(time.monotonic() - t0, 1),
                "out_bytes": dir_bytes(os.path.join(root, "out")),
                "stage_rows_at_end": stage_rows,
                "stage_files_at_end": stage_files,
                "checkpoint_parts_at_end": checkpoint_parts(job.checkpoint_dir),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return samples, end


def chained(stream: Any, other: Any, by: str) -> Any:
    """Join, a window per key after it (one operator call), an aggregation per ``by`` (a stage).

    The window is keyed by key and campaign for ``by="campaign"``, by key
    alone for ``by="window_start"``.
    """
    import krishiv_py as kp

    joined = (
        stream.watermark("t", LAG_MS)
        .key_by("key")
        .interval_join(other.watermark("t", LAG_MS).key_by("key"), between=(-5_000, 5_000))
        .allowed_lateness(LATENESS_MS)
    )
    window_keys = ("key", "campaign") if by == "campaign" else ("key",)
    windows = (
        joined.key_by(*window_keys)
        .tumbling_window(PERIOD_MS)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("pairs"), kp.sum(kp.col("amount")).alias("total"))
    )
    return windows.key_by(by).agg(
        kp.count(kp.col("*")).alias("windows"),
        kp.sum(kp.col("pairs")).alias("pairs"),
        kp.sum(kp.col("total")).alias("total"),
        kp.max(kp.col("pairs")).alias("most"),
    )


def figures_of(chain: str | None) -> dict[str, str]:
    """The figures a run judges: with a stage after the operator (``chain``), the stage's too."""
    return {**FIGURES, **STAGE_FIGURES} if chain else FIGURES


def flatness(
    samples: list[dict[str, Any]], warmup: int, figures: dict[str, str] = FIGURES
) -> dict[str, dict[str, Any]]:
    """Per figure: the median over the first and the last quarter after warm-up, their ratio, flat or not."""
    after = [s for s in samples if s["batch"] > warmup]
    quarter = max(1, len(after) // 4)
    out = {}
    for key in figures:
        first = statistics.median(s[key] for s in after[:quarter])
        last = statistics.median(s[key] for s in after[-quarter:])
        ratio = last / first if first else (1.0 if not last else float("inf"))
        out[key] = {"first": first, "last": last, "ratio": round(ratio, 3), "flat": ratio <= FLAT_RATIO}
    return out


def _show(key: str, value: float) -> str:
    if key in ("state_windows", "stage_rows"):
        return f"{value:,.0f}"
    return f"{value / 2**10:,.1f} KB" if key == "stage_bytes" else f"{value / 2**20:,.1f} MB"


def markdown(
    flat: dict[str, dict[str, Any]], warmup: int, batches: int, figures: dict[str, str] = FIGURES
) -> str:
    lines = [
        f"| figure | first quarter after batch {warmup} (median) | last quarter (median) "
        "| last ÷ first | flat |",
        "|---|---:|---:|---:|:---:|",
    ]
    for key, label in figures.items():
        f = flat[key]
        lines.append(
            f"| {label} | {_show(key, f['first'])} | {_show(key, f['last'])} | {f['ratio']:.2f} | "
            f"{'yes' if f['flat'] else 'NO'} |"
        )
    return "\n".join(lines)


def plot(samples: list[dict[str, Any]], warmup: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [s["batch"] for s in samples]
    mb = 2**20
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [
        (axes[0][0], "live state", [("windows in state (÷1000)", "state_windows", 1000)], "thousands"),
        (
            axes[0][1],
            "JVM",
            [
                ("heap after GC", "jvm_heap_bytes", mb),
                ("RSS outside the heap", "jvm_native_bytes", mb),
                ("whole RSS", "jvm_rss_bytes", mb),
            ],
            "MB",
        ),
        (
            axes[1][0],
            "Python",
            [("Spark's Python workers", "python_workers_rss_bytes", mb), ("driver", "driver_rss_bytes", mb)],
            "MB (RSS)",
        ),
        (
            axes[1][1],
            "on disk",
            [("checkpoint", "checkpoint_bytes", mb), ("memory stream spool", "spool_bytes", mb)],
            "MB",
        ),
    ]
    for ax, name, lines, unit in panels:
        for label, key, scale in lines:
            ax.plot(x, [s[key] / scale for s in samples], label=label)
        ax.axvspan(0, warmup, color="0.9", label="warm-up")
        ax.set_title(name)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="lower right")
    for ax in axes[1]:
        ax.set_xlabel("batch")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--every", type=int, default=5, help="batches between samples")
    p.add_argument("--warmup", type=int, default=60, help="batches before the figures must be flat")
    p.add_argument(
        "--spark-defaults",
        action="store_true",
        help="Spark's own checkpoint retention, maintenance interval and UI history (for comparison)",
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--join", action="store_true", help="a full outer interval join instead of sessions")
    shape.add_argument(
        "--chain",
        choices=("campaign", "window_start"),
        help="a join, a window per key after it, then an aggregation per campaign or window start",
    )
    p.add_argument("--plot", action="store_true", help=f"draw {PLOT.relative_to(PLOT.parent.parent)}")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    if a.batches < a.warmup + 8 * a.every:
        p.error("--batches must leave at least 8 samples after --warmup")
    settings = "Spark's defaults" if a.spark_defaults else "krishiv_py's settings"
    print(f"soak: {a.keys:,} keys, {a.batches} batches, {settings}", flush=True)
    samples, end = soak(
        keys=a.keys,
        batches=a.batches,
        every=a.every,
        spark_defaults=a.spark_defaults,
        join=a.join,
        chain=a.chain,
    )
    figures = figures_of(a.chain)
    flat = flatness(samples, a.warmup, figures)
    # Every key's session ends: TTL expired it during the run, or the end of input closed it;
    # a join's rows leave state as the watermark passes them, and a window's once it closed:
    # only a stage's aggregation per key is left (a row per key, kept as long as the job runs).
    left = end["state_windows_at_end"] - end["stage_rows_at_end"]
    checks = left == 0 and (a.join or bool(a.chain) or end["state_evictions"] > 0)
    ok = checks and all(f["flat"] for f in flat.values())
    print(markdown(flat, a.warmup, a.batches, figures))
    print(json.dumps(end))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "machine": machine(),
                "args": {k: str(v) for k, v in vars(a).items()},
                "settings": SPARK_DEFAULTS if a.spark_defaults else "krishiv_py's",
                "end": end,
                "flatness": flat,
                "checks": checks,
                "samples": samples,
            },
            indent=1,
        )
    )
    if a.plot:
        plot(
            samples,
            a.warmup,
            PLOT,
            f"Stateful lowering, {a.keys:,} keys, {a.batches} batches, TTL {TTL_MS // 1000} s, "
            f"allowed lateness {LATENESS_MS // 1000} s, RocksDB, {settings}",
        )
    print("flat" if ok else "NOT FLAT or a check failed", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
