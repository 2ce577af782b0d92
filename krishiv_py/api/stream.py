"""``Stream``: the immutable, fluent pipeline builder.

Every method returns a new object holding a new logical plan; nothing runs
until :meth:`Stream.collect`, :meth:`Stream.start`, :meth:`Stream.explain`
or :meth:`Stream.to_spark`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.api.keyed import KeyedStream
from krishiv_py.api.windowed import WindowAssigners, WindowedStream
from krishiv_py.errors import KrishivError, PlanError
from krishiv_py.expr import AggExpr, Alias, Column, Expr, col
from krishiv_py.plan import nodes as n
from krishiv_py.plan.emission import DEFAULT_FUTURE_TOLERANCE_MS
from krishiv_py.plan.watermarks import MultiSourceWatermarkSpec, WatermarkSpec
from krishiv_py.plan.windows import WindowSpec, check_ms
from krishiv_py.sinks import MemorySink, Sink
from krishiv_py.types import Schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from krishiv_py._typing import Lowering
    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.durability import Durability
    from krishiv_py.runtime.job import BoundedJob, Job
    from krishiv_py.session import Session

__all__ = ["Stream"]


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

    __slots__ = ("_plan", "_session", "_sql")

    def __init__(self, session: Session, plan: n.PlanNode, *, sql: str | None = None) -> None:
        self._session = session
        self._plan = plan
        #: The SQL this stream was made from (``session.sql``), shown by :meth:`explain`.
        self._sql = sql

    # --- facts -------------------------------------------------------------------

    @property
    def plan(self) -> n.PlanNode:
        """The logical plan (immutable)."""
        return self._plan

    @property
    def session(self) -> Session:
        return self._session

    @property
    def schema(self) -> Schema:
        return n.schema_of(self._plan)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.schema.names

    @property
    def is_bounded(self) -> bool:
        """True when every source is finite (the bounded lowering applies)."""
        return n.is_bounded(self._plan)

    def _with(self, plan: n.PlanNode) -> Stream:
        return Stream(self._session, plan)

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
        from krishiv_py.sql import check_name

        self._session._sql.register(check_name(name), self._plan)
        return self

    def _lowering_text(self) -> str:
        try:
            recipe = self.lower()
        except KrishivError as exc:
            return f"none ({exc})"
        return recipe.lowering

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
        lag_ms: int,
        *,
        future_tolerance_ms: int = DEFAULT_FUTURE_TOLERANCE_MS,
        idle_timeout_ms: int | None = None,
    ) -> Stream:
        """Declare ``column`` as event time, with ``lag_ms`` bounded out-of-orderness.

        The watermark is ``max(event time seen) - lag_ms``; it never goes back.
        ``column`` may be a timestamp or a bigint of epoch milliseconds.
        Events more than ``future_tolerance_ms`` ahead of the watermark are
        processed, counted as future events and warned about (likely clock skew).
        ``idle_timeout_ms``: after that much processing time without input,
        this source is left out of the overall watermark of a union (see
        :meth:`idle_timeout_ms`).
        """
        out = self.with_watermark(
            WatermarkSpec.fixed_lag_ms(column, lag_ms, future_tolerance_ms=future_tolerance_ms)
        )
        return out if idle_timeout_ms is None else out.idle_timeout_ms(idle_timeout_ms)

    def with_watermark(self, spec: WatermarkSpec | MultiSourceWatermarkSpec) -> Stream:
        """Declare event time with a :class:`WatermarkSpec`, or one per stream of a union.

        A :class:`MultiSourceWatermarkSpec` names every stream of this
        (union) stream — memory streams, file sources, records — by its
        ``name`` and gives each its own watermark, directly on that source;
        the job's watermark is the minimum over them (without idle sources
        when the spec has an idle timeout).
        """
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

    def idle_timeout_ms(self, timeout_ms: int) -> Stream:
        """Let every watermarked source of this stream go idle after ``timeout_ms`` without input.

        An idle source is left out of the overall watermark (the minimum
        over the sources), so windows fire on the others; when it sends
        again it rejoins without pulling the overall watermark back, and its
        rows behind it are late by the usual rules. Processing time, checked
        between micro-batches. Use after the watermarks, e.g.
        ``a.watermark("t", 0).union(b.watermark("t", 0)).idle_timeout_ms(30_000)``.
        """
        check_ms("idle_timeout_ms", timeout_ms)
        if not n.watermarks_of(self._plan):
            raise PlanError(
                "idle_timeout_ms() needs a watermark: call .watermark(column, lag_ms) on the sources first"
            )

        def apply(node: n.PlanNode) -> n.PlanNode:
            new = n.with_children(node, tuple(apply(c) for c in n.children(node)))
            if isinstance(new, n.Watermark):
                return attrs.evolve(new, idle_timeout_ms=timeout_ms)
            return new

        return self._with(apply(self._plan))

    # --- stateless --------------------------------------------------------------

    def filter(self, condition: Expr) -> Stream:
        """Keep the rows where ``condition`` is true (null counts as false)."""
        return self._with(n.Filter(input=self._plan, predicate=_expr(condition, "filter")))

    def select(self, *columns: str | Expr) -> Stream:
        """Project to the given columns or named expressions (``expr.alias(name)``)."""
        exprs = tuple(_expr(col(c) if isinstance(c, str) else c, "select") for c in columns)
        return self._with(n.Project(input=self._plan, exprs=exprs))

    def with_column(self, name: str, expr: Expr) -> Stream:
        """Add column ``name`` (or replace it, keeping its position)."""
        new = Alias(_expr(expr, "with_column"), name)
        exprs: list[Any] = [new if c == name else Column(c) for c in self.columns]
        if name not in self.columns:
            exprs.append(new)
        return self._with(n.Project(input=self._plan, exprs=tuple(exprs)))

    def union(self, *others: Stream) -> Stream:
        """Rows of this stream and ``others`` (identical schemas; each keeps its watermark)."""
        if not others:
            raise PlanError("union() needs at least one other stream")
        for o in others:
            if not isinstance(o, Stream):
                raise PlanError(f"union() takes streams, got {type(o).__name__}")
            if o.session is not self._session:
                raise PlanError("union() needs streams of the same session")
        return self._with(n.Union(inputs=(self._plan, *(o.plan for o in others))))

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
        recipe = self.lower(force_bounded=True)
        return self._run_bounded(recipe, MemorySink(), metrics=False).results()

    def _run_bounded(self, recipe: SparkRecipe, sink: Sink, *, metrics: bool = True) -> BoundedJob:
        """Run a bounded recipe; Ctrl-C cancels its Spark jobs, long runs show progress."""
        from krishiv_py.runtime.run import run_bounded
        from krishiv_py.runtime.watch import progress_enabled, stage_progress, watching

        spark = self._session.spark
        show = progress_enabled(self._session.progress) and not self._session.is_remote
        with watching(
            on_interrupt=self._session.cancel_spark_jobs,
            message="krishiv_py: interrupted; the Spark jobs were cancelled.",
            progress=stage_progress(spark) if show else None,
            description="krishiv_py running",
        ):
            job = run_bounded(spark, recipe, sink=sink, metrics=metrics)
        job.stream = self
        return job

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
        from krishiv_py.runtime.durability import profile
        from krishiv_py.runtime.quarantine import Quarantine
        from krishiv_py.runtime.run import start_streaming
        from krishiv_py.runtime.spool import readers as spool_readers

        sink = sink if sink is not None else MemorySink()
        prof = self._session.profile if durability is None else profile(durability)
        if name is not None and checkpoint_dir is not None:
            raise PlanError("start() takes a name or a checkpoint_dir, not both")
        if name is not None and not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", name):
            raise PlanError(f"job name {name!r} must be letters, digits, '_', '-' or '.'")
        quarantine = None if quarantine_dir is None else Quarantine(_quarantine_path(quarantine_dir))
        recipe = self.lower(lowering=lowering)
        if recipe.lowering == "bounded" or (recipe.stateful is not None and not recipe.stateful.streaming):
            if quarantine is not None:
                raise PlanError(
                    "quarantine_dir= is for streaming jobs: this input is bounded and runs as one batch "
                    "job, with no checkpoint to restart past a failed batch from; leave it out"
                )
            return self._run_bounded(recipe, sink)
        senders = [
            self._session.sender_for(s.path) if isinstance(s, n.MemorySource) else None
            for s in n.sources_of(self._plan)
        ]
        location = checkpoint_dir or self._session.checkpoint_dir(name)
        _check_plan(location, f"lowering: {recipe.lowering}\n{n.checkpoint_identity(self._plan)}\n")
        # A reader of its memory streams from now on, so retention keeps what it has not committed.
        resumable = name is not None or checkpoint_dir is not None
        with spool_readers(senders, location, resumable=resumable) as checked_in:
            job = start_streaming(
                self._session.spark,
                recipe,
                sink=sink,
                checkpoint_dir=location,
                senders=senders,
                conf=prof.query_conf,
                quarantine=quarantine,
            )
            checked_in(job)
        job.stream = self
        job.checkpoint_dir = location
        job.durability = prof.name
        return self._session._track(job)

    def to_spark(self, *, lowering: Lowering | None = None) -> DataFrame:
        """The pyspark DataFrame this stream lowers to (streaming when unbounded).

        Under the stateful lowering, the rows are the operator's encoded
        per-bucket output (``__kp_bucket``, ``__kp_payload``), which the job
        decodes on the driver.
        """
        from krishiv_py.runtime.build import build_dataframe
        from krishiv_py.runtime.spark_errors import spark_call

        recipe = self.lower(lowering=lowering)
        return spark_call("building the DataFrame", lambda: build_dataframe(self._session.spark, recipe))

    def explain(self, *, lowering: Lowering | None = None, show: bool = True) -> Explanation:
        """Print the logical plan, the chosen lowering and why, the recipe, and Spark's plan.

        A stream made by ``session.sql`` shows its SQL first (with the ``SET``
        statements it took).

        Prints like ``DataFrame.explain()`` and also returns the text, an
        :class:`Explanation` (a ``str``), which a notebook does not display a
        second time. ``show=False`` returns the text without printing it.
        """
        from krishiv_py.runtime.run import explain_spark

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
                    self._durability_text(recipe.lowering),
                    "",
                    "== Spark recipe ==",
                    recipe.render(),
                    "",
                    "== Spark plan ==",
                    explain_spark(self._session.spark, recipe),
                ]
            )
        )
        if show:
            print(text)
        return text

    def _durability_text(self, lowering: str) -> str:
        import os

        if lowering == "bounded" or self.is_bounded:
            return "a bounded run: one Spark batch job, no checkpoint"
        session = self._session
        where = os.path.join(session.state_dir, "checkpoints", "<job name or a fresh id>")
        return f"{session.profile.describe()}; checkpoint: {where}"


class Explanation(str):
    """The text of :meth:`Stream.explain`: a ``str`` that notebooks do not echo twice."""

    __slots__ = ()

    def __repr__(self) -> str:
        first = self.splitlines()[0] if self else ""
        return f"<Explanation {first!r}... ({len(self.splitlines())} lines)>"

    def _ipython_display_(self) -> None:
        """Already printed by ``explain()``; nothing more to show."""


PLAN_FILE = "krishiv-plan.txt"


def _check_plan(checkpoint_dir: str, plan_text: str) -> None:
    """Refuse to resume a checkpoint written by another pipeline; record the plan of a new one.

    A checkpoint holds state laid out for one plan and lowering (window,
    keys, aggregates, watermarks); resuming it with another gives wrong
    results or a Spark error deep in a micro-batch. The checkpoint is left
    as it is.
    """
    import os

    from krishiv_py.errors import JobError
    from krishiv_py.runtime.durability import is_uri

    if is_uri(checkpoint_dir):
        return  # not readable from here; Spark checks what it can
    path = os.path.join(checkpoint_dir, PLAN_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            recorded = f.read()
        if recorded != plan_text:
            old, new = recorded.splitlines(), plan_text.splitlines()
            first = next(
                (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
            )
            was = old[first].strip() if first < len(old) else "(nothing)"
            now = new[first].strip() if first < len(new) else "(nothing)"
            raise JobError(
                f"the checkpoint {checkpoint_dir} was written by another pipeline, so this one cannot "
                f"resume it (left intact): it had `{was}`, this pipeline has `{now}`. Start the original "
                "pipeline to resume it, or this one under another name / checkpoint_dir"
            )
        return
    os.makedirs(checkpoint_dir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(plan_text)
    os.replace(tmp, path)


def _quarantine_path(value: object) -> str:
    """The absolute path of ``start(quarantine_dir=...)``: a non-empty local path string."""
    import os

    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"quarantine_dir must be a directory path (a non-empty str), got {value!r}")
    if "://" in value:
        raise PlanError(
            f"quarantine_dir must be a local directory (or a mount every Spark driver sees), got {value!r}"
        )
    return os.path.abspath(os.path.expanduser(value))


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
