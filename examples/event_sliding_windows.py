"""Kafka Streams' sliding windows (KIP-450): what else happened within 5 s of each event?

Each event at ``t`` ends a window ``[t - 5 s, t]`` (both ends inclusive), and
once a later event falls within 5 s, a window ``[t + 1 ms, t + 5.001 s]``
starts just after it: one window per distinct set of events that lie within
5 s of each other. The input is the example of Kafka's ``SlidingWindows``
javadoc: events at 8 s, 9.2 s and 12.4 s.

Run with ``python examples/event_sliding_windows.py``.
"""

from __future__ import annotations

import krishiv_py as kp


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-event-sliding") as session:
        clicks, sender = session.memory_stream("user string, t bigint")
        near = (
            clicks.watermark("t", 0)
            .key_by("user")
            .event_sliding_window(5_000, grace_ms=0)
            .agg(kp.count(kp.col("*")).alias("events"), kp.max(kp.col("t")).alias("latest"))
        )
        job = near.start()
        for t in (8_000, 9_200, 12_400):
            sender.send([{"user": "ann", "t": t}])
            job.process_all_available()
        sender.close()
        job.await_termination()
        rows = sorted(job.results().to_pylist(), key=lambda r: r["window_start"])
        print("Windows [start, end] (both inclusive):")
        got = []
        for r in rows:
            start = r["window_start"].timestamp()
            end = r["window_end"].timestamp()
            got.append((round(start, 3), round(end, 3), r["events"]))
            print(f"  [{start:6.3f} s, {end:6.3f} s]  {r['events']} events, latest at {r['latest'] / 1000} s")
        assert got == [
            (3.0, 8.0, 1),
            (4.2, 9.2, 2),
            (7.4, 12.4, 3),
            (8.001, 13.001, 2),
            (9.201, 14.201, 1),
        ], got


if __name__ == "__main__":
    main()
