"""Capped sessions (SPEC 3.3, ``session_window(gap_ms, max_duration_ms=M)``).

A session never spans ``M`` or more (``last_ts - first_ts < M``): the
lesson seed's "double bound". Pinned transcripts (the beacon that never
pauses, an out-of-order row that would merge two sessions past the cap), a
property test on random streams, and parity of the reference model with
the stateful lowering, streaming and bounded.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.testing import AdvanceWatermark, Close, Send, Step, assert_lowerings_agree, assert_same_rows
from krishiv_py.testing.steps import _placeholder, reference_model_for

SCHEMA = "sat string, t bigint"
S = 1_000


def passes(gap_ms: int, cap_ms: int, lag_ms: int = 0) -> Any:
    def build(stream: kp.Stream) -> kp.Stream:
        windowed = stream.watermark("t", lag_ms).key_by("sat").session_window(gap_ms, max_duration_ms=cap_ms)
        return windowed.agg(kp.count(kp.col("*")).alias("beacons"))

    return build


def session(sat: str, first_s: int, last_s: int, gap_s: int, n: int) -> dict[str, object]:
    return {"sat": sat, "window_start": first_s * S, "window_end": (last_s + gap_s) * S, "beacons": n}


def play(build: Any, steps: list[Step]) -> list[dict[str, object]]:
    model = reference_model_for(build(_placeholder(SCHEMA)))
    for step in steps:
        if isinstance(step, Send):
            model.send(step.rows)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms)
        else:
            model.close()
    return model.results


#: The lesson seed's beacon: a stuck-open emitter beacons every 10 s for 5 minutes, then a real
#: pass of 40 s after a quiet minute. Gap 30 s, cap 2 minutes.
BEACON_STEPS: list[Step] = [
    Send([{"sat": "isl-7", "t": t * S} for t in range(0, 300, 10)]),
    Send([{"sat": "isl-7", "t": t * S} for t in range(360, 410, 10)]),
    Close(),
]
BEACON_SESSIONS = [
    session("isl-7", 0, 110, 30, 12),  # the beacon at 120 s would make the span 120 s: a new session
    session("isl-7", 120, 230, 30, 12),
    session("isl-7", 240, 290, 30, 6),  # the emitter stops at 290 s
    session("isl-7", 360, 400, 30, 5),  # a real pass: closed by the gap
]


def test_the_beacon_that_never_pauses_on_the_model() -> None:
    assert_same_rows(play(passes(30 * S, 120 * S), BEACON_STEPS), BEACON_SESSIONS)


def test_the_beacon_through_the_stateful_lowering(session: kp.Session) -> None:
    assert_lowerings_agree(session, SCHEMA, passes(30 * S, 120 * S), BEACON_STEPS)


#: An out-of-order row that touches two sessions whose union would reach the cap (gap 5, cap 8):
#: it seals both and starts a session of its own, which the next row joins.
OUT_OF_ORDER: list[tuple[Step, list[dict[str, object]]]] = [
    (Send([{"sat": "a", "t": 0}, {"sat": "a", "t": 2}]), []),  # [0, 2]
    (Send([{"sat": "a", "t": 8}, {"sat": "a", "t": 9}]), []),  # [8, 9]: 8 > 2 + 5, a second session
    (Send([{"sat": "a", "t": 5}]), []),  # touches both; [0, 9] would span 9 >= 8: both sealed, [5, 5] opens
    (Send([{"sat": "a", "t": 10}]), []),  # touches sealed [8, 9] and open [5, 5]: joins [5, 10]
    (Send([{"sat": "a", "t": 1}]), []),  # touches sealed [0, 2] and open [5, 10]: [1, 10] spans 9: sealed too
    (
        Close(),
        [
            {"sat": "a", "window_start": 0, "window_end": 7, "beacons": 2},
            {"sat": "a", "window_start": 8, "window_end": 14, "beacons": 2},
            {"sat": "a", "window_start": 5, "window_end": 15, "beacons": 2},
            {"sat": "a", "window_start": 1, "window_end": 6, "beacons": 1},
        ],
    ),
]


def test_an_out_of_order_row_never_merges_sessions_past_the_cap() -> None:
    model = reference_model_for(passes(5, 8, lag_ms=100)(_placeholder(SCHEMA)))
    for step, want in OUT_OF_ORDER:
        got = model.send(step.rows) if isinstance(step, Send) else model.close()
        assert_same_rows(got, want)


def test_out_of_order_rows_on_spark(session: kp.Session) -> None:
    assert_lowerings_agree(session, SCHEMA, passes(5, 8, lag_ms=100), [s for s, _ in OUT_OF_ORDER])


def test_a_batch_joins_capped_sessions_in_event_time_order() -> None:
    """Within one step the arrival order does not matter: rows are taken by event time."""
    rows = [{"sat": "a", "t": t} for t in (9, 0, 5, 2, 8)]
    forward = play(passes(5, 8), [Send(sorted(rows, key=lambda r: r["t"])), Close()])  # type: ignore[arg-type,return-value]
    shuffled = play(passes(5, 8), [Send(rows), Close()])
    assert_same_rows(shuffled, forward)
    assert [(r["window_start"], r["window_end"]) for r in forward] == [(0, 10), (8, 14)]


rows = st.lists(
    st.fixed_dictionaries({"sat": st.sampled_from(["a", "b"]), "t": st.integers(0, 120)}), max_size=10
)


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(rows, min_size=1, max_size=6),
    gap=st.integers(1, 20),
    cap=st.integers(1, 60),
    lag=st.integers(0, 30),
)
def test_no_session_reaches_the_cap(
    batches: list[list[dict[str, Any]]], gap: int, cap: int, lag: int
) -> None:
    results = play(passes(gap, cap, lag), [*(Send(b) for b in batches), Close()])
    for r in results:
        span = int(r["window_end"]) - gap - int(r["window_start"])  # type: ignore[call-overload]
        assert 0 <= span < cap, r
    total = sum(int(r["beacons"]) for r in results)  # type: ignore[call-overload]
    assert total <= sum(len(b) for b in batches)


@settings(max_examples=1, deadline=None)
@given(
    batches=st.lists(rows, min_size=1, max_size=3),
    marks=st.lists(st.integers(0, 130), min_size=3, max_size=3),
)
def test_model_streaming_and_bounded_agree(
    session: kp.Session, batches: list[list[dict[str, Any]]], marks: list[int]
) -> None:
    steps: list[Step] = []
    for batch, mark in zip(batches, marks, strict=False):
        steps += [Send(batch), AdvanceWatermark(mark)]
    steps.append(Close())
    assert_lowerings_agree(session, SCHEMA, passes(10, 25, lag_ms=5), steps)


@pytest.mark.parametrize("cap", [0, -1])
def test_a_cap_must_be_positive(session: kp.Session, cap: int) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    with pytest.raises(kp.PlanError, match="max_duration_ms must be > 0"):
        stream.watermark("t", 0).session_window(10, max_duration_ms=cap)
