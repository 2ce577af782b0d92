"""State the driver keeps for a job (a cascade's second window, window top-N), per micro-batch.

Each micro-batch's state is a few named Arrow tables written under the
checkpoint as ``<batch id>.<name>.arrow`` (atomically, the last name
written last: it commits the batch). A micro-batch that Spark runs again
after a restart loads the state the batch before it left, so what the
driver emits for it is the same, and the sink's batch id makes it land
once. The last :attr:`DriverStateStore.KEEP` batches are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa

__all__ = ["DriverStateStore"]

_META = b"watermark_ms"


class DriverStateStore:
    """Named Arrow tables per batch id under ``path``; ``names`` in the order they are written."""

    KEEP = 3

    def __init__(self, path: str, names: tuple[str, ...]) -> None:
        self.path = path
        self.names = names

    def load_before(self, batch_id: int) -> tuple[dict[str, pa.Table], int | None] | None:
        """The tables and watermark the last micro-batch before ``batch_id`` left (None: none)."""
        if not os.path.isdir(self.path):
            return None
        commit = f".{self.names[-1]}.arrow"
        ids = sorted(int(f.split(".")[0]) for f in os.listdir(self.path) if f.endswith(commit))
        ids = [i for i in ids if i < batch_id]
        if not ids:
            return None
        tables = {name: _read(os.path.join(self.path, f"{ids[-1]}.{name}.arrow")) for name in self.names}
        raw = (tables[self.names[-1]].schema.metadata or {}).get(_META, b"")
        tables = {k: t.replace_schema_metadata(None) for k, t in tables.items()}
        return tables, int(raw) if raw else None

    def save(self, batch_id: int, tables: Mapping[str, pa.Table], watermark_ms: int | None) -> None:
        os.makedirs(self.path, exist_ok=True)
        for name in self.names:
            table = tables[name]
            if name == self.names[-1]:
                mark = b"" if watermark_ms is None else str(watermark_ms).encode()
                table = table.replace_schema_metadata({_META: mark})
            _write(os.path.join(self.path, f"{batch_id}.{name}.arrow"), table)
        for name in os.listdir(self.path):
            head = name.split(".")[0]
            if head.isdigit() and int(head) <= batch_id - self.KEEP:
                os.remove(os.path.join(self.path, name))


def _write(path: str, table: pa.Table) -> None:
    tmp = path + ".tmp"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def _read(path: str) -> pa.Table:
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()
