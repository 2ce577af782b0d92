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
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    name: str
    dataset: str  # "clickstream" | "nexmark"
    table: str  # the table read: "events" | "bid"
    event_time: str
    columns: tuple[str, ...]
    description: str


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
    )
}

WATERMARK_LAG_MS = 5_000
