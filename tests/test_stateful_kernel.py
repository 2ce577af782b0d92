"""The stateful kernel against the reference model, without Spark.

The kernel is driven as the Spark operator drives it: one ``step`` per
micro-batch with the watermark that applies to it, then — when the batch
moved the watermark — one more with an empty batch (the tick). Results
after every step must equal the reference model's, on hand-written cases
and on random streams with every trigger, accumulation mode and window kind.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any, Literal

import attrs
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.model.reference import ReferenceModel
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import END_OF_TIME_MS, MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.plan.windows import EventSlidingWindow, SlidingWindow, TumblingWindow
from krishiv_py.planner.spark.stateful import operator_spec
from krishiv_py.stateful import aggregates as agg
from krishiv_py.stateful import kernel
from krishiv_py.stateful._arrow import list_array
from krishiv_py.stateful.grouping import canonical
from krishiv_py.stateful.pane_layout import uses_panes
from krishiv_py.stateful.premerge import premerge, premergeable
from krishiv_py.stateful.state import FIRST, WINDOW_END, WINDOW_START
from krishiv_py.testing import AdvanceWatermark, Close, Send, Step, assert_same_rows
from krishiv_py.testing.steps import _placeholder, reference_model_for

SCHEMA = "k string, t bigint, v bigint"
#: Random streams per property: the suite's share; ``nox -s deep`` (``KERNEL_EXAMPLES=600``) digs deeper.
KERNEL_EXAMPLES = int(os.environ.get("KERNEL_EXAMPLES", "30"))
Pipeline = Callable[[kp.Stream], kp.Stream]


class Clock:
    """A processing-time clock that moves 1 s per read of a step."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> float:
        return float(self.now)


def run_kernel(
    pipeline: Pipeline,
    steps: list[Step],
    clock: Clock,
    skip_ticks: list[bool] | None = None,
    on_step: Callable[[kernel.StepOutput], None] = lambda _: None,
    map_tasks: int = 0,
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    """Cumulative results and late rows after each step, driving the kernel like the operator.

    ``map_tasks > 0``: each batch is split over that many map tasks, which
    merge their on-time rows per key and pane under the batch's watermark
    before the step (:mod:`krishiv_py.stateful.premerge`).
    """
    plan = pipeline(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = operator_spec(plan, shift_ms=0).kernel.spec
    et = n.event_time(plan.input)
    assert et is not None
    state = None
    watermark: int | None = None
    results: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    out, out_late = [], []
    seq = 0
    for i, step in enumerate(steps):
        target = watermark
        if isinstance(step, Send):
            rows: list[dict[str, Any]] = [dict(r) for r in step.rows]
            batch = _batch(rows, seq)
            seq += len(rows)
            valid = [r["t"] for r in rows if r["t"] is not None and MIN_EVENT_MS <= r["t"] <= MAX_EVENT_MS]
            if valid:
                target = max(valid) - et.lag_ms
        else:
            batch = _batch([], seq)
            target = step.ts_ms if isinstance(step, AdvanceWatermark) else END_OF_TIME_MS
        merged = None
        if map_tasks:
            batch, merged = _premerged(spec, batch, watermark, map_tasks)
        state, result = kernel.step(spec, state, batch, watermark, int(clock()), merged=merged)
        on_step(result)
        results += _rows(result.results)
        late += _late(batch, result, watermark)
        if target is not None and (watermark is None or target > watermark):
            watermark = target
            if not (skip_ticks and skip_ticks[i]):  # a skipped tick: the next batch comes first
                state, result = kernel.step(spec, state, _batch([], seq), watermark, int(clock()))
                on_step(result)
                results += _rows(result.results)
        out.append(list(results))
        out_late.append(list(late))
        clock.now += 1000
    return out, out_late


def _premerged(
    spec: kernel.KernelSpec, batch: pa.Table, watermark: int | None, tasks: int
) -> tuple[pa.Table, pa.Table | None]:
    """``batch`` split into ``tasks`` runs of rows, each merged as a map task merges it."""
    bounds = np.linspace(0, batch.num_rows, tasks + 1).astype(int)
    rests, merged = [], []
    for lo, hi in itertools.pairwise(bounds.tolist()):
        rest, part = premerge(spec, batch.slice(lo, hi - lo), watermark)
        rests.append(rest)
        if part is not None:
            merged.append(part)
    return pa.concat_tables(rests), (pa.concat_tables(merged) if merged else None)


def _batch(rows: list[dict[str, Any]], seq0: int) -> pa.Table:
    ts = [
        r["t"] * 1000 if r["t"] is not None and MIN_EVENT_MS <= r["t"] <= MAX_EVENT_MS else None for r in rows
    ]
    return pa.table(
        {
            "k": pa.array([r["k"] for r in rows], pa.string()),
            "t": pa.array([r["t"] for r in rows], pa.int64()),
            "v": pa.array([r["v"] for r in rows], pa.int64()),
            BATCH_TS: pa.array(ts, pa.int64()),
            SEQ: pa.array(np.arange(seq0, seq0 + len(rows), dtype=np.int64)),
        }
    )


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    for r in rows:
        r.pop(FIRST, None)  # pane events' bookkeeping, not a result column
        r[WINDOW_START] = r[WINDOW_START] // 1000
        r[WINDOW_END] = r[WINDOW_END] // 1000
    return rows


def _late(batch: pa.Table, result: kernel.StepOutput, watermark: int | None) -> list[dict[str, Any]]:
    rows = batch.select(["k", "t", "v"]).to_pylist()
    out = [{**rows[i], "classification": "invalid", "watermark_ms": watermark} for i in result.invalid]
    out += [{**rows[i], "classification": "very_late", "watermark_ms": watermark} for i in result.very_late]
    return out


def run_model(
    pipeline: Pipeline, steps: list[Step], clock: Clock
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    model: ReferenceModel = reference_model_for(pipeline(_placeholder(SCHEMA)), clock=clock)
    out, late = [], []
    for step in steps:
        if isinstance(step, Send):
            model.send(step.rows)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms)
        else:
            model.close()
        out.append(list(model.results))
        late.append(list(model.late_events))
        clock.now += 1000
    return out, late


def check(pipeline: Pipeline, steps: list[Step], *, map_tasks: int = 0) -> None:
    want, want_late = run_model(pipeline, steps, Clock())
    got, got_late = run_kernel(pipeline, steps, Clock(), map_tasks=map_tasks)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        try:
            assert_same_rows(g, w)
        except AssertionError as exc:
            raise AssertionError(f"results differ after step {i} ({steps[i]!r}):\n{exc}") from None
    assert_same_rows(got_late[-1], want_late[-1])


AGGS = (
    kp.count(kp.col("*")),
    kp.sum(kp.col("v")),
    kp.avg(kp.col("v")),
    kp.min(kp.col("v")),
    kp.max(kp.col("v")),
    kp.count_distinct(kp.col("v")),
    kp.first(kp.col("v")),
    kp.last(kp.col("v")),
    kp.count(kp.col("v")),
)

TRIGGERS = [
    kp.Trigger.on_watermark(),
    kp.Trigger.on_every_element(),
    kp.Trigger.on_count(2),
    kp.Trigger.on_count(3),
    kp.Trigger.on_interval(1),
    kp.Trigger.on_interval(2_500),
]


def pipeline(
    kind: str, size: int, slide: int, lag: int, keyed: bool, lateness: int, trigger: kp.Trigger, mode: Any
) -> Pipeline:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag)
        if keyed:
            w = w.key_by("k")
        if kind == "tumbling":
            windowed = w.tumbling_window(size)
        elif kind == "sliding":
            windowed = w.sliding_window(size, slide)
        elif kind == "capped_session":
            windowed = w.session_window(size, max_duration_ms=slide)  # the cap rides on `slide`
        else:
            windowed = w.session_window(size)
        windowed = windowed.allowed_lateness(lateness).trigger(trigger).accumulation(mode)
        return windowed.agg(*AGGS)  # type: ignore[no-any-return]

    return build


row = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", None]),
        "t": st.one_of(st.integers(min_value=-60, max_value=200), st.just(None)),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9)),
    }
)
step = st.one_of(
    st.lists(row, max_size=7).map(Send),
    st.lists(row, max_size=7).map(Send),
    st.integers(min_value=-60, max_value=220).map(AdvanceWatermark),
)
steps = st.lists(step, min_size=1, max_size=6).map(lambda s: [*s, Close()])


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session", "capped_session"])
@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 0, 15, 60]),
    keyed=st.booleans(),
    trigger=st.sampled_from(TRIGGERS),
    mode=st.sampled_from(["accumulating", "discarding", "retracting"]),
    scenario=steps,
)
def test_kernel_matches_model(
    kind: str,
    data: Any,
    lag: int,
    lateness: int,
    keyed: bool,
    trigger: kp.Trigger,
    mode: Any,
    scenario: list[Step],
) -> None:
    size = data.draw(st.integers(5, 60))
    slide = data.draw(st.integers(1, size)) if kind == "sliding" else size
    if kind == "capped_session":
        slide = data.draw(st.integers(1, 3 * size))
    check(pipeline(kind, size, slide, lag, keyed, lateness, trigger, mode), scenario)


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session", "capped_session"])
@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 15, 60]),
    mode=st.sampled_from(["accumulating", "discarding", "retracting"]),
    scenario=steps,
)
def test_back_to_back_batches_give_the_same_final_results(
    kind: str, data: Any, lag: int, lateness: int, mode: Any, scenario: list[Step]
) -> None:
    """Micro-batches that run before the previous batch's tick: same results once the input ends."""
    size = data.draw(st.integers(5, 60))
    slide = data.draw(st.integers(1, size)) if kind == "sliding" else size
    skip = [
        *data.draw(st.lists(st.booleans(), min_size=len(scenario) - 1, max_size=len(scenario) - 1)),
        False,
    ]
    build = pipeline(kind, size, slide, lag, True, lateness, kp.Trigger.on_watermark(), mode)
    want, want_late = run_model(build, scenario, Clock())
    got, got_late = run_kernel(build, scenario, Clock(), skip)
    assert_same_rows(got[-1], want[-1])
    assert_same_rows(got_late[-1], want_late[-1])


def test_ripple_example_on_the_kernel() -> None:
    build = pipeline("tumbling", 10, 10, 0, False, 60, kp.Trigger.on_watermark(), "retracting")
    check(
        build,
        [
            Send([{"k": "a", "t": 190, "v": 1}, {"k": "a", "t": 200, "v": 2}]),
            Send([{"k": "a", "t": 195, "v": 3}, {"k": "a", "t": 130, "v": 4}, {"k": "a", "t": 280, "v": 5}]),
            Close(),
        ],
    )


def test_discarding_count_distinct_keeps_the_open_values_across_batches() -> None:
    """An element firing that spans two batches counts a value seen in both once."""
    scenario: list[Step] = [
        Send([{"k": "a", "t": -1, "v": None}, {"k": "a", "t": -1, "v": None}, {"k": "a", "t": -1, "v": 0}]),
        Send([{"k": "a", "t": 0, "v": None}, {"k": "a", "t": 0, "v": None}, {"k": "a", "t": -1, "v": 0}]),
        Close(),
    ]
    check(pipeline("tumbling", 5, 5, 0, False, 0, kp.Trigger.on_count(2), "discarding"), scenario)


def time_interval(
    interval: int, period: int, discard: int, lag: int, keyed: bool
) -> tuple[Pipeline, list[Any]]:
    """A time-interval pipeline whose callbacks append to the returned list."""
    events: list[Any] = []

    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag)
        if keyed:
            w = w.key_by("k")
        panes = w.time_interval_window(interval, period, discard)
        panes = panes.on_initial_full(events.append).on_trigger(events.append).on_close(events.append)
        return panes.agg(*AGGS)  # type: ignore[no-any-return]

    return build, events


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    lag=st.integers(0, 40),
    discard=st.sampled_from([0, 5, 15, 60]),
    keyed=st.booleans(),
    scenario=steps,
)
def test_time_interval_panes_and_their_events_match_the_model(
    data: Any, lag: int, discard: int, keyed: bool, scenario: list[Step]
) -> None:
    from krishiv_py.runtime.collector import call_pane_events
    from krishiv_py.stateful.operator import Payloads

    interval = data.draw(st.integers(5, 60))
    period = data.draw(st.integers(1, interval))
    build, _ = time_interval(interval, period, discard, lag, keyed)
    check(build, scenario)

    plan = build(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    callbacks = plan.emission.panes
    keys = ["k"] if keyed else []
    got: list[Any] = []
    recording = attrs.evolve(
        callbacks, on_initial_full=got.append, on_trigger=got.append, on_close=got.append
    )

    def events_of(out: kernel.StepOutput) -> None:
        empty = pa.table({"x": pa.array([], pa.int64())})
        call_pane_events(
            recording, keys, Payloads(results=out.results, late=empty, stats=empty, closed=out.closed)
        )

    run_kernel(build, scenario, Clock(), on_step=events_of)
    model = reference_model_for(build(_placeholder(SCHEMA)), clock=Clock())
    for step in scenario:
        if isinstance(step, Send):
            model.send(step.rows)
        elif isinstance(step, AdvanceWatermark):
            model.advance_watermark(step.ts_ms)
        else:
            model.close()
    assert [_event(e) for e in got] == [_event(e) for e in model.pane_events]


def _event(e: kp.PaneEvent) -> tuple[Any, ...]:
    return (e.kind, e.key, e.window_start_ms, e.window_end_ms, e.values["count"], e.values["sum_v"])


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    size=st.integers(1, 40),
    grace=st.sampled_from([0, 0, 5, 30]),
    lag=st.integers(0, 30),
    keyed=st.booleans(),
    trigger=st.sampled_from(
        [
            kp.Trigger.on_watermark(),
            kp.Trigger.on_every_element(),
            kp.Trigger.on_count(2),
            kp.Trigger.on_count(3),
            kp.Trigger.on_interval(1),
            kp.Trigger.on_interval(2_500),
        ]
    ),
    scenario=steps,
)
def test_event_sliding_windows_match_the_model(
    size: int, grace: int, lag: int, keyed: bool, trigger: kp.Trigger, scenario: list[Step]
) -> None:
    def build(s: kp.Stream) -> kp.Stream:
        w: Any = s.watermark("t", lag)
        if keyed:
            w = w.key_by("k")
        windowed = w.event_sliding_window(size, grace_ms=grace).trigger(trigger)
        return windowed.agg(*AGGS)  # type: ignore[no-any-return]

    check(build, scenario)


@st.composite
def mostly_in_order(draw: Any) -> tuple[int, list[Step]]:
    """Rows of three keys in rising time, a tenth of them late, several per millisecond at times.

    Per-event sliding windows take runs of rows that are later than everything
    their key has seen through sorted arrays, every other row one by one: these
    streams mix both within each key and micro-batch.
    """
    size = draw(st.integers(1, 30))
    clock = draw(st.integers(0, 50))
    out: list[Step] = []
    for _ in range(draw(st.integers(1, 5))):
        rows = []
        for _ in range(draw(st.integers(0, 12))):
            clock += draw(st.integers(0, size + 3))
            late = draw(st.integers(0, 9)) == 0
            t = clock - draw(st.integers(0, 3 * size)) if late else clock
            rows.append({"k": draw(st.sampled_from("abc")), "t": t, "v": draw(st.integers(-5, 9))})
        out.append(Send(rows))
        if draw(st.booleans()):
            out.append(AdvanceWatermark(clock - draw(st.integers(0, 2 * size))))
    return size, [*out, Close()]


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    case=mostly_in_order(),
    grace=st.sampled_from([0, 3, 20]),
    lag=st.integers(0, 10),
    trigger=st.sampled_from(
        [kp.Trigger.on_watermark(), kp.Trigger.on_every_element(), kp.Trigger.on_count(2)]
    ),
)
def test_event_sliding_in_order_runs_match_the_replay_and_the_model(
    case: tuple[int, list[Step]], grace: int, lag: int, trigger: kp.Trigger
) -> None:
    from unittest import mock

    from krishiv_py.stateful import event_sliding

    size, scenario = case

    def build(s: kp.Stream) -> kp.Stream:
        windowed = s.watermark("t", lag).key_by("k").event_sliding_window(size, grace_ms=grace)
        return windowed.trigger(trigger).agg(*AGGS)

    check(build, scenario)
    got, _ = run_kernel(build, scenario, Clock())
    everything_replayed = mock.patch.object(
        event_sliding, "_runs", lambda *a: [(np.zeros(0, np.int64), a[2])]
    )
    with everything_replayed:
        replayed, _ = run_kernel(build, scenario, Clock())
    assert_same_rows(got[-1], replayed[-1])


def test_event_sliding_rows_in_order_take_the_vectorized_path() -> None:
    """Rows later than all their key has seen, with open windows, skip the replay."""
    from krishiv_py.stateful import event_sliding

    def build(s: kp.Stream) -> kp.Stream:
        return s.watermark("t", 0).key_by("k").event_sliding_window(10, grace_ms=0).agg(kp.count(kp.col("*")))

    plan = build(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    window = plan.window
    assert isinstance(window, EventSlidingWindow)
    none = np.zeros(0, np.int64)
    wins = event_sliding._Windows.of_state(
        kernel.empty_state(operator_spec(plan, shift_ms=0).kernel.spec, _batch([], 0)), none, none
    )
    kid = np.array([0, 1, 0, 0, 0])  # keys a, b, a, a, a
    t = np.array([100, 101, 104, 103, 120])
    seq = np.arange(5, dtype=np.int64)
    passes = event_sliding._runs(window, wins, seq, kid, t, seq, None)
    # a: 100, 104 in order, 103 out of order (replayed), then 120, later than all: in order
    # again; b: 101. Each pass lists the rows by key, then by arrival.
    assert [(f.tolist(), s.tolist()) for f, s in passes] == [([0, 2, 1], []), ([], [3]), ([4], [])]
    # With windows closing at 102, a row before that (100, 101) is replayed; 104 comes after
    # a replayed row of its key but later than it, so it starts a run of its own.
    passes = event_sliding._runs(window, wins, seq, kid, t, seq, 102)
    assert [(f.tolist(), s.tolist()) for f, s in passes] == [([], [0, 1]), ([2], []), ([], [3]), ([4], [])]


@pytest.mark.parametrize(
    ("kind", "time"),
    [(k, t) for t in ("event", "processing") for k in ("tumbling", "session", "capped_session")],
)
@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 60, 200]),
    ttl=st.integers(1, 120),
    trigger=st.sampled_from([kp.Trigger.on_watermark(), kp.Trigger.on_interval(1)]),
    scenario=steps,
)
def test_state_ttl_matches_the_model(
    kind: str,
    time: Literal["event", "processing"],
    data: Any,
    lag: int,
    lateness: int,
    ttl: int,
    trigger: kp.Trigger,
    scenario: list[Step],
) -> None:
    """Event time: ``ttl`` of watermark; processing time: the test clock moves 1 s per step."""
    if time == "processing":
        ttl *= 50  # 50 ms to 6 s: expiring after 1 to 6 steps
    size = data.draw(st.integers(5, 60))
    base = pipeline(kind, size, size, lag, True, lateness, trigger, "accumulating")

    def build(s: kp.Stream) -> kp.Stream:
        plan = base(s).plan
        assert isinstance(plan, n.WindowAggregate)
        windowed = kp.WindowedStream(
            s.__class__(s.session, plan.input), plan.keys, plan.window, plan.emission
        ).with_state_ttl(kp.StateTtlConfig(ttl_ms=ttl, time=time))
        return windowed.agg(*AGGS)

    check(build, scenario)


# Rows packed closer in time, so that panes hold several rows of a key.
dense_row = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", None]),
        "t": st.one_of(st.integers(min_value=-10, max_value=60), st.just(None)),
        "v": st.one_of(st.none(), st.integers(min_value=-5, max_value=9)),
    }
)
dense_steps = st.lists(
    st.one_of(
        st.lists(dense_row, max_size=12).map(Send),
        st.integers(min_value=-10, max_value=80).map(AdvanceWatermark),
    ),
    min_size=1,
    max_size=6,
).map(lambda s: [*s, Close()])


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    slide=st.integers(1, 10),
    panes=st.integers(2, 6),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 0, 15, 60]),
    keyed=st.booleans(),
    trigger=st.sampled_from(
        [kp.Trigger.on_watermark(), kp.Trigger.on_interval(1), kp.Trigger.on_interval(2_500)]
    ),
    mode=st.sampled_from(["accumulating", "discarding", "retracting"]),
    scenario=dense_steps,
)
def test_sliding_windows_merged_per_pane_match_the_model(
    slide: int,
    panes: int,
    lag: int,
    lateness: int,
    keyed: bool,
    trigger: kp.Trigger,
    mode: Any,
    scenario: list[Step],
) -> None:
    """A slide that divides the size: the batch's rows merge per key and pane before the windows."""
    build = pipeline("sliding", slide * panes, slide, lag, keyed, lateness, trigger, mode)
    plan = build(_placeholder("k string, t bigint, v bigint")).plan
    assert isinstance(plan, n.WindowAggregate)
    assert kernel.by_pane(operator_spec(plan, shift_ms=0).kernel.spec)
    check(build, scenario)


@pytest.mark.parametrize("time", ["event", "processing"])
@settings(max_examples=KERNEL_EXAMPLES)
@given(
    slide=st.integers(1, 10),
    panes=st.integers(2, 6),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 60, 200]),
    ttl=st.integers(1, 120),
    scenario=dense_steps,
)
def test_sliding_windows_merged_per_pane_expire_as_the_model(
    time: Literal["event", "processing"],
    slide: int,
    panes: int,
    lag: int,
    lateness: int,
    ttl: int,
    scenario: list[Step],
) -> None:
    """A window's newest row is the newest of its panes' rows, for the state TTL."""
    if time == "processing":
        ttl *= 50
    on_watermark = kp.Trigger.on_watermark()
    base = pipeline("sliding", slide * panes, slide, lag, True, lateness, on_watermark, "accumulating")

    def build(s: kp.Stream) -> kp.Stream:
        plan = base(s).plan
        assert isinstance(plan, n.WindowAggregate)
        windowed = kp.WindowedStream(
            s.__class__(s.session, plan.input), plan.keys, plan.window, plan.emission
        ).with_state_ttl(kp.StateTtlConfig(ttl_ms=ttl, time=time))
        return windowed.agg(*AGGS)

    check(build, scenario)


@pytest.mark.parametrize(
    ("size", "slide", "trigger", "merged"),
    [
        (60, 10, kp.Trigger.on_watermark(), True),
        (60, 10, kp.Trigger.on_interval(100), True),
        (60, 60, kp.Trigger.on_watermark(), False),  # tumbling: one window per row already
        (25, 10, kp.Trigger.on_watermark(), False),  # rows of one pane differ in their windows
        (60, 10, kp.Trigger.on_every_element(), False),  # firings count rows as they arrive
        (60, 10, kp.Trigger.on_count(3), False),
    ],
)
def test_which_sliding_windows_merge_rows_per_pane(
    size: int, slide: int, trigger: kp.Trigger, merged: bool
) -> None:
    build = pipeline("sliding", size, slide, 0, True, 0, trigger, "accumulating")
    plan = build(_placeholder("k string, t bigint, v bigint")).plan
    assert isinstance(plan, n.WindowAggregate)
    assert kernel.by_pane(operator_spec(plan, shift_ms=0).kernel.spec) is merged


def test_a_window_merged_per_pane_keeps_its_newest_row_for_the_ttl() -> None:
    """Rows of one pane out of order: a window's newest row is the latest event time (5), not the last row."""
    base = pipeline("sliding", 20, 10, 40, True, 0, kp.Trigger.on_watermark(), "accumulating")

    def build(s: kp.Stream) -> kp.Stream:
        plan = base(s).plan
        assert isinstance(plan, n.WindowAggregate)
        windowed = kp.WindowedStream(
            s.__class__(s.session, plan.input), plan.keys, plan.window, plan.emission
        ).with_state_ttl(kp.StateTtlConfig(ttl_ms=10, time="event"))
        return windowed.agg(*AGGS)

    steps: list[Step] = [Send([{"k": "a", "t": 5, "v": 1}, {"k": "a", "t": 3, "v": 2}]), AdvanceWatermark(14)]
    want, _ = run_model(build, [*steps, Close()], Clock())
    # [-10, 10) fired at its end; [0, 20) has not expired: 14 - 5 < 10.
    assert [r["window_start"] for r in want[1]] == [-10]
    check(build, [*steps, Close()])


# --- rows merged per key and pane before the shuffle ----------------------------------------------

MERGING_TRIGGERS = [kp.Trigger.on_watermark(), kp.Trigger.on_interval(1), kp.Trigger.on_interval(2_500)]


@pytest.mark.parametrize("kind", ["tumbling", "sliding"])
@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 0, 15, 60]),
    keyed=st.booleans(),
    trigger=st.sampled_from(MERGING_TRIGGERS),
    mode=st.sampled_from(["accumulating", "discarding", "retracting"]),
    tasks=st.integers(1, 3),
    scenario=steps,
)
def test_rows_merged_before_the_operator_match_the_model(
    kind: str,
    data: Any,
    lag: int,
    lateness: int,
    keyed: bool,
    trigger: kp.Trigger,
    mode: Any,
    tasks: int,
    scenario: list[Step],
) -> None:
    """On-time rows merged per key and pane in each map task: the model's results and late rows."""
    size = data.draw(st.integers(5, 60))
    slide = size
    if kind == "sliding":
        slide = data.draw(st.integers(1, 10))
        size = slide * data.draw(st.integers(1, 6))
    check(pipeline(kind, size, slide, lag, keyed, lateness, trigger, mode), scenario, map_tasks=tasks)


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    size=st.integers(5, 60),
    lag=st.integers(0, 40),
    lateness=st.sampled_from([0, 60, 200]),
    ttl=st.integers(1, 120),
    tasks=st.integers(1, 3),
    scenario=steps,
)
def test_rows_merged_before_the_operator_expire_as_the_model(
    size: int, lag: int, lateness: int, ttl: int, tasks: int, scenario: list[Step]
) -> None:
    """An event-time state TTL: a merged partial's newest row, and rows already expired stay rows."""
    base = pipeline("tumbling", size, size, lag, True, lateness, kp.Trigger.on_watermark(), "accumulating")

    def build(s: kp.Stream) -> kp.Stream:
        plan = base(s).plan
        assert isinstance(plan, n.WindowAggregate)
        windowed = kp.WindowedStream(
            s.__class__(s.session, plan.input), plan.keys, plan.window, plan.emission
        ).with_state_ttl(kp.StateTtlConfig(ttl_ms=ttl, time="event"))
        return windowed.agg(*AGGS)

    check(build, scenario, map_tasks=tasks)


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    size=st.integers(5, 60),
    lag=st.integers(0, 40),
    tasks=st.integers(1, 3),
    scenario=steps,
)
def test_rows_merged_before_the_operator_count_as_the_rows_do(
    size: int, lag: int, tasks: int, scenario: list[Step]
) -> None:
    """Every step's counts (on time, mildly late, very late, invalid, future) are the unmerged run's."""
    build = pipeline("tumbling", size, size, lag, True, 15, kp.Trigger.on_watermark(), "accumulating")
    plan = build(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = attrs.evolve(operator_spec(plan, shift_ms=0).kernel.spec, future_tolerance_ms=5)

    def counts(out: kernel.StepOutput) -> tuple[int, ...]:
        return (out.on_time, out.mildly_late, len(out.very_late), len(out.invalid), out.future, out.emitted)

    runs: list[list[tuple[int, ...]]] = []
    for merging in (False, True):
        state, watermark, seq, seen = None, None, 0, []
        for s in scenario:
            rows = [dict(r) for r in s.rows] if isinstance(s, Send) else []
            batch = _batch(rows, seq)
            seq += len(rows)
            merged = None
            if merging:
                batch, merged = _premerged(spec, batch, watermark, tasks)
            state, out = kernel.step(spec, state, batch, watermark, 0, merged=merged)
            seen.append(counts(out))
            valid = [t for r in rows if isinstance(t := r["t"], int)]
            target = step_target(s, valid, lag)
            if target is not None and (watermark is None or target > watermark):
                watermark = target
                state, out = kernel.step(spec, state, _batch([], seq), watermark, 0)
                seen.append(counts(out))
        runs.append(seen)
    assert runs[0] == runs[1]


def step_target(s: Step, valid: list[int], lag: int) -> int | None:
    if isinstance(s, Send):
        return max(valid) - lag if valid else None
    return s.ts_ms if isinstance(s, AdvanceWatermark) else END_OF_TIME_MS


@pytest.mark.parametrize(
    ("kind", "size", "slide", "trigger", "merges"),
    [
        ("tumbling", 60, 60, kp.Trigger.on_watermark(), True),
        ("tumbling", 60, 60, kp.Trigger.on_interval(100), True),
        ("sliding", 60, 10, kp.Trigger.on_watermark(), True),
        ("sliding", 60, 60, kp.Trigger.on_watermark(), True),
        ("sliding", 25, 10, kp.Trigger.on_watermark(), False),  # rows of one slide differ in their windows
        ("tumbling", 60, 60, kp.Trigger.on_every_element(), False),  # firings count rows as they arrive
        ("tumbling", 60, 60, kp.Trigger.on_count(3), False),
        ("session", 60, 60, kp.Trigger.on_watermark(), False),  # a row's session depends on its key's rows
    ],
)
def test_which_windows_merge_rows_before_the_operator(
    kind: str, size: int, slide: int, trigger: kp.Trigger, merges: bool
) -> None:
    build = pipeline(kind, size, slide, 0, True, 0, trigger, "accumulating")
    plan = build(_placeholder("k string, t bigint, v bigint")).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = operator_spec(plan, shift_ms=0).kernel.spec
    assert premergeable(spec) is merges
    if not merges:
        with pytest.raises(ValueError, match="not merged"):
            premerge(spec, _batch([{"k": "a", "t": 1, "v": 1}], 0), None)


def test_a_processing_time_ttl_keeps_rows_unmerged() -> None:
    base = pipeline("tumbling", 60, 60, 0, True, 0, kp.Trigger.on_watermark(), "accumulating")
    plan = base(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = operator_spec(plan, shift_ms=0).kernel.spec
    assert premergeable(attrs.evolve(spec, ttl_ms=10, ttl_time="event"))
    assert not premergeable(attrs.evolve(spec, ttl_ms=10, ttl_time="processing"))


# --- long sliding windows: one state row per key and pane ---------------------------------------


def sliding_spec(size: int, slide: int, **changes: Any) -> kernel.KernelSpec:
    """The kernel spec of keyed sliding windows of ``size``/``slide`` ms with ``changes``."""
    build = pipeline("sliding", size, slide, 0, True, 0, kp.Trigger.on_watermark(), "accumulating")
    plan = build(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    spec = attrs.evolve(operator_spec(plan, shift_ms=0).kernel.spec, **changes)
    assert isinstance(spec, kernel.KernelSpec)
    return spec


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    data=st.data(),
    slide=st.integers(1, 10),
    panes=st.integers(2, 6),
    lag=st.integers(0, 40),
    keyed=st.booleans(),
    tasks=st.integers(0, 3),
    scenario=st.one_of(dense_steps, steps),
)
def test_sliding_windows_in_pane_state_match_the_model(
    data: Any, slide: int, panes: int, lag: int, keyed: bool, tasks: int, scenario: list[Step]
) -> None:
    """Windows merged from their panes as they fire: the model's results after every step.

    Rows come late and very late, some merged before the operator (``tasks``);
    with some ticks skipped (the next batch comes first) the results are the
    same once the input ends.
    """
    build = pipeline(
        "sliding", slide * panes, slide, lag, keyed, 0, kp.Trigger.on_watermark(), "accumulating"
    )
    plan = build(_placeholder(SCHEMA)).plan
    assert isinstance(plan, n.WindowAggregate)
    assert kernel.pane_state(operator_spec(plan, shift_ms=0).kernel.spec)
    check(build, scenario, map_tasks=tasks)
    skip = [
        *data.draw(st.lists(st.booleans(), min_size=len(scenario) - 1, max_size=len(scenario) - 1)),
        False,
    ]
    want, want_late = run_model(build, scenario, Clock())
    got, got_late = run_kernel(build, scenario, Clock(), skip, map_tasks=tasks)
    assert_same_rows(got[-1], want[-1])
    assert_same_rows(got_late[-1], want_late[-1])


def test_pane_state_holds_one_row_per_key_and_pane() -> None:
    """Two keys with rows in three panes, over three batches: six state rows, where windows take 16."""
    spec = sliding_spec(60, 10)
    rows = [{"k": k, "t": t, "v": 1} for k in ("a", "b") for t in (1, 4, 12, 25, 29)]
    state, _ = kernel.step(spec, None, _batch(rows[:4], 0), None, 0)
    state, _ = kernel.step(spec, state, _batch(rows[4:7], 4), None, 0)
    batch, merged = _premerged(spec, _batch(rows[7:], 7), None, 2)
    state, _ = kernel.step(spec, state, batch, None, 0, merged=merged)
    assert uses_panes(state)
    columns = (state.column(c).to_pylist() for c in ("k0", "__ws", "p0_c"))  # p0_c: count(*)
    assert sorted(zip(*columns, strict=True)) == [
        (k, p * 1000, c) for k in ("a", "b") for p, c in ((0, 2), (10, 1), (20, 2))
    ]
    with _per_window():
        windows, _ = kernel.step(spec, None, _batch(rows, 0), None, 0)
    assert windows.num_rows == 2 * 8  # windows from [-50, 10) to [20, 80) for each key
    assert not uses_panes(windows)


def test_pane_state_keeps_a_row_while_one_of_its_windows_is_open() -> None:
    """Rows at the edges of their panes' last windows: very late at ``W >= p + size``, else kept."""
    build = pipeline("sliding", 30, 10, 100, True, 0, kp.Trigger.on_watermark(), "accumulating")
    edge = [{"k": "a", "t": t, "v": t} for t in (9, 10, 11, 19, 20, 21, 29, 30, 40, 45)]
    check(build, [Send([{"k": "a", "t": 0, "v": 0}]), AdvanceWatermark(40), Send(edge), Close()])
    check(build, [AdvanceWatermark(40), Send(edge), AdvanceWatermark(50), Send(edge), Close()], map_tasks=2)


def test_a_pane_state_tells_the_operator_when_its_next_window_fires() -> None:
    """The operator wakes a bucket at its state's least ``__we`` (next due): each window end in turn."""
    from krishiv_py.stateful.window_kernel import WindowKernel

    spec = sliding_spec(30, 10)
    operator = WindowKernel(spec)
    state, _ = kernel.step(spec, None, _batch([{"k": "a", "t": 5, "v": 1}], 0), None, 0)
    fired = []
    for watermark, due in [(None, 10), (12, 20), (19, 20), (25, 30)]:
        state, out = kernel.step(spec, state, _batch([], 1), watermark, 0)
        assert operator.next_due(state)[0] == due
        fired += _rows(out.results)
    state, out = kernel.step(spec, state, _batch([], 1), 30, 0)
    assert state.num_rows == 0
    fired += _rows(out.results)
    assert [(r["window_start"], r["window_end"], r["count"]) for r in fired] == [
        (-20, 10, 1),
        (-10, 20, 1),
        (0, 30, 1),
    ]


@settings(max_examples=KERNEL_EXAMPLES)
@given(
    slide=st.integers(1, 10),
    panes=st.integers(2, 6),
    lag=st.integers(0, 40),
    switch=st.integers(1, 6),
    scenario=st.one_of(dense_steps, steps),
)
def test_a_state_of_windows_stays_one_until_it_empties(
    slide: int, panes: int, lag: int, switch: int, scenario: list[Step]
) -> None:
    """A state written one row per window (an older checkpoint) goes on so: the model's results.

    The first ``switch`` steps run with one row per window; after them, a
    stored state of windows keeps its layout, and the next state started
    empty keeps panes.
    """
    from unittest import mock

    build = pipeline("sliding", slide * panes, slide, lag, True, 0, kp.Trigger.on_watermark(), "accumulating")
    done = [0]
    layouts: list[tuple[bool | None, bool]] = []
    real_step, real_rule = kernel.step, kernel.pane_state

    def step(spec: kernel.KernelSpec, state: pa.Table | None, *args: Any, **kwargs: Any) -> Any:
        new, out = real_step(spec, state, *args, **kwargs)
        before = uses_panes(state) if state is not None and state.num_rows else None
        layouts.append((before, uses_panes(new)))
        return new, out

    def rule(spec: kernel.KernelSpec) -> bool:
        return done[0] >= switch and real_rule(spec)

    def count(_: kernel.StepOutput) -> None:
        done[0] += 1

    want, want_late = run_model(build, scenario, Clock())
    with mock.patch.object(kernel, "step", step), mock.patch.object(kernel, "pane_state", rule):
        got, got_late = run_kernel(build, scenario, Clock(), on_step=count)
    for g, w in zip(got, want, strict=True):
        assert_same_rows(g, w)
    assert_same_rows(got_late[-1], want_late[-1])
    assert all(after == before for before, after in layouts if before is not None)
    assert all(not after for before, after in layouts[:switch] if before is None)
    assert all(after for before, after in layouts[switch:] if before is None)


def test_a_state_of_windows_goes_on_with_windows_then_panes() -> None:
    """A checkpoint's state of windows fires as windows; once its windows are gone, panes start."""
    from unittest import mock

    spec = sliding_spec(30, 10)
    with _per_window():
        state, _ = kernel.step(spec, None, _batch([{"k": "a", "t": 5, "v": 1}], 0), None, 0)
    assert state.num_rows == 3 and not uses_panes(state)
    state, out = kernel.step(spec, state, _batch([{"k": "a", "t": 15, "v": 2}], 1), 12, 0)
    assert not uses_panes(state)
    assert [(r["window_end"], r["sum_v"]) for r in _rows(out.results)] == [(10, 1)]
    state, out = kernel.step(spec, state, _batch([], 2), 60, 0)
    assert sorted((r["window_end"], r["sum_v"]) for r in _rows(out.results)) == [(20, 3), (30, 3), (40, 2)]
    assert state.num_rows == 0
    state, _ = kernel.step(spec, state, _batch([{"k": "a", "t": 65, "v": 4}], 3), 60, 0)
    assert uses_panes(state) and state.num_rows == 1
    with mock.patch.object(kernel, "pane_state", lambda _: False), pytest.raises(ValueError, match="panes"):
        kernel.step(spec, state, _batch([], 4), 60, 0)


@pytest.mark.parametrize(
    ("changes", "panes"),
    [
        ({}, True),
        ({"window": SlidingWindow(size_ms=600_000, slide_ms=10_000)}, True),
        ({"window": SlidingWindow(size_ms=60, slide_ms=60)}, False),  # tumbling: a pane is a window
        ({"window": SlidingWindow(size_ms=25, slide_ms=10)}, False),  # rows of a pane differ in windows
        ({"window": TumblingWindow(size_ms=60)}, False),
        ({"trigger": kp.Trigger.on_interval(100)}, False),  # a window fires more than once
        ({"trigger": kp.Trigger.on_count(3)}, False),
        ({"trigger": kp.Trigger.on_every_element()}, False),
        ({"allowed_lateness_ms": 15}, False),
        ({"accumulation": "discarding"}, False),
        ({"accumulation": "retracting"}, False),
        ({"pane_events": True}, False),
        ({"ttl_ms": 100}, False),
        ({"ttl_ms": 100, "ttl_time": "processing"}, False),
    ],
)
def test_which_windows_keep_pane_state(changes: dict[str, Any], panes: bool) -> None:
    spec = sliding_spec(60, 10, **changes)
    assert kernel.pane_state(spec) is panes
    assert uses_panes(kernel.empty_state(spec, _batch([], 0))) is panes


def _per_window() -> Any:
    """Within: new states keep one row per window, as before pane state."""
    from unittest import mock

    return mock.patch.object(kernel, "pane_state", lambda _: False)


_DISTINCT_TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), st.sampled_from([0, 1, -(2**63), 2**63 - 1, 7])),
    "int8": (pa.int8(), st.sampled_from([0, -128, 127, 3])),
    "uint64": (pa.uint64(), st.sampled_from([0, 2**64 - 1, 2**63, 5])),
    "double": (pa.float64(), st.sampled_from([0.0, -0.0, float("nan"), 1.5, -2.0])),
    "float": (pa.float32(), st.sampled_from([0.0, -0.0, float("nan"), 1.5])),
    "date": (pa.date32(), st.dates()),
    "string": (pa.string(), st.sampled_from(["a", "b", "", "c"])),
}


@pytest.mark.parametrize("kind", sorted(_DISTINCT_TYPES))
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_distinct_values_merge_to_each_groups_set(kind: str, data: st.DataObject) -> None:
    """``count_distinct``'s merge (sorted where values fit 64 bits, else hashed) keeps each group's
    distinct values once (one NaN, -0.0 as 0.0), for each type, wide ranges included."""
    dtype, values = _DISTINCT_TYPES[kind]
    lists = data.draw(st.lists(st.lists(values, max_size=5), max_size=8))
    groups = data.draw(st.integers(1, 4))
    ids = np.array(data.draw(st.lists(st.integers(0, groups - 1), min_size=len(lists), max_size=len(lists))))
    flat = canonical(pa.array([v for one in lists for v in one], dtype))
    offsets = np.concatenate([[0], np.cumsum([len(one) for one in lists])]).astype(np.int32)
    merged = agg.merge_distinct(list_array(offsets, flat), ids.astype(np.int64), groups)
    assert merged.type == pa.list_(dtype) and len(merged) == groups
    seen: list[set[str]] = [set() for _ in range(groups)]
    for one, group in zip(lists, ids.tolist(), strict=True):
        seen[group] |= {repr(0.0 if v == 0 else v) if isinstance(v, float) else repr(v) for v in one}
    for group, held in enumerate(merged.to_pylist()):
        shown = [repr(0.0 if v == 0 else v) if isinstance(v, float) else repr(v) for v in held or []]
        assert sorted(shown) == sorted(seen[group]) and len(shown) == len(set(shown))
