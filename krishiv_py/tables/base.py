"""What every table sink's writer shares: the changelog applied per micro-batch, exactly once.

A writer turns each micro-batch into :class:`~krishiv_py.tables.changelog.Changes`
(upsert mode) or changelog rows (append mode) and hands them to its
backend's :meth:`TableWriter._apply`, which writes them and the batch id in
one transaction, after checking the batch id against the last one committed
for the job (:meth:`TableWriter.skip`). The backends differ only in how they
do that: DuckDB and PostgreSQL in a SQL transaction with a commit table,
Delta Lake in a table version with an application transaction, Iceberg in
one catalog commit whose snapshots carry the batch id in their summaries.

A join's rows keyed by the user's ``key=`` are checked before anything of a
micro-batch is written (:func:`~krishiv_py.tables.changelog.second_rows`):
each backend reads the rows it holds for the keys the batch touches
(:meth:`TableWriter._held`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from krishiv_py.errors import PlanError
from krishiv_py.names import CHANGELOG_ROW as _ROW
from krishiv_py.names import RESULT_KIND
from krishiv_py.tables.changelog import (
    BATCH_ID,
    Changes,
    Target,
    changelog_rows,
    net_changes,
    non_unique_key,
    second_rows,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = ["COMMITS_TABLE", "TableWriter", "file_in_the_way", "keyed_rows", "misfit", "quote", "table_schema"]

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


def keyed_rows(rows: pa.Table, keys: pa.Table, key: Sequence[str]) -> pa.Table:
    """The rows of ``rows`` whose ``key`` columns equal a row of ``keys`` (a null matches a null).

    >>> import pyarrow as pa
    >>> rows = pa.table({"k": ["a", None, "b"], "v": [1, 2, 3]})
    >>> keyed_rows(rows, pa.table({"k": [None, "a"]}), ("k",))["v"].to_pylist()
    [1, 2]
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = list(key)
    side = rows.select(names)
    marked = pa.concat_tables(
        [
            keys.select(names)
            .cast(side.schema)
            .append_column(_ROW, pa.array([-1] * keys.num_rows, pa.int64())),
            side.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64))),
        ]
    )
    groups = marked.group_by(names, use_threads=False).aggregate([(_ROW, "min"), (_ROW, "list")])
    hit = groups.filter(pc.equal(groups[f"{_ROW}_min"], pa.scalar(-1)))[f"{_ROW}_list"]
    taken = pc.list_flatten(hit).to_numpy(zero_copy_only=False)
    return rows.take(np.sort(taken[taken >= 0]))


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
            changes = net_changes(table, self.target.key)
            if self.target.checked:
                found = second_rows(table, self.target.key, self._held(changes.keys))
                if found:
                    raise non_unique_key(self.sink, self.target.key, found, batch_id)
            self._apply(batch_id, changes, None)
        else:
            self._apply(batch_id, None, changelog_rows(table, batch_id).select(self.schema.names))

    def skip(self, batch_id: int, last: int | None) -> bool:
        """Whether ``batch_id`` was committed before (``last``: the last batch id recorded, if any)."""
        return self.target.resumable and batch_id >= 0 and last is not None and batch_id <= last

    def _apply(self, batch_id: int, changes: Changes | None, rows: pa.Table | None) -> None:
        raise NotImplementedError

    def _held(self, keys: pa.Table) -> pa.Table:
        """The rows the table holds under ``keys`` (null matches null), with the table's columns."""
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """Connections stay behind when a writer is pickled (Spark Connect runs it on the server)."""
        return {k: (None if k.startswith("_conn") else v) for k, v in self.__dict__.items()}


def file_in_the_way(path: str) -> str | None:
    """The existing file (not a directory) at ``path`` or one of its parents, if any: what stops
    a table's directory from being made there."""
    here = os.path.abspath(path)
    while not os.path.isdir(here):
        if os.path.exists(here):
            return here
        here = os.path.dirname(here)
    return None
