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
2. unbounded input: ``groupBy(bucket).applyInPandasWithState(...)`` with no
   timeout, unioned with an internal *tick* source through which the job
   wakes the buckets holding state after the watermark moved; bounded input
   (or a ``collect()`` snapshot): ``groupBy(bucket).applyInPandas(...)``,
   every row in one step, then end of input;
3. the operator emits one binary payload per bucket call; the job decodes
   results, late rows and statistics on the driver.

Rows without a valid event time are not filtered out: they reach the
operator, which hands them to the late-event handler as ``invalid``.
"""

from __future__ import annotations

from typing import Any

import attrs

from krishiv_py.names import BUCKET, ET, JOIN_SIDE, PACKED, SEQ, TS_VALUE
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow
from krishiv_py.planner.spark.recipe import RecipeNode, SelectExprs, SparkRecipe, StatefulApply, UnionAll
from krishiv_py.planner.sql import quote
from krishiv_py.types import Schema

__all__ = [
    "BUCKETS",
    "StatefulApply",
    "join_spec",
    "lower_stateful_chain",
    "lower_stateful_keyed",
    "keyed_operator",
    "lower_stateful_join",
    "lower_stateful_window",
    "operator_spec",
    "with_buckets",
]

#: Key buckets of a lowered plan (and of every job checkpointed before the number was recorded):
#: a few per core of a small cluster. A streaming job picks its own number when it first starts
#: (:func:`with_buckets`) and keeps it in its checkpoint.
BUCKETS = 16


def operator_spec(node: n.WindowAggregate, *, shift_ms: int) -> Any:
    """The picklable :class:`~krishiv_py.stateful.operator.OperatorSpec` of ``node``."""
    from krishiv_py.stateful.operator import InputColumn, OperatorSpec
    from krishiv_py.stateful.state import KernelSpec
    from krishiv_py.stateful.window_kernel import WindowKernel

    schema = n.schema_of(node.input)
    et = n.event_time(node.input)
    assert et is not None
    arrow = schema.to_arrow()
    # Every row crosses from the JVM into a Python worker: only the columns the operator reads
    # travel. A late-event handler receives whole rows; otherwise the keys and the aggregates'
    # inputs are all it reads (event time and arrival order travel apart, as __kp_tsv/__kp_seq).
    needed = {*node.keys, *(a.column for a in node.aggregates if a.column is not None)}
    whole = node.emission.late_handler is not None
    columns = tuple(
        InputColumn(
            name=f.name,
            type=arrow.field(f.name).type,
            index=i,
        )
        for i, f in enumerate(schema)
        if whole or f.name in needed
    )
    aggs = kernel_aggs(node)
    window = node.window
    kernel = KernelSpec(
        keys=node.keys,
        window=window,
        aggs=aggs,
        trigger=node.emission.trigger,
        allowed_lateness_ms=node.emission.allowed_lateness_ms,
        accumulation=node.emission.accumulation,
        future_tolerance_ms=et.future_tolerance_ms,
        pane_events=node.emission.panes.any,
        ttl_ms=None if node.emission.state_ttl is None else node.emission.state_ttl.ttl_ms,
        ttl_time="event" if node.emission.state_ttl is None else node.emission.state_ttl.time,
    )
    marks = n.watermarks_of(node.input)
    return OperatorSpec(
        kernel=WindowKernel(kernel),
        columns=columns,
        shift_ms=shift_ms,
        buckets=BUCKETS,
        profile_lag_ms=marks[0].lag_ms if len(marks) == 1 else None,  # one source: profile its disorder
    )


def kernel_aggs(node: n.WindowAggregate | n.KeyedAggregate) -> tuple[Any, ...]:
    """The kernel's :class:`~krishiv_py.stateful.aggregates.AggSpec` of each aggregate of ``node``."""
    from krishiv_py.stateful.aggregates import AggSpec

    inp = n.schema_of(node.input).to_arrow()
    out = n.schema_of(node).to_arrow()
    return tuple(
        AggSpec(
            name=a.name,
            func=a.func,
            column=a.column,
            out_type=out.field(a.name).type,
            in_type=inp.field(a.column).type if a.column is not None else None,
        )
        for a in node.aggregates
    )


def lower_stateful_window(
    node: n.WindowAggregate, child: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """Encode the rows of ``child`` for the operator and apply it, grouped by key bucket."""
    spec = operator_spec(node, shift_ms=shift_ms)
    hashed = _hashed(node, n.schema_of(node.input))
    return _apply(spec, child, hashed, streaming=streaming)


def _apply(spec: Any, child: RecipeNode, hashed: str | None, *, streaming: bool) -> StatefulApply:
    """The operator of ``spec`` over ``child``'s rows, encoded and bucketed by ``hashed``."""
    exprs: list[str] = [f"{_bucket_expr(hashed, spec.buckets)} AS {quote(BUCKET)}"]
    # mapInArrow hands the packer exact Arrow columns (nulls, NaN, -0.0, µs timestamps of any
    # year): each column travels as it is, under a name no user column can take.
    exprs += [f"{quote(c.name)} AS {quote(c.value)}" for c in spec.columns]
    exprs += [
        f"unix_micros({quote(ET)}) - {spec.shift_ms * 1000}L AS {quote(TS_VALUE)}",
        f"{quote(SEQ)} AS {quote(SEQ)}",
    ]
    ticks = (quote(BUCKET), f"CAST(NULL AS BINARY) AS {quote(PACKED)}")
    encoded = SelectExprs(child=child, exprs=tuple(exprs))
    return StatefulApply(child=encoded, operator=spec, streaming=streaming, tick_exprs=ticks, hashed=hashed)


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
    encoded = node.child
    assert isinstance(encoded, SelectExprs) and encoded.exprs[0].endswith(f" AS {quote(BUCKET)}")
    exprs = (f"{_bucket_expr(node.hashed, buckets)} AS {quote(BUCKET)}", *encoded.exprs[1:])
    operator = attrs.evolve(node.operator, buckets=buckets)
    if operator.then is not None:  # a stage keyed by other columns: as many buckets of its own
        operator = attrs.evolve(
            operator, then=attrs.evolve(operator.then, buckets=buckets, upstream_buckets=buckets)
        )
    root = attrs.evolve(node, child=attrs.evolve(encoded, exprs=exprs), operator=operator)
    return attrs.evolve(recipe, root=root)


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


def join_spec(node: n.Join, *, shift_ms: int) -> Any:
    """The picklable operator spec of a join: the join kernel's spec and the input layout."""

    from krishiv_py.stateful.joins import JoinKernel, JoinSpec
    from krishiv_py.stateful.operator import InputColumn, OperatorSpec

    left, right = n.schema_of(node.left).to_arrow(), n.schema_of(node.right).to_arrow()
    left_cols = tuple(f.name for f in left if f.name not in node.left_keys)
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
    return OperatorSpec(kernel=JoinKernel(kernel), columns=columns, shift_ms=shift_ms, buckets=BUCKETS)


def keyed_operator(node: n.KeyedAggregate | n.KeyedTopN) -> tuple[Any, tuple[Any, ...]]:
    """The kernel of an operator per key over every row, and the input columns it reads."""
    from krishiv_py.stateful.keyed_agg import KeyedAggKernel
    from krishiv_py.stateful.keyed_topn import KeyedTopNKernel
    from krishiv_py.stateful.operator import InputColumn

    schema = n.schema_of(node.input)
    arrow = schema.to_arrow()
    kernel: Any
    if isinstance(node, n.KeyedAggregate):
        needed = {*node.keys, *(a.column for a in node.aggregates if a.column is not None)}
        kernel = KeyedAggKernel(keys=node.keys, aggs=kernel_aggs(node))
    else:  # a top-N's rows are its results: every column travels
        needed = set(schema.names)
        kernel = KeyedTopNKernel(
            keys=node.keys,
            n=node.n,
            by=node.by,
            columns=schema.names,
            ascending=node.ascending,
            ties=node.ties,
        )
    columns = tuple(
        InputColumn(name=f.name, type=arrow.field(f.name).type, index=i)
        for i, f in enumerate(schema)
        if f.name in needed
    )
    return kernel, columns


def lower_stateful_keyed(
    node: n.KeyedAggregate | n.KeyedTopN, child: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """An operator per key over every row (aggregation or top-N): the rows by key bucket into its kernel."""
    from krishiv_py.stateful.operator import OperatorSpec

    kernel, columns = keyed_operator(node)
    spec = OperatorSpec(kernel=kernel, columns=columns, shift_ms=shift_ms, buckets=BUCKETS)
    return _apply(spec, child, _hashed_keys(node.keys, n.schema_of(node.input)), streaming=streaming)


def lower_stateful_chain(then: n.WindowAggregate | n.KeyedAggregate | n.KeyedTopN) -> Any:
    """The join rule of an operator right after a join: both in one operator call (a chain kernel).

    The operator's keys include the join's, so its rows of one key are in
    the join's bucket already; it takes the join's rows with their event
    time (the later of the two rows'). A window keeps its windows for the
    join's allowed lateness more, so that a late partner's new pairs
    correct them; an operator over every row keeps every row anyway.
    """

    def rule(
        node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
    ) -> RecipeNode:
        from krishiv_py.stateful.chain import ChainKernel

        apply, first, kernel, columns = _after_join(
            then, node, left, right, streaming=streaming, shift_ms=shift_ms
        )
        chain = ChainKernel(first=first, then=kernel, columns=columns)
        return attrs.evolve(apply, operator=attrs.evolve(apply.operator, kernel=chain))

    return rule


def lower_stateful_staged(then: n.WindowAggregate | n.KeyedAggregate | n.KeyedTopN) -> Any:
    """The join rule of an operator after a join keyed by other columns: a stage of its own.

    The join's results cross the cluster to the operator's key buckets in
    the same micro-batch (:mod:`krishiv_py.stateful.stage`); the operator
    takes them as the chain does (event time, the join's allowed lateness).
    """

    def rule(
        node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
    ) -> RecipeNode:
        from krishiv_py.stateful.stage import StageSpec

        apply, first, kernel, columns = _after_join(
            then, node, left, right, streaming=streaming, shift_ms=shift_ms
        )
        stage = StageSpec(
            kernel=kernel,
            upstream=first,
            columns=columns,
            buckets=apply.operator.buckets,
            upstream_buckets=apply.operator.buckets,
        )
        return attrs.evolve(apply, operator=attrs.evolve(apply.operator, kernel=first, then=stage))

    return rule


def _after_join(
    then: n.WindowAggregate | n.KeyedAggregate | n.KeyedTopN,
    node: n.Join,
    left: RecipeNode,
    right: RecipeNode,
    *,
    streaming: bool,
    shift_ms: int,
) -> tuple[StatefulApply, Any, Any, tuple[tuple[str, Any], ...]]:
    """The join's operator, its kernel (results with event times), the next operator's kernel and columns."""
    from krishiv_py.stateful.joins import JoinKernel
    from krishiv_py.stateful.window_kernel import WindowKernel

    apply = lower_stateful_join(node, left, right, streaming=streaming, shift_ms=shift_ms)
    assert isinstance(apply, StatefulApply)
    kernel: Any
    if isinstance(then, n.WindowAggregate):
        spec = operator_spec(then, shift_ms=shift_ms)
        window_spec = spec.kernel.spec
        kept = window_spec.allowed_lateness_ms + node.emission.allowed_lateness_ms
        kernel, columns = WindowKernel(attrs.evolve(window_spec, allowed_lateness_ms=kept)), spec.columns
    else:
        kernel, columns = keyed_operator(then)
    first = JoinKernel(attrs.evolve(apply.operator.kernel.spec, event_times=True))
    return apply, first, kernel, tuple((c.name, c.type) for c in columns)


def lower_stateful_join(
    node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """Both sides' rows in one layout, tagged by side, into krishiv's operator by key bucket."""
    spec = join_spec(node, shift_ms=shift_ms)
    kernel = spec.kernel.spec
    left_schema, right_schema = n.schema_of(node.left), n.schema_of(node.right)
    right_names = node.right_names
    types = {c: left_schema.field(c).dtype.name for c in kernel.left}
    types.update({new: right_schema.field(old).dtype.name for old, new in right_names.items()})

    def side(name: str, child: RecipeNode, keys: tuple[str, ...], own: dict[str, str]) -> RecipeNode:
        exprs = [f"'{name}' AS {quote(JOIN_SIDE)}"]
        exprs += [f"{quote(src)} AS {quote(k)}" for src, k in zip(keys, kernel.keys, strict=True)]
        for c in (*kernel.left, *kernel.right):
            if c in own:
                exprs.append(f"{quote(own[c])} AS {quote(c)}")
            else:
                exprs.append(f"CAST(NULL AS {types[c]}) AS {quote(c)}")
        exprs += [quote(ET), quote(SEQ)]
        return SelectExprs(child=child, exprs=tuple(exprs))

    left_own = {c: c for c in kernel.left}
    right_own = {new: old for old, new in right_names.items()}
    both = UnionAll(
        children=(
            side("left", left, node.left_keys, left_own),
            side("right", right, node.right_keys, right_own),
        )
    )
    return _apply(spec, both, _hashed_keys(kernel.keys, left_schema), streaming=streaming)
