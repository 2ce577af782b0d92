"""A Spark Connect server killed and started again under a running client: a clear error, an exact resume.

The scenario runs in a child process (``tests/_connect_restart_child.py``)
with Connect servers of its own, started and always stopped there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from krishiv_py.runtime.remote import CONNECT_MODE_ENV

ROOT = Path(__file__).resolve().parent.parent


def test_a_job_whose_connect_server_restarts_fails_clearly_and_resumes_exactly_once(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != CONNECT_MODE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_connect_restart_child.py"), str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    seen = json.loads(lines[-1].removeprefix("@@RESULT "))
    # The old job's next call: a JobError that says the server went away and how to resume.
    assert seen["error_type"] == "JobError", seen
    assert "Spark Connect server of this session is gone or was restarted" in seen["error"]
    assert "kp.Session.remote(<url>" in seen["error"] and "name=<the same name>" in seen["error"]
    assert "grpc" not in seen["error"].lower().split("spark cause")[0]
    assert seen["stop"] == "ok"  # stopping a job whose server is gone does nothing
    # Resumed by name from a new session: [0, 10) from the first run once, [10, 20) once.
    assert seen["rows"] == [[0, 2], [10, 1]]
