"""Sliding windows from pane aggregates: the bounded lowering's plan for sliding windows.

Spark's ``window(ts, size, slide)`` copies every event into each of its
``size / slide`` windows before aggregating (60 copies for 10 min / 10 s).
Here each event is aggregated once, into its *pane* — the slide-sized
interval ``[p, p + slide)`` it falls in — and each pane's partial aggregate
is copied into the ``size / slide`` windows that contain it, where the
partials are combined. A window ``[w, w + size)`` holds exactly the panes
``p`` with ``w <= p < w + size`` when ``slide`` divides ``size``, so the
windows, their rows and their values are those of ``window()`` (sums of
doubles may round differently, as any change of summation order does).

Every aggregate but ``count_distinct`` combines from partials: ``count``
and ``sum`` add up, ``avg`` divides a summed sum by a summed count, ``min``
and ``max`` take the extreme, ``first``/``last`` the value of the
earliest/latest ``(event time, arrival)``. A bigint ``sum`` travels as the
sums of its 32-bit halves (exact, see :mod:`.native`). A plan with
``count_distinct``, a decimal ``sum``/``avg`` or a slide that does not
divide the size keeps ``window()``; :func:`pane_choice` says which and why,
and ``explain()`` shows it.

Streaming (:func:`lower_stream_panes`): two chained streaming aggregations
would fire late and drop an event once its pane closed, so the panes are
built per micro-batch instead, by a stateless vectorized step before the
watermark operator (:mod:`~krishiv_py.stateful.pane_partials`, run on the
executors); Spark's ``window()`` copies each pane row into its windows and
keeps the windows' state, deciding lateness per window.
:func:`stream_pane_choice` says when (from ``MIN_STREAM_COPIES`` windows per
event) and why not.

Examples
--------
>>> from krishiv_py.plan.windows import SlidingWindow
>>> from krishiv_py.types import to_schema
>>> from krishiv_py.expr import AggCall
>>> schema = to_schema("k string, t timestamp, v double")
>>> minute = SlidingWindow(size_ms=60_000, slide_ms=10_000)
>>> pane_choice(minute, (AggCall("sum", "v", "s"),), schema)[0]
True
>>> pane_choice(minute, (AggCall("count_distinct", "v", "d"),), schema)
(False, 'count_distinct does not combine from partial aggregates: every event is copied into its 6 windows')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from krishiv_py.expr import AggCall, agg_type
from krishiv_py.names import (
    ARITH_SUMS_OBSERVATION,
    ET,
    PANE,
    PANE_WINDOW_START,
    ROW_KIND,
    SEQ,
    WINDOW,
    WM,
    arithmetic_sum_metric,
    pane_part,
    sum_overflow,
)
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.windows import SlidingWindow, WindowSpec
from krishiv_py.planner.spark.recipe import (
    FilterExpr,
    GroupAgg,
    MapArrow,
    Observe,
    RecipeNode,
    SelectExprs,
    WithWatermark,
)
from krishiv_py.planner.sql import joined_sum, quote, sum_halves
from krishiv_py.types import Schema

if TYPE_CHECKING:
    from krishiv_py.stateful.pane_partials import PartialOp

__all__ = ["lower_sliding_panes", "lower_stream_panes", "pane_choice", "stream_pane_choice"]

#: Fewest windows per event (size / slide) for which panes are used.
MIN_COPIES = 2
#: Fewest windows per event for which a streaming query pre-aggregates panes: at 6 (60 s
#: / 10 s) the pane step cost what copying the events saved; at 60 it ran 1.6-1.8x faster.
MIN_STREAM_COPIES = 10


def sums_observation(node: n.WindowAggregate) -> str:
    """The observation of a window's overflowed sums: a second window over results has its own."""
    return ARITH_SUMS_OBSERVATION + ("_2" if n.cascade_of(node) is not None else "")


def pane_choice(window: WindowSpec, aggregates: Sequence[AggCall], schema: Schema) -> tuple[bool, str]:
    """Whether a bounded sliding-window aggregation runs from panes, and why (or why not)."""
    if not isinstance(window, SlidingWindow) or window.slide_ms == window.size_ms:
        return False, "not a sliding window"
    copies = window.size_ms // window.slide_ms
    if copies < MIN_COPIES:
        return False, f"{copies} windows per event: Spark's window() copies each event into them"
    if window.size_ms % window.slide_ms:
        return False, (
            f"the slide ({window.slide_ms} ms) does not divide the size ({window.size_ms} ms): "
            "every event is copied into each of its windows"
        )
    for call in aggregates:
        if call.func == "count_distinct":
            return False, (
                f"count_distinct does not combine from partial aggregates: every event is copied into "
                f"its {copies} windows"
            )
        if (
            call.func in ("sum", "avg")
            and call.column is not None
            and schema.field(call.column).dtype.is_decimal
        ):
            return (
                False,
                f"a decimal {call.func} keeps Spark's window(): "
                f"every event is copied into its {copies} windows",
            )
    return True, (
        f"sliding windows combined from {window.slide_ms} ms pane aggregates: each event is aggregated "
        f"once, each pane copied into its {copies} windows"
    )


def stream_pane_choice(node: n.WindowAggregate) -> tuple[bool, str]:
    """Whether a streaming sliding-window aggregation pre-aggregates panes, and why (or why not)."""
    window = node.window
    schema = facts(node.input).schema
    ok, why = pane_choice(window, node.aggregates, schema)
    if not ok:
        return False, why
    assert isinstance(window, SlidingWindow)
    copies = window.size_ms // window.slide_ms
    plain = f"window() copies each event into its {copies} windows"
    if copies < MIN_STREAM_COPIES:
        return False, f"{plain} (pane partials pay off from {MIN_STREAM_COPIES} windows per event)"
    for call in node.aggregates:
        dtype = schema.field(call.column).dtype if call.column is not None else None
        if call.func in ("first", "last"):
            return False, f"{plain} ({call.func} needs each event's arrival order)"
        if call.func in ("min", "max") and dtype is not None and dtype.name in ("float", "double"):
            return False, f"{plain} ({call.func} of a floating-point column: NaN orders as in Spark there)"
    if not (isinstance(node.input, n.Watermark) and isinstance(node.input.input, n.SOURCE_TYPES)):
        return False, f"{plain} (a step between the watermark and the window: panes need the source rows)"
    if isinstance(node.input.input, n.KafkaSource) and node.input.input.per_partition:
        return False, f"{plain} (a watermark per Kafka partition: the partitions are unioned above theirs)"
    for key in node.keys:
        if schema.field(key).dtype.name.split("<")[0] in ("array", "map", "struct"):
            return False, f"{plain} (key {key!r} is a nested type)"
    return True, (
        f"sliding windows from {window.slide_ms} ms pane partials: each micro-batch aggregates its "
        f"events per key and pane (vectorized, Arrow) before window() copies each pane into its "
        f"{copies} windows; a copy is dropped only when its window has closed (the same windows "
        "as window() over the events, checked over random batchings: "
        "tests/test_differential.py::test_native_shapes_over_batchings[sliding_panes])"
    )


def lower_stream_panes(node: n.WindowAggregate, child: RecipeNode, *, shift_ms: int) -> RecipeNode:
    """The streaming form of :func:`lower_sliding_panes`: pane partials per micro-batch.

    ``child`` is the watermark's recipe (``[filter](withWatermark(observe(rows)))``); the pane
    step goes below the watermark operator, after the metrics, so Spark's watermark and the
    window columns keep their meaning (see :mod:`~krishiv_py.stateful.pane_partials`).
    """
    from krishiv_py.stateful.pane_partials import PanePartials

    window = node.window
    assert isinstance(window, SlidingWindow)
    schema = facts(node.input).schema
    top = child if isinstance(child, FilterExpr) else None
    mark = child.child if isinstance(child, FilterExpr) else child
    assert isinstance(mark, WithWatermark) and isinstance(mark.child, Observe)
    observed = mark.child
    parts = tuple(p for i, a in enumerate(node.aggregates) for p in _stream_parts(a, i, schema))
    ddl = ", ".join(
        (
            *(schema.field(k).ddl() for k in node.keys),
            f"{quote(ROW_KIND)} tinyint",
            f"{quote(WM)} bigint",
            f"{quote(ET)} timestamp",
            *(f"`{name}` {dtype}" for name, _, _, dtype in parts),
        )
    )
    step = PanePartials(keys=node.keys, slide_us=window.slide_ms * 1000, parts=tuple(p[:3] for p in parts))
    mapped = MapArrow(
        child=observed,
        function=step,
        schema=ddl,
        label=f"pane partials per key and {window.slide_ms} ms pane",
    )
    rows: RecipeNode = attrs.evolve(mark, child=mapped)
    if top is not None:
        rows = attrs.evolve(top, child=rows)
    keys = tuple(quote(k) for k in node.keys)
    window_sql = f"window({quote(ET)}, '{window.size_ms} milliseconds', '{window.slide_ms} milliseconds')"
    combine = {name: comb for i, a in enumerate(node.aggregates) for name, _, comb in _partials(a, i, schema)}
    grouped = GroupAgg(
        child=FilterExpr(child=rows, condition=f"{quote(ET)} IS NOT NULL"),
        keys=(*keys, f"{window_sql} AS {quote(WINDOW)}"),
        aggs=tuple(f"{combine[name].format(f'`{name}`')} AS `{name}`" for name, _, _, _ in parts),
    )
    shift_us = shift_ms * 1000
    start, end = (
        f"timestamp_micros(unix_micros({quote(WINDOW)}.{part}) - {shift_us}L) AS `window_{part}`"
        for part in ("start", "end")
    )
    return _finish(node, grouped, (start, end))


def _stream_parts(call: AggCall, i: int, schema: Schema) -> list[tuple[str, PartialOp, str | None, str]]:
    """``(column, pane operation, input column, Spark type)`` of each partial of ``call``."""
    x = call.column
    if call.func == "count":
        return [(pane_part(i, "n"), "count" if x is not None else "count_all", x, "bigint")]
    assert x is not None
    dtype = schema.field(x).dtype
    if _split(call, schema):
        return [(pane_part(i, "h"), "sum_high", x, "bigint"), (pane_part(i, "l"), "sum_low", x, "bigint")]
    if call.func == "sum":
        return [(pane_part(i, "s"), "sum", x, "bigint" if dtype.is_integral else "double")]
    if call.func == "avg":
        return [(pane_part(i, "s"), "sum_double", x, "double"), (pane_part(i, "n"), "count", x, "bigint")]
    assert call.func in ("min", "max")
    return [(pane_part(i, "v"), call.func, x, dtype.name)]


def lower_sliding_panes(node: n.WindowAggregate, child: RecipeNode) -> RecipeNode:
    """Aggregate per key and pane, copy each pane into its windows, combine per key and window."""
    window = node.window
    assert isinstance(window, SlidingWindow)
    schema = facts(node.input).schema
    slide_us, size_us = window.slide_ms * 1000, window.size_ms * 1000
    et_us = f"unix_micros({quote(ET)})"
    keys = tuple(quote(k) for k in node.keys)
    partials = tuple(p for i, a in enumerate(node.aggregates) for p in _partials(a, i, schema))
    panes = GroupAgg(
        child=FilterExpr(child=child, condition=f"{quote(ET)} IS NOT NULL"),
        keys=(*keys, f"{et_us} - pmod({et_us}, {slide_us}L) AS {quote(PANE)}"),
        aggs=tuple(f"{expr} AS `{name}`" for name, expr, _ in partials),
    )
    starts = f"explode(sequence({quote(PANE)} - {size_us - slide_us}L, {quote(PANE)}, {slide_us}L))"
    copied = SelectExprs(
        child=panes,
        exprs=(*keys, f"{starts} AS {quote(PANE_WINDOW_START)}", *(f"`{name}`" for name, _, _ in partials)),
    )
    windows = GroupAgg(
        child=copied,
        keys=(*keys, quote(PANE_WINDOW_START)),
        aggs=tuple(f"{combine.format(f'`{name}`')} AS `{name}`" for name, _, combine in partials),
    )
    bounds = (
        f"timestamp_micros({quote(PANE_WINDOW_START)}) AS `window_start`",
        f"timestamp_micros({quote(PANE_WINDOW_START)} + {size_us}L) AS `window_end`",
    )
    return _finish(node, windows, bounds)


def _finish(node: n.WindowAggregate, windows: RecipeNode, bounds: tuple[str, str]) -> RecipeNode:
    """From keys and combined partials per window (``windows``) to the result columns."""
    schema = facts(node.input).schema
    keys = tuple(quote(k) for k in node.keys)
    values = tuple(_final(a, i, schema) for i, a in enumerate(node.aggregates))
    flags = tuple(
        f"(`{pane_part(i, 'h')}` IS NOT NULL AND {_joined(i)} IS NULL) AS `{sum_overflow(i)}`"
        for i, a in enumerate(node.aggregates)
        if _split(a, schema)
    )
    out = SelectExprs(child=windows, exprs=(*keys, *bounds, *values, *flags))
    if not flags:
        return out
    observed = Observe(
        child=out,
        name=sums_observation(node),
        exprs=tuple(
            f"count_if(`{sum_overflow(i)}`) AS {arithmetic_sum_metric(i)}"
            for i, a in enumerate(node.aggregates)
            if _split(a, schema)
        ),
    )
    names = (*keys, "`window_start`", "`window_end`", *(quote(a.name) for a in node.aggregates))
    return SelectExprs(child=observed, exprs=names)


def _split(call: AggCall, schema: Schema) -> bool:
    return call.func == "sum" and call.column is not None and schema.field(call.column).dtype.name == "bigint"


def _partials(call: AggCall, i: int, schema: Schema) -> list[tuple[str, str, str]]:
    """``(column, pane expression, window combination)`` of each partial of ``call``."""
    x = quote(call.column) if call.column is not None else "1"
    order = f"{quote(ET)}, {quote(SEQ)}"
    if call.func == "count":
        return [(pane_part(i, "n"), f"count({x})", "sum({})")]
    if _split(call, schema):
        high, low = sum_halves(x)
        return [(pane_part(i, "h"), high, "sum({})"), (pane_part(i, "l"), low, "sum({})")]
    if call.func == "sum":
        return [(pane_part(i, "s"), f"sum({x})", "sum({})")]
    if call.func == "avg":
        return [
            (pane_part(i, "s"), f"sum(CAST({x} AS DOUBLE))", "sum({})"),
            (pane_part(i, "n"), f"count({x})", "sum({})"),
        ]
    if call.func in ("min", "max"):
        return [(pane_part(i, "v"), f"{call.func}({x})", call.func + "({})")]
    # first/last: the value of the earliest/latest (event time, arrival) row, carried with its order.
    pick = "min" if call.func == "first" else "max"
    return [(pane_part(i, "r"), f"{pick}(struct({order}, {x} AS v))", pick + "({})")]


def _joined(i: int) -> str:
    return joined_sum(f"`{pane_part(i, 'h')}`", f"`{pane_part(i, 'l')}`")


def _final(call: AggCall, i: int, schema: Schema) -> str:
    dtype = agg_type(call, schema).name.upper()
    if call.func == "count":
        value = f"`{pane_part(i, 'n')}`"
    elif _split(call, schema):
        value = _joined(i)
    elif call.func == "sum":
        value = f"`{pane_part(i, 's')}`"
    elif call.func == "avg":
        value = f"try_divide(`{pane_part(i, 's')}`, `{pane_part(i, 'n')}`)"  # no values: null, as avg()
    elif call.func in ("min", "max"):
        value = f"`{pane_part(i, 'v')}`"
    else:
        value = f"`{pane_part(i, 'r')}`.v"
    return f"CAST({value} AS {dtype}) AS {quote(call.name)}"
