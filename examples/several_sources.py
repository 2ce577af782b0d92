"""Two sources, one watermark each; the job's watermark is their minimum.

``clicks`` is busy; ``orders`` sends one row and then goes quiet. Without an
idle timeout, the quiet source would hold every window back forever (the
job's watermark is the minimum over its sources). With
``idle_timeout_ms(1_500)``, once ``orders`` has sent nothing for 1.5 s it is
left out of the minimum, and the 1-minute windows fire on ``clicks`` alone.
When ``orders`` sends again, it rejoins without pulling the watermark back:
its row behind the watermark is late and is dropped.

Run with ``python examples/several_sources.py``.
"""

from __future__ import annotations

import datetime as dt
import time

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)


def event(user: str, at_s: int, amount: float = 1.0) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=at_s), "amount": amount}


def since_t0(ms: int | None) -> str:
    return "none yet" if ms is None else f"{(ms - T0_MS) // 1000} s"


def show(job: kp.Job, what: str) -> None:
    marks = {name: since_t0(w) for name, w in sorted(job.source_watermarks().items())}
    idle = sorted(job.idle_sources())
    print(f"{what:<44} watermark {since_t0(job.watermark_ms):>8}  per source {marks}  idle {idle}")


def main() -> None:
    with kp.Session.embedded() as session:
        clicks, click_sender = session.memory_stream(SCHEMA, name="clicks")
        orders, order_sender = session.memory_stream(SCHEMA, name="orders")
        spec = (
            kp.MultiSourceWatermarkSpec()
            .source("clicks", kp.WatermarkSpec.fixed_lag_ms("event_time", 5_000))
            .source("orders", kp.WatermarkSpec.fixed_lag_ms("event_time", 5_000))
            .idle_timeout_ms(1_500)
        )
        per_minute = (
            clicks.union(orders)
            .with_watermark(spec)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")).alias("events"))
        )
        job = per_minute.start()
        click_sender.send([event("ann", 10), event("bob", 20)])
        order_sender.send([event("ann", 15)])
        job.process_all_available()
        show(job, "both sources sent")

        # clicks keep coming; orders stay quiet.
        started = time.monotonic()
        at_s = 70
        while not job.results().num_rows and time.monotonic() - started < 60:
            click_sender.send([event("bob", at_s)])
            at_s += 10
            time.sleep(0.5)
        fired_after = time.monotonic() - started
        show(job, f"orders quiet, window fired after {fired_after:.1f} s")
        assert "orders" in job.idle_sources()
        first = {(r["user_id"], r["events"]) for r in job.results().to_pylist()}
        assert first == {("ann", 2), ("bob", 1)}, first

        before = job.watermark_ms
        assert before is not None
        order_sender.send([event("ann", 30)])  # behind the watermark: late, dropped
        job.process_all_available()
        show(job, "orders back with a late row")
        assert job.watermark_ms is not None and job.watermark_ms >= before

        click_sender.close()
        order_sender.close()
        job.await_termination()
        show(job, "both closed")
        rows = sorted(
            (r["user_id"], r["window_start"].isoformat(), r["events"]) for r in job.results().to_pylist()
        )
        for row in rows:
            print("  ", row)
        assert sum(r[2] for r in rows) == 3 + (at_s - 70) // 10  # everything but the late row


if __name__ == "__main__":
    main()
