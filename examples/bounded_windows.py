"""Bounded input: sliding and session windows over in-memory records.

``session.from_records`` makes a finite stream; ``collect()`` runs it as one
Spark batch job and returns a ``pyarrow.Table``. The result is the same as
streaming the records in one step and then closing the source.

Run with ``python examples/bounded_windows.py``.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def event(user: str, seconds: int | None, amount: float) -> dict[str, object]:
    """One row: ``seconds`` after 2024-01-01 00:00 UTC (None: no event time)."""
    time = None if seconds is None else T0 + dt.timedelta(seconds=seconds)
    return {"user_id": user, "event_time": time, "amount": amount}


def show(table: pa.Table) -> str:
    """The rows of ``table`` by user and window start, as text."""
    ordered = table.sort_by([("user_id", "ascending"), ("window_start", "ascending")])
    return str(ordered.to_pandas().to_string(index=False))


RECORDS = [
    event("alice", 0, 1.0),
    event("alice", 20, 2.0),
    event("alice", 100, 3.0),
    event("bob", 5, 4.0),
    event("bob", 65, 5.0),
    event("bob", None, 6.0),  # no event time: counted as invalid, in no window
]


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-bounded") as session:
        clicks = session.from_records(RECORDS, SCHEMA, name="clicks").watermark("event_time", 0)

        # 60 s windows every 30 s: each event is in 2 windows.
        sliding = (
            clicks.key_by("user_id")
            .sliding_window(60_000, 30_000)
            .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")), kp.first(kp.col("amount")))
        )
        table = sliding.collect()
        print("Sliding windows (size 60 s, slide 30 s):")
        print(show(table))
        assert table.num_rows == 8, table  # 4 windows per user
        # 5 events with a valid time, each in 2 windows
        assert sum(n for n in table.column("count").to_pylist() if n is not None) == 10

        # Sessions close after 30 s without events: [first_ts, last_ts + 30 s).
        sessions = (
            clicks.key_by("user_id")
            .session_window(30_000)
            .agg(kp.count(kp.col("*")).alias("events"), kp.max(kp.col("amount")))
        )
        table = sessions.collect()
        print("\nSession windows (gap 30 s):")
        print(show(table))
        assert table.num_rows == 4, table  # alice: [0 s, 50 s) and [100 s, 130 s); bob: 2 single-event ones
        first = [row for row in table.to_pylist() if row["window_start"] == T0]
        assert first == [
            {
                "user_id": "alice",
                "window_start": T0,
                "window_end": T0 + dt.timedelta(seconds=50),
                "events": 2,
                "max_amount": 2.0,
            }
        ], first

        # start() on bounded input runs the same batch job and returns a finished Job.
        metrics = sessions.start().metrics()
        print(f"\n{metrics}")
        assert metrics.input_rows == 6
        assert metrics.invalid_events == 1


if __name__ == "__main__":
    main()
