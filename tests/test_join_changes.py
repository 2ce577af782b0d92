"""The interval join kernel over changelogs (SPEC 3.13), without Spark.

A join whose input is a corrected window's results or a retracting join's
rows takes emits and retractions. After every step its net output (emits
not yet withdrawn) must be what an interval join computes on the net input
rows: every pair of held rows with equal keys inside the interval, and for
an outer side every row without a partner whose partner's bound the
watermark has passed (padded, withdrawn when a partner comes, padded again
when its last partner is withdrawn: Flink's outer joins). The oracle below
is that sentence, recomputed from scratch each step; the allowed lateness is
large enough that no row is dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from join_kernels import join_kernel

from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.plan.windows import SlidingWindow
from krishiv_py.stateful import joins

Row = tuple[str, str | None, int, int]  # side, key, event time (ms), value


def _spec(how: str, between: tuple[int, int] = (0, 0), window: SlidingWindow | None = None) -> joins.JoinSpec:
    kind = "interval" if window is None else "window"
    options: dict[str, Any] = {"allowed_lateness_ms": 1_000_000, "accumulation": "retracting"}
    return join_kernel(kind, how, window=window, between=between, changes=True, **options).spec


def _batch(changes: Sequence[tuple[str, Row]], seq0: int) -> pa.Table:
    return pa.table(
        {
            joins.SIDE: [r[0] for _, r in changes],
            "k": pa.array([r[1] for _, r in changes], pa.string()),
            "a": pa.array([r[3] if r[0] == "left" else None for _, r in changes], pa.int64()),
            "b": pa.array([r[3] if r[0] == "right" else None for _, r in changes], pa.int64()),
            BATCH_TS: pa.array([r[2] * 1000 for _, r in changes], pa.int64()),
            SEQ: pa.array(range(seq0, seq0 + len(changes)), pa.int64()),
            RESULT_KIND: pa.array([kind for kind, _ in changes], pa.string()),
        }
    )


def _desired(
    how: str, between: tuple[int, int], held: Counter[Row], w: int | None
) -> Counter[tuple[Any, ...]]:
    lower, upper = between
    rows = list(held.elements())
    lefts = [r for r in rows if r[0] == "left"]
    rights = [r for r in rows if r[0] == "right"]
    out: Counter[tuple[Any, ...]] = Counter()
    partners: Counter[Row] = Counter()
    for left in lefts:
        for right in rights:
            if left[1] is not None and left[1] == right[1] and left[2] + lower <= right[2] <= left[2] + upper:
                out[(left[1], left[3], right[3])] += 1
                partners[left] += 1
                partners[right] += 1
    if w is not None:
        if how in ("left", "full"):
            for left in lefts:
                if not partners[left] and w > left[2] + upper:
                    out[(left[1], left[3], None)] += 1
        if how in ("right", "full"):
            for right in rights:
                if not partners[right] and w > right[2] - lower:
                    out[(right[1], None, right[3])] += 1
    return out


@st.composite
def _script(draw: st.DrawFn) -> list[tuple[list[tuple[str, Row]], int | None]]:
    """Steps of emits and retractions (each of a row emitted before, or in the same step), and a
    watermark that only moves forward."""
    held: list[Row] = []
    steps: list[tuple[list[tuple[str, Row]], int | None]] = []
    w: int | None = None
    for _ in range(draw(st.integers(1, 8))):
        changes: list[tuple[str, Row]] = []
        for _ in range(draw(st.integers(0, 5))):
            row: Row
            if len(held) > 0 and draw(st.booleans()):
                row = held.pop(draw(st.integers(0, len(held) - 1)))
                changes.append(("retract", row))
            else:
                row = (
                    draw(st.sampled_from(["left", "right"])),
                    draw(st.sampled_from(["x", "y", None])),
                    draw(st.integers(0, 12)),
                    draw(st.integers(0, 2)),
                )
                held.append(row)
                changes.append(("emit", row))
        if draw(st.booleans()):
            w = draw(st.integers(w if w is not None else -2, 20))
        steps.append((changes, w))
    return steps


@settings(max_examples=300, deadline=None)
@given(
    how=st.sampled_from(["inner", "left", "right", "full"]),
    between=st.sampled_from([(0, 0), (-3, 2), (0, 5), (-4, -1)]),
    script=_script(),
)
def test_the_net_output_is_the_join_of_the_net_input_rows(
    how: str, between: tuple[int, int], script: list[tuple[list[tuple[str, Row]], int | None]]
) -> None:
    spec = _spec(how, between)
    state = None
    out: Counter[tuple[Any, ...]] = Counter()
    held: Counter[Row] = Counter()
    seq = 0
    for changes, w in script:
        state, step = joins.step(spec, state, _batch(changes, seq), w, 0)
        seq += len(changes)
        assert step.arithmetic_errors == 0
        for result in step.results.to_pylist():
            key = (result["k"], result["a"], result["b"])
            if result[RESULT_KIND] == "emit":
                out[key] += 1
            else:
                assert out[key] > 0, f"{key} withdrawn before it was emitted"
                out[key] -= 1
        for kind, change in changes:
            held[change] += 1 if kind == "emit" else -1
        assert +out == _desired(how, between, +held, w)


def test_a_retraction_of_a_row_never_held_is_counted_not_applied() -> None:
    spec = _spec("inner", (0, 0))
    state, _ = joins.step(spec, None, _batch([("emit", ("left", "x", 1, 0))], 0), None, 0)
    gone = [("retract", ("left", "x", 1, 5)), ("retract", ("right", "x", 1, 0))]
    state, step = joins.step(spec, state, _batch(gone, 1), None, 0)
    assert step.arithmetic_errors == 2
    assert state.num_rows == 1 and step.results.num_rows == 0


def test_a_left_row_is_padded_again_when_its_last_partner_is_withdrawn() -> None:
    spec = _spec("left", (0, 5))
    state, first = joins.step(spec, None, _batch([("emit", ("left", "x", 1, 7))], 0), 10, 0)
    assert first.results.to_pylist() == [{"k": "x", "a": 7, "b": None, RESULT_KIND: "emit"}]
    partner = ("right", "x", 3, 8)
    state, met = joins.step(spec, state, _batch([("emit", partner)], 1), 10, 0)
    assert [(r["b"], r[RESULT_KIND]) for r in met.results.to_pylist()] == [(None, "retract"), (8, "emit")]
    state, gone = joins.step(spec, state, _batch([("retract", partner)], 2), 10, 0)
    assert [(r["b"], r[RESULT_KIND]) for r in gone.results.to_pylist()] == [(8, "retract"), (None, "emit")]


def _changes(out: pa.Table) -> Counter[tuple[Any, ...]]:
    """Net results by (window start in ms, key, a, b): emits less retractions."""
    net: Counter[tuple[Any, ...]] = Counter()
    rows = out.to_pylist()
    for r in rows:
        start = r["window_start"]
        ms = start // 1000 if isinstance(start, int) else int(start.timestamp() * 1000)
        key = (ms, r["k"], r["a"], r.get("b"))
        net[key] += -1 if r[RESULT_KIND] == "retract" else 1
    return net


def test_a_window_join_takes_a_retraction_from_every_window_it_fired_and_pads_what_loses_its_partner() -> (
    None
):
    """A row withdrawn after its windows fired takes its pairs out of each sliding window it is
    in; a left row left without a partner is padded again (left join), an anti row emitted (anti)."""
    for how, after in (
        ("inner", Counter()),
        ("left", Counter({(0, "x", 1, None): 1, (5, "x", 1, None): 1})),
        ("anti", Counter({(0, "x", 1, None): 1, (5, "x", 1, None): 1})),
    ):
        spec = _spec(how, window=SlidingWindow(size_ms=10, slide_ms=5))
        left, right = ("left", "x", 7, 1), ("right", "x", 8, 2)  # both in windows [0, 10) and [5, 15)
        state, first = joins.step(spec, None, _batch([("emit", left), ("emit", right)], 0), None, 0)
        state, fired = joins.step(spec, state, _batch([], 2), 20, 0)  # both windows fire
        before = _changes(pa.concat_tables([first.results, fired.results]))
        paired = Counter({(0, "x", 1, 2): 1, (5, "x", 1, 2): 1})
        assert +before == (Counter() if how == "anti" else paired), how
        state, gone = joins.step(spec, state, _batch([("retract", right)], 2), 20, 0)
        before.update(_changes(gone.results))  # (update: a retraction of nothing shows as -1)
        assert before == after, how  # (zeros equal missing; a -1 does not)


def test_an_as_of_join_decides_again_the_left_rows_whose_right_row_in_force_is_withdrawn() -> None:
    """A left row decided with a right row that is withdrawn later is retracted and decided
    again with the right row in force without it (or padded, a left join; nothing, inner); a
    withdrawn left row retracts what it emitted, and one that emitted nothing retracts nothing."""
    for how in ("inner", "left"):
        spec = attrs.evolve(_spec(how), kind="as_of", between=(0, 0))
        older, newer = ("right", "x", 2, 20), ("right", "x", 4, 40)
        first, second = ("left", "x", 5, 1), ("left", "y", 5, 2)  # y: no right row at all
        rows = [("emit", older), ("emit", newer), ("emit", first), ("emit", second)]
        state, out = joins.step(spec, None, _batch(rows, 0), 10, 0)
        state, decided = joins.step(spec, state, _batch([], 4), 10, 0)
        seen = _as_of_net(pa.concat_tables([out.results, decided.results]))
        padded = Counter({("y", 2, None): 1}) if how == "left" else Counter()
        assert seen == Counter({("x", 1, 40): 1}) + padded, how
        state, again = joins.step(spec, state, _batch([("retract", newer)], 4), 10, 0)
        seen.update(_as_of_net(again.results))  # (update: a negative count stays)
        assert +seen == Counter({("x", 1, 20): 1}) + padded, how
        state, gone = joins.step(spec, state, _batch([("retract", first), ("retract", second)], 5), 10, 0)
        seen.update(_as_of_net(gone.results))
        assert +seen == Counter() and all(v >= 0 for v in seen.values()), how


def _as_of_net(out: pa.Table) -> Counter[tuple[Any, ...]]:
    net: Counter[tuple[Any, ...]] = Counter()
    for r in out.to_pylist():
        net[(r["k"], r["a"], r["b"])] += -1 if r[RESULT_KIND] == "retract" else 1
    return net
