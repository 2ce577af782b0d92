"""A window over windowed results: clicks per minute, then each user's busiest minute per 5 minutes.

The minutes stay open one minute for late clicks. Three late clicks re-fire
one minute, which corrects the five-minute maximum it feeds: the second
window retracts its old row and emits the new one. A click behind the
minutes' allowed lateness is very late and reaches neither window.

Run with ``python examples/windows_of_windows.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def click(user: str, at_s: int) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=at_s)}


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-windows-of-windows") as session:
        clicks, sender = session.memory_stream("user_id string, event_time timestamp")
        minutes = (
            clicks.watermark("event_time", 0)
            .key_by("user_id")
            .tumbling_window(60_000)
            .allowed_lateness(60_000)
            .accumulation("retracting")
            .agg(kp.count(kp.col("*")).alias("clicks"))
        )
        busiest = (
            minutes.key_by("user_id")  # event time: window_end - 1 ms; the minutes' watermark
            .tumbling_window(300_000)
            .accumulation("retracting")
            .agg(kp.max(kp.col("clicks")).alias("peak"))
        )
        print(busiest.explain().split("== Durability ==")[0])
        job = busiest.start()
        try:
            sender.send([click("ann", s) for s in (10, 20, 70, 130, 250)])
            sender.send([click("ann", 310)])  # the watermark passes 5:00: [0:00, 5:00) fires, peak 2
            job.process_all_available()
            sender.send([click("ann", s) for s in (255, 256, 257)])  # late: minute 4 now has 4 clicks
            sender.send([click("ann", 100)])  # minute 1 was deleted at 3:00: very late
            job.process_all_available()
            rows = [(r["peak"], r["kind"]) for r in job.results().to_pylist()]
            very_late = job.metrics().very_late_events
        finally:
            job.stop()
        print("Busiest minute of [0:00, 5:00), as emitted and corrected:")
        for peak, kind in rows:
            print(f"  {kind:<8} {peak} clicks")
        assert rows == [(2, "emit"), (2, "retract"), (4, "emit")], rows
        assert very_late == 1, very_late


if __name__ == "__main__":
    main()
