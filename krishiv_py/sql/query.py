"""Translate one query into a stream, through the builder's own methods.

Every clause becomes the builder call that means the same, so a query and
its builder twin make equal plans (and so run the same way everywhere):

- ``FROM name`` is the registered stream; without a watermark of its own it
  gets ``.watermark(column, lag)`` right on it when the query windows (or
  ``SET watermark.*`` asks for one). The column is ``SET watermark.column``,
  else the window helper's time column, else the stream's one timestamp
  column; the lag is ``SET watermark.lag`` (0 ms when not set).
  ``FROM (subquery)``, ``WITH name AS (subquery)`` and ``UNION ALL`` compose.
- ``WHERE`` is ``.filter(...)``.
- Without ``GROUP BY`` (nor aggregates), ``SELECT`` is ``.select(...)``
  (nothing for ``SELECT *``).
- ``GROUP BY keys, helper(...)`` is ``.key_by(*keys)`` and the helper's
  window (:mod:`krishiv_py.sql.windows`), with the ``window.*`` settings,
  then ``.agg(...)`` of the aggregates of ``SELECT``. Keys come in the
  order ``SELECT`` shows them, then the other ``GROUP BY`` columns.
  ``HAVING`` is a ``.filter(...)`` on the results, and a ``SELECT`` that
  is not the results as they come (keys, ``window_start``,
  ``window_end``, aggregates) is a ``.select(...)`` after it.
- ``GROUP BY keys`` without a window helper (Flink's regular group
  aggregation) is ``.key_by(*keys).agg(...)``: one updating row per key,
  with a ``kind`` column.
- A subquery ranked with ``ROW_NUMBER()``/``RANK() OVER (PARTITION BY ...
  ORDER BY ...)`` and ``WHERE rank <= n`` outside is ``.top_n(...)``: per
  window over window results (``PARTITION BY window_start, window_end``),
  else per key over a stream's rows, keeping the ``kind`` column.
- ``FROM l JOIN r ON ...`` (:mod:`krishiv_py.sql.joins`) is
  ``l.key_by(...).interval_join(r.key_by(...), between=..., how=...)``, or
  with window TVFs on both sides ``...tumbling_window(size).join(...)``, or
  with ``JOIN r FOR SYSTEM_TIME AS OF l.ts`` ``...as_of_join(...)``;
  each side without a watermark gets one on its time column in the ``ON``
  condition (or ``DESCRIPTOR``, or ``AS OF``). ``WHERE`` and ``SELECT``
  follow the join, naming each side's columns as the joined rows hold them.
  ``FROM l, r WHERE ...`` is the inner interval join whose condition the
  ``WHERE`` holds, the rest of it a filter. ``GROUP BY`` (with or without a
  window helper) and a ranked subquery follow a join as they follow a
  stream; a window takes the joined rows' event time, so its helper must
  name the column that holds it.
- ``FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), size)) GROUP BY window_start,
  window_end, keys`` (Flink's window aggregation) is the helpers' window
  over ``s``, a stream or a ``WITH`` name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

import krishiv_py.expr as kx
import krishiv_py.sql.joins as sj
import krishiv_py.sql.ranking as ranking
from krishiv_py.expr import AggExpr, Column, Expr, ExprNode
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.sql.expressions import Resolver, aggregate, alias_of, filter_of, is_aggregate, scalar
from krishiv_py.sql.over import over_spec, over_windows
from krishiv_py.sql.scope import (
    ALLOWED_CLAUSES,
    Context,
    Relation,
    arg,
    column_origin,
    descriptor_column,
    errors_at,
    is_grouped,
    is_star,
    joined_column,
    no_helpers,
    refuse_clauses,
    resolver,
    scan,
    star_exprs,
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

__all__ = ["translate"]


def translate(node: exp.Expression, ctx: Context) -> Stream:
    """The stream of a query (``SELECT``, ``UNION ALL`` or a parenthesised query)."""
    from sqlglot import exp

    if isinstance(node, exp.Subquery) and not node.alias:
        return translate(node.this, ctx)
    if isinstance(node, exp.Select):
        return _select(node, ctx)
    if isinstance(node, exp.Union):
        return _union(node, _with_ctes(node, ctx))
    if isinstance(node, exp.SetOperation):
        word = "EXCEPT" if isinstance(node, exp.Except) else "INTERSECT"
        raise ctx.sql.error(node, f"{word} is not supported on streams")
    raise ctx.sql.error(node, f"{type(node).__name__.upper()} is not a query; sql() runs SELECT and SET")


# --- queries -------------------------------------------------------------------------


def _select(node: exp.Select, ctx: Context) -> Stream:
    refuse_clauses(node, ctx, ALLOWED_CLAUSES | {"joins"})
    ctx = _with_ctes(node, ctx)
    source = arg(node, "from")
    if source is None:
        raise ctx.sql.error(node, "a query reads a stream: add FROM <stream name>")
    ranked = None if node.args.get("joins") else _ranked(node, source.this, ctx)
    if ranked is not None:
        return ranked
    rel = _from(node, source.this, ctx)
    if over_windows(node):
        return _over(node, rel, ctx)
    if is_grouped(node):
        return _windowed(node, rel, ctx)
    qualify = node.args.get("qualify")
    if qualify is not None:
        raise ctx.sql.error(
            qualify,
            "QUALIFY is not supported here: it ranks window results (window top-N), in a query "
            "with GROUP BY and a window helper; to rank a stream's or a join's rows per key, use "
            "ROW_NUMBER() in a subquery (docs/sql.md, Composed queries)",
            at=ctx.sql.keyword("QUALIFY", qualify),
        )
    return _project(node, rel, ctx)


def _from(node: exp.Select, source: exp.Expression, ctx: Context) -> Relation:
    """The rows ``node`` reads, filtered by its ``WHERE``: a stream's, a subquery's, a join's or a TVF's."""
    if node.args.get("joins"):
        rel, node = sj.join_relation(node, source, ctx)
        return _filtered(node, rel, ctx)
    if sj.is_window_tvf(source):
        if not is_grouped(node):
            raise ctx.sql.error(source, _TVF_ALONE)
        return _filtered(node, _tvf_relation(source, ctx), ctx)
    return _filtered(node, _relation(source, ctx), ctx)


def _filtered(node: exp.Select, rel: Relation, ctx: Context) -> Relation:
    """``rel`` with the ``WHERE`` of ``node`` applied (a ``filter``)."""
    where = node.args.get("where")
    if where is None:
        return rel
    resolve = resolver(rel, ctx)
    predicate = scalar(where.this, ctx.sql, resolve, no_helpers(ctx, "WHERE", resolve), "WHERE")
    with errors_at(ctx, where.this, "WHERE: "):
        return attrs.evolve(rel, stream=rel.stream.filter(Expr(predicate)))


def _with_ctes(node: exp.Expression, ctx: Context) -> Context:
    with_ = arg(node, "with")
    if with_ is None:
        return ctx
    if with_.args.get("recursive"):
        raise ctx.sql.error(with_, "WITH RECURSIVE is not supported")
    ctes = dict(ctx.ctes)
    for cte in with_.expressions:
        inner = attrs.evolve(ctx, ctes=ctes)
        ctes[str(cte.alias).lower()] = translate(cte.this, inner)
    return attrs.evolve(ctx, ctes=ctes)


def _union(node: exp.Union, ctx: Context) -> Stream:
    from sqlglot import exp

    parts: list[exp.Expression] = []

    def flatten(x: exp.Expression) -> None:
        if isinstance(x, exp.Union):
            if x.args.get("distinct"):
                raise ctx.sql.error(x, "UNION (distinct) is not supported on streams; use UNION ALL")
            refuse_clauses(x, ctx, {"this", "expression", "distinct", "with", "with_"})
            flatten(x.this)
            flatten(x.expression)
        else:
            parts.append(x)

    flatten(node)
    streams = [translate(p, ctx) for p in parts]
    with errors_at(ctx, node, "UNION ALL: "):
        return streams[0].union(*streams[1:])


def _relation(node: exp.Expression, ctx: Context) -> Relation:
    from sqlglot import exp

    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        refuse_clauses(node, ctx, {"this", "alias", "db", "catalog"})
        return scan(node, ctx)
    if isinstance(node, exp.Subquery):
        refuse_clauses(node, ctx, {"this", "alias"})
        if node.alias_column_names:
            raise ctx.sql.error(node, "column names after a subquery's alias are not supported; use AS in it")
        alias = str(node.alias)
        return Relation(translate(node.this, ctx), frozenset({alias.lower()} - {""}), "the subquery")
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        raise ctx.sql.error(node, _TVF_ALONE)
    raise ctx.sql.error(
        node, f"FROM {type(node).__name__.upper()} is not supported; FROM takes a stream name or a subquery"
    )


_TVF_ALONE = (
    "a window TVF (TABLE(TUMBLE(...)), TABLE(HOP(...))) is a side of a window join, or the input of a "
    "window aggregation, FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), size)) GROUP BY window_start, "
    "window_end[, keys] (or GROUP BY tumble_start(ts, size) or hop_start(ts, slide, size) over s)"
)


def _tvf_relation(tvf: exp.Expression, ctx: Context) -> Relation:
    """The rows of a window TVF, ``TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), size))``: ``s`` and its window.

    ``s`` is a registered stream (given its watermark on ``ts`` when it has
    none, as for a window helper) or a ``WITH`` name, such as a join's rows.
    """
    refuse_clauses(tvf, ctx, {"this", "alias", "version"})
    spec = sj.read_side(tvf, ctx.sql)
    assert spec.window is not None
    column = ctx.settings.column or spec.window.column
    rel = scan(spec.table, attrs.evolve(ctx, needs_watermark=True, time_column=column))
    descriptor = spec.window.node.expressions[1]
    window = attrs.evolve(spec.window, column=descriptor_column(spec.window, descriptor, rel, ctx))
    return attrs.evolve(rel, qualifiers=frozenset({spec.qualifier}), window=window)


def _tvf_bound(x: exp.Expression, rel: Relation) -> str | None:
    """``window_start`` or ``window_end`` when ``x`` names that bound of ``rel``'s window TVF."""
    from sqlglot import exp

    if rel.window is None or not isinstance(x, exp.Column) or is_star(x):
        return None
    name = str(x.name).lower()
    if name not in sj.BOUNDS or (x.table and str(x.table).lower() not in rel.qualifiers):
        return None
    return name


# --- SELECT without GROUP BY ------------------------------------------------------------


def _project(node: exp.Select, rel: Relation, ctx: Context, *, keep: tuple[str, ...] = ()) -> Stream:
    """``SELECT`` of ``node`` over ``rel``; columns of ``keep`` come along when the list leaves them out."""
    from sqlglot import exp

    items = node.expressions
    if len(items) == 1 and is_star(items[0]) and star_exprs(items[0], rel, ctx) is None:
        return rel.stream
    resolve = resolver(rel, ctx)
    exprs: list[ExprNode] = []
    for item in items:
        if is_star(item):
            columns = star_exprs(item, rel, ctx)
            exprs += [Column(c) for c in rel.stream.columns if c not in keep] if columns is None else columns
            continue
        inner, alias = unalias(item)
        if alias is None and rel.sides and isinstance(inner, exp.Column) and not is_star(inner):
            alias = joined_column(inner, rel, ctx)[1]  # c.amount is amount, as SQL names it
        value = scalar(inner, ctx.sql, resolve, no_helpers(ctx, "SELECT", resolve), "SELECT")
        if alias is not None:
            exprs.append(alias_of(value, alias))
        elif isinstance(value, Column):
            exprs.append(value)
        else:
            raise ctx.sql.error(item, "name this SELECT expression with AS, e.g. <expression> AS name")
    named = {kx.output_name(e) for e in exprs}
    exprs += [Column(k) for k in keep if k not in named]
    if keep and exprs == [Column(c) for c in rel.stream.columns]:
        return rel.stream  # an updating stream's every column, in order: the builder's plan
    with errors_at(ctx, node, "SELECT: "):
        return rel.stream.select(*(Expr(e) for e in exprs))


# --- JOIN: two streams ------------------------------------------------------------------


# --- GROUP BY: windows -----------------------------------------------------------------


def _over(node: exp.Select, rel: Relation, ctx: Context) -> Stream:
    """Aggregates ``OVER`` a window (:mod:`krishiv_py.sql.over`): ``key_by(partition)`` then
    ``over_rows(n)`` or ``over_range(ms)`` with the ``window.*`` settings, ``agg()`` of them (each
    named by its ``AS``), then the ``SELECT`` list over the results (``kind`` kept when there)."""
    from sqlglot import exp

    if node.args.get("group") or node.args.get("having"):
        raise ctx.sql.error(node, "an aggregate OVER a window and GROUP BY in one query: group in a subquery")
    windows = over_windows(node)
    resolve = resolver(rel, ctx)
    shapes = []
    for window in windows:
        spec = over_spec(window, ctx.sql)
        shapes.append(
            (tuple(resolve(c) for c in spec.partition), resolve(spec.order), spec.frame, spec.preceding)
        )
        if shapes[-1] != shapes[0]:
            raise ctx.sql.error(
                window,
                "the aggregates OVER a window in one query share one window: the same PARTITION BY, "
                "ORDER BY and frame",
            )
    keys, order, frame, preceding = shapes[0]
    ctx.overs.extend(windows)
    et = facts(rel.stream.plan).event_time
    if et is not None and (et.from_join or et.from_change or et.from_window):
        raise ctx.sql.error(
            windows[0],
            "an aggregate OVER a window of a join's rows or of changes orders them by their own event "
            "time, which no column names: write it with the builder, ...key_by(k).over_rows(n)",
        )
    aggs: list[AggExpr] = []
    exprs: list[ExprNode] = []
    for item in node.expressions:
        inner, alias = unalias(item)
        if isinstance(inner, exp.Window):
            if alias is None:
                raise ctx.sql.error(
                    item, "name each aggregate OVER a window with AS, e.g. AVG(price) OVER (...) AS a"
                )
            aggs.append(_aggregate(inner.this, alias, ctx, resolve))
            exprs.append(Column(alias))
        elif any(isinstance(x, exp.Window) for x in inner.walk()):
            raise ctx.sql.error(
                item,
                "an aggregate OVER a window stands alone in SELECT (AS a name); compute with it in an "
                "outer query",
            )
        elif is_star(item):
            exprs += [Column(c) for c in rel.stream.columns]
        else:
            value = scalar(inner, ctx.sql, resolve, no_helpers(ctx, "SELECT", resolve), "SELECT")
            if alias is None and not isinstance(value, Column):
                raise ctx.sql.error(item, "name this SELECT expression with AS, e.g. <expression> AS name")
            exprs.append(value if alias is None else alias_of(value, alias))
    with errors_at(ctx, windows[0], "OVER: "):
        keyed = rel.stream.key_by(*keys)
        framed = (
            keyed.over_rows(preceding, order_by=order)
            if frame == "rows"
            else keyed.over_range(preceding, order_by=order)
        )
        result = apply_settings(framed, emission_options(ctx.settings)).agg(*aggs)
    if "kind" in result.columns and Column("kind") not in exprs:
        exprs.append(Column("kind"))
    if exprs == [Column(c) for c in result.columns]:
        return result
    with errors_at(ctx, node, "SELECT: "):
        return result.select(*(Expr(e) for e in exprs))


@attrs.frozen
class _Output:
    """One column of the query's result: its name and the column of the window results it shows."""

    name: str
    source: str
    node: exp.Expression = attrs.field(eq=False)


def _windowed(node: exp.Select, rel: Relation, ctx: Context) -> Stream:
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
        if calls or sorted(set(bounds)) != sorted(sj.BOUNDS):
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
            agg = _aggregate(inner, alias, ctx, resolve)
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


def _aggregate(node: exp.Expression, alias: str | None, ctx: Context, resolve: Resolver) -> AggExpr:
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
    times = sj.event_time_columns(join)
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


def _emission(windowed: WindowedStream, ctx: Context) -> WindowedStream:
    """Apply the ``window.*`` settings through the builder's emission methods."""
    options = emission_options(ctx.settings)
    if ctx.settings.trigger is not None:
        options.insert(0, ("window.trigger", "trigger", ctx.settings.trigger))
    return apply_settings(windowed, options)


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


def _ranked(node: exp.Select, source: exp.Expression, ctx: Context) -> Stream | None:
    """Flink's Top-N (:func:`krishiv_py.sql.ranking.ranked_subquery`): the subquery's rows ranked,
    then its ``SELECT`` list and the outer one over them (None: ``source`` ranks nothing)."""
    ranked = ranking.ranked_subquery(node, source, ctx)
    if ranked is None:
        return None
    rel = _ranked_input(ranked.inner, ctx)
    stream, per_key = ranking.top_n(ranked.over, rel, ranked.bound, ctx)
    kept = (n.KIND_COLUMN,) if per_key else ()  # an updating top-N's rows keep their kind
    rows = _project(ranked.rest, attrs.evolve(rel, stream=stream), ctx, keep=kept)
    subquery = Relation(rows, frozenset({ranked.alias.lower()} - {""}), "the subquery")
    return _project(ranked.outer, subquery, ctx, keep=kept)


def _ranked_input(inner: exp.Select, ctx: Context) -> Relation:
    """What a ranked subquery ranks: its ``FROM`` (stream, subquery or join) filtered by its ``WHERE``."""
    refuse_clauses(inner, ctx, ALLOWED_CLAUSES | {"joins"})
    inner_source = arg(inner, "from")
    if inner_source is None:
        raise ctx.sql.error(inner, "a query reads a stream: add FROM <stream name>")
    return _from(inner, inner_source.this, ctx)


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
