"""Nexmark's queries as krishiv pipelines, one module per query, q0 to q23 (SPEC 3.14; docs/performance.md).

Each module ``qN`` holds:

- a docstring: what the query computes, as Nexmark states it (its SQL,
  where it is more than a line), and where krishiv's form differs from
  Nexmark's SQL and why; which runners of the benchmarks run it elsewhere;
- ``SQL``: the query in krishiv's SQL (``session.sql``), over the streams
  ``bid``, ``auction`` and ``person`` of :mod:`benchmarks.data` (each with
  its watermark on ``date_time``), and q13's side table ``side_input``; or
  None where krishiv's SQL cannot say the builder's plan, the docstring
  saying why (q3, q6, q7, q20, q23);
- ``build(streams)``: the same pipeline with the builder, over
  :class:`~benchmarks.nexmark._streams.Streams`; ``SQL`` gives the same
  logical plan (``tests/test_nexmark_queries.py``);
- ``DUCKDB``: the reference, one DuckDB statement over the tables
  (``{bid}``, ``{auction}``, ``{person}``, ``{side_input}``: each a
  relation, the Parquet files or a view), giving the rows the pipeline
  gives on bounded input.

and, where the query needs them:

- ``NOT_REPRODUCIBLE``: result columns that depend on when the query runs
  (q12's processing-time windows), left out of the comparison;
- ``READ_ORDER``: ``{table: columns}``, a table's columns in the order the
  query reads them where that order decides a tie (q6, q9: a top-N breaks
  a tie by the columns in order); the check selects them so;
- ``TIES_DUCKDB``: a DuckDB statement (``DUCKDB``'s tables) of the values
  of the result's first column whose rows krishiv orders by arrival where
  the reference orders by a column (q6's sellers with two winning bids at
  one time); those rows compare by count alone;
- ``FIRED_DUCKDB``: ``DUCKDB``'s rows that a streamed run whose watermark
  reached ``{watermark_ms}`` (epoch ms) has (q6, q7: the rows or windows
  the watermark passed), for the streamed checks of
  :mod:`benchmarks.nexmark_compose`;
- ``COLUMNS``, ``KEY`` and ``FLINK``: for the PyFlink runs of
  :mod:`benchmarks.nexmark_compose` (q4, q6, q7, q9, q23): the result's
  columns with their Flink SQL types, the columns an updating result is
  unique by (its changes apply by them), and the Flink SQL where it is not
  ``DUCKDB``'s text;
- ``WORKLOAD``: the query's workload in the sustainable harness
  (:data:`benchmarks.sustain_queries.WORKLOADS`, which
  ``python -m benchmarks.nexmark --rate R`` runs), where it has one.

:mod:`benchmarks.nexmark.check` runs a query on a dataset both ways and
compares; ``python -m benchmarks.nexmark --query q15 --events 1000000``
does it from the command line, for any of the 24 queries. The benchmark
suite's Nexmark queries (:mod:`benchmarks.joins`,
:mod:`benchmarks.spark_runner`, :mod:`benchmarks.duckdb_runner`: q3, q5,
q8, q11, q20) and :mod:`benchmarks.nexmark_compose` (q4, q6, q7, q9, q23)
run these modules' pipelines and references.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["NAMES", "query"]

#: The queries this package holds, in Nexmark's order: q0 to q23.
NAMES = tuple(f"q{i}" for i in range(24))


def query(name: str) -> ModuleType:
    """The module of query ``name`` (``"q15"``)."""
    if name not in NAMES:
        raise KeyError(f"unknown query {name!r}; this package holds {', '.join(NAMES)}")
    return importlib.import_module(f"benchmarks.nexmark.{name}")
