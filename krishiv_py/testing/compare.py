"""Compare result rows as multisets, the way result tables of two engines are compared.

Rows are dicts (or a table with ``.to_pylist()``, such as a ``pyarrow.Table``;
pyarrow itself is not imported). Before comparing, values are normalised:

- ``datetime`` becomes int epoch milliseconds (a naive datetime is UTC);
  a datetime with a sub-millisecond part becomes the exact
  ``decimal.Decimal`` number of milliseconds, so it equals only the same
  instant, never a rounded int;
- every float NaN becomes one NaN object, so NaN equals NaN;
- lists and tuples become tuples, nested dicts become sorted item tuples.

Row order does not matter, duplicates do. Floats match with
``math.isclose(rel_tol=rel_tol, abs_tol=1e-9)``; an int and a float match
when numerically close; everything else compares with ``==``.

Examples
--------
>>> assert_same_rows([{"n": 1, "x": 0.1 + 0.2}], [{"x": 0.3, "n": 1}])
>>> normalize_rows([{"b": 2, "a": float("nan")}])
[(('a', nan), ('b', 2))]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol, TypeAlias, runtime_checkable

__all__ = ["RowsLike", "SupportsToPylist", "assert_same_rows", "normalize_rows"]

NormalizedRow: TypeAlias = tuple[tuple[str, object], ...]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_NAN = float("nan")
_SHOWN_ROWS = 50


@runtime_checkable
class SupportsToPylist(Protocol):
    """A table that can list its rows as dicts (``pyarrow.Table`` does)."""

    def to_pylist(self) -> list[dict[str, Any]]: ...


RowsLike: TypeAlias = Sequence[Mapping[str, object]] | SupportsToPylist


def normalize_rows(rows: RowsLike) -> list[NormalizedRow]:
    """Rows as sorted tuples of ``(column, normalised value)``, the list sorted.

    Examples
    --------
    >>> from datetime import datetime, timezone
    >>> normalize_rows([{"t": datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC)}, {"t": 5}])
    [(('t', 5),), (('t', 2000),)]
    """
    return sorted((_normalize_row(row) for row in _as_rows(rows)), key=_row_sort_key)


def assert_same_rows(actual: RowsLike, expected: RowsLike, *, rel_tol: float = 1e-9) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` hold the same rows.

    Parameters
    ----------
    actual
        The rows produced (list of dicts, or a table with ``to_pylist()``).
    expected
        The rows wanted, same forms.
    rel_tol
        Relative tolerance for floats (absolute tolerance is ``1e-9``).

    Examples
    --------
    >>> assert_same_rows([{"k": 1}], [{"k": 2}])
    Traceback (most recent call last):
    ...
    AssertionError: rows differ: 1 only in actual, 1 only in expected
    only in actual:
      {'k': 1}
    only in expected:
      {'k': 2}
    """
    only_actual, only_expected = _unmatched(normalize_rows(actual), normalize_rows(expected), rel_tol)
    if only_actual or only_expected:
        raise AssertionError(_describe(only_actual, only_expected))


def _as_rows(rows: RowsLike) -> Sequence[Mapping[str, object]]:
    if isinstance(rows, SupportsToPylist):
        return rows.to_pylist()
    return rows


def _normalize_row(row: Mapping[str, object]) -> NormalizedRow:
    return tuple(sorted((name, _normalize_value(value)) for name, value in row.items()))


def _normalize_value(value: object) -> object:
    if isinstance(value, datetime):
        return _datetime_ms(value)
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, list | tuple):
        return tuple(_normalize_value(item) for item in value)
    if isinstance(value, Mapping):
        return _normalize_row(value)
    return value


def _datetime_ms(value: datetime) -> int | Decimal:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    micros = (aware - _EPOCH) // _ONE_US
    if micros % 1000 == 0:
        return micros // 1000
    return Decimal(micros) / 1000


def _unmatched(
    actual: list[NormalizedRow], expected: list[NormalizedRow], rel_tol: float
) -> tuple[list[NormalizedRow], list[NormalizedRow]]:
    """Rows left over on each side after pairing equal rows (exactly, then within tolerance)."""
    exact = Counter(actual) & Counter(expected)
    rest_actual = _subtract(actual, exact)
    rest_expected = _subtract(expected, exact)
    only_expected = []
    for row in rest_expected:
        index = next((i for i, cand in enumerate(rest_actual) if _rows_match(cand, row, rel_tol)), None)
        if index is None:
            only_expected.append(row)
        else:
            del rest_actual[index]
    return rest_actual, only_expected


def _subtract(rows: list[NormalizedRow], taken: Counter[NormalizedRow]) -> list[NormalizedRow]:
    left = taken.copy()
    out = []
    for row in rows:
        if left[row] > 0:
            left[row] -= 1
        else:
            out.append(row)
    return out


def _rows_match(a: NormalizedRow, b: NormalizedRow, rel_tol: float) -> bool:
    if [name for name, _ in a] != [name for name, _ in b]:
        return False
    return all(_values_match(x, y, rel_tol) for (_, x), (_, y) in zip(a, b, strict=True))


def _values_match(a: object, b: object, rel_tol: float) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_values_match(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    pair = _float_pair(a, b)
    if pair is not None:
        return _floats_match(*pair, rel_tol)
    return a == b


def _float_pair(a: object, b: object) -> tuple[float, float] | None:
    """Both as floats when both are numbers and at least one is a float."""
    if not (isinstance(a, int | float) and isinstance(b, int | float)):
        return None
    if isinstance(a, int) and isinstance(b, int):
        return None
    return float(a), float(b)


def _floats_match(a: float, b: float, rel_tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9)


def _row_sort_key(row: NormalizedRow) -> tuple[tuple[str, int, float, str], ...]:
    return tuple((name, *_value_sort_key(value)) for name, value in row)


def _value_sort_key(value: object) -> tuple[int, float, str]:
    """Orders values of any types: None first, then numbers, then the rest by repr."""
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        number = float(value)
        return (1, math.inf if math.isnan(number) else number, repr(value))
    return (2, 0.0, repr(value))


def _describe(only_actual: list[NormalizedRow], only_expected: list[NormalizedRow]) -> str:
    lines = [f"rows differ: {len(only_actual)} only in actual, {len(only_expected)} only in expected"]
    for title, rows in (("only in actual:", only_actual), ("only in expected:", only_expected)):
        if rows:
            lines.append(title)
            lines.extend(f"  {dict(row)!r}" for row in rows[:_SHOWN_ROWS])
            if len(rows) > _SHOWN_ROWS:
                lines.append(f"  ... and {len(rows) - _SHOWN_ROWS} more")
    return "\n".join(lines)
