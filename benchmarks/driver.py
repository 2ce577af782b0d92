"""Runs runner processes, samples their memory, and collects their reports."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.protocol import PREFIX

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_S = 0.05


@dataclass
class RunOutput:
    """What one runner process reported, with the peak memory of each query phase."""

    results: list[dict[str, Any]] = field(default_factory=list)
    #: The ``detail`` lines, in the order reported.
    details: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    process_peak_rss_mb: float = 0.0
    returncode: int = 0
    log: str = ""


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_process(cmd: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None) -> RunOutput:
    """Run ``cmd`` (a runner speaking :mod:`benchmarks.protocol`), sampling its process tree's RSS.

    The peak resident memory of the whole tree (Python, the JVM it starts,
    Python workers) is kept per phase, ``"<runner> <query>"``, between
    ``start`` and ``end``.
    """
    out = RunOutput()
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        list(cmd),
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    ps = psutil.Process(proc.pid)
    phase: list[str | None] = [None]
    lock = threading.Lock()
    stop = threading.Event()
    log: list[str] = []

    def sample() -> None:
        while not stop.is_set():
            rss = _tree_rss(ps) / 2**20
            with lock:
                out.process_peak_rss_mb = max(out.process_peak_rss_mb, rss)
                if phase[0] is not None:
                    out.peak_rss_mb[phase[0]] = max(out.peak_rss_mb.get(phase[0], 0.0), rss)
            stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    killer = threading.Timer(timeout_s, kill)
    killer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith(PREFIX):
                log.append(line)
                continue
            kind, _, payload = line[len(PREFIX) :].rstrip("\n").partition(" ")
            with lock:
                if kind == "start":
                    phase[0] = payload
                    out.peak_rss_mb[payload] = _tree_rss(ps) / 2**20
                elif kind == "end":
                    phase[0] = None
                elif kind == "result":
                    out.results.append(json.loads(payload))
                elif kind == "detail":
                    out.details.append(json.loads(payload))
        out.returncode = proc.wait()
    finally:
        killer.cancel()
        stop.set()
        sampler.join()
    out.log = "".join(log[-200:])
    if killed.is_set():
        out.log += f"\n(killed after {timeout_s:.0f} s)"
    return out


def python_for_flink(explicit: str | None) -> tuple[str | None, str]:
    """An interpreter with PyFlink, and how it was found (or why there is none)."""
    candidates = [
        (explicit, "--flink-python"),
        (os.environ.get("KRISHIV_BENCH_FLINK_PYTHON"), "KRISHIV_BENCH_FLINK_PYTHON"),
        (str(ROOT / ".nox" / "flink" / "bin" / "python"), ".nox/flink"),
    ]
    for path, how in candidates:
        if path and Path(path).exists():
            return path, how
    import importlib.util

    if importlib.util.find_spec("pyflink") is not None:
        return sys.executable, "this interpreter"
    return None, (
        "PyFlink is not installed: install the 'flink' extra in an environment of its own "
        "(nox -s bench does) and pass --flink-python or set KRISHIV_BENCH_FLINK_PYTHON"
    )


@contextlib.contextmanager
def timed(label: str) -> Iterator[None]:
    """Print ``label`` and, when the block ends, how long it took (progress on stderr)."""
    t = time.perf_counter()
    print(f"-- {label} ...", file=sys.stderr, flush=True)
    yield
    print(f"   {label}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
