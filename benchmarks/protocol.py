"""How a runner process reports to the benchmark driver (standard library only).

A runner is a separate process (so its peak memory is its own) started as
``python -m benchmarks.<runner module> --query Q [--query Q ...] --clickstream DIR
--nexmark DIR --repeat R``. For each query it prints, on stdout:

* ``@@BENCH start <runner> <query>`` before its first (warm-up) run,
* ``@@BENCH result {json}`` with ``query``, ``runner``, ``events`` (rows read),
  ``walls`` (seconds of each timed run after one warm-up run, unless
  ``--no-warmup``), ``rows`` and
  ``digest`` (:func:`benchmarks.digest.digest` of the last run's result), or
  ``status`` ``"skipped"``/``"failed"`` with a ``reason``,
* ``@@BENCH end <runner> <query>``,
* optionally ``@@BENCH detail {json}``: anything else a runner measured (the
  Spark runner's ``--phases``: where each run's time went), collected as is.

The driver samples the process tree's resident memory between ``start`` and
``end``. Anything else on stdout or stderr is kept for diagnostics only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.digest import digest
from benchmarks.queries import Query

PREFIX = "@@BENCH "

Rows = list[Sequence[Any]]
T = TypeVar("T")


def emit(kind: str, payload: str) -> None:
    sys.stdout.write(f"{PREFIX}{kind} {payload}\n")
    sys.stdout.flush()


def detail(payload: Mapping[str, Any]) -> None:
    """Report ``payload`` (JSON-serialisable) as a ``detail`` line for the driver to keep."""
    emit("detail", json.dumps(payload))


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--query", action="append", required=True)
    p.add_argument("--clickstream", required=True, help="clickstream dataset directory")
    p.add_argument("--nexmark", required=True, help="nexmark dataset directory")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="time the first run too")
    return p


@dataclass(frozen=True)
class TableInfo:
    """The table a query reads: its directory in the dataset, Spark DDL and row count."""

    root: Path
    ddl: str
    rows: int

    def files(self, fmt: str = "parquet") -> str:
        return str(self.root / fmt)


def table_info(query: Query, args: argparse.Namespace) -> TableInfo:
    """The dataset table ``query`` reads (a join's left table), from ``--clickstream`` / ``--nexmark``."""
    return tables_info(query, args)[0]


def tables_info(query: Query, args: argparse.Namespace) -> list[TableInfo]:
    """Every dataset table ``query`` reads (a join: left, then right), as :func:`table_info`."""
    root = Path(args.clickstream if query.dataset == "clickstream" else args.nexmark)
    tables = json.loads((root / "meta.json").read_text())["tables"]
    return [
        TableInfo(root=root / t, ddl=str(tables[t]["ddl"]), rows=int(tables[t]["rows"])) for t in query.tables
    ]


def measure(
    runner: str,
    query: str,
    events: int,
    run: Callable[[], T],
    rows_of: Callable[[T], Rows],
    repeat: int,
    *,
    warmup: bool = True,
) -> dict[str, Any]:
    """One warm-up run (unless ``warmup=False``), then ``repeat`` timed runs of ``run``.

    ``run`` must do all the work inside the call (reading, computing and
    materialising the result, e.g. as an Arrow table); ``rows_of`` turns the
    last result into rows for the digest, outside the timing.
    """
    emit("start", f"{runner} {query}")
    try:
        if warmup:
            run()
        walls: list[float] = []
        rows: Any = None
        for _ in range(repeat):
            t = time.perf_counter()
            rows = run()
            walls.append(time.perf_counter() - t)
        count, dig = digest(rows_of(rows))
        record: dict[str, Any] = {
            "query": query,
            "runner": runner,
            "events": events,
            "walls": walls,
            "rows": count,
            "digest": dig,
            "status": "ok",
        }
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other queries still run
        traceback.print_exc()
        record = _status(runner, query, "failed", f"{type(exc).__name__}: {exc}")
    emit("result", json.dumps(record))
    emit("end", f"{runner} {query}")
    return record


def measure_interleaved(
    runs: Mapping[str, Callable[[], T]],
    query: str,
    events: int,
    rows_of: Callable[[T], Rows],
    repeat: int,
    *,
    warmup: bool = True,
) -> list[dict[str, Any]]:
    """:func:`measure` for several runners at once, their timed runs interleaved.

    One warm-up run of each (unless ``warmup=False``), then ``repeat`` rounds
    of one timed run per runner, in alternating order (A B, B A, ...), so
    load from elsewhere on a shared machine hits every runner alike. The
    memory phase covers all of them: ``<runner>+<runner> <query>``.
    """
    emit("start", f"{'+'.join(runs)} {query}")
    walls: dict[str, list[float]] = {r: [] for r in runs}
    last: dict[str, Any] = {}
    failed: dict[str, str] = {}

    def once(runner: str) -> float | None:
        t = time.perf_counter()
        try:
            last[runner] = runs[runner]()
        except Exception as exc:  # noqa: BLE001 - reported, not raised: the other runners still run
            traceback.print_exc()
            failed[runner] = f"{type(exc).__name__}: {exc}"
            return None
        return time.perf_counter() - t

    if warmup:
        for runner in runs:
            once(runner)
    names = list(runs)
    for i in range(repeat):
        for runner in names if i % 2 == 0 else names[::-1]:
            if runner not in failed:
                wall = once(runner)
                if wall is not None:
                    walls[runner].append(wall)
    records = []
    for runner in runs:
        if runner in failed:
            records.append(_status(runner, query, "failed", failed[runner]))
            continue
        count, dig = digest(rows_of(last[runner]))
        records.append(
            {
                "query": query,
                "runner": runner,
                "events": events,
                "walls": walls[runner],
                "rows": count,
                "digest": dig,
                "status": "ok",
                "interleaved": True,
            }
        )
    for record in records:
        emit("result", json.dumps(record))
    emit("end", f"{'+'.join(runs)} {query}")
    return records


def _status(runner: str, query: str, status: str, reason: str) -> dict[str, Any]:
    return {"query": query, "runner": runner, "status": status, "reason": reason}


def report(runner: str, query: str, status: str, reason: str) -> None:
    """Report ``query`` as ``status`` (``"skipped"`` or ``"failed"``) without running it."""
    emit("start", f"{runner} {query}")
    emit("result", json.dumps(_status(runner, query, status, reason)))
    emit("end", f"{runner} {query}")


def skip(runner: str, query: str, reason: str) -> None:
    report(runner, query, "skipped", reason)
