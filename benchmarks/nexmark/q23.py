"""Nexmark q23 (2025), a three-way join: each bid by a person who sells, with the person and each of
their auctions.

Nexmark's SQL (q23.sql, added 2025-12-25: "Find all bids made by a person
who has also listed an item for auction. Illustrates a multi-way join")::

    SELECT bidder, price, channel, url, B.extra AS bid_extra,
           P.id AS person_id, name, emailAddress, creditCard, city, state, P.extra AS person_extra,
           itemName, description, initialBid, reserve, A.dateTime AS auction_dateTime, expires, seller,
           category, A.extra AS auction_extra
    FROM bid B
             JOIN
         person P ON P.id = B.bidder
             JOIN
         auction A ON A.seller = B.bidder;

The auction is joined on its *seller* (the bidder), not on the bid's
auction: one row per bid and auction its bidder sells. Columns as
Nexmark's without the ``extra`` ones; insert-only, duplicates kept. The
generator clips cold bidders and early sellers to person 1000, so small
datasets have many rows per bid (20,000 events: 18,400 bids, 650,672
rows).

krishiv plan
------------
``bids.key_by("bidder").interval_join(persons.key_by("id"),
between=BETWEEN)``, then ``.key_by("bidder").interval_join(
auctions.key_by("seller"), between=BETWEEN)`` with
:data:`~benchmarks.nexmark._streams.BETWEEN`, the longest auction before
or after. Nexmark's joins have no time bound; on this generator a bid's
event time is within (-62.1 s, 112 s) of its bidder's and (-67 s, 112 s)
of each of the bidder's auctions' (a bidder is among the 1,000 newest
persons or a hot one, a seller among the 100 newest, plus 2 s of disorder
and up to 60 s of lateness on each side), so that bound holds every pair.
The second join measures from the first join's row, at the later of the
bid's and the person's times: an auction follows its seller's person row
in arrival order, so it is at most 67 s after and 112 s before that row
too. Then Nexmark's columns (``person_id`` and ``seller`` are the key,
``bidder``; the auction's ``date_time`` is ``date_time_right_right``).
``SQL`` is None: krishiv's SQL has one join per query.

:mod:`benchmarks.nexmark_compose` streams it and runs ``DUCKDB``'s text in
PyFlink; the sustainable harness runs it as ``nexmark-q23`` over its own
tables (each person selling one auction).
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import BETWEEN, Streams
from krishiv_py.api.stream import Stream

#: The result's columns and their Flink SQL types (PyFlink's sink, :mod:`benchmarks.nexmark_compose`).
COLUMNS = (
    ("bidder", "BIGINT"),
    ("price", "BIGINT"),
    ("channel", "STRING"),
    ("url", "STRING"),
    ("person_id", "BIGINT"),
    ("name", "STRING"),
    ("email_address", "STRING"),
    ("credit_card", "STRING"),
    ("city", "STRING"),
    ("state", "STRING"),
    ("item_name", "STRING"),
    ("description", "STRING"),
    ("initial_bid", "BIGINT"),
    ("reserve", "BIGINT"),
    ("auction_date_time", "TIMESTAMP(3)"),
    ("expires", "TIMESTAMP(3)"),
    ("seller", "BIGINT"),
    ("category", "BIGINT"),
)

SQL = None

DUCKDB = """SELECT bidder, price, channel, url,
    P.id AS person_id, name, email_address, credit_card, city, state,
    item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, expires, seller, category
FROM {bid} B
    JOIN {person} P ON P.id = B.bidder
    JOIN {auction} A ON A.seller = B.bidder"""

WORKLOAD = "nexmark-q23"


def build(s: Streams) -> Stream:
    with_person = s.bid.key_by("bidder").interval_join(s.person.key_by("id"), between=BETWEEN)
    three = with_person.key_by("bidder").interval_join(s.auction.key_by("seller"), between=BETWEEN)
    renamed = {"person_id": "bidder", "auction_date_time": "date_time_right_right", "seller": "bidder"}
    return three.select(*(kp.col(renamed[c]).alias(c) if c in renamed else c for c, _ in COLUMNS))
