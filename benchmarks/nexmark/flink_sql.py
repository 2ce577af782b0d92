"""Nexmark's queries in Flink SQL, as the Nexmark repository writes them for Flink, over this
generator's column names (``date_time`` for ``dateTime``, no ``extra``).

Standard library only: :mod:`benchmarks.nexmark.flink` runs these in the
PyFlink environment, where krishiv_py is not installed. Each query returns
the columns of its krishiv module, in order, so the rows compare with
DuckDB's. Where Flink's own functions differ from Spark's, the SQL is
Flink's and the row values are the same:

- ``price * 0.908`` multiplies by a ``DOUBLE`` (q1, q14): Flink's literal
  is a ``DECIMAL`` and the product would be one; krishiv's and DuckDB's are
  doubles.
- ``AVG(price)`` of a ``BIGINT`` is a ``BIGINT`` in Flink (q17): averaged
  as a ``DOUBLE`` here, as krishiv and DuckDB do.
- ``REGEXP_EXTRACT`` gives null without a match in Flink, ``''`` in Spark
  (q21): ``IS NOT NULL`` here, ``<> ''`` in krishiv's SQL.
- ``SPLIT_INDEX`` counts from 0 (q22), Spark's ``SPLIT_PART`` from 1.
- ``ROW_NUMBER`` (q18, q19) keeps one of rows that tie on the order, which
  one is Flink's choice: :data:`COMPARED` names the columns that identify a
  result without the tie's choice.

q12 (processing-time windows) has no batch form in Flink and no
reproducible answer: it is not run here. Nor are the queries over joins and
windows that other runners take to PyFlink in streaming mode
(:data:`NOT_RUN` names the runner), and q6, which Flink cannot run. q13 is Nexmark's processing-time
temporal join (``FOR SYSTEM_TIME AS OF`` a ``PROCTIME()`` column), which
needs a lookup source; Flink 2's filesystem connector is none (the planner
stops at an "unexpected correlate variable"), so the side table, which does
not change during the run, is joined with a regular join: the same rows.
"""

from __future__ import annotations

_RANKS = ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000")


def _counts(column: str | None, name: str) -> str:
    call = "COUNT(*)" if column is None else f"COUNT(DISTINCT {column})"
    parts = [f"{call} AS total_{name}"]
    parts += [f"{call} FILTER (WHERE {r}) AS rank{i}_{name}" for i, r in enumerate(_RANKS, 1)]
    return ", ".join(parts)


_DAY = "DATE_FORMAT(date_time, 'yyyy-MM-dd')"
_EURO = "price * CAST(0.908 AS DOUBLE)"
_CHANNEL_ID = "REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)"

#: Each query's Flink SQL over the tables ``bid``, ``auction``, ``person`` and ``side_input``.
FLINK_SQL: dict[str, str] = {
    "q0": "SELECT auction, bidder, price, date_time, channel, url FROM bid",
    "q1": f"SELECT auction, bidder, {_EURO} AS price, date_time FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q10": (
        "SELECT auction, bidder, price, date_time, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS dt, "
        "DATE_FORMAT(date_time, 'HH:mm') AS hm FROM bid"
    ),
    "q13": (
        "SELECT B.auction, B.bidder, B.price, B.date_time, S.`value` "
        "FROM bid AS B JOIN side_input AS S ON MOD(B.auction, 10000) = S.`key`"
    ),
    "q14": (
        f"SELECT auction, bidder, {_EURO} AS price, "
        "CASE WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime' "
        "WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime' "
        "ELSE 'otherTime' END AS bid_time_type, "
        "date_time, CHAR_LENGTH(url) - CHAR_LENGTH(REPLACE(url, 'c', '')) AS c_counts "
        f"FROM bid WHERE {_EURO} > 1000000 AND {_EURO} < 50000000"
    ),
    "q15": (
        f"SELECT {_DAY} AS `day`, {_counts(None, 'bids')}, {_counts('bidder', 'bidders')}, "
        f"{_counts('auction', 'auctions')} FROM bid GROUP BY {_DAY}"
    ),
    "q16": (
        f"SELECT channel, {_DAY} AS `day`, MAX(DATE_FORMAT(date_time, 'HH:mm')) AS `minute`, "
        f"{_counts(None, 'bids')}, {_counts('bidder', 'bidders')}, {_counts('auction', 'auctions')} "
        f"FROM bid GROUP BY channel, {_DAY}"
    ),
    "q17": (
        f"SELECT auction, {_DAY} AS `day`, {_counts(None, 'bids')}, MIN(price) AS min_price, "
        "MAX(price) AS max_price, AVG(CAST(price AS DOUBLE)) AS avg_price, SUM(price) AS sum_price "
        f"FROM bid GROUP BY auction, {_DAY}"
    ),
    "q18": (
        "SELECT auction, bidder, price, channel, url, date_time FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) "
        "WHERE rank_number <= 1"
    ),
    "q19": (
        "SELECT auction, bidder, price, channel, url, date_time FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) WHERE rank_number <= 10"
    ),
    "q21": (
        "SELECT auction, bidder, price, channel, CASE "
        "WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' "
        "WHEN LOWER(channel) = 'facebook' THEN '2' WHEN LOWER(channel) = 'baidu' THEN '3' "
        f"ELSE {_CHANNEL_ID} END AS channel_id FROM bid "
        f"WHERE {_CHANNEL_ID} IS NOT NULL OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')"
    ),
    "q22": (
        "SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1, "
        "SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid"
    ),
}

_SUITE = "the benchmark suite's PyFlink runner (benchmarks.flink_runner) runs it streaming, as nexmark-{}"
_COMPOSED = (
    "python -m benchmarks.nexmark_compose --query {} runs it in PyFlink, streaming, its changelog applied"
)

#: The queries Flink does not run here, and why (or which runner runs them in PyFlink).
NOT_RUN: dict[str, str] = {
    **{q: _SUITE.format(q) for q in ("q3", "q5", "q8", "q11", "q20")},
    **{q: _COMPOSED.format(q) for q in ("q4", "q7", "q9", "q23")},
    "q6": "Flink cannot run it: its OVER window does not consume the top-1's retractions (FLINK-19059)",
    "q12": "processing-time windows: no batch form in Flink, and no reproducible answer to compare",
}

#: Where a query's rows compare on some columns only (a tie's choice of row left out).
COMPARED: dict[str, tuple[str, ...]] = {
    "q18": ("auction", "bidder", "date_time"),
    "q19": ("auction", "price"),
}
