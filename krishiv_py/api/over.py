"""``OverStream``: a keyed stream with an over-aggregation's frame, waiting for ``agg`` (SPEC 3.16).

``keyed.over_rows(n)`` and ``keyed.over_range(range_ms)`` return it; its
emission options return a new one, and ``agg()`` makes the plan node
(:class:`~krishiv_py.plan.nodes.OverAggregate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import PlanError, attribute_error
from krishiv_py.expr import AggExpr, agg_calls
from krishiv_py.late import LateEventHandler, checked_handler
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import DEFAULT_ALLOWED_LATENESS_MS, Accumulation, Emission

if TYPE_CHECKING:
    from krishiv_py.api.stream import Stream

__all__ = ["OverStream"]


@attrs.frozen
class OverStream:
    """Each row's frame of its key's rows, waiting for ``agg`` (see :meth:`KeyedStream.over_rows`).

    Examples
    --------
    >>> import krishiv_py as kp
    >>> from krishiv_py.api.stream import placeholder
    >>> bids = placeholder("seller bigint, price bigint, t bigint", "bids").watermark("t", 1_000)
    >>> last = bids.key_by("seller").over_rows(10).agg(kp.avg(kp.col("price")).alias("avg_price"))
    >>> last.columns
    ('seller', 'price', 't', 'avg_price')
    >>> bids.key_by("seller").over_range(60_000).allowed_lateness(5_000).accumulation(
    ...     "retracting").agg(kp.max(kp.col("price"))).columns
    ('seller', 'price', 't', 'max_price', 'kind')
    """

    stream: Stream
    keys: tuple[str, ...]
    frame: n.OverFrame
    preceding: int
    emission: Emission = attrs.field(factory=Emission)

    def allowed_lateness(self, ms: Duration = DEFAULT_ALLOWED_LATENESS_MS) -> OverStream:
        """Take rows up to ``ms`` behind the watermark: each is placed in its key's order, its result
        emitted at once, and the emitted results after it whose frames now hold it corrected."""
        return attrs.evolve(
            self, emission=attrs.evolve(self.emission, allowed_lateness_ms=as_ms("allowed_lateness(ms)", ms))
        )

    def accumulation(self, mode: Accumulation) -> OverStream:
        """How a correction is emitted: ``"accumulating"`` (default: the row's new result) or
        ``"retracting"`` (the old result retracted first; results carry a ``kind`` column)."""
        if mode not in ("accumulating", "retracting"):
            raise PlanError(
                f"an over-aggregation's accumulation is 'accumulating' or 'retracting', got {mode!r} "
                "(every result is a whole frame's: there is nothing to discard)"
            )
        return attrs.evolve(self, emission=attrs.evolve(self.emission, accumulation=mode))

    def with_late_event_handler(self, handler: LateEventHandler) -> OverStream:
        """Hand the very late rows (behind the allowed lateness) and the rows without an event time
        to ``handler`` (see :mod:`krishiv_py.late`) instead of only counting them."""
        return attrs.evolve(self, emission=attrs.evolve(self.emission, late_handler=checked_handler(handler)))

    def agg(self, *aggregates: AggExpr) -> Stream:
        """One result per input row: its columns, then each aggregate over its frame (in the order
        given), then ``kind`` when the results may be corrected by retraction (``accumulation(
        "retracting")``, or over rows that may be withdrawn)."""
        plan = n.OverAggregate(
            input=self.stream.plan,
            keys=self.keys,
            frame=self.frame,
            preceding=self.preceding,
            aggregates=agg_calls(aggregates),
            emission=self.emission,
        )
        return self.stream._with(plan)

    if not TYPE_CHECKING:  # at run time only: a type checker still flags these calls

        def __getattr__(self, name: str) -> Any:
            raise attribute_error(self, name, _OVER_HINTS)


def check_order_by(stream: Stream, order_by: str | None, call: str) -> None:
    """:class:`PlanError` unless ``order_by`` is the stream's event-time column (or left out)."""
    et = facts(stream.plan).event_time
    if et is None:
        raise PlanError(
            f"{call} orders each key's rows by event time: call .watermark(column, lag_ms) before key_by()"
        )
    if order_by is None:
        return
    if not isinstance(order_by, str):
        raise PlanError(f"{call}: order_by= takes the event-time column's name, got {order_by!r}")
    if et.from_window or et.from_join or et.from_change:
        raise PlanError(
            f"{call}: these rows are ordered by their own event time (a join's: the later of its two "
            f"rows'; a change's: the rows' that made it), which no column holds; leave order_by= out"
        )
    if order_by != et.column:
        raise PlanError(
            f"{call} orders by the event time, {et.column!r} (its watermark's column), not "
            f"{order_by!r}: ties are ordered by arrival; to order by {order_by!r}, put the watermark "
            "on it"
        )


_OVER_HINTS = {
    name: f"{name}(...) applies to an over-aggregation's results: call .agg(...) first, e.g. "
    f".over_rows(10).agg(kp.avg(kp.col('price'))).{name}(...)"
    for name in ("filter", "select", "with_column", "start", "collect", "explain", "sink")
}
