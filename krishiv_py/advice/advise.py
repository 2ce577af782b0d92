"""Choosing the watermark from the data: the lag advisor and what-if replay.

:func:`advise_watermark` profiles the stream's own input
(:mod:`~krishiv_py.advice.profile`) and returns the lag that would have put
a share ``completeness`` of its events on time, the allowed lateness that
would have counted all but ``1 - caught`` of them in their windows, and
what each costs. :func:`what_if` replays the same input, in the same
micro-batches, through the reference model under each setting and tabulates
what a run would have emitted. Neither starts Spark.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.advice.profile import DelayHistogram, DisorderProfile, profile_event_times
from krishiv_py.advice.replay import event_ms, read_batches
from krishiv_py.errors import PlanError
from krishiv_py.model.reference import event_time_us
from krishiv_py.model.steps import Planned, reference_model_for
from krishiv_py.names import RESULT_KIND
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import AutoLag
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    SlidingWindow,
    TimeIntervalWindow,
    TumblingWindow,
    WindowSpec,
)
from krishiv_py.stateful.delays import upper_ms
from krishiv_py.stateful.grouping import group_ids

#: A stream or a job (anything with a plan).
_S = TypeVar("_S", bound=Planned)

__all__ = ["WatermarkAdvice", "advice_from_delays", "advise_plan", "advise_watermark", "what_if"]


@attrs.frozen(kw_only=True)
class WatermarkAdvice:
    """What the data says about the watermark lag and the allowed lateness.

    ``lag_ms`` puts a share ``completeness`` of the events on time (to 1 %:
    the delay histogram's resolution, rounded up); with it,
    ``allowed_lateness_ms`` keeps windows long enough that all but ``1 -
    caught`` of the events are counted (on time or mildly late). The costs:
    every result comes ``added_delay_ms`` after its window's end, and about
    ``windows_held`` windows stay in state past their end (windows per ms
    of event time times lag plus lateness; an estimate).
    """

    source: str
    lag_ms: int
    allowed_lateness_ms: int
    completeness: float
    caught: float
    current_lag_ms: int
    current_completeness: float
    added_delay_ms: int
    #: ``None`` when the advice comes from the operator's histogram (no per-window counts).
    windows_held: float | None
    window: str | None
    profile: DisorderProfile

    def describe(self) -> str:
        """The advice as text."""
        window = self.window or "no window (each event's window taken to end at its own time)"
        return "\n".join(
            [
                f"watermark advice for {window}",
                self.profile.describe(),
                f"  lag {self.lag_ms:,} ms puts {self.completeness:.3%} of the events on time "
                f"(the current lag {self.current_lag_ms:,} ms: {self.current_completeness:.3%})",
                f"  allowed lateness {self.allowed_lateness_ms:,} ms counts {self.caught:.3%} of them in "
                "their windows",
                f"  cost: results {self.added_delay_ms:,} ms after their window's end"
                + (
                    ""
                    if self.windows_held is None
                    else f"; ~{self.windows_held:,.0f} windows held past their end"
                ),
            ]
        )

    def _held_text(self) -> str:
        if self.windows_held is None:
            return ""
        return f"; ~{self.windows_held:,.0f} windows held past their end"

    def __str__(self) -> str:
        return self.describe()

    def _repr_html_(self) -> str:
        rows = [
            ("lag", f"{self.lag_ms:,} ms", f"{self.completeness:.3%} of events on time"),
            ("current lag", f"{self.current_lag_ms:,} ms", f"{self.current_completeness:.3%} on time"),
            ("allowed lateness", f"{self.allowed_lateness_ms:,} ms", f"{self.caught:.3%} counted"),
            ("result delay", f"{self.added_delay_ms:,} ms", "after each window's end"),
        ]
        if self.windows_held is not None:
            rows.append(("state", f"~{self.windows_held:,.0f} windows", "held past their end"))
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(a)}</th><td>{html.escape(b)}</td>"
            f"<td>{html.escape(c)}</td></tr>"
            for a, b, c in rows
        )
        title = html.escape(f"Watermark advice: source {self.source!r}, {self.window or 'no window'}")
        profile = html.escape(self.profile.describe())
        return f"<div><b>{title}</b><table>{body}</table><pre>{profile}</pre></div>"


def advise_watermark(
    stream: Planned, *, completeness: float = 0.999, caught: float = 0.9999
) -> WatermarkAdvice:
    """Advise the watermark lag and allowed lateness of ``stream`` from its own input.

    ``stream`` has a watermark (its time column and current lag are read
    from it) over a memory stream, files or records, and may go on to a
    window (then the lateness advice and the window counts use it).
    """
    return advise_plan(stream.plan, completeness=completeness, caught=caught)


def advise_plan(
    plan: n.PlanNode,
    *,
    completeness: float = 0.999,
    caught: float = 0.9999,
    keys: Sequence[str] | None = None,
) -> WatermarkAdvice:
    """:func:`advise_watermark` for a plan (a job's, say); ``keys`` default to the window's."""
    _check_shares(completeness, caught)
    mark, window, window_keys = _parts(plan)
    keys = tuple(keys) if keys else window_keys
    source = mark.input
    assert isinstance(source, n.SOURCE_TYPES)
    batches = read_batches(source)
    if not sum(b.num_rows for b in batches):
        raise PlanError(
            f"the stream {source.name!r} has no rows yet: there is no data to profile; "
            "send events (or give it files) first, then ask for advice"
        )
    table = pa.concat_tables(batches)
    ts = event_ms(table, mark.column)
    valid = ~np.isnan(ts)
    spec = window.window if window is not None else None
    first_end, last_end = _window_ends(spec, ts)
    key_values = _key_ids(table, keys) if keys else None
    profile = profile_event_times(
        ts, source=source.name, keys=key_values, first_window_end_ms=first_end, lag_ms=mark.lag_ms
    )
    lag = profile.delays.quantile(completeness)
    lateness = _lateness_needed(ts[valid].astype(np.int64), last_end[valid], lag, caught)
    held = _windows_per_ms(
        spec, ts[valid].astype(np.int64), None if key_values is None else key_values[valid]
    )
    return WatermarkAdvice(
        source=source.name,
        lag_ms=lag,
        allowed_lateness_ms=lateness,
        completeness=completeness,
        caught=caught,
        current_lag_ms=mark.lag_ms,
        current_completeness=profile.delays.share_within(mark.lag_ms),
        added_delay_ms=lag,
        windows_held=held * (lag + lateness),
        window=None if spec is None else n._window_text(spec),
        profile=profile,
    )


def advice_from_delays(
    plan: n.PlanNode, counts: Sequence[int], *, completeness: float, caught: float, invalid: int = 0
) -> WatermarkAdvice:
    """Advice from a delay histogram's ``counts`` (the stateful operator's, as a job ran).

    The histogram has no event times, so the lateness advice takes each
    event's window to end at the event's own time (an upper bound; reading
    the input, :func:`advise_plan` uses each event's window) and the state
    held is not estimated.
    """
    _check_shares(completeness, caught)
    mark, window, _ = _parts(plan)
    source = mark.input
    assert isinstance(source, n.SOURCE_TYPES)
    delays = DelayHistogram(counts=tuple(int(c) for c in counts))
    last = max((b for b, c in enumerate(delays.counts) if c), default=0)
    profile = DisorderProfile(
        source=source.name,
        events=delays.total,
        invalid=invalid,
        behind=delays.total - (delays.counts[0] if delays.counts else 0),
        max_delay_ms=upper_ms(last),
        delays=delays,
    )
    lag = delays.quantile(completeness)
    return WatermarkAdvice(
        source=source.name,
        lag_ms=lag,
        allowed_lateness_ms=max(delays.quantile(caught) - lag, 0),
        completeness=completeness,
        caught=caught,
        current_lag_ms=mark.lag_ms,
        current_completeness=delays.share_within(mark.lag_ms),
        added_delay_ms=lag,
        windows_held=None,
        window=None if window is None else n._window_text(window.window),
        profile=profile,
    )


def _check_shares(completeness: float, caught: float) -> None:
    for name, value in (("completeness", completeness), ("caught", caught)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
            raise PlanError(f"{name} must be a share of the events in (0, 1], e.g. 0.999; got {value!r}")


def _parts(plan: n.PlanNode) -> tuple[n.Watermark, n.WindowAggregate | None, tuple[str, ...]]:
    marks = n.watermarks_of(plan)
    if len(marks) != 1:
        raise PlanError(
            "watermark advice needs a stream with one .watermark(column, lag_ms) "
            f"(this one has {len(marks)}); advise each source's stream on its own"
        )
    mark = marks[0]
    if not isinstance(mark.input, n.SOURCE_TYPES):
        raise PlanError("watermark advice reads the source right under .watermark(); move filters after it")
    windows = n.window_aggregates(plan)
    window = windows[-1] if windows else None  # the first window over the source (walk is top-down)
    return mark, window, window.keys if window is not None else ()


def _key_ids(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """One integer per event naming its key (the kernel's grouping: nulls are one key)."""
    for k in keys:
        if k not in table.column_names:
            raise PlanError(f"no key column {k!r}; the columns are: {', '.join(table.column_names)}")
    ids, _, _ = group_ids([table.column(k).combine_chunks() for k in keys])
    return ids


def _window_ends(spec: WindowSpec | None, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The end of each event's first and last window (ms); a session's is ``ts + gap`` (its own)."""
    t = np.where(np.isnan(ts), 0, ts).astype(np.int64)
    if isinstance(spec, TumblingWindow):
        end = t - ((t - spec.offset_ms) % spec.size_ms) + spec.size_ms
        return end, end
    if isinstance(spec, SlidingWindow | TimeIntervalWindow):
        size, slide = spec.size_ms, spec.slide_ms
        last_start = t - t % slide
        first_start = (np.floor_divide(t - size, slide) + 1) * slide  # the first start > t - size
        keep = spec.discard_age_ms if isinstance(spec, TimeIntervalWindow) else 0
        return first_start + size, last_start + size + keep
    if isinstance(spec, SessionWindow):
        end = t + spec.gap_ms
        return end, end
    if isinstance(spec, EventSlidingWindow):
        end = t + spec.size_ms + 1 + spec.grace_ms  # the window that ends at the event, closed by the grace
        return end, end
    return t, t


def _lateness_needed(ts: np.ndarray, last_end: np.ndarray, lag: int, caught: float) -> int:
    """The smallest allowed lateness that counts a share ``caught`` of the events, with ``lag``.

    An event is very late when the watermark it meets (``max_seen - lag``)
    has passed the end of its last window by at least the lateness.
    """
    if not len(ts):
        return 0
    seen = np.concatenate([[ts[0]], np.maximum.accumulate(ts)[:-1]])
    need = np.maximum(seen - lag - last_end + 1, 0)
    return int(np.quantile(need, caught, method="higher"))


def _windows_per_ms(spec: WindowSpec | None, ts: np.ndarray, keys: np.ndarray | None) -> float:
    """Distinct (key, window) pairs per ms of event time: how fast windows close."""
    if not len(ts):
        return 0.0
    span = max(int(ts.max() - ts.min()), 1)
    size = getattr(spec, "size_ms", None) or getattr(spec, "gap_ms", None) or 1
    per_event = 1.0
    if isinstance(spec, SlidingWindow):
        per_event = spec.size_ms / spec.slide_ms
    bucket = ts // size
    pairs = bucket[:, None] if keys is None else np.stack([keys, bucket], axis=1)
    return float(len(np.unique(pairs, axis=0)) * per_event / span)


# --- what-if replay ----------------------------------------------------------------------------


def what_if(
    source: _S,
    pipeline: Callable[[_S], Planned] | None = None,
    *,
    lag_ms: Sequence[int | AutoLag | Literal["auto"]],
    allowed_lateness_ms: Sequence[int] = (0,),
    batch_rows: int | None = None,
) -> pa.Table:
    """Replay ``source``'s input under each lag and allowed lateness; one row per setting.

    ``source`` is a stream (``pipeline(source)`` builds the windowed
    pipeline; without ``pipeline`` the stream is that pipeline) or a job
    (its own pipeline). The input is read in the job's micro-batches
    (:mod:`~krishiv_py.advice.replay`) and run through the reference model,
    which is exact for every pipeline it runs (SPEC's rules, one event at a
    time). Columns: the setting, ``windows_emitted``, ``refirings`` (results
    beyond each window's first), ``retractions``, ``on_time``,
    ``mildly_late``, ``very_late``, ``mean_delay_ms``/``p99_delay_ms`` (how
    long after its window's end, in stream time, a result came, over the
    results before the end of input) and ``differing_windows``: windows whose
    last result differs from the complete answer (all input in one batch),
    missing or extra (null in discarding mode, whose results are deltas).

    A lag may be ``"auto"`` (or a :class:`~krishiv_py.AutoLag` with its own
    quantile, window and clamps): the lag each micro-batch runs with is chosen
    from the delays of the rows before it (SPEC 3.4; docs/watermarks.md, "An
    automatic lag"). Its row has ``lag_ms`` null, ``auto_lag`` the setting
    and ``final_lag_ms`` the lag it had chosen by the end (a fixed lag's row:
    the lag itself).
    """
    plan = _what_if_plan(source, pipeline)
    lags = _lag_settings(lag_ms)
    latenesses = _settings("allowed_lateness_ms", allowed_lateness_ms)
    window = n.window_aggregates(plan)[0]
    if isinstance(window.window, EventSlidingWindow | TimeIntervalWindow) and latenesses != [0]:
        raise PlanError("allowed_lateness_ms does not apply to this window kind (it has its own grace)")
    mark = n.watermarks_of(plan)[0]
    assert isinstance(mark.input, n.SOURCE_TYPES)
    batches = [b.to_pylist() for b in read_batches(mark.input, batch_rows)]
    complete = _final_results(_replay(_with(plan, 0, 0), [[r for b in batches for r in b]]), window)
    rows = []
    for lag, lateness in itertools.product(lags, latenesses):
        auto, fixed = (lag, 0) if isinstance(lag, AutoLag) else (None, lag)
        run = _replay(_with(plan, fixed, lateness), batches, auto)
        rows.append(_what_if_row(run, window, complete, lag, lateness))
    return pa.Table.from_pylist(rows, schema=_WHAT_IF_SCHEMA)


def _what_if_row(
    run: _Run,
    window: n.WindowAggregate,
    complete: dict[tuple[Any, ...], dict[str, Any] | None],
    lag: int | AutoLag,
    lateness: int,
) -> dict[str, Any]:
    """:func:`what_if`'s row of one setting: what its run emitted, how late, and how far from ``complete``."""
    auto = lag if isinstance(lag, AutoLag) else None
    metrics = run.metrics
    emits = [r for r in run.results if r.get(RESULT_KIND, "emit") == "emit"]
    identities = {_identity(r, window) for r in emits}
    delays = np.asarray(run.delays, np.float64)
    differing = None
    if window.emission.accumulation != "discarding":
        differing = _differing(_final_results(run, window), complete)
    return {
        "lag_ms": None if auto else lag,
        "allowed_lateness_ms": lateness,
        "windows_emitted": metrics.windows_emitted,
        "refirings": len(emits) - len(identities),
        "retractions": metrics.retractions,
        "on_time": metrics.on_time_events,
        "mildly_late": metrics.mildly_late_events,
        "very_late": metrics.very_late_events,
        "mean_delay_ms": float(delays.mean()) if len(delays) else None,
        "p99_delay_ms": float(np.quantile(delays, 0.99, method="higher")) if len(delays) else None,
        "differing_windows": differing,
        "auto_lag": repr(auto) if auto else None,
        "final_lag_ms": run.final_lag_ms,
    }


_WHAT_IF_SCHEMA = pa.schema(
    [
        pa.field(name, pa.float64() if name.endswith("delay_ms") else pa.int64())
        for name in (
            "lag_ms",
            "allowed_lateness_ms",
            "windows_emitted",
            "refirings",
            "retractions",
            "on_time",
            "mildly_late",
            "very_late",
            "mean_delay_ms",
            "p99_delay_ms",
            "differing_windows",
        )
    ]
    + [pa.field("auto_lag", pa.string()), pa.field("final_lag_ms", pa.int64())]
)


def _is_job(source: object) -> bool:
    """A started job (it has a plan and can be stopped), not a stream being built."""
    return callable(getattr(source, "await_termination", None))


def _what_if_plan(source: Any, pipeline: Callable[[Any], Planned] | None) -> n.PlanNode:
    if not isinstance(getattr(source, "plan", None), n.PlanNode):
        raise PlanError(f"what_if() takes a Stream or a Job, got {type(source).__name__}")
    if _is_job(source):
        if pipeline is not None:
            raise PlanError("what_if(job, ...) replays the job's own pipeline: leave pipeline out")
        plan = source.plan
    else:
        built = pipeline(source) if pipeline is not None else source
        if _is_job(built) or not isinstance(getattr(built, "plan", None), n.PlanNode):
            raise PlanError(f"pipeline must return a Stream, got {type(built).__name__}")
        plan = built.plan
    if not isinstance(plan, n.WindowAggregate) or n.cascade_of(plan) is not None:
        raise PlanError(
            "what_if() replays source -> watermark -> [key_by] -> window -> agg; stages after the window "
            "do not change what is late (replay the window alone)"
        )
    _parts(plan)
    return plan


def _settings(name: str, values: Sequence[int]) -> list[int]:
    if isinstance(values, int | str) or not isinstance(values, Sequence) or not values:
        raise PlanError(f"{name} takes a list of milliseconds, e.g. [0, 1_000, 5_000]; got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise PlanError(f"{name}: every value must be a whole number of ms >= 0, got {v!r}")
    return list(dict.fromkeys(values))


def _lag_settings(values: Sequence[int | AutoLag | Literal["auto"]]) -> list[int | AutoLag]:
    """``what_if``'s lags: whole ms >= 0, ``"auto"`` (:class:`AutoLag`'s defaults) or an AutoLag."""
    if isinstance(values, int | str) or not isinstance(values, Sequence) or not values:
        raise PlanError(
            f"lag_ms takes a list of milliseconds or 'auto', e.g. [1_000, 'auto'], got {values!r}"
        )
    lags: list[int | AutoLag] = []
    for v in values:
        if isinstance(v, str) and v != "auto":
            raise PlanError(f"lag_ms: every value is a whole number of ms >= 0 or 'auto', got {v!r}")
        if v == "auto":
            lags.append(AutoLag())
        elif isinstance(v, AutoLag):
            lags.append(v)
        else:
            lags += _settings("lag_ms", [v])
    return list(dict.fromkeys(lags))


def _with(plan: n.PlanNode, lag: int, lateness: int) -> n.PlanNode:
    """``plan`` with every watermark's lag and every window's allowed lateness replaced."""
    kids = tuple(_with(c, lag, lateness) for c in n.children(plan))
    node = n.with_children(plan, kids)
    if isinstance(node, n.Watermark):
        return attrs.evolve(node, lag_ms=lag)
    if isinstance(node, n.WindowAggregate) and not isinstance(
        node.window, EventSlidingWindow | TimeIntervalWindow
    ):
        return attrs.evolve(node, emission=attrs.evolve(node.emission, allowed_lateness_ms=lateness))
    return node


@attrs.frozen
class _Run:
    results: list[dict[str, Any]]
    delays: list[int]
    metrics: Any
    #: The lag in force at the end (an automatic lag's last choice).
    final_lag_ms: int = 0


def _replay(plan: n.PlanNode, batches: list[list[dict[str, Any]]], auto: AutoLag | None = None) -> _Run:
    mark = n.watermarks_of(plan)[0]
    model = reference_model_for(plan, clock=lambda: 0.0, lag=auto)
    delays: list[int] = []
    seen: int | None = None
    for batch in batches:
        out = model.send(batch)
        for row in batch:
            us = event_time_us(row.get(mark.column))
            if us is not None:
                seen = us // 1000 if seen is None else max(seen, us // 1000)
        if seen is not None:
            delays += [
                max(seen - int(cast(int, r["window_end"])), 0)
                for r in out
                if r.get(RESULT_KIND, "emit") == "emit"
            ]
    final_lag_ms = max(model.source_lags().values())
    model.close()
    return _Run(list(model.results), delays, model.metrics, final_lag_ms)


def _identity(row: dict[str, Any], window: n.WindowAggregate) -> tuple[Any, ...]:
    return (*(row[k] for k in window.keys), row["window_start"], row["window_end"])


def _final_results(run: _Run, window: n.WindowAggregate) -> dict[tuple[Any, ...], dict[str, Any] | None]:
    last: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for row in run.results:
        kind = row.get(RESULT_KIND, "emit")
        last[_identity(row, window)] = row if kind == "emit" else None
    return last


def _differing(got: dict[tuple[Any, ...], Any], want: dict[tuple[Any, ...], Any]) -> int:
    wrong = 0
    for key in set(got) | set(want):
        a, b = got.get(key), want.get(key)
        if a is None or b is None:
            wrong += a is not b
        elif any(not _same(a[c], b.get(c)) for c in a if c != RESULT_KIND):
            wrong += 1
    return wrong


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)
