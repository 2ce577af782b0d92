"""Nexmark q16, channel statistics per day: q15's counts per channel and day, and the day's last
minute with a bid (``max`` of the bids' ``HH:mm``)."""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._ranks import counts, counts_sql
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

_COUNTS = (
    f"{counts_sql(None, 'bids')}, {counts_sql('bidder', 'bidders')}, {counts_sql('auction', 'auctions')}"
)

SQL = f"""
SELECT channel, day, MAX(hm) AS minute, {_COUNTS}
FROM (SELECT *, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day, DATE_FORMAT(date_time, 'HH:mm') AS hm FROM bid)
GROUP BY channel, day
"""

DUCKDB = f"""
SELECT channel, day, MAX(hm) AS minute, {_COUNTS}
FROM (
    SELECT *, strftime(date_time::TIMESTAMP, '%Y-%m-%d') AS day, strftime(date_time::TIMESTAMP, '%H:%M') AS hm
    FROM {{bid}}
)
GROUP BY channel, day
"""


WORKLOAD = "nexmark-q16"


def build(s: Streams, *extra: kp.AggExpr) -> Stream:
    """The query over ``s``; ``extra`` aggregates after Nexmark's (the sustainable harness adds the
    latest auction behind each row)."""
    t = kp.col("date_time")
    by_day = s.bid.select(
        *(kp.col(c) for c in s.bid.columns),
        kp.date_format(t, "yyyy-MM-dd").alias("day"),
        kp.date_format(t, "HH:mm").alias("hm"),
    )
    return by_day.key_by("channel", "day").agg(
        kp.max(kp.col("hm")).alias("minute"),
        *counts(None, "bids"),
        *counts("bidder", "bidders"),
        *counts("auction", "auctions"),
        *extra,
    )
