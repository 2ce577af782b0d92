"""The watermark timeline: its data (from the reference model and from a job) and its picture.

The picture is checked through its artists (gids, line data, scatter
offsets), not pixels.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import krishiv_py as kp
from krishiv_py.errors import KrishivError, MissingDependencyError, PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.testing import AdvanceWatermark, AggSpec, Close, ReferenceModel, Send, Step
from krishiv_py.types import to_schema
from krishiv_py.viz import Timeline, TimelineStep, _source_batches, lag_text, timeline

SCHEMA = "k string, t bigint"
ROOT = Path(__file__).parent.parent  # the package imports from here in subprocesses
Pipeline = Callable[[kp.Stream], kp.Stream]


def lateness_pipeline(s: kp.Stream) -> kp.Stream:
    """10 ms tumbling windows per key, lag 0, windows kept 10 ms for late events."""
    return s.watermark("t", 0).key_by("k").tumbling_window(10).allowed_lateness(10).agg(kp.count(kp.col("*")))


STEPS: list[Step] = [
    # No watermark yet: all on time; the row without a time is invalid. W -> 12: [0, 10) fires.
    Send([{"k": "a", "t": 1}, {"k": "a", "t": 5}, {"k": "a", "t": 12}, {"k": "a", "t": None}]),
    # 7 < 12, but [0, 10) is retained while W < 20: mildly late, [0, 10) fires again. W -> 25.
    Send([{"k": "a", "t": 7}, {"k": "a", "t": 25}]),
    # [0, 10) is gone (25 >= 20): 3 is very late. W -> 31: [20, 30) fires.
    Send([{"k": "a", "t": 3}, {"k": "a", "t": 31}]),
    # W -> 35: [30, 40) stays open.
    AdvanceWatermark(35),
]

EXPECTED_EVENTS = [
    (1, 0, "on_time"),
    (5, 0, "on_time"),
    (12, 0, "on_time"),
    (None, 0, "invalid"),
    (7, 1, "mildly_late"),
    (25, 1, "on_time"),
    (3, 2, "very_late"),
    (31, 2, "on_time"),
]
EXPECTED_WINDOWS = [
    (0, 10, "refired", 0, (1,)),
    (10, 20, "fired", 1, ()),
    (20, 30, "fired", 2, ()),
    (30, 40, "open", None, ()),
]


def events_of(tl: Timeline) -> list[tuple[int | None, int, str]]:
    return [(e.time_ms, e.step, e.classification) for e in tl.events]


def windows_of(tl: Timeline) -> list[tuple[int, int, str, int | None, tuple[int, ...]]]:
    return [(w.start_ms, w.end_ms, w.status, w.fired_step, w.refired_steps) for w in tl.windows]


@pytest.fixture
def reference() -> Timeline:
    return Timeline.from_reference(lateness_pipeline, STEPS, schema=SCHEMA)


@pytest.fixture(autouse=True)
def close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def num(ms: int) -> float:
    """The x coordinate of epoch milliseconds ``ms``: matplotlib's date number."""
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    return float(mdates.date2num(when))  # type: ignore[no-untyped-call]


def xs_of(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata(), dtype=float)]


def ys_of(line: Line2D) -> list[float]:
    return [float(y) for y in np.asarray(line.get_ydata(), dtype=float)]


def offsets_of(points: PathCollection) -> tuple[list[float], list[float]]:
    offsets = np.asarray(points.get_offsets(), dtype=float)
    return [float(x) for x in offsets[:, 0]], [float(y) for y in offsets[:, 1]]


def by_gid(fig: Figure, gid: str) -> list[Any]:
    return [a for a in fig.findobj() if a.get_gid() == gid]


# --- the data -------------------------------------------------------------------------


def test_reference_timeline_data(reference: Timeline) -> None:
    assert events_of(reference) == EXPECTED_EVENTS
    assert [e.key for e in reference.events] == [("a",)] * 8
    assert [e.watermark_ms for e in reference.events] == [None] * 4 + [12, 12, 25, 25]
    assert windows_of(reference) == EXPECTED_WINDOWS
    assert reference.watermarks == (12, 25, 31, 35)
    assert dict(reference.source_watermarks) == {"input": (12, 25, 31, 35)}
    assert [(s.kind, s.rows) for s in reference.steps] == [
        ("send", 4),
        ("send", 2),
        ("send", 2),
        ("advance_watermark", 0),
    ]
    assert reference.job_watermarks is None and reference.watermarks_agree is None
    assert [e.time_ms for e in reference.classified("very_late")] == [3]
    assert [w.start_ms for w in reference.with_status("open")] == [30]


def test_reference_from_a_stream_and_from_a_model_agree(reference: Timeline) -> None:
    from krishiv_py.testing.steps import _placeholder, reference_model_for

    stream = lateness_pipeline(_placeholder(SCHEMA))
    assert events_of(Timeline.from_reference(stream, STEPS)) == EXPECTED_EVENTS
    model = reference_model_for(stream, record=True)
    results_without_log = reference_model_for(stream)
    for step in STEPS:
        for m in (model, results_without_log):
            if isinstance(step, Send):
                m.send(step.rows)
            elif isinstance(step, AdvanceWatermark):
                m.advance_watermark(step.ts_ms)
    assert model.results == results_without_log.results  # recording changes nothing
    assert results_without_log.log is None
    assert windows_of(Timeline.from_model(model)) == EXPECTED_WINDOWS


def test_close_fires_every_open_window(reference: Timeline) -> None:
    closed = Timeline.from_reference(lateness_pipeline, [*STEPS, Close()], schema=SCHEMA)
    assert closed.watermarks[-1] == kp.END_OF_TIME_MS
    assert windows_of(closed)[-1] == (30, 40, "fired", 4, ())
    assert closed.with_status("open") == ()


def test_a_timeline_of_an_automatic_lag_shows_the_lag_each_step_met() -> None:
    from krishiv_py.testing.steps import _placeholder, reference_model_for

    auto = kp.AutoLag(quantile=0.5, window_rows=20, warmup_rows=4, min_lag_ms=100, max_lag_ms=60_000)
    stream = _placeholder("t bigint").watermark("t", auto).tumbling_window(10_000).agg(kp.count(kp.col("*")))
    # Each send's rows arrive out of order by about its step's disorder (ms): the lag follows it.
    steps = [
        Send([{"t": base + d} for d in (0, -spread, spread // 2, -spread // 3, spread)])
        for base, spread in ((10_000, 3_000), (20_000, 3_000), (30_000, 500), (40_000, 500), (50_000, 8_000))
    ]
    tl = Timeline.from_reference(stream, steps)
    model = reference_model_for(stream, record=True)
    lags = []
    for step in steps:
        model.send(step.rows)
        lags.append(model.source_lags()["main"])  # (the timeline shows the stream's name)
    assert tl.source_lags == {"input": tuple(lags)}
    assert len(set(lags)) > 1  # the lag moved with the disorder
    fig = timeline(tl)
    texts = [(t.get_text(), t.xy[1]) for t in by_gid(fig, "lag")]
    # Row i (y = i + 1) met the lag after step i - 1; a row shows it where it changed.
    shown = [(f"lag {lag_text(lags[i - 1])}", i + 1.0) for i in range(1, len(steps))]
    assert texts == [shown[0], *(t for prev, t in itertools.pairwise(shown) if t[0] != prev[0])]
    plt.close(fig)
    fixed = Timeline.from_reference(lateness_pipeline(_placeholder(SCHEMA)), STEPS)
    assert fixed.source_lags == {} and not by_gid(timeline(fixed), "lag")  # a fixed lag: nothing drawn
    with pytest.raises(PlanError, match="lag series"):
        attrs.evolve(tl, source_lags={"input": (1, 2)})


def test_early_firings_and_session_merges() -> None:
    def counted(s: kp.Stream) -> kp.Stream:
        return (
            s.watermark("t", 0).tumbling_window(10).trigger(kp.Trigger.on_count(2)).agg(kp.count(kp.col("*")))
        )

    tl = Timeline.from_reference(
        counted, [Send([{"t": 1}, {"t": 2}]), Send([{"t": 3}, {"t": 14}])], schema="t bigint"
    )
    assert [(w.start_ms, w.status, w.early_steps, w.fired_step) for w in tl.windows] == [
        (0, "fired", (0,), 1),
        (10, "open", (), None),
    ]

    # lateness.md's session example: a late event merges two fired sessions into a new one.
    def sessions(s: kp.Stream) -> kp.Stream:
        w = s.watermark("t", 0).session_window(10).allowed_lateness(100).accumulation("retracting")
        return w.agg(kp.count(kp.col("*")))

    steps: list[Step] = [
        Send([{"t": 0}, {"t": 20}]),
        AdvanceWatermark(30),
        Send([{"t": 10}]),
        AdvanceWatermark(125),
        Send([{"t": -3}, {"t": -200}]),
    ]
    tl = Timeline.from_reference(sessions, steps, schema="t bigint")
    assert windows_of(tl) == [  # in firing order: by end, then start
        (0, 10, "fired", 0, ()),
        (-3, 30, "fired", 4, ()),
        (0, 30, "fired", 2, ()),
        (20, 30, "fired", 1, ()),
    ]
    assert [e.classification for e in tl.events] == [
        "on_time",
        "on_time",
        "mildly_late",
        "mildly_late",
        "very_late",
    ]


def test_timeline_checks_its_series() -> None:
    with pytest.raises(PlanError, match="one value per step"):
        Timeline(
            steps=[TimelineStep(kind="close", source="s", rows=0)],
            events=[],
            windows=[],
            watermarks=[],
            source_watermarks={},
        )
    with pytest.raises(PlanError, match="schema="):
        Timeline.from_reference(lateness_pipeline, STEPS)
    with pytest.raises(PlanError, match="record=True"):
        Timeline.from_model(
            ReferenceModel(
                window=TumblingWindow(size_ms=10),
                event_time="t",
                lag_ms=0,
                aggregates=[AggSpec(name="n", func="count", column=None)],
            )
        )


# --- the picture ----------------------------------------------------------------------


def test_figure_artists(reference: Timeline) -> None:
    fig = timeline(reference)
    assert isinstance(fig, Figure)
    assert (fig.get_figwidth(), fig.get_figheight(), fig.dpi) == (9, 5, 100)

    # One band per distinct window and status.
    assert len(by_gid(fig, "window-fired")) == 2
    assert len(by_gid(fig, "window-refired")) == 1
    assert len(by_gid(fig, "window-open")) == 1
    assert all(isinstance(p, Patch) for p in by_gid(fig, "window-open"))

    # The watermark in force for each row (row i at y = i + 1), and the one after the last step.
    (line,) = by_gid(fig, "watermark")
    assert isinstance(line, Line2D)
    xs = [num(w) for w in (12, 12, 25, 25, 31, 31, 35, 35)]
    assert xs_of(line) == pytest.approx(xs)
    assert ys_of(line) == [1.5, 2.5, 2.5, 3.5, 3.5, 4.5, 4.5, 5.0]
    assert by_gid(fig, "watermark-job") == []
    assert [a for a in fig.findobj() if str(a.get_gid()).startswith("watermark-source:")] == []  # one source

    # Events: x is the event time, y the row of the step.
    for cls, times, rows in [
        ("on_time", [1, 5, 12, 25, 31], [1, 1, 1, 2, 3]),
        ("mildly_late", [7], [2]),
        ("very_late", [3], [3]),
    ]:
        (points,) = by_gid(fig, f"events-{cls}")
        assert isinstance(points, PathCollection)
        xs, ys = offsets_of(points)
        assert xs == pytest.approx([num(t) for t in times])
        assert [round(y) for y in ys] == rows
    (invalid,) = by_gid(fig, "events-invalid")
    assert offsets_of(invalid)[0] == [0.0]  # at the left edge, in axes coordinates

    # Firing bars where each step ends.
    (final,) = by_gid(fig, "firing-final")
    (refire,) = by_gid(fig, "firing-refire")
    assert isinstance(final, LineCollection)
    assert sorted(seg[0][1] for seg in final.get_segments()) == [1.5, 2.5, 3.5]
    assert [seg[0][1] for seg in refire.get_segments()] == [2.5]

    legend = fig.legends[0]
    labels = [t.get_text() for t in legend.get_texts()]
    for label in [
        "window fired",
        "window re-fired",
        "window open (not fired)",
        "watermark",
        "on time",
        "mildly late (kept)",
        "very late (dropped)",
        "invalid (no event time)",
        "final firing",
    ]:
        assert label in labels
    ax = fig.axes[0]
    assert ax.get_xlabel() == "event time (UTC)"
    assert "step" in ax.get_ylabel()
    assert "1 mildly late, 1 very late, 1 invalid" in ax.get_title(loc="left")
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "1: 4 rows",
        "2: 2 rows",
        "3: 2 rows",
        "4: advance wm",
    ]


def test_draws_on_given_axes_and_per_source_watermarks() -> None:
    model = ReferenceModel(
        window=TumblingWindow(size_ms=10),
        event_time="t",
        lag_ms=0,
        sources=("fast", "slow"),
        aggregates=[AggSpec(name="n", func="count", column=None)],
        record=True,
    )
    model.send([{"t": 25}], source="fast")
    model.send([{"t": 4}], source="slow")  # the overall watermark is the slow source's
    fig, ax = plt.subplots()
    assert timeline(model, ax=ax) is fig
    (slow,) = by_gid(fig, "watermark-source:slow")
    (fast,) = by_gid(fig, "watermark-source:fast")
    (overall,) = by_gid(fig, "watermark")
    assert xs_of(fast) == pytest.approx([num(25)] * 4)
    assert xs_of(slow) == pytest.approx([num(4)] * 2)  # no watermark before its first step
    assert xs_of(overall) == pytest.approx([num(4)] * 2)
    assert ax.get_legend() is not None
    assert [w.status for w in Timeline.from_model(model).windows] == ["open", "open"]  # held back by "slow"


def test_a_job_watermark_that_disagrees_is_drawn_too(reference: Timeline) -> None:
    reported = attrs.evolve(reference, job_watermarks=(None, 25, 30, 35))
    assert reported.watermarks_agree is False
    fig = timeline(reported)
    (job_line,) = by_gid(fig, "watermark-job")
    assert xs_of(job_line) == pytest.approx([num(w) for w in (25, 25, 30, 30, 35, 35)])
    assert "different watermark" in fig.axes[0].get_title(loc="left")
    assert attrs.evolve(reference, job_watermarks=(None, 12, None, 31)).watermarks_agree is False
    assert attrs.evolve(reference, job_watermarks=(None, None, 31, 35)).watermarks_agree is True


def test_at_most_max_events_are_drawn() -> None:
    rows = [{"t": t} for t in range(100)]
    build: Pipeline = lambda s: s.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))  # noqa: E731
    tl = Timeline.from_reference(build, [Send(rows), Send([{"t": 1}, {"t": None}])], schema="t bigint")
    fig = timeline(tl, max_events=10)
    drawn = {
        cls: len(by_gid(fig, f"events-{cls}")[0].get_offsets()) for cls in ("on_time", "very_late", "invalid")
    }
    assert drawn == {"on_time": 8, "very_late": 1, "invalid": 1}
    assert "showing 10 of 102" in fig.axes[0].get_title(loc="left")
    with pytest.raises(PlanError, match="max_events"):
        timeline(tl, max_events=-1)


def test_without_matplotlib(reference: Timeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"python -m pip install '\.\[viz\]'") as caught:
        timeline(reference)
    assert isinstance(caught.value, KrishivError) and isinstance(caught.value, ImportError)


@pytest.mark.parametrize(("chosen", "expected"), [(None, "agg"), ("svg", "svg")])
def test_agg_only_when_no_backend_was_chosen(chosen: str | None, expected: str) -> None:
    code = (
        "import krishiv_py as kp, matplotlib\n"
        "from krishiv_py.testing import Send\n"
        "from krishiv_py.viz import Timeline, timeline\n"
        "build = lambda s: s.watermark('t', 0).tumbling_window(10).agg(kp.count(kp.col('*')))\n"
        "timeline(Timeline.from_reference(build, [Send([{'t': 1}])], schema='t bigint'))\n"
        "print(matplotlib.get_backend().lower())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    if chosen is not None:
        env["MPLBACKEND"] = chosen
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    assert run.stdout.strip() == expected


def test_importing_the_package_does_not_import_matplotlib() -> None:
    code = "import sys, krishiv_py, krishiv_py.viz; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# --- reading a job's checkpoint ---------------------------------------------------------


def write_log(path: Path, lines: list[str]) -> None:
    path.write_text("v1\n" + "\n".join(lines) + "\n", encoding="utf-8")


def test_source_batches_read_compacted_logs_and_stop_at_the_last_commit(tmp_path: Path) -> None:
    data = tmp_path / "stream" / "data"
    checkpoint = tmp_path / "checkpoint"
    for sub in ("sources/0", "sources/1", "offsets", "commits"):
        (checkpoint / sub).mkdir(parents=True)

    def entry(batch: int) -> str:
        uri = f"file://{data}/batch-{batch:012d}-data.parquet"
        return json.dumps({"path": uri, "timestamp": 1_000 + batch, "batchId": batch})

    write_log(
        checkpoint / "sources/0/0",
        [json.dumps({"path": f"file://{tmp_path}/ticks/t0.parquet", "timestamp": 1, "batchId": 0})],
    )
    write_log(checkpoint / "sources/1/9.compact", [entry(b) for b in range(10)])  # batches 0-9, compacted
    write_log(checkpoint / "sources/1/10", [entry(10)])
    write_log(checkpoint / "sources/1/11", [entry(11)])  # planned, not committed
    (checkpoint / "sources/1/.11.crc").write_text("x")
    for batch, offset in [(11, 10), (12, 11)]:
        meta = json.dumps({"batchWatermarkMs": 0})
        write_log(
            checkpoint / f"offsets/{batch}",
            [meta, json.dumps({"logOffset": 0}), json.dumps({"logOffset": offset})],
        )
    write_log(checkpoint / "commits/11", ["{}"])
    source = n.MemorySource(name="s", schema=to_schema(SCHEMA), path=str(data))
    index, batches = _source_batches(str(checkpoint), source)
    assert index == 1
    assert [b for b, _ in batches] == list(range(11))
    assert batches[3][1] == [f"file://{data}/batch-000000000003-data.parquet"]


# --- a job ----------------------------------------------------------------------------------


@pytest.mark.spark
def test_timeline_of_a_job_matches_the_reference_model(session: kp.Session, reference: Timeline) -> None:
    stream, sender = session.memory_stream(SCHEMA, name="timeline_events")
    job = lateness_pipeline(stream).start()
    try:
        for step in STEPS:
            if isinstance(step, Send):
                sender.send(list(step.rows))
            elif isinstance(step, AdvanceWatermark):
                sender.advance_watermark(step.ts_ms)
            job.process_all_available()
        tl = Timeline.from_job(job)
        assert events_of(tl) == EXPECTED_EVENTS
        assert windows_of(tl) == EXPECTED_WINDOWS
        assert tl.watermarks == reference.watermarks
        assert tl.job_watermarks == reference.watermarks and tl.watermarks_agree
        assert [(s.kind, s.rows, s.source) for s in tl.steps] == [
            (s.kind, s.rows, "timeline_events") for s in reference.steps
        ]
        batch_ids = [s.batch_id for s in tl.steps if s.batch_id is not None]
        assert len(batch_ids) == len(tl.steps) and batch_ids == sorted(batch_ids)
        assert job.metrics().mildly_late_events == 1 and job.metrics().very_late_events == 1

        fig = job.plot_timeline()
        assert len(by_gid(fig, "window-refired")) == 1 and len(by_gid(fig, "window-open")) == 1
        (line,) = by_gid(fig, "watermark")
        assert xs_of(line) == pytest.approx([num(w) for w in (12, 12, 25, 25, 31, 31, 35, 35)])
        assert by_gid(fig, "watermark-job") == []  # the job agrees with the replay
        assert fig.axes[0].get_yticklabels()[0].get_text().startswith("b")
    finally:
        job.stop()
    assert events_of(Timeline.from_job(job)) == EXPECTED_EVENTS  # a stopped job too


@pytest.mark.spark
def test_timeline_of_a_bounded_job(session: kp.Session) -> None:
    rows = [{"k": "a", "t": 1}, {"k": "b", "t": 14}, {"k": "a", "t": None}]
    job = lateness_pipeline(session.from_records(rows, SCHEMA)).start()
    tl = Timeline.from_job(job)
    assert [(s.kind, s.rows) for s in tl.steps] == [("bounded", 3)]
    assert events_of(tl) == [(1, 0, "on_time"), (14, 0, "on_time"), (None, 0, "invalid")]
    assert [(w.start_ms, w.key, w.status, w.fired_step) for w in tl.windows] == [
        (0, ("a",), "fired", 0),
        (10, ("b",), "fired", 0),
    ]
    assert tl.watermarks == (kp.END_OF_TIME_MS,) and tl.watermarks_agree
    fig = timeline(tl)
    assert "end of input" in [t.get_text() for t in fig.axes[0].texts]


def test_job_without_a_pipeline_is_refused() -> None:
    class Bare(kp.Job):
        lowering = "native"

    with pytest.raises(PlanError, match=r"Stream\.start"):
        Timeline.from_job(Bare())


@pytest.mark.spark
def test_timeline_of_a_streaming_file_source(session: kp.Session, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i, times in enumerate([[1, 12], [3, 25]]):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"k": ["a"] * len(times), "t": times}), path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # read in this order, one file a micro-batch
    stream = session.read_parquet(str(tmp_path), SCHEMA, streaming=True, max_files_per_trigger=1)
    job = lateness_pipeline(stream).start()
    try:
        job.process_all_available()
        tl = Timeline.from_job(job)
    finally:
        job.stop()
    assert events_of(tl) == [(1, 0, "on_time"), (12, 0, "on_time"), (3, 1, "mildly_late"), (25, 1, "on_time")]
    assert windows_of(tl) == [
        (0, 10, "refired", 0, (1,)),
        (10, 20, "fired", 1, ()),
        (20, 30, "open", None, ()),
    ]
    assert tl.watermarks == (12, 25) and tl.watermarks_agree
