"""The embedded end-to-end demo behind ``krishiv demo``.

A generated clickstream — out of order by up to two seconds, with a few
events arriving a minute too late — flows through
``memory_stream -> watermark -> key_by -> tumbling_window -> count/sum`` on
a local Spark; the window results and the job's metrics are printed.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable
from typing import Any

__all__ = ["clickstream", "run_demo"]

SCHEMA = "user_id string, event_time timestamp, url string, amount double"
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def clickstream(
    *, batches: int = 9, per_batch: int = 40, users: int = 4, seed: int = 7
) -> list[list[dict[str, Any]]]:
    """Batches of click events, 20 s of event time each, out of order by up to 2 s.

    Batches 4 and 7 each carry two events from more than a minute earlier:
    their windows have closed by then, so they are dropped as late.
    """
    rng = random.Random(seed)
    out = []
    for b in range(batches):
        rows = []
        for i in range(per_batch):
            ms = b * 20_000 + i * (20_000 // per_batch) - rng.randint(0, 2_000)
            rows.append(_event(rng, users, max(ms, 0)))
        if b in (4, 7):
            rows += [_event(rng, users, (b - 4) * 20_000 + rng.randint(0, 5_000)) for _ in range(2)]
        out.append(rows)
    return out


def _event(rng: random.Random, users: int, ms: int) -> dict[str, Any]:
    return {
        "user_id": f"user-{rng.randrange(users)}",
        "event_time": START + dt.timedelta(milliseconds=ms),
        "url": rng.choice(["/", "/search", "/item", "/cart", "/checkout"]),
        "amount": float(rng.choice([0, 0, 0, 5, 12, 30])),
    }


def run_demo(
    echo: Callable[[str], None] = print, *, master: str | None = None, remote: str | None = None
) -> int:
    """Run the demo; returns a process exit code.

    By default on an embedded local Spark; ``master`` (``spark://host:port``)
    drives a standalone cluster from this process, ``remote``
    (``sc://host:port``) runs it on a Spark Connect server.
    """
    import krishiv_py as kp

    t0 = time.perf_counter()
    if remote is not None:
        opened = kp.Session.remote(remote, app_name="krishiv-demo")
    elif master is not None:
        opened = kp.Session.connect(master, app_name="krishiv-demo")
    else:
        opened = kp.Session.embedded(app_name="krishiv-demo")
    with opened as session:
        where = remote or master or "local"
        echo(f"Spark ({where}) started in {time.perf_counter() - t0:.1f} s")
        stream, sender = session.memory_stream(SCHEMA, name="clicks")
        per_minute = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
        )
        job = per_minute.start()
        sent = 0
        for rows in clickstream():
            sender.send(rows)
            sent += len(rows)
            job.process_all_available()
        sender.close()
        job.await_termination()
        table = job.results().sort_by([("window_start", "ascending"), ("user_id", "ascending")])
        metrics = job.metrics()
        echo("\nWindow results (1-minute tumbling windows per user):")
        echo(table.to_pandas().to_string(index=False))
        counted = pc_sum(table.column("events"))
        echo(f"\nJob metrics ({job.lowering} lowering):")
        for name, value in sorted(vars_of(metrics).items()):
            echo(f"  {name:20} {shown_metric(name, value, job.lowering)}")
        echo(
            f"\nevents sent: {sent}; counted in windows: {counted}; "
            f"dropped as late (sent - counted): {sent - counted}"
        )
        if metrics.very_late_events is None:
            echo(
                f"(the {job.lowering} lowering cannot count very late events as Spark drops them; "
                "the difference above is the count)"
            )
        echo(f"total time: {time.perf_counter() - t0:.1f} s")
    return 0


def shown_metric(name: str, value: Any, lowering: str) -> str:
    """One metric as the demo prints it: times as UTC, the end of input and empty sets in words."""
    from krishiv_py.plan.watermarks import END_OF_TIME_MS

    def time_of(ms: int) -> str:
        if ms >= END_OF_TIME_MS:
            return "end of input"
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"

    if value is None:
        return f"n/a (not observable in the {lowering} lowering)"
    if name == "watermark_ms":
        return time_of(int(value))
    if name == "source_watermarks":
        return (
            ", ".join(f"{source}: {time_of(int(ms))}" for source, ms in sorted(value.items())) or "none yet"
        )
    if name == "idle_sources":
        return ", ".join(sorted(value)) or "none"
    return str(value)


def pc_sum(column: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(column).as_py() or 0)


def vars_of(metrics: Any) -> dict[str, Any]:
    import attrs

    return attrs.asdict(metrics)
