"""Starting a streaming query: a Python process that did not connect back in time is tried again."""

from __future__ import annotations

import pytest

from krishiv_py import spark_errors
from krishiv_py.errors import JobError
from krishiv_py.spark_errors import SparkFailure, start_query, worker_connect_timed_out

#: What a Spark Connect client got when the server's foreachBatch runner did not connect back.
TIMED_OUT = (
    "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    "Caused by: java.net.SocketTimeoutException: Timed out while waiting for the Python worker "
    "to connect back"
)


class Starts:
    """A query start that fails with the given errors, in turn, then returns ``"query"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "query"


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_errors, "START_RETRY_PAUSE_S", 0.0)


def test_a_start_whose_python_process_timed_out_is_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    start = Starts(RuntimeError(TIMED_OUT), RuntimeError(TIMED_OUT))
    assert start_query("starting the streaming query", start) == "query"
    assert start.calls == 3
    warned = [r.getMessage() for r in caplog.records if r.name == "krishiv_py"]
    assert len(warned) == 2 and "attempt 1 of 3" in warned[0], warned


def test_a_start_that_keeps_timing_out_fails_after_the_last_attempt() -> None:
    start = Starts(*[RuntimeError(TIMED_OUT)] * spark_errors.START_ATTEMPTS)
    with pytest.raises(JobError, match="starting the streaming query failed") as info:
        start_query("starting the streaming query", start)
    assert start.calls == spark_errors.START_ATTEMPTS
    assert isinstance(info.value.__cause__, SparkFailure)
    assert worker_connect_timed_out(info.value.__cause__)


def test_any_other_start_failure_is_raised_at_once() -> None:
    start = Starts(RuntimeError("[STREAM_FAILED] the checkpoint is not a checkpoint"))
    with pytest.raises(JobError, match="starting the streaming query failed"):
        start_query("starting the streaming query", start)
    assert start.calls == 1


def test_the_timeout_is_told_from_other_errors() -> None:
    assert worker_connect_timed_out(RuntimeError(TIMED_OUT))
    assert worker_connect_timed_out(SparkFailure(RuntimeError(TIMED_OUT)))
    assert not worker_connect_timed_out(RuntimeError("Python worker exited unexpectedly (crashed)"))
    assert not worker_connect_timed_out(None)
