"""Lower a logical plan to an inspectable Spark recipe.

The recipe is plain data — Spark SQL expression strings and a handful of
DataFrame operations — so it can be printed by ``explain()`` and
snapshot-tested without a JVM. :mod:`krishiv_py.runtime.build` applies it.

Two lowerings exist so far:

``native``
    Unbounded input. ``withWatermark`` + ``window``/``session_window`` +
    ``groupBy().agg()`` in append mode: Spark fires a window once, when the
    watermark reaches its end, and drops an event only when every window it
    belongs to has closed — exactly the on-watermark, zero-lateness
    semantics of the spec. No Python runs per row.
``bounded``
    Finite input as one Spark batch job: the same results as streaming the
    data in one step and then closing the sources.

How the native lowering keeps the spec's exact semantics on Spark:

* **Punctuation rows.** ``Sender.advance_watermark`` and ``Sender.close``
  write a marker row (``__kp_kind`` 1 or 2) carrying the target watermark in
  ``__kp_wm``. Its event time is set to ``target + lag`` so Spark's
  ``max(event time) - lag`` becomes the target; the row is removed right
  after the watermark operator, by a filter that mentions the event-time
  column so Spark's optimizer cannot push it below the watermark.
* **Time shift.** Spark's watermark starts at the epoch, so windows ending
  before 1970 would be dropped as late. Event time is shifted forward by
  ``time_shift_ms`` (a multiple of the window slide, so alignment is kept)
  inside Spark and shifted back in the output.
* **Observed metrics.** ``observe`` counts data rows, rows with no valid
  event time and the maximum event time per source, so the job can report
  per-source watermarks exactly.
"""

from __future__ import annotations

import math
from typing import Any, Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.expr import AggCall, ExprNode, agg_type, dtype_of, output_name
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.plan.windows import SessionWindow, WindowSpec
from krishiv_py.planner.sql import quote, to_sql
from krishiv_py.types import Schema

__all__ = ["Lowering", "SparkRecipe", "lower"]

Lowering: TypeAlias = Literal["native", "bounded"]

#: Shift base (~557 years): pre-epoch event times down to ~1413 stay valid.
SHIFT_BASE_MS = 2**44

KIND, WM, SEQ, ET, WINDOW = "__kp_kind", "__kp_wm", "__kp_seq", "__kp_et", "__kp_window"
GLOBAL = "__kp_global"
#: Observation name of the windows a job emits.
OUT_OBSERVE = "kp_out"
BASE_HIDDEN = (KIND, WM, SEQ)


# --- recipe nodes -------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ReadSource:
    """Read one source; the result has the user columns plus ``__kp_kind/__kp_wm/__kp_seq``."""

    name: str
    kind: Literal["memory", "records", "files"]
    schema: Schema
    streaming: bool
    format: str = "parquet"
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    records: Any = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class SelectExprs:
    child: RecipeNode
    exprs: tuple[str, ...]


@attrs.frozen(kw_only=True)
class FilterExpr:
    child: RecipeNode
    condition: str


@attrs.frozen(kw_only=True)
class WithWatermark:
    child: RecipeNode
    column: str
    delay: str


@attrs.frozen(kw_only=True)
class Observe:
    """Named per-batch metrics (Spark ``observe``): one per event-time source."""

    child: RecipeNode
    name: str
    exprs: tuple[str, ...]


@attrs.frozen(kw_only=True)
class UnionAll:
    children: tuple[RecipeNode, ...]


@attrs.frozen(kw_only=True)
class GroupAgg:
    child: RecipeNode
    keys: tuple[str, ...]
    aggs: tuple[str, ...]


RecipeNode: TypeAlias = ReadSource | SelectExprs | FilterExpr | WithWatermark | Observe | UnionAll | GroupAgg


@attrs.frozen(kw_only=True)
class TrackedSource:
    """What the job needs to turn observed metrics into a per-source watermark."""

    observe_name: str
    source: str
    lag_ms: int


@attrs.frozen(kw_only=True)
class SparkRecipe:
    lowering: Lowering
    reason: str
    root: RecipeNode
    output_mode: Literal["append"]
    time_shift_ms: int
    tracked: tuple[TrackedSource, ...]
    windowed: bool
    output_schema: Schema

    def render(self) -> str:
        """The recipe as PySpark-like code, one operation per line."""
        lines: list[str] = []
        final = _render(self.root, lines)
        lines.append(f"result = {final}")
        return "\n".join(lines)


# --- lowering -----------------------------------------------------------------


def choose(plan: n.PlanNode) -> tuple[Lowering, str]:
    """Pick the lowering for ``plan`` and say why."""
    for agg in n.window_aggregates(plan):
        if isinstance(agg.window, SessionWindow) and agg.window.max_duration_ms is not None:
            raise PlanError(
                "capped session windows (max_duration_ms) need the stateful lowering, "
                "which this version does not have yet"
            )
    if n.is_bounded(plan):
        return "bounded", (
            "every source is finite, so one Spark batch job computes the final windows "
            "(the same result as streaming the data in one step, then closing the sources)"
        )
    return "native", (
        "the plan uses event-time windows with on-watermark firing and no allowed lateness: "
        "Spark's withWatermark + window/session_window + groupBy().agg() in append mode "
        "fires each window once when the watermark reaches its end and drops an event only "
        "when all of its windows have closed, exactly as specified; no Python runs per row"
    )


def lower(plan: n.PlanNode, *, force_bounded: bool = False) -> SparkRecipe:
    """Lower ``plan``; ``force_bounded`` reads unbounded memory sources as a snapshot."""
    lowering, reason = choose(plan)
    if force_bounded and lowering != "bounded":
        lowering, reason = (
            "bounded",
            (
                "collect() runs the batches sent so far as one Spark batch job, as if the "
                "sources were closed after them"
            ),
        )
    ctx = _Ctx(streaming=lowering == "native", shift=_time_shift(plan) if lowering == "native" else 0)
    root, hidden = ctx.lower(plan)
    user = [quote(c) for c in n.schema_of(plan).names]
    if KIND in hidden:  # no watermark removed the marker rows: drop them here
        root = FilterExpr(child=root, condition=f"{quote(KIND)} = 0")
    if hidden:
        root = SelectExprs(child=root, exprs=tuple(user))
    windowed = bool(n.window_aggregates(plan))
    if windowed:
        root = Observe(child=root, name=OUT_OBSERVE, exprs=("count(1) AS rows",))
    return SparkRecipe(
        lowering=lowering,
        reason=reason,
        root=root,
        output_mode="append",
        time_shift_ms=ctx.shift,
        tracked=tuple(ctx.tracked),
        windowed=windowed,
        output_schema=n.schema_of(plan),
    )


def _time_shift(plan: n.PlanNode) -> int:
    """A shift of about SHIFT_BASE_MS that is a multiple of every window slide."""
    period = 1
    for agg in n.window_aggregates(plan):
        if not isinstance(agg.window, SessionWindow):
            period = math.lcm(period, agg.window.slide_ms)
    return -(-SHIFT_BASE_MS // period) * period


@attrs.define
class _Ctx:
    streaming: bool
    shift: int
    tracked: list[TrackedSource] = attrs.field(factory=list)
    inputs: int = 0

    def lower(self, node: n.PlanNode, *, count_input: bool = True) -> tuple[RecipeNode, tuple[str, ...]]:
        """Recipe for ``node`` and the hidden columns it carries.

        ``count_input=False``: a watermark right above this source counts its
        rows, saving Spark one per-row metrics operator.
        """
        if isinstance(node, n.MemorySource | n.RecordsSource | n.FileSource):
            return self._source(node, count_input), BASE_HIDDEN
        if isinstance(node, n.Union):
            parts = [self.lower(i) for i in node.inputs]
            return UnionAll(children=tuple(p[0] for p in parts)), parts[0][1]
        direct = isinstance(node, n.Watermark) and isinstance(node.input, n.SOURCE_TYPES)
        child, hidden = self.lower(node.input, count_input=not direct)
        if isinstance(node, n.Filter):
            cond = to_sql(node.predicate)
            if KIND in hidden:
                cond = f"({quote(KIND)} <> 0 OR {cond})"  # punctuation rows pass user filters
            return FilterExpr(child=child, condition=cond), hidden
        if isinstance(node, n.Project):
            schema = n.schema_of(node.input)
            exprs = tuple(_select_item(e, schema) for e in node.exprs) + tuple(quote(h) for h in hidden)
            return SelectExprs(child=child, exprs=exprs), hidden
        if isinstance(node, n.Watermark):
            return self._watermark(node, child, count_input=direct), (*hidden, ET)
        assert isinstance(node, n.WindowAggregate)
        return self._window(node, child), ()

    def _source(self, node: n.MemorySource | n.RecordsSource | n.FileSource, count_input: bool) -> RecipeNode:
        self.inputs += 1
        if not count_input:
            return self._read(node)
        name = f"kp_in_{self.inputs - 1}"
        rows = (
            "count(1) AS rows"
            if not isinstance(node, n.MemorySource)
            else f"count_if({quote(KIND)} = 0) AS rows"
        )
        return Observe(child=self._read(node), name=name, exprs=(rows,))

    def _read(self, node: n.MemorySource | n.RecordsSource | n.FileSource) -> RecipeNode:
        if isinstance(node, n.MemorySource):
            opts = (("maxFilesPerTrigger", "1"), ("maxFileAge", "36500d")) if self.streaming else ()
            return ReadSource(
                name=node.name,
                kind="memory",
                schema=node.schema,
                streaming=self.streaming,
                path=node.path,
                options=opts,
            )
        if isinstance(node, n.RecordsSource):
            return ReadSource(
                name=node.name, kind="records", schema=node.schema, streaming=False, records=node.data
            )
        read = ReadSource(
            name=node.name,
            kind="files",
            schema=node.schema,
            streaming=node.streaming and self.streaming,
            format=node.format,
            path=node.path,
            options=node.options,
        )
        hidden = (
            f"CAST(0 AS TINYINT) AS {quote(KIND)}",
            f"CAST(NULL AS BIGINT) AS {quote(WM)}",
            f"CAST(0 AS BIGINT) AS {quote(SEQ)}",
        )
        return SelectExprs(child=read, exprs=("*", *hidden))

    def _watermark(self, node: n.Watermark, child: RecipeNode, *, count_input: bool) -> RecipeNode:
        et = n.event_time(node)
        assert et is not None
        shift_us = self.shift * 1000
        col = quote(node.column)
        raw = f"unix_micros(CAST({col} AS TIMESTAMP))" if et.dtype.is_timestamp else f"{col} * 1000L"
        millis = f"unix_millis(CAST({col} AS TIMESTAMP))" if et.dtype.is_timestamp else col
        micros = f"CASE WHEN {millis} BETWEEN {MIN_EVENT_MS}L AND {MAX_EVENT_MS}L THEN {raw} END"
        data_et = f"timestamp_micros({micros} + {shift_us}L)"
        # Files and records carry no punctuation rows: every row is data, so the
        # per-row expressions skip the row-kind tests (a simpler plan that
        # Spark re-optimises in less time every micro-batch).
        plain = not any(isinstance(s, n.MemorySource) for s in n.sources_of(node))
        if plain:
            et_expr = f"{data_et} AS {quote(ET)}"
        else:
            punct_et = f"timestamp_micros(({quote(WM)} + {node.lag_ms + self.shift}L) * 1000L)"
            et_expr = f"CASE WHEN {quote(KIND)} = 0 THEN {data_et} ELSE {punct_et} END AS {quote(ET)}"
        out: RecipeNode = SelectExprs(child=child, exprs=("*", et_expr))
        if self.streaming:
            out = WithWatermark(child=out, column=ET, delay=f"{node.lag_ms} milliseconds")
        name = f"kp_src_{len(self.tracked)}"
        sources = ",".join(s.name for s in n.sources_of(node))
        self.tracked.append(TrackedSource(observe_name=name, source=sources, lag_ms=node.lag_ms))
        data_row = "" if plain else f"{quote(KIND)} = 0 AND "
        out = Observe(
            child=out,
            name=name,
            exprs=(
                *(
                    (("count(1) AS rows" if plain else f"count_if({quote(KIND)} = 0) AS rows"),)
                    if count_input
                    else ()
                ),
                f"count_if({data_row}{quote(ET)} IS NULL) AS invalid",
                f"max(unix_micros({quote(ET)})) AS max_et_us",
                f"max({quote(KIND)}) AS max_kind",
            ),
        )
        if plain:
            return out
        # Mentions the event-time column, so it stays above the watermark operator.
        return FilterExpr(child=out, condition=f"({quote(KIND)} = 0 OR {quote(ET)} IS NULL)")

    def _window(self, node: n.WindowAggregate, child: RecipeNode) -> RecipeNode:
        schema = n.schema_of(node.input)
        keys = tuple(quote(k) for k in node.keys)
        if not keys and isinstance(node.window, SessionWindow):
            # Spark refuses global session windows on streams. Group by a column
            # that is 0 on every data row (a literal would be optimised away).
            keys = (f"{quote(KIND)} AS {quote(GLOBAL)}",)
        keys += (f"{_window_sql(node.window)} AS {quote(WINDOW)}",)
        aggs = tuple(_agg_sql(a, schema, streaming=self.streaming) for a in node.aggregates)
        grouped = GroupAgg(
            child=FilterExpr(child=child, condition=f"{quote(ET)} IS NOT NULL"), keys=keys, aggs=aggs
        )
        shift_us = self.shift * 1000
        bounds = tuple(
            f"timestamp_micros(unix_micros({quote(WINDOW)}.{part}) - {shift_us}L) AS {quote(name)}"
            for part, name in (("start", "window_start"), ("end", "window_end"))
        )
        return SelectExprs(
            child=grouped,
            exprs=(*(quote(k) for k in node.keys), *bounds, *(quote(a.name) for a in node.aggregates)),
        )


def _select_item(expr: ExprNode, schema: Schema) -> str:
    name = output_name(expr)
    if dtype_of(expr, schema).name == "void":  # a bare NULL: give it the plan's type
        return f"CAST(NULL AS STRING) AS {quote(name)}"
    sql = to_sql(expr)
    return sql if sql.endswith(f" AS {quote(name)}") or sql == quote(name) else f"{sql} AS {quote(name)}"


def _window_sql(window: WindowSpec) -> str:
    et = quote(ET)
    if isinstance(window, SessionWindow):
        return f"session_window({et}, '{window.gap_ms} milliseconds')"
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


# --- rendering ----------------------------------------------------------------


def _render(node: RecipeNode, lines: list[str]) -> str:
    if isinstance(node, ReadSource):
        var = f"src_{len(lines)}"
        reader = "spark.readStream" if node.streaming else "spark.read"
        if node.kind == "records":
            lines.append(f"{var} = spark.createDataFrame(<{node.name}: Arrow table + hidden columns>)")
        else:
            opts = "".join(f".option({k!r}, {v!r})" for k, v in node.options)
            ddl = node.schema.ddl() + (
                ", __kp_kind tinyint, __kp_wm bigint, __kp_seq bigint" if node.kind == "memory" else ""
            )
            lines.append(
                f"{var} = {reader}.format({node.format!r}).schema({ddl!r}){opts}.load({node.path!r})"
            )
        return var
    if isinstance(node, UnionAll):
        parts = [_render(c, lines) for c in node.children]
        var = f"df_{len(lines)}"
        lines.append(f"{var} = {parts[0]}" + "".join(f".unionByName({p})" for p in parts[1:]))
        return var
    inner = _render(node.child, lines)
    var = f"df_{len(lines)}"
    call = {
        SelectExprs: lambda x: f".selectExpr({', '.join(repr(e) for e in x.exprs)})",
        FilterExpr: lambda x: f".filter({x.condition!r})",
        WithWatermark: lambda x: f".withWatermark({x.column!r}, {x.delay!r})",
        Observe: lambda x: f".observe({x.name!r}, {', '.join(repr(e) for e in x.exprs)})",
        GroupAgg: lambda x: (
            f".groupBy({', '.join(repr(k) for k in x.keys)}).agg({', '.join(repr(a) for a in x.aggs)})"
        ),
    }[type(node)](node)
    lines.append(f"{var} = {inner}{call}")
    return var
