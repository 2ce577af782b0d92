"""Nexmark q11, user sessions: how many bids each bidder makes in each session of activity, sessions
ending after 10 s without a bid.

Nexmark's SQL (q11.sql)::

    SELECT
        B.bidder,
        count(*) as bid_count,
        SESSION_START(B.dateTime, INTERVAL '10' SECOND) as starttime,
        SESSION_END(B.dateTime, INTERVAL '10' SECOND) as endtime
    FROM bid B
    GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND);

Here ``session_window(10_000)`` per bidder, its rows as the window gives
them and as the benchmark suite's other window queries name them: bidder,
window_start, window_end, count (Nexmark's ``starttime``, ``endtime``,
``bid_count``). A session is the bidder's bids each at most 10 s after the
one before (two bids exactly 10 s apart are one session: their windows
``[t, t + 10 s)`` touch); it starts at its first bid and ends 10 s after
its last (:mod:`benchmarks.queries`).

``DUCKDB`` finds the sessions with gaps and islands
(:func:`benchmarks.duckdb_runner.session_sql`): each bidder's bids counted
per 10 s bucket (a bucket's bids are less than 10 s apart, so one session),
a bucket starting a session when its first bid is more than 10 s after the
previous bucket's last, a running count of those starts numbering the
sessions. The same rows as Nexmark's, exactly.

The benchmark suite runs it as ``nexmark-q11`` (:mod:`benchmarks.spark_runner`,
Spark's own session windows and krishiv's); the sustainable harness has no
form of it.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.duckdb_runner import COUNT, session_sql
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

#: The most time between two bids of one session (ms).
GAP_MS = 10_000

_SESSION = "session_start(date_time, INTERVAL '10' SECOND)"

SQL = f"""
SELECT bidder, {_SESSION}, session_end(date_time, INTERVAL '10' SECOND), COUNT(*)
FROM bid
GROUP BY bidder, {_SESSION}
"""

DUCKDB = session_sql("{bid}", "bidder", "date_time", GAP_MS, COUNT, panes=True)


def build(s: Streams) -> Stream:
    return s.bid.key_by("bidder").session_window(GAP_MS).agg(kp.count(kp.col("*")))
