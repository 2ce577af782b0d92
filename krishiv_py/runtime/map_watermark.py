"""Where a map task of the stateful lowering learns its micro-batch's watermark.

The stateful operator merges on-time rows per key and pane in the map
tasks, before the shuffle (:mod:`krishiv_py.stateful.premerge`), which
needs the watermark the operator will run the micro-batch with. Spark hands
that watermark to the operator, not to map tasks, but it writes it into the
query's offset log (``offsets/<batch>``, ``batchWatermarkMs``) before the
micro-batch runs, and every task of a micro-batch carries the batch id as
the local property ``streaming.sql.batchId``. A map task reads the entry
once; the operator checks each partial's watermark against its own.

When the task cannot tell (no batch id, a checkpoint on a file system this
process does not see, an entry it cannot read), its rows travel unmerged,
as they always may. A bounded run has no watermark until its end: every
valid row is on time. With an automatic lag the micro-batch's watermark is
the one the driver recorded for it (:mod:`krishiv_py.runtime.auto_watermark`),
not Spark's.
"""

from __future__ import annotations

import attrs

from krishiv_py.checkpoint import CheckpointLayout, local_path
from krishiv_py.errors import PlanError
from krishiv_py.runtime.auto_watermark import effective_watermark, recorded_states

__all__ = ["BATCH_ID_PROPERTY", "BatchWatermark", "local_path"]

#: The local property Spark sets on every task of a streaming micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@attrs.frozen(kw_only=True)
class BatchWatermark:
    """``merge_under`` of :func:`~krishiv_py.stateful.operator.pack_rows`, as the job sets it up.

    ``checkpoint``: the streaming query's checkpoint, the job's layout;
    ``None`` for a bounded run. ``shift_ms``: the plan's event-time shift, which the
    operator takes off Spark's watermark too. ``auto``: the watermark is the automatic
    lags', recorded for the micro-batch.
    """

    checkpoint: CheckpointLayout | None
    shift_ms: int = 0
    streaming: bool = True
    auto: bool = False

    def __call__(self) -> tuple[bool, int | None]:
        if not self.streaming:
            return True, None
        local = self.checkpoint  # (a path here or a URI: krishiv_py.files reads both)
        if local is None:
            return False, None
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch is None:
            return False, None
        if self.auto:  # Spark's delay is 0: its watermark is the highest event time seen
            # (No fallback: a micro-batch without its recorded watermark cannot run; the error says why.)
            spark_ms = local.batch_watermark_ms(int(batch))
            highest = None if spark_ms <= 0 else spark_ms - self.shift_ms
            return True, effective_watermark(recorded_states(local, int(batch)), highest)
        try:
            spark_ms = local.batch_watermark_ms(int(batch))
        except (OSError, ValueError, PlanError):
            return False, None
        return True, (None if spark_ms <= 0 else spark_ms - self.shift_ms)

    def of_batch(self) -> tuple[int | None, int]:
        """The micro-batch's watermark and start time (ms) for the task that asks; raises when the
        task cannot read them (the ``krishiv-files`` carrier needs them: Spark passes them to no
        ``applyInArrow`` function)."""
        known, watermark = self()
        local = self.checkpoint  # (a path here or a URI: krishiv_py.files reads both)
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if not known or local is None or batch is None:
            raise RuntimeError(
                "krishiv's operator could not read its micro-batch's watermark from the query's "
                f"offset log ({self.checkpoint.root if self.checkpoint else 'no checkpoint'}): the "
                "krishiv-files carrier needs the checkpoint on a file system the executors reach"
            )
        return watermark, local.batch_timestamp_ms(int(batch))
