"""Late events: allowed lateness, retractions, a side output, and early results.

Part 1 keeps every 1-minute window for 60 s after the watermark passes its
end (``allowed_lateness(60_000)``). A late event that still has a retained
window corrects it: in ``"retracting"`` mode the window's previous result is
withdrawn (``kind = "retract"``) before the corrected one (``kind = "emit"``).
An event whose windows are all gone, and a row without an event time, go to
a ``SideOutputLateEventHandler``; ``job.late_events()`` returns them, and the
job's metrics count every event by its classification.

Part 2 adds early results: ``Trigger.on_count(2)`` fires a window after every
second event, before its final on-watermark firing.

Both pipelines run on the ``stateful`` lowering (the planner picks it for
these options). Run with ``python examples/late_events.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)

Row = tuple[Any, ...]  # (user, window start s, window end s, events, total[, kind])
Steps = list[tuple[str, list[dict[str, object]]]]  # (what the step shows, rows sent)


def event(user: str, at_s: int | None, amount: float) -> dict[str, object]:
    """One row, ``at_s`` seconds after 2024-01-01 00:00 UTC (``None``: no event time)."""
    time = None if at_s is None else T0 + dt.timedelta(seconds=at_s)
    return {"user_id": user, "event_time": time, "amount": amount}


def since_t0(ms: int | None) -> str:
    """An epoch-ms watermark as seconds after T0."""
    if ms is None:
        return "none yet"
    if ms == kp.END_OF_TIME_MS:
        return "end of input"
    return f"{(ms - T0_MS) // 1000} s"


def compact(rows: list[dict[str, Any]]) -> list[Row]:
    """Result rows as (user, window start s, window end s, events, total[, kind])."""
    out = []
    for r in rows:
        start = int((r["window_start"] - T0).total_seconds())
        end = int((r["window_end"] - T0).total_seconds())
        kind = (r["kind"],) if "kind" in r else ()
        out.append((r["user_id"], start, end, r["events"], r["total"], *kind))
    return out


def run_steps(job: kp.Job, sender: kp.Sender, steps: Steps) -> list[Row]:
    """Send each batch as one step, then close; print the rows each step emitted."""
    seen = 0
    for what, rows in [*steps, ("close()", [])]:
        if what == "close()":
            sender.close()  # end of input: every open window fires
            job.await_termination()
        else:
            sender.send(rows)
            job.process_all_available()  # one step
        results = job.results()
        new = compact(results.slice(seen).to_pylist())
        seen = results.num_rows
        print(f"{what} -> watermark {since_t0(job.watermark_ms)}")
        for row in sorted(new, key=lambda t: (t[1], t[0])):  # stable: a retraction stays first
            print("   ", row)
    return compact(job.results().to_pylist())


# The watermark trails the largest event time by 5 s.
LATENESS_STEPS: Steps = [
    (
        "step 1: on time",
        [event("alice", 5, 10.0), event("alice", 20, 2.5), event("bob", 30, 4.0), event("alice", 70, 3.0)],
    ),
    # W = 65 s >= 60 s, so [0 s, 60 s) has fired. 40 s is late, but the
    # window is retained while W < 60 s + 60 s: it is corrected.
    ("step 2: mildly late", [event("alice", 40, 100.0), event("bob", 95, 1.0)]),
    ("step 3: on time", [event("alice", 145, 5.0)]),
    # W = 140 s >= 60 s + 60 s: [0 s, 60 s) is gone, bob's event at 10 s is
    # very late. A row without an event time is invalid. Both go to the side output.
    ("step 4: very late + invalid", [event("bob", 10, 50.0), event("carol", None, 7.0)]),
]
EXPECTED_CORRECTED: list[Row] = [
    ("alice", 0, 60, 2, 12.5, "emit"),  # step 1
    ("bob", 0, 60, 1, 4.0, "emit"),
    ("alice", 0, 60, 2, 12.5, "retract"),  # step 2: the correction
    ("alice", 0, 60, 3, 112.5, "emit"),
    ("alice", 60, 120, 1, 3.0, "emit"),  # step 3
    ("bob", 60, 120, 1, 1.0, "emit"),
    ("alice", 120, 180, 1, 5.0, "emit"),  # close()
]

EARLY_STEPS: Steps = [
    ("step 1: 5 events", [event("alice", s, s / 5) for s in (5, 10, 15, 20, 25)]),
    ("step 2: W passes 60 s", [event("alice", 70, 6.0)]),
]
EXPECTED_EARLY: list[Row] = [
    ("alice", 0, 60, 2, 3.0),  # early: after the 2nd event
    ("alice", 0, 60, 4, 10.0),  # early: after the 4th event
    ("alice", 0, 60, 5, 15.0),  # final firing at W >= 60 s (accumulating: the full result)
    ("alice", 60, 120, 1, 6.0),  # final firing at close()
]


def lateness(session: kp.Session) -> None:
    """Part 1: allowed lateness, retractions, a side output for very late and invalid rows."""
    stream, sender = session.memory_stream(SCHEMA, name="payments")
    corrected = (
        stream.watermark("event_time", 5_000)  # 5 s bounded out-of-orderness
        .key_by("user_id")
        .tumbling_window(60_000)
        .allowed_lateness(60_000)  # keep windows 60 s past their end
        .accumulation("retracting")  # a correction withdraws the previous result first
        .with_late_event_handler(kp.SideOutputLateEventHandler())  # very late rows: kept, not lost
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )
    job = corrected.start()
    print(f"== Part 1: allowed lateness, retracting ({job.lowering} lowering) ==")
    try:
        results = run_steps(job, sender, LATENESS_STEPS)
        late = job.late_events()  # the input columns + classification + watermark_ms
        metrics = job.metrics()
    finally:
        job.stop()

    print("late events:")
    for r in late.to_pylist():
        print(
            f"    {r['user_id']} {r['amount']} {r['classification']}, watermark {since_t0(r['watermark_ms'])}"
        )
    for line in metrics.to_prometheus().splitlines():
        if "_events_total" in line and not line.startswith("#"):
            print("   ", line)

    assert sorted(results) == sorted(EXPECTED_CORRECTED), results
    assert sorted(str(c) for c in late.column("classification").to_pylist()) == ["invalid", "very_late"]
    assert set(late.column("watermark_ms").to_pylist()) == {T0_MS + 140_000}  # the W they met
    assert (metrics.on_time_events, metrics.mildly_late_events) == (6, 1)
    assert (metrics.very_late_events, metrics.invalid_events, metrics.retractions) == (1, 1, 1)
    # Nothing is lost: every row sent is counted in a window or handed to the handler.
    counted = sum(r[3] if r[5] == "emit" else -r[3] for r in results)  # emit minus retract
    sent = sum(len(rows) for _, rows in LATENESS_STEPS)
    assert counted + late.num_rows == sent == metrics.input_rows, (counted, late.num_rows, sent)
    print(f"{sent} rows sent = {counted} counted in windows + {late.num_rows} handed to the handler")


def early_results(session: kp.Session) -> None:
    """Part 2: an early result after every second event of a window."""
    stream, sender = session.memory_stream(SCHEMA, name="clicks")
    running = (
        stream.watermark("event_time", 5_000)
        .key_by("user_id")
        .tumbling_window(60_000)
        .trigger(kp.Trigger.on_count(2))  # an updated result after every 2nd event of a window
        .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
    )
    job = running.start()
    print(f"== Part 2: early results with Trigger.on_count(2) ({job.lowering} lowering) ==")
    try:
        results = run_steps(job, sender, EARLY_STEPS)
    finally:
        job.stop()
    assert sorted(results) == sorted(EXPECTED_EARLY), results


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-late-events") as session:
        lateness(session)
        early_results(session)


if __name__ == "__main__":
    main()
