"""Stream window results to Parquet, exactly once across a restart.

The job writes to ``kp.ParquetSink(path)`` with an explicit
``checkpoint_dir``. It is stopped after the first step and started again
with the same checkpoint directory: it resumes from the last committed
micro-batch, so no result is lost or written twice. The results are then
read back, with ``job.results()`` and as a new bounded stream.

Run with ``python examples/parquet_sink.py``.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile

import krishiv_py as kp

SCHEMA = "sensor string, ts timestamp, temp double"
RESULT_SCHEMA = (
    "sensor string, window_start timestamp, window_end timestamp, avg_temp double, max_temp double"
)
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def readings(first_s: int, last_s: int) -> list[dict[str, object]]:
    """One reading every 3 s from two sensors, ``first_s <= t < last_s``."""
    return [
        {"sensor": sensor, "ts": T0 + dt.timedelta(seconds=s), "temp": 20.0 + s / 10 + offset}
        for s in range(first_s, last_s, 3)
        for sensor, offset in (("s1", 0.0), ("s2", 1.5))
    ]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, kp.Session.embedded(app_name="krishiv-parquet") as session:
        out = os.path.join(tmp, "results")
        checkpoint = os.path.join(tmp, "checkpoint")
        stream, sender = session.memory_stream(SCHEMA, name="readings")
        per_10s = (
            stream.watermark("ts", 0)
            .key_by("sensor")
            .tumbling_window(10_000)
            .agg(kp.avg(kp.col("temp")), kp.max(kp.col("temp")))
        )

        job = per_10s.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
        sender.send(readings(0, 30))
        job.process_all_available()
        print(f"before the restart: {job.results().num_rows} windows committed")
        job.stop()

        sender.send(readings(30, 60))  # sent while no job runs
        job = per_10s.start(kp.ParquetSink(out), checkpoint_dir=checkpoint)
        sender.close()
        job.await_termination()

        results = job.results().sort_by([("sensor", "ascending"), ("window_start", "ascending")])
        print(results.to_pandas().to_string(index=False))
        assert results.num_rows == 12, results  # 2 sensors x 6 windows of 10 s
        keys = [(r["sensor"], r["window_start"]) for r in results.to_pylist()]
        assert len(set(keys)) == len(keys), "a window was written twice"

        # The output directory is an ordinary Parquet source for the next pipeline.
        per_minute = (
            session.read_parquet(out, RESULT_SCHEMA)
            .watermark("window_start", 0)
            .key_by("sensor")
            .tumbling_window(60_000)
            .agg(kp.max(kp.col("max_temp")))
            .collect()
        )
        print(per_minute.to_pandas().to_string(index=False))
        maxima = sorted(round(v, 6) for v in per_minute.column("max_max_temp").to_pylist() if v is not None)
        assert maxima == [25.7, 27.2], maxima


if __name__ == "__main__":
    main()
