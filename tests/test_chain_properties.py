"""Chains of two and three operators (SPEC 3.13) on random disordered input, without Spark.

Each case is built with the public builder over memory sources, lowered
with :func:`~krishiv_py.planner.spark.lower.lower` and run by :class:`Glue`,
the stateful lowering's Spark glue in plain Python:

- a step is one micro-batch of one source's rows (or of a watermark marker),
  each source's rows in the operator's row layout (a join's side, its keys,
  its columns, the other side's null; ``__kp_ts`` in µs; ``__kp_seq``);
- the rows are split by key bucket, and each bucket with rows is called at
  the watermark the micro-batch before left (the least over the sources of
  the highest event time less the lag; none until every source has one);
- when a micro-batch moved the watermark, the job ticks the buckets it must
  wake (those holding something due, and those it has not heard from yet)
  in one more micro-batch, as ``StatefulJob`` does;
- with a stage, every bucket call hands every stage bucket its share and a
  report (:func:`~krishiv_py.stateful.stage.hand_on`), a join stage's other
  side is routed by its keys (:func:`~krishiv_py.stateful.stage.side_rows`),
  and each stage bucket that gets a row runs
  :func:`~krishiv_py.stateful.stage.step`, its state kept between
  micro-batches; the state of every bucket crosses Arrow IPC, as it does
  between Spark's calls.

The composition model (:class:`~krishiv_py.model.compose.ComposedModel`)
takes the same steps; after every step, and after every source closes, the
current results of both must agree: the net rows of a changelog (emits less
retractions), or for a window that fires again without retracting, the
last firing of each window. The bugs found are kept at the end, each at
its smallest, as a test of its own.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
import pyarrow as pa
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.api.keyed import KeyedStream
from krishiv_py.api.stream import JoinedStream, Stream
from krishiv_py.api.windowed import WindowAssigners
from krishiv_py.model.compose import (
    AggOf,
    ComposedModel,
    FilterOf,
    JoinOf,
    Op,
    SelectOf,
    Source,
    TopNOf,
    UnionOf,
    WindowOf,
    columns_of,
)
from krishiv_py.model.compose.ops import delay_of
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.names import BATCH_TS, BRANCH, JOIN_SIDE, RESULT_KIND, SEQ, TS_VALUE
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow
from krishiv_py.planner.spark.lower import lower, operator_links, operators_union
from krishiv_py.planner.spark.stateful import moves, with_buckets
from krishiv_py.stateful import stage
from krishiv_py.stateful._arrow import ipc_bytes, ipc_table
from krishiv_py.stateful.chain import ChainKernel
from krishiv_py.stateful.joins import JoinKernel
from krishiv_py.stateful.operator import OperatorSpec
from krishiv_py.stateful.protocol import Kernel
from krishiv_py.stateful.union import UnionKernel
from krishiv_py.types import to_schema

Row = dict[str, Any]
#: One step: ``("send", source, rows)``, ``("advance", source, ms)`` or ``("close", "", None)``.
Step = tuple[str, str, Any]
#: Aggregates by output name: ``(function, column)``, ``None`` for ``count(*)``.
Aggs = dict[str, tuple[str, str | None]]

#: Examples per property: the suite's share of its time budget (new ones every run; the
#: smallest bugs found are tests of their own below); ``nox -s deep`` (``CHAIN_EXAMPLES=400``)
#: digs deeper.
EXAMPLES = int(os.environ.get("CHAIN_EXAMPLES", "12"))
#: Key buckets of the operator and of its stage.
BUCKETS = 3

DDL = {
    "a": "user string, t bigint, ad string, v bigint",
    "b": "user string, t bigint, page string, w bigint",
    "c": "ad string, at bigint, campaign string",
    "d": "ad string, dt bigint, z bigint",
}
TIME = {"a": "t", "b": "t", "c": "at", "d": "dt"}
#: The values of the other columns: few, so keys repeat; nulls among them.
VALUES: dict[str, tuple[Any, ...]] = {
    "user": ("u1", "u1", "u2", None),
    "ad": ("a1", "a2", None),
    "v": (0, 1, 2, None),
    "page": ("p1", "p2"),
    "w": (0, 1, None),
    "campaign": ("x", "y"),
    "z": (0, 1, None),
}

# --- the cases: a stream built with the builder, and the same operators for the model --------------


@attrs.frozen
class Case:
    label: str
    stream: Stream
    model: Op
    sources: tuple[str, ...]


def _stream(name: str, lag: int) -> Stream:
    source = n.MemorySource(name=name, schema=to_schema(DDL[name]), path=f"/{name}")
    return Stream(None, source).watermark(TIME[name], lag)


def _source(name: str, lag: int) -> Source:
    return Source(name, TIME[name], tuple(f.name for f in to_schema(DDL[name])), lag_ms=lag)


def _positive_v(row: Any) -> bool:
    return row["v"] is not None and bool(row["v"] > 0)


def _not_u2(row: Any) -> bool:
    return row["user"] is not None and row["user"] != "u2"


def _not_a2(row: Any) -> bool:
    return row["ad"] is not None and row["ad"] != "a2"


def _in_order(row: Any) -> bool:
    return row["t"] is not None and row["t_right"] is not None and bool(row["t"] >= row["t_right"])


def _low_w(row: Any) -> bool:
    return row["w"] is None or bool(row["w"] < 1)


#: Filters between a join and the operator after it: the builder's, and the model's with SQL's nulls.
FILTERS: dict[str, tuple[Callable[[], kp.Expr], Callable[[Any], bool]]] = {
    "v > 0": (lambda: kp.col("v") > 0, _positive_v),
    "ad != 'a2'": (lambda: kp.col("ad") != "a2", _not_a2),
    "t >= t_right": (lambda: kp.col("t") >= kp.col("t_right"), _in_order),
    "w is null or w < 1": (lambda: kp.col("w").is_null() | (kp.col("w") < 1), _low_w),
}

JOIN_AGGS: Aggs = {
    "n": ("count", None),
    "nv": ("count", "v"),
    "sv": ("sum", "v"),
    "mw": ("max", "w"),
    "lt": ("min", "t_right"),
    "av": ("avg", "v"),
}
SOURCE_AGGS: Aggs = {name: agg for name, agg in JOIN_AGGS.items() if agg[1] in (None, "v")}
#: How the joins join: inner ones more often (an outer one after a join takes no allowed lateness).
HOWS: tuple[Literal["inner", "left", "right", "full"], ...] = (
    "inner",
    "inner",
    "inner",
    "left",
    "right",
    "full",
)
#: Result columns that may be null (an aggregate of nulls only).
NULLABLE = {"sv", "mw", "lt", "av"}
#: Keys of an operator after the join: the join's and more (the same call) or others (a stage).
AS_OF_HOWS: tuple[Literal["inner", "left"], ...] = ("inner", "left")
WINDOW_HOWS: tuple[Literal["inner", "left", "right", "full", "semi", "anti"], ...] = (
    "inner",
    "inner",
    "left",
    "right",
    "full",
    "semi",
    "anti",
)
AFTER_JOIN_KEYS: list[tuple[str, ...]] = [("user",), ("user", "ad"), ("ad",), ("page",), ("ad", "page")]


def _over(columns: Sequence[str]) -> Aggs:
    """Aggregates over an operator's numeric result columns (all of them take retractions)."""
    table: Aggs = {"c": ("count", None)}
    for c in columns:
        table |= {f"s_{c}": ("sum", c), f"m_{c}": ("max", c), f"l_{c}": ("min", c), f"a_{c}": ("avg", c)}
    return table


def _aggs(draw: st.DrawFn, table: Aggs) -> tuple[list[str], list[Any], list[ModelAgg]]:
    """Some aggregates of ``table``: their names, the builder's and the model's."""
    names = draw(st.lists(st.sampled_from(list(table)), min_size=1, max_size=3, unique=True))
    built = [getattr(kp, table[a][0])(kp.col(table[a][1] or "*")).alias(a) for a in names]
    specs = [ModelAgg(name=a, func=table[a][0], column=table[a][1]) for a in names]  # type: ignore[arg-type]
    return names, built, specs


def _lags(draw: st.DrawFn) -> dict[str, int]:
    return {s: draw(st.integers(0, 4)) for s in DDL}


def _join(
    draw: st.DrawFn, lags: dict[str, int], *, outer: bool = True, retracting: bool = False
) -> tuple[JoinedStream, JoinOf, str]:
    """``a`` joined with ``b`` by user: inner with any allowed lateness, or outer without any —
    or, with ``retracting`` (a window or an aggregation follows), with some: a retracting join."""
    lower_ms, upper_ms = -draw(st.integers(0, 10)), draw(st.integers(0, 6))
    how = draw(st.sampled_from(HOWS)) if outer else "inner"
    lateness = draw(st.sampled_from([0, 0, 5, 15, 40])) if how == "inner" or retracting else 0
    left, right = (_stream(s, lags[s]).key_by("user") for s in ("a", "b"))
    joined = left.interval_join(right, between=(lower_ms, upper_ms), how=how).allowed_lateness(lateness)
    if how != "inner" and lateness:
        joined = joined.accumulation("retracting")
    model = JoinOf(
        _source("a", lags["a"]),
        _source("b", lags["b"]),
        keys=("user",),
        between=(lower_ms, upper_ms),
        how=how,
        allowed_lateness_ms=lateness,
    )
    return joined, model, f"join {how} between=({lower_ms}, {upper_ms}) L={lateness}"


def _v_plus_w(row: Any) -> Any:
    return {**row, "v": None if row["v"] is None or row["w"] is None else row["v"] + row["w"]}


def _between(draw: st.DrawFn, joined: Stream, model: Op) -> tuple[Stream, Op, str]:
    """Maybe a filter, or a projection (``v`` replaced by ``v + w``), between the join and what follows."""
    which = draw(st.sampled_from([None, "v = v + w", *FILTERS]))
    if which is None:
        return joined, model, ""
    if which == "v = v + w":
        projected = joined.with_column("v", kp.col("v") + kp.col("w"))
        return projected, SelectOf(model, columns_of(model), fn=_v_plus_w), f" -> with_column {which}"
    expr, predicate = FILTERS[which]
    return joined.filter(expr()), FilterOf(model, predicate), f" -> filter {which}"


def _joined_rows(draw: st.DrawFn, *, retracting: bool = False) -> tuple[Stream, Op, str]:
    joined, model, label = _join(draw, _lags(draw), retracting=retracting)
    stream, op, more = _between(draw, joined, model)
    return stream, op, label + more


def _window(
    draw: st.DrawFn, stream: Stream, op: Op, keys: tuple[str, ...], table: Aggs, *, retracting: bool | None
) -> tuple[Stream, WindowOf, str, list[str]]:
    """A tumbling or sliding window per ``keys`` after ``stream``; ``retracting=None``: drawn (a
    window that an operator follows runs retracting under it whatever its accumulation)."""
    size = draw(st.sampled_from([5, 10]))
    slide = draw(st.sampled_from([size, size // 2 if size > 5 else size]))
    lateness = draw(st.sampled_from([0, 10]))
    if retracting is None:
        retracting = draw(st.booleans())
    names, built, specs = _aggs(draw, table)
    window = TumblingWindow(size_ms=size) if slide == size else SlidingWindow(size_ms=size, slide_ms=slide)
    assigners: WindowAssigners = stream.key_by(*keys) if keys else stream
    windowed = assigners.tumbling_window(size) if slide == size else assigners.sliding_window(size, slide)
    windowed = windowed.allowed_lateness(lateness)
    if retracting:
        windowed = windowed.accumulation("retracting")
    model = WindowOf(op, window, keys=keys, aggregates=specs, allowed_lateness_ms=lateness)
    label = f" -> {'retracting ' if retracting else ''}window {window!r} keys={keys} L={lateness} {names}"
    return windowed.agg(*built), model, label, names


def _retracting_over(stream: Stream) -> bool | None:
    """A window's ``retracting`` over ``stream``: a window over retractions retracts itself (it may
    lose every row it fired with); else drawn."""
    return True if RESULT_KIND in stream.columns else None


def _first(
    draw: st.DrawFn, stream: Stream, op: Op, keys: tuple[str, ...], table: Aggs, *, retracting: bool | None
) -> tuple[Stream, Op, str, list[str]]:
    """An aggregation or a window per ``keys``; its result columns last."""
    if draw(st.booleans()):
        names, built, specs = _aggs(draw, table)
        label = f" -> agg keys={keys} {names}"
        return (
            stream.key_by(*keys).agg(*built),
            AggOf(op, keys=keys, aggregates=specs),
            label,
            [*keys, *names],
        )
    stream, window, label, names = _window(draw, stream, op, keys, table, retracting=retracting)
    return stream, window, label, [*keys, "window_start", "window_end", *names]


def _then_agg(
    draw: st.DrawFn, stream: Stream, op: Op, columns: list[str], keys: list[str]
) -> tuple[Stream, Op, str]:
    """An aggregation (or a top-N) over the results of ``op`` (whose columns are ``columns``), keyed
    by ``keys``: both take the retractions of what they follow."""
    if draw(st.integers(0, 2)) == 0:
        count, ascending = draw(st.integers(1, 2)), draw(st.booleans())
        by = tuple(draw(st.lists(st.sampled_from(columns), min_size=1, max_size=2, unique=True)))
        ties: Literal["all", "first"] = draw(st.sampled_from(["all", "first"]))
        top = stream.top_n(count, by=by, per="key", keys=tuple(keys), ties=ties, ascending=ascending)
        model = TopNOf(op, n=count, by=by, keys=tuple(keys), ties=ties, ascending=ascending)
        return top, model, f" -> top_n {count} by={by} keys={tuple(keys)} ascending={ascending} ties={ties}"
    table = _over([c for c in columns if c in JOIN_AGGS and c not in keys])
    if "c" in keys:  # (a count before is a key now)
        table["c2"] = table.pop("c")
    names, built, specs = _aggs(draw, table)
    final = stream.key_by(*keys).agg(*built)
    return final, AggOf(op, keys=tuple(keys), aggregates=specs), f" -> agg keys={tuple(keys)} {names}"


def _any_keys(draw: st.DrawFn, columns: Sequence[str]) -> list[str]:
    """Keys among ``columns`` (nullable numbers included)."""
    return draw(st.lists(st.sampled_from(list(columns)), min_size=1, max_size=2, unique=True))


@st.composite
def join_then_one(draw: st.DrawFn) -> Case:
    """A join, maybe a filter, then a window, an aggregation or a top-N per key, keyed by the join's
    key and more (in the join's call) or by other columns (a stage)."""
    what = draw(st.sampled_from(["window", "agg", "top_n"]))
    stream, op, label = _joined_rows(draw, retracting=True)
    keys = draw(st.sampled_from(AFTER_JOIN_KEYS + ([()] if what == "window" else [])))
    if what == "window":
        # A window over a retracting join retracts too (it may lose every row it fired with).
        retracting = RESULT_KIND in stream.columns or draw(st.booleans())
        final, op, more, _ = _window(draw, stream, op, keys, JOIN_AGGS, retracting=retracting)
    elif what == "agg":
        names, built, specs = _aggs(draw, JOIN_AGGS)
        final, op, more = stream.key_by(*keys).agg(*built), AggOf(op, keys=keys, aggregates=specs), ""
        more = f" -> agg keys={keys} {names}"
    else:
        count, by = draw(st.integers(1, 2)), draw(st.sampled_from([("t_right",), ("v",), ("w", "t")]))
        ties: Literal["all", "first"] = draw(st.sampled_from(["all", "first"]))
        ascending = draw(st.booleans())
        final = stream.top_n(count, by=by, per="key", keys=keys, ties=ties, ascending=ascending)
        op = TopNOf(op, n=count, by=by, keys=keys, ties=ties, ascending=ascending)
        more = f" -> top_n {count} by={by} keys={keys} ascending={ascending}"
    return Case(label + more, final, op, ("a", "b"))


@st.composite
def join_then_two(draw: st.DrawFn) -> Case:
    """A join, an aggregation or a retracting window in the join's call or as a stage, then an
    aggregation or a top-N over its results in the same call or as a stage (after a stage: a second
    move across the cluster, a stage after a stage)."""
    stream, op, label = _joined_rows(draw, retracting=True)
    keys = draw(st.sampled_from(AFTER_JOIN_KEYS))
    stream, op, more, columns = _first(draw, stream, op, keys, JOIN_AGGS, retracting=_retracting_over(stream))
    final, model, last = _then_agg(draw, stream, op, columns, _any_keys(draw, columns))
    return Case(label + more + last, final, model, ("a", "b"))


@st.composite
def one_source_then_two(draw: st.DrawFn) -> Case:
    """One source, an aggregation or a window per key, then an aggregation over its results."""
    lag = draw(st.integers(0, 4))
    keys = draw(st.sampled_from([("user",), ("user", "ad"), ("ad",)]))
    first = _first(draw, _stream("a", lag), _source("a", lag), keys, SOURCE_AGGS, retracting=None)
    stream, op, label, columns = first
    final, model, last = _then_agg(draw, stream, op, columns, _any_keys(draw, columns))
    return Case("a" + label + last, final, model, ("a",))


@st.composite
def chains_of_three(draw: st.DrawFn) -> Case:
    """A join or one source, then three operators, each keyed by any columns of the one before
    (the same call, or a stage: up to three moves across the cluster, each stage after a stage)."""
    keys: tuple[str, ...]
    sources: tuple[str, ...]
    if draw(st.booleans()):
        stream, op, label = _joined_rows(draw, retracting=True)
        keys, table, sources = draw(st.sampled_from(AFTER_JOIN_KEYS)), JOIN_AGGS, ("a", "b")
    else:
        lag = draw(st.integers(0, 4))
        stream, op, label = _stream("a", lag), _source("a", lag), "a"
        keys = draw(st.sampled_from([("user",), ("ad",), ("user", "ad")]))
        table, sources = SOURCE_AGGS, ("a",)
    stream, op, more, columns = _first(draw, stream, op, keys, table, retracting=_retracting_over(stream))
    label += more
    for _ in range(2):
        stream, op, more = _then_agg(draw, stream, op, columns, _any_keys(draw, columns))
        columns, label = [c for c in stream.columns if c != RESULT_KIND], label + more
    return Case(label, stream, op, sources)


B_AGGS: Aggs = {"nb": ("count", None), "mw": ("max", "w"), "sw": ("sum", "w")}
#: Aggregates both sources have the columns of (a union's windows have the same result columns).
BOTH_AGGS: Aggs = {"n": ("count", None), "mt": ("max", "t"), "st": ("sum", "t")}


@st.composite
def union_then_more(draw: st.DrawFn) -> Case:
    """A window of ``a`` and one of ``b`` per user (the same aggregates; fired once, or corrected),
    their union, then an aggregation or a window per any keys, maybe an aggregation after it."""
    lags = _lags(draw)
    names, built, specs = _aggs(draw, BOTH_AGGS)
    refires = [draw(st.sampled_from([0, 0, 10])) for _ in range(2)]
    retracting = any(refires) or draw(st.booleans())
    streams: list[Stream] = []
    models: list[Op] = []
    label = ""
    for name, lateness in zip(("a", "b"), refires, strict=True):
        size = draw(st.sampled_from([5, 10]))
        windowed = _stream(name, lags[name]).key_by("user").tumbling_window(size).allowed_lateness(lateness)
        if retracting:
            windowed = windowed.accumulation("retracting")
        streams.append(windowed.agg(*built))
        models.append(
            WindowOf(
                _source(name, lags[name]),
                TumblingWindow(size_ms=size),
                keys=("user",),
                aggregates=specs,
                allowed_lateness_ms=lateness,
            )
        )
        label += f"{name} (lag {lags[name]}) -> window {size} L={lateness} {names}; "
    union, model = streams[0].union(streams[1]), UnionOf(tuple(models))
    columns = ["user", "window_start", "window_end", *names]
    if draw(st.booleans()):
        final, op, more = _then_agg(draw, union, model, columns, _any_keys(draw, columns))
    else:
        keys = _any_keys(draw, ["user", *names])  # (a window's bounds are its own)
        table: Aggs = {"c": ("count", None), **{f"s_{a}": ("sum", a) for a in names}}
        agg_names, more_built, more_specs = _aggs(draw, table)
        by: WindowAssigners = union.key_by(*keys) if keys else union
        size, lateness = draw(st.sampled_from([10, 20])), draw(st.sampled_from([0, 0, 10]))
        windowed = by.tumbling_window(size).allowed_lateness(lateness)
        if retracting or lateness or draw(st.booleans()):
            windowed = windowed.accumulation("retracting")
        final = windowed.agg(*more_built)
        op = WindowOf(
            model,
            TumblingWindow(size_ms=size),
            keys=tuple(keys),
            aggregates=more_specs,
            allowed_lateness_ms=lateness,
        )
        more = f" -> window {size} keys={keys} L={lateness} {agg_names}"
    return Case(label + "union" + more, final, op, ("a", "b"))


@st.composite
def two_windows_joined(draw: st.DrawFn) -> Case:
    """A window of ``a`` and one of ``b`` per user (each fired once, or corrected), maybe a filter or
    a projection after either, their results joined by user: both windows in one operator, the join
    a stage after it (the filters and projections in it, each over its own side's results)."""
    lags = _lags(draw)
    sides: list[tuple[KeyedStream, Op]] = []
    label = ""
    refired = 0
    for name, table in (("a", SOURCE_AGGS), ("b", B_AGGS)):
        size = draw(st.sampled_from([5, 10]))
        names, built, specs = _aggs(draw, table)
        windowed = _stream(name, lags[name]).key_by("user").tumbling_window(size)
        refires = draw(st.sampled_from([0, 0, 10]))
        if refires:
            windowed = windowed.allowed_lateness(refires).accumulation("retracting")
            refired = max(refired, refires + 1)
        model: Op = WindowOf(
            _source(name, lags[name]),
            TumblingWindow(size_ms=size),
            keys=("user",),
            aggregates=specs,
            allowed_lateness_ms=refires,
        )
        results: Stream = windowed.agg(*built)
        label += f"{name} (lag {lags[name]}) -> window {size} L={refires} {names}"
        if draw(st.booleans()):  # runs in the join stage, over this side's results only
            results, model, label = (
                results.filter(kp.col("user") != "u2"),
                FilterOf(model, _not_u2),
                label + " -> filter",
            )
        if draw(st.booleans()):
            kind = [RESULT_KIND] if RESULT_KIND in results.columns else []
            results = results.select("user", "window_start", "window_end", *names, *kind)
            model = SelectOf(model, ("user", "window_start", "window_end", *names))
            label += " -> select"
        sides.append((results.key_by("user"), model))
        label += "; "
    low, high = -draw(st.integers(0, 12)), draw(st.integers(0, 12))
    how = draw(st.sampled_from(HOWS))
    lateness = draw(st.sampled_from([0, 0, 10]))
    joined = sides[0][0].interval_join(sides[1][0], between=(low, high), how=how).allowed_lateness(lateness)
    if (how != "inner" and lateness) or refired:
        joined = joined.accumulation("retracting")
    joined_model = JoinOf(
        sides[0][1],
        sides[1][1],
        keys=("user",),
        between=(low, high),
        how=how,
        allowed_lateness_ms=lateness + refired,
    )
    label += f"join {how} between=({low}, {high}) L={lateness}"
    return Case(label, joined, joined_model, ("a", "b"))


def _second_window(
    draw: st.DrawFn,
    first: Stream,
    first_model: Op,
    keys: tuple[str, ...],
    names: list[str],
    *,
    retracting: bool,
) -> tuple[Stream, Op, str, tuple[str, ...], list[str]]:
    """A tumbling window of ``first``'s results (a cascade) keyed by some of its ``keys`` (the same
    call or a stage); ``retracting``: it must retract (else drawn, or forced by its lateness)."""
    table: Aggs = {"c": ("count", None), **{f"s_{a}": ("sum", a) for a in names if a.startswith(("n", "s"))}}
    second_keys = (
        tuple(draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))) if keys else ()
    )
    size = draw(st.sampled_from([10, 20]))
    lateness = draw(st.sampled_from([0, 0, 10]))
    agg_names, built, specs = _aggs(draw, table)
    by: WindowAssigners = first.key_by(*second_keys) if second_keys else first
    windowed = by.tumbling_window(size).allowed_lateness(lateness)
    if retracting or lateness or draw(st.booleans()):
        windowed = windowed.accumulation("retracting")
    op: Op = WindowOf(
        first_model,
        TumblingWindow(size_ms=size),
        keys=second_keys,
        aggregates=specs,
        allowed_lateness_ms=lateness,
    )
    label = f" -> window tumbling {size} keys={second_keys} L={lateness} {agg_names}"
    return windowed.agg(*built), op, label, second_keys, agg_names


def _window_top_n(
    draw: st.DrawFn, windowed: Stream, op: Op, keys: tuple[str, ...], names: list[str]
) -> tuple[Stream, Op, str]:
    """Window top-N of a retracting window's results: per window and some of its ``keys``."""
    count, ascending = draw(st.integers(1, 2)), draw(st.booleans())
    by = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)))
    per = tuple(draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))) if keys else ()
    ties: Literal["all", "first"] = draw(st.sampled_from(["all", "first"]))
    top = windowed.top_n(count, by=by, keys=per, ties=ties, ascending=ascending)
    group = ("window_start", "window_end", *per)
    model = TopNOf(op, n=count, by=by, keys=group, ties=ties, ascending=ascending)
    return top, model, f" -> window top_n {count} by={by} keys={per} ascending={ascending} ties={ties}"


@st.composite
def join_then_windows(draw: st.DrawFn) -> Case:
    """A join, a window of its rows per any keys, then a window of that window's results (a cascade,
    keyed by some of its keys: in the same call or a stage), maybe an aggregation or a window top-N
    after it."""
    joined, model, label = _joined_rows(draw, retracting=True)
    keys = draw(st.sampled_from(AFTER_JOIN_KEYS))
    join = n.stateless_below(joined.plan)
    assert isinstance(join, n.Join)
    first, first_model, more, names = _window(
        draw, joined, model, keys, JOIN_AGGS, retracting=_retracting_over(joined)
    )
    label += more
    final, op, more, second_keys, agg_names = _second_window(
        draw, first, first_model, keys, names, retracting=RESULT_KIND in joined.columns
    )
    label += more
    if draw(st.booleans()):
        columns = [*second_keys, "window_start", "window_end", *agg_names]
        final, op, more = _then_agg(draw, final, op, columns, _any_keys(draw, columns))
        label += more
    elif RESULT_KIND in final.columns and draw(st.booleans()):
        final, op, more = _window_top_n(draw, final, op, second_keys, agg_names)
        label += more
    return Case(label, final, op, ("a", "b"))


def _many(row: Any) -> bool:
    return row["n"] is not None and bool(row["n"] > 1)


@st.composite
def source_then_windows(draw: st.DrawFn) -> Case:
    """One source, a window per key (accumulating or retracting, firing once or again), then a
    window top-N of its results, or a window of them keyed by some of its keys (a cascade: the same
    call or a stage; maybe a filter between), maybe a third window, a window top-N or an aggregation
    after that."""
    lag = draw(st.integers(0, 4))
    keys = draw(st.sampled_from([("user",), ("user", "ad"), ("ad",)]))
    retracting = draw(st.booleans())
    op: Op
    first, op, label, names = _window(
        draw, _stream("a", lag), _source("a", lag), keys, SOURCE_AGGS, retracting=retracting
    )
    label = "a" + label
    if retracting and draw(st.booleans()):
        final, op, more = _window_top_n(draw, first, op, keys, names)
        return Case(label + more, final, op, ("a",))
    if "n" in names and draw(st.booleans()):
        first, op, label = first.filter(kp.col("n") > 1), FilterOf(op, _many), label + " -> filter n > 1"
    final, op, more, second_keys, agg_names = _second_window(draw, first, op, keys, names, retracting=False)
    label += more
    retracting = RESULT_KIND in final.columns
    after = draw(st.sampled_from(["top_n", "agg", "window", None] if retracting else ["window", None]))
    if after == "window":  # a third level, over a window that may fire again without retracting
        final, op, more, _, _ = _second_window(draw, final, op, second_keys, agg_names, retracting=False)
        label += more
    elif after == "top_n":
        final, op, more = _window_top_n(draw, final, op, second_keys, agg_names)
        label += more
    elif after == "agg":
        columns = [*second_keys, "window_start", "window_end", *agg_names]
        final, op, more = _then_agg(draw, final, op, columns, _any_keys(draw, columns))
        label += more
    return Case(label, final, op, ("a",))


@st.composite
def per_key_then_window(draw: st.DrawFn) -> Case:
    """One source, an aggregation or a top-N per key without a window, then a retracting window of
    its changes (each at the event time of the row that made it, a retraction at its emit's) keyed
    by any of its columns (the same call or a stage), maybe an aggregation or a window after it."""
    lag = draw(st.integers(0, 4))
    keys = draw(st.sampled_from([("user",), ("ad",), ("user", "ad")]))
    op: Op
    stream, op = _stream("a", lag), _source("a", lag)
    label = "a"
    if draw(st.booleans()):
        names, built, specs = _aggs(draw, SOURCE_AGGS)
        stream, op = stream.key_by(*keys).agg(*built), AggOf(op, keys=keys, aggregates=specs)
        label += f" -> agg keys={keys} {names}"
        numbers = [a for a in names if a != "av"]
    else:
        count, by = draw(st.integers(1, 2)), draw(st.sampled_from([("v",), ("t",), ("v", "t")]))
        ties: Literal["all", "first"] = draw(st.sampled_from(["all", "first"]))
        stream = stream.top_n(count, by=by, per="key", keys=keys, ties=ties)
        op = TopNOf(op, n=count, by=by, keys=keys, ties=ties)
        label += f" -> top_n {count} by={by} keys={keys} ties={ties}"
        numbers = ["v"]
    columns = [c for c in stream.columns if c != RESULT_KIND]
    if draw(st.booleans()):  # an aggregation or a top-N over its changes first
        stream, op, more = _then_agg(draw, stream, op, columns, _any_keys(draw, columns))
        label += more
        schema = n.schema_of(stream.plan)
        columns = [f.name for f in schema if f.name != RESULT_KIND]
        numbers = [f.name for f in schema if f.dtype.name == "bigint" and f.name != "t"]
    window_keys = tuple(draw(st.lists(st.sampled_from(columns), unique=True, max_size=2)))
    table = _over(numbers)
    if "c" in window_keys:  # (a count before is a key now)
        table["c2"] = table.pop("c")
    size = draw(st.sampled_from([5, 10]))
    slide = draw(st.sampled_from([size, size // 2 if size > 5 else size]))
    agg_names, built, specs = _aggs(draw, table)
    by_keys: WindowAssigners = stream.key_by(*window_keys) if window_keys else stream
    window = TumblingWindow(size_ms=size) if slide == size else SlidingWindow(size_ms=size, slide_ms=slide)
    windowed = by_keys.tumbling_window(size) if slide == size else by_keys.sliding_window(size, slide)
    final: Stream = windowed.accumulation("retracting").agg(*built)
    model: Op = WindowOf(op, window, keys=window_keys, aggregates=specs)
    label += f" -> window {window!r} keys={window_keys} {agg_names}"
    after = [*window_keys, "window_start", "window_end", *agg_names]
    if draw(st.booleans()):  # keyed by the window's keys or bounds (its aggregates' names are taken)
        by_window = _any_keys(draw, [*window_keys, "window_start", "window_end"])
        final, model, more = _then_agg(draw, final, model, after, by_window)
        label += more
    return Case(label, final, model, ("a",))


def _operator_side(
    draw: st.DrawFn, lags: dict[str, int], left: bool, *, stream_ok: bool
) -> tuple[KeyedStream, Op, int, str]:
    """One side of a join by ``ad``: a stream, or one operator's results over streams (a join, a
    window, an aggregation or a top-N per ``ad``); with what the model's join keeps rows longer for
    it (as the join does: docs/joins.md)."""
    name, partner = ("a", "b") if left else ("c", "d")
    kinds = ["join", "window", "agg", "top_n"] + (["stream"] if stream_ok else [])
    kinds += ["window of a join", "agg of a join"] if left else []
    kind = draw(st.sampled_from(kinds))
    raw, op = _stream(name, lags[name]), _source(name, lags[name])
    if kind == "stream":
        return raw.key_by("ad"), op, 0, name
    if kind in ("window of a join", "agg of a join"):  # a chain of two operators as the side
        # (an inner join: an outer join pads at the query's watermark, the model's at its own two
        # sources', and an aggregation's change takes the time of the rows of its micro-batch)
        joined, join_model, label = _join(draw, lags, outer=kind == "window of a join", retracting=True)
        per_join: Aggs = {"nj": ("count", None)}
        if kind == "agg of a join":
            _, built, specs = _aggs(draw, per_join)
            agg = AggOf(join_model, keys=("ad",), aggregates=specs)
            return joined.key_by("ad").agg(*built).key_by("ad"), agg, END_OF_TIME_MS, f"{label} -> agg per ad"
        counted, window, more, _ = _window(draw, joined, join_model, ("ad",), per_join, retracting=True)
        kept = window.allowed_lateness_ms + join_model.allowed_lateness_ms  # its own, and the join's
        return counted.key_by("ad"), window, kept + 1 if kept else 0, label + more
    if kind == "join":
        if left:
            joined, model, label = _join(draw, lags, retracting=True)
        else:
            lateness = draw(st.sampled_from([0, 0, 5]))
            other = _stream(partner, lags[partner]).key_by("ad")
            joined = raw.key_by("ad").interval_join(other, between=(-4, 4)).allowed_lateness(lateness)
            partner_op = _source(partner, lags[partner])
            model = JoinOf(op, partner_op, keys=("ad",), between=(-4, 4), allowed_lateness_ms=lateness)
            label = f"join c with d by ad L={lateness}"
        return joined.key_by("ad"), model, model.allowed_lateness_ms, label
    value = "v" if left else None
    count = f"n_{name}"
    if kind == "window":
        size = draw(st.sampled_from([5, 10]))
        refires = draw(st.sampled_from([0, 0, 5]))
        windowed = raw.key_by("ad").tumbling_window(size)
        if refires:
            windowed = windowed.allowed_lateness(refires).accumulation("retracting")
        built = [kp.count(kp.col("*")).alias(count)]
        specs = [ModelAgg(name=count, func="count", column=None)]
        if value is not None:
            built.append(kp.sum(kp.col(value)).alias("sv"))
            specs.append(ModelAgg(name="sv", func="sum", column=value))
        tumbling = TumblingWindow(size_ms=size)
        window = WindowOf(op, tumbling, keys=("ad",), aggregates=specs, allowed_lateness_ms=refires)
        carried = refires + 1 if refires else 0
        return windowed.agg(*built).key_by("ad"), window, carried, f"{name} -> window {size} L={refires}"
    if kind == "agg":
        built = [kp.count(kp.col("*")).alias(count)]
        specs = [ModelAgg(name=count, func="count", column=None)]
        if value is not None:
            built.append(kp.max(kp.col(value)).alias("mv"))
            specs.append(ModelAgg(name="mv", func="max", column=value))
        agg = AggOf(op, keys=("ad",), aggregates=specs)
        return raw.key_by("ad").agg(*built).key_by("ad"), agg, END_OF_TIME_MS, f"{name} -> agg per ad"
    time = TIME[name]
    top = raw.top_n(1, by=(time,), per="key", keys=("ad",), ties="first")
    model_top = TopNOf(op, n=1, by=(time,), keys=("ad",), ties="first")
    return top.key_by("ad"), model_top, END_OF_TIME_MS, f"{name} -> latest per ad"


@st.composite
def joins_of_operators(draw: st.DrawFn) -> Case:
    """A join by ``ad`` of two operators' results, or of one's and a stream (SPEC 3.13, "joins of
    any stream"): a join of ``a`` and ``b``, a window, an aggregation or a top-N per ``ad`` of ``a``
    on the left; ``c``, or the same kinds over ``c`` (and ``d``) on the right; maybe an operator after."""
    lags = _lags(draw)
    left, left_model, left_kept, left_label = _operator_side(draw, lags, True, stream_ok=True)
    # A chain on the left (a window of a join by user per ad) runs its second operator as a stage;
    # two operators' results are joined when each runs in one call (docs/joins.md), so a stream.
    chain = isinstance(left_model, WindowOf | AggOf) and isinstance(left_model.input, JoinOf)
    right_model: Op
    if chain:
        right, right_model, right_kept, right_label = (
            _stream("c", lags["c"]).key_by("ad"),
            _source("c", lags["c"]),
            0,
            "c",
        )
    else:
        right, right_model, right_kept, right_label = _operator_side(
            draw, lags, False, stream_ok=not isinstance(left_model, Source)
        )
    low, high = -draw(st.integers(0, 8)), draw(st.integers(0, 8))
    lateness = draw(st.sampled_from([0, 0, 10]))
    kept = lateness + max(left_kept, right_kept)
    model: Op
    kind = draw(st.sampled_from(["interval", "interval", "window", "as-of"]))
    how: str
    if kind == "as-of":  # each left row with the right row of its key in force at its time
        as_of_how = draw(st.sampled_from(AS_OF_HOWS))
        how = as_of_how
        age = draw(st.sampled_from([None, 3, 10]))
        joined = left.as_of_join(right, how=as_of_how, max_age_ms=age).allowed_lateness(lateness)
        model = JoinOf(
            left_model,
            right_model,
            keys=("ad",),
            as_of=True,
            max_age_ms=age,
            how=how,
            allowed_lateness_ms=kept,
        )
        label = f"[{left_label}] as-of join {how} age={age} L={lateness} [{right_label}]"
    elif kind == "interval":
        how = draw(st.sampled_from(HOWS))
        joined = left.interval_join(right, between=(low, high), how=how).allowed_lateness(lateness)
        model = JoinOf(
            left_model, right_model, keys=("ad",), between=(low, high), how=how, allowed_lateness_ms=kept
        )
        label = f"[{left_label}] join {how} ({low}, {high}) L={lateness} [{right_label}]"
    else:  # a window join: the rows of each key and window of both sides (not of windows' results:
        # their window_start is the join's too)
        assume(not isinstance(left_model, WindowOf) and not isinstance(right_model, WindowOf))
        size = draw(st.sampled_from([5, 10]))
        window_how = draw(st.sampled_from(WINDOW_HOWS))
        how = window_how
        joined = (
            left.tumbling_window(size)
            .join(right.tumbling_window(size), how=window_how)
            .allowed_lateness(lateness)
        )
        tumbling = TumblingWindow(size_ms=size)
        model = JoinOf(
            left_model, right_model, keys=("ad",), window=tumbling, how=how, allowed_lateness_ms=kept
        )
        label = f"[{left_label}] window join {how} {size} L={lateness} [{right_label}]"
    changes = n.takes_retractions(left.stream.plan) or n.takes_retractions(right.stream.plan)
    if ((how != "inner" or kind == "as-of") and lateness) or changes:
        joined = joined.accumulation("retracting")
    final: Stream = joined
    op: Op = model
    more = ""
    if not (isinstance(model, JoinOf) and model.window is not None and lateness):  # else: a PlanError
        final, op, more = _maybe_after(draw, joined, model, ("ad",), {"c": ("count", None)}, (("ad",),))
    sources = tuple(s.name for s in n.sources_of(final.plan))
    return Case(label + more, final, op, tuple(dict.fromkeys(sources)))


def _page_as_ad(row: Any) -> Any:
    return {"ad": row["page"], "n": row["n"], "s": row["s"]}


def _joined_pair(
    draw: st.DrawFn, lags: dict[str, int], second: bool, retracting: bool
) -> tuple[Stream, Op, str]:
    """``a`` joined with ``b`` by user, or ``c`` with ``d`` by ad, as (ad, v) rows; both retracting
    or neither (a union's branches have the same columns)."""
    low, high = -draw(st.integers(0, 8)), draw(st.integers(0, 8))
    how = draw(st.sampled_from(HOWS))
    lateness = draw(st.sampled_from([0, 10, 20])) if retracting or how == "inner" else 0
    names, key, value = (("c", "d"), "ad", "z") if second else (("a", "b"), "user", "v")
    left, right = (_stream(s, lags[s]).key_by(key) for s in names)
    joined = left.interval_join(right, between=(low, high), how=how).allowed_lateness(lateness)
    if retracting:
        joined = joined.accumulation("retracting")
    model: Op = JoinOf(
        _source(names[0], lags[names[0]]),
        _source(names[1], lags[names[1]]),
        keys=(key,),
        between=(low, high),
        how=how,
        allowed_lateness_ms=lateness,
    )
    label = f"{names[0]} join {how} {names[1]} by {key} ({low}, {high}) L={lateness}"
    rows: Stream = joined
    if draw(st.booleans()):  # a filter after the join, in the union's call
        rows = joined.filter(kp.col(value).is_not_null())
        model = FilterOf(model, _not_null(value))
        label += f" -> filter {value} is not null"
    kind = [kp.col(RESULT_KIND)] if retracting else []
    projected = rows.select(kp.col("ad"), kp.col(value).alias("v"), *kind)
    return projected, SelectOf(model, ("ad", "v"), fn=_as_v(value)), label


def _not_null(column: str) -> Callable[[Mapping[str, object]], bool]:
    return lambda row: row[column] is not None


def _as_v(column: str) -> Callable[[Mapping[str, object]], Mapping[str, object]]:
    return lambda row: {"ad": row["ad"], "v": row[column]}


@st.composite
def unions_of_operators(draw: st.DrawFn) -> Case:
    """A union of two joins' rows or of two aggregations' changes (SPEC 3.13, a union of
    changelogs), each branch filtered or projected after its operator; then a window, an
    aggregation or a top-N per any keys, or a join with a stream."""
    lags = _lags(draw)
    if draw(st.booleans()):
        retracting = draw(st.booleans())
        pairs = [_joined_pair(draw, lags, second, retracting) for second in (False, True)]
        streams, models, labels = zip(*pairs, strict=True)
        columns = ["ad", "v"]
    else:  # a's count and sum of v per ad; b's per page, the page named ad
        first = (
            _stream("a", lags["a"])
            .key_by("ad")
            .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("s"))
        )
        second = (
            _stream("b", lags["b"])
            .key_by("page")
            .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("w")).alias("s"))
            .select(kp.col("page").alias("ad"), kp.col("n"), kp.col("s"), kp.col(RESULT_KIND))
        )
        count = ModelAgg(name="n", func="count", column=None)
        first_model = AggOf(
            _source("a", lags["a"]),
            keys=("ad",),
            aggregates=(count, ModelAgg(name="s", func="sum", column="v")),
        )
        second_model = SelectOf(
            AggOf(
                _source("b", lags["b"]),
                keys=("page",),
                aggregates=(count, ModelAgg(name="s", func="sum", column="w")),
            ),
            ("ad", "n", "s"),
            fn=_page_as_ad,
        )
        streams, models = (first, second), (first_model, second_model)
        labels = ("a -> agg per ad", "b -> agg per page (as ad)")
        columns = ["ad", "n", "s"]
    union, model = streams[0].union(streams[1]), UnionOf(tuple(models))
    label = f"[{labels[0]}] union [{labels[1]}]"
    what = draw(st.sampled_from(["window", "window", "agg", "top_n", "join", None]))
    changes = RESULT_KIND in union.columns
    if what == "join" and "n" in columns:  # the changes joined with c's rows by ad
        other = _stream("c", lags["c"]).key_by("ad")
        low, high = -draw(st.integers(0, 8)), draw(st.integers(0, 8))
        lateness = draw(st.sampled_from([0, 0, 10]))
        joined = union.key_by("ad").interval_join(other, between=(low, high)).allowed_lateness(lateness)
        final: Stream = joined.accumulation("retracting")
        op: Op = JoinOf(
            model,
            _source("c", lags["c"]),
            keys=("ad",),
            between=(low, high),
            allowed_lateness_ms=END_OF_TIME_MS,
        )
        return Case(label + f" -> join c ({low}, {high}) L={lateness}", final, op, ("a", "b", "c"))
    if what in ("window", "join"):
        keys = tuple(
            draw(st.sampled_from([("ad",), ("v",), ()] if "v" in columns else [("ad",), ("n",), ()]))
        )
        retracting = changes or draw(st.booleans())
        table = {"c": ("count", None), **({"sv": ("sum", "v")} if "v" in columns else {"sn": ("sum", "n")})}
        windowed, window, more, _ = _window(draw, union, model, keys, table, retracting=retracting or None)
        return Case(
            label + more, windowed, window, tuple(sorted(s.name for s in n.sources_of(windowed.plan)))
        )
    if what is None:
        return Case(label, union, model, tuple(sorted(s.name for s in n.sources_of(union.plan))))
    by = _any_keys(draw, columns)
    after, op, more = _then_agg(draw, union, model, columns, by)
    return Case(label + more, after, op, tuple(sorted(s.name for s in n.sources_of(after.plan))))


def _on_time(steps: list[Step], lags: dict[str, int], slack: dict[str, int] | None = None) -> list[Step]:
    """``steps`` without the rows late at their own source's watermark (by ``slack[source]`` ms or
    more, when given: a join's allowed lateness, within which a late row joins at either
    watermark): the glue runs every operator at the query's watermark, the model each at its own
    sources', so a late row may count in one and not the other (the properties above draw late
    rows where that is known)."""
    marks: dict[str, int] = {}
    out: list[Step] = []
    for kind, name, payload in steps:
        if kind == "send":
            own = marks.get(name)
            own = (
                None
                if own is None
                else own - (slack or {}).get(name, 0) + (1 if (slack or {}).get(name) else 0)
            )
            rows = [r for r in payload if own is None or r[TIME[name]] is None or r[TIME[name]] >= own]
            times = [r[TIME[name]] for r in rows if r[TIME[name]] is not None]
            if rows:
                out.append((kind, name, rows))
            mark = max(times) - lags[name] if times else None
        else:
            out.append((kind, name, payload))
            mark = payload
        if mark is not None:
            marks[name] = max(marks.get(name, mark), mark)
    return out


@st.composite
def three_joins(draw: st.DrawFn) -> Case:
    """``a`` joined with ``b`` by user, then with ``c`` by ad, then with ``d`` by ad (each on
    either side): a join stage after a join stage, ``d``'s rows routed into the second."""
    lags = _lags(draw)
    first_rows, first, label = _join(draw, lags, retracting=True)
    op: Op = first
    stream: Stream = first_rows
    kept = first.allowed_lateness_ms  # how much longer each join keeps rows than its own lateness
    for name in ("c", "d"):
        low, high = -draw(st.integers(0, 8)), draw(st.integers(0, 8))
        how = draw(st.sampled_from(HOWS))
        lateness = draw(st.sampled_from([0, 0, 10]))
        other, other_model = _stream(name, lags[name]).key_by("ad"), _source(name, lags[name])
        on_left = draw(st.booleans())
        pair = (stream.key_by("ad"), other) if on_left else (other, stream.key_by("ad"))
        joined = pair[0].interval_join(pair[1], between=(low, high), how=how).allowed_lateness(lateness)
        if (how != "inner" and lateness) or RESULT_KIND in stream.columns:
            joined = joined.accumulation("retracting")
        left, right = (op, other_model) if on_left else (other_model, op)
        kept += lateness
        op = JoinOf(left, right, keys=("ad",), between=(low, high), how=how, allowed_lateness_ms=kept)
        stream = joined
        label += f" -> join {how} with {name} ({'right' if on_left else 'left'}) ({low}, {high}) L={lateness}"
    return Case(label, stream, op, ("a", "b", "c", "d"))


def _maybe_after(
    draw: st.DrawFn,
    stream: Stream,
    op: Op,
    keys: tuple[str, ...],
    table: Aggs = JOIN_AGGS,
    ranks: tuple[tuple[str, ...], ...] = (("v",), ("w", "t")),
) -> tuple[Stream, Op, str]:
    """Maybe a window, an aggregation (of ``table``) or a top-N (by one of ``ranks``) per ``keys``
    (the join's) after a join stage: in its call."""
    what = draw(st.sampled_from([None, "window", "agg", "top_n"]))
    if what is None:
        return stream, op, ""
    if what == "window":
        retracting = RESULT_KIND in stream.columns or draw(st.booleans())
        final, window, more, _ = _window(draw, stream, op, keys, table, retracting=retracting)
        return final, window, more
    if what == "agg":
        names, built, specs = _aggs(draw, table)
        return stream.key_by(*keys).agg(*built), AggOf(op, keys=keys, aggregates=specs), f" -> agg {names}"
    count, by = draw(st.integers(1, 2)), draw(st.sampled_from(ranks))
    top = stream.top_n(count, by=by, per="key", keys=keys, ties="first")
    return top, TopNOf(op, n=count, by=by, keys=keys, ties="first"), f" -> top_n {count} by={by}"


@st.composite
def join_of_join(draw: st.DrawFn) -> Case:
    """``a`` joined with ``b`` by user, then with ``c`` by ad, on either side: a join stage."""
    lags = _lags(draw)
    joined_rows, first, label = _join(draw, lags, retracting=True)  # an outer one with lateness retracts
    joined, first_model, more = _between(draw, joined_rows, first)  # run in the join stage
    label += more
    low, high = -draw(st.integers(0, 8)), draw(st.integers(0, 8))
    how = draw(st.sampled_from(HOWS))
    lateness = draw(st.sampled_from([0, 0, 10]))
    ads, ads_model = _stream("c", lags["c"]).key_by("ad"), _source("c", lags["c"])
    on_left = draw(st.booleans())
    pair = (joined.key_by("ad"), ads) if on_left else (ads, joined.key_by("ad"))
    three = pair[0].interval_join(pair[1], between=(low, high), how=how)
    three = three.allowed_lateness(lateness)
    if (how != "inner" and lateness) or RESULT_KIND in joined.columns:
        three = three.accumulation("retracting")
    # The second join keeps the rows of both its sides the first join's lateness more (docs/joins.md).
    model = JoinOf(
        first_model if on_left else ads_model,
        ads_model if on_left else first_model,
        keys=("ad",),
        between=(low, high),
        how=how,
        allowed_lateness_ms=lateness + first.allowed_lateness_ms,
    )
    label += f" -> join {how} with c ({'right' if on_left else 'left'}) between=({low}, {high}) L={lateness}"
    final, op, more = _maybe_after(draw, three, model, ("ad",))
    return Case(label + more, final, op, ("a", "b", "c"))


@st.composite
def window_then_join(draw: st.DrawFn) -> Case:
    """A window of ``a`` per user (fired once, or with allowed lateness and retracting: corrected),
    its results joined with ``b`` by user, on either side: a join stage after the window's operator."""
    lags = _lags(draw)
    keys = draw(st.sampled_from([("user",), ("user", "ad")]))
    size = draw(st.sampled_from([5, 10]))
    slide = draw(st.sampled_from([size, size // 2]))
    window = TumblingWindow(size_ms=size) if slide == size else SlidingWindow(size_ms=size, slide_ms=slide)
    names, built, specs = _aggs(draw, SOURCE_AGGS)
    by_key = _stream("a", lags["a"]).key_by(*keys)
    windowed = by_key.tumbling_window(size) if slide == size else by_key.sliding_window(size, slide)
    refires = draw(st.sampled_from([0, 0, 5, 20]))  # a window corrected by late rows re-fires
    if refires:
        windowed = windowed.allowed_lateness(refires).accumulation("retracting")
    windows_of: Op = WindowOf(
        _source("a", lags["a"]), window, keys=keys, aggregates=specs, allowed_lateness_ms=refires
    )
    counted, windows = windowed.agg(*built), windows_of
    if draw(st.booleans()):  # a filter between the window and the join: run in the join stage
        counted, windows = counted.filter(kp.col("user") != "u2"), FilterOf(windows_of, _not_u2)
        names = [*names, "filter user != 'u2'"]
    results = counted.key_by("user")
    low, high = -draw(st.integers(0, 12)), draw(st.integers(0, 8))
    how = draw(st.sampled_from(HOWS))
    lateness = draw(st.sampled_from([0, 0, 10]))
    other, other_model = _stream("b", lags["b"]).key_by("user"), _source("b", lags["b"])
    on_left = draw(st.booleans())
    pair = (results, other) if on_left else (other, results)
    joined = pair[0].interval_join(pair[1], between=(low, high), how=how).allowed_lateness(lateness)
    if (how != "inner" and lateness) or refires:
        joined = joined.accumulation("retracting")
    # The join keeps the rows of both its sides the window's lateness and one ms more (docs/joins.md).
    model = JoinOf(
        windows if on_left else other_model,
        other_model if on_left else windows,
        keys=("user",),
        between=(low, high),
        how=how,
        allowed_lateness_ms=lateness + (refires + 1 if refires else 0),
    )
    label = (
        f"a (lag {lags['a']}) -> window {window!r} keys={keys} {names} L={refires} -> join {how} with b "
        f"(lag {lags['b']}, {'right' if on_left else 'left'}) between=({low}, {high}) L={lateness}"
    )
    after: Aggs = {"c": ("count", None), "mw": ("max", "w"), "sw": ("sum", "w"), "lt": ("min", "t")}
    final, op, more = _maybe_after(draw, joined, model, ("user",), after, (("w",), ("t", "w")))
    return Case(label + more, final, op, ("a", "b"))


# --- the Spark glue, in Python -----------------------------------------------------------------------


@attrs.frozen
class Entry:
    """How a source's rows enter: a join's side (``own``: each joined column it fills, from which of
    its columns), or as they are; ``staged``: the other side of a join stage, routed by its keys."""

    side: str | None = None
    own: tuple[tuple[str, str], ...] = ()
    staged: bool = False
    #: With ``staged``: the level of the join stage it enters (0: the first stage).
    level: int = 0
    #: A window of a join of two windows' results: which of the operator's two windows it feeds.
    branch: int | None = None


def _entries(plan: n.PlanNode) -> dict[str, Entry]:
    joins = [x for x in n.walk(plan) if isinstance(x, n.Join)]
    union = next((x for x in n.walk(plan) if operators_union(x) is not None), None)
    if union is not None and n.union_windows(union) is None:  # a union of operators' results
        return _union_entries(plan, union)
    if not joins:
        union = next((x for x in n.walk(plan) if n.union_windows(x) is not None), None)
        if union is not None:  # a union of windows: one operator, a branch per window
            windows = n.union_windows(union) or ()
            return {s.name: Entry(branch=i) for i, w in enumerate(windows) for s in n.sources_of(w)}
        return {s.name: Entry() for s in n.sources_of(plan)}
    out: dict[str, Entry] = {}
    operators = (n.Join, n.WindowAggregate, n.KeyedAggregate, n.KeyedTopN)
    for join in reversed(joins):  # a join under another first: the one above marks its branch
        sides = [n.stateless_below(c) for c in (join.left, join.right)]
        staged = any(isinstance(c, operators) for c in sides)
        two = all(isinstance(c, operators) for c in sides)  # one operator, two branches
        for i, (side, child) in enumerate(zip(("left", "right"), sides, strict=True)):
            if n.joins_of(child):  # a join's sources' entries are made: the branch they feed
                if two:
                    out |= {s.name: attrs.evolve(out[s.name], branch=i) for s in n.sources_of(child)}
            elif isinstance(child, operators):  # the operator's rows enter as they are
                out |= {s.name: Entry(branch=i if two else None) for s in n.sources_of(child)}
            else:
                own = _own(join, side)
                level = _stage_count(join) - 1
                entry = Entry(side=side, own=own, staged=staged, level=level)
                out |= {s.name: entry for s in n.sources_of(child)}
    return out


def _union_entries(plan: n.PlanNode, union: n.PlanNode) -> dict[str, Entry]:
    """A union of operators' results is one operator, a branch each (a join's sources as its
    sides); a join after it is a stage, its other stream routed there."""
    assert isinstance(union, n.Union)
    out: dict[str, Entry] = {}
    for i, branch in enumerate(union.inputs):
        op = n.stateless_below(branch)
        if isinstance(op, n.Join):
            for side, child in (("left", op.left), ("right", op.right)):
                out |= {s.name: Entry(side=side, own=_own(op, side), branch=i) for s in n.sources_of(child)}
        else:
            out |= {s.name: Entry(branch=i) for s in n.sources_of(op)}
    for join in (x for x in n.walk(plan) if isinstance(x, n.Join)):
        for side, child in (("left", join.left), ("right", join.right)):
            if n.stateless_below(child) is not union and union in list(n.walk(join)):
                entry = Entry(side=side, own=_own(join, side), staged=True)
                out |= {s.name: entry for s in n.sources_of(child) if s.name not in out}
    return out


def _stage_count(join: n.Join) -> int:
    """How many stages the lowering runs ``join`` as (0: the operator itself): one more than the
    join under its operator side (a join of a join of a join), one after two operators."""
    below = [n.stateless_below(c) for c in (join.left, join.right)]
    kinds = n.Join | n.WindowAggregate | n.KeyedAggregate | n.KeyedTopN
    operators = [c for c in below if isinstance(c, kinds)]
    if len(operators) != 1:
        return len(operators) // 2
    links = operator_links(operators[0])  # a chain under the side: each operator keyed otherwise a stage
    bottom = links[0][0]
    staged = sum(not beside for beside in moves(links)) if len(links) > 1 else 0
    return 1 + staged + (_stage_count(bottom) if isinstance(bottom, n.Join) else 0)


def _own(join: n.Join, side: str) -> tuple[tuple[str, str], ...]:
    """As the lowering's ``_join_side`` selects them: the keys under the left's names, then its columns."""
    if side == "left":
        rest = join.left_names
        return (*zip(join.left_keys, join.left_keys, strict=True), *((c, c) for c in rest))
    renamed = ((new, old) for old, new in join.right_names.items())
    return (*zip(join.left_keys, join.right_keys, strict=True), *renamed)


def _bottom(kernel: Kernel) -> Kernel:
    """The operator's first kernel: its keys bucket the rows."""
    while isinstance(kernel, ChainKernel):
        kernel = kernel.first
    return kernel


class Glue:
    """The stateful lowering's operator, stage and ticks as the job runs them (see the module docstring)."""

    def __init__(self, plan: n.PlanNode) -> None:
        recipe = lower(plan)
        if recipe.stateful is None:  # (a union of inner joins runs on Spark's own; here the operator)
            recipe = lower(plan, lowering="stateful")
        apply = with_buckets(recipe, BUCKETS).stateful
        assert apply is not None
        self.op: OperatorSpec = apply.operator
        self.then = self.op.then
        #: The stages after the operator, first to last (each keyed otherwise than the one before).
        self.levels = stage.levels(self.then)
        self.entries = _entries(plan)
        self.lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(plan) if isinstance(w, n.Watermark)}
        names = n.schema_of(plan).names
        self.names = [c for c in names if c != RESULT_KIND]
        self.retracting = RESULT_KIND in names
        #: The window bounds among the results (``window_start_right`` of a join of two windows too).
        self.bounds = {f.name for f in n.schema_of(plan) if f.dtype.name == "timestamp"}
        last = self.levels[-1].kernel if self.levels else self.op.kernel
        # A window join's many rows of one key and window are its results, not firings of one row.
        self.identity = () if isinstance(last, JoinKernel) else last.identity
        self.states: dict[int, pa.Table] = {}
        #: Each stage bucket's state, by (level, route).
        self.stages: dict[tuple[int, int], stage.StageState] = {}
        #: The last statistics of each bucket (a stage bucket's number counts down from -1, level
        #: after level: ``stage.bucket_base``): state rows, next due.
        self.reports: dict[int, tuple[int, int]] = {}
        self.marks: dict[str, int] = {}
        self.watermark: int | None = None
        self.ticked: int | None = None
        self.seq = 0
        self.results: list[Row] = []

    def send(self, name: str, rows: list[Row]) -> None:
        table = self._encoded(name, rows)
        own: dict[int, pa.Table] = {}
        side: dict[int, list[pa.Table]] = defaultdict(list)
        entry = self.entries[name]
        if entry.staged:
            for route, blob in stage.side_rows(self.levels[entry.level], table):
                side[route].append(ipc_table(blob))
        else:
            bottom = _bottom(self.op.kernel)
            branch = self.entries[name].branch
            if branch is not None:  # each window's rows by its own keys
                assert isinstance(bottom, UnionKernel)
                bottom = bottom.branches[branch]
            keys = bottom.keys
            values = zip(*(table.column(k).to_pylist() for k in keys), strict=True) if keys else ()
            buckets = [zlib.crc32(repr(v).encode()) % BUCKETS for v in values] or [0] * table.num_rows
            own = {b: table.filter(pa.array([x == b for x in buckets])) for b in sorted(set(buckets))}
        self._micro_batch(own, {entry.level: side} if side else {}, set())
        times = [r[TIME[name]] for r in rows if r[TIME[name]] is not None]
        if times:
            self._mark(name, max(times) - self.lags[name])
        self._tick()

    def advance(self, name: str, ms: int) -> None:
        self._mark(name, ms)  # a marker's micro-batch calls no bucket
        self._tick()

    def close(self) -> None:
        for name in self.entries:
            self._mark(name, END_OF_TIME_MS)
        self._tick()

    def current(self) -> Counter[tuple[Any, ...]]:
        """The current results: the net rows, or the last firing of each window that fires again."""
        if self.retracting or not self.identity:
            return _net(self.results, self.names)
        last = {tuple(row[c] for c in self.identity): _values(row, self.names) for row in self.results}
        return Counter(last.values())

    def _mark(self, name: str, ms: int) -> None:
        self.marks[name] = max(self.marks.get(name, ms), ms)
        if len(self.marks) == len(self.entries):
            low = min(self.marks.values())
            self.watermark = low if self.watermark is None else max(self.watermark, low)

    def _tick(self) -> None:
        """``StatefulJob._maybe_tick``: once the watermark moved, wake the buckets due and the silent ones."""
        wm = self.watermark
        if wm is None or (self.ticked is not None and wm <= self.ticked):
            return
        self.ticked = wm
        due = set(range(BUCKETS)) - set(self.reports)
        due |= {b for b, (rows, at) in self.reports.items() if rows and at <= wm}
        if due:  # a stage bucket runs whenever any bucket of the operator does
            self._micro_batch({}, {}, {max(b, 0) for b in due})

    def _encoded(self, name: str, rows: list[Row]) -> pa.Table:
        """``rows`` as the operator (or a join stage's other side) takes them."""
        entry = self.entries[name]
        own = dict(entry.own)
        if entry.staged:
            layout = list(self.levels[entry.level].side_input)
        else:
            layout = [(c.name, c.type, c.name) for c in self.op.columns]
        cols: dict[str, Any] = {}
        for column, kind, out in layout:
            if column == JOIN_SIDE:
                values: list[Any] = [entry.side] * len(rows)
            elif column == BRANCH:
                values = [entry.branch] * len(rows)
            elif entry.side is not None:  # a join's side (of a branch or not): the other's none
                values = [r[own[column]] if column in own else None for r in rows]
            elif entry.branch is not None:
                values = [r.get(column) for r in rows]  # the other branch's columns: none
            else:
                values = [r[column] for r in rows]
            cols[out] = pa.array(values, kind)
        ts = [None if r[TIME[name]] is None else r[TIME[name]] * 1000 for r in rows]
        cols[TS_VALUE if entry.staged else BATCH_TS] = pa.array(ts, pa.int64())
        cols[SEQ] = pa.array(range(self.seq, self.seq + len(rows)), pa.int64())
        self.seq += len(rows)
        return pa.table(cols)

    def _micro_batch(
        self, rows: dict[int, pa.Table], sides: dict[int, dict[int, list[pa.Table]]], ticks: set[int]
    ) -> None:
        """One micro-batch: the operator's buckets with rows or ticked, then each stage; ``sides``:
        the rows of each join stage's other side, by level and route."""
        kernel, w = self.op.kernel, self.watermark
        handed: dict[int, list[bytes]] = defaultdict(list)
        for b in sorted(set(rows) | ticks):
            batch = rows[b] if b in rows else self._empty()
            new, out = kernel.step(self.states.pop(b, None), batch, w, 0)
            if new.num_rows:  # Spark keeps no state for an empty one
                self.states[b] = ipc_table(ipc_bytes(new))
            count, due = kernel.state_rows(new), kernel.next_due(new)[0]
            self.reports[b] = (count, due)
            if self.then is None:
                self._collect(out.results)
            else:
                for route, blob in enumerate(stage.hand_on(self.then, b, out.results, w, count, due)):
                    handed[route].append(blob)
        self._stages(0, handed, sides)

    def _stages(
        self, level: int, handed: dict[int, list[bytes]], sides: dict[int, dict[int, list[pa.Table]]]
    ) -> None:
        """The stage ``level``'s buckets that got a row; their results handed on to the next stage."""
        if level == len(self.levels):
            return
        then, first = self.levels[level], self.then
        assert first is not None
        onward: dict[int, list[bytes]] = defaultdict(list)
        side = sides.get(level, {})
        for route in sorted(set(handed) | set(side)):
            mark = self.watermark if level == 0 else None  # only the first join stage's other side reads it
            before = self.stages.get((level, route))
            stepped = stage.step(then, before, handed[route], 0, side=side.get(route, []), watermark_ms=mark)
            state, out, upstream = stepped[0], stepped[1], stepped[2]
            kernel = None if state.kernel is None else ipc_table(ipc_bytes(state.kernel))
            kept = attrs.evolve(state, kernel=kernel, reports=ipc_table(ipc_bytes(state.reports)))
            self.stages[(level, route)] = kept
            count = then.kernel.state_rows(state.kernel) if state.kernel is not None else 0
            due = stage.next_due(then, state, upstream)[0]
            self.reports[stage.bucket_base(first, level) - route] = (count, due)
            if then.then is None:
                self._collect(out.results)
            else:
                for r, blob in enumerate(stage.handed_from(then, route, kept, out, upstream, bounded=False)):
                    onward[r].append(blob)
        self._stages(level + 1, onward, sides)

    def _empty(self) -> pa.Table:
        fields = [*self.op.input_schema, pa.field(BATCH_TS, pa.int64()), pa.field(SEQ, pa.int64())]
        return pa.schema(fields).empty_table()

    def _collect(self, results: pa.Table) -> None:
        names = [*self.names, *([RESULT_KIND] if self.retracting else [])]
        cols = [_plain_column(c, results.column(c), c in self.bounds) for c in names]
        self.results += [dict(zip(names, values, strict=True)) for values in zip(*cols, strict=True)]


def _plain_column(name: str, column: Any, bound: bool) -> list[Any]:
    """A result column as the model writes it: window bounds (``bound``: the timestamps of the
    results) in ms (the kernels' are µs), floats rounded."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    values = column.to_pylist()
    if bound:
        return [None if v is None else v // 1000 for v in values]
    return [round(v, 9) if isinstance(v, float) else v for v in values]


def _values(row: Row, names: Sequence[str]) -> tuple[Any, ...]:
    def plain(v: Any) -> Any:
        if isinstance(v, datetime):
            return int(v.timestamp() * 1000)
        return round(v, 9) if isinstance(v, float) else v

    return tuple(plain(row.get(c)) for c in names)


def _net(rows: Sequence[Row], names: Sequence[str]) -> Counter[tuple[Any, ...]]:
    """Emits less retractions (a row without ``kind`` is an emit); a negative count stays."""
    out: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        out[_values(row, names)] += -1 if row.get(RESULT_KIND) == "retract" else 1
    return Counter({row: count for row, count in out.items() if count})


# --- the steps, and the check -------------------------------------------------------------------------


@st.composite
def _row(draw: st.DrawFn, name: str, clock: int) -> Row:
    """A row about ``clock``: mostly a little out of order, sometimes far behind, rarely without a time."""
    near, far = st.integers(-5, 3), st.integers(-30, -6)
    row: Row = {}
    for field in to_schema(DDL[name]):
        if field.name == TIME[name]:
            delta = draw(st.one_of(near, near, near, near, near, far, st.none()))
            row[field.name] = None if delta is None else clock + delta
        else:
            row[field.name] = draw(st.sampled_from(VALUES[field.name]))
    return row


@st.composite
def steps_of(draw: st.DrawFn, sources: tuple[str, ...]) -> list[Step]:
    """Sends of disordered rows (late ones among them) and watermark advances, by source."""
    clock = 0
    out: list[Step] = []
    for _ in range(draw(st.integers(3, 12))):
        clock += draw(st.integers(0, 6))
        name = draw(st.sampled_from(sources))
        if draw(st.integers(0, 9)) == 0:
            out.append(("advance", name, clock))
        else:
            out.append(("send", name, draw(st.lists(_row(name, clock), min_size=1, max_size=6))))
    return out


def check(case: Case, steps: list[Step], *, every_step: bool = True, growing: bool = True) -> None:
    """After every step, and the close of every source, the glue's current results are the model's
    (``every_step=False``: equal at the end, and with ``growing`` a join's a part of the model's
    before)."""
    glue = Glue(case.stream.plan)
    model = ComposedModel(case.model)
    for i, (kind, name, payload) in enumerate([*steps, ("close", "", None)]):
        if kind == "send":
            model.send(payload, source=name)
            glue.send(name, payload)
        elif kind == "advance":
            model.advance_watermark(payload, source=name)
            glue.advance(name, payload)
        else:
            model.close()
            glue.close()
        expected = _net(model.results, glue.names)
        if every_step or kind == "close":
            assert glue.current() == expected, f"{case.label}: step {i} of {steps}"
        elif growing and isinstance(case.model, JoinOf):  # a join's rows only grow (after it: change)
            assert not glue.current() - expected, f"{case.label}: step {i} of {steps}"


def _unfiltered(op: Op) -> Op:
    """``op`` under the filters and projections over it."""
    while isinstance(op, FilterOf | SelectOf):
        op = op.input
    return op


def _the_join(model: Op) -> JoinOf:
    """The top join of ``model``, under the operators after it."""
    while not isinstance(model, JoinOf):
        assert isinstance(model, AggOf | TopNOf | WindowOf)
        model = model.input
    return model


def _known_differences(model: Op, steps: list[Step]) -> bool:
    """Whether ``steps`` meet what a join of a join does otherwise than the model, as known.

    - The first join runs at the query's watermark, the least of all three
      sources' (docs/joins.md: Spark keeps one per query); the model runs it
      at its own two sources'. A row very late at one of them and not at the
      other joins in one only.
    - So does the second join, at the first join's watermark held back by
      its pads' delay: a row of the third source very late at the least of
      that and its own source's, and not at the query's so held back (or
      back), joins in one only.
    """
    model = _the_join(model)
    left, right = _unfiltered(model.left), _unfiltered(model.right)
    first, third = (left, right) if isinstance(left, JoinOf) else (right, left)
    assert isinstance(first, JoinOf) and isinstance(first.left, Source) and isinstance(first.right, Source)
    assert isinstance(third, Source)
    lags = {s.name: s.lag_ms for s in (first.left, first.right, third)}
    marks: dict[str, int] = {}
    own: int | None = None
    query: int | None = None

    def very_late(t: int, w: int | None, lateness: int) -> bool:
        return w is not None and t < w and w - t >= lateness

    for kind, name, payload in steps:
        mark = payload
        if kind == "send":
            times = [r[TIME[name]] for r in payload if r[TIME[name]] is not None]
            lateness = first.allowed_lateness_ms
            if any(very_late(t, own, lateness) != very_late(t, query, lateness) for t in times):
                return True
            mark = max(times) - lags[name] if times else None
            if name == third.name and _third_late(times, own, query, marks.get(name), first, model):
                return True
        if mark is not None:
            marks[name] = max(marks.get(name, mark), mark)
        pair = [marks[s.name] for s in (first.left, first.right) if s.name in marks]
        if len(pair) == 2:
            own = min(pair) if own is None else max(own, min(pair))
        if len(marks) == 3:
            query = min(marks.values()) if query is None else max(query, min(marks.values()))
    return False


def _third_late(
    times: list[int], own: int | None, query: int | None, mark: int | None, first: JoinOf, second: JoinOf
) -> bool:
    """Whether a row of the third source is very late at the second join in the model and not in the
    query, or back (see :func:`_known_differences`)."""
    delay = delay_of(first)
    lateness = second.allowed_lateness_ms
    model_w = None if own is None or mark is None else min(own - delay, mark)
    query_w = None if query is None else query - delay

    def very_late(t: int, w: int | None) -> bool:
        return w is not None and t < w and w - t >= lateness

    return any(very_late(t, model_w) != very_late(t, query_w) for t in times)


@settings(max_examples=EXAMPLES)
@given(case=join_then_one(), data=st.data())
def test_a_join_then_a_window_an_aggregation_or_a_top_n_equals_the_model(
    case: Case, data: st.DataObject
) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=join_then_two(), data=st.data())
def test_a_join_then_two_operators_equals_the_model(case: Case, data: st.DataObject) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=one_source_then_two(), data=st.data())
def test_two_operators_over_one_source_equal_the_model(case: Case, data: st.DataObject) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=chains_of_three(), data=st.data())
def test_three_operators_each_keyed_by_any_columns_equal_the_model(case: Case, data: st.DataObject) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=join_then_windows(), data=st.data())
def test_a_window_of_a_windows_results_after_a_join_equals_the_model(case: Case, data: st.DataObject) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=source_then_windows(), data=st.data())
def test_a_window_of_a_windows_results_or_its_top_n_over_one_source_equals_the_model(
    case: Case, data: st.DataObject
) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=per_key_then_window(), data=st.data())
def test_a_window_of_an_aggregations_or_a_top_ns_changes_per_key_equals_the_model(
    case: Case, data: st.DataObject
) -> None:
    check(case, data.draw(steps_of(case.sources)))


@settings(max_examples=EXAMPLES)
@given(case=union_then_more(), data=st.data())
def test_an_operator_after_a_union_of_windows_equals_the_model(case: Case, data: st.DataObject) -> None:
    """Each window fires at the query's watermark, the model's at its own source's: compared at the
    end, a row late at one of them only a known difference."""
    steps = data.draw(steps_of(case.sources))
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(case.stream.plan) if isinstance(w, n.Watermark)}
    union = case.model
    while not isinstance(union, UnionOf):
        assert isinstance(union, AggOf | TopNOf | WindowOf)
        union = union.input
    for name, side in zip(("a", "b"), union.inputs, strict=True):
        assert isinstance(side, WindowOf)
        assume(not _late_at_one_watermark(steps, lags, side.window, side.allowed_lateness_ms, name))
    check(case, steps, every_step=False)


@settings(max_examples=EXAMPLES)
@given(case=two_windows_joined(), data=st.data())
def test_a_join_of_two_windows_results_equals_the_model(case: Case, data: st.DataObject) -> None:
    """Each window fires at the query's watermark, the model's at its own source's (as for one
    window's results joined): compared at the end, a row late at one of them only a known difference."""
    steps = data.draw(steps_of(case.sources))
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(case.stream.plan) if isinstance(w, n.Watermark)}
    join = _the_join(case.model)
    for name, side in (("a", _unfiltered(join.left)), ("b", _unfiltered(join.right))):
        assert isinstance(side, WindowOf)
        assume(not _late_at_one_watermark(steps, lags, side.window, side.allowed_lateness_ms, name))
    check(case, steps, every_step=False)


@settings(max_examples=EXAMPLES)
@given(case=join_of_join(), data=st.data())
def test_a_join_of_a_join_equals_the_model(case: Case, data: st.DataObject) -> None:
    """An outer first join pads at the query's watermark (the least of all three sources'), the
    model's at its own two sources': a pad may reach the second join a step later, so such results
    are compared at the end (and checked to be a part of the model's before)."""
    steps = data.draw(steps_of(case.sources))
    assume(not _known_differences(case.model, steps))
    model = _the_join(case.model)
    left = _unfiltered(model.left)
    first = left if isinstance(left, JoinOf) else _unfiltered(model.right)
    assert isinstance(first, JoinOf)
    check(case, steps, every_step=first.how == "inner")


@settings(max_examples=EXAMPLES)
@given(case=window_then_join(), data=st.data())
def test_a_join_of_a_windows_results_equals_the_model(case: Case, data: st.DataObject) -> None:
    """The window fires at the query's watermark (the least of both sources'), the model's at its own
    source's: a window result may reach the join a step later, so the results are compared at the
    end (and checked to be a part of the model's before); a row of ``a`` late at one of the two
    watermarks only is a known difference."""
    steps = data.draw(steps_of(case.sources))
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(case.stream.plan) if isinstance(w, n.Watermark)}
    join = _the_join(case.model)
    sides = _unfiltered(join.left), _unfiltered(join.right)
    windows = sides[0] if isinstance(sides[0], WindowOf) else sides[1]
    assert isinstance(windows, WindowOf)
    assume(not _late_at_one_watermark(steps, lags, windows.window, windows.allowed_lateness_ms))
    check(case, steps, every_step=False)


@settings(max_examples=EXAMPLES)
@given(case=joins_of_operators(), data=st.data())
def test_a_join_of_two_operators_results_or_of_one_and_a_stream_equals_the_model(
    case: Case, data: st.DataObject
) -> None:
    """Compared when every source has closed, over rows on time at their own source's watermark."""
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(case.stream.plan) if isinstance(w, n.Watermark)}
    steps = _on_time(data.draw(steps_of(case.sources)), lags)
    check(case, steps, every_step=False, growing=False)


@settings(max_examples=EXAMPLES)
@given(case=unions_of_operators(), data=st.data())
def test_an_operator_after_a_union_of_joins_or_of_aggregations_equals_the_model(
    case: Case, data: st.DataObject
) -> None:
    """Compared when every source has closed, over rows on time at their own source's watermark
    (each branch runs at the query's watermark, the model's at its own sources')."""
    plan = case.stream.plan
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(plan) if isinstance(w, n.Watermark)}
    union = next(x for x in n.walk(plan) if isinstance(x, n.Union))
    # A row late by less than its branch join's allowed lateness joins at either watermark.
    slack = {
        s.name: join.emission.allowed_lateness_ms for join in n.joins_of(union) for s in n.sources_of(join)
    }
    steps = _on_time(data.draw(steps_of(case.sources)), lags, slack)
    check(case, steps, every_step=False, growing=False)


@settings(max_examples=EXAMPLES)
@given(case=three_joins(), data=st.data())
def test_a_chain_of_three_joins_equals_the_model(case: Case, data: st.DataObject) -> None:
    """Compared when every source has closed, over rows on time at their own source's watermark."""
    lags = {n.sources_of(w)[0].name: w.lag_ms for w in n.walk(case.stream.plan) if isinstance(w, n.Watermark)}
    steps = _on_time(data.draw(steps_of(case.sources)), lags)
    check(case, steps, every_step=False, growing=False)


def _late_at_one_watermark(
    steps: list[Step], lags: dict[str, int], window: Any, lateness: int = 0, source: str = "a"
) -> bool:
    """Whether a row of ``source`` is behind one of its windows' close at its own source's watermark
    and not at the query's, or back (either way of counting the close, ``W >= end`` or ``W >= end -
    1``), or so behind its windows' end and ``lateness``."""
    slide = window.slide_ms if isinstance(window, SlidingWindow) else window.size_ms
    marks: dict[str, int] = {}
    for kind, name, payload in steps:
        mark = payload
        if kind == "send":
            times = [r[TIME[name]] for r in payload if r[TIME[name]] is not None]
            own, query = marks.get(source), min(marks.values()) if len(marks) == 2 else None
            for t in times if name == source else ():
                last = t // slide * slide + window.size_ms  # the last window of t ends here
                for end in range(last, t, -slide):  # every window of t (one is the last one)
                    for close in (end, end - 1, end + lateness, end + lateness - 1):
                        if (own is not None and close <= own) != (query is not None and close <= query):
                            return True
            mark = max(times) - lags[name] if times else None
        if mark is not None:
            marks[name] = max(marks.get(name, mark), mark)
    return False


# --- the bugs found, each at its smallest ---------------------------------------------------------------


def _joined() -> tuple[JoinedStream, JoinOf]:
    left, right = (_stream(s, 0).key_by("user") for s in ("a", "b"))
    model = JoinOf(_source("a", 0), _source("b", 0), keys=("user",), between=(0, 0))
    return left.interval_join(right, between=(0, 0)), model


def _count(name: str) -> tuple[Any, list[ModelAgg]]:
    return kp.count(kp.col("*")).alias(name), [ModelAgg(name=name, func="count", column=None)]


PAIR: list[Step] = [
    ("send", "a", [{"user": "u1", "t": 0, "ad": "a1", "v": 0}]),
    ("send", "b", [{"user": "u1", "t": 0, "page": "p1", "w": 0}]),
]


def test_an_aggregation_in_the_call_of_a_stage_after_a_join_equals_the_model() -> None:
    joined, model = _joined()
    (per_ad, n_spec), (per_count, c_spec) = _count("n"), _count("c")
    final = joined.key_by("ad").agg(per_ad).key_by("ad", "n").agg(per_count)  # a stage, then in its call
    ops = AggOf(AggOf(model, keys=("ad",), aggregates=n_spec), keys=("ad", "n"), aggregates=c_spec)
    check(Case("join -> agg(ad) -> agg(ad, n)", final, ops, ("a", "b")), PAIR)


def test_a_top_n_per_key_with_ties_first_breaks_ties_nulls_first() -> None:
    joined, model = _joined()
    final = joined.top_n(1, by="t_right", per="key", keys=("user",), ties="first")
    ranked = TopNOf(model, n=1, by=("t_right",), keys=("user",), ties="first")
    tied = [{"user": "u1", "t": 0, "ad": "a1", "v": 0}, {"user": "u1", "t": 0, "ad": "a1", "v": None}]
    check(Case("join -> top_n ties first", final, ranked, ("a", "b")), [("send", "a", tied), PAIR[1]])


def test_an_aggregation_keyed_by_a_sum_that_may_be_null_equals_the_model() -> None:
    sums = _stream("a", 0).key_by("user").sliding_window(10, 5).agg(kp.sum(kp.col("v")).alias("sv"))
    per_sum, c_spec = _count("c")
    window = WindowOf(
        _source("a", 0),
        SlidingWindow(size_ms=10, slide_ms=5),
        keys=("user",),
        aggregates=[ModelAgg(name="sv", func="sum", column="v")],
    )
    steps: list[Step] = [
        ("send", "a", [{"user": "u1", "t": 0, "ad": "a1", "v": 2}]),  # [-5, 5) fires sv=2 alone
        ("send", "a", [{"user": "u1", "t": 5, "ad": "a1", "v": None}]),  # the close: sv=2 beside sv=null
    ]
    model = AggOf(window, keys=("sv",), aggregates=c_spec)
    check(Case("window -> agg by sum", sums.key_by("sv").agg(per_sum), model, ("a",)), steps)


def test_a_very_late_row_of_the_third_stream_joins_nothing() -> None:
    joined, model = _joined()
    three = _stream("c", 0).key_by("ad").interval_join(joined.key_by("ad"), between=(0, 0), how="left")
    ops = JoinOf(_source("c", 0), model, keys=("ad",), between=(0, 0), how="left")
    steps: list[Step] = [
        ("advance", "a", 0),
        ("advance", "b", 0),
        ("advance", "c", 0),
        ("send", "c", [{"ad": "a1", "at": -1, "campaign": "x"}]),  # very late: no pad for it, ever
    ]
    check(Case("c left join (a join b)", three, ops, ("a", "b", "c")), steps)


def test_a_window_that_got_its_rows_before_the_first_watermark_says_when_it_is_due() -> None:
    """A retracting window over a join that got its rows before the first watermark said nothing
    was due: the chain reported the join's next due instead, and the job did not wake the bucket
    when the watermark passed the window's end (here 0: due at -1, a watermark like any other)."""
    left, right = (_stream(s, 0).key_by("user") for s in ("a", "b"))
    joined = left.interval_join(right, between=(0, 0), how="left").allowed_lateness(15)
    counted, n_spec = _count("n")
    windows = joined.accumulation("retracting").key_by("user").tumbling_window(5)
    final = windows.accumulation("retracting").agg(counted)
    join = JoinOf(
        _source("a", 0), _source("b", 0), keys=("user",), between=(0, 0), how="left", allowed_lateness_ms=15
    )
    model = WindowOf(join, TumblingWindow(size_ms=5), keys=("user",), aggregates=n_spec)
    a_row, b_row = {"user": "u1", "t": -5, "ad": "a1", "v": 0}, {"user": "u1", "t": -5, "page": "p1", "w": 0}
    case = Case("left join -> window ending at 0", final, model, ("a", "b"))
    for first in ([], [("advance", "a", -10), ("advance", "b", -10)]):  # no watermark yet, or one
        steps: list[Step] = [
            *first,
            ("send", "a", [a_row]),
            ("send", "b", [b_row]),
            ("advance", "a", 1),
            ("advance", "b", 1),  # the watermark 0: the window [-5, 0) closed
        ]
        check(case, steps)


def test_a_window_over_a_union_of_joins_counts_a_late_pair_within_the_joins_allowed_lateness() -> None:
    """A row 18 ms late at its own source (the join's allowed lateness is 20) meets its partner in
    a window long closed on time: the window after the union keeps it for the join's lateness."""
    branches: list[tuple[Stream, Op]] = []
    for names, key, value in ((("a", "b"), "user", "v"), (("c", "d"), "ad", "z")):
        left, right = (_stream(s, 0).key_by(key) for s in names)
        joined = left.interval_join(right, between=(-10, 10)).allowed_lateness(20)
        sources = (_source(names[0], 0), _source(names[1], 0))
        join = JoinOf(*sources, keys=(key,), between=(-10, 10), allowed_lateness_ms=20)
        rows = joined.select(kp.col("ad"), kp.col(value).alias("v"))
        branches.append((rows, SelectOf(join, ("ad", "v"), fn=_as_v(value))))
    count = kp.count(kp.col("*")).alias("c")
    union = branches[0][0].union(branches[1][0])
    windowed = union.key_by("ad").tumbling_window(5).accumulation("retracting").agg(count)
    model = WindowOf(
        UnionOf((branches[0][1], branches[1][1])),
        TumblingWindow(size_ms=5),
        keys=("ad",),
        aggregates=[ModelAgg(name="c", func="count", column=None)],
    )
    a = [{"user": user, "t": t, "ad": "a1", "v": 1} for user, t in (("u1", 10), ("u2", 30))]
    b = [{"user": user, "t": t, "page": "p1", "w": 1} for user, t in (("u2", 30), ("u1", 12))]
    steps: list[Step] = [
        ("send", "a", a),
        ("send", "b", b[:1]),
        ("send", "c", [{"ad": "a2", "at": 30, "campaign": "x"}]),
        ("send", "d", [{"ad": "a2", "dt": 30, "z": 0}]),
        ("send", "b", b[1:]),  # 18 ms late at b
    ]
    check(Case("window over a union of joins", windowed, model, ("a", "b", "c", "d")), steps)
