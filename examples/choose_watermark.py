"""Choose the watermark lag from the data: profile, advice, what-if replay.

Clicks arrive about one every 10 ms for five minutes, up to 2 s out of
order, and 1 % of them 5 to 60 s late (the benchmark's clickstream
disorder). They are written as 10 Parquet files.

1. ``kp.advise_watermark`` profiles the clicks' delays (how far each lies
   behind the newest click before it) and advises a lag and an allowed
   lateness for a 1-minute count per user.
2. ``kp.what_if`` replays the same clicks, one second of them per
   micro-batch (``batch_rows=100``; by default one file per micro-batch),
   through the reference model under a few settings: what each would have
   emitted, dropped and corrected, and how late its results would have come.

The advice and the replay read the files with Arrow and run no Spark job
(the session is there for its file source; it is stopped at the end). The
printed table marks the advised setting.
Run with ``python examples/choose_watermark.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import krishiv_py as kp

EVENTS, FILES, USERS = 30_000, 10, 100
T0_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def write_clicks(root: Path) -> None:
    rng = np.random.default_rng(7)
    event_ms = T0_MS + np.arange(EVENTS) * 10 - rng.integers(0, 2_001, EVENTS)
    late = rng.random(EVENTS) < 0.01
    event_ms[late] -= rng.integers(5_001, 60_001, int(late.sum()))
    clicks = pa.table(
        {
            "user_id": pa.array([f"u{u}" for u in rng.integers(0, USERS, EVENTS)]),
            "event_time": pa.array(event_ms * 1000, pa.timestamp("us", tz="UTC")),
        }
    )
    per_file = EVENTS // FILES
    for i in range(FILES):
        pq.write_table(clicks.slice(i * per_file, per_file), root / f"clicks-{i:03d}.parquet")


def per_user_minutes(clicks: kp.Stream) -> kp.Stream:
    windowed = clicks.watermark("event_time", 2_000).key_by("user_id").tumbling_window(60_000)
    return windowed.accumulation("retracting").agg(kp.count(kp.col("*")).alias("clicks"))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_clicks(Path(tmp))
        with kp.Session.embedded() as session:
            clicks = session.read_parquet(tmp)
            advise_and_replay(clicks)


def advise_and_replay(clicks: kp.Stream) -> None:
    advice = kp.advise_watermark(per_user_minutes(clicks), completeness=0.98, caught=0.9999)
    print(advice)
    # Uniform disorder up to 2 s: 98 % of the clicks need under 2 s; the late 1 % need far more.
    assert 1_800 <= advice.lag_ms <= 2_000, advice.lag_ms
    assert advice.allowed_lateness_ms > 30_000

    table = kp.what_if(
        clicks,
        per_user_minutes,
        lag_ms=sorted({0, 2_000, advice.lag_ms}),
        allowed_lateness_ms=[0, advice.allowed_lateness_ms],
        batch_rows=100,
    )
    shown = table.to_pandas()
    for column in ("mean_delay_ms", "p99_delay_ms"):
        shown[column] = shown[column].round().astype("int64")
    is_advised = (shown["lag_ms"] == advice.lag_ms) & (
        shown["allowed_lateness_ms"] == advice.allowed_lateness_ms
    )
    shown[""] = ["<- advised" if a else "" for a in is_advised]
    print(shown.to_string(index=False))
    rows = table.to_pylist()
    (advised,) = [r for r, a in zip(rows, is_advised, strict=True) if a]
    no_lag = rows[0]
    assert no_lag["very_late"] > advised["very_late"]  # lag and lateness keep what lag 0 drops
    assert advised["differing_windows"] < no_lag["differing_windows"]
    assert advised["mean_delay_ms"] > no_lag["mean_delay_ms"]  # and every result waits for them


if __name__ == "__main__":
    main()
