"""The analysed plan: what every node of a logical plan hands on, worked out once per node.

:func:`facts` gives a node's :class:`Facts` — its schema, the keys its rows
are bucketed by, its event time, its changelog mode, the watermarks under
it and how long its results may still be corrected — computed bottom up
from its children's facts by one rule per node class (:data:`RULES`), and
kept for as long as the node lives (nodes are immutable, so a node's facts
never change). The planner and SQL read them; the builder checks a node it
makes with :func:`~krishiv_py.plan.nodes.schema_of`, which shares the rule
of each schema (:func:`~krishiv_py.plan.nodes.schema_from`).

Changelog modes are Flink's: ``insert-only`` (every row is final),
``updating`` (a window that may fire again: a later firing replaces the
result of the same window and keys, and an operator that takes such results
runs them retracting) and ``retracting`` (the rows carry ``kind``: emits
and the retractions that withdraw them).

Examples
--------
>>> import krishiv_py as kp
>>> from krishiv_py.api.stream import placeholder
>>> s = placeholder("k string, v bigint, t bigint", "s").watermark("t", 2_000)
>>> window = s.key_by("k").tumbling_window(10_000).allowed_lateness(5_000).agg(kp.count(kp.col("*")))
>>> f = facts(window.plan)
>>> f.keys, f.changelog, f.correction_ms, f.watermark_delay_ms, f.event_time.column
(('k',), 'updating', 5000, 2000, 'window_end')
>>> f.schema.names
('k', 'window_start', 'window_end', 'count')
>>> per_key = window.key_by("k").agg(kp.sum(kp.col("count")))
>>> f = facts(per_key.plan)
>>> f.changelog, f.correction_ms == END_OF_TIME_MS, f.event_time.from_change
('retracting', True, True)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Literal, TypeAlias, cast

import attrs

from krishiv_py.expr import Column
from krishiv_py.plan import nodes as n
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.types import Schema

__all__ = ["END_OF_TIME_MS", "RULES", "Changelog", "Facts", "between", "branches", "facts"]

Changelog: TypeAlias = Literal["insert-only", "updating", "retracting"]


@attrs.frozen(kw_only=True)
class Facts:
    """What one node hands on, from its children's facts and itself."""

    schema: Schema
    #: The event time of its rows (None: no watermark, or results timed by the wall clock).
    event_time: n.EventTime | None
    #: The columns its rows are bucketed by when krishiv's operator runs it, as its results name
    #: them (a union: every branch's; None: no operator, or a projection that renames them).
    keys: tuple[str, ...] | None
    changelog: Changelog
    #: How long after the watermark passes a result's event time the result may still be
    #: corrected (:data:`END_OF_TIME_MS` and above: a change per key may withdraw a row of any age).
    correction_ms: int
    #: As :attr:`correction_ms`, for a join of its results (a window's results are timed
    #: ``window_end - 1 ms`` there, so a corrected one is late by one ms more).
    join_correction_ms: int
    #: The watermark operators under it, one per place in the plan (a stream's watermark twice
    #: when the plan reads the stream twice: each read gets a watermark operator of its own).
    watermarks: tuple[n.Watermark, ...]
    #: The node whose results these are (itself; under filters and projections, the node they run over).
    results_of: n.PlanNode

    @property
    def retracts(self) -> bool:
        """Whether its rows carry ``kind``, retractions among them."""
        return self.changelog == "retracting"

    @property
    def corrects(self) -> bool:
        """Whether a later row may replace or withdraw an earlier one (an operator after it then
        takes its rows retracting)."""
        return self.changelog != "insert-only"

    @property
    def watermark_delay_ms(self) -> int | None:
        """The largest fixed lag of the watermarks under it (None: none, or only automatic ones):
        how far its watermark stays behind the latest event time."""
        lags = [w.lag_ms for w in self.watermarks if w.auto is None]
        return max(lags) if lags else None


Rule: TypeAlias = Callable[[Any, tuple[Facts, ...]], dict[str, Any]]

#: Each node class's rule: its facts (beyond schema and event time) from its children's.
RULES: dict[type[Any], Rule] = {}

_FACTS: dict[int, tuple[weakref.ref[Any], Facts]] = {}


def facts(node: n.PlanNode) -> Facts:
    """``node``'s facts, computed once (its children's first) and kept while the node lives."""
    hit = _FACTS.get(id(node))
    if hit is not None and hit[0]() is node:
        return hit[1]
    below = tuple(facts(c) for c in n.children(node))
    rule = RULES.get(type(node), _source)
    found = Facts(
        schema=n.schema_from(node, tuple(b.schema for b in below)),
        event_time=n.event_time_from(node, lambda: below[0].schema, tuple(b.event_time for b in below)),
        **{"results_of": node, **rule(node, below)},
    )
    key, kept = id(node), _FACTS
    kept[key] = (weakref.ref(node, lambda _: kept.pop(key, None)), found)
    return found


def between(node: n.PlanNode) -> tuple[n.Filter | n.Project, ...]:
    """The filters and projections from the node whose results ``node`` holds
    (:attr:`Facts.results_of`) up to ``node`` (first to last; none when ``node`` is that node)."""
    under = facts(node).results_of
    out: list[n.Filter | n.Project] = []
    while node is not under:
        out.append(cast(n.Filter | n.Project, node))
        (node,) = n.children(node)
    return tuple(reversed(out))


def branches(node: n.PlanNode) -> tuple[n.PlanNode, ...]:
    """What each input of a union holds the results of (:attr:`Facts.results_of`: an operator
    under its filters and projections, or the input itself), in order; () when ``node`` is no
    union. A union of operators' results runs as one operator, each branch as it would alone."""
    if not isinstance(node, n.Union):
        return ()
    return tuple(facts(i).results_of for i in node.inputs)


def _watermarks(below: tuple[Facts, ...]) -> tuple[n.Watermark, ...]:
    return tuple(w for b in below for w in b.watermarks)  # (a stream unioned with itself: twice)


def _source(node: Any, below: tuple[Facts, ...]) -> dict[str, Any]:
    del node, below
    return {
        "keys": None,
        "changelog": "insert-only",
        "correction_ms": 0,
        "join_correction_ms": 0,
        "watermarks": (),
    }


def _passes(node: Any, below: tuple[Facts, ...]) -> dict[str, Any]:
    """A lookup's, a watermark's: its input's facts."""
    del node
    f = below[0]
    return {
        "keys": f.keys,
        "changelog": f.changelog,
        "correction_ms": f.correction_ms,
        "join_correction_ms": f.join_correction_ms,
        "watermarks": f.watermarks,
    }


def _filter(node: n.Filter | n.Project, below: tuple[Facts, ...]) -> dict[str, Any]:
    """Its input's facts; its rows are the results of the node under it."""
    return {**_passes(node, below), "results_of": below[0].results_of}


def _watermark(node: n.Watermark, below: tuple[Facts, ...]) -> dict[str, Any]:
    return {**_passes(node, below), "watermarks": (*below[0].watermarks, node)}


def _project(node: n.Project, below: tuple[Facts, ...]) -> dict[str, Any]:
    out = _filter(node, below)  # (a projection's: as a filter's)
    plain = {e.name for e in node.exprs if isinstance(e, Column)}
    if out["keys"] is not None and not set(out["keys"]) <= plain:
        out["keys"] = None  # renamed or dropped: no column of its results names them
    return out


def _union(node: n.Union, below: tuple[Facts, ...]) -> dict[str, Any]:
    keys = [b.keys for b in below]
    return {
        "keys": None if None in keys else tuple(dict.fromkeys(k for ks in keys for k in ks or ())),
        # a union carries each input's corrections: retracting, whatever the input ran
        "changelog": "retracting" if any(b.corrects for b in below) else "insert-only",
        "correction_ms": max(b.correction_ms for b in below),
        "join_correction_ms": max(b.join_correction_ms for b in below),
        "watermarks": _watermarks(below),
    }


def _operator(
    keys: tuple[str, ...], changelog: Changelog, correction_ms: int, below: tuple[Facts, ...]
) -> dict[str, Any]:
    return {
        "keys": keys,
        "changelog": changelog,
        "correction_ms": correction_ms,
        "join_correction_ms": correction_ms,
        "watermarks": _watermarks(below),
    }


def _window(node: n.WindowAggregate, below: tuple[Facts, ...]) -> dict[str, Any]:
    if node.emission.accumulation == "retracting":
        changelog: Changelog = "retracting"
    else:
        changelog = "insert-only" if n.fires_once(node) else "updating"
    # It keeps a window its allowed lateness past its end, and as much longer as what it takes
    # may still be corrected.
    kept = node.emission.allowed_lateness_ms + below[0].correction_ms
    out = _operator(tuple(node.keys), changelog, kept, below)
    return {**out, "join_correction_ms": kept + 1 if kept else 0}


def _join(node: n.Join, below: tuple[Facts, ...]) -> dict[str, Any]:
    # A join of operators' results keeps rows as much longer as they may still be corrected.
    carried = max(b.join_correction_ms for b in below)
    changelog: Changelog = "retracting" if node.emission.accumulation == "retracting" else "insert-only"
    return _operator(tuple(node.left_keys), changelog, node.emission.allowed_lateness_ms + carried, below)


def _per_key(node: n.KeyedAggregate | n.KeyedTopN, below: tuple[Facts, ...]) -> dict[str, Any]:
    # Per key over every row: a change may withdraw a row of any age.
    return _operator(tuple(node.keys), "retracting", END_OF_TIME_MS, below)


def _window_top_n(node: n.TopN, below: tuple[Facts, ...]) -> dict[str, Any]:
    # Per window and key; a window's ranking changes while the window may.
    keys = ("window_start", "window_end", *node.keys)
    return _operator(keys, "retracting", below[0].correction_ms, below)


def _over(node: n.OverAggregate, below: tuple[Facts, ...]) -> dict[str, Any]:
    lateness = node.emission.allowed_lateness_ms
    corrects = bool(lateness) or below[0].corrects  # (a late row, or a retraction, corrects results)
    changelog: Changelog = "retracting" if node.retracting else "updating" if corrects else "insert-only"
    return _operator(tuple(node.keys), changelog, lateness + below[0].correction_ms, below)


RULES.update(
    {
        n.Watermark: _watermark,
        n.Filter: _filter,
        n.LookupJoin: _passes,
        n.Project: _project,
        n.Union: _union,
        n.WindowAggregate: _window,
        n.Join: _join,
        n.KeyedAggregate: _per_key,
        n.KeyedTopN: _per_key,
        n.TopN: _window_top_n,
        n.OverAggregate: _over,
    }
)
