"""The queries of the sustainable-throughput harness (:mod:`benchmarks.sustainable`).

Each :class:`Workload` says how the generator draws and stamps one send's
events, how many events of each window it generated, the query in krishiv_py
and in hand-written PySpark, and how a result row maps to the window it
closes and the moment the watermark permitted it. PyFlink's SQL for each is
in :mod:`benchmarks.flink_sustain` (that process has no third-party imports
but PyFlink's).

``tumbling``
    the clickstream (1,000 users), per user a 2 s tumbling ``count(*)``. A
    window is its end; permitted at ``end + lag``.
``tumbling-auto``
    ``tumbling`` with an automatic lag held at the fixed one
    (:data:`PINNED_AUTO`: its clamps both 5 s): the same watermark, so the
    two differ only by what the automatic lag costs (every row's time
    reported, the record of each micro-batch). The stateful lowering only.
``session``
    the clickstream with gaps: users come in pairs and take turns, each
    active for 6 s of event time, then idle for 6 s; the pairs' turns are
    staggered over the 12 s cycle. Per user, sessions with a 2 s gap,
    ``count(*)``: each active turn is one session (nothing closes a turn
    but its end). A window is (user, turn); permitted at the session's
    reported end (its last event + the gap) + lag.
``nexmark-q7``
    Nexmark's *highest bid* on bids (auction, price): per 2 s tumbling
    window over all bids, the highest price and the number of bids. A
    window is its end; permitted at ``end + lag``. (Nexmark's window is
    10 s; at 2 s a 30 s trial has enough windows in its steady state for a
    p99.)
``nexmark-q9``
    Nexmark's *winning bids*, two tables: each send brings new auctions
    and bids (Nexmark's ratio, 3 auctions to 46 bids); a bid goes to an
    auction of the last :data:`AUCTION_BACK_S` seconds' sends, inside its
    lifetime. Per auction, its highest bid within its lifetime (an inner
    join, then a top-1 per auction: an updating result). A "window" is an
    auction, its result the auction's current winner; each bid carries the
    moment it was sent (``sent``, Nexmark's ``extra``), and a result row
    is permitted at its bid's send: the latency is the time from sending
    the bid that won to the winner reaching the sink (an updating query
    has no watermark to wait for). Tick 1 s (auctions are numbered by the
    second they were sent in).
``nexmark-q4``
    Nexmark's *average price per category* on q9's data: per auction, its
    highest bid within its lifetime, then per category the average of
    those (two updating aggregations after the join). The harness adds the
    latest send among the bids behind each row (``MAX(sent)`` at both
    levels, Nexmark's ``extra`` again): a "window" is a category and a
    send, permitted at the send, and its latency the time until a row of
    that category reflecting the send (its ``sent`` at or after it)
    reaches the sink: how far the answer lags its input.
``nexmark-q23``
    Nexmark's three-way join (2025): each bid with its bidder's person row
    and each auction the bidder sells. Three tables; each send brings new
    persons, one auction sold by each of them (so a bid makes one row; the
    auctions are a fiftieth of the events, not Nexmark's three in fifty)
    and bids by persons of the last :data:`AUCTION_BACK_S` sends.
    Append-only results; a "window" is a bidder group (``bidder % 10``) and
    a send, measured as q4's: until a row of the group from that send or a
    later one reaches the sink.

``nexmark-q5``
    Nexmark's *hot items* on q7's bids: per window of 10 s sliding by 2 s,
    the auctions with the most bids (every one tied at the top). A window
    is its end, permitted at ``end + lag``, reached by its first row (the
    hand-written PySpark ranks each micro-batch's counts, as krishiv's
    ``top_n`` and PyFlink's join of the counts with their maxima rank).
``nexmark-q3``
    Nexmark's *local item suggestion*: each auction of category 0 (a tenth)
    whose seller's state is OR, ID or CA, with the seller's state. Each
    send brings persons, each selling one auction sent with it, numbered as
    a row query's; a "window" is a send, counted as q20's.
``nexmark-q0``, ``-q1``, ``-q2``, ``-q10``, ``-q13``, ``-q14``, ``-q21``, ``-q22``
    Nexmark's queries without state (:mod:`benchmarks.nexmark`'s modules,
    PyFlink running :mod:`benchmarks.nexmark.flink_sql`'s SQL; q13's side
    table, 10,000 keys, is written per trial: krishiv's ``lookup_join``
    reads its Parquet file, Flink joins its CSV file, read once): bids with
    Nexmark's columns, each send's auctions numbered by the send and ``i`` (:data:`ROWS_PER_SEND`),
    so a result row (every one starts with ``auction``) names its send. A
    "window" is a send, its count the rows the query keeps of it (DuckDB
    runs the module's reference over the send's table), permitted at the
    send; its latency runs until its last row reaches the sink.

``nexmark-q15``, ``-q16``, ``-q17``, ``-q18``, ``-q19``, ``-q12``
    Nexmark's updating queries over bids (:mod:`benchmarks.nexmark`'s
    modules; PyFlink runs Nexmark's SQL), and q12, per bidder the bids in
    each 2 s window of processing time (Nexmark's: 10 s), whose rows the
    harness reads as updates of the bidder's count: each send's bids as a row
    query's, :data:`BIDS_PER_AUCTION` in a row to each of its auctions. A
    "window" is a key of the query and a mark: the value the key's row
    reaches once all the send's rows of that key are in it (q15 and q16:
    the send's last auction of the key, from ``MAX(auction)``, which the
    harness adds to their aggregates as it adds ``MAX(sent)`` to q4's, and
    to q12's; q17:
    the auction's bids; q18, the latest bid per bidder and auction: its
    time; q19, an auction's ten highest bids: the place in the send of the
    last of them, which the bid's bidder carries). Its latency runs from
    the send to the first row of the key that reaches the mark (a row
    printed by PyFlink per input row, or one per key and micro-batch from
    krishiv); up to :data:`SAMPLED_KEYS` keys per send, spread over the
    send in the order its rows were written, the last one among them.

Event time is the send time minus up to 2 s of disorder, 1 % of events 5 to
60 s behind, for every query but q9 and q4 (no late events: Flink's
regular join drops none, krishiv's interval join drops a row behind its
watermark; both would give different answers).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import krishiv_py as kp
from benchmarks.flink_sustain import QUERIES as QUERIES
from benchmarks.flink_sustain import ROW_QUERIES as ROW_QUERIES
from benchmarks.flink_sustain import UPDATING_QUERIES as UPDATING_QUERIES
from benchmarks.nexmark._streams import Tables

WINDOW_MS = 2_000
LAG_MS = 5_000
USERS = 1_000
USER_NAMES = pa.array([f"u{u}" for u in range(USERS)])
#: Sessions: the gap, and how long a user's turn (active, then idle) lasts in event time.
GAP_MS = 2_000
TURN_MS = 6_000
PAIRS = USERS // 2
#: Each pair's turns start this much later than the previous pair's: spread over one cycle.
OFFSETS = np.arange(PAIRS, dtype=np.int64) * (2 * TURN_MS) // PAIRS
#: The most an event lags its send time (ms): 2 s of disorder, or 5 to 60 s late.
MAX_BEHIND_MS = 62_000
AUCTIONS = 1_000
#: ``tumbling-auto``'s lag: automatic, its clamps at the fixed lag (the same watermark).
PINNED_AUTO = kp.AutoLag(warmup_rows=0, min_lag_ms=LAG_MS, max_lag_ms=LAG_MS)
# The queries (named in :mod:`benchmarks.flink_sustain`, which runs without krishiv_py), and the
# Nexmark queries without state among them, by their module (:mod:`benchmarks.nexmark`).
#: A row query's auctions: ``(send ms - SEND_BASE_MS) * ROWS_PER_SEND + i`` (fits a bigint).
SEND_BASE_MS, ROWS_PER_SEND = 1_700_000_000_000, 10_000_000
#: The row queries' bids (Nexmark's columns, :data:`benchmarks.data.BID_DDL`).
BID_DDL = "auction bigint, bidder bigint, price bigint, channel string, url string, date_time timestamp"
#: An updating query's bids: this many to each auction (numbered by the send, as a row query's).
BIDS_PER_AUCTION = 20
#: q18: each auction's bidders (about 10 bids from each: something to deduplicate).
Q18_BIDDERS = 2
#: An updating query's windows per send: at most this many of its keys, spread evenly over the
#: send in the order its rows were written, the send's last key among them.
SAMPLED_KEYS = 64
#: The queries over auctions and bids, whose results update (see :attr:`Workload.reflects`).
NEXMARK_JOINS = ("nexmark-q9", "nexmark-q4")
Q23 = "nexmark-q23"
#: q20, each bid with its auction of category 0 (Nexmark: category 10; here a tenth of the
#: auctions, as Nexmark's category 10 is of its), on q9's tables; q8, persons who opened an
#: auction in the same window, on persons and the auctions they sell.
Q20, Q8, Q3, Q5 = "nexmark-q20", "nexmark-q8", "nexmark-q3", "nexmark-q5"
Q8_TABLES = {
    "person": "id bigint, event_time timestamp",
    "auction": "id bigint, seller bigint, event_time timestamp",
}
#: q3: persons and the auctions they sell; a person's state is one of Nexmark's six.
Q3_TABLES = {
    "person": "id bigint, state string, event_time timestamp",
    "auction": "id bigint, seller bigint, category bigint, event_time timestamp",
}
STATES = pa.array(["AZ", "CA", "ID", "OR", "WA", "WY"])
LOCAL = ("OR", "ID", "CA")
#: q5: windows of this size (sliding by :data:`WINDOW_MS`), as Nexmark's (:mod:`benchmarks.nexmark.q5`).
Q5_SIZE_MS = 10_000
#: q9: a bid goes to an auction sent in one of the last this many seconds (the current one
#: included); auctions last this long; an auction's number is its send's second times ``SPAN``
#: plus its index in the send.
AUCTION_BACK_S = 5
AUCTION_LIFE_MS = 60_000
SPAN = 10_000_000
#: q9: bids per auction (Nexmark's 46 bids to 3 auctions).
BIDS, AUCTIONS_PER = 46, 3
#: q9's tables: an auction starts 2 s before the second it is sent in (so every bid at or after
#: its send is in its lifetime), and lasts ``AUCTION_LIFE_MS``.
#: q23's tables: a person and the auction it sells start 2 s before the second they are sent in.
Q23_TABLES = {
    "person": "id bigint, event_time timestamp",
    "auction": "id bigint, seller bigint, event_time timestamp",
    "bid": "bidder bigint, price bigint, event_time timestamp, sent bigint",
}
#: q23: persons (each selling one auction) per event.
PERSONS_PER = 50
Q9_TABLES = {
    "auction": "id bigint, category bigint, event_time timestamp, expires timestamp",
    "bid": "auction bigint, price bigint, event_time timestamp, bidder bigint, sent bigint",
}


@attrs.frozen
class Draw:
    """One send's random content: each event's delay behind the send (ms), its key index and value."""

    behind: np.ndarray[Any, np.dtype[np.int64]]
    keys: np.ndarray[Any, np.dtype[np.int64]]
    values: pa.Array[Any]
    #: The users' names (tumbling), drawn ahead: stamping only adds event times; q9: bidders.
    names: pa.Array[Any] | None = None
    #: q9: the auctions a send brings.
    auctions: int = 0
    #: The row queries: each bid's bidder, channel and url.
    columns: tuple[pa.Array[Any], ...] = ()


def _behind(rng: np.random.Generator, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    behind = rng.integers(0, 2_001, n)
    late = rng.random(n) < 0.01
    behind[late] += rng.integers(5_000, 60_001, int(late.sum()))
    return behind


def _ms(column: Any) -> list[int]:
    out: list[int] = pc.cast(column, pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
    return out


def _et(now_ms: int, behind: np.ndarray[Any, np.dtype[np.int64]]) -> pa.Array[Any]:
    return pa.array((now_ms - behind) * 1000, pa.timestamp("us", tz="UTC"))


def turns(
    keys: np.ndarray[Any, Any], et_ms: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Sessions: (user, turn) of each event of pair ``keys`` at event time ``et_ms``."""
    turn = (et_ms + OFFSETS[keys]) // TURN_MS
    return 2 * keys + turn % 2, turn


@attrs.frozen
class Workload:
    """One query of the harness (see the module's text): data, queries, windows."""

    name: str

    @property
    def tables(self) -> dict[str, str]:
        """A query over several tables: each one's columns (empty: one table, :attr:`ddl`)."""
        if self.name == Q23:
            return Q23_TABLES
        if self.name == Q8:
            return Q8_TABLES
        if self.name == Q3:
            return Q3_TABLES
        return Q9_TABLES if self.name in (*NEXMARK_JOINS, Q20) else {}

    @property
    def per_send(self) -> bool:
        """Whether a window is a send, waiting for its last row (a row query, q20)."""
        return self.row_query is not None or self.name in (Q20, Q3)

    @property
    def row_query(self) -> str | None:
        """The module of a query without state (``q1`` of ``nexmark-q1``), else None."""
        name = self.name.removeprefix("nexmark-")
        return name if name in ROW_QUERIES else None

    @property
    def updating(self) -> str | None:
        """The module of a Nexmark query over bids whose results update (``q17``), else None."""
        name = self.name.removeprefix("nexmark-")
        return name if name in UPDATING_QUERIES else None

    @property
    def counted_once(self) -> bool:
        """Whether a window is whole once any row of it arrives (q5: its hot auctions, whatever
        the count of the sends behind it), not once its rows count its events."""
        return self.name == Q5

    @property
    def reflects(self) -> bool:
        """Whether a window is (key, mark) and waits for a row of its key whose value reaches the
        mark (q4, q23: the send; the updating queries: :func:`_updating_emit`)."""
        return self.name in ("nexmark-q4", Q23) or self.updating is not None

    def sent_ms(self, window: Hashable) -> int:
        """The send of a window (key, mark) of a query that :attr:`reflects` (epoch ms)."""
        key, mark = cast("tuple[Any, int]", window)
        if self.updating in ("q12", "q15", "q16"):  # the mark: the send's last auction of the key
            return int(mark) // ROWS_PER_SEND + SEND_BASE_MS
        if self.updating in ("q17", "q18"):  # the key starts with the auction: (auction, day or bidder)
            return int(key[0]) // ROWS_PER_SEND + SEND_BASE_MS
        if self.updating == "q19":  # the key: the auction
            return int(key) // ROWS_PER_SEND + SEND_BASE_MS
        return int(mark)

    @property
    def ddl(self) -> str:
        if self.row_query is not None or self.updating is not None:
            return BID_DDL
        if self.name in ("nexmark-q7", Q5):
            return "auction bigint, event_time timestamp, price bigint"
        return "user_id string, event_time timestamp, amount double"

    def draw(self, rng: np.random.Generator, n: int) -> Draw:
        if self.updating is not None:
            return _updating_draw(self.updating, rng, n)
        if self.row_query is not None:  # bids: Nexmark's prices, channels and urls
            from benchmarks.data import _channels

            cents = np.round(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)
            channel, url = _channels(rng, n)
            who = pa.array(rng.integers(1_000, 100_000, n))
            return Draw(rng.integers(0, 2_001, n), np.arange(n), pa.array(cents), columns=(who, channel, url))
        if self.name == Q23:  # bids by persons of the last sends
            persons = max(1, n // PERSONS_PER)
            bids = max(1, n - 2 * persons)
            picks = rng.integers(0, AUCTION_BACK_S, bids) * persons + rng.integers(0, persons, bids)
            disorder = rng.integers(0, 2_001, bids)
            return Draw(disorder, picks, pa.array(rng.integers(1, 10_000_000, bids)), auctions=persons)
        if self.name in (Q8, Q3):  # persons, each opening one auction at the same moment
            persons = max(1, n // 2)
            states = rng.integers(0, len(STATES), persons)  # (q3)
            return Draw(
                rng.integers(0, 2_001, persons), np.arange(persons), pa.array(states), auctions=persons
            )
        if self.name in (*NEXMARK_JOINS, Q20):
            auctions = max(1, n * AUCTIONS_PER // (AUCTIONS_PER + BIDS))
            bids = max(1, n - auctions)
            picks = rng.integers(0, AUCTION_BACK_S, bids) * auctions + rng.integers(0, auctions, bids)
            prices, bidders = rng.integers(1, 10_000_000, bids), rng.integers(0, 100_000, bids)
            disorder = rng.integers(0, 2_001, bids)
            return Draw(disorder, picks, pa.array(prices), pa.array(bidders), auctions=auctions)
        behind = _behind(rng, n)
        if self.name in ("nexmark-q7", Q5):
            return Draw(behind, rng.integers(0, AUCTIONS, n), pa.array(rng.integers(1, 10_000_000, n)))
        if self.name == "session":
            return Draw(behind, rng.integers(0, PAIRS, n), pa.array(np.ones(n)))
        users = rng.integers(0, USERS, n)
        return Draw(behind, users, pa.array(np.ones(n)), USER_NAMES.take(users))

    def emit(self, d: Draw, now_ms: int) -> tuple[Any, dict[Hashable, int]]:
        """The events of ``d`` sent at ``now_ms`` (a table, or one per table of :attr:`tables`), and
        how many of them fall in each window."""
        if self.name == Q23:
            return _q23_emit(d, now_ms)
        if self.updating is not None:
            return _updating_emit(self.updating, d, now_ms)
        if self.row_query is not None:
            return _row_emit(self.row_query, d, now_ms)
        if self.name == Q8:
            return _q8_emit(d, now_ms)
        if self.name == Q3:
            return _q3_emit(d, now_ms)
        if self.name == Q20:  # the send's bids to auctions of category 0
            tables, _ = _q9_emit(d, now_ms)
            kept = int((tables["bid"].column("auction").to_numpy() % 10 == 0).sum())  # (category: id % 10)
            return tables, {now_ms: kept}
        if self.name in NEXMARK_JOINS:
            tables, auctions = _q9_emit(d, now_ms)
            if self.name == "nexmark-q9":
                return tables, auctions
            # q4: each category a bid of this send went to
            categories = np.unique(tables["bid"].column("auction").to_numpy() % 10)
            return tables, {(int(c), now_ms): 1 for c in categories}
        et_ms = now_ms - d.behind
        if self.name == "session":
            user, turn = turns(d.keys, et_ms)
            low = int(turn.min())
            span = int(turn.max()) - low + 1
            counts = np.bincount(user * span + (turn - low))
            hit = np.flatnonzero(counts)
            table = pa.table(
                {"user_id": USER_NAMES.take(user), "event_time": _et(now_ms, d.behind), "amount": d.values}
            )
            return table, {(int(c // span), int(c % span) + low): int(counts[c]) for c in hit}
        first = (now_ms - MAX_BEHIND_MS) // WINDOW_MS
        by_window = np.bincount(et_ms // WINDOW_MS - first)
        generated: dict[Hashable, int] = {
            int((first + i + 1) * WINDOW_MS): int(c) for i, c in enumerate(by_window.tolist()) if c
        }
        if self.name == Q5:  # each window of 10 s, sliding by 2 s, an event falls in: one result each
            size = Q5_SIZE_MS // WINDOW_MS
            ends = np.unique(first + np.flatnonzero(by_window)[:, None] + 1 + np.arange(size)) * WINDOW_MS
            generated = dict.fromkeys(ends.tolist(), 1)
        if self.name in ("nexmark-q7", Q5):
            cols = {"auction": pa.array(d.keys), "event_time": _et(now_ms, d.behind), "price": d.values}
        else:
            cols = {"user_id": d.names, "event_time": _et(now_ms, d.behind), "amount": d.values}
        return pa.table(cols), generated

    def steady(self, window: Hashable, first_ms: float, end_ms: float, budget_s: float) -> bool:
        """Whether ``window`` closes in the steady state: after ``first_ms``, a budget before the end."""
        if self.per_send:  # a send
            return cast(int, window) >= first_ms and cast(int, window) + budget_s * 1000 <= end_ms
        if self.reflects:  # a key and a send: after first_ms, a budget before the end
            sent = self.sent_ms(window)
            return sent >= first_ms and sent + budget_s * 1000 <= end_ms
        if self.name == "nexmark-q9":  # an auction: sent after first_ms, its last bid a budget before the end
            sent_ms = cast(int, window) // SPAN * 1000
            return sent_ms >= first_ms and sent_ms + (AUCTION_BACK_S + budget_s) * 1000 <= end_ms
        if self.name == "session":
            user, turn = cast("tuple[int, int]", window)
            if turn % 2 != user % 2:
                return False
            # The turn's last event is before its end: the session's end + lag is at most this.
            latest = (turn + 1) * TURN_MS - OFFSETS[user // 2] + GAP_MS + LAG_MS
            return bool(latest - LAG_MS >= first_ms) and bool(latest + budget_s * 1000 <= end_ms)
        end = cast(int, window)
        return end >= first_ms and end + LAG_MS + budget_s * 1000 <= end_ms

    def krishiv_tables(self, streams: dict[str, kp.Stream]) -> kp.Stream:
        """A query over several tables (:attr:`tables`) over ``streams`` (event time not yet declared):
        q9, each auction with its bids, the highest one within its lifetime first; q4, the average
        of those per category; q23, each bid with its person and the auctions it sells."""
        if self.name == Q3:  # Nexmark's q3: a seller is within 10 s of its auction
            timed = {name: s.watermark("event_time", LAG_MS) for name, s in streams.items()}
            state = kp.col("state")
            local = (state == LOCAL[0]) | (state == LOCAL[1]) | (state == LOCAL[2])
            local_sellers = timed["person"].filter(local).key_by("id")
            of_category = timed["auction"].filter(kp.col("category") == 0).key_by("seller")
            pairs = of_category.interval_join(local_sellers, between=(-PARTNER_MS, PARTNER_MS))
            return pairs.select("state", "id")
        if self.name == Q8:  # Nexmark's q8 on 2 s windows: each person once per window
            timed = {name: s.watermark("event_time", LAG_MS) for name, s in streams.items()}
            sellers = timed["auction"].key_by("seller").tumbling_window(WINDOW_MS)
            opened = timed["person"].key_by("id").tumbling_window(WINDOW_MS).join(sellers, how="semi")
            return opened.select("id", "window_start")
        if self.name == Q20:  # every bid with its auction (a tenth of them)
            tenth = streams["auction"].watermark("event_time", LAG_MS).filter(kp.col("category") == 0)
            by_auction = streams["bid"].watermark("event_time", LAG_MS).key_by("auction")
            pairs = tenth.key_by("id").interval_join(by_auction, between=(0, AUCTION_LIFE_MS))
            return pairs.select("id", "price", "sent")
        if self.name == Q23:
            timed = {name: s.watermark("event_time", LAG_MS) for name, s in streams.items()}
            near = (-PARTNER_MS, 2_000)  # a bid is 0-7 s after its bidder's person and auctions
            with_person = (
                timed["bid"].key_by("bidder").interval_join(timed["person"].key_by("id"), between=near)
            )
            three = with_person.key_by("bidder").interval_join(
                timed["auction"].key_by("seller"), between=near
            )
            return three.select(
                "bidder",
                "price",
                kp.col("bidder").alias("person_id"),
                kp.col("id").alias("auction_id"),
                "sent",
            )
        auctions = streams["auction"].watermark("event_time", LAG_MS).key_by("id")
        bids = streams["bid"].watermark("event_time", LAG_MS).key_by("auction")
        joined = auctions.interval_join(bids, between=(0, AUCTION_LIFE_MS))
        lifetime = joined.filter(kp.col("event_time_right") <= kp.col("expires"))
        if self.name == "nexmark-q4":
            latest = kp.max(kp.col("sent")).alias("sent")
            final = lifetime.key_by("id", "category").agg(kp.max(kp.col("price")).alias("final"), latest)
            per_category = final.key_by("category").agg(kp.avg(kp.col("final")).alias("avg_final"), latest)
            return per_category.select("category", "avg_final", "sent", "kind")
        best = lifetime.top_n(1, by="price", per="key", keys=("id",), ties="first")
        return best.select("id", "price", "sent", "kind")

    def krishiv(self, stream: kp.Stream, side: kp.Stream | None = None) -> kp.Stream:
        """The query over ``stream`` (event time not yet declared); q13's ``side`` table."""
        if self.updating == "q12":  # per bidder, the bids of each 2 s of processing time
            per_bidder = stream.watermark("date_time", LAG_MS).key_by("bidder")
            return per_bidder.tumbling_window(WINDOW_MS, time="processing").agg(
                kp.count(kp.col("*")).alias("bid_count"), kp.max(kp.col("auction")).alias("last_auction")
            )
        if self.row_query is not None or self.updating is not None:
            from benchmarks.nexmark import query

            name = self.row_query or self.updating
            tables = {"bid": stream.watermark("date_time", LAG_MS)}
            bids = Tables(tables if side is None else {**tables, "side_input": side})
            if name in ("q15", "q16"):  # and the send's last auction behind each row
                last = kp.max(kp.col("auction")).alias("last_auction")
                return cast(kp.Stream, query(name).build(bids, last))
            return cast(kp.Stream, query(str(name)).build(bids))
        s = stream.watermark("event_time", LAG_MS)
        if self.name == "session":
            return s.key_by("user_id").session_window(GAP_MS).agg(kp.count(kp.col("*")))
        if self.name == "nexmark-q7":
            return s.tumbling_window(WINDOW_MS).agg(
                kp.max(kp.col("price")).alias("max_price"), kp.count(kp.col("*"))
            )
        if self.name == Q5:  # per window, the auctions tied at the most bids (benchmarks.nexmark.q5)
            from benchmarks.nexmark import q5

            return q5.build(Tables({"bid": s}))
        if self.name == "tumbling-auto":
            s = stream.watermark("event_time", PINNED_AUTO)
        return s.key_by("user_id").tumbling_window(WINDOW_MS).agg(kp.count(kp.col("*")))

    def spark(self, df: Any) -> Any:
        """The hand-written query over ``df`` (streaming or batch); columns as krishiv's results."""
        from pyspark.sql import functions as F

        if self.name == "session":
            window = F.session_window("event_time", f"{GAP_MS // 1000} seconds").alias("w")
            return (
                df.groupBy("user_id", window)
                .count()
                .select(
                    "user_id",
                    F.col("w.start").alias("window_start"),
                    F.col("w.end").alias("window_end"),
                    "count",
                )
            )
        window = F.window("event_time", f"{WINDOW_MS // 1000} seconds").alias("w")
        if self.name == Q5:  # the counts; :meth:`results` ranks each micro-batch's
            hop = F.window("event_time", f"{Q5_SIZE_MS // 1000} seconds", f"{WINDOW_MS // 1000} seconds")
            counts = df.groupBy("auction", hop.alias("w")).count()
            return counts.select("auction", F.col("w.end").alias("window_end"), "count")
        if self.name == "nexmark-q7":
            out = df.groupBy(window).agg(F.max("price").alias("max_price"), F.count(F.lit(1)).alias("count"))
            return out.select(F.col("w.end").alias("window_end"), "max_price", "count")
        return df.groupBy("user_id", window).count().select(F.col("w.end").alias("window_end"), "count")

    def results(self, table: pa.Table) -> tuple[list[Hashable], list[int], list[int]]:
        """Result rows: each one's window, the moment (epoch ms) the watermark permitted it, its count."""
        if self.row_query is not None:  # a row: its send, named by its auction
            return _per_send(table.column("auction").to_numpy())
        if self.updating is not None:
            return _reflected(self.updating, _updates(self.updating, table))
        if self.name == Q20:  # a row: its bid's send
            return _per_send_of(table.column("sent").to_numpy())
        if self.name == Q8:  # a person in a window
            return _per_window(np.array(_ms(table.column("window_start")), np.int64) + WINDOW_MS)
        if self.name == Q3:  # an auction: its send
            return _per_send(table.column("id").to_numpy())
        if self.name == Q5:  # the window's hot auctions (the counts ranked, where they are not yet)
            return _per_window(np.array(_ms(_hot(table).column("window_end")), np.int64), each=True)
        if self.name == Q23:  # a row: its bidder group, its bid's send
            groups = (table.column("bidder").to_numpy() % 10).tolist()
            return list(groups), [int(s or 0) for s in table.column("sent").to_pylist()], [1] * len(groups)
        if self.name in NEXMARK_JOINS:  # a new row: its auction (category), its send (a retraction: none)
            emits = table.filter(pc.not_equal(table.column("kind"), pa.scalar("retract")))
            key = "id" if self.name == "nexmark-q9" else "category"
            ids, sent = emits.column(key).to_pylist(), emits.column("sent").to_pylist()
            return list(ids), [int(s or 0) for s in sent], [1] * len(ids)
        ends = _ms(table.column("window_end"))
        counts = [int(c or 0) for c in table.column("count").to_pylist()]
        if self.name != "session":
            return list(ends), [e + LAG_MS for e in ends], counts
        users = [int(str(u)[1:]) for u in table.column("user_id").to_pylist()]
        starts = _ms(table.column("window_start"))
        return self._sessions(users, starts, ends, counts)

    def flink_rows(self, rows: list[str]) -> tuple[list[Hashable], list[int], list[int]]:
        """The rows a PyFlink job printed at once (each its fields joined by ``", "``, as
        :func:`flink_sustain.parse_rows` gives them), as :meth:`results` gives a table's."""
        if self.row_query is not None:  # auction first: its send
            auctions = _field(pa.array(rows, pa.string()), 0).cast(pa.int64())
            return _per_send(auctions.to_numpy())
        if self.updating is not None:
            return _reflected(self.updating, _flink_updates(self.updating, rows))
        if self.name == Q20:  # id, price, sent
            return _per_send_of(_field(pa.array(rows, pa.string()), 2).cast(pa.int64()).to_numpy())
        if self.name == Q3:  # state, id
            return _per_send(_field(pa.array(rows, pa.string()), 1).cast(pa.int64()).to_numpy())
        windows: list[Hashable] = []
        permitted: list[int] = []
        counts: list[int] = []
        for row in rows:
            w, p, c = self.flink_results(row.split(", "))
            windows += w
            permitted += p
            counts += c
        return windows, permitted, counts

    def flink_results(self, fields: list[str]) -> tuple[list[Hashable], list[int], list[int]]:
        """One row the PyFlink job printed (its fields, split at ``", "``)."""
        from benchmarks.flink_sustain import parse_time

        if self.row_query is not None:  # auction first: its send
            sent = int(fields[0]) // ROWS_PER_SEND + SEND_BASE_MS
            return [sent], [sent], [1]
        if self.name == "session":
            user, start, end, n = fields
            return self._sessions([int(user[1:])], [parse_time(start)], [parse_time(end)], [int(n)])
        if self.name == Q23:  # bidder, price, person_id, auction_id, sent
            return [int(fields[0]) % 10], [int(fields[4])], [1]
        if self.name == Q8:  # id, window start
            end_ms = parse_time(fields[1]) + WINDOW_MS
            return [end_ms], [end_ms + LAG_MS], [1]
        if self.name == Q20:  # id, price, sent
            return [int(fields[2])], [int(fields[2])], [1]
        if self.name == Q5:  # auction, window_end, n
            end_ms = parse_time(fields[1])
            return [end_ms], [end_ms + LAG_MS], [1]
        if self.name in NEXMARK_JOINS:  # id, price, sent (q4: category, avg_final, sent)
            return [int(fields[0])], [int(fields[2])], [1]
        end_ms = parse_time(fields[0])
        return [end_ms], [end_ms + LAG_MS], [int(fields[-1])]

    @staticmethod
    def _sessions(
        users: list[int], starts: list[int], ends: list[int], counts: list[int]
    ) -> tuple[list[Hashable], list[int], list[int]]:
        windows: list[Hashable] = [
            (u, (s + int(OFFSETS[u // 2])) // TURN_MS) for u, s in zip(users, starts, strict=True)
        ]
        return windows, [e + LAG_MS for e in ends], counts


def _per_send(auctions: np.ndarray[Any, Any]) -> tuple[list[Hashable], list[int], list[int]]:
    """A row query's rows, by the auctions they start with: each send and how many rows it has."""
    return _per_send_of(auctions // ROWS_PER_SEND + SEND_BASE_MS)


def _per_send_of(sends: np.ndarray[Any, Any]) -> tuple[list[Hashable], list[int], list[int]]:
    """Rows by their sends (epoch ms): each send, permitted at itself, and how many rows it has."""
    unique, counts = np.unique(sends, return_counts=True)
    return list(unique.tolist()), unique.tolist(), counts.tolist()


def _per_window(
    ends: np.ndarray[Any, Any], *, each: bool = False
) -> tuple[list[Hashable], list[int], list[int]]:
    """Rows by their windows' ends: each end, permitted at end + lag, and how many rows it has
    (``each``: 1, a window's first row completes it)."""
    unique, counts = np.unique(ends, return_counts=True)
    return list(unique.tolist()), (unique + LAG_MS).tolist(), [1] * len(unique) if each else counts.tolist()


def _hot(counts: pa.Table) -> pa.Table:
    """q5: the rows of each window (``window_end``) whose ``count`` is the window's highest."""
    best = counts.group_by(["window_end"]).aggregate([("count", "max")])
    joined = counts.join(best, keys="window_end")
    return joined.filter(pc.equal(joined["count"], joined["count_max"]))


def _updating_draw(name: str, rng: np.random.Generator, n: int) -> Draw:
    """An updating query's send: Nexmark's prices, channels and urls; :data:`BIDS_PER_AUCTION` bids
    to each auction, in order; q18, :data:`Q18_BIDDERS` bidders to an auction; q19, a bid's bidder
    is its place in the send and its price is unique within its auction (so the top 10 are one set
    and the row that completes them is known)."""
    from benchmarks.data import _channels

    cents = np.round(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)
    channel, url = _channels(rng, n)
    place = np.arange(n)
    if name == "q18":
        who = rng.integers(0, Q18_BIDDERS, n)
    elif name == "q19":
        who, cents = place, cents * 1_000 + place % 1_000
    else:
        who = rng.integers(1_000, 100_000, n)
    keys = place // BIDS_PER_AUCTION
    return Draw(rng.integers(0, 2_001, n), keys, pa.array(cents), columns=(pa.array(who), channel, url))


def _days(ms: np.ndarray[Any, Any]) -> pa.Array[Any]:
    """Each epoch-ms moment's UTC day, as ``DATE_FORMAT(.., 'yyyy-MM-dd')`` writes it."""
    return pa.array(np.datetime_as_string(ms.astype("datetime64[ms]"), unit="D"))


#: Per updating query: the columns of a row's key, and the column whose value marks how far the
#: row reflects its key's input (reaching a window's mark: the key's last row of that send is in).
UPDATE_KEYS = {
    "q12": (("bidder",), "last_auction"),
    "q15": (("day",), "last_auction"),
    "q16": (("channel", "day"), "last_auction"),
    "q17": (("auction", "day"), "total_bids"),
    "q18": (("auction", "bidder"), "date_ms"),
    "q19": (("auction",), "bidder"),
}


def _updating_emit(name: str, d: Draw, now_ms: int) -> tuple[pa.Table, dict[Hashable, int]]:
    """An updating query's send at ``now_ms``: its bids, auctions numbered by the send; and its
    windows: a key and the value its row reaches once the send's rows of the key are in (q15,
    q16: the last auction; q17: the bids; q18: the latest time; q19: the place of the last of the
    auction's final top 10), at most :data:`SAMPLED_KEYS` of them."""
    bidders, channel, url = d.columns
    et_ms = now_ms - d.behind
    auctions = (now_ms - SEND_BASE_MS) * ROWS_PER_SEND + d.keys
    table = pa.table(
        {
            "auction": pa.array(auctions),
            "bidder": bidders,
            "price": d.values,
            "channel": channel,
            "url": url,
            "date_time": _et(now_ms, d.behind),
        }
    )
    keys, _ = UPDATE_KEYS[name]
    day_ms = 86_400_000
    if name == "q19":  # each auction's rows are BIDS_PER_AUCTION in a row: its top 10 per block
        groups, mark_of = _top10_last(d.values.to_numpy(), auctions[0])
        order = mark_of
    else:
        rows = table.append_column("day", pa.array(et_ms // day_ms)).append_column("date_ms", pa.array(et_ms))
        rows = rows.append_column("place", pa.array(np.arange(len(et_ms))))
        source, agg = {"q17": ("auction", "count"), "q18": ("date_ms", "max")}.get(name, ("auction", "max"))
        wanted: list[Any] = [(source, agg), ("place", "max")]
        groups = rows.group_by(list(keys)).aggregate(wanted)
        mark_of = groups.column(f"{source}_{agg}").to_numpy()
        order = groups.column("place_max").to_numpy()
    ranked = np.argsort(order, kind="stable")
    spread = np.linspace(0, len(ranked) - 1, min(SAMPLED_KEYS, len(ranked))).round().astype(int)
    picks = ranked[np.unique(spread)]
    key_columns = [groups.column(k).take(pa.array(picks)).to_pylist() for k in keys]
    if "day" in keys:  # as the query writes it
        days = key_columns[keys.index("day")]
        key_columns[keys.index("day")] = _days(np.array(days, np.int64) * day_ms).to_pylist()
    windows: dict[Hashable, int] = {}
    for j, i in enumerate(picks.tolist()):
        key = key_columns[0][j] if len(keys) == 1 else tuple(c[j] for c in key_columns)
        windows[key, int(mark_of[i])] = 1
    return table, windows


def _top10_last(prices: np.ndarray[Any, Any], first: int) -> tuple[pa.Table, np.ndarray[Any, Any]]:
    """q19: each auction (``first`` on, :data:`BIDS_PER_AUCTION` rows each, in order) and the place
    in the send of the last of its ten highest bids (prices are unique within an auction)."""
    n, per = len(prices), BIDS_PER_AUCTION
    blocks = -(-n // per)
    padded = np.full(blocks * per, -1, np.int64)
    padded[:n] = prices
    top = np.argsort(-padded.reshape(blocks, per), axis=1, kind="stable")[:, :10]
    places = top + (np.arange(blocks) * per)[:, None]
    last = np.where(places < n, places, -1).max(axis=1)
    return pa.table({"auction": pa.array(first + np.arange(blocks, dtype=np.int64))}), last


def _updates(name: str, table: pa.Table) -> pa.Table:
    """An updating query's result rows (a retraction: none) as its key columns and ``value``."""
    if "kind" in table.column_names:
        table = table.filter(pc.not_equal(table.column("kind"), pa.scalar("retract")))
    keys, value = UPDATE_KEYS[name]
    if name == "q18":
        ms = pc.cast(table.column("date_time"), pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        table = table.append_column("date_ms", ms)
    columns: dict[str, Any] = {k: table.column(k) for k in keys}
    columns["value"] = table.column(value).cast(pa.int64())
    return pa.table(columns)


#: Per updating query, the fields of a printed row that :func:`_flink_updates` reads: the key's
#: (in :data:`UPDATE_KEYS`'s order), then the value's (-1: the last field; no field holds ", ").
_PRINTED = {
    "q12": (0, -1),
    "q15": (0, -1),
    "q16": (0, 1, -1),
    "q17": (0, 1, 2),
    "q18": (0, 1, 5),
    "q19": (0, 1),
}


def _field(rows: pa.Array[Any], i: int) -> pa.Array[Any]:
    """Field ``i`` (-1: the last) of printed rows (fields joined by ``", "``)."""
    if i == -1:
        return pc.list_element(pc.split_pattern(rows, ", ", max_splits=1, reverse=True), 1)
    return pc.list_element(pc.split_pattern(rows, ", ", max_splits=i + 1), i)


def _flink_updates(name: str, rows: list[str]) -> pa.Table:
    """The fields PyFlink printed for an updating query's rows (Nexmark's SQL's columns; q15 and
    q16 end with ``last_auction``), as :func:`_updates` gives krishiv's."""
    keys, _ = UPDATE_KEYS[name]
    printed = pa.array(rows, pa.string())
    *at, value_at = _PRINTED[name]
    columns: dict[str, pa.Array[Any]] = {}
    for k, i in zip(keys, at, strict=True):
        column = _field(printed, i)
        columns[k] = column.cast(pa.int64()) if k in ("auction", "bidder") else column
    value = _field(printed, value_at)
    # A null prints as "null" (Nexmark's setup's mini-batches print rows of a null MAX): none.
    value = pc.if_else(pc.equal(value, pa.scalar("null")), pa.scalar(None, pa.string()), value)
    if name == "q18":  # a TIMESTAMP_LTZ, printed as an instant
        value = value.cast(pa.timestamp("ms", tz="UTC"))
    columns["value"] = value.cast(pa.int64())
    return pa.table(columns)


def _reflected(name: str, updates: pa.Table) -> tuple[list[Hashable], list[int], list[int]]:
    """Rows that arrived at once, as (key, the highest value among its rows, 1) (a window's mark is
    reached by a key's row of this arrival if by any)."""
    keys, _ = UPDATE_KEYS[name]
    best = updates.group_by(list(keys)).aggregate([("value", "max")])
    values = [int(v or 0) for v in best.column("value_max").to_pylist()]
    if len(keys) == 1:
        return list(best.column(keys[0]).to_pylist()), values, [1] * len(values)
    columns = [best.column(k).to_pylist() for k in keys]
    return list(zip(*columns, strict=True)), values, [1] * len(values)


def _row_emit(name: str, d: Draw, now_ms: int) -> tuple[pa.Table, dict[Hashable, int]]:
    """A row query's send at ``now_ms``: its bids, auctions numbered by the send; and how many rows
    the query keeps of them (the module's DuckDB reference over the send's table)."""
    import duckdb

    from benchmarks.nexmark import query

    bidders, channel, url = d.columns
    if len(d.keys) >= ROWS_PER_SEND:
        raise ValueError(f"a send of a row query holds fewer than {ROWS_PER_SEND} bids, not {len(d.keys)}")
    table = pa.table(
        {
            "auction": pa.array((now_ms - SEND_BASE_MS) * ROWS_PER_SEND + d.keys),
            "bidder": bidders,
            "price": d.values,
            "channel": channel,
            "url": url,
            "date_time": _et(now_ms, d.behind),
        }
    )
    with duckdb.connect() as con:
        con.register("sent_bids", table)
        con.register("side_input", side_table())
        con.execute("SET TimeZone = 'UTC'")
        sql = query(name).DUCKDB.format(bid="sent_bids", side_input="side_input")
        row = con.execute(f"SELECT COUNT(*) FROM ({sql})").fetchone()
    kept = int(row[0]) if row else 0
    return table, ({now_ms: kept} if kept else {})


#: q13's side table: this many keys (0 on), each with a value.
SIDE_KEYS = 10_000
SIDE_DDL = "key bigint, value string"


def side_table() -> pa.Table:
    """q13's side table: each key of 0-9,999 and ``'value-<key>'`` (Nexmark's: a file of 10,000 lines)."""
    values = pa.array([f"value-{k}" for k in range(SIDE_KEYS)])
    return pa.table({"key": pa.array(np.arange(SIDE_KEYS, dtype=np.int64)), "value": values})


def write_side_table(directory: str, form: str = "parquet") -> str:
    """:func:`side_table` as one file in ``directory`` (``form``: parquet, or csv without a header)."""
    import os

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if form == "csv":
        pacsv.write_csv(
            side_table(), os.path.join(directory, "part-0.csv"), pacsv.WriteOptions(include_header=False)
        )
    else:
        pq.write_table(side_table(), os.path.join(directory, "part-0.parquet"))
    return directory


#: q23: the most a bid's event time is after its bidder's person row or auction (the last sends').
PARTNER_MS = 10_000


def _q23_emit(d: Draw, now_ms: int) -> tuple[dict[str, pa.Table], dict[Hashable, int]]:
    """q23's send at ``now_ms``: its persons, the auction each sells, bids by persons of the last
    sends; and each bidder group with a bid in it."""
    second = now_ms // 1000
    ids = second * SPAN + np.arange(d.auctions, dtype=np.int64)
    start = pa.array(np.full(d.auctions, (second * 1000 - 2_000) * 1000), pa.timestamp("us", tz="UTC"))
    back, index = d.keys // d.auctions, d.keys % d.auctions
    bidders = (second - back) * SPAN + index
    tables = {
        "person": pa.table({"id": pa.array(ids), "event_time": start}),
        "auction": pa.table({"id": pa.array(ids), "seller": pa.array(ids), "event_time": start}),
        "bid": pa.table(
            {
                "bidder": pa.array(bidders),
                "price": d.values,
                "event_time": _et(now_ms, d.behind),
                "sent": pa.array(np.full(len(bidders), now_ms, np.int64)),
            }
        ),
    }
    return tables, {(int(g), now_ms): 1 for g in np.unique(bidders % 10)}


def _q3_emit(d: Draw, now_ms: int) -> tuple[dict[str, pa.Table], dict[Hashable, int]]:
    """q3's send at ``now_ms``: its persons (each a state), each selling one auction (of category
    ``id % 10``), numbered as a row query's auctions; and how many of them q3 keeps."""
    ids = (now_ms - SEND_BASE_MS) * ROWS_PER_SEND + np.arange(d.auctions, dtype=np.int64)
    et = _et(now_ms, d.behind)
    states = STATES.take(d.values)
    tables = {
        "person": pa.table({"id": pa.array(ids), "state": states, "event_time": et}),
        "auction": pa.table(
            {"id": pa.array(ids), "seller": pa.array(ids), "category": pa.array(ids % 10), "event_time": et}
        ),
    }
    kept = int(((ids % 10 == 0) & pc.is_in(states, pa.array(LOCAL)).to_numpy(zero_copy_only=False)).sum())
    return tables, ({now_ms: kept} if kept else {})


def _q8_emit(d: Draw, now_ms: int) -> tuple[dict[str, pa.Table], dict[Hashable, int]]:
    """q8's send at ``now_ms``: its persons, each opening one auction at its own event time; and
    how many persons each window holds."""
    ids = now_ms // 1000 * SPAN + np.arange(d.auctions, dtype=np.int64)
    et = _et(now_ms, d.behind)
    tables = {
        "person": pa.table({"id": pa.array(ids), "event_time": et}),
        "auction": pa.table({"id": pa.array(ids), "seller": pa.array(ids), "event_time": et}),
    }
    ends = ((now_ms - d.behind) // WINDOW_MS + 1) * WINDOW_MS
    unique, counts = np.unique(ends, return_counts=True)
    return tables, dict(zip(unique.tolist(), counts.tolist(), strict=True))


def _q9_emit(d: Draw, now_ms: int) -> tuple[dict[str, pa.Table], dict[Hashable, int]]:
    """q9's send at ``now_ms``: its auctions and bids, and the auctions it starts (a window each)."""
    second = now_ms // 1000
    start_ms = second * 1000 - 2_000
    ids = second * SPAN + np.arange(d.auctions, dtype=np.int64)
    stamp = pa.timestamp("us", tz="UTC")
    auctions = pa.table(
        {
            "id": pa.array(ids),
            "category": pa.array(ids % 10),
            "event_time": pa.array(np.full(d.auctions, start_ms * 1000), stamp),
            "expires": pa.array(np.full(d.auctions, (start_ms + AUCTION_LIFE_MS) * 1000), stamp),
        }
    )
    back, index = d.keys // d.auctions, d.keys % d.auctions
    to = (second - back) * SPAN + index
    bids = pa.table(
        {
            "auction": pa.array(to),
            "price": d.values,
            "event_time": _et(now_ms, d.behind),
            "bidder": d.names if d.names is not None else pa.nulls(len(to), pa.int64()),
            "sent": pa.array(np.full(len(to), now_ms, np.int64)),
        }
    )
    # Each auction once, in its own send (it gets ~15 bids over the next sends: one without any,
    # e^-15 of them, would show as a result that never came).
    return {"auction": auctions, "bid": bids}, dict.fromkeys(ids.tolist(), 1)


WORKLOADS = {name: Workload(name) for name in QUERIES}
