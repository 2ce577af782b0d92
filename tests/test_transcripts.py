"""Hand-written transcripts of the boundaries, run three ways.

Each transcript is an input schema, a pipeline and steps. It runs on the
pure-Python reference model, on the native streaming lowering (real Spark,
results compared after every step) and on the bounded lowering (all rows at
once), and all must agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.testing import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    run_streaming,
)

Pipeline = Callable[[kp.Stream], kp.Stream]
MS = "k string, t bigint, v bigint"
TS = "k string, t timestamp, v double"


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def rows(*times: int | None, key: str = "a") -> list[dict[str, Any]]:
    return [{"k": key, "t": t, "v": i + 1} for i, t in enumerate(times)]


def tumbling(size: int, lag: int, *, keyed: bool = True) -> Pipeline:
    def build(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", lag)
        windowed = w.key_by("k").tumbling_window(size) if keyed else w.tumbling_window(size)
        return windowed.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))

    return build


def sliding(size: int, slide: int, lag: int) -> Pipeline:
    return lambda s: (
        s.watermark("t", lag)
        .key_by("k")
        .sliding_window(size, slide)
        .agg(kp.count(kp.col("*")), kp.max(kp.col("v")))
    )


def session_w(gap: int, lag: int) -> Pipeline:
    return lambda s: (
        s.watermark("t", lag).key_by("k").session_window(gap).agg(kp.count(kp.col("*")), kp.min(kp.col("v")))
    )


TRANSCRIPTS: dict[str, tuple[str, Pipeline, list[Step]]] = {
    "event_exactly_at_window_end_goes_to_next_window": (
        MS,
        tumbling(10, 0),
        [Send(rows(0, 10)), Send(rows(20)), Close()],
    ),
    "watermark_exactly_at_window_end_fires_it": (
        MS,
        tumbling(10, 5),
        [Send(rows(3)), Send(rows(15)), Close()],
    ),
    "mildly_late_event_joins_open_window": (
        MS,
        tumbling(10, 5),
        [Send(rows(14)), Send(rows(8, 5)), Send(rows(16)), Close()],
    ),
    "very_late_event_is_dropped": (
        MS,
        tumbling(10, 0),
        [Send(rows(25)), Send(rows(3)), Send(rows(26)), Close()],
    ),
    "sessions_exactly_gap_apart_merge": (
        MS,
        session_w(10, 100),
        [Send(rows(0, 10)), Send(rows(0, 11, key="b")), Close()],
    ),
    "out_of_order_event_bridges_two_sessions": (
        MS,
        session_w(10, 100),
        [Send(rows(0, 25)), Send(rows(12)), Close()],
    ),
    "session_fires_when_watermark_passes_its_end": (
        MS,
        session_w(10, 0),
        [Send(rows(0, 5)), Send(rows(15)), Send(rows(40)), Close()],
    ),
    "negative_timestamps": (
        MS,
        tumbling(1000, 0),
        [Send(rows(-1, -1000, -1001, -2500)), Send(rows(0, 999)), Close()],
    ),
    "negative_timestamps_sliding": (
        MS,
        sliding(30, 10, 0),
        [Send(rows(-25, -5)), Send(rows(5)), Close()],
    ),
    "empty_batches_change_nothing": (
        MS,
        tumbling(10, 0),
        [Send([]), Send(rows(5)), Send([]), Send(rows(12)), Send([]), Close()],
    ),
    "one_key_vs_many_keys": (
        MS,
        tumbling(10, 2),
        [Send(rows(1, 2, 3) + rows(4, key="b") + rows(5, key="c")), Send(rows(13, key="b")), Close()],
    ),
    "unkeyed_tumbling": (
        MS,
        tumbling(10, 0, keyed=False),
        [Send(rows(1) + rows(2, key="b")), Send(rows(11)), Close()],
    ),
    "advance_watermark_fires_without_rows_and_lower_is_ignored": (
        MS,
        tumbling(10, 100),
        [
            Send(rows(1, 12)),
            AdvanceWatermark(10),
            AdvanceWatermark(5),
            Send(rows(3)),
            AdvanceWatermark(20),
            Close(),
        ],
    ),
    "sliding_membership": (
        MS,
        sliding(30, 10, 0),
        [Send(rows(5, 15, 25)), Send(rows(40)), Close()],
    ),
    "null_event_time_is_not_windowed": (
        MS,
        tumbling(10, 0),
        [Send(rows(None, 5)), Send(rows(None)), Close()],
    ),
    "far_future_event_time_fires_on_close": (
        MS,
        tumbling(10, 0),
        [Send(rows(200_000_000_000_000, 253_402_300_799_980)), Close()],
    ),
    "event_times_out_of_range_are_invalid": (
        MS,
        tumbling(10, 0),
        [Send(rows(-(2**44) - 1, 253_402_300_800_000, -(2**44))), Close()],
    ),
    "nan_amounts_follow_spark_ordering": (
        TS,
        lambda s: (
            s.watermark("t", 0)
            .key_by("k")
            .tumbling_window(10)
            .agg(
                kp.sum(kp.col("v")), kp.min(kp.col("v")), kp.max(kp.col("v")), kp.count_distinct(kp.col("v"))
            )
        ),
        [
            Send(
                [
                    {"k": "a", "t": at(1), "v": float("nan")},
                    {"k": "a", "t": at(2), "v": 1.0},
                    {"k": "a", "t": at(3), "v": float("nan")},
                    {"k": "b", "t": at(4), "v": float("nan")},
                ]
            ),
            Close(),
        ],
    ),
    "timestamp_event_time_with_microseconds": (
        TS,
        lambda s: s.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")), kp.first(kp.col("v"))),
        [
            Send(
                [
                    {"k": "a", "t": at(9) + dt.timedelta(microseconds=999), "v": 1.0},
                    {"k": "a", "t": at(10), "v": 2.0},
                ]
            ),
            Close(),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_reference_native_and_bounded_agree(session: kp.Session, name: str) -> None:
    schema, pipeline, steps = TRANSCRIPTS[name]
    assert_lowerings_agree(session, schema, pipeline, steps)


def test_very_late_transcript_really_drops(session: kp.Session) -> None:
    """Guard against a vacuous transcript: the late event must be missing from the output."""
    schema, pipeline, steps = TRANSCRIPTS["very_late_event_is_dropped"]
    final = run_streaming(session, schema, pipeline, steps)[-1]
    assert [(r["window_start"], r["count"]) for r in final] == [(at(20), 2)]
