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

__all__ = ["top_n_rows"]


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
