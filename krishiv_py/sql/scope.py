"""What a query is translated in: its context, the relations it reads and the names in them.

A :class:`Context` is what one query is translated with (the catalog, the
settings, its ``WITH`` names, what it has built). A :class:`Relation` is a
``FROM`` input: a stream, the names that qualify its columns and, for a
join's rows, how each side's columns are named there (:class:`JoinedSide`).
:func:`resolver` turns a column reference of SQL (``x``, ``q.x``) into the
relation's column; :func:`scan` makes the relation of a registered stream
or a ``WITH`` name, with the watermark the query asks for
(:func:`watermark`); :func:`time_source` follows a column down to the
watermark it comes from. The parts of a query's translation stand on this
module: :mod:`.joins`, :mod:`.ranking`, :mod:`.aggregate`, :mod:`.over`
and :mod:`.query`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs

import krishiv_py.expr as kx
from krishiv_py.errors import PlanError
from krishiv_py.expr import Column, ExprNode, Udf
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.sql.expressions import Resolver, alias_of, is_aggregate, scalar
from krishiv_py.sql.windows import WindowCall, helper_of

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream
    from krishiv_py.runtime.engine import Engine
    from krishiv_py.sql.catalog import SqlCatalog
    from krishiv_py.sql.settings import SqlSettings
    from krishiv_py.sql.source import SqlText

__all__ = [
    "ALLOWED_CLAUSES",
    "Context",
    "JoinedSide",
    "Relation",
    "arg",
    "column_named",
    "column_origin",
    "descriptor_column",
    "errors_at",
    "is_grouped",
    "is_star",
    "joined_column",
    "no_helpers",
    "refuse_clauses",
    "resolver",
    "scan",
    "star_exprs",
    "time_source",
    "unalias",
    "watermark",
]


# --- the query and its clauses ------------------------------------------------------


@attrs.frozen(kw_only=True)
class Context:
    """What one query is translated with."""

    sql: SqlText
    catalog: SqlCatalog
    session: Engine
    settings: SqlSettings
    #: The event-time column chosen for the sources (None: each source's one timestamp column).
    time_column: str | None
    #: Whether sources without a watermark get one.
    needs_watermark: bool
    #: Whether the query has a window: its ``window.*`` settings are the window's, not a join's.
    has_window: bool = False
    ctes: dict[str, Stream] = attrs.field(factory=dict)
    #: The windows built (shared by the subqueries: SET window.* needs one).
    windows: list[WindowCall] = attrs.field(factory=list)
    #: The joins built (SET window.* applies to them too).
    joins: list[exp.Join] = attrs.field(factory=list)
    #: The aggregates OVER a window built (and to them).
    overs: list[exp.Window] = attrs.field(factory=list)


@contextmanager
def errors_at(ctx: Context, node: exp.Expression, what: str = "") -> Iterator[None]:
    """Re-raise a builder's :class:`PlanError` with ``node``'s position."""
    try:
        yield
    except PlanError as exc:
        raise ctx.sql.error(node, f"{what}{exc}") from None


def arg(node: exp.Expression, name: str) -> Any:
    """A clause of ``node`` under its sqlglot name (``from_`` in newer sqlglot, ``from`` in older)."""
    return node.args.get(f"{name}_") or node.args.get(name)


#: Clauses of a SELECT that a stream query may use (sqlglot's argument names, old and new).
ALLOWED_CLAUSES = {"expressions", "from", "from_", "where", "group", "having", "qualify", "with", "with_"}


_CLAUSES: dict[str, tuple[str, str, str]] = {
    # argument: (what it is, its keyword token, why not)
    "joins": (
        "JOIN",
        "JOIN",
        "a join is of two streams named in the FROM of a query: FROM l JOIN r ON ... (docs/sql.md, Joins)",
    ),
    "order": ("ORDER BY", "ORDER_BY", "a stream has no order; sort the collected results instead"),
    "sort": ("SORT BY", "SORT_BY", "a stream has no order; sort the collected results instead"),
    "limit": ("LIMIT", "LIMIT", "a stream has no end to count to; slice the collected results instead"),
    "offset": ("OFFSET", "OFFSET", "a stream has no order to skip rows by"),
    "distinct": ("SELECT DISTINCT", "DISTINCT", "use GROUP BY with a window helper and an aggregate"),
    "laterals": ("LATERAL VIEW", "LATERAL", "nested values are not supported"),
    "windows": ("WINDOW", "WINDOW", "window functions are not supported; use a window helper in GROUP BY"),
    "version": (
        "FOR SYSTEM_TIME AS OF",
        "FOR",
        "it versions the right side of an as-of join, FROM l JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.k = r.k "
        "(docs/sql.md, Joins)",
    ),
}


def refuse_clauses(node: exp.Expression, ctx: Context, allowed: set[str] = ALLOWED_CLAUSES) -> None:
    """A :class:`PlanError` for the first clause of ``node`` a stream query cannot have."""
    for key, value in node.args.items():
        if not value or key in allowed:
            continue
        what, token, why = _CLAUSES.get(key, (key.upper(), "", "it is not supported on streams"))
        clause = value[0] if isinstance(value, list) else value
        near = node.expressions[0] if key == "distinct" else clause  # DISTINCT has no located token
        at = ctx.sql.keyword(token, near) if token else None
        raise ctx.sql.error(clause, f"{what} is not supported: {why}", at=at)


def is_grouped(node: exp.Select) -> bool:
    if node.args.get("group") or node.args.get("having"):
        return True
    return any(is_aggregate(x) or helper_of(x) is not None for item in node.expressions for x in item.walk())


def unalias(item: exp.Expression) -> tuple[exp.Expression, str | None]:
    from sqlglot import exp

    if isinstance(item, exp.Alias):
        return item.this, str(item.alias)
    return item, None


def is_star(node: exp.Expression) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


# --- relations: what FROM reads ------------------------------------------------------


@attrs.frozen
class JoinedSide:
    """One side of a join, for the columns of the joined rows: ``q.x`` is ``columns[x]``."""

    qualifier: str
    label: str
    #: Each column of the side (its window bounds for a window TVF) -> its column in the joined
    #: rows (None: not there, the right side of a semi or anti join).
    columns: dict[str, str | None]


@attrs.frozen
class Relation:
    """A ``FROM`` input: its stream, the names that qualify its columns, and how errors call it."""

    stream: Stream
    qualifiers: frozenset[str]
    label: str
    #: A join's two sides (empty for one stream): how its columns are named.
    sides: tuple[JoinedSide, ...] = ()
    #: The window of a window TVF (its time column resolved): what its ``window_start`` and
    #: ``window_end`` are (None: not a window TVF).
    window: WindowCall | None = None


def scan(table: exp.Table, ctx: Context) -> Relation:
    from krishiv_py.api.stream import Stream

    if table.args.get("db") or table.args.get("catalog"):
        raise ctx.sql.error(table, "streams have one-part names; there are no databases")
    name = str(table.name)
    qualifiers = frozenset({(str(table.alias) or name).lower()})
    if name.lower() in ctx.ctes:
        return Relation(ctx.ctes[name.lower()], qualifiers, f"the subquery {name!r}")
    plan = ctx.catalog.lookup(name)
    if plan is None:
        known = ", ".join(ctx.catalog.names) or "none yet"
        raise ctx.sql.error(
            table,
            f"unknown stream {name!r}; the registered streams are: {known} (name a stream when you make "
            "it, or call stream.register(name))",
        )
    label = f"stream {name!r}"
    stream = Stream(ctx.session, plan)
    has_time = facts(plan).event_time is not None
    if not has_time and ctx.needs_watermark:
        stream = watermark(stream, table, label, ctx)
    elif has_time and ctx.settings.watermark_keys and not isinstance(plan, n.WindowAggregate):
        # (A window's results have the event time their window gives them, no watermark of their own.)
        et = facts(plan).event_time
        assert et is not None
        raise ctx.sql.error(
            table,
            f"{label} already has a watermark (column {et.column}, lag {et.lag_ms} ms); "
            f"SET {', '.join(ctx.settings.watermark_keys)} is for streams without one",
        )
    return Relation(stream, qualifiers, label)


def watermark(stream: Stream, table: exp.Table, label: str, ctx: Context) -> Stream:
    s = ctx.settings
    column = ctx.time_column
    if column is None:
        stamps = [f.name for f in stream.schema if f.dtype.is_timestamp]
        if len(stamps) != 1:
            found = f"has {len(stamps)} ({', '.join(stamps)})" if stamps else "has none"
            raise ctx.sql.error(
                table,
                f"which column of {label} is event time? It needs one timestamp column and {found}; "
                "name it with SET watermark.column = <column>",
            )
        column = stamps[0]
    else:
        same = [c for c in stream.columns if c == column] or [
            c for c in stream.columns if c.lower() == column.lower()
        ]
        if len(same) != 1:
            raise ctx.sql.error(
                table,
                f"the event-time column {column!r} is not a column of {label} (its columns: "
                f"{', '.join(stream.columns)}); the watermark goes on the stream, so its time column must be "
                "one of the stream's own (SET watermark.column = <column> names it)",
            )
        column = same[0]
    with errors_at(ctx, table, f"the watermark of {label}: "):
        return stream.watermark(
            column,
            s.lag_ms or 0,
            future_tolerance_ms=(
                DEFAULT_FUTURE_TOLERANCE_MS if s.future_tolerance_ms is None else s.future_tolerance_ms
            ),
            idle_timeout_ms=s.idle_timeout_ms,
        )


# --- names: a column reference as the relation's column -------------------------------


def resolver(rel: Relation, ctx: Context) -> Resolver:
    if rel.sides:
        return _joined_resolver(rel, ctx)

    def resolve(column: exp.Column) -> str:
        if column.args.get("db") or column.args.get("catalog"):
            raise ctx.sql.error(column, "column names have at most two parts: <stream or alias>.<column>")
        table = str(column.table)
        if table and table.lower() not in rel.qualifiers:
            raise ctx.sql.error(column, f"unknown stream or alias {table!r}; this query reads {rel.label}")
        name, names = str(column.name), rel.stream.columns
        if name in names:
            return name
        same = [c for c in names if c.lower() == name.lower()]
        if len(same) == 1:
            return same[0]
        raise ctx.sql.error(
            column, f"unknown column {name!r}; the columns of {rel.label} are: {', '.join(names)}"
        )

    return resolve


def _joined_resolver(rel: Relation, ctx: Context) -> Resolver:
    """Resolves ``q.x`` and ``x`` over a join's rows (:func:`krishiv_py.sql.joins.join_relation`)."""
    return lambda column: joined_column(column, rel, ctx)[0]


def joined_column(column: exp.Column, rel: Relation, ctx: Context) -> tuple[str, str]:
    """``q.x`` or ``x`` over a join's rows: its column there, and its SQL name (``x`` as its side has it)."""
    if column.args.get("db") or column.args.get("catalog"):
        raise ctx.sql.error(column, "column names have at most two parts: <stream or alias>.<column>")
    qualifier, name = str(column.table).lower(), str(column.name)
    sides = [s for s in rel.sides if not qualifier or s.qualifier == qualifier]
    if not sides:
        raise ctx.sql.error(
            column,
            f"unknown stream or alias {str(column.table)!r}; this query joins "
            f"{' and '.join(s.qualifier for s in rel.sides)}",
        )
    hits: list[tuple[JoinedSide, str, str | None]] = []
    for side in sides:
        match = column_named(list(side.columns), name)
        if match is not None:
            hits.append((side, match, side.columns[match]))
    found = [(match, target) for _, match, target in hits if target is not None]
    if len({target for _, target in found}) == 1:
        return found[0][1], found[0][0]
    if found:
        raise ctx.sql.error(
            column,
            f"column {name!r} is on both sides of the join; qualify it: "
            f"{' or '.join(f'{s.qualifier}.{name}' for s, _, _ in hits)}",
        )
    if hits:
        raise ctx.sql.error(
            column,
            f"{name!r} is a column of {hits[0][0].label}; the rows of this {_how(rel)} join hold the left "
            "side's columns only",
        )
    if not qualifier:  # a column of the joined rows by its own name: amount_right, kind
        match = column_named(rel.stream.columns, name)
        if match is not None:
            return match, match
    where = sides[0].label if qualifier else "the joined rows"
    columns = list(sides[0].columns) if qualifier else rel.stream.columns
    raise ctx.sql.error(column, f"unknown column {name!r}; the columns of {where} are: {', '.join(columns)}")


def _how(rel: Relation) -> str:
    joins = n.joins_of(rel.stream.plan)
    return joins[0].how if joins else "inner"


def column_named(columns: list[str] | tuple[str, ...], name: str) -> str | None:
    """The column called ``name``: exactly, else the one equal to it ignoring case (None: none)."""
    if name in columns:
        return name
    same = [c for c in columns if c.lower() == name.lower()]
    return same[0] if len(same) == 1 else None


def star_exprs(item: exp.Expression, rel: Relation, ctx: Context) -> list[ExprNode] | None:
    """The columns a ``*`` or ``q.*`` of ``SELECT`` stands for (None: the whole row as it is).

    A join side's ``q.*`` is its columns in the joined rows, each named as on its side.
    """
    from sqlglot import exp

    if not isinstance(item, exp.Column) or not item.table:
        return None
    qualifier = str(item.table).lower()
    for side in rel.sides:
        if side.qualifier == qualifier:
            if any(c is None for c in side.columns.values()):
                raise ctx.sql.error(
                    item, f"the rows of this {_how(rel)} join hold the left side's columns only"
                )
            return [alias_of(Column(c), name) for name, c in side.columns.items() if c is not None]
    if rel.sides or qualifier not in rel.qualifiers:
        raise ctx.sql.error(item, f"unknown stream or alias {item.table!r}; this query reads {rel.label}")
    return None


def descriptor_column(window: WindowCall, descriptor: exp.Expression, rel: Relation, ctx: Context) -> str:
    column = column_named(rel.stream.columns, window.column)
    if column is None:
        raise ctx.sql.error(
            descriptor,
            f"DESCRIPTOR names the event-time column of {rel.label}; its columns are: "
            f"{', '.join(rel.stream.columns)}",
        )
    return column


def no_helpers(ctx: Context, clause: str, resolve: Resolver) -> Callable[[exp.Expression], ExprNode | None]:
    """What a clause's expressions take besides the scalar ones: no window helper, no aggregate in
    WHERE; a call of a user function the session registered (``session.register_udf``)."""
    from sqlglot import exp

    def special(node: exp.Expression) -> ExprNode | None:
        if helper_of(node):
            raise ctx.sql.error(
                node, f"window helpers are not allowed in {clause}; use them in GROUP BY and SELECT"
            )
        if is_aggregate(node) and clause == "WHERE":
            raise ctx.sql.error(
                node, "an aggregate is not allowed in WHERE; filter on aggregates with HAVING"
            )
        function = ctx.catalog.function(str(node.name)) if isinstance(node, exp.Anonymous) else None
        if function is None:
            return None
        args = tuple(scalar(a, ctx.sql, resolve, special, clause) for a in node.expressions)
        if not args:
            raise ctx.sql.error(node, f"{function.name}() needs at least one argument")
        return Udf(function, args)

    return special


# --- where a column comes from --------------------------------------------------------


def column_origin(plan: n.PlanNode, column: str) -> tuple[n.PlanNode, str] | None:
    """The node under ``plan``'s filters and projections, and the name there of ``column`` (None:
    a projection computes it)."""
    if isinstance(plan, n.Filter):
        return column_origin(plan.input, column)
    if isinstance(plan, n.Project):
        for e in plan.exprs:
            inner = e.operand if isinstance(e, kx.Alias) else e
            if kx.output_name(e) == column:
                return column_origin(plan.input, inner.name) if isinstance(inner, Column) else None
        return None
    return plan, column


def time_source(plan: n.PlanNode, column: str) -> n.Watermark | None:
    """The watermark whose column ``column`` of ``plan`` is, passed on unchanged; None if it is not one."""
    found = column_origin(plan, column)
    if found is None:
        return None
    node, name = found
    if isinstance(node, n.Watermark):
        return node if node.column == name else None
    if isinstance(node, n.Union):
        sources = [time_source(i, name) for i in node.inputs]
        return sources[0] if all(f is not None for f in sources) else None
    return None
