"""The stateful kernel alone, per window kind: rows/s next to tumbling, no Spark.

``python -m benchmarks.kernel`` drives each plan's kernel (built by its
operator kind's descriptor, :mod:`krishiv_py.planner.spark.kinds`) as the
Spark operator does — batches of ``--batch`` rows split over 16 key
buckets, a tick after each batch that moved the watermark — over the same
disordered clickstream for tumbling windows, sliding windows (60 s and
10 min, both with a 10 s slide), sessions, capped sessions, per-event
sliding windows and over-aggregation (each row with its user's 10 before
it, 5 s lateness, retracting), at each key count. Every figure is measured in
the same run, so the ratio to tumbling is what to compare between machines.
Before timing, each kind's results on a small prefix are checked against the
reference model (``agrees``). Event time starts at ``--epoch-ms`` (2027-01-15
by default; ``0`` repeats the runs before 2026-11-25, in which the first
window size of every key took Kafka's *early-window* path of per-event
sliding windows, one row at a time).

    python -m benchmarks.kernel --rows 200000 --keys 1000 --keys 100000
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pyarrow as pa

import krishiv_py as kp
from krishiv_py.model.over import OverModel
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.kinds import kind_of
from krishiv_py.planner.spark.stateful import operator_spec
from krishiv_py.stateful.state import FIRST
from krishiv_py.testing import assert_same_rows
from krishiv_py.testing.steps import _placeholder, reference_model_for

SCHEMA = "user_id string, t bigint, amount bigint"
SCHEMA_COLUMNS = ("user_id", "t", "amount")
BUCKETS = 16
Pipeline = Callable[[kp.Stream], kp.Stream]


def _aggs() -> tuple[Any, ...]:
    return (kp.count(kp.col("*")), kp.sum(kp.col("amount")))


KINDS: dict[str, Pipeline] = {
    "tumbling": lambda s: s.watermark("t", 5_000).key_by("user_id").tumbling_window(60_000).agg(*_aggs()),
    "sliding": lambda s: (
        s.watermark("t", 5_000).key_by("user_id").sliding_window(60_000, 10_000).agg(*_aggs())
    ),
    "sliding_10m": lambda s: (
        s.watermark("t", 5_000).key_by("user_id").sliding_window(600_000, 10_000).agg(*_aggs())
    ),
    "session": lambda s: s.watermark("t", 5_000).key_by("user_id").session_window(30_000).agg(*_aggs()),
    "capped_session": lambda s: (
        s.watermark("t", 5_000)
        .key_by("user_id")
        .session_window(30_000, max_duration_ms=120_000)
        .agg(*_aggs())
    ),
    "event_sliding": lambda s: (
        s.watermark("t", 0).key_by("user_id").event_sliding_window(30_000, grace_ms=5_000).agg(*_aggs())
    ),
    "over_rows": lambda s: (
        s.watermark("t", 5_000)
        .key_by("user_id")
        .over_rows(10)
        .allowed_lateness(5_000)
        .accumulation("retracting")
        .agg(*_aggs())
    ),
}


#: Where the clickstream's event time starts (``--epoch-ms``): 2027-01-15 08:00 UTC, a
#: multiple of every window size here. Real event times are far from 1970; rows within a
#: window size of the epoch are special for per-event sliding windows (Kafka's *early*
#: windows), so a stream starting at 0 measures a path real data never takes.
EPOCH_MS = 1_800_000_000_000


def clickstream(rows: int, keys: int, seed: int = 7, epoch_ms: int = EPOCH_MS) -> pa.Table:
    """``rows`` events over ``keys`` users from ``epoch_ms``, ~10 per user-minute, 1 % up to 20 s late."""
    rng = np.random.default_rng(seed)
    t = epoch_ms + np.sort(rng.integers(0, max(60_000, rows * 6_000 // keys), rows))
    late = rng.random(rows) < 0.01
    t = t - np.where(late, rng.integers(0, 20_000, rows), 0)
    users = rng.integers(0, keys, rows)
    return pa.table(
        {
            "user_id": pa.array([f"u{u}" for u in users.tolist()], pa.string()),
            "t": pa.array(t, pa.int64()),
            "amount": pa.array(rng.integers(1, 100, rows), pa.int64()),
        }
    )


def _kernel(pipeline: Pipeline) -> tuple[Any, int]:
    """The kernel the stateful lowering runs ``pipeline``'s operator with, and its watermark lag."""
    plan = pipeline(_placeholder(SCHEMA)).plan
    et = n.event_time(n.children(plan)[0])
    assert et is not None
    kind = kind_of(plan)
    assert kind is not None
    if kind.kernel is not None:
        return kind.kernel(plan)[0], et.lag_ms
    assert isinstance(plan, n.WindowAggregate)
    return operator_spec(plan, shift_ms=0).kernel, et.lag_ms


def run_kernel(pipeline: Pipeline, data: pa.Table, batch: int) -> tuple[list[dict[str, Any]], float]:
    """All results, and the seconds spent in the kernel's ``step`` (one core)."""
    spec, lag = _kernel(pipeline)
    users = data.column("user_id").to_numpy(zero_copy_only=False)
    bucket = np.asarray([hash(u) % BUCKETS for u in users.tolist()])
    states: list[pa.Table | None] = [None] * BUCKETS
    watermark: int | None = None
    results: list[pa.Table] = []
    spent = 0.0
    for lo in range(0, data.num_rows, batch):
        part = data.slice(lo, batch)
        ts = part.column("t").to_numpy()
        seq = np.arange(lo, lo + part.num_rows, dtype=np.int64)
        table = part.append_column(BATCH_TS, pa.array(ts * 1000)).append_column(SEQ, pa.array(seq))
        b = bucket[lo : lo + part.num_rows]
        started = time.perf_counter()
        for k in range(BUCKETS):
            rows = table.filter(pa.array(b == k))
            if rows.num_rows or states[k] is not None:
                states[k], out = spec.step(states[k], rows, watermark, 0)
                results.append(out.results)
        target = int(ts.max()) - lag
        if watermark is None or target > watermark:
            watermark = target
            for k in range(BUCKETS):
                if states[k] is not None:
                    states[k], out = spec.step(states[k], table.slice(0, 0), watermark, 0)
                    results.append(out.results)
        spent += time.perf_counter() - started
    for k in range(BUCKETS):
        if states[k] is not None:
            states[k], out = spec.step(states[k], table.slice(0, 0), kp.END_OF_TIME_MS, 0)
            results.append(out.results)
    rows_out = [r for t in results for r in t.to_pylist()]
    for r in rows_out:
        if "window_start" in r:
            r.pop(FIRST, None)
            r["window_start"] //= 1000
            r["window_end"] //= 1000
    return rows_out, spent


def agrees(pipeline: Pipeline, data: pa.Table, batch: int) -> bool:
    """The kernel's results equal the reference model's on ``data`` (same batches)."""
    got, _ = run_kernel(pipeline, data, batch)
    plan = pipeline(_placeholder(SCHEMA)).plan
    if isinstance(plan, n.OverAggregate):
        return _over_agrees(plan, got, data, batch)
    model = reference_model_for(pipeline(_placeholder(SCHEMA)))
    for lo in range(0, data.num_rows, batch):
        model.send(data.slice(lo, batch).to_pylist())
    model.close()
    try:
        assert_same_rows(got, model.results)
    except AssertionError:
        return False
    return True


def _over_agrees(plan: n.OverAggregate, got: list[dict[str, Any]], data: pa.Table, batch: int) -> bool:
    """The over-aggregation's retracting changelog nets to the model's rows (same batches, the same
    watermark after each)."""
    aggs = tuple(ModelAgg(name=a.name, func=cast(Any, a.func), column=a.column) for a in plan.aggregates)
    model = OverModel(
        keys=plan.keys,
        frame=plan.frame,
        preceding=plan.preceding,
        aggs=aggs,
        allowed_lateness_ms=plan.emission.allowed_lateness_ms,
        accumulation="retracting",
    )
    et = n.event_time(plan.input)
    assert et is not None
    expected: list[dict[str, Any]] = []
    watermark: int | None = None
    for lo in range(0, data.num_rows, batch):
        rows = data.slice(lo, batch).to_pylist()
        expected += model.send(rows)
        target = max(r["t"] for r in rows) - et.lag_ms
        watermark = target if watermark is None else max(watermark, target)
        expected += model.advance(watermark)
    expected += model.close()

    def net(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
        out: Counter[tuple[Any, ...]] = Counter()
        for r in rows:
            out[tuple(r[c] for c in (*SCHEMA_COLUMNS, *(a.name for a in aggs)))] += (
                -1 if r.get(RESULT_KIND) == "retract" else 1
            )
        return +out

    return net(got) == net(expected)


def measure(
    rows: int,
    keys: list[int],
    batch: int,
    check_rows: int,
    kinds: list[str] | None = None,
    epoch_ms: int = EPOCH_MS,
) -> list[dict[str, Any]]:
    out = []
    chosen = ["tumbling", *[k for k in (kinds or KINDS) if k != "tumbling"]]
    for k in keys:
        data = clickstream(rows, k, epoch_ms=epoch_ms)
        base: float | None = None
        for kind in chosen:
            pipeline = KINDS[kind]
            ok = agrees(pipeline, data.slice(0, check_rows), max(1, check_rows // 4))
            _, spent = run_kernel(pipeline, data, batch)
            eps = rows / spent
            base = eps if kind == "tumbling" else base
            assert base is not None
            out.append(
                {
                    "kind": kind,
                    "keys": k,
                    "rows": rows,
                    "rows_per_s": round(eps),
                    "vs_tumbling": round(eps / base, 3),
                    "agrees": ok,
                }
            )
    return out


def markdown(records: list[dict[str, Any]]) -> str:
    lines = [
        "| keys | window kind | rows/s (one core) | ÷ tumbling | agrees with the model |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['keys']:,} | {r['kind']} | {r['rows_per_s']:,} | {r['vs_tumbling']:.2f} | {r['agrees']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--keys", type=int, action="append")
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--check-rows", type=int, default=2_000)
    p.add_argument("--kind", action="append", choices=sorted(KINDS), help="only these kinds (and tumbling)")
    p.add_argument(
        "--epoch-ms",
        type=int,
        default=EPOCH_MS,
        help="where event time starts (0: the runs before 2026-11-25)",
    )
    a = p.parse_args(argv)
    records = measure(a.rows, a.keys or [1_000, 100_000], a.batch, a.check_rows, a.kind, a.epoch_ms)
    print(markdown(records))
    return 0 if all(r["agrees"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
