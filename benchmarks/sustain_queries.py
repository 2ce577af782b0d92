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

Event time is the send time minus up to 2 s of disorder, 1 % of events 5 to
60 s behind, for every query.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import krishiv_py as kp

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
QUERIES = ("tumbling", "session", "nexmark-q7")


@attrs.frozen
class Draw:
    """One send's random content: each event's delay behind the send (ms), its key index and value."""

    behind: np.ndarray[Any, np.dtype[np.int64]]
    keys: np.ndarray[Any, np.dtype[np.int64]]
    values: pa.Array[Any]
    #: The users' names (tumbling), drawn ahead: stamping only adds event times.
    names: pa.Array[Any] | None = None


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
    def ddl(self) -> str:
        if self.name == "nexmark-q7":
            return "auction bigint, event_time timestamp, price bigint"
        return "user_id string, event_time timestamp, amount double"

    def draw(self, rng: np.random.Generator, n: int) -> Draw:
        behind = _behind(rng, n)
        if self.name == "nexmark-q7":
            return Draw(behind, rng.integers(0, AUCTIONS, n), pa.array(rng.integers(1, 10_000_000, n)))
        if self.name == "session":
            return Draw(behind, rng.integers(0, PAIRS, n), pa.array(np.ones(n)))
        users = rng.integers(0, USERS, n)
        return Draw(behind, users, pa.array(np.ones(n)), USER_NAMES.take(users))

    def emit(self, d: Draw, now_ms: int) -> tuple[pa.Table, dict[Hashable, int]]:
        """The events of ``d`` sent at ``now_ms``, and how many of them fall in each window."""
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
        if self.name == "nexmark-q7":
            cols = {"auction": pa.array(d.keys), "event_time": _et(now_ms, d.behind), "price": d.values}
        else:
            cols = {"user_id": d.names, "event_time": _et(now_ms, d.behind), "amount": d.values}
        return pa.table(cols), generated

    def steady(self, window: Hashable, first_ms: float, end_ms: float, budget_s: float) -> bool:
        """Whether ``window`` closes in the steady state: after ``first_ms``, a budget before the end."""
        if self.name == "session":
            user, turn = cast("tuple[int, int]", window)
            if turn % 2 != user % 2:
                return False
            # The turn's last event is before its end: the session's end + lag is at most this.
            latest = (turn + 1) * TURN_MS - OFFSETS[user // 2] + GAP_MS + LAG_MS
            return bool(latest - LAG_MS >= first_ms) and bool(latest + budget_s * 1000 <= end_ms)
        end = cast(int, window)
        return end >= first_ms and end + LAG_MS + budget_s * 1000 <= end_ms

    def krishiv(self, stream: kp.Stream) -> kp.Stream:
        """The query over ``stream`` (event time not yet declared)."""
        s = stream.watermark("event_time", LAG_MS)
        if self.name == "session":
            return s.key_by("user_id").session_window(GAP_MS).agg(kp.count(kp.col("*")))
        if self.name == "nexmark-q7":
            return s.tumbling_window(WINDOW_MS).agg(
                kp.max(kp.col("price")).alias("max_price"), kp.count(kp.col("*"))
            )
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
        if self.name == "nexmark-q7":
            out = df.groupBy(window).agg(F.max("price").alias("max_price"), F.count(F.lit(1)).alias("count"))
            return out.select(F.col("w.end").alias("window_end"), "max_price", "count")
        return df.groupBy("user_id", window).count().select(F.col("w.end").alias("window_end"), "count")

    def results(self, table: pa.Table) -> tuple[list[Hashable], list[int], list[int]]:
        """Result rows: each one's window, the moment (epoch ms) the watermark permitted it, its count."""
        ends = _ms(table.column("window_end"))
        counts = [int(c or 0) for c in table.column("count").to_pylist()]
        if self.name != "session":
            return list(ends), [e + LAG_MS for e in ends], counts
        users = [int(str(u)[1:]) for u in table.column("user_id").to_pylist()]
        starts = _ms(table.column("window_start"))
        return self._sessions(users, starts, ends, counts)

    def flink_results(self, fields: list[str]) -> tuple[list[Hashable], list[int], list[int]]:
        """One row the PyFlink job printed (its fields, as :func:`flink_sustain.parse_row` gives them)."""
        from benchmarks.flink_sustain import parse_time

        if self.name == "session":
            user, start, end, n = fields
            return self._sessions([int(user[1:])], [parse_time(start)], [parse_time(end)], [int(n)])
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


WORKLOADS = {name: Workload(name) for name in QUERIES}
