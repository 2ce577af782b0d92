"""The stages after the window: one loop over a recipe's stages, on every lowering.

A recipe's :attr:`~krishiv_py.planner.spark.recipe.SparkRecipe.stages` run
in order over each micro-batch's results (a bounded run's rows are batch 0):
the native lowering's ``foreachBatch``, a bounded run and the stateful
operator's collector all go through :class:`Stages`. Each kind of stage has
one runner behind :class:`StageRunner`, created once per job:

- stateless stages (:class:`~krishiv_py.planner.spark.recipe.AfterWindow`:
  filter, select, with_column; a native micro-batch's top-N) run as a small
  Spark batch job on the rows, so every expression means what it means in
  the other lowerings;
- a top-N of the bounded and native lowerings with ties kept
  (:class:`~krishiv_py.planner.spark.recipe.DriverRank`) is ranked in Arrow
  (:mod:`krishiv_py.stateful.ranking`).

No stage keeps state. On the stateful lowering a window over windowed
results and window top-N run in krishiv's operator after the first window
(in its call when keyed alike, else a stage of their own, ``applyInArrow``),
taking its corrections as retractions; only the filters and projections
after the last operator run here.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import JobError
from krishiv_py.planner.spark.recipe import AfterStage, AfterWindow, DriverRank
from krishiv_py.runtime.build import build_after
from krishiv_py.runtime.sources import arrow_frame
from krishiv_py.types import Schema, conform

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.planner.spark.recipe import SparkRecipe

__all__ = ["StageOutput", "StageRunner", "Stages", "input_schema"]


@attrs.frozen
class StageOutput:
    """What a stage (or a recipe's stages, in order) made of one micro-batch's rows."""

    table: pa.Table
    #: Values the stages' arithmetic gave no result for.
    arithmetic_failures: int = 0


class StageRunner(abc.ABC):
    """One stage after the window, created once per job; :meth:`step` runs it on one micro-batch."""

    @abc.abstractmethod
    def step(self, table: pa.Table) -> StageOutput:
        """The stage over ``table``, one micro-batch's rows."""

    def step_frame(self, frame: DataFrame, schema: Schema) -> StageOutput:
        """The stage over rows Spark has not collected yet (``schema``): collected, then :meth:`step`."""
        return self.step(conform(frame.toArrow(), schema))


class AfterWindowRunner(StageRunner):
    """Stateless stages as a small Spark batch job."""

    def __init__(self, stage: AfterWindow, spark: SparkSession | None) -> None:
        self._stage = stage
        self._spark = spark

    def step(self, table: pa.Table) -> StageOutput:
        stage = self._stage
        if not table.num_rows:
            return StageOutput(conform(stage.schema.to_arrow().empty_table(), stage.schema))
        if stage.arrow is not None:  # every expression evaluates in Arrow as in Spark SQL: no job
            rows, failures = stage.arrow.apply_counted(conform(table, stage.window_schema))
            return StageOutput(conform(rows, stage.schema), failures)
        spark = self._spark
        if spark is None:
            raise JobError("stages after the window need the job's SparkSession")
        observations: dict[str, Any] = {}
        # A stateful micro-batch's results come in one chunk per bucket, empty ones included.
        frame = arrow_frame(spark, table)
        out = build_after(spark, stage, frame, observations).toArrow()
        failures = sum(int(v or 0) for o in observations.values() for v in o.get.values())
        return StageOutput(conform(out, stage.schema), failures)

    def step_frame(self, frame: DataFrame, schema: Schema) -> StageOutput:
        """The stages on ``frame`` itself, in its session (a native micro-batch, not collected first).

        Their arithmetic failures are not read (0): a native job counts none
        after the window.
        """
        out = build_after(frame.sparkSession, self._stage, frame, {}).toArrow()
        return StageOutput(conform(out, self._stage.schema))


class DriverRankRunner(StageRunner):
    """Top-N with ties kept, ranked in Arrow (``rank() <= n``): no state."""

    def __init__(self, stage: DriverRank) -> None:
        self._stage = stage

    def step(self, table: pa.Table) -> StageOutput:
        from krishiv_py.stateful.ranking import rank_all

        s = self._stage
        return StageOutput(rank_all(table, s.n, by=s.by, group=s.group, ascending=s.ascending))


def runner_for(stage: AfterStage, spark: SparkSession | None) -> StageRunner:
    """The runner of ``stage``; ``spark`` runs the stateless stages."""
    if isinstance(stage, AfterWindow):
        return AfterWindowRunner(stage, spark)
    return DriverRankRunner(stage)


def input_schema(recipe: SparkRecipe) -> Schema:
    """The columns the first stage reads: the window's results (the recipe's output without stages)."""
    first = recipe.stages[0] if recipe.stages else None
    if isinstance(first, AfterWindow):
        return first.window_schema
    return recipe.output_schema


class Stages:
    """A recipe's stages after the window, in order, their runners created once per job.

    ``spark`` runs the stateless stages (None: a native micro-batch's own
    session).
    """

    def __init__(self, recipe: SparkRecipe, *, spark: SparkSession | None = None) -> None:
        #: The columns of the rows the stages start from (the window's results).
        self.input_schema = input_schema(recipe)
        self.runners: tuple[StageRunner, ...] = tuple(runner_for(s, spark) for s in recipe.stages)

    def run(self, table: pa.Table) -> StageOutput:
        """Every stage over ``table``, one micro-batch's rows, in order."""
        return _chain(self.runners, StageOutput(table))

    def run_frame(self, frame: DataFrame) -> StageOutput:
        """Every stage over a micro-batch Spark has not collected yet: the first takes it as it is."""
        if not self.runners:
            return StageOutput(conform(frame.toArrow(), self.input_schema))
        first, *rest = self.runners
        return _chain(rest, first.step_frame(frame, self.input_schema))


def _chain(runners: Sequence[StageRunner], out: StageOutput) -> StageOutput:
    """``runners`` in order over ``out``'s table, their failures added."""
    table, failures = out.table, out.arithmetic_failures
    for runner in runners:
        step = runner.step(table)
        table, failures = step.table, failures + step.arithmetic_failures
    return StageOutput(table, failures)
