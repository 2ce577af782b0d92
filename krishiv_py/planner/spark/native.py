"""Windowed aggregation with Spark's own operators: ``window``/``session_window`` + ``groupBy().agg()``.

This is the window part of two lowerings (:mod:`.choose` says when each runs):

``native``
    Unbounded input as a Structured Streaming query: ``withWatermark`` +
    ``window``/``session_window`` + ``groupBy().agg()`` in append mode. Spark
    fires a window once, when the watermark reaches its end, and drops an
    event only when every window it belongs to has closed — exactly the
    on-watermark, zero-lateness semantics of the spec. No Python runs per row.
``bounded``
    Finite input as one Spark batch job, the same ``groupBy().agg()``: the
    same results as streaming the data in one step and then closing the
    sources.

Time shift
    Spark's watermark starts at the epoch, so windows ending before 1970
    would be dropped as late. The native lowering shifts event time forward
    by :func:`time_shift` (a multiple of every window slide, so alignment is
    kept) inside Spark; the window bounds are shifted back in the output.

Examples
--------
>>> from krishiv_py.plan.windows import SlidingWindow
>>> _window_sql(SlidingWindow(size_ms=10, slide_ms=5))
"window(`__kp_et`, '10 milliseconds', '5 milliseconds', '0 milliseconds')"
"""

from __future__ import annotations

import math

from krishiv_py.errors import PlanError
from krishiv_py.expr import AggCall, agg_type
from krishiv_py.plan import nodes as n
from krishiv_py.plan.windows import EventSlidingWindow, SessionWindow, WindowSpec
from krishiv_py.planner.spark.recipe import (
    ET,
    GLOBAL,
    KIND,
    SEQ,
    WINDOW,
    FilterExpr,
    GroupAgg,
    RecipeNode,
    SelectExprs,
)
from krishiv_py.planner.sql import quote
from krishiv_py.types import Schema

__all__ = ["SHIFT_BASE_MS", "lower_window", "time_shift"]

#: Shift base (~557 years): pre-epoch event times down to ~1413 stay valid.
SHIFT_BASE_MS = 2**44


def time_shift(plan: n.PlanNode) -> int:
    """A shift of about SHIFT_BASE_MS that is a multiple of every window slide."""
    period = 1
    for agg in n.window_aggregates(plan):
        if not isinstance(agg.window, SessionWindow | EventSlidingWindow):
            period = math.lcm(period, agg.window.slide_ms)
    return -(-SHIFT_BASE_MS // period) * period


def lower_window(node: n.WindowAggregate, child: RecipeNode, *, streaming: bool, shift_ms: int) -> RecipeNode:
    """Group ``child`` by the keys and the window, then select the result columns."""
    schema = n.schema_of(node.input)
    keys = tuple(quote(k) for k in node.keys)
    if not keys and isinstance(node.window, SessionWindow):
        # Spark refuses global session windows on streams. Group by a column
        # that is 0 on every data row (a literal would be optimised away).
        keys = (f"{quote(KIND)} AS {quote(GLOBAL)}",)
    keys += (f"{_window_sql(node.window)} AS {quote(WINDOW)}",)
    aggs = tuple(_agg_sql(a, schema, streaming=streaming) for a in node.aggregates)
    grouped = GroupAgg(
        child=FilterExpr(child=child, condition=f"{quote(ET)} IS NOT NULL"), keys=keys, aggs=aggs
    )
    shift_us = shift_ms * 1000
    bounds = tuple(
        f"timestamp_micros(unix_micros({quote(WINDOW)}.{part}) - {shift_us}L) AS {quote(name)}"
        for part, name in (("start", "window_start"), ("end", "window_end"))
    )
    return SelectExprs(
        child=grouped,
        exprs=(*(quote(k) for k in node.keys), *bounds, *(quote(a.name) for a in node.aggregates)),
    )


def _window_sql(window: WindowSpec) -> str:
    et = quote(ET)
    if isinstance(window, SessionWindow):
        return f"session_window({et}, '{window.gap_ms} milliseconds')"
    if isinstance(window, EventSlidingWindow):
        raise PlanError("per-event sliding windows run on the stateful lowering only")
    return (
        f"window({et}, '{window.size_ms} milliseconds', '{window.slide_ms} milliseconds', "
        f"'{window.offset_ms} milliseconds')"
    )


def _agg_sql(call: AggCall, schema: Schema, *, streaming: bool) -> str:
    arg = quote(call.column) if call.column is not None else "1"
    order = f"struct({quote(ET)}, {quote(SEQ)})"
    body = {
        "count": f"count({arg})",
        "sum": f"sum({arg})",
        "avg": f"avg({arg})",
        "min": f"min({arg})",
        "max": f"max({arg})",
        # Spark refuses DISTINCT aggregates on streams; a set in state is exact.
        "count_distinct": f"size(collect_set({arg}))" if streaming else f"count(DISTINCT {arg})",
        "first": f"min_by({arg}, {order})",
        "last": f"max_by({arg}, {order})",
    }[call.func]
    dtype = agg_type(call, schema)
    return f"CAST({body} AS {dtype.name.upper()}) AS {quote(call.name)}"
