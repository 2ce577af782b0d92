"""``PostgresSink``: a PostgreSQL table that holds the corrected answer, written with psycopg 3.

Each micro-batch is one transaction: the batch's retractions are deletes
(null-safe on the primary key), its net emits one ``INSERT … ON CONFLICT
(key) DO UPDATE``, and its batch id is recorded in ``krishiv_commits``
(sink id -> last batch id, the row locked for the transaction). A batch id
at or below the recorded one is skipped, so a rerun after a crash writes
nothing twice. In append mode the changelog rows are inserted.

The table is created when it is missing: typed columns and, in upsert
mode, ``UNIQUE NULLS NOT DISTINCT`` on the primary key (a null key column is
a key like any other; PostgreSQL 15 and later, ``PRIMARY KEY`` before). An
existing table must have the same columns, in order, of the same types,
and in upsert mode a unique index on exactly the key: otherwise the job
does not start, and the error says what differs.

A connection that fails (the server restarts, the network drops) is opened
again after 0.2, 0.5, 1, 2, 4 s; the batch is then written whole or, when
its commit went through before the failure, skipped. After ``retries``
failures the job fails with a :class:`~krishiv_py.errors.JobError`, and a
restart resumes from the last committed batch.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import JobError, MissingDependencyError, PlanError
from krishiv_py.tables.base import COMMITS_TABLE, TableWriter, misfit, quote
from krishiv_py.tables.changelog import Changes, Mode, Target, key_columns, target_for

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["PostgresSink", "pg_type"]

_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 4.0)


def _require() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError(
            "PostgresSink needs psycopg 3: python -m pip install '.[postgres]' (in the krishiv_py clone)"
        ) from None
    return psycopg


def pg_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL column type of an Arrow type (as ``information_schema`` names it, plus precision).

    >>> import pyarrow as pa
    >>> pg_type(pa.timestamp("us", tz="UTC")), pg_type(pa.decimal128(10, 2)), pg_type(pa.int64())
    ('timestamp with time zone', 'numeric(10,2)', 'bigint')
    """
    import pyarrow as pa

    if pa.types.is_timestamp(arrow_type):
        return "timestamp with time zone" if arrow_type.tz else "timestamp without time zone"
    if pa.types.is_decimal(arrow_type):
        return f"numeric({arrow_type.precision},{arrow_type.scale})"
    simple = {
        pa.string(): "text",
        pa.int64(): "bigint",
        pa.int32(): "integer",
        pa.int16(): "smallint",
        pa.int8(): "smallint",
        pa.float64(): "double precision",
        pa.float32(): "real",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.binary(): "bytea",
    }
    try:
        return simple[arrow_type]
    except KeyError:
        raise PlanError(f"PostgresSink: no PostgreSQL column type for {arrow_type}") from None


def redact(dsn: str) -> str:
    """``dsn`` without its password, for errors.

    >>> redact("postgresql://app:secret@db:5432/x"), redact("host=db password=secret dbname=x")
    ('postgresql://app:***@db:5432/x', 'host=db password=*** dbname=x')
    """
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


@attrs.frozen
class PostgresSink:
    """Results in ``table`` of the PostgreSQL database at ``dsn``: one row per window, or the changelog.

    Parameters
    ----------
    dsn
        A libpq connection string or URI (``postgresql://user:pw@host:5432/db``).
    table
        The table, optionally ``schema.table`` (created when missing).
    mode
        ``"upsert"``: the table holds each window's current result;
        ``"append"``: every emit and retraction with ``kind`` and ``batch_id``.
    retries
        Connection failures a batch survives (with back-off) before the job fails.
    key
        For a join's rows in ``"upsert"`` mode: the columns that identify
        each joined row (a window join's keys and bounds come first), e.g.
        ``key=("order_id",)``; a join's rows have none of their own.

    Examples
    --------
        job = corrected.start(kp.PostgresSink("postgresql://app@db/metrics", "per_minute"), name="per_minute")
    """

    dsn: str = attrs.field(repr=redact)
    table: str
    mode: Mode = attrs.field(default="upsert", kw_only=True)
    retries: int = attrs.field(default=len(_BACKOFF_S), kw_only=True)
    key: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=key_columns)

    def __attrs_post_init__(self) -> None:
        for arg in ("dsn", "table"):
            value = getattr(self, arg)
            if not isinstance(value, str) or not value.strip():
                raise PlanError(f"PostgresSink: {arg} must be a non-empty string, got {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise PlanError(f"PostgresSink: retries must be an integer >= 0, got {self.retries!r}")

    def open(self, context: SinkContext) -> PostgresWriter:
        _require()
        where = f"postgres:{redact(self.dsn)}:{self.table}"
        target = target_for("PostgresSink", self.mode, context, where, self.key)
        writer = PostgresWriter(self, context, target)
        writer.prepare()
        return writer


class PostgresWriter(TableWriter):
    sink = "PostgresSink"

    def __init__(self, sink: PostgresSink, context: SinkContext, target: Target) -> None:
        super().__init__(context, target)
        self.dsn, self.table, self.retries = sink.dsn, sink.table, sink.retries
        schema, _, name = sink.table.rpartition(".")
        self.schema_name, self.table_name = schema or None, name
        self.qualified = ".".join(quote(p) for p in (schema, name) if p)
        self._conn: Any = None

    # --- connections ---------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            psycopg = _require()
            self._conn = psycopg.connect(self.dsn, connect_timeout=10, autocommit=True)
        return self._conn

    def _retrying(self, what: str, work: Any) -> Any:
        """Run ``work(connection)``; on a lost connection, connect again after a back-off and rerun it."""
        psycopg = _require()
        for attempt in range(self.retries + 1):
            try:
                return work(self._connection())
            except psycopg.OperationalError as exc:
                self._drop()
                if attempt == self.retries:
                    raise JobError(
                        f"PostgresSink: {what}: the database at {redact(self.dsn)} cannot be reached "
                        f"after {attempt + 1} attempts ({str(exc).strip()}); check that the server runs "
                        "and the dsn. Batches already committed stay in the table; a restart of the job "
                        "resumes after them"
                    ) from exc
                time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            except psycopg.Error as exc:
                self._drop()
                raise JobError(f"PostgresSink: {what} in table {self.table!r}: {str(exc).strip()}") from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Let go of the connection when the job stops (``results()`` connects again)."""
        self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone
                conn.close()

    # --- the table -----------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the commit table and the table when missing; check an existing table."""
        self._retrying("preparing the table", self._prepare)

    def _prepare(self, conn: Any) -> None:
        with conn.transaction():
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (sink_id text PRIMARY KEY, "
                "batch_id bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())"
            )
            want = [(f.name, pg_type(f.type)) for f in self.schema]
            have = self._columns(conn)
            if not have:
                conn.execute(self._create_sql(conn, want))
                return
            if [(n, _base(t)) for n, t in have] != [(n, _base(t)) for n, t in want]:
                fix = "drop or rename the table, or write to another one"
                raise misfit(f"PostgresSink: table {self.table!r}", have, want, fix)
            if self.target.mode == "upsert" and not self._has_unique_key(conn):
                cols = ", ".join(quote(k) for k in self.target.key)
                raise PlanError(
                    f"PostgresSink: table {self.table!r} has no unique constraint on ({cols}), which "
                    f"the upsert needs; add one: ALTER TABLE {self.qualified} "
                    f"ADD UNIQUE NULLS NOT DISTINCT ({cols})"
                )

    def _columns(self, conn: Any) -> list[tuple[str, str]]:
        rows = conn.execute(
            "SELECT column_name, data_type, numeric_precision, numeric_scale "
            "FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = coalesce(%s, current_schema()) ORDER BY ordinal_position",
            (self.table_name, self.schema_name),
        ).fetchall()
        return [(n, f"numeric({p},{s})" if t == "numeric" else t) for n, t, p, s in rows]

    def _has_unique_key(self, conn: Any) -> bool:
        rows = conn.execute(
            "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid",
            (self.qualified,),
        ).fetchall()
        return any(sorted(cols) == sorted(self.target.key) for (cols,) in rows)

    def _create_sql(self, conn: Any, columns: list[tuple[str, str]]) -> str:
        body = [f"{quote(n)} {t}" for n, t in columns]
        if self.target.mode == "upsert":
            key = ", ".join(quote(k) for k in self.target.key)
            nulls = " NULLS NOT DISTINCT" if conn.info.server_version >= 150000 else ""
            body.append(f"UNIQUE{nulls} ({key})" if nulls else f"PRIMARY KEY ({key})")
        return f"CREATE TABLE {self.qualified} ({', '.join(body)})"

    # --- writing -------------------------------------------------------------------------

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        self._retrying(f"writing batch {batch_id}", lambda conn: self._write(conn, batch_id, changes, rows))

    def _write(self, conn: Any, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        with conn.transaction(), conn.cursor() as cur:
            if batch_id >= 0:
                cur.execute(
                    f"INSERT INTO {COMMITS_TABLE} (sink_id, batch_id) VALUES (%s, -1) ON CONFLICT DO NOTHING",
                    (self.target.sink_id,),
                )
                cur.execute(
                    f"SELECT batch_id FROM {COMMITS_TABLE} WHERE sink_id = %s FOR UPDATE",
                    (self.target.sink_id,),
                )
                (last,) = cur.fetchone()
                if self.skip(batch_id, last if last >= 0 else None):
                    return
            if changes is not None:
                if changes.deletes.num_rows:
                    match = " AND ".join(f"{quote(k)} IS NOT DISTINCT FROM %s" for k in self.target.key)
                    cur.executemany(
                        f"DELETE FROM {self.qualified} WHERE {match}",
                        [tuple(r.values()) for r in changes.deletes.to_pylist()],
                    )
                rows = changes.upserts
            assert rows is not None
            if rows.num_rows:
                cur.executemany(self._insert_sql(), [tuple(r.values()) for r in rows.to_pylist()])
            if batch_id >= 0:
                cur.execute(
                    f"UPDATE {COMMITS_TABLE} SET batch_id = %s, committed_at = now() WHERE sink_id = %s",
                    (batch_id, self.target.sink_id),
                )

    def _insert_sql(self) -> str:
        names = self.schema.names
        sql = (
            f"INSERT INTO {self.qualified} ({', '.join(quote(n) for n in names)}) "
            f"VALUES ({', '.join(['%s'] * len(names))})"
        )
        if self.target.mode != "upsert":
            return sql
        key = ", ".join(quote(k) for k in self.target.key)
        rest = [n for n in names if n not in self.target.key]
        update = ", ".join(f"{quote(n)} = EXCLUDED.{quote(n)}" for n in rest)
        return sql + f" ON CONFLICT ({key}) " + (f"DO UPDATE SET {update}" if rest else "DO NOTHING")

    def _held(self, keys: pa.Table) -> pa.Table:
        key = self.target.key
        types = [pg_type(self.schema.field(k).type) for k in key]
        match = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM k.{quote(k)}" for k in key)
        values = [tuple(r.values()) for r in keys.select(list(key)).to_pylist()]

        def read(conn: Any) -> list[tuple[Any, ...]]:
            found: list[tuple[Any, ...]] = []
            with conn.transaction():
                for at in range(0, len(values), _HELD_CHUNK):
                    chunk = values[at : at + _HELD_CHUNK]
                    row = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
                    found += conn.execute(
                        f"SELECT t.* FROM {self.qualified} AS t WHERE EXISTS (SELECT 1 FROM "
                        f"(VALUES {', '.join([row] * len(chunk))}) AS k({', '.join(map(quote, key))}) "
                        f"WHERE {match})",
                        [v for r in chunk for v in r],
                    ).fetchall()
            return found

        return self._table_of(self._retrying("reading the rows of the batch's keys", read))

    def results(self) -> pa.Table:
        """The table as it is now (the current results in upsert mode)."""

        def read(conn: Any) -> list[tuple[Any, ...]]:
            with conn.transaction():
                return list(conn.execute(f"SELECT * FROM {self.qualified}").fetchall())

        return self._table_of(self._retrying("reading results", read))

    def _table_of(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        import pyarrow as pa

        names = self.schema.names
        return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], schema=self.schema)


#: Keys per query when reading the rows a batch's keys hold.
_HELD_CHUNK = 1_000


def _base(pg: str) -> str:
    """A type name without ``information_schema``'s spelling differences (none so far but numeric)."""
    return pg.replace(" ", "")
