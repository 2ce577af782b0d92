"""Inspect a pipeline: ``explain()`` returns the logical plan, the chosen
lowering and why, the Spark recipe, and Spark's own plan, as text to print.

The same pipeline is explained twice: over a memory stream (unbounded, the
``native`` Structured Streaming lowering) and over records (bounded, the
``bounded`` batch lowering). Nothing runs; only plans are built.

Run with ``python examples/explain_plan.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
SECTIONS = ("== Logical plan ==", "== Lowering:", "== Spark recipe ==", "== Spark plan ==")


def per_minute(stream: kp.Stream) -> kp.Stream:
    """Per-user event counts and totals in 1-minute tumbling windows."""
    return (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-explain") as session:
        stream, _sender = session.memory_stream(SCHEMA, name="events")
        text = per_minute(stream).explain()  # the text, like Polars' LazyFrame.explain()
        print(text)
        for section in SECTIONS:
            assert section in text, section
        assert "== Lowering: native ==" in text
        assert ".withWatermark(" in text  # the recipe uses Spark's own watermark operator

        records = [{"user_id": "alice", "event_time": dt.datetime(2024, 1, 1), "amount": 1.0}]
        bounded = per_minute(session.from_records(records, SCHEMA)).explain()
        lowering = bounded.split("== Spark recipe ==")[0].split("== Lowering:")[1]
        print(f"\n== Lowering:{lowering.rstrip()}")
        assert lowering.startswith(" bounded ==")


if __name__ == "__main__":
    main()
