"""Watermark timeline: the quick-start pipeline's watermark, windows and late events in one picture.

Runs the pipeline of ``examples/quickstart.py`` (per-user 1-minute windows,
5 s of bounded out-of-orderness) for its three steps and draws
``job.plot_timeline()`` before the input is closed: the windows that fired,
the one still waiting for the watermark, and the event that came too late.
``docs/lateness.md`` (The watermark timeline) explains how to read it.

Needs matplotlib (``python -m pip install '.[viz]'``). Saves a PNG to
``--out`` (default: a temporary file); ``docs/timeline.png`` is made with::

    python examples/timeline.py --out docs/timeline.png
"""

from __future__ import annotations

import argparse
import os
import runpy
import tempfile
from pathlib import Path

import krishiv_py as kp
from krishiv_py.viz import Timeline

# The quick start's schema, rows and steps.
QUICKSTART = runpy.run_path(str(Path(__file__).with_name("quickstart.py")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", help="where to save the PNG (default: a temporary file)")
    args, _ = parser.parse_known_args()  # run by the test suite, the arguments are pytest's
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="krishiv-timeline-"), "timeline.png")

    with kp.Session.embedded(app_name="krishiv-timeline") as session:
        stream, sender = session.memory_stream(QUICKSTART["SCHEMA"], name="events")
        per_minute = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")).alias("events"), kp.sum(kp.col("amount")).alias("total"))
        )
        job = per_minute.start()
        for rows in QUICKSTART["STEPS"]:
            sender.send(rows)
            job.process_all_available()

        # The job's input, read back from its checkpoint and replayed step by step.
        timeline = Timeline.from_job(job)
        fig = job.plot_timeline()
        fig.savefig(out)
        print(f"saved {out}")

        counts = {c: len(timeline.classified(c)) for c in ("on_time", "mildly_late", "very_late")}
        states = {s: len(timeline.with_status(s)) for s in ("fired", "refired", "open")}
        print(f"events: {counts}; windows: {states}; watermark after each step: {timeline.watermarks}")
        assert counts == {"on_time": 8, "mildly_late": 0, "very_late": 1}, counts
        assert states == {"fired": 4, "refired": 0, "open": 1}, states  # alice's [00:02, 00:03) waits
        assert timeline.watermarks_agree  # the replay and the job saw the same watermark
        assert timeline.watermarks[-1] == job.watermark_ms

        sender.close()
        job.await_termination()


if __name__ == "__main__":
    main()
