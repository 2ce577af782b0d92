"""Pipelines after the window: filter, compute and project window results that get corrected.

Per-minute spend per user, kept one minute past the window's end so a late
payment corrects it. Only the minutes over 100 matter downstream, in
cents. The late payment pushes one user's minute over the line (a new
result passes the filter) and corrects another's (its old result is
retracted, then the new one emitted: both pass, since the retraction
carries the values of the emit it withdraws).

Run with ``python examples/after_the_window.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def pay(user: str, at_s: int, amount: float) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=at_s), "amount": amount}


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-after-the-window") as session:
        stream, sender = session.memory_stream("user_id string, event_time timestamp, amount double")
        big_minutes = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .allowed_lateness(60_000)
            .accumulation("retracting")
            .agg(kp.sum(kp.col("amount")).alias("spent"))
            .filter(kp.col("spent") > 100)  # after the window: runs on every firing
            .with_column("cents", (kp.col("spent") * 100).cast("bigint"))
            .select("user_id", "window_start", "cents")  # `kind` stays: emit or retract
        )
        print(big_minutes.explain().split("== Durability ==")[0])
        job = big_minutes.start()
        try:
            sender.send([pay("ann", 5, 80.0), pay("bob", 10, 120.0), pay("ann", 20, 10.0)])
            sender.send([pay("cy", 70, 1.0)])  # the watermark passes 1:00: minute 0 fires
            job.process_all_available()
            sender.send([pay("ann", 30, 15.0), pay("bob", 40, 5.0)])  # late, within a minute
            sender.close()
            job.process_all_available()
            rows = [(r["user_id"], r["cents"], r["kind"]) for r in job.results().to_pylist()]
        finally:
            job.stop()
        print("Minutes over 100, as they were emitted and corrected:")
        for user, cents, kind in rows:
            print(f"  {kind:<8} {user}  {cents / 100:.2f}")
        # ann's first result (90.00) never passed, so neither did its retraction.
        want = [
            ("bob", 12000, "emit"),
            ("bob", 12000, "retract"),
            ("bob", 12500, "emit"),
            ("ann", 10500, "emit"),
        ]
        assert sorted(rows) == sorted(want), rows
        assert rows.index(("bob", 12000, "retract")) < rows.index(("bob", 12500, "emit")), rows


if __name__ == "__main__":
    main()
