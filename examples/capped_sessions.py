"""Capped sessions: a gap timeout and a hard maximum duration (the "double bound").

A satellite beacon that gets stuck open emits every 10 s for 5 minutes; a
gap-only session would grow for as long as it keeps emitting. With a 30 s gap
and a 2-minute cap, its beacons are cut into sessions of less than 2
minutes, and a real pass later (closed by the gap) is a session of its own.

Run with ``python examples/capped_sessions.py``.
"""

from __future__ import annotations

import datetime as dt

import krishiv_py as kp

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def beacon(sat: str, at_s: int) -> dict[str, object]:
    return {"sat": sat, "at": T0 + dt.timedelta(seconds=at_s), "snr": 10.0 + at_s % 7}


def main() -> None:
    stuck = [beacon("isl-7", t) for t in range(0, 300, 10)]
    real_pass = [beacon("isl-7", t) for t in range(360, 410, 10)]
    with kp.Session.embedded(app_name="krishiv-capped-sessions") as session:
        beacons = session.from_records(stuck + real_pass, "sat string, at timestamp, snr double")
        passes = (
            beacons.watermark("at", 5_000)
            .key_by("sat")
            .session_window(30_000, max_duration_ms=120_000)
            .agg(kp.count(kp.col("*")).alias("beacons"), kp.avg(kp.col("snr")).alias("mean_snr"))
        )
        print(passes.explain().split("== Spark recipe ==")[0])
        rows = sorted(passes.collect().to_pylist(), key=lambda r: r["window_start"])
        print("Sessions (gap 30 s, at most 2 minutes):")
        for r in rows:
            start = (r["window_start"] - T0).total_seconds()
            end = (r["window_end"] - T0).total_seconds()
            print(f"  {r['sat']}  [{start:>5.0f} s, {end:>5.0f} s)  {r['beacons']:>2} beacons")
        got = [((r["window_start"] - T0).total_seconds(), r["beacons"]) for r in rows]
        assert sorted(got) == [(0, 12), (120, 12), (240, 6), (360, 5)], got
        assert all((r["window_end"] - r["window_start"]).total_seconds() - 30 < 120 for r in rows)


if __name__ == "__main__":
    main()
