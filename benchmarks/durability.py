"""Durability profiles: the RocksDB state store against Spark's default, and what event-time TTL bounds.

Two measurements, each a ratio within one run (one JVM, one process):

``throughput``
    The benchmark's tumbling query (per ``user_id``, 1-minute tumbling
    windows, count and sum, watermark lag 5 s) as a streaming job on a
    memory stream, fed the clickstream of :mod:`benchmarks.data` in
    ``--batches`` batches (``send`` + ``process_all_available()`` per
    batch), once per durability profile: ``single-node-durable`` (RocksDB
    state store, changelog checkpointing) and ``dev-local`` (Spark's default
    HDFS-backed store), at each ``--keys`` count. The two jobs run side by
    side in one session and take each batch in turn (which one goes first
    alternates), after an untimed warm-up pair, so a busy spell on a shared
    machine slows both alike. events/s is the events over the seconds spent
    in ``process_all_available()`` (the durable ``send`` is the same for both
    profiles and is reported apart), the median over ``--repeat`` pairs.
    Every job's result rows are digested and must be the same for both
    profiles, or the run fails.
``ttl``
    State held by the stateful lowering after ``--ttl-keys`` distinct keys
    that go quiet: each key sends one row in each of 3 consecutive batches
    and is never seen again; ``--ttl-batches`` batches, 10 s of event time
    each. Sessions per key with a 1-hour gap (longer than the whole stream,
    so without a TTL no session ever closes) with and without
    ``with_state_ttl(StateTtlConfig(ttl_ms=20_000))``, both under
    ``--ttl-profile``. ``JobMetrics.state_windows`` after every batch; after
    the last one also ``state_bytes`` and the size on disk of the job's
    checkpoint state directory, and the ratios with / without TTL.
    Checked: without TTL every key's session is still in state and none
    fired; with TTL exactly the keys whose newest row is less than the TTL
    behind the last watermark are, and every other key's session expired
    (counted in ``state_evictions``) and fired once, with all its 3 rows.

    python -m benchmarks.durability           # 1M events per key count, 1M keys for the TTL part
    python -m benchmarks.durability --quick   # 200k events, 100k keys: about 5 minutes on 2 cores

Writes ``benchmarks/results/durability-latest.json`` and prints the tables
as markdown; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import krishiv_py as kp
from benchmarks.arrow import rows_of
from benchmarks.data import CLICKSTREAM_DDL, T0_MS, ClickstreamSpec, clickstream_table
from benchmarks.digest import digest
from benchmarks.queries import QUERIES, WATERMARK_LAG_MS
from benchmarks.report import machine
from benchmarks.spark_runner import krishiv_query
from krishiv_py.runtime.durability import Durability

RESULTS = Path(__file__).parent / "results" / "durability-latest.json"
ROCKSDB: Durability = "single-node-durable"
DEFAULT: Durability = "dev-local"
PROFILES: tuple[Durability, Durability] = (ROCKSDB, DEFAULT)

TTL_SCHEMA = "key bigint, t bigint, amount bigint"
TTL_APPEARANCES = 3  # batches each key sends a row in, consecutive
TTL_PERIOD_MS = 10_000  # event time covered by one batch
TTL_GAP_MS = 3_600_000  # session gap: longer than the stream, no session closes by itself
TTL_MS = 20_000


def _batches(table: pa.Table, count: int) -> list[pa.Table]:
    bounds = np.linspace(0, table.num_rows, count + 1).astype(np.int64)
    return [table.slice(int(lo), int(hi - lo)) for lo, hi in itertools.pairwise(bounds)]


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # a file Spark removed meanwhile
                total += os.path.getsize(os.path.join(root, f))
    return total


def _state_provider(checkpoint: str) -> str | None:
    """The state store provider Spark recorded in the checkpoint's first offset-log entry."""
    try:
        with open(os.path.join(checkpoint, "offsets", "0"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
    provider = conf.get("spark.sql.streaming.stateStore.providerClass")
    return str(provider).rsplit(".", 1)[-1] if provider else None


def _step(job: kp.Job, sender: kp.Sender, batch: pa.Table) -> tuple[float, float]:
    """Send one batch and process it: seconds spent sending, seconds spent processing."""
    t0 = time.perf_counter()
    sender.send(batch)
    t1 = time.perf_counter()
    job.process_all_available()
    return t1 - t0, time.perf_counter() - t1


def _feed(
    job: kp.Job, sender: kp.Sender, batches: list[pa.Table], after: Callable[[], None] | None = None
) -> tuple[float, float]:
    """:func:`_step` for each batch, then ``after`` (outside the timings); the total seconds of each."""
    sending = processing = 0.0
    for batch in batches:
        send_s, process_s = _step(job, sender, batch)
        sending += send_s
        processing += process_s
        if after is not None:
            after()
    return sending, processing


# --- 1. throughput per profile ----------------------------------------------------------------------


def run_pair(session: kp.Session, batches: list[pa.Table], name: str, first: int) -> list[dict[str, Any]]:
    """The tumbling query under each profile, two jobs side by side, fed batch by batch in turn.

    Each batch goes to one job, then to the other (which goes first alternates,
    starting with ``PROFILES[first]``), so a shared machine's slow spells fall
    on both profiles alike. Returns each job's timings, result digest and state.
    """
    query = QUERIES["tumbling"]
    jobs: dict[Durability, tuple[kp.Job, kp.Sender]] = {}
    sending = dict.fromkeys(PROFILES, 0.0)
    processing: dict[Durability, list[float]] = {p: [] for p in PROFILES}
    out: list[dict[str, Any]] = []
    try:
        for profile in PROFILES:
            job_name = f"{name}_{profile.replace('-', '_')}"
            stream, sender = session.memory_stream(CLICKSTREAM_DDL, name=job_name)
            job = krishiv_query(query, stream).start(kp.MemorySink(), name=job_name, durability=profile)
            jobs[profile] = (job, sender)
        for i, batch in enumerate(batches):
            order = PROFILES if (i + first) % 2 == 0 else PROFILES[::-1]
            for profile in order:
                send_s, process_s = _step(*jobs[profile], batch)
                sending[profile] += send_s
                processing[profile].append(process_s)
        for profile, (job, _) in jobs.items():
            rows, dig = digest(rows_of(query.columns)(job.results()))
            progress = job.progress()
            ops = (progress[-1].raw.get("stateOperators") if progress else None) or [{}]
            checkpoint = job.checkpoint_dir or ""
            out.append(
                {
                    "profile": profile,
                    "lowering": job.lowering,
                    "state_store": _state_provider(checkpoint),
                    "events": sum(b.num_rows for b in batches),
                    "batches": len(batches),
                    "send_s": round(sending[profile], 3),
                    "process_s": round(sum(processing[profile]), 3),
                    "process_s_per_batch": [round(x, 3) for x in processing[profile]],
                    "result_rows": rows,
                    "digest": dig,
                    "spark_state_rows": ops[0].get("numRowsTotal"),
                    "state_disk_bytes": dir_bytes(os.path.join(checkpoint, "state")),
                }
            )
    finally:
        for job, _ in jobs.values():
            job.stop()
    return out


def measure_throughput(
    session: kp.Session,
    *,
    events: int,
    keys: list[int],
    batches: int,
    repeat: int,
    log: Callable[[str], None],
) -> tuple[list[dict[str, Any]], bool]:
    runs: list[dict[str, Any]] = []
    warm = _batches(clickstream_table(ClickstreamSpec(events=max(events // 10, 1_000), keys=keys[0])), 4)
    run_pair(session, warm, "warmup", 0)  # JIT, Python workers, RocksDB's library: not in the timings
    ok = True
    summary: list[dict[str, Any]] = []
    for k in keys:
        data = _batches(clickstream_table(ClickstreamSpec(events=events, keys=k)), batches)
        per_profile: dict[str, list[dict[str, Any]]] = {p: [] for p in PROFILES}
        for i in range(repeat):
            for run in run_pair(session, data, f"tumbling_k{k}_{i}", i % 2):
                log(
                    f"  {k:>9,} keys  {run['profile']:<20} {run['events'] / run['process_s']:>10,.0f} "
                    f"events/s  ({run['process_s']:.1f} s, {run['result_rows']:,} rows, {run['digest']})"
                )
                runs.append(run | {"keys": k, "repeat": i})
                per_profile[run["profile"]].append(run)
        digests = {(r["result_rows"], r["digest"]) for rs in per_profile.values() for r in rs}
        agrees = len(digests) == 1
        ok = ok and agrees
        eps = {p: events / statistics.median(r["process_s"] for r in rs) for p, rs in per_profile.items()}
        first = {p: rs[0] for p, rs in per_profile.items()}
        summary.append(
            {
                "keys": k,
                "events": events,
                "batches": batches,
                "repeat": repeat,
                "lowering": first[ROCKSDB]["lowering"],
                "rocksdb_events_per_s": round(eps[ROCKSDB]),
                "default_events_per_s": round(eps[DEFAULT]),
                "ratio_rocksdb_vs_default": round(eps[ROCKSDB] / eps[DEFAULT], 3),
                "rocksdb_state_store": first[ROCKSDB]["state_store"],
                "default_state_store": first[DEFAULT]["state_store"],
                "rocksdb_state_disk_bytes": first[ROCKSDB]["state_disk_bytes"],
                "default_state_disk_bytes": first[DEFAULT]["state_disk_bytes"],
                "spark_state_rows": first[ROCKSDB]["spark_state_rows"],
                "result_rows": first[ROCKSDB]["result_rows"],
                "digest": first[ROCKSDB]["digest"],
                "agrees": agrees,
            }
        )
    return summary + runs, ok


# --- 2. state size with and without TTL -------------------------------------------------------------


def quiet_keys(keys: int, batches: int, seed: int = 1) -> list[pa.Table]:
    """Key ``k`` sends one row in each of 3 consecutive batches from its start batch, then goes quiet."""
    if batches < TTL_APPEARANCES:
        raise ValueError(f"--ttl-batches must be at least {TTL_APPEARANCES}")
    rng = np.random.default_rng(seed)
    cohorts = batches - TTL_APPEARANCES + 1
    start = np.arange(keys, dtype=np.int64) * cohorts // keys  # nondecreasing: each batch a key range
    out = []
    for b in range(batches):
        lo = int(np.searchsorted(start, b - TTL_APPEARANCES + 1, side="left"))
        hi = int(np.searchsorted(start, b, side="right"))
        n = hi - lo
        t = T0_MS + b * TTL_PERIOD_MS + rng.integers(0, TTL_PERIOD_MS, n)
        out.append(
            pa.table(
                {
                    "key": pa.array(np.arange(lo, hi, dtype=np.int64)),
                    "t": pa.array(t.astype(np.int64)),
                    "amount": pa.array(rng.integers(1, 100, n).astype(np.int64)),
                }
            )
        )
    return out


def active_within_ttl(batches: list[pa.Table], keys: int) -> int:
    """Keys whose newest row is less than the TTL behind the last watermark: what TTL should keep."""
    table = pa.concat_tables(batches)
    key, t = table.column("key").to_numpy(), table.column("t").to_numpy()
    newest = np.full(keys, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(newest, key, t)
    watermark = int(t.max()) - WATERMARK_LAG_MS
    return int((watermark - newest < TTL_MS).sum())


def run_sessions(
    session: kp.Session,
    batches: list[pa.Table],
    keys: int,
    *,
    ttl: bool,
    expected: int,
    profile: Durability,
    name: str,
) -> dict[str, Any]:
    """Sessions per key with or without TTL; the state after the last batch, ``expected`` windows in it."""
    stream, sender = session.memory_stream(TTL_SCHEMA, name=name)
    windowed = stream.watermark("t", WATERMARK_LAG_MS).key_by("key").session_window(TTL_GAP_MS)
    if ttl:
        windowed = windowed.with_state_ttl(kp.StateTtlConfig(ttl_ms=TTL_MS))
    pipeline = windowed.agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("amount")).alias("total"))
    job = pipeline.start(kp.MemorySink(), name=name, durability=profile, lowering="stateful")
    series: list[int] = []
    try:
        sending, processing = _feed(
            job, sender, batches, lambda: series.append(job.metrics().state_windows or 0)
        )
        m = job.metrics()
        fired = job.results()
    finally:
        job.stop()
    checkpoint = job.checkpoint_dir or ""
    windows = m.state_windows or 0
    evictions = m.state_evictions or 0
    complete = bool((fired.column("n").to_numpy() == TTL_APPEARANCES).all())
    # Without TTL no session closes: all of them are in state. With it, the keys active within the TTL
    # are, and every other key was expired and fired once, with all its rows.
    checks = windows == expected and fired.num_rows == keys - expected and complete
    if ttl:
        checks = checks and evictions == keys - expected
    return {
        "ttl_ms": TTL_MS if ttl else None,
        "keys": keys,
        "events": sum(b.num_rows for b in batches),
        "batches": len(batches),
        "profile": profile,
        "state_store": _state_provider(checkpoint),
        "process_s": round(processing, 3),
        "send_s": round(sending, 3),
        "state_windows": windows,
        "expected_state_windows": expected,
        "state_bytes": m.state_bytes,
        "state_evictions": evictions,
        "fired": fired.num_rows,
        "micro_batches": m.batches,
        "state_windows_per_batch": series,
        "state_disk_bytes": dir_bytes(os.path.join(checkpoint, "state")),
        "checks": checks,
    }


def measure_ttl(
    session: kp.Session, *, keys: int, batches: int, profile: Durability, log: Callable[[str], None]
) -> tuple[list[dict[str, Any]], bool]:
    data = quiet_keys(keys, batches)
    cohort = keys / (batches - TTL_APPEARANCES + 1)
    active = active_within_ttl(data, keys)
    runs = []
    for ttl in (False, True):
        expected = active if ttl else keys
        name = f"sessions_ttl{int(ttl)}"
        run = run_sessions(session, data, keys, ttl=ttl, expected=expected, profile=profile, name=name)
        log(
            f"  TTL {f'{TTL_MS // 1000} s' if ttl else 'none':<5} {run['state_windows']:>10,} windows "
            f"{run['state_bytes'] or 0:>14,} B  {run['state_disk_bytes']:>14,} B on disk  "
            f"({run['process_s']:.1f} s, checks {'ok' if run['checks'] else 'FAILED'})"
        )
        runs.append(run)
    without, with_ = runs
    summary = {
        "keys": keys,
        "batches": batches,
        "new_keys_per_batch": round(cohort),
        "keys_active_within_ttl": active,
        "profile": profile,
        "windows_without_ttl": without["state_windows"],
        "windows_with_ttl": with_["state_windows"],
        "ratio_windows": round(with_["state_windows"] / max(without["state_windows"], 1), 4),
        "bytes_without_ttl": without["state_bytes"],
        "bytes_with_ttl": with_["state_bytes"],
        "ratio_bytes": round((with_["state_bytes"] or 0) / max(without["state_bytes"] or 0, 1), 4),
        "disk_bytes_without_ttl": without["state_disk_bytes"],
        "disk_bytes_with_ttl": with_["state_disk_bytes"],
        "ratio_disk_bytes": round(with_["state_disk_bytes"] / max(without["state_disk_bytes"], 1), 4),
        "checks": without["checks"] and with_["checks"],
    }
    return [summary, *runs], bool(summary["checks"])


# --- report ---------------------------------------------------------------------------------------


def _mb(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:,.1f}"


def markdown(throughput: list[dict[str, Any]], ttl: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    summary = [r for r in throughput if "ratio_rocksdb_vs_default" in r]
    if summary:
        lines += [
            "| keys | events | RocksDB (events/s) | default store (events/s) | RocksDB ÷ default "
            "| state on disk, RocksDB / default (MB) | same rows |",
            "|---:|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in summary:
            lines.append(
                f"| {r['keys']:,} | {r['events']:,} | {r['rocksdb_events_per_s']:,} | "
                f"{r['default_events_per_s']:,} | **{r['ratio_rocksdb_vs_default']:.3f}** | "
                f"{_mb(r['rocksdb_state_disk_bytes'])} / {_mb(r['default_state_disk_bytes'])} | "
                f"{'yes' if r['agrees'] else 'NO'} ({r['result_rows']:,}) |"
            )
    if ttl:
        s, runs = ttl[0], ttl[1:]
        quarters = sorted({max(1, s["batches"] * q // 4) for q in (1, 2, 3, 4)})
        if lines:
            lines.append("")
        lines += [
            f"| {s['keys']:,} quiet keys | windows in state after "
            + " / ".join(str(q) for q in quarters)
            + " batches | state (MB) | state on disk (MB) | micro-batches | checks |",
            "|---|---:|---:|---:|---:|:---:|",
        ]
        for r in runs:
            label = "no TTL" if r["ttl_ms"] is None else f"TTL {r['ttl_ms'] // 1000} s"
            series = " / ".join(f"{r['state_windows_per_batch'][q - 1]:,}" for q in quarters)
            lines.append(
                f"| {label} | {series} | {_mb(r['state_bytes'])} | {_mb(r['state_disk_bytes'])} | "
                f"{r['micro_batches']:,} | {'ok' if r['checks'] else 'FAILED'} |"
            )
        lines.append(
            f"| with ÷ without | **{s['ratio_windows']:.3f}** (keys active within the TTL: "
            f"{s['keys_active_within_ttl']:,}) | **{s['ratio_bytes']:.3f}** | "
            f"{s['ratio_disk_bytes']:.3f} | | |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small inputs (200k events, 100k TTL keys)")
    p.add_argument("--events", type=int, help="events per key count (default 1,000,000; quick 200,000)")
    p.add_argument("--batches", type=int, help="batches per run (default 20; quick 10)")
    p.add_argument("--keys", type=int, action="append", help="key counts (default 1,000 and 100,000)")
    p.add_argument(
        "--repeat", type=int, help="timed pairs (a job per profile) per key count (default 2; quick 1)"
    )
    p.add_argument(
        "--ttl-keys", type=int, help="distinct keys of the TTL part (default 1,000,000; quick 100,000)"
    )
    p.add_argument("--ttl-batches", type=int, default=40, help="batches of the TTL part (default 40)")
    p.add_argument("--ttl-profile", choices=PROFILES, default=ROCKSDB, help="profile of the TTL part")
    p.add_argument("--only", choices=("throughput", "ttl"), help="run one part only")
    p.add_argument("--out", type=Path, default=RESULTS, help="the JSON results file")
    a = p.parse_args(argv)
    events = a.events or (200_000 if a.quick else 1_000_000)
    batches = a.batches or (10 if a.quick else 20)
    repeat = a.repeat or (1 if a.quick else 2)
    ttl_keys = a.ttl_keys or (100_000 if a.quick else 1_000_000)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="krishiv-bench-durability-")
    throughput: list[dict[str, Any]] = []
    ttl: list[dict[str, Any]] = []
    ok = True
    try:
        with kp.Session.embedded(app_name="krishiv-bench-durability", state_dir=root, progress=False) as s:
            if a.only in (None, "throughput"):
                log(f"throughput: tumbling query, {events:,} events in {batches} batches, {repeat} run(s)")
                throughput, good = measure_throughput(
                    s, events=events, keys=a.keys or [1_000, 100_000], batches=batches, repeat=repeat, log=log
                )
                ok = ok and good
            if a.only in (None, "ttl"):
                log(f"state TTL: {ttl_keys:,} quiet keys in {a.ttl_batches} batches, {a.ttl_profile}")
                ttl, good = measure_ttl(
                    s, keys=ttl_keys, batches=a.ttl_batches, profile=a.ttl_profile, log=log
                )
                ok = ok and good
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta = machine() | {
        "wall_s": round(time.monotonic() - started, 1),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"meta": meta, "throughput": throughput, "ttl": ttl}, indent=2) + "\n")
    print(markdown(throughput, ttl))
    print(f"\n{meta['wall_s']:.0f} s; written to {a.out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
