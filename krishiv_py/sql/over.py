"""SQL's over-aggregation (SPEC 3.16): the ``OVER`` clause's partition, order and frame, and
the builder's over-aggregation it means (:func:`over_aggregation`).

``AVG(price) OVER (PARTITION BY seller ORDER BY t ROWS BETWEEN 10 PRECEDING
AND CURRENT ROW)`` is ``.key_by("seller").over_rows(10).agg(kp.avg(...))``;
``RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW`` is
``.over_range(3_600_000)``. Every aggregate ``OVER`` of one query shares
one window (one partition, order and frame); the order is the event time.
Ranking functions (``ROW_NUMBER()``, ``RANK()``) are top-N, not this
(:mod:`krishiv_py.sql.ranking`).

Examples
--------
>>> import sqlglot
>>> from krishiv_py.sql.source import DIALECT, SqlText
>>> q = "SELECT AVG(p) OVER (PARTITION BY s ORDER BY t ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS a FROM b"
>>> sql = SqlText.tokenize(q)
>>> spec = over_spec(over_windows(sqlglot.parse_one(q, read=DIALECT))[0], sql)
>>> [c.name for c in spec.partition], spec.order.name, spec.frame, spec.preceding
(['s'], 't', 'rows', 10)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from krishiv_py.expr import AggExpr, Column, Expr, ExprNode
from krishiv_py.plan.analysis import facts
from krishiv_py.sql.aggregate import agg_expr
from krishiv_py.sql.expressions import Resolver, alias_of, scalar
from krishiv_py.sql.scope import Context, Relation, errors_at, is_star, no_helpers, resolver, unalias
from krishiv_py.sql.settings import apply_settings, emission_options, interval_ms

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream
    from krishiv_py.sql.source import SqlText

__all__ = ["OverSpec", "over_aggregation", "over_order", "over_spec", "over_windows"]

_RANKING = ("RowNumber", "Rank", "DenseRank", "Ntile", "PercentRank", "CumeDist")


@attrs.frozen
class OverSpec:
    """One ``OVER`` window: the partition's columns, the order's column and the frame."""

    partition: tuple[exp.Column, ...]
    order: exp.Column
    frame: Literal["rows", "range"]
    #: ``rows``: how many rows before; ``range``: how many milliseconds before.
    preceding: int


def over_windows(select: exp.Expression) -> list[exp.Window]:
    """The aggregates ``OVER`` a window in ``select``'s list (a ranking function is top-N, not one)."""
    from sqlglot import exp

    out = []
    for item in select.expressions:
        for node in item.walk():
            if isinstance(node, exp.Window) and type(node.this).__name__ not in _RANKING:
                out.append(node)
    return out


def over_order(query: exp.Expression) -> str | None:
    """The column the first aggregate ``OVER`` a window in ``query`` orders by: the event time its
    source's watermark goes on when it has none (None: no such window)."""
    from sqlglot import exp

    for node in query.walk():
        if isinstance(node, exp.Window) and type(node.this).__name__ not in _RANKING:
            order = node.args.get("order")
            if order is not None and order.expressions and isinstance(order.expressions[0].this, exp.Column):
                return str(order.expressions[0].this.name)
    return None


def over_spec(window: exp.Window, sql: SqlText) -> OverSpec:
    """``window``'s partition, order and frame, or a :class:`PlanError` naming what is not supported."""
    from sqlglot import exp

    if window.args.get("alias") is not None:
        raise sql.error(window, "OVER takes its window inline: OVER (PARTITION BY ... ORDER BY ... ROWS ...)")
    partition = []
    for column in window.args.get("partition_by") or ():
        if not isinstance(column, exp.Column):
            raise sql.error(column, "PARTITION BY takes column names")
        partition.append(column)
    if not partition:
        raise sql.error(
            window, "an aggregate OVER a window needs PARTITION BY: each key's rows are framed apart"
        )
    order = window.args.get("order")
    ordered = order.expressions if order is not None else []
    if len(ordered) != 1 or not isinstance(ordered[0].this, exp.Column) or ordered[0].args.get("desc"):
        raise sql.error(
            order or window,
            "an aggregate OVER a window orders by one column, the event time, ascending: "
            "ORDER BY <time column>",
        )
    spec = window.args.get("spec")
    if spec is None:
        raise sql.error(
            window,
            "give the OVER window its frame: ROWS BETWEEN n PRECEDING AND CURRENT ROW or RANGE BETWEEN "
            "INTERVAL ... PRECEDING AND CURRENT ROW (the default, every row before, is not supported)",
        )
    kind = str(spec.args.get("kind") or "").lower()
    if spec.args.get("end") != "CURRENT ROW" or spec.args.get("start_side") != "PRECEDING":
        raise sql.error(spec, "the frame of an OVER window ends at CURRENT ROW and starts PRECEDING it")
    start = spec.args.get("start")
    if start == "UNBOUNDED" or start is None:
        raise sql.error(spec, "a frame from UNBOUNDED PRECEDING is not supported yet: give n PRECEDING")
    if kind == "rows":
        if not isinstance(start, exp.Literal) or start.is_string or not str(start.this).isdigit():
            raise sql.error(start, "ROWS BETWEEN takes a whole number of rows: n PRECEDING")
        preceding = int(str(start.this))
    elif kind == "range":
        preceding = interval_ms(start, sql, "RANGE BETWEEN ... PRECEDING")
    else:
        raise sql.error(spec, "an OVER window's frame is ROWS or RANGE")
    return OverSpec(tuple(partition), ordered[0].this, "rows" if kind == "rows" else "range", preceding)


# --- the over-aggregation as the builder makes it ----------------------------------------


def over_aggregation(node: exp.Select, rel: Relation, ctx: Context) -> Stream:
    """Aggregates ``OVER`` a window (:func:`over_spec`): ``key_by(partition)`` then
    ``over_rows(n)`` or ``over_range(ms)`` with the ``window.*`` settings, ``agg()`` of them (each
    named by its ``AS``), then the ``SELECT`` list over the results (``kind`` kept when there)."""
    if node.args.get("group") or node.args.get("having"):
        raise ctx.sql.error(node, "an aggregate OVER a window and GROUP BY in one query: group in a subquery")
    windows = over_windows(node)
    resolve = resolver(rel, ctx)
    keys, order, frame, preceding = _shared_window(windows, resolve, ctx)
    ctx.overs.extend(windows)
    et = facts(rel.stream.plan).event_time
    if et is not None and (et.from_join or et.from_change or et.from_window):
        raise ctx.sql.error(
            windows[0],
            "an aggregate OVER a window of a join's rows or of changes orders them by their own event "
            "time, which no column names: write it with the builder, ...key_by(k).over_rows(n)",
        )
    aggs, exprs = _over_select(node, rel, resolve, ctx)
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


def _shared_window(
    windows: list[exp.Window], resolve: Resolver, ctx: Context
) -> tuple[tuple[str, ...], str, Literal["rows", "range"], int]:
    """The one window the aggregates OVER a window share: its keys, order column, frame and extent."""
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
    return shapes[0]


def _over_select(
    node: exp.Select, rel: Relation, resolve: Resolver, ctx: Context
) -> tuple[list[AggExpr], list[ExprNode]]:
    """The ``SELECT`` list of aggregates OVER a window: the aggregates, and the columns it selects."""
    from sqlglot import exp

    aggs: list[AggExpr] = []
    exprs: list[ExprNode] = []
    for item in node.expressions:
        inner, alias = unalias(item)
        if isinstance(inner, exp.Window):
            if alias is None:
                raise ctx.sql.error(
                    item, "name each aggregate OVER a window with AS, e.g. AVG(price) OVER (...) AS a"
                )
            aggs.append(agg_expr(inner.this, alias, ctx, resolve))
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
    return aggs, exprs
