"""Pane events of time-interval windows (IBM Streams SPL's window events).

A :meth:`~krishiv_py.api.keyed.WindowAssigners.time_interval_window` pane
goes through three events, each handed to the callback registered on the
windowed stream, on the driver, as a :class:`PaneEvent`:

``on_initial_full``
    once, when the watermark first reaches the pane's end — just before its
    first ``on_trigger`` (SPL's ``windowInitialFullEvent``);
``on_trigger``
    every time the pane fires: first when the watermark reaches its end,
    then on a later watermark if rows were inserted since it last fired
    (SPL's ``windowTriggerEvent``); only the keys whose pane changed fire;
``on_close``
    once, when the watermark reaches ``end + discard_age`` and the pane is
    deleted, with its final aggregates (SPL's ``windowCloseEvent``).

Within one micro-batch the events come pane by pane in the order of
``(window_end, window_start, key)``: every firing first, then every close.
A callback that raises fails the job with :class:`~krishiv_py.JobError`.

Examples
--------
>>> event = PaneEvent(kind="trigger", key=("ann",), window_start_ms=0, window_end_ms=10,
...                   values={"n": 2})
>>> event
PaneEvent(kind='trigger', key=('ann',), window_start_ms=0, window_end_ms=10, values={'n': 2})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError

__all__ = ["PaneCallback", "PaneCallbacks", "PaneEvent", "PaneEventKind"]

PaneEventKind: TypeAlias = Literal["initial_full", "trigger", "close"]


@attrs.frozen(kw_only=True)
class PaneEvent:
    """One event of one pane: its key, bounds (epoch ms) and aggregates at that moment."""

    kind: PaneEventKind
    key: tuple[object, ...]
    window_start_ms: int
    window_end_ms: int
    values: Mapping[str, object] = attrs.field(hash=False)


PaneCallback: TypeAlias = Callable[[PaneEvent], object]


def _check(_: object, attribute: Any, value: PaneCallback | None) -> None:
    if value is not None and not callable(value):
        raise PlanError(f"{attribute.name}() takes a function of one PaneEvent, got {value!r}")


@attrs.frozen(kw_only=True)
class PaneCallbacks:
    """The callbacks registered on one windowed stream (None: not registered)."""

    on_initial_full: PaneCallback | None = attrs.field(default=None, validator=_check, eq=False)
    on_trigger: PaneCallback | None = attrs.field(default=None, validator=_check, eq=False)
    on_close: PaneCallback | None = attrs.field(default=None, validator=_check, eq=False)

    @property
    def any(self) -> bool:
        return any(f is not None for f in (self.on_initial_full, self.on_trigger, self.on_close))

    def names(self) -> list[str]:
        return [n for n in ("on_initial_full", "on_trigger", "on_close") if getattr(self, n) is not None]
