"""The logical plan: small immutable nodes with no engine code.

A plan is a tree of these nodes, built by the fluent API in
:mod:`krishiv_py.api` and lowered by :mod:`krishiv_py.planner`. Each node is
validated when it is made (unknown columns, bad types), so an invalid
pipeline fails at the builder call that made it. Derived facts — the output
schema, whether the input is bounded, which column carries event time — are
computed by the functions below, not stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.expr import (
    EXPR_TYPES,
    AggCall,
    Alias,
    Column,
    ExprNode,
    UserFunction,
    agg_type,
    check_filter,
    dtype_of,
    output_name,
    render,
    user_functions_of,
)
from krishiv_py.names import CHANGE_EVENT_TIME, HIDDEN_PREFIX, JOIN_EVENT_TIME, KAFKA_COLUMNS, RESULT_KIND
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS, Emission, counts_only
from krishiv_py.plan.joins import JOIN_HOWS as JOIN_HOWS
from krishiv_py.plan.joins import RIGHT_SUFFIX as RIGHT_SUFFIX
from krishiv_py.plan.joins import JoinHow as JoinHow
from krishiv_py.plan.joins import JoinKind as JoinKind
from krishiv_py.plan.joins import check_join_options, join_text, joined_names
from krishiv_py.plan.joins import what_join as what_join
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    TimeIntervalWindow,
    WindowSpec,
    check_ms,
    in_processing_time,
    window_text,
)
from krishiv_py.types import DataType, Field, Schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Cascade",
    "EventTime",
    "FileSource",
    "Filter",
    "Join",
    "KafkaSource",
    "MemorySource",
    "PlanNode",
    "Project",
    "RecordsSource",
    "SparkSource",
    "TopN",
    "Union",
    "Watermark",
    "WindowAggregate",
    "KeyedAggregate",
    "KeyedTopN",
    "OverAggregate",
    "cascade_lateness_ms",
    "cascade_of",
    "event_time",
    "is_bounded",
    "render_plan",
    "schema_of",
    "sources_of",
    "watermarks_of",
    "with_children",
]

FileFormat: TypeAlias = Literal["parquet", "csv", "json"]
#: What a streaming file source does with a file it cannot read (see ``Session.read_parquet``).
BadFiles: TypeAlias = Literal["fail", "quarantine"]

#: The column ``accumulation("retracting")`` adds to window results: ``"emit"`` or ``"retract"``.
KIND_COLUMN = RESULT_KIND

#: A window as a plan's text names it (:func:`krishiv_py.plan.windows.window_text`; the name
#: :mod:`krishiv_py.advice.advise` reads).
_window_text = window_text


@attrs.frozen(kw_only=True)
class MemorySource:
    """An unbounded stream fed by a :class:`~krishiv_py.Sender` (batches as files in ``path``)."""

    name: str
    schema: Schema
    path: str


@attrs.frozen(kw_only=True)
class RecordsSource:
    """A bounded source over in-memory records (held as an Arrow table)."""

    name: str
    schema: Schema
    data: pa.Table = attrs.field(eq=False, repr=False)


@attrs.frozen(kw_only=True)
class FileSource:
    """Parquet/CSV/JSON files: bounded, or an unbounded directory when ``streaming``."""

    name: str
    schema: Schema
    format: FileFormat
    path: str
    streaming: bool = False
    options: tuple[tuple[str, str], ...] = ()
    #: What a running job does with a file it cannot read: ``"fail"``, or ``"quarantine"``
    #: (move it under the job's ``quarantine_dir`` and go on; streaming only).
    bad_files: BadFiles = "fail"


@attrs.frozen(kw_only=True)
class SparkSource:
    """Any Spark DataFrame (``session.from_spark``): unbounded when the DataFrame is streaming."""

    name: str
    schema: Schema
    frame: Any = attrs.field(eq=False, repr=False)
    streaming: bool


#: How a Kafka source is read: Spark's own connector, or krishiv's Python data source.
KafkaConnector: TypeAlias = Literal["spark", "python"]
KafkaValueFormat: TypeAlias = Literal["json", "raw"]
KafkaKeyFormat: TypeAlias = Literal["string", "raw"]


@attrs.frozen(kw_only=True)
class KafkaSource:
    """A Kafka topic, always unbounded (:mod:`krishiv_py.kafka`).

    ``schema`` is the value's fields followed by the Kafka columns
    (:data:`krishiv_py.kafka.METADATA_COLUMNS`). With
    ``per_partition`` the lowering reads each of ``partitions`` as a source
    of its own, each with its own watermark; ``partitions`` is the topic's
    partition count when the stream was built (``None``: not asked).
    """

    name: str
    schema: Schema
    bootstrap_servers: str
    topic: str
    connector: KafkaConnector
    value_format: KafkaValueFormat = "json"
    key_format: KafkaKeyFormat = "string"
    event_time: str | None = None
    #: ``"earliest"``, ``"latest"`` or partition -> offset.
    starting_offsets: str | tuple[tuple[int, int], ...] = "earliest"
    max_records_per_batch: int | None = None
    consumer_config: tuple[tuple[str, str], ...] = ()
    per_partition: bool = False
    partitions: int | None = None
    #: The partitions this node reads (``None``: every partition, new ones too).
    only_partitions: tuple[int, ...] | None = None

    @property
    def value_fields(self) -> Schema:
        """The fields decoded from each record's value (the schema without the Kafka columns)."""
        return Schema(tuple(f for f in self.schema if f.name not in KAFKA_COLUMNS))


@attrs.frozen(kw_only=True)
class Watermark:
    """Declares the event-time column and its bounded out-of-orderness ``lag_ms``."""

    input: PlanNode
    column: str
    lag_ms: int
    future_tolerance_ms: int = DEFAULT_FUTURE_TOLERANCE_MS
    #: Processing time without input after which the source is idle (left out
    #: of the overall minimum); None: never idle.
    idle_timeout_ms: int | None = None
    #: The lag chosen from the data (SPEC 3.4); ``lag_ms`` is then its upper clamp, the lag
    #: until the source has sent enough rows.
    auto: AutoLag | None = None

    def __attrs_post_init__(self) -> None:
        check_ms("lag_ms", self.lag_ms, positive=False)
        if self.auto is not None and self.lag_ms != self.auto.max_lag_ms:
            raise PlanError("an automatic lag's lag_ms is its max_lag_ms, its lag until warmed up")
        check_ms("future_tolerance_ms", self.future_tolerance_ms, positive=False)
        if self.idle_timeout_ms is not None:
            check_ms("idle_timeout_ms", self.idle_timeout_ms)
        if joins_of(self.input):
            raise PlanError(AFTER_JOIN)
        check_not_after_over(self.input, ".watermark()")
        field = schema_of(self.input).field(self.column, role="event-time column")
        if not (field.dtype.is_timestamp or field.dtype.name in ("bigint", "int")):
            raise PlanError(
                f"event-time column {self.column!r} is {field.dtype}; it must be a timestamp "
                "or a bigint of epoch milliseconds"
            )
        if window_aggregates(self.input):
            raise PlanError(
                "a windowed result carries its event time (window_end - 1 ms) and its watermark (the "
                "upstream one) already: window it again without .watermark(), e.g. "
                ".key_by(...).tumbling_window(3_600_000).agg(...)"
            )
        if event_time(self.input) is not None:
            raise PlanError("this stream already has a watermark; declare it once, on the source side")


@attrs.frozen(kw_only=True)
class Filter:
    input: PlanNode
    predicate: ExprNode

    def __attrs_post_init__(self) -> None:
        dtype = dtype_of(self.predicate, schema_of(self.input))
        if dtype.name != "boolean":
            raise PlanError(f"filter condition {render(self.predicate)} is {dtype}, not boolean")


@attrs.frozen(kw_only=True)
class Project:
    input: PlanNode
    exprs: tuple[ExprNode, ...]

    def __attrs_post_init__(self) -> None:
        if not self.exprs:
            raise PlanError("select() needs at least one column")
        schema_of(self)  # validates columns, names and duplicates


@attrs.frozen(kw_only=True)
class Union:
    inputs: tuple[PlanNode, ...]

    def __attrs_post_init__(self) -> None:
        for i in self.inputs:
            _after_processing_time(i, "a union")
            check_not_after_over(i, "a union")
        first = schema_of(self.inputs[0])
        for other in self.inputs[1:]:
            if schema_of(other) != first:
                raise PlanError(f"union needs identical schemas: [{first}] vs [{schema_of(other)}]")
        times = [event_time(i) for i in self.inputs]
        if any(t is None for t in times) and any(t is not None for t in times):
            raise PlanError("union inputs must all have a watermark, or none of them")
        if len({t.column for t in times if t is not None}) > 1:
            raise PlanError("union inputs must use the same event-time column")


@attrs.frozen(kw_only=True)
class WindowAggregate:
    """Group by ``keys`` and an event-time ``window``, computing ``aggregates``."""

    input: PlanNode
    keys: tuple[str, ...]
    window: WindowSpec
    aggregates: tuple[AggCall, ...]
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        _after_processing_time(self.input, "a window")
        over = over_below(self.input, "a window")
        if in_processing_time(self.window):
            _check_processing_time(self)
            return
        branches = union_branches(self.input)
        if branches is not None:  # a window over a union is one over each of its branches
            for branch in branches:
                attrs.evolve(self, input=branch)
            schema_of(self)
            return
        if joins_of(self.input):
            check_window_after_join(self.input, self.keys, window=self.window)
            if retracting_join_below(self.input):
                check_window_over_retractions(self)
        if isinstance(stateless_below(self.input), KeyedAggregate | KeyedTopN):
            _check_over_retractions("a window", self.window, over=CHANGES)
            check_window_over_retractions(self, over=CHANGES)
        elif over is not None and over_corrects(over):
            _check_over_retractions("a window", self.window, over=OVER_CORRECTIONS)
            check_window_over_retractions(self, over=OVER_CORRECTIONS)
        elif _may_empty(self.input) and self.emission.accumulation != "retracting":
            raise PlanError(
                "a window over the results of a window whose rows may be withdrawn (a join in "
                "accumulation('retracting'), an aggregation or a top-N per key, before it) needs "
                ".accumulation('retracting') itself: it may lose every row it fired with, and only a "
                "retraction withdraws what it emitted"
            )
        if event_time(self.input) is None:
            raise PlanError(
                NO_RESULT_TIME
                if window_aggregates(self.input)
                else "a window needs event time: call .watermark(column, lag_ms) before the window"
            )
        if not self.aggregates:
            raise PlanError("agg() needs at least one aggregate, e.g. kp.count(kp.col('*'))")
        schema_of(self)
        if cascade_of(self) is not None:
            _check_cascade(self)
        elif union_windows(self.input) is not None:
            for up in union_windows(self.input) or ():
                _check_over_results(self, up)
        elif window_aggregates(self.input) and not isinstance(
            stateless_below(self.input), Join | KeyedAggregate | KeyedTopN
        ):
            raise PlanError("a window over a union of windowed results is not supported yet")


@attrs.frozen(kw_only=True)
class KeyedAggregate:
    """``aggregates`` per value of ``keys`` over every row so far: an updating aggregation (SPEC 3.13).

    No window: one result row per key, which each change of the key's
    aggregates retracts and emits again (Flink's regular group
    aggregation); results carry a ``kind`` column. The watermark passes
    through; a key's state is kept for as long as the job runs.
    """

    input: PlanNode
    keys: tuple[str, ...]
    aggregates: tuple[AggCall, ...]
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        if not self.keys:
            raise PlanError("agg() without a window needs key_by(...) columns: one result row per key")
        _after_processing_time(self.input, "an aggregation per key")
        _check_per_key_input(self.input, self.keys, "an aggregation per key without a window (agg())")
        if not self.aggregates:
            raise PlanError("agg() needs at least one aggregate, e.g. kp.count(kp.col('*'))")
        ttl = self.emission.state_ttl
        if ttl is not None and ttl.time != "event":
            raise PlanError(
                "agg() without a window takes an event-time state TTL for now "
                f"(StateTtlConfig(ttl_ms={ttl.ttl_ms})), not time={ttl.time!r}"
            )
        if takes_retractions(self.input) and any(a.func in ("first", "last") for a in self.aggregates):
            raise PlanError(
                "first()/last() in agg() over rows that may be withdrawn (a retracting join, an "
                "aggregation, a top-N or a window) is not supported: a withdrawn row may be the one "
                "they picked (use min/max)"
            )
        schema_of(self)


def check_not_after_over(below: PlanNode, what: str) -> None:
    """:class:`PlanError` when ``below`` holds an over-aggregation's results where ``what`` does not
    take them yet (a join, a union, a watermark, or an operator after the one after it)."""
    if any(isinstance(x, OverAggregate) for x in walk(below)):
        raise PlanError(
            f"{what} after an over-aggregation (over_rows()/over_range()) is not supported yet: a "
            "window, an aggregation or a top-N per key, or another over-aggregation may follow it "
            "(filters and projections between), and filter, select and with_column after any of them"
        )


def over_below(below: PlanNode, what: str) -> OverAggregate | None:
    """The over-aggregation whose results ``below`` holds (under its filters and projections) when
    ``what`` takes them; :class:`PlanError` when one stands deeper (:func:`check_not_after_over`)."""
    under = stateless_below(below)
    if isinstance(under, OverAggregate):
        return under
    check_not_after_over(below, what)
    return None


def over_corrects(over: OverAggregate) -> bool:
    """Whether an over-aggregation may change a result after emitting it: a late row within its
    allowed lateness, or a retraction of its input, corrects the results of the rows after it."""
    return bool(over.emission.allowed_lateness_ms) or takes_retractions(over.input)


#: What an over-aggregation is to a window after it when it may correct its results.
OVER_CORRECTIONS = (
    "an over-aggregation that may correct its results (allowed lateness, or a changelog before it)"
)


def _check_per_key_input(below: PlanNode, keys: tuple[str, ...], what: str) -> None:
    """What an operator per key over every row takes today: a source's rows with event time, a
    join's, or (an aggregation) the changes of an aggregation, a top-N or a window; over a union
    of operators' results, what it takes over each of them."""
    if over_below(below, what) is not None:
        return  # each row's result at the row's event time; its corrections as retractions
    branches = union_branches(below)
    if branches is not None:
        for branch in branches:
            _check_per_key_input(branch, keys, what)
        return
    under = stateless_below(below)
    if isinstance(under, KeyedAggregate | KeyedTopN):
        return  # a changelog of updating rows: each retraction withdraws an earlier row
    # A window the operator takes runs retracting under it whatever its accumulation (its results
    # are not the job's); a union's windows are the union's results and keep theirs.
    for window in union_windows(below) or ():
        if window.emission.accumulation != "retracting" and not fires_once(window):
            raise PlanError(
                f"{what} after a union of windows that may fire a window again (allowed lateness, an "
                "early trigger, a join's allowed lateness before it) needs .accumulation('retracting') "
                "on each window: each firing then withdraws the one before, and the aggregation stays exact"
            )
    if union_windows(below) or isinstance(under, WindowAggregate):
        return
    if joins_of(below):
        check_window_after_join(below, keys, what=what)
    elif window_aggregates(below) or _keyed_aggregates(below):
        raise PlanError(
            f"{what} takes a source's or a join's rows, or the changes of an aggregation or a "
            "window, for now; the filters and projections between may not hide another operator"
        )
    if event_time(below) is None:
        raise PlanError(
            f"{what} needs event time: call .watermark(column, lag_ms) first, so that each result "
            "row has an event time and the watermark passes on"
        )


def union_windows(node: PlanNode) -> tuple[WindowAggregate, ...] | None:
    """The windows of a union of windows' results under ``node``'s filters and projections (or None)."""
    under = stateless_below(node)
    if isinstance(under, Union) and all(isinstance(i, WindowAggregate) for i in under.inputs):
        return tuple(i for i in under.inputs if isinstance(i, WindowAggregate))
    return None


def union_branches(below: PlanNode, *, of_windows: bool = False) -> tuple[PlanNode, ...] | None:
    """A union of operators' results under ``below``'s filters and projections (a union of joins'
    rows, of aggregations' changes), each branch as an operator over ``below`` sees it: ``below``
    with the union replaced by the branch. An operator over the union is valid when it is over
    each branch. None: no such union (a union of windows' results is checked as one,
    :func:`union_windows`, unless ``of_windows``; a union of streams is a stream)."""
    under = stateless_below(below)
    if not isinstance(under, Union) or (union_windows(below) is not None and not of_windows):
        return None
    if not all(isinstance(stateless_below(i), BRANCH_OPERATORS) for i in under.inputs):
        return None
    return tuple(_replaced(below, under, i) for i in under.inputs)


def _replaced(node: PlanNode, old: PlanNode, new: PlanNode) -> PlanNode:
    """``node`` with ``old`` (under its filters and projections) replaced by ``new``."""
    if node is old:
        return new
    assert isinstance(node, Filter | Project)
    return with_children(node, (_replaced(node.input, old, new),))


def takes_retractions(below: PlanNode) -> bool:
    """Whether the rows ``below`` hands on may withdraw earlier ones."""
    under = stateless_below(below)
    if isinstance(under, Union):  # a union carries each input's retractions
        return any(takes_retractions(i) for i in under.inputs)
    if isinstance(under, KeyedAggregate | KeyedTopN):
        return True
    if isinstance(under, Join | WindowAggregate):
        return under.emission.accumulation == "retracting" or (
            isinstance(under, WindowAggregate) and not fires_once(under)
        )
    if isinstance(under, OverAggregate):
        return under.retracting or over_corrects(under)
    return False


def fires_once(window: WindowAggregate) -> bool:
    """Whether every window of ``window`` fires once: no lateness (its own or a join's), no early trigger."""
    joined = stateless_below(window.input)
    carried = joined.emission.allowed_lateness_ms if isinstance(joined, Join) else 0
    if isinstance(joined, OverAggregate) and over_corrects(joined):
        return False  # a late row's corrections of the over-aggregation's results re-fire it
    if isinstance(joined, WindowAggregate) and not fires_once(joined):
        return False  # a window of a window's results re-fires with it
    if not all(fires_once(w) for w in union_windows(window.input) or ()):
        return False  # so does a window of a union of windows' results
    for branch in union_branches(window.input) or ():  # and one of a union of operators' results
        if not fires_once(attrs.evolve(window, input=branch)):
            return False
    e = window.emission
    return not (e.allowed_lateness_ms or carried or e.trigger.is_early)


def stateless_below(node: PlanNode) -> PlanNode:
    """The first node under ``node``'s filters and projections (``node`` itself when it is neither)."""
    while isinstance(node, Filter | Project):
        node = node.input
    return node


def _keyed_aggregates(node: PlanNode) -> list[KeyedAggregate | KeyedTopN]:
    return [x for x in walk(node) if isinstance(x, KeyedAggregate | KeyedTopN)]


@attrs.frozen(kw_only=True)
class KeyedTopN:
    """The ``n`` rows of each value of ``keys`` that rank first by ``by``, over every row so far.

    ``top_n(n, by=..., per="key", keys=...)`` (SPEC 3.13): a row that enters
    the top is emitted, a row pushed out of it retracted (a ``kind``
    column); ``n=1`` by the event time keeps the latest row per key.
    """

    input: PlanNode
    n: int
    by: tuple[str, ...]
    keys: tuple[str, ...] = ()
    ascending: bool = False
    ties: TopNTies = "all"
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise PlanError(f"top_n() needs n >= 1, got {self.n!r}")
        if self.ties not in ("all", "first"):
            raise PlanError(f"top_n(ties=...) is 'all' or 'first', got {self.ties!r}")
        if not self.by:
            raise PlanError("top_n() needs by=: the column(s) to rank the rows of a key by")
        _after_processing_time(self.input, "top_n(per='key')")
        _check_per_key_input(self.input, self.keys, "top_n(per='key')")
        schema = schema_of(self.input)
        for c in (*self.by, *self.keys):
            schema.field(c, role="top_n() column")
        if KIND_COLUMN in schema.names and not takes_retractions(self.input):
            raise PlanError(f"top_n(per='key') adds a {KIND_COLUMN!r} column, and the rows have one already")


#: An over-aggregation's frame: so many rows before the row, or so many milliseconds before it.
OverFrame: TypeAlias = Literal["rows", "range"]


@attrs.frozen(kw_only=True)
class OverAggregate:
    """``aggregates`` per row over its key's rows up to it: an over-aggregation (SPEC 3.16).

    ``keyed.over_rows(n)`` / ``keyed.over_range(range_ms)`` then ``.agg(...)``:
    one result per input row, its columns and each aggregate over its frame
    (``rows``: the row and the ``preceding`` rows before it in its key's
    event-time order, ties by arrival; ``range``: the rows up to
    ``preceding`` ms before its event time, its peers included), emitted
    once the watermark passes the row. Late rows within the allowed
    lateness correct the results after them; over a changelog, or with
    ``accumulation("retracting")``, results carry a ``kind`` column.
    """

    input: PlanNode
    keys: tuple[str, ...]
    frame: OverFrame
    #: ``rows``: how many rows before; ``range``: how many milliseconds before.
    preceding: int
    aggregates: tuple[AggCall, ...]
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        call = "over_rows()" if self.frame == "rows" else "over_range()"
        if self.frame not in ("rows", "range"):
            raise PlanError(f"an over-aggregation's frame is 'rows' or 'range', not {self.frame!r}")
        if isinstance(self.preceding, bool) or not isinstance(self.preceding, int) or self.preceding < 0:
            what = "rows" if self.frame == "rows" else "milliseconds"
            raise PlanError(
                f"{call} needs a whole number of {what} >= 0 before the row, got {self.preceding!r}"
            )
        if not self.keys:
            raise PlanError(f"{call} needs key_by(...) columns: each key's rows are ordered and framed apart")
        what = f"an over-aggregation ({call})"
        _after_processing_time(self.input, what)
        _check_per_key_input(self.input, self.keys, what)
        if not self.aggregates:
            raise PlanError(f"{call}.agg() needs at least one aggregate, e.g. kp.avg(kp.col('price'))")
        e = self.emission
        if e.trigger.is_early or e.state_ttl is not None or e.panes.any:
            raise PlanError(
                f"{what} takes allowed_lateness(), accumulation() and with_late_event_handler(); it "
                "has no early trigger, state TTL (its frame bounds its state) or pane callbacks"
            )
        if e.late_handler is not None and not isinstance(stateless_below(self.input), Watermark):
            raise PlanError(
                f"{what}: a late-event handler takes a source's rows; over another operator's results "
                "the rows' lateness is that operator's (give it the handler)"
            )
        for a in self.aggregates:
            if a.func in ("first", "last") and (self.frame == "range" or takes_retractions(self.input)):
                raise PlanError(
                    f"{a.func}() in {what}: "
                    + (
                        "a range frame's peers (equal event times) have no order to pick by"
                        if self.frame == "range"
                        else "a withdrawn row may be the one it picked (use min/max)"
                    )
                )
        schema_of(self)

    @property
    def retracting(self) -> bool:
        """Whether its results carry ``kind``: asked for, or over rows that may be withdrawn."""
        return self.emission.accumulation == "retracting" or takes_retractions(self.input)


#: Why ``.watermark()`` does not go after a join, and what does.
AFTER_JOIN = (
    "a joined stream carries its event time (the later of its two rows') and the watermark of both "
    "sides already, so .watermark() does not apply to it: window, aggregate, rank or join it as it "
    "is (joined.key_by(...).tumbling_window(...).agg(...), joined.key_by(...).agg(...), "
    "joined.top_n(n, by=..., per='key', keys=(...)), joined.key_by(...).interval_join(...)); to time "
    "its rows by another column, write them to a sink (ParquetSink, KafkaSink) and read them back "
    "as a new source with its own .watermark()"
)


def check_window_after_join(
    below: PlanNode, keys: tuple[str, ...], *, what: str = "a window", window: WindowSpec | None = None
) -> None:
    """What an operator after a join takes today: right after the join (filters and projections between).

    The operator (``what``: a window, an aggregation or a top-N per key)
    runs beside the join in the same operator call when it is keyed by the
    join's keys (:mod:`krishiv_py.stateful.chain`), and as a stage of its
    own keyed by other columns (:mod:`krishiv_py.stateful.stage`); after a
    join of a join's or a window's rows (a stage already), only keyed by the
    join's keys (the lowering says so otherwise). A
    retracting join's retractions are taken by a window (tumbling, sliding
    or session: :mod:`krishiv_py.stateful.window_changes`), an aggregation,
    a top-N per key and an interval or a window join.
    """
    branches = union_branches(below)
    if branches is not None:  # over a union of operators' results: over each of them
        for branch in branches:
            if joins_of(branch):
                check_window_after_join(branch, keys, what=what, window=window)
        return
    join = stateless_below(below)
    if isinstance(join, WindowAggregate | KeyedAggregate | KeyedTopN) and what == "a window":
        return  # over a window's results (a cascade) or changes per key: checked with the window
    if not isinstance(join, Join):
        raise PlanError(
            f"{what} takes a join's rows right after the join (filters and projections between), "
            "or a union of operators' results each branch of which is one operator (a join, a "
            "window, an aggregation or a top-N per key, filtered or projected or not); "
            f"{_what_below(join)}'s results over a join are neither: union the joins' rows "
            "themselves (a.union(b, c), not a union of unions)"
        )
    if join.emission.accumulation == "retracting":
        _check_over_retractions(what, window)
    if join.kind == "window" and join.emission.allowed_lateness_ms:
        raise PlanError(
            f"{what} after a window join with allowed lateness is not supported yet (a re-fired "
            "window join sends its window's rows again); drop allowed_lateness() on the window join"
        )


#: What a window over an aggregation's or a top-N's changes per key is over (in messages).
CHANGES = "an aggregation or a top-N per key without a window"


def _check_over_retractions(what: str, window: WindowSpec | None, *, over: str = "") -> None:
    """What takes a retracting join's rows (or ``over``'s changes): an aggregation or a top-N per
    key, a tumbling, sliding or session window."""
    if what.startswith("an aggregation") or what.startswith("top_n"):
        return
    if what == "a window":
        if window is None or not (
            isinstance(window, EventSlidingWindow | TimeIntervalWindow)
            or (isinstance(window, SessionWindow) and window.max_duration_ms is not None)
        ):
            return
        raise PlanError(
            f"a window over {over or RETRACTING_JOIN} may be tumbling, sliding or session "
            f"(without max_duration_ms); {type(window).__name__} there is not supported yet"
        )
    raise PlanError(
        f"{what} after a join takes the join's rows as emits only for now: a join in "
        "accumulation('retracting') (needed by an outer or as-of join with allowed lateness) "
        "withdraws rows, which it cannot take yet (a window or an aggregation per key can); use an "
        "inner interval join (allowed lateness is fine), or an outer one without allowed lateness"
    )


def _may_empty(node: PlanNode) -> bool:
    """Whether a window over ``node`` (a window's results) may lose every row it fired with: the
    windows below it may lose theirs (a retracting join, an aggregation or a top-N per key under
    them)."""
    under = stateless_below(node)
    if not isinstance(under, WindowAggregate):
        return False
    below = stateless_below(under.input)
    return (
        retracting_join_below(under.input)
        or isinstance(below, KeyedAggregate | KeyedTopN)
        or _may_empty(under.input)
    )


def retracting_join_below(node: PlanNode) -> bool:
    """Whether ``node``'s rows come (through filters and projections) from a join that retracts."""
    under = stateless_below(node)
    return isinstance(under, Join) and under.emission.accumulation == "retracting"


#: A retracting join (in messages).
RETRACTING_JOIN = "a join in accumulation('retracting')"


def check_window_over_retractions(node: WindowAggregate, *, over: str = RETRACTING_JOIN) -> None:
    """What a window over a retracting join's rows (or ``over``'s changes) supports now (clear
    errors for the rest)."""
    e = node.emission
    if e.accumulation != "retracting":
        raise PlanError(
            f"a window over {over} needs .accumulation('retracting') itself: a window may lose rows "
            "it fired with, even all of them, and only a retraction withdraws what it emitted"
        )
    if e.trigger.is_early or e.late_handler is not None or e.state_ttl:
        raise PlanError(
            f"a window over {over} fires on the watermark, with no early trigger, late-event "
            "handler or state TTL of its own (not supported there yet)"
        )
    if any(a.func in ("first", "last") for a in node.aggregates):
        raise PlanError(
            f"first()/last() over {over} is not supported: a withdrawn row may be the one they "
            "picked (use min/max)"
        )


#: Why a window over windowed results has no event time.
NO_RESULT_TIME = (
    "a window over windowed results needs their window_end column (their event time is "
    "window_end - 1 ms): keep window_end, unchanged, in every select() between the two windows, "
    "and put top_n() after the last window"
)

TopNTies: TypeAlias = Literal["all", "first"]


@attrs.frozen(kw_only=True)
class TopN:
    """The ``n`` rows of each window (and ``keys``) that rank first by ``by``: window top-N.

    ``input`` is a windowed result (it has ``window_start`` and
    ``window_end``). Rows rank by ``by`` (descending unless ``ascending``);
    ``ties="all"`` keeps every row tied with the ``n``-th (SQL ``RANK() <= n``),
    ``"first"`` exactly ``n``, ties broken by the remaining columns in order.
    """

    input: PlanNode
    n: int
    by: tuple[str, ...]
    ascending: bool = False
    keys: tuple[str, ...] = ()
    ties: TopNTies = "all"

    def __attrs_post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise PlanError(f"top_n() needs n >= 1, got {self.n!r}")
        if self.ties not in ("all", "first"):
            raise PlanError(f"top_n(ties=...) is 'all' or 'first', got {self.ties!r}")
        if not self.by:
            raise PlanError("top_n() needs by=: the column(s) to rank the rows of a window by")
        _after_processing_time(self.input, "top_n()")
        if joins_of(self.input) and not isinstance(stateless_below(self.input), WindowAggregate):
            raise PlanError(  # a window after a join is ranked as any window
                "top_n(per='window') ranks a window's results; rank a join's rows per key with "
                "top_n(n, by=..., per='key', keys=(...)), or window them first"
            )
        schema = schema_of(self.input)
        if not window_aggregates(self.input) or not {"window_start", "window_end"} <= set(schema.names):
            raise PlanError(
                "top_n() ranks the results of a window: call it after .agg(...), keeping "
                "window_start and window_end"
            )
        for c in (*self.by, *self.keys):
            schema.field(c, role="top_n() column")


@attrs.frozen(kw_only=True)
class Join:
    """An event-time join of two keyed, watermarked streams (SPEC 3.12).

    ``kind`` is ``"interval"`` (``between=(lower_ms, upper_ms)``: a left row
    at ``l`` meets right rows at ``l + lower <= r <= l + upper``),
    ``"window"`` (``window``: rows of the same tumbling or sliding window
    meet) or ``"as_of"`` (a left row meets the latest right row at or
    before it, no older than ``max_age_ms`` when given). ``emission`` holds
    the allowed lateness, accumulation, late-event handler and state TTL.
    """

    left: PlanNode
    right: PlanNode
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    kind: JoinKind
    how: JoinHow = "inner"
    between: tuple[int, int] | None = None
    window: WindowSpec | None = None
    max_age_ms: int | None = None
    emission: Emission = attrs.field(factory=Emission)

    def __attrs_post_init__(self) -> None:
        _check_join(self)

    @property
    def left_time(self) -> EventTime:
        et = event_time(self.left)
        assert et is not None
        return et

    @property
    def right_time(self) -> EventTime:
        et = event_time(self.right)
        assert et is not None
        return et

    @property
    def left_names(self) -> tuple[str, ...]:
        """The left side's non-key columns in the joined row (a changelog's ``kind`` is not one)."""
        return tuple(f.name for f in _join_left_fields(self, schema_of(self.left)))

    @property
    def right_names(self) -> dict[str, str]:
        """Each right non-key column's name in the joined row (``_right`` added when taken)."""
        taken = set(self.left_keys) | {f.name for f in _join_left_fields(self, schema_of(self.left))}
        if self.kind == "window":
            taken |= {"window_start", "window_end"}
        kept = [
            f.name
            for f in schema_of(self.right)
            if f.name not in self.right_keys and _carried(self.right, f.name)
        ]
        return joined_names(kept, taken)


@attrs.frozen(kw_only=True)
class LookupJoin:
    """Each row of ``input`` with the rows of a bounded ``table`` of equal ``on`` columns (SPEC 3.14).

    The table is a side input, not a child: it has no watermark and no part
    in the job's event time; the lowerings read it when the job starts and
    again for each micro-batch (its version in force then). A row keeps its
    event time. ``how="left"`` keeps a row without a match, the table's
    columns null; a null key matches nothing.
    """

    input: PlanNode
    table: PlanNode
    on: tuple[str, ...]
    how: Literal["inner", "left"] = "inner"

    def __attrs_post_init__(self) -> None:
        if self.how not in ("inner", "left"):
            raise PlanError(f"lookup_join(how=...) is 'inner' or 'left', got {self.how!r}")
        if not self.on:
            raise PlanError("lookup_join(on=...) needs the column(s) the stream's rows and the table share")
        if not is_bounded(self.table):
            raise PlanError(
                "lookup_join() takes a bounded table (files read without streaming=True, records, a "
                "Spark DataFrame); join two streams with interval_join(), join() or as_of_join()"
            )
        if any(type(x) not in (*SOURCE_TYPES, Filter, Project) for x in walk(self.table)):
            raise PlanError(
                "lookup_join()'s table is a source, filtered or projected or not (no watermark, window, "
                "join or aggregation): it is read whole, again for each micro-batch"
            )
        left, right = schema_of(self.input), schema_of(self.table)
        for key in self.on:
            lt = left.field(key, role="lookup_join() key").dtype
            rt = right.field(key, role="lookup_join() key of the table").dtype
            if lt != rt:
                raise PlanError(
                    f"lookup_join(): key {key!r} is {lt} in the stream and {rt} in the table; cast one "
                    "side with with_column() so both have the same type"
                )
        schema_of(self)

    @property
    def table_names(self) -> dict[str, str]:
        """Each table column's name in the joined row (not the keys; ``_right`` added when taken)."""
        kept = [f.name for f in schema_of(self.table) if f.name not in self.on]
        return joined_names(kept, set(schema_of(self.input).names))


SourceNode: TypeAlias = MemorySource | RecordsSource | FileSource | SparkSource | KafkaSource
PlanNode: TypeAlias = (
    SourceNode
    | Watermark
    | Filter
    | Project
    | Union
    | WindowAggregate
    | KeyedAggregate
    | KeyedTopN
    | OverAggregate
    | TopN
    | Join
    | LookupJoin
)
SOURCE_TYPES = (MemorySource, RecordsSource, FileSource, SparkSource, KafkaSource)
#: The operators whose results a union of changelogs carries (SPEC 3.13): each branch of a union
#: of operators' results is one of them (filtered or projected or not).
BRANCH_OPERATORS = (Join, WindowAggregate, KeyedAggregate, KeyedTopN)


@attrs.frozen
class EventTime:
    """The event-time column of a stream, as declared by its watermark(s)."""

    column: str
    dtype: DataType
    lag_ms: int
    future_tolerance_ms: int = DEFAULT_FUTURE_TOLERANCE_MS
    #: The stream is a window's results: a row's event time is ``window_end`` - 1 ms.
    from_window: bool = False
    #: The stream is a join's rows: a row's event time is the later of its two rows'.
    from_join: bool = False
    #: The stream is an aggregation's or a top-N's changes per key: a change's event time is the
    #: latest of the rows that made it (a retraction's, the one of the change it withdraws).
    from_change: bool = False


def with_children(node: PlanNode, new: tuple[PlanNode, ...]) -> PlanNode:
    """``node`` over ``new`` children (validated again); ``node`` itself when they are the same."""
    if new == children(node):
        return node
    if isinstance(node, Union):
        return attrs.evolve(node, inputs=new)
    if isinstance(node, Join):
        return attrs.evolve(node, left=new[0], right=new[1])
    assert not isinstance(node, SOURCE_TYPES)
    return attrs.evolve(node, input=new[0])


def children(node: PlanNode) -> tuple[PlanNode, ...]:
    if isinstance(node, Union):
        return node.inputs
    if isinstance(node, Join):
        return (node.left, node.right)
    if isinstance(node, SOURCE_TYPES):
        return ()
    return (node.input,)


def schema_of(node: PlanNode) -> Schema:
    """The output schema of ``node`` (the builder's check of a node it makes; the planner reads
    :func:`krishiv_py.plan.analysis.facts`, computed once per node)."""
    return schema_from(node, tuple(schema_of(c) for c in children(node)))


def schema_from(node: PlanNode, inputs: tuple[Schema, ...]) -> Schema:
    """The output schema of ``node`` over its children's schemas ``inputs`` (in :func:`children`'s order)."""
    if isinstance(node, SOURCE_TYPES):
        return node.schema
    if isinstance(node, Watermark | Filter | TopN | Union):
        return inputs[0]
    if isinstance(node, Project):
        return _project_schema(node, inputs[0])
    if isinstance(node, Join):
        return _join_schema(node, *inputs)
    if isinstance(node, LookupJoin):
        fields = list(inputs[0])
        table = schema_of(node.table)
        for old, new in node.table_names.items():
            f = table.field(old)
            fields.append(Field(new, f.dtype, f.nullable or node.how == "left"))
        return Schema(tuple(fields))
    if isinstance(node, KeyedAggregate):
        return _keyed_schema(node, inputs[0])
    if isinstance(node, KeyedTopN):  # over a changelog, its rows' kind is its own
        inp = inputs[0]
        return Schema(
            (*(f for f in inp if f.name != KIND_COLUMN), Field(KIND_COLUMN, DataType("string"), False))
        )
    if isinstance(node, OverAggregate):
        return _over_schema(node, inputs[0])
    return _window_schema(node, inputs[0])


def _over_schema(node: OverAggregate, inp: Schema) -> Schema:
    """The row's columns (a changelog's ``kind`` aside), its aggregates, ``kind`` when retracting."""
    for k in node.keys:
        inp.field(k, role="key column")
    fields = [f for f in inp if f.name != KIND_COLUMN]
    fields += [Field(_output_name(c.name, "agg()"), _agg_type(c, inp), True) for c in node.aggregates]
    if node.retracting:
        fields.append(Field(KIND_COLUMN, DataType("string"), False))
    return _unique(fields, "over-aggregation output", " (a row's columns and its aggregates)")


def _keyed_schema(node: KeyedAggregate, inp: Schema) -> Schema:
    fields = [inp.field(k, role="key column") for k in node.keys]
    fields += [Field(_output_name(c.name, "agg()"), _agg_type(c, inp), True) for c in node.aggregates]
    fields.append(Field(KIND_COLUMN, DataType("string"), False))
    return _unique(fields, "aggregate output")


def _unique(fields: list[Field], what: str, whose: str = "") -> Schema:
    """``fields`` as a schema, or a :class:`PlanError` naming the names it has twice."""
    names = [f.name for f in fields]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise PlanError(
            f"{what} has duplicate column names: {', '.join(dupes)}{whose}; use .alias() to rename"
        )
    return Schema(tuple(fields))


def _project_schema(node: Project, inp: Schema) -> Schema:
    fields = []
    for e in node.exprs:
        name = _output_name(output_name(e), "select()")
        dtype = dtype_of(e, inp)
        # Only a plain column (possibly renamed) keeps its input nullability.
        inner = e.operand if isinstance(e, Alias) else e
        nullable = inp.field(inner.name).nullable if isinstance(inner, Column) else True
        fields.append(Field(name, dtype if dtype.name != "void" else DataType("string"), nullable))
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"select() produces duplicate column names: {', '.join(dupes)}")
    return Schema(tuple(fields))


def _window_schema(node: WindowAggregate, inp: Schema) -> Schema:
    fields = [inp.field(k, role="key column") for k in node.keys]
    fields.append(Field("window_start", DataType("timestamp"), False))
    fields.append(Field("window_end", DataType("timestamp"), False))
    for call in node.aggregates:
        fields.append(Field(_output_name(call.name, "agg()"), _agg_type(call, inp), True))
    if node.emission.accumulation == "retracting":
        fields.append(Field(KIND_COLUMN, DataType("string"), False))
    return _unique(fields, "aggregate output")


def _agg_type(call: AggCall, schema: Schema) -> DataType:
    """An aggregate's result type, its ``filter=`` checked over its input's ``schema``."""
    check_filter(call, schema)
    return agg_type(call, schema)


def _output_name(name: str, where: str) -> str:
    if not name:
        raise PlanError(f"{where}: output column names must be non-empty")
    if name.startswith(HIDDEN_PREFIX):
        raise PlanError(
            f"{where}: column name {name!r} is reserved (names starting with {HIDDEN_PREFIX!r} are internal)"
        )
    return name


def event_time(node: PlanNode) -> EventTime | None:
    """The event time a window over ``node`` would use (None: no watermark)."""
    below = children(node)
    return event_time_from(node, lambda: schema_of(below[0]), tuple(event_time(c) for c in below))


def event_time_from(
    node: PlanNode, input_schema: Callable[[], Schema], inputs: tuple[EventTime | None, ...]
) -> EventTime | None:
    """The event time of ``node``'s rows given its children's ``inputs`` (in :func:`children`'s
    order); ``input_schema``: its first child's schema (a watermark's column's type)."""
    if isinstance(node, Watermark):
        dtype = input_schema().field(node.column).dtype
        return EventTime(node.column, dtype, node.lag_ms, node.future_tolerance_ms)
    if isinstance(node, WindowAggregate):
        if in_processing_time(node.window):
            return None  # its results are timed by the wall clock, not by an event time
        return EventTime("window_end", DataType("timestamp"), 0, from_window=True)
    if isinstance(node, Join):
        # The later of its two rows' event times: no column of its own; the operator carries it.
        return EventTime(JOIN_EVENT_TIME, DataType("timestamp"), 0, from_join=True)
    if isinstance(node, KeyedAggregate | KeyedTopN):
        # The row's that made the change: no column of its own; the operator carries it.
        if inputs[0] is None:
            return None
        return EventTime(CHANGE_EVENT_TIME, DataType("timestamp"), 0, from_change=True)
    if isinstance(node, (*SOURCE_TYPES, TopN)):
        return None
    et = inputs[0]
    if et is not None and et.from_window and isinstance(node, Project) and not _keeps_window_end(node):
        return None
    return et


def _keeps_window_end(node: Project) -> bool:
    return any(isinstance(e, Column) and e.name == "window_end" for e in node.exprs)


@attrs.frozen
class Cascade:
    """A window over windowed results: the upstream window and the stages between the two."""

    upstream: WindowAggregate
    #: Filters and projections between the two windows, top first.
    between: tuple[Filter | Project, ...]


def cascade_of(node: WindowAggregate) -> Cascade | None:
    """The upstream window of ``node`` when its input is a window's results (else None)."""
    between: list[Filter | Project] = []
    x = node.input
    while isinstance(x, Filter | Project):
        between.append(x)
        x = x.input
    if isinstance(x, WindowAggregate):
        return Cascade(upstream=x, between=tuple(between))
    return None


def cascade_lateness_ms(node: WindowAggregate) -> int:
    """How long ``node`` keeps its windows for corrections: at least as long as its upstream window.

    A cascade's upstream window can correct a result while its own allowed
    lateness lasts; the downstream window stays open for those corrections.
    A window after a join is corrected by a late partner's pairs for the
    join's allowed lateness more.
    """
    cascade = cascade_of(node)
    own = node.emission.allowed_lateness_ms
    joined = stateless_below(node.input)
    if isinstance(joined, Join):
        own += joined.emission.allowed_lateness_ms
    if cascade is None:
        return own
    return max(own, cascade_lateness_ms(cascade.upstream))


def _check_cascade(node: WindowAggregate) -> None:
    """What a window over windowed results supports now (clear errors for the rest)."""
    cascade = cascade_of(node)
    assert cascade is not None
    _check_over_results(node, cascade.upstream)


def _check_over_results(node: WindowAggregate, up: WindowAggregate) -> None:
    """What a window over the results of the window ``up`` supports now."""
    if isinstance(node.window, EventSlidingWindow | TimeIntervalWindow) or (
        isinstance(node.window, SessionWindow) and node.window.max_duration_ms is not None
    ):
        raise PlanError(
            "a window over windowed results may be tumbling, sliding or session (without "
            f"max_duration_ms); {type(node.window).__name__} there is not supported yet"
        )
    e = node.emission
    if e.trigger.is_early or e.accumulation == "discarding" or e.late_handler is not None or e.state_ttl:
        raise PlanError(
            "a window over windowed results fires on the watermark, accumulating or retracting, "
            "with no late-event handler or state TTL of its own (not supported there yet)"
        )
    unioned = union_windows(node.input) is not None
    if unioned and not fires_once(up) and up.emission.accumulation != "retracting":
        raise PlanError(
            "a window over the results of a window in a union that may fire a window again (allowed "
            "lateness, a join's or its own) needs .accumulation('retracting') on that window: each "
            "firing then withdraws the one before, and the window over it stays exact"
        )
    if up.emission.accumulation == "discarding" or up.emission.trigger.is_early:
        raise PlanError(
            "a window over windowed results needs each upstream result to be the window's whole "
            "value: early triggers and accumulation('discarding') upstream are not supported there yet"
        )
    if any(a.func in ("first", "last") for a in node.aggregates):
        raise PlanError(
            "first()/last() over windowed results is not supported: the results of one firing have "
            "no order among themselves (use min/max)"
        )


def is_bounded(node: PlanNode) -> bool:
    """True when every source of ``node`` is finite."""
    return all(
        isinstance(s, RecordsSource) or (isinstance(s, FileSource | SparkSource) and not s.streaming)
        for s in sources_of(node)
    )


def sources_of(node: PlanNode) -> list[SourceNode]:
    return [n for n in walk(node) if isinstance(n, SOURCE_TYPES)]


def watermarks_of(node: PlanNode) -> list[Watermark]:
    return [n for n in walk(node) if isinstance(n, Watermark)]


def _check_processing_time(node: WindowAggregate) -> None:
    """What a processing-time window takes (SPEC 3.14): a stream's rows and the default emission."""
    check_processing_time_input(node.input)
    emission = node.emission
    options = emission.stateful_features() + (["pane callbacks"] if emission.panes.any else [])
    if options:
        raise PlanError(
            "a processing-time window fires once, when the wall clock passes its end, and no row is "
            f"late: it takes none of {', '.join(options)}"
        )
    if not node.aggregates:
        raise PlanError("agg() needs at least one aggregate, e.g. kp.count(kp.col('*'))")
    schema_of(node)


def check_processing_time_input(below: PlanNode) -> None:
    """:class:`PlanError` unless ``below`` is a stream's rows (a processing-time window's input)."""
    _after_processing_time(below, "a window")
    if any(isinstance(x, WindowAggregate | KeyedAggregate | KeyedTopN | TopN | Join) for x in walk(below)):
        raise PlanError(
            "a processing-time window takes a stream's rows (filtered, projected or looked up), not "
            "a window's, a join's or an aggregation's results: window those in event time"
        )


def _after_processing_time(below: PlanNode, what: str) -> None:
    """:class:`PlanError` when ``below`` holds a processing-time window's results."""
    if any(isinstance(x, WindowAggregate) and in_processing_time(x.window) for x in walk(below)):
        raise PlanError(
            f"{what} after a processing-time window is not supported: its results are timed by the "
            "wall clock, with no event time or watermark to run an operator after it by; write them "
            "to a sink"
        )


def user_functions(plan: PlanNode) -> tuple[UserFunction, ...]:
    """The :func:`~krishiv_py.expr.udf` functions ``plan``'s expressions call (a lookup join's table
    included), each once: what a lowering registers with Spark before it runs the plan."""
    found: list[UserFunction] = []
    nodes = list(walk(plan))
    nodes += [t for x in nodes if isinstance(x, LookupJoin) for t in walk(x.table)]
    for node in nodes:
        for value in attrs.asdict(node, recurse=False).values():
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                expr = item.filter if isinstance(item, AggCall) else item
                if isinstance(expr, EXPR_TYPES):
                    found += [f for f in user_functions_of(expr) if f not in found]
    return tuple(found)


def walk(node: PlanNode) -> Iterator[PlanNode]:
    yield node
    for child in children(node):
        yield from walk(child)


def window_aggregates(node: PlanNode) -> list[WindowAggregate]:
    return [n for n in walk(node) if isinstance(n, WindowAggregate)]


def joins_of(node: PlanNode) -> list[Join]:
    return [n for n in walk(node) if isinstance(n, Join)]


def top_ns(node: PlanNode) -> list[TopN]:
    """The window top-Ns under ``node`` (itself included), top first."""
    return [n for n in walk(node) if isinstance(n, TopN)]


def _check_join(node: Join) -> None:
    """What SPEC 3.12 allows of a join, as :class:`PlanError` naming what is wrong: here its sides and
    keys, in :func:`~krishiv_py.plan.joins.check_join_options` its own options."""
    what = what_join(node)
    _after_processing_time(node.left, what)
    _after_processing_time(node.right, what)
    check_not_after_over(node.left, what)
    check_not_after_over(node.right, what)
    for side, plan, keys in (("left", node.left, node.left_keys), ("right", node.right, node.right_keys)):
        below = stateless_below(plan)
        branches = union_branches(plan, of_windows=True)
        if branches is not None:  # a join of a union of operators' results: of each of them
            for branch in branches:
                if side == "left":
                    attrs.evolve(node, left=branch)
                else:
                    attrs.evolve(node, right=branch)
        elif isinstance(below, WindowAggregate):
            _check_window_input(what, side, below)
            if event_time(plan) is None:
                raise PlanError(f"{what}: the {side} side is a window's results; {NO_RESULT_TIME}")
        elif isinstance(below, Join | KeyedAggregate | KeyedTopN):
            _check_operator_input(what, side, below)
        elif window_aggregates(plan) or _keyed_aggregates(plan) or joins_of(plan):
            raise PlanError(
                f"{what}: the {side} side is {_what_below(below)}'s results, which a join does not "
                f"take yet; {JOIN_INPUTS}"
            )
        if event_time(plan) is None:
            raise PlanError(
                f"{what}: the {side} side has no watermark; call .watermark(column, lag_ms) on it "
                "before key_by()"
            )
        if not keys:
            raise PlanError(f"{what}: the {side} side needs key columns: call key_by(...) on it first")
    if len(node.left_keys) != len(node.right_keys):
        raise PlanError(
            f"{what}: both sides need the same number of key columns, got "
            f"[{', '.join(node.left_keys)}] and [{', '.join(node.right_keys)}]"
        )
    ls, rs = schema_of(node.left), schema_of(node.right)
    for lk, rk in zip(node.left_keys, node.right_keys, strict=True):
        lt, rt = ls.field(lk).dtype, rs.field(rk).dtype
        if lt != rt:
            raise PlanError(
                f"{what}: key {lk!r} is {lt} on the left but {rk!r} is {rt} on the right; "
                "cast one side with with_column() so both have the same type"
            )
    check_join_options(node)
    schema_of(node)


#: What a join takes as a side today (SPEC 3.13), for the errors that name what it does not.
JOIN_INPUTS = (
    "a join's side is a stream, or the results of a join, a window, an aggregation or a top-N per "
    "key (filtered or projected or not)"
)


def _check_operator_input(what: str, side: str, below: Join | KeyedAggregate | KeyedTopN) -> None:
    """A join's, an aggregation's or a top-N's results per key as one side of a join: what each
    takes (checked where it was built), but not over a union of windows' results."""
    if not isinstance(below, Join) and union_windows(below.input):
        raise PlanError(
            f"{what}: the {side} side is {_what_below(below)} of a union of windows' results, which "
            f"a join does not take yet; {JOIN_INPUTS}"
        )


def _what_below(node: PlanNode) -> str:
    if isinstance(node, Join):
        return "a join"
    if isinstance(node, WindowAggregate):
        return "a window"
    if isinstance(node, KeyedAggregate):
        return "an aggregation per key"
    if isinstance(node, KeyedTopN | TopN):
        return "a top-N"
    if isinstance(node, OverAggregate):
        return "an over-aggregation"
    return "a union" if isinstance(node, Union) else f"a {type(node).__name__}"


def _check_window_input(what: str, side: str, plan: WindowAggregate) -> None:
    """A window's results as one side of a join: of a stream, each window fired once (emits only)."""
    if union_windows(plan.input):
        raise PlanError(
            f"{what}: the {side} side is a window over a union of windows' results; a join takes "
            "a window of a stream or of one operator's results for now"
        )
    e = plan.emission
    if not fires_once(plan) and e.accumulation != "retracting":
        raise PlanError(
            f"{what}: the {side} side is a window that fires more than once (an early trigger or "
            f"allowed lateness) in accumulation({e.accumulation!r}): it sends a window's value again "
            "without withdrawing the one before, which a join cannot tell apart from a new row; set "
            ".accumulation('retracting') on the window (the join then takes its corrections)"
        )
    if isinstance(plan.window, EventSlidingWindow | TimeIntervalWindow):
        raise PlanError(
            f"{what}: the {side} side is a {type(plan.window).__name__}'s results; a join takes a "
            "tumbling, sliding or session window's results"
        )
    handler = e.late_handler is not None and not counts_only(e.late_handler)
    if handler or e.state_ttl is not None or e.panes.any:
        raise PlanError(
            f"{what}: the {side} side is a window with a late-event handler, a state TTL or pane "
            "callbacks, which are not supported there yet (the window's late rows are counted in "
            "the job's metrics); drop them on the window"
        )


def check_joins_complete(plan: PlanNode) -> None:
    """The rule that only the whole chain of a join's options can satisfy (checked when it runs).

    An outer, semi, anti or as-of join with allowed lateness can withdraw
    results it emitted, so it needs ``accumulation("retracting")``; the two
    options may be set in either order, so this is checked when the plan is
    lowered, not when each is set.
    """
    for node in joins_of(plan):
        e = node.emission
        for side, below in (("left", node.left), ("right", node.right)):
            if takes_retractions(below) and e.accumulation != "retracting":
                raise PlanError(
                    f"{what_join(node)}: the {side} side withdraws rows it sent (a window that fires "
                    "more than once, a join in accumulation('retracting'), an aggregation or a top-N "
                    "per key), and a withdrawn row takes the joined rows it made with it: the join "
                    "needs .accumulation('retracting')"
                )
        corrects = node.how != "inner" or node.kind == "as_of"
        if e.allowed_lateness_ms and corrects and e.accumulation != "retracting":
            kind = "an as-of" if node.kind == "as_of" else f"a {node.how}"
            raise PlanError(
                f"{what_join(node)}: {kind} join with allowed_lateness({e.allowed_lateness_ms}) can "
                "withdraw results it emitted (a late row changes them), so it needs "
                ".accumulation('retracting')"
            )


def _join_left_fields(node: Join, ls: Schema) -> list[Field]:
    return [f for f in ls if f.name not in node.left_keys and _carried(node.left, f.name)]


def _carried(side: PlanNode, name: str) -> bool:
    """Whether column ``name`` of a join's input is a column of the joined rows (a changelog's kind is
    not: the join sends kinds of its own)."""
    return name != KIND_COLUMN or not takes_retractions(side)


def _join_schema(node: Join, ls: Schema, rs: Schema) -> Schema:
    outer_left = node.how in ("right", "full")  # left columns may be missing
    outer_right = node.how in ("left", "full")  # right columns may be missing
    fields = []
    for lk, rk in zip(node.left_keys, node.right_keys, strict=True):
        nullable = ls.field(lk).nullable or (outer_left and rs.field(rk).nullable)
        fields.append(Field(lk, ls.field(lk).dtype, nullable))
    if node.kind == "window":
        fields += [
            Field("window_start", DataType("timestamp"), False),
            Field("window_end", DataType("timestamp"), False),
        ]
    fields += [attrs.evolve(f, nullable=f.nullable or outer_left) for f in _join_left_fields(node, ls)]
    if node.how not in ("semi", "anti"):
        names = node.right_names
        fields += [Field(names[f.name], f.dtype, f.nullable or outer_right) for f in rs if f.name in names]
    if node.emission.accumulation == "retracting":
        fields.append(Field(KIND_COLUMN, DataType("string"), False))
    for f in fields:
        _output_name(f.name, what_join(node))
    return Schema(tuple(fields))


def render_plan(node: PlanNode, indent: int = 0) -> str:
    """A readable tree of the plan, for ``explain()``."""
    pad = "  " * indent
    lines = [pad + _describe(node)]
    lines += [render_plan(c, indent + 1) for c in children(node)]
    return "\n".join(lines)


def checkpoint_identity(node: PlanNode, *, whole: bool = False) -> str:
    """The plan as a checkpoint records it: everything that shapes its state.

    Filters and projections after the last stateful operator are left out
    (SPEC 3.15): they shape only what leaves the job, so a restart that
    changes them runs on (``whole``: the plan as checkpoints recorded it
    before, filters and projections included). Callbacks are left out —
    late-event handlers and pane callbacks run on the driver and keep
    nothing in the checkpoint — so a job that failed in
    one can be restarted with it fixed or replaced; so is a file source's
    ``bad_files``, so a job that failed on a bad file can be restarted with
    ``bad_files="quarantine"``.
    """

    def strip(x: PlanNode) -> PlanNode:
        x = with_children(x, tuple(strip(c) for c in children(x)))
        if isinstance(x, FileSource) and x.bad_files != "fail":  # a job may go on past bad files or not
            x = attrs.evolve(x, bad_files="fail")
        if isinstance(x, WindowAggregate) and (x.emission.late_handler is not None or x.emission.panes.any):
            emission = attrs.evolve(x.emission, late_handler=None, panes=type(x.emission.panes)())
            x = attrs.evolve(x, emission=emission)
        if isinstance(x, Join) and x.emission.late_handler is not None:
            x = attrs.evolve(x, emission=attrs.evolve(x.emission, late_handler=None))
        return x

    return render_plan(strip(node if whole else stateless_below(node)))


def _describe(node: PlanNode) -> str:
    detail: dict[type[Any], Any] = {
        MemorySource: lambda n: f"MemorySource {n.name!r} [{n.schema}]",
        RecordsSource: lambda n: f"RecordsSource {n.name!r} ({n.data.num_rows} rows) [{n.schema}]",
        FileSource: lambda n: (
            f"FileSource {n.name!r} {n.format} {n.path!r}{' (streaming)' if n.streaming else ''}"
            f"{' bad_files=quarantine' if n.bad_files == 'quarantine' else ''} [{n.schema}]"
        ),
        SparkSource: lambda n: f"SparkSource {n.name!r}{' (streaming)' if n.streaming else ''} [{n.schema}]",
        KafkaSource: _kafka_text,
        Watermark: lambda n: (
            f"Watermark column={n.column} "
            + (f"lag_ms={n.lag_ms}" if n.auto is None else f"lag={n.auto!r}")
            + (
                f" future_tolerance_ms={n.future_tolerance_ms}"
                if n.future_tolerance_ms != DEFAULT_FUTURE_TOLERANCE_MS
                else ""
            )
            + (f" idle_timeout_ms={n.idle_timeout_ms}" if n.idle_timeout_ms is not None else "")
        ),
        Filter: lambda n: f"Filter {render(n.predicate)}",
        Project: lambda n: f"Project {', '.join(render(e) for e in n.exprs)}",
        Union: lambda n: f"Union ({len(n.inputs)} inputs)",
        TopN: lambda n: (
            f"TopN n={n.n} by=[{', '.join(n.by)}] {'ascending' if n.ascending else 'descending'} "
            f"per=[window_start, window_end{''.join(', ' + k for k in n.keys)}] ties={n.ties}"
        ),
        Join: join_text,
        LookupJoin: lambda n: (
            f"LookupJoin how={n.how} on=[{', '.join(n.on)}] "
            f"table={', '.join(repr(t.name) for t in sources_of(n.table))} [{schema_of(n.table)}]"
        ),
        KeyedTopN: lambda n: (
            f"KeyedTopN n={n.n} by=[{', '.join(n.by)}] {'ascending' if n.ascending else 'descending'} "
            f"per=[{', '.join(n.keys)}] ties={n.ties}"
        ),
        KeyedAggregate: lambda n: (
            f"KeyedAggregate keys=[{', '.join(n.keys)}] "
            f"aggs=[{', '.join(_agg_text(a) for a in n.aggregates)}]"
        ),
        OverAggregate: lambda n: (
            f"OverAggregate keys=[{', '.join(n.keys)}] {n.frame}={n.preceding} preceding "
            f"aggs=[{', '.join(_agg_text(a) for a in n.aggregates)}]"
            + ("" if n.emission.is_default else f" emission=[{n.emission.describe()}]")
        ),
        WindowAggregate: lambda n: (
            f"WindowAggregate keys=[{', '.join(n.keys)}] window={window_text(n.window)} "
            f"aggs=[{', '.join(_agg_text(a) for a in n.aggregates)}]"
            + ("" if n.emission.is_default else f" emission=[{n.emission.describe()}]")
            + _cascade_text(n)
        ),
    }
    kind = next(t for t in type(node).__mro__ if t in detail)  # a source of one's own: its base's line
    text: str = detail[kind](node)
    return text


def _cascade_text(node: WindowAggregate) -> str:
    if cascade_of(node) is None:
        return ""
    text = " over window results (event time window_end - 1 ms, the upstream watermark"
    lateness = cascade_lateness_ms(node)
    if lateness != node.emission.allowed_lateness_ms:
        text += f"; kept {lateness} ms for upstream corrections"
    return text + ")"


def _kafka_text(node: KafkaSource) -> str:
    parts = f" partitions={list(node.only_partitions)}" if node.only_partitions is not None else ""
    if node.per_partition and node.only_partitions is None:
        parts = f" watermark per partition ({node.partitions} partitions)"
    return (
        f"KafkaSource {node.name!r} topic={node.topic!r} at {node.bootstrap_servers} "
        f"connector={node.connector} value={node.value_format}{parts} [{node.schema}]"
    )


def _agg_text(call: AggCall) -> str:
    where = f" FILTER (WHERE {render(call.filter)})" if call.filter is not None else ""
    return f"{call.func}({call.column or '*'}){where} AS {call.name}"
