"""Run the statements of one ``session.sql()`` call.

``SET`` statements add to the settings waiting in the session's catalog;
the query (at most one per call) takes them all and returns its stream.
Settings a failed query would have taken stay waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from krishiv_py.errors import PlanError
from krishiv_py.sql.joins import is_window_tvf
from krishiv_py.sql.over import over_order
from krishiv_py.sql.query import translate
from krishiv_py.sql.scope import Context
from krishiv_py.sql.settings import SqlSettings, parse_set
from krishiv_py.sql.source import SqlText, Statement
from krishiv_py.sql.windows import helper_of, is_proctime

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream
    from krishiv_py.runtime.engine import Engine
    from krishiv_py.sql.catalog import SqlCatalog

__all__ = ["execute"]


def execute(catalog: SqlCatalog, text: str, session: Engine) -> Stream | None:
    """Run ``text``: its ``SET`` statements and at most one query (None when there is no query)."""
    from sqlglot import exp

    sql = SqlText.tokenize(text)
    statements = sql.statements()
    if not statements:
        raise PlanError("sql() got no statement; write a SELECT query or SET key = value")
    settings = catalog.pending
    result: Stream | None = None
    for statement in statements:
        if isinstance(statement.node, exp.Set):
            settings = parse_set(statement.node, statement.text, sql, settings)
            continue
        if result is not None:
            raise sql.error(statement.node, "sql() runs one query per call; call it again for the next query")
        result = _query(statement, sql, catalog, settings, session)
        settings = SqlSettings()
    catalog.pending = settings
    return result


def _query(
    statement: Statement, sql: SqlText, catalog: SqlCatalog, settings: SqlSettings, session: Engine
) -> Stream:
    from krishiv_py.api.stream import Stream

    column, needs = _event_time(statement.node, sql, settings)
    ctx = Context(
        sql=sql,
        catalog=catalog,
        session=session,
        settings=settings,
        time_column=column,
        needs_watermark=needs,
        has_window=_has_window(statement.node),
    )
    stream = translate(statement.node, ctx)
    if settings.join_keys and not ctx.joins:
        raise sql.error(
            statement.node,
            f"SET {', '.join(settings.join_keys)} applies to a query with a join; this query has none",
        )
    if settings.window_keys and not ctx.windows and not ctx.joins and not ctx.overs:
        raise sql.error(
            statement.node,
            f"SET {', '.join(settings.window_keys)} applies to a windowed query (GROUP BY a window "
            "helper), a join or an aggregate OVER a window; this query has none",
        )
    shown = "\n".join((*(f"{s.rstrip(';')};" for s in settings.statements), statement.text))
    return Stream(session, stream.plan, sql=shown)


def _has_window(node: exp.Expression) -> bool:
    """Whether the query has a window: a window helper, or a window TVF aggregated (not a join side)."""
    from sqlglot import exp

    for x in node.walk():
        if isinstance(x, exp.Anonymous) and helper_of(x):
            return True
        if isinstance(x, exp.Table) and is_window_tvf(x) and isinstance(x.parent, exp.From):
            select = x.parent.parent
            if not (select is not None and select.args.get("joins")):
                return True
    return False


def _event_time(node: exp.Expression, sql: SqlText, settings: SqlSettings) -> tuple[str | None, bool]:
    """The sources' event-time column (None: each one's timestamp column), and whether they need one."""
    from sqlglot import exp

    calls = [x for x in node.walk() if isinstance(x, exp.Anonymous) and helper_of(x)]
    helpers = sorted(calls, key=lambda x: sql.offset(x) or 0)
    # GROUP BY without a helper, and a ranked subquery (top-N per key), need event time too.
    grouped = any(isinstance(x, exp.Group | exp.Window) for x in node.walk())
    needs = bool(helpers) or bool(settings.watermark_keys) or grouped
    if helpers and all(h.expressions and is_proctime(h.expressions[0]) for h in helpers):
        # A window in processing time needs no event time (a ranked subquery still does).
        ranked = any(isinstance(x, exp.Window) for x in node.walk())
        needs = bool(settings.watermark_keys) or ranked
    if settings.column is not None:
        return settings.column, needs
    for helper in helpers[:1]:
        ts = helper.expressions[0] if helper.expressions else None
        if isinstance(ts, exp.Column):
            return str(ts.name), needs
    return over_order(node), needs
