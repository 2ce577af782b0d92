"""One wrapping point for Spark errors: a Spark or Py4J failure becomes a :class:`~krishiv_py.JobError`.

:func:`spark_call` runs a call into Spark and raises a ``JobError`` that
carries :func:`spark_cause` (the informative lines of Spark's message, not
its Java or Py4J traceback), with the restart hint of
:mod:`krishiv_py.runtime.quarantine` where user code failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from krishiv_py.errors import JobError, KrishivError
from krishiv_py.runtime.quarantine import restart_hint

__all__ = ["spark_call", "spark_cause"]

T = TypeVar("T")


def spark_call(what: str, fn: Callable[[], T]) -> T:
    """Run a Spark call, turning any Spark/Py4J failure into a JobError."""
    try:
        return fn()
    except KrishivError:
        raise
    except Exception as exc:
        cause = spark_cause(exc)
        raise JobError(f"{what} failed{restart_hint(cause)}", cause=cause) from exc


def spark_cause(exc: BaseException) -> str:
    """The informative part of a Spark/Py4J error: its first line and the root error line."""
    text = str(getattr(exc, "desc", None) or exc).strip()
    text = text.split("=== Streaming Query ===")[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("at ")]
    if not lines:
        return type(exc).__name__
    roots = [ln for ln in lines[1:] if _ERROR_LINE.match(ln)]
    if roots and "Traceback (most recent call last)" in lines[0]:
        return roots[-1]  # Python code called back from the JVM raised: its exception says it all
    if roots and roots[-1] not in lines[0]:
        return f"{lines[0]}\n{roots[-1]}"
    return lines[0]


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.$]*(Error|Exception)(\[[^\]]*\])?: ")


def spark_error_text(exc: BaseException) -> str:
    """All of a Spark/Py4J error's text: message, description and JVM stack trace (for file paths in it)."""
    parts = [str(exc), str(getattr(exc, "desc", "") or ""), str(getattr(exc, "stackTrace", "") or "")]
    return "\n".join(p for p in parts if p)
