"""Operators after a join, and without a window: count joined clicks, keep running totals, deduplicate.

Clicks meet the ad views of their user in the 5 s before them (an inner
interval join that lets a view arrive a minute late). Three things follow:

- clicks per user and minute, a window right after the join, keyed by the
  join's key: it fires when the watermark passes the minute's end, and a
  late view's new pair corrects it (a retraction, then the new count);
- a running total of clicks per user, without a window: one updating row
  per user;
- the latest view of each user, deduplicated with ``top_n(1, per="key")``.

Run with ``python examples/after_a_join.py``.
"""

from __future__ import annotations

import krishiv_py as kp


def click(user: str, t: int, name: str) -> dict[str, object]:
    return {"user_id": user, "t": t, "click": name}


def view(user: str, t: int, ad: str) -> dict[str, object]:
    return {"user_id": user, "t": t, "ad": ad}


def main() -> None:
    with kp.Session.embedded(app_name="krishiv-after-a-join") as session:
        clicks, click_sender = session.memory_stream("user_id string, t bigint, click string", name="clicks")
        views, view_sender = session.memory_stream("user_id string, t bigint, ad string", name="views")
        joined = (
            clicks.watermark("t", 0)
            .key_by("user_id")
            .interval_join(views.watermark("t", 0).key_by("user_id"), between=(-5_000, 0))
            .allowed_lateness(60_000)
        )
        per_minute = (
            joined.key_by("user_id")
            .tumbling_window(60_000)
            .accumulation("retracting")
            .agg(kp.count(kp.col("*")).alias("clicks"))
        )
        totals = clicks.watermark("t", 0).key_by("user_id").agg(kp.count(kp.col("*")).alias("clicks"))
        latest = views.watermark("t", 0).top_n(1, by="t", per="key", keys=("user_id",))
        print(per_minute.explain().split("== Durability ==")[0])
        jobs = [per_minute.start(), totals.start(), latest.start()]
        try:
            view_sender.send([view("ann", 1_000, "a1"), view("bob", 2_000, "b1")])
            click_sender.send([click("ann", 3_000, "c1"), click("bob", 4_000, "c2")])
            click_sender.send([click("ann", 61_000, "c3")])
            view_sender.send([view("bob", 62_000, "b2")])  # the minute [0, 60 s) fires
            for job in jobs:
                job.process_all_available()
            view_sender.send([view("ann", 2_500, "a2")])  # late, within the minute: c1 meets a2 too
            for job in jobs:
                job.process_all_available()
            counted, running, newest = (job.results().to_pylist() for job in jobs)
        finally:
            for job in jobs:
                job.stop()
    minute = [(r["user_id"], r["clicks"], r["kind"]) for r in counted if r["window_start"].minute == 0]
    print("Joined clicks per user in the first minute, as emitted and corrected:", minute)
    assert sorted(minute[:2]) == [("ann", 1, "emit"), ("bob", 1, "emit")], minute
    assert minute[2:] == [("ann", 1, "retract"), ("ann", 2, "emit")], minute
    print("Running clicks per user:", [(r["user_id"], r["clicks"], r["kind"]) for r in running])
    assert {(r["user_id"], r["clicks"]) for r in running if r["kind"] == "emit"} >= {("ann", 2), ("bob", 1)}
    live = {(r["user_id"], r["ad"]) for r in newest if r["kind"] == "emit"}
    live -= {(r["user_id"], r["ad"]) for r in newest if r["kind"] == "retract"}
    print("The latest view per user:", sorted(live))
    assert live == {("ann", "a2"), ("bob", "b2")}, live


if __name__ == "__main__":
    main()
