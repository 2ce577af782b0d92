"""Several sources: a watermark per source, the minimum overall (SPEC 3.4).

Pinned by the Ripple seed's multi-source table and by Spark's own
"watermark with 2 streams" test (EventTimeWatermarkSuite), on the reference
model and on both streaming lowerings.
"""

from __future__ import annotations

import pytest

import krishiv_py as kp
from krishiv_py.testing import (
    AdvanceWatermark,
    Close,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
    run_reference,
)
from krishiv_py.testing.steps import reference_model_for

SCHEMA = "k string, t bigint"


def ripple(a: kp.Stream, b: kp.Stream) -> kp.Stream:
    return a.watermark("t", 0).union(b.watermark("t", 0)).tumbling_window(100).agg(kp.count(kp.col("*")))


#: The Ripple seed's table (times in ms), after a first row from A so that window [0, 100) exists.
#: Each entry: the step, then (A's watermark, B's watermark, overall watermark, windows fired so far).
RIPPLE: list[tuple[Step, tuple[int | None, int | None, int | None, int]]] = [
    (Send([{"k": "x", "t": 10}], source="a"), (10, None, None, 0)),
    (AdvanceWatermark(100, source="a"), (100, None, None, 0)),  # t0: B has none -> no overall
    (AdvanceWatermark(50, source="b"), (100, 50, 50, 0)),  # t1: min(100, 50)
    (AdvanceWatermark(100, source="b"), (100, 100, 100, 1)),  # t2: [0, 100) fires
    (AdvanceWatermark(200, source="a"), (200, 100, 100, 1)),  # t3: no change
    (AdvanceWatermark(50, source="a"), (200, 100, 100, 1)),  # backwards: ignored
    (AdvanceWatermark(150, source="b"), (200, 150, 150, 1)),  # t4: overall 150
]


def test_ripple_table_on_the_reference_model() -> None:
    model = reference_model_for(ripple(*_placeholders("a", "b")))
    for step, (wa, wb, overall, fired) in RIPPLE:
        assert step.source is not None
        if isinstance(step, Send):
            model.send(step.rows, source=step.source)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms, source=step.source)
        marks = model.source_watermarks()
        assert (marks.get("a"), marks.get("b"), model.watermark_ms) == (wa, wb, overall), step
        assert len(model.results) == fired, step


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_ripple_table_through_the_public_api(session: kp.Session, lowering: str) -> None:
    a, sender_a = session.memory_stream(SCHEMA)
    b, sender_b = session.memory_stream(SCHEMA)
    senders = {"a": sender_a, "b": sender_b}
    job = ripple(a, b).start(lowering=lowering)  # type: ignore[arg-type]
    try:
        for step, (wa, wb, overall, fired) in RIPPLE:
            assert step.source is not None
            if isinstance(step, Send):
                senders[step.source].send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                senders[step.source].advance_watermark(step.ts_ms)
            job.process_all_available()
            marks = job.source_watermarks()
            got = (marks.get(sender_a.name), marks.get(sender_b.name), job.watermark_ms)
            assert got == (wa, wb, overall), (step, got)
            assert job.results().num_rows == fired, step
        assert job.metrics().watermark_advances == 3  # 50, 100, 150
    finally:
        job.stop()


def test_ripple_table_lowerings_agree(session: kp.Session) -> None:
    steps = [s for s, _ in RIPPLE] + [Send([{"k": "y", "t": 160}], source="b"), Close("a"), Close("b")]
    assert_lowerings_agree(session, SCHEMA, ripple, steps, sources=("a", "b"))


# --- Spark's "watermark with 2 streams" -------------------------------------------------------


def two_streams(first: kp.Stream, second: kp.Stream) -> kp.Stream:
    """Spark's test: delays of 10 s and 5 s; here with a 5 s tumbling count so windows fire."""
    return (
        first.watermark("t", 10_000)
        .union(second.watermark("t", 5_000))
        .tumbling_window(5_000)
        .agg(kp.count(kp.col("*")))
    )


def _data(source: str, *seconds: int) -> Step:
    return Send([{"k": "v", "t": s * 1000} for s in seconds], source=source)


#: (steps, global watermark after them in seconds): Spark's assertions, with simultaneous
#: data from both sides sent as two steps (the watermark is read after both).
SPARK_TWO_STREAMS: list[tuple[list[Step], int | None]] = [
    ([_data("first", 11)], None),  # Spark: 0 until both sides have data
    ([_data("second", 6)], 1),
    ([_data("second", 8)], 1),  # stays at the left's 1 when the right moves to 3
    ([_data("first", 21)], 3),  # switches to the right
    ([_data("second", 17, 28, 39)], 11),  # back to the left
    ([_data("first", 31)], 21),
    ([_data("first", 41)], 31),
    ([_data("first", 51)], 34),  # the right again
    ([_data("first", 100), _data("second", 100)], 90),
    ([_data("first", 120), _data("second", 110)], 105),
    ([_data("first", 130), _data("second", 125)], 120),
    ([_data("first", 100), _data("second", 100)], 120),  # never decreases
    ([_data("first", 140), _data("second", 100)], 120),
    ([_data("first", 100), _data("second", 135)], 130),
]


def test_spark_two_streams_on_the_reference_model() -> None:
    model = reference_model_for(two_streams(*_placeholders("first", "second")))
    for steps, expected in SPARK_TWO_STREAMS:
        for step in steps:
            assert isinstance(step, Send) and step.source is not None
            model.send(step.rows, source=step.source)
        assert model.watermark_ms == (None if expected is None else expected * 1000), steps


def test_spark_two_streams_through_the_public_api(session: kp.Session) -> None:
    # Native lowering (the planner's choice); the Ripple table covers the stateful one.
    first, sender_first = session.memory_stream(SCHEMA)
    second, sender_second = session.memory_stream(SCHEMA)
    senders = {"first": sender_first, "second": sender_second}
    job = two_streams(first, second).start()
    assert job.lowering == "native"
    steps = [step for group, _ in SPARK_TWO_STREAMS for step in group]
    expected_results = run_reference(SCHEMA, two_streams, steps, sources=("first", "second"))
    done = 0
    try:
        for group, expected in SPARK_TWO_STREAMS:
            for step in group:
                assert isinstance(step, Send) and step.source is not None
                senders[step.source].send(list(step.rows))
                job.process_all_available()
            done += len(group)
            assert job.watermark_ms == (None if expected is None else expected * 1000), group
            assert_same_rows(job.results().to_pylist(), expected_results[done - 1])
    finally:
        job.stop()


def _placeholders(*names: str) -> list[kp.Stream]:
    from krishiv_py.testing.steps import _placeholder

    return [_placeholder(SCHEMA, name) for name in names]
