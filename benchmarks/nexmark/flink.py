"""Nexmark's Flink SQL (:mod:`benchmarks.nexmark.flink_sql`) in PyFlink over a dataset's CSV files.

Run with the interpreter of the PyFlink environment (standard library and
``pyflink`` only; the repository root on ``PYTHONPATH``)::

    <flink python> -m benchmarks.nexmark.flink --dataset DIR --side-input DIR --out FILE [--query q1 ...]

One batch ``TableEnvironment`` (bounded input, so the final answer, as
krishiv's bounded run gives it) serves every query, at ``parallelism.default``
= the machine's cores. Each table is registered from the dataset's CSV
parts (``<table>/csv``) with its watermark (unused in batch); q13's side
table from ``--side-input`` (``key,value`` lines). A query runs once to warm
up, then ``--repeat`` timed times; each run writes its whole result with
Flink's filesystem sink (CSV) into a fresh directory, and the last run's
rows are read back (not timed). ``--out`` gets one JSON line per query:
``{"query", "seconds" (the best run), "columns", "rows"}``, timestamps as
epoch microseconds; or ``{"query", "skipped"}`` / ``{"query", "failed"}``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.nexmark.flink_sql import FLINK_SQL, NOT_RUN

TABLES = ("bid", "auction", "person")
#: Flink's type of each Spark type the generator writes.
FLINK_TYPES = {"bigint": "BIGINT", "string": "STRING", "timestamp": "TIMESTAMP(3)", "double": "DOUBLE"}
LAG = "INTERVAL '5' SECOND"


def flink_columns(dataset: Path, table: str) -> str:
    """``table``'s columns as Flink types, from the dataset's ``meta.json`` (its Spark DDL, in the
    order of the CSV columns; ``extra`` too when the dataset has it)."""
    ddl = json.loads((dataset / "meta.json").read_text())["tables"][table]["ddl"]
    pairs = [part.split() for part in ddl.split(",")]
    return ", ".join(f"`{name}` {FLINK_TYPES[kind.lower()]}" for name, kind in pairs)


_EPOCH = dt.datetime(1970, 1, 1)


def table_ddl(name: str, columns: str, path: Path, *, watermark: bool = True) -> str:
    marks = f", WATERMARK FOR date_time AS date_time - {LAG}" if watermark else ""
    return (
        f"CREATE TEMPORARY TABLE `{name}` ({columns}{marks}) WITH "
        f"('connector' = 'filesystem', 'path' = '{path.resolve().as_uri()}', 'format' = 'csv')"
    )


def parser_of(flink_type: str) -> Any:
    """The CSV value of a column of ``flink_type`` as Python (a timestamp as epoch µs; '' a null)."""
    t = flink_type.upper()
    if t.startswith(("BIGINT", "INT", "SMALLINT", "TINYINT")):
        convert: Any = int
    elif t.startswith(("DOUBLE", "FLOAT", "DECIMAL")):
        convert = float
    elif t.startswith("TIMESTAMP"):

        def convert(text: str) -> int:
            return (dt.datetime.fromisoformat(text) - _EPOCH) // dt.timedelta(microseconds=1)

    elif t.startswith("BOOLEAN"):

        def convert(text: str) -> bool:
            return text.lower() == "true"

    else:
        return lambda text: text
    return lambda text: None if text == "" else convert(text)


class Runner:
    def __init__(self, dataset: Path, side_input: Path | None, parallelism: int) -> None:
        from pyflink.table import EnvironmentSettings, TableEnvironment

        self.env: Any = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
        config = self.env.get_config()
        config.set("parallelism.default", str(parallelism))
        config.set("table.local-time-zone", "UTC")
        self.tmp = tempfile.TemporaryDirectory(prefix="flink-nexmark-")
        for name in TABLES:
            self.env.execute_sql(table_ddl(name, flink_columns(dataset, name), dataset / name / "csv"))
        if side_input is not None:
            side = "`key` BIGINT, `value` STRING"
            self.env.execute_sql(table_ddl("side_input", side, side_input, watermark=False))
        self.runs = 0

    def run(self, name: str, repeat: int) -> dict[str, Any]:
        table = self.env.sql_query(FLINK_SQL[name])
        schema = table.get_resolved_schema()
        columns = [str(c) for c in schema.get_column_names()]
        types = [str(t).replace(" NOT NULL", "") for t in schema.get_column_data_types()]
        times = []
        out = Path(self.tmp.name)
        for _ in range(repeat + 1):  # the first run warms up
            self.runs += 1
            out = Path(self.tmp.name) / f"run-{self.runs}"
            sink = f"sink_{self.runs}"
            body = ", ".join(f"`{c}` {t}" for c, t in zip(columns, types, strict=True))
            self.env.execute_sql(
                f"CREATE TEMPORARY TABLE `{sink}` ({body}) WITH "
                f"('connector' = 'filesystem', 'path' = '{out.resolve().as_uri()}', 'format' = 'csv')"
            )
            start = time.perf_counter()
            self.env.execute_sql(f"INSERT INTO `{sink}` {FLINK_SQL[name]}").wait()
            times.append(time.perf_counter() - start)
        parsers = [parser_of(t) for t in types]
        rows = []
        for part in sorted(out.rglob("*")):
            if part.is_file() and not part.name.startswith((".", "_")):
                with open(part, newline="") as f:
                    rows += [[p(v) for p, v in zip(parsers, rec, strict=True)] for rec in csv.reader(f)]
        return {"query": name, "seconds": min(times[1:]), "columns": columns, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.nexmark.flink", description=__doc__)
    p.add_argument("--dataset", required=True, type=Path)
    p.add_argument("--side-input", type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--query", action="append")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    a = p.parse_args(argv)
    runner = Runner(a.dataset, a.side_input, a.parallelism)
    with open(a.out, "w") as out:
        for name in a.query or sorted({*FLINK_SQL, *NOT_RUN}, key=lambda q: int(q[1:])):
            if name in NOT_RUN:
                record: dict[str, Any] = {"query": name, "skipped": NOT_RUN[name]}
            elif name not in FLINK_SQL:
                record = {"query": name, "skipped": "no Flink SQL for it"}
            else:
                try:
                    record = runner.run(name, a.repeat)
                except Exception as exc:  # noqa: BLE001 - reported; the other queries still run
                    traceback.print_exception(exc)
                    record = {"query": name, "failed": f"{type(exc).__name__}: {str(exc)[:500]}"}
            out.write(json.dumps(record) + "\n")
            out.flush()
    runner.tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
