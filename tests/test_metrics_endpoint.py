"""The Prometheus endpoint: scraped over HTTP on loopback, read with prometheus_client's own parser.

The endpoint's reading of jobs is tested against jobs made here (no
Spark); ``examples/metrics_endpoint.py`` scrapes a running Spark job and
checks its figures, and the last test here a session's endpoint over two
Spark jobs.
"""

from __future__ import annotations

import datetime as dt
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

import krishiv_py as kp
from krishiv_py.errors import JobError, SessionError
from krishiv_py.metrics import JobMetrics
from krishiv_py.runtime.durability import profile
from krishiv_py.runtime.handle import JobProgress
from krishiv_py.runtime.metrics_endpoint import BATCH_SECONDS_BUCKETS, MetricsEndpoint
from krishiv_py.runtime.spark_engine import SparkEngine

NOW_S = 1_700_000_100.0
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def figures(**over: Any) -> JobMetrics:
    base: dict[str, Any] = {
        "input_rows": 120,
        "batches": 4,
        "invalid_events": 1,
        "on_time_events": 110,
        "mildly_late_events": 6,
        "very_late_events": 3,
        "future_events": 0,
        "windows_emitted": 9,
        "retractions": 2,
        "state_evictions": None,
        "watermark_ms": 1_700_000_000_000,
        "watermark_advances": 3,
        "state_windows": 5,
        "source_watermarks": {"clicks": 1_700_000_000_000, "orders": 1_699_999_990_000},
        "idle_sources": frozenset({"orders"}),
    }
    return JobMetrics(**(base | over))


def batch(batch_id: int, ms: int, state_rows: int | None = None) -> JobProgress:
    raw: dict[str, Any] = {"batchId": batch_id}
    if state_rows is not None:
        raw["stateOperators"] = [{"numRowsTotal": state_rows - 1}, {"numRowsTotal": 1}]
    return JobProgress(batch_id=batch_id, input_rows=1, duration_ms=ms, watermark_ms=None, raw=raw)


@attrs.define
class FakeJob:
    """What the endpoint reads of a job, set by the test."""

    name: str | None
    m: JobMetrics = attrs.field(factory=figures)
    batches: list[JobProgress] = attrs.field(factory=list)
    state: str = "running"
    broken: bool = False

    def metrics(self) -> JobMetrics:
        if self.broken:
            raise JobError("the Spark Connect server is gone")
        return self.m

    def progress(self) -> list[JobProgress]:
        return self.batches


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def job_series(values: dict[Any, float], job: str) -> dict[str, float]:
    """The samples labelled ``job`` alone, by name."""
    return {name: v for (name, labels), v in values.items() if labels == (("job", job),)}


@pytest.fixture
def endpoint_of() -> Any:
    made: list[MetricsEndpoint] = []

    def make(*jobs: FakeJob, **kw: Any) -> MetricsEndpoint:
        e = MetricsEndpoint(
            lambda: [(j.name or f"job-{i}", j) for i, j in enumerate(jobs)], clock=lambda: NOW_S, **kw
        )
        made.append(e)
        return e

    yield make
    for e in made:
        e.stop()


def test_every_observed_figure_is_served_with_the_job_label_and_none_is_left_out(endpoint_of: Any) -> None:
    job = FakeJob("clicks_per_minute", batches=[batch(0, 80), batch(1, 400, state_rows=17)])
    e = endpoint_of(job)
    assert e.url.startswith("http://127.0.0.1:") and e.url.endswith("/metrics")
    values = scrape(e.url)
    mine = job_series(values, "clicks_per_minute")
    assert mine["krishiv_window_input_rows_total"] == 120
    assert mine["krishiv_window_very_late_events_total"] == 3
    assert mine["krishiv_window_retractions_total"] == 2
    assert mine["krishiv_window_watermark_ms"] == 1_700_000_000_000
    assert mine["krishiv_window_state_windows"] == 5
    assert mine["krishiv_job_running"] == 1
    assert mine["krishiv_job_state_rows"] == 17  # summed over the last micro-batch's state operators
    assert mine["krishiv_job_watermark_lag_seconds"] == pytest.approx(100.0)
    # A figure this lowering cannot observe is left out, never served as zero.
    assert not any(name.startswith("krishiv_window_state_evictions") for name, _ in values)
    per_source = {
        (name, dict(labels)["source"]): v for (name, labels), v in values.items() if "source" in dict(labels)
    }
    assert per_source == {
        ("krishiv_window_source_watermark_ms", "clicks"): 1_700_000_000_000,
        ("krishiv_window_source_watermark_ms", "orders"): 1_699_999_990_000,
        ("krishiv_window_source_idle", "clicks"): 0,
        ("krishiv_window_source_idle", "orders"): 1,
    }


def test_a_joins_rows_are_served_as_joined_rows_not_as_window_results(endpoint_of: Any) -> None:
    windows = FakeJob("per_minute")
    join = FakeJob("enriched", m=figures(windows_emitted=None, joined_rows=14))
    values = scrape(endpoint_of(windows, join).url)
    assert job_series(values, "per_minute")["krishiv_window_windows_emitted_total"] == 9
    assert "krishiv_window_joined_rows_total" not in job_series(values, "per_minute")
    assert job_series(values, "enriched")["krishiv_window_joined_rows_total"] == 14
    assert "krishiv_window_windows_emitted_total" not in job_series(values, "enriched")
    text = join.m.to_prometheus(job="enriched")
    assert 'krishiv_window_joined_rows_total{job="enriched"} 14' in text and "windows_emitted" not in text


def test_micro_batch_durations_are_a_histogram_that_counts_each_batch_once(endpoint_of: Any) -> None:
    job = FakeJob("j", batches=[batch(0, 80), batch(1, 400)])
    e = endpoint_of(job)

    def histogram() -> tuple[dict[str, float], float, float]:
        values = scrape(e.url)
        buckets = {
            dict(labels)["le"]: v
            for (name, labels), v in values.items()
            if name == "krishiv_job_batch_duration_seconds_bucket"
        }
        mine = job_series(values, "j")
        return (
            buckets,
            mine["krishiv_job_batch_duration_seconds_count"],
            mine["krishiv_job_batch_duration_seconds_sum"],
        )

    buckets, count, total = histogram()
    assert len(buckets) == len(BATCH_SECONDS_BUCKETS) + 1
    assert (buckets["0.1"], buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (1, 1, 2, 2)
    assert count == 2 and total == pytest.approx(0.48)
    assert histogram()[1] == 2  # scraped again: the same two micro-batches, not four
    job.batches += [batch(2, 3_000), batch(3, 200_000)]
    buckets, count, total = histogram()
    assert (buckets["2.5"], buckets["5.0"], buckets["120.0"], buckets["+Inf"]) == (2, 3, 3, 4)
    assert count == 4 and total == pytest.approx(203.48)


def test_a_finished_job_keeps_its_final_figures_without_a_lag_and_a_gone_one_only_says_so(
    endpoint_of: Any,
) -> None:
    done = FakeJob("done", m=figures(watermark_ms=kp.END_OF_TIME_MS), state="finished")
    gone = FakeJob("gone", state="failed", broken=True)
    values = scrape(endpoint_of(done, gone).url)
    finished = job_series(values, "done")
    assert finished["krishiv_job_running"] == 0 and finished["krishiv_window_input_rows_total"] == 120
    assert "krishiv_job_watermark_lag_seconds" not in finished  # end of input is no lag
    assert job_series(values, "gone") == {"krishiv_job_running": 0}


def test_bad_ports_a_port_in_use_and_a_missing_client_are_session_errors_that_say_what_to_do(
    endpoint_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for port in (-1, 70_000, "9100", True):
        with pytest.raises(SessionError, match="port must be an integer from 0"):
            endpoint_of(FakeJob("j"), port=port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SessionError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            endpoint_of(FakeJob("j"), port=port)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(
        SessionError, match=r"python -m pip install '\.\[metrics\]' \(in the krishiv_py clone\)"
    ):
        endpoint_of(FakeJob("j"))


def test_a_stopped_endpoint_answers_no_more(endpoint_of: Any) -> None:
    e = endpoint_of(FakeJob("j"))
    scrape(e.url)
    e.stop()
    e.stop()  # again: nothing
    assert not e.serving
    with pytest.raises(urllib.error.URLError):
        scrape(e.url)


def test_a_session_endpoint_labels_a_name_started_again_by_its_newest_job(tmp_path: Path) -> None:
    engine = SparkEngine(None, owns_spark=False, state_dir=str(tmp_path), profile=profile("dev-local"))
    old = FakeJob("orders", m=figures(input_rows=5), state="stopped")
    engine.jobs += [old, FakeJob("clicks"), FakeJob("orders", m=figures(input_rows=7))]  # type: ignore[list-item]
    url = engine.serve_metrics()
    with pytest.raises(SessionError, match="already serves"):
        engine.serve_metrics()
    values = scrape(url)
    assert job_series(values, "orders")["krishiv_window_input_rows_total"] == 7
    assert job_series(values, "clicks")["krishiv_job_running"] == 1
    engine.jobs.append(FakeJob("later", m=figures(input_rows=1)))  # type: ignore[arg-type]
    assert job_series(scrape(url), "later")["krishiv_window_input_rows_total"] == 1
    engine.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(url)


def test_a_running_spark_job_serves_its_figures_and_the_endpoint_stops_with_it(session: kp.Session) -> None:
    clicks, sender = session.memory_stream("user_id string, event_time timestamp", name="metric_clicks")
    job = (
        clicks.watermark("event_time", 1_000)
        .key_by("user_id")
        .tumbling_window(10_000)
        .agg(kp.count(kp.col("*")).alias("n"))
        .start(name="metric_clicks_job")
    )
    try:
        url = job.serve_metrics()
        with pytest.raises(SessionError, match="already serves its metrics on " + url):
            job.serve_metrics()
        sender.send([{"user_id": "a", "event_time": T0 + dt.timedelta(seconds=1)}])
        sender.send([{"user_id": "a", "event_time": T0 + dt.timedelta(seconds=30)}])
        job.process_all_available()
        mine = job_series(scrape(url), "metric_clicks_job")
        m = job.metrics()
        assert mine["krishiv_window_input_rows_total"] == m.input_rows == 2
        assert mine["krishiv_window_batches_total"] == m.batches
        assert mine["krishiv_job_running"] == 1
        assert mine["krishiv_job_batch_duration_seconds_count"] == len(job.progress())
        assert mine["krishiv_job_state_rows"] >= 1  # the native aggregation's open window
    finally:
        job.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(url)
