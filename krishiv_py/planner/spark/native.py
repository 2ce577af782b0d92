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
from krishiv_py.names import (
    ET,
    GLOBAL,
    JOIN_LEFT_TIME,
    JOIN_RIGHT_TIME,
    ROW_KIND,
    SEQ,
    WINDOW,
    arithmetic_sum_metric,
    join_key,
    sum_high,
    sum_low,
    sum_overflow,
)
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.emission import counts_only
from krishiv_py.plan.windows import EventSlidingWindow, SessionWindow, WindowSpec
from krishiv_py.planner.spark.recipe import (
    FilterExpr,
    GroupAgg,
    Observe,
    RecipeNode,
    SelectExprs,
    StreamJoin,
)
from krishiv_py.planner.spark.sliding import (
    lower_sliding_panes,
    lower_stream_panes,
    pane_choice,
    stream_pane_choice,
    sums_observation,
)
from krishiv_py.planner.sql import joined_sum, quote, sum_halves
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
    schema = facts(node.input).schema
    if not streaming and pane_choice(node.window, node.aggregates, schema)[0]:
        return lower_sliding_panes(node, child)
    if streaming and stream_pane_choice(node)[0]:
        return lower_stream_panes(node, child, shift_ms=shift_ms)
    keys = tuple(quote(k) for k in node.keys)
    if not keys and isinstance(node.window, SessionWindow):
        # Spark refuses global session windows on streams. Group by a column
        # that is 0 on every data row (a literal would be optimised away).
        keys = (f"{quote(ROW_KIND)} AS {quote(GLOBAL)}",)
    keys += (f"{_window_sql(node.window)} AS {quote(WINDOW)}",)
    split = [i for i, a in enumerate(node.aggregates) if _exact_sum(a, schema)]
    aggs = tuple(
        part
        for i, a in enumerate(node.aggregates)
        for part in (
            _split_sum_sql(a, i, schema) if i in split else (_agg_sql(a, schema, streaming=streaming),)
        )
    )
    grouped = GroupAgg(
        child=FilterExpr(child=child, condition=f"{quote(ET)} IS NOT NULL"), keys=keys, aggs=aggs
    )
    shift_us = shift_ms * 1000
    bounds = tuple(
        f"timestamp_micros(unix_micros({quote(WINDOW)}.{part}) - {shift_us}L) AS {quote(name)}"
        for part, name in (("start", "window_start"), ("end", "window_end"))
    )
    names = (*(quote(k) for k in node.keys), *bounds)
    values = tuple(
        f"{_joined_sum(i, a, schema)} AS {quote(a.name)}" if i in split else quote(a.name)
        for i, a in enumerate(node.aggregates)
    )
    if not split:
        return SelectExprs(child=grouped, exprs=(*names, *values))
    # A sum beyond its type is null; count those windows, then drop the flags.
    flags = tuple(f"{_overflowed(i, node.aggregates[i], schema)} AS `{sum_overflow(i)}`" for i in split)
    flagged = SelectExprs(child=grouped, exprs=(*names, *values, *flags))
    observed = Observe(
        child=flagged,
        name=sums_observation(node),
        exprs=tuple(f"count_if(`{sum_overflow(i)}`) AS {arithmetic_sum_metric(i)}" for i in split),
    )
    outputs = (*(quote(k) for k in node.keys), "`window_start`", "`window_end`")
    return SelectExprs(child=observed, exprs=(*outputs, *(quote(a.name) for a in node.aggregates)))


def _exact_sum(call: AggCall, schema: Schema) -> bool:
    """A ``sum`` of a bigint or decimal column: Spark's own would fail the job on overflow."""
    if call.func != "sum" or call.column is None:
        return False
    dtype = schema.field(call.column).dtype
    return dtype.name == "bigint" or dtype.is_decimal


def _split_sum_sql(call: AggCall, i: int, schema: Schema) -> tuple[str, str]:
    """Bigint: the sums of the high and the low 32 bits (exact, they cannot overflow).

    Decimal: Spark's ``try_sum`` and the count of values (the flag needs it).
    """
    assert call.column is not None
    v = quote(call.column)
    if schema.field(call.column).dtype.is_decimal:
        return (f"count({v}) AS `{sum_high(i)}`", f"try_sum({v}) AS `{sum_low(i)}`")
    high, low = sum_halves(v)
    return (f"{high} AS `{sum_high(i)}`", f"{low} AS `{sum_low(i)}`")


def _joined_sum(i: int, call: AggCall, schema: Schema) -> str:
    """The exact sum from its halves: null when it does not fit in its type."""
    low = f"`{sum_low(i)}`"
    if call.column is not None and schema.field(call.column).dtype.is_decimal:
        dtype = agg_type(call, schema)
        return f"CASE WHEN `{sum_high(i)}` > 0 THEN TRY_CAST({low} AS {dtype.name.upper()}) END"
    return joined_sum(f"`{sum_high(i)}`", low)


def _overflowed(i: int, call: AggCall, schema: Schema) -> str:
    """True on a window whose sum had values but has no result."""
    present = f"`{sum_high(i)}` IS NOT NULL"
    if call.column is not None and schema.field(call.column).dtype.is_decimal:
        present = f"`{sum_high(i)}` > 0"
    return f"({present} AND {_joined_sum(i, call, schema)} IS NULL)"


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


def native_join(node: n.Join) -> bool:
    """Whether Spark's own join runs ``node`` exactly: an inner interval join, no lateness options.

    Spark's stream-stream inner join emits a match as soon as both rows are
    there, and evicts a row once no on-time row of the other side can match
    it. Its own late-row filter reads the watermark of the micro-batch
    *before* the one it evicts with, so each side first drops and counts its
    rows behind the watermark of their micro-batch (``StreamJoin.drops_late``):
    SPEC 3.12 with ``L = 0``, in every batching
    (``tests/test_differential.py::test_native_join_over_batchings``). Its
    outer joins emit a padded row when its state eviction runs, and it has no
    allowed lateness, retractions, late-event side output, window or as-of join.
    The planner does not choose it (krishiv's join operator was faster on
    Nexmark q20, docs/joins.md); ``lowering="native"`` asks for it.
    """
    e = node.emission
    return (
        node.kind == "interval"
        and node.how == "inner"
        and e.allowed_lateness_ms == 0
        and e.accumulation == "accumulating"
        and e.state_ttl is None
        and (e.late_handler is None or counts_only(e.late_handler))
    )


def lower_join(
    node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
) -> RecipeNode:
    """An inner interval join as Spark's own join of the two sides.

    Streaming, each side first drops the rows behind its micro-batch's
    watermark (``t < W``, counted as very late; :func:`native_join`). Each
    side's time column is its event time plus one µs, made with Spark's
    watermark metadata, for Spark's state eviction: a row is evicted once its
    time is at or below what the other side's watermark allows, so with the
    µs added a row stays while an on-time row (``t >= W``) can still match it.
    """
    # A batch join sees every row in one step, where none is late: allowed lateness changes nothing.
    bounded = not streaming and node.kind == "interval" and node.how == "inner"
    assert (native_join(node) or (bounded and node.emission.accumulation == "accumulating")) and node.between

    left_schema = facts(node.left).schema
    left_cols = tuple(f.name for f in left_schema)
    right_keys = tuple(join_key(i) for i in range(len(node.right_keys)))
    renamed = node.right_names
    right_exprs = [f"{quote(k)} AS {quote(h)}" for k, h in zip(node.right_keys, right_keys, strict=True)]
    right_exprs += [f"{quote(old)} AS {quote(new)}" for old, new in renamed.items()]
    right_exprs.append(quote(ET))
    right = SelectExprs(child=right, exprs=tuple(right_exprs))
    lower, upper = node.between
    lt, rt = quote(JOIN_LEFT_TIME), quote(JOIN_RIGHT_TIME)
    keys = [f"{quote(lk)} = {quote(rk)}" for lk, rk in zip(node.left_keys, right_keys, strict=True)]
    condition = " AND ".join(
        [
            *keys,
            f"{rt} >= {lt} + INTERVAL '{lower}' MILLISECOND",
            f"{rt} <= {lt} + INTERVAL '{upper}' MILLISECOND",
        ]
    )
    time = f"timestamp_micros(unix_micros({quote(ET)}) + 1)"
    exprs = [quote(k) for k in node.left_keys]
    exprs += [quote(c) for c in left_cols if c not in node.left_keys]
    exprs += [quote(c) for c in renamed.values()]
    return StreamJoin(
        left=left,
        right=right,
        left_time=(JOIN_LEFT_TIME, time),
        right_time=(JOIN_RIGHT_TIME, time),
        left_columns=left_cols,
        right_columns=(*right_keys, *renamed.values()),
        condition=condition,
        how="inner",
        exprs=tuple(exprs),
        streaming=streaming,
        drops_late=streaming,
        shift_ms=shift_ms if streaming else 0,
    )
