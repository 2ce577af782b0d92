"""GROUP BY in Krishiv's SQL: a window's aggregation, or an updating one per key.

- ``GROUP BY keys, helper(...)`` is ``.key_by(*keys)`` and the helper's
  window (:mod:`krishiv_py.sql.windows`) with the ``window.*`` settings,
  then ``.agg(...)`` of the aggregates of ``SELECT``. Keys come in the
  order ``SELECT`` shows them, then the other ``GROUP BY`` columns.
  ``HAVING`` is a ``.filter(...)`` on the results, ``QUALIFY`` their window
  top-N (:func:`krishiv_py.sql.ranking.qualify`), and a ``SELECT`` that is
  not the results as they come (keys, ``window_start``, ``window_end``,
  aggregates) is a ``.select(...)`` after them.
- ``FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), size)) GROUP BY
  window_start, window_end, keys`` (Flink's window aggregation) is the
  same, with the window TVF's window.
- ``GROUP BY keys`` without a window helper (Flink's regular group
  aggregation) is ``.key_by(*keys).agg(...)``: one updating row per key,
  with a ``kind`` column.

A window's time column must be the event time of the rows it groups: the
column of their watermark, passed on unchanged, or over a join's rows the
column that holds each joined row's event time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

import krishiv_py.expr as kx
import krishiv_py.sql.ranking as ranking
from krishiv_py.expr import AggExpr, Column, Expr, ExprNode
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.sql.expressions import Resolver, aggregate, alias_of, filter_of, is_aggregate, scalar
from krishiv_py.sql.joins import BOUNDS, event_time_columns
from krishiv_py.sql.scope import (
    Context,
    Relation,
    column_origin,
    errors_at,
    is_star,
    joined_column,
    no_helpers,
    resolver,
    time_source,
    unalias,
)
from krishiv_py.sql.settings import apply_settings, emission_options
from krishiv_py.sql.source import DIALECT
from krishiv_py.sql.windows import WindowCall, helper_of, window_call

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream
    from krishiv_py.api.windowed import WindowedStream

__all__ = ["agg_expr", "aggregated"]


@attrs.frozen
class _Output:
    """One column of the query's result: its name and the column of the window results it shows."""

    name: str
    source: str
    node: exp.Expression = attrs.field(eq=False)


def aggregated(node: exp.Select, rel: Relation, ctx: Context) -> Stream:
    """The results of a query that aggregates (``GROUP BY``, an aggregate or a window helper in
    ``SELECT``): its window's, or without a window helper one updating row per key."""
    resolve = resolver(rel, ctx)
    keys, window = _group_by(node, rel, ctx, resolve)
    outputs, aggs, shown_keys = _select_list(node, keys, window, rel, ctx, resolve)
    if window is None:
        return _grouped(node, rel, keys, outputs, aggs, shown_keys, ctx)
    if n.window_aggregates(rel.stream.plan):
        raise ctx.sql.error(
            window.node, "a window over the results of a window (chained windows) is not supported"
        )
    _check_time(window, rel, ctx)
    ordered = list(dict.fromkeys([*shown_keys, *keys]))
    with errors_at(ctx, window.node):
        windowed = window.assign(rel.stream.key_by(*ordered) if ordered else rel.stream)
    ctx.windows.append(window)
    windowed = _emission(windowed, ctx)
    if not aggs:
        raise ctx.sql.error(node, "a windowed query needs at least one aggregate, e.g. COUNT(*)")
    with errors_at(ctx, node, "SELECT: "):
        out = windowed.agg(*aggs)
    having = node.args.get("having")
    if having is not None:
        out = _having(having.this, out, outputs, aggs, window, ctx, resolve)
    qualify = node.args.get("qualify")
    if qualify is not None:
        names = _ResultNames(out, outputs, aggs, window, ctx, resolve)
        out = ranking.qualify(qualify.this, out, names.result_column, ctx)
    natural = [c for c in out.columns if c != n.KIND_COLUMN]
    if [(o.name, o.source) for o in outputs] == [(c, c) for c in natural]:
        return out
    exprs = [alias_of(Column(o.source), o.name) for o in outputs]
    if n.KIND_COLUMN in out.columns:
        exprs.append(Column(n.KIND_COLUMN))
    with errors_at(ctx, node, "SELECT: "):
        return out.select(*(Expr(e) for e in exprs))


def _grouped(
    node: exp.Select,
    rel: Relation,
    keys: list[str],
    outputs: list[_Output],
    aggs: list[AggExpr],
    shown_keys: list[str],
    ctx: Context,
) -> Stream:
    """``GROUP BY`` columns without a window helper: an aggregation per key, updating (Flink's form)."""
    for clause in ("having", "qualify"):
        found = node.args.get(clause)
        if found is not None:
            raise ctx.sql.error(
                found, f"{clause.upper()} after GROUP BY without a window helper is not supported yet"
            )
    if not aggs:
        raise ctx.sql.error(node, "a query with GROUP BY needs at least one aggregate, e.g. COUNT(*)")
    ordered = list(dict.fromkeys([*shown_keys, *keys]))
    with errors_at(ctx, node.args.get("group") or node, "GROUP BY: "):
        out = rel.stream.key_by(*ordered).agg(*aggs)
    natural = [c for c in out.columns if c != n.KIND_COLUMN]
    if [(o.name, o.source) for o in outputs] == [(c, c) for c in natural]:
        return out
    exprs = [alias_of(Column(o.source), o.name) for o in outputs] + [Column(n.KIND_COLUMN)]
    with errors_at(ctx, node, "SELECT: "):
        return out.select(*(Expr(e) for e in exprs))


def _emission(windowed: WindowedStream, ctx: Context) -> WindowedStream:
    """Apply the ``window.*`` settings through the builder's emission methods."""
    options = emission_options(ctx.settings)
    if ctx.settings.trigger is not None:
        options.insert(0, ("window.trigger", "trigger", ctx.settings.trigger))
    return apply_settings(windowed, options)


# --- GROUP BY and the SELECT list ----------------------------------------------------


def _group_by(
    node: exp.Select, rel: Relation, ctx: Context, resolve: Resolver
) -> tuple[list[str], WindowCall | None]:
    from sqlglot import exp

    group = node.args.get("group")
    items: list[exp.Expression] = list(group.expressions) if group is not None else []
    if group is not None:
        for key in ("rollup", "cube", "grouping_sets", "totals"):
            if group.args.get(key):
                raise ctx.sql.error(group, f"GROUP BY {key.upper().replace('_', ' ')} is not supported")
    keys: list[str] = []
    calls: list[WindowCall] = []
    bounds: list[str] = []
    for item in items:
        target = _group_target(item, node, rel, ctx)
        bound = _tvf_bound(target, rel)
        if bound is not None:
            bounds.append(bound)
        elif helper_of(target):
            calls.append(_call(target, ctx, resolve))
        elif isinstance(target, exp.Column) and not isinstance(target.this, exp.Star):
            keys.append(resolve(target))
        else:
            raise ctx.sql.error(
                item, "GROUP BY takes columns and a window helper such as tumble_start(ts, INTERVAL ...)"
            )
    if rel.window is not None:
        if calls or sorted(set(bounds)) != sorted(BOUNDS):
            raise ctx.sql.error(
                group if group is not None else node,
                "the rows of a window TVF are grouped by its window, as in Flink: GROUP BY window_start, "
                "window_end[, keys] (both bounds; a window helper is for a stream's rows)",
            )
        return list(dict.fromkeys(keys)), rel.window
    if not calls:
        if keys:
            return list(dict.fromkeys(keys)), None  # an aggregation per key, without a window
        used = [x for item in node.expressions for x in item.walk() if is_aggregate(x) or helper_of(x)]
        what = (
            "aggregating the rows of a join" if n.joins_of(rel.stream.plan) else "an aggregate over a stream"
        )
        raise ctx.sql.error(
            group if group is not None else (used or [node])[0],
            f"{what} needs GROUP BY columns (one updating row per key) or an event-time window: GROUP BY "
            "tumble_start(ts, size), hop_start(ts, slide, size) or session_start(ts, gap)",
        )
    for other in calls[1:]:
        if other.window != calls[0].window:
            raise ctx.sql.error(other.node, "GROUP BY names two different windows; a query has one window")
    return list(dict.fromkeys(keys)), calls[0]


def _group_target(item: exp.Expression, node: exp.Select, rel: Relation, ctx: Context) -> exp.Expression:
    """What a GROUP BY item means: itself, the SELECT item at an ordinal, or a SELECT alias's expression."""
    from sqlglot import exp

    if isinstance(item, exp.Literal) and item.is_int:
        index = int(str(item.this))
        if not 1 <= index <= len(node.expressions):
            raise ctx.sql.error(item, f"GROUP BY {index}: the SELECT list has {len(node.expressions)} items")
        return unalias(node.expressions[index - 1])[0]
    if isinstance(item, exp.Column) and not item.table and not isinstance(item.this, exp.Star):
        name = str(item.name).lower()
        if name not in {c.lower() for c in rel.stream.columns}:
            for select_item in node.expressions:
                inner, alias = unalias(select_item)
                if alias is not None and alias.lower() == name:
                    return inner
    return item


def _tvf_bound(x: exp.Expression, rel: Relation) -> str | None:
    """``window_start`` or ``window_end`` when ``x`` names that bound of ``rel``'s window TVF."""
    from sqlglot import exp

    if rel.window is None or not isinstance(x, exp.Column) or is_star(x):
        return None
    name = str(x.name).lower()
    if name not in BOUNDS or (x.table and str(x.table).lower() not in rel.qualifiers):
        return None
    return name


def _call(node: exp.Expression, ctx: Context, resolve: Resolver) -> WindowCall:
    from sqlglot import exp

    call = window_call(node, ctx.sql)
    if call.processing:
        return call
    ts = node.expressions[0]
    assert isinstance(ts, exp.Column)
    return attrs.evolve(call, column=resolve(ts))


def _sql_name(rel: Relation, ctx: Context) -> Callable[[exp.Column], str]:
    """The name SQL gives a plain column of ``rel`` in a ``SELECT`` list: ``c.amount`` is ``amount``."""
    if rel.sides:
        return lambda column: joined_column(column, rel, ctx)[1]
    return resolver(rel, ctx)


def _select_list(
    node: exp.Select,
    keys: list[str],
    window: WindowCall | None,
    rel: Relation,
    ctx: Context,
    resolve: Resolver,
) -> tuple[list[_Output], list[AggExpr], list[str]]:
    from sqlglot import exp

    name_of = _sql_name(rel, ctx)
    outputs: list[_Output] = []
    aggs: list[AggExpr] = []
    shown_keys: list[str] = []
    for item in node.expressions:
        inner, alias = unalias(item)
        if is_star(inner):
            raise ctx.sql.error(
                item, "SELECT * cannot be windowed; list the keys, window helpers and aggregates"
            )
        bound = _tvf_bound(inner, rel)
        if bound is not None:
            outputs.append(_Output(alias or bound, bound, item))
        elif helper_of(inner):
            call = _call(inner, ctx, resolve)
            if window is None:
                raise ctx.sql.error(inner, "a window helper in SELECT needs the same helper in GROUP BY")
            if call.window != window.window:
                raise ctx.sql.error(
                    inner,
                    f"this window helper's arguments differ from GROUP BY's "
                    f"({window.node.sql(dialect=DIALECT)}); a query has one window, so SELECT and GROUP BY "
                    "must name it the same way",
                )
            outputs.append(_Output(alias or call.output, call.output, item))
        elif is_aggregate(inner):
            agg = agg_expr(inner, alias, ctx, resolve)
            aggs.append(agg)
            outputs.append(_Output(agg.name, agg.name, item))
        elif isinstance(inner, exp.Column):
            key = resolve(inner)
            if key not in keys:
                raise ctx.sql.error(inner, f"column {key!r} must be in GROUP BY or inside an aggregate")
            shown_keys.append(key)
            outputs.append(_Output(alias or name_of(inner), key, item))
        else:
            raise ctx.sql.error(
                item,
                "a windowed SELECT lists GROUP BY columns, window helpers and aggregates over one column "
                "(compute expressions in a subquery in FROM)",
            )
    seen: set[str] = set()
    for out in outputs:
        if out.name in seen:
            raise ctx.sql.error(
                out.node, f"the result has two columns called {out.name!r}; rename one with AS"
            )
        seen.add(out.name)
    return outputs, aggs, shown_keys


# --- aggregates ----------------------------------------------------------------------


_AGG_BUILDERS: dict[str, Callable[[Expr], AggExpr]] = {
    "count": kx.count,
    "sum": kx.sum,
    "avg": kx.avg,
    "min": kx.min,
    "max": kx.max,
    "count_distinct": kx.count_distinct,
    "first": kx.first,
    "last": kx.last,
}


def agg_expr(node: exp.Expression, alias: str | None, ctx: Context, resolve: Resolver) -> AggExpr:
    func, column = aggregate(node, ctx.sql, resolve)
    agg = _AGG_BUILDERS[func](kx.col(column or "*"))
    predicate = _agg_filter(node, ctx, resolve)
    if predicate is not None:
        agg = kx.AggExpr(attrs.evolve(agg.call, filter=predicate))
    return agg.alias(alias) if alias is not None else agg


def _agg_filter(node: exp.Expression, ctx: Context, resolve: Resolver) -> ExprNode | None:
    """The condition of an aggregate's ``FILTER (WHERE ...)`` (None: none)."""
    _, where = filter_of(node)
    if where is None:
        return None
    special = no_helpers(ctx, "FILTER (WHERE ...)", resolve)
    return scalar(where, ctx.sql, resolve, special, "FILTER (WHERE ...)")


# --- the window's time column --------------------------------------------------------


def _check_time(window: WindowCall, rel: Relation, ctx: Context) -> None:
    """The helper's time column must be the event-time column, arriving unchanged from the watermark.

    Over a join's rows it is the column that holds their event time, the
    later of the two rows' times (:func:`krishiv_py.sql.joins.event_time_columns`).
    """
    if window.processing:  # timed by the wall clock: any stream's rows
        return
    et = facts(rel.stream.plan).event_time
    if et is None:
        raise ctx.sql.error(window.node, f"{rel.label} has no event time; SET watermark.column names it")
    if et.from_join:
        _check_join_time(window, rel, ctx)
    elif time_source(rel.stream.plan, window.column) is None:
        raise ctx.sql.error(
            window.node,
            f"the window's time column {window.column!r} is not the event-time column of {rel.label} "
            f"(its watermark is on {et.column!r})",
        )


def _check_join_time(window: WindowCall, rel: Relation, ctx: Context) -> None:
    """A window over a join's rows assigns each by its event time: the helper must name that column."""
    _check_join_plan_time(window, rel.stream.plan, rel.label, ctx)


def _check_join_plan_time(window: WindowCall, plan: n.PlanNode, label: str, ctx: Context) -> None:
    """:func:`_check_join_time` of the rows of ``plan`` (a join's, or a union of joins')."""
    join = facts(plan).results_of
    branches = n.union_branches(plan)
    if branches is not None:  # joins under a UNION ALL: the helper's column is each one's event time
        for branch in branches:
            _check_join_plan_time(window, branch, label, ctx)
        return
    if not isinstance(join, n.Join):
        raise ctx.sql.error(
            window.node, f"a window over {label} is not supported: window each join's rows on its own"
        )
    times = event_time_columns(join)
    origin = column_origin(plan, window.column)
    if origin is not None and origin[0] is join and origin[1] in times:
        return
    later = "a joined row's event time is the later of its two rows' times"
    if join.kind == "window":
        raise ctx.sql.error(
            window.node,
            f"a window over the rows of a window join is not supported: {later}, which no column holds; "
            "GROUP BY window_start, window_end and keys aggregates per window (without a helper)",
        )
    if not times:
        assert join.between is not None
        padded = f", or a {join.how.upper()} join's padded rows lack one side" if join.how != "inner" else ""
        raise ctx.sql.error(
            window.node,
            f"a window over the rows of a join is not supported with this time range: {later}, which no "
            f"column holds when the range lets either row be the later (between {join.between[0]} and "
            f"{join.between[1]} ms){padded}. Write an inner join whose range puts one side's row at or "
            "after the other's and window on that side's time: r.ts BETWEEN l.ts AND l.ts + INTERVAL ... "
            "(on r.ts) or r.ts BETWEEN l.ts - INTERVAL ... AND l.ts (on l.ts)",
        )
    shown = " or ".join(
        f"the {'left' if t == join.left_time.column else 'right'} side's time, {t!r} in the joined rows"
        for t in times
    )
    raise ctx.sql.error(
        window.node,
        f"over the rows of a join a window takes each row's event time: {later}, here {shown}; the "
        f"window's time column {window.column!r} is not it",
    )


# --- HAVING and QUALIFY: the results' names -------------------------------------------


@attrs.frozen
class _ResultNames:
    """How ``HAVING`` and ``QUALIFY`` name what they use: the window result's columns.

    A name is a ``SELECT`` output (its source column) or a result column;
    an aggregate is the ``SELECT`` list's, and a window helper GROUP BY's.
    """

    out: Stream
    outputs: list[_Output]
    aggs: list[AggExpr]
    window: WindowCall
    ctx: Context
    resolve_input: Resolver

    @property
    def shown(self) -> str:
        return ", ".join(o.name for o in self.outputs)

    def column(self, column: exp.Column, where: str) -> str:
        name = str(column.name)
        for o in self.outputs:
            if o.name.lower() == name.lower():
                return o.source
        same = [c for c in self.out.columns if c.lower() == name.lower()]
        if len(same) == 1:
            return same[0]
        raise self.ctx.sql.error(
            column, f"{where} can use the columns of the result ({self.shown}) and its aggregates"
        )

    def special(self, x: exp.Expression, where: str) -> ExprNode | None:
        """The result column of a window helper or an aggregate; None for anything else."""
        if helper_of(x):
            call = _call(x, self.ctx, self.resolve_input)
            if call.window != self.window.window:
                raise self.ctx.sql.error(x, "this window helper's arguments differ from GROUP BY's")
            return Column(call.output)
        if is_aggregate(x):
            func, column = aggregate(x, self.ctx.sql, self.resolve_input)
            condition = _agg_filter(x, self.ctx, self.resolve_input)
            for agg in self.aggs:
                if (agg.call.func, agg.call.column, agg.call.filter) == (func, column, condition):
                    return Column(agg.name)
            raise self.ctx.sql.error(
                x, f"{where} can use the aggregates of the SELECT list; add this one there"
            )
        return None

    def result_column(self, x: exp.Expression, where: str) -> str:
        """The result column that ``x`` (a column, a window helper or an aggregate) is."""
        from sqlglot import exp

        found = self.special(x, where)
        if isinstance(found, Column):
            return found.name
        if isinstance(x, exp.Column):
            return self.column(x, where)
        raise self.ctx.sql.error(
            x, f"{where} takes the columns of the result ({self.shown}) and its aggregates"
        )


def _having(
    node: exp.Expression,
    out: Stream,
    outputs: list[_Output],
    aggs: list[AggExpr],
    window: WindowCall,
    ctx: Context,
    resolve_input: Resolver,
) -> Stream:
    """``HAVING``: a filter on the window results, before the SELECT list renames or drops columns."""
    names = _ResultNames(out, outputs, aggs, window, ctx, resolve_input)
    resolve = functools.partial(names.column, where="HAVING")
    special = functools.partial(names.special, where="HAVING")
    predicate = scalar(node, ctx.sql, resolve, special, "HAVING")
    with errors_at(ctx, node, "HAVING: "):
        return out.filter(Expr(predicate))
