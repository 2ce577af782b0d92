"""Table sinks that hold the corrected answer: DuckDB, Delta Lake, Iceberg and PostgreSQL tables.

:mod:`krishiv_py.tables.changelog` defines what a micro-batch does to such a
table (the primary key, upsert and append modes, exactly once); each sink
is one class behind :mod:`krishiv_py.sinks`' protocol.
"""

from __future__ import annotations

from krishiv_py.tables.changelog import Changes, net_changes
from krishiv_py.tables.delta_sink import DeltaSink
from krishiv_py.tables.duckdb_sink import DuckDBSink
from krishiv_py.tables.iceberg_sink import IcebergSink
from krishiv_py.tables.postgres_sink import PostgresSink

__all__ = ["Changes", "DeltaSink", "DuckDBSink", "IcebergSink", "PostgresSink", "net_changes"]
