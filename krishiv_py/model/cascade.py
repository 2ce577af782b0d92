"""The reference model of a window over windowed results (a cascade), one result at a time.

:class:`CascadeModel` runs an upstream :class:`ReferenceModel` and feeds
every result row it emits, step by step, into a second window. Like the
upstream model it handles one row at a time in plain Python and shares no
code with the lowerings.

Rules (SPEC 3.11)
    Each upstream result has an *identity*: its key columns, ``window_start``
    and ``window_end``. Its event time is ``window_end - 1`` ms, and the
    downstream window runs at the upstream watermark. The downstream window
    holds the *current version* of each identity: a new emit replaces the
    previous one (accumulating upstream), a ``kind="retract"`` row removes
    it (retracting upstream), and a version that the stages between the
    windows (``between``) filter out removes it too.

    A step's upstream results are applied in order; one whose event time
    has no retained downstream window (``W >= end + L`` for every window it
    falls in, ``W`` the watermark before the step, ``L`` the downstream
    allowed lateness; a session's proto-window ``[t, t + gap)``) is *very
    late* downstream: ignored and counted. Then, at the watermark after the
    step, ``W'``, every downstream window is computed from the current
    versions (sessions merge versions less than ``gap`` apart):

    a. a window with ``end <= W'`` that has not fired fires;
    b. a window that fired and whose value changed fires again — preceded by
       a retraction of its previous value in retracting mode; an unchanged
       value emits nothing;
    c. a window that fired and no longer exists (its versions removed, or a
       session merged into a larger one) is retracted in retracting mode;
    d. then windows with ``W' >= end + L`` are deleted, with the versions
       that belong to no other window; a deleted window never fires again.

Examples
--------
>>> from krishiv_py.plan.windows import TumblingWindow
>>> from krishiv_py.model.reference import AggSpec, ReferenceModel
>>> minutes = ReferenceModel(window=TumblingWindow(size_ms=10), event_time="t", lag_ms=0,
...                          keys=["k"], aggregates=[AggSpec(name="n", func="count", column=None)])
>>> model = CascadeModel(minutes, window=TumblingWindow(size_ms=20), keys=["k"],
...                      aggregates=[AggSpec(name="peak", func="max", column="n")])
>>> model.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}, {"k": "a", "t": 11}, {"k": "a", "t": 25}])
[{'k': 'a', 'window_start': 0, 'window_end': 20, 'peak': 2}]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from krishiv_py.errors import PlanError
from krishiv_py.model.reference import (
    _NO_VALUE,
    _VALUE_AGGS,
    AggSpec,
    ReferenceMetrics,
    ReferenceModel,
)
from krishiv_py.plan.emission import Accumulation
from krishiv_py.plan.nodes import KIND_COLUMN
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

__all__ = ["CascadeModel"]

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
CascadeWindow: TypeAlias = TumblingWindow | SlidingWindow | SessionWindow
WindowId: TypeAlias = tuple[tuple[object, ...], int, int]
Identity: TypeAlias = tuple[object, ...]


class CascadeModel:
    """A window over the results of ``upstream`` (see the module docstring).

    Parameters
    ----------
    upstream
        The model of the first window; its steps are this model's steps.
    window, keys, aggregates
        The second window, its key columns (columns of the upstream results)
        and its aggregates over them.
    upstream_keys
        The upstream window's key columns (default: the upstream model's).
    allowed_lateness_ms
        ``L`` of the second window (the lowerings use at least the upstream's).
    accumulation
        ``"accumulating"`` or ``"retracting"`` (adds ``kind``).
    between
        The stages between the windows, per result row: the row to window,
        or ``None`` when a filter drops it.
    """

    def __init__(
        self,
        upstream: ReferenceModel,
        *,
        window: CascadeWindow,
        keys: Sequence[str] = (),
        aggregates: Sequence[AggSpec],
        allowed_lateness_ms: int = 0,
        accumulation: Accumulation = "accumulating",
        between: Callable[[Result], Result | None] | None = None,
    ) -> None:
        if accumulation not in ("accumulating", "retracting"):
            raise PlanError(f"a cascade's window accumulates or retracts, got {accumulation!r}")
        if isinstance(window, SessionWindow) and window.max_duration_ms is not None:
            raise PlanError("capped sessions over windowed results are not modelled")
        self._up = upstream
        self._window = window
        self._keys = tuple(keys)
        self._up_keys = tuple(upstream._keys)
        self._aggs = tuple(aggregates)
        self._lateness = allowed_lateness_ms
        self._retracting = accumulation == "retracting"
        self._between = between
        #: identity -> (downstream key, event time ms, row)
        self._live: dict[Identity, tuple[tuple[object, ...], int, Result]] = {}
        #: fired windows -> their last emitted row
        self._emitted: dict[WindowId, Result] = {}
        self._results: list[Result] = []
        self.very_late_results = 0

    # --- the upstream model's steps --------------------------------------------------------

    def send(self, rows: Sequence[Row], *, source: str = "main") -> list[Result]:
        before = self._up.watermark_ms
        return self._step(before, self._up.send(rows, source=source))

    def advance_watermark(self, ts_ms: int, *, source: str = "main") -> list[Result]:
        before = self._up.watermark_ms
        return self._step(before, self._up.advance_watermark(ts_ms, source=source))

    def advance_processing_time(self, ms: float) -> list[Result]:
        before = self._up.watermark_ms
        return self._step(before, self._up.advance_processing_time(ms))

    def close(self, *, source: str = "main") -> list[Result]:
        before = self._up.watermark_ms
        return self._step(before, self._up.close(source=source))

    @property
    def results(self) -> list[Result]:
        """Every row the second window emitted so far."""
        return list(self._results)

    @property
    def upstream_results(self) -> list[Result]:
        return self._up.results

    @property
    def late_events(self) -> list[Result]:
        """The input rows the upstream window dropped (very late or invalid)."""
        return self._up.late_events

    @property
    def watermark_ms(self) -> int | None:
        return self._up.watermark_ms

    @property
    def metrics(self) -> ReferenceMetrics:
        return self._up.metrics

    # --- one step --------------------------------------------------------------------------

    def _step(self, before: int | None, changes: list[Result]) -> list[Result]:
        for row in changes:
            self._apply(before, row)
        after = self._up.watermark_ms
        out = self._fire(before, after) if after is not None else []
        self._results += out
        return out

    def _apply(self, before: int | None, row: Result) -> None:
        end = row["window_end"]
        assert isinstance(end, int)
        t = end - 1
        if before is not None and all(e + self._lateness <= before for _, e in self._windows_of(t)):
            self.very_late_results += 1
            return
        identity = (*(row[k] for k in self._up_keys), row["window_start"], end)
        self._live.pop(identity, None)
        if row.get(KIND_COLUMN) == "retract":
            return
        version = {k: v for k, v in row.items() if k != KIND_COLUMN}
        kept = self._between(version) if self._between is not None else version
        if kept is not None:
            self._live[identity] = (tuple(kept[k] for k in self._keys), t, kept)

    def _windows_of(self, t: int) -> list[tuple[int, int]]:
        """The windows a version at ``t`` falls in (a session: its proto-window)."""
        w = self._window
        if isinstance(w, SessionWindow):
            return [(t, t + w.gap_ms)]
        first = t - ((t - w.offset_ms) % w.slide_ms)
        out = []
        start = first
        while start > t - w.size_ms:
            out.append((start, start + w.size_ms))
            start -= w.slide_ms
        return out

    def _current(self) -> dict[WindowId, list[Identity]]:
        """Every downstream window now, with the identities of the versions in it."""
        by_key: dict[tuple[object, ...], list[tuple[int, Identity]]] = {}
        for identity, (key, t, _) in self._live.items():
            by_key.setdefault(key, []).append((t, identity))
        out: dict[WindowId, list[Identity]] = {}
        for key, items in by_key.items():
            if isinstance(self._window, SessionWindow):
                gap = self._window.gap_ms
                items.sort(key=lambda x: x[0])
                session: list[tuple[int, Identity]] = []
                for t, identity in items:
                    if session and t >= session[-1][0] + gap:
                        out[(key, session[0][0], session[-1][0] + gap)] = [i for _, i in session]
                        session = []
                    session.append((t, identity))
                out[(key, session[0][0], session[-1][0] + gap)] = [i for _, i in session]
            else:
                for t, identity in items:
                    for start, end in self._windows_of(t):
                        out.setdefault((key, start, end), []).append(identity)
        return out

    def _fire(self, before: int | None, wm: int) -> list[Result]:
        # A window deleted at an earlier step stays deleted, though a version in it lives on in
        # a later (sliding) window.
        current = {
            wid: ids
            for wid, ids in self._current().items()
            if before is None or wid[2] + self._lateness > before
        }
        out: list[Result] = []
        for wid in sorted(self._emitted, key=_order):
            if wid not in current:
                gone = self._emitted.pop(wid)
                if self._retracting:
                    out.append({**gone, KIND_COLUMN: "retract"})
        for wid in sorted(current, key=_order):
            key, start, end = wid
            if end > wm:
                continue
            value = self._row(key, start, end, [self._live[i][2] for i in current[wid]])
            old = self._emitted.get(wid)
            if old is not None and _same(old, value):
                continue
            if old is not None and self._retracting:
                out.append({**old, KIND_COLUMN: "retract"})
            self._emitted[wid] = value
            out.append({**value, KIND_COLUMN: "emit"} if self._retracting else value)
        for wid in [w for w in current if w[2] + self._lateness <= wm]:
            self._emitted.pop(wid, None)
            for identity in current[wid]:
                self._forget(identity, wm)
        return out

    def _forget(self, identity: Identity, wm: int) -> None:
        """Drop a version whose windows are all deleted."""
        entry = self._live.get(identity)
        if entry is None:
            return
        if isinstance(self._window, SessionWindow) or all(
            e + self._lateness <= wm for _, e in self._windows_of(entry[1])
        ):
            del self._live[identity]

    def _row(self, key: tuple[object, ...], start: int, end: int, rows: list[Result]) -> Result:
        out: Result = dict(zip(self._keys, key, strict=True))
        out["window_start"], out["window_end"] = start, end
        for spec in self._aggs:
            if spec.column is None:
                out[spec.name] = len(rows)
                continue
            values = [v for v in (r.get(spec.column) for r in rows) if v is not None]
            value = _VALUE_AGGS[spec.func](values)
            out[spec.name] = None if value is _NO_VALUE else value
        return out


def _order(wid: WindowId) -> tuple[int, int, tuple[tuple[bool, Any], ...]]:
    key, start, end = wid
    return (end, start, tuple((v is not None, v) for v in key))


def _same(a: Result, b: Result) -> bool:
    return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)


def _eq(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y
