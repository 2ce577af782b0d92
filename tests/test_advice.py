"""The watermark advisor and what-if replay: profiles, advice, replay against the reference model, CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from krishiv_py.advice import DelayHistogram, WatermarkAdvice, advise_watermark, profile_event_times, what_if
from krishiv_py.advice.replay import read_batches
from krishiv_py.api.stream import Stream
from krishiv_py.cli import main
from krishiv_py.model.reference import AggSpec
from krishiv_py.model.steps import reference_model_for
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import TumblingWindow
from krishiv_py.testing import ReferenceModel
from krishiv_py.types import to_schema

SCHEMA = to_schema("user_id bigint, event_time bigint")


def records(table: pa.Table, name: str = "clicks") -> Stream:
    """A bounded stream over ``table`` that needs no session (nothing here starts Spark)."""
    return Stream(cast(Any, None), n.RecordsSource(name=name, schema=SCHEMA, data=table))


def generated(n_events: int, *, mean_delay_ms: float, seed: int, late_share: float = 0.0) -> pa.Table:
    """Events arriving every 10 ms whose event time lies an exponential delay behind (plus some very late)."""
    rng = np.random.default_rng(seed)
    arrive = np.arange(n_events, dtype=np.int64) * 10
    delay = rng.exponential(mean_delay_ms, n_events).astype(np.int64)
    late = rng.random(n_events) < late_share
    delay[late] += rng.integers(5_000, 60_000, int(late.sum()))
    return pa.table(
        {"user_id": pa.array(rng.integers(0, 30, n_events)), "event_time": pa.array(arrive - delay)}
    )


# --- the profile ---------------------------------------------------------------------------


def test_delays_are_behind_the_highest_time_seen_before() -> None:
    p = profile_event_times(np.array([0.0, 5_000, 4_000, np.nan, 10_000, 1_000, 10_000]))
    assert (p.events, p.invalid, p.behind, p.max_delay_ms) == (6, 1, 2, 9_000)
    assert p.delays.total == 6
    assert p.delays.quantile(0.5) == 0  # four events moved the stream forward or tied it
    assert 9_000 <= p.delays.quantile(1.0) <= 9_090


def test_histograms_merge_and_quantiles_stay_within_one_percent() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 100_000, 5_000), rng.integers(0, 1_000, 5_000)
    merged = DelayHistogram.of(a).merge(DelayHistogram.of(b))
    assert merged == DelayHistogram.of(np.concatenate([a, b]))
    both = np.concatenate([a, b])
    for q in (0.1, 0.5, 0.9, 0.99, 0.999):
        exact = int(np.quantile(both, q, method="higher"))
        assert exact <= merged.quantile(q) <= exact * 1.01 + 1
        assert merged.share_within(merged.quantile(q)) >= q - 1e-9


@pytest.mark.parametrize("q", [0.99, 0.999])
def test_advised_lag_is_within_five_percent_of_the_true_quantile(q: float) -> None:
    mean = 400.0
    table = generated(200_000, mean_delay_ms=mean, seed=11)
    advice = advise_watermark(records(table).watermark("event_time", 0), completeness=q)
    true = -mean * np.log(1 - q)  # the exponential distribution's quantile
    assert abs(advice.lag_ms - true) <= 0.05 * true, (advice.lag_ms, true)
    assert advice.current_lag_ms == 0 and advice.current_completeness < 0.5
    assert advice.window is None


def test_lateness_advice_catches_the_share_asked_for() -> None:
    table = generated(20_000, mean_delay_ms=300, seed=5, late_share=0.01)
    stream = records(table).watermark("event_time", 1_000).key_by("user_id").tumbling_window(10_000)
    windowed = stream.agg(kp.count(kp.col("*")))
    loose = advise_watermark(windowed, completeness=0.98, caught=0.999)
    strict = advise_watermark(windowed, completeness=0.98, caught=0.99999)
    assert loose.lag_ms == strict.lag_ms < 5_000  # the 1 % of very late events is not in the lag
    assert 0 < loose.allowed_lateness_ms < strict.allowed_lateness_ms <= 60_000
    assert loose.profile.keys == 30 and loose.profile.after_first_firing is not None
    assert loose.window == "tumbling(size_ms=10000)"
    assert loose.windows_held is not None and loose.windows_held > 0
    text = str(loose)
    assert f"lag {loose.lag_ms:,} ms" in text and "allowed lateness" in text
    assert "<table>" in loose._repr_html_()


# --- what-if replay -----------------------------------------------------------------------


def _direct(rows: list[list[dict[str, Any]]], lag: int, lateness: int) -> Any:
    """The reference model built by hand with the setting (not through the pipeline): the oracle."""
    model = ReferenceModel(
        window=TumblingWindow(size_ms=5_000),
        event_time="event_time",
        lag_ms=lag,
        keys=["user_id"],
        aggregates=[AggSpec(name="count", func="count", column=None)],
        allowed_lateness_ms=lateness,
        accumulation="retracting",
    )
    for batch in rows:
        model.send(batch)
    model.close()
    return model


def test_what_if_counts_equal_the_model_run_with_each_setting() -> None:
    table = generated(3_000, mean_delay_ms=800, seed=7, late_share=0.02)
    source = records(table)

    def pipeline(s: Stream) -> Stream:
        windowed = s.watermark("event_time", 0).key_by("user_id").tumbling_window(5_000)
        return windowed.accumulation("retracting").agg(kp.count(kp.col("*")))

    got = what_if(source, pipeline, lag_ms=[0, 500, 4_000], allowed_lateness_ms=[0, 20_000], batch_rows=200)
    assert got.num_rows == 6
    batches = [b.to_pylist() for b in read_batches(source.plan, 200)]
    complete = _direct([[r for b in batches for r in b]], 0, 0).results
    final = {(r["user_id"], r["window_start"]): r["count"] for r in complete}
    for row in got.to_pylist():
        model = _direct(batches, row["lag_ms"], row["allowed_lateness_ms"])
        m = model.metrics
        assert row["windows_emitted"] == m.windows_emitted
        assert row["retractions"] == m.retractions
        assert (row["on_time"], row["mildly_late"], row["very_late"]) == (
            m.on_time_events,
            m.mildly_late_events,
            m.very_late_events,
        )
        last: dict[Any, Any] = {}
        for r in model.results:
            last[(r["user_id"], r["window_start"])] = r["count"] if r["kind"] == "emit" else None
        differing = sum(last.get(k) != final.get(k) for k in set(last) | set(final))
        assert row["differing_windows"] == differing
    rows = got.to_pylist()
    # More lag, fewer very late events; allowed lateness turns them into re-firings.
    assert rows[0]["very_late"] > rows[4]["very_late"]
    assert rows[1]["very_late"] < rows[0]["very_late"] and rows[1]["refirings"] > 0
    assert rows[0]["differing_windows"] > 0
    assert rows[0]["mean_delay_ms"] + 3_000 < rows[4]["mean_delay_ms"]  # the lag delays every result


def test_what_if_refuses_bad_settings_naming_them() -> None:
    source = records(generated(100, mean_delay_ms=10, seed=1))

    def pipeline(s: Stream) -> Stream:
        return s.watermark("event_time", 0).tumbling_window(1_000).agg(kp.count(kp.col("*")))

    with pytest.raises(kp.PlanError, match="lag_ms takes a list"):
        what_if(source, pipeline, lag_ms=cast(Any, 5))
    with pytest.raises(kp.PlanError, match="allowed_lateness_ms: every value"):
        what_if(source, pipeline, lag_ms=[0], allowed_lateness_ms=[-1])
    with pytest.raises(kp.PlanError, match="batch_rows must be a positive"):
        what_if(source, pipeline, lag_ms=[0], batch_rows=0)
    with pytest.raises(kp.PlanError, match="replays source -> watermark"):
        what_if(source, lambda s: s.watermark("event_time", 0), lag_ms=[0])
    with pytest.raises(kp.PlanError, match="pipeline must return a Stream"):
        what_if(source, cast(Any, lambda s: 3), lag_ms=[0])


def test_advice_refuses_bad_input_naming_it() -> None:
    stream = records(generated(100, mean_delay_ms=10, seed=1)).watermark("event_time", 0)
    for bad in (0, 1.5, True, "high"):
        with pytest.raises(kp.PlanError, match="completeness must be a share"):
            advise_watermark(stream, completeness=cast(Any, bad))
    with pytest.raises(kp.PlanError, match=r"one \.watermark"):
        advise_watermark(records(generated(10, mean_delay_ms=1, seed=1)))
    kafka = n.KafkaSource(
        name="k", schema=SCHEMA, bootstrap_servers="127.0.0.1:1", topic="t", connector="python"
    )
    with pytest.raises(kp.PlanError, match="KafkaSource is not read here"):
        advise_watermark(Stream(cast(Any, None), kafka).watermark("event_time", 0))
    empty = generated(10, mean_delay_ms=1, seed=1).slice(0, 0)
    with pytest.raises(kp.PlanError, match="the stream 'quiet' has no rows yet: there is no data to profile"):
        advise_watermark(records(empty, name="quiet").watermark("event_time", 0))


# --- files and the command line -----------------------------------------------------------


def _write_parts(root: Path, table: pa.Table, parts: int) -> None:
    root.mkdir()
    step = table.num_rows // parts
    for i in range(parts):
        pq.write_table(table.slice(i * step, step), root / f"part-{i:03d}.parquet")


def test_files_replay_one_file_per_batch_and_the_cli_prints_the_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = generated(4_000, mean_delay_ms=200, seed=9)
    _write_parts(tmp_path / "clicks", table, 4)
    source = n.FileSource(name="clicks", schema=SCHEMA, format="parquet", path=str(tmp_path / "clicks"))
    assert [b.num_rows for b in read_batches(source)] == [1_000] * 4
    want = advise_watermark(records(table).watermark("event_time", 0), completeness=0.99)
    code = main(
        [
            "advise",
            str(tmp_path / "clicks"),
            "--time-column",
            "event_time",
            "--key",
            "user_id",
            "--completeness",
            "0.99",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"lag {want.lag_ms:,} ms puts 99.000% of the events on time" in out
    assert "keys: 30" in out and f".watermark('event_time', {want.lag_ms})" in out
    assert main(["advise", str(tmp_path / "clicks"), "--time-column", "nope"]) == 1
    assert "unknown event-time column 'nope'" in capsys.readouterr().err
    assert main(["advise", str(tmp_path / "missing"), "--time-column", "event_time"]) == 1
    assert "no such file or directory" in capsys.readouterr().err


def test_the_operator_counts_each_rows_delay_behind_the_previous_batch() -> None:
    from krishiv_py.names import BATCH_TS
    from krishiv_py.stateful.operator import delay_counts

    us = pa.array([5_000_000, None, 1_000_000, 9_000_000, 2_500_000], pa.int64())
    batch = pa.table({BATCH_TS: us})
    # The stream had reached W + lag = 4_000 + 1_000 ms: delays 0, -, 4_000, 0, 2_500.
    want = DelayHistogram.of(np.array([0, 4_000, 0, 2_500])).counts
    assert delay_counts(batch, 4_000, 1_000).tolist() == list(want)
    assert delay_counts(batch, None, 1_000).tolist() == []  # no watermark yet: nothing to measure against


def _advice_of_a_job(session: kp.Session, lateness_ms: int) -> WatermarkAdvice:
    """Three micro-batches through a per-user 1 s count; the job's advice for completeness 1."""
    stream, sender = session.memory_stream("user_id bigint, event_time bigint")
    windowed = stream.watermark("event_time", 0).key_by("user_id").tumbling_window(1_000)
    job = windowed.allowed_lateness(lateness_ms).agg(kp.count(kp.col("*"))).start()
    try:
        for batch in ([(1, 1_000), (1, 3_000)], [(1, 1_500), (2, 5_000)], [(2, 4_900)]):
            sender.send([{"user_id": u, "event_time": t} for u, t in batch])
            job.process_all_available()
        return job.advise_watermark(completeness=1.0)
    finally:
        job.stop()


@pytest.mark.spark
def test_a_stateful_job_advises_from_what_its_operator_measured(session: kp.Session) -> None:
    advice = _advice_of_a_job(session, 10_000)  # allowed lateness: the stateful lowering
    # The first batch met no watermark; then 1_500 is 1_500 behind 3_000, 5_000 is ahead, 4_900 100 behind.
    assert advice.profile.events == 3 and advice.profile.behind == 2
    assert 1_500 <= advice.lag_ms <= 1_515
    assert advice.current_completeness == pytest.approx(1 / 3)
    assert advice.windows_held is None and "windows held" not in str(advice)


@pytest.mark.spark
def test_a_job_advises_from_the_batches_it_read(session: kp.Session) -> None:
    advice = _advice_of_a_job(session, 0)  # the native lowering: its input is read again
    assert advice.profile.events == 5 and advice.profile.behind == 2
    assert 1_500 <= advice.lag_ms <= 1_515  # 1_500 behind 3_000, the larger delay
    assert advice.current_completeness == pytest.approx(3 / 5)


def test_the_completeness_curve_marks_the_current_and_the_advised_lag() -> None:
    from krishiv_py import viz

    advice = advise_watermark(
        records(generated(5_000, mean_delay_ms=300, seed=2)).watermark("event_time", 100), completeness=0.99
    )
    fig = viz.completeness(advice)
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[1:] == [
        f"current lag: 100 ms ({advice.current_completeness:.2%})",
        f"advised lag: {advice.lag_ms:,} ms (99.00%)",
    ]
    xs, ys = (np.asarray(v, np.float64) for v in ax.lines[0].get_data())
    assert list(ys) == sorted(ys) and ys[-1] == 1.0 and len(xs) > 10
    with pytest.raises(kp.PlanError, match="draws a WatermarkAdvice"):
        viz.completeness(cast(Any, advice.profile))


# --- the automatic lag (SPEC 3.4) ----------------------------------------------------------


def test_the_automatic_lag_is_a_quantile_of_the_delays_before_each_step() -> None:
    from krishiv_py.model.auto_lag import AutoLagTracker

    spec = kp.AutoLag(quantile=0.5, window_rows=6, warmup_rows=4, min_lag_ms=10, max_lag_ms=1_000)
    t = AutoLagTracker(spec)
    t.step([100, 80, 60])  # the first step counts from its own highest time: 0, 20, 40
    assert t.lag_ms() == 1_000  # three rows, four to warm up: the upper clamp
    t.step([50, 200])  # against 100: 50, 0
    assert t.window() == [0, 0, 20, 40, 50] and t.lag_ms() == 20  # the 3rd smallest of 5
    t.step([150, 195, 199])  # against 200: 50, 5, 1
    # 8 delays for 6 places: the oldest step (0, 20, 40) keeps one, evenly over its order: 20
    assert t.window() == [0, 1, 5, 20, 50, 50] and t.lag_ms() == 10  # 5, clamped up to 10
    t.step([9_000])
    assert t.highest_ms == 9_000 and t.rows == 9
    # Which row of a step came first is not defined: the same rows in any order, the same lags.
    shuffled = AutoLagTracker(spec)
    for step in ([60, 100, 80], [200, 50], [199, 150, 195], [9_000]):
        shuffled.step(step)
    assert shuffled.window() == t.window() and shuffled.lag_ms() == t.lag_ms()
    with pytest.raises(kp.PlanError, match="quantile is a fraction"):
        kp.AutoLag(quantile=1)
    with pytest.raises(kp.PlanError, match="window_rows is a whole number of rows >= 1"):
        kp.AutoLag(window_rows=0)
    with pytest.raises(kp.PlanError, match=r"min_lag_ms \(10\) is above max_lag_ms \(5\)"):
        kp.AutoLag(min_lag_ms=10, max_lag_ms=5)


def test_a_model_step_runs_with_the_lag_its_predecessors_chose() -> None:
    auto = kp.AutoLag(quantile=0.9, window_rows=100, warmup_rows=2, min_lag_ms=0)
    model = ReferenceModel(
        window=TumblingWindow(size_ms=1_000),
        event_time="ts",
        lag_ms=auto,
        aggregates=[AggSpec(name="n", func="count", column=None)],
    )
    assert model.source_lags() == {"main": auto.max_lag_ms}
    assert model.send([{"ts": 1_000}, {"ts": 400}]) == []  # lag 7 days: nothing closes
    assert model.source_lags() == {"main": 600}  # delays 0, 600 (against the step's own 1,000)
    # The next step runs with 600: the watermark after it is 2,500 - 600 and [0, 1000) fires.
    assert model.send([{"ts": 2_500}, {"ts": 1_700}]) == [{"window_start": 0, "window_end": 1_000, "n": 1}]
    assert model.source_lags() == {"main": 600}  # 2,500 and 1,700 are ahead of 1,000: delays 0, 600, 0, 0
    # 1,800 is behind the watermark (1,900) but its window is open: mildly late, then it fires.
    out = model.send([{"ts": 2_600}, {"ts": 1_800}])
    assert out == [{"window_start": 1_000, "window_end": 2_000, "n": 3}]
    assert (model.metrics.mildly_late_events, model.metrics.very_late_events) == (1, 0)
    assert model.source_lags() == {"main": 700}  # against 2,500: 0, 600, 0, 0, 0, 700


def test_what_if_replays_an_automatic_lag_and_it_meets_the_advised_one() -> None:
    table = generated(4_000, mean_delay_ms=300, seed=11)
    source = records(table)

    def pipeline(s: Stream) -> Stream:
        return (
            s.watermark("event_time", 0).key_by("user_id").tumbling_window(2_000).agg(kp.count(kp.col("*")))
        )

    # One row per micro-batch: a row's delay is then the one the advisor measures (against every row
    # before it); a window holding every row: the automatic lag ends at the advised lag for 95 %.
    auto = kp.AutoLag(window_rows=4_000, min_lag_ms=0)
    got = what_if(source, pipeline, lag_ms=[1_000, "auto", auto], batch_rows=1).to_pylist()
    fixed, default, whole = got
    assert (fixed["lag_ms"], fixed["auto_lag"], fixed["final_lag_ms"]) == (1_000, None, 1_000)
    assert default["lag_ms"] is None and default["auto_lag"] == repr(kp.AutoLag())
    advised = advise_watermark(pipeline(source), completeness=0.95).lag_ms
    assert whole["final_lag_ms"] <= advised <= whole["final_lag_ms"] * 1.01 + 1
    # The same replay as the model run with the lag (the model is the oracle what_if runs).
    batches = [b.to_pylist() for b in read_batches(source.plan, 1)]
    model = reference_model_for(pipeline(source), clock=lambda: 0.0, lag=auto)
    for b in batches:
        model.send(b)
    model.close()
    m = model.metrics
    assert (whole["on_time"], whole["mildly_late"], whole["very_late"]) == (
        m.on_time_events,
        m.mildly_late_events,
        m.very_late_events,
    )
    # About 5 % of the rows behind a 95 % lag (none in the warm-up's first 250, at the upper clamp).
    assert 0.03 < (whole["mildly_late"] + whole["very_late"]) / 4_000 < 0.06
    with pytest.raises(kp.PlanError, match="every value is a whole number of ms >= 0 or 'auto', got 'fast'"):
        what_if(source, pipeline, lag_ms=[cast(Any, "fast")])
