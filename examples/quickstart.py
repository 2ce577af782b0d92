"""Streaming quick start: per-user event counts and totals in 1-minute windows.

A memory stream is fed in three steps (one ``sender.send`` each), then
closed. The watermark trails the largest event time by 5 s; a window fires
once, when the watermark reaches its end. One event arrives after its
window has fired and is dropped.

Run with ``python examples/quickstart.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def as_time(ms: int | None) -> str:
    """A watermark in epoch milliseconds, readable."""
    if ms is None:
        return "none yet"
    if ms == kp.END_OF_TIME_MS:
        return "end of input"
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)).isoformat()


def event(user: str, seconds: int, amount: float) -> dict[str, object]:
    """One row: ``seconds`` after 2024-01-01 00:00 UTC."""
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=seconds), "amount": amount}


# Three steps of input, slightly out of order.
STEPS = [
    [event("alice", 5, 10.0), event("alice", 20, 2.5), event("bob", 30, 4.0), event("alice", 58, 1.0)],
    [event("alice", 70, 3.0), event("bob", 59, 6.0), event("bob", 90, 8.0)],
    # The watermark is 85 s now, so the window [0 s, 60 s) has fired: the
    # event at 40 s is late and dropped.
    [event("alice", 130, 5.0), event("alice", 40, 100.0)],
]


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-quickstart") as session:
        stream, sender = session.memory_stream(SCHEMA, name="events")
        per_minute = (
            stream.watermark("event_time", 5_000)  # 5 s bounded out-of-orderness
            .key_by("user_id")
            .tumbling_window(60_000)  # 1-minute windows
            .agg(
                kp.count(kp.col("*")).alias("events"),
                kp.sum(kp.col("amount")).alias("total"),
            )
        )
        job = per_minute.start()  # default sink: in memory
        for i, rows in enumerate(STEPS, start=1):
            sender.send(rows)
            job.process_all_available()  # one step
            print(f"after step {i}: watermark {as_time(job.watermark_ms)}, {job.results().num_rows} windows")
        sender.close()  # end of input: every open window fires
        job.await_termination()

        results = job.results()  # a pyarrow.Table
        print(results.to_pandas().to_string(index=False))
        metrics = job.metrics()
        print(metrics)

        sent = sum(len(rows) for rows in STEPS)
        counted = sum(n for n in results.column("events").to_pylist() if n is not None)
        assert results.num_rows == 5, results  # alice x3, bob x2
        assert counted == sent - 1, (counted, sent)  # the late event was dropped
        assert metrics.input_rows == sent
        assert metrics.windows_emitted == 5
        assert job.watermark_ms == kp.END_OF_TIME_MS  # the source is closed
        print(f"{sent} events sent, {counted} counted in windows, {sent - counted} dropped as late")


if __name__ == "__main__":
    main()
