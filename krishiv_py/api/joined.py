"""What a join's rows take after the join: allowed lateness, accumulation, a late-event handler, a state TTL.

``KeyedStream.interval_join``, ``KeyedStream.as_of_join`` and
``WindowedStream.join`` return a :class:`~krishiv_py.JoinedStream`: a
``Stream`` (``api/stream.py``, whose ``Stream._joined`` makes it) with the
options of :class:`JoinOptions`, each of which returns a new one with the
join node's emission changed. Every call validates its arguments.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from krishiv_py.errors import PlanError
from krishiv_py.late import LateEventHandler, checked_handler
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import DEFAULT_ALLOWED_LATENESS_MS, StateTtlConfig
from krishiv_py.plan.windows import check_ms

__all__ = ["JoinOptions"]


class JoinOptions:
    """Mixin: the options of a join, :class:`~krishiv_py.JoinedStream`'s own methods."""

    __slots__ = ()

    def _emit(self, **changes: Any) -> Self:
        """This join with ``changes`` to its node's emission."""
        raise NotImplementedError

    def allowed_lateness(self, ms: Duration = DEFAULT_ALLOWED_LATENESS_MS) -> Self:
        """Keep rows ``ms`` longer: a row late by less than ``ms`` still joins what it would have on time.

        An outer, semi, anti or as-of join then needs
        ``.accumulation("retracting")``: a late row can change results it emitted.
        """
        ms = as_ms("allowed_lateness(ms)", ms)
        check_ms("allowed_lateness(ms)", ms, positive=False)
        return self._emit(allowed_lateness_ms=ms)

    def accumulation(self, mode: Literal["accumulating", "retracting"]) -> Self:
        """``"accumulating"`` (default: results are only added) or ``"retracting"``.

        With ``"retracting"`` a result that a late row changes is withdrawn by a
        row with ``kind="retract"`` before its replacement; rows carry a last
        column ``kind``.
        """
        if mode not in ("accumulating", "retracting"):
            raise PlanError(f"a join's accumulation() is 'accumulating' or 'retracting', got {mode!r}")
        return self._emit(accumulation=mode)

    def with_late_event_handler(self, handler: LateEventHandler) -> Self:
        """Hand very late and invalid rows of both sides to ``handler`` (a ``side`` column says which)."""
        return self._emit(late_handler=checked_handler(handler))

    def with_state_ttl(self, config: StateTtlConfig) -> Self:
        """Drop stored rows ``config.ttl_ms`` behind the watermark (event time); bounds an as-of's keys."""
        if not isinstance(config, StateTtlConfig):
            raise PlanError(f"with_state_ttl() takes a StateTtlConfig(ttl_ms=...), got {config!r}")
        return self._emit(state_ttl=config)
