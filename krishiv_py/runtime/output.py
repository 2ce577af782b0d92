"""Handing a job's rows to its sinks: open the writers, deliver each micro-batch.

The runtime knows a sink only through :mod:`krishiv_py.sinks`' protocol:
:func:`open_writers` opens the sink (and a late-event side output) once
per job, :func:`deliver` hands over one micro-batch, guarded when the
writer runs user code (:func:`krishiv_py.sinks.user_code`), so that with
``start(quarantine_dir=...)`` a batch it fails on is set aside instead of
failing the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from krishiv_py.runtime.quarantine import Quarantine, guarded
from krishiv_py.sinks import Sink, SinkContext, SinkWriter, user_code
from krishiv_py.types import Schema

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.planner.spark import SparkRecipe

__all__ = ["accumulation", "conformed_late", "deliver", "late_schema", "open_writers"]


def accumulation(recipe: SparkRecipe) -> str | None:
    """How the recipe's window results relate across firings (None: no window results)."""
    if not recipe.windowed:
        return None
    stateful = recipe.stateful
    # Spark's own operators fire each window once: every firing is the whole result.
    return str(stateful.operator.kernel.accumulation) if stateful is not None else "accumulating"


def open_writers(
    sink: Sink,
    recipe: SparkRecipe,
    *,
    spark: Any,
    checkpoint_dir: str | None = None,
    query_name: str | None = None,
    write_on_server: bool = False,
) -> tuple[SinkWriter, SinkWriter | None]:
    """Open ``sink`` for the recipe's results, and the late-event side output if it has one."""
    writer = sink.open(
        SinkContext(
            schema=recipe.output_schema,
            checkpoint_dir=checkpoint_dir,
            query_name=query_name,
            write_on_server=write_on_server,
            accumulation=accumulation(recipe),
            join_identity=recipe.join_identity,
            result_key=recipe.result_key,
            spark=spark,
        )
    )
    open_late = getattr(recipe.late_handler, "open", None)
    if open_late is None:
        return writer, None
    late_writer: SinkWriter = open_late(
        SinkContext(
            schema=Schema.from_arrow(late_schema(recipe)),
            output="late events",
            checkpoint_dir=checkpoint_dir,
            query_name=query_name,
            spark=spark,
        )
    )
    return writer, late_writer


def late_schema(recipe: SparkRecipe) -> pa.Schema:
    """The rows a late-event handler receives: the operator's input columns, classification, watermark."""
    assert recipe.stateful is not None, "late events come from the stateful lowering"
    schema: pa.Schema = recipe.stateful.operator.handed_late_schema
    return schema


def conformed_late(late: pa.Table, layout: tuple[tuple[str, pa.Field[Any]], ...]) -> pa.Table:
    """``late`` as the operator sent it, in the late-event table's columns (``layout``: each
    column's name as sent, and its field in the table): a column it lacks as nulls.

    A job with a join stage has late rows of two layouts (the operator's
    input, the stage's other side): the handler always gets one.
    """
    import pyarrow as pa

    have = set(late.column_names)
    columns = [
        late.column(sent).cast(f.type) if sent in have else pa.nulls(late.num_rows, f.type)
        for sent, f in layout
    ]
    return pa.table(columns, schema=pa.schema([f for _, f in layout]))


def deliver(writer: SinkWriter, table: pa.Table, batch_id: int, quarantine: Quarantine | None) -> None:
    """Hand one micro-batch to ``writer``; user code is guarded (quarantined, or a named error)."""
    caller = user_code(writer)
    if caller is None:
        writer.write(table, batch_id)
        return
    guarded(quarantine, "sink", batch_id, table, lambda: writer.write(table, batch_id), caller=caller)
