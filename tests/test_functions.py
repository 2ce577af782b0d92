"""Scalar functions (``kp.lower``, ``kp.date_format``, ...): the plan, their errors, SQL's form.

Their values are checked against Spark in ``tests/test_arrow_expr.py`` (the
cases run in both), here what the builder and SQL make of them.
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.plan import nodes as n
from krishiv_py.planner.sql import to_sql
from krishiv_py.sql import SqlCatalog, execute
from krishiv_py.types import to_schema

NO_SESSION = cast(Any, None)
BID = n.MemorySource(
    name="bid", schema=to_schema("auction bigint, channel string, url string, date_time timestamp"), path="/b"
)
col = kp.col


def plan_error(*words: str) -> Any:
    pattern = "".join(f"(?=.*{re.escape(w)})" for w in words)
    return pytest.raises(kp.PlanError, match=re.compile(pattern, re.DOTALL))


def bids() -> Stream:
    return Stream(NO_SESSION, BID)


def nexmark_q21_q22() -> Stream:
    """Nexmark q21's channel id and q22's URL directories, q10's day and q14's hour."""
    channel = (
        kp.when(kp.lower(col("channel")) == "apple", "0")
        .when(kp.lower(col("channel")) == "google", "1")
        .otherwise(kp.regexp_extract(col("url"), "(&|^)channel_id=([^&]*)", 2))
    )
    return bids().select(
        col("auction"),
        channel.alias("channel_id"),
        kp.split_part(col("url"), "/", 4).alias("dir1"),
        kp.date_format(col("date_time"), "yyyy-MM-dd").alias("day"),
        kp.hour(col("date_time")).alias("hour"),
        kp.length(kp.replace(col("url"), "c", "")).alias("no_c"),
    )


def test_functions_type_their_results_and_render_as_spark_calls() -> None:
    schema = n.schema_of(nexmark_q21_q22().plan)
    assert [f.dtype.name for f in schema] == ["bigint", "string", "string", "string", "int", "int"]
    assert to_sql(kp.date_format(col("date_time"), "HH:mm").node) == "date_format(`date_time`, 'HH:mm')"


def test_sql_calls_are_the_builders_functions() -> None:
    catalog = SqlCatalog()
    catalog.register("bid", BID)
    out = execute(
        catalog,
        "SELECT auction, CASE WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' "
        "ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id, "
        "SPLIT_PART(url, '/', 4) AS dir1, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day, "
        "HOUR(date_time) AS hour, LENGTH(REPLACE(url, 'c', '')) AS no_c FROM bid",
        NO_SESSION,
    )
    assert out is not None and out.plan == nexmark_q21_q22().plan


def test_what_a_function_does_not_take_is_named() -> None:
    with plan_error("lower() takes a string", "bigint"):
        bids().select(kp.lower(col("auction")).alias("x"))
    with plan_error("date_format() takes the pattern letters"):
        bids().select(kp.date_format(col("date_time"), "yyyy-MM-dd'T'").alias("x"))
    with plan_error("not a regular expression"):
        bids().select(kp.regexp_extract(col("url"), "(", 1).alias("x"))
    with plan_error("the pattern has 1 group(s)"):
        bids().select(kp.regexp_extract(col("url"), "(a)", 2).alias("x"))
    with plan_error("split_part() takes a non-empty delimiter and a part other than 0"):
        bids().select(kp.split_part(col("url"), "/", 0).alias("x"))
    with plan_error("are constants"):
        bids().select(kp.replace(col("url"), cast(Any, col("channel"))).alias("x"))
    with plan_error("SPLIT_INDEX", "SPLIT_PART(s, delimiter, index + 1)"):
        catalog = SqlCatalog()
        catalog.register("bid", BID)
        execute(catalog, "SELECT SPLIT_INDEX(url, '/', 3) AS d FROM bid", NO_SESSION)
