"""``Stream``: the immutable, fluent pipeline builder.

Every method returns a new object holding a new logical plan; nothing runs
until :meth:`Stream.collect`, :meth:`Stream.start`, :meth:`Stream.explain`
or :meth:`Stream.to_spark`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import attrs

from krishiv_py.api.joined import JoinOptions
from krishiv_py.api.keyed import KeyedStream
from krishiv_py.api.windowed import WindowAssigners, WindowedStream
from krishiv_py.errors import KrishivError, PlanError, SessionError, attribute_error
from krishiv_py.expr import AggExpr, Alias, Column, Expr, col, output_name
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.watermarks import AutoLag, MultiSourceWatermarkSpec, WatermarkSpec
from krishiv_py.plan.windows import WindowSpec, check_ms
from krishiv_py.runtime.engine import Engine, StartOptions
from krishiv_py.sinks import MemorySink, Sink
from krishiv_py.types import Schema, to_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from krishiv_py._typing import Lowering
    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.engine import Durability, Job

__all__ = ["JoinedStream", "Stream", "placeholder"]


class Stream(WindowAssigners):
    """A stream of rows with a schema; build pipelines by chaining methods.

    Examples
    --------
        per_minute = (
            stream.watermark("event_time", 5_000)
            .key_by("user_id")
            .tumbling_window(60_000)
            .agg(kp.count(kp.col("*")), kp.sum(kp.col("amount")))
        )
    """

    __slots__ = ("_engine", "_plan", "_sql")

    def __init__(self, engine: Engine | None, plan: n.PlanNode, *, sql: str | None = None) -> None:
        #: What runs this stream (its sources' :class:`~krishiv_py.Session`); None: a plan only.
        self._engine = engine
        self._plan = plan
        #: The SQL this stream was made from (``session.sql``), shown by :meth:`explain`.
        self._sql = sql

    # --- facts -------------------------------------------------------------------

    @property
    def plan(self) -> n.PlanNode:
        """The logical plan (immutable)."""
        return self._plan

    @property
    def session(self) -> Engine | None:
        """The engine this stream runs on: the :class:`~krishiv_py.Session` of its sources."""
        return self._engine

    def _running_engine(self) -> Engine:
        if self._engine is None:
            raise SessionError(
                "this stream is a plan without an engine, so it cannot run; build it from a "
                "Session's source (session.memory_stream, read_parquet, from_records, ...)"
            )
        return self._engine

    @property
    def schema(self) -> Schema:
        return facts(self._plan).schema

    @property
    def columns(self) -> tuple[str, ...]:
        return self.schema.names

    @property
    def is_bounded(self) -> bool:
        """True when every source is finite (the bounded lowering applies)."""
        return n.is_bounded(self._plan)

    def _with(self, plan: n.PlanNode) -> Stream:
        """A stream of ``plan`` on this stream's engine (how the builders below make their results)."""
        return Stream(self._engine, plan)

    def _joined(
        self, keys: tuple[str, ...], right: Stream, right_keys: tuple[str, ...], what: str, **join: Any
    ) -> JoinedStream:
        """This stream joined with ``right`` on their keys (``join``: the node's other fields), one engine."""
        if self._engine is not None and right.session is not None and self._engine is not right.session:
            raise PlanError(f"{what}: both sides must come from the same Session")
        node = n.Join(left=self._plan, right=right.plan, left_keys=keys, right_keys=right_keys, **join)
        return JoinedStream(self._engine if self._engine is not None else right.session, node)

    def register(self, name: str) -> Stream:
        """Make this stream readable by ``session.sql`` as ``name``; returns this stream.

        Sources register under their own name when they are made; this
        names any stream, e.g. one with a watermark or a filter already.
        A name registered again now means this stream.

        Examples
        --------
            stream.filter(kp.col("amount") > 0).register("paid")
            session.sql("SELECT * FROM paid WHERE amount > 100")
        """
        self._running_engine().register_stream(name, self._plan)
        return self

    def _lowering_text(self) -> str:
        try:
            recipe = self.lower()
        except KrishivError as exc:
            return f"none ({exc})"
        return recipe.lowering

    if not TYPE_CHECKING:  # at run time only: a type checker still flags these calls

        def __getattr__(self, name: str) -> Any:
            raise attribute_error(self, name, _STREAM_HINTS)

    def __repr__(self) -> str:
        kind = "bounded" if self.is_bounded else "unbounded"
        plan = "\n".join("  " + line for line in n.render_plan(self._plan).splitlines())
        return f"Stream ({kind}, lowering: {self._lowering_text()})\n{plan}\n  -> {self.schema!r}"

    def _repr_html_(self) -> str:
        from krishiv_py._display import html_card

        rows = [
            ("input", "bounded" if self.is_bounded else "unbounded"),
            ("lowering", self._lowering_text()),
            ("columns", ", ".join(f"{f.name} {f.dtype.name}" for f in self.schema)),
        ]
        return html_card("Stream", rows, pre=n.render_plan(self._plan))

    # --- event time -----------------------------------------------------------

    def watermark(
        self,
        column: str,
        lag_ms: Duration | Literal["auto"] | AutoLag,
        *,
        future_tolerance_ms: Duration = DEFAULT_FUTURE_TOLERANCE_MS,
        idle_timeout_ms: Duration | None = None,
        quantile: float | None = None,
        window_rows: int | None = None,
        warmup_rows: int | None = None,
        min_lag_ms: Duration | None = None,
        max_lag_ms: Duration | None = None,
    ) -> Stream:
        """Declare ``column`` as event time, with ``lag_ms`` bounded out-of-orderness.

        The watermark is ``max(event time seen) - lag_ms``; it never goes back.
        ``column`` may be a timestamp or a bigint of epoch milliseconds.
        Events more than ``future_tolerance_ms`` ahead of the watermark are
        processed, counted as future events and warned about (likely clock skew).
        ``idle_timeout_ms``: after that much processing time without input,
        this source is left out of the overall watermark of a union (see
        :meth:`idle_timeout_ms`).

        ``lag_ms="auto"`` chooses the lag from the data as it arrives (SPEC
        3.4): the keywords ``quantile``, ``window_rows``, ``warmup_rows``,
        ``min_lag_ms`` and ``max_lag_ms`` are :class:`~krishiv_py.AutoLag`'s
        (or pass an ``AutoLag``). The lag each micro-batch runs with is
        recorded in the checkpoint, and krishiv's operator computes the
        watermark (the stateful lowering). docs/watermarks.md, "An automatic lag".
        """
        tolerance: int = as_ms("future_tolerance_ms", future_tolerance_ms)
        idle: int | None = as_ms("idle_timeout_ms", idle_timeout_ms)
        given = {
            "quantile": quantile,
            "window_rows": window_rows,
            "warmup_rows": warmup_rows,
            "min_lag_ms": as_ms("min_lag_ms", min_lag_ms),
            "max_lag_ms": as_ms("max_lag_ms", max_lag_ms),
        }
        lag = _watermark_lag(lag_ms, {k: v for k, v in given.items() if v is not None})
        if isinstance(lag, AutoLag):
            check_ms("future_tolerance_ms", tolerance, positive=False)
            out = self._with(
                n.Watermark(
                    input=self._plan,
                    column=column,
                    lag_ms=lag.max_lag_ms,
                    future_tolerance_ms=tolerance,
                    auto=lag,
                )
            )
        else:
            out = self.with_watermark(WatermarkSpec.fixed_lag_ms(column, lag, future_tolerance_ms=tolerance))
        return out if idle is None else out.idle_timeout_ms(idle)

    def with_watermark(self, spec: WatermarkSpec | MultiSourceWatermarkSpec) -> Stream:
        """Declare event time with a :class:`WatermarkSpec`, or one per stream of a union.

        A :class:`MultiSourceWatermarkSpec` names every stream of this
        (union) stream — memory streams, file sources, records — by its
        ``name`` and gives each its own watermark, directly on that source;
        the job's watermark is the minimum over them (without idle sources
        when the spec has an idle timeout).
        """
        if n.joins_of(self._plan):
            raise PlanError(n.AFTER_JOIN)
        if isinstance(spec, MultiSourceWatermarkSpec):
            return self._with(_per_source_watermarks(self._plan, spec))
        if not isinstance(spec, WatermarkSpec):
            raise PlanError(
                "with_watermark() takes a WatermarkSpec or MultiSourceWatermarkSpec, "
                f"got {type(spec).__name__}"
            )
        return self._with(
            n.Watermark(
                input=self._plan,
                column=spec.column,
                lag_ms=spec.lag_ms,
                future_tolerance_ms=spec.future_tolerance_ms,
            )
        )

    def idle_timeout_ms(self, timeout_ms: Duration) -> Stream:
        """Let every watermarked source of this stream go idle after ``timeout_ms`` without input.

        An idle source is left out of the overall watermark (the minimum
        over the sources), so windows fire on the others; when it sends
        again it rejoins without pulling the overall watermark back, and its
        rows behind it are late by the usual rules. Processing time, checked
        between micro-batches. Use after the watermarks, e.g.
        ``a.watermark("t", 0).union(b.watermark("t", 0)).idle_timeout_ms(30_000)``.
        """
        timeout: int = check_ms("idle_timeout_ms", as_ms("idle_timeout_ms", timeout_ms))
        if not n.watermarks_of(self._plan):
            raise PlanError(
                "idle_timeout_ms() needs a watermark: call .watermark(column, lag_ms) on the sources first"
            )

        def apply(node: n.PlanNode) -> n.PlanNode:
            new = n.with_children(node, tuple(apply(c) for c in n.children(node)))
            if isinstance(new, n.Watermark):
                return attrs.evolve(new, idle_timeout_ms=timeout)
            return new

        return self._with(apply(self._plan))

    # --- stateless --------------------------------------------------------------

    def filter(self, condition: Expr) -> Stream:
        """Keep the rows where ``condition`` is true (null counts as false)."""
        return self._with(n.Filter(input=self._plan, predicate=_expr(condition, "filter")))

    def select(self, *columns: str | Expr) -> Stream:
        """Project to the given columns or named expressions (``expr.alias(name)``).

        On a changelog (the results of ``accumulation("retracting")``, an
        aggregation's or a top-N's changes per key) the ``kind`` column
        stays, last, when not selected: it says whether a row is an emit or
        a retraction, like the row kind of a Flink changelog.
        """
        exprs = tuple(_expr(col(c) if isinstance(c, str) else c, "select") for c in columns)
        if _retracting(self._plan) and n.KIND_COLUMN not in [output_name(e) for e in exprs]:
            exprs += (Column(n.KIND_COLUMN),)
        return self._with(n.Project(input=self._plan, exprs=exprs))

    def with_column(self, name: str, expr: Expr) -> Stream:
        """Add column ``name`` (or replace it, keeping its position)."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"with_column() takes a non-empty column name first, got {name!r}")
        new = Alias(_expr(expr, "with_column"), name)
        exprs: list[Any] = [new if c == name else Column(c) for c in self.columns]
        if name not in self.columns:
            exprs.append(new)
        return self._with(n.Project(input=self._plan, exprs=tuple(exprs)))

    def top_n(
        self,
        n: int,
        by: str | Sequence[str],
        *,
        per: Literal["window", "key"] = "window",
        keys: Sequence[str] = (),
        ties: Literal["all", "first"] = "all",
        ascending: bool = False,
    ) -> Stream:
        """Window top-N: the ``n`` result rows of each window that rank first by ``by``; or per key.

        ``per="key"``: the ``n`` rows of each value of ``keys`` over every row
        so far (SPEC 3.13), updating: a row that enters the top is emitted,
        a row pushed out retracted (a ``kind`` column);
        ``top_n(1, by="event_time", per="key", keys=("id",))`` keeps the
        latest row per id (deduplication).

        Call it on the results of a window (after ``.agg(...)``). Rows of one
        window (``window_start``, ``window_end``, and ``keys`` when given)
        rank by ``by``, largest first unless ``ascending``; a null ranks
        last. ``ties="all"`` keeps every row tied with the ``n``-th (SQL
        ``RANK() <= n``, so there may be more than ``n``); ``"first"`` keeps
        exactly ``n``, the other columns breaking ties in order. Runs on every
        lowering; on the stateful lowering (a window that may fire again, or
        fire its keys in different micro-batches) it needs
        ``accumulation("retracting")``, and a correction that pushes a row out
        of the top retracts it.

        Examples
        --------
            hottest = (
                bids.watermark("date_time", 0)
                .key_by("auction")
                .sliding_window(10_000, 2_000)
                .agg(kp.count(kp.col("*")).alias("bids"))
                .top_n(1, by="bids")
            )
        """
        if per not in ("window", "key"):
            raise PlanError(f"top_n(per=...) ranks per 'window' or per 'key', got {per!r}")
        from krishiv_py.plan.nodes import KeyedTopN, TopN  # (``n`` is the count here)

        columns = _names("top_n(by=...)", by)
        ranked_keys = () if isinstance(keys, (tuple, list)) and not keys else _names("top_n(keys=...)", keys)
        if per == "key":
            keyed = KeyedTopN(
                input=self._plan, n=n, by=columns, keys=ranked_keys, ascending=bool(ascending), ties=ties
            )
            return self._with(keyed)
        return self._with(
            TopN(input=self._plan, n=n, by=columns, ascending=bool(ascending), keys=ranked_keys, ties=ties)
        )

    def union(self, *others: Stream) -> Stream:
        """Rows of this stream and ``others`` (identical schemas; each keeps its watermark)."""
        if not others:
            raise PlanError("union() needs at least one other stream")
        for o in others:
            if not isinstance(o, Stream):
                raise PlanError(f"union() takes streams, got {type(o).__name__}")
            if o.session is not self._engine:
                raise PlanError("union() needs streams of the same session")
        return self._with(n.Union(inputs=(self._plan, *(o.plan for o in others))))

    def lookup_join(self, table: Stream, on: str | Sequence[str], how: str = "inner") -> Stream:
        """Each row with the rows of the bounded ``table`` of equal ``on`` columns (SPEC 3.14).

        ``table`` is a bounded stream (files read without ``streaming=True``,
        records, a Spark DataFrame), filtered or projected or not. It is read
        when the job starts and again for each micro-batch, so a micro-batch
        meets the version in force when it runs: a file changed in place, and
        for Parquet a file added, counts from the next micro-batch on.
        ``how="left"`` keeps a row without a match (the table's columns
        null); a null key matches nothing. The row keeps its event time, so a
        window may follow. See docs/joins.md, "A lookup join".
        """
        if not isinstance(table, Stream):
            raise PlanError(f"lookup_join() takes a bounded stream as its table, got {type(table).__name__}")
        if table.session is not self._engine:
            raise PlanError("lookup_join() needs a table of the same session")
        keys = (on,) if isinstance(on, str) else tuple(on)
        return self._with(n.LookupJoin(input=self._plan, table=table.plan, on=keys, how=cast(Any, how)))

    # --- keys and windows ----------------------------------------------------------

    def key_by(self, *columns: str) -> KeyedStream:
        """Partition by key columns; a window then aggregates per key."""
        return KeyedStream(self, tuple(columns))

    def _windowed(self, window: WindowSpec) -> WindowedStream:
        return WindowedStream(self, (), window)

    # --- running ---------------------------------------------------------------------

    def lower(self, *, force_bounded: bool = False, lowering: Lowering | None = None) -> SparkRecipe:
        """The Spark recipe this stream lowers to (no JVM needed).

        ``lowering`` forces ``"native"``, ``"stateful"`` or ``"bounded"`` instead
        of the planner's choice (:class:`PlanError` if it cannot run the plan exactly).
        """
        from krishiv_py.planner.spark import lower

        return lower(self._plan, force_bounded=force_bounded, lowering=lowering)

    def collect(self) -> pa.Table:
        """Run to completion on the input available now and return the rows.

        Bounded input runs as one Spark batch job. For a memory stream this
        is the batches sent so far, as if the source were closed after them.
        """
        engine = self._running_engine()
        recipe = self.lower(force_bounded=True)
        return engine.run_bounded(self._plan, recipe, MemorySink(), metrics=False).results()

    def collect_with_aggs(self, aggs: list[AggExpr] | tuple[AggExpr, ...]) -> pa.Table:
        """Re-run this windowed aggregation with other aggregates and collect it."""
        if not isinstance(self._plan, n.WindowAggregate):
            raise PlanError("collect_with_aggs() needs a stream produced by .agg(...)")
        p = self._plan
        windowed = WindowedStream(self._with(p.input), p.keys, p.window, p.emission)
        return windowed.collect_with_aggs(aggs)

    def start(
        self,
        sink: Sink | None = None,
        *,
        checkpoint_dir: str | None = None,
        name: str | None = None,
        durability: Durability | None = None,
        lowering: Lowering | None = None,
        quarantine_dir: str | None = None,
    ) -> Job:
        """Start the pipeline; returns a :class:`~krishiv_py.Job`.

        Unbounded input starts a Spark streaming query (the native or the
        stateful lowering, see :meth:`explain`); bounded input runs a batch
        job and returns it finished.

        Parameters
        ----------
        sink
            Where results go; default :class:`~krishiv_py.MemorySink`.
        checkpoint_dir
            Spark checkpoint location (default: a fresh directory in the
            session's state directory). Restarting with the same directory
            resumes from the last committed batch.
        name
            Name the job: its checkpoint is ``<state_dir>/checkpoints/<name>``,
            so starting the same pipeline under the same name (in a later
            process with the same ``state_dir``) resumes it.
        durability
            This job's durability profile (default: the session's), see
            :mod:`krishiv_py.runtime.durability`.
        lowering
            Force a lowering (``"native"``, ``"stateful"``, ``"bounded"``)
            instead of the planner's choice; :class:`PlanError` if it cannot
            run this plan exactly. For tests and benchmarks.
        quarantine_dir
            A local directory (one per job) where the rows of a user-code
            call that raises (a :class:`~krishiv_py.ForeachBatchSink`
            function, :class:`~krishiv_py.ConsoleSink`, a late-event handler
            or pane callback) are set aside as Parquet with the error,
            instead of failing the job; counted in
            ``JobMetrics.quarantined_batches``/``quarantined_rows``. Start a
            job that fails on one batch every time again under its name with
            this to get past that batch (docs/durability.md). Streaming jobs
            only: a bounded run has no checkpoint to go on from, so it is a
            :class:`PlanError` there.

        Examples
        --------
        >>> job = stream.start(kp.ForeachBatchSink(deliver), name="per-minute",  # doctest: +SKIP
        ...                    quarantine_dir="/var/lib/clicks/quarantine")
        """
        engine = self._running_engine()
        options = StartOptions(
            sink=sink if sink is not None else MemorySink(),
            checkpoint_dir=checkpoint_dir,
            name=name,
            durability=durability,
            quarantine_dir=quarantine_dir,
        )
        return engine.start_job(self._plan, self.lower(lowering=lowering), options)

    def to_spark(self, *, lowering: Lowering | None = None) -> DataFrame:
        """The pyspark DataFrame this stream lowers to (streaming when unbounded).

        Under the stateful lowering, the rows are the operator's encoded
        per-bucket output (``__kp_bucket``, ``__kp_payload``), which the job
        decodes on the driver.
        """
        engine = self._running_engine()
        return engine.spark_dataframe(self.lower(lowering=lowering))

    def explain(self, *, lowering: Lowering | None = None, show: bool = False) -> Explanation:
        """The logical plan, the chosen lowering and why, the durability, the recipe and Spark's plan.

        A stream made by ``session.sql`` shows its SQL first (with the ``SET``
        statements it took).

        Returns the text without printing it, like Polars'
        ``LazyFrame.explain()``: ``print(stream.explain())`` in a script; in
        a notebook or the REPL the returned :class:`Explanation` (a ``str``)
        displays as the text itself. ``show=True`` prints it as well.
        """
        engine = self._running_engine()
        recipe = self.lower(lowering=lowering)
        sql = ["== SQL ==", self._sql, ""] if self._sql is not None else []
        text = Explanation(
            "\n".join(
                [
                    *sql,
                    "== Logical plan ==",
                    n.render_plan(self._plan),
                    "",
                    f"== Lowering: {recipe.lowering} ==",
                    recipe.reason,
                    "",
                    "== Durability ==",
                    engine.durability_text(bounded=recipe.lowering == "bounded" or self.is_bounded),
                    "",
                    "== Spark recipe ==",
                    recipe.render(),
                    "",
                    "== Spark plan ==",
                    engine.explain_spark(recipe),
                ]
            )
        )
        if show:
            print(text)
        return text


class JoinedStream(JoinOptions, Stream):
    """The rows of an event-time join (SPEC 3.12): a :class:`Stream` that also takes the join's options.

    Made by ``KeyedStream.interval_join``, ``KeyedStream.as_of_join`` and
    ``WindowedStream.join``. Like a window, a join takes
    :meth:`allowed_lateness`, :meth:`accumulation`,
    :meth:`with_late_event_handler` and :meth:`with_state_ttl`; each returns
    a new ``JoinedStream``. Filters, projections and every sink apply to it
    as to any stream (see docs/joins.md), and so do windows, aggregations,
    top-Ns and other joins after it (SPEC 3.13); a ``.watermark()`` after a
    join is a :class:`PlanError` (the joined rows carry their event time:
    the later of the two rows').

    Examples
    --------
        matched = (
            clicks.watermark("ts", 5_000).key_by("ad")
            .interval_join(views.watermark("ts", 5_000).key_by("ad"), between=(-600_000, 0), how="left")
            .allowed_lateness(60_000)
            .accumulation("retracting")
        )
    """

    __slots__ = ()

    def _emit(self, **changes: Any) -> JoinedStream:
        node = self._plan
        assert isinstance(node, n.Join)
        return JoinedStream(self._engine, attrs.evolve(node, emission=attrs.evolve(node.emission, **changes)))


class Explanation(str):
    """The text of :meth:`Stream.explain`: a ``str`` that displays as itself in a notebook or the REPL."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _retracting(plan: n.PlanNode) -> bool:
    """Whether ``plan``'s rows are a changelog of emits and retractions (a ``kind`` column): a
    retracting window's or join's results, an aggregation's or a top-N's changes per key."""
    return n.KIND_COLUMN in facts(plan).schema.names and (
        facts(plan).corrects
        or any(a.emission.accumulation == "retracting" for a in n.window_aggregates(plan))
    )


def _watermark_lag(lag_ms: Duration | Literal["auto"] | AutoLag, auto: dict[str, Any]) -> int | AutoLag:
    """:meth:`Stream.watermark`'s lag, checked: milliseconds, or the :class:`AutoLag` it names
    (``auto``: the automatic lag's settings it was given)."""
    if isinstance(lag_ms, AutoLag) or lag_ms == "auto":
        if isinstance(lag_ms, AutoLag) and auto:
            raise PlanError(f"watermark() takes an AutoLag or its settings, not both: {sorted(auto)}")
        return lag_ms if isinstance(lag_ms, AutoLag) else AutoLag(**auto)
    if auto:
        raise PlanError(
            f"watermark() takes {', '.join(sorted(auto))} only with lag_ms='auto' (an automatic "
            f"lag), got lag_ms={lag_ms!r}"
        )
    if isinstance(lag_ms, str) and not re.search(r"[0-9]", lag_ms):
        raise PlanError(
            "watermark() lag_ms is a duration (milliseconds, a timedelta, or a string such as "
            f"'5 seconds') or 'auto', got {lag_ms!r}"
        )
    lag: int = as_ms("watermark() lag_ms", lag_ms)
    return lag


def _per_source_watermarks(plan: n.PlanNode, spec: MultiSourceWatermarkSpec) -> n.PlanNode:
    """``plan`` with a watermark directly on each source that ``spec`` names."""
    if not spec.names:
        raise PlanError("this MultiSourceWatermarkSpec names no source; add them with .source(name, spec)")
    if n.watermarks_of(plan):
        raise PlanError("this stream already has a watermark; declare it once, on the source side")
    in_plan = [s.name for s in n.sources_of(plan)]
    unknown = [name for name in spec.names if name not in in_plan]
    if unknown:
        raise PlanError(
            f"MultiSourceWatermarkSpec names {', '.join(map(repr, unknown))}, which "
            f"{'is' if len(unknown) == 1 else 'are'} not in this stream; its streams are: "
            f"{', '.join(map(repr, dict.fromkeys(in_plan)))}"
        )
    missing = [name for name in dict.fromkeys(in_plan) if name not in spec.names]
    if missing:
        raise PlanError(
            f"stream {missing[0]!r} has no watermark in the MultiSourceWatermarkSpec; "
            f"add .source({missing[0]!r}, WatermarkSpec.fixed_lag_ms(...))"
        )

    def apply(node: n.PlanNode) -> n.PlanNode:
        if isinstance(node, n.SOURCE_TYPES):
            w = spec.specs[node.name]
            return n.Watermark(
                input=node,
                column=w.column,
                lag_ms=w.lag_ms,
                future_tolerance_ms=w.future_tolerance_ms,
                idle_timeout_ms=spec.timeout_ms,
            )
        return n.with_children(node, tuple(apply(c) for c in n.children(node)))

    return apply(plan)


def _expr(value: object, where: str) -> Any:
    if isinstance(value, Expr):
        return value.node
    raise PlanError(f"{where}() takes expressions built with kp.col()/kp.lit(), got {value!r}")


def _names(what: str, value: object) -> tuple[str, ...]:
    """A column name or a list/tuple of them as a tuple; :class:`PlanError` for anything else."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PlanError(f"{what} takes a column name or a list of column names, got {value!r}")


def placeholder(schema: Any, name: str = "input") -> Stream:
    """A stream of ``schema`` with no engine: it builds plans and cannot run.

    What the reference model and the timelines pass a pipeline function to
    learn its plan (``pipeline(placeholder(schema))``).
    """
    return Stream(None, n.MemorySource(name=name, schema=to_schema(schema), path=""))


#: What the methods a stream does not have but a keyed or windowed one does say when called on it.
_STREAM_HINTS = {
    "interval_join": (
        "interval_join() needs keyed streams: call .key_by(...) on both sides first, e.g. "
        "left.watermark('ts', 5_000).key_by('user').interval_join("
        "right.watermark('ts', 5_000).key_by('user'), between=(-600_000, 0))"
    ),
    "as_of_join": (
        "as_of_join() needs keyed streams: call .key_by(...) on both sides first, e.g. "
        "orders.watermark('ts', 1_000).key_by('currency').as_of_join("
        "rates.watermark('ts', 1_000).key_by('currency'))"
    ),
    "join": (
        "join() is a window join of two windowed streams: "
        "left.key_by(...).tumbling_window(size_ms).join(right.key_by(...).tumbling_window(size_ms)); "
        "to join rows near each other in time use left.key_by(...).interval_join(right.key_by(...), "
        "between=(lower_ms, upper_ms))"
    ),
}
