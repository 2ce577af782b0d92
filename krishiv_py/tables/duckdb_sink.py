"""``DuckDBSink``: a table in an embedded DuckDB file that holds the corrected answer.

Each micro-batch is one DuckDB transaction: the rows of the primary keys it
touches are deleted (null-safe: a null key column matches a null), its net
emits inserted, and its batch id recorded in ``krishiv_commits`` (sink id ->
last batch id); a batch id at or below the recorded one is skipped. The
table is created from the result schema when it is missing; an existing
table must have the same columns, in order, of the same types. The file is
opened for each micro-batch and closed after it, so other processes
(a notebook, the DuckDB CLI) can read it between batches.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import JobError, MissingDependencyError, PlanError
from krishiv_py.tables.base import COMMITS_TABLE, TableWriter, misfit, quote
from krishiv_py.tables.changelog import Changes, Mode, key_columns, target_for

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["DuckDBSink"]


def _require() -> Any:
    try:
        import duckdb
    except ImportError:
        raise MissingDependencyError(
            "DuckDBSink needs the duckdb package: python -m pip install '.[duckdb]' (in the krishiv_py clone)"
        ) from None
    return duckdb


@attrs.frozen
class DuckDBSink:
    """Results in ``table`` of the DuckDB file ``path``: one row per window, or the changelog.

    Parameters
    ----------
    path
        The database file (created when missing).
    table
        The table (created from the result schema when missing).
    mode
        ``"upsert"``: the table holds each window's current result;
        ``"append"``: every emit and retraction as a row with ``kind`` and
        ``batch_id``.
    key
        For a join's rows in ``"upsert"`` mode: the columns that identify
        each joined row (a window join's keys and bounds come first), e.g.
        ``key=("order_id",)``; a join's rows have none of their own.

    Examples
    --------
        job = corrected.start(kp.DuckDBSink("results.duckdb", "per_minute"), name="per_minute")
    """

    path: str
    table: str
    mode: Mode = attrs.field(default="upsert", kw_only=True)
    key: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=key_columns)

    def __attrs_post_init__(self) -> None:
        for arg in ("path", "table"):
            value = getattr(self, arg)
            if not isinstance(value, str) or not value.strip():
                raise PlanError(f"DuckDBSink: {arg} must be a non-empty string, got {value!r}")

    def open(self, context: SinkContext) -> DuckDBWriter:
        _require()
        path = os.path.abspath(self.path)
        target = target_for("DuckDBSink", self.mode, context, f"duckdb:{path}:{self.table}", self.key)
        writer = DuckDBWriter(path, self.table, context, target)
        writer.prepare()
        return writer


class DuckDBWriter(TableWriter):
    sink = "DuckDBSink"

    def __init__(self, path: str, table: str, context: SinkContext, target: Any) -> None:
        super().__init__(context, target)
        self.path, self.table = path, table

    def _connect(self) -> Any:
        duckdb = _require()
        folder = os.path.dirname(self.path) or "."
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:  # a part of the path is a file, or not writable
            raise JobError(
                f"DuckDBSink: cannot create the directory of {self.path} ({exc.strerror}: "
                f"{exc.filename}): give the sink a path whose directories can be created"
            ) from exc
        try:
            return duckdb.connect(self.path)
        except duckdb.Error as exc:
            raise JobError(f"DuckDBSink: cannot open {self.path}: {exc}") from exc

    def prepare(self) -> None:
        """Create the table and the commit table when missing; check an existing table's columns."""
        import pyarrow as pa

        con = self._connect()
        try:
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} "
                "(sink_id VARCHAR PRIMARY KEY, batch_id BIGINT NOT NULL, committed_at TIMESTAMPTZ)"
            )
            con.register("kp_empty", pa.table({f.name: pa.array([], f.type) for f in self.schema}))
            want = [(r[0], r[1]) for r in con.execute("DESCRIBE SELECT * FROM kp_empty").fetchall()]
            exists = con.execute(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_name = ? AND table_schema = 'main'",
                [self.table],
            ).fetchall()
            if exists[0][0]:
                have = [(r[0], r[1]) for r in con.execute(f"DESCRIBE {quote(self.table)}").fetchall()]
                if have != want:
                    where = f"DuckDBSink: table {self.table!r} in {self.path}"
                    raise misfit(where, have, want, "drop or rename the table, or write to another one")
            else:
                con.execute(f"CREATE TABLE {quote(self.table)} AS SELECT * FROM kp_empty")
        finally:
            con.close()

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        duckdb = _require()
        con = self._connect()
        try:
            con.begin()
            last = con.execute(
                f"SELECT batch_id FROM {COMMITS_TABLE} WHERE sink_id = ?", [self.target.sink_id]
            )
            found = last.fetchall()
            if self.skip(batch_id, found[0][0] if found else None):
                con.rollback()
                return
            target = quote(self.table)
            if changes is not None:
                con.register("kp_keys", changes.keys)
                match = " AND ".join(
                    f"t.{quote(k)} IS NOT DISTINCT FROM k.{quote(k)}" for k in self.target.key
                )
                con.execute(f"DELETE FROM {target} AS t USING kp_keys AS k WHERE {match}")
                rows = changes.upserts
            assert rows is not None
            con.register("kp_rows", rows)
            con.execute(f"INSERT INTO {target} BY NAME SELECT * FROM kp_rows")
            if batch_id >= 0:
                con.execute(
                    f"INSERT INTO {COMMITS_TABLE} VALUES (?, ?, now()) ON CONFLICT (sink_id) "
                    "DO UPDATE SET batch_id = excluded.batch_id, committed_at = excluded.committed_at",
                    [self.target.sink_id, batch_id],
                )
            con.commit()
        except duckdb.Error as exc:
            raise JobError(
                f"DuckDBSink: writing batch {batch_id} to {self.table!r} in {self.path}: {exc}"
            ) from exc
        finally:
            con.close()

    def _held(self, keys: pa.Table) -> pa.Table:
        duckdb = _require()
        con = self._connect()
        try:
            con.register("kp_keys", keys)
            match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM k.{quote(k)}" for k in self.target.key)
            held: pa.Table = con.sql(
                f"SELECT t.* FROM {quote(self.table)} AS t "
                f"WHERE EXISTS (SELECT 1 FROM kp_keys AS k WHERE {match})"
            ).to_arrow_table()
        except duckdb.Error as exc:
            raise JobError(f"DuckDBSink: reading {self.table!r} in {self.path}: {exc}") from exc
        finally:
            con.close()
        return held.cast(self.schema)

    def results(self) -> pa.Table:
        """The table as it is now (the current results in upsert mode)."""
        con = self._connect()
        try:
            table: pa.Table = con.sql(f"SELECT * FROM {quote(self.table)}").to_arrow_table()
        finally:
            con.close()
        return table.cast(self.schema)
