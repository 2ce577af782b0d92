"""Nexmark q1, currency conversion: each bid's price in euros (0.908 of its dollar price).

Nexmark multiplies a decimal; here the price is a ``bigint`` and the euro
price a ``double`` (``price * 0.908``), the same in DuckDB's reference.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = "SELECT auction, bidder, price * 0.908 AS price, date_time FROM bid"

DUCKDB = "SELECT auction, bidder, price * 0.908::DOUBLE AS price, date_time FROM {bid}"


WORKLOAD = "nexmark-q1"


def build(s: Streams) -> Stream:
    return s.bid.select(
        kp.col("auction"), kp.col("bidder"), (kp.col("price") * 0.908).alias("price"), kp.col("date_time")
    )
