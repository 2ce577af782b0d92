"""Nexmark's queries as krishiv pipelines, one module per query (SPEC 3.14; docs/performance.md).

Each module ``qN`` holds:

- a docstring: what the query computes, as Nexmark states it, and where
  krishiv's form differs from Nexmark's SQL and why;
- ``SQL``: the query in krishiv's SQL (``session.sql``), over the streams
  ``bid``, ``auction`` and ``person`` of :mod:`benchmarks.data` (each with
  its watermark on ``date_time``), and q13's side table ``side_input``;
- ``build(streams)``: the same pipeline with the builder; ``SQL`` gives the
  same logical plan (``tests/test_nexmark_queries.py``);
- ``DUCKDB``: the reference, one DuckDB statement over the tables' Parquet
  files (``{bid}``, ``{auction}``, ``{person}``), giving the rows the
  pipeline gives on bounded input.

:mod:`benchmarks.nexmark.check` runs a query on a dataset both ways and
compares; ``python -m benchmarks.nexmark --query q15 --events 1000000``
does it from the command line. The queries that compose operators (q4, q6,
q9), joins (q3, q8, q20) and the window queries (q5, q7, q11) are in
:mod:`benchmarks.nexmark_compose`, :mod:`benchmarks.joins` and
:mod:`benchmarks.queries`. q12 counts in processing-time windows, whose
results depend on when rows arrive: its module names the columns
(``NOT_REPRODUCIBLE``) the check leaves out.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["NAMES", "query"]

#: The queries this package holds, in Nexmark's order.
NAMES = ("q0", "q1", "q2", "q10", "q12", "q13", "q14", "q15", "q16", "q17", "q18", "q19", "q21", "q22")


def query(name: str) -> ModuleType:
    """The module of query ``name`` (``"q15"``)."""
    if name not in NAMES:
        raise KeyError(f"unknown query {name!r}; this package holds {', '.join(NAMES)}")
    return importlib.import_module(f"benchmarks.nexmark.{name}")
