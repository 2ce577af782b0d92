"""Lower a logical plan to a :class:`~krishiv_py.planner.spark.recipe.SparkRecipe`.

:func:`lower` asks :mod:`.choose` for the lowering, lowers sources,
filters, projections, unions and watermarks with :mod:`.sources` and
windows with the lowering's window rule, then drops the hidden columns.

Examples
--------
>>> from krishiv_py.plan import nodes as n
>>> from krishiv_py.types import to_schema
>>> source = n.MemorySource(name="s", schema=to_schema("k string, t bigint"), path="/tmp/s")
>>> recipe = lower(source)
>>> recipe.lowering, recipe.windowed
('native', False)
>>> lower(source, force_bounded=True).lowering
'bounded'
"""

from __future__ import annotations

from krishiv_py._typing import Lowering
from krishiv_py.errors import PlanError
from krishiv_py.names import OUT_OBSERVE, RESULT_KIND, RESULT_ROW, ROW_KIND, ROWS
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import EventSlidingWindow, SlidingWindow, TimeIntervalWindow
from krishiv_py.planner.spark.choose import capabilities, choose, features_of, force
from krishiv_py.planner.spark.native import lower_join, lower_window, time_shift
from krishiv_py.planner.spark.recipe import (
    AfterStage,
    AfterWindow,
    CascadeStage,
    DriverRank,
    FilterExpr,
    Observe,
    ReadSource,
    RecipeNode,
    SelectExprs,
    SparkRecipe,
    TopNStage,
)
from krishiv_py.planner.spark.sliding import pane_choice, stream_pane_choice
from krishiv_py.planner.spark.sources import Lowerer, one_watermark, select_item, top_n
from krishiv_py.planner.spark.stateful import kernel_aggs, lower_stateful_join, lower_stateful_window
from krishiv_py.planner.sql import quote, to_sql
from krishiv_py.types import DataType, Field, Schema

__all__ = ["lower"]


def lower(plan: n.PlanNode, *, force_bounded: bool = False, lowering: Lowering | None = None) -> SparkRecipe:
    """Lower ``plan`` to a Spark recipe.

    Parameters
    ----------
    plan
        The logical plan.
    force_bounded
        Run as one batch job, reading unbounded memory sources as a snapshot
        of the batches sent so far (what ``collect()`` does); the same as
        ``lowering="bounded"``.
    lowering
        Use this lowering instead of the planner's choice; :class:`PlanError`
        if it cannot run ``plan`` exactly.
    """
    if force_bounded and lowering not in (None, "bounded"):
        raise PlanError(f"force_bounded=True asks for the bounded lowering, but lowering={lowering!r}")
    n.check_joins_complete(plan)
    snapshot = force_bounded or lowering == "bounded"
    if snapshot:
        chosen, reason = _snapshot(plan)
    elif lowering is not None:
        chosen, reason = force(plan, lowering, how=f"lowering={lowering!r}")
    else:
        chosen, reason = choose(plan)
    if chosen == "stateful":
        return _lower_stateful(plan, reason, streaming=not snapshot and not n.is_bounded(plan))
    streaming = chosen == "native"
    if n.joins_of(plan):
        reason = NATIVE_JOIN_REASON if streaming else BOUNDED_JOIN_REASON
    reason += "".join(f"; {why}" for why in _sliding_choices(plan, streaming=streaming))
    query = plan
    stages: tuple[AfterStage, ...] = ()
    if isinstance(plan, n.TopN) and _ranks_on_driver(plan):
        query = plan.input
        group = ("window_start", "window_end", *plan.keys)
        stages = (DriverRank(n=plan.n, by=plan.by, group=group, ascending=plan.ascending),)
        rows = "each micro-batch's results (foreachBatch)" if streaming else "the batch job's rows"
        reason += (
            f"; top_n ranks {rows} in Arrow on the driver (rank() with ties kept, an exact order for "
            "these column types)"
            + (
                ", which is exact here: every window fires once, all its keys in the same micro-batch"
                if streaming
                else ", which spares Spark a sort per window"
            )
        )
    elif streaming and any(isinstance(x, n.TopN) for x in n.walk(plan)):
        query, chain = _per_batch_chain(plan)
        stages = (_after_window(query, chain),)
        reason += (
            "; top_n ranks each micro-batch's results (foreachBatch), which is exact here: every "
            "window fires once, all its keys in the same micro-batch"
        )
    ctx = Lowerer(
        streaming=streaming,
        shift=time_shift(plan) if streaming else 0,
        window=lower_window,
        join=lower_join,
        spark_max=one_watermark(query),
    )
    root, hidden = ctx.lower(query)
    user = [quote(c) for c in n.schema_of(query).names]
    if ROW_KIND in hidden:  # no watermark removed the marker rows: drop them here
        root = FilterExpr(child=root, condition=f"{quote(ROW_KIND)} = 0")
    if hidden:
        root = SelectExprs(child=root, exprs=tuple(user))
    windowed = bool(n.window_aggregates(plan))
    if windowed:
        root = Observe(child=root, name=OUT_OBSERVE, exprs=(f"count(1) AS {ROWS}",))
    return SparkRecipe(
        lowering=chosen,
        reason=reason,
        root=root,
        output_mode="append",
        time_shift_ms=ctx.shift,
        tracked=tuple(ctx.tracked),
        windowed=windowed,
        output_schema=n.schema_of(plan),
        stages=stages,
        join_identity=join_identity(plan),
    )


def _ranks_on_driver(node: n.TopN) -> bool:
    """Whether Arrow ranks ``node`` exactly as Spark's ``rank()`` does (ties kept, no float keys)."""
    from krishiv_py.stateful.ranking import ranks_exactly

    schema = n.schema_of(node.input).to_arrow()
    return node.ties == "all" and ranks_exactly([schema.field(b).type for b in node.by])


def _per_batch_chain(plan: n.PlanNode) -> tuple[n.PlanNode, list[n.Filter | n.Project | n.TopN]]:
    """Split off the stages from the first ``top_n`` up: the streaming query, then those stages."""
    chain: list[n.Filter | n.Project | n.TopN] = []
    node = plan
    while isinstance(node, n.Filter | n.Project | n.TopN) and any(
        isinstance(x, n.TopN) for x in n.walk(node)
    ):
        chain.append(node)
        node = node.input
    if any(isinstance(x, n.TopN) for x in n.walk(node)):
        raise PlanError(
            "top_n() must come after the last window and union of a streaming plan (only filter, "
            "select and with_column may follow it)"
        )
    return node, chain


def _sliding_choices(plan: n.PlanNode, *, streaming: bool) -> list[str]:
    """How each sliding-window aggregation is computed (from panes, or with window())."""
    return [
        stream_pane_choice(agg)[1]
        if streaming
        else pane_choice(agg.window, agg.aggregates, n.schema_of(agg.input))[1]
        for agg in n.window_aggregates(plan)
        if isinstance(agg.window, SlidingWindow) and agg.window.slide_ms != agg.window.size_ms
    ]


def _snapshot(plan: n.PlanNode) -> tuple[Lowering, str]:
    """Run the input available now as one batch job: bounded, or the stateful kernel as a batch."""
    how = "force_bounded=True (as collect() does)"
    if capabilities("bounded").covers_all(features_of(plan), forced=True):
        return force(plan, "bounded", how=how)
    chosen, reason = choose(plan)
    if chosen != "stateful":
        return force(plan, "bounded", how=how)  # raises, naming what the bounded lowering lacks
    return "stateful", (
        f"{reason}; the input available now runs as one batch job through the same operator, "
        "as if the sources were closed after it"
    )


def _lower_stateful(plan: n.PlanNode, reason: str, *, streaming: bool) -> SparkRecipe:
    if n.joins_of(plan):
        return _lower_stateful_join(plan, reason, streaming=streaming)
    agg, after = _split_after(plan)
    ranked = _top_n_stage(plan, agg)
    if ranked is not None:
        reason += (
            "; window top-N runs on the driver: the windows whose results a micro-batch changed are "
            "ranked again and the difference is emitted (a key pushed out of the top is retracted)"
        )
    cascade = None
    cascaded = n.cascade_of(agg)
    if cascaded is not None:
        cascade = _cascade_stage(agg, cascaded)
        agg = cascaded.upstream
        reason += (
            "; the second window runs on the driver over each micro-batch's results of the first "
            "(event time window_end - 1 ms, the operator's watermark), where a corrected result "
            "replaces the one it corrects"
        )
    shift = time_shift(agg) if streaming else 0
    ctx = Lowerer(
        streaming=streaming, shift=shift, window=lower_stateful_window, spark_max=one_watermark(agg)
    )
    root, _ = ctx.lower(agg)
    handler = agg.emission.late_handler
    if after is not None:
        reason += (
            "; the stages after the window (filter, select, with_column) run on each micro-batch's "
            "results as a Spark batch job on the driver, so a retraction passes a filter exactly when "
            "the emit it withdraws did"
        )
    return SparkRecipe(
        lowering="stateful",
        reason=reason,
        root=root,
        output_mode="append",
        time_shift_ms=shift,
        tracked=tuple(ctx.tracked),
        windowed=True,
        output_schema=n.schema_of(plan),
        late_handler=handler,
        pane_callbacks=agg.emission.panes if agg.emission.panes.any else None,
        stages=tuple(s for s in (cascade, ranked, after) if s is not None),
    )


#: Why an inner interval join runs on Spark's own stream-stream join (docs/joins.md, "Lowerings").
NATIVE_JOIN_REASON = (
    "the plan is an inner interval join without allowed lateness, retractions or a late-event "
    "handler: Spark's stream-stream join emits each match as soon as both rows are there and "
    "drops a row behind the watermark, exactly as specified (each side's event time reaches the "
    "join one µs later, so Spark's 't <= W' drops exactly krishiv's late rows, 't < W'); no "
    "Python runs per row"
)
BOUNDED_JOIN_REASON = (
    "every source is finite, so one Spark batch join computes every match (the same result as "
    "streaming the data in one step, then closing the sources)"
)
#: Why no other join runs on Spark's own stream-stream join (docs/joins.md, "Lowerings").
JOIN_REASON = (
    "; the join runs in krishiv's operator over both inputs tagged by side, not in Spark's "
    "stream-stream join, which has no allowed lateness, retractions, late-event side output, "
    "state TTL, window or as-of join, and emits an outer row when its own state eviction drops "
    "the row rather than when SPEC 3.12 says"
)


def join_identity(plan: n.PlanNode) -> tuple[str, ...] | None:
    """What identifies a joined row of ``plan`` before the user's ``key=``; None: not a join.

    A window join's rows of one key and window are many pairs, told apart
    by the user's columns: the keys and window bounds come first when the
    output still holds them. Other joins' rows have nothing of their own.
    """
    joins = n.joins_of(plan)
    if not joins:
        return None
    node = joins[0]
    names = set(n.schema_of(plan).names)
    base = (*node.left_keys, "window_start", "window_end") if node.kind == "window" else ()
    return base if set(base) <= names else ()


def _lower_stateful_join(plan: n.PlanNode, reason: str, *, streaming: bool) -> SparkRecipe:
    """A join (optionally followed by filter, select and with_column) on krishiv's operator."""
    chain: list[n.Filter | n.Project | n.TopN] = []
    node = plan
    while isinstance(node, n.Filter | n.Project):
        chain.append(node)
        node = node.input
    if not isinstance(node, n.Join) or len(n.joins_of(node)) != 1:
        raise PlanError(
            "the stateful lowering runs one join, optionally followed by filter, select and "
            "with_column; a union of joined streams or a join after other stages is not supported yet"
        )
    shift = time_shift(node) if streaming else 0
    ctx = Lowerer(streaming=streaming, shift=shift, window=lower_stateful_window, join=lower_stateful_join)
    root, _ = ctx.lower(node)
    if chain:
        reason += (
            "; the stages after the join (filter, select, with_column) run on each micro-batch's "
            "joined rows as a Spark batch job on the driver"
        )
    return SparkRecipe(
        lowering="stateful",
        reason=reason + JOIN_REASON,
        root=root,
        output_mode="append",
        time_shift_ms=shift,
        tracked=tuple(ctx.tracked),
        windowed=True,
        output_schema=n.schema_of(plan),
        late_handler=node.emission.late_handler,
        stages=(_after_window(node, chain),) if chain else (),
        join_identity=join_identity(plan),
    )


def _top_n_stage(plan: n.PlanNode, agg: n.WindowAggregate) -> TopNStage | None:
    """The top-N of a stateful plan's window results, kept on the driver (None: the plan has none)."""
    from krishiv_py.stateful.topn import TopNSpec

    node = plan
    while isinstance(node, n.Filter | n.Project):
        node = node.input
    if not isinstance(node, n.TopN):
        return None
    if agg.emission.accumulation != "retracting":
        raise PlanError(
            "top_n() on the stateful lowering needs .accumulation('retracting') on the window: a "
            "window may fire again there (or its keys in different micro-batches), and a row pushed "
            "out of the top must be withdrawn"
        )
    values = Schema(tuple(f for f in n.schema_of(agg) if f.name != RESULT_KIND))
    read = ReadSource(name="window results", kind="results", schema=values, streaming=False)
    rank = AfterWindow(root=top_n(node, read, schema=values), window_schema=values, schema=values)
    spec = TopNSpec(
        identity=(*agg.keys, "window_start", "window_end"),
        group=("window_start", "window_end", *node.keys),
        lateness_ms=n.cascade_lateness_ms(agg),
    )
    return TopNStage(rank=rank, spec=spec, schema=n.schema_of(node))


def _cascade_stage(node: n.WindowAggregate, cascade: n.Cascade) -> CascadeStage:
    """The second window of ``node``'s cascade as the driver runs it."""
    from krishiv_py.stateful.cascade import CascadeSpec

    if n.cascade_of(cascade.upstream) is not None:
        raise PlanError("the stateful lowering runs two windows in a cascade, not more (yet)")
    up = cascade.upstream
    between = _after_window(up, list(cascade.between), carry=RESULT_ROW) if cascade.between else None
    aggs = kernel_aggs(node)
    window = node.window
    assert not isinstance(window, EventSlidingWindow | TimeIntervalWindow)
    spec = CascadeSpec(
        keys=node.keys,
        window=window,
        aggs=aggs,
        lateness_ms=n.cascade_lateness_ms(node),
        retracting=node.emission.accumulation == "retracting",
        identity=len(up.keys) + 2,
    )
    return CascadeStage(
        between=between,
        upstream_schema=n.schema_of(up),
        identity=(*up.keys, "window_start", "window_end"),
        upstream_retracting=up.emission.accumulation == "retracting",
        spec=spec,
        schema=n.schema_of(node),
    )


def _split_after(plan: n.PlanNode) -> tuple[n.WindowAggregate, AfterWindow | None]:
    """The windowed aggregation the stateful operator runs, and the stages on its results.

    Filters and projections after the window run on each micro-batch's
    results (:class:`AfterWindow`); a plan may hold one windowed aggregation.
    """
    chain: list[n.Filter | n.Project | n.TopN] = []
    node = plan
    while isinstance(node, n.Filter | n.Project) and n.window_aggregates(node):
        chain.append(node)
        node = node.input
    if isinstance(node, n.TopN):
        if not isinstance(node.input, n.WindowAggregate):
            raise PlanError(
                "on the stateful lowering top_n() must come right after the window's agg() "
                "(filter, select and with_column may follow it)"
            )
        node = node.input
    cascade = n.cascade_of(node) if isinstance(node, n.WindowAggregate) else None
    inner = cascade.upstream if cascade is not None else node
    if not isinstance(node, n.WindowAggregate) or len(n.window_aggregates(inner)) != 1:
        what = "a union of windowed results" if isinstance(node, n.Union) else "this plan"
        raise PlanError(
            f"the stateful lowering runs one windowed aggregation (or a window over its results), "
            f"optionally followed by filter, select and with_column; {what} needs more than that "
            "(a union of windowed results is not supported on this lowering yet)"
        )
    return node, (_after_window(node, chain) if chain else None)


def _after_window(
    below: n.PlanNode, chain: list[n.Filter | n.Project | n.TopN], *, carry: str | None = None
) -> AfterWindow:
    """``chain`` (top first) as stages over one micro-batch's rows of ``below``.

    ``carry``: a hidden column of the rows that every projection keeps.
    """
    ctx = Lowerer(streaming=False, shift=0, window=lower_stateful_window)
    window_schema = n.schema_of(below)
    read_schema = window_schema
    if carry is not None:
        read_schema = Schema((*window_schema, Field(carry, DataType("bigint"), False)))
    out: RecipeNode = ReadSource(name="window results", kind="results", schema=read_schema, streaming=False)
    for stage in reversed(chain):
        schema = n.schema_of(stage.input)
        if isinstance(stage, n.Filter):
            out = ctx.count_failures(out, [stage.predicate], schema)
            out = FilterExpr(child=out, condition=to_sql(stage.predicate, schema))
        elif isinstance(stage, n.Project):
            out = ctx.count_failures(out, stage.exprs, schema)
            kept = (quote(carry),) if carry is not None else ()
            out = SelectExprs(child=out, exprs=tuple(select_item(e, schema) for e in stage.exprs) + kept)
        else:
            out = top_n(stage, out)
    schema = n.schema_of(chain[0]) if chain else window_schema
    return AfterWindow(root=out, window_schema=window_schema, schema=schema)
