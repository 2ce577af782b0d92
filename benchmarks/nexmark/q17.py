"""Nexmark q17, auction statistics per day: each auction's bids per day, in all and per price rank,
and their lowest, highest, mean and total price."""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._ranks import counts, counts_sql
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

_STATS = "MIN(price) AS min_price, MAX(price) AS max_price, AVG(price) AS avg_price, SUM(price) AS sum_price"

SQL = f"""
SELECT auction, day, {counts_sql(None, "bids")}, {_STATS}
FROM (SELECT *, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day FROM bid)
GROUP BY auction, day
"""

DUCKDB = f"""
SELECT auction, day, {counts_sql(None, "bids")}, {_STATS}
FROM (SELECT *, strftime(date_time::TIMESTAMP, '%Y-%m-%d') AS day FROM {{bid}})
GROUP BY auction, day
"""


WORKLOAD = "nexmark-q17"


def build(s: Streams) -> Stream:
    by_day = s.bid.with_column("day", kp.date_format(kp.col("date_time"), "yyyy-MM-dd"))
    price = kp.col("price")
    return by_day.key_by("auction", "day").agg(
        *counts(None, "bids"),
        kp.min(price).alias("min_price"),
        kp.max(price).alias("max_price"),
        kp.avg(price).alias("avg_price"),
        kp.sum(price).alias("sum_price"),
    )
