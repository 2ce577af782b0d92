"""What every table sink's writer shares: the changelog applied per micro-batch, exactly once.

A writer turns each micro-batch into :class:`~krishiv_py.tables.changelog.Changes`
(upsert mode) or changelog rows (append mode) and hands them to its
backend's :meth:`TableWriter._apply`, which writes them and the batch id in
one transaction, after checking the batch id against the last one committed
for the job (:meth:`TableWriter.skip`). The backends differ only in how they
do that: DuckDB and PostgreSQL in a SQL transaction with a commit table,
Delta Lake in a table version with an application transaction, Iceberg in
one catalog commit whose snapshots carry the batch id in their summaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from krishiv_py.errors import PlanError
from krishiv_py.names import RESULT_KIND
from krishiv_py.tables.changelog import BATCH_ID, Changes, Target, changelog_rows, net_changes

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["COMMITS_TABLE", "TableWriter", "misfit", "quote", "table_schema"]

#: The table DuckDB and PostgreSQL sinks record their last committed batch id in, per sink id.
COMMITS_TABLE = "krishiv_commits"


def table_schema(context: SinkContext, target: Target) -> pa.Schema:
    """The Arrow schema of the sink's table: the results without ``kind`` (upsert), or the changelog."""
    import pyarrow as pa

    schema = context.schema.to_arrow()
    if target.mode == "upsert":
        return schema.remove(schema.get_field_index(RESULT_KIND)) if RESULT_KIND in schema.names else schema
    if RESULT_KIND not in schema.names:
        schema = schema.append(pa.field(RESULT_KIND, pa.string()))
    return schema.append(pa.field(BATCH_ID, pa.int64()))


def quote(name: str) -> str:
    """``name`` as a SQL identifier (DuckDB, PostgreSQL and delta-rs's SQL quote alike)."""
    return '"' + name.replace('"', '""') + '"'


def misfit(what: str, have: list[tuple[str, str]], want: list[tuple[str, str]], fix: str) -> PlanError:
    """The error for a table whose columns ``[(name, type), ...]`` are not the results' columns."""

    def text(columns: list[tuple[str, str]]) -> str:
        return "(" + ", ".join(f"{name} {kind}" for name, kind in columns) + ")"

    return PlanError(
        f"{what} does not fit the results: it has {text(have)}, the results need {text(want)}; {fix}"
    )


class TableWriter:
    """A table sink's writer: subclasses write :class:`Changes` or changelog rows in one transaction."""

    user_code = None
    #: The sink's name in errors (``"DuckDBSink"``...).
    sink = "table sink"

    def __init__(self, context: SinkContext, target: Target) -> None:
        self.target = target
        self.schema = table_schema(context, target)

    def write(self, table: pa.Table, batch_id: int) -> None:
        if table.num_rows == 0:
            return
        if self.target.mode == "upsert":
            self._apply(batch_id, net_changes(table, self.target.key), None)
        else:
            self._apply(batch_id, None, changelog_rows(table, batch_id).select(self.schema.names))

    def skip(self, batch_id: int, last: int | None) -> bool:
        """Whether ``batch_id`` was committed before (``last``: the last batch id recorded, if any)."""
        return self.target.resumable and batch_id >= 0 and last is not None and batch_id <= last

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """Connections stay behind when a writer is pickled (Spark Connect runs it on the server)."""
        return {k: (None if k.startswith("_conn") else v) for k, v in self.__dict__.items()}
