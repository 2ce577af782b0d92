"""PyFlink for the sustainable-throughput harness: one long-lived process, one streaming job per trial.

Started by :mod:`benchmarks.sustainable` (``--flink-python``) with the
interpreter of the PyFlink environment (standard library and ``pyflink``
only; the repository root on ``PYTHONPATH``)::

    <flink python> -m benchmarks.flink_sustain [--query Q] [--parallelism N] [--monitor-ms MS]
        [--setup default|nexmark]

``--setup nexmark`` sets Flink up as the Nexmark repository runs it
(:data:`SETUPS`); ``default`` leaves Flink's defaults.

It reads commands on stdin, one per line, and answers on stdout:

* ``start <n> <directory>``: a streaming job over the CSV files that arrive in
  ``directory`` (Flink's filesystem connector, discovering new files every
  ``--monitor-ms``): the harness's query (``--query``, see
  :mod:`benchmarks.sustain_queries`: ``tumbling``, a per-user 2-second
  tumbling ``COUNT(*)``; ``session``, per-user sessions with a 2 s gap;
  ``nexmark-q7``, the highest price and the bids per 2 s window) with a 5 s
  watermark lag (``WATERMARK FOR event_time AS event_time - INTERVAL '5'
  SECOND``, Flink's default watermark interval), into Flink's ``print``
  connector. Answers ``started <n>`` once the job runs; the job's task
  threads then print each result row to this process's stdout as
  ``row <n>:<subtask>> +I[<field>, ...]`` (``row <n>> ...`` from a sink of
  one subtask; window bounds in the UTC session zone, as Java prints a
  ``LocalDateTime``): :func:`parse_rows` reads it.
  The print sink hands each row to the pipe the moment the window fires (a
  collect iterator would poll for it, and its iteration in a second Python
  thread breaks the planner's thread-local state for the next job).
  ``nexmark-q9`` (Nexmark's winning bids: its SQL, a regular join and
  ``ROW_NUMBER() ... <= 1``, an updating result) reads two directories,
  ``start <n> <auctions> <bids>``, and its rows are inserts and updates
  (``+I``, ``+U``; the ``-U`` before an update is not read). ``nexmark-q13``
  reads the bids' directory and its side table's, ``start <n> <bids>
  <side table>``.
* ``stop <n>``: cancels job ``n``; answers ``stopped <n>``.
* ``quit`` (or the end of stdin): stops every job and exits.

The CSV columns are ``user_id, ts, amount`` (``auction, ts, price`` for
``nexmark-q7`` and ``-q5``) with ``ts`` in epoch milliseconds; ``event_time`` is
``TO_TIMESTAMP_LTZ(ts, 3)``, Flink's idiom for epoch times, in the UTC
session time zone. One process (one JVM and mini-cluster) serves every
trial, as one Spark session serves the Spark runners: its JIT and Python
workers warm up once.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.flink_runner import interval

WINDOW_MS = 2_000
GAP_MS = 2_000
LAG_MS = 5_000
#: Nexmark's queries without state: Nexmark's Flink SQL (:mod:`benchmarks.nexmark.flink_sql`).
#: (q13, each bid with a bounded side table, is one too: Flink's streaming form is a regular join
#: with the table, read once; its filesystem connector has no lookup source.)
ROW_QUERIES = ("q0", "q1", "q2", "q10", "q13", "q14", "q21", "q22")
#: Nexmark's queries whose results update (an aggregate per key, a dedup, a top-N per key), and
#: q12, per bidder a count per processing-time window (each window's row reflects the bidder's
#: bids so far: the harness reads it as an updating row).
UPDATING_QUERIES = ("q12", "q15", "q16", "q17", "q18", "q19")
#: What the harness adds to an updating query's SQL, after its last aggregate: the latest auction
#: behind each row (its auctions are numbered by send, so the row names the latest send it holds).
LAST_AUCTION = {q: "MAX(auction) AS last_auction" for q in ("q12", "q15", "q16")}
#: q12's SQL (Nexmark's q12.sql, its window 2 s as the harness's others: 10 s windows alone would
#: hold a result past a 5 s budget); q12 has no batch form, so :data:`FLINK_SQL` has none.
Q12_SQL = (
    "SELECT B.bidder, COUNT(*) AS bid_count, TUMBLE_START(B.p_time, INTERVAL '2' SECOND) AS starttime,"
    " TUMBLE_END(B.p_time, INTERVAL '2' SECOND) AS endtime"
    " FROM (SELECT *, PROCTIME() AS p_time FROM bid) B"
    " GROUP BY B.bidder, TUMBLE(B.p_time, INTERVAL '2' SECOND)"
)
QUERIES = (
    "tumbling",
    "tumbling-auto",
    "session",
    "nexmark-q7",
    "nexmark-q9",
    "nexmark-q4",
    "nexmark-q23",
    *(f"nexmark-{q}" for q in ROW_QUERIES),
    *(f"nexmark-{q}" for q in UPDATING_QUERIES),
    "nexmark-q20",
    "nexmark-q8",
    "nexmark-q3",
    "nexmark-q5",
)
#: How the process sets Flink up (``--setup``): Flink's defaults, or as the Nexmark repository runs
#: Flink (its ``nexmark-flink/src/main/resources/conf/flink-conf.yaml``): mini-batches of up to
#: 50,000 rows or 2 s before an aggregation or a join updates its state and emits (fewer updates
#: of an updating result), distinct aggregates split in two phases, RocksDB state with incremental
#: checkpoints (no checkpoint is taken here, as there: its interval is 5 hours). Parallelism is the
#: machine's cores under both (``--parallelism``), as Nexmark's 8 slots are its machine's.
SETUPS: dict[str, dict[str, str]] = {
    "default": {},
    "nexmark": {
        "table.exec.mini-batch.enabled": "true",
        "table.exec.mini-batch.allow-latency": "2 s",
        "table.exec.mini-batch.size": "50000",
        "table.optimizer.distinct-agg.split.enabled": "true",
        "state.backend.type": "rocksdb",
        "execution.checkpointing.incremental": "true",
    },
}
#: The queries over auctions and bids (q3, q8: persons and auctions).
JOINS = ("nexmark-q9", "nexmark-q4", "nexmark-q23", "nexmark-q20", "nexmark-q8", "nexmark-q3")
#: q9's tables as CSV columns (event time ``ts`` and ``expires_ms`` in epoch ms).
#: q23's tables as CSV columns.
Q23_COLUMNS = {
    "person": "id BIGINT, ts BIGINT",
    "auction": "id BIGINT, seller BIGINT, ts BIGINT",
    "bid": "bidder BIGINT, price BIGINT, ts BIGINT, sent BIGINT",
}
Q9_COLUMNS = {
    "auction": "id BIGINT, category BIGINT, ts BIGINT, expires_ms BIGINT",
    "bid": "auction BIGINT, price BIGINT, ts BIGINT, bidder BIGINT, sent BIGINT",
}
Q3_AUCTION = "id BIGINT, seller BIGINT, category BIGINT, ts BIGINT"
#: q13's side table: a key of 0-9,999 and its value (CSV).
SIDE_COLUMNS = "`key` BIGINT, `value` STRING"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def tables_of(query: str) -> dict[str, str]:
    """A join query's tables (in the order of their directories) and their CSV columns."""
    if query == "nexmark-q8":  # persons and the auctions they open
        return {"person": Q23_COLUMNS["person"], "auction": Q23_COLUMNS["auction"]}
    if query == "nexmark-q3":  # persons (their state) and the auctions they sell (their category)
        return {"person": "id BIGINT, state STRING, ts BIGINT", "auction": Q3_AUCTION}
    return Q23_COLUMNS if query == "nexmark-q23" else Q9_COLUMNS


def module_of(query: str) -> str | None:
    """The Nexmark module of a query over bids alone (``q1`` of ``nexmark-q1``; a query without
    state or an updating one), else None."""
    name = query.removeprefix("nexmark-")
    return name if name in ROW_QUERIES or name in UPDATING_QUERIES else None


def source_sql(name: str, directory: str, monitor_ms: int, query: str = "tumbling", table: str = "") -> str:
    """The CSV source table over ``directory`` (of q9: its ``table``), its event time and watermark."""
    if module_of(query) is not None:  # Nexmark's bids, the time in epoch ms
        return (
            f"CREATE TEMPORARY TABLE `{name}` (\n"
            "  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,\n"
            "  date_time_ms BIGINT,\n"
            "  date_time AS TO_TIMESTAMP_LTZ(date_time_ms, 3),\n"
            f"  WATERMARK FOR date_time AS date_time - {interval(LAG_MS)}\n"
            ") WITH (\n"
            f"  'connector' = 'filesystem', 'path' = '{Path(directory).resolve().as_uri()}',\n"
            f"  'format' = 'csv', 'source.monitor-interval' = '{monitor_ms} ms'\n)"
        )
    if query in JOINS:
        columns = tables_of(query)[table]
        if "expires_ms" in columns:  # (q9 and q4's auctions)
            columns += ",\n  expires AS TO_TIMESTAMP_LTZ(expires_ms, 3)"
    elif query in ("nexmark-q7", "nexmark-q5"):
        columns = "auction BIGINT, ts BIGINT, price BIGINT"
    else:
        columns = "user_id STRING, ts BIGINT, amount DOUBLE"
    return (
        f"CREATE TEMPORARY TABLE `{name}` (\n"
        f"  {columns},\n"
        "  event_time AS TO_TIMESTAMP_LTZ(ts, 3),\n"
        f"  WATERMARK FOR event_time AS event_time - {interval(LAG_MS)}\n"
        ") WITH (\n"
        f"  'connector' = 'filesystem', 'path' = '{Path(directory).resolve().as_uri()}', 'format' = 'csv',\n"
        f"  'source.monitor-interval' = '{monitor_ms} ms'\n)"
    )


def query_sql(name: str, query: str = "tumbling") -> str:
    """The query's SQL; its columns are :func:`sink_columns` (q9: ``name`` is the tables' suffix)."""
    module = module_of(query)
    if module is not None:  # Nexmark's own SQL over this job's bids
        from benchmarks.nexmark.flink_sql import FLINK_SQL

        sql = Q12_SQL if module == "q12" else FLINK_SQL[module]
        if module in LAST_AUCTION:  # (q12, q15 and q16 end with their aggregates, then FROM ...)
            sql = re.sub(r" FROM (bid|\(SELECT)", rf", {LAST_AUCTION[module]} FROM \1", sql, count=1)
        return sql.replace("FROM bid", f"FROM `{name}`").replace("JOIN side_input", f"JOIN `side_{name}`")
    lifetime = (
        f"  FROM `auction_{name}` A, `bid_{name}` B\n"
        "  WHERE A.id = B.auction AND B.event_time BETWEEN A.event_time AND A.expires\n"
    )
    if query == "nexmark-q20":  # Nexmark's q20.sql, on the harness's columns (category 0)
        return (
            "SELECT A.id, B.price, B.sent\n"
            f"FROM `bid_{name}` B INNER JOIN `auction_{name}` A ON B.auction = A.id\n"
            "WHERE A.category = 0"
        )
    if query == "nexmark-q3":  # Nexmark's q3.sql, on the harness's columns (category 0; no names)
        return (
            "SELECT P.state, A.id\n"
            f"FROM `auction_{name}` AS A INNER JOIN `person_{name}` AS P ON A.seller = P.id\n"
            "WHERE A.category = 0 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"
        )
    if query == "nexmark-q5":  # Nexmark's q5 (ties kept: the maxima joined back), 10 s by 2 s
        hop = f"HOP(TABLE `{name}`, DESCRIPTOR(event_time), {interval(WINDOW_MS)}, {interval(10_000)})"
        return (
            "WITH counts AS (\n"
            "  SELECT auction, window_start, window_end, COUNT(*) AS n\n"
            f"  FROM TABLE({hop})\n"
            "  GROUP BY auction, window_start, window_end\n"
            "), maxima AS (\n"
            "  SELECT window_start, window_end, MAX(n) AS max_n\n"
            "  FROM counts GROUP BY window_start, window_end\n"
            ")\n"
            "SELECT c.auction, c.window_end, c.n\n"
            "FROM counts AS c JOIN maxima AS m\n"
            "ON c.window_start = m.window_start AND c.window_end = m.window_end AND c.n = m.max_n"
        )
    if query == "nexmark-q8":  # Nexmark's q8.sql, on the harness's columns and 2 s windows
        tumble = f"TUMBLE(event_time, {interval(WINDOW_MS)})"
        bounds = f"TUMBLE_START(event_time, {interval(WINDOW_MS)}) AS starttime, " + (
            f"TUMBLE_END(event_time, {interval(WINDOW_MS)}) AS endtime"
        )
        return (
            "SELECT P.id, P.starttime FROM (\n"
            f"  SELECT id, {bounds} FROM `person_{name}` GROUP BY id, {tumble}\n"
            ") P JOIN (\n"
            f"  SELECT seller, {bounds} FROM `auction_{name}` GROUP BY seller, {tumble}\n"
            ") A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"
        )
    if query == "nexmark-q23":  # Nexmark's q23.sql, on the harness's columns
        return (
            "SELECT B.bidder, B.price, P.id AS person_id, A.id AS auction_id, B.sent\n"
            f"FROM `bid_{name}` B\n"
            f"  JOIN `person_{name}` P ON P.id = B.bidder\n"
            f"  JOIN `auction_{name}` A ON A.seller = B.bidder"
        )
    if query == "nexmark-q4":  # Nexmark's q4.sql, and the latest send behind each row
        return (
            "SELECT category, AVG(final) AS avg_final, MAX(sent) AS sent FROM (\n"
            "  SELECT A.category, MAX(B.price) AS final, MAX(B.sent) AS sent\n"
            f"{lifetime}"
            "  GROUP BY A.id, A.category\n"
            ") Q\nGROUP BY category"
        )
    if query == "nexmark-q9":  # Nexmark's q9.sql, on the harness's columns
        return (
            "SELECT id, price, sent FROM (\n"
            "  SELECT A.id, B.price, B.sent,\n"
            "    ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.event_time ASC) AS rownum\n"
            f"{lifetime}"
            ")\nWHERE rownum <= 1"
        )
    if query == "session":
        return (
            "SELECT user_id, window_start, window_end, COUNT(*) AS n\n"
            f"FROM TABLE(SESSION(TABLE `{name}` PARTITION BY user_id, DESCRIPTOR(event_time), "
            f"{interval(GAP_MS)}))\n"
            "GROUP BY user_id, window_start, window_end"
        )
    if query == "nexmark-q7":
        return (
            "SELECT window_end, MAX(price) AS max_price, COUNT(*) AS n\n"
            f"FROM TABLE(TUMBLE(TABLE `{name}`, DESCRIPTOR(event_time), {interval(WINDOW_MS)}))\n"
            "GROUP BY window_start, window_end"
        )
    return (
        "SELECT window_end, COUNT(*) AS n\n"
        f"FROM TABLE(TUMBLE(TABLE `{name}`, DESCRIPTOR(event_time), {interval(WINDOW_MS)}))\n"
        "GROUP BY user_id, window_start, window_end"
    )


def sink_columns(query: str) -> str:
    """The print sink's columns for ``query``."""
    if query == "session":
        return "user_id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT"
    if query == "nexmark-q7":
        return "window_end TIMESTAMP(3), max_price BIGINT, n BIGINT"
    if query == "nexmark-q9":
        return "id BIGINT, price BIGINT, sent BIGINT"
    if query == "nexmark-q23":
        return "bidder BIGINT, price BIGINT, person_id BIGINT, auction_id BIGINT, sent BIGINT"
    if query == "nexmark-q5":
        return "auction BIGINT, window_end TIMESTAMP(3), n BIGINT"
    if query == "nexmark-q3":
        return "state STRING, id BIGINT"
    if query == "nexmark-q4":  # (Flink's AVG of a BIGINT is a BIGINT)
        return "category BIGINT, avg_final BIGINT, sent BIGINT"
    return "window_end TIMESTAMP(3), n BIGINT"


def _ddl_type(printed: str) -> str:
    """A resolved column type as PyFlink prints it, as DDL (no time attribute or nullability;
    ``LOCALZONEDTIMESTAMP``, printed without its precision, is ``TIMESTAMP_LTZ(3)``: the harness's
    times are milliseconds).

    >>> _ddl_type("LOCALZONEDTIMESTAMP"), _ddl_type("BIGINT NOT NULL")
    ('TIMESTAMP_LTZ(3)', 'BIGINT')
    """
    plain = re.sub(r" \*ROWTIME\*| \*PROCTIME\*| NOT NULL", "", printed)
    return re.sub(r"^LOCALZONEDTIMESTAMP(\(\d\))?$", "TIMESTAMP_LTZ(3)", plain)


def epoch_ms(value: dt.datetime) -> int:
    """A window bound (a ``datetime``, naive in the UTC session zone) as epoch ms."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int((value - _EPOCH) // dt.timedelta(milliseconds=1))


#: A sink with one subtask (a window without keys) prints no subtask number.
_ROWS = re.compile(r"^row (\d+)(?::\d+)?> \+[IU]\[(.*)\]$", re.M)
_SAID = re.compile(r"^(?:ready|started \d+|stopped \d+)$", re.M)


def parse_rows(text: str) -> tuple[dict[str, list[str]], list[str]]:
    r"""The rows in ``text`` (whole lines) that the print sinks wrote, per job (each row its fields
    as printed, joined by ``", "``: inserts and the new rows of updates), and the answers to commands.

    >>> parse_rows("row 3:1> +I[7, x]\nrow 3:0> -U[7, y]\nstarted 4\nrow 3> +U[8, z]\n")
    ({'3': ['7, x', '8, z']}, ['started 4'])
    """
    rows: dict[str, list[str]] = {}
    for job, fields in _ROWS.findall(text):
        rows.setdefault(job, []).append(fields)
    return rows, _SAID.findall(text)


def parse_time(field: str) -> int:
    """A printed window bound (Java's ``LocalDateTime``, UTC) as epoch ms."""
    return epoch_ms(dt.datetime.fromisoformat(field))


def settings(parallelism: int, setup: str = "default") -> dict[str, str]:
    """The table configuration of a process with ``setup`` (:data:`SETUPS`)."""
    if setup not in SETUPS:
        raise ValueError(f"no PyFlink setup {setup!r}: one of {', '.join(SETUPS)}")
    return {
        "parallelism.default": str(parallelism),
        "table.local-time-zone": "UTC",
        "table.exec.source.idle-timeout": "1 s",
        **SETUPS[setup],
    }


class Jobs:
    def __init__(
        self, parallelism: int, monitor_ms: int, query: str = "tumbling", setup: str = "default"
    ) -> None:
        from pyflink.table import EnvironmentSettings, TableEnvironment

        self.env: Any = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        config = self.env.get_config()
        for key, value in settings(parallelism, setup).items():
            config.set(key, value)
        self.monitor_ms = monitor_ms
        self.query = query
        self.running: dict[str, Any] = {}

    def start(self, n: str, *directories: str) -> None:
        if self.query in JOINS:
            for table, directory in zip(tables_of(self.query), directories, strict=True):
                sql = source_sql(f"{table}_{n}", directory, self.monitor_ms, self.query, table)
                self.env.execute_sql(sql)
            name = n
        else:
            name = f"events_{n}"
            self.env.execute_sql(source_sql(name, directories[0], self.monitor_ms, self.query))
            if self.query == "nexmark-q13":  # the side table, read once
                uri = Path(directories[1]).resolve().as_uri()
                self.env.execute_sql(
                    f"CREATE TEMPORARY TABLE `side_{name}` ({SIDE_COLUMNS})\n"
                    f"WITH ('connector' = 'filesystem', 'path' = '{uri}', 'format' = 'csv')"
                )
        columns = sink_columns(self.query)
        if module_of(self.query) is not None or self.query in ("nexmark-q8", "nexmark-q20"):  # its columns
            schema = self.env.sql_query(query_sql(name, self.query)).get_resolved_schema()
            types = [_ddl_type(str(t)) for t in schema.get_column_data_types()]
            columns = ", ".join(f"`{c}` {t}" for c, t in zip(schema.get_column_names(), types, strict=True))
        self.env.execute_sql(
            f"CREATE TEMPORARY TABLE `rows_{n}` ({columns})\n"
            f"WITH ('connector' = 'print', 'print-identifier' = 'row {n}')"
        )
        result = self.env.execute_sql(f"INSERT INTO `rows_{n}`\n{query_sql(name, self.query)}")
        self.running[n] = result
        client = result.get_job_client()
        deadline = time.time() + 60
        while not str(client.get_job_status().result()).endswith("RUNNING") and time.time() < deadline:
            time.sleep(0.05)
        say(f"started {n}")

    def stop(self, n: str) -> None:
        result = self.running.pop(n, None)
        if result is not None:
            with contextlib.suppress(Exception):  # already finished or failed
                result.get_job_client().cancel().result()
        say(f"stopped {n}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    p.add_argument("--monitor-ms", type=int, default=100, help="how often the source looks for new files")
    p.add_argument("--query", choices=QUERIES, default="tumbling")
    p.add_argument("--setup", choices=tuple(SETUPS), default="default", help="Flink's defaults or Nexmark's")
    a = p.parse_args(argv)
    jobs = Jobs(a.parallelism, a.monitor_ms, a.query, a.setup)
    say("ready")
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "start":
            jobs.start(args[0], *args[1:])
        elif cmd == "stop":
            jobs.stop(args[0])
        elif cmd == "quit":
            break
    for n in list(jobs.running):
        jobs.stop(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
