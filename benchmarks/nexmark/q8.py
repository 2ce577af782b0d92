"""Nexmark q8, monitor new users: the persons who opened an auction in the same 10 s window, once per
window.

Nexmark's SQL (q8.sql)::

    SELECT P.id, P.name, P.starttime
    FROM (
      SELECT id, name, window_start AS starttime, window_end AS endtime
      FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
      GROUP BY id, name, window_start, window_end
    ) P
    JOIN (
      SELECT seller, window_start AS starttime, window_end AS endtime
      FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
      GROUP BY seller, window_start, window_end
    ) A
    ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;

Nexmark groups persons by (id, name, window) and auctions by (seller,
window), then joins the two: a person is listed once per window however
many auctions they opened in it. Here a *semi* window join of persons
(keyed by id) with auctions (keyed by seller) in 10 s tumbling windows:
each person row with at least one auction in its window, once; persons are
unique by id, so that is Nexmark's grouping. The window's start is
``window_start`` (Nexmark's ``starttime``), as the benchmark suite's other
window queries name it. ``DUCKDB`` is Nexmark's grouping and join, the
windows on epoch microseconds (:func:`benchmarks.duckdb_runner.tumbling_sql`'s).

The benchmark suite runs it as ``nexmark-q8`` (:mod:`benchmarks.joins`;
the native lowering has no window join, the stateful one runs it); the
sustainable harness as ``nexmark-q8``, on 2 s windows over its own tables.
"""

from __future__ import annotations

from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

#: The tumbling window (ms).
WINDOW_MS = 10_000

_TUMBLE = "TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(date_time), INTERVAL '10' SECOND))"

SQL = f"""
SELECT P.id, P.name, P.window_start
FROM {_TUMBLE.format(table="person")} P
LEFT SEMI JOIN {_TUMBLE.format(table="auction")} A
  ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end
"""

#: Each event's window start: its epoch microseconds rounded down to the window (a true floor).
_US = WINDOW_MS * 1_000
_START = f"(epoch_us(date_time) - ((epoch_us(date_time) % {_US}) + {_US}) % {_US})"

DUCKDB = f"""
WITH P AS (
    SELECT id, name, {_START} AS ws FROM {{person}} GROUP BY id, name, ws
), A AS (
    SELECT seller, {_START} AS ws FROM {{auction}} GROUP BY seller, ws
)
SELECT P.id, P.name, make_timestamp(P.ws)::TIMESTAMPTZ AS window_start
FROM P JOIN A ON P.id = A.seller AND P.ws = A.ws
"""

WORKLOAD = "nexmark-q8"


def build(s: Streams) -> Stream:
    persons = s.person.key_by("id").tumbling_window(WINDOW_MS)
    sellers = s.auction.key_by("seller").tumbling_window(WINDOW_MS)
    return persons.join(sellers, how="semi").select("id", "name", "window_start")
