"""Nexmark q2, selection: the bids of every 123rd auction."""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = "SELECT auction, price FROM bid WHERE auction % 123 = 0"

DUCKDB = "SELECT auction, price FROM {bid} WHERE auction % 123 = 0"


WORKLOAD = "nexmark-q2"


def build(s: Streams) -> Stream:
    return s.bid.filter(kp.col("auction") % 123 == 0).select("auction", "price")
