"""Krishiv's SQL: window queries over registered streams, lowered through the builder's plan.

``session.sql(text)`` parses ``text`` with sqlglot (Spark SQL dialect) and
translates each query into the builder calls that mean the same
(:mod:`krishiv_py.sql.query`), so a query and its builder twin make equal
logical plans: one planner, one ``explain()``, the same rows on every
lowering. sqlglot is imported when ``sql()`` is first called, never by
``import krishiv_py``.

Modules: :mod:`.source` (statements and positions), :mod:`.settings`
(``SET``), :mod:`.catalog` (registered streams), :mod:`.expressions`,
:mod:`.windows` (the window helpers), :mod:`.scope` (the query's context,
its relations and their column names), :mod:`.joins` (the JOIN clause,
read and translated), :mod:`.ranking` (top-N), :mod:`.aggregate`
(``GROUP BY``), :mod:`.over` (aggregates ``OVER`` a window),
:mod:`.query` (the statement), :mod:`.execute`.
docs/sql.md is the user's guide.
"""

from __future__ import annotations

from krishiv_py.sql.catalog import SqlCatalog, check_name
from krishiv_py.sql.execute import execute
from krishiv_py.sql.settings import SqlSettings

__all__ = ["SqlCatalog", "SqlSettings", "check_name", "execute"]
