"""Order-independent result digests, so runners can be checked against each other.

Standard library only: the PyFlink runner imports it from its own environment.
A result is a list of rows in the query's canonical column order
(:data:`benchmarks.queries.QUERIES`): strings and integers as they are,
window bounds as integer epoch milliseconds, doubles rounded to 6 places.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def norm(value: Any) -> Any:
    """One value in canonical form (timestamps -> epoch ms, floats rounded)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if value == int(value) and abs(value) < 2**53:
            return int(value)
        return round(value, 6)
    return value


def digest(rows: Iterable[Sequence[Any]]) -> tuple[int, str]:
    """``(row count, 16-hex-digit digest)`` of ``rows``, independent of their order."""
    canon = sorted(repr(tuple(norm(v) for v in row)) for row in rows)
    h = hashlib.sha256()
    for line in canon:
        h.update(line.encode())
        h.update(b"\n")
    return len(canon), h.hexdigest()[:16]
