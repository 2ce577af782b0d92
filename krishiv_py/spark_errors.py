"""One wrapping point for Spark errors: a Spark or Py4J failure becomes a :class:`~krishiv_py.JobError`.

:func:`spark_call` runs a call into Spark and raises a ``JobError`` that
carries :func:`spark_cause` (the informative lines of Spark's message, not
its Java or Py4J traceback), with :func:`restart_hint` where user code
(a sink function, a late-event handler, a pane callback: a
:class:`UserCodeError`) failed. The ``JobError`` is raised from a
:class:`SparkFailure`, Spark's error in brief, so that a traceback shows
what Spark said without the streaming query's plan or the JVM's stack
trace; the exception Spark raised is the ``SparkFailure``'s ``error``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from krishiv_py.errors import JobError, KrishivError, own_error

__all__ = [
    "GuardedQuery",
    "SparkFailure",
    "log_failures_to",
    "UserCodeError",
    "restart_hint",
    "server_gone",
    "server_gone_hint",
    "spark_brief",
    "spark_call",
    "spark_cause",
    "spark_error_text",
    "start_query",
    "worker_connect_timed_out",
]

T = TypeVar("T")
log = logging.getLogger("krishiv_py")


class UserCodeError(RuntimeError):
    """User code (a sink function, late-event handler or pane callback) raised on one micro-batch."""


def restart_hint(cause: str | None) -> str:
    """The way past a failure in user code (to append to a :class:`JobError` message), else ``""``."""
    if cause is None or f"{UserCodeError.__name__}: " not in cause:
        return ""
    return (
        "\nThe failure is in user code: fix it, or set the failing batch's rows aside by starting the "
        "pipeline again on its checkpoint with start(..., name=<the same name>, quarantine_dir=<a "
        "directory>): they go there as Parquet with the error, and the job goes on "
        "(docs/durability.md, 'Restarting past a batch that fails every time')"
    )


#: Where the full text of a failed Spark call goes (the session's log file: the session adds it).
_FAILURE_LOGS: list[Callable[[str], None]] = []


def log_failures_to(write: Callable[[str], None]) -> None:
    """Send the full text of every Spark call that fails from now on to ``write`` (the session's
    log file), so that what a ``JobError`` gives in brief is there whole."""
    _FAILURE_LOGS.append(write)


def _log_failure(what: str, exc: BaseException) -> None:
    if not _FAILURE_LOGS:
        return
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    text = f"{stamp} krishiv: {what} failed:\n{spark_error_text(exc)}\n"
    for write in list(_FAILURE_LOGS):
        try:
            write(text)
        except OSError:  # (a log that cannot be written must not hide the error)
            _FAILURE_LOGS.remove(write)


def spark_call(what: str, fn: Callable[[], T]) -> T:
    """Run a Spark call, turning any Spark/Py4J failure into a JobError (its full text to the
    session's log: :func:`log_failures_to`)."""
    try:
        return fn()
    except KrishivError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark's error in brief is the JobError's __cause__
        _log_failure(what, exc)
        cause = spark_cause(exc)
        raise JobError(
            f"{what} failed{restart_hint(cause)}{server_gone_hint(exc)}", cause=cause
        ) from SparkFailure(exc)


class SparkFailure(RuntimeError):
    """Spark's error in brief (:func:`spark_brief`), a :class:`JobError`'s ``__cause__``.

    Its message is what Spark said without the streaming query's plan and
    the JVM's stack trace; ``error`` is the exception Spark raised, all of it.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(spark_brief(error))
        self.error = error


#: What a Spark Connect client says when its server is gone, or is a new server that does not know
#: the client's session (it was restarted).
_SERVER_GONE = (
    "NO_ACTIVE_SESSION",
    "SESSION_CHANGED",
    "SESSION_NOT_FOUND",
    "SESSION_CLOSED",
    "StatusCode.UNAVAILABLE",
    "failed to connect to all addresses",
    "Cannot invoke RPC on closed channel",
)


def server_gone(exc: BaseException) -> bool:
    """True for the error of a Spark Connect call whose server is gone or was restarted."""
    return _says(exc, _SERVER_GONE)


#: What Spark says when a Python process it started did not connect back within its fixed 10 s.
_WORKER_CONNECT_TIMEOUT = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)


def worker_connect_timed_out(exc: BaseException | None) -> bool:
    """True when Spark gave up on a Python process it started before the process connected back.

    Spark waits a fixed 10 seconds (not a setting) for a new Python process
    (a ``foreachBatch`` runner on a Spark Connect server, a Python data
    source's planner) to import pyspark and connect; a loaded machine can
    miss that. Spark retries a task that fails so; nothing was started.
    """
    return exc is not None and _says(exc, _WORKER_CONNECT_TIMEOUT)


def _says(exc: BaseException, needles: tuple[str, ...]) -> bool:
    """Whether Spark's exception (the one a :class:`SparkFailure` holds) names any of ``needles``."""
    if isinstance(exc, SparkFailure):
        exc = exc.error
    text = f"{type(exc).__name__}: {exc}"
    return any(needle in text for needle in needles)


#: How many times a query start is tried when Spark gave up on a Python process before it
#: connected back (:func:`worker_connect_timed_out`), and the pause between.
START_ATTEMPTS = 3
START_RETRY_PAUSE_S = 1.0


def start_query(what: str, start: Callable[[], T]) -> T:
    """``spark_call(what, start)``, tried again while Spark timed out waiting for a Python process.

    Such a start created no query (Spark waits for the process before it
    creates one), so trying again is safe; any other failure is raised at once.
    """
    for attempt in range(1, START_ATTEMPTS):
        try:
            return spark_call(what, start)
        except JobError as exc:
            if not worker_connect_timed_out(exc.__cause__):
                raise
            log.warning(
                "%s: Spark timed out waiting for a Python process to connect back (attempt %d of %d), "
                "trying again",
                what,
                attempt,
                START_ATTEMPTS,
            )
            time.sleep(START_RETRY_PAUSE_S)
    return spark_call(what, start)


def server_gone_hint(exc: BaseException) -> str:
    """How to resume after the Spark Connect server went away (to append to a message), else ``""``."""
    if not server_gone(exc):
        return ""
    return (
        "\nThe Spark Connect server of this session is gone or was restarted, and the session's "
        "streaming queries ended with it (a server keeps them in its own JVM). Once a server answers "
        "at the same address, resume: open a new session with kp.Session.remote(<url>, "
        "state_dir=<the same>) and start the same pipeline with start(..., name=<the same name>); it "
        "resumes from its last committed micro-batch (docs/deployment.md)"
    )


class GuardedQuery:
    """A streaming query whose calls raise :class:`JobError` instead of Spark, Py4J or gRPC errors.

    Reading an attribute of the query (``isActive``, ``lastProgress``) or
    calling ``exception()`` that fails — a Spark Connect server that is
    gone, say — raises a ``JobError`` with the way back. Other methods
    (``processAllAvailable``, ``stop``) and private attributes (``_jsq``)
    pass through as they are: their callers wrap them in :func:`spark_call`
    with words of their own.
    """

    _GUARDED_CALLS = frozenset({"exception"})

    def __init__(self, query: Any) -> None:
        self._query_ = query

    def __getattr__(self, name: str) -> Any:
        query = self.__dict__["_query_"]
        if name.startswith("_"):
            return getattr(query, name)
        value = spark_call("reaching the job's query", lambda: getattr(query, name))
        if not callable(value) or name not in self._GUARDED_CALLS:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return spark_call("reaching the job's query", lambda: value(*args, **kwargs))

        return call


def spark_cause(exc: BaseException) -> str:
    """The informative part of a Spark/Py4J error: its first line and the root error line."""
    text = str(getattr(exc, "desc", None) or exc).strip()
    text = text.split("=== Streaming Query ===")[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("at ")]
    if not lines:
        return type(exc).__name__
    # Py4J puts the Java exception on a line of its own after ": " ("An error occurred while
    # calling o105.start.\n: org.apache...Exception: ..."); a chain's causes follow "Caused by: ".
    roots = [
        root
        for ln in lines[1:]
        if _ERROR_LINE.match(root := ln.removeprefix("Caused by: ").removeprefix(": "))
    ]
    if roots and "Traceback (most recent call last)" in lines[0]:
        return roots[-1]  # Python code called back from the JVM raised: its exception says it all
    if roots and lines[0].startswith("An error occurred while calling "):
        return roots[-1]  # Py4J's line names only the Java method; the exception says what failed
    if roots and roots[-1] not in lines[0]:
        return f"{lines[0]}\n{roots[-1]}"
    return lines[0]


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.$]*(Error|Exception)(\[[^\]]*\])?: ")


def spark_brief(exc: BaseException) -> str:
    """What Spark said, without the streaming query's plan or the JVM's stack trace.

    Python tracebacks in Spark's message (user code that raised in a
    Python worker) stay. For krishiv's own error raised inside Spark (a
    Kafka read, a client not installed), whose message the ``JobError``
    leads with, it is Spark's first line: where the error was raised.

    >>> print(spark_brief(RuntimeError("[STREAM_FAILED] failed\\n=== Streaming Query ===\\nLogical Plan:")))
    [STREAM_FAILED] failed
    """
    text = str(exc).strip()
    if own_error(spark_cause(exc)) is not None:
        first = text.splitlines()[0] if text else ""
        return first.removesuffix("Traceback (most recent call last):").strip() or spark_cause(exc)
    for end in ("=== Streaming Query ===", "JVM stacktrace:"):
        text = text.split(end)[0]
    lines = [ln.rstrip() for ln in text.splitlines() if not _JVM_FRAME.match(ln)]
    return "\n".join(lines).strip() or type(exc).__name__


#: A line of a JVM stack trace: a frame, or the count of frames left out.
_JVM_FRAME = re.compile(r"^\s*(at [\w$.<>]+\(.*\)|\.\.\. \d+ more)\s*$")


def spark_error_text(exc: BaseException) -> str:
    """All of a Spark/Py4J error's text: message, description and JVM stack trace (for file paths in it)."""
    parts = [str(exc), str(getattr(exc, "desc", "") or ""), str(getattr(exc, "stackTrace", "") or "")]
    return "\n".join(p for p in parts if p)
