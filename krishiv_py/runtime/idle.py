"""Idle sources on Spark: the job moves a quiet source's watermark for it.

Spark takes the minimum of its watermark operators' watermarks and has no
notion of idleness, so one silent source holds every window back. krishiv
gives each source with an idle timeout a second, job-private input (a
directory of *marker* files unioned in right below the source's watermark,
see :mod:`krishiv_py.planner.spark.sources`). Between micro-batches the job
runs :meth:`IdleTracker.step`:

- a source whose rows (data, ``advance_watermark`` or ``close``) appeared in
  a micro-batch is active; one that has shown nothing for its
  ``idle_timeout_ms`` of processing time is idle;
- the *target* is the minimum watermark of the active sources (a closed
  source counts as +infinity); each idle source whose watermark operator is
  below the target gets a marker row that lifts it to the target — never
  beyond what the active sources allow, and not at all while no source is
  active or an active source has no watermark yet;
- Spark then computes the overall minimum as if the idle sources were left
  out. A source that sends again is active at once and gets no more
  markers; its operator keeps the lifted value, so the overall watermark
  does not go back, and its rows behind it are late by the usual rules.

The decision is a pure function (:func:`idle_targets`) over the observed
watermarks; the clock is injectable so tests can step processing time.
Granularity: idleness is noticed between micro-batches (the job checks after
every ``process_all_available`` pass and, while the job runs, from a
background thread a few times per timeout), and a marker takes effect one
micro-batch later, like any watermark on Spark.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

import krishiv_py.files as files
from krishiv_py.names import ACTIVE, WM
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.planner.spark.recipe import TrackedSource

__all__ = ["FileFeed", "IdleTracker", "idle_targets", "monotonic_ms"]

#: One micro-batch's observed metrics: observation name -> metric -> value.
Observed: TypeAlias = Mapping[str, Mapping[str, Any]]


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def idle_targets(
    *,
    now_ms: float,
    timeouts: Mapping[str, int | None],
    last_active_ms: Mapping[str, float],
    watermarks: Mapping[str, int],
) -> tuple[frozenset[str], dict[str, int]]:
    """Which sources are idle, and the watermark to lift each idle source's operator to.

    ``watermarks`` are the sources' effective watermarks as Spark's operators
    hold them (own rows and earlier markers; a closed source is
    :data:`END_OF_TIME_MS`); a source without one is missing.

    Examples
    --------
    >>> idle_targets(now_ms=10_000, timeouts={"a": 5_000, "b": 5_000},
    ...              last_active_ms={"a": 9_000, "b": 1_000}, watermarks={"a": 700})
    (frozenset({'b'}), {'b': 700})
    """
    idle = frozenset(
        s
        for s, timeout in timeouts.items()
        if timeout is not None
        and watermarks.get(s, 0) < END_OF_TIME_MS
        and now_ms - last_active_ms.get(s, now_ms) >= timeout
    )
    active = [s for s in timeouts if s not in idle]
    if not idle or not active or any(s not in watermarks for s in active):
        return idle, {}
    target = min(watermarks[s] for s in active)
    return idle, {s: target for s in sorted(idle) if watermarks.get(s, target - 1) < target}


@attrs.define
class IdleTracker:
    """Per job: when each source was last active, and the markers written so far."""

    tracked: tuple[TrackedSource, ...]
    markers_dir: str
    clock: Callable[[], float] = monotonic_ms
    last_active_ms: dict[str, float] = attrs.field(factory=dict)
    idle: frozenset[str] = frozenset()
    written: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _last_seen: int = -1  # the newest batch id noted (batches come in order)
    _feeds: dict[str, FileFeed] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.restart_clock(self.clock)
        for t in self.tracked:
            if t.idle_timeout_ms is not None:
                path = os.path.join(self.markers_dir, t.observe_name)
                self._feeds[t.observe_name] = FileFeed(path, "marker")

    def restart_clock(self, clock: Callable[[], float]) -> None:
        """Use ``clock`` (ms) from now on; every source counts as active now."""
        with self._lock:
            self.clock = clock
            now = clock()
            self.last_active_ms = {t.observe_name: now for t in self.tracked}

    def step(self, batches: Iterable[tuple[int, Observed]], watermarks: Mapping[str, int]) -> bool:
        """Note the activity in new ``(batch id, observed metrics)``; write the markers now due.

        ``watermarks``: each tracked source's effective watermark, by
        observe name. Returns True when a marker was written.
        """
        with self._lock:
            now = self.clock()
            for batch_id, observed in batches:
                if batch_id <= self._last_seen:
                    continue
                self._last_seen = batch_id
                for t in self.tracked:
                    m = observed.get(t.observe_name) or {}
                    if int(m.get(ACTIVE) or 0) > 0:
                        self.last_active_ms[t.observe_name] = now
            idle, targets = idle_targets(
                now_ms=now,
                timeouts={t.observe_name: t.idle_timeout_ms for t in self.tracked},
                last_active_ms=self.last_active_ms,
                watermarks=watermarks,
            )
            self.idle = idle
            for name, target in targets.items():
                self._feeds[name].write_column(WM, [target])
                self.written += 1
            return bool(targets)

    def idle_sources(self) -> frozenset[str]:
        """The stream names of the sources idle at the last step."""
        names = {t.observe_name: t.source for t in self.tracked}
        return frozenset(names[s] for s in self.idle)


class FileFeed:
    """Appends small Parquet files to a directory a streaming query reads (ticks, markers).

    Each file is written under a temporary name and renamed into place, with
    strictly increasing modification times, so the file source sees it once
    and whole.
    """

    def __init__(self, path: str, prefix: str) -> None:
        self.path = path
        self._prefix = prefix
        files.makedirs(path)
        self._count = len([f for f in files.names(path) if f.endswith(".parquet")])
        self._last_mtime_ns = 0

    def write_column(self, name: str, values: Sequence[int], dtype: Any = None) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        array = pa.array(np.asarray(values, dtype=dtype or np.int64))
        file = f"{self._prefix}-{self._count:012d}.parquet"
        self._count += 1
        if files.object_store(self.path):  # (its time is the upload's, later than the last one's)
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({name: array}), sink)
            files.write_bytes(files.join(self.path, file), sink.getvalue().to_pybytes())
            return
        tmp = os.path.join(self.path, f".{file}.tmp")
        pq.write_table(pa.table({name: array}), tmp)
        mtime = max(time.time_ns(), self._last_mtime_ns + 1_000_000)
        self._last_mtime_ns = mtime
        os.utime(tmp, ns=(mtime, mtime))
        os.replace(tmp, os.path.join(self.path, file))
