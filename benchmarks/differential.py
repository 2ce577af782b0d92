"""The differential harness over batchings: every plan shape the native lowering runs, on random
input cut into micro-batches at random, on the native lowering, the stateful one and the model.

A *case* is one random segment of input: rows with disorder, late and very
late rows, null keys and null event times, and ``advance_watermark`` steps,
cut into groups (:mod:`krishiv_py.testing.batchings`: a group's steps are
sent back to back, then processed), so that one logical batch may be split
over several sends, several sends meet in one ``process_all_available()``,
and advances come alone or right before rows. One streaming job runs many
cases one after another, each in its own stretch of event time
(``EPOCH`` ms apart, the last step of a case advancing every source to the
next one's start), which spares a query start per case; the model plays
exactly the same steps, so the comparison does not depend on that
packing. After every group the results, the watermark, the very late rows
(where the lowering counts them) and the rows read must equal the model's.

``python -m benchmarks.differential --cases 10000`` runs until every shape
has run that many cases on each lowering (``nox -s differential``); the
suite runs a few seeded jobs (``tests/test_differential.py``). A difference
stops the run and writes the case's steps and plan to ``--out`` as JSON.

Shapes (what the planner lowers natively, or runs natively when asked):
``tumbling`` (keyed or not, with an offset), ``sliding`` (Spark's
``window()``: fewer than 10 windows per event), ``sliding_panes`` (10 or
more windows per event: the pane partials step), ``top_n`` (a window's
top rows, ranked per micro-batch on the driver), ``union`` (two sources,
each with its own lag, under one window), ``interval_join``
(``lowering="native"``: Spark's join behind krishiv's filter of late rows).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import krishiv_py as kp
from krishiv_py._typing import Lowering
from krishiv_py.testing import AdvanceWatermark, Close, Send, Step
from krishiv_py.testing.batchings import Group, assert_batchings_agree, run_reference_batched

__all__ = ["EPOCH", "SHAPES", "Shape", "job_case", "main", "run_job"]

SCHEMA = "k string, t bigint, v bigint"
#: Event time between two cases' starts (ms); a case's rows lie within about 700 ms of its start.
EPOCH = 100_000
Pipeline = Callable[..., kp.Stream]


@attrs.frozen(kw_only=True)
class Shape:
    """One plan shape: its sources and, per lowering, its pipeline from random parameters."""

    name: str
    sources: tuple[str, ...]
    build: Callable[[dict[str, int], Lowering], Pipeline]
    params: Callable[[random.Random], dict[str, int]]
    keyed: bool = True


AGGS = (kp.count(kp.col("*")), kp.sum(kp.col("v")), kp.min(kp.col("v")), kp.max(kp.col("v")))


def _tumbling(p: dict[str, int], lowering: Lowering) -> Pipeline:
    del lowering

    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", p["lag"])
        if p["keyed"]:
            w = w.key_by("k")
        return w.tumbling_window(p["size"], offset_ms=p["offset"]).agg(*AGGS, kp.avg(kp.col("v")))  # type: ignore[no-any-return]

    return build


def _sliding(p: dict[str, int], lowering: Lowering) -> Pipeline:
    del lowering

    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", p["lag"])
        if p["keyed"]:
            w = w.key_by("k")
        return w.sliding_window(p["size"], p["slide"]).agg(*AGGS)  # type: ignore[no-any-return]

    return build


def _top_n(p: dict[str, int], lowering: Lowering) -> Pipeline:
    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", p["lag"]).key_by("k").tumbling_window(p["size"])
        if lowering == "stateful":  # a window may fire again there: its top-N needs retractions
            w = w.accumulation("retracting")
        return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v"))).top_n(p["n"], by=["count"])

    return build


def _union(p: dict[str, int], lowering: Lowering) -> Pipeline:
    del lowering

    def build(a: kp.Stream, b: kp.Stream) -> kp.Stream:
        both = a.watermark("t", p["lag"]).union(b.watermark("t", p["lag_b"]))
        return both.key_by("k").tumbling_window(p["size"]).agg(*AGGS)

    return build


def _interval_join(p: dict[str, int], lowering: Lowering) -> Pipeline:
    del lowering

    def build(left: kp.Stream, right: kp.Stream) -> kp.Stream:
        lk = left.watermark("t", p["lag"]).key_by("k")
        return lk.interval_join(
            right.watermark("t", p["lag_b"]).key_by("k"), between=(p["lower"], p["upper"])
        )

    return build


def _between(rng: random.Random) -> dict[str, int]:
    lower = rng.randint(-30, 10)
    return {"lower": lower, "upper": lower + rng.randint(0, 30)}


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape(
            name="tumbling",
            sources=("input",),
            build=_tumbling,
            params=lambda r: {
                "size": r.randint(5, 60),
                "offset": r.choice([0, 0, r.randint(1, 4)]),
                "lag": r.randint(0, 40),
                "keyed": r.randint(0, 1),
            },
        ),
        Shape(
            name="sliding",
            sources=("input",),
            build=_sliding,
            params=lambda r: _sliding_params(r, panes=False),
        ),
        Shape(
            name="sliding_panes",
            sources=("input",),
            build=_sliding,
            params=lambda r: _sliding_params(r, panes=True),
        ),
        Shape(
            name="top_n",
            sources=("input",),
            build=_top_n,
            params=lambda r: {"size": r.randint(5, 60), "lag": r.randint(0, 40), "n": r.randint(1, 2)},
        ),
        Shape(
            name="union",
            sources=("a", "b"),
            build=_union,
            params=lambda r: {"size": r.randint(5, 60), "lag": r.randint(0, 40), "lag_b": r.randint(0, 40)},
        ),
        Shape(
            name="interval_join",
            sources=("left", "right"),
            build=_interval_join,
            params=lambda r: {"lag": r.randint(0, 40), "lag_b": r.randint(0, 40), **_between(r)},
        ),
    )
}


def _sliding_params(rng: random.Random, *, panes: bool) -> dict[str, int]:
    slide = rng.randint(2, 8)
    per_event = rng.randint(10, 14) if panes else rng.randint(1, 6)
    return {"size": slide * per_event, "slide": slide, "lag": rng.randint(0, 40), "keyed": rng.randint(0, 1)}


def _row(rng: random.Random, front: int) -> dict[str, Any]:
    """A row near the stream's front (disorder of up to 40 ms), now and then far behind it."""
    behind = rng.randint(40, 120) if rng.random() < 0.15 else rng.randint(-10, 40)
    return {
        "k": rng.choice(["a", "a", "b", None]) if rng.random() < 0.95 else "c",
        "t": None if rng.random() < 0.04 else front - behind,
        "v": None if rng.random() < 0.1 else rng.randint(-3, 9),
    }


def job_case(rng: random.Random, base: int, sources: Sequence[str], *, last: bool) -> list[Group]:
    """One case's groups, its event times from ``base``; it ends by advancing every source to
    ``base + EPOCH`` (``last``: by closing every source).

    The stream's front moves forward a little with every step; rows lie around it, some far
    behind; an advance promises a time just past it, so that late rows meet both open and
    closed windows and partners still held or gone.
    """
    single = len(sources) == 1
    front = base + 40
    groups: list[list[Step]] = []
    for _ in range(rng.randint(2, 6)):
        name = rng.choice(list(sources))
        src = None if single else name
        group: list[Step] = []
        for _ in range(rng.randint(1, 4)):
            front += rng.randint(0, 25)
            if rng.random() < 0.3:
                group.append(AdvanceWatermark(front + rng.randint(-20, 30), source=src))
                continue
            rows = [_row(rng, front) for _ in range(rng.randint(0, 6))]
            cut = rng.randint(0, len(rows)) if rows and rng.random() < 0.3 else len(rows)
            group += [Send(part, source=src) for part in (rows[:cut], rows[cut:]) if part or not rows]
        groups.append(group)
    for name in sources:  # the end of the case: each source's own step, alone or after its rows
        src = None if single else name
        end: Step = Close(source=src) if last else AdvanceWatermark(base + EPOCH, source=src)
        if groups and rng.random() < 0.5 and _source_of(groups[-1], sources) == name:
            groups[-1].append(end)
        else:
            groups.append([end])
    return list(groups)


def _source_of(group: Sequence[Step], sources: Sequence[str]) -> str:
    first = group[0].source if group else None
    return sources[0] if first is None else first


@attrs.frozen(kw_only=True)
class JobResult:
    shape: str
    lowering: Lowering
    cases: int
    micro_batches: int
    seconds: float
    error: str | None = None


def run_job(
    session: kp.Session, shape: Shape, seed: int, cases: int, lowerings: Sequence[Lowering]
) -> list[JobResult]:
    """``cases`` random cases of ``shape`` (from ``seed``) as one job per lowering, each checked
    against the model after every group; a difference is reported in the result's ``error``."""
    rng = random.Random(f"{shape.name}-{seed}")
    params = shape.params(rng)
    groups: list[Group] = []
    for i in range(cases):
        groups += job_case(rng, i * EPOCH, shape.sources, last=i == cases - 1)
    out = []
    for lowering in lowerings:
        pipeline = shape.build(params, lowering)
        expected = run_reference_batched(SCHEMA, pipeline, groups, sources=shape.sources)
        started = time.perf_counter()
        error = None
        try:
            assert_batchings_agree(
                session, SCHEMA, pipeline, groups, lowering=lowering, sources=shape.sources, expected=expected
            )
        except AssertionError as exc:
            error = f"{shape.name} seed={seed} params={params} lowering={lowering}: {exc}"
        steps = sum(len(g) for g in groups)
        out.append(
            JobResult(
                shape=shape.name,
                lowering=lowering,
                cases=cases,
                micro_batches=steps,
                seconds=time.perf_counter() - started,
                error=error,
            )
        )
    return out


def _dump(path: Path, shape: Shape, seed: int, cases: int, error: str) -> None:
    rng = random.Random(f"{shape.name}-{seed}")
    params = shape.params(rng)
    groups = [
        [attrs.asdict(step) | {"step": type(step).__name__} for step in group]
        for i in range(cases)
        for group in job_case(rng, i * EPOCH, shape.sources, last=i == cases - 1)
    ]
    path.write_text(
        json.dumps(
            {"shape": shape.name, "seed": seed, "params": params, "error": error, "groups": groups}, indent=1
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.differential", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cases", type=int, default=10_000, help="cases per shape and lowering")
    parser.add_argument("--per-job", type=int, default=40, help="cases one streaming job runs")
    parser.add_argument("--shapes", nargs="*", default=sorted(SHAPES), choices=sorted(SHAPES))
    parser.add_argument(
        "--lowerings", nargs="*", default=["native", "stateful"], choices=["native", "stateful"]
    )
    parser.add_argument("--seed", type=int, default=0, help="the first job's seed")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--parallel", type=int, default=2, help="jobs run at once (one Spark, threads)")
    parser.add_argument("--out", type=Path, default=Path("differential-failure.json"))
    args = parser.parse_args(argv)
    deadline = None if args.minutes is None else time.monotonic() + 60 * args.minutes
    counts: dict[tuple[str, str], int] = {}
    failed: list[str] = []
    lock = threading.Lock()

    def work(session: kp.Session, name: str, seed: int, todo: list[Lowering]) -> None:
        if failed or (deadline is not None and time.monotonic() > deadline):
            return  # a job of a round that began before the time ran out, or after a difference
        for result in run_job(session, SHAPES[name], seed, args.per_job, todo):
            with lock:
                if result.error is not None:
                    _dump(args.out, SHAPES[name], seed, args.per_job, result.error)
                    print(f"DIFFERENCE ({args.out}):\n{result.error}", flush=True)
                    failed.append(result.error)
                    return
                key = (result.shape, result.lowering)
                counts[key] = counts.get(key, 0) + result.cases
                print(
                    f"{result.shape:14} {result.lowering:9} seed {seed:5}: {result.cases} cases, "
                    f"{result.micro_batches} micro-batches in {result.seconds:.1f} s (total {counts[key]})",
                    flush=True,
                )

    with kp.Session.embedded(app_name="krishiv-differential") as session:
        seed = args.seed
        while not failed and any(
            counts.get((s, lw), 0) < args.cases for s in args.shapes for lw in args.lowerings
        ):
            if deadline is not None and time.monotonic() > deadline:
                break
            jobs = []
            for name in args.shapes:
                todo = [lw for lw in args.lowerings if counts.get((name, lw), 0) < args.cases]
                if todo:
                    jobs.append((name, seed, todo))
                    seed += 1
            with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
                for future in [pool.submit(work, session, *job) for job in jobs]:
                    future.result()
        if failed:
            return 1
    print("cases without a difference:")
    for (shape, lowering), count in sorted(counts.items()):
        print(f"  {shape:14} {lowering:9} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
