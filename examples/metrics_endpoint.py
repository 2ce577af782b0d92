"""A job's metrics for Prometheus: ``job.serve_metrics()`` and one scrape of ``/metrics``.

The job counts clicks per user and minute, with 30 s of allowed lateness;
one click arrives late but within it, one too late. The endpoint serves
every figure of ``job.metrics()``, labelled ``job="clicks_per_minute"``,
plus the watermark's lag behind the wall clock, the micro-batch durations
(a histogram) and the rows in Spark's state stores. Here the script
scrapes it itself and reads the text with prometheus_client's parser;
Prometheus would scrape the same URL (docs/observability.md).

Needs the ``metrics`` extra: ``python -m pip install '.[metrics]'``.
Run with ``python examples/metrics_endpoint.py``.
"""

from __future__ import annotations

import datetime as dt
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import krishiv_py as kp

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def click(user: str, at_s: int) -> dict[str, object]:
    return {"user_id": user, "event_time": T0 + dt.timedelta(seconds=at_s)}


def scrape(url: str) -> dict[str, float]:
    """``{series: value}`` of one scrape, a series named with its labels (``name{job=...}``)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "job")
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def main() -> None:
    with kp.Session.embedded() as session:
        clicks, sender = session.memory_stream("user_id string, event_time timestamp", name="clicks")
        per_minute = (
            clicks.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .allowed_lateness(30_000)
            .agg(kp.count(kp.col("*")).alias("clicks"))
        )
        job = per_minute.start(name="clicks_per_minute")
        url = job.serve_metrics()  # port 0: any free port on 127.0.0.1
        print("serving", url)

        sender.send([click("ann", 5), click("bob", 20), click("ann", 50)])
        sender.send([click("ann", 70)])  # the watermark passes 65 s: the first minute fires
        sender.send([click("bob", 40)])  # late, within the allowed lateness: re-fires the minute
        sender.send([click("bob", 200)])
        sender.send([click("ann", 30)])  # 30 s past the first minute's lateness: very late
        job.process_all_available()

        values = scrape(url)
        for series in (
            "krishiv_window_input_rows_total",
            "krishiv_window_on_time_events_total",
            "krishiv_window_mildly_late_events_total",
            "krishiv_window_very_late_events_total",
            "krishiv_window_windows_emitted_total",
            "krishiv_window_source_watermark_ms{source=clicks}",
            "krishiv_job_watermark_lag_seconds",
            "krishiv_job_batch_duration_seconds_count",
            "krishiv_job_running",
        ):
            print(f"  {series:<52} {values[series]:g}")

        m = job.metrics()
        assert values["krishiv_window_input_rows_total"] == m.input_rows == 7
        assert values["krishiv_window_mildly_late_events_total"] == 1
        assert values["krishiv_window_very_late_events_total"] == 1
        assert values["krishiv_job_running"] == 1
        assert values["krishiv_job_batch_duration_seconds_count"] >= 5  # a micro-batch per send at least
        # Event time is 2024 here, so the watermark is far behind today's wall clock.
        assert values["krishiv_job_watermark_lag_seconds"] > 86_400

        job.stop()  # the endpoint stops with the job
        try:
            scrape(url)
        except OSError:
            print("after job.stop(): the endpoint is gone")
        else:
            raise AssertionError("the endpoint still answers after job.stop()")


if __name__ == "__main__":
    main()
