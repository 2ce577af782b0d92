"""The stateful operator's output over Spark Connect: payload files written on the server, read here.

``foreachBatch`` functions run on the Connect server, not in this process,
so the operator's payloads go to Spark's own Parquet file sink under the
checkpoint (``krishiv-handoff/``, exactly once per batch, its metadata log
naming each batch's files; :data:`HANDOFF_CONF` keeps one metadata file per
batch) and the job routes them to its collector here in batch order
(:func:`take_handoff`), deleting each file once routed. Files left by a
process that died (or by a handler that raised) are routed when the job
starts again; routing is keyed by batch id, so a batch is never counted
twice.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, cast
from urllib.parse import unquote, urlparse

from krishiv_py.names import PAYLOAD

if TYPE_CHECKING:
    from krishiv_py.runtime.collector import BatchCollector

__all__ = ["HANDOFF_CONF", "take_handoff"]

#: Spark's file sink writes one metadata file per micro-batch with this (never compacts).
HANDOFF_CONF = {"spark.sql.streaming.fileSink.log.compactInterval": str(2**31 - 1)}


def take_handoff(path: str, collector: BatchCollector, after: int) -> int:
    """Route the payloads of batches after ``after`` that Spark's file sink left under ``path``.

    Each batch's Parquet files (listed in the sink's ``_spark_metadata/<batch id>``)
    go to ``collector`` in batch order and are deleted once routed. Returns the
    last batch id routed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from krishiv_py.stateful.operator import decode_payloads

    log_dir = os.path.join(path, "_spark_metadata")
    if not os.path.isdir(log_dir):
        return after
    for batch_id in sorted(int(f) for f in os.listdir(log_dir) if f.isdigit() and int(f) > after):
        with open(os.path.join(log_dir, str(batch_id)), encoding="utf-8") as f:
            entries = [json.loads(line) for line in f.read().splitlines()[1:] if line.strip()]
        files = [unquote(urlparse(e["path"]).path) for e in entries if e.get("action", "add") == "add"]
        files = [f for f in files if os.path.exists(f)]  # routed (and deleted) by an earlier run
        if files:
            table = pa.concat_tables([pq.read_table(f, columns=[PAYLOAD]) for f in files])
            payloads = decode_payloads(cast("list[bytes]", table.column(PAYLOAD).to_pylist()))
            if payloads is not None:
                collector.accept(payloads, batch_id)
            for name in files:
                os.remove(name)
        after = batch_id
    return after
