"""``SET key = value``: the settings the next query of a session takes.

A ``SET`` statement changes nothing by itself: its settings wait in the
session until the next query (``SELECT``) that ``sql()`` accepts, which
takes them all and leaves none for the query after it. A query that fails
with :class:`~krishiv_py.PlanError` leaves them waiting, so it can be
corrected and run again. A later ``SET`` of the same key replaces the
earlier value.

- ``watermark.lag`` (an ``INTERVAL``, or ``'auto'``): the ``lag_ms`` of
  ``watermark(column, lag_ms)``; 0 when not set; ``'auto'``: an automatic lag
  with :class:`~krishiv_py.AutoLag`'s defaults (SPEC 3.4).
- ``watermark.column`` (a column name): the event-time column.
- ``watermark.future_tolerance``, ``watermark.idle_timeout`` (``INTERVAL``):
  ``watermark(..., future_tolerance_ms=, idle_timeout_ms=)``.
- ``window.allowed_lateness`` (``INTERVAL``): ``allowed_lateness(ms)``.
- ``window.accumulation`` (``accumulating``, ``discarding`` or
  ``retracting``): ``accumulation(mode)``.
- ``window.trigger`` (``on_watermark()``, ``on_every_element()``,
  ``on_count(n)`` or ``on_interval(INTERVAL ...)``): ``trigger(Trigger.on_...)``.
- ``window.state_ttl`` (``INTERVAL``) and ``window.state_ttl_time``
  (``event`` or ``processing``): ``with_state_ttl(StateTtlConfig(ttl_ms=, time=))``.
- ``join.allowed_lateness`` (``INTERVAL``), ``join.accumulation``
  (``accumulating`` or ``retracting``) and ``join.state_ttl`` (``INTERVAL``):
  the same options of the query's join, so that a join followed by a window
  has a one-query form with both (SPEC 3.10). In a query whose join has no
  window after it, the ``window.*`` options apply to the join too (set one
  of the two forms of an option, not both).

Intervals are ``INTERVAL '5' SECOND`` (also ``INTERVAL '5 seconds'``,
``INTERVAL 5 SECONDS`` and sums such as ``INTERVAL '1' MINUTE + INTERVAL
'30' SECOND``) in milliseconds, seconds, minutes, hours, days or weeks;
months and years have no fixed length and are refused.

:func:`emission_options` and :func:`join_options` are the ``window.*`` and
``join.*`` settings as the builder methods they name, which
:func:`apply_settings` calls on a window, a join or an over-aggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.plan.emission import Accumulation, StateTtlConfig, Trigger

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.sql.source import SqlText

__all__ = [
    "KEYS",
    "SqlSettings",
    "apply_settings",
    "emission_options",
    "interval_ms",
    "join_options",
    "parse_set",
]

_UNIT_MS = {
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


@attrs.frozen(kw_only=True)
class SqlSettings:
    """The settings waiting for the next query (None: not set)."""

    lag_ms: int | Literal["auto"] | None = None
    column: str | None = None
    future_tolerance_ms: int | None = None
    idle_timeout_ms: int | None = None
    allowed_lateness_ms: int | None = None
    accumulation: Accumulation | None = None
    trigger: Trigger | None = None
    state_ttl_ms: int | None = None
    state_ttl_time: str | None = None
    join_allowed_lateness_ms: int | None = None
    join_accumulation: Literal["accumulating", "retracting"] | None = None
    join_state_ttl_ms: int | None = None
    #: The ``SET`` statements these came from, as written (``explain()`` shows them).
    statements: tuple[str, ...] = ()

    @property
    def watermark_keys(self) -> list[str]:
        """The ``watermark.*`` keys that are set."""
        return [k for k, f in KEYS.items() if k.startswith("watermark.") and getattr(self, f[0]) is not None]

    @property
    def join_keys(self) -> list[str]:
        """The ``join.*`` keys that are set."""
        return [k for k, f in KEYS.items() if k.startswith("join.") and getattr(self, f[0]) is not None]

    @property
    def window_keys(self) -> list[str]:
        """The ``window.*`` keys that are set."""
        return [k for k, f in KEYS.items() if k.startswith("window.") and getattr(self, f[0]) is not None]


def interval_ms(node: exp.Expression, sql: SqlText, what: str) -> int:
    """An ``INTERVAL`` (or a sum of them) in whole milliseconds."""
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return interval_ms(node.this, sql, what)
    if isinstance(node, exp.Add):
        return interval_ms(node.this, sql, what) + interval_ms(node.expression, sql, what)
    if not isinstance(node, exp.Interval):
        raise sql.error(node, f"{what} takes an INTERVAL, e.g. INTERVAL '5' SECOND")
    unit = node.args.get("unit")
    if unit is None or not isinstance(unit, exp.Var):
        raise sql.error(
            node,
            f"{what}: write an INTERVAL of one unit, e.g. INTERVAL '5' SECOND, or a sum such as "
            "INTERVAL '1' MINUTE + INTERVAL '30' SECOND",
        )
    name = unit.name.lower().removesuffix("s")
    if name not in _UNIT_MS:
        raise sql.error(
            node,
            f"{what}: INTERVAL unit {unit.name} is not supported (months and years have no fixed "
            f"length); use {', '.join(u.upper() for u in _UNIT_MS)}",
        )
    try:
        amount = Decimal(node.this.name) * _UNIT_MS[name]
    except InvalidOperation:
        raise sql.error(node, f"{what}: {node.this.name!r} is not a number") from None
    if amount != amount.to_integral_value():
        raise sql.error(node, f"{what} must be a whole number of milliseconds")
    return int(amount)


def _lag(node: exp.Expression, sql: SqlText, key: str) -> int | Literal["auto"]:
    """An ``INTERVAL``, or ``'auto'`` (an automatic lag)."""
    from sqlglot import exp

    if isinstance(node, exp.Literal) and node.is_string:
        if node.name.lower() == "auto":
            return "auto"
        raise sql.error(node, f"SET {key} takes an INTERVAL, e.g. INTERVAL '5' SECOND, or 'auto'")
    return _interval(node, sql, key)


def _name(node: exp.Expression, sql: SqlText, key: str) -> str:
    from sqlglot import exp

    if isinstance(node, exp.Column | exp.Var | exp.Identifier) or (
        isinstance(node, exp.Literal) and node.is_string
    ):
        return str(node.name)
    raise sql.error(node, f"SET {key} takes a name, e.g. SET {key} = {_EXAMPLES[key]}")


def _choice(choices: tuple[str, ...]) -> Callable[[exp.Expression, SqlText, str], str]:
    def parse(node: exp.Expression, sql: SqlText, key: str) -> str:
        value = _name(node, sql, key).lower()
        if value not in choices:
            raise sql.error(node, f"SET {key} is one of {', '.join(choices)}; got {value!r}")
        return value

    return parse


def _trigger(node: exp.Expression, sql: SqlText, key: str) -> Trigger:
    from sqlglot import exp

    if not isinstance(node, exp.Anonymous):
        raise sql.error(
            node,
            f"SET {key} takes on_watermark(), on_every_element(), on_count(n) or on_interval(INTERVAL ...)",
        )
    name, args = node.name.lower(), node.expressions
    try:
        if name in ("on_watermark", "on_every_element") and not args:
            return Trigger.on_watermark() if name == "on_watermark" else Trigger.on_every_element()
        if name == "on_count" and len(args) == 1 and isinstance(args[0], exp.Literal) and args[0].is_int:
            return Trigger.on_count(int(args[0].name))
        if name == "on_interval" and len(args) == 1:
            return Trigger.on_interval(interval_ms(args[0], sql, "on_interval()"))
    except PlanError as exc:
        raise sql.error(node, f"SET {key}: {exc}") from None
    raise sql.error(
        node,
        f"SET {key} takes on_watermark(), on_every_element(), on_count(n) or on_interval(INTERVAL ...)",
    )


def _interval(node: exp.Expression, sql: SqlText, key: str) -> int:
    ms = interval_ms(node, sql, f"SET {key}")
    if ms < 0:
        raise sql.error(node, f"SET {key} must be >= 0")
    return ms


Parser = Callable[["exp.Expression", "SqlText", str], Any]

#: Every key: the :class:`SqlSettings` field it sets and how its value is read.
KEYS: dict[str, tuple[str, Parser]] = {
    "watermark.lag": ("lag_ms", _lag),
    "watermark.column": ("column", _name),
    "watermark.future_tolerance": ("future_tolerance_ms", _interval),
    "watermark.idle_timeout": ("idle_timeout_ms", _interval),
    "window.allowed_lateness": ("allowed_lateness_ms", _interval),
    "window.accumulation": ("accumulation", _choice(get_args(Accumulation))),
    "window.trigger": ("trigger", _trigger),
    "window.state_ttl": ("state_ttl_ms", _interval),
    "window.state_ttl_time": ("state_ttl_time", _choice(("event", "processing"))),
    "join.allowed_lateness": ("join_allowed_lateness_ms", _interval),
    "join.accumulation": ("join_accumulation", _choice(("accumulating", "retracting"))),
    "join.state_ttl": ("join_state_ttl_ms", _interval),
}
_EXAMPLES = {
    "watermark.column": "event_time",
    "window.accumulation": "retracting",
    "window.state_ttl_time": "processing",
    "join.accumulation": "retracting",
}


def parse_set(node: exp.Set, text: str, sql: SqlText, settings: SqlSettings) -> SqlSettings:
    """``settings`` with the items of the ``SET`` statement ``node`` applied."""
    from sqlglot import exp

    if node.args.get("unset") or not node.expressions:
        raise sql.error(node, "SET takes key = value, e.g. SET watermark.lag = INTERVAL '5' SECOND")
    changes: dict[str, Any] = {}
    for item in node.expressions:
        assignment = item.this if isinstance(item, exp.SetItem) else None
        if not isinstance(assignment, exp.EQ) or item.args.get("kind"):
            raise sql.error(item, "SET takes key = value, e.g. SET watermark.lag = INTERVAL '5' SECOND")
        key = _key(assignment.this)
        if key not in KEYS:
            raise sql.error(assignment.this, f"unknown setting {key!r}; the settings are: {', '.join(KEYS)}")
        field, parse = KEYS[key]
        changes[field] = parse(assignment.expression, sql, key)
    return attrs.evolve(settings, statements=(*settings.statements, text), **changes)


def _key(node: exp.Expression) -> str:
    from sqlglot import exp

    if isinstance(node, exp.Column):
        return ".".join(part.name for part in node.parts).lower()
    return node.sql(dialect="spark").lower()


# --- what the settings are as builder options -------------------------------------------


def join_options(s: SqlSettings) -> list[tuple[str, str, Any]]:
    """The ``join.*`` settings: (setting, builder method, argument) of the query's join."""
    out: list[tuple[str, str, Any]] = []
    if s.join_allowed_lateness_ms is not None:
        out.append(("join.allowed_lateness", "allowed_lateness", s.join_allowed_lateness_ms))
    if s.join_accumulation is not None:
        out.append(("join.accumulation", "accumulation", s.join_accumulation))
    if s.join_state_ttl_ms is not None:
        out.append(("join.state_ttl", "with_state_ttl", StateTtlConfig(ttl_ms=s.join_state_ttl_ms)))
    return out


_Emitting = TypeVar("_Emitting")


def emission_options(s: SqlSettings) -> list[tuple[str, str, Any]]:
    """The ``window.*`` settings windows and joins both take: (setting, builder method, argument)."""
    if s.state_ttl_time is not None and s.state_ttl_ms is None:
        raise PlanError("SET window.state_ttl_time needs SET window.state_ttl = INTERVAL ...")
    out: list[tuple[str, str, Any]] = []
    if s.allowed_lateness_ms is not None:
        out.append(("window.allowed_lateness", "allowed_lateness", s.allowed_lateness_ms))
    if s.accumulation is not None:
        out.append(("window.accumulation", "accumulation", s.accumulation))
    if s.state_ttl_ms is not None:
        time: Literal["event", "processing"] = "processing" if s.state_ttl_time == "processing" else "event"
        out.append(("window.state_ttl", "with_state_ttl", StateTtlConfig(ttl_ms=s.state_ttl_ms, time=time)))
    return out


def apply_settings(target: _Emitting, options: list[tuple[str, str, Any]]) -> _Emitting:
    """``target`` with each option's builder method applied; a refusal names the ``SET`` it came from."""
    for key, method, arg in options:
        try:
            target = getattr(target, method)(arg)
        except PlanError as exc:
            raise PlanError(f"SET {key}: {exc}") from None
    return target
