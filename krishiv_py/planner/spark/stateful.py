"""The stateful lowering's window rule: rows grouped by key bucket into krishiv's own operator.

Spark's window operators fire once and drop late rows inside the JVM, so
allowed lateness, re-firing, retractions, early triggers, late-event side
output and the specified session rule run in an operator of krishiv's own
(:mod:`krishiv_py.stateful`):

1. every input row gets its key bucket ``pmod(hash(keys), buckets)`` (floats
   made canonical first, so ``-0.0`` and ``0.0`` meet), its event time in
   µs and its columns encoded so they arrive exact; each map task packs its
   rows into one Arrow IPC stream per bucket (``mapInArrow``,
   :func:`~krishiv_py.stateful.operator.pack_rows`);
2. unbounded input: ``groupBy(bucket).applyInArrow(...)``, each bucket's state
   krishiv's own versioned files under the checkpoint (the carrier,
   :class:`~krishiv_py.planner.spark.recipe.StatefulApply`: or Spark's
   ``applyInPandasWithState``), unioned with an internal *tick* source through
   which the job wakes the buckets holding state after the watermark moved; bounded input
   (or a ``collect()`` snapshot): ``groupBy(bucket).applyInPandas(...)``,
   every row in one step, then end of input;
3. the operator emits one binary payload per bucket call; the job decodes
   results, late rows and statistics on the driver.

Rows without a valid event time are not filtered out: they reach the
operator, which hands them to the late-event handler as ``invalid``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.names import AUTO_SOURCE, BUCKET, ET, JOIN_SIDE, PACKED, RESULT_KIND, SEQ, TS_VALUE
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import between, branches, facts
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow, in_processing_time
from krishiv_py.planner.spark.kinds import OperatorKind, kernel_aggs, kind_of
from krishiv_py.planner.spark.recipe import RecipeNode, SelectExprs, SparkRecipe, StatefulApply, UnionAll
from krishiv_py.planner.spark.sources import one_watermark
from krishiv_py.planner.sql import quote
from krishiv_py.types import DataType, Schema

__all__ = [
    "BUCKETS",
    "StatefulApply",
    "join_spec",
    "lower_stateful_keyed",
    "lower_stateful_join",
    "lower_stateful_union",
    "lower_stateful_window",
    "moves",
    "per_key_changes",
    "operator_spec",
    "stacked_operators",
    "with_buckets",
    "with_key_groups",
    "with_carrier",
]

#: Key buckets of a lowered plan (and of every job checkpointed before the number was recorded):
#: a few per core of a small cluster. A streaming job picks its own number when it first starts
#: (:func:`with_buckets`) and keeps it in its checkpoint.
BUCKETS = 16


def operator_spec(node: n.WindowAggregate, *, shift_ms: int) -> Any:
    """The picklable :class:`~krishiv_py.stateful.operator.OperatorSpec` of ``node``."""
    import pyarrow as pa

    from krishiv_py.stateful.operator import InputColumn, OperatorSpec
    from krishiv_py.stateful.processing_time import ProcessingTimeKernel
    from krishiv_py.stateful.window_kernel import WindowKernel

    schema = facts(node.input).schema
    et = facts(node.input).event_time
    processing = in_processing_time(node.window)
    assert et is not None or processing
    arrow = schema.to_arrow()
    # Every row crosses from the JVM into a Python worker: only the columns the operator reads
    # travel. A late-event handler receives whole rows; otherwise the keys and the aggregates'
    # inputs are all it reads (event time and arrival order travel apart, as __kp_tsv/__kp_seq).
    needed = {*node.keys, *(a.column for a in node.aggregates if a.column is not None)}
    whole = node.emission.late_handler is not None
    columns = tuple(
        InputColumn(name=f.name, type=arrow.field(f.name).type, index=i)
        for i, f in enumerate(schema)
        if whole or f.name in needed
    )
    kernel = _kernel_spec(node, et.future_tolerance_ms if et is not None else DEFAULT_FUTURE_TOLERANCE_MS)
    marks = n.watermarks_of(node.input)
    if processing:  # every row timed by its micro-batch's start: no disorder to profile
        return OperatorSpec(
            kernel=ProcessingTimeKernel(WindowKernel(kernel)),
            columns=columns,
            shift_ms=shift_ms,
            buckets=BUCKETS,
            batch_time=True,
        )
    auto = _auto_lag(node.input)
    if auto is not None:  # each row's source: the driver chooses each source's lag from its own rows
        columns += (InputColumn(name=AUTO_SOURCE, type=pa.int32(), index=len(schema)),)
    # One source: profile its disorder (an automatic lag: the driver does, from the exact times
    # the buckets report, behind the highest time seen before each micro-batch).
    profile = marks[0].lag_ms if len(marks) == 1 and auto is None else None
    ahead = _fire_lag(node.input)
    return OperatorSpec(
        kernel=WindowKernel(kernel),
        columns=columns,
        shift_ms=shift_ms,
        buckets=BUCKETS,
        profile_lag_ms=profile,
        auto=auto,
        fire_lag_ms=ahead,
    )


def _kernel_spec(node: n.WindowAggregate, future_tolerance_ms: int) -> Any:
    """The window kernel's :class:`~krishiv_py.stateful.state.KernelSpec` of ``node``."""
    from krishiv_py.stateful.state import KernelSpec

    e = node.emission
    return KernelSpec(
        keys=node.keys,
        window=node.window,
        aggs=kernel_aggs(node),
        trigger=e.trigger,
        allowed_lateness_ms=e.allowed_lateness_ms,
        accumulation=e.accumulation,
        future_tolerance_ms=future_tolerance_ms,
        pane_events=e.panes.any,
        ttl_ms=None if e.state_ttl is None else e.state_ttl.ttl_ms,
        ttl_time="event" if e.state_ttl is None else e.state_ttl.time,
    )


def lower_stateful_window(
    node: n.WindowAggregate, child: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """Encode the rows of ``child`` for the operator and apply it, grouped by key bucket."""
    spec = operator_spec(node, shift_ms=shift_ms)
    hashed = _hashed(node, facts(node.input).schema)
    # In processing time a row's time is its micro-batch's start (Spark's current_timestamp()
    # in a streaming query); the operator takes it from the micro-batch, the same value.
    ts = "unix_micros(current_timestamp())" if in_processing_time(node.window) else None
    return _apply(spec, child, hashed, streaming=streaming, ts=ts)


def _apply(
    spec: Any, child: RecipeNode, hashed: str | None, *, streaming: bool, ts: str | None = None
) -> StatefulApply:
    """The operator of ``spec`` over ``child``'s rows, encoded and bucketed by ``hashed``.

    ``ts``: the SQL of a row's time in µs (None: its event time).
    """
    exprs: list[str] = [f"{_bucket_expr(hashed, spec.buckets)} AS {quote(BUCKET)}"]
    # mapInArrow hands the packer exact Arrow columns (nulls, NaN, -0.0, µs timestamps of any
    # year): each column travels as it is, under a name no user column can take.
    exprs += [f"{quote(c.name)} AS {quote(c.value)}" for c in spec.columns]
    event_us = f"unix_micros({quote(ET)}) - {spec.shift_ms * 1000}L"
    exprs += [f"{event_us if ts is None else ts} AS {quote(TS_VALUE)}", f"{quote(SEQ)} AS {quote(SEQ)}"]
    ticks = (quote(BUCKET), f"CAST(NULL AS BINARY) AS {quote(PACKED)}")
    encoded = SelectExprs(child=child, exprs=tuple(exprs))
    return StatefulApply(child=encoded, operator=spec, streaming=streaming, tick_exprs=ticks, hashed=hashed)


def with_key_groups(
    recipe: SparkRecipe,
    key_groups: int,
    tasks: int,
    *,
    since: int = 0,
    stage_buckets: int | None = None,
    stage_key_groups: bool = False,
) -> SparkRecipe:
    """``recipe`` with its stateful operator's keys hashed into ``key_groups`` key groups and run on
    ``tasks`` tasks, each a contiguous range of them (SPEC 3.15).

    A row goes to task ``pmod(hash(keys), key_groups) * tasks DIV key_groups``;
    a task's state is laid out by key group, so a restart on another number
    of tasks finds it (``since``: the first micro-batch of this layout). A
    stage keyed by other columns runs on as many tasks by the same key groups
    of its own keys (``stage_key_groups``), or keeps ``stage_buckets`` hashed
    buckets of its own (by default as many as the tasks).
    """
    node = recipe.stateful
    if node is None:
        return recipe
    if not 1 <= tasks <= key_groups:
        raise ValueError(f"tasks must be between 1 and the {key_groups} key groups, got {tasks}")
    operator = attrs.evolve(node.operator, buckets=tasks, key_groups=key_groups, layout_since=since)
    if operator.then is not None:
        then = (
            operator.then.with_buckets(tasks, upstream=tasks, since=since, key_groups=key_groups)
            if stage_key_groups
            else operator.then.with_buckets(stage_buckets or tasks, upstream=tasks, since=since)
        )
        operator = attrs.evolve(operator, then=then)
    expr = _task_expr(key_groups, tasks)
    child: RecipeNode
    if node.branch_hashed is not None:
        assert isinstance(node.child, UnionAll)
        parts = zip(node.child.children, node.branch_hashed, strict=True)
        child = UnionAll(children=tuple(_rebucketed(c, hashed, tasks, expr) for c, hashed in parts))
    else:
        child = _rebucketed(node.child, node.hashed, tasks, expr)
    return attrs.evolve(recipe, root=attrs.evolve(node, child=child, operator=operator))


def _task_expr(key_groups: int, tasks: int) -> Callable[[str | None], str]:
    def expr(hashed: str | None) -> str:
        if hashed is None:
            return "0"
        return f"CAST(CAST(pmod(hash({hashed}), {key_groups}) AS BIGINT) * {tasks} DIV {key_groups} AS INT)"

    return expr


def with_buckets(recipe: SparkRecipe, buckets: int) -> SparkRecipe:
    """``recipe`` with its stateful operator's rows spread over ``buckets`` key buckets.

    A bucket is one call of the operator per micro-batch and one state blob,
    so the number trades fixed costs per call against parallelism. Rows go
    to ``pmod(hash(keys), buckets)``: a checkpoint's state is laid out for
    its number, which a restarted job must keep.
    """
    node = recipe.stateful
    if node is None or node.operator.buckets == buckets:
        return recipe
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    operator = attrs.evolve(node.operator, buckets=buckets)
    if operator.then is not None:  # a stage keyed by other columns: as many buckets of its own
        operator = attrs.evolve(operator, then=operator.then.with_buckets(buckets))
    child: RecipeNode
    if node.branch_hashed is not None:  # a union of windows: each branch by its own keys
        assert isinstance(node.child, UnionAll)
        parts = zip(node.child.children, node.branch_hashed, strict=True)
        child = UnionAll(children=tuple(_rebucketed(c, hashed, buckets) for c, hashed in parts))
    else:
        child = _rebucketed(node.child, node.hashed, buckets)
    root = attrs.evolve(node, child=child, operator=operator)
    return attrs.evolve(recipe, root=root)


#: What can carry the stateful operator's state between micro-batches (:class:`StatefulApply`).
CARRIERS = ("state-store", "krishiv-files", "one-task")


def with_carrier(recipe: SparkRecipe, carrier: str) -> SparkRecipe:
    """``recipe`` with its stateful operator's state carried by ``carrier`` (one of :data:`CARRIERS`)."""
    node = recipe.stateful
    if carrier not in CARRIERS:
        raise PlanError(
            f"unknown carrier of the stateful operator's state {carrier!r}: "
            f"choose one of {', '.join(CARRIERS)}"
        )
    if node is None or node.carrier == carrier:
        return recipe
    return attrs.evolve(recipe, root=attrs.evolve(node, carrier=carrier))


def _rebucketed(
    encoded: RecipeNode, hashed: str | None, buckets: int, expr: Callable[[str | None], str] | None = None
) -> RecipeNode:
    """The encoded rows of ``encoded`` spread over ``buckets`` key buckets by ``hashed`` (or by
    ``expr`` of it: a task of key groups)."""
    assert isinstance(encoded, SelectExprs) and encoded.exprs[0].endswith(f" AS {quote(BUCKET)}")
    bucket = _bucket_expr(hashed, buckets) if expr is None else expr(hashed)
    return attrs.evolve(encoded, exprs=(f"{bucket} AS {quote(BUCKET)}", *encoded.exprs[1:]))


def _hashed(node: n.WindowAggregate, schema: Schema) -> str | None:
    """What ``hash()`` takes to bucket a row: its key columns (floats as doubles), or None."""
    return _hashed_keys(node.keys, schema)


def _hashed_keys(keys: tuple[str, ...], schema: Schema) -> str | None:
    if not keys:
        return None
    parts = []
    for k in keys:
        dtype = schema.field(k).dtype
        parts.append(f"({quote(k)} + 0.0)" if dtype.name in ("float", "double") else quote(k))
    return ", ".join(parts)


def _bucket_expr(hashed: str | None, buckets: int) -> str:
    return "0" if hashed is None else f"CAST(pmod(hash({hashed}), {buckets}) AS INT)"


def lower_stateful_union(node: n.Union, branches: list[RecipeNode], *, streaming: bool) -> RecipeNode:
    """A union of operators' results as one operator: the branches' rows in one layout, a branch
    number each.

    ``branches``: each branch's operator lowered by its rule (a
    :class:`StatefulApply` of its own, in one call), whose rows, encoding and
    key buckets are kept; the columns of every branch share one layout by
    name. The filters and projections between a branch's operator and the
    union run over its results in the union's kernel.
    """
    applies = [b for b in branches if isinstance(b, StatefulApply)]
    assert len(applies) == len(branches)
    for branch, apply in zip(node.inputs, applies, strict=True):
        if apply.operator.then is not None or apply.side_inputs:
            raise PlanError(
                f"a union of operators' results takes each branch as one operator over streams; "
                f"{_describe(facts(branch).results_of)} of this branch runs as a stage after another "
                "one, which a union does not take yet"
            )
    betweens = tuple(_between(between(branch)) for branch in node.inputs)
    return operators_as_one(applies, streaming=streaming, tagged=False, betweens=betweens)


def operators_as_one(
    applies: list[StatefulApply], *, streaming: bool, tagged: bool, betweens: tuple[Any, ...] = ()
) -> StatefulApply:
    """The operators (each lowered by its rule, in one call) as one, a branch number per row;
    ``tagged``: each result says which operator made it (``__kp_branch``); ``betweens``: the
    filters and projections over each one's results (a union's branches)."""
    import pyarrow as pa

    from krishiv_py.names import BRANCH
    from krishiv_py.stateful.operator import InputColumn, OperatorSpec
    from krishiv_py.stateful.union import UnionKernel

    layout: dict[str, tuple[Any, str]] = {}
    for apply in applies:
        for c in apply.operator.columns:
            sql = DataType.from_arrow(c.type, c.name).name
            held = layout.setdefault(c.name, (c.type, sql))
            if held[0] != c.type:
                raise PlanError(
                    f"operators run as one (a union of windows, a join of two operators' results) "
                    f"read column {c.name!r} as {held[1]} in one and as {sql} in another; cast one "
                    "with with_column() first"
                )
    columns = [InputColumn(name=BRANCH, type=pa.int32(), index=0)]
    columns += [
        InputColumn(name=name, type=t, index=i + 1) for i, (name, (t, _)) in enumerate(layout.items())
    ]
    children = []
    for i, apply in enumerate(applies):
        encoded = apply.child
        assert isinstance(encoded, SelectExprs)
        own = {c.name for c in apply.operator.columns}
        exprs = [encoded.exprs[0], f"CAST({i} AS INT) AS {quote(columns[0].value)}"]
        for c in columns[1:]:
            value = quote(c.name) if c.name in own else f"CAST(NULL AS {layout[c.name][1]})"
            exprs.append(f"{value} AS {quote(c.value)}")
        exprs += encoded.exprs[-2:]  # the event time and the arrival order
        children.append(SelectExprs(child=encoded.child, exprs=tuple(exprs)))
    spec = OperatorSpec(
        kernel=UnionKernel(
            branches=tuple(a.operator.kernel for a in applies), tagged=tagged, betweens=betweens
        ),
        columns=tuple(columns),
        shift_ms=applies[0].operator.shift_ms,
        buckets=applies[0].operator.buckets,
    )
    return StatefulApply(
        child=UnionAll(children=tuple(children)),
        operator=spec,
        streaming=streaming,
        tick_exprs=applies[0].tick_exprs,
        branch_hashed=tuple(a.hashed for a in applies),
    )


def join_spec(node: n.Join, *, shift_ms: int) -> Any:
    """The picklable operator spec of a join: the join kernel's spec and the input layout."""

    import pyarrow as pa

    from krishiv_py.stateful.joins import JoinKernel, JoinSpec
    from krishiv_py.stateful.operator import InputColumn, OperatorSpec

    left, right = facts(node.left).schema.to_arrow(), facts(node.right).schema.to_arrow()
    left_cols = node.left_names
    names = node.right_names
    right_cols = tuple(names.values())
    window = node.window
    assert window is None or isinstance(window, TumblingWindow | SlidingWindow)
    emission = node.emission
    kernel = JoinSpec(
        kind=node.kind,
        how=node.how,
        keys=node.left_keys,
        left=left_cols,
        right=right_cols,
        key_types=tuple(left.field(k).type for k in node.left_keys),
        left_types=tuple(left.field(c).type for c in left_cols),
        right_types=tuple(right.field(c).type for c in names),
        between=node.between or (0, 0),
        window=window,
        max_age_ms=node.max_age_ms,
        allowed_lateness_ms=emission.allowed_lateness_ms,
        accumulation=emission.accumulation,
        ttl_ms=None if emission.state_ttl is None else emission.state_ttl.ttl_ms,
    )
    columns = tuple(InputColumn(name=f.name, type=f.type, index=i) for i, f in enumerate(kernel.row_schema))
    auto = _auto_lag(node)
    if auto is not None:  # each row's source: the driver chooses each side's lag from its own rows
        columns += (InputColumn(name=AUTO_SOURCE, type=pa.int32(), index=len(columns)),)
    # Each side with one watermark of a fixed lag: the micro-batch fires what it makes due.
    lags = (_fire_lag(node.left), _fire_lag(node.right))
    return OperatorSpec(
        kernel=JoinKernel(kernel),
        columns=columns,
        shift_ms=shift_ms,
        buckets=BUCKETS,
        auto=auto,
        side_fire_lags_ms=None if None in lags else cast("tuple[int, int]", lags),
    )


def _auto_lag(node: n.PlanNode) -> Any:
    """The first automatic lag of ``node``'s watermarks (None: their lags are fixed)."""
    return next((m.auto for m in n.watermarks_of(node) if m.auto is not None), None)


def lower_stateful_keyed(
    node: n.PlanNode, child: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """An operator per key over every row (an aggregation, a top-N, an over-aggregation): the rows
    by key bucket into the kernel its kind builds."""
    from krishiv_py.stateful.operator import OperatorSpec

    kind = kind_of(node)
    assert kind is not None and kind.kernel is not None
    kernel, columns = kind.kernel(node)
    (below,) = n.children(node)
    ahead = _fire_lag(below) if kind.waits_for_watermark else None  # (an over-aggregation's rows)
    spec = OperatorSpec(kernel=kernel, columns=columns, shift_ms=shift_ms, buckets=BUCKETS, fire_lag_ms=ahead)
    return _apply(spec, child, _hashed_keys(facts(node).keys or (), facts(below).schema), streaming=streaming)


def _fire_lag(below: n.PlanNode) -> int | None:
    """The lag of ``below``'s one watermark operator when it has one of a fixed lag (not one per
    Kafka partition): the operator then knows the watermark Spark moves to after a micro-batch,
    and fires what waits for it in that micro-batch. None: it fires in the next one."""
    marks = n.watermarks_of(below)
    if len(marks) == 1 and marks[0].auto is None and one_watermark(below):
        return marks[0].lag_ms
    return None


#: An operator above another, with the filters and projections between the two (first to last).
Link = tuple[n.PlanNode, tuple[n.Filter | n.Project, ...]]


def moves(links: list[Link]) -> list[bool]:
    """Per operator above the bottom one: whether it runs in the same call as the one before it
    (True: keyed by its keys and more) or as a stage of its own, its rows moved across the cluster."""
    keys = facts(links[0][0]).keys  # (a union's: each branch's, as its results name them)
    out = []
    for (below, _), (node, _) in itertools.pairwise(links):
        if _kind(node).slot == "window" and not getattr(kind_of(below), "window_after", True):
            raise PlanError(
                "on the stateful lowering a window follows a source, a join, a window, a union of "
                "windows, or an aggregation or a top-N per key; a "
                f"window after {_describe(below)} inside a longer chain is not supported yet"
            )
        own = facts(node).keys or ()
        beside = keys is not None and set(keys) <= set(own)
        if not beside:
            keys = own
        out.append(beside)
    return out


def _kind(node: n.PlanNode) -> OperatorKind:
    kind = kind_of(node)
    assert kind is not None, node
    return kind


def _describe(node: n.PlanNode) -> str:
    kind = kind_of(node)
    return "the union" if kind is None else kind.what


def stacked_operators(base: Any, bottom: n.PlanNode, uppers: list[Link]) -> Any:
    """``base`` (the bottom operator's rule) with the operators ``uppers`` after ``bottom``, in order.

    Other nodes of ``base``'s kind under ``bottom`` (a join of a join's first
    join) are lowered by ``base`` alone.

    Each runs in the same call as the one below it when its keys include
    those the rows are bucketed by (a :class:`~krishiv_py.stateful.chain.ChainKernel`),
    else as a stage of its own after the operator
    (:class:`~krishiv_py.stateful.stage.StageSpec`); the filters and
    projections between two run over the results in Arrow. A window keeps
    its windows for the allowed lateness of a join below it more, so that a
    late partner's new pairs correct them.
    """

    def rule(node: n.PlanNode, *children: RecipeNode, streaming: bool, shift_ms: int) -> RecipeNode:
        from krishiv_py.stateful.stage import StageSpec, Upstream, levels, nested

        apply = base(node, *children, streaming=streaming, shift_ms=shift_ms)
        assert isinstance(apply, StatefulApply)
        if node is not bottom:
            return apply
        # A join of an operator's results is a stage already (a join of a join of a join, the
        # last of several): what follows it runs in its call.
        staged = levels(apply.operator.then)
        kernel: Any = staged[-1].kernel if staged else apply.operator.kernel
        # The kernel of the operator (0) and of each stage after it (1...), and how each stage
        # reads the rows before it; an operator keyed alike joins the last one's call.
        kernels, reads = _stacked_kernels(node, kernel, uppers, shift_ms)
        if staged:
            kernels = [apply.operator.kernel, *(s.kernel for s in staged[:-1]), *kernels]
        buckets = apply.operator.buckets
        stages: list[StageSpec] = [
            attrs.evolve(level, kernel=k, then=None) for level, k in zip(staged, kernels[1:], strict=False)
        ]
        for then, step in zip(kernels[len(stages) + 1 :], reads, strict=True):
            upstream = Upstream((*stages[-1].before, stages[-1].kernel)) if stages else kernels[0]
            sizes = {"buckets": buckets, "upstream_buckets": buckets}
            stages.append(StageSpec(kernel=then, upstream=upstream, **sizes, **step))
        operator = attrs.evolve(apply.operator, kernel=kernels[0], then=nested(stages) if stages else None)
        return attrs.evolve(apply, operator=operator)

    return rule


def _stacked_kernels(
    node: n.PlanNode, kernel: Any, uppers: list[Link], shift_ms: int
) -> tuple[list[Any], list[dict[str, Any]]]:
    """``kernel`` (``node``'s) as the first kernel of a call, each operator of ``uppers`` in that
    call when keyed alike (a :class:`~krishiv_py.stateful.chain.ChainKernel`), else the kernel
    of a stage of its own; and how each stage reads the rows before it."""
    from krishiv_py.stateful.chain import ChainKernel

    kernel, carried = _fed(node, kernel, times=_times_read([u for u, _ in uppers]))
    retracts = facts(node).corrects
    kernels: list[Any] = [kernel]
    reads: list[dict[str, Any]] = []
    for i, ((upper, passing), beside) in enumerate(zip(uppers, moves([(node, ()), *uppers]), strict=True)):
        fed = i + 1 < len(uppers)  # it feeds the operator after it
        timed = _times_read([u for u, _ in uppers[i + 1 :]])  # what follows reads event times
        then, columns = _upper_kernel(upper, carried, shift_ms, retracting=retracts, feeds=fed, timed=timed)
        carried = facts(upper).correction_ms  # what the operator after it may see corrected
        step = {"columns": columns, "between": _between(passing), "retracting": retracts}
        retracts = facts(upper).corrects if fed else facts(upper).retracts
        if beside:
            kernels[-1] = ChainKernel(first=kernels[-1], then=then, **step)
        else:
            kernels.append(then)
            reads.append(step)
    return kernels, reads


def per_key_changes(node: n.PlanNode) -> bool:
    """Whether a change of ``node``'s results may withdraw a row of any age (per key, every row)."""
    kind = kind_of(node)
    return kind is not None and kind.changes  # (a union's branches: each as it is)


def _times_read(after: list[n.PlanNode]) -> bool:
    """Whether the operators ``after`` an aggregation or a top-N per key read its changes' event
    times: a window or an over-aggregation does, and so does one after aggregations and top-Ns
    per key (a change's time is the one of the change that made it)."""
    for node in after:
        if not per_key_changes(node):
            return bool(_kind(node).reads_times)
    return False


def _upper_kernel(
    node: n.PlanNode,
    carried_ms: int,
    shift_ms: int,
    *,
    retracting: bool,
    feeds: bool = False,
    timed: bool = False,
) -> tuple[Any, tuple[tuple[str, Any], ...]]:
    """The kernel of an operator above another, and the columns it reads (with Arrow types);
    ``feeds``: another operator takes its results; ``timed``: it reads their event times."""
    from krishiv_py.stateful.window_changes import ChangesWindowKernel
    from krishiv_py.stateful.window_kernel import WindowKernel

    kernel: Any
    kind = _kind(node)
    if kind.kernel is not None:  # per key (over every row, or a window's ranking)
        kernel, columns = kind.kernel(node, carried_ms, retracting=retracting, timed=timed)
        if feeds:  # as the operator after it takes its results
            kernel = kind.hand_on(node, kernel, times=timed, to_join=False)
    else:
        # (a kind without a kernel of its own that follows another operator: the window)
        spec = operator_spec(cast(n.WindowAggregate, node), shift_ms=shift_ms)
        window_spec = spec.kernel.spec
        if feeds and facts(node).corrects:
            window_spec = attrs.evolve(window_spec, accumulation="retracting")
        kept = window_spec.allowed_lateness_ms + carried_ms
        columns = spec.columns
        if retracting:  # its rows may withdraw earlier ones: a window that holds its rows
            kernel = ChangesWindowKernel(
                keys=window_spec.keys,
                window=window_spec.window,
                aggs=window_spec.aggs,
                allowed_lateness_ms=kept,
                accumulation=str(window_spec.accumulation),
            )
        else:
            kernel = WindowKernel(attrs.evolve(window_spec, allowed_lateness_ms=kept))
    return kernel, tuple((c.name, c.type) for c in columns)


def _between(nodes: tuple[n.Filter | n.Project, ...]) -> Any:
    """The filters and projections between two operators, run in Arrow (None: none)."""
    from krishiv_py.stateful.between import Between

    if not nodes:
        return None
    steps, why = _arrow_steps(nodes)
    if why is not None:
        raise PlanError(
            f"between two operators, filter(), select() and with_column() run in krishiv's "
            f"operator, which evaluates {why} differently from Spark SQL or not at all; "
            "move it after the last operator"
        )
    return Between(steps=tuple(steps))


def arrow_stages(nodes: Sequence[n.PlanNode]) -> Any:
    """The stages after the last operator (first to last) in Arrow on the driver, as between two
    operators; None when one is not a filter or a projection (a top-N) or an expression of them
    does not evaluate there as Spark SQL does (then a Spark batch job runs them)."""
    from krishiv_py.stateful.between import Between

    if not nodes or any(type(x) not in _STEPS for x in nodes):
        return None
    steps, why = _arrow_steps(cast("tuple[n.Filter | n.Project, ...]", tuple(nodes)))
    return Between(steps=tuple(steps)) if why is None else None


def _arrow_steps(nodes: tuple[n.Filter | n.Project, ...]) -> tuple[list[Any], str | None]:
    """Each node as a step of :class:`~krishiv_py.stateful.between.Between`, and what of them
    Arrow does not evaluate as Spark SQL does (None: everything)."""
    from krishiv_py.expr import dtype_of
    from krishiv_py.stateful.arrow_expr import result_type, unsupported

    steps: list[Any] = []
    for node in nodes:
        schema = facts(node.input).schema
        step, exprs = _STEPS[type(node)](node)
        for e in exprs:
            why = unsupported(e, schema)
            if why is None and result_type(e, schema) != dtype_of(e, schema):
                why = f"{e!r} (Spark computes it as {result_type(e, schema).name})"
            if why is not None:
                return [], why
        steps.append((step, exprs, schema))
    return steps, None


#: What :class:`~krishiv_py.stateful.between.Between` runs of each step between two operators.
_STEPS: dict[type[Any], Callable[[Any], tuple[str, tuple[Any, ...]]]] = {
    n.Filter: lambda node: ("filter", (node.predicate,)),
    n.Project: lambda node: ("select", tuple(node.exprs)),
}


def lower_stateful_join(
    node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """Both sides' rows in one layout, tagged by side, into krishiv's operator by key bucket.

    A side that is another operator's results (a join's, a window's, an
    aggregation's or a top-N's per key: SPEC 3.13) makes this join a stage
    after that operator (:func:`_join_after_operator`); both sides such
    results, a stage after both operators run as one (:func:`_join_of_operators`).
    """
    if isinstance(left, StatefulApply) and isinstance(right, StatefulApply):
        return _join_of_operators(node, left, right, streaming=streaming, shift_ms=shift_ms)
    if isinstance(left, StatefulApply) or isinstance(right, StatefulApply):
        return _join_after_operator(node, left, right, shift_ms=shift_ms)
    spec = join_spec(node, shift_ms=shift_ms)
    kernel = spec.kernel.spec
    both = UnionAll(
        children=(
            _join_side(node, kernel, "left", left),
            _join_side(node, kernel, "right", right),
        )
    )
    return _apply(spec, both, _hashed_keys(kernel.keys, facts(node.left).schema), streaming=streaming)


def _join_side(node: n.Join, kernel: Any, name: str, child: RecipeNode) -> RecipeNode:
    """One side's rows in the join's row layout: its side, the keys, its columns, the other's as nulls."""
    left_schema, right_schema = facts(node.left).schema, facts(node.right).schema
    types = {c: left_schema.field(c).dtype.name for c in kernel.left}
    types.update({new: right_schema.field(old).dtype.name for old, new in node.right_names.items()})
    if name == "left":
        keys, own = node.left_keys, {c: c for c in kernel.left}
    else:
        keys, own = node.right_keys, {new: old for old, new in node.right_names.items()}
    exprs = [f"'{name}' AS {quote(JOIN_SIDE)}"]
    exprs += [f"{quote(src)} AS {quote(k)}" for src, k in zip(keys, kernel.keys, strict=True)]
    for c in (*kernel.left, *kernel.right):
        exprs.append(
            f"{quote(own[c])} AS {quote(c)}" if c in own else f"CAST(NULL AS {types[c]}) AS {quote(c)}"
        )
    if _auto_lag(node) is not None:  # the row's source (its watermark's index), for its lag
        exprs.append(quote(AUTO_SOURCE))
    exprs += [quote(ET), quote(SEQ)]
    return SelectExprs(child=child, exprs=tuple(exprs))


@attrs.frozen
class _Upstream:
    """How one operator's results enter a join stage after it."""

    #: The operator's kernel, its results carrying their event times where it has its own.
    kernel: Any
    #: How much longer than its own lateness the join keeps rows: as long as the operator may
    #: still correct the results it sent.
    carried_ms: int
    #: Its results carry ``kind`` (emits and retractions).
    retracting: bool
    #: Its results carry their own event times (``__kp_ts``); False: a window's, ``window_end - 1 ms``.
    timed: bool


def _upstream(inner: n.PlanNode, kernel: Any) -> _Upstream:
    """``inner`` (the operator under a join's side, lowered to ``kernel``) as a join stage's input
    (an operator in a chain takes its results by :func:`_fed`): its kernel handing on its results
    with their event times (a window's are ``window_end - 1 ms``), kept as long as the analysed
    plan says they may be corrected (:attr:`~krishiv_py.plan.analysis.Facts.join_correction_ms`)."""
    f = facts(inner)
    if branches(inner):  # a union: each branch as it would enter alone
        ups = [_upstream(b, k) for b, k in zip(branches(inner), kernel.branches, strict=True)]
        return _Upstream(
            attrs.evolve(kernel, branches=tuple(u.kernel for u in ups)),
            f.join_correction_ms,
            any(u.retracting for u in ups),
            timed=ups[0].timed,  # (a union's branches share their kind of event time)
        )
    handed = _kind(inner).hand_on(inner, kernel, times=True, to_join=True)
    timed = f.event_time is None or not f.event_time.from_window
    return _Upstream(handed, f.join_correction_ms, f.retracts, timed=timed)


def _fed(node: n.PlanNode, kernel: Any, *, times: bool) -> tuple[Any, int]:
    """``node``'s kernel as the operator after it in a chain (its call or a stage) takes its
    results (:attr:`~krishiv_py.planner.spark.kinds.OperatorKind.hand_on`; ``times``: an operator
    after reads their event times), and how much longer that operator keeps what it holds: as long
    as ``node`` may still correct them (the analysed plan's
    :attr:`~krishiv_py.plan.analysis.Facts.correction_ms`). A union's branches each as they
    would feed alone. (A join stage after an operator takes its results by :func:`_upstream`.)"""
    if branches(node):  # a union
        pairs = zip(branches(node), kernel.branches, strict=True)
        fed = [_fed(b, inner, times=times)[0] for b, inner in pairs]
        return attrs.evolve(kernel, branches=tuple(fed)), facts(node).correction_ms
    return _kind(node).hand_on(node, kernel, times=times, to_join=False), facts(node).correction_ms


def _join_after_operator(node: n.Join, left: RecipeNode, right: RecipeNode, *, shift_ms: int) -> RecipeNode:
    """A join whose one side is another operator's results: a join stage after that operator.

    The operator's results (with their event times) cross the cluster to
    this join's key buckets as one side of its rows; the other side's rows
    are routed there by their keys in the same micro-batch. This join keeps
    rows as much longer as the operator may still correct its results (a
    join's allowed lateness, a window's and one ms, an aggregation's or a
    top-N's per key: while the job runs), so that a corrected row still
    meets its partners (one lateness per join: the other side's rows are
    kept as long, and taken as late).
    """
    from krishiv_py.stateful.joins import JoinKernel
    from krishiv_py.stateful.stage import JoinSide, StageSpec, Upstream, levels, nested

    upstream_left = isinstance(left, StatefulApply)
    apply, other = (left, right) if upstream_left else (right, left)
    side_plan = node.left if upstream_left else node.right
    inner = facts(side_plan).results_of
    assert isinstance(apply, StatefulApply) and not isinstance(other, StatefulApply)
    # The operator's results are its last stage's when it has stages (a join of a join of a
    # join): this join is one more stage after them, its other side routed into it.
    before = levels(apply.operator.then)
    last = before[-1].kernel if before else apply.operator.kernel
    source = _upstream(inner, last)
    spec = join_spec(node, shift_ms=shift_ms)
    lateness = spec.kernel.spec.allowed_lateness_ms + source.carried_ms
    kernel = attrs.evolve(spec.kernel.spec, allowed_lateness_ms=lateness, changes=source.retracting)
    side = "left" if upstream_left else "right"
    layout = _side_layout(node, kernel, spec.columns, side)
    encoded = _apply(
        spec, _join_side(node, kernel, "right" if upstream_left else "left", other), None, streaming=False
    )
    if before:
        before[-1] = attrs.evolve(before[-1], kernel=source.kernel)
    stage = StageSpec(
        kernel=JoinKernel(kernel),
        upstream=Upstream((apply.operator.kernel, *(b.kernel for b in before))) if before else source.kernel,
        columns=(),
        buckets=apply.operator.buckets,
        upstream_buckets=apply.operator.buckets,
        retracting=source.retracting,
        between=_between(between(side_plan)),
        join_side=JoinSide(side=side, layout=layout, retracting=source.retracting, timed=source.timed),
        side_input=tuple((c.name, c.type, c.value) for c in spec.columns),
    )
    first = apply.operator.kernel if before else source.kernel
    operator = attrs.evolve(apply.operator, kernel=first, then=nested([*before, stage]))
    assert isinstance(encoded.child, SelectExprs)
    sides = (*apply.side_inputs, (len(before), encoded.child))
    return attrs.evolve(apply, operator=operator, side_inputs=sides)


def _join_of_operators(
    node: n.Join, left: StatefulApply, right: StatefulApply, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """A join of two operators' results: both operators as one, the join a stage after it.

    The two operators (windows, joins, aggregations or top-Ns per key) run as
    the branches of one operator (as a union of windows does), each over its
    own rows by its own keys; their results, each tagged with its branch,
    cross the cluster to the join's key buckets, where the first's are the
    left side's rows and the second's the right side's. The join keeps rows
    as much longer as either may still correct its results
    (:func:`_join_after_operator`).
    """
    from krishiv_py.stateful.joins import JoinKernel
    from krishiv_py.stateful.stage import JoinSide, StageSpec

    if left.operator.then is not None or right.operator.then is not None:
        raise PlanError(
            "the stateful lowering joins two operators' results when each runs in one call; a join "
            "of a join's rows and another operator's results (a join of a join of a join and a "
            "window, say) is not supported yet: a join's rows with a stream's are"
        )
    inners = [facts(side).results_of for side in (node.left, node.right)]
    if any(branches(inner) for inner in inners):  # a union
        raise PlanError(
            "the stateful lowering joins a union of operators' results with a stream, not yet with "
            "another operator's results: join each branch with it and union the joins' rows"
        )
    _check_same_types(facts(inners[0]).schema, facts(inners[1]).schema)
    applies = (left, right)
    sources = [_upstream(inner, a.operator.kernel) for inner, a in zip(inners, applies, strict=True)]
    timed = [
        attrs.evolve(a, operator=attrs.evolve(a.operator, kernel=s.kernel))
        for a, s in zip(applies, sources, strict=True)
    ]
    both = operators_as_one(timed, streaming=streaming, tagged=True)
    spec = join_spec(node, shift_ms=shift_ms)
    retracting = any(s.retracting for s in sources)
    lateness = spec.kernel.spec.allowed_lateness_ms + max(s.carried_ms for s in sources)
    kernel = attrs.evolve(spec.kernel.spec, allowed_lateness_ms=lateness, changes=retracting)
    sides = [
        JoinSide(
            side=name,
            layout=_side_layout(node, kernel, spec.columns, name),
            retracting=retracting,
            between=_between(between(side)),
            timed=source.timed,
        )
        for name, side, source in zip(("left", "right"), (node.left, node.right), sources, strict=True)
    ]
    stage = StageSpec(
        kernel=JoinKernel(kernel),
        upstream=both.operator.kernel,
        columns=(),
        buckets=both.operator.buckets,
        upstream_buckets=both.operator.buckets,
        retracting=retracting,
        join_side=attrs.evolve(sides[0], other=sides[1]),
    )
    return attrs.evolve(both, operator=attrs.evolve(both.operator, then=stage))


def _check_same_types(left: Schema, right: Schema) -> None:
    """:class:`PlanError` when two operators' results a join takes name a column alike with
    different types (the operators run as one, their results in one layout)."""
    for f in left:
        if f.name in right.names and right.field(f.name).dtype != f.dtype and f.name != RESULT_KIND:
            raise PlanError(
                f"a join of two operators' results reads column {f.name!r} as {f.dtype.name} on the "
                f"left and as {right.field(f.name).dtype.name} on the right; rename one of them "
                "(.alias() in its agg(), or select() before its operator)"
            )


def _side_layout(
    node: n.Join, kernel: Any, columns: tuple[Any, ...], side: str
) -> tuple[tuple[str, Any, str | None], ...]:
    """Each column of the join's rows, its type and the column of ``side``'s results it comes
    from (None: the other side's)."""
    if side == "left":
        sources = dict(zip(kernel.keys, node.left_keys, strict=True)) | {c: c for c in kernel.left}
    else:
        renamed = {new: old for old, new in node.right_names.items()}
        sources = dict(zip(kernel.keys, node.right_keys, strict=True)) | renamed
    return tuple((c.name, c.type, sources.get(c.name)) for c in columns if c.name != JOIN_SIDE)
