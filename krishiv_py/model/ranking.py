"""Window top-N on final results, in plain Python: the oracle for ``Stream.top_n``.

Independent of the lowerings: rows are grouped and sorted one by one.

>>> rows = [
...     {"k": "a", "window_start": 0, "window_end": 10, "n": 3},
...     {"k": "b", "window_start": 0, "window_end": 10, "n": 5},
...     {"k": "c", "window_start": 0, "window_end": 10, "n": 5},
...     {"k": "d", "window_start": 10, "window_end": 20, "n": None},
... ]
>>> [r["k"] for r in top_n_rows(rows, 1, by=["n"])]
['b', 'c', 'd']
>>> [r["k"] for r in top_n_rows(rows, 1, by=["n"], ties="first")]
['b', 'd']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["TopNModel", "top_n_rows"]


def top_n_rows(
    rows: Sequence[Mapping[str, Any]],
    n: int,
    *,
    by: Sequence[str],
    keys: Sequence[str] = (),
    ties: Literal["all", "first"] = "all",
    ascending: bool = False,
) -> list[dict[str, Any]]:
    """The rows of each window (and ``keys``) ranking within ``n`` by ``by``; nulls rank last.

    ``ties="all"``: a row's rank is one more than the rows that rank strictly
    before it, and rows of rank ``<= n`` stay. ``"first"``: the first ``n``
    rows in order, the other columns (in order, nulls first) breaking ties.
    """

    def order(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
        for c in by:
            x, y = a[c], b[c]
            if x == y:
                continue
            if x is None or y is None:
                return 1 if x is None else -1
            first = x < y if ascending else x > y
            return -1 if first else 1
        return 0

    def tie_break(row: Mapping[str, Any]) -> tuple[tuple[bool, Any], ...]:
        return tuple((row[c] is not None, row[c]) for c in row if c not in by)

    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[c] for c in ("window_start", "window_end", *keys)), []).append(row)
    out: list[dict[str, Any]] = []
    for members in groups.values():
        if ties == "all":
            out += [dict(r) for r in members if 1 + sum(order(o, r) < 0 for o in members) <= n]
        else:
            ranked = sorted(members, key=tie_break)
            ranked.sort(key=functools.cmp_to_key(order))  # stable: ties keep the tie-break order
            out += [dict(r) for r in ranked[:n]]
    return out


class TopNModel:
    """Window top-N over the results of ``upstream`` as they fire and are corrected, one step at a time.

    Each upstream result is the current value of its window and key (a
    ``retract`` row removes it). After each step, every window (and
    ``keys``) whose results changed is ranked again with :func:`top_n_rows`;
    a row that left the top, or whose values changed, is retracted, and a
    row that entered it, or changed, is emitted — ``kind`` says which, as in
    retracting results. A window's ranking is dropped once the upstream
    watermark passes its end plus ``allowed_lateness_ms``.

    >>> from krishiv_py.plan.windows import TumblingWindow
    >>> from krishiv_py.model.reference import AggSpec, ReferenceModel
    >>> up = ReferenceModel(window=TumblingWindow(size_ms=10), event_time="t", lag_ms=0, keys=["k"],
    ...                     aggregates=[AggSpec(name="n", func="count", column=None)],
    ...                     allowed_lateness_ms=20, accumulation="retracting")
    >>> model = TopNModel(up, n=1, by=["n"], allowed_lateness_ms=20)
    >>> model.send([{"k": "a", "t": 1}, {"k": "a", "t": 2}, {"k": "b", "t": 3}, {"k": "c", "t": 11}])
    [{'k': 'a', 'window_start': 0, 'window_end': 10, 'n': 2, 'kind': 'emit'}]
    >>> for row in model.send([{"k": "b", "t": 4}, {"k": "b", "t": 5}]):
    ...     print(row)
    {'k': 'a', 'window_start': 0, 'window_end': 10, 'n': 2, 'kind': 'retract'}
    {'k': 'b', 'window_start': 0, 'window_end': 10, 'n': 3, 'kind': 'emit'}
    """

    def __init__(
        self,
        upstream: Any,
        *,
        n: int,
        by: Sequence[str],
        keys: Sequence[str] = (),
        ties: Literal["all", "first"] = "all",
        ascending: bool = False,
        allowed_lateness_ms: int = 0,
    ) -> None:
        self._up = upstream
        self._n, self._by, self._keys = n, tuple(by), tuple(keys)
        self._ties, self._ascending = ties, ascending
        self._lateness = allowed_lateness_ms
        self._identity_keys = tuple(upstream._keys)
        self._live: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._shown: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._results: list[dict[str, Any]] = []

    def send(self, rows: Sequence[Mapping[str, Any]], *, source: str = "main") -> list[dict[str, Any]]:
        return self._step(self._up.send(rows, source=source))

    def advance_watermark(self, ts_ms: int, *, source: str = "main") -> list[dict[str, Any]]:
        return self._step(self._up.advance_watermark(ts_ms, source=source))

    def advance_processing_time(self, ms: float) -> list[dict[str, Any]]:
        return self._step(self._up.advance_processing_time(ms))

    def close(self, *, source: str = "main") -> list[dict[str, Any]]:
        return self._step(self._up.close(source=source))

    @property
    def results(self) -> list[dict[str, Any]]:
        return list(self._results)

    @property
    def late_events(self) -> list[dict[str, Any]]:
        return list(self._up.late_events)

    @property
    def watermark_ms(self) -> int | None:
        wm: int | None = self._up.watermark_ms
        return wm

    def _group(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in ("window_start", "window_end", *self._keys))

    def _step(self, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        touched: list[tuple[Any, ...]] = []
        for row in changes:
            identity = (*(row[k] for k in self._identity_keys), row["window_start"], row["window_end"])
            value = {c: v for c, v in row.items() if c != "kind"}
            if row.get("kind") == "retract":
                self._live.pop(identity, None)
            else:
                self._live[identity] = value
            if self._group(value) not in touched:
                touched.append(self._group(value))
        out: list[dict[str, Any]] = []
        for group in touched:
            members = [r for r in self._live.values() if self._group(r) == group]
            top = top_n_rows(
                members, self._n, by=self._by, keys=self._keys, ties=self._ties, ascending=self._ascending
            )
            old = self._shown.get(group, [])
            out += [{**r, "kind": "retract"} for r in old if not _within(r, top)]
            out += [{**r, "kind": "emit"} for r in top if not _within(r, old)]
            self._shown[group] = top
        wm = self._up.watermark_ms
        if wm is not None:
            for identity, row in list(self._live.items()):
                if row["window_end"] + self._lateness <= wm:
                    del self._live[identity]
            for group in [g for g in self._shown if g[1] + self._lateness <= wm]:
                del self._shown[group]
        self._results += out
        return out


def _within(row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> bool:
    return any(_same_row(row, other) for other in rows)


def _same_row(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def same(x: Any, y: Any) -> bool:
        return (isinstance(x, float) and isinstance(y, float) and x != x and y != y) or x == y

    return a.keys() == b.keys() and all(same(a[c], b[c]) for c in a)
