"""Nexmark q10, log to a file system: each bid with its day and minute, as text.

Nexmark writes the rows to files partitioned by day and hour; here the
pipeline gives the rows (``stream.start(ParquetSink(...))`` writes them).
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = (
    "SELECT auction, bidder, price, date_time, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS dt, "
    "DATE_FORMAT(date_time, 'HH:mm') AS hm FROM bid"
)

DUCKDB = (
    "SELECT auction, bidder, price, date_time, strftime(date_time::TIMESTAMP, '%Y-%m-%d') AS dt, "
    "strftime(date_time::TIMESTAMP, '%H:%M') AS hm FROM {bid}"
)


WORKLOAD = "nexmark-q10"


def build(s: Streams) -> Stream:
    t = kp.col("date_time")
    return s.bid.select(
        kp.col("auction"),
        kp.col("bidder"),
        kp.col("price"),
        t,
        kp.date_format(t, "yyyy-MM-dd").alias("dt"),
        kp.date_format(t, "HH:mm").alias("hm"),
    )
