"""Apply a :class:`~krishiv_py.planner.spark.recipe.SparkRecipe` to a SparkSession."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.names import (
    BUCKET,
    LANE,
    LATE_FLAG,
    LOOKUP_FOUND,
    LOOKUP_KEY,
    OUTPUT_DDL,
    PACKED_DDL,
    ROUTE,
    ROUTED_DDL,
    ROWS,
    STATE_DDL,
    SUBQUERY,
    TICK,
    WATERMARK_MARKER,
    late_observation,
    source_view,
)
from krishiv_py.planner.spark import recipe as r
from krishiv_py.planner.sql import quote
from krishiv_py.runtime.late_rows import LateRows
from krishiv_py.runtime.lookup import table_frame
from krishiv_py.runtime.remote import is_remote
from krishiv_py.runtime.sources import ReadPaths, reader_for
from krishiv_py.runtime.udf import register_udfs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.checkpoint import CheckpointLayout

__all__ = ["build_after", "build_dataframe"]


def build_dataframe(
    spark: SparkSession,
    recipe: r.SparkRecipe,
    observations: dict[str, Any] | None = None,
    *,
    ticks_path: str | None = None,
    markers_path: str | None = None,
    observe: bool = True,
    checkpoint: CheckpointLayout | None = None,
    scratch: str | None = None,
) -> DataFrame:
    """Build the DataFrame for ``recipe``.

    ``observations``, when given, receives one ``pyspark.sql.Observation`` per
    observed source (batch jobs read their metrics from these).
    ``ticks_path`` is the stateful operator's tick source directory and
    ``markers_path`` the directory of idle-source markers (when not given,
    e.g. for ``explain()``, empty ones are made under ``scratch``, or the
    system's temporary directory when None); ``checkpoint`` the
    streaming query's checkpoint layout, where the stateful operator's map tasks
    read each micro-batch's watermark. ``observe=False`` leaves the
    recipe's observed metrics out (a bounded run whose metrics nobody can
    read: Spark computes them row by row, outside generated code).
    """
    import tempfile

    register_udfs(spark, recipe.udfs)
    if markers_path is None and recipe.idle:
        markers_path = tempfile.mkdtemp(prefix="krishiv-idle-", dir=scratch)
    paths = ReadPaths(
        checkpoint=checkpoint,
        ticks=ticks_path,
        markers=markers_path,
        observe=observe,
        scratch=scratch,
    )
    if not observe and _as_one_query(recipe.root) and _ordinals(spark) and not is_remote(spark):
        # (Spark Connect analyses a plan when it runs, after the temporary views are gone.)
        return _build_sql(spark, recipe.root, paths)
    return _build(spark, recipe.root, observations, paths)


def build_after(
    spark: SparkSession, after: r.AfterWindow, results: DataFrame, observations: dict[str, Any]
) -> DataFrame:
    """The stages of ``after`` over ``results`` (one micro-batch's window results).

    ``observations`` receives the stages' observed arithmetic failures.
    """
    paths = ReadPaths(ticks=None, markers=None, observe=True)
    return _build(spark, after.root, observations, paths, results=results)


def _ordinals(spark: SparkSession) -> bool:
    """Whether ``GROUP BY 1, 2`` means columns here (Spark's default; a session can turn it off)."""
    return str(spark.conf.get("spark.sql.groupByOrdinal", "true")).lower() == "true"


def _as_one_query(node: r.RecipeNode) -> bool:
    """Whether ``node`` is a batch plan :func:`_build_sql` writes as one SQL query."""
    if isinstance(node, r.ReadSource):
        return not node.streaming and reader_for(node.kind).batch_sql
    if isinstance(node, r.SelectExprs | r.FilterExpr | r.WithWatermark | r.Observe | r.GroupAgg):
        return _as_one_query(node.child)
    return False  # unions (by name) and the stateful operator keep the DataFrame calls


def _build_sql(spark: SparkSession, root: r.RecipeNode, paths: ReadPaths) -> DataFrame:
    """Build a batch plan with one ``spark.sql`` call instead of a DataFrame call per step.

    Each DataFrame call is a Py4J round trip and an analysis of the whole
    plan so far; a short bounded job paid ~0.1-0.2 s for that. The recipe's
    expressions are SQL already, so the steps nest as subqueries; sources
    are temporary views for the duration of the call (the plan keeps
    what they read). A watermark does nothing in a batch job and is left out.
    """
    import uuid

    views: list[str] = []

    def sql(node: r.RecipeNode) -> str:
        if isinstance(node, r.ReadSource):
            name = source_view(uuid.uuid4().hex)
            reader_for(node.kind).read(spark, node, paths).createOrReplaceTempView(name)
            views.append(name)
            return f"SELECT * FROM `{name}`"
        if isinstance(node, r.WithWatermark | r.Observe):
            return sql(node.child)
        if isinstance(node, r.SelectExprs):
            return f"SELECT {', '.join(node.exprs)} FROM ({sql(node.child)}) AS {SUBQUERY}"
        if isinstance(node, r.FilterExpr):
            return f"SELECT * FROM ({sql(node.child)}) AS {SUBQUERY} WHERE {node.condition}"
        assert isinstance(node, r.GroupAgg)
        # GROUP BY ordinals: the keys may carry aliases, which GROUP BY does not take.
        by = ", ".join(str(i + 1) for i in range(len(node.keys)))
        group = f" GROUP BY {by}" if node.keys else ""
        items = ", ".join((*node.keys, *node.aggs))
        return f"SELECT {items} FROM ({sql(node.child)}) AS {SUBQUERY}{group}"

    try:
        return spark.sql(sql(root))
    finally:
        for name in views:
            spark.catalog.dropTempView(name)


def _build(
    spark: SparkSession,
    node: r.RecipeNode,
    obs: dict[str, Any] | None,
    paths: ReadPaths,
    *,
    results: DataFrame | None = None,
) -> DataFrame:
    from pyspark.sql import functions as F

    if isinstance(node, r.ReadSource):
        if node.kind == "results":
            assert results is not None, "stages after the window run over a micro-batch's results"
            return results
        return reader_for(node.kind).read(spark, node, paths)
    if isinstance(node, r.StreamJoin):
        return _stream_join(spark, node, obs, paths)
    if isinstance(node, r.LookupTable):
        return _lookup(spark, node, _build(spark, node.child, obs, paths, results=results), paths)
    if isinstance(node, r.UnionAll):
        parts = [_build(spark, c, obs, paths, results=results) for c in node.children]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out
    child = _build(spark, node.child, obs, paths, results=results)
    if isinstance(node, r.StatefulApply):
        sides = {level: _build(spark, side, obs, paths) for level, side in node.side_inputs}
        return _stateful(spark, node, child, paths, sides)
    if isinstance(node, r.MapArrow):
        return child.mapInArrow(node.function, node.schema)
    if isinstance(node, r.SelectExprs):
        return child.selectExpr(*node.exprs)
    if isinstance(node, r.FilterExpr):
        return child.filter(node.condition)
    if isinstance(node, r.WithWatermark):
        return child.withWatermark(node.column, node.delay)
    if isinstance(node, r.Observe):
        if not paths.observe:
            return child
        exprs = [F.expr(e) for e in node.exprs]
        if obs is None:
            return child.observe(node.name, *exprs)
        from pyspark.sql import Observation

        obs[node.name] = Observation(node.name)
        return child.observe(obs[node.name], *exprs)
    assert isinstance(node, r.GroupAgg)
    return child.groupBy(*[F.expr(k) for k in node.keys]).agg(*[F.expr(a) for a in node.aggs])


def _lookup(spark: SparkSession, node: r.LookupTable, rows: DataFrame, paths: ReadPaths) -> DataFrame:
    """``rows`` with the table's rows of equal keys: Spark's left join of a stream (or a batch) and
    the table, read again in each micro-batch (a Parquet table's files listed again too:
    :mod:`krishiv_py.runtime.lookup`); an inner lookup drops a data row without a match after it."""
    from pyspark.sql import functions as F

    table = _table(spark, node.table, paths)
    keys = [f"{LOOKUP_KEY}{i}" for i in range(len(node.on))]
    right = table.select(
        *(F.col(quote(k)).alias(alias) for k, alias in zip(node.on, keys, strict=True)),
        *(F.col(quote(src)).alias(dst) for src, dst in node.columns),
        F.lit(True).alias(LOOKUP_FOUND),
    )
    condition = None
    for k, alias in zip(node.on, keys, strict=True):
        same = F.col(quote(k)) == F.col(quote(alias))
        condition = same if condition is None else condition & same
    joined = rows.join(right, condition, "left")
    if node.how == "inner":  # (a marker row of the stream passes: it carries the watermark)
        joined = joined.filter(f"{quote(r.KIND)} <> 0 OR {quote(LOOKUP_FOUND)} IS NOT NULL")
    return joined.drop(*keys, LOOKUP_FOUND)


def _table(spark: SparkSession, node: r.RecipeNode, paths: ReadPaths) -> DataFrame:
    """A lookup join's table: a Parquet directory through the reader that lists it each time."""
    if isinstance(node, r.ReadSource) and node.kind == "files" and node.format == "parquet" and node.path:
        return table_frame(spark, node.path, node.schema.ddl())
    if isinstance(node, r.SelectExprs | r.FilterExpr):
        child = _table(spark, node.child, paths)
        return (
            child.selectExpr(*node.exprs) if isinstance(node, r.SelectExprs) else child.filter(node.condition)
        )
    return _build(spark, node, None, paths)


def _stream_join(
    spark: SparkSession, node: r.StreamJoin, obs: dict[str, Any] | None, paths: ReadPaths
) -> DataFrame:
    """Spark's join of the two sides, each carrying its watermark in its join time column."""
    from pyspark.sql import functions as F

    frames: list[DataFrame] = []
    for child, (name, sql), cols in (
        (node.left, node.left_time, node.left_columns),
        (node.right, node.right_time, node.right_columns),
    ):
        frame = _build(spark, child, obs, paths)
        if node.drops_late:
            frame = _drop_late(frame, len(frames), node.shift_ms, obs, paths)
        time = F.expr(sql)
        # The join's late-row filter and state eviction read the column that has the watermark
        # metadata; the global watermark itself comes from the watermark operators upstream.
        time = (
            time.alias(name, metadata={"spark.watermarkDelayMs": 0}) if node.streaming else time.alias(name)
        )
        frames.append(frame.select(*[F.col(f"`{c}`") for c in cols], time))
    joined = frames[0].join(frames[1], F.expr(node.condition), node.how)
    return joined.selectExpr(*node.exprs)


def _drop_late(
    frame: DataFrame, side: int, shift_ms: int, obs: dict[str, Any] | None, paths: ReadPaths
) -> DataFrame:
    """``frame`` without its rows behind their micro-batch's watermark, counted as very late
    (:mod:`krishiv_py.runtime.late_rows`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    schema = StructType([*frame.schema.fields, StructField(LATE_FLAG, BooleanType())])
    flagged = frame.mapInArrow(LateRows(paths.checkpoint, shift_ms), schema)
    count = F.expr(f"count(CASE WHEN {quote(LATE_FLAG)} THEN 1 END)").alias(ROWS)
    if paths.observe:
        flagged = flagged.observe(late_observation(side), count)
    return flagged.filter(f"NOT {quote(LATE_FLAG)}").drop(LATE_FLAG)


def _stateful(
    spark: SparkSession,
    node: r.StatefulApply,
    child: DataFrame,
    paths: ReadPaths,
    sides: dict[int, DataFrame],
) -> DataFrame:
    """Pack the encoded rows per key bucket, group them by bucket and apply krishiv's operator."""
    import tempfile

    from krishiv_py.runtime.map_watermark import BatchWatermark
    from krishiv_py.stateful import operator as op

    # A bounded run fires once, at its end: its map tasks send no highest event time.
    spec = node.operator if node.streaming else attrs.evolve(node.operator, fire_lag_ms=None)
    ticks = paths.ticks
    # Map tasks merge on-time rows before the shuffle when they can learn the watermark: a
    # bounded run has none until its end, a streaming one's is in the query's offset log.
    auto = spec.auto is not None
    under = BatchWatermark(
        checkpoint=paths.checkpoint, shift_ms=spec.shift_ms, streaming=node.streaming, auto=auto
    )

    # With an automatic lag the map tasks report the event times of the rows they merge along
    # with them, the operator those of the rest: the driver gets every row's exactly.
    def pack(batches: Any) -> Any:
        return op.pack_rows(spec, batches, merge_under=under)

    packed = child.mapInArrow(pack, PACKED_DDL)
    ddl = OUTPUT_DDL if spec.then is None else ROUTED_DDL
    if not node.streaming:

        def bounded(key: Any, frame: Any) -> Any:
            return op.run_bounded_bucket(spec, key, frame)

        return _staged(spec, packed.groupBy(BUCKET).applyInPandas(bounded, ddl), paths, sides, None)

    tick_source = _tick_source(spark, ticks or tempfile.mkdtemp(prefix="krishiv-ticks-", dir=paths.scratch))
    tick_rows = tick_source.selectExpr(*node.tick_exprs)
    if node.carrier == "krishiv-files":
        out = _krishiv_files(spec, packed.unionByName(tick_rows), ddl, paths, under)
        return _staged(spec, out, paths, sides, under)
    if node.carrier == "one-task":
        # As krishiv-files, every bucket in one task: no shuffle, and one hand-over to Python per
        # micro-batch that packs the rows and runs the buckets (the ticks come flagged among them).
        state_path = _state_path(paths)

        def one_task(batches: Any) -> Any:
            return op.run_one_task(spec, batches, _batch_id(), under.of_batch, state_path, merge_under=under)

        flagged = tick_source.selectExpr(quote(BUCKET), f"true AS {quote(TICK)}")
        rows = child.unionByName(flagged, allowMissingColumns=True).coalesce(1)
        return _staged(spec, rows.mapInArrow(one_task, ddl), paths, sides, under)

    out = _state_store(spec, packed, tick_rows, ddl, under if auto else None)
    return _staged(spec, out, paths, sides, under)


def _tick_source(spark: SparkSession, path: str) -> DataFrame:
    """The internal source whose files wake the buckets holding state after the watermark moved."""
    return (
        spark.readStream.format("parquet")
        .schema(f"{BUCKET} int")
        .option("maxFilesPerTrigger", "1")
        .option("maxFileAge", "36500d")
        .load(path)
    )


def _state_store(spec: Any, packed: DataFrame, tick_rows: DataFrame, ddl: str, under: Any) -> DataFrame:
    """The operator over ``packed`` rows and ``tick_rows`` by bucket, its state in Spark's state
    store (``applyInPandasWithState``); ``under``: the watermark map tasks merged under (an
    automatic lag's), else None."""
    from pyspark.sql import functions as F

    from krishiv_py.stateful import operator as op

    def bucket(key: Any, frames: Any, state: Any) -> Any:
        return op.run_bucket(spec, key, frames, state, under)

    # Spark hands the operator the watermark only when an input column carries
    # watermark metadata, which the packed rows do not: an all-null column with
    # that metadata stands in for the event time; the watermark operators upstream
    # are unchanged.
    marker = F.lit(None).cast("timestamp").alias(WATERMARK_MARKER, metadata={"spark.watermarkDelayMs": 0})
    packed = packed.select("*", marker)
    tick_rows = tick_rows.select("*", F.lit(None).cast("timestamp").alias(WATERMARK_MARKER))
    grouped = packed.unionByName(tick_rows).groupBy(BUCKET)
    return grouped.applyInPandasWithState(bucket, ddl, STATE_DDL, "append", "NoTimeout")


def _krishiv_files(spec: Any, rows: DataFrame, ddl: str, paths: ReadPaths, under: Any) -> DataFrame:
    """The operator over ``rows`` (packed rows and ticks) by bucket, its state krishiv's own (one
    file per bucket and micro-batch under the checkpoint), the watermark and the batch's start
    time the offset log's: Spark keeps no state here."""
    from krishiv_py.stateful import operator as op

    state_path = _state_path(paths)

    def bucket_files(key: Any, table: Any) -> Any:
        return op.run_bucket_files(spec, key, table, _batch_id(), under.of_batch, state_path)

    if not spec.key_groups:
        return rows.groupBy(BUCKET).applyInArrow(bucket_files, ddl)
    # One partition per task, whatever shuffle partitions the query's offset log restores:
    # each task's rows carry a number that Spark's hash partitioning puts on its own partition.
    from pyspark.sql import functions as F

    from krishiv_py.stateful.key_groups import lanes

    lane = F.element_at(F.array(*[F.lit(v) for v in lanes(spec.buckets)]), F.col(BUCKET) + 1)
    spread = rows.withColumn(LANE, lane).repartition(spec.buckets, LANE)
    return spread.groupBy(BUCKET, LANE).applyInArrow(bucket_files, ddl)


def _state_path(paths: ReadPaths) -> str:
    """Where the files carriers keep the operator's state: under the checkpoint (a query built
    without one, for ``explain()``, gets a temporary directory it never writes)."""
    import tempfile

    if paths.checkpoint is not None:
        return paths.checkpoint.operator_state
    return tempfile.mkdtemp(prefix="krishiv-state-", dir=paths.scratch)


def _staged(
    spec: Any, out: DataFrame, paths: ReadPaths, sides: dict[int, DataFrame], watermark: Any
) -> DataFrame:
    """With a stage keyed by other columns after the operator: its rows grouped by stage bucket into it.

    ``sides``: each join stage's other side (encoded rows) by the stage's
    level, routed by its keys into its groups; ``watermark`` tells a stage task its micro-batch's
    watermark (None: a bounded run). The stage's state goes under the checkpoint (a
    query built without one, for ``explain()``, gets a temporary directory
    it never writes).
    """
    import tempfile

    from krishiv_py.stateful import operator as op
    from krishiv_py.stateful.stage import levels

    if spec.then is None:
        return out
    root = paths.checkpoint.stages if paths.checkpoint is not None else None
    path = root or tempfile.mkdtemp(prefix="krishiv-stage-", dir=paths.scratch)
    staged = attrs.evolve(spec, then=spec.then.with_path(path))

    def router(level: int) -> Any:
        def route(batches: Any) -> Any:
            return op.route_side(staged, batches, level=level)

        return route

    def runner(level: int) -> Any:  # (Spark reads the function's arguments: key and table only)
        def run(key: Any, table: Any) -> Any:
            if watermark is None:
                return op.run_stage(staged, key, table, None, level=level)
            return op.run_stage(staged, key, table, _batch_id(), watermark, level=level)

        return run

    count = len(levels(spec.then))
    for level in range(count):  # each stage after the one before it, its rows moved once more
        if level in sides:  # a join stage's other side, routed into its groups
            out = out.unionByName(sides[level].mapInArrow(router(level), ROUTED_DDL))
        out = out.groupBy(ROUTE).applyInArrow(runner(level), ROUTED_DDL if level < count - 1 else OUTPUT_DDL)
    return out


def _batch_id() -> int:
    """The streaming micro-batch a task runs for (Spark sets it on every task of the micro-batch)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    if value is None:
        raise RuntimeError("a stage of krishiv's operator ran outside a streaming micro-batch")
    return int(value)
