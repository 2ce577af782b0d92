"""The recipe: what a lowering produces, as plain data.

A recipe is a tree of a handful of DataFrame operations whose arguments are
Spark SQL expression strings, so it can be printed by ``explain()`` and
snapshot-tested without a JVM. :mod:`krishiv_py.runtime.build` applies it
to a SparkSession; :meth:`SparkRecipe.render` prints it as PySpark-like
code, one operation per line.

Hidden columns
    Every source carries ``__kp_kind`` (0 data, 1 watermark promise,
    2 close), ``__kp_wm`` (the promised watermark) and ``__kp_seq`` (arrival
    order). A watermark adds the event time ``__kp_et``; a window groups by
    ``__kp_window``. None of them reaches a result. The names are defined in
    :mod:`krishiv_py.names`; this module keeps its short names for them.

Examples
--------
>>> from krishiv_py.types import to_schema
>>> read = ReadSource(name="s", kind="files", schema=to_schema("t bigint"), streaming=False)
>>> lines: list[str] = []
>>> _render(FilterExpr(child=read, condition="`t` > 0"), lines)
'df_1'
>>> print("\\n".join(lines))
src_0 = spark.read.format('parquet').schema('`t` bigint').load(None)
df_1 = src_0.filter('`t` > 0')
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, TypeAlias, TypeVar

import attrs

from krishiv_py._typing import Lowering
from krishiv_py.names import (
    ARITH_METRIC_PREFIX,
    BASE_HIDDEN,
    ET,
    GLOBAL,
    OUT_OBSERVE,
    OUTPUT_DDL,
    PACKED_DDL,
    ROUTE,
    ROUTED_DDL,
    ROW_KIND,
    SEQ,
    STATE_DDL,
    TICK,
    WINDOW,
    WM,
)
from krishiv_py.names import BUCKET as _BUCKET
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.types import Schema

__all__ = [
    "ARITH",
    "AfterStage",
    "AfterWindow",
    "BASE_HIDDEN",
    "Emits",
    "ET",
    "GLOBAL",
    "KIND",
    "OUT_OBSERVE",
    "SEQ",
    "WINDOW",
    "WM",
    "FilterExpr",
    "GroupAgg",
    "LookupTable",
    "MapArrow",
    "Observe",
    "ReadSource",
    "RecipeNode",
    "SelectExprs",
    "SparkRecipe",
    "StreamJoin",
    "TrackedSource",
    "UnionAll",
    "WithWatermark",
]

#: Row kind (:data:`krishiv_py.names.ROW_KIND`): 0 data, 1 watermark promise, 2 close,
#: 3 idle-source marker.
KIND = ROW_KIND
#: Start of the observed metrics that count values arithmetic gave no result for
#: (:data:`krishiv_py.names.ARITH_METRIC_PREFIX`).
ARITH = ARITH_METRIC_PREFIX


@attrs.frozen(kw_only=True)
class ReadSource:
    """Read one source; the result has the user columns plus ``__kp_kind/__kp_wm/__kp_seq``.

    ``kind`` names the runtime's reader (:mod:`krishiv_py.runtime.sources`):
    ``"memory"``, ``"records"``, ``"files"``, ``"markers"``, or a kind
    registered there.
    """

    name: str
    kind: str
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


@attrs.frozen(kw_only=True)
class StreamJoin:
    """Spark's own join of ``left`` and ``right`` on ``condition``, then ``exprs`` selected.

    Streaming, each side's ``time`` column carries Spark's watermark into the
    join (it is made with the watermark metadata, and the event-time columns
    that had it are left out of the sides), so Spark's late-row filter and
    state eviction read it.
    """

    left: RecipeNode
    right: RecipeNode
    #: ``(name, SQL)`` of each side's watermark-carrying time column.
    left_time: tuple[str, str]
    right_time: tuple[str, str]
    #: The columns of each side that go into the join (the time column added to them).
    left_columns: tuple[str, ...]
    right_columns: tuple[str, ...]
    condition: str
    how: str
    exprs: tuple[str, ...]
    streaming: bool
    #: Streaming: each side first drops (and counts) its rows behind the watermark of their
    #: micro-batch, read from the query's offset log. Spark's join drops a late row by the
    #: watermark of the micro-batch before, which is not the specified rule when a watermark
    #: advance and a row fall into consecutive micro-batches; this filter makes it so.
    #: ``shift_ms``: the event-time shift inside the query.
    drops_late: bool = False
    shift_ms: int = 0


@attrs.frozen(kw_only=True)
class LookupTable:
    """``child``'s rows with the rows of the bounded ``table`` of equal ``on`` columns (Spark's
    left join of a stream and a table, read again for every micro-batch); ``how="inner"`` drops
    a data row without a match (a marker row passes: :data:`KIND`)."""

    child: RecipeNode
    table: RecipeNode
    on: tuple[str, ...]
    how: str
    #: Each table column the joined rows take, and its name there.
    columns: tuple[tuple[str, str], ...]


@attrs.frozen(kw_only=True)
class MapArrow:
    """``mapInArrow(function, schema)``: a vectorized Python step per partition (no state).

    ``label`` is how ``explain()`` names the function.
    """

    child: RecipeNode
    function: Any = attrs.field(eq=False, repr=False)
    schema: str
    label: str


@attrs.frozen(kw_only=True)
class StatefulApply:
    """``groupBy(bucket)`` + krishiv's stateful operator over ``child`` (encoded rows).

    ``operator`` is the operator's picklable spec; ``tick_exprs`` select the
    encoded columns for the internal tick source (streaming only).
    """

    child: RecipeNode
    operator: Any = attrs.field(eq=False, repr=False)
    streaming: bool
    tick_exprs: tuple[str, ...]
    #: What ``hash()`` takes to bucket a row (its key columns); ``None``: no keys, one bucket.
    hashed: str | None = None
    #: The other side of each join stage after the operator (a join of the operator's results,
    #: SPEC 3.13), by the stage's level (0: ``operator.then``): its rows encoded as the stage's
    #: input, routed by its keys into that stage.
    side_inputs: tuple[tuple[int, RecipeNode], ...] = ()
    #: A union of windows: what ``hash()`` takes in each branch (its child is a union of them).
    branch_hashed: tuple[str | None, ...] | None = None
    #: What carries the operator's state between micro-batches (streaming): ``"krishiv-files"``,
    #: krishiv's own versioned files under the checkpoint (``applyInArrow``;
    #: :mod:`krishiv_py.stateful.versioned`), ``"one-task"`` (the same files, every bucket in
    #: one task, no shuffle) or ``"state-store"``, Spark's (``applyInPandasWithState``). A job
    #: sets it when it starts (:func:`krishiv_py.runtime.launch.operator_carrier`).
    carrier: str = "krishiv-files"


RecipeNode: TypeAlias = (
    ReadSource
    | SelectExprs
    | FilterExpr
    | WithWatermark
    | Observe
    | UnionAll
    | GroupAgg
    | MapArrow
    | StatefulApply
    | StreamJoin
    | LookupTable
)


@attrs.frozen(kw_only=True)
class TrackedSource:
    """What the job needs to turn observed metrics into a per-source watermark."""

    observe_name: str
    source: str
    lag_ms: int
    #: Processing time without input after which the source is idle; None: never.
    #: Such a source gets idle-marker rows (``__kp_kind`` 3) from the job's
    #: marker directory ``<markers>/<observe_name>``.
    idle_timeout_ms: int | None = None
    #: The source's maximum event time is Spark's own (the progress report's ``eventTime.max``,
    #: in ms): the query has one watermark operator, which sees the same rows, so no observed
    #: metric computes it a second time per row.
    max_in_progress: bool = False
    #: The source's data rows are Spark's own count (the progress report's ``numInputRows``): the
    #: query reads this one file source and nothing else, so no observed metric counts them per row.
    rows_in_progress: bool = False
    #: The source's automatic lag (``watermark(column, "auto")``; its ``lag_ms`` is then 0, Spark's
    #: delay): the driver computes its watermark (:mod:`krishiv_py.runtime.auto_watermark`).
    auto: AutoLag | None = None


@attrs.frozen(kw_only=True)
class AfterWindow:
    """Stateless stages on the stateful operator's results (``filter``/``select``/``with_column``).

    The operator's results reach the driver once per micro-batch; ``root``
    runs on them there as a small Spark batch job, whose leaf is the
    :class:`ReadSource` of kind ``"results"`` (that micro-batch's rows, in
    ``window_schema``), so the expressions mean exactly what they mean in
    the other lowerings. ``schema`` is what comes out.

    ``arrow``: the same stages evaluated in Arrow on the driver (a
    :class:`~krishiv_py.stateful.between.Between`, as between two operators),
    set when every expression of them evaluates there as Spark SQL does; the
    runtime then runs no Spark job for them. None: ``root`` runs.
    """

    root: RecipeNode
    window_schema: Schema
    schema: Schema
    arrow: Any = None

    def render(self) -> str:
        """The stages as PySpark-like code over ``results``, one per line (in Arrow: each step)."""
        if self.arrow is not None:
            return _render_arrow(self.root)
        lines: list[str] = []
        final = _render(self.root, lines)
        lines.append(f"result = {final}")
        return "\n".join(lines)


def _render_arrow(root: RecipeNode) -> str:
    """Stages run in Arrow: each step's Spark SQL, over the micro-batch's results, first to last."""
    steps: list[str] = []
    node = root
    while isinstance(node, SelectExprs | FilterExpr | Observe):
        if isinstance(node, FilterExpr):
            steps.append(f"result = result.filter({node.condition!r})")
        elif isinstance(node, SelectExprs):
            steps.append(f"result = result.select({', '.join(repr(e) for e in node.exprs)})")
        node = node.child
    head = "result = <this micro-batch's window results, in Arrow: Spark SQL's values, no Spark job>"
    return "\n".join([head, *reversed(steps)])


@attrs.frozen(kw_only=True)
class DriverRank:
    """``top_n`` with ``ties="all"`` over a batch job's results, ranked in Arrow on the driver."""

    n: int
    by: tuple[str, ...]
    group: tuple[str, ...]
    ascending: bool

    def render(self) -> str:
        way = "ASC" if self.ascending else "DESC"
        return (
            f"result = <rank() OVER (PARTITION BY {', '.join(self.group)} ORDER BY "
            f"{', '.join(f'{b} {way} NULLS LAST' for b in self.by)}) <= {self.n}, in Arrow on the driver>"
        )


#: A stage after the window (:attr:`SparkRecipe.stages`), run on the driver.
AfterStage: TypeAlias = AfterWindow | DriverRank
#: What the rows counted out of a query are: window results, or a join's rows.
Emits: TypeAlias = Literal["windows", "joined"]
_S = TypeVar("_S", bound=AfterStage)


def _stage_of(stages: tuple[AfterStage, ...], kind: type[_S]) -> _S | None:
    """The stage of type ``kind`` in ``stages`` (a recipe has at most one of each), or None."""
    return next((s for s in stages if isinstance(s, kind)), None)


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
    late_handler: Any = attrs.field(default=None, eq=False, repr=False)
    #: Pane-event callbacks (:class:`~krishiv_py.panes.PaneCallbacks`), run on the driver.
    pane_callbacks: Any = attrs.field(default=None, eq=False, repr=False)
    #: What runs after the window on the driver, in order (:mod:`krishiv_py.runtime.stages`):
    #: stateless stages (filter, select, with_column; a native micro-batch's top-N), or a
    #: top-N ranked in Arrow. No stage keeps state: an operator after the stateful one runs
    #: in krishiv's operator (its call, or a stage of its own), not here.
    stages: tuple[AfterStage, ...] = ()
    #: For a join's rows (SPEC 3.12), the columns that identify a row together with the
    #: columns the user names (a table sink's ``key=``): a window join's keys and window
    #: bounds, else none; ``None``: the rows are not a join's.
    join_identity: tuple[str, ...] | None = None
    #: The columns that identify a result row when no window bounds do: an aggregation per
    #: key's keys (a table sink upserts by them); ``None``: none such.
    result_key: tuple[str, ...] | None = None
    #: The user functions (:func:`~krishiv_py.expr.udf`) the recipe's SQL calls: registered with
    #: the SparkSession, each under its ``sql_name``, before the job is built.
    udfs: tuple[Any, ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def emits(self) -> Emits | None:
        """What the rows counted out of the query are (``OUT_OBSERVE``, or the stateful operator's count).

        ``"windows"``: window results (``JobMetrics.windows_emitted``);
        ``"joined"``: a join's rows (``JobMetrics.joined_rows``), the
        stateful operator's when it runs a join (it runs one join or one
        window), or a plan with a join and no window; None: not counted.
        """
        if self.stateful is not None:
            return "windows" if self.join_identity is None else "joined"
        if self.windowed:
            return "windows"
        return "joined" if self.join_identity is not None else None

    @property
    def counts_very_late(self) -> bool:
        """Whether the query counts its very late rows itself (a native join's sides do)."""
        return any(isinstance(x, StreamJoin) and x.drops_late for x in _nodes(self.root))

    @property
    def idle(self) -> tuple[TrackedSource, ...]:
        """The sources with an idle timeout (their markers need a directory)."""
        return tuple(t for t in self.tracked if t.idle_timeout_ms is not None)

    @property
    def stateful(self) -> StatefulApply | None:
        """The stateful operator node when the recipe ends in one."""
        return self.root if isinstance(self.root, StatefulApply) else None

    @property
    def after(self) -> AfterWindow | None:
        """The stateless stages after the window (filter, select, with_column), if any."""
        return _stage_of(self.stages, AfterWindow)

    @property
    def driver_rank(self) -> DriverRank | None:
        """A batch job's (or micro-batch's) top-N, ranked in Arrow on the driver, if any."""
        return _stage_of(self.stages, DriverRank)

    def render(self) -> str:
        """The recipe as PySpark-like code, one operation per line."""
        lines: list[str] = []
        final = _render(self.root, lines)
        lines.append(f"result = {final}")
        for stage in self.stages:
            rows = "the batch job's rows" if isinstance(stage, DriverRank) else "each micro-batch's results"
            lines.append(f"# then, on the driver, on {rows}:")
            lines.append(stage.render())
        return "\n".join(lines)


def _nodes(node: RecipeNode) -> Iterator[RecipeNode]:
    """``node`` and every recipe node under it (a stateful operator's side inputs left out)."""
    yield node
    if isinstance(node, StreamJoin):
        yield from _nodes(node.left)
        yield from _nodes(node.right)
    elif isinstance(node, UnionAll):
        for child in node.children:
            yield from _nodes(child)
    elif not isinstance(node, ReadSource):
        yield from _nodes(node.child)


def _render(node: RecipeNode, lines: list[str]) -> str:
    if isinstance(node, ReadSource):
        return _render_source(node, lines)
    if isinstance(node, UnionAll):
        parts = [_render(c, lines) for c in node.children]
        var = f"df_{len(lines)}"
        lines.append(f"{var} = {parts[0]}" + "".join(f".unionByName({p})" for p in parts[1:]))
        return var
    if isinstance(node, StreamJoin):
        return _render_join(node, lines)
    if isinstance(node, LookupTable):
        return _render_lookup(node, lines)
    inner = _render(node.child, lines)
    if isinstance(node, StatefulApply):
        for level, side_input in node.side_inputs:
            side = _render(side_input, lines)
            lines.append(f"{side} = {side}.mapInArrow(<route rows per stage bucket>, '{ROUTED_DDL}')")
            inner = f"{inner}, side={side}" if not level else f"{inner}, side_{level}={side}"
    var = f"df_{len(lines)}"
    call = {
        SelectExprs: lambda x: f".selectExpr({', '.join(repr(e) for e in x.exprs)})",
        FilterExpr: lambda x: f".filter({x.condition!r})",
        WithWatermark: lambda x: f".withWatermark({x.column!r}, {x.delay!r})",
        Observe: lambda x: f".observe({x.name!r}, {', '.join(repr(e) for e in x.exprs)})",
        GroupAgg: lambda x: (
            f".groupBy({', '.join(repr(k) for k in x.keys)}).agg({', '.join(repr(a) for a in x.aggs)})"
        ),
        MapArrow: lambda x: f".mapInArrow(<{x.label}>, {x.schema!r})",
        StatefulApply: _render_stateful,
    }[type(node)](node)
    lines.append(f"{var} = {inner}{call}")
    return var


def _render_source(node: ReadSource, lines: list[str]) -> str:
    var = f"src_{len(lines)}"
    reader = "spark.readStream" if node.streaming else "spark.read"
    if node.kind == "results":
        lines.append(f"{var} = spark.createDataFrame(<this micro-batch's window results>)")
    elif node.kind == "records":
        lines.append(f"{var} = spark.createDataFrame(<{node.name}: Arrow table + hidden columns>)")
    elif node.kind == "markers":
        where = f"<idle markers of {node.name}>"
        lines.append(f"{var} = {reader}.format('parquet').schema('{WM} bigint').load({where})")
    elif node.kind not in ("memory", "files"):  # a kind registered by its own reader
        opts = "".join(f".option({k!r}, {v!r})" for k, v in node.options)
        lines.append(f"{var} = <{node.kind} source {node.name!r}, {node.schema.ddl()!r}>{opts}")
    else:
        opts = "".join(f".option({k!r}, {v!r})" for k, v in node.options)
        ddl = node.schema.ddl() + (
            f", {ROW_KIND} tinyint, {WM} bigint, {SEQ} bigint" if node.kind == "memory" else ""
        )
        lines.append(f"{var} = {reader}.format({node.format!r}).schema({ddl!r}){opts}.load({node.path!r})")
    return var


def _render_join(node: StreamJoin, lines: list[str]) -> str:
    sides = []
    for child, (name, sql), cols in (
        (node.left, node.left_time, node.left_columns),
        (node.right, node.right_time, node.right_columns),
    ):
        part = _render(child, lines)
        if node.drops_late:
            var = f"df_{len(lines)}"
            lines.append(
                f"{var} = {part}.mapInArrow(<flag rows behind the micro-batch's watermark "
                "(offset log)>, ...).observe(<count them>).filter('NOT `__kp_late`')"
            )
            part = var
        side = f"df_{len(lines)}"
        carry = f"F.expr({sql!r}).alias({name!r}, metadata=<watermark>)" if node.streaming else repr(sql)
        lines.append(f"{side} = {part}.select({', '.join(repr(c) for c in cols)}, {carry})")
        sides.append(side)
    var = f"df_{len(lines)}"
    exprs = ", ".join(repr(e) for e in node.exprs)
    join = f"{sides[0]}.join({sides[1]}, F.expr({node.condition!r}), {node.how!r})"
    lines.append(f"{var} = {join}.selectExpr({exprs})")
    return var


def _render_lookup(node: LookupTable, lines: list[str]) -> str:
    rows = _render(node.child, lines)
    table = _render(node.table, lines)
    if isinstance(node.table, ReadSource) and node.table.kind == "files" and node.table.format == "parquet":
        lines[-1] = f"{table} = <{node.table.path!r}: its Parquet files listed again for each micro-batch>"
    var = f"df_{len(lines)}"
    on = " AND ".join(f"{k} = table.{k}" for k in node.on)
    lines.append(f"{var} = {rows}.join({table}, '{on}', 'left')  # table columns: {dict(node.columns)}")
    if node.how == "inner":
        lines.append(f"{var} = {var}.filter('<a match, or a marker row>')")
    return var


def _render_stateful(node: StatefulApply) -> str:
    what = f"<{node.operator.kernel.describe()} buckets={node.operator.buckets}>"
    # With one watermark of a fixed lag (a join: one a side) each map task also tells every bucket
    # its highest event time, and the operator fires what the watermark after the micro-batch
    # makes due in it.
    per_side = " of each side" if node.operator.side_fire_lags_ms is not None else ""
    ahead = (
        f", the highest event time{per_side} to every bucket"
        if node.streaming and node.operator.fires_ahead
        else ""
    )
    packed = f".mapInArrow(<pack rows per key bucket{ahead}>, '{PACKED_DDL}')"
    then = node.operator.then
    ddl = OUTPUT_DDL if then is None else ROUTED_DDL
    if not node.streaming:
        out = f"{packed}.groupBy('{_BUCKET}').applyInPandas({what}, '{ddl}')"
    else:
        tick_cols = ", ".join(repr(e) for e in node.tick_exprs)
        ticks = f"spark.readStream.parquet(<tick source>).selectExpr({tick_cols})"
        files = "state: <checkpoint>/krishiv-state/<bucket>/<batch id>.arrow"
        unioned = f"{packed}.unionByName({ticks})"
        if node.carrier == "krishiv-files":
            out = f"{unioned}.groupBy('{_BUCKET}').applyInArrow({what[:-1]} {files}>, '{ddl}')"
        elif node.carrier == "one-task":
            # The rows and the ticks (flagged) go to one call that packs them and runs every bucket.
            flagged = f"spark.readStream.parquet(<tick source>).selectExpr('{_BUCKET}', 'true AS {TICK}')"
            union = f".unionByName({flagged}, allowMissingColumns=True)"
            run = f"<pack rows per key bucket{ahead}, then {what[1:-1]} in one task, {files}>"
            out = f"{union}.coalesce(1).mapInArrow({run}, '{ddl}')"
        else:
            out = (
                f"{unioned}.groupBy('{_BUCKET}').applyInPandasWithState({what}, "
                f"'{ddl}', '{STATE_DDL}', 'append', 'NoTimeout')"
            )
    sides = {level: f".unionByName(side{f'_{level}' if level else ''})" for level, _ in node.side_inputs}
    level = 0
    while then is not None:  # each stage, its rows moved across the cluster once more
        ddl = OUTPUT_DDL if then.then is None else ROUTED_DDL
        out = f"{out}{sides.get(level, '')}.groupBy('{ROUTE}').applyInArrow(<{then.describe()}>, '{ddl}')"
        level, then = level + 1, then.then
    return out
