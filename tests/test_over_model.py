"""The reference model's over-aggregation (SPEC 3.16): hand-written transcripts and DuckDB's answer.

Without Spark. The model is the oracle of the operator's kernel, so it is
checked against something outside it: DuckDB's window functions
(``OVER (PARTITION BY k ORDER BY t ROWS|RANGE BETWEEN ... PRECEDING AND
CURRENT ROW)``) on random input, whatever the watermarks and lateness, once
every correction is in.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from krishiv_py.errors import PlanError
from krishiv_py.model.over import OverModel
from krishiv_py.model.reference import AggSpec

SUM = AggSpec(name="s", func="sum", column="v")
COUNT = AggSpec(name="n", func="count", column=None)
AVG = AggSpec(name="avg", func="avg", column="v")


def _model(frame: str = "rows", preceding: int = 1, **more: Any) -> OverModel:
    return OverModel(keys=("k",), frame=frame, preceding=preceding, aggs=(SUM, COUNT), **more)  # type: ignore[arg-type]


def _brief(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in ("k", "t", "v", "s", "n", "kind") if c in r) for r in rows]


def test_a_rows_frame_emits_each_row_once_the_watermark_passes_it_ties_by_arrival() -> None:
    m = _model(preceding=2)
    rows = [("a", 10, 1), ("b", 10, 100), ("a", 20, 2), ("a", 20, 4), ("a", 30, 8)]
    assert m.send([{"k": k, "t": t, "v": v} for k, t, v in rows]) == []
    assert _brief(m.advance(20)) == [("a", 10, 1, 1, 1), ("b", 10, 100, 100, 1)]
    assert _brief(m.advance(21)) == [("a", 20, 2, 3, 2), ("a", 20, 4, 7, 3)]  # the tie: as they came
    assert _brief(m.advance(31)) == [("a", 30, 8, 14, 3)]  # the 2 rows before it, and itself
    assert m.advance(31) == [] and m.close() == []


def test_a_range_frame_holds_the_rows_within_its_range_and_every_peer() -> None:
    m = _model("range", 10)
    m.send([{"k": "a", "t": t, "v": v} for t, v in ((0, 1), (5, 2), (10, 4), (10, 8), (21, 16))])
    assert _brief(m.close()) == [
        ("a", 0, 1, 1, 1),
        ("a", 5, 2, 3, 2),
        ("a", 10, 4, 15, 4),  # 0..10: its peer too, which came after it
        ("a", 10, 8, 15, 4),
        ("a", 21, 16, 16, 1),  # 11..21
    ]


@pytest.mark.parametrize(
    ("accumulation", "want"),
    [
        ("accumulating", [("a", 15, 10, 11, 2), ("a", 20, 2, 12, 2)]),
        (
            "retracting",
            [("a", 15, 10, 11, 2, "emit"), ("a", 20, 2, 3, 2, "retract"), ("a", 20, 2, 12, 2, "emit")],
        ),
    ],
)
def test_a_late_row_corrects_the_rows_after_it_by_accumulating_or_retracting(
    accumulation: str, want: list[tuple[Any, ...]]
) -> None:
    """Late by 16 ms within 20: its own result at once, then 20's frame (15, 20) corrected; 30's
    frame (20, 30) did not change."""
    m = _model(preceding=1, allowed_lateness_ms=20, accumulation=accumulation)
    m.send([{"k": "a", "t": t, "v": v} for t, v in ((10, 1), (20, 2), (30, 4))])
    m.advance(31)
    assert _brief(m.send([{"k": "a", "t": 15, "v": 10}])) == want


def test_a_very_late_row_and_one_without_an_event_time_are_counted_and_dropped() -> None:
    m = _model(allowed_lateness_ms=5)
    m.send([{"k": "a", "t": 100, "v": 1}])
    m.advance(101)
    assert m.send([{"k": "a", "t": 95, "v": 2}, {"k": "a", "t": None, "v": 3}]) == []
    assert (m.very_late, m.invalid) == (1, 1)
    assert _brief(m.send([{"k": "a", "t": 96, "v": 4}])) == [("a", 96, 4, 4, 1), ("a", 100, 1, 5, 2)]


def test_a_retraction_withdraws_its_row_and_corrects_the_results_it_was_part_of() -> None:
    m = _model(preceding=1, allowed_lateness_ms=100, accumulation="retracting")
    m.send([{"k": "a", "t": t, "v": v} for t, v in ((10, 1), (20, 2), (30, 4))])
    m.advance(31)
    got = _brief(m.send([{"k": "a", "t": 20, "v": 2, "kind": "retract"}]))
    assert got == [("a", 20, 2, 3, 2, "retract"), ("a", 30, 4, 6, 2, "retract"), ("a", 30, 4, 5, 2, "emit")]
    assert m.send([{"k": "a", "t": 20, "v": 2, "kind": "retract"}]) == [] and m.unmatched == 1


def test_bad_settings_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="'rows' or 'range'"):
        _model("groups")
    with pytest.raises(PlanError, match="int >= 0"):
        _model(preceding=-1)
    with pytest.raises(PlanError, match="peers have no order"):
        OverModel(
            keys=("k",), frame="range", preceding=5, aggs=(AggSpec(name="f", func="first", column="v"),)
        )


EVENTS = st.lists(
    st.tuples(st.sampled_from("ab"), st.integers(0, 60), st.one_of(st.none(), st.integers(-5, 9))),
    min_size=1,
    max_size=40,
)


@given(
    events=EVENTS,
    frame=st.sampled_from(["rows", "range"]),
    preceding=st.integers(0, 12),
    cuts=st.lists(st.integers(0, 70), max_size=6),
)
def test_once_every_correction_is_in_each_rows_result_is_duckdbs(
    events: list[tuple[str, int, int | None]], frame: str, preceding: int, cuts: list[int]
) -> None:
    """Rows sent in batches between watermarks (lateness enough that none is very late): the last
    result emitted for each row equals DuckDB's window function over all of them."""
    m = OverModel(
        keys=("k",),
        frame=frame,  # type: ignore[arg-type]
        preceding=preceding,
        aggs=(SUM, COUNT, AVG, AggSpec(name="hi", func="max", column="v")),
        allowed_lateness_ms=100,
    )
    last: dict[int, dict[str, Any]] = {}
    steps = sorted(set(cuts))
    for i, (k, t, v) in enumerate(events):
        for r in m.send([{"k": k, "t": t, "v": v, "i": i}]):
            last[r["i"]] = r
        if steps and i % 5 == 4:
            for r in m.advance(steps.pop(0)):
                last[r["i"]] = r
    for r in m.close():
        last[r["i"]] = r
    bound = f"{preceding} PRECEDING AND CURRENT ROW"
    order = "ORDER BY t, i ROWS BETWEEN" if frame == "rows" else "ORDER BY t RANGE BETWEEN"
    window = f"OVER (PARTITION BY k {order} {bound})"
    con = duckdb.connect()
    con.execute("CREATE TABLE e (i INTEGER, k VARCHAR, t INTEGER, v BIGINT)")
    con.executemany("INSERT INTO e VALUES (?, ?, ?, ?)", [(i, k, t, v) for i, (k, t, v) in enumerate(events)])
    want = con.execute(
        f"SELECT i, sum(v) {window}, count(*) {window}, avg(v) {window}, max(v) {window} FROM e ORDER BY i"
    ).fetchall()
    got = [(i, last[i]["s"], last[i]["n"], last[i]["avg"], last[i]["hi"]) for i in range(len(events))]
    assert got == [tuple(w) for w in want]
