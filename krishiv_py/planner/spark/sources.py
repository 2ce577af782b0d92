"""Lower sources, filters, projections, unions and watermarks: the part every lowering shares.

:class:`Lowerer` walks a plan bottom-up and returns, for each node, its
recipe and the hidden columns it carries (see :mod:`.recipe`). A window
aggregation is handed to the lowering's own window rule
(:class:`WindowRule`), so a new lowering reuses everything here and only
brings its window part.

Punctuation rows
    ``Sender.advance_watermark`` and ``Sender.close`` write a marker row
    (``__kp_kind`` 1 or 2) carrying the target watermark in ``__kp_wm``. Its
    event time is set to ``target + lag`` so Spark's ``max(event time) - lag``
    becomes the target; the row is removed right after the watermark
    operator, by a filter that mentions the event-time column so Spark's
    optimizer cannot push it below the watermark. User filters let marker
    rows through.
Idle markers
    A source with an idle timeout gets a second input, unioned in right
    below its watermark: the job's private marker directory. When the
    source has been idle for its timeout, the job writes a marker row there
    (``__kp_kind`` 3, target in ``__kp_wm``) that moves the source's watermark
    operator up to the minimum of the active sources' watermarks, so Spark's
    overall minimum no longer waits for it (see :mod:`krishiv_py.runtime.idle`).
Observed metrics
    ``observe`` counts data rows, rows with no valid event time and the
    maximum event time per source, so the job can report per-source
    watermarks exactly; idle markers are observed apart from the source's
    own rows. A streaming query with one watermark operator and no idle
    markers (:func:`one_watermark`) leaves the maximum out: Spark's
    watermark operator computes it over the same rows and reports it in
    the progress (``eventTime.max``), and a second ``max`` per row cost
    about a sixth of a simple aggregation's time (docs/performance-history.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.expr import ExprNode, dtype_of, output_name
from krishiv_py.names import (
    ACTIVE,
    AUTO_SOURCE,
    BASE_HIDDEN,
    ET,
    IDLE_WM,
    INVALID,
    MAX_ET_US,
    RANK,
    ROW_KIND,
    ROWS,
    SEQ,
    WM,
    arithmetic_metric,
    arithmetic_observation,
    input_observation,
    source_observation,
)
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.watermarks import MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.plan.windows import in_processing_time
from krishiv_py.planner.spark.kinds import KINDS, OperatorKind, kind_of
from krishiv_py.planner.spark.recipe import (
    FilterExpr,
    LookupTable,
    Observe,
    ReadSource,
    RecipeNode,
    SelectExprs,
    TrackedSource,
    UnionAll,
    WithWatermark,
)
from krishiv_py.planner.sql import failure_checks, quote, to_sql
from krishiv_py.types import Schema

__all__ = [
    "STAGED_SIDES",
    "ChainRule",
    "UnionRule",
    "JoinRule",
    "Lowerer",
    "ReadRule",
    "WindowRule",
    "data_rows",
    "one_watermark",
    "read_rule",
    "register_read_rule",
    "select_item",
    "top_n",
]

Source = n.SourceNode


class WindowRule(Protocol):
    """How a lowering turns a window aggregation over ``child`` into a recipe."""

    def __call__(
        self, node: n.WindowAggregate, child: RecipeNode, *, streaming: bool, shift_ms: int
    ) -> RecipeNode: ...


class KeyedRule(Protocol):
    """Lowers an operator per key over every row (an aggregation, a top-N, an over-aggregation)
    over its lowered input."""

    def __call__(
        self, node: n.PlanNode, child: RecipeNode, *, streaming: bool, shift_ms: int
    ) -> RecipeNode: ...


class JoinRule(Protocol):
    """How a lowering turns a join of ``left`` and ``right`` into a recipe."""

    def __call__(
        self, node: n.Join, left: RecipeNode, right: RecipeNode, *, streaming: bool, shift_ms: int
    ) -> RecipeNode: ...


class ChainRule(Protocol):
    """Lowers the operator ``node`` with the operators under it (a chain: a window of a join's
    rows, say), each run as the stateful lowering runs chains, by ``ctx``."""

    def __call__(self, ctx: Lowerer, node: n.PlanNode) -> RecipeNode: ...


class UnionRule(Protocol):
    """Lowers a union of operators' results as one operator (None: ``node`` is another union)."""

    def __call__(self, ctx: Lowerer, node: n.Union) -> RecipeNode | None: ...


#: The operators whose results a join on the stateful lowering takes as a side: a stage after them.
STAGED_SIDES = tuple(kind.node for kind in KINDS.values() if kind.join_side)


def _results_of(side: n.PlanNode) -> n.PlanNode:
    """A join's side as it is lowered: the operator under its filters and projections, if any."""
    below = facts(side).results_of
    of_operators = n.union_branches(side, of_windows=True) is not None  # a union of their results
    return below if isinstance(below, STAGED_SIDES) or of_operators else side


#: How :meth:`Lowerer.lower` lowers each node class that is no source and no operator kind
#: (:mod:`~krishiv_py.planner.spark.kinds`): one translator per class.
_TRANSLATORS: dict[type[Any], Callable[[Lowerer, Any, bool], tuple[RecipeNode, tuple[str, ...]]]] = {}


@attrs.define
class Lowerer:
    """One lowering run: the options it lowers with and the sources it has tracked."""

    streaming: bool
    shift: int
    window: WindowRule
    #: The lowering's join rule (None: it runs no joins).
    join: JoinRule | None = None
    #: The lowering's rule for an aggregation per key without a window (None: it runs none).
    keyed: KeyedRule | None = None
    tracked: list[TrackedSource] = attrs.field(factory=list)
    #: The query has one watermark operator (:func:`one_watermark`): its maximum event time
    #: comes from Spark's progress report instead of an observed metric.
    spark_max: bool = False
    #: The query reads one Spark source, a streaming file source right under its watermark
    #: (:func:`rows_in_progress`): its rows are Spark's own count (the progress report's
    #: ``numInputRows``), so the watermark's observation leaves the per-row count out.
    progress_rows: bool = False
    inputs: int = 0
    #: Observations of arithmetic without a result (:func:`~krishiv_py.names.arithmetic_observation`)
    #: made so far.
    arithmetic: int = 0
    #: A join's side that is an operator's results is a stage's input (the stateful lowering):
    #: the operator is lowered without the filters and projections after it, which the stage runs.
    staged_sides: bool = False
    #: How a join's side that is a chain of operators is lowered (None: each operator by its rule).
    chain: ChainRule | None = None
    #: How a union of operators' results is lowered (None: as Spark's union of its inputs).
    union: UnionRule | None = None
    #: Nodes read as they are instead of lowered (by identity): an operator's results, which
    #: the stages after it read as one micro-batch's rows.
    reads: dict[int, RecipeNode] = attrs.field(factory=dict)

    def lower(self, node: n.PlanNode, *, count_input: bool = True) -> tuple[RecipeNode, tuple[str, ...]]:
        """Recipe for ``node`` and the hidden columns it carries.

        ``count_input=False``: a watermark right above this source counts its
        rows, saving Spark one per-row metrics operator.
        """
        read = self.reads.get(id(node))
        if read is not None:
            return read, ()
        if isinstance(node, n.SOURCE_TYPES):
            _check_partitioned(node)
            return self._source(node, count_input), BASE_HIDDEN
        rule = _TRANSLATORS.get(type(node))
        if rule is not None:
            return rule(self, node, count_input)
        kind = kind_of(node)
        assert kind is not None, node
        if kind.slot == "keyed":
            return self._keyed(node, kind)
        if kind.slot == "join":  # (the descriptor's rule slot says which node class it is)
            return self._join(cast(n.Join, node))
        return self._window(cast(n.WindowAggregate, node))

    def _union(self, node: n.Union, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        del count_input
        one = self.union(self, node) if self.union is not None else None
        if one is not None:
            return one, ()
        parts = [self.lower(i) for i in node.inputs]
        return UnionAll(children=tuple(p[0] for p in parts)), parts[0][1]

    def _join(self, node: n.Join) -> tuple[RecipeNode, tuple[str, ...]]:
        if self.join is None:
            raise PlanError("this lowering runs no joins: joins run on the stateful lowering")
        # A side that is an operator's results (filtered or not) is that operator's: the
        # join's rule runs it as a stage after it, the filters and projections in the stage.
        sides = (_results_of(s) if self.staged_sides else s for s in (node.left, node.right))
        left, right = (self._side(side) for side in sides)
        return self.join(node, left, right, streaming=self.streaming, shift_ms=self.shift), ()

    def _filter(self, node: n.Filter, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        del count_input  # (only a watermark right above a source counts its rows)
        child, hidden = self.lower(node.input)
        schema = facts(node.input).schema
        cond = to_sql(node.predicate, schema)
        if ROW_KIND in hidden:
            cond = f"({quote(ROW_KIND)} <> 0 OR {cond})"  # punctuation rows pass user filters
        child = self.count_failures(child, [node.predicate], schema)
        return FilterExpr(child=child, condition=cond), hidden

    def _project(self, node: n.Project, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        del count_input
        child, hidden = self.lower(node.input)
        schema = facts(node.input).schema
        exprs = tuple(select_item(e, schema) for e in node.exprs) + tuple(quote(h) for h in hidden)
        child = self.count_failures(child, node.exprs, schema)
        return SelectExprs(child=child, exprs=exprs), hidden

    def _watermarked(self, node: n.Watermark, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        del count_input
        if _partitioned(node.input):
            return self._per_partition(node), (*BASE_HIDDEN, *_watermark_hidden(node))
        direct = isinstance(node.input, n.SOURCE_TYPES)
        child, hidden = self.lower(node.input, count_input=not direct)
        return self._watermark(node, child, count_input=direct), (*hidden, *_watermark_hidden(node))

    def _ranked(self, node: n.TopN, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        # A batch plan; a streaming query ranks each micro-batch instead (the planner's
        # stages after the window), since Spark ranks no unbounded input.
        assert not self.streaming, "top_n in a streaming query runs on each micro-batch"
        del count_input
        child, hidden = self.lower(node.input)
        return top_n(node, child), hidden

    def _keyed(self, node: n.PlanNode, kind: OperatorKind) -> tuple[RecipeNode, tuple[str, ...]]:
        if self.keyed is None:
            raise PlanError(
                f"this lowering runs no operator per key over every row ({kind.what}): it runs on "
                "the stateful lowering"
            )
        child, _ = self.lower(n.children(node)[0])
        return self.keyed(node, child, streaming=self.streaming, shift_ms=self.shift), ()

    def _window(self, node: n.WindowAggregate) -> tuple[RecipeNode, tuple[str, ...]]:
        child, hidden = self.lower(node.input)
        if n.cascade_of(node) is not None:
            # The rows are a window's results: event time window_end - 1 ms, one data row each.
            assert not self.streaming, "a streaming cascade runs its second window in the operator chain"
            et = f"timestamp_micros(unix_micros({quote('window_end')}) - 1000L + {self.shift * 1000}L)"
            child = SelectExprs(
                child=child,
                exprs=("*", f"{et} AS {quote(ET)}", f"0L AS {quote(SEQ)}", f"0 AS {quote(ROW_KIND)}"),
            )
        if in_processing_time(node.window) and ET not in hidden:
            # No watermark operator dropped the punctuation rows: they are no rows of the window.
            child = FilterExpr(child=child, condition=f"{quote(ROW_KIND)} = 0")
        return self.window(node, child, streaming=self.streaming, shift_ms=self.shift), ()

    def _lookup(self, node: n.LookupJoin, *, count_input: bool) -> tuple[RecipeNode, tuple[str, ...]]:
        """The rows of ``node.input`` with the table's (:class:`LookupTable`): the table lowered as
        a bounded read, its rows counted nowhere (they are no events)."""
        child, hidden = self.lower(node.input, count_input=count_input)
        table = Lowerer(streaming=False, shift=0, window=self.window)
        read, _ = table.lower(node.table, count_input=False)
        columns = tuple(node.table_names.items())
        return LookupTable(child=child, table=read, on=node.on, how=node.how, columns=columns), hidden

    def _side(self, side: n.PlanNode) -> RecipeNode:
        """A join's side: an operator with the operators under it by the chain rule, if any."""
        if self.chain is not None and isinstance(side, STAGED_SIDES):
            return self.chain(self, side)
        return self.lower(side)[0]

    def _per_partition(self, node: n.Watermark) -> RecipeNode:
        """A Kafka source with a watermark per partition: one read, watermark and tracker each.

        Spark's overall watermark is the minimum of its watermark operators,
        so each partition's own operator makes the partitions sources of
        their own, idle markers included.
        """
        source = node.input
        assert isinstance(source, n.KafkaSource) and source.partitions is not None
        parts = []
        for p in range(source.partitions):
            one = attrs.evolve(source, name=f"{source.name}[{p}]", only_partitions=(p,))
            child = self._source(one, count_input=False)
            parts.append(self._watermark(attrs.evolve(node, input=one), child, count_input=True))
        return parts[0] if len(parts) == 1 else UnionAll(children=tuple(parts))

    def count_failures(self, child: RecipeNode, exprs: Sequence[ExprNode], schema: Schema) -> RecipeNode:
        """Observe, over the rows ``exprs`` are computed on, how often arithmetic gave no result."""
        checks = [c for e in exprs for c in failure_checks(e, schema)]
        if not checks:
            return child
        self.arithmetic += 1
        counts = tuple(f"count_if({c}) AS {arithmetic_metric(i)}" for i, c in enumerate(checks))
        return Observe(child=child, name=arithmetic_observation(self.arithmetic - 1), exprs=counts)

    def _source(self, node: Source, count_input: bool) -> RecipeNode:
        self.inputs += 1
        rule = read_rule(node)
        read = rule.read(node, streaming=self.streaming)
        if not count_input:
            return read
        name = input_observation(self.inputs - 1)
        rows = f"count_if({quote(ROW_KIND)} = 0) AS {ROWS}" if rule.punctuated else f"count(1) AS {ROWS}"
        return Observe(child=read, name=name, exprs=(rows,))

    def _watermark(self, node: n.Watermark, child: RecipeNode, *, count_input: bool) -> RecipeNode:
        """The event-time column over ``child``, Spark's watermark on it, its metrics observed.

        Streaming, an idle timeout unions the source's idle markers in first;
        unless every row is data, punctuation rows are dropped after the
        watermark operator has seen them.
        """
        name = source_observation(len(self.tracked))
        idle = self.streaming and node.idle_timeout_ms is not None
        if idle:
            child = UnionAll(children=(child, _markers(name, facts(node.input).schema)))
        # Files and records carry no punctuation rows: every row is data, so the
        # per-row expressions skip the row-kind tests (a simpler plan that
        # Spark re-optimises in less time every micro-batch).
        plain = not idle and not any(isinstance(s, n.MemorySource) for s in n.sources_of(node))
        exprs = ["*", self._event_time(node, plain=plain)]
        if node.auto is not None:  # which source a row comes from: each has a lag of its own
            exprs.append(f"CAST({len(self.tracked)} AS INT) AS {quote(AUTO_SOURCE)}")
        out: RecipeNode = SelectExprs(child=child, exprs=tuple(exprs))
        spark_max = self.streaming and self.spark_max and not idle
        spark_rows = self.streaming and self.progress_rows and count_input and plain
        self._track(node, name, idle=idle, spark_max=spark_max, spark_rows=spark_rows)
        metrics = _source_metrics(
            plain=plain, idle=idle, count_input=count_input and not spark_rows, spark_max=spark_max
        )
        # Observed right over the select that computes the event time, below the watermark
        # operator (which passes every row): Spark runs both without generated code, so the
        # rows go from one to the other with no code-generated stage between them.
        out = Observe(child=out, name=name, exprs=metrics)
        if self.streaming:
            # An automatic lag: Spark's watermark is the highest event time seen (delay 0), and
            # the driver computes the job's from the lag it records (runtime.auto_watermark).
            delay = 0 if node.auto is not None else node.lag_ms
            out = WithWatermark(child=out, column=ET, delay=f"{delay} milliseconds")
        if plain:
            return out
        # Mentions the event-time column, so it stays above the watermark operator.
        return FilterExpr(child=out, condition=f"({quote(ROW_KIND)} = 0 OR {quote(ET)} IS NULL)")

    def _event_time(self, node: n.Watermark, *, plain: bool) -> str:
        """The select item of the event-time column.

        A data row's event time, shifted by the lowering's time shift (``NULL``
        outside the supported range); unless ``plain``, a punctuation row's is
        its target watermark plus the lag, so the watermark operator reaches
        the target.
        """
        et = facts(node).event_time
        assert et is not None
        shift_us = self.shift * 1000
        col = quote(node.column)
        raw = f"unix_micros(CAST({col} AS TIMESTAMP))" if et.dtype.is_timestamp else f"{col} * 1000L"
        millis = f"unix_millis(CAST({col} AS TIMESTAMP))" if et.dtype.is_timestamp else col
        micros = f"CASE WHEN {millis} BETWEEN {MIN_EVENT_MS}L AND {MAX_EVENT_MS}L THEN {raw} END"
        data_et = f"timestamp_micros({micros} + {shift_us}L)"
        if plain:
            return f"{data_et} AS {quote(ET)}"
        lag = 0 if node.auto is not None else node.lag_ms  # (an automatic lag: Spark's delay is 0)
        punct_et = f"timestamp_micros(({quote(WM)} + {lag + self.shift}L) * 1000L)"
        return f"CASE WHEN {quote(ROW_KIND)} = 0 THEN {data_et} ELSE {punct_et} END AS {quote(ET)}"

    def _track(self, node: n.Watermark, name: str, *, idle: bool, spark_max: bool, spark_rows: bool) -> None:
        """Record the sources of ``node`` as observed by ``name``, for the job's per-source watermarks."""
        sources = ",".join(s.name for s in n.sources_of(node))
        self.tracked.append(
            TrackedSource(
                observe_name=name,
                source=sources,
                # An automatic lag: Spark's watermark is the highest time seen (and any promise
                # past it, advance_watermark or the end of input); the driver computes the rest.
                lag_ms=0 if node.auto is not None else node.lag_ms,
                idle_timeout_ms=node.idle_timeout_ms if idle else None,
                max_in_progress=spark_max,
                rows_in_progress=spark_rows,
                auto=node.auto,
            )
        )


def one_watermark(plan: n.PlanNode) -> bool:
    """Whether ``plan`` lowers to a query with exactly one watermark operator.

    A Kafka source with a watermark per partition gets one operator per
    partition; every other :class:`~krishiv_py.plan.nodes.Watermark` node one.
    """
    marks = facts(plan).watermarks
    return len(marks) == 1 and not _partitioned(marks[0].input)


def rows_in_progress(plan: n.PlanNode) -> bool:
    """Whether ``plan`` reads one source, a streaming file source right under its watermark.

    Every row such a query reads is a data row of that one Spark source, and
    the observation over its event time sits right above the read, where no
    filter reaches the scan: Spark's ``numInputRows`` is exactly the count
    the observation would make. A second source (a union, a join, a lookup
    table, idle markers) or rows that are not all data (a memory stream's
    punctuation) keep the observed count.
    """
    sources = n.sources_of(plan)
    if len(sources) != 1 or not isinstance(sources[0], n.FileSource) or not sources[0].streaming:
        return False
    marks = [w for w in n.watermarks_of(plan) if w.input is sources[0]]
    return len(marks) == 1 and marks[0].idle_timeout_ms is None


def _watermark_hidden(node: n.Watermark) -> tuple[str, ...]:
    """The hidden columns a watermark adds: the event time, and with an automatic lag the source."""
    return (ET,) if node.auto is None else (ET, AUTO_SOURCE)


def _partitioned(node: n.PlanNode) -> bool:
    return isinstance(node, n.KafkaSource) and node.per_partition and node.only_partitions is None


def _check_partitioned(node: n.PlanNode) -> None:
    if _partitioned(node):
        raise PlanError(
            f"Kafka source {node.name!r} has watermark_per_partition=True: call .watermark(column, lag_ms) "  # type: ignore[union-attr]
            "right on the stream read_kafka returns (before any filter or select), so each partition "
            "gets its own watermark"
        )


def _source_metrics(
    *, plain: bool, idle: bool, count_input: bool, spark_max: bool = False
) -> tuple[str, ...]:
    """The metrics a watermark observes of its input.

    Data rows (when ``count_input``), rows without a valid event time and the
    maximum event time (unless ``spark_max``: Spark reports it); with ``idle``
    markers unioned in, the maximum and the count of the source's own rows
    apart from the markers' target watermark.
    """
    kind = quote(ROW_KIND)
    data_row = "" if plain else f"{kind} = 0 AND "
    own = (
        (
            f"max(CASE WHEN {kind} < 3 THEN unix_micros({quote(ET)}) END) AS {MAX_ET_US}",
            f"count_if({kind} < 3) AS {ACTIVE}",
            f"max(CASE WHEN {kind} = 3 THEN {quote(WM)} END) AS {IDLE_WM}",
        )
        if idle
        else ()
        if spark_max
        else (f"max(unix_micros({quote(ET)})) AS {MAX_ET_US}",)
    )
    rows = f"count(1) AS {ROWS}" if plain else f"count_if({kind} = 0) AS {ROWS}"
    return (
        *((rows,) if count_input else ()),
        # count(CASE ...), not count_if: Spark rewrites count_if's test into a column of its own,
        # a projection per row between the select and the observation.
        f"count(CASE WHEN {data_row}{quote(ET)} IS NULL THEN 1 END) AS {INVALID}",
        *own,
    )


def _markers(name: str, schema: Schema) -> RecipeNode:
    """The idle-marker input of one source: rows shaped like the source's, all user columns null."""
    read = ReadSource(
        name=name,
        kind="markers",
        schema=Schema(()),
        streaming=True,
        path=name,
        options=(("maxFileAge", "36500d"),),
    )
    exprs = tuple(f"CAST(NULL AS {f.dtype.name}) AS {quote(f.name)}" for f in schema)
    hidden = (f"CAST(3 AS TINYINT) AS {quote(ROW_KIND)}", quote(WM), f"CAST(0 AS BIGINT) AS {quote(SEQ)}")
    return SelectExprs(child=read, exprs=(*exprs, *hidden))


def top_n(node: n.TopN, child: RecipeNode, *, schema: Schema | None = None) -> RecipeNode:
    """The rows of ``child`` that rank within ``node.n`` in their window (and keys).

    ``ties="all"`` is ``rank()``, ``"first"`` ``row_number()`` with the
    other columns breaking ties in order; nulls of ``by`` rank last.
    ``schema``: the columns of ``child`` (default: those of ``node``'s input).
    """
    schema = schema if schema is not None else facts(node.input).schema
    way = "ASC" if node.ascending else "DESC"
    order = [f"{quote(c)} {way} NULLS LAST" for c in node.by]
    if node.ties == "first":
        order += [f"{quote(c)} ASC NULLS FIRST" for c in schema.names if c not in node.by]
    part = ", ".join(quote(c) for c in ("window_start", "window_end", *node.keys))
    fn = "rank" if node.ties == "all" else "row_number"
    ranked = SelectExprs(
        child=child,
        exprs=("*", f"{fn}() OVER (PARTITION BY {part} ORDER BY {', '.join(order)}) AS {quote(RANK)}"),
    )
    kept = FilterExpr(child=ranked, condition=f"{quote(RANK)} <= {node.n}")
    return SelectExprs(child=kept, exprs=tuple(quote(c) for c in schema.names))


def select_item(expr: ExprNode, schema: Schema) -> str:
    """The ``selectExpr`` item of one ``select()`` expression over ``schema``."""
    name = output_name(expr)
    if dtype_of(expr, schema).name == "void":  # a bare NULL: give it the plan's type
        return f"CAST(NULL AS STRING) AS {quote(name)}"
    sql = to_sql(expr, schema)
    return sql if sql.endswith(f" AS {quote(name)}") or sql == quote(name) else f"{sql} AS {quote(name)}"


# --- reading each kind of source -----------------------------------------------------------


class ReadRule(Protocol):
    """How one kind of source node becomes the recipe's read (user columns plus ``BASE_HIDDEN``).

    The recipe's :class:`ReadSource` names the runtime reader by ``kind``
    (:mod:`krishiv_py.runtime.sources`).
    """

    #: Its rows include punctuation (watermark promises, end of input), not only data.
    punctuated: bool

    def read(self, node: Any, *, streaming: bool) -> RecipeNode: ...


class MemoryRule:
    """A memory stream: its spooled files, one per micro-batch, hidden columns written by the sender."""

    punctuated = True

    def read(self, node: n.MemorySource, *, streaming: bool) -> RecipeNode:
        opts = (("maxFilesPerTrigger", "1"), ("maxFileAge", "36500d")) if streaming else ()
        return ReadSource(
            name=node.name,
            kind="memory",
            schema=node.schema,
            streaming=streaming,
            path=node.path,
            options=opts,
        )


class RecordsRule:
    """In-memory records: always bounded."""

    punctuated = False

    def read(self, node: n.RecordsSource, *, streaming: bool) -> RecipeNode:
        return ReadSource(
            name=node.name, kind="records", schema=node.schema, streaming=False, records=node.data
        )


class FilesRule:
    """Files Spark reads; the hidden columns are added as constants (data rows only)."""

    punctuated = False

    def read(self, node: n.FileSource, *, streaming: bool) -> RecipeNode:
        read = ReadSource(
            name=node.name,
            kind="files",
            schema=node.schema,
            streaming=node.streaming and streaming,
            format=node.format,
            path=node.path,
            options=node.options,
        )
        return data_rows(read)


def data_rows(read: RecipeNode) -> SelectExprs:
    """``read`` with the hidden columns of a source whose rows are all data, added as constants."""
    hidden = (
        f"CAST(0 AS TINYINT) AS {quote(ROW_KIND)}",
        f"CAST(NULL AS BIGINT) AS {quote(WM)}",
        f"CAST(0 AS BIGINT) AS {quote(SEQ)}",
    )
    return SelectExprs(child=read, exprs=("*", *hidden))


class SparkFrameRule:
    """Any Spark DataFrame (``from_spark``): its rows are data; the runtime reads the frame itself."""

    punctuated = False

    def read(self, node: n.SparkSource, *, streaming: bool) -> RecipeNode:
        read = ReadSource(
            name=node.name, kind="spark", schema=node.schema, streaming=node.streaming, records=node.frame
        )
        return data_rows(read)


_READ_RULES: dict[type, ReadRule] = {
    n.MemorySource: MemoryRule(),
    n.RecordsSource: RecordsRule(),
    n.FileSource: FilesRule(),
    n.SparkSource: SparkFrameRule(),
}


def register_read_rule(node_type: type, rule: ReadRule) -> None:
    """Lower source nodes of ``node_type`` with ``rule`` (a type registered again is replaced)."""
    _READ_RULES[node_type] = rule


def read_rule(node: object) -> ReadRule:
    """The read rule of a source node's type."""
    try:
        return _READ_RULES[type(node)]
    except KeyError:
        raise PlanError(f"no read rule for sources of type {type(node).__name__}") from None


_TRANSLATORS.update(
    {
        n.Union: Lowerer._union,
        n.Filter: Lowerer._filter,
        n.Project: Lowerer._project,
        n.Watermark: Lowerer._watermarked,
        n.TopN: Lowerer._ranked,
        n.LookupJoin: lambda ctx, node, count_input: ctx._lookup(node, count_input=count_input),
    }
)
