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
- a cascade's second window and window top-N keep their state on the
  driver, per batch id in the checkpoint
  (:mod:`krishiv_py.runtime.driver_state`), so a micro-batch Spark runs
  again after a restart gives the same rows;
- a batch job's top-N is ranked in Arrow (:mod:`krishiv_py.stateful.ranking`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import JobError
from krishiv_py.names import RESULT_KIND, RESULT_ROW
from krishiv_py.planner.spark.recipe import AfterStage, AfterWindow, CascadeStage, DriverRank, TopNStage
from krishiv_py.runtime.build import build_after
from krishiv_py.runtime.sources import arrow_frame
from krishiv_py.stateful.protocol import NOT_DUE
from krishiv_py.types import Schema, conform

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.checkpoint import CheckpointLayout
    from krishiv_py.planner.spark.recipe import SparkRecipe

__all__ = ["StageOutput", "StageRunner", "Stages", "input_schema"]


@attrs.frozen
class StageOutput:
    """What a stage (or a recipe's stages, in order) made of one micro-batch's rows."""

    table: pa.Table
    #: Values the stages' arithmetic gave no result for.
    arithmetic_failures: int = 0
    #: A cascade's counts (``emitted``, ``retracted``, ``very_late_results``): the job's
    #: results are then its second window's. Empty when no cascade ran.
    counts: Mapping[str, int] = attrs.field(factory=dict)


class StageRunner(abc.ABC):
    """One stage after the window, created once per job; :meth:`step` runs it on one micro-batch."""

    #: The windows the stage keeps on the driver (counted in the job's ``state_windows``).
    state_windows: int = 0
    #: When the stage has something to fire or delete at a watermark (None: nothing).
    next_due_ms: int | None = None

    @abc.abstractmethod
    def step(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        """The stage over ``table``; ``watermark``: the operator's after the micro-batch, if any."""

    def step_frame(self, frame: DataFrame, schema: Schema, batch_id: int) -> StageOutput:
        """The stage over rows Spark has not collected yet (``schema``): collected, then :meth:`step`."""
        return self.step(conform(frame.toArrow(), schema), batch_id, None)


class AfterWindowRunner(StageRunner):
    """Stateless stages as a small Spark batch job; ``carry``: keep each row's index (``RESULT_ROW``)."""

    def __init__(self, stage: AfterWindow, spark: SparkSession | None, *, carry: bool = False) -> None:
        self._stage = stage
        self._spark = spark
        self._carry = carry

    def step(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        import pyarrow as pa

        stage, carry = self._stage, self._carry
        if carry:
            table = table.append_column(RESULT_ROW, pa.array(range(table.num_rows), pa.int64()))
        if not table.num_rows:
            return StageOutput(_empty(stage, carry))
        spark = self._spark
        if spark is None:
            raise JobError("stages after the window need the job's SparkSession")
        observations: dict[str, Any] = {}
        # A stateful micro-batch's results come in one chunk per bucket, empty ones included.
        frame = arrow_frame(spark, table)
        out = build_after(spark, stage, frame, observations).toArrow()
        failures = sum(int(v or 0) for o in observations.values() for v in o.get.values())
        if carry:
            rows = out.column(RESULT_ROW)
            out = conform(out.drop_columns([RESULT_ROW]), stage.schema).append_column(RESULT_ROW, rows)
            return StageOutput(out, failures)
        return StageOutput(conform(out, stage.schema), failures)

    def step_frame(self, frame: DataFrame, schema: Schema, batch_id: int) -> StageOutput:
        """The stages on ``frame`` itself, in its session (a native micro-batch, not collected first).

        Their arithmetic failures are not read (0): a native job counts none
        after the window.
        """
        out = build_after(frame.sparkSession, self._stage, frame, {}).toArrow()
        return StageOutput(conform(out, self._stage.schema))


class CascadeRunner(StageRunner):
    """The second window of a cascade on the driver: its state, kept per batch id in ``path``.

    The stages between the two windows run first, each row carrying its
    index in the micro-batch's results (:data:`~krishiv_py.names.RESULT_ROW`).
    """

    def __init__(self, stage: CascadeStage, spark: SparkSession | None, path: str | None) -> None:
        from krishiv_py.runtime.driver_state import DriverStateStore

        self._stage = stage
        self._between = (
            AfterWindowRunner(stage.between, spark, carry=True) if stage.between is not None else None
        )
        self._store = DriverStateStore(path, ("emitted", "live")) if path is not None else None
        self._state: Any = None
        self._batch: int | None = None

    def step(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        import numpy as np

        from krishiv_py.stateful import cascade

        stage, failures = self._stage, 0
        kept: pa.Table | None = None
        if self._between is not None:
            between = self._between.step(table, batch_id, watermark)
            kept, failures = between.table, between.arithmetic_failures
        if self._batch is None or self._batch != batch_id - 1:  # a restart, or a batch run again
            loaded = self._store.load_before(batch_id) if self._store is not None else None
            self._state = None
            if loaded is not None:
                tables, mark = loaded
                self._state = cascade.CascadeState(tables["live"], tables["emitted"], mark)
        if kept is None:
            names = [c for c in table.column_names if c != RESULT_KIND]
            kept, rows = table.select(names), np.arange(table.num_rows, dtype=np.int64)
        else:
            rows = kept.column(RESULT_ROW).to_numpy().astype(np.int64)
            kept = kept.drop_columns([RESULT_ROW])
        changes = cascade.changes_of(table, stage.identity, kept, rows, retracting=stage.upstream_retracting)
        state, out = cascade.step(stage.spec, self._state, changes, watermark)
        if self._store is not None:
            self._store.save(batch_id, {"emitted": state.emitted, "live": state.live}, state.watermark_ms)
        self._state, self._batch = state, batch_id
        self.next_due_ms = out.next_due_ms if out.next_due_ms != NOT_DUE else None
        self.state_windows = state.live.num_rows
        counts = {"emitted": out.emitted, "retracted": out.retracted, "very_late_results": out.very_late}
        return StageOutput(conform(_with_timestamps(out.results), stage.schema), failures, counts)


class TopNRunner(StageRunner):
    """Window top-N on the driver: its state kept per batch id in ``path``."""

    def __init__(self, stage: TopNStage, spark: SparkSession | None, path: str | None) -> None:
        from krishiv_py.runtime.driver_state import DriverStateStore

        self._stage = stage
        self._rank = AfterWindowRunner(stage.rank, spark)
        self._store = DriverStateStore(path, ("shown", "live")) if path is not None else None
        self._state: Any = None
        self._batch: int | None = None

    def step(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        from krishiv_py.stateful import topn

        stage = self._stage
        if self._batch is None or self._batch != batch_id - 1:  # a restart, or a batch run again
            loaded = self._store.load_before(batch_id) if self._store is not None else None
            self._state = None if loaded is None else topn.TopNState(loaded[0]["live"], loaded[0]["shown"])
        failures = 0

        def rank(rows: pa.Table) -> pa.Table:
            nonlocal failures
            ranked = self._rank.step(rows, batch_id, watermark)
            failures += ranked.arithmetic_failures
            return ranked.table

        state, out = topn.step(stage.spec, self._state, table, watermark, rank)
        if self._store is not None:
            self._store.save(batch_id, {"shown": state.shown, "live": state.live}, watermark)
        self._state, self._batch = state, batch_id
        return StageOutput(conform(out, stage.schema), failures)


class DriverRankRunner(StageRunner):
    """Top-N with ties kept, ranked in Arrow (``rank() <= n``): no state."""

    def __init__(self, stage: DriverRank) -> None:
        self._stage = stage

    def step(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        from krishiv_py.stateful.ranking import rank_all

        s = self._stage
        return StageOutput(rank_all(table, s.n, by=s.by, group=s.group, ascending=s.ascending))


def runner_for(
    stage: AfterStage, spark: SparkSession | None, checkpoint: CheckpointLayout | None
) -> StageRunner:
    """The runner of ``stage``; a cascade's and top-N's state under ``checkpoint`` (None: in memory)."""
    if isinstance(stage, CascadeStage):
        return CascadeRunner(stage, spark, None if checkpoint is None else checkpoint.cascade)
    if isinstance(stage, TopNStage):
        return TopNRunner(stage, spark, None if checkpoint is None else checkpoint.top_n)
    if isinstance(stage, AfterWindow):
        return AfterWindowRunner(stage, spark)
    return DriverRankRunner(stage)


def input_schema(recipe: SparkRecipe) -> Schema:
    """The columns the first stage reads: the window's results (the recipe's output without stages)."""
    first = recipe.stages[0] if recipe.stages else None
    if isinstance(first, CascadeStage):
        return first.upstream_schema
    if isinstance(first, AfterWindow):
        return first.window_schema
    if isinstance(first, TopNStage):
        return first.schema  # top-N keeps the columns of what it ranks
    return recipe.output_schema


class Stages:
    """A recipe's stages after the window, in order, their runners created once per job.

    ``spark`` runs the stateless stages (None: a native micro-batch's own
    session); ``checkpoint`` keeps the driver's state (None: in memory).
    """

    def __init__(
        self,
        recipe: SparkRecipe,
        *,
        spark: SparkSession | None = None,
        checkpoint: CheckpointLayout | None = None,
    ) -> None:
        #: The columns of the rows the stages start from (the window's results).
        self.input_schema = input_schema(recipe)
        self.runners: tuple[StageRunner, ...] = tuple(runner_for(s, spark, checkpoint) for s in recipe.stages)

    def run(self, table: pa.Table, batch_id: int, watermark: int | None) -> StageOutput:
        """Every stage over ``table``, one micro-batch's rows, in order."""
        return _chain(self.runners, StageOutput(table), batch_id, watermark)

    def run_frame(self, frame: DataFrame, batch_id: int) -> StageOutput:
        """Every stage over a micro-batch Spark has not collected yet: the first takes it as it is."""
        if not self.runners:
            return StageOutput(conform(frame.toArrow(), self.input_schema))
        first, *rest = self.runners
        return _chain(rest, first.step_frame(frame, self.input_schema, batch_id), batch_id, None)

    @property
    def state_windows(self) -> int:
        """The windows the stages keep on the driver."""
        return sum(r.state_windows for r in self.runners)

    @property
    def next_due_ms(self) -> int | None:
        """When a stage has something to fire or delete at a watermark (None: nothing)."""
        due = [r.next_due_ms for r in self.runners if r.next_due_ms is not None]
        return min(due) if due else None


def _chain(
    runners: Sequence[StageRunner], out: StageOutput, batch_id: int, watermark: int | None
) -> StageOutput:
    """``runners`` in order over ``out``'s table, their failures added, their counts merged."""
    table, failures, counts = out.table, out.arithmetic_failures, dict(out.counts)
    for runner in runners:
        step = runner.step(table, batch_id, watermark)
        table, failures = step.table, failures + step.arithmetic_failures
        counts.update(step.counts)
    return StageOutput(table, failures, counts)


def _empty(stage: AfterWindow, carry: bool) -> pa.Table:
    import pyarrow as pa

    table = conform(stage.schema.to_arrow().empty_table(), stage.schema)
    return table.append_column(RESULT_ROW, pa.array([], pa.int64())) if carry else table


def _with_timestamps(results: pa.Table) -> pa.Table:
    """``window_start``/``window_end`` from int ms to timestamps."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in ("window_start", "window_end"):
        i = results.schema.get_field_index(name)
        us = pc.multiply(results.column(name), pa.scalar(1000, pa.int64()))
        results = results.set_column(i, name, us.cast(pa.timestamp("us", "UTC")))
    return results
