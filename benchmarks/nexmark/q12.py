"""Nexmark q12, processing-time windows: how many bids each bidder makes in each 10-second window of
processing time.

Nexmark times the window by ``PROCTIME()``, the moment a row is processed:
``tumble_start(PROCTIME(), INTERVAL '10' SECOND)`` here, which krishiv
times by the start of the row's micro-batch (``tumbling_window(10_000,
time="processing")``). The windows, and so the counts per window, depend
on when rows arrive: no two runs agree, and a run over bounded input puts
every row in the one window open when it runs. So ``NOT_REPRODUCIBLE``
names the window columns, which the check leaves out; per bidder, the
counts over every window are the bids, which ``DUCKDB`` gives.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

WINDOW = "tumble_start(PROCTIME(), INTERVAL '10' SECOND)"

SQL = f"""
SELECT bidder, COUNT(*) AS bid_count, {WINDOW} AS starttime,
    tumble_end(PROCTIME(), INTERVAL '10' SECOND) AS endtime
FROM bid
GROUP BY bidder, {WINDOW}
"""

#: Over bounded input one window holds every row: the bids per bidder.
DUCKDB = "SELECT bidder, COUNT(*) AS bid_count FROM {bid} GROUP BY bidder"

#: The columns that depend on when the query runs, left out of the comparison with ``DUCKDB``.
NOT_REPRODUCIBLE = ("starttime", "endtime")


WORKLOAD = "nexmark-q12"


def build(s: Streams) -> Stream:
    per_bidder = s.bid.key_by("bidder").tumbling_window(10_000, time="processing")
    counted = per_bidder.agg(kp.count(kp.col("*")).alias("bid_count"))
    return counted.select(
        kp.col("bidder"),
        kp.col("bid_count"),
        kp.col("window_start").alias("starttime"),
        kp.col("window_end").alias("endtime"),
    )
