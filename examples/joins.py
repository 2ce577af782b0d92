"""Joins on event time: each click with its ad impression, each order with the rate in force.

Two pipelines over memory streams, each run step by step:

1. An *interval join*, left outer: a click joins the impressions of the same
   user and ad in the 10 minutes before it. A click with no impression is
   emitted null-padded once no impression for it can arrive on time. With
   allowed lateness, an impression that arrives late still finds its click:
   the padded row is retracted and the match emitted.
2. An *as-of join*: each order joins the exchange rate of its currency in
   force when it was placed (the latest rate at or before it), emitted once
   the rates up to the order's time are complete.

Run with ``python examples/joins.py``; docs/joins.md explains the rules.
"""

from __future__ import annotations

import krishiv_py as kp

MINUTE = 60_000


def clicks_and_impressions(session: kp.Session) -> None:
    clicks, click_sender = session.memory_stream("user string, ad string, ts bigint", name="clicks")
    views, view_sender = session.memory_stream("user string, ad string, ts bigint", name="views")
    matched = (
        clicks.watermark("ts", 0)
        .key_by("user", "ad")
        .interval_join(views.watermark("ts", 0).key_by("user", "ad"), between=(-10 * MINUTE, 0), how="left")
        .allowed_lateness(30 * MINUTE)
        .accumulation("retracting")
    )
    job = matched.start()
    view_sender.send([{"user": "ann", "ad": "shoes", "ts": 1 * MINUTE}])
    click_sender.send(
        [
            {"user": "ann", "ad": "shoes", "ts": 4 * MINUTE},  # 3 minutes after its impression
            {"user": "bob", "ad": "hats", "ts": 5 * MINUTE},  # its impression comes late
        ]
    )
    job.process_all_available()
    # Both watermarks pass 15 minutes: no on-time impression can reach bob's click any more.
    click_sender.advance_watermark(15 * MINUTE)
    view_sender.advance_watermark(15 * MINUTE)
    job.process_all_available()
    view_sender.send([{"user": "bob", "ad": "hats", "ts": 2 * MINUTE}])  # late, within the lateness
    job.process_all_available()
    rows = job.results().to_pylist()
    job.stop()
    for row in rows:
        print(row)
    assert rows[0]["kind"] == "emit" and rows[0]["ts_right"] == 1 * MINUTE  # ann: matched at once
    assert [(r["user"], r["ts_right"], r["kind"]) for r in rows[1:]] == [
        ("bob", None, "emit"),  # padded when the watermark passed 5 + 0 minutes
        ("bob", None, "retract"),  # ... withdrawn when the late impression came
        ("bob", 2 * MINUTE, "emit"),
    ]


def orders_and_rates(session: kp.Session) -> None:
    orders, order_sender = session.memory_stream("currency string, ts bigint, amount double", name="orders")
    rates, rate_sender = session.memory_stream("currency string, ts bigint, rate double", name="rates")
    priced = (
        orders.watermark("ts", 0)
        .key_by("currency")
        .as_of_join(rates.watermark("ts", 0).key_by("currency"), how="left")
        .with_column("in_usd", kp.col("amount") * kp.col("rate"))
    )
    job = priced.start()
    rate_sender.send(
        [{"currency": "EUR", "ts": 0, "rate": 1.10}, {"currency": "EUR", "ts": 60, "rate": 1.20}]
    )
    order_sender.send(
        [
            {"currency": "EUR", "ts": 30, "amount": 100.0},  # the 1.10 rate is in force
            {"currency": "EUR", "ts": 90, "amount": 100.0},  # the 1.20 rate is in force
            {"currency": "GBP", "ts": 40, "amount": 50.0},  # no GBP rate: null-padded
        ]
    )
    order_sender.close()
    rate_sender.close()
    job.process_all_available()
    rows = sorted(job.results().to_pylist(), key=lambda r: (r["currency"], r["ts"]))
    job.stop()
    for row in rows:
        print(row)
    assert [(r["currency"], r["ts"], r["rate"]) for r in rows] == [
        ("EUR", 30, 1.10),
        ("EUR", 90, 1.20),
        ("GBP", 40, None),
    ]


def main() -> None:
    with kp.Session.embedded() as session:
        clicks_and_impressions(session)
        orders_and_rates(session)


if __name__ == "__main__":
    main()
