"""``DeltaSink``: a Delta Lake table that holds the corrected answer, written by delta-rs (no JVM).

Each micro-batch is one Delta commit: in upsert mode one ``MERGE`` of the
batch's net changes (null-safe on the primary key: an emit updates or
inserts its window's row, a retraction deletes it), in append mode one
append of the changelog rows. The commit carries an *application
transaction* (``txn`` action: app id ``krishiv-<sink id>``, version = the
batch id), so the batch id is committed with the rows; a batch whose id is
at or below the table's recorded version for the app id is skipped, which
makes a rerun after a crash write nothing twice. Spark, DuckDB, polars and
delta-rs read the table.

The table is created from the result schema when the path holds none; an
existing table must have the same columns and types. ``partition_by``
names result columns to partition by, or ``"window_date"``: a ``date``
column of ``window_start`` (UTC) that the sink adds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import JobError, MissingDependencyError, PlanError
from krishiv_py.names import MERGE_OP as _OP
from krishiv_py.tables.base import TableWriter, file_in_the_way, keyed_rows, misfit, quote
from krishiv_py.tables.changelog import Changes, Mode, Target, key_columns, target_for

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["WINDOW_DATE", "DeltaSink"]

#: The date partition column ``partition_by="window_date"`` adds: ``window_start``'s UTC date.
WINDOW_DATE = "window_date"


def _require() -> Any:
    try:
        import deltalake
    except ImportError:
        raise MissingDependencyError(
            "DeltaSink needs delta-rs: python -m pip install '.[delta]' (in the krishiv_py clone)"
        ) from None
    return deltalake


def _names(value: Sequence[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _options(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in dict(value or {}).items()))


@attrs.frozen
class DeltaSink:
    """Results in the Delta table at ``path``: one row per window (``mode="upsert"``) or the changelog.

    Parameters
    ----------
    path
        The table's location: a local directory or a URI delta-rs writes
        (``s3://``, ``abfss://``, ``gs://``; credentials in ``storage_options``).
    mode
        ``"upsert"``: the table holds each window's current result;
        ``"append"``: every emit and retraction with ``kind`` and ``batch_id``.
    partition_by
        Result columns to partition by, or ``"window_date"`` (the UTC date of
        ``window_start``, added as a column).
    storage_options
        delta-rs storage settings (credentials, endpoints).
    key
        For a join's rows in ``"upsert"`` mode: the columns that identify
        each joined row (a window join's keys and bounds come first), e.g.
        ``key=("order_id",)``; a join's rows have none of their own.

    Examples
    --------
        sink = kp.DeltaSink("tables/per_minute", partition_by="window_date")
        job = corrected.start(sink, name="per_minute")
    """

    path: str
    mode: Mode = attrs.field(default="upsert", kw_only=True)
    partition_by: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_names)
    storage_options: tuple[tuple[str, str], ...] = attrs.field(default=(), kw_only=True, converter=_options)
    key: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=key_columns)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise PlanError(f"DeltaSink: path must be a non-empty string, got {self.path!r}")

    @property
    def _uri(self) -> str:
        return self.path if "://" in self.path else os.path.abspath(self.path)

    def open(self, context: SinkContext) -> DeltaWriter:
        _require()
        target = target_for("DeltaSink", self.mode, context, f"delta:{self._uri}", self.key)
        names = context.schema.names
        for column in self.partition_by:
            if column != WINDOW_DATE and column not in names:
                raise PlanError(
                    f"DeltaSink: partition_by column {column!r} is not a result column "
                    f"({', '.join(names)}); or use 'window_date'"
                )
            if column == WINDOW_DATE and "window_start" not in names:
                raise PlanError("DeltaSink: partition_by='window_date' needs window results (window_start)")
        writer = DeltaWriter(self, context, target)
        writer.prepare()
        return writer


class DeltaWriter(TableWriter):
    sink = "DeltaSink"

    def __init__(self, sink: DeltaSink, context: SinkContext, target: Target) -> None:
        super().__init__(context, target)
        import pyarrow as pa

        self.uri = sink._uri
        self.partition_by = sink.partition_by
        self.options = dict(sink.storage_options) or None
        self.app_id = f"krishiv-{target.sink_id}"
        if WINDOW_DATE in self.partition_by:
            self.schema = self.schema.append(pa.field(WINDOW_DATE, pa.date32()))

    def _table(self) -> Any:
        deltalake = _require()
        return deltalake.DeltaTable(self.uri, storage_options=self.options)

    def prepare(self) -> None:
        """Create the table when the path holds none; check an existing table's columns."""
        deltalake = _require()
        blocked = None if "://" in self.uri or os.path.isdir(self.uri) else file_in_the_way(self.uri)
        if blocked is not None:
            raise JobError(
                f"DeltaSink: cannot create a Delta table at {self.uri}: {blocked} is a file; "
                "give the sink a path whose parents are directories (or remove the file)"
            )
        try:
            table = self._table()
        except deltalake.exceptions.TableNotFoundError:
            self._create()
            return
        import pyarrow as pa

        have = pa.schema(table.schema().to_arrow())
        have_fields = [(f.name, str(f.type)) for f in have]
        want_fields = [(f.name, str(f.type)) for f in self.schema]
        if have_fields != want_fields:
            raise misfit(
                f"DeltaSink: the Delta table at {self.uri}", have_fields, want_fields, "write elsewhere"
            )

    def _create(self) -> None:
        deltalake = _require()
        if "://" not in self.uri:
            parent = os.path.dirname(self.uri.rstrip(os.sep))
            if (os.path.isdir(self.uri) and not os.access(self.uri, os.W_OK)) or (
                not os.path.exists(self.uri) and os.path.isdir(parent) and not os.access(parent, os.W_OK)
            ):
                raise JobError(_read_only(self.uri, "cannot create the table there"))
        try:
            deltalake.DeltaTable.create(
                self.uri,
                schema=self.schema,
                partition_by=list(self.partition_by) or None,
                storage_options=self.options,
            )
        except (OSError, deltalake.exceptions.DeltaError) as exc:
            raise JobError(f"DeltaSink: cannot create a Delta table at {self.uri}: {exc}") from exc

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        deltalake = _require()
        table = self._table()
        done = table.transaction_version(self.app_id)
        if self.skip(batch_id, done):
            return
        if "://" not in self.uri and not os.access(self.uri, os.W_OK):  # read-only: fail before writing
            raise JobError(
                f"DeltaSink: writing batch {batch_id} to {self.uri}: " + _read_only(self.uri, "read-only")
            )
        commit = deltalake.CommitProperties(
            app_transactions=[deltalake.Transaction(self.app_id, batch_id)] if batch_id >= 0 else None
        )
        try:
            if changes is None:
                assert rows is not None
                deltalake.write_deltalake(
                    table,
                    self._dated(rows),
                    mode="append",
                    commit_properties=commit,
                    storage_options=self.options,
                )
            else:
                self._merge(table, changes, commit)
        except (OSError, deltalake.exceptions.DeltaError) as exc:
            denied = any(m in str(exc) for m in ("ermission denied", "Read-only file system"))
            why = _read_only(self.uri, str(exc)) if denied else str(exc)
            raise JobError(f"DeltaSink: writing batch {batch_id} to {self.uri}: {why}") from exc

    def _merge(self, table: Any, changes: Changes, commit: Any) -> None:
        import pyarrow as pa

        upserts = self._dated(changes.upserts)
        ops = pa.concat_tables(
            [
                upserts.append_column(_OP, pa.array(["upsert"] * upserts.num_rows, pa.string())),
                changes.deletes.append_column(
                    _OP, pa.array(["delete"] * changes.deletes.num_rows, pa.string())
                ),
            ],
            promote_options="default",
        )
        match = " AND ".join(f"(t.{quote(k)} IS NOT DISTINCT FROM s.{quote(k)})" for k in self.target.key)
        columns = {quote(c): f"s.{quote(c)}" for c in self.schema.names}
        is_upsert, is_delete = f"s.{quote(_OP)} = 'upsert'", f"s.{quote(_OP)} = 'delete'"
        (
            table.merge(ops, predicate=match, source_alias="s", target_alias="t", commit_properties=commit)
            .when_matched_delete(predicate=is_delete)
            .when_matched_update(columns, predicate=is_upsert)
            .when_not_matched_insert(columns, predicate=is_upsert)
            .execute()
        )

    def _held(self, keys: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        key = list(self.target.key)
        dataset = self._table().to_pyarrow_dataset()
        wanted = None
        for k in key:  # a superset (each column among the keys' values), narrowed exactly below
            kind = dataset.schema.field(k).type
            # cast: delta-rs's merge writes strings as string_view, which pyarrow's is_in lacks
            term = pc.field(k).cast(kind).isin(keys[k].drop_null().unique().cast(kind))
            term = term | pc.field(k).is_null() if keys[k].null_count else term
            wanted = term if wanted is None else wanted & term
        found = dataset.to_table(filter=wanted).select(self.schema.names)
        return keyed_rows(found.cast(self.schema), keys, key)

    def _dated(self, rows: pa.Table) -> pa.Table:
        """``rows`` with the ``window_date`` column when the table is partitioned by it."""
        if WINDOW_DATE not in self.partition_by:
            return rows
        import pyarrow as pa
        import pyarrow.compute as pc

        date = pc.cast(rows["window_start"], pa.timestamp("us")).cast(pa.date32())
        return rows.append_column(WINDOW_DATE, date)

    def results(self) -> pa.Table:
        """The table as it is now (the current results in upsert mode)."""
        table: pa.Table = self._table().to_pyarrow_table()
        return table.cast(self.schema)


def _read_only(uri: str, why: str) -> str:
    return (
        f"{uri} is not writable ({why}); give the job write access to it, or write to another path. "
        "Batches already committed stay in the table."
    )
