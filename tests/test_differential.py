"""The native lowering against the stateful one and the model, over batchings.

Each native plan shape runs seeded random cases (:mod:`benchmarks.differential`):
rows with disorder, late and very late rows, null keys and event times, and
watermark advances, cut into micro-batches at random (several sends before
one ``process_all_available()``, an advance right before rows). After every
group of steps the results, the watermark, the very late rows (where the
lowering counts them) and the rows read equal the model's. ``nox -s
differential`` runs the long version.
"""

from __future__ import annotations

import random
import re
from typing import Any

import attrs
import pytest

import krishiv_py as kp
from benchmarks.differential import SHAPES, run_job
from krishiv_py.testing import AdvanceWatermark, Close, Send
from krishiv_py.testing.batchings import (
    Group,
    Observed,
    assert_batchings_agree,
    assert_observed_agree,
    run_reference_batched,
)

SCHEMA = "k string, event_time bigint, v bigint"
RIGHT = "k string, event_time bigint, w bigint"


def _issue_join(left: kp.Stream, right: kp.Stream) -> kp.Stream:
    big = 10**12
    lk = left.watermark("event_time", big).key_by("k")
    return lk.interval_join(right.watermark("event_time", big).key_by("k"), between=(-5_000, 0), how="inner")


@pytest.mark.parametrize("lowering", ["native", "stateful", None])
def test_a_very_late_row_joins_on_no_lowering(session: kp.Session, lowering: Any) -> None:
    """A right row 22 s behind the watermark in force: very late, whatever the lowering."""
    left, ls = session.memory_stream("k string, event_time long, v long", name="l")
    right, rs = session.memory_stream(RIGHT, name="r")
    job = _issue_join(left, right).start(lowering=lowering)
    try:
        ls.send([{"k": "a", "event_time": 10_000, "v": 1}])
        job.process_all_available()
        ls.advance_watermark(30_000)
        rs.advance_watermark(30_000)
        job.process_all_available()
        assert job.watermark_ms == 30_000
        rs.send([{"k": "a", "event_time": 8_000, "w": 100}])
        job.process_all_available()
        ls.close()
        rs.close()
        assert job.await_termination(timeout_s=120)
        assert job.results().num_rows == 0
        assert job.metrics().very_late_events == 1
    finally:
        job.stop()


@pytest.mark.parametrize("lowering", ["native", "stateful"])
def test_a_row_right_after_an_advance_in_the_same_step_is_very_late(
    session: kp.Session, lowering: Any
) -> None:
    """The advance and the row in consecutive micro-batches, no empty one between them: Spark's
    join alone let the row join (it drops by the watermark of the micro-batch before)."""
    groups: list[Group] = [
        [Send([{"k": "a", "event_time": 10_000, "v": 1}], source="l")],
        [Send([{"k": "z", "event_time": 0, "v": 0}], source="r")],  # both sides have a watermark
        [AdvanceWatermark(30_000, source="l")],
        [
            AdvanceWatermark(30_000, source="r"),
            Send([{"k": "a", "event_time": 8_000, "v": 100}], source="r"),
            Send([{"k": "a", "event_time": 30_000, "v": 7}], source="r"),
        ],
        [Send([{"k": "a", "event_time": 31_000, "v": 2}], source="l")],
        [Close(source="l")],
        [Close(source="r")],
    ]
    sources = ("l", "r")

    def join(left: kp.Stream, right: kp.Stream) -> kp.Stream:
        lk = left.watermark("event_time", 0).key_by("k")
        return lk.interval_join(right.watermark("event_time", 0).key_by("k"), between=(-5_000, 0))

    expected = run_reference_batched(SCHEMA, join, groups, sources=sources)
    assert expected[3].very_late_events == 1 and len(expected[-1].results) == 1  # (31 000, 30 000)
    seen = assert_batchings_agree(session, SCHEMA, join, groups, lowering=lowering, sources=sources)
    assert seen[-1].very_late_events == 1


#: (shape, lowerings) the suite runs, one seeded case each: every native window shape on the
#: native lowering (the join: below, on both).
SUITE = [
    ("tumbling", ("native",)),
    ("sliding", ("native",)),
    ("sliding_panes", ("native",)),
    ("top_n", ("native",)),
    ("union", ("native",)),
]


@pytest.mark.parametrize(("shape", "lowerings"), SUITE, ids=[s for s, _ in SUITE])
def test_native_shapes_over_batchings(session: kp.Session, shape: str, lowerings: tuple[Any, ...]) -> None:
    for result in run_job(session, SHAPES[shape], seed=1, cases=1, lowerings=lowerings):
        assert result.error is None, result.error


def test_native_join_over_batchings(session: kp.Session) -> None:
    """The native join (Spark's, behind krishiv's filter) and krishiv's join operator."""
    both: tuple[Any, ...] = ("native", "stateful")
    for result in run_job(session, SHAPES["interval_join"], seed=1, cases=1, lowerings=both):
        assert result.error is None, result.error


def test_a_group_of_two_sources_is_refused() -> None:
    def union(a: kp.Stream, b: kp.Stream) -> kp.Stream:
        both = a.watermark("event_time", 0).union(b.watermark("event_time", 0))
        return both.tumbling_window(5).agg(kp.count(kp.col("*")))

    with pytest.raises(kp.PlanError, match="steps of several sources"):
        run_reference_batched(
            SCHEMA, union, [[Send([], source="a"), Send([], source="b")]], sources=("a", "b")
        )


def test_the_comparison_names_the_first_difference() -> None:
    a = Observed(results=[{"x": 1}], watermark_ms=5, very_late_events=2, input_rows=1)
    groups: list[Group] = [[Send([{"x": 1}])], [Close()]]
    assert_observed_agree([a, a], [a, a], groups)
    cases = [
        (attrs.evolve(a, results=[{"x": 2}]), "results differ after group 1"),
        (attrs.evolve(a, very_late_events=1), "very late rows differ after group 1"),
        (attrs.evolve(a, input_rows=4), "input rows differ after group 1"),
    ]
    for wrong, message in cases:
        with pytest.raises(AssertionError, match=message):
            assert_observed_agree([a, a], [a, wrong], groups)
    assert_observed_agree([a, attrs.evolve(a, very_late_events=None)], [a, a], groups)  # not counted


def _reasons() -> dict[str, str]:
    """The reason of every native lowering the harness checks (built without a session)."""
    from krishiv_py.api.stream import placeholder

    out = {}
    for name, shape in SHAPES.items():
        params = shape.params(random.Random(0))
        params["keyed"] = 1
        streams = [placeholder(SCHEMA.replace("event_time", "t"), s) for s in shape.sources]
        out[name] = shape.build(params, "native")(*streams).lower(lowering="native").reason
    return out


def test_every_exactness_claim_of_a_native_reason_names_the_test_that_checks_it() -> None:
    from pathlib import Path

    root = Path(__file__).parent.parent
    for name, reason in _reasons().items():
        claims = [part for part in reason.split(";") if re.search("exact|specified", part)]
        assert claims, (name, reason)
        for claim in claims:
            cited = re.findall(r"tests/(test_\w+\.py)::(test_\w+)", claim)
            assert cited, f"{name}: {claim!r} names no test"
            for path, test in cited:
                assert f"def {test}(" in (root / "tests" / path).read_text(), (name, path, test)
