"""Filtered aggregates as plain ones: ``agg(x, filter=c)`` is ``agg(CASE WHEN c THEN x END)``.

SQL's ``COUNT(*) FILTER (WHERE c)`` and the builder's
``kp.count(kp.col("*"), filter=c)`` aggregate the rows where ``c`` is true
(not false, not null). For ``count``, ``sum``, ``avg``, ``min``, ``max``
and ``count_distinct`` that is the aggregate of a column which holds the
value where ``c`` is true and null elsewhere, since each of them skips
nulls: :func:`unfiltered` rewrites a plan so, adding the column in a
projection right under the aggregation (named after the aggregate, under
a name no input column has). Every lowering runs the rewritten
plan (Spark's own aggregation, krishiv's operator, a batch job); the plan
a user builds, shows and checkpoints keeps the filters as written.

``first`` and ``last`` take the earliest or latest row's value, null or
not, so a column of nulls would change them: they take no ``filter=``
(:func:`~krishiv_py.expr.check_filter`).

Examples
--------
>>> import krishiv_py as kp
>>> from krishiv_py.api.stream import placeholder
>>> s = placeholder("k string, t bigint, price bigint", "bids").watermark("t", 0)
>>> cheap = kp.count(kp.col("*"), filter=kp.col("price") < 10).alias("cheap")
>>> plan = unfiltered(s.key_by("k").tumbling_window(10).agg(cheap).plan)
>>> plan.aggregates[0].func, plan.aggregates[0].column, plan.aggregates[0].filter
('count', 'cheap_filtered', None)
"""

from __future__ import annotations

import attrs

from krishiv_py.expr import AggCall, Alias, Case, Column, ExprNode, Literal, output_name
from krishiv_py.plan import nodes as n

__all__ = ["unfiltered"]


def unfiltered(plan: n.PlanNode) -> n.PlanNode:
    """``plan`` with every filtered aggregate an aggregate of a column (see the module docstring)."""
    new = tuple(unfiltered(c) for c in n.children(plan))
    plan = n.with_children(plan, new) if new else plan
    if not isinstance(plan, n.WindowAggregate | n.KeyedAggregate):
        return plan
    if all(a.filter is None for a in plan.aggregates):
        return plan
    schema = n.schema_of(plan.input)
    derived: list[ExprNode] = []
    calls: list[AggCall] = []
    for call in plan.aggregates:
        if call.filter is None:
            calls.append(call)
            continue
        name = _free(f"{call.name}_filtered", {*schema.names, *(output_name(d) for d in derived)})
        value: ExprNode = Column(call.column) if call.column is not None else Literal(1)
        derived.append(Alias(Case(branches=((call.filter, value),)), name))
        calls.append(AggCall(call.func, name, call.name))
    kept: tuple[ExprNode, ...] = tuple(Column(f.name) for f in schema)
    projected = n.Project(input=plan.input, exprs=(*kept, *derived))
    return attrs.evolve(plan, input=projected, aggregates=tuple(calls))


def _free(name: str, taken: set[str]) -> str:
    """``name``, or ``name`` with ``_`` added until no column of ``taken`` has it."""
    while name in taken:
        name += "_"
    return name
