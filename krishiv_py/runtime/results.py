"""Bring result tables to the schema the plan promised."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.types import Schema

__all__ = ["conform"]


def conform(table: pa.Table, schema: Schema) -> pa.Table:
    """Select ``schema``'s columns in order and cast them to its Arrow types."""
    import pyarrow as pa

    target = pa.schema([pa.field(f.name, f.dtype.to_arrow(), True) for f in schema])
    arrays = [table.column(f.name).cast(f.type) for f in target]
    return pa.Table.from_arrays(arrays, schema=target)
