"""What a user function costs: Nexmark q14's ``c_counts`` as a ``kp.udf`` against built-in functions.

    PYTHONPATH=. python benchmarks/udf_cost.py [--events 1000000] [--files 10] [--rounds 3]

Nexmark q14 counts the ``c`` of each bid's text with a user function
(``count_char``). :mod:`benchmarks.nexmark.q14` writes the count with
built-in functions (``length(url) - length(replace(url, 'c', ''))``, run in
Spark's generated code); here the same query calls a ``kp.udf`` over Arrow
arrays instead (Spark's Arrow UDF: the rows cross to a Python worker and
back). Both run bounded (``collect()``) over the same Parquet files,
alternating, ``--rounds`` times after one warm-up each; the rows must be
equal. Prints the median seconds of each and the ratio built-in ÷ udf (1.0:
the function costs nothing; lower: what it costs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import pyarrow.compute as pc

import krishiv_py as kp
from benchmarks import data
from benchmarks.nexmark import q14
from benchmarks.nexmark.check import streams_of


@kp.udf("bigint")
def count_char(text: Any, char: Any) -> Any:
    """How many times ``char`` (one character, the same on every row) is in ``text``."""
    return pc.subtract(pc.utf8_length(text), pc.utf8_length(pc.replace_substring(text, char[0].as_py(), "")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    dataset = data.nexmark(data.NexmarkSpec(events=a.events, files=a.files))
    with kp.Session.embedded(progress=False) as session:
        streams = streams_of(session, dataset)
        builtin = q14.build(streams)
        udf = q14.build(streams, count=lambda url: count_char(url, "c"))
        times: dict[str, list[float]] = {"builtin": [], "udf": []}
        rows: dict[str, Counter[tuple[Any, ...]]] = {}
        for rnd in range(a.rounds + 1):
            for name, query in (
                (("builtin", builtin), ("udf", udf)) if rnd % 2 else (("udf", udf), ("builtin", builtin))
            ):
                start = time.perf_counter()
                table = query.collect()
                if rnd:
                    times[name].append(time.perf_counter() - start)
                rows[name] = Counter(tuple(r.values()) for r in table.to_pylist())
        b, u = (statistics.median(times[k]) for k in ("builtin", "udf"))
        print(f"built-in functions: {b:.2f} s, kp.udf: {u:.2f} s (median of {a.rounds}), ratio {b / u:.2f}")
        print(f"rows: {sum(rows['udf'].values())}, equal: {rows['udf'] == rows['builtin']}")
        return 0 if rows["udf"] == rows["builtin"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
