"""Arrow result tables as rows for :func:`benchmarks.digest.digest`."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from benchmarks.protocol import Rows


def rows_of(columns: tuple[str, ...]) -> Callable[[pa.Table], Rows]:
    """Rows of a result table in ``columns`` order."""

    def rows(table: pa.Table) -> Rows:
        return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))

    return rows
