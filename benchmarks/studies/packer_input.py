"""How the stateful lowering's rows reach its packer: exact Arrow columns against a value and null flag each.

The stateful lowering hands each map task's rows to the packer through
``mapInArrow``. It sends every column as it is (``new``); the baseline is
the encoding it used before (``old``): every numeric, boolean and timestamp
column as a non-null value column plus a null flag, rebuilt in Python.
Both run in one Spark session over the suite's clickstream, taking turns,
and each Python function decodes its rows to the operator's Arrow
columns, so the figure is the transfer plus the decoding; the first round
warms up. ``python -m benchmarks.studies.packer_input [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.data import ClickstreamSpec, clickstream

SHIFT_US = 17_592_186_044_416_000
BUCKET = "CAST(pmod(hash(`user_id`), 16) AS INT) AS `__kp_bucket`"
OLD = [
    BUCKET,
    "`user_id` AS `__kp_c0`",
    "coalesce(unix_micros(`event_time`), 0L) AS `__kp_c1`",
    "`event_time` IS NULL AS `__kp_n1`",
    "coalesce(`amount`, CAST(0 AS DOUBLE)) AS `__kp_c2`",
    "`amount` IS NULL AS `__kp_n2`",
    f"coalesce(unix_micros(`event_time`) - {SHIFT_US}L, 0L) AS `__kp_tsv`",
    "`event_time` IS NULL AS `__kp_tsn`",
    "`__kp_seq`",
]
NEW = [
    BUCKET,
    "`user_id` AS `__kp_c0`",
    "`event_time` AS `__kp_c1`",
    "`amount` AS `__kp_c2`",
    f"unix_micros(`event_time`) - {SHIFT_US}L AS `__kp_tsv`",
    "`__kp_seq`",
]
UTC_US = pa.timestamp("us", tz="UTC")


def old_decode(t: pa.Table) -> pa.Table:
    """The former decoding: each value column and its null flag back into one nullable array."""
    out: dict[str, pa.Array[Any]] = {"user_id": t.column("__kp_c0").combine_chunks()}
    for value, null, name in (
        ("__kp_c1", "__kp_n1", "event_time"),
        ("__kp_c2", "__kp_n2", "amount"),
        ("__kp_tsv", "__kp_tsn", "__kp_ts"),
    ):
        mask = np.asarray(t.column(null).to_numpy(zero_copy_only=False), bool)
        values = np.asarray(t.column(value).combine_chunks().to_numpy(zero_copy_only=False))
        array = pa.array(values, mask=mask)
        out[name] = array.cast(UTC_US) if name == "event_time" else array
    return pa.table(out)


def new_decode(t: pa.Table) -> pa.Table:
    """Exact Arrow columns: one array per column, a timestamp's zone set to UTC."""
    return pa.table(
        {
            "user_id": t.column("__kp_c0").combine_chunks(),
            "event_time": t.column("__kp_c1").combine_chunks().cast(UTC_US),
            "amount": t.column("__kp_c2").combine_chunks(),
            "__kp_ts": t.column("__kp_tsv").combine_chunks(),
        }
    )


def counting(
    decode: Callable[[pa.Table], pa.Table],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: decode the task's rows, yield how many there were."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        held = list(batches)
        n = decode(pa.Table.from_batches(held)).num_rows if held else 0
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    a = parser.parse_args(argv)
    import krishiv_py as kp

    data = clickstream(ClickstreamSpec(events=a.events))
    with kp.Session.embedded(app_name="krishiv-bench-packer-input") as session:
        rows = session.spark.read.parquet(data.table_dir("events"))
        rows = rows.selectExpr("*", "monotonically_increasing_id() AS `__kp_seq`").cache()
        assert rows.count() == a.events
        walls: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(a.rounds):
            for name, exprs, decode in (("old", OLD, old_decode), ("new", NEW, new_decode)):
                started = time.perf_counter()
                done = (
                    rows.selectExpr(*exprs).mapInArrow(counting(decode), "n long").agg({"n": "sum"}).collect()
                )
                walls[name].append(time.perf_counter() - started)
                assert done[0][0] == a.events, done
    old, new = (statistics.median(walls[k][1:]) for k in ("old", "new"))
    print(f"{a.events:,} rows, medians of rounds 2-{a.rounds}: old {old:.3f} s, new {new:.3f} s")
    print(f"new / old: {new / old:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
