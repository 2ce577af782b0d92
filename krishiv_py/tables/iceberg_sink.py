"""``IcebergSink``: an Apache Iceberg table that holds the corrected answer, written by pyiceberg (no JVM).

Each micro-batch is one Iceberg transaction, committed to the catalog at
once: in upsert mode a delete of the rows whose primary key the batch
touches (null-safe: a null key column matches a null) and an append of its
net emits, in append mode an append of the changelog rows. Every snapshot
the transaction makes carries the sink id and the batch id in its summary
(``krishiv.sink-id``, ``krishiv.batch-id``), so the batch id is committed
with the rows; before writing, the sink walks the table's history from the
current snapshot back and skips a batch at or below the newest batch id
recorded for its sink id, which makes a rerun after a crash write nothing
twice. pyiceberg, Spark (with the Iceberg runtime), Trino, DuckDB and
polars read the table.

The catalog is embedded by default: a SQLite file ``catalog.db`` in the
``warehouse`` directory, which also holds the tables' data and metadata
(no server). ``catalog=`` takes another one instead (a pyiceberg
``Catalog``, or its properties, e.g. a REST catalog's). The table is
created from the result schema when missing; an existing table must have
the same columns and types. ``partition_by="window_date"`` partitions a
new table by the day of ``window_start`` (Iceberg's hidden partitioning: no
column is added).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import attrs

from krishiv_py.errors import JobError, KrishivError, MissingDependencyError, PlanError
from krishiv_py.tables.base import TableWriter, file_in_the_way, misfit
from krishiv_py.tables.changelog import Changes, Mode, Target, key_columns, target_for

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from krishiv_py.sinks import SinkContext

__all__ = ["BATCH_ID_PROPERTY", "SINK_ID_PROPERTY", "IcebergSink", "key_filter"]

#: The snapshot summary property that names the sink (job and table) that made the snapshot.
SINK_ID_PROPERTY = "krishiv.sink-id"
#: The snapshot summary property that holds the micro-batch the snapshot commits.
BATCH_ID_PROPERTY = "krishiv.batch-id"
#: ``partition_by`` takes this alone: the day of ``window_start`` (a ``day`` transform).
WINDOW_DATE = "window_date"
#: The partition field of ``partition_by="window_date"`` (Iceberg's own name for a day of ``window_start``).
DAY_FIELD = "window_start_day"
#: The embedded catalog's SQLite file, in the warehouse directory.
CATALOG_FILE = "catalog.db"
#: Catalog properties whose values stay out of ``repr`` (tokens, secrets, keys).
_SECRET_WORDS = ("credential", "token", "secret", "password", "key")

CatalogProperties = tuple[tuple[str, str], ...]


def _require() -> Any:
    try:
        import pyiceberg
    except ImportError:
        raise MissingDependencyError(
            "IcebergSink needs pyiceberg: python -m pip install '.[iceberg]' (in the krishiv_py clone)"
        ) from None
    return pyiceberg


def _names(value: Sequence[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _catalog(value: Catalog | Mapping[str, Any] | None) -> Catalog | CatalogProperties | None:
    """A mapping of catalog properties as a sorted tuple; a catalog object as it is."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))
    return value


def _catalog_repr(value: object) -> str:
    if not isinstance(value, tuple):
        return repr(value)
    shown = {k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in value}
    return repr(shown)


@attrs.frozen
class IcebergSink:
    """Results in the Iceberg table ``table``: one row per window (``mode="upsert"``) or the changelog.

    Parameters
    ----------
    table
        ``"namespace.name"``; the namespace is created when missing, the
        table from the result schema when missing.
    warehouse
        A local directory (or ``file://`` URI) for the embedded catalog: a
        SQLite file ``catalog.db`` there records the tables, whose data and
        metadata files go under it. Give this or ``catalog``.
    catalog
        Another catalog instead: a pyiceberg ``Catalog``, or a mapping of
        its properties for ``pyiceberg.catalog.load_catalog`` (e.g.
        ``{"type": "rest", "uri": "https://...", "warehouse": "..."}``).
    mode
        ``"upsert"``: the table holds each window's current result;
        ``"append"``: every emit and retraction with ``kind`` and ``batch_id``.
    partition_by
        ``"window_date"``: partition a new table by the day of
        ``window_start`` (hidden partitioning: no column is added).
    key
        For a join's rows in ``"upsert"`` mode: the columns that identify
        each joined row (a window join's keys and bounds come first), e.g.
        ``key=("order_id",)``; a join's rows have none of their own.

    Examples
    --------
        sink = kp.IcebergSink("metrics.per_minute", warehouse="warehouse", partition_by="window_date")
        job = corrected.start(sink, name="per_minute")
    """

    table: str
    warehouse: str | None = attrs.field(default=None, kw_only=True, converter=_path)
    catalog: Catalog | CatalogProperties | None = attrs.field(
        default=None, kw_only=True, converter=_catalog, repr=_catalog_repr
    )
    mode: Mode = attrs.field(default="upsert", kw_only=True)
    partition_by: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_names)
    key: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=key_columns)

    def __attrs_post_init__(self) -> None:
        parts = self.table.split(".") if isinstance(self.table, str) else []
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise PlanError(
                f"IcebergSink: table must be 'namespace.name' (e.g. 'metrics.per_minute'), got {self.table!r}"
            )
        if (self.warehouse is None) == (self.catalog is None):
            raise PlanError(
                "IcebergSink: give warehouse= (a directory for the embedded catalog) or catalog= "
                "(a pyiceberg Catalog or its properties), one of them"
                + ("" if self.warehouse is None else ", not both")
            )
        if self.warehouse is not None:
            if not isinstance(self.warehouse, str) or not self.warehouse.strip():
                raise PlanError(f"IcebergSink: warehouse must be a directory, got {self.warehouse!r}")
            scheme = urlparse(self.warehouse).scheme
            if "://" in self.warehouse and scheme != "file":
                raise PlanError(
                    f"IcebergSink: warehouse= is a local directory or a file:// URI for the embedded "
                    f"catalog, got {self.warehouse!r}; for a warehouse elsewhere pass catalog= "
                    "(e.g. a REST catalog's properties)"
                )
        if isinstance(self.catalog, str):
            raise PlanError(
                "IcebergSink: catalog= takes a pyiceberg Catalog or a mapping of its properties, "
                f"e.g. {{'type': 'rest', 'uri': {self.catalog!r}}}, got the string {self.catalog!r}"
            )
        if self.partition_by not in ((), (WINDOW_DATE,)):
            raise PlanError(
                f"IcebergSink: partition_by takes 'window_date' (the day of window_start) or nothing, "
                f"got {self.partition_by!r}"
            )

    @property
    def _warehouse(self) -> str | None:
        """The embedded catalog's directory, absolute."""
        if self.warehouse is None:
            return None
        path = unquote(urlparse(self.warehouse).path) if "://" in self.warehouse else self.warehouse
        return os.path.abspath(path)

    @property
    def _where(self) -> str:
        """The catalog and table, for the sink id and errors."""
        if self._warehouse is not None:
            return f"{self.table} in {self._warehouse}"
        props = dict(self.catalog) if isinstance(self.catalog, tuple) else _live_properties(self.catalog)
        return f"{self.table} in {props.get('uri') or props.get('warehouse') or props.get('name', 'catalog')}"

    def open(self, context: SinkContext) -> IcebergWriter:
        _require()
        target = target_for("IcebergSink", self.mode, context, f"iceberg:{self._where}", self.key)
        if self.catalog is not None and not isinstance(self.catalog, tuple):
            from pyiceberg.catalog import Catalog

            if not isinstance(self.catalog, Catalog):
                raise PlanError(
                    "IcebergSink: catalog= takes a pyiceberg Catalog or a mapping of its properties, "
                    f"got {type(self.catalog).__name__}"
                )
        if self.partition_by:
            import pyarrow as pa

            names = context.schema.names
            start = context.schema.to_arrow().field("window_start") if "window_start" in names else None
            if start is None or not pa.types.is_timestamp(start.type):
                raise PlanError("IcebergSink: partition_by='window_date' needs window results (window_start)")
            if importlib.util.find_spec("pyiceberg_core") is None:  # the day transform of a partitioned write
                raise MissingDependencyError(
                    "IcebergSink(partition_by='window_date') needs pyiceberg-core: "
                    "python -m pip install '.[iceberg]' (in the krishiv_py clone)"
                )
        writer = IcebergWriter(self, context, target)
        writer.prepare()
        return writer


def _live_properties(catalog: object) -> dict[str, str]:
    """A catalog object's properties (and name), as strings."""
    props = {str(k): str(v) for k, v in dict(getattr(catalog, "properties", {}) or {}).items()}
    props.setdefault("name", str(getattr(catalog, "name", "catalog")))
    return props


class IcebergWriter(TableWriter):
    sink = "IcebergSink"

    def __init__(self, sink: IcebergSink, context: SinkContext, target: Target) -> None:
        super().__init__(context, target)
        self.identifier = sink.table
        self.namespace = sink.table.split(".")[0]
        self.where = sink._where
        self.warehouse = sink._warehouse
        self.partitioned = bool(sink.partition_by)
        self.catalog_name = "krishiv"
        self.properties: dict[str, str] = {}
        self._conn_catalog: Catalog | None = None
        #: Whether the writer opened the catalog itself (and may close it), or was handed it.
        self.owns_catalog = False
        if isinstance(sink.catalog, tuple):
            self.properties = dict(sink.catalog)
        elif sink.catalog is not None:  # a live catalog: its properties open it again after pickling
            self._conn_catalog = sink.catalog
            self.catalog_name = sink.catalog.name
            self.properties = {str(k): str(v) for k, v in sink.catalog.properties.items()}
            if "type" not in self.properties:
                cls = type(sink.catalog)
                self.properties["py-catalog-impl"] = f"{cls.__module__}.{cls.__qualname__}"

    def _catalog(self) -> Catalog:
        """The catalog, opened on first use (and again in a process the writer was pickled to)."""
        if self._conn_catalog is not None:
            return self._conn_catalog
        try:
            if self.warehouse is not None:
                try:
                    from pyiceberg.catalog.sql import SqlCatalog
                except ImportError:
                    raise MissingDependencyError(
                        "IcebergSink needs pyiceberg with SQLAlchemy for its embedded catalog: "
                        "python -m pip install '.[iceberg]' (in the krishiv_py clone)"
                    ) from None
                if not os.path.isdir(self.warehouse):
                    blocked = file_in_the_way(self.warehouse)
                    if blocked is not None:
                        raise JobError(
                            f"IcebergSink: cannot open the catalog of {self.where}: the warehouse "
                            f"{self.warehouse} cannot be a directory, because {blocked} is a file; "
                            "choose a warehouse= path whose parents are directories (or remove the file)"
                        )
                    if not _creatable(self.warehouse):
                        raise JobError(
                            f"IcebergSink: cannot open the catalog of {self.where}: "
                            + _read_only(self.warehouse, "cannot create the warehouse there")
                        )
                    os.makedirs(self.warehouse, exist_ok=True)
                self._conn_catalog = SqlCatalog(
                    self.catalog_name,
                    uri=f"sqlite:///{os.path.join(self.warehouse, CATALOG_FILE)}",
                    warehouse=f"file://{self.warehouse}",
                )
            else:
                from pyiceberg.catalog import load_catalog

                self._conn_catalog = load_catalog(self.catalog_name, **self.properties)
        except KrishivError:
            raise
        except Exception as exc:
            raise JobError(f"IcebergSink: cannot open the catalog of {self.where}: {exc}") from exc
        self.owns_catalog = True
        return self._conn_catalog

    def _table(self) -> Table:
        return self._catalog().load_table(self.identifier)

    def prepare(self) -> None:
        """Create the table when the catalog has none; check an existing table's columns."""
        try:
            self._prepare()
        finally:
            self._idle()

    def _prepare(self) -> None:
        from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

        try:
            table = self._table()
        except NoSuchTableError:
            try:
                table = self._create()
            except TableAlreadyExistsError:  # created meanwhile by another writer
                table = self._table()
        except KrishivError:
            raise
        except Exception as exc:
            raise JobError(f"IcebergSink: cannot load the Iceberg table {self.where}: {exc}") from exc
        have = [(f.name, str(f.field_type)) for f in table.schema().fields]
        want = [(f.name, str(f.field_type)) for f in _iceberg_schema(self.schema).fields]
        if have != want:
            raise misfit(
                f"IcebergSink: the Iceberg table {self.where}",
                have,
                want,
                "write to another table or drop this one",
            )

    def _create(self) -> Table:
        from pyiceberg.exceptions import NoSuchNamespaceError, TableAlreadyExistsError
        from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
        from pyiceberg.schema import assign_fresh_schema_ids
        from pyiceberg.transforms import DayTransform

        if self.warehouse is not None and not os.access(self.warehouse, os.W_OK):
            raise JobError(
                f"IcebergSink: cannot create the Iceberg table {self.where}: "
                + _read_only(self.warehouse, "cannot create the table there")
            )
        schema = assign_fresh_schema_ids(_iceberg_schema(self.schema))
        spec = UNPARTITIONED_PARTITION_SPEC
        if self.partitioned:
            start = schema.find_field("window_start").field_id
            day = PartitionField(source_id=start, field_id=1000, transform=DayTransform(), name=DAY_FIELD)
            spec = PartitionSpec(day)
        catalog = self._catalog()
        try:
            try:
                return catalog.create_table(self.identifier, schema=schema, partition_spec=spec)
            except NoSuchNamespaceError:
                catalog.create_namespace_if_not_exists(self.namespace)
                return catalog.create_table(self.identifier, schema=schema, partition_spec=spec)
        except TableAlreadyExistsError:
            raise
        except Exception as exc:
            why = _read_only(self.where, str(exc)) if _denied(exc) else str(exc)
            raise JobError(f"IcebergSink: cannot create the Iceberg table {self.where}: {why}") from exc

    def last_batch(self, table: Table) -> int | None:
        """The newest batch id this sink committed to ``table``: from the current snapshot back."""
        snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
        snapshot = table.current_snapshot()
        while snapshot is not None:
            summary = snapshot.summary
            if summary is not None and summary[SINK_ID_PROPERTY] == self.target.sink_id:
                return int(summary[BATCH_ID_PROPERTY] or -1)
            parent = snapshot.parent_snapshot_id
            snapshot = snapshots.get(parent) if parent is not None else None
        return None

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        try:
            self._commit(batch_id, changes, rows)
        except Exception:
            if self.owns_catalog:  # opened afresh for the next batch (a lost session, a changed mount)
                self._idle()
                self._conn_catalog = None
            raise
        finally:
            self._idle()

    def _commit(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        try:
            table = self._table()
        except KrishivError:
            raise
        except Exception as exc:
            raise JobError(f"IcebergSink: writing batch {batch_id} to {self.where}: {exc}") from exc
        if self.target.resumable and batch_id >= 0 and self.skip(batch_id, self.last_batch(table)):
            return
        for path in self._local_paths(table):  # read-only: fail before writing
            if os.path.exists(path) and not os.access(path, os.W_OK):
                raise JobError(
                    f"IcebergSink: writing batch {batch_id} to {self.where}: " + _read_only(path, "read-only")
                )
        commit = {SINK_ID_PROPERTY: self.target.sink_id, BATCH_ID_PROPERTY: str(batch_id)}
        arrow = table.schema().as_arrow()
        try:
            with table.transaction() as txn:
                if changes is None:
                    assert rows is not None
                    txn.append(rows.cast(arrow), snapshot_properties=commit)
                else:
                    where = key_filter(changes.keys)
                    if where is not None and any(True for _ in table.scan(row_filter=where).plan_files()):
                        txn.delete(where, snapshot_properties=commit)
                    # Always appended, empty or not: its snapshot records the batch id.
                    txn.append(changes.upserts.select(arrow.names).cast(arrow), snapshot_properties=commit)
        except Exception as exc:
            why = _read_only(self.where, str(exc)) if _denied(exc) else str(exc)
            raise JobError(f"IcebergSink: writing batch {batch_id} to {self.where}: {why}") from exc

    def _held(self, keys: pa.Table) -> pa.Table:
        where = key_filter(keys)
        try:
            found = self._table().scan(row_filter=where).to_arrow() if where is not None else None
        except KrishivError:
            raise
        except Exception as exc:
            raise JobError(
                f"IcebergSink: reading the rows of the batch's keys in {self.where}: {exc}"
            ) from exc
        finally:
            self._idle()
        if found is None:
            return self.schema.empty_table()
        return found.select(self.schema.names).cast(self.schema)

    def _local_paths(self, table: Table) -> list[str]:
        """What a commit writes to on this machine: the table's directories, the embedded catalog."""
        location = urlparse(table.location())
        paths = []
        if location.scheme in ("", "file"):
            root = unquote(location.path)
            paths = [root, os.path.join(root, "data"), os.path.join(root, "metadata")]
        if self.warehouse is not None:
            paths += [self.warehouse, os.path.join(self.warehouse, CATALOG_FILE)]
        return paths

    def results(self) -> pa.Table:
        """The table as it is now (the current results in upsert mode)."""
        try:
            table: pa.Table = self._table().scan().to_arrow()
        finally:
            self._idle()
        return table.cast(self.schema)

    def _idle(self) -> None:
        """Close the SQL catalog's database connections between batches (they open again on use).

        An embedded catalog's SQLite file is then free between batches, as
        :class:`~krishiv_py.DuckDBSink` leaves its file; a catalog the user
        handed in is left as it is.
        """
        engine = getattr(self._conn_catalog, "engine", None) if self.owns_catalog else None
        if engine is not None:
            engine.dispose()


def _iceberg_schema(schema: pa.Schema) -> Schema:
    """``schema`` as an Iceberg schema, converted as ``Catalog.create_table`` converts an Arrow one."""
    from pyiceberg.catalog import Catalog

    return Catalog._convert_schema_if_needed(schema)


def key_filter(keys: pa.Table) -> BooleanExpression | None:
    """The rows whose columns equal one row of ``keys`` (a null matches a null), as an Iceberg filter.

    The keys are grouped by every column but one, the column that leaves the
    fewest groups (for window results, often a window's bounds with its
    keys in one ``In``): each group is ``col = v AND ... AND last IN (...)``,
    with ``IS NULL`` (and ``IS NAN``) for null (and NaN) values; the groups
    are OR-ed. ``None`` when ``keys`` has no rows.

    The filter is never null on a row: a comparison of a column that some
    key has null is guarded with ``IS NOT NULL``. A delete keeps the rows of
    a data file where ``NOT filter`` holds, and pyiceberg adds ``OR col IS
    NULL`` to that only for columns the filter never tests for null, so an
    unguarded ``k = 'a'`` (null on a row whose ``k`` is null) would lose
    that row when another group holds ``k IS NULL``.
    """
    # pyiceberg's expressions are pydantic models whose constructors type checkers misread.
    ex: Any = importlib.import_module("pyiceberg.expressions")
    if keys.num_rows == 0:
        return None
    columns = keys.column_names
    rows = list(zip(*(_values(keys.column(c)) for c in columns), strict=True))
    nullable = {c for c in columns if keys.column(c).null_count > 0}

    def groups(by: int) -> dict[tuple[Any, ...], list[Any]]:
        found: dict[tuple[Any, ...], list[Any]] = {}
        for row in rows:
            found.setdefault(row[:by] + row[by + 1 :], []).append(row[by])
        return found

    def guarded(column: str, term: Any) -> Any:
        return ex.And(ex.NotNull(column), term) if column in nullable else term

    def equal(column: str, value: Any) -> Any:
        if value is None:
            return ex.IsNull(column)
        return guarded(column, ex.IsNaN(column) if _nan(value) else ex.EqualTo(column, value))

    def member(column: str, found: list[Any]) -> BooleanExpression:
        plain = {v for v in found if v is not None and not _nan(v)}
        terms = [guarded(column, ex.In(column, plain))] if plain else []
        terms += [ex.IsNull(column)] if any(v is None for v in found) else []
        terms += [guarded(column, ex.IsNaN(column))] if any(_nan(v) for v in found) else []
        return _balanced(ex.Or, terms)

    last = min(range(len(columns)), key=lambda i: len(groups(i)))
    others = columns[:last] + columns[last + 1 :]
    return _balanced(
        ex.Or,
        [
            _balanced(ex.And, [*map(equal, others, group), member(columns[last], found)])
            for group, found in groups(last).items()
        ],
    )


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _values(column: pa.ChunkedArray[Any]) -> list[Any]:
    """A key column's values as Iceberg literals take them: timestamps as microseconds since the epoch."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
    return column.to_pylist()


def _balanced(op: Any, terms: list[BooleanExpression]) -> BooleanExpression:
    """``op`` (``And``/``Or``) over ``terms`` as a balanced tree, so that thousands of keys stay shallow."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    result: BooleanExpression = op(_balanced(op, terms[:middle]), _balanced(op, terms[middle:]))
    return result


def _creatable(path: str) -> bool:
    """Whether the missing directory ``path`` can be made: its nearest existing parent is writable."""
    parent = os.path.dirname(path.rstrip(os.sep)) or os.sep
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return os.access(parent, os.W_OK)


def _denied(exc: BaseException) -> bool:
    return any(m in str(exc) for m in ("ermission denied", "Read-only file system", "readonly database"))


def _read_only(path: str, why: str) -> str:
    return (
        f"{path} is not writable ({why}); give the job write access to it, or write to another table. "
        "Batches already committed stay in the table."
    )
