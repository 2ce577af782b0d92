"""The running operators of a :class:`~krishiv_py.model.compose.ComposedModel`.

One class per kind of operator, each stepped once per step, inputs first:
the oracles (a window over a source on the ReferenceModel, a join of two
sources on the JoinModel) and the changelog operators, which keep their
net input rows and emit the difference between their desired output and
what they emitted (see the package docstring for the rules).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import attrs

from krishiv_py.model.compose.ops import (
    AggOf,
    Change,
    ChangeKind,
    FilterOf,
    JoinOf,
    Key,
    Layout,
    OverOf,
    Result,
    Row,
    SelectOf,
    Source,
    TopNOf,
    Window,
    WindowOf,
    columns_of,
    delay_of,
    join_model_of,
    reference_model_of,
)
from krishiv_py.model.over import OverModel
from krishiv_py.model.ranking import top_n_rows
from krishiv_py.model.reference import (
    _NO_VALUE,
    AggSpec,
    _aggregate,
    _canonical,
    _Entry,
    event_time_us,
    late_event,
)
from krishiv_py.plan.nodes import KIND_COLUMN
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

__all__ = [
    "AggNode",
    "Event",
    "FilterNode",
    "JoinNode",
    "JoinOracle",
    "Node",
    "SelectNode",
    "SourceNode",
    "TopNNode",
    "UnionNode",
    "WindowNode",
    "WindowOracle",
]


def _held_back(w: int | None, delay: int) -> int | None:
    return w if w is None or w >= END_OF_TIME_MS else w - delay


def _min_wm(marks: Sequence[int | None]) -> int | None:
    known = [m for m in marks if m is not None]
    return None if len(known) < len(marks) or not known else min(known)


def _same(a: object, b: object) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def _same_row(a: Row, b: Row) -> bool:
    return a.keys() == b.keys() and all(_same(a[c], b[c]) for c in a)


def _key(row: Row, names: Sequence[str]) -> Key:
    return tuple(_canonical(row.get(name)) for name in names)


def _key_order(key: Key) -> tuple[tuple[bool, object], ...]:
    return tuple((v is not None, v) for v in key)


def _pane_order(pane: tuple[tuple[Key, int, int], object]) -> tuple[object, ...]:
    (key, start, end), _ = pane
    return (end, start, _key_order(key))


def _change(row: Row, ts_ms: int) -> Change:
    """A change of an oracle's retracting output row."""
    kind: ChangeKind = "retract" if row[KIND_COLUMN] == "retract" else "emit"
    return Change({c: v for c, v in row.items() if c != KIND_COLUMN}, kind, ts_ms)


def _ms(value: object) -> int | None:
    us = event_time_us(value)
    return None if us is None else us // 1000


@attrs.define(eq=False)
class _Held:
    """One net input row of a changelog operator; ``windows``: a source row's retained windows."""

    row: Row
    ts_ms: int
    seq: int
    windows: tuple[Window, ...] | None = None


def _withdraw(held: list[_Held], change: Change) -> None:
    """Remove the held row ``change`` retracts: one with its event time if any, else the earliest."""
    equal = [h for h in held if _same_row(h.row, change.row)]
    if not equal:
        raise AssertionError(f"a retraction of a row that is not held: {dict(change.row)!r}")
    held.remove(next((h for h in equal if h.ts_ms == change.ts_ms), equal[0]))


def _diff(
    old: list[tuple[Result, int]], new: list[tuple[Result, int]]
) -> tuple[list[Change], list[tuple[Result, int]]]:
    """Retract ``old - new``, then emit ``new - old`` (multisets of (row, event time))."""
    rest = list(new)
    gone = []
    for row, ts in old:
        i = next((i for i, (r, t) in enumerate(rest) if t == ts and _same_row(r, row)), None)
        if i is None:
            gone.append(Change(row, "retract", ts))
        else:
            del rest[i]
    return gone + [Change(row, "emit", ts) for row, ts in rest], list(new)


def _aggregates(specs: Sequence[AggSpec], held: Sequence[_Held]) -> Result:
    entries = [_Entry(h.ts_ms * 1000, h.seq, h.row) for h in held]
    values = {spec.name: _aggregate(spec, entries) for spec in specs}
    return {name: None if value is _NO_VALUE else value for name, value in values.items()}


@attrs.frozen
class Event:
    kind: Literal["send", "advance", "close"]
    sources: frozenset[str]
    rows: tuple[Row, ...] = ()
    ts_ms: int = 0


class Node:
    """One running operator: its output of the last step, its whole changelog and its watermark."""

    def __init__(self, inputs: Sequence[Node] = ()) -> None:
        self.inputs = tuple(inputs)
        self.out: list[Change] = []
        self.log: list[Change] = []
        self.wm: int | None = None
        self.seen: int | None = None  # the input watermark before the step
        self.late: list[Result] = []
        self._seq = 0

    def step(self, event: Event) -> None:
        self.out = self._step(event)
        self.log += self.out

    def _step(self, event: Event) -> list[Change]:
        raise NotImplementedError

    def in_wm(self) -> int | None:
        return _min_wm([node.wm for node in self.inputs])

    def hold(self, change: Change, windows: tuple[Window, ...] | None = None) -> _Held:
        self._seq += 1
        return _Held(change.row, change.ts_ms, self._seq, windows)

    def hold_by_key(self, held: dict[Key, list[_Held]], names: Sequence[str]) -> dict[Key, int]:
        """Apply the input's changes to ``held`` by their ``names`` values: the keys changed, each with
        the latest event time of its changes in the step, in order."""
        touched: dict[Key, int] = {}
        for change in self.inputs[0].out:
            key = _key(change.row, names)
            rows = held.setdefault(key, [])
            if change.kind == "retract":
                _withdraw(rows, change)
            else:
                rows.append(self.hold(change))
            touched[key] = max(touched.get(key, change.ts_ms), change.ts_ms)
        return touched

    def late_events(self) -> list[Result]:
        return self.late


class SourceNode(Node):
    def __init__(self, source: Source) -> None:
        super().__init__()
        self.source = source
        self.listed = False  # a changelog operator reads it: its invalid rows are listed here

    def _step(self, event: Event) -> list[Change]:
        if self.source.name not in event.sources:
            return []
        if event.kind != "send":
            ts = END_OF_TIME_MS if event.kind == "close" else event.ts_ms
            self.wm = ts if self.wm is None else max(self.wm, ts)
            return []
        out = []
        for row in event.rows:
            ts_ms = _ms(row.get(self.source.time))
            if ts_ms is not None:
                out.append(Change(dict(row), "emit", ts_ms, raw=True))
            elif self.listed:
                self.late.append(late_event(row, "invalid", self.wm))
        if out:
            top = max(c.ts_ms for c in out) - self.source.lag_ms
            self.wm = top if self.wm is None else max(self.wm, top)
        return out


class WindowOracle(Node):
    """A window over a source: the ReferenceModel."""

    def __init__(self, op: WindowOf, source: Source) -> None:
        super().__init__()
        self.name = source.name
        self.model = reference_model_of(op)

    def _step(self, event: Event) -> list[Change]:
        if self.name not in event.sources:
            return []
        if event.kind == "send":
            rows = self.model.send(event.rows, source=self.name)
        elif event.kind == "advance":
            rows = self.model.advance_watermark(event.ts_ms, source=self.name)
        else:
            rows = self.model.close(source=self.name)
        self.wm = self.model.watermark_ms
        ends = [row["window_end"] for row in rows]
        return [_change(row, end - 1) for row, end in zip(rows, ends, strict=True) if isinstance(end, int)]

    def late_events(self) -> list[Result]:
        return self.model.late_events


class JoinOracle(Node):
    """A join of two sources: the JoinModel."""

    def __init__(self, op: JoinOf, left: Source, right: Source) -> None:
        super().__init__()
        self.names = (left.name, right.name)
        self.delay = delay_of(op)
        self.times = (left.time, Layout(op).out_name(right.time))
        self.model = join_model_of(op)

    def _step(self, event: Event) -> list[Change]:
        on_left, on_right = (name in event.sources for name in self.names)
        if not (on_left or on_right):
            return []
        side: Literal["left", "right"] | None = (
            None if on_left and on_right else "left" if on_left else "right"
        )
        if event.kind == "send":
            rows = self.model.step(left=event.rows if on_left else (), right=event.rows if on_right else ())
        elif event.kind == "advance":
            rows = self.model.advance_watermark(event.ts_ms, side=side)
        else:
            rows = self.model.close(side=side)
        self.wm = _held_back(self.model.watermark_ms, self.delay)
        out = []
        for row in rows:
            times = [t for t in (_ms(row[name]) for name in self.times) if t is not None]
            out.append(_change(row, max(times)))
        return out

    def late_events(self) -> list[Result]:
        return self.model.late_events


class WindowNode(Node):
    """A window over a changelog."""

    def __init__(self, op: WindowOf, source: Node) -> None:
        super().__init__((source,))
        self.op = op
        self.held: list[_Held] = []
        self.emitted: list[tuple[Result, int]] = []

    def _step(self, event: Event) -> list[Change]:
        lateness = self.op.allowed_lateness_ms
        for change in self.inputs[0].out:
            if change.kind == "retract":
                _withdraw(self.held, change)
                continue
            windows = None
            if change.raw:  # a source row: the windows retained for it (fixed windows only)
                w = self.seen
                windows = tuple(x for x in self._assign(change.ts_ms) if w is None or w < x[1] + lateness)
                if not windows:
                    self.late.append(late_event(change.row, "very_late", w))
                    continue
            self.held.append(self.hold(change, windows))
        self.seen = self.wm = self.in_wm()
        out, self.emitted = _diff(self.emitted, self._desired(self.wm))
        return out

    def _assign(self, ts_ms: int) -> tuple[Window, ...]:
        window = self.op.window
        assert isinstance(window, TumblingWindow | SlidingWindow)
        return window.assign(ts_ms)

    def _desired(self, w: int | None) -> list[tuple[Result, int]]:
        if w is None:
            return []
        by_key: dict[Key, list[_Held]] = {}
        for h in self.held:
            by_key.setdefault(_key(h.row, self.op.keys), []).append(h)
        panes: dict[tuple[Key, int, int], list[_Held]] = {}
        for key, held in by_key.items():
            if isinstance(self.op.window, SessionWindow):
                gap = self.op.window.gap_ms
                session: list[_Held] = []
                for h in sorted(held, key=lambda h: (h.ts_ms, h.seq)):
                    if session and h.ts_ms > session[-1].ts_ms + gap:
                        panes[(key, session[0].ts_ms, session[-1].ts_ms + gap)] = session
                        session = []
                    session.append(h)
                panes[(key, session[0].ts_ms, session[-1].ts_ms + gap)] = session
            else:
                for h in held:
                    for start, end in h.windows or self._assign(h.ts_ms):
                        panes.setdefault((key, start, end), []).append(h)
        out = []
        for (key, start, end), held in sorted(
            panes.items(), key=lambda p: (p[0][2], p[0][1], _key_order(p[0][0]))
        ):
            if end <= w:
                row: Result = dict(zip(self.op.keys, key, strict=True))
                row["window_start"], row["window_end"] = start, end
                out.append(({**row, **_aggregates(self.op.aggregates, held)}, end - 1))
        return out


class JoinNode(Node):
    """A join of two changelogs (or a changelog and a source)."""

    def __init__(self, op: JoinOf, left: Node, right: Node) -> None:
        super().__init__((left, right))
        self.op = op
        self.layout = Layout(op)
        self.lower, self.upper = op.between or (0, 0)
        self.sides: tuple[list[_Held], list[_Held]] = ([], [])
        self.emitted: list[tuple[Result, int]] = []

    def _step(self, event: Event) -> list[Change]:
        for side, node, held in zip(("left", "right"), self.inputs, self.sides, strict=True):
            for change in node.out:
                if change.kind == "retract":
                    _withdraw(held, change)
                elif not change.raw:
                    held.append(self.hold(change))
                elif (windows := self._classify(side, change)) is not None:
                    held.append(self.hold(change, windows or None))
        self.seen = w = self.in_wm()
        self.wm = _held_back(w, delay_of(self.op))
        out, self.emitted = _diff(self.emitted, self._desired(w))
        return out

    def _classify(self, side: str, change: Change) -> tuple[Window, ...] | None:
        """A source row's retained windows (``()`` for an interval join), ``None`` when very late."""
        w, lateness, ts = self.seen, self.op.allowed_lateness_ms, change.ts_ms
        if self.op.window is not None:
            windows = tuple(x for x in self.op.window.assign(ts) if w is None or w < x[1] + lateness)
            if windows:
                return windows
        elif w is None or ts >= w or w - ts < lateness:
            return ()
        # listed as the JoinModel lists it: the side, the keys, the side's other columns
        layout, row = self.layout, change.row
        own_keys = layout.left_keys if side == "left" else layout.right_keys
        body: Result = {name: row.get(own) for name, own in zip(layout.left_keys, own_keys, strict=True)}
        if side == "left":
            body.update((name, row.get(name)) for name in layout.left_rest)
        else:
            body.update((out_name, row.get(name)) for name, out_name in layout.right_rest)
        self.late.append(late_event(body, "very_late", w, side))
        return None

    def _matches(self, left: _Held, right: _Held) -> list[Window | None]:
        """The windows (or ``[None]`` for an interval match) in which two rows join."""
        keys = self.layout
        lkey, rkey = _key(left.row, keys.left_keys), _key(right.row, keys.right_keys)
        if lkey != rkey or any(v is None for v in lkey):
            return []
        if self.op.window is None:
            ok = left.ts_ms + self.lower <= right.ts_ms <= left.ts_ms + self.upper
            return [None] if ok else []
        mine = left.windows or self.op.window.assign(left.ts_ms)
        theirs = right.windows or self.op.window.assign(right.ts_ms)
        return [x for x in mine if x in theirs]

    def _desired(self, w: int | None) -> list[tuple[Result, int]]:
        if self.op.window is not None:
            return [] if w is None else self._closed_windows(w)
        if self.op.as_of:
            return [] if w is None else self._in_force(w)
        lefts, rights = self.sides
        out: list[tuple[Result, int]] = []
        partnered: set[int] = set()
        for left in lefts:
            for right in rights:
                for window in self._matches(left, right):
                    partnered.update((id(left), id(right)))
                    if window is None or (w is not None and w >= window[1]):
                        out.append(
                            (self.layout.row(left.row, right.row, window), max(left.ts_ms, right.ts_ms))
                        )
        if w is None:
            return out
        if self.op.how in ("left", "full"):
            out += [
                (self.layout.row(h.row, None), h.ts_ms)
                for h in lefts
                if id(h) not in partnered and w > h.ts_ms + self.upper
            ]
        if self.op.how in ("right", "full"):
            out += [
                (self.layout.row(None, h.row), h.ts_ms)
                for h in rights
                if id(h) not in partnered and w > h.ts_ms - self.lower
            ]
        return out

    def _in_force(self, w: int) -> list[tuple[Result, int]]:
        """An as-of join's results: each left row the watermark passed, with the right row of its
        key in force at its time (the latest at or before it, by time then arrival, no older than
        the max age), or padded (a left join)."""
        lefts, rights = self.sides
        layout, age = self.layout, self.op.max_age_ms
        out: list[tuple[Result, int]] = []
        for a in lefts:
            if a.ts_ms >= w:
                continue
            key = _key(a.row, layout.left_keys)
            found = [
                b
                for b in rights
                if None not in key
                and _key(b.row, layout.right_keys) == key
                and b.ts_ms <= a.ts_ms
                and (age is None or b.ts_ms >= a.ts_ms - age)
            ]
            best = max(found, key=lambda b: (b.ts_ms, b.seq), default=None)
            if best is not None or self.op.how == "left":
                out.append((layout.row(a.row, None if best is None else best.row), a.ts_ms))
        return out

    def _closed_windows(self, w: int) -> list[tuple[Result, int]]:
        """A window join's results: in each window the watermark closed, per key, the pairs (and
        pads), or the semi or anti rows; a row with a null key has no partner (padded on an outer
        side, an anti row on the left)."""
        window = self.op.window
        assert window is not None
        how, layout = self.op.how, self.layout
        groups: dict[tuple[Key, Window], tuple[list[_Held], list[_Held]]] = {}
        alone: list[tuple[int, _Held, Window]] = []
        for i, (held, names) in enumerate(
            ((self.sides[0], layout.left_keys), (self.sides[1], layout.right_keys))
        ):
            for h in held:
                for x in h.windows or window.assign(h.ts_ms):
                    if w < x[1]:
                        continue
                    key = _key(h.row, names)
                    if any(v is None for v in key):
                        alone.append((i, h, x))
                    else:
                        groups.setdefault((key, x), ([], []))[i].append(h)
        out: list[tuple[Result, int]] = []
        for (_, x), (ls, rs) in groups.items():
            if how in ("semi", "anti"):
                out += [(layout.row(e.row, None, x), e.ts_ms) for e in ls if bool(rs) == (how == "semi")]
                continue
            out += [(layout.row(a.row, b.row, x), max(a.ts_ms, b.ts_ms)) for a in ls for b in rs]
            if how in ("left", "full") and not rs:
                out += [(layout.row(e.row, None, x), e.ts_ms) for e in ls]
            if how in ("right", "full") and not ls:
                out += [(layout.row(None, e.row, x), e.ts_ms) for e in rs]
        for i, h, x in alone:  # no partner: a pad, or (a left row) an anti row
            if how in (("left", "full", "anti") if i == 0 else ("right", "full")):
                out.append((layout.row(h.row, None, x) if i == 0 else layout.row(None, h.row, x), h.ts_ms))
        return out


class AggNode(Node):
    """``agg`` per key without a window."""

    def __init__(self, op: AggOf, source: Node) -> None:
        super().__init__((source,))
        self.op = op
        self.held: dict[Key, list[_Held]] = {}
        self.emitted: dict[Key, tuple[Result, int]] = {}

    def _step(self, event: Event) -> list[Change]:
        out = []
        for key, ts in self.hold_by_key(self.held, self.op.keys).items():
            rows = self.held[key]
            new = {**dict(zip(self.op.keys, key, strict=True)), **_aggregates(self.op.aggregates, rows)}
            old = self.emitted.get(key)
            if old is not None and rows and _same_row(old[0], new):
                continue
            if old is not None:
                out.append(Change(old[0], "retract", old[1]))
                del self.emitted[key]
            if rows:
                self.emitted[key] = (new, ts)
                out.append(Change(new, "emit", ts))
        self.wm = self.in_wm()
        return out


class TopNNode(Node):
    """``top_n`` per key over all rows."""

    def __init__(self, op: TopNOf, source: Node) -> None:
        super().__init__((source,))
        self.op = op
        self.columns = columns_of(op.input)
        self.held: dict[Key, list[_Held]] = {}
        self.shown: dict[Key, list[tuple[Result, int]]] = {}

    def _proxy(self, row: Row) -> Result:
        """The row under names ``top_n_rows`` ranks by, in one window, column order kept."""
        return {
            "window_start": 0,
            "window_end": 0,
            **{f"c{i}": row.get(c) for i, c in enumerate(self.columns)},
        }

    def _step(self, event: Event) -> list[Change]:
        out: list[Change] = []
        by = [f"c{self.columns.index(c)}" for c in self.op.by]
        for key in self.hold_by_key(self.held, self.op.keys):
            members = self.held[key]
            proxies = [self._proxy(h.row) for h in members]
            top = top_n_rows(proxies, self.op.n, by=by, ties=self.op.ties, ascending=self.op.ascending)
            free = list(range(len(members)))
            chosen = []
            for ranked in top:
                i = next(i for i in free if _same_row(proxies[i], ranked))
                free.remove(i)
                chosen.append((dict(members[i].row), members[i].ts_ms))
            changes, self.shown[key] = _diff(self.shown.get(key, []), chosen)
            out += changes
        self.wm = self.in_wm()
        return out


#: The row's event time as the over-aggregation's model reads it (no column of the row's).
_OVER_TIME = "\x00t"


class OverNode(Node):
    """An over-aggregation: an :class:`~krishiv_py.model.over.OverModel` in ``"retracting"`` mode
    over the input's changes, each result at its row's event time. Over source rows its allowed
    lateness classifies them against the input watermark before the step; a changelog's rows are
    never dropped. It passes its input watermark on unchanged: a row's result is emitted in the
    step whose watermark passes the row, before any downstream window that watermark closes."""

    def __init__(self, op: OverOf, node: Node, *, raw: bool) -> None:
        super().__init__([node])
        self.model = OverModel(
            keys=op.keys,
            frame=op.frame,
            preceding=op.preceding,
            aggs=op.aggregates,
            event_time=_OVER_TIME,
            allowed_lateness_ms=op.allowed_lateness_ms if raw else END_OF_TIME_MS,
            accumulation="retracting",
        )

    def _step(self, event: Event) -> list[Change]:
        rows = [{**c.row, _OVER_TIME: c.ts_ms, KIND_COLUMN: c.kind} for c in self.inputs[0].out]
        out = self.model.step(rows)
        self.wm = self.in_wm()
        if self.wm is not None:
            out += self.model.advance(self.wm)
        hidden = (_OVER_TIME, KIND_COLUMN)
        return [
            Change({k: v for k, v in r.items() if k not in hidden}, r[KIND_COLUMN], r[_OVER_TIME])
            for r in out
        ]

    def late_events(self) -> list[Result]:
        return [{k: v for k, v in e.items() if k != _OVER_TIME} for e in self.model.late_events]


class UnionNode(Node):
    def _step(self, event: Event) -> list[Change]:
        self.wm = self.in_wm()
        return [change for node in self.inputs for change in node.out]


class FilterNode(Node):
    def __init__(self, op: FilterOf, source: Node) -> None:
        super().__init__((source,))
        self.predicate = op.predicate
        self.passed: list[_Held] = []

    def _step(self, event: Event) -> list[Change]:
        out = []
        for change in self.inputs[0].out:
            if change.kind == "emit" and self.predicate(change.row):
                self.passed.append(self.hold(change))
                out.append(change)
            elif change.kind == "retract" and any(_same_row(h.row, change.row) for h in self.passed):
                _withdraw(self.passed, change)
                out.append(change)
        self.wm = self.in_wm()
        return out


class SelectNode(Node):
    def __init__(self, op: SelectOf, source: Node) -> None:
        super().__init__((source,))
        self.op = op

    def _step(self, event: Event) -> list[Change]:
        fn, columns = self.op.fn, self.op.columns
        self.wm = self.in_wm()
        return [
            attrs.evolve(c, row=dict(fn(c.row)) if fn else {n: c.row.get(n) for n in columns})
            for c in self.inputs[0].out
        ]
