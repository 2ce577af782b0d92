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
- ``GROUP BY keys, helper(...)`` (:mod:`krishiv_py.sql.aggregate`) is
  ``.key_by(*keys)`` and the helper's window
  (:mod:`krishiv_py.sql.windows`), with the ``window.*`` settings,
  then ``.agg(...)`` of the aggregates of ``SELECT``. Keys come in the
  order ``SELECT`` shows them, then the other ``GROUP BY`` columns.
  ``HAVING`` is a ``.filter(...)`` on the results, and a ``SELECT`` that
  is not the results as they come (keys, ``window_start``,
  ``window_end``, aggregates) is a ``.select(...)`` after it.
- ``GROUP BY keys`` without a window helper (Flink's regular group
  aggregation) is ``.key_by(*keys).agg(...)``: one updating row per key,
  with a ``kind`` column.
- A subquery ranked with ``ROW_NUMBER()``/``RANK() OVER (PARTITION BY ...
  ORDER BY ...)`` and ``WHERE rank <= n`` outside
  (:mod:`krishiv_py.sql.ranking`) is ``.top_n(...)``: per
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
- Aggregates ``OVER (PARTITION BY ... ORDER BY ts ROWS|RANGE BETWEEN ...
  PRECEDING AND CURRENT ROW)`` (:mod:`krishiv_py.sql.over`) are
  ``.key_by(...).over_rows(n)`` or ``.over_range(ms)`` and ``.agg(...)``.

This module translates the statement: its ``WITH``, ``UNION ALL``,
``FROM`` and ``WHERE`` and a ``SELECT`` list without aggregates, and hands
the rest to the modules named above; a query's names resolve as
:mod:`krishiv_py.sql.scope` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

import krishiv_py.expr as kx
import krishiv_py.sql.joins as sj
import krishiv_py.sql.ranking as ranking
from krishiv_py.expr import Column, Expr, ExprNode
from krishiv_py.plan import nodes as n
from krishiv_py.sql.aggregate import aggregated
from krishiv_py.sql.expressions import alias_of, scalar
from krishiv_py.sql.over import over_aggregation, over_windows
from krishiv_py.sql.scope import (
    ALLOWED_CLAUSES,
    Context,
    Relation,
    arg,
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
    unalias,
)

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream

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
        return over_aggregation(node, rel, ctx)
    if is_grouped(node):
        return aggregated(node, rel, ctx)
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


# --- a ranked subquery: top-N -----------------------------------------------------------


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
