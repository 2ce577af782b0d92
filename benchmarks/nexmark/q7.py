"""Nexmark q7, highest bid: every bid at the highest price of the 10 s window it falls in.

Nexmark's SQL (q7.sql)::

    SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
    from bid B
    JOIN (
      SELECT MAX(price) AS maxprice, window_end as dateTime
      FROM TABLE(
              TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
      GROUP BY window_start, window_end
    ) B1
    ON B.price = B1.maxprice
    WHERE B.dateTime BETWEEN B1.dateTime  - INTERVAL '10' SECOND AND B1.dateTime;

Here without ``extra``. PyFlink runs Nexmark's text (``FLINK``); DuckDB has
no ``TUMBLE``, so its form (``DUCKDB``) makes the windows with epoch
arithmetic. Columns: auction, price, bidder, date_time; insert-only. A bid
meets the window it falls in and, when it is exactly on a window's end,
that window too (``BETWEEN`` takes both ends). A streamed run of files has
no end of input, so its last windows never close: it is checked against
the rows of the windows its watermark closed (``FIRED_DUCKDB``).

krishiv plan
------------
``bids.tumbling_window(10_000).agg(max(price).alias("maxprice"))`` (one
row per window, no keys), then ``key_by("maxprice").interval_join(
bids.key_by("price"), between=(-9_999, 1))``: a join of a window's results
(docs/joins.md). A window's result has event time ``window_end - 1 ms``,
so ``window_end - 10 s <= B.date_time <= window_end`` is ``-9,999 ms ..
+1 ms`` from it. The join runs as a stage after the window's operator,
keyed by price. ``SQL`` is None: krishiv's SQL joins a window's results
when they are registered as a stream of their own (``stream.register``; a
side of a join is a stream's name, not a subquery), which docs/sql.md
shows for this query ("A join of a window's results").

The benchmark suite's ``nexmark-q7`` (:mod:`benchmarks.queries`) and the
sustainable harness's ``nexmark-q7`` are its first half: per window, the
highest price (and, in the harness, on 2 s windows, the number of bids).
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

#: The window: 10 s of event time.
WINDOW_MS = 10_000

#: The result's columns and their Flink SQL types (PyFlink's sink, :mod:`benchmarks.nexmark_compose`).
COLUMNS = (
    ("auction", "BIGINT"),
    ("price", "BIGINT"),
    ("bidder", "BIGINT"),
    ("date_time", "TIMESTAMP(3)"),
)

SQL = None

_END = f"epoch_ms((epoch_ms(date_time) // {WINDOW_MS}) * {WINDOW_MS} + {WINDOW_MS})"

DUCKDB = f"""SELECT B.auction, B.price, B.bidder, B.date_time
FROM {{bid}} B
JOIN (
    SELECT MAX(price) AS maxprice, {_END} AS date_time
    FROM {{bid}}
    GROUP BY epoch_ms(date_time) // {WINDOW_MS}
) B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"""

#: Nexmark's text, which PyFlink runs.
FLINK = """SELECT B.auction, B.price, B.bidder, B.date_time
FROM {bid} B
JOIN (
    SELECT MAX(price) AS maxprice, window_end AS date_time
    FROM TABLE(TUMBLE(TABLE {bid}, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"""

#: The reference's rows a streamed run has once its watermark reached ``{watermark_ms}`` (epoch ms):
#: those of the windows it closed.
FIRED_DUCKDB = DUCKDB + "\n    AND B1.date_time <= epoch_ms({watermark_ms})"

WORKLOAD = "nexmark-q7"


def build(s: Streams) -> Stream:
    highest = s.bid.tumbling_window(WINDOW_MS).agg(kp.max(kp.col("price")).alias("maxprice"))
    joined = highest.key_by("maxprice").interval_join(s.bid.key_by("price"), between=(1 - WINDOW_MS, 1))
    return joined.select("auction", kp.col("maxprice").alias("price"), "bidder", "date_time")
