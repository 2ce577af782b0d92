"""The benchmark queries: what each computes, on which table, in which output shape.

Every runner implements every query it can with the same meaning; results are
compared through :func:`benchmarks.digest.digest` of rows in ``columns``
order (window bounds as epoch ms). Watermark lag is 5 s everywhere.

Window semantics (the same in every engine used here): tumbling and sliding
windows are aligned to the epoch and half-open ``[start, end)``; an event at
``t`` belongs to every sliding window with ``start <= t < end``. A session
window of gap ``g`` per key merges the proto-windows ``[t, t + g)`` of its
events that touch or overlap: each event is at most ``g`` after the previous
one (two events exactly ``g`` apart are one session); ``window_start`` is its
first event, ``window_end`` its last event plus ``g``.

Streaming runners read the table's Parquet files one file per micro-batch and
drop events behind the watermark (and leave the last, still-open windows
unemitted, as the stream never ends); bounded runners see every event. Within
each group results must agree exactly.

Queries
-------
``tumbling``
    clickstream ``events``: per ``user_id``, 1-minute tumbling windows,
    ``count(*)`` and ``sum(amount)``.
    Columns: user_id, window_start, window_end, count, sum_amount.
``sliding``
    clickstream: per ``user_id``, 60 s windows sliding by 10 s, count and sum.
    Columns: user_id, window_start, window_end, count, sum_amount.
``sliding-10m``
    clickstream: per ``user_id``, 10 min windows sliding by 10 s (60 windows
    per event), count and sum. Columns as ``sliding``.
``session``
    clickstream: per ``user_id``, sessions with a 30 s gap, count and sum.
    Columns: user_id, window_start, window_end, count, sum_amount.
``nexmark-q5``
    Nexmark ``bid`` (hot items): bids per auction in 10 s windows sliding by
    2 s; per window, the auction(s) with the most bids (all of them on a tie).
    Columns: auction, window_start, window_end, count.
``nexmark-q7``
    Nexmark ``bid`` (highest bid): per 10 s tumbling window, the highest
    price. Columns: window_start, window_end, max_price.
``nexmark-q11``
    Nexmark ``bid`` (user sessions): per ``bidder``, sessions with a 10 s gap,
    number of bids. Columns: bidder, window_start, window_end, count.

The ``nexmark-`` queries' krishiv pipelines and DuckDB references are their
modules of :mod:`benchmarks.nexmark` (``nexmark-q5``: ``benchmarks/nexmark/q5.py``);
``nexmark-q7`` here is the first half of Nexmark's q7, each window's highest
price.

Join queries (two tables; :mod:`benchmarks.joins` runs them, and each
module's docstring says why its formulation gives Nexmark's answer on this
generator):

``nexmark-q3``
    Nexmark ``auction`` and ``person`` (local item suggestion): each auction of
    category 10 with its seller, when the seller's state is OR, ID or CA.
    Columns: name, city, state, id (the auction's).
``nexmark-q8``
    Nexmark ``person`` and ``auction`` (monitor new users): the persons who
    opened an auction in the same 10 s tumbling window, once per window.
    Columns: id, name, window_start.
``nexmark-q20``
    Nexmark ``bid`` and ``auction`` (expand bid): each bid with its auction's
    columns, for auctions of category 10. Columns: the bid's, then the
    auction's but its id (``date_time_right`` is the auction's ``date_time``).

A join query's streaming runners read both tables' files, file ``i`` of each in
micro-batch ``i``. How join rows compare across runners:

* *Late rows*: a row behind the join's watermark (the minimum of both tables')
  joins nothing, in every streaming runner (:mod:`benchmarks.joins` says how
  the hand-written Spark join is told krishiv's rule ``t < W``); bounded
  runners join every row.
* *Windows still open*: a window join emits a window when the watermark
  reaches its end, so a streaming run leaves out the windows the watermark at
  the end of the input has not reached; Spark's stream-stream join emits a
  match as soon as both rows are there, so the hand-written query's rows are
  cut to the windows that watermark closed. Interval joins emit every match
  at once: nothing is cut.
* The joins are inner (and semi): there are no outer rows to compare.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    name: str
    dataset: str  # "clickstream" | "nexmark"
    table: str  # the table read: "events" | "bid" (a join's left table)
    event_time: str
    columns: tuple[str, ...]
    description: str
    right_table: str | None = None  # a join's right table (same event-time column name)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the query reads: ``(table,)``, or a join's left and right tables."""
        return (self.table,) if self.right_table is None else (self.table, self.right_table)

    @property
    def is_join(self) -> bool:
        return self.right_table is not None


#: Nexmark Q20's columns: the bid's, then its auction's but the key (``date_time_right``: the auction's).
Q20_COLUMNS = (
    "auction",
    "bidder",
    "price",
    "channel",
    "url",
    "date_time",
    "item_name",
    "description",
    "initial_bid",
    "reserve",
    "date_time_right",
    "expires",
    "seller",
    "category",
)

QUERIES: dict[str, Query] = {
    q.name: q
    for q in (
        Query(
            "tumbling",
            "clickstream",
            "events",
            "event_time",
            ("user_id", "window_start", "window_end", "count", "sum_amount"),
            "1-minute tumbling count+sum per user",
        ),
        Query(
            "sliding",
            "clickstream",
            "events",
            "event_time",
            ("user_id", "window_start", "window_end", "count", "sum_amount"),
            "60 s / 10 s sliding count+sum per user",
        ),
        Query(
            "sliding-10m",
            "clickstream",
            "events",
            "event_time",
            ("user_id", "window_start", "window_end", "count", "sum_amount"),
            "10 min / 10 s sliding count+sum per user",
        ),
        Query(
            "session",
            "clickstream",
            "events",
            "event_time",
            ("user_id", "window_start", "window_end", "count", "sum_amount"),
            "30 s-gap sessions, count+sum per user",
        ),
        Query(
            "nexmark-q5",
            "nexmark",
            "bid",
            "date_time",
            ("auction", "window_start", "window_end", "count"),
            "hot items: 10 s / 2 s hopping bid count per auction, max per window",
        ),
        Query(
            "nexmark-q7",
            "nexmark",
            "bid",
            "date_time",
            ("window_start", "window_end", "max_price"),
            "highest bid price per 10 s tumbling window",
        ),
        Query(
            "nexmark-q11",
            "nexmark",
            "bid",
            "date_time",
            ("bidder", "window_start", "window_end", "count"),
            "user sessions: bids per bidder, 10 s gap",
        ),
        Query(
            "nexmark-q3",
            "nexmark",
            "auction",
            "date_time",
            ("name", "city", "state", "id"),
            "local item suggestion: category-10 auctions with their OR/ID/CA sellers (interval join)",
            right_table="person",
        ),
        Query(
            "nexmark-q8",
            "nexmark",
            "person",
            "date_time",
            ("id", "name", "window_start"),
            "monitor new users: persons with an auction in the same 10 s window (window join)",
            right_table="auction",
        ),
        Query(
            "nexmark-q20",
            "nexmark",
            "bid",
            "date_time",
            Q20_COLUMNS,
            "expand bid: each bid with its category-10 auction (interval join)",
            right_table="auction",
        ),
    )
}

WATERMARK_LAG_MS = 5_000
