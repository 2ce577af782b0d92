"""The rows of a native join's side that are behind their micro-batch's watermark.

SPEC 3.12 (with 3.6): a row is very late when its event time is below the
watermark ``W`` in force for its micro-batch, the one computed at the end
of the micro-batch before. Spark's stream-stream join drops late rows by
the watermark of the micro-batch before *that* one (its
``eventTimeWatermarkForLateEvents``), so when a watermark advance and a row
fall into consecutive micro-batches with no empty micro-batch between them,
Spark's join lets the row meet rows it must not meet. Each side of a native
join therefore flags its rows in Arrow first (``mapInArrow``: one Python
call per partition and micro-batch, no Python per row), reading ``W`` from
the query's offset log as the stateful lowering's map tasks do
(:mod:`krishiv_py.runtime.map_watermark`); an observation counts the
flagged rows and a filter drops them before the join.

A task that cannot read its micro-batch's watermark (a checkpoint on a file
system this process does not see) fails the micro-batch with a message that
says so, rather than join a row it cannot classify.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.names import ET, LATE_FLAG
from krishiv_py.runtime.map_watermark import BatchWatermark

if TYPE_CHECKING:
    from krishiv_py.checkpoint import CheckpointLayout

__all__ = ["LateRows", "flag_late"]


def flag_late(batch: pa.RecordBatch, watermark_us: int | None) -> pa.RecordBatch:
    """``batch`` with :data:`LATE_FLAG`: true where the event time (``__kp_et``) is below
    ``watermark_us`` (None: no watermark yet, nothing is late; a row without event time is not
    flagged here: the join drops it as invalid).

    Examples
    --------
    >>> et = pa.array([1_000, 2_000, None], pa.timestamp("us"))
    >>> flag_late(pa.record_batch([et], names=[ET]), 2_000).column(LATE_FLAG).to_pylist()
    [True, False, False]
    """
    late: pa.Array[Any]
    if watermark_us is None:
        late = pa.array([False] * batch.num_rows, pa.bool_())
    else:
        times = batch.column(ET).cast(pa.int64())
        below = pc.less(times, pa.scalar(watermark_us, pa.int64()))
        late = pc.if_else(pc.is_null(below), False, below)
    return pa.RecordBatch.from_arrays([*batch.columns, late], names=[*batch.schema.names, LATE_FLAG])


@attrs.frozen
class LateRows:
    """``mapInArrow`` function: each batch with :data:`LATE_FLAG` against its micro-batch's ``W``.

    ``shift_ms``: the event-time shift inside the query (``__kp_et`` carries it, and so does
    Spark's watermark in the offset log).
    """

    checkpoint: CheckpointLayout | None
    shift_ms: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        known, watermark = BatchWatermark(checkpoint=self.checkpoint, shift_ms=self.shift_ms)()
        if not known:
            where = self.checkpoint.root if self.checkpoint is not None else "no checkpoint"
            raise RuntimeError(
                "a native join could not read its micro-batch's watermark from the query's offset "
                f"log ({where}), which it needs to drop very late rows exactly: put the checkpoint "
                "on a file system the executors see, or run the join on the stateful lowering"
            )
        limit = None if watermark is None else (watermark + self.shift_ms) * 1000
        for batch in batches:
            yield flag_late(batch, limit)
