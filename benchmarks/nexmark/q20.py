"""Nexmark q20, expand bid: each bid with the columns of its auction, for auctions of category 10.

Nexmark's SQL (q20.sql), a regular join::

    SELECT
        auction, bidder, price, channel, url, B.dateTime, B.extra,
        itemName, description, initialBid, reserve, A.dateTime, expires, seller, category, A.extra
    FROM
        bid AS B INNER JOIN auction AS A on B.auction = A.id
    WHERE A.category = 10;

Here without the ``extra`` columns (:data:`benchmarks.queries.Q20_COLUMNS`);
the auction's ``date_time`` is ``date_time_right``, as the joined row names
it. An inner *interval* join
of bids (keyed by auction) and auctions (keyed by id), the auction at most
the longest auction, 120 s, before or after the bid
(:data:`~benchmarks.nexmark._streams.BETWEEN`). A bid falls in its
auction's life, so the as-of join (each bid with its auction's version in
force at the bid) is the natural form; but on this generator a fifth to a
quarter of the bids have an event time before their auction's (disorder),
and the as-of join finds no auction for them. Disorder and lateness keep
every bid within 67 s of its auction, so the interval join gives the
regular join's rows exactly, and emits each as soon as both rows are there.

The auctions are filtered before their watermark, as q3's sides
(:mod:`benchmarks.nexmark.q3`), so ``SQL`` is None for q3's reason: in
krishiv's SQL ``WHERE`` filters the joined rows, after a join of every
auction.

The benchmark suite runs it as ``nexmark-q20`` (:mod:`benchmarks.joins`);
the sustainable harness as ``nexmark-q20`` over its own tables (each bid
with its auction of category 0, a tenth of them).
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import BETWEEN, Streams, kept_before_watermark
from benchmarks.nexmark.q3 import CATEGORY
from benchmarks.queries import Q20_COLUMNS
from krishiv_py.api.stream import Stream

SQL = None

DUCKDB = f"""
SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time,
       A.item_name, A.description, A.initial_bid, A.reserve, A.date_time AS date_time_right,
       A.expires, A.seller, A.category
FROM {{bid}} AS B JOIN {{auction}} AS A ON B.auction = A.id
WHERE A.category = {CATEGORY}
"""

WORKLOAD = "nexmark-q20"


def build(s: Streams) -> Stream:
    auctions = kept_before_watermark(s.auction, kp.col("category") == CATEGORY).key_by("id")
    return s.bid.key_by("auction").interval_join(auctions, between=BETWEEN).select(*Q20_COLUMNS)
