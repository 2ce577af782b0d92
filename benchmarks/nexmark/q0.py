"""Nexmark q0, pass through: every bid as it is (the cost of reading and writing alone).

Nexmark's query selects ``auction, bidder, price, dateTime, extra``; the
generator's ``extra`` column is there only in ``NexmarkSpec(extra=True)``
datasets (:mod:`benchmarks.data`), so the query keeps what every dataset
has: the bid's other columns, ``channel`` and ``url``, stand in for it.
"""

from __future__ import annotations

from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = "SELECT auction, bidder, price, date_time, channel, url FROM bid"

DUCKDB = "SELECT auction, bidder, price, date_time, channel, url FROM {bid}"


WORKLOAD = "nexmark-q0"


def build(s: Streams) -> Stream:
    return s.bid.select("auction", "bidder", "price", "date_time", "channel", "url")
