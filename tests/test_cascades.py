"""A window over windowed results (SPEC 3.11): minute counts into five-minute maxima, and more.

The event time of a result is ``window_end - 1 ms`` and the watermark is
the upstream one. Under the stateful lowering the second window runs in
krishiv's operator after the first (in its call when keyed alike, else a
stage of its own), taking a corrected upstream result as the retraction of
the one it corrects; the bounded lowering runs both windows in one Spark
batch job. Both are checked against :class:`CascadeModel`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import placeholder
from krishiv_py.errors import PlanError
from krishiv_py.runtime.stateful import StatefulJob, TickWriter
from krishiv_py.testing import (
    AggSpec,
    CascadeModel,
    Close,
    ReferenceModel,
    Send,
    Step,
    assert_lowerings_agree,
    assert_same_rows,
    model_for,
    run_reference,
    run_streaming,
)

SCHEMA = "user string, t bigint"
MIN = 60_000


def minute_peaks(s: kp.Stream) -> kp.Stream:
    """Clicks per user and minute (kept a minute for corrections), then the busiest minute per 5 minutes."""
    minutes = (
        s.watermark("t", 0)
        .key_by("user")
        .tumbling_window(MIN)
        .allowed_lateness(MIN)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("clicks"))
    )
    return (
        minutes.key_by("user")
        .tumbling_window(5 * MIN)
        .accumulation("retracting")
        .agg(kp.max(kp.col("clicks")).alias("peak"), kp.count(kp.col("*")).alias("minutes"))
    )


def clicks(*seconds: int, user: str = "u") -> Send:
    return Send([{"user": user, "t": s * 1000} for s in seconds])


# Minute [0, 1) gets 2 clicks, [1, 2) 1, [2, 3) 1, [4, 5) 1; the five-minute window fires at 5:10.
# Then three mildly late clicks at 4:15-4:17 re-fire minute [4, 5) (1 -> 4 clicks), which
# corrects the five-minute maximum (2 -> 4); a click at 1:40 comes after minute [1, 2) was
# deleted (watermark 5:10 >= 2:00 + 1:00): very late, it reaches neither window.
TRANSCRIPT: list[Step] = [
    clicks(10, 20, 70, 130, 250),
    clicks(310),
    clicks(255, 256, 257, 100),
    Close(),
]


def _peak(start: int, peak: int, minutes: int, kind: str) -> dict[str, Any]:
    return {
        "user": "u",
        "window_start": start * MIN,
        "window_end": (start + 5) * MIN,
        "peak": peak,
        "minutes": minutes,
        "kind": kind,
    }


EXPECTED: list[list[dict[str, Any]]] = [
    [],
    [_peak(0, 2, 4, "emit")],
    [_peak(0, 2, 4, "emit"), _peak(0, 2, 4, "retract"), _peak(0, 4, 4, "emit")],
    [_peak(0, 2, 4, "emit"), _peak(0, 2, 4, "retract"), _peak(0, 4, 4, "emit"), _peak(5, 1, 1, "emit")],
]


def test_the_transcript_on_the_model() -> None:
    assert run_reference(SCHEMA, minute_peaks, TRANSCRIPT) == EXPECTED
    model = model_for(minute_peaks(_placeholder()))
    assert isinstance(model, CascadeModel)
    for step in TRANSCRIPT:
        if isinstance(step, Send):
            model.send(step.rows)
        else:
            model.close()
    minute = [(r["window_start"], r["clicks"], r["kind"]) for r in model.upstream_results]
    assert minute == [
        (0, 2, "emit"),
        (MIN, 1, "emit"),
        (2 * MIN, 1, "emit"),
        (4 * MIN, 1, "emit"),
        (4 * MIN, 1, "retract"),
        (4 * MIN, 4, "emit"),
        (5 * MIN, 1, "emit"),
    ]
    assert [(e["t"], e["classification"]) for e in model.late_events] == [(100_000, "very_late")]


def test_the_transcript_streams_on_the_stateful_lowering(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    assert minute_peaks(stream).lower().lowering == "stateful"
    got = run_streaming(session, SCHEMA, minute_peaks, TRANSCRIPT)
    for i, (rows, want) in enumerate(zip(got, EXPECTED, strict=True)):
        try:
            assert_same_rows(rows, want)
        except AssertionError as exc:
            raise AssertionError(f"after step {i}: {exc}") from None


def test_explain_shows_both_windows_and_where_each_runs(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    text = minute_peaks(stream).explain(show=False)
    assert "the operator after it runs in the same call, over the results of its keys" in text
    assert "then in the same call krishiv window over retractions: keys=['user']" in text
    assert "allowed_lateness_ms=60000 accumulation=retracting buckets=16" in text  # kept for corrections
    assert "on the driver" not in text
    with pytest.raises(PlanError, match=r"native lowering.*a window over windowed results"):
        minute_peaks(stream).lower(lowering="native")
    bounded = sliding_totals(session.from_records([{"user": "a", "t": 1}], SCHEMA)).lower()
    assert bounded.lowering == "bounded"
    assert "'kp_arith_sums'" in bounded.render() and "'kp_arith_sums_2'" in bounded.render()


def _placeholder() -> kp.Stream:
    from krishiv_py.testing.steps import _placeholder as make

    return make(SCHEMA)


def test_what_a_window_over_windowed_results_refuses() -> None:
    minutes = _placeholder().watermark("t", 0).key_by("user").tumbling_window(MIN).agg(kp.count(kp.col("*")))
    with pytest.raises(PlanError, match="keep window_end, unchanged"):
        minutes.select("user", "count").key_by("user").tumbling_window(5 * MIN)
    with pytest.raises(PlanError, match="tumbling, sliding or session"):
        minutes.key_by("user").event_sliding_window(MIN, grace_ms=0).agg(kp.count(kp.col("*")))
    with pytest.raises(PlanError, match="fires on the watermark"):
        minutes.key_by("user").tumbling_window(5 * MIN).trigger(kp.Trigger.on_every_element()).agg(
            kp.count(kp.col("*"))
        )
    with pytest.raises(PlanError, match="no order among themselves"):
        minutes.key_by("user").tumbling_window(5 * MIN).agg(kp.first(kp.col("count")))
    with pytest.raises(PlanError, match="no order among themselves"):  # over a union of windows too
        minutes.union(minutes).key_by("user").tumbling_window(5 * MIN).agg(kp.first(kp.col("count")))
    over_union = minutes.union(minutes).key_by("user").tumbling_window(5 * MIN).agg(kp.count(kp.col("*")))
    assert over_union.lower().lowering == "stateful"  # a window over a union of windows is built


def _random_steps(rnd: random.Random, n_steps: int) -> list[Step]:
    steps: list[Step] = []
    t = 0
    for _ in range(n_steps):
        rows = []
        for _ in range(rnd.randrange(2, 9)):
            # Mostly around the front, some mildly late, a few very late.
            back = rnd.choice([0, 0, 0, 2, 8, 20, 60])
            rows.append({"user": rnd.choice("ab"), "t": max(0, t - back * 1000 + rnd.randrange(0, 3000))})
        steps.append(Send(rows))
        t += rnd.randrange(3_000, 25_000)
    return [*steps, Close()]


def sessions_of_minutes(s: kp.Stream) -> kp.Stream:
    """Ten-second counts, corrected for 20 s, then sessions of busy stretches (30 s gap), retracting."""
    tens = (
        s.watermark("t", 1_000)
        .key_by("user")
        .tumbling_window(10_000)
        .allowed_lateness(20_000)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    return (
        tens.key_by("user")
        .session_window(30_000)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("n")).alias("clicks"), kp.max(kp.col("n")).alias("peak"))
    )


def sliding_totals(s: kp.Stream) -> kp.Stream:
    """Ten-second counts, corrected for 15 s (accumulating), then 40 s / 20 s sliding totals for all users."""
    tens = (
        s.watermark("t", 0)
        .key_by("user")
        .tumbling_window(10_000)
        .allowed_lateness(15_000)
        .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("t")).alias("st"))
    )
    # Exact bigint sums on both levels: each window observes its own overflows.
    return tens.sliding_window(40_000, 20_000).agg(
        kp.sum(kp.col("n")).alias("clicks"), kp.count(kp.col("*")), kp.sum(kp.col("st")).alias("st")
    )


@pytest.mark.parametrize("pipeline", [sessions_of_minutes, sliding_totals], ids=["sessions", "sliding"])
def test_cascades_agree_with_the_model_on_random_streams(session: kp.Session, pipeline: Any) -> None:
    steps = _random_steps(random.Random(pipeline.__name__), 6)
    assert_lowerings_agree(session, SCHEMA, pipeline, steps)


def test_a_filter_between_the_windows_drops_a_corrected_result(session: kp.Session) -> None:
    """A minute that fails the filter after a correction leaves the five-minute window (retract + emit)."""

    def build(s: kp.Stream) -> kp.Stream:
        minutes = (
            s.watermark("t", 0)
            .key_by("user")
            .tumbling_window(MIN)
            .allowed_lateness(2 * MIN)
            .agg(kp.count(kp.col("*")).alias("clicks"), kp.min(kp.col("t")).alias("first_t"))
        )
        # Minutes whose first click came in their second half; their clicks doubled.
        late_starters = minutes.filter(kp.col("first_t") % MIN >= 30_000).with_column(
            "twice", kp.col("clicks") * 2
        )
        return (
            late_starters.key_by("user")
            .tumbling_window(5 * MIN)
            .accumulation("retracting")
            .agg(kp.sum(kp.col("twice")).alias("twice"), kp.count(kp.col("*")).alias("minutes"))
        )

    def between(row: dict[str, Any]) -> dict[str, Any] | None:
        return {**row, "twice": 2 * row["clicks"]} if row["first_t"] % MIN >= 30_000 else None

    upstream = ReferenceModel(
        window=_tumbling(MIN),
        event_time="t",
        lag_ms=0,
        keys=["user"],
        aggregates=[
            AggSpec(name="clicks", func="count", column=None),
            AggSpec(name="first_t", func="min", column="t"),
        ],
        allowed_lateness_ms=2 * MIN,
    )
    model = CascadeModel(
        upstream,
        window=_tumbling(5 * MIN),
        keys=["user"],
        aggregates=[
            AggSpec(name="twice", func="sum", column="twice"),
            AggSpec(name="minutes", func="count", column=None),
        ],
        allowed_lateness_ms=2 * MIN,
        accumulation="retracting",
        between=between,
    )
    # Minutes [0, 1), [1, 2) and [4, 5) pass (first clicks at 0:40, 1:40, 4:40); at 5:05 the
    # five-minute window fires: twice = 4 + 2 + 4. The late click at 4:05 moves minute [4, 5)'s
    # first click into its first half: it leaves the five-minute window.
    steps: list[Step] = [clicks(40, 50, 100, 280, 290), clicks(305), clicks(245), Close()]
    want = []
    for step in steps:
        if isinstance(step, Send):
            model.send(step.rows)
        else:
            model.close()
        want.append(model.results)
    five = {"user": "u", "window_start": 0, "window_end": 5 * MIN}
    assert want[-1] == [
        {**five, "twice": 10, "minutes": 3, "kind": "emit"},
        {**five, "twice": 10, "minutes": 3, "kind": "retract"},
        {**five, "twice": 6, "minutes": 2, "kind": "emit"},
    ]
    got = run_streaming(session, SCHEMA, build, steps)
    for rows, expected in zip(got, want, strict=True):
        assert_same_rows(rows, expected)


def _tumbling(size: int) -> Any:
    from krishiv_py.plan.windows import TumblingWindow

    return TumblingWindow(size_ms=size)


def test_a_restarted_cascade_keeps_its_second_window(session: kp.Session, tmp_path: Path) -> None:
    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    stream, sender = session.memory_stream(SCHEMA)
    pipeline = minute_peaks(stream)
    job = pipeline.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        for step in TRANSCRIPT[:2]:
            assert isinstance(step, Send)
            sender.send(list(step.rows))
            job.process_all_available()
    finally:
        job.stop()
    third = TRANSCRIPT[2]
    assert isinstance(third, Send)
    sender.send(list(third.rows))
    job = pipeline.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert_same_rows(job.results(), EXPECTED[-1])
        assert job.metrics().retractions == 1
    finally:
        job.stop()


# --- a key bucket whose tick comes late ---------------------------------------------------------


def tens_into_hundreds(s: kp.Stream) -> kp.Stream:
    """Counts per user and 10 ms (kept 5 ms for corrections), then totals over all users per 100 ms.

    The second window has no keys: it runs as a stage of its own, its rows
    from every key bucket of the first.
    """
    tens = (
        s.watermark("t", 0)
        .key_by("user")
        .tumbling_window(10)
        .allowed_lateness(5)
        .accumulation("retracting")
        .agg(kp.count(kp.col("*")).alias("n"))
    )
    return (
        tens.tumbling_window(100)
        .accumulation("retracting")
        .agg(kp.sum(kp.col("n")).alias("total"), kp.count(kp.col("*")).alias("windows"))
    )


# Users a and b in different buckets. Both fill the ten [90, 100); at watermark 105 both are due,
# and the hundred [0, 100) fires (total 2) and is deleted (100 + 5 <= 105).
STEPS: list[list[dict[str, Any]]] = [
    [{"user": "a", "t": 95}, {"user": "b", "t": 97}],
    [{"user": "a", "t": 105}],
    [{"user": "a", "t": 150}],
]


def _model_results() -> list[dict[str, Any]]:
    model = model_for(tens_into_hundreds(placeholder(SCHEMA)))
    assert isinstance(model, CascadeModel)
    for rows in STEPS:
        model.send(rows)
    model.close()
    assert model.very_late_results == 0
    return model.results


class DelayedTick(TickWriter):
    """The job's tick writer, waking ``bucket`` the first time a micro-batch after the others (a
    tick file of its own after theirs: the tick source reads one a micro-batch)."""

    def __init__(self, path: str, bucket: int) -> None:
        super().__init__(path)
        self.bucket = bucket
        self.delayed = False

    def write(self, buckets: Sequence[int]) -> None:
        woken = set(buckets)
        if self.delayed or self.bucket not in woken or len(woken) == 1:
            super().write(sorted(woken))
            return
        self.delayed = True
        super().write(sorted(woken - {self.bucket}))
        super().write([self.bucket])


@pytest.mark.spark
def test_a_job_whose_tick_for_one_bucket_comes_late_gives_the_model(session: kp.Session) -> None:
    """The second window stays below what a due bucket can still fire: a result that bucket fires a
    micro-batch late (its tick after the others') is on time upstream and counts downstream, as
    in :class:`CascadeModel`."""
    stream, sender = session.memory_stream(SCHEMA)
    job = tens_into_hundreds(stream).start()
    try:
        assert isinstance(job, StatefulJob)
        # Two users in different buckets (pmod(hash(user), buckets)); the second one's tick comes late.
        users = session.spark.sql(
            f"SELECT u, CAST(pmod(hash(u), {job._buckets}) AS INT) AS b "
            "FROM VALUES ('a'), ('b'), ('c'), ('d'), ('e'), ('f'), ('g'), ('h') AS v(u)"
        ).collect()
        bucket_of = {str(r["u"]): int(r["b"]) for r in users}
        late = next(u for u in bucket_of if bucket_of[u] != bucket_of["a"])
        job._ticks = DelayedTick(job._ticks.path, bucket_of[late])
        steps = [[{**r, "user": late} if r["user"] == "b" else r for r in rows] for rows in STEPS]
        got = []
        for rows in steps:
            sender.send(rows)
            job.process_all_available()
            got.append(job.results().to_pylist())
        sender.close()
        assert job.await_termination(timeout_s=120)
        assert isinstance(job._ticks, DelayedTick) and job._ticks.delayed
        assert_same_rows(job.results(), _model_results())
        # The micro-batch that moved the watermark to 105 fired [90, 100) of every bucket (the
        # map tasks send every bucket its highest time): [0, 100) left with it, no tick needed.
        # The close's tick woke the late user's bucket a micro-batch after the others: until
        # then [100, 200) waited for its [150, 160).
        assert [len(rows) for rows in got] == [0, 1, 1]
    finally:
        job.stop()
