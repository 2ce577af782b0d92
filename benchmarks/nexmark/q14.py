"""Nexmark q14, calculation: the bids of a middling euro price, each with its time of day.

Nexmark counts the ``c`` of each bid's ``extra`` with a user function
(``count_char``); ``extra`` is in ``NexmarkSpec(extra=True)`` datasets
only, so the count is of the ``url``'s ``c``, which every dataset has, as
``length(url) - length(replace(url, 'c', ''))``: a vectorized expression,
where Flink calls a Python function per row. The
euro price is a ``double`` (see q1).
"""

from __future__ import annotations

from collections.abc import Callable

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream
from krishiv_py.expr import Expr

SQL = """
SELECT auction, bidder, price * 0.908 AS price,
    CASE WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime'
         WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime'
         ELSE 'otherTime' END AS bid_time_type,
    date_time, LENGTH(url) - LENGTH(REPLACE(url, 'c', '')) AS c_counts
FROM bid
WHERE price * 0.908 > 1000000 AND price * 0.908 < 50000000
"""

DUCKDB = """
SELECT auction, bidder, price * 0.908::DOUBLE AS price,
    CASE WHEN hour(date_time::TIMESTAMP) >= 8 AND hour(date_time::TIMESTAMP) <= 18 THEN 'dayTime'
         WHEN hour(date_time::TIMESTAMP) <= 6 OR hour(date_time::TIMESTAMP) >= 20 THEN 'nightTime'
         ELSE 'otherTime' END AS bid_time_type,
    date_time, length(url) - length(replace(url, 'c', '')) AS c_counts
FROM {bid}
WHERE price * 0.908::DOUBLE > 1000000 AND price * 0.908::DOUBLE < 50000000
"""


def builtin_count(url: Expr) -> Expr:
    """The ``c`` in ``url``, by built-in functions."""
    return kp.length(url) - kp.length(kp.replace(url, "c", ""))


WORKLOAD = "nexmark-q14"


def build(s: Streams, count: Callable[[Expr], Expr] = builtin_count) -> Stream:
    """q14; ``count``: how ``c_counts`` counts the ``c`` of the url (a ``kp.udf`` in
    ``benchmarks/udf_cost.py``)."""
    euros = kp.col("price") * 0.908
    hour = kp.hour(kp.col("date_time"))
    when = (
        kp.when((hour >= 8) & (hour <= 18), "dayTime")
        .when((hour <= 6) | (hour >= 20), "nightTime")
        .otherwise("otherTime")
    )
    url = kp.col("url")
    return s.bid.filter((euros > 1000000) & (euros < 50000000)).select(
        kp.col("auction"),
        kp.col("bidder"),
        euros.alias("price"),
        when.alias("bid_time_type"),
        kp.col("date_time"),
        count(url).alias("c_counts"),
    )
