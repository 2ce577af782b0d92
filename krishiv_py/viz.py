"""The watermark timeline: events, windows and the watermark of a run in one picture.

A :class:`Timeline` is the plain data of the picture: every event with the
step it arrived in and its classification (on time, mildly late, very late,
invalid), every window with its status (fired, re-fired, open) and the steps
of its firings, and the watermark after each step, overall and per source.
:func:`timeline` draws it with matplotlib (an optional dependency:
``python -m pip install '.[viz]' (in the krishiv_py clone)``):

- x: event time (UTC); y: arrival, the step (one ``send``,
  ``advance_watermark`` or ``close``; for a job, one micro-batch that read
  input), later steps higher up;
- each window is a vertical band over ``[start, end)``, coloured by status,
  with a bar at the step where it fired (and where it fired again);
- events are dots at their event time, in the row of their step, spread
  within the row in arrival order; late events have their own markers, and
  events without a valid event time are drawn at the left edge;
- the watermark in force for each row is a step line: an event left of it
  is late. Per-source watermarks are drawn too when there are several
  sources.

A timeline comes from the reference model (:meth:`Timeline.from_reference`,
:meth:`Timeline.from_model`) or from a job (:meth:`Timeline.from_job`, also
``job.plot_timeline()``): the job's own input, read back from its checkpoint,
is replayed through the reference model at the job's batching, so every
classification and firing shown is the one the specified semantics give for
exactly that input; the job's own watermark history is kept next to the
replayed one.

Examples
--------
>>> import krishiv_py as kp
>>> from krishiv_py.testing import AdvanceWatermark, Send
>>> build = lambda s: s.watermark("t", 0).tumbling_window(10).agg(kp.count(kp.col("*")))
>>> tl = Timeline.from_reference(build, [Send([{"t": 3}, {"t": 12}]), Send([{"t": 4}])], schema="t bigint")
>>> [(e.time_ms, e.step, e.classification) for e in tl.events]
[(3, 0, 'on_time'), (12, 0, 'on_time'), (4, 1, 'very_late')]
>>> [(w.start_ms, w.end_ms, w.status, w.fired_step) for w in tl.windows]
[(0, 10, 'fired', 0), (10, 20, 'open', None)]
>>> tl.watermarks
(12, 12)
"""

from __future__ import annotations

import datetime as dt
import os
import types
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from krishiv_py.advice import WatermarkAdvice
from krishiv_py.api.stream import Stream, placeholder
from krishiv_py.checkpoint import CheckpointLayout, file_source_log, log_offset
from krishiv_py.errors import MissingDependencyError, PlanError
from krishiv_py.model.reference import Classification, ReferenceModel
from krishiv_py.model.steps import AdvanceWatermark, Close, Send, Step, reference_model_for
from krishiv_py.names import BASE_HIDDEN, ROW_KIND, SEQ, WM
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import MAX_EVENT_MS, MIN_EVENT_MS
from krishiv_py.runtime.handle import Job
from krishiv_py.spark_errors import spark_call

if TYPE_CHECKING:
    import pyarrow as pa
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


__all__ = [
    "DEFAULT_MAX_EVENTS",
    "Timeline",
    "TimelineEvent",
    "TimelineStep",
    "TimelineWindow",
    "completeness",
    "timeline",
]

WindowStatus: TypeAlias = Literal["fired", "refired", "open"]
#: ``bounded``: a bounded job's one step, every row and then the end of input.
StepKind: TypeAlias = Literal["send", "advance_watermark", "close", "processing_time", "bounded"]
Key: TypeAlias = tuple[object, ...]

#: At most this many events are drawn (all late and invalid ones first, then
#: on-time ones evenly spaced); the :class:`Timeline` keeps them all.
DEFAULT_MAX_EVENTS = 5_000

_INSTALL = "python -m pip install '.[viz]' (in the krishiv_py clone)"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# --- the data ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TimelineEvent:
    """One input row: its event time, arrival step and classification."""

    time_ms: int | None  # event time, epoch ms (floored); None: no valid event time
    step: int  # index of the step it arrived in, from 0
    source: str
    key: Key
    classification: Classification
    watermark_ms: int | None  # the overall watermark it met (None: none yet)


@attrs.frozen(kw_only=True)
class TimelineWindow:
    """One window of one key, ``[start_ms, end_ms)``, and when it fired.

    ``status`` is ``open`` until its final firing (the watermark reached its
    end), ``fired`` after it, and ``refired`` when it fired again after that
    (late events under allowed lateness, or a session merge that gave the same
    bounds). Early firings (triggers) before the final one are in
    ``early_steps``.
    """

    start_ms: int
    end_ms: int
    key: Key
    status: WindowStatus
    fired_step: int | None  # step of the final firing
    refired_steps: tuple[int, ...] = ()  # steps with firings after the final one
    early_steps: tuple[int, ...] = ()  # steps with early firings


@attrs.frozen(kw_only=True)
class TimelineStep:
    """One step: a ``send`` (``rows`` rows), ``advance_watermark``, ``close``, or a bounded run."""

    kind: StepKind
    source: str
    rows: int
    batch_id: int | None = None  # the job's micro-batch that read this step's input


def _tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(values)


def _series(value: Mapping[str, Sequence[int | None]]) -> Mapping[str, tuple[int | None, ...]]:
    return types.MappingProxyType({name: tuple(s) for name, s in value.items()})


@attrs.frozen(kw_only=True)
class Timeline:
    """What :func:`timeline` draws: steps, events, windows and watermarks of one run.

    Watermark series have one value per step: the watermark *after* that
    step (``None`` while there is none); the watermark in force for step
    ``i`` is the one after step ``i - 1``. :data:`~krishiv_py.END_OF_TIME_MS`
    means the input ended.

    Attributes
    ----------
    steps
        The steps, in order.
    events
        Every input row, in arrival order.
    windows
        Every window that fired or is still open, in firing order.
    watermarks
        The overall watermark after each step.
    source_watermarks
        The watermark of each source after each step.
    job_watermarks
        For a timeline of a job: the overall watermark the job reported after
        each step (``None`` where it reported none); ``None`` otherwise.
    source_lags
        For each source with an automatic lag (``watermark(column, "auto")``):
        its lag after each step, in force for the next one (ms); empty otherwise.
    origin
        Where the data comes from, for the title.
    """

    steps: tuple[TimelineStep, ...] = attrs.field(converter=_tuple)
    events: tuple[TimelineEvent, ...] = attrs.field(converter=_tuple)
    windows: tuple[TimelineWindow, ...] = attrs.field(converter=_tuple)
    watermarks: tuple[int | None, ...] = attrs.field(converter=_tuple)
    source_watermarks: Mapping[str, tuple[int | None, ...]] = attrs.field(converter=_series, hash=False)
    job_watermarks: tuple[int | None, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_tuple)
    )
    origin: str = "reference model"
    source_lags: Mapping[str, tuple[int | None, ...]] = attrs.field(
        factory=dict, converter=_series, hash=False
    )

    def __attrs_post_init__(self) -> None:
        count = len(self.steps)
        series = [self.watermarks, *self.source_watermarks.values(), *self.source_lags.values()]
        if self.job_watermarks is not None:
            series.append(self.job_watermarks)
        if any(len(s) != count for s in series):
            raise PlanError(f"every watermark and lag series needs one value per step ({count})")
        if any(not 0 <= e.step < count for e in self.events):
            raise PlanError(f"an event's step is outside 0..{count - 1}")

    # --- reading -----------------------------------------------------------------------

    def classified(self, classification: Classification) -> tuple[TimelineEvent, ...]:
        """The events of one classification."""
        return tuple(e for e in self.events if e.classification == classification)

    def with_status(self, status: WindowStatus) -> tuple[TimelineWindow, ...]:
        """The windows of one status."""
        return tuple(w for w in self.windows if w.status == status)

    @property
    def watermarks_agree(self) -> bool | None:
        """Whether the job reported the replayed watermark after every step it reported.

        ``None`` for a timeline that is not a job's.
        """
        if self.job_watermarks is None:
            return None
        pairs = zip(self.watermarks, self.job_watermarks, strict=True)
        return all(job is None or job == replayed for replayed, job in pairs)

    # --- making --------------------------------------------------------------------------

    @classmethod
    def from_model(cls, model: ReferenceModel, *, origin: str = "reference model") -> Timeline:
        """The timeline of a :class:`~krishiv_py.testing.ReferenceModel` made with ``record=True``."""
        return _from_model(model, step_of=None, steps=None, origin=origin)

    @classmethod
    def from_reference(
        cls,
        pipeline: Stream | Callable[[Stream], Stream],
        steps: Sequence[Step],
        *,
        schema: Any = None,
        clock: Callable[[], float] | None = None,
    ) -> Timeline:
        """Play ``steps`` (``Send``, ``AdvanceWatermark``, ``Close``) on the reference model.

        ``pipeline`` is a pipeline (a ``Stream`` ending in ``agg``) or a
        function from the source stream to one, as in
        :func:`krishiv_py.testing.run_reference`; a function needs
        ``schema``, the input schema. ``clock`` drives ``Trigger.on_interval``.
        """
        if isinstance(pipeline, Stream):
            stream = pipeline
        elif callable(pipeline):
            if schema is None:
                raise PlanError("Timeline.from_reference(function, steps) needs schema=, the input schema")
            stream = pipeline(placeholder(schema))
        else:
            raise PlanError(f"pipeline must be a Stream or a function of one, got {type(pipeline).__name__}")
        model = reference_model_for(stream, clock=clock, record=True)
        for step in steps:
            if isinstance(step, Send):
                model.send(step.rows)
            elif isinstance(step, AdvanceWatermark):
                model.advance_watermark(step.ts_ms)
            elif isinstance(step, Close):
                model.close()
            else:
                raise PlanError(f"a step is Send, AdvanceWatermark or Close, got {step!r}")
        source = _single_source(stream.plan)
        return _from_model(model, step_of=None, steps=None, origin="reference model", rename=source.name)

    @classmethod
    def from_job(cls, job: Job) -> Timeline:
        """The timeline of a job: its input replayed through the reference model at its batching.

        A streaming job's input is read back from its checkpoint (Spark's
        file-source log names the files each micro-batch read; memory streams
        are such files too), only for committed micro-batches, and replayed
        step by step, one step per micro-batch that read input; a bounded job
        is one step. The job's own watermark after each step (from
        :meth:`Job.progress`) is kept in :attr:`Timeline.job_watermarks`.

        The pipeline must be one the reference model covers (``source ->
        watermark -> [key_by] -> window -> agg``). The replay is one pass of
        the Python model over the whole input: fine for notebook-sized jobs,
        slow for millions of rows. ``Trigger.on_interval`` early firings
        depend on processing time and are left out. On a running job it shows
        the micro-batches committed so far.
        """
        return _from_job(job)


def _single_source(plan: n.PlanNode) -> n.MemorySource | n.RecordsSource | n.FileSource:
    if isinstance(plan, n.WindowAggregate) and isinstance(plan.input, n.Watermark):
        source = plan.input.input
        if isinstance(source, n.MemorySource | n.RecordsSource | n.FileSource):
            return source
    raise PlanError("a timeline covers source -> watermark -> [key_by] -> window -> agg pipelines")


def _from_model(
    model: ReferenceModel,
    *,
    step_of: Sequence[int] | None,
    steps: Sequence[TimelineStep] | None,
    origin: str,
    rename: str | None = None,
    job_watermarks: Sequence[int | None] | None = None,
    early: bool = True,
) -> Timeline:
    """Build a timeline from a recording model; ``step_of[i]`` is the timeline step of model step ``i``."""
    log = model.log
    if log is None:
        raise PlanError(
            "the model keeps no log: make it with record=True (or reference_model_for(..., record=True))"
        )

    def name(source: str) -> str:
        return rename if rename is not None and source == "main" else source

    where = list(step_of) if step_of is not None else list(range(len(log.steps)))
    if steps is None:
        steps = [TimelineStep(kind=s.kind, source=name(s.source), rows=s.rows) for s in log.steps]
    count = len(steps)
    last = {where[i]: i for i in range(len(log.steps))}  # timeline step -> its last model step
    after = [log.steps[last[t]] if t in last else None for t in range(count)]
    watermarks = tuple(s.watermark_ms if s is not None else None for s in after)
    source_watermarks = {
        name(src): tuple(s.source_watermarks.get(src) if s is not None else None for s in after)
        for src in model.sources
    }
    autos = sorted({src for s in log.steps for src in s.source_lags})
    source_lags = {
        name(src): tuple(s.source_lags.get(src) if s is not None else None for s in after) for src in autos
    }
    events = tuple(
        TimelineEvent(
            time_ms=None if e.ts_us is None else e.ts_us // 1000,
            step=where[e.step],
            source=name(e.source),
            key=e.key,
            classification=e.classification,
            watermark_ms=e.watermark_ms,
        )
        for e in log.events
    )
    windows = _windows(model, where, early=early)
    return Timeline(
        steps=steps,
        events=events,
        windows=windows,
        watermarks=watermarks,
        source_watermarks=source_watermarks,
        job_watermarks=None if job_watermarks is None else tuple(job_watermarks),
        origin=origin,
        source_lags=source_lags,
    )


def _windows(model: ReferenceModel, where: Sequence[int], *, early: bool) -> tuple[TimelineWindow, ...]:
    """Windows by (key, start, end): the first final firing, firings after it, early firings before it."""
    log = model.log
    assert log is not None
    fired: dict[tuple[Key, int, int], int] = {}
    refired: dict[tuple[Key, int, int], list[int]] = {}
    earlier: dict[tuple[Key, int, int], list[int]] = {}
    for f in log.firings:
        ident = (f.key, f.start_ms, f.end_ms)
        step = where[f.step]
        if ident in fired:
            refired.setdefault(ident, []).append(step)
        elif f.kind == "final":
            fired[ident] = step
        else:
            earlier.setdefault(ident, []).append(step)
    idents = list(fired)
    # Windows held and not fired yet; a session merged away before it fired is gone.
    idents += [
        (w.key, w.start_ms, w.end_ms)
        for w in model.state_windows()
        if not w.fired and (w.key, w.start_ms, w.end_ms) not in fired
    ]
    out = []
    for ident in dict.fromkeys(idents):
        key, start, end = ident
        again = tuple(sorted(set(refired.get(ident, []))))
        final = fired.get(ident)
        status: WindowStatus = "open" if final is None else "refired" if again else "fired"
        out.append(
            TimelineWindow(
                start_ms=start,
                end_ms=end,
                key=key,
                status=status,
                fired_step=final,
                refired_steps=again,
                early_steps=tuple(sorted(set(earlier.get(ident, [])))) if early else (),
            )
        )
    out.sort(key=lambda w: (w.end_ms, w.start_ms, tuple((v is not None, repr(v)) for v in w.key)))
    return tuple(out)


# --- a job's input, read back --------------------------------------------------------

_STREAM_ONLY_OPTIONS = frozenset({"maxFilesPerTrigger", "maxFileAge", "latestFirst", "cleanSource"})


def _from_job(job: Job) -> Timeline:
    plan, spark = getattr(job, "plan", None), getattr(job, "spark", None)
    if plan is None or spark is None:  # a Job of one's own, not built by the runtime
        raise PlanError("this job does not know its pipeline; start it with Stream.start()")
    source = _single_source(plan)
    # A constant clock: on_interval early firings depend on processing time and are left out.
    model = reference_model_for(plan, clock=lambda: 0.0, record=True)
    interval = _interval_trigger(plan)
    origin = f"job, {job.lowering} lowering, input replayed on the reference model"
    checkpoint = getattr(job, "checkpoint_dir", None)
    if checkpoint is None:  # a bounded job: all rows in one step, then the end of input
        rows = _bounded_rows(spark, source)
        model.send(rows)
        model.close()
        steps = [TimelineStep(kind="bounded", source=source.name, rows=len(rows))]
        return _from_model(
            model,
            step_of=[0, 0],
            steps=steps,
            origin=origin,
            rename=source.name,
            job_watermarks=[job.watermark_ms],
            early=not interval,
        )
    index, batches = _source_batches(checkpoint, source)
    reported = _reported(job, index)
    steps = []
    job_wms: list[int | None] = []
    for log_batch, uris in batches:
        kind, rows, wm = _read_batch(spark, source, uris)
        if kind == "send":
            model.send(rows)
        elif kind == "advance_watermark":
            assert wm is not None
            model.advance_watermark(wm)
        else:
            model.close()
        batch_id, job_wm = reported.get(log_batch, (None, None))
        steps.append(TimelineStep(kind=kind, source=source.name, rows=len(rows), batch_id=batch_id))
        job_wms.append(job_wm)
    return _from_model(
        model,
        step_of=None,
        steps=steps,
        origin=origin,
        rename=source.name,
        job_watermarks=job_wms,
        early=not interval,
    )


def _interval_trigger(plan: n.PlanNode) -> bool:
    return isinstance(plan, n.WindowAggregate) and plan.emission.trigger.kind == "interval"


def _bounded_rows(
    spark: Any, source: n.MemorySource | n.RecordsSource | n.FileSource
) -> list[dict[str, Any]]:
    if isinstance(source, n.RecordsSource):
        return source.data.to_pylist()
    if isinstance(source, n.FileSource):
        return _spark_read(spark, source, [source.path]).to_pylist()
    raise PlanError(f"cannot read the input of a bounded job over {type(source).__name__}")


def _spark_read(spark: Any, source: n.FileSource, paths: Sequence[str]) -> pa.Table:
    """Read files as the job's source reads them (format, schema, options), with Spark."""
    options = {k: v for k, v in source.options if k not in _STREAM_ONLY_OPTIONS}
    reader = spark.read.format(source.format).schema(source.schema.ddl()).options(**options)
    table: pa.Table = spark_call("reading the job's input", lambda: reader.load(list(paths)).toArrow())
    return table


def _read_log(directory: str) -> dict[int, dict[str, int]]:
    """Spark's file-source log: log batch id -> {file URI: modification time}, compacted files included."""
    entries: dict[int, dict[str, int]] = {}
    for entry in file_source_log(directory):
        entries.setdefault(entry.batch_id, {})[entry.path] = entry.timestamp
    return entries


def _local(uri: str) -> str | None:
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    return os.path.normpath(urllib.request.url2pathname(parsed.path))


def _belongs(uri: str, source: n.MemorySource | n.RecordsSource | n.FileSource) -> bool:
    local = _local(uri)
    if local is None or isinstance(source, n.RecordsSource):
        return False
    root = os.path.normpath(os.path.abspath(source.path))
    return local == root or local.startswith(root + os.sep)


def _source_batches(
    checkpoint: str, source: n.MemorySource | n.RecordsSource | n.FileSource
) -> tuple[int | None, list[tuple[int, list[str]]]]:
    """The job's source index, and the committed input batches of ``source``: (log batch id, file URIs)."""
    layout = CheckpointLayout(checkpoint)
    index: int | None = None
    log: dict[int, dict[str, int]] = {}
    for i in layout.source_logs():
        entries = _read_log(layout.source_log(i))
        if any(_belongs(uri, source) for files in entries.values() for uri in files):
            index, log = i, entries
            break
    if index is None:
        return None, []
    upto = _committed_offset(layout, index)
    batches = []
    for log_batch in sorted(b for b in log if upto is not None and b <= upto):
        files = log[log_batch]
        batches.append((log_batch, sorted(files, key=lambda uri: (files[uri], uri))))
    return index, batches


def _committed_offset(layout: CheckpointLayout, index: int) -> int | None:
    """The file-source log offset of source ``index`` in the last committed micro-batch."""
    last = layout.committed_batch()
    if last < 0:
        return None
    offsets = layout.source_offsets(last)
    if index >= len(offsets):
        raise PlanError(f"unknown Spark offset log format in {layout.offsets}/{last}")
    return log_offset(offsets[index])


def _reported(job: Job, index: int | None) -> dict[int, tuple[int | None, int | None]]:
    """Log batch id -> (the micro-batch that read it, the job's watermark after its step)."""
    out: dict[int, tuple[int | None, int | None]] = {}
    if index is None:
        return out
    for p in job.progress():
        sources = p.raw.get("sources") or []
        if index >= len(sources):
            continue
        start = log_offset(sources[index].get("startOffset"))
        end = log_offset(sources[index].get("endOffset"))
        if end is None:
            continue
        batch_id = out.get(end, (None, None))[0]
        if start != end and batch_id is None:
            batch_id = p.batch_id
        out[end] = (batch_id, p.watermark_ms)  # the last micro-batch at this offset wins
    return out


def _read_batch(
    spark: Any, source: n.MemorySource | n.RecordsSource | n.FileSource, uris: Sequence[str]
) -> tuple[Literal["send", "advance_watermark", "close"], list[dict[str, Any]], int | None]:
    """One micro-batch's input: what step it is, its data rows, the promised watermark."""
    if isinstance(source, n.FileSource):
        return "send", _spark_read(spark, source, uris).to_pylist(), None
    import pyarrow.parquet as pq

    if len(uris) != 1:
        raise PlanError(f"a memory-stream micro-batch reads one file; this one read {len(uris)}")
    path = _local(uris[0])
    assert path is not None
    table = pq.read_table(path)
    kinds = set(table.column(ROW_KIND).to_pylist())
    if kinds <= {0}:
        table = table.sort_by(SEQ).drop_columns(list(BASE_HIDDEN))
        return "send", table.to_pylist(), None
    if kinds == {1}:
        return "advance_watermark", [], int(table.column(WM)[0].as_py())
    return "close", [], None


# --- the picture -------------------------------------------------------------------------

_STATUS_STYLE: dict[str, dict[str, Any]] = {
    "fired": {"facecolor": "#009E73", "edgecolor": "#009E73", "label": "window fired"},
    "refired": {"facecolor": "#E69F00", "edgecolor": "#B07800", "label": "window re-fired"},
    "open": {
        "facecolor": "#B0B0B0",
        "edgecolor": "#808080",
        "hatch": "///",
        "label": "window open (not fired)",
    },
}
_FIRING_STYLE: dict[str, dict[str, Any]] = {
    "final": {"color": "#00704F", "linewidth": 3.0, "linestyle": "-", "label": "final firing"},
    "refire": {"color": "#C07000", "linewidth": 3.0, "linestyle": "-", "label": "re-firing"},
    "early": {"color": "#505050", "linewidth": 1.2, "linestyle": ":", "label": "early firing"},
}
_EVENT_STYLE: dict[str, dict[str, Any]] = {
    "on_time": {"marker": "o", "s": 22, "color": "#0072B2", "label": "on time"},
    "mildly_late": {
        "marker": "^",
        "s": 48,
        "color": "#E69F00",
        "edgecolors": "black",
        "label": "mildly late (kept)",
    },
    "very_late": {
        "marker": "X",
        "s": 60,
        "color": "#D55E00",
        "edgecolors": "black",
        "label": "very late (dropped)",
    },
    "invalid": {
        "marker": "D",
        "s": 30,
        "color": "#CC79A7",
        "edgecolors": "black",
        "label": "invalid (no event time)",
    },
}
_SOURCE_COLORS = ("#0072B2", "#CC79A7", "#56B4E9", "#F0E442", "#D55E00", "#009E73")
_ROW_SPREAD = 0.6  # events of one step spread over this much of its row, in arrival order


def timeline(
    source: Timeline | Job | ReferenceModel, *, ax: Axes | None = None, max_events: int = DEFAULT_MAX_EVENTS
) -> Figure:
    """Draw the watermark timeline of ``source``; returns the matplotlib ``Figure``.

    Parameters
    ----------
    source
        A :class:`Timeline`, a job (:meth:`Timeline.from_job`: its input is
        replayed through the reference model, one pass of the Python model
        over all of it), or a :class:`~krishiv_py.testing.ReferenceModel`
        made with ``record=True``.
    ax
        Axes to draw on; by default a new 9 x 5 inch figure. Without ``ax``,
        the non-interactive Agg backend is selected when no matplotlib
        backend is (a notebook's backend is left alone).
    max_events
        Draw at most this many events: every late and invalid one first,
        then on-time ones evenly spaced in arrival order. The title says when
        some were left out; the timeline's data always has them all.

    Notes
    -----
    How to read it: each row is a step (later higher up); a window's band is
    green once it fired, orange when late events made it fire again and
    hatched grey while it waits for the watermark; the black step line is the
    watermark in force for each row, and an event left of it was late. A
    window fires in the step where the line passes its end: a window that
    never fired has its end right of the line. The figure is not kept
    by pyplot: a notebook shows it once; elsewhere save it with
    ``fig.savefig(path)``.

    Raises
    ------
    MissingDependencyError
        matplotlib is not installed (``python -m pip install '.[viz]' (in the krishiv_py clone)``).
    """
    _matplotlib()
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0:
        raise PlanError(f"max_events must be an integer >= 0, got {max_events!r}")
    data = _as_timeline(source)
    if ax is None:
        plt = _pyplot()
        fig: Figure = plt.figure(figsize=(9, 5), dpi=100, layout="constrained")
        _draw(data, fig.add_subplot(), max_events=max_events, outside_legend=True)
        # Released from pyplot: a notebook shows the returned figure once (the inline
        # backend would show a figure pyplot still holds a second time).
        plt.close(fig)
        return fig
    _draw(data, ax, max_events=max_events, outside_legend=False)
    return ax.figure.figure  # the root figure, also for an axes in a subfigure


def completeness(advice: WatermarkAdvice, *, ax: Axes | None = None) -> Figure:
    """Draw the delay-completeness curve of ``advice`` (``kp.advise_watermark``); returns the ``Figure``.

    The x axis is the watermark lag (log scale), the y axis the share of
    events that lag puts on time (of the profiled input). The current lag
    and the advised one are marked. ``ax`` and the backend as for
    :func:`timeline`.
    """
    _matplotlib()
    if not isinstance(advice, WatermarkAdvice):
        raise PlanError(
            f"completeness() draws a WatermarkAdvice (kp.advise_watermark), got {type(advice).__name__}"
        )
    fig: Figure
    if ax is None:
        plt = _pyplot()
        fig = plt.figure(figsize=(7, 4), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        plt.close(fig)
    else:
        fig = ax.figure.figure
    curve = [(max(lag, 1), share) for lag, share in advice.profile.delays.curve()]
    if curve:
        ax.step([c[0] for c in curve], [c[1] for c in curve], where="post", color="black", label="on time")
    marks = [
        (advice.current_lag_ms, advice.current_completeness, "current lag", "tab:orange"),
        (advice.lag_ms, advice.completeness, "advised lag", "tab:green"),
    ]
    for lag, share, label, color in marks:
        ax.axvline(max(lag, 1), color=color, linestyle="--", label=f"{label}: {lag:,} ms ({share:.2%})")
    ax.set_xscale("log")
    ax.set_xlabel("watermark lag (ms)")
    ax.set_ylabel("share of events on time")
    ax.set_title(f"source {advice.source!r}: {advice.profile.events:,} events")
    ax.legend(loc="lower right")
    return fig


def _as_timeline(source: object) -> Timeline:
    if isinstance(source, Timeline):
        return source
    if isinstance(source, Job):
        return Timeline.from_job(source)
    if isinstance(source, ReferenceModel):
        return Timeline.from_model(source)
    raise PlanError(
        f"timeline() draws a Timeline, a Job or a ReferenceModel(record=True), got {type(source).__name__}"
    )


def _matplotlib() -> types.ModuleType:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingDependencyError(
            f"drawing a timeline needs matplotlib, an optional dependency: {_INSTALL}"
        ) from exc
    return matplotlib


def _pyplot() -> Any:
    """pyplot, with the Agg backend when no backend was chosen (a notebook's stays)."""
    matplotlib = _matplotlib()
    # None while the backend is still "to be chosen automatically" (no MPLBACKEND, rc file or use()).
    chosen = getattr(matplotlib.rcParams, "_get_backend_or_none", None)
    if chosen is not None and chosen() is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _when(ms: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


def _num(ms: int) -> float:
    """Matplotlib's date number of epoch milliseconds ``ms`` (what the x axis holds)."""
    import matplotlib.dates as mdates

    return float(mdates.date2num(_when(ms)))  # type: ignore[no-untyped-call]


_DT_MIN_MS = MIN_EVENT_MS - 366 * 86_400_000
_DT_MAX_MS = MAX_EVENT_MS


def _x_range(data: Timeline) -> tuple[int, int]:
    """Event-time range drawn: events, windows and the watermarks within the supported range."""
    xs = [e.time_ms for e in data.events if e.time_ms is not None]
    xs += [t for w in data.windows for t in (w.start_ms, w.end_ms)]
    series = [
        data.watermarks,
        *data.source_watermarks.values(),
        *([data.job_watermarks] if data.job_watermarks else []),
    ]
    xs += [w for s in series for w in s if w is not None and MIN_EVENT_MS <= w <= MAX_EVENT_MS]
    if not xs:
        return 0, 1_000
    lo, hi = min(xs), max(xs)
    pad = max((hi - lo) // 25, 1)
    return max(lo - pad, _DT_MIN_MS), min(hi + pad, _DT_MAX_MS)


def _watermark_runs(values: Sequence[int | None], lo: int, hi: int) -> list[tuple[list[float], list[float]]]:
    """The step line of a watermark series: in row ``i`` (y = i + 1) the watermark after step ``i - 1``.

    Above the last row, the watermark after the last step. Values outside the
    drawn range are clipped to its edges (the end of input to the right edge).
    """
    count = len(values)
    in_force: list[int | None] = [None, *values]  # row i (0-based) has in_force[i]; row `count` is "after"
    runs: list[tuple[list[float], list[float]]] = []
    xs: list[float] = []
    ys: list[float] = []
    for i, w in enumerate(in_force):
        if w is None:
            if xs:
                runs.append((xs, ys))
            xs, ys = [], []
            continue
        x = _num(min(max(w, lo), hi))
        top = i + 1.5 if i < count else count + 1.0
        xs += [x, x]
        ys += [i + 0.5, top]
    if xs:
        runs.append((xs, ys))
    return runs


def _event_rows(data: Timeline) -> list[float]:
    """Each event's y: its step's row, spread within the row in arrival order."""
    per_step: dict[int, int] = {}
    for e in data.events:
        per_step[e.step] = per_step.get(e.step, 0) + 1
    seen: dict[int, int] = {}
    ys = []
    for e in data.events:
        j = seen.get(e.step, 0)
        seen[e.step] = j + 1
        m = per_step[e.step]
        ys.append(e.step + 1 + (0.0 if m == 1 else _ROW_SPREAD * ((j + 0.5) / m - 0.5)))
    return ys


def _sample(data: Timeline, max_events: int) -> list[int]:
    """Indexes of the events drawn: late and invalid first, then on-time evenly spaced."""
    if len(data.events) <= max_events:
        return list(range(len(data.events)))
    late = [i for i, e in enumerate(data.events) if e.classification != "on_time"][:max_events]
    on_time = [i for i, e in enumerate(data.events) if e.classification == "on_time"]
    room = max_events - len(late)
    picked = [on_time[(k * len(on_time)) // room] for k in range(room)] if room > 0 else []
    return sorted(late + picked)


def _step_label(i: int, step: TimelineStep) -> str:
    what = {
        "send": f"{step.rows} row{'s' if step.rows != 1 else ''}",
        "advance_watermark": "advance wm",
        "close": "close",
        "bounded": f"{step.rows} rows + end",
    }[step.kind]
    where = f"b{step.batch_id}" if step.batch_id is not None else str(i + 1)
    return f"{where}: {what}"


def _draw(data: Timeline, ax: Axes, *, max_events: int, outside_legend: bool) -> None:
    """Window bands, firing bars, watermark lines and events on ``ax``, then its axes and the legend."""
    lo, hi = _x_range(data)
    handles: list[Any] = []
    handles += _draw_windows(data, ax)
    handles += _draw_firings(data, ax)
    handles += _draw_watermarks(data, ax, lo, hi)
    drawn, events = _draw_events(data, ax, max_events)
    handles += events
    _draw_axes(data, ax, lo, hi, drawn)
    figure = ax.get_figure()
    if outside_legend and figure is not None:
        figure.legend(handles=handles, loc="outside lower center", ncols=5, fontsize="small", frameon=False)
    else:
        ax.legend(handles=handles, loc="best", fontsize="x-small")


def _draw_windows(data: Timeline, ax: Axes) -> list[Any]:
    """One band per distinct bounds and status (keys with the same window share it); legend handles."""
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for status in ("fired", "refired", "open"):
        bounds = sorted({(w.start_ms, w.end_ms) for w in data.windows if w.status == status})
        style = dict(_STATUS_STYLE[status])
        label = style.pop("label")
        for start, end in bounds:
            ax.axvspan(
                _num(start), _num(end), alpha=0.22, linewidth=0.8, zorder=0, gid=f"window-{status}", **style
            )
        if bounds:
            handles.append(Patch(alpha=0.35, label=label, **style))
    return handles


def _draw_firings(data: Timeline, ax: Axes) -> list[Any]:
    """A bar over each window where the step of its firing ends (where the watermark moves)."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    bars: dict[str, set[tuple[int, int, int]]] = {"final": set(), "refire": set(), "early": set()}
    for w in data.windows:
        if w.fired_step is not None:
            bars["final"].add((w.fired_step, w.start_ms, w.end_ms))
        bars["refire"] |= {(s, w.start_ms, w.end_ms) for s in w.refired_steps}
        bars["early"] |= {(s, w.start_ms, w.end_ms) for s in w.early_steps}
    for kind, marks in bars.items():
        if not marks:
            continue
        style = dict(_FIRING_STYLE[kind])
        label = style.pop("label")
        ordered = sorted(marks)
        ax.hlines(
            [s + 1.5 for s, _, _ in ordered],
            [_num(a) for _, a, _ in ordered],
            [_num(b) for _, _, b in ordered],
            zorder=2,
            gid=f"firing-{kind}",
            **style,
        )
        handles.append(Line2D([], [], label=label, **style))
    return handles


def _draw_watermarks(data: Timeline, ax: Axes, lo: int, hi: int) -> list[Any]:
    """The step lines: per source (when several), overall, the job's when it disagrees; the end of input."""

    handles: list[Any] = []
    several = len(data.source_watermarks) > 1
    if several:
        for i, (name, series) in enumerate(data.source_watermarks.items()):
            color = _SOURCE_COLORS[i % len(_SOURCE_COLORS)]
            for k, (xs, ys) in enumerate(_watermark_runs(series, lo, hi)):
                (line,) = ax.plot(
                    xs,
                    ys,
                    color=color,
                    linewidth=1.0,
                    linestyle="--",
                    zorder=3,
                    gid=f"watermark-source:{name}",
                )
                if k == 0:
                    line.set_label(f"watermark of {name}")
                    handles.append(line)
    for k, (xs, ys) in enumerate(_watermark_runs(data.watermarks, lo, hi)):
        (line,) = ax.plot(xs, ys, color="black", linewidth=2.0, zorder=3, gid="watermark")
        if k == 0:
            line.set_label("watermark (replayed)" if data.watermarks_agree is False else "watermark")
            handles.append(line)
    if data.job_watermarks is not None and not data.watermarks_agree:
        for k, (xs, ys) in enumerate(_watermark_runs(data.job_watermarks, lo, hi)):
            (line,) = ax.plot(
                xs, ys, color="#D55E00", linewidth=1.5, linestyle="--", zorder=3, gid="watermark-job"
            )
            if k == 0:
                line.set_label("watermark the job reported")
                handles.append(line)
    _draw_lags(data, ax)
    final = data.watermarks[-1] if data.watermarks else None
    if final is not None and final > MAX_EVENT_MS:
        _note_at_right(ax, "end of input", len(data.steps) + 0.75, fontsize="small")
    return handles


def _note_at_right(ax: Axes, text: str, y: float, **style: Any) -> None:
    """``text`` at the right edge of the plot, at height ``y`` (data coordinates)."""
    from matplotlib.transforms import blended_transform_factory

    at_edge = blended_transform_factory(ax.transAxes, ax.transData)
    ax.annotate(
        text,
        xy=(1.0, y),
        xycoords=at_edge,
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        va="center",
        **style,
    )


def _draw_lags(data: Timeline, ax: Axes) -> None:
    """An automatic lag at the right end of each row whose step met a lag other than the row below."""
    shown: dict[str, int] | None = None
    for row in range(1, len(data.steps)):  # row i's step met the lags after step i - 1
        lags = {name: lag for name, s in data.source_lags.items() if (lag := s[row - 1]) is not None}
        if not lags or lags == shown:
            continue
        shown = lags
        several = len(data.source_lags) > 1
        text = ", ".join(f"{name} {lag_text(ms)}" if several else lag_text(ms) for name, ms in lags.items())
        _note_at_right(ax, f"lag {text}", row + 1.0, fontsize="x-small", color="#555555", gid="lag")


def lag_text(ms: int) -> str:
    """A lag as a reader says it: ``250 ms``, ``1.5 s``, ``2 min``, ``7 days``.

    >>> [lag_text(v) for v in (250, 1_500, 120_000, 5_400_000, 604_800_000)]
    ['250 ms', '1.5 s', '2 min', '1.5 h', '7 days']
    """
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms} ms"


def _draw_events(data: Timeline, ax: Axes, max_events: int) -> tuple[int, list[Any]]:
    """Dots per classification (invalid ones at the left edge); how many were drawn, legend handles."""
    from matplotlib.transforms import blended_transform_factory

    handles: list[Any] = []
    rows = _event_rows(data)
    drawn = _sample(data, max_events)
    at_edge = blended_transform_factory(ax.transAxes, ax.transData)
    for cls in ("on_time", "mildly_late", "very_late", "invalid"):
        picked = [i for i in drawn if data.events[i].classification == cls]
        if not picked:
            continue
        style = dict(_EVENT_STYLE[cls])
        ys = [rows[i] for i in picked]
        if cls == "invalid":
            points = ax.scatter(
                [0.0] * len(picked),
                ys,
                transform=at_edge,
                clip_on=False,
                zorder=5,
                gid="events-invalid",
                **style,
            )
        else:
            xs = [_num(t) for t in (data.events[i].time_ms for i in picked) if t is not None]
            points = ax.scatter(xs, ys, zorder=4, gid=f"events-{cls}", linewidths=0.6, **style)
        handles.append(points)
    return len(drawn), handles


def _draw_axes(data: Timeline, ax: Axes, lo: int, hi: int, drawn: int) -> None:
    """Limits, the UTC date axis, a labelled row per step (up to 25), the grid and the title."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import MaxNLocator

    count = len(data.steps)
    ax.set_xlim(_num(lo), _num(hi))
    ax.set_ylim(0.5, count + 1.0)
    locator = mdates.AutoDateLocator(tz=dt.UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.UTC))  # type: ignore[no-untyped-call]
    ax.set_xlabel("event time (UTC)")
    job = data.job_watermarks is not None
    ax.set_ylabel("arrival: " + ("micro-batch with input" if job else "step") + " (later ↑)")
    if count <= 25:
        ax.set_yticks(range(1, count + 1), [_step_label(i, s) for i, s in enumerate(data.steps)])
        ax.tick_params(axis="y", labelsize="small")
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="y", color="#E0E0E0", linewidth=0.6, zorder=-1)
    ax.set_axisbelow(True)
    ax.set_title(_title(data, drawn), loc="left", fontsize="medium")


def _title(data: Timeline, drawn: int) -> str:
    late = len(data.classified("mildly_late"))
    very = len(data.classified("very_late"))
    invalid = len(data.classified("invalid"))
    total = len(data.events)
    shown = f" (showing {drawn:,} of {total:,})" if drawn < total else ""
    counts = {s: len(data.with_status(s)) for s in ("fired", "refired", "open")}
    windows = (
        f"{len(data.windows)} windows "
        f"({counts['fired']} fired, {counts['refired']} re-fired, {counts['open']} open)"
    )
    head = f"Watermark timeline: {data.origin}"
    body = f"{total:,} events{shown}: {late} mildly late, {very} very late, {invalid} invalid; {windows}"
    if data.job_watermarks is not None and not data.watermarks_agree:
        body += "\nthe job reported a different watermark than the replay (dashed line)"
    return f"{head}\n{body}"
