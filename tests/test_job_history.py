"""A streaming job's running figures: every micro-batch counted, only the newest reports kept.

A job folds each of Spark's progress reports into its metrics and
watermarks as it arrives (``krishiv_py.runtime.job._History``), so a job
that runs for days holds no more than :data:`KEPT_PROGRESS` reports and
reads its metrics at the same cost after a million micro-batches as after
ten. No Spark here: the reports are made up the way Spark posts them.
"""

from __future__ import annotations

from typing import Any

from krishiv_py.names import IDLE_WM, INVALID, MAX_ET_US, OUT_OBSERVE, ROWS, source_observation
from krishiv_py.planner.spark.recipe import TrackedSource
from krishiv_py.runtime.job import KEPT_PROGRESS, _History

A, B = source_observation(0), source_observation(1)
TRACKED = [
    TrackedSource(observe_name=A, source="a", lag_ms=10),
    TrackedSource(observe_name=B, source="b", lag_ms=0),
]


def report(batch: int, **observed: dict[str, Any]) -> dict[str, Any]:
    return {"batchId": batch, "numInputRows": 1, "observedMetrics": observed}


def test_the_watermark_waits_for_every_source_then_follows_the_slowest() -> None:
    h = _History(TRACKED, shift_ms=0)
    h.add(report(0, **{A: {ROWS: 3, INVALID: 1, MAX_ET_US: 100_000}}))
    assert h.watermark_ms is None and h.per_source == {"a": 90}  # b has no watermark yet
    h.add(report(1, **{B: {ROWS: 2, MAX_ET_US: 50_000}}, **{OUT_OBSERVE: {ROWS: 4}}))
    assert h.watermark_ms == 50 and h.advances == 1
    h.add(report(2, **{A: {ROWS: 1, MAX_ET_US: 20_000}}))  # older event: a's watermark stays
    assert h.per_source == {"a": 90, "b": 50} and h.watermark_ms == 50 and h.advances == 1
    h.add(report(3, **{B: {IDLE_WM: 200}}))  # an idle marker lifts b's operator, not its own watermark
    assert h.watermark_ms == 90 and h.advances == 2 and h.per_source["b"] == 50
    assert h.totals == {"rows": 6, "invalid": 1, "emitted": 4, "arith": 0, "very_late": 0} and h.batches == 4
    assert [w for _, w in h.recent] == [None, 50, 50, 90]


def test_a_report_read_again_is_not_counted_twice() -> None:
    h = _History(TRACKED[:1], shift_ms=0)
    h.add(report(0, **{A: {ROWS: 3, MAX_ET_US: 100_000}}))
    h.add(report(0, **{A: {ROWS: 3, MAX_ET_US: 100_000}}))
    assert h.batches == 1 and h.totals["rows"] == 3


def test_a_long_job_keeps_only_the_newest_reports_and_counts_them_all() -> None:
    h = _History(TRACKED[:1], shift_ms=5)
    batches = KEPT_PROGRESS * 3 + 7
    for i in range(batches):
        h.add(report(i, **{A: {ROWS: 2, MAX_ET_US: 1_000 * i}}))
    assert h.batches == batches and h.totals["rows"] == 2 * batches
    assert len(h.recent) == KEPT_PROGRESS
    assert h.recent[0][0]["batchId"] == batches - KEPT_PROGRESS
    assert h.watermark_ms == (batches - 1) - 10 - 5 and h.advances == batches  # the first one counts too
