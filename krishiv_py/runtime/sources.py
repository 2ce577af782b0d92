"""Reading a recipe's sources: one reader class per source kind.

A recipe names each read by its ``kind`` (:class:`~krishiv_py.planner.spark.recipe.ReadSource`,
plain data: schema, format, path, options). :func:`build_dataframe
<krishiv_py.runtime.build.build_dataframe>` asks :func:`reader_for` for the
reader of that kind and knows nothing else of it. Every reader returns the
source's user columns plus the hidden columns every source carries
(:data:`krishiv_py.names.BASE_HIDDEN`: row kind, watermark target, arrival
order), except the idle-marker reader, whose rows are the markers alone.

A new source kind is one reader class, registered with
:func:`register_reader`, beside its plan node and its read rule in the
planner (:mod:`krishiv_py.planner.spark.sources`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from krishiv_py.errors import PlanError
from krishiv_py.names import MARKER_DDL, ROW_KIND, SEQ, SOURCE_HIDDEN_DDL, WM
from krishiv_py.plan.nodes import SparkSource
from krishiv_py.types import to_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.checkpoint import CheckpointLayout
    from krishiv_py.planner.spark.recipe import ReadSource

__all__ = ["ReadPaths", "SourceReader", "parallelism", "reader_for", "register_reader", "spark_source"]


class ReadPaths:
    """The job's own directories a read may need (idle markers, ticks) and whether it observes.

    ``scratch``: where a DataFrame built outside a job (``explain()``,
    ``to_spark()``) makes the directories it reads instead (None: the
    system's temporary directory).
    """

    def __init__(
        self,
        *,
        ticks: str | None,
        markers: str | None,
        observe: bool = True,
        checkpoint: CheckpointLayout | None = None,
        scratch: str | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.ticks = ticks
        self.markers = markers
        self.observe = observe
        self.scratch = scratch


class SourceReader(Protocol):
    """Reads one kind of source into a Spark DataFrame."""

    #: A bounded read of this kind may stand in a one-query batch plan (a temporary view).
    batch_sql: bool

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame: ...


def arrow_frame(spark: SparkSession, table: pa.Table, schema: Any = None) -> DataFrame:
    """``spark.createDataFrame(table)`` with every row: the table as one record batch.

    PySpark 4.3's ``createDataFrame`` of an Arrow table silently drops every
    record batch after an empty one (chunks of 2, 0 and 3 rows give 2 rows);
    results and records often hold empty chunks.
    """
    return spark.createDataFrame(table.combine_chunks(), schema=schema)


class RecordsReader:
    """In-memory records (``from_records``): a DataFrame of the Arrow table, row order = arrival order."""

    batch_sql = True

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        return arrow_frame(spark, with_hidden(node.records))


class FilesReader:
    """Files of a format Spark reads (Parquet, CSV, JSON), bounded or a streaming directory."""

    batch_sql = True

    def ddl(self, node: ReadSource) -> str:
        return node.schema.ddl()

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        reader: Any = spark.readStream if node.streaming else spark.read
        reader = reader.format(node.format).schema(self.ddl(node))
        for key, value in node.options:
            reader = reader.option(key, value)
        return reader.load(node.path)  # type: ignore[no-any-return]


class MemoryReader(FilesReader):
    """A memory stream: the Parquet files its sender spooled, hidden columns included."""

    def ddl(self, node: ReadSource) -> str:
        return f"{node.schema.ddl()}, {SOURCE_HIDDEN_DDL}"

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        if not node.streaming and node.path is not None:
            from krishiv_py.runtime.spool import check_complete

            check_complete(node.path, "a bounded run (collect())")
        return super().read(spark, node, paths)


class MarkersReader:
    """A job's idle markers for one source (:mod:`krishiv_py.runtime.idle`), a streaming directory."""

    batch_sql = False

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        assert paths.markers is not None and node.path is not None
        path = os.path.join(paths.markers, node.path)
        os.makedirs(path, exist_ok=True)
        markers = spark.readStream.format("parquet").schema(MARKER_DDL)
        for key, value in node.options:
            markers = markers.option(key, value)
        return markers.load(path)


class SparkFrameReader:
    """A user's Spark DataFrame (``from_spark``), as it is: the read rule adds the hidden columns."""

    batch_sql = True

    def read(self, spark: SparkSession, node: ReadSource, paths: ReadPaths) -> DataFrame:
        return node.records  # type: ignore[no-any-return]


def spark_source(df: Any, *, name: Callable[[], str], spark: Any, remote: bool) -> SparkSource:
    """The node of ``session.from_spark(df)``: a DataFrame of ``spark``, streaming or batch.

    ``name`` is asked for the stream's name once ``df`` is known to fit.
    """
    if not (hasattr(df, "schema") and hasattr(df, "isStreaming") and hasattr(df, "sparkSession")):
        raise PlanError(f"from_spark() takes a Spark DataFrame, got {type(df).__name__}")
    if df.sparkSession is not spark and not remote:
        raise PlanError(
            "from_spark(): the DataFrame belongs to another SparkSession; build it from session.spark"
        )
    return SparkSource(name=name(), schema=to_schema(df.schema), frame=df, streaming=df.isStreaming)


def parallelism(spark: SparkSession) -> int | None:
    """Spark's default parallelism (the cores tasks run on), None where this process cannot ask."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext here
        return None


_READERS: dict[str, SourceReader] = {
    "records": RecordsReader(),
    "files": FilesReader(),
    "memory": MemoryReader(),
    "markers": MarkersReader(),
    "spark": SparkFrameReader(),
}


def register_reader(kind: str, reader: SourceReader) -> None:
    """Read recipe sources of ``kind`` with ``reader`` (a kind registered again is replaced)."""
    _READERS[kind] = reader


def reader_for(kind: str) -> SourceReader:
    """The reader of a source ``kind``; a :class:`PlanError` naming the known kinds otherwise."""
    try:
        return _READERS[kind]
    except KeyError:
        raise PlanError(
            f"no reader for sources of kind {kind!r}; known kinds: {', '.join(sorted(_READERS))}"
        ) from None


def with_hidden(table: Any) -> Any:
    """Add the hidden columns a source carries: data rows, arrival order = row order."""
    import numpy as np
    import pyarrow as pa

    n = table.num_rows
    return (
        table.append_column(ROW_KIND, pa.array(np.zeros(n, dtype=np.int8)))
        .append_column(WM, pa.nulls(n, pa.int64()))
        .append_column(SEQ, pa.array(np.arange(n, dtype=np.int64)))
    )
