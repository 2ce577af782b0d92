"""Local Spark against a standalone cluster on this machine: the tumbling query both ways, in one run.

``python -m benchmarks.cluster`` starts a :class:`~krishiv_py.devtools.LocalCluster`
(1 worker with 2 cores and 1 GiB, as the test suite's ``spark_cluster``
fixture), then runs the benchmark's ``tumbling`` query (per user, 1-minute
windows, count and sum) over the cached clickstream of :mod:`benchmarks.data`
with the Spark runner (:mod:`benchmarks.spark_runner`) in two modes:

``local``
    ``Session.embedded()``: Spark in the runner's own JVM (``local[*]``).
``cluster``
    ``Session.connect(<the cluster's master>)`` (the runner's ``--master``):
    the runner's process is the driver, the tasks run in an executor JVM the
    worker starts, and driver and executor talk over loopback.

Each mode runs in a fresh runner process per round (one SparkContext per
process): start the session, one untimed warm-up run, one timed run, per
runner (several runners take turns within the process). The two modes take
turns over ``--repeat`` rounds, which one goes first alternating (local,
cluster, cluster, local, ...), so load from elsewhere on a shared machine hits
both alike. events/s is the events over the median timed wall-clock time of
the rounds; the ratio is cluster ÷ local events/s (below 1: the cluster is
slower), also per round. Both modes must give the same result rows.

Where the time goes comes from the same runs:

* the runner's ``--phases``: Spark's ``durationMs`` per phase summed over
  the run's micro-batches, and the task metrics of the Spark stages the run
  submitted (task deserialization, run and CPU time, GC, result
  serialization, the delay from a stage's submission to its first task's
  launch); the fixed costs outside the timing (session start, when the
  executor joined, the warm-up run);
* :class:`ProcessWatch`, sampling this process's descendants every second
  in both modes: CPU time and time runnable but waiting for a CPU (Linux
  schedstat) of the driver JVM, the executor JVM, the master and worker,
  per JVM thread name (JIT compilers, task threads, ...), the executor
  JVMs' ``-X`` flags and any Python process under the worker;
* the executors' own log (INFO, 1 s resolution): the broadcast variables
  they read from the driver and how long each read took, their map output
  fetches and state store reports to the driver.

    python -m benchmarks.cluster            # 1M events in 20 files, 3 rounds
    python -m benchmarks.cluster --quick    # 50k events in 5 files

Writes ``benchmarks/results/cluster-latest.json`` and prints the tables as
markdown; exits 1 when a run failed or the modes' results differ. The
executors read the dataset by its local path, which every executor of a
cluster on this machine sees; a cluster of several machines would need the
dataset directory shared at the same path.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from benchmarks import data
from benchmarks.driver import run_process, timed
from benchmarks.report import machine
from krishiv_py.devtools import LocalCluster

RESULTS = Path(__file__).parent / "results" / "cluster-latest.json"
QUERY = "tumbling"
RUNNERS = ("krishiv-native", "pyspark-streaming")
MODES = ("local", "cluster")
SAMPLE_S = 1.0  # seconds between samples of the processes' CPU use
LOOKUP_EVERY = 3  # samples between looking the processes up again


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small inputs (50,000 events in 5 files)")
    p.add_argument("--events", type=int, help="clickstream events (default 1,000,000; quick 50,000)")
    p.add_argument("--files", type=int, help="files, one micro-batch each (default 20; quick 5)")
    p.add_argument("--repeat", type=int, default=3, help="rounds, each one local and one cluster process")
    p.add_argument(
        "--runner",
        action="append",
        choices=RUNNERS,
        help="runners to time (default krishiv-native; several take turns within each process)",
    )
    p.add_argument("--workers", type=int, default=1, help="cluster workers (default 1)")
    p.add_argument("--cores", type=int, default=2, help="cores per worker (default 2)")
    p.add_argument("--memory", default="1g", help="memory per worker (default 1g: one executor's default)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per runner process")
    p.add_argument("--out", default=str(RESULTS), help="the JSON file to write")
    a = p.parse_args(argv)
    a.events = a.events or (50_000 if a.quick else 1_000_000)
    a.files = a.files or (5 if a.quick else 20)
    a.runner = a.runner or ["krishiv-native"]
    return a


# --- what runs where -------------------------------------------------------------------------------------

# Process roles, from the command line.
ROLES = (
    ("executor", "CoarseGrainedExecutorBackend"),
    ("master", "org.apache.spark.deploy.master.Master"),
    ("worker", "org.apache.spark.deploy.worker.Worker"),
    ("runner", "benchmarks.spark_runner"),
)


def _role(cmd: list[str]) -> str | None:
    """What a process is, from its command line (None: none of ours).

    ``executor``, ``master``, ``worker``, ``runner`` (the driver's Python),
    ``driver`` (its JVM) or ``python-worker`` (PySpark's daemon or workers,
    wherever they run).
    """
    line = " ".join(cmd)
    for role, marker in ROLES:
        if marker in line:
            return role
    if cmd and cmd[0].endswith("java"):
        return "driver"
    if "pyspark" in line:
        return "python-worker"
    return None


def _threads(pid: int) -> dict[tuple[int, int, int], tuple[str, int, int]]:
    """The threads of ``pid``: ``(pid, tid, start time)`` -> (name, ns on a CPU, ns waiting for one).

    From Linux's ``/proc/<pid>/task/<tid>/stat`` (name, start time: thread
    ids are reused) and ``schedstat`` (time on a CPU, time runnable in the
    run queue).
    """
    out = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/task/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/task/{entry}/schedstat") as f:
                    on_cpu, waiting = f.read().split()[:2]
                name = _THREAD_NUMBER.sub("", stat[stat.index("(") + 1 : stat.rindex(")")])
                started = int(stat[stat.rindex(")") + 2 :].split()[19])
                out[pid, int(entry), started] = (name, int(on_cpu), int(waiting))
    return out


_THREAD_NUMBER = re.compile(r"([#\-\s]*\d+)+$")  # "GC Thread#1" -> "GC Thread"
# (pid, thread id, thread start time) -> (role, thread name, ns on a CPU, ns waiting for one)
Threads = dict[tuple[int, int, int], tuple[str, str, int, int]]


class ProcessWatch:
    """Samples this process's descendants (the runner, its JVM, the cluster) while a runner runs.

    Every :data:`SAMPLE_S` it records, per thread of each process, the time
    it spent on a CPU and waiting in the run queue for one (Linux schedstat),
    so that :meth:`cpu_in` can tell, for a run's window, how much CPU each
    role (and each kind of thread in it, by thread name) used and how long
    its threads were runnable but not running; a thread counts from its
    first to its last sample in the window. The processes themselves are
    looked up every :data:`LOOKUP_EVERY` samples. Also keeps each executor
    JVM's ``-X`` flags and every Python process started under a worker
    (PySpark's daemon and workers start only for Python code in tasks).
    """

    def __init__(self) -> None:
        self.samples: list[tuple[float, Threads]] = []
        self.executor_flags: dict[str, list[str]] = {}  # by application id
        self.python_under_worker: dict[int, str] = {}
        #: CPU seconds the sampling thread used (its cost on the machine, in both modes).
        self.sampling_cpu_s = 0.0
        self._procs: dict[int, str] = {}  # pid -> role
        self._stop = threading.Event()

    def _lookup(self) -> None:
        try:
            procs = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        roles: dict[int, str] = {}
        for proc in procs:
            try:
                cmd = proc.cmdline()
            except psutil.Error:
                continue
            role = _role(cmd)
            if role is None:
                continue
            roles[proc.pid] = role
            if role == "executor" and "--app-id" in cmd[:-1]:  # (a child forked by it shows its command too)
                self.executor_flags[cmd[cmd.index("--app-id") + 1]] = [c for c in cmd if c.startswith("-X")]
        for pid, role in roles.items():
            if role == "python-worker":
                with contextlib.suppress(psutil.Error):
                    if any(roles.get(q.pid) == "worker" for q in psutil.Process(pid).parents()):
                        self.python_under_worker[pid] = " ".join(psutil.Process(pid).cmdline())[:200]
        self._procs = roles

    def _sample(self, n: int) -> None:
        if n % LOOKUP_EVERY == 0:
            self._lookup()
        now: Threads = {}
        for pid, role in self._procs.items():
            for key, (name, on_cpu, waiting) in _threads(pid).items():
                now[key] = (role, name, on_cpu, waiting)
        self.samples.append((time.time(), now))

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self._stop.clear()

        def loop() -> None:
            cpu = time.thread_time()
            n = 0
            while not self._stop.is_set():
                self._sample(n)
                n += 1
                self._stop.wait(SAMPLE_S)
            self.sampling_cpu_s += time.thread_time() - cpu

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def cpu_in(self, t0: float, t1: float) -> dict[str, Any]:
        """For the samples within ``[t0, t1]``: per role, CPU seconds, seconds waiting for a CPU, and
        CPU seconds per thread name; ``sampled``: how far the first and last sample are from the ends."""
        inside = [(t, threads) for t, threads in self.samples if t0 <= t <= t1]
        out: dict[str, Any] = {}
        if len(inside) < 2:
            return out
        first: Threads = {}
        last: Threads = {}
        for _, threads in inside:
            for key, value in threads.items():
                first.setdefault(key, value)
                last[key] = value
        for key, (role, name, on_cpu, waiting) in last.items():
            _, _, on0, wait0 = first[key]
            acc = out.setdefault(role, {"cpu_s": 0.0, "waiting_s": 0.0, "threads": {}})
            acc["cpu_s"] += (on_cpu - on0) / 1e9
            acc["waiting_s"] += (waiting - wait0) / 1e9
            acc["threads"][name] = acc["threads"].get(name, 0.0) + (on_cpu - on0) / 1e9
        out["sampled"] = {"from": inside[0][0] - t0, "to": t1 - inside[-1][0]}
        return out


# Executor log lines (log4j's default layout, UTC: the executors run with -Duser.timezone=UTC).
_LOG_LINE = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) INFO (\S+): (.*)$")
_BROADCAST = re.compile(r"Reading broadcast variable \d+ took (\d+) ms")
LOG_EVENTS = {
    "broadcast_reads": ("TorrentBroadcast", "Reading broadcast variable"),
    "map_output_fetches": ("MapOutputTrackerWorker", "Doing the fetch"),
    "state_store_reports": ("StateStore", "Reported that the loaded instance"),
    "tasks": ("Executor", "Running task"),
}


def executor_log_events(log_dir: str) -> list[tuple[float, str, int]]:
    """``(epoch second, event, ms)`` from the executors' logs: broadcast reads (with their ms) and
    the other round trips to the driver that executors log (map output fetches, state store reports)."""
    events = []
    for path in Path(log_dir).glob("worker-*-work/app-*/*/stderr"):
        with open(path, errors="replace") as f:
            for line in f:
                m = _LOG_LINE.match(line)
                if not m:
                    continue
                when = dt.datetime.strptime(m[1], "%y/%m/%d %H:%M:%S").replace(tzinfo=dt.UTC).timestamp()
                for event, (logger, text) in LOG_EVENTS.items():
                    if m[2] == logger and m[3].startswith(text):
                        took = _BROADCAST.match(m[3])
                        events.append((when, event, int(took[1]) if took else 0))
    return events


def log_events_in(events: list[tuple[float, str, int]], t0: float, t1: float) -> dict[str, int]:
    """Counts of each event in ``[t0, t1]`` (whole seconds: the log's resolution), and broadcast read ms."""
    out = dict.fromkeys(LOG_EVENTS, 0) | {"broadcast_read_ms": 0}
    for when, event, ms in events:
        if int(t0) <= when <= int(t1):
            out[event] += 1
            if event == "broadcast_reads":
                out["broadcast_read_ms"] += ms
    return out


# --- runs ------------------------------------------------------------------------------------------------


def _cmd(a: argparse.Namespace, dataset: str, master: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks.spark_runner", "--query", QUERY, "--phases"]
    cmd += [x for r in a.runner for x in ("--runner", r)]
    if len(a.runner) > 1:
        cmd.append("--interleave")
    # The tumbling query reads only the clickstream; the runner's --nexmark is unused.
    cmd += ["--clickstream", dataset, "--nexmark", dataset, "--repeat", "1"]
    return cmd + (["--master", master] if master else [])


def _rounds(a: argparse.Namespace, dataset: str, cluster: LocalCluster) -> dict[str, Any]:
    """Every round's runs and the runners' details, with the CPU use of each process role per run."""
    runs: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    watch = ProcessWatch()
    for rnd in range(a.repeat):
        for mode in MODES if rnd % 2 == 0 else MODES[::-1]:
            master = cluster.master_url if mode == "cluster" else None
            with timed(f"round {rnd + 1}/{a.repeat}: {mode}"), watch.watching():
                out = run_process(_cmd(a, dataset, master), timeout_s=a.timeout)
            for runner in a.runner:
                got = [r for r in out.results if r.get("runner") == runner]
                rec = got[0] if got else {"status": "failed", "reason": out.log[-600:]}
                if rec.get("status") == "ok":
                    rec = {**rec, "wall_s": rec["walls"][-1]}
                runs.append({**rec, "runner": runner, "mode": mode, "round": rnd})
                if rec.get("status") != "ok":
                    print(f"   {runner} ({mode}) failed: {rec.get('reason')}", file=sys.stderr)
            for d in out.details:
                if d.get("kind") == "phases" and "started_at" in d:
                    d["processes"] = watch.cpu_in(d["started_at"], d["ended_at"])
                details.append({**d, "mode": mode, "round": rnd})
    events = executor_log_events(cluster.log_dir)
    for d in details:
        if d["mode"] == "cluster" and d.get("kind") == "phases" and "started_at" in d:
            d["executor_log"] = log_events_in(events, d["started_at"], d["ended_at"])
    return {
        "runs": runs,
        "details": details,
        "executor_jvm_flags": sorted({" ".join(f) for f in watch.executor_flags.values()}),
        "executor_jvms": len(watch.executor_flags),
        "python_processes_under_worker": len(watch.python_under_worker),
        "python_commands_under_worker": sorted(set(watch.python_under_worker.values()))[:10],
        "sampling_cpu_s": round(watch.sampling_cpu_s, 2),
        "samples": len(watch.samples),
    }


# --- summary ---------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(raw: dict[str, Any], runners: list[str], events: int) -> list[dict[str, Any]]:
    """Per runner: events/s of each mode (median wall over rounds), the ratio, per-round ratios, same rows."""
    out: list[dict[str, Any]] = []
    for runner in runners:
        ok = {m: [r for r in raw["runs"] if r["runner"] == runner and r["mode"] == m] for m in MODES}
        if any(r.get("status") != "ok" for m in MODES for r in ok[m]) or not all(ok.values()):
            out.append({"runner": runner, "status": "failed"})
            continue
        walls = {m: [r["wall_s"] for r in ok[m]] for m in MODES}
        rate = {m: events / statistics.median(walls[m]) for m in MODES}
        by_round = {(r["mode"], r["round"]): r["wall_s"] for m in MODES for r in ok[m]}
        rounds = sorted({rnd for _, rnd in by_round})
        digests = {(r["rows"], r["digest"]) for m in MODES for r in ok[m]}
        out.append(
            {
                "runner": runner,
                "status": "ok",
                "local_events_per_s": round(rate["local"]),
                "cluster_events_per_s": round(rate["cluster"]),
                "ratio_cluster_to_local": round(rate["cluster"] / rate["local"], 3),
                "round_ratios": [
                    round(by_round["local", rnd] / by_round["cluster", rnd], 3)
                    for rnd in rounds
                    if ("local", rnd) in by_round and ("cluster", rnd) in by_round
                ],
                "local_walls_s": [round(w, 3) for w in walls["local"]],
                "cluster_walls_s": [round(w, 3) for w in walls["cluster"]],
                "rows": ok["local"][0]["rows"],
                "same_rows": len(digests) == 1,
            }
        )
    return out


def _ms(group: str, *names: str, scale: float = 1.0) -> Callable[[dict[str, Any]], float | None]:
    """The sum of ``detail[group][name]`` over ``names``, times ``scale``."""
    return lambda d: sum(float(d[group].get(n) or 0) for n in names) * scale


def _proc(field: str, *roles: str) -> Callable[[dict[str, Any]], float | None]:
    """``field`` (``cpu_s``, ``waiting_s``) summed over process ``roles`` in the run's window."""

    def get(d: dict[str, Any]) -> float | None:
        procs = d.get("processes") or {}
        found = [procs[r][field] for r in roles if r in procs]
        return float(sum(found)) if found else None

    return get


def _log(event: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda d: float(d["executor_log"][event]) if "executor_log" in d else None


# Rows of the where-the-time-goes table: label, the value read off one run's phases detail.
PHASE_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], float | str | None]], ...] = (
    ("wall-clock time of the run (s)", lambda d: float(d["wall_s"])),
    ("micro-batches", lambda d: float(d["micro_batches"])),
    ("triggerExecution, all micro-batches (ms)", _ms("duration_ms", "triggerExecution")),
    ("· addBatch (ms)", _ms("duration_ms", "addBatch")),
    ("· queryPlanning (ms)", _ms("duration_ms", "queryPlanning")),
    ("· latestOffset + getBatch (ms)", _ms("duration_ms", "latestOffset", "getBatch")),
    ("· walCommit + commitOffsets (ms)", _ms("duration_ms", "walCommit", "commitOffsets")),
    ("Spark jobs / stages / tasks", lambda d: f"{d['jobs']} / {d['stages']} / {d['tasks']['numTasks']}"),
    ("stages, submission to completion (ms)", lambda d: float(d["stage_wall_ms"])),
    ("· submission to first task launch (ms)", lambda d: float(d["first_launch_delay_ms"])),
    ("tasks: deserialization (ms)", _ms("tasks", "executorDeserializeTime")),
    ("tasks: run time (ms)", _ms("tasks", "executorRunTime")),
    ("tasks: CPU time (ms)", _ms("tasks", "executorCpuTime", scale=1e-6)),
    ("tasks: GC (ms)", _ms("tasks", "jvmGcTime")),
    ("tasks: result serialization (ms)", _ms("tasks", "resultSerializationTime")),
    ("driver JVM: CPU (s)", _proc("cpu_s", "driver")),
    ("driver JVM: waiting for a CPU (s)", _proc("waiting_s", "driver")),
    ("executor JVM: CPU (s)", _proc("cpu_s", "executor")),
    ("executor JVM: waiting for a CPU (s)", _proc("waiting_s", "executor")),
    ("master + worker JVMs: CPU (s)", _proc("cpu_s", "master", "worker")),
    ("driver's Python: CPU (s)", _proc("cpu_s", "runner")),
    ("Python workers: CPU (s)", _proc("cpu_s", "python-worker")),
    ("executor log: broadcast reads from the driver", _log("broadcast_reads")),
    ("· their time (ms)", _log("broadcast_read_ms")),
    ("executor log: map output fetches from the driver", _log("map_output_fetches")),
    ("executor log: state store reports to the driver", _log("state_store_reports")),
)


def timed_runs(raw: dict[str, Any], runner: str) -> dict[str, list[dict[str, Any]]]:
    """The phases details of ``runner``'s timed runs, per mode."""
    return {
        m: [
            d
            for d in raw["details"]
            if d.get("kind") == "phases"
            and d.get("runner") == runner
            and d["mode"] == m
            and not d.get("warmup")
            and "error" not in d
        ]
        for m in MODES
    }


# The JVMs of the thread table: (mode, process role).
THREAD_COLUMNS = (("local", "driver"), ("cluster", "driver"), ("cluster", "executor"))


def thread_table(raw: dict[str, Any], runner: str, top: int = 8) -> list[dict[str, Any]]:
    """CPU seconds per thread name in the JVMs of :data:`THREAD_COLUMNS`, timed runs, median over rounds.

    The ``top`` names by their largest value, then the rest summed as ``(other threads)``.
    """
    runs = timed_runs(raw, runner)
    per: dict[tuple[str, str], dict[str, float]] = {}
    for mode, role in THREAD_COLUMNS:
        tables = [(d.get("processes") or {}).get(role, {}).get("threads", {}) for d in runs[mode]]
        seen = {n for t in tables for n in t}
        per[mode, role] = {n: statistics.median([t.get(n, 0.0) for t in tables]) for n in seen}
    names = sorted(
        {n for col in per.values() for n in col}, key=lambda n: -max(c.get(n, 0.0) for c in per.values())
    )
    rows = [
        {"thread": n, **{f"{m} {r}": per[m, r].get(n, 0.0) for m, r in THREAD_COLUMNS}} for n in names[:top]
    ]
    rest = names[top:]
    rows.append(
        {
            "thread": "(other threads)",
            **{f"{m} {r}": sum(per[m, r].get(n, 0.0) for n in rest) for m, r in THREAD_COLUMNS},
        }
    )
    return rows


def phase_table(raw: dict[str, Any], runner: str) -> list[dict[str, Any]]:
    """Median over rounds of each :data:`PHASE_ROWS` value of the timed runs, per mode."""
    runs = timed_runs(raw, runner)
    rows = []
    for label, value in PHASE_ROWS:
        row: dict[str, Any] = {"what": label}
        for m in MODES:
            values = [v for v in map(value, runs[m]) if v is not None]
            nums = [v for v in values if isinstance(v, float)]
            row[m] = _median(nums) if nums else (values[0] if values else None)
        rows.append(row)
    return rows


def fixed_costs(raw: dict[str, Any], runner: str) -> list[dict[str, Any]]:
    """Outside the timing, median over rounds: session start, executor joining, the warm-up run."""

    def of(mode: str, kind: str) -> list[dict[str, Any]]:
        return [d for d in raw["details"] if d.get("kind") == kind and d["mode"] == mode]

    picks: tuple[tuple[str, Callable[[str], list[float]]], ...] = (
        ("session start (s)", lambda m: [d["session_start_s"] for d in of(m, "session")]),
        (
            "executor joined, after the application started (s)",
            lambda m: [
                e["joined_after_s"] for d in of(m, "session") for e in d["executors"] if e["id"] != "driver"
            ],
        ),
        (
            "warm-up run (s)",
            lambda m: [d["wall_s"] for d in of(m, "phases") if d.get("runner") == runner and d.get("warmup")],
        ),
    )
    rows = []
    for label, pick in picks:
        rows.append({"what": label, **{m: _median(pick(m)) for m in MODES}})
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def markdown(summary: list[dict[str, Any]], raw: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        f"# Local vs a standalone cluster on this machine ({meta['date']})",
        "",
        f"`{QUERY}` query, {meta['events']:,} events in {meta['files']} files; {meta['repeat']} round(s), "
        f"each a fresh process per mode (warm-up, then one timed run); cluster: {meta['cluster']}.",
        "",
        "| runner | local (events/s) | cluster (events/s) | cluster ÷ local | per round | same rows |",
        "|---|---:|---:|---:|---|:---:|",
    ]
    for s in summary:
        if s["status"] != "ok":
            lines.append(f"| {s['runner']} | failed | | | | |")
            continue
        lines.append(
            f"| {s['runner']} | {s['local_events_per_s']:,} | {s['cluster_events_per_s']:,} | "
            f"**{s['ratio_cluster_to_local']:.3f}** | {', '.join(f'{r:.2f}' for r in s['round_ratios'])} | "
            f"{'yes' if s['same_rows'] else 'NO'} ({s['rows']:,}) |"
        )
    for s in summary:
        runner = s["runner"]
        lines += [
            "",
            f"Where the time goes, `{runner}`, timed runs (median over rounds):",
            "",
            "| | local | cluster | cluster - local |",
            "|---|---:|---:|---:|",
        ]
        for row in [*phase_table(raw, runner), *fixed_costs(raw, runner)]:
            lo, cl = row["local"], row["cluster"]
            diff = cl - lo if isinstance(lo, float | int) and isinstance(cl, float | int) else None
            lines.append(f"| {row['what']} | {_fmt(lo)} | {_fmt(cl)} | {_fmt(diff)} |")
        cols = [f"{m} {r}" for m, r in THREAD_COLUMNS]
        lines += [
            "",
            f"CPU seconds by JVM thread (Linux thread names), `{runner}`, timed runs (median over rounds):",
            "",
            f"| thread | {' | '.join(c + ' JVM' for c in cols)} |",
            f"|---|{'---:|' * len(cols)}",
        ]
        for trow in thread_table(raw, runner):
            lines.append(f"| {trow['thread']} | {' | '.join(f'{trow[c]:.2f}' for c in cols)} |")
    lines += [
        "",
        f"Under the worker during the cluster runs: {raw['executor_jvms']} executor JVM(s) "
        f"(flags: {'; '.join(raw['executor_jvm_flags']) or 'none'}), "
        f"{raw['python_processes_under_worker']} Python process(es). Sampling the processes' CPU use "
        f"took {raw['sampling_cpu_s']:.1f} s of CPU over {raw['samples']} samples (both modes).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    with timed("dataset"):
        ds = data.clickstream(data.ClickstreamSpec(events=a.events, files=a.files))
    cluster_desc = f"{a.workers} worker(s) x {a.cores} cores, {a.memory} each"
    with timed(f"cluster ({cluster_desc})"):
        cluster = LocalCluster(workers=a.workers, cores_per_worker=a.cores, memory=a.memory).start()
    try:
        raw = _rounds(a, str(ds.root), cluster)
        startup_s = cluster.startup_s
    finally:
        cluster.stop()
    summary = summarise(raw, a.runner, a.events)
    meta = machine() | {
        "mode": "quick" if a.quick else "full",
        "query": QUERY,
        "events": a.events,
        "files": a.files,
        "repeat": a.repeat,
        "runners": a.runner,
        "cluster": cluster_desc,
        "cluster_startup_s": round(startup_s or 0.0, 1),
        "dataset": ds.root.name,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "summary": summary, **raw}, indent=2) + "\n")
    print(markdown(summary, raw, meta))
    print(f"wrote {out}", file=sys.stderr)
    bad = [s for s in summary if s["status"] != "ok" or not s["same_rows"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
