"""Krishiv's window SQL: ``session.sql`` over streams registered by name.

A query is another way to write a builder pipeline: it makes the same
logical plan (checked below), so it runs, explains and gives rows exactly
as the builder's pipeline does. ``SET watermark.lag`` applies to the next
query only. See docs/sql.md for the grammar.

Run with ``python examples/sql_windows.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

#: The SQL example of Krishiv's documentation, as written there.
PER_MINUTE = """SELECT
tumble_start(event_time, INTERVAL '1 minute') AS window_start,
tumble_end(event_time, INTERVAL '1 minute') AS window_end,
COUNT(*) AS events
FROM events
GROUP BY
tumble_start(event_time, INTERVAL '1 minute'),
tumble_end(event_time, INTERVAL '1 minute');"""

PER_USER = """
SELECT user_id,
       tumble_start(event_time, INTERVAL '1' MINUTE) AS window_start,
       tumble_end(event_time, INTERVAL '1' MINUTE) AS window_end,
       COUNT(*) AS events, SUM(amount) AS total
FROM events
WHERE amount > 0
GROUP BY user_id, tumble_start(event_time, INTERVAL '1' MINUTE)
"""


def event(user: str, seconds: int, amount: float) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=seconds), "amount": amount}


RECORDS = [
    event("alice", 5, 10.0),
    event("bob", 30, 4.0),
    event("alice", 50, -1.0),  # a refund: left out by WHERE amount > 0
    event("alice", 70, 3.0),
    event("bob", 130, 2.5),
]


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-sql") as session:
        events = session.from_records(RECORDS, SCHEMA, name="events")  # registered as "events"

        per_minute = session.sql(PER_MINUTE)
        assert per_minute is not None
        table = per_minute.collect().sort_by("window_start")
        print("Events per minute:")
        print(table.to_pandas().to_string(index=False))
        assert table.column("events").to_pylist() == [3, 1, 1], table

        assert session.sql("SET watermark.lag = INTERVAL '5' SECOND") is None  # for the next query only
        per_user = session.sql(PER_USER)
        assert per_user is not None
        builder = (
            events.watermark("event_time", 5_000)
            .filter(kp.col("amount") > 0)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
        )
        assert per_user.plan == builder.plan  # one plan, whichever way it was written
        table = per_user.collect().sort_by([("user_id", "ascending"), ("window_start", "ascending")])
        print("\nPer user and minute (amount > 0):")
        print(table.to_pandas().to_string(index=False))
        assert table.column("total").to_pylist() == [10.0, 3.0, 4.0, 2.5], table

        try:
            session.sql("SELECT * FROM events ORDER BY amount")
        except kp.PlanError as exc:
            print(f"\nPlanError: {exc}")


if __name__ == "__main__":
    main()
