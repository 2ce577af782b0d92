"""Top-N in Krishiv's SQL: ``ROW_NUMBER()`` and ``RANK()`` as the builder's ``top_n``.

Two forms (docs/sql.md, "Composed queries"):

- Flink's Top-N, a ranked subquery in ``FROM`` and ``WHERE rownum <= n``
  outside (:func:`ranked_subquery`, :func:`top_n`): over window results
  (``PARTITION BY window_start, window_end, ...``) it is window top-N,
  ``top_n(n, per="window")``; over the rows of a stream or a join it is
  top-N per key, ``top_n(n, per="key")``, an updating stream that keeps its
  ``kind`` column;
- ``QUALIFY RANK() OVER (PARTITION BY window_start, window_end[, keys]
  ORDER BY ...) <= n`` in a windowed query (:func:`qualify`): window top-N
  on the window's results, which name their columns as the query's
  aggregation says (:mod:`krishiv_py.sql.aggregate` hands that in).

``RANK()`` keeps ties (``ties="all"``), ``ROW_NUMBER()`` exactly ``n``
(``ties="first"``). :mod:`krishiv_py.sql.query` reads the ranked
subquery's ``FROM`` and lays its ``SELECT`` lists over the ranked rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.sql.scope import Context, Relation, errors_at, is_grouped, is_star, resolver

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream

__all__ = ["RankedSubquery", "ResultColumn", "qualify", "ranked_subquery", "top_n"]


#: The result column that an expression of ``QUALIFY`` is (a column, a window helper or an
#: aggregate), given the clause it stands in (for errors).
ResultColumn = Callable[["exp.Expression", str], str]


_FLINK_TOP_N = (
    "window top-N in Flink's form is SELECT <columns> FROM (SELECT <columns>, ROW_NUMBER() (or RANK()) "
    "OVER (PARTITION BY window_start, window_end[, keys] ORDER BY ...) AS rownum FROM <window results>) "
    "WHERE rownum <= n"
)


# --- Flink's Top-N: a ranked subquery ------------------------------------------------


@attrs.frozen
class RankedSubquery:
    """Flink's Top-N as written: what the subquery ranks, how, and the two ``SELECT`` lists."""

    #: The ranked subquery: its ``FROM`` and ``WHERE`` are the rows ranked.
    inner: exp.Select = attrs.field(eq=False)
    #: Its ``ROW_NUMBER()`` or ``RANK()`` ``OVER (...)``.
    over: exp.Window = attrs.field(eq=False)
    #: ``n`` of ``WHERE rownum <= n``: how many rows each partition keeps.
    bound: int
    #: The subquery without its rank (1 in its place where the outer query shows it) nor ``WHERE``.
    rest: exp.Select = attrs.field(eq=False)
    #: The outer query without its ``WHERE``.
    outer: exp.Select = attrs.field(eq=False)
    #: The subquery's alias ("" without one).
    alias: str


def ranked_subquery(node: exp.Select, source: exp.Expression, ctx: Context) -> RankedSubquery | None:
    """Flink's Top-N: a ranked subquery in ``FROM`` and ``WHERE rownum <= n`` outside.

    ``None`` when ``source`` is not a subquery that ranks with ``ROW_NUMBER()``/``RANK()``.
    Over window results (``PARTITION BY window_start, window_end, ...``) it is
    window top-N, else top-N per key over the rows of a stream or a join
    (filtered by the subquery's ``WHERE``). The rank is not a column of the
    result (Flink's "no ranking number" form) unless every row kept ranks 1
    (``rownum <= 1``, ``= 1``): then the outer ``SELECT`` may show it, as 1.
    """
    from sqlglot import exp

    if not isinstance(source, exp.Subquery) or not isinstance(source.this, exp.Select):
        return None
    inner = source.this
    items = [
        (i, str(item.alias))
        for i, item in enumerate(inner.expressions)
        if isinstance(item, exp.Alias)
        and isinstance(item.this, exp.Window)
        and isinstance(item.this.this, exp.Rank | exp.RowNumber)
    ]
    if not items:
        return None
    position, rank_name = items[0]
    rest = inner.copy()
    rest.set("expressions", [e for i, e in enumerate(inner.expressions) if i != position])
    if len(items) > 1 or is_grouped(rest) or inner.args.get("qualify") is not None:
        raise ctx.sql.error(inner, _FLINK_TOP_N)
    where = node.args.get("where")
    bound = _rank_bound(where.this if where is not None else None, rank_name)
    if bound is None:
        raise ctx.sql.error(
            where if where is not None else node, f"{_FLINK_TOP_N} (nothing else in that WHERE)"
        )
    if _shows_rank(node, rank_name, bound, ctx):
        shown = exp.alias_(exp.Literal.number(1), rank_name)
        rest.set("expressions", [shown if i == position else e for i, e in enumerate(inner.expressions)])
    rest.set("where", None)
    outer = node.copy()
    outer.set("where", None)
    over = inner.expressions[position].this
    return RankedSubquery(inner, over, bound, rest, outer, str(source.alias))


def _rank_bound(node: exp.Expression | None, rank_name: str) -> int | None:
    """``n`` of ``rank <= n`` (``rank < n + 1``, ``n >= rank``); ``None`` for anything else."""
    from sqlglot import exp

    if node is None:
        return None
    if isinstance(node, exp.Paren):
        return _rank_bound(node.this, rank_name)
    left, right = node.args.get("this"), node.args.get("expression")
    if isinstance(node, exp.GTE | exp.GT):  # n >= rank
        left, right = right, left
    if not isinstance(node, exp.LTE | exp.LT | exp.GTE | exp.GT | exp.EQ) or not isinstance(left, exp.Column):
        return None
    if left.name.lower() != rank_name.lower() or not isinstance(right, exp.Literal) or right.is_string:
        return None
    if not str(right.this).isdigit():
        return None
    n = int(str(right.this)) - (1 if isinstance(node, exp.LT | exp.GT) else 0)
    return n if not isinstance(node, exp.EQ) or n == 1 else None


def _shows_rank(node: exp.Select, rank_name: str, bound: int, ctx: Context) -> bool:
    """Whether the outer ``SELECT`` shows the rank (``*`` or by name): only when it is 1 in every row."""
    from sqlglot import exp

    for item in node.expressions:
        refs = [c for c in item.find_all(exp.Column) if c.name.lower() == rank_name.lower()]
        if (is_star(item) or refs) and bound != 1:
            raise ctx.sql.error(
                item,
                f"the rank {rank_name!r} is not a column of top-N results (Flink's form without the rank "
                f"number); list the columns to keep in the outer SELECT (with {rank_name} <= 1 or = 1 "
                "every row kept ranks 1, and SELECT * shows it)",
            )
        if is_star(item) or refs:
            return True
    return False


def top_n(over: exp.Window, rel: Relation, bound: int, ctx: Context) -> tuple[Stream, bool]:
    """``rel`` ranked as ``over`` says, and whether per key (else per window, over window results)."""
    from sqlglot import exp

    resolve = resolver(rel, ctx)

    def column_of(x: exp.Expression, where: str) -> str:
        if not isinstance(x, exp.Column):
            raise ctx.sql.error(x, f"{where} in window top-N takes columns of {rel.label}")
        return resolve(x)

    parts = [column_of(x, "PARTITION BY") for x in over.args.get("partition_by") or []]
    per_key = not n.window_aggregates(rel.stream.plan)  # over a stream's rows: top-N per key (dedup)
    what = "top-N per key" if per_key else "window top-N"
    if not per_key and sorted(parts[:2]) != ["window_end", "window_start"]:
        raise ctx.sql.error(over, f"{_FLINK_TOP_N}: the partition starts with window_start and window_end")
    order = over.args.get("order")
    keys = order.expressions if order is not None else []
    if not keys:
        raise ctx.sql.error(over, f"{_FLINK_TOP_N}: ORDER BY says what ranks first")
    if len({bool(k.args.get("desc")) for k in keys}) > 1:
        raise ctx.sql.error(
            order,
            f"{what} ranks all ORDER BY columns the same way (all DESC, or all ASC), as top_n(ascending=...) "
            "does: write one direction (ties of the first column are then broken by the next ones that way)",
        )
    if any(k.args.get("nulls_first") for k in keys):
        raise ctx.sql.error(
            order, f"{what} ranks nulls last: write NULLS LAST (an ASC column has NULLS FIRST)"
        )
    by = [column_of(k.this, "ORDER BY") for k in keys]
    with errors_at(ctx, over, f"{what}: "):
        return rel.stream.top_n(
            bound,
            by=by,
            per="key" if per_key else "window",
            keys=parts if per_key else parts[2:],
            ties="all" if isinstance(over.this, exp.Rank) else "first",
            ascending=not keys[0].args.get("desc"),
        ), per_key


# --- QUALIFY: window top-N of a windowed query's results -------------------------------


def qualify(node: exp.Expression, out: Stream, column_of: ResultColumn, ctx: Context) -> Stream:
    """``QUALIFY RANK() OVER (PARTITION BY window_start, window_end[, keys] ORDER BY ...) <= n``.

    (or ``ROW_NUMBER()``.) Window top-N on the results, before the SELECT
    list renames or drops columns: ``RANK()`` keeps ties (``ties="all"``), ``ROW_NUMBER()`` exactly
    ``n`` (``ties="first"``). ``< n`` is ``<= n - 1``. ``column_of`` names the
    result column that a column or an aggregate of ``PARTITION BY`` and ``ORDER BY`` is.
    """
    from sqlglot import exp

    form = (
        "QUALIFY takes window top-N: RANK() or ROW_NUMBER() OVER (PARTITION BY window_start, "
        "window_end[, keys] ORDER BY <columns or aggregates> [DESC]) <= n"
    )
    if not isinstance(node, exp.LTE | exp.LT) or not isinstance(node.this, exp.Window):
        raise ctx.sql.error(node, form)
    over, bound = node.this, node.expression
    if not isinstance(over.this, exp.Rank | exp.RowNumber):
        raise ctx.sql.error(over.this, form)
    if not isinstance(bound, exp.Literal) or bound.is_string or not str(bound.this).isdigit():
        raise ctx.sql.error(bound, "QUALIFY compares the rank with a whole number, e.g. <= 3")
    limit = int(str(bound.this)) - (1 if isinstance(node, exp.LT) else 0)
    parts = [column_of(x, "PARTITION BY") for x in over.args.get("partition_by") or []]
    if parts[:2] not in (["window_start", "window_end"], ["window_end", "window_start"]):
        raise ctx.sql.error(
            over, f"{form}: the partition starts with the window, window_start and window_end"
        )
    order = over.args.get("order")
    items = order.expressions if order is not None else []
    if not items:
        raise ctx.sql.error(over, f"{form}: ORDER BY says what ranks first")
    if len({bool(i.args.get("desc")) for i in items}) > 1:
        raise ctx.sql.error(order, "QUALIFY's ORDER BY ranks all columns the same way (all DESC, or all ASC)")
    if any(i.args.get("nulls_first") for i in items):
        raise ctx.sql.error(
            order, "QUALIFY ranks nulls last: write NULLS LAST (an ASC column has NULLS FIRST)"
        )
    by = [column_of(i.this, "ORDER BY") for i in items]
    ascending = not items[0].args.get("desc")
    windows = facts(out.plan).results_of
    retracting = isinstance(windows, n.WindowAggregate) and windows.emission.accumulation == "retracting"
    if n.joins_of(out.plan) and isinstance(windows, n.WindowAggregate) and not retracting:
        raise ctx.sql.error(
            node,
            "QUALIFY over a window of a join's rows needs SET window.accumulation = retracting: "
            "the window's keys may fire in different micro-batches, and a row pushed out of the top "
            "is withdrawn",
        )
    with errors_at(ctx, node, "QUALIFY: "):
        if isinstance(over.this, exp.Rank):
            return out.top_n(limit, by=by, keys=parts[2:], ties="all", ascending=ascending)
        return out.top_n(limit, by=by, keys=parts[2:], ties="first", ascending=ascending)
