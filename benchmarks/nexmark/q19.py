"""Nexmark q19, each auction's ten highest bids: a top-10 per key, updating as bids come.

Nexmark's rows carry their rank (``ROW_NUMBER()``); a top-N per key here
gives the rows without it (a row's rank changes as higher bids come, and
each change would retract and emit every row below it). Ties are told
apart by the other columns in order, as in q18.
"""

from __future__ import annotations

from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

_COLUMNS = "auction, bidder, price, channel, url, date_time"

SQL = f"""
SELECT {_COLUMNS} FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bid
) WHERE rn <= 10
"""

DUCKDB = f"""
SELECT {_COLUMNS} FROM (
    SELECT *, ROW_NUMBER() OVER (
        PARTITION BY auction
        ORDER BY price DESC, auction NULLS FIRST, bidder NULLS FIRST, channel NULLS FIRST,
                 url NULLS FIRST, date_time NULLS FIRST
    ) AS rn FROM {{bid}}
) WHERE rn <= 10
"""


WORKLOAD = "nexmark-q19"


def build(s: Streams) -> Stream:
    return s.bid.top_n(10, by=("price",), per="key", keys=("auction",), ties="first")
