"""The child process of ``test_connect_restart.py``: a job over Spark Connect whose server is killed.

Run as ``python tests/_connect_restart_child.py DIR``: it starts a Connect
server, runs a named job on a streaming Parquet directory, kills the server
(SIGKILL to its process group) and starts a new one on the same port, calls
the old job, then resumes the job from a new session. It prints one line
``@@RESULT {json}`` with what it saw; the parent test judges it. A child,
because a Connect client and the test run's classic Spark share process-wide
state in pyspark.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import krishiv_py as kp
from krishiv_py.devtools.connect import ConnectServer


def main(root: Path) -> dict[str, Any]:
    (root / "in").mkdir(parents=True)
    written = [0]

    def write(*ts: int) -> None:
        written[0] += 1
        tmp = root / f".part-{written[0]}.parquet"
        pq.write_table(pa.table({"k": ["a"] * len(ts), "t": list(ts)}), tmp)
        os.replace(tmp, root / "in" / f"part-{written[0]}.parquet")

    def pipeline(s: kp.Session) -> kp.Stream:
        clicks = s.read_parquet(str(root / "in"), "k string, t bigint", streaming=True, name="clicks")
        return clicks.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))

    seen: dict[str, Any] = {}
    first = ConnectServer(log_dir=root / "server-1").start()
    second: ConnectServer | None = None
    try:
        s1 = kp.Session.remote(first.url, state_dir=str(root / "state"))
        write(1, 2)
        job = pipeline(s1).start(kp.ParquetSink(str(root / "out")), name="per-10")
        job.process_all_available()
        for p in first.processes:  # the server dies: no clean shutdown
            os.killpg(p.pid, signal.SIGKILL)
        second = ConnectServer(log_dir=root / "server-2", port=first.port).start()
        write(15)
        try:
            job.process_all_available()
            seen["error"] = None
        except Exception as exc:  # noqa: BLE001 - the parent judges the type and the message
            seen["error"], seen["error_type"] = str(exc), type(exc).__name__
        try:
            job.stop()
            seen["stop"] = "ok"
        except Exception as exc:  # noqa: BLE001
            seen["stop"] = f"{type(exc).__name__}: {exc}"
        s2 = kp.Session.remote(second.url, state_dir=str(root / "state"))
        again = pipeline(s2).start(kp.ParquetSink(str(root / "out")), name="per-10")
        write(25)
        again.process_all_available()
        seen["rows"] = sorted(
            [int(r["window_start"].timestamp() * 1000), r["n"]] for r in again.results().to_pylist()
        )
        again.stop()
        s2.stop()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    return seen


if __name__ == "__main__":
    print("@@RESULT " + json.dumps(main(Path(sys.argv[1]))), flush=True)
    # pyspark's threads that release the first server's operations retry against a server that
    # is gone for up to ten minutes, and the interpreter's exit waits for them: the servers are
    # stopped already, so leave without that wait.
    sys.stderr.flush()
    os._exit(0)
