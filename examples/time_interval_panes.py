"""IBM Streams SPL time-interval panes: fire, fire again on late rows, close after a discard age.

Panes of 10 s created every 5 s and kept 15 s after their end
(``intervalDuration(10)``, ``creationPeriod(5)``, ``discardAge(15)``). An
event at 7 s is in the panes [0 s, 10 s) and [5 s, 15 s). A late event re-fires
only the panes it lands in, and the callbacks see every pane event in SPL's
order: ``initial_full`` then ``trigger`` on the first firing, ``trigger`` on
each later one, ``close`` when the pane is deleted.

Run with ``python examples/time_interval_panes.py``.
"""

from __future__ import annotations

import krishiv_py as kp

SCHEMA = "sensor string, t bigint, reading double"


def main() -> None:
    events: list[kp.PaneEvent] = []

    def log(event: kp.PaneEvent) -> None:
        events.append(event)
        start, end = event.window_start_ms // 1000, event.window_end_ms // 1000
        print(f"  {event.kind:<12} {event.key[0]} [{start:>3} s, {end:>3} s)  {dict(event.values)}")

    with kp.Session.embedded(app_name="krishiv-time-interval") as session:
        readings, sender = session.memory_stream(SCHEMA)
        panes = (
            readings.watermark("t", 0)
            .key_by("sensor")
            .time_interval_window(10_000, 5_000, 15_000)
            .on_initial_full(log)
            .on_trigger(log)
            .on_close(log)
            .agg(kp.count(kp.col("*")).alias("n"), kp.avg(kp.col("reading")).alias("mean"))
        )
        job = panes.start()
        steps: list[tuple[str, list[dict[str, object]] | int | None]] = [
            (
                "readings at 7 s and 10 s",
                [{"sensor": "s1", "t": 7_000, "reading": 1.0}, {"sensor": "s1", "t": 10_000, "reading": 3.0}],
            ),
            ("watermark to 15 s", 15_000),
            ("a late reading at 8 s", [{"sensor": "s1", "t": 8_000, "reading": 5.0}]),
            ("watermark to 30 s", 30_000),
            ("end of input", None),
        ]
        for what, step in steps:
            print(what)
            if isinstance(step, list):
                sender.send(step)
            elif isinstance(step, int):
                sender.advance_watermark(step)
            else:
                sender.close()
            job.process_all_available()
        job.await_termination()
        kinds = [e.kind for e in events]
        assert kinds.count("initial_full") == kinds.count("close") == 3, kinds  # [0,10) [5,15) [10,20)
        assert kinds.count("trigger") == 5, kinds  # 3 first firings + 2 re-firings for the late row
        first = next(e for e in events if e.kind == "close" and e.window_start_ms == 0)
        assert first.values["n"] == 2  # readings at 7 s and 8 s
        print(
            f"{job.results().num_rows} result rows; metrics: {job.metrics().windows_emitted} windows emitted"
        )


if __name__ == "__main__":
    main()
