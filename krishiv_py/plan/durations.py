"""Durations as users write them: milliseconds, ``datetime.timedelta``, or Spark's interval strings.

Every duration argument of the builder (window sizes, slides, gaps, lags,
lateness, TTLs, timeouts, a join's bounds) takes an ``int`` of milliseconds,
a :class:`datetime.timedelta`, or an interval string as Spark writes it in
``withWatermark`` and ``window()``: ``"10 minutes"``, ``"5 seconds"``,
``"250 ms"``, ``"1 hour 30 minutes"``, ``"INTERVAL '5' SECOND"``. The three
give the same plan: the plan holds milliseconds. A duration that is not a
whole number of milliseconds is refused rather than rounded.

Examples
--------
>>> import datetime as dt
>>> to_ms("size", "10 minutes"), to_ms("size", dt.timedelta(seconds=5)), to_ms("size", 250)
(600000, 5000, 250)
>>> to_ms("lag", "1 hour 30 minutes"), to_ms("lag", "INTERVAL '5' SECOND"), to_ms("lag", "1.5 s")
(5400000, 5000, 1500)
>>> to_ms("lower", "-5 seconds", positive=None)
-5000
>>> to_ms("size", "10 fortnights")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
krishiv_py.errors.PlanError: size: unknown unit 'fortnights' in '10 fortnights'; a duration is ...
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any, TypeAlias

from krishiv_py.errors import PlanError

__all__ = ["Duration", "as_ms", "to_ms"]

#: What a duration argument takes.
Duration: TypeAlias = int | dt.timedelta | str

_FORMS = (
    "a duration is an int of milliseconds, a datetime.timedelta, or a string such as "
    "'10 minutes', '5 seconds', '250 ms'"
)
_UNITS_MS = {
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), Decimal(1)),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), Decimal(1_000)),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), Decimal(60_000)),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), Decimal(3_600_000)),
    **dict.fromkeys(("d", "day", "days"), Decimal(86_400_000)),
    **dict.fromkeys(("w", "week", "weeks"), Decimal(604_800_000)),
    **dict.fromkeys(("us", "micro", "micros", "microsecond", "microseconds"), Decimal("0.001")),
}
_PART = re.compile(r"\s*([+-]?)\s*'?\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*'?\s*([A-Za-z]+)\s*")


def to_ms(name: str, value: object, *, positive: bool | None = True) -> int:
    """``value`` in milliseconds; :class:`PlanError` naming ``name`` for anything else.

    ``positive``: ``True`` needs ``> 0``, ``False`` needs ``>= 0``, ``None``
    takes any sign (a join's bounds).
    """
    if isinstance(value, bool):
        raise PlanError(f"{name}: {value!r} is not a duration; {_FORMS}")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros % 1000:
            raise PlanError(f"{name}: {value!r} is not a whole number of milliseconds")
        ms = micros // 1000
    elif isinstance(value, str):
        ms = _parse(name, value)
    else:
        raise PlanError(f"{name}: {value!r} is not a duration; {_FORMS}")
    if positive is True and ms <= 0:
        raise PlanError(f"{name} must be > 0 milliseconds, got {value!r}")
    if positive is False and ms < 0:
        raise PlanError(f"{name} must be >= 0 milliseconds, got {value!r}")
    return ms


def as_ms(name: str, value: object) -> Any:
    """A ``timedelta`` or an interval string in milliseconds (any sign); anything else unchanged,
    for the plan node that takes it to check (its messages name the argument and the rule).

    >>> as_ms("gap_ms", "2 minutes"), as_ms("gap_ms", 5), as_ms("gap_ms", None)
    (120000, 5, None)
    """
    if isinstance(value, str | dt.timedelta):
        return to_ms(name, value, positive=None)
    return value


def _parse(name: str, text: str) -> int:
    body = text.strip()
    if body.upper().startswith("INTERVAL"):
        body = body[len("INTERVAL") :]
    if not body.strip():
        raise PlanError(f"{name}: {text!r} has no duration; {_FORMS}")
    total = Decimal(0)
    pos = 0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None or m.end() == pos:
            raise PlanError(f"{name}: cannot read {text!r} as a duration; {_FORMS}")
        sign, number, unit = m.groups()
        per = _UNITS_MS.get(unit.lower())
        if per is None:
            raise PlanError(f"{name}: unknown unit {unit!r} in {text!r}; {_FORMS}")
        try:
            amount = Decimal(number) * per
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            raise PlanError(f"{name}: cannot read {text!r} as a duration; {_FORMS}") from None
        total += -amount if sign == "-" else amount
        pos = m.end()
    if total != total.to_integral_value():
        raise PlanError(f"{name}: {text!r} is not a whole number of milliseconds")
    return int(total)
