"""Nexmark q4, average price for a category: the mean winning price of each category's auctions.

Nexmark's SQL (q4.sql)::

    SELECT
        Q.category,
        AVG(Q.final)
    FROM (
        SELECT MAX(B.price) AS final, A.category
        FROM auction A, bid B
        WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
        GROUP BY A.id, A.category
    ) Q
    GROUP BY Q.category;

Here: ``AVG(CAST(Q.final AS DOUBLE)) AS avg_final`` (the exact mean:
Flink's ``AVG`` of a ``BIGINT`` is a ``BIGINT``, DuckDB's a ``DOUBLE``).
Columns: category, avg_final; one row per category with a bid in an
auction's lifetime. In Flink both aggregations update: each new maximum
retracts the auction's old one from its category's average.

krishiv plan
------------
The join and filter of q9 (:func:`benchmarks.nexmark.q9.lifetime_bids`);
then ``key_by("id", "category").agg(max(price).alias("final"))``, an
updating maximum per auction (a ``kind`` column: each new maximum retracts
the previous row); then ``key_by("category").agg(avg(final))`` over those
retracting maxima, a stage of its own: the category's average takes the
retracted maximum out and the new one in. krishiv's ``avg`` of a bigint is
a ``DOUBLE`` (an exact integer sum over a count), so no cast. In krishiv
SQL the inner ``SELECT`` lists ``A.id, A.category`` first, as the
aggregation's keys come: the same plan, with nothing between the two
aggregations. docs/sql.md's ``SELECT MAX(B.price) AS final, A.category``
puts a projection there, which the stateful lowering fails on as of
2026-11-26 (``KeyError: '__kp_handed_ts'``: a projection between two
operators drops the handed rows' event time).

:mod:`benchmarks.nexmark_compose` streams it and runs ``DUCKDB``'s text in
PyFlink; the sustainable harness runs it as ``nexmark-q4`` over q9's
tables there.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from benchmarks.nexmark.q9 import LIFETIME_SQL, lifetime_bids
from krishiv_py.api.stream import Stream

#: The result's columns and their Flink SQL types (PyFlink's sink, :mod:`benchmarks.nexmark_compose`).
COLUMNS = (("category", "BIGINT"), ("avg_final", "DOUBLE"))
#: The columns unique in the final result, by which its updates apply.
KEY = ("category",)

SQL = f"""SELECT Q.category, AVG(Q.final) AS avg_final
FROM (
    SELECT A.id, A.category, MAX(B.price) AS final
    {LIFETIME_SQL}
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""

DUCKDB = """SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS avg_final
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM {auction} A, {bid} B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""

WORKLOAD = "nexmark-q4"


def build(s: Streams) -> Stream:
    final = lifetime_bids(s).key_by("id", "category").agg(kp.max(kp.col("price")).alias("final"))
    return final.key_by("category").agg(kp.avg(kp.col("final")).alias("avg_final"))
