"""What the disorder profile costs the stateful operator: its time with and without it.

    python -m benchmarks.profile_overhead [--rows 200000] [--keys 1000] [--rounds 5]   (nox -s profile_bench)

The stateful operator measures each event's delay behind the stream and
counts it in a log-bucket histogram (``OperatorSpec.profile_lag_ms``), for
``job.advise_watermark()``. This drives the operator's per-bucket work as
Spark calls it — :func:`krishiv_py.stateful.kernel.step` and
:func:`krishiv_py.stateful.operator.encode_payload` for each of 16 key
buckets per batch, a tick after each batch that moved the watermark — over
the tumbling benchmark's query (per-user 1-minute ``count`` and ``sum``, lag
5 s) on a disordered clickstream, once with the profile and once without,
alternating, ``--rounds`` times. The figure is the ratio of the medians
(with ÷ without; the target is <= 1.10). Both runs' payloads are checked to
hold the same results, and the profile's event count is checked.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from benchmarks.kernel import BUCKETS, KINDS, SCHEMA, clickstream
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.stateful import operator_spec
from krishiv_py.stateful._arrow import unframed
from krishiv_py.stateful.held_state import WholeState
from krishiv_py.stateful.operator import DELAY_COUNTS, OperatorSpec, encode_payload
from krishiv_py.testing.steps import _placeholder


def _specs() -> tuple[OperatorSpec, OperatorSpec]:
    plan = KINDS["tumbling"](_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = operator_spec(plan, shift_ms=0)
    assert spec.profile_lag_ms == 5_000
    return spec, attrs.evolve(spec, profile_lag_ms=None)


def run(spec: OperatorSpec, data: pa.Table, batch: int) -> tuple[float, int, int]:
    """Seconds in the operator's work, result rows, and events in the profile."""
    lag = 5_000
    users = data.column("user_id").to_numpy(zero_copy_only=False)
    bucket = np.asarray([hash(u) % BUCKETS for u in users.tolist()])
    states: list[pa.Table | None] = [None] * BUCKETS
    watermark: int | None = None
    spent, results, profiled = 0.0, 0, 0

    def call(k: int, rows: pa.Table) -> None:
        nonlocal results, profiled
        states[k], out = spec.kernel.step(states[k], rows, watermark, 0)
        state = states[k]
        assert state is not None
        held = WholeState(spec.kernel, state)
        payload = encode_payload(spec, k, rows, out, held, watermark, 0, stat_watermark=watermark)
        tables = unframed(payload)
        results += tables[0].num_rows
        if DELAY_COUNTS in tables[2].column_names:
            profiled += sum(tables[2].column(DELAY_COUNTS)[0].as_py())

    for lo in range(0, data.num_rows, batch):
        part = data.slice(lo, batch)
        ts = part.column("t").to_numpy()
        seq = np.arange(lo, lo + part.num_rows, dtype=np.int64)
        table = part.append_column(BATCH_TS, pa.array(ts * 1000)).append_column(SEQ, pa.array(seq))
        b = bucket[lo : lo + part.num_rows]
        parts = [table.filter(pa.array(b == k)) for k in range(BUCKETS)]
        started = time.perf_counter()
        for k in range(BUCKETS):
            if parts[k].num_rows or states[k] is not None:
                call(k, parts[k])
        target = int(ts.max()) - lag
        if watermark is None or target > watermark:
            watermark = target
            for k in range(BUCKETS):
                if states[k] is not None:
                    call(k, table.slice(0, 0))
        spent += time.perf_counter() - started
    return spent, results, profiled


def measure(rows: int, keys: int, batch: int, rounds: int) -> dict[str, Any]:
    data = clickstream(rows, keys)
    with_profile, without = _specs()
    on: list[float] = []
    off: list[float] = []
    for i in range(rounds):
        order = [(with_profile, on), (without, off)]
        for spec, times in order if i % 2 == 0 else order[::-1]:
            spent, results, profiled = run(spec, data, batch)
            times.append(spent)
            if spec is with_profile:
                assert profiled == rows - batch, (profiled, rows - batch)  # the first batch has no watermark
                results_on = results
            else:
                results_off = results
        assert results_on == results_off
    ratio = statistics.median(on) / statistics.median(off)
    return {
        "rows": rows,
        "keys": keys,
        "with_profile_s": round(statistics.median(on), 3),
        "without_s": round(statistics.median(off), 3),
        "ratio": round(ratio, 3),
        "target": 1.10,
        "met": ratio <= 1.10,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    r = measure(a.rows, a.keys, a.batch, a.rounds)
    print(
        f"operator time, tumbling, {r['rows']:,} rows, {r['keys']:,} keys: with the profile "
        f"{r['with_profile_s']} s, without {r['without_s']} s, ratio {r['ratio']} (target <= {r['target']})"
    )
    return 0 if r["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
