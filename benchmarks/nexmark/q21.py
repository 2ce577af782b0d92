"""Nexmark q21, add a channel id: each bid of a known channel with its id (the four hot channels by
name, the others from the ``channel_id`` of their URL).

Flink's ``REGEXP_EXTRACT`` is null without a match, Spark's (and so
krishiv's) the empty string: Nexmark's ``IS NOT NULL`` on it is ``<> ''``
here, which keeps the same bids.
"""

from __future__ import annotations

import krishiv_py as kp
from benchmarks.nexmark._streams import Streams
from krishiv_py.api.stream import Stream

_PATTERN = "(&|^)channel_id=([^&]*)"

SQL = f"""
SELECT auction, bidder, price, channel,
    CASE WHEN LOWER(channel) = 'apple' THEN '0'
         WHEN LOWER(channel) = 'google' THEN '1'
         WHEN LOWER(channel) = 'facebook' THEN '2'
         WHEN LOWER(channel) = 'baidu' THEN '3'
         ELSE REGEXP_EXTRACT(url, '{_PATTERN}', 2) END AS channel_id
FROM bid
WHERE REGEXP_EXTRACT(url, '{_PATTERN}', 2) <> ''
   OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')
"""

DUCKDB = SQL.replace("FROM bid", "FROM {bid}")

_KNOWN = ("apple", "google", "facebook", "baidu")


WORKLOAD = "nexmark-q21"


def build(s: Streams) -> Stream:
    channel = kp.lower(kp.col("channel"))
    extracted = kp.regexp_extract(kp.col("url"), _PATTERN, 2)
    known = (channel == "apple") | (channel == "google") | (channel == "facebook") | (channel == "baidu")
    channel_id = (
        kp.when(channel == "apple", "0")
        .when(channel == "google", "1")
        .when(channel == "facebook", "2")
        .when(channel == "baidu", "3")
        .otherwise(extracted)
    )
    return s.bid.filter((extracted != "") | known).select(
        kp.col("auction"),
        kp.col("bidder"),
        kp.col("price"),
        kp.col("channel"),
        channel_id.alias("channel_id"),
    )
