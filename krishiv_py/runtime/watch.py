"""Quiet by default: where Spark's output goes, clean Ctrl-C, live progress.

Logs
    The JVM's stdout and stderr (Spark's log4j output, Java stack traces, the
    JVM's own start-up warnings, and the Python workers' stderr) go to one
    log file per Spark start, under :func:`log_dir` (``$KRISHIV_LOG_DIR``,
    default ``<temp dir>/krishiv-logs``; the newest 20 are kept). With
    ``verbose=True`` (or ``KRISHIV_VERBOSE=1``) they go to the terminal as
    plain Spark would.

Ctrl-C
    While krishiv_py waits on Spark (``process_all_available``,
    ``await_termination``, a bounded ``collect``), Ctrl-C stops the job (or
    cancels the Spark jobs) from another thread, prints one line, and raises
    ``KeyboardInterrupt`` — no Py4J traceback. A second Ctrl-C interrupts at
    once.

Progress
    Long waits show a progress bar (tqdm) after one second when stderr is a
    terminal, or in a Jupyter kernel as a widget when ``ipywidgets`` is
    installed; ``progress=False`` on the session or ``KRISHIV_PROGRESS=0``
    turns it off, ``KRISHIV_PROGRESS=1`` on.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "interruptible",
    "log_dir",
    "new_log_path",
    "progress_enabled",
    "quiet_python_loggers",
    "verbose_default",
    "watching",
]

LOG_DIR_ENV = "KRISHIV_LOG_DIR"
VERBOSE_ENV = "KRISHIV_VERBOSE"
PROGRESS_ENV = "KRISHIV_PROGRESS"
KEEP_LOGS = 20
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def log_dir() -> str:
    """Where Spark's log files go: ``$KRISHIV_LOG_DIR`` or ``<temp dir>/krishiv-logs``."""
    return os.environ.get(LOG_DIR_ENV) or os.path.join(tempfile.gettempdir(), "krishiv-logs")


def new_log_path(app_name: str) -> str:
    """A fresh log file path for one Spark start; older files beyond the newest 20 are removed."""
    directory = log_dir()
    os.makedirs(directory, exist_ok=True)
    old = sorted(glob.glob(os.path.join(directory, "spark-*.log")), key=_mtime)
    for path in old[: max(0, len(old) - (KEEP_LOGS - 1))]:
        with contextlib.suppress(OSError):
            os.remove(path)
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in app_name)[:40]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(directory, f"spark-{stamp}-{os.getpid()}-{safe}.log")


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def verbose_default() -> bool:
    """``KRISHIV_VERBOSE`` set to a true value."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in _TRUE


def quiet_python_loggers(verbose: bool) -> None:
    """Py4J and PySpark log failures with full Java traces; keep those for verbose runs.

    krishiv_py raises its own error with Spark's message instead.
    """
    level = logging.WARNING if verbose else logging.CRITICAL
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
        logging.getLogger(name).setLevel(level)
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pragma: no cover - older pyspark
        return
    # Created through PySparkLogger, as PySpark expects its own logger class there.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.ERROR if verbose else logging.CRITICAL)


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) process."""
    if "ipykernel" not in sys.modules:
        return False
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # noqa: BLE001 - no usable IPython
        return False
    return shell is not None and hasattr(shell, "kernel")


def progress_enabled(setting: bool | None) -> bool:
    """Whether to show progress: the session's setting, else ``KRISHIV_PROGRESS``, else interactive."""
    if setting is not None:
        return setting
    env = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if env in _TRUE:
        return True
    if env in _FALSE:
        return False
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    # In a notebook, bars are widgets; a text bar would land in the red stderr area.
    return tty or (in_notebook() and importlib.util.find_spec("ipywidgets") is not None)


class Interrupt:
    """Set when Ctrl-C arrived during an :func:`interruptible` block."""

    def __init__(self) -> None:
        self.requested = False
        self.stopper: threading.Thread | None = None


@contextlib.contextmanager
def interruptible(on_interrupt: Callable[[], None], message: str) -> Iterator[Interrupt]:
    """Turn Ctrl-C during the block into ``on_interrupt()`` on another thread.

    The main thread is blocked inside a Py4J call when Ctrl-C arrives; a Py4J
    call from the signal handler would re-enter that connection (PySpark's
    own handler does, and fails with "reentrant call"). Here the handler only
    starts a thread that calls ``on_interrupt`` (stop the query, cancel the
    Spark jobs), which makes the blocked call return. Then ``message`` is
    printed and ``KeyboardInterrupt`` raised. Outside the main thread the
    block runs unchanged.
    """
    flag = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        if flag.requested:  # a second Ctrl-C: stop waiting at once
            raise KeyboardInterrupt
        flag.requested = True
        flag.stopper = threading.Thread(target=_quietly(on_interrupt), name="krishiv-interrupt", daemon=True)
        flag.stopper.start()

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not allowed here (e.g. an embedded interpreter)
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
        if flag.requested:
            if flag.stopper is not None:
                flag.stopper.join(timeout=30)
            print(message, file=sys.stderr)
            raise KeyboardInterrupt from None  # Ctrl-C replaces whatever the wait raised


def _quietly(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with contextlib.suppress(Exception):
            fn()

    return run


class _Progress:
    """A tqdm bar fed by a polling thread; shown only for waits longer than a second."""

    def __init__(self, description: str, poll: Callable[[], tuple[int, int | None, str]]) -> None:
        import tqdm

        bar_type: Any = tqdm.tqdm
        if in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
            import tqdm.notebook

            bar_type = tqdm.notebook.tqdm
        self._poll = poll
        self._bar: Any = bar_type(
            desc=description,
            total=None,
            delay=1.0,
            leave=False,
            dynamic_ncols=True,
            unit="",
            file=sys.stderr,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="krishiv-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                done, total, text = self._poll()
            except Exception:  # noqa: BLE001 - Spark went away; stop showing progress
                return
            if total is not None and total != self._bar.total:
                self._bar.total = total
            self._bar.n = done
            if text:
                self._bar.set_postfix_str(text, refresh=False)
            self._bar.refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._bar.close()


@contextlib.contextmanager
def watching(
    *,
    on_interrupt: Callable[[], None],
    message: str,
    progress: Callable[[], tuple[int, int | None, str]] | None,
    description: str,
) -> Iterator[Interrupt]:
    """:func:`interruptible`, plus a progress bar polled from ``progress`` when given."""
    bar = None
    if progress is not None:
        try:
            bar = _Progress(description, progress)
        except Exception:  # noqa: BLE001 - no progress display available
            bar = None
    try:
        with interruptible(on_interrupt, message) as flag:
            yield flag
    finally:
        if bar is not None:
            bar.close()


def stage_progress(spark: Any) -> Callable[[], tuple[int, int | None, str]]:
    """Poll Spark's tasks: completed of all tasks in the stages seen so far."""
    tracker = spark.sparkContext.statusTracker()
    seen: dict[int, tuple[int, int]] = {}

    def poll() -> tuple[int, int | None, str]:
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                seen[stage_id] = (int(info.numCompletedTasks), int(info.numTasks))
        done = sum(d for d, _ in seen.values())
        total = sum(t for _, t in seen.values())
        return done, total or None, f"{len(seen)} stages"

    return poll
