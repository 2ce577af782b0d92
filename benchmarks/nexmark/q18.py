"""Nexmark q18, the last bid of each bidder on each auction (deduplication): a top-1 per key by
time, which retracts a bidder's previous bid on the auction when a later one comes.

Two bids of one bidder on one auction at the same instant are told apart
by their other columns in order (``ties="first"``; SQL's ``ROW_NUMBER()``
with them in the ``ORDER BY``), so the answer is one row, the same in
DuckDB's reference.
"""

from __future__ import annotations

from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

_COLUMNS = "auction, bidder, price, channel, url, date_time"

SQL = f"""
SELECT {_COLUMNS} FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rn FROM bid
) WHERE rn <= 1
"""

DUCKDB = f"""
SELECT {_COLUMNS} FROM (
    SELECT *, ROW_NUMBER() OVER (
        PARTITION BY bidder, auction
        ORDER BY date_time DESC, auction NULLS FIRST, bidder NULLS FIRST, price NULLS FIRST,
                 channel NULLS FIRST, url NULLS FIRST
    ) AS rn FROM {{bid}}
) WHERE rn <= 1
"""


WORKLOAD = "nexmark-q18"


def build(s: Streams) -> Stream:
    return s.bid.top_n(1, by=("date_time",), per="key", keys=("bidder", "auction"), ties="first")
