"""Nexmark q22, get URL directories: each bid with the first three directories of its URL.

Flink's ``SPLIT_INDEX(url, '/', 3)`` counts from 0; Spark's (and
krishiv's) ``SPLIT_PART(url, '/', 4)`` from 1: the same part.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = """
SELECT auction, bidder, price, channel,
    SPLIT_PART(url, '/', 4) AS dir1, SPLIT_PART(url, '/', 5) AS dir2, SPLIT_PART(url, '/', 6) AS dir3
FROM bid
"""

DUCKDB = SQL.replace("FROM bid", "FROM {bid}")


WORKLOAD = "nexmark-q22"


def build(s: Streams) -> Stream:
    url = kp.col("url")
    return s.bid.select(
        kp.col("auction"),
        kp.col("bidder"),
        kp.col("price"),
        kp.col("channel"),
        *(kp.split_part(url, "/", i + 4).alias(f"dir{i + 1}") for i in range(3)),
    )
