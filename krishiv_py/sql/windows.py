"""The window helpers of Krishiv's SQL and the builder windows they name.

====================================================  =========================================
SQL (in ``GROUP BY`` and ``SELECT``)                  builder
====================================================  =========================================
``tumble_start/tumble_end(ts, size [, offset])``      ``tumbling_window(size, offset_ms=offset)``
``hop_start/hop_end(ts, slide, size)``                ``sliding_window(size, slide)``
``session_start/session_end(ts, gap [, max])``        ``session_window(gap, max_duration_ms=max)``
====================================================  =========================================

Every duration is an ``INTERVAL``. ``ts`` is the event-time column, or
``PROCTIME()`` for a tumbling window in processing time
(``tumbling_window(size, time="processing")``, Flink's ``TUMBLE(PROCTIME(), size)``). The
``_start`` helper's value is the window's ``window_start``, the ``_end``
helper's its ``window_end``. ``GROUP BY`` names one window (by either
helper, or both); a helper in ``SELECT`` must name the same window with the
same arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow, WindowSpec
from krishiv_py.sql.settings import interval_ms

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.keyed import KeyedStream
    from krishiv_py.api.stream import Stream
    from krishiv_py.api.windowed import WindowedStream
    from krishiv_py.sql.source import SqlText

__all__ = ["HELPERS", "PROCTIME", "WindowCall", "helper_of", "is_proctime", "window_call"]

#: The time column of a window in processing time, as a :class:`WindowCall` names it.
PROCTIME = "PROCTIME()"

Kind = Literal["tumble", "hop", "session"]

#: Helper name -> (window kind, the window column its value is).
HELPERS: dict[str, tuple[Kind, str]] = {
    "tumble_start": ("tumble", "window_start"),
    "tumble_end": ("tumble", "window_end"),
    "hop_start": ("hop", "window_start"),
    "hop_end": ("hop", "window_end"),
    "session_start": ("session", "window_start"),
    "session_end": ("session", "window_end"),
}
_ARITY: dict[Kind, tuple[int, int, str]] = {
    "tumble": (2, 3, "(ts, size [, offset])"),
    "hop": (3, 3, "(ts, slide, size)"),
    "session": (2, 3, "(ts, gap [, max_duration])"),
}
_ARG_NAMES: dict[Kind, tuple[str, ...]] = {
    "tumble": ("size", "offset"),
    "hop": ("slide", "size"),
    "session": ("gap", "max_duration"),
}


@attrs.frozen
class WindowCall:
    """One helper call: the window it names and which of its bounds it is."""

    kind: Kind
    column: str
    durations: tuple[int, ...]
    output: str
    node: exp.Expression = attrs.field(eq=False)

    @property
    def window(self) -> tuple[Kind, str, tuple[int, ...]]:
        """What identifies the window: kind, time column and durations."""
        return (self.kind, self.column, self.durations)

    @property
    def processing(self) -> bool:
        """Whether the window runs in processing time (its time column is ``PROCTIME()``)."""
        return self.column == PROCTIME

    def spec(self) -> WindowSpec:
        d = self.durations
        if self.kind == "tumble":
            time: Literal["event", "processing"] = "processing" if self.processing else "event"
            return TumblingWindow(size_ms=d[0], offset_ms=d[1] if len(d) > 1 else 0, time=time)
        if self.kind == "hop":
            return SlidingWindow(size_ms=d[1], slide_ms=d[0])
        return SessionWindow(gap_ms=d[0], max_duration_ms=d[1] if len(d) > 1 else None)

    def assign(self, stream: Stream | KeyedStream) -> WindowedStream:
        """``stream`` with this window, through the builder's assigner."""
        spec = self.spec()
        if isinstance(spec, TumblingWindow):
            return stream.tumbling_window(spec.size_ms, offset_ms=spec.offset_ms, time=spec.time)
        if isinstance(spec, SlidingWindow):
            return stream.sliding_window(spec.size_ms, spec.slide_ms)
        assert isinstance(spec, SessionWindow)
        return stream.session_window(spec.gap_ms, max_duration_ms=spec.max_duration_ms)


def helper_of(node: exp.Expression) -> str | None:
    """The helper name if ``node`` calls a window helper."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous) and str(node.name).lower() in HELPERS:
        return str(node.name).lower()
    return None


def is_proctime(node: exp.Expression) -> bool:
    """Whether ``node`` is ``PROCTIME()`` (Flink's processing-time attribute), without arguments."""
    from sqlglot import exp

    return isinstance(node, exp.Anonymous) and str(node.name).lower() == "proctime" and not node.expressions


def window_call(node: exp.Expression, sql: SqlText) -> WindowCall:
    """Read a helper call; its time column is returned as written (resolved by the caller)."""
    from sqlglot import exp

    name = helper_of(node)
    assert name is not None and isinstance(node, exp.Anonymous)
    kind, output = HELPERS[name]
    low, high, shape = _ARITY[kind]
    args = node.expressions
    if not low <= len(args) <= high:
        raise sql.error(node, f"{name} takes {shape}, every duration an INTERVAL")
    ts = args[0]
    if is_proctime(ts) and kind != "tumble":
        raise sql.error(
            ts,
            f"{name} runs in event time; a window in processing time is tumbling: "
            "tumble_start(PROCTIME(), size)",
        )
    if not is_proctime(ts) and (not isinstance(ts, exp.Column) or isinstance(ts.this, exp.Star)):
        raise sql.error(ts, f"the first argument of {name} is the event-time column (or PROCTIME())")
    durations = tuple(
        interval_ms(arg, sql, f"{name}: {what}")
        for arg, what in zip(args[1:], _ARG_NAMES[kind], strict=False)
    )
    column = PROCTIME if is_proctime(ts) else str(ts.name)
    call = WindowCall(kind=kind, column=column, durations=durations, output=output, node=node)
    try:
        call.spec()
    except PlanError as exc:
        raise sql.error(node, f"{name}: {exc}") from None
    return call
