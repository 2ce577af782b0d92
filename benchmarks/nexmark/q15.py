"""Nexmark q15, bidding statistics per day: how many bids, bidders and auctions, in all and in
each of three price ranks (:mod:`benchmarks.nexmark._ranks`).

Nexmark groups by ``DATE_FORMAT(dateTime, 'yyyy-MM-dd')``: an updating
aggregation per day (no window), each change retracting the day's previous
row; the day is a column computed first (SQL: a subquery), since a group
key is a column. A day's rows are kept while the job runs (a day ends, but
no window says so: a tumbling window of a day would fire once instead).
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._ranks import counts, counts_sql
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = f"""
SELECT day, {counts_sql(None, "bids")}, {counts_sql("bidder", "bidders")}, {counts_sql("auction", "auctions")}
FROM (SELECT *, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day FROM bid)
GROUP BY day
"""

DUCKDB = f"""
SELECT day, {counts_sql(None, "bids")}, {counts_sql("bidder", "bidders")}, {counts_sql("auction", "auctions")}
FROM (SELECT *, strftime(date_time::TIMESTAMP, '%Y-%m-%d') AS day FROM {{bid}})
GROUP BY day
"""


WORKLOAD = "nexmark-q15"


def build(s: Streams, *extra: kp.AggExpr) -> Stream:
    """The query over ``s``; ``extra`` aggregates after Nexmark's (the sustainable harness adds the
    latest auction behind each row)."""
    by_day = s.bid.with_column("day", kp.date_format(kp.col("date_time"), "yyyy-MM-dd"))
    return by_day.key_by("day").agg(
        *counts(None, "bids"), *counts("bidder", "bidders"), *counts("auction", "auctions"), *extra
    )
