"""Apply a :class:`~krishiv_py.planner.spark.recipe.SparkRecipe` to a SparkSession."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from krishiv_py.planner.spark import recipe as r

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["build_dataframe"]


def build_dataframe(
    spark: SparkSession, recipe: r.SparkRecipe, observations: dict[str, Any] | None = None
) -> DataFrame:
    """Build the DataFrame for ``recipe``.

    ``observations``, when given, receives one ``pyspark.sql.Observation`` per
    observed source (batch jobs read their metrics from these).
    """
    return _build(spark, recipe.root, observations)


def _build(spark: SparkSession, node: r.RecipeNode, obs: dict[str, Any] | None) -> DataFrame:
    from pyspark.sql import functions as F

    if isinstance(node, r.ReadSource):
        return _read(spark, node)
    if isinstance(node, r.UnionAll):
        parts = [_build(spark, c, obs) for c in node.children]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out
    child = _build(spark, node.child, obs)
    if isinstance(node, r.SelectExprs):
        return child.selectExpr(*node.exprs)
    if isinstance(node, r.FilterExpr):
        return child.filter(node.condition)
    if isinstance(node, r.WithWatermark):
        return child.withWatermark(node.column, node.delay)
    if isinstance(node, r.Observe):
        exprs = [F.expr(e) for e in node.exprs]
        if obs is None:
            return child.observe(node.name, *exprs)
        from pyspark.sql import Observation

        obs[node.name] = Observation(node.name)
        return child.observe(obs[node.name], *exprs)
    assert isinstance(node, r.GroupAgg)
    return child.groupBy(*[F.expr(k) for k in node.keys]).agg(*[F.expr(a) for a in node.aggs])


def _read(spark: SparkSession, node: r.ReadSource) -> DataFrame:
    if node.kind == "records":
        return spark.createDataFrame(_with_hidden(node.records))
    ddl = node.schema.ddl()
    if node.kind == "memory":
        ddl += ", `__kp_kind` tinyint, `__kp_wm` bigint, `__kp_seq` bigint"
    reader: Any = spark.readStream if node.streaming else spark.read
    reader = reader.format(node.format).schema(ddl)
    for key, value in node.options:
        reader = reader.option(key, value)
    return reader.load(node.path)  # type: ignore[no-any-return]


def _with_hidden(table: Any) -> Any:
    """Add the hidden columns a source carries: data rows, arrival order = row order."""
    import numpy as np
    import pyarrow as pa

    n = table.num_rows
    return (
        table.append_column("__kp_kind", pa.array(np.zeros(n, dtype=np.int8)))
        .append_column("__kp_wm", pa.nulls(n, pa.int64()))
        .append_column("__kp_seq", pa.array(np.arange(n, dtype=np.int64)))
    )
