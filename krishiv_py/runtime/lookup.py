"""A lookup join's table, read again for every micro-batch (SPEC 3.14's ``lookup_join``).

Spark's join of a stream with a bounded DataFrame runs the table's read in
every micro-batch, so a file changed in place is read anew; but a file
source lists its files once, when the DataFrame is made, so a file added
later is never read. A Parquet table is therefore read through
:class:`LookupFiles`, a Python data source (``krishiv_lookup``) whose one
partition lists the table's files when it runs: each micro-batch reads the
files there are then (the version in force when it runs). Other formats
are read by Spark's reader (changes in place only; docs/joins.md says so).

Files are read with their columns by name: a column a file lacks is null;
the hidden files of a directory (``_SUCCESS``, ``.crc``) are skipped, as
Spark skips them. A file is read whole or not at all only if it is written
whole (written elsewhere, then moved in).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from krishiv_py.types import Schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["LOOKUP_FORMAT", "files_of", "read_files", "table_frame"]

#: The name the data source registers under.
LOOKUP_FORMAT = "krishiv_lookup"


def files_of(path: str) -> list[str]:
    """The data files of ``path`` (a file, or a directory's files at any depth), in name order."""
    if os.path.isfile(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.join(root, f) for f in sorted(files) if not f.startswith((".", "_"))]
    return found


def read_files(path: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every row of the Parquet files of ``path`` now, as ``schema`` (columns by name)."""
    for file in files_of(path):
        table = pq.read_table(file)
        columns = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in schema
        ]
        yield from pa.Table.from_arrays(columns, schema=schema).to_batches()


def _data_source() -> type[Any]:
    """The data source class (PySpark's base classes load only when a job reads a table)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class LookupReader(DataSourceReader):
        def __init__(self, path: str, schema: pa.Schema) -> None:
            self.path, self.schema = path, schema

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(self.path)]  # one: the listing happens when it runs

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            yield from read_files(partition.value, self.schema)

    class LookupFiles(DataSource):
        @classmethod
        def name(cls) -> str:
            return LOOKUP_FORMAT

        def schema(self) -> str:
            return str(self.options["ddl"])

        def reader(self, schema: Any) -> DataSourceReader:
            arrow = Schema.parse(str(self.options["ddl"])).to_arrow()
            return LookupReader(str(self.options["path"]), arrow)

    return LookupFiles


def table_frame(spark: SparkSession, path: str, ddl: str) -> DataFrame:
    """The Parquet table at ``path`` as a DataFrame that lists its files each time it is read."""
    spark.dataSource.register(_data_source())
    frame: DataFrame = spark.read.format(LOOKUP_FORMAT).option("path", path).option("ddl", ddl).load()
    return frame
