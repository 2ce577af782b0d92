"""Over-aggregation in the reference model (SPEC 3.16): a result per row, over the rows before it.

``keyed.over_rows(n)`` / ``keyed.over_range(range_ms)`` then ``.agg(...)``,
SQL's ``OVER (PARTITION BY k ORDER BY t ROWS BETWEEN n PRECEDING AND
CURRENT ROW)`` and ``RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW``.
Per event and per key, in plain Python; the oracle of the operator's kernel.

Order
    A key's rows in event-time order, ties by arrival.
Frames
    ``rows``: the row and the ``n`` rows before it in that order.
    ``range``: the rows whose event time is within ``range_ms`` before the
    row's, up to and including its own time — its peers (equal event time)
    included, also those that arrived after it, as SQL's ``RANGE ...
    CURRENT ROW`` does.
Emission
    A row's result (its columns and each aggregate) is emitted once the
    watermark passes its event time (``t < W``): from then on no on-time row
    can come before it. A row behind the watermark but within the allowed
    lateness (``t >= W - L``) is placed in its key's order and its result
    emitted at once; the emitted results it changes (the rows after it whose
    frames now hold it) are corrected: ``"accumulating"`` emits their new
    result, ``"retracting"`` retracts the old one first. A row further
    behind is very late and dropped; one without an event time is invalid.
Changelogs
    A row of ``kind`` ``"retract"`` withdraws one held row of its key with
    equal values and event time (the earliest such); its own result, if it
    was emitted, is retracted (``"retracting"``) and the results it was part
    of corrected. A retraction that finds no row is counted and dropped.

Examples
--------
>>> from krishiv_py.model.reference import AggSpec
>>> m = OverModel(keys=("k",), frame="rows", preceding=1, aggs=(AggSpec(name="s", func="sum", column="v"),))
>>> m.send([{"k": "a", "t": 10, "v": 1}, {"k": "a", "t": 20, "v": 2}, {"k": "a", "t": 30, "v": 4}])
[]
>>> [(r["t"], r["s"]) for r in m.advance(25)]
[(10, 1), (20, 3)]
>>> [(r["t"], r["s"]) for r in m.advance(31)]
[(30, 6)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.model.reference import END_OF_TIME_MS, AggSpec, aggregate_rows, event_time_us, late_event

__all__ = ["OverModel", "OverSteps"]

Row = Mapping[str, Any]


@attrs.define(eq=False)
class _Held:
    """One accepted row of a key: its event time (µs), arrival number, row and last result."""

    ts_us: int
    seq: int
    row: dict[str, Any]
    #: The aggregates it last emitted (None: not emitted yet).
    emitted: dict[str, Any] | None = None


@attrs.define
class OverModel:
    """Over-aggregation per key (see the module docstring)."""

    keys: tuple[str, ...]
    frame: Literal["rows", "range"]
    #: ``rows``: how many rows before; ``range``: how many milliseconds before.
    preceding: int
    aggs: tuple[AggSpec, ...]
    event_time: str = "t"
    allowed_lateness_ms: int = 0
    accumulation: Literal["accumulating", "retracting"] = "accumulating"
    watermark_ms: int | None = None
    very_late: int = 0
    invalid: int = 0
    unmatched: int = 0
    #: The rows it dropped: each input row with ``classification`` (``"invalid"``, ``"very_late"``)
    #: and the ``watermark_ms`` it met.
    late_events: list[dict[str, Any]] = attrs.field(factory=list)
    _held: dict[tuple[Any, ...], list[_Held]] = attrs.field(factory=dict)
    _seq: int = 0

    def __attrs_post_init__(self) -> None:
        if self.frame not in ("rows", "range"):
            raise PlanError(f"an over-aggregation's frame is 'rows' or 'range', not {self.frame!r}")
        if isinstance(self.preceding, bool) or not isinstance(self.preceding, int) or self.preceding < 0:
            raise PlanError(f"an over-aggregation's preceding is an int >= 0, got {self.preceding!r}")
        if self.accumulation not in ("accumulating", "retracting"):
            raise PlanError(f"an over-aggregation re-emits or retracts, not {self.accumulation!r}")
        picky = [a.name for a in self.aggs if a.func in ("first", "last")]
        if picky and self.frame == "range":
            raise PlanError(f"first/last over a range frame ({', '.join(picky)}): peers have no order")

    # --- input ---------------------------------------------------------------------------------

    def send(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        """Each row in turn (``kind="retract"`` withdraws one); the results emitted or corrected."""
        out: list[dict[str, Any]] = []
        for row in rows:
            out += self._one(dict(row))
        return out

    def step(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        """``rows`` as one micro-batch: each placed in turn (a retraction withdrawing its row at once),
        then, per key they touched, the late rows' results emitted and the emitted results whose
        frames changed corrected once — the batch's net change, as a job emits it."""
        out: list[dict[str, Any]] = []
        touched: dict[tuple[Any, ...], None] = {}
        for row in rows:
            out += self._one(dict(row), at_once=False)
            touched[tuple(row.get(k) for k in self.keys)] = None
        w = self.watermark_ms
        for key in touched:
            held = self._held.get(key, [])
            if w is not None:
                for i, h in enumerate(held):
                    if h.emitted is None and h.ts_us < w * 1000:
                        out += self._emit(held, i)
            out += self._correct(held)
        return out

    def advance(self, watermark_ms: int) -> list[dict[str, Any]]:
        """Move the watermark (never back): the rows it passes emit their results, in key order."""
        if self.watermark_ms is not None and watermark_ms <= self.watermark_ms:
            return []
        self.watermark_ms = watermark_ms
        out: list[dict[str, Any]] = []
        for key in sorted(self._held, key=repr):
            held = self._held[key]
            for i, h in enumerate(held):
                if h.emitted is None and h.ts_us < watermark_ms * 1000:
                    out += self._emit(held, i)
        return out

    def close(self) -> list[dict[str, Any]]:
        """The end of input: every row's result."""
        return self.advance(END_OF_TIME_MS)

    # --- the rules -------------------------------------------------------------------------------

    def _one(self, row: dict[str, Any], *, at_once: bool = True) -> list[dict[str, Any]]:
        """One row; ``at_once``: its own result and the corrections it makes now (else the step's)."""
        kind = row.pop("kind", "emit")
        ts = event_time_us(row.get(self.event_time))
        w = self.watermark_ms
        if ts is None:
            self.invalid += 1
            self.late_events.append(late_event(row, "invalid", w))
            return []
        if w is not None and ts < (w - self.allowed_lateness_ms) * 1000:
            self.very_late += 1
            self.late_events.append(late_event(row, "very_late", w))
            return []
        key = tuple(row.get(k) for k in self.keys)
        held = self._held.setdefault(key, [])
        if kind == "retract":
            gone = self._withdraw(held, ts, row)
            return gone + (self._correct(held) if at_once else [])
        self._seq += 1
        place = len(held)
        while place > 0 and held[place - 1].ts_us > ts:
            place -= 1
        held.insert(place, _Held(ts_us=ts, seq=self._seq, row=row))
        if not at_once:
            return []
        out: list[dict[str, Any]] = []
        if w is not None and ts < w * 1000:  # late: its place in the order is final now
            out += self._emit(held, place)
        return out + self._correct(held)

    def _withdraw(self, held: list[_Held], ts: int, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The earliest held row equal to ``row`` out of the order; its result retracted."""
        found = next((i for i, h in enumerate(held) if h.ts_us == ts and h.row == row), None)
        if found is None:
            self.unmatched += 1
            return []
        gone = held.pop(found)
        return [] if gone.emitted is None else self._retracted(gone)

    def _frame(self, held: list[_Held], i: int) -> list[_Held]:
        if self.frame == "rows":
            return held[max(0, i - self.preceding) : i + 1]
        t = held[i].ts_us
        return [h for h in held if t - self.preceding * 1000 <= h.ts_us <= t]

    def _values(self, held: list[_Held], i: int) -> dict[str, Any]:
        rows = [(h.ts_us, h.seq, h.row) for h in self._frame(held, i)]
        return {a.name: aggregate_rows(a, rows) for a in self.aggs}

    def _emit(self, held: list[_Held], i: int) -> list[dict[str, Any]]:
        h = held[i]
        h.emitted = self._values(held, i)
        return [self._result(h, h.emitted, "emit")]

    def _correct(self, held: list[_Held]) -> list[dict[str, Any]]:
        """The emitted results whose frames changed, corrected in order."""
        out: list[dict[str, Any]] = []
        for i, h in enumerate(held):
            if h.emitted is None:
                continue
            now = self._values(held, i)
            if _same(now, h.emitted):
                continue
            if self.accumulation == "retracting":
                out += self._retracted(h)
            h.emitted = now
            out.append(self._result(h, now, "emit"))
        return out

    def _retracted(self, h: _Held) -> list[dict[str, Any]]:
        assert h.emitted is not None
        return [self._result(h, h.emitted, "retract")] if self.accumulation == "retracting" else []

    def _result(self, h: _Held, values: Mapping[str, Any], kind: str) -> dict[str, Any]:
        out = {**h.row, **values}
        if self.accumulation == "retracting":
            out["kind"] = kind
        return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(_eq(a[k], b[k]) for k in a)


def _eq(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True  # NaN equals NaN here: an unchanged value
    return x == y and type(x) is type(y)


@attrs.define
class OverSteps:
    """An over-aggregation over one watermarked source, stepped as a job steps it.

    The model of ``key_by(...).over_rows(n)`` (or ``over_range``) right after
    ``source.watermark(column, lag_ms)`` in a scenario
    (:func:`krishiv_py.model.steps.model_for`): each ``send`` is one
    micro-batch (:meth:`OverModel.step`), after which the watermark moves to
    the step's newest event time less the lag and the rows it passes emit;
    ``advance_watermark`` and ``close`` move it too.
    """

    model: OverModel
    lag_ms: int
    _results: list[dict[str, Any]] = attrs.field(factory=list)

    def send(self, rows: Sequence[Row], *, source: str = "main") -> list[dict[str, Any]]:
        del source
        out = self.model.step(rows)
        times = [event_time_us(r.get(self.model.event_time)) for r in rows]
        newest = max((t for t in times if t is not None), default=None)
        if newest is not None:
            out += self.model.advance(newest // 1000 - self.lag_ms)
        self._results += out
        return out

    def advance_watermark(self, ts_ms: int, *, source: str = "main") -> list[dict[str, Any]]:
        del source
        out = self.model.advance(ts_ms)
        self._results += out
        return out

    def close(self, *, source: str = "main") -> list[dict[str, Any]]:
        del source
        out = self.model.close()
        self._results += out
        return out

    def advance_processing_time(self, ms: float) -> list[dict[str, Any]]:
        del ms  # (nothing of it runs in processing time)
        return []

    @property
    def results(self) -> list[dict[str, Any]]:
        """Every result so far, in emit order."""
        return list(self._results)

    @property
    def late_events(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self.model.late_events]

    @property
    def watermark_ms(self) -> int | None:
        return self.model.watermark_ms
