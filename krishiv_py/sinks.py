"""Where a job's rows go: the sink protocol and krishiv_py's own sinks.

A sink is one class. The runtime calls it, and knows nothing else of it:

``open(context) -> writer``
    Once per job (and once for a late-event side output), with a
    :class:`SinkContext`: the schema of the rows, the job's checkpoint
    (``None`` for a bounded run), which output of the job it receives.
``writer.write(table, batch_id)``
    Each micro-batch's rows as a ``pyarrow.Table``, with Spark's batch id.
    A batch that Spark runs again after a restart comes again with the same
    id: a writer that keys what it writes by batch id (replaces, or skips a
    batch it has committed) is exactly once. A bounded run is one call
    with batch id 0.
``writer.results()`` (optional)
    The rows written so far, for ``job.results()``; without it
    ``job.results()`` raises :class:`~krishiv_py.NoResultsError`.

A writer may also have ``close()``, called when the job stops (a bounded
run: once its rows are written, or failed to be), to release its
connections. Nothing is written after it; ``results()`` may still be
called (``job.results()``), so it opens what it needs again.

Two more optional methods let Spark itself write the rows, with no
round trip through this process: ``spark_stream(writer)`` configures a
``DataStreamWriter`` (used by queries on the native lowering) and
``spark_batch(df)`` writes a bounded run's DataFrame. A writer's
``user_code`` attribute names the user code that ``write`` runs (for
errors, and for ``start(quarantine_dir=...)``, which sets a failed batch's
rows aside instead of failing the job); ``None`` marks krishiv's own
writers, whose failures fail the job. A writer without the attribute is
user code. ``skipped_batch(batch_id)``, optional, hears of a micro-batch
that ran no sink: the one Spark's repartition of a checkpoint's state
writes before a restart on other shuffle partitions (SPEC 3.15); the
Parquet sink writes its empty entry into Spark's file sink log.

Where ``write`` runs
    On the driver, in this process, for the stateful lowering, bounded runs
    and late events. A query on the native lowering calls it from Spark's
    ``foreachBatch``: in this process for a local or cluster session, in a
    Python process on the server over Spark Connect
    (``context.write_on_server``), where the writer arrives pickled.

The sinks
---------
``MemorySink`` (the default)
    Results stay in memory on the driver; read them with ``job.results()``.
``ParquetSink(path)``
    Spark's file sink: Parquet files plus a ``_spark_metadata`` log, so each
    micro-batch is committed exactly once, also across restarts from the
    same checkpoint. ``job.results()`` reads the committed files back.
``ConsoleSink()``
    Prints each micro-batch that has rows (for notebooks and debugging),
    timestamps in UTC with their zone; empty micro-batches print nothing.
``ForeachBatchSink(fn)``
    Calls ``fn(table, batch_id)`` on the driver with each micro-batch as a
    ``pyarrow.Table``. A function that raises fails the job with
    :class:`~krishiv_py.errors.JobError`, unless the job was started with
    ``quarantine_dir=``: then that batch's rows are set aside there
    (:mod:`krishiv_py.runtime.quarantine`) and the job goes on.

Examples
--------
A sink of one's own keeps the last batch of each id:

>>> import pyarrow as pa
>>> class LastBatch:
...     def open(self, context):
...         self.batches = {}
...         return self
...     def write(self, table, batch_id):
...         self.batches[batch_id] = table
>>> sink = LastBatch()
>>> writer = sink.open(SinkContext(schema=Schema.from_arrow(pa.schema([("n", pa.int64())]))))
>>> writer.write(pa.table({"n": [1, 2]}), 0)
>>> sink.batches[0].num_rows
2
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.types import Schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ConsoleSink",
    "ForeachBatchSink",
    "MemorySink",
    "ParquetSink",
    "Sink",
    "SinkContext",
    "SinkWriter",
    "fill_sink_log",
]

#: Which output of a job a sink receives: its results, or a late-event side output.
SinkOutput = Literal["results", "late events"]


@attrs.frozen(kw_only=True)
class SinkContext:
    """What a sink is opened with: the rows it will receive, and the job they come from."""

    #: The schema of every table ``write`` receives.
    schema: Schema
    #: ``"results"`` (the job's rows) or ``"late events"`` (a late-event side output).
    output: SinkOutput = "results"
    #: The job's checkpoint directory; ``None`` for a bounded run (one batch, no restart).
    checkpoint_dir: str | None = None
    #: The Spark query's name (unique per streaming job), ``None`` for a bounded run.
    query_name: str | None = None
    #: ``write`` is called on the Spark Connect server, not in this process.
    write_on_server: bool = False
    #: How a window's firings relate (``"accumulating"``, ``"discarding"``, ``"retracting"``);
    #: None for rows that are not window results.
    accumulation: str | None = None
    #: For a join's rows (SPEC 3.12): the columns that identify a row together with the
    #: columns a table sink's ``key=`` names (a window join's keys and bounds, else none);
    #: ``None``: the rows are not a join's.
    join_identity: tuple[str, ...] | None = None
    #: The columns that identify a result row when no window bounds do (an aggregation per
    #: key's keys); ``None``: none such.
    result_key: tuple[str, ...] | None = None
    #: The SparkSession running the job (``None`` outside a job).
    spark: Any = attrs.field(default=None, repr=False, eq=False)

    @property
    def checkpoint(self) -> CheckpointLayout | None:
        """The paths of the job's checkpoint and its logs; ``None`` for a bounded run."""
        return None if self.checkpoint_dir is None else CheckpointLayout(self.checkpoint_dir)

    @property
    def bounded(self) -> bool:
        """True for a bounded run: one batch, no checkpoint."""
        return self.checkpoint_dir is None

    @property
    def joined(self) -> bool:
        """True for a join's rows: no columns of their own identify them."""
        return self.join_identity is not None

    @property
    def primary_key(self) -> tuple[str, ...] | None:
        """The columns that identify a window result: key columns, ``window_start``, ``window_end``.

        Window results put the key columns first, then the window's bounds
        (SPEC "Result shape"); None for rows that are not window results.
        """
        names = self.schema.names
        if self.output == "results" and self.result_key is not None:
            return self.result_key if set(self.result_key) <= set(names) else None
        if (
            self.output != "results"
            or self.join_identity is not None
            or "window_start" not in names
            or "window_end" not in names
        ):
            return None
        end = names.index("window_end")
        return names[: end + 1] if names.index("window_start") == end - 1 else None


@runtime_checkable
class SinkWriter(Protocol):
    """Writes one job's micro-batches (see the module docstring for the optional methods)."""

    def write(self, table: pa.Table, batch_id: int) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """Where a job's rows go: any object with ``open(context) -> writer``."""

    def open(self, context: SinkContext) -> SinkWriter: ...


def user_code(writer: object) -> str | None:
    """The user code ``writer.write`` runs (None: krishiv's own writer), for errors and quarantine."""
    return getattr(writer, "user_code", f"the sink writer {type(writer).__name__}")


# --- the sinks ------------------------------------------------------------------------------


@attrs.frozen
class MemorySink:
    """Keep results in memory (the default sink)."""

    def open(self, context: SinkContext) -> _MemoryWriter:
        return _MemoryWriter(context)


@attrs.frozen
class ParquetSink:
    """Append results to Parquet files under ``path``, exactly once."""

    path: str

    def open(self, context: SinkContext) -> _ParquetWriter:
        return _ParquetWriter(os.path.abspath(self.path), context)


@attrs.frozen(kw_only=True)
class ConsoleSink:
    """Print each micro-batch's results (``num_rows`` at most; empty batches are skipped)."""

    num_rows: int = 20
    truncate: bool = False

    def open(self, context: SinkContext) -> _ConsoleWriter:
        if context.write_on_server:
            raise JobError(
                "ConsoleSink prints from Spark's driver, which over Spark Connect is the server, so "
                "nothing would show here; use MemorySink and job.results(), or ParquetSink"
            )
        return _ConsoleWriter(
            self, "results" if context.output == "results" else "late events", context.bounded
        )

    def show(self, table: pa.Table, batch_id: int | None, *, what: str = "results") -> None:
        """Print ``table`` under a header naming the batch; nothing when it is empty."""
        from krishiv_py._display import table_text

        if table.num_rows == 0:
            return
        header = f"-- {what}" + (f", batch {batch_id}" if batch_id is not None else "") + " --"
        print(header)
        print(table_text(table, limit=self.num_rows, truncate=20 if self.truncate else None), flush=True)


@attrs.frozen
class ForeachBatchSink:
    """Call ``fn(table, batch_id)`` with each micro-batch as a ``pyarrow.Table``."""

    fn: Callable[[pa.Table, int], None]

    def open(self, context: SinkContext) -> _ForeachWriter:
        return _ForeachWriter(self.fn)


# --- their writers --------------------------------------------------------------------------


class _MemoryWriter:
    """Tables by batch id in this process; on the native lowering, Spark's in-memory table."""

    user_code = None
    #: Spark's memory sink cannot start again on its checkpoint (a job that sets bad files
    #: aside restarts its query): such a job hands its batches over instead.
    stream_restarts = False

    def __init__(self, context: SinkContext) -> None:
        self._context = context
        self._tables: dict[int, pa.Table] = {}
        self._lock = threading.Lock()
        self._spark_table: str | None = None

    def spark_stream(self, writer: Any) -> Any:
        """Spark's memory sink, a table named after the query."""
        checkpoint, name = self._context.checkpoint, self._context.query_name
        assert checkpoint is not None and name is not None
        if checkpoint.has_offsets():
            raise JobError(
                f"this pipeline's checkpoint ({checkpoint}) holds a run already, and Spark's in-memory "
                "sink cannot resume one; resume with ParquetSink(path) (exactly once across restarts) "
                "or a ForeachBatchSink, or start without that name/checkpoint_dir for a fresh run"
            )
        self._spark_table = name
        return writer.format("memory")

    def write(self, table: pa.Table, batch_id: int) -> None:
        with self._lock:
            self._tables[batch_id] = table

    def results(self) -> pa.Table:
        import pyarrow as pa

        from krishiv_py.spark_errors import spark_call
        from krishiv_py.types import conform

        name, schema = self._spark_table, self._context.schema
        if name is not None:
            spark = self._context.spark
            return conform(spark_call("reading results", lambda: spark.table(name).toArrow()), schema)
        with self._lock:
            tables = [self._tables[k] for k in sorted(self._tables, key=_batch_order)]
        return pa.concat_tables(tables) if tables else schema.to_arrow().empty_table()


class _ParquetWriter:
    """Spark's file sink on the native lowering; elsewhere one file per batch, replaced on a rerun."""

    user_code = None

    def __init__(self, path: str, context: SinkContext) -> None:
        self.path = path
        self._context = context

    def spark_stream(self, writer: Any) -> Any:
        return writer.format("parquet").option("path", self.path)

    def skipped_batch(self, batch_id: int) -> None:
        """A micro-batch of the checkpoint that read nothing and ran no sink (Spark's repartition of
        its state before a restart): Spark's file sink log gets its empty entry."""
        spark = self._context.spark
        interval = spark.conf.get("spark.sql.streaming.fileSink.log.compactInterval", "10") if spark else "10"
        fill_sink_log(self.path, batch_id, int(interval or 10))

    def spark_batch(self, df: Any) -> None:
        from krishiv_py.spark_errors import spark_call

        spark_call("writing Parquet", lambda: df.write.mode("append").parquet(self.path))

    def write(self, table: pa.Table, batch_id: int) -> None:
        if self._context.output == "results":
            if table.num_rows:
                _write_atomic(table, self.path, f"part-{batch_id:012d}.parquet")
        else:
            _write_atomic(
                table, self.path, f"late-{'m' if batch_id < 0 else 'b'}{abs(batch_id):012d}.parquet"
            )

    def results(self) -> pa.Table:
        if self._context.output == "results":
            return read_parquet_results(self._context.spark, self.path, self._context.schema)
        return _read_late_files(self.path, self._context.schema)


class _ConsoleWriter:
    user_code = "ConsoleSink"

    def __init__(self, sink: ConsoleSink, what: str, bounded: bool) -> None:
        self._sink, self._what, self._bounded = sink, what, bounded

    def write(self, table: pa.Table, batch_id: int) -> None:
        self._sink.show(table, None if self._bounded else batch_id, what=self._what)


class _ForeachWriter:
    user_code = "the ForeachBatchSink function"

    def __init__(self, fn: Callable[[pa.Table, int], None]) -> None:
        self._fn = fn

    def write(self, table: pa.Table, batch_id: int) -> None:
        self._fn(table, batch_id)


def read_parquet_results(spark: Any, path: str, schema: Schema) -> pa.Table:
    """The committed rows under a ParquetSink path (empty before the first commit)."""
    from krishiv_py.spark_errors import spark_call
    from krishiv_py.types import conform

    if not os.path.isdir(path) or not any(f.endswith(".parquet") for _, _, fs in os.walk(path) for f in fs):
        return schema.to_arrow().empty_table()
    table = spark_call("reading results", lambda: spark.read.schema(schema.ddl()).parquet(path).toArrow())
    return conform(table, schema)


def _read_late_files(path: str, schema: Schema) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet")) if os.path.isdir(path) else []
    if not files:
        return schema.to_arrow().empty_table()
    return pa.concat_tables([pq.read_table(os.path.join(path, f)) for f in files])


def _batch_order(batch_id: int) -> tuple[bool, int]:
    """Batches of a job first, then rows handed over outside one (negative ids), each in order."""
    return (batch_id < 0, abs(batch_id))


def _write_atomic(table: pa.Table, path: str, name: str) -> None:
    """Write ``table`` as ``path/name`` atomically (a rerun of the batch replaces the file)."""
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".{name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(path, name))


def fill_sink_log(path: str, batch_id: int, compact_interval: int = 10) -> bool:
    """Write Spark's file sink log entry of ``batch_id`` when it has none (a micro-batch that
    wrote no files); True when one was written.

    Spark reads a sink directory through every batch's entry since the last
    compaction: a missing one fails the read. Every ``compact_interval``-th
    entry is a compaction (``<batch>.compact``), holding every file of the
    entries before it.
    """
    log = os.path.join(path, "_spark_metadata")
    if not os.path.isdir(log):
        return False
    plain, compact = os.path.join(log, str(batch_id)), os.path.join(log, f"{batch_id}.compact")
    if os.path.exists(plain) or os.path.exists(compact):
        return False
    lines = ["v1"]
    target = plain
    if (batch_id + 1) % compact_interval == 0:
        target = compact
        start = batch_id - compact_interval
        for earlier in range(max(start, 0), batch_id):
            for name in (f"{earlier}.compact", str(earlier)):
                entry = os.path.join(log, name)
                if os.path.exists(entry) and (name.endswith(".compact") or earlier > start):
                    with open(entry, encoding="utf-8") as f:
                        lines += [line for line in f.read().splitlines()[1:] if line]
                    break
    tmp = f"{target}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, target)
    return True
