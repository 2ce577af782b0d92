"""Nexmark q13, bounded side input join: each bid with the value of its key (its auction modulo
10,000) in a side table, read again for every micro-batch (``lookup_join``).

Nexmark's side table is a file of 10,000 ``key, value`` lines; here it is
a Parquet table the check writes next to the dataset
(:func:`benchmarks.nexmark.check.side_input`). Flink writes the join as a
processing-time temporal join, ``JOIN side_input FOR SYSTEM_TIME AS OF
B.p_time`` with ``PROCTIME() AS p_time`` in a subquery; krishiv's SQL names
``PROCTIME()`` in the clause itself (a join side is a stream, not a
subquery). The key expression becomes a column named as the table's key,
``key``, as the builder writes it.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

SQL = """
SELECT B.auction, B.bidder, B.price, B.date_time, S.value
FROM bid AS B JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() AS S ON MOD(B.auction, 10000) = S.key
"""

DUCKDB = """
SELECT B.auction, B.bidder, B.price, B.date_time, S.value
FROM (SELECT *, auction % 10000 AS key FROM {bid}) B JOIN {side_input} S ON B.key = S.key
"""


WORKLOAD = "nexmark-q13"


def build(s: Streams) -> Stream:
    keyed = s.bid.with_column("key", kp.col("auction") % 10000)
    joined = keyed.lookup_join(s.side_input, on="key")
    return joined.select("auction", "bidder", "price", "date_time", "value")
