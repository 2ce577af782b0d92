"""A running job's automatic lag (SPEC 3.4): the lag recorded per micro-batch, on real Spark.

The job's results, watermark and lag after every micro-batch are the
reference model's after the same steps (the model's automatic lag is
:mod:`krishiv_py.model.auto_lag`, independent of the operator's); a job
stopped and started again on its checkpoint gives an uninterrupted run's
rows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import krishiv_py as kp
from krishiv_py.testing import assert_same_rows, reference_model_for

SCHEMA = "k string, ts bigint"
AUTO = kp.AutoLag(quantile=0.9, window_rows=40, warmup_rows=12, min_lag_ms=0, max_lag_ms=2_000)


def pipeline(stream: kp.Stream) -> kp.Stream:
    return stream.watermark("ts", AUTO).key_by("k").tumbling_window(100).agg(kp.count(kp.col("*")))


def batches(seed: int, count: int = 9, *, spread: int = 30, tail: int = 400) -> list[list[dict[str, Any]]]:
    """Micro-batches of three keys: most rows up to ``spread`` ms behind the front, a tenth 60 ms
    to ``tail``."""
    rng = np.random.default_rng(seed)
    out = []
    front = 10_000
    for _ in range(count):
        n = int(rng.integers(8, 30))
        front += int(rng.integers(60, 200))
        behind = rng.integers(0, spread + 1, n) + (rng.random(n) < 0.1) * rng.integers(60, tail + 1, n)
        keys = rng.choice(["a", "b", "c"], n)
        out.append([{"k": str(k), "ts": int(front - d)} for k, d in zip(keys, behind, strict=True)])
    return out


def test_the_automatic_lag_runs_on_krishivs_operator_and_explain_says_why(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    auto = pipeline(stream)
    text = auto.explain()
    assert "== Lowering: stateful ==" in text and "an automatic watermark lag" in text
    with pytest.raises(kp.PlanError, match="automatic watermark lag"):
        auto.start(lowering="native")
    other, _ = session.memory_stream(SCHEMA)
    running = stream.watermark("ts", "auto").key_by("k").agg(kp.count(kp.col("*")))
    with pytest.raises(kp.PlanError, match="runs where a window or a join takes the rows of its sources"):
        running.start(lowering="stateful")
    mixed = stream.watermark("ts", "auto").union(other.watermark("ts", 10)).tumbling_window(100)
    with pytest.raises(
        kp.PlanError, match=r"has it on every watermark: the one on 'ts' of .* has a fixed lag"
    ):
        mixed.agg(kp.count(kp.col("*"))).start(lowering="stateful")
    joined = (
        stream.watermark("ts", "auto")
        .key_by("k")
        .interval_join(other.watermark("ts", 10).key_by("k"), between=(0, 10))
    )
    with pytest.raises(kp.PlanError, match="has it on every watermark"):
        joined.start(lowering="stateful")


def test_each_micro_batch_runs_at_the_models_automatic_watermark(session: kp.Session, tmp_path: Path) -> None:
    """After each micro-batch, the job's watermark and lag are the model's after the same step;
    at the end its windows (late rows dropped by those watermarks) are the model's."""
    stream, sender = session.memory_stream(SCHEMA, name="auto_lag_clicks")
    built = pipeline(stream)
    model = reference_model_for(built)
    job = built.start(checkpoint_dir=str(tmp_path / "cp"))
    try:
        assert job.source_lags() == {"auto_lag_clicks": AUTO.max_lag_ms}  # until warmed up
        lags = []
        steps = batches(1)
        for rows in steps:
            sender.send(rows)
            model.send(rows)
            job.process_all_available()
            assert job.watermark_ms == model.watermark_ms
            assert job.source_lags() == {"auto_lag_clicks": model.source_lags()["main"]}
            lags.append(model.source_lags()["main"])
        assert max(lags) < 400 and len(set(lags)) > 1  # chosen from the data, and moving
        assert os.listdir(tmp_path / "cp" / "krishiv-auto-lag")
        metrics = job.metrics()
        assert metrics.source_lags == {"auto_lag_clicks": lags[-1]}
        assert (
            f'krishiv_window_source_lag_ms{{source="auto_lag_clicks"}} {lags[-1]}' in metrics.to_prometheus()
        )
        # The job's own delay profile (the exact times it reported; the first micro-batch has none).
        advice = job.advise_watermark()
        assert advice.windows_held is None and advice.profile.events == sum(map(len, steps[1:]))
        sender.close()
        model.close()
        assert job.await_termination(timeout_s=120)
        assert model.metrics.very_late_events > 0  # the lag let some rows be late
        assert job.metrics().very_late_events == model.metrics.very_late_events
        assert_same_rows(job.results(), model.results)
    finally:
        job.stop()


def test_each_source_of_a_union_chooses_its_own_lag(session: kp.Session, tmp_path: Path) -> None:
    """Two sources with an automatic lag each, one nearly in order and one far out of order: each
    chooses its lag from its own rows' delays, and the watermark is the least of theirs. After
    every micro-batch the job's lags and watermarks are the model's; at the end its windows."""
    calm, calm_sender = session.memory_stream(SCHEMA, name="auto_lag_calm")
    wild, wild_sender = session.memory_stream(SCHEMA, name="auto_lag_wild")
    built = (
        calm.watermark("ts", AUTO)
        .union(wild.watermark("ts", AUTO))
        .key_by("k")
        .tumbling_window(100)
        .agg(kp.count(kp.col("*")))
    )
    model = reference_model_for(built)
    job = built.start(checkpoint_dir=str(tmp_path / "cp"))
    senders = {"auto_lag_calm": calm_sender, "auto_lag_wild": wild_sender}
    steps = {
        "auto_lag_calm": batches(4, spread=3, tail=80),
        "auto_lag_wild": batches(5, spread=500, tail=900),
    }
    try:
        for i in range(len(steps["auto_lag_calm"])):
            for name, sender in senders.items():
                sender.send(steps[name][i])
                model.send(steps[name][i], source=name)
                job.process_all_available()
                assert job.source_lags() == model.source_lags(), (i, name)
                assert job.watermark_ms == model.watermark_ms, (i, name)
        lags = job.source_lags()
        assert lags["auto_lag_calm"] < lags["auto_lag_wild"]  # each from its own delays
        metrics = job.metrics()
        assert metrics.source_lags == lags
        assert set(metrics.source_watermarks) == set(lags)
        for name, lag in lags.items():
            assert f'krishiv_window_source_lag_ms{{source="{name}"}} {lag}' in metrics.to_prometheus()
        card = repr(job)  # the notebook card's text: each source's lag
        assert "lag (automatic)" in card
        assert all(f"{name} {lag:,} ms" in card for name, lag in lags.items())
        wild_sender.close()  # a closed source holds nothing back ...
        model.close(source="auto_lag_wild")
        job.process_all_available()
        assert job.watermark_ms == model.watermark_ms == job.source_watermarks()["auto_lag_calm"]
        calm_sender.close()
        model.close(source="auto_lag_calm")
        assert job.await_termination(timeout_s=120)
        assert model.metrics.very_late_events > 0
        assert job.metrics().very_late_events == model.metrics.very_late_events
        assert_same_rows(job.results(), model.results)
    finally:
        job.stop()


def test_each_side_of_a_join_chooses_its_own_lag(session: kp.Session, tmp_path: Path) -> None:
    """An interval join of two streams with an automatic lag each: each side chooses its lag
    from its own rows, the join's watermark is the least of theirs, rows behind it are very late.
    After every micro-batch the job's lags, watermark and joined rows are the join model's."""
    from krishiv_py.model.joins import join_model_for
    from krishiv_py.plan import nodes as n

    clicks, click_sender = session.memory_stream(SCHEMA, name="auto_join_clicks")
    views, view_sender = session.memory_stream(SCHEMA, name="auto_join_views")
    joined = (
        clicks.watermark("ts", AUTO)
        .key_by("k")
        .interval_join(views.watermark("ts", AUTO).key_by("k"), between=(-50, 50))
    )
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    job = joined.start(checkpoint_dir=str(tmp_path / "cp"))
    sides = {"left": ("auto_join_clicks", click_sender), "right": ("auto_join_views", view_sender)}
    steps = {"left": batches(6, spread=3, tail=80), "right": batches(7, spread=500, tail=900)}
    try:
        for i in range(len(steps["left"])):
            for side, (_, sender) in sides.items():
                sender.send(steps[side][i])
                model.send(steps[side][i], side=side)  # type: ignore[arg-type]
                job.process_all_available()
                lags = model.source_lags()
                assert job.source_lags() == {sides[s][0]: lags[s] for s in sides}, (i, side)
                assert job.watermark_ms == model.watermark_ms, (i, side)
                assert_same_rows(job.results(), model.results)
        lags = job.source_lags()
        assert lags["auto_join_clicks"] < lags["auto_join_views"]  # each side from its own delays
        assert model.metrics["very_late_events"] > 0
        assert job.metrics().very_late_events == model.metrics["very_late_events"]
    finally:
        job.stop()


def test_a_directory_of_files_runs_at_the_models_automatic_watermark(
    session: kp.Session, tmp_path: Path
) -> None:
    """The automatic lag over a file source: a file per micro-batch, each one of the model's steps."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    incoming, staging = tmp_path / "in", tmp_path / "staging"
    incoming.mkdir()
    staging.mkdir()
    built = pipeline(session.read_parquet(str(incoming), SCHEMA, name="auto_lag_files", streaming=True))
    model = reference_model_for(built)
    job = built.start(checkpoint_dir=str(tmp_path / "cp"))
    try:
        lags = []
        for i, rows in enumerate(batches(3)):
            name = f"part-{i:03d}.parquet"
            table = pa.table(
                {"k": pa.array([r["k"] for r in rows]), "ts": pa.array([r["ts"] for r in rows], pa.int64())}
            )
            pq.write_table(table, staging / name)
            os.replace(staging / name, incoming / name)  # the source sees whole files only
            model.send(rows)
            job.process_all_available()
            assert job.watermark_ms == model.watermark_ms, i
            assert job.source_lags() == {"auto_lag_files": model.source_lags()["main"]}, i
            lags.append(model.source_lags()["main"])
        assert len(set(lags)) > 1  # the lag moved with the files' disorder
        assert model.metrics.very_late_events > 0
        assert job.metrics().very_late_events == model.metrics.very_late_events
        assert len(model.results) > 0  # windows the watermarks fired so far
        assert_same_rows(job.results(), model.results)
    finally:
        job.stop()


def test_a_job_restarted_on_its_checkpoint_keeps_the_recorded_lags(
    session: kp.Session, tmp_path: Path
) -> None:
    """Stopped after four micro-batches and started again, the job runs the rest at the lags and
    watermarks an uninterrupted run has: the model's rows, none lost or repeated."""
    stream, sender = session.memory_stream(SCHEMA, name="auto_lag_restarted")
    built = pipeline(stream)
    model = reference_model_for(built)
    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    steps = batches(2)
    job = built.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        for rows in steps[:4]:
            sender.send(rows)
            model.send(rows)
            job.process_all_available()
    finally:
        job.stop()
    job = built.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
    try:
        job.process_all_available()
        assert job.watermark_ms == model.watermark_ms
        assert job.source_lags() == {"auto_lag_restarted": model.source_lags()["main"]}
        for rows in steps[4:]:
            sender.send(rows)
            model.send(rows)
            job.process_all_available()
            assert job.watermark_ms == model.watermark_ms
        sender.close()
        model.close()
        assert job.await_termination(timeout_s=120)
        assert_same_rows(job.results(), model.results)
    finally:
        job.stop()


def test_the_future_events_of_a_warm_up_are_named_as_such_not_as_clock_skew(
    session: kp.Session, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the automatic lag has seen enough rows it holds the watermark its upper clamp behind
    the newest events; events ahead of that watermark by more than the future tolerance are
    counted as future events, and the warning says why (not "clock skew?")."""
    stream, sender = session.memory_stream(SCHEMA, name="auto_warm_up")
    lag = kp.AutoLag(max_lag_ms=100_000, warmup_rows=1_000)
    built = (
        stream.watermark("ts", lag, future_tolerance_ms=1_000)
        .key_by("k")
        .tumbling_window(100)
        .agg(kp.count(kp.col("*")))
    )
    job = built.start(checkpoint_dir=str(tmp_path / "cp"))
    try:
        with caplog.at_level("WARNING"):
            sender.send([{"k": "a", "ts": 1_000}])
            job.process_all_available()
            sender.send([{"k": "a", "ts": 200_000 + i} for i in range(5)])
            job.process_all_available()
    finally:
        job.stop()
    assert job.metrics().future_events
    warned = [r.getMessage() for r in caplog.records if "future tolerance" in r.getMessage()]
    assert warned and all("automatic lag holds the watermark 100000 ms" in w for w in warned)
    assert not any("clock skew" in w for w in warned)
