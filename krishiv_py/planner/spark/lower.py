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

import itertools
from typing import Any, cast

import attrs

from krishiv_py._typing import Lowering
from krishiv_py.errors import PlanError
from krishiv_py.names import OUT_OBSERVE, ROW_KIND, ROWS
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import between, branches, facts
from krishiv_py.plan.filtered import unfiltered
from krishiv_py.plan.windows import EventSlidingWindow, SlidingWindow, TimeIntervalWindow
from krishiv_py.planner.spark.choose import capabilities, choose, features_of, force
from krishiv_py.planner.spark.kinds import KINDS, OperatorKind, kind_of
from krishiv_py.planner.spark.native import lower_join, lower_window, time_shift
from krishiv_py.planner.spark.recipe import (
    AfterStage,
    AfterWindow,
    DriverRank,
    FilterExpr,
    Observe,
    ReadSource,
    RecipeNode,
    SelectExprs,
    SparkRecipe,
)
from krishiv_py.planner.spark.sliding import pane_choice, stream_pane_choice
from krishiv_py.planner.spark.sources import (
    STAGED_SIDES,
    Lowerer,
    one_watermark,
    rows_in_progress,
)
from krishiv_py.planner.spark.stateful import (
    arrow_stages,
    lower_stateful_join,
    lower_stateful_keyed,
    lower_stateful_union,
    lower_stateful_window,
    moves,
    per_key_changes,
    stacked_operators,
)
from krishiv_py.planner.sql import quote

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
    recipe = _lower(plan, force_bounded=force_bounded, lowering=lowering)
    functions = n.user_functions(plan)
    if not functions:
        return recipe
    names = ", ".join(f.name for f in functions)
    how = (
        f"; the user functions ({names}) run in Python, one call per Arrow batch of rows (Spark's "
        "Arrow UDF; between krishiv's stateful operators, one per step)"
    )
    return attrs.evolve(recipe, udfs=functions, reason=recipe.reason + how)


def _lower(plan: n.PlanNode, *, force_bounded: bool, lowering: Lowering | None) -> SparkRecipe:
    if force_bounded and lowering not in (None, "bounded"):
        raise PlanError(f"force_bounded=True asks for the bounded lowering, but lowering={lowering!r}")
    n.check_joins_complete(plan)
    plan = unfiltered(plan)  # a filtered aggregate is one of a column: every lowering runs that
    snapshot = force_bounded or lowering == "bounded"
    if snapshot:
        chosen, reason = _snapshot(plan)
    elif lowering is not None:
        chosen, reason = force(plan, lowering, how=f"lowering={lowering!r}")
    else:
        chosen, reason = choose(plan)
    if chosen == "stateful":
        return _lower_stateful(plan, reason, streaming=not snapshot and not n.is_bounded(plan))
    return _lower_spark(plan, chosen, reason)


def _lower_spark(plan: n.PlanNode, chosen: Lowering, reason: str) -> SparkRecipe:
    """``plan`` on Spark's own operators: streaming (native) or one batch job (bounded)."""
    streaming = chosen == "native"
    if n.joins_of(plan):
        reason = NATIVE_JOIN_REASON if streaming else BOUNDED_JOIN_REASON
    reason += "".join(f"; {why}" for why in _sliding_choices(plan, streaming=streaming))
    query, stages, ranked = _ranked_stages(plan, streaming=streaming)
    reason += ranked
    ctx = Lowerer(
        streaming=streaming,
        shift=time_shift(plan) if streaming else 0,
        window=lower_window,
        join=lower_join,
        spark_max=one_watermark(query),
        progress_rows=rows_in_progress(query),
    )
    root, hidden = ctx.lower(query)
    user = [quote(c) for c in facts(query).schema.names]
    if ROW_KIND in hidden:  # no watermark removed the marker rows: drop them here
        root = FilterExpr(child=root, condition=f"{quote(ROW_KIND)} = 0")
    if hidden:
        root = SelectExprs(child=root, exprs=tuple(user))
    windowed = bool(n.window_aggregates(plan))
    if windowed or n.joins_of(plan):  # window results or a join's rows: counted (SparkRecipe.emits)
        root = Observe(child=root, name=OUT_OBSERVE, exprs=(f"count(1) AS {ROWS}",))
    return SparkRecipe(
        lowering=chosen,
        reason=reason,
        root=root,
        output_mode="append",
        time_shift_ms=ctx.shift,
        tracked=tuple(ctx.tracked),
        windowed=windowed,
        output_schema=facts(plan).schema,
        stages=stages,
        join_identity=join_identity(plan),
    )


def _ranked_stages(plan: n.PlanNode, *, streaming: bool) -> tuple[n.PlanNode, tuple[AfterStage, ...], str]:
    """A top-N on Spark's own operators: the query Spark runs, the stages after it that rank its
    results (on the driver, in Arrow), and what the reason says of them ("": no top-N)."""
    if isinstance(plan, n.TopN) and _ranks_on_driver(plan):
        group = ("window_start", "window_end", *plan.keys)
        stages = (DriverRank(n=plan.n, by=plan.by, group=group, ascending=plan.ascending),)
        rows = "each micro-batch's results (foreachBatch)" if streaming else "the batch job's rows"
        why = (
            f"; top_n ranks {rows} in Arrow on the driver (rank() with ties kept, an exact order for "
            "these column types)"
            + (
                ", which is exact here: every window fires once, all its keys in the same micro-batch "
                "(tests/test_differential.py::test_native_shapes_over_batchings[top_n])"
                if streaming
                else ", which spares Spark a sort per window"
            )
        )
        return plan.input, stages, why
    if streaming and n.top_ns(plan):
        query, chain = _per_batch_chain(plan)
        return (
            query,
            (_after_window(query, chain),),
            "; top_n ranks each micro-batch's results (foreachBatch), which is exact here: every "
            "window fires once, all its keys in the same micro-batch "
            "(tests/test_differential.py::test_native_shapes_over_batchings[top_n])",
        )
    return plan, (), ""


def _ranks_on_driver(node: n.TopN) -> bool:
    """Whether Arrow ranks ``node`` exactly as Spark's ``rank()`` does (ties kept, no float keys)."""
    from krishiv_py.stateful.ranking import ranks_exactly

    schema = facts(node.input).schema.to_arrow()
    return node.ties == "all" and ranks_exactly([schema.field(b).type for b in node.by])


def _per_batch_chain(plan: n.PlanNode) -> tuple[n.PlanNode, list[n.Filter | n.Project | n.TopN]]:
    """Split off the stages from the first ``top_n`` up: the streaming query, then those stages."""
    chain: list[n.Filter | n.Project | n.TopN] = []
    node = plan
    while isinstance(node, n.Filter | n.Project | n.TopN) and n.top_ns(node):
        chain.append(node)
        node = node.input
    if n.top_ns(node):
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
        else pane_choice(agg.window, agg.aggregates, facts(agg.input).schema)[1]
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


@attrs.frozen(kw_only=True)
class OperatorRule:
    """What a reason says of a union of operators' results (the operators' own: their kind's)."""

    noun: str
    rows: str
    exact: str = ""


def _lower_stateful(plan: n.PlanNode, reason: str, *, streaming: bool) -> SparkRecipe:
    """Every stateful plan alike: the stages after the operator peeled off, the operators in order.

    The bottom operator is lowered by its rule; each operator above it runs
    in the same call when its keys include those its rows are bucketed by,
    else as a stage of its own (:func:`stacked_operators`).
    """
    op, stages, why = _operator_and_stages(plan)
    if streaming:
        _check_auto_lag(plan, op)
    links = operator_links(op)
    bottom = links[0][0]
    if branches(bottom):  # a union of operators' results, operators after it or none
        return _lower_union(
            plan, cast(n.Union, bottom), stages, reason + "".join(why), streaming=streaming, links=links
        )
    rule, first = _kind(op), _kind(bottom)
    shift = time_shift(op) if streaming else 0
    rules: dict[str, Any] = {
        "window": lower_stateful_window,
        "join": lower_stateful_join,
        "keyed": lower_stateful_keyed,
    }
    if len(links) > 1:
        rules[first.slot] = stacked_operators(rules[first.slot], bottom, links[1:])
        joined = first.slot == "join"
        pairs = itertools.pairwise(node for node, _ in links)
        why += [_kind(b).after_changes for a, b in pairs if per_key_changes(a) and _kind(b).after_changes]
        fed = [_kind(w).fed_reason for w, _ in links[:-1] if facts(w).changelog == "updating"]
        why += list(dict.fromkeys(fed))  # (a window firing again, an over-aggregation correcting)
        why += _move_reasons(
            links,
            CHAIN_REASON if joined else AFTER_CHAIN_REASON,
            STAGED_REASON if joined else AFTER_STAGED_REASON,
        )
    if first.stages_sides:  # a join: what its sides are
        why += _join_reasons(cast(n.Join, bottom))
    ctx = Lowerer(
        streaming=streaming,
        shift=shift,
        **rules,
        spark_max=first.spark_max and one_watermark(bottom),
        staged_sides=True,
        chain=_side_chain,
        union=_side_union,
    )
    root, _ = ctx.lower(bottom)
    emission = rule.emission(op)
    return SparkRecipe(
        lowering="stateful",
        reason=reason + "".join(why) + rule.reason,
        root=root,
        output_mode="append",
        time_shift_ms=shift,
        tracked=tuple(ctx.tracked),
        windowed=True,
        output_schema=facts(plan).schema,
        late_handler=first.emission(bottom).late_handler,
        pane_callbacks=emission.panes if emission.panes.any else None,
        stages=stages,
        join_identity=join_identity(plan),
        result_key=facts(op).keys if rule.result_key else None,
    )


def _join_reasons(join: n.Join) -> list[str]:
    """Why a join whose sides are other operators' results runs as it does."""
    why = []
    sides = [facts(c).results_of for c in n.children(join)]
    operators = [c for c in sides if isinstance(c, STAGED_SIDES)]
    if len(operators) == 2:
        windows = all(isinstance(c, n.WindowAggregate) for c in operators)
        why.append(JOIN_WINDOWS_REASON if windows else JOIN_OPERATORS_REASON)
    elif operators:
        why.append(_kind(operators[0]).join_side)
    if len(operators) == 1 and _stages_sides(operators[0]) and _operator_below(cast(n.Join, operators[0])):
        why.append(JOIN_AFTER_STAGE_REASON)
    if any(len(operator_links(c)) > 1 for c in operators):
        why.append(JOIN_OF_CHAIN_REASON)
    if any(operators_union(c) is not None for c in sides):
        why.append(JOIN_UNION_REASON)
    if any(_kind(c).changes for c in operators):
        why.append(JOIN_CHANGES_KEPT_REASON)
    if any(facts(c).corrects for c in n.children(join)):
        why.append(JOIN_CHANGES_REASON)
    return why


def _kind(node: n.PlanNode) -> OperatorKind:
    kind = kind_of(node)
    assert kind is not None, node
    return kind


def _check_auto_lag(plan: n.PlanNode, op: n.PlanNode) -> None:
    """:class:`PlanError` for an automatic lag in a plan it does not run on yet: it runs where a
    window takes the rows of its sources first (an operator or a stage may follow) or a join of
    two streams does, over one source, a union of sources or a Kafka topic with a watermark per
    partition, every one of them with an automatic lag."""
    marks = n.watermarks_of(plan)
    if not any(m.auto is not None for m in marks):
        return
    links = operator_links(op)  # (a union of operators' results: itself)
    bottom = links[0][0]
    # A join of two streams (no operator below a side, none after it) reads its sources' rows.
    kind = kind_of(bottom)
    staged = _stages_sides(bottom) and (len(links) > 1 or _operator_below(cast(n.Join, bottom)))
    if kind is None or not kind.auto_lag or staged:
        raise PlanError(
            "an automatic lag (watermark(column, 'auto')) runs where a window or a join takes the "
            "rows of its sources first (not yet on a join with an operator before or after it, a "
            "union of operators' results or an aggregation without a window): give this plan's "
            "watermarks a fixed lag"
        )
    fixed = [m for m in marks if m.auto is None]
    if fixed:
        raise PlanError(
            f"a plan with an automatic lag (watermark(column, 'auto')) has it on every watermark: "
            f"the one on {fixed[0].column!r} of {', '.join(s.name for s in n.sources_of(fixed[0]))} "
            "has a fixed lag; give every source 'auto' (each chooses its own lag) or a fixed lag"
        )


def _lower_union(
    plan: n.PlanNode,
    op: n.Union,
    stages: tuple[AfterStage, ...],
    reason: str,
    *,
    streaming: bool,
    links: list[tuple[n.PlanNode, tuple[n.Filter | n.Project, ...]]] | None = None,
) -> SparkRecipe:
    """A union of operators' results (windows', joins', aggregations' or top-Ns' per key): one
    operator whose bucket calls step every branch's operator over its own rows; ``links``: the
    operators after it (:func:`operator_links`), each in its call or a stage of its own."""
    shift = time_shift(op) if streaming else 0
    ctx = Lowerer(
        streaming=streaming,
        shift=shift,
        window=lower_stateful_window,
        join=lower_stateful_join,
        keyed=lower_stateful_keyed,
    )

    def union(node: n.PlanNode, *branches: RecipeNode, streaming: bool, shift_ms: int) -> RecipeNode:
        del shift_ms
        return lower_stateful_union(cast(n.Union, node), list(branches), streaming=streaming)

    after = links[1:] if links is not None else []
    rule = stacked_operators(union, op, after) if after else union
    # Each branch's operator by its rule; the filters and projections after it run in the union.
    branches = (ctx.lower(facts(branch).results_of)[0] for branch in op.inputs)
    root = rule(op, *branches, streaming=streaming, shift_ms=shift)
    moved = _move_reasons([(op, ()), *after], UNION_CHAIN_REASON, UNION_STAGED_REASON) if after else []
    windows = n.union_windows(op) is not None
    return SparkRecipe(
        lowering="stateful",
        reason=reason + (UNION_REASON if windows else UNION_OPERATORS_REASON) + "".join(moved),
        root=root,
        output_mode="append",
        time_shift_ms=shift,
        tracked=tuple(ctx.tracked),
        windowed=True,
        output_schema=facts(plan).schema,
        stages=stages,
    )


def _move_reasons(
    links: list[tuple[n.PlanNode, tuple[n.Filter | n.Project, ...]]], beside: str, staged: str
) -> list[str]:
    """Why each operator above the bottom one runs where it does: ``beside`` in the call of the
    one before it, ``staged`` as the first stage, a stage after the stage from then on."""
    out, moved = [], False
    for alike in moves(links):
        out.append(beside if alike else STAGED_AGAIN_REASON if moved else staged)
        moved = moved or not alike
    return out


#: Why a union of windows runs as it does (docs/windows.md, "A union of windows").
UNION_REASON = (
    "; the union of windows runs as one operator: every branch's rows travel in one layout, "
    "bucketed by their own branch's keys, and each bucket call steps each branch's window over its "
    "own rows (corrections and retractions pass through); the query's one watermark is the least "
    "of every branch's sources"
)

#: Why a union of operators' results runs as it does (docs/composition.md, "A union of changelogs").
UNION_OPERATORS_REASON = (
    "; the union of operators' results runs as one operator: every branch's rows travel in one "
    "layout, bucketed by their own branch's keys, and each bucket call steps each branch's "
    "operator (a window, a join, an aggregation or a top-N per key) over its own rows, the "
    "filters and projections after it over its results; the union carries every branch's emits "
    "and retractions, each with its own event time, and its watermark is the least of every "
    "branch's sources"
)

#: Why an operator after a union of windows runs in the union's call.
UNION_CHAIN_REASON = (
    "; the operator after the union runs in the same call, over the results of the keys every "
    "branch is bucketed by (no row crosses the cluster again), and takes their corrections"
)

#: Why an operator after a union of windows keyed otherwise runs as a stage.
UNION_STAGED_REASON = (
    "; the operator after the union is keyed by other columns than its branches, so their results "
    "cross the cluster once more in the same micro-batch, to a stage of its own by its key buckets "
    "(applyInArrow), which takes their corrections"
)


def operators_union(node: n.PlanNode) -> n.Union | None:
    """``node`` when it is a union of operators' results, each branch one operator over streams
    (a window, a join, an aggregation or a top-N per key; filtered or projected or not), else None."""
    ops = branches(node)
    if len(ops) < 2:
        return None
    for op in ops:
        if not isinstance(op, STAGED_SIDES) or _has_operator(*n.children(op)):
            return None
        if isinstance(getattr(op, "window", None), EventSlidingWindow | TimeIntervalWindow):
            return None
    return cast(n.Union, node)


def _operator_and_stages(plan: n.PlanNode) -> tuple[n.PlanNode, tuple[AfterStage, ...], list[str]]:
    """The top operator of the chain, the stage after it and why it runs as it does.

    From the top: filters and projections (one :class:`AfterWindow`); then
    the top operator, the last of the chain :func:`operator_links` walks.
    """
    node = facts(plan).results_of
    if not _has_operator(node):
        node = plan
    chain: list[n.Filter | n.Project | n.TopN] = list(reversed(between(plan))) if node is not plan else []
    if isinstance(node, n.TopN):
        _check_window_top_n(node)
    op = node
    union = operators_union(op)
    if union is None and (kind_of(op) is None or _has_operator(*_operator_inputs(operator_links(op)[0][0]))):
        raise PlanError(_unsupported(node))
    rule: OperatorKind | OperatorRule = UNION_RULE if union is not None else _kind(op)
    why = []
    after = _after_window(node, chain) if chain else None
    if after is not None:
        how = (
            "in Arrow on the driver, each expression with the value Spark SQL gives it (no Spark job)"
            if after.arrow is not None
            else "as a Spark batch job on the driver"
        )
        why.append(
            f"; the stages after the {rule.noun} (filter, select, with_column) run on each micro-batch's "
            f"{rule.rows} {how}{rule.exact}"
        )
    return op, () if after is None else (after,), why


#: Why a window after a join runs with the join (docs/joins.md, "After a join").
CHAIN_REASON = (
    "; it runs in the same operator call as the join, over the joined rows of its keys "
    "(they include the join's, so no row crosses the cluster again), at the join's watermark; a "
    "late partner's new pairs (within the join's allowed lateness) correct its results"
)


#: Why a join of two windows' results runs as it does (docs/joins.md, "A join of two windows' results").
JOIN_WINDOWS_REASON = (
    "; both windows run as one operator (each over its own stream's rows, by its own keys), and the "
    "join is a stage after it: each window's results (event time window_end - 1 ms) cross the "
    "cluster to the join's key buckets in the micro-batch that fires them, one window's as the left "
    "side's rows, the other's as the right side's, and the join keeps its state of its own (one "
    "Arrow file per bucket and micro-batch under the checkpoint)"
)

#: Why a join of two operators' results runs as it does (docs/joins.md, "A join of two operators' results").
JOIN_OPERATORS_REASON = (
    "; both operators under the join run as one (each over its own rows, by its own keys), and the "
    "join is a stage after it: each one's results (with their event times) cross the cluster to "
    "the join's key buckets in the micro-batch that makes them, the first's as the left side's "
    "rows, the second's as the right side's, and the join keeps its state of its own (one Arrow "
    "file per bucket and micro-batch under the checkpoint)"
)

#: Why a join of a union of operators' results runs as it does (docs/stateless.md).
JOIN_UNION_REASON = (
    "; a side of the join is a union of operators' results, which runs as one operator (each "
    "branch's operator over its own rows); the join is a stage after it, the union's results "
    "crossing the cluster to the join's key buckets with their event times, the other stream's "
    "rows routed there, and it keeps rows as long as any branch may still correct its results"
)

#: Why a join of a join of a join runs as it does (docs/joins.md, "A chain of joins").
JOIN_AFTER_STAGE_REASON = (
    "; the join below it is itself a stage after a join, so this join is a stage after that "
    "stage: the rows of the join below cross the cluster once more to this join's key buckets, "
    "its other stream's rows are routed there, and it keeps rows as much longer as every join "
    "below it may still correct them"
)

#: Why a join whose side is a chain of operators runs as it does (docs/joins.md).
JOIN_OF_CHAIN_REASON = (
    "; a side of the join is a chain of operators (a window of a join's rows, say), lowered as "
    "every chain is: each operator in the call of the one before it when keyed by its keys, else "
    "a stage of its own; the join is a stage after the last of them"
)

#: Why a join of changes per key keeps its rows while the job runs.
JOIN_CHANGES_KEPT_REASON = (
    "; a change per key may withdraw a row of any age, so the join keeps the rows of both its "
    "sides while the job runs (and takes the other side's rows however late): its state grows "
    "with the rows, unless with_state_ttl() on the join expires them"
)

#: Why a join of a changelog runs as it does (docs/joins.md, "A join of corrected rows").
JOIN_CHANGES_REASON = (
    "; its input withdraws rows it sent (a window that fires again, a retracting join, an "
    "aggregation or a top-N per key): a "
    "retraction withdraws the held row of equal values and event time and the joined rows it made "
    "(an outer row left without a partner is padded again), and the join keeps rows as much longer "
    "as the input can still correct them (its allowed lateness; a window's, one ms more)"
)

#: Why an operator after a join keyed by other columns runs as it does (docs/joins.md, "After a join").
STAGED_REASON = (
    "; it is keyed by other columns than the join, so the joined rows cross the cluster once more "
    "in the same micro-batch: each join bucket splits its rows by the operator's key bucket, Spark "
    "groups them by it (applyInArrow) and the operator runs there with state of its own, one Arrow "
    "file per bucket and micro-batch under the checkpoint (the micro-batch Spark runs again reads "
    "the version before it); it runs at the join's watermark, and a late partner's new pairs "
    "(within the join's allowed lateness) correct its results"
)


#: Why an operator after a window, an aggregation or a top-N keyed alike runs in its call.
AFTER_CHAIN_REASON = (
    "; the operator after it runs in the same call, over the results of its keys (no row crosses "
    "the cluster again), at its watermark, and takes its changes"
)

#: Why an operator after a window, an aggregation or a top-N keyed otherwise runs as a stage.
AFTER_STAGED_REASON = (
    "; the operator after it is keyed by other columns, so its results cross the cluster once more "
    "in the same micro-batch, to a stage of its own by its key buckets (applyInArrow; its state one "
    "Arrow file per bucket and micro-batch under the checkpoint), whose watermark is held below "
    "every bucket before it that can still fire; it takes the changes of what it follows"
)


#: Why an operator keyed by other columns again after a stage runs as it does (a second move).
STAGED_AGAIN_REASON = (
    "; it is keyed by other columns than the stage before it, so that stage's results cross the "
    "cluster once more in the same micro-batch: a stage after the stage (one more applyInArrow, by "
    "its own key buckets), its state of its own under the first stage's, its watermark held below "
    "every bucket of the operators before it that can still fire"
)


def operator_links(op: n.PlanNode) -> list[tuple[n.PlanNode, tuple[n.Filter | n.Project, ...]]]:
    """The operators of a stateful plan from the bottom up to ``op``, each with the filters and
    projections between it and the one below it (first to last)."""
    links: list[tuple[n.PlanNode, tuple[n.Filter | n.Project, ...]]] = []
    node = op
    while (kind := kind_of(node)) is not None and kind.follows:
        (above,) = n.children(node)
        below = facts(above).results_of
        if kind_of(below) is None and operators_union(below) is None:
            break
        links.append((node, between(above)))
        node = below
    links.append((node, ()))
    return list(reversed(links))


def _side_chain(ctx: Lowerer, node: n.PlanNode) -> RecipeNode:
    """A join's side that is an operator's results, lowered with the operators under it as every
    chain is (:func:`stacked_operators`: a window of a join's rows in the join's call or as a
    stage); the join is then a stage after its last one."""
    links = operator_links(node)
    bottom = links[0][0]
    if len(links) == 1:
        return ctx.lower(node)[0]
    slot = _kind(bottom).slot
    base = getattr(ctx, slot)
    setattr(ctx, slot, stacked_operators(base, bottom, links[1:]))
    try:
        return ctx.lower(bottom)[0]
    finally:
        setattr(ctx, slot, base)


def _side_union(ctx: Lowerer, node: n.Union) -> RecipeNode | None:
    """A join's side that is a union of operators' results: one operator, a branch each (the join
    is then a stage after it); None: a union of streams, Spark's union."""
    if operators_union(node) is None:
        return None
    lowered = [ctx.lower(b)[0] for b in branches(node)]
    return lower_stateful_union(node, lowered, streaming=ctx.streaming)


def _stages_sides(node: n.PlanNode) -> bool:
    """Whether ``node`` is an operator that runs an operator under a side as a stage before it
    (a join: :attr:`~krishiv_py.planner.spark.kinds.OperatorKind.stages_sides`)."""
    kind = kind_of(node)
    return kind is not None and kind.stages_sides


def _operator_below(join: n.Join) -> bool:
    """Whether a side of ``join`` is another operator's results (``join`` then runs as a stage)."""
    return any(isinstance(facts(c).results_of, STAGED_SIDES) for c in n.children(join))


def _operator_inputs(bottom: n.PlanNode) -> list[n.PlanNode]:
    """What the bottom operator reads: its inputs, a join's operator side as the inputs of that
    operator (a join's, again, as its own: a join of a join of a join)."""
    out: list[n.PlanNode] = []
    join, union = _stages_sides(bottom), bool(branches(bottom))
    for child in n.children(bottom):
        below = facts(child).results_of
        staged = join and isinstance(below, STAGED_SIDES)
        branch = union and isinstance(below, STAGED_SIDES)  # one operator
        if join and operators_union(below) is not None:  # one operator too
            out += _operator_inputs(below)
        elif staged:  # the bottom operator of the side's chain (itself, when it is one operator)
            chain_bottom = operator_links(below)[0][0]
            out += _operator_inputs(chain_bottom) if _stages_sides(chain_bottom) else n.children(chain_bottom)
        else:
            out += n.children(below) if staged or branch else [child]
    return out


def _has_operator(*nodes: n.PlanNode) -> bool:
    return any(kind_of(x) is not None for node in nodes for x in n.walk(node))


def _unsupported(node: n.PlanNode) -> str:
    what = "a union of operators' results" if branches(node) else "this plan"
    return (
        "the stateful lowering runs a chain of operators over streams (joins, windows, "
        "aggregations and top-Ns per key, each over the one before it or a stream, and a union "
        f"of windows of streams), filters and projections between and after them; {what} has an "
        "operator under another one the chain does not reach (a union of joins' or of "
        "aggregations' results, say), which it does not run yet"
    )


#: Why an inner interval join runs on Spark's own stream-stream join when asked for
#: (docs/joins.md, "Lowerings").
NATIVE_JOIN_REASON = (
    "lowering='native' asks for Spark's stream-stream join of an inner interval join without "
    "allowed lateness, retractions or a late-event handler: it emits each match as soon as both "
    "rows are there; each side first drops and counts its rows behind the watermark of their "
    "micro-batch (read from the offset log in Arrow, one Python call per partition), because "
    "Spark's join drops a late row by the watermark of the micro-batch before, so a row behind "
    "the watermark would join when a watermark advance and the row fall into consecutive "
    "micro-batches; with that filter it gives the specified rows in every batching (checked by "
    "tests/test_differential.py::test_native_join_over_batchings). Left to itself the planner "
    "runs the join on the stateful lowering, which was faster on Nexmark q20"
)
BOUNDED_JOIN_REASON = (
    "every source is finite, so one Spark batch join computes every match (the same result as "
    "streaming the data in one step, then closing the sources)"
)


#: A union of operators' results, run as one operator (:func:`_lower_union`).
UNION_RULE = OperatorRule(
    noun="union",
    rows="results",
    exact=", so a retraction passes a filter exactly when the emit it withdraws did",
)


#: What the stateful lowering does with every kind of plan node: a source is read by its read
#: rule, a stateless node becomes Spark SQL before the operator (or a stage after it), an
#: operator runs as a kernel (its :data:`~krishiv_py.planner.spark.kinds.KINDS` descriptor), a
#: stage runs on the operator's results.
STATEFUL_ROLES: dict[type[n.PlanNode], str] = {
    **dict.fromkeys(n.SOURCE_TYPES, "source"),
    n.Watermark: "stateless",
    n.Union: "stateless, or an operator (a union of operators' results)",
    n.LookupJoin: "stateless (a Spark join of the rows with a bounded table, read for each micro-batch)",
    n.Filter: "stateless or stage",
    n.Project: "stateless or stage",
    **dict.fromkeys(KINDS, "operator"),
}


def join_identity(plan: n.PlanNode) -> tuple[str, ...] | None:
    """What identifies a joined row of ``plan`` before the user's ``key=``; None: not a join.

    A window join's rows of one key and window are many pairs, told apart
    by the user's columns: the keys and window bounds come first when the
    output still holds them. Other joins' rows have nothing of their own.
    """
    joins = n.joins_of(plan)
    aggregated = any(getattr(kind_of(x), "result_key", False) for x in n.walk(plan))
    if not joins or n.window_aggregates(plan) or aggregated:  # results with keys (and bounds) of their own
        return None
    node = joins[0]
    names = set(facts(plan).schema.names)
    base = (*node.left_keys, "window_start", "window_end") if node.kind == "window" else ()
    return base if set(base) <= names else ()


def _check_window_top_n(node: n.TopN) -> None:
    """What window top-N on the stateful lowering needs (a clear error for the rest)."""
    if not isinstance(node.input, n.WindowAggregate):
        raise PlanError(
            "on the stateful lowering top_n() must come right after the window's agg() "
            "(filter, select and with_column may follow it)"
        )
    if node.input.emission.accumulation != "retracting":
        raise PlanError(
            "top_n() on the stateful lowering needs .accumulation('retracting') on the window: a "
            "window may fire again there (or its keys in different micro-batches), and a row pushed "
            "out of the top must be withdrawn"
        )


def _after_window(below: n.PlanNode, chain: list[n.Filter | n.Project | n.TopN]) -> AfterWindow:
    """``chain`` (top first) as stages over one micro-batch's rows of ``below``; in Arrow when
    every step is a filter or a projection Arrow evaluates as Spark SQL does."""
    window_schema = facts(below).schema
    read = ReadSource(name="window results", kind="results", schema=window_schema, streaming=False)
    ctx = Lowerer(streaming=False, shift=0, window=lower_stateful_window, reads={id(below): read})
    out = ctx.lower(chain[0])[0] if chain else read
    schema = facts(chain[0]).schema if chain else window_schema
    arrow = arrow_stages(tuple(reversed(chain)))
    return AfterWindow(root=out, window_schema=window_schema, schema=schema, arrow=arrow)
