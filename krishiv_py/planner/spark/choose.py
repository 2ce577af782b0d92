"""Which lowering runs a plan: a table of what each lowering runs exactly.

Every lowering declares, as one frozen :class:`Capabilities` record, the
input it takes, the window kinds it runs and the emission options it runs
exactly (Ibis's backends declare their unsupported operations the same
way). :func:`choose` lists the features a plan uses and picks the first
lowering of :data:`LOWERINGS` — bounded, native, stateful: the order of
preference — whose record covers them all. When the preferred lowering for
the plan's input cannot run a feature, the reason names that feature.

============  =========  ===========================================  ===================================
lowering      input      window kinds                                 emission options run exactly
============  =========  ===========================================  ===================================
``bounded``   finite     tumbling, sliding, session                   allowed lateness
``native``    unbounded  tumbling, sliding                            (none: on-watermark, zero lateness)
``stateful``  both       tumbling, sliding, session, capped session,  early triggers, allowed lateness,
                         time-interval, event sliding (KIP-450),      non-accumulating, late handlers
                         processing-time tumbling
============  =========  ===========================================  ===================================

An automatic watermark lag (``watermark(column, "auto")``) changes from one
micro-batch to the next, and Spark's watermark takes a fixed delay: the
native lowering cannot follow it, so it runs on the stateful lowering,
where the driver computes each micro-batch's watermark from the lag
recorded for it and krishiv's operator runs at that watermark (a bounded
run has no lag to choose: every row is on time).

A processing-time window fires when the wall clock passes its end, with or
without input; Spark's windows fire only when input moves the watermark, so
only krishiv's operator, woken by the clock (:mod:`krishiv_py.runtime.stateful`'s
ticks), runs it, bounded input too. The reason says its results are not
reproducible.

A bounded run is one step with every row, then the end of input: no event
can be late, so keeping windows past their end changes nothing and the
bounded lowering runs ``allowed_lateness`` exactly. It cannot run early
firings, the ``kind`` column of retracting results, or hand invalid events
to a late-event handler. (Discarding alone would be exact in one step too;
the table keeps every non-default accumulation as one feature.)

A window over windowed results (a cascade) runs on the bounded lowering
(one Spark batch job, both windows in it) and on the stateful lowering,
where krishiv's operator runs the second window after the first: in the
first one's call when keyed alike, else as a stage of its own
(``applyInArrow``), taking the first window's corrections as retractions
(:mod:`krishiv_py.stateful.window_changes`).

Window top-N (``top_n``) runs on the bounded and native lowerings, where
every window fires once and all its keys fire in the same micro-batch, so
ranking each micro-batch's results is exact. The stateful operator may
re-fire a window, or fire its keys in different micro-batches, so there
window top-N runs in krishiv's operator after the window, the same way:
each window ranked by itself (:mod:`krishiv_py.stateful.keyed_topn`), a
correction re-ranking it, what it pushes out of the top retracted.

Examples
--------
>>> from krishiv_py.plan.windows import SessionWindow
>>> capabilities("native").covers("session")
False
>>> capabilities("native").covers("allowed_lateness")
False
>>> window_kind(SessionWindow(gap_ms=10, max_duration_ms=60))
'capped_session'
"""

from __future__ import annotations

from typing import Literal, TypeAlias, assert_never

import attrs

from krishiv_py._typing import Lowering, WindowKind
from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.plan.emission import Emission, counts_only
from krishiv_py.plan.windows import (
    EventSlidingWindow,
    SessionWindow,
    SlidingWindow,
    TimeIntervalWindow,
    TumblingWindow,
    WindowSpec,
)
from krishiv_py.planner.spark.kinds import KINDS

__all__ = [
    "LOWERINGS",
    "Capabilities",
    "EmissionFeature",
    "Feature",
    "InputKind",
    "StageFeature",
    "WatermarkFeature",
    "capabilities",
    "choose",
    "features_of",
    "force",
    "window_kind",
]

InputKind: TypeAlias = Literal["bounded", "unbounded"]
EmissionFeature: TypeAlias = Literal[
    "early_trigger", "allowed_lateness", "non_accumulating", "late_handler", "state_ttl"
]
#: Stages after the window that a lowering may lack.
StageFeature: TypeAlias = Literal[
    "top_n", "cascade", "join", "interval_join", "window_after_join", "keyed_agg", "after_union"
]
#: Watermarks a lowering may not compute: a lag chosen from the data as it arrives.
WatermarkFeature: TypeAlias = Literal["auto_lag"]
FeatureName: TypeAlias = InputKind | WindowKind | EmissionFeature | StageFeature | WatermarkFeature

_ALL_WINDOWS: frozenset[WindowKind] = frozenset(
    {
        "tumbling",
        "sliding",
        "session",
        "capped_session",
        "time_interval",
        "event_sliding",
        "processing_tumbling",
    }
)
#: The kinds Spark's own window operators run.
_SPARK_WINDOWS: frozenset[WindowKind] = frozenset({"tumbling", "sliding", "session"})
#: The kinds krishiv's stateful operator runs.
_STATEFUL_WINDOWS: frozenset[WindowKind] = _ALL_WINDOWS


@attrs.frozen(kw_only=True)
class Capabilities:
    """What one lowering runs exactly, and the reason given when it is chosen.

    ``snapshot`` lowerings may be forced onto unbounded input: they read
    what the sources hold now, as if they were closed after it (``collect()``).
    ``forced_only`` features run only when asked for: Spark's own session
    operator differs from the specified rule in two documented cases, and
    Spark's stream-stream join is exact only behind krishiv's filter of late
    rows, which makes it slower than krishiv's join operator.
    """

    lowering: Lowering
    inputs: frozenset[InputKind]
    window_kinds: frozenset[WindowKind]
    emission: frozenset[EmissionFeature]
    why: str
    snapshot: str | None = None
    forced_only: frozenset[WindowKind | StageFeature] = frozenset()
    stages: frozenset[StageFeature] = frozenset()
    watermarks: frozenset[WatermarkFeature] = frozenset()

    def covers_all(self, features: list[Feature], *, forced: bool = False) -> bool:
        """True when this lowering runs every one of ``features`` exactly."""
        return all(self.covers(f.name, forced=forced) for f in features)

    def covers(self, feature: FeatureName, *, forced: bool = False) -> bool:
        """True when this lowering runs ``feature`` exactly (``forced``: also by snapshot)."""
        if feature == "unbounded" and forced and self.snapshot is not None:
            return True
        if forced and feature in self.forced_only:
            return True
        return (
            feature in self.inputs
            or feature in self.window_kinds
            or feature in self.emission
            or feature in self.stages
            or feature in self.watermarks
        )


#: Every lowering, in order of preference.
LOWERINGS: tuple[Capabilities, ...] = (
    Capabilities(
        lowering="bounded",
        inputs=frozenset({"bounded"}),
        window_kinds=_SPARK_WINDOWS,
        emission=frozenset({"allowed_lateness"}),
        stages=frozenset({"top_n", "cascade", "interval_join"}),
        # One step with every row, then the end of input: no lag decides anything.
        watermarks=frozenset({"auto_lag"}),
        why=(
            "every source is finite, so one Spark batch job computes the final windows "
            "(the same result as streaming the data in one step, then closing the sources)"
        ),
        snapshot=(
            "collect() runs the batches sent so far as one Spark batch job, as if the "
            "sources were closed after them"
        ),
    ),
    Capabilities(
        lowering="native",
        inputs=frozenset({"unbounded"}),
        # Spark's session operator drops a late event by its own proto-window and merges a
        # micro-batch's rows into sessions before evicting closed ones: not the specified rule.
        window_kinds=frozenset({"tumbling", "sliding"}),
        emission=frozenset(),
        # An inner interval join without lateness options runs on Spark's own stream-stream
        # join when asked for: exact with krishiv's filter of late rows in front of it, but
        # slower than krishiv's join operator (docs/joins.md, "Lowerings").
        forced_only=frozenset({"session", "interval_join"}),
        # Each window fires once, every key in the same micro-batch: ranked per micro-batch.
        stages=frozenset({"top_n"}),
        why=(
            "the plan uses event-time windows with on-watermark firing and no allowed lateness: "
            "Spark's withWatermark + window/session_window + groupBy().agg() in append mode "
            "fires each window once when the watermark reaches its end and drops an event only "
            "when all of its windows have closed, exactly as specified (checked over random "
            "batchings against the stateful lowering and the model: "
            "tests/test_differential.py::test_native_shapes_over_batchings); no Python runs per row"
        ),
    ),
    Capabilities(
        lowering="stateful",
        inputs=frozenset({"bounded", "unbounded"}),
        window_kinds=_STATEFUL_WINDOWS,
        emission=frozenset(
            {"early_trigger", "allowed_lateness", "non_accumulating", "late_handler", "state_ttl"}
        ),
        # The second window of a cascade, and window top-N, run in the operator after the
        # first window, corrections included. Joins: one operator over both inputs.
        stages=frozenset(
            {"cascade", "top_n", "join", "interval_join", "window_after_join", "keyed_agg", "after_union"}
        ),
        # The operator runs each micro-batch at the watermark the driver computed from the lag
        # recorded for it in the checkpoint (krishiv_py.runtime.auto_watermark).
        watermarks=frozenset({"auto_lag"}),
        why="a custom Spark operator keeps the windows in state and fires them itself",
    ),
)


@attrs.frozen
class Feature:
    """One thing a plan uses that its lowering must run; ``text`` names it in reasons."""

    name: FeatureName
    text: str


def capabilities(lowering: Lowering) -> Capabilities:
    """The table row of ``lowering``; :class:`PlanError` for a name that is not a lowering."""
    for caps in LOWERINGS:
        if caps.lowering == lowering:
            return caps
    names = ", ".join(repr(c.lowering) for c in LOWERINGS)
    raise PlanError(f"lowering= must be one of {names} (or None for the planner's choice), got {lowering!r}")


def choose(plan: n.PlanNode) -> tuple[Lowering, str]:
    """Pick the lowering for ``plan`` and say why."""
    features = features_of(plan)
    blocked: tuple[Capabilities, list[Feature]] | None = None
    for caps in LOWERINGS:
        missing = [f for f in features if not caps.covers(f.name)]
        if not missing:
            if blocked is None:
                return caps.lowering, _stateless_why(plan) if caps.lowering == "native" else caps.why
            preferred, needs = blocked
            return caps.lowering, (
                f"the plan uses {_texts(needs)}, which the {preferred.lowering} lowering cannot run "
                f"exactly, so it needs the {caps.lowering} lowering ({caps.why})"
            )
        if blocked is None and caps.covers(features[0].name):  # [0]: the input
            blocked = (caps, missing)
    raise PlanError(f"no lowering runs a plan that uses {_texts(features)}")


def _stateless_why(plan: n.PlanNode) -> str:
    """The native lowering's reason, for what the plan holds: a plan without a window or join
    keeps no state, and its reason says so rather than speaking of windows."""
    native = capabilities("native").why
    if n.window_aggregates(plan) or n.joins_of(plan):
        return native
    lookups = any(isinstance(x, n.LookupJoin) for x in n.walk(plan))
    what = "filters, projections and lookup joins" if lookups else "filters and projections"
    return (
        f"the plan has no window and no join of two streams, only {what}: Spark runs them "
        "row by row in each micro-batch and keeps no state; no Python runs per row"
    )


def force(plan: n.PlanNode, lowering: Lowering, *, how: str) -> tuple[Lowering, str]:
    """``lowering`` with its reason, or :class:`PlanError` if it cannot run ``plan`` exactly.

    ``how`` names what asked for it in the error (``"lowering='native'"``).
    """
    chosen, reason = choose(plan)
    if chosen == lowering:
        return chosen, reason
    caps = capabilities(lowering)
    missing = [f for f in features_of(plan) if not caps.covers(f.name, forced=True)]
    if missing:
        raise PlanError(
            f"{how} asks for the {lowering} lowering, which cannot run this plan exactly: "
            f"the plan uses {_texts(missing)} (left to itself, the planner picks {chosen!r})"
        )
    if n.is_bounded(plan) or caps.snapshot is None:
        return lowering, f"{how} asks for the {lowering} lowering: {caps.why}"
    return lowering, caps.snapshot


def features_of(plan: n.PlanNode) -> list[Feature]:
    """The features ``plan`` uses: its input first, then per window its kind and emission options."""
    out = [
        Feature("bounded", "finite input") if n.is_bounded(plan) else Feature("unbounded", "unbounded input")
    ]
    if any(w.auto is not None for w in n.watermarks_of(plan)):
        out.append(
            Feature(
                "auto_lag",
                "an automatic watermark lag (Spark's watermark takes a fixed delay; krishiv's "
                "operator runs each micro-batch at the watermark of the lag recorded for it)",
            )
        )
    for agg in n.window_aggregates(plan):
        kind = window_kind(agg.window)
        name = kind.replace("_", " ")
        text = f"{'an' if name[0] in 'aeiou' else 'a'} {name} window"
        if isinstance(agg.window, SessionWindow) and agg.window.max_duration_ms is not None:
            text += f" (max_duration_ms={agg.window.max_duration_ms})"
        if kind == "processing_tumbling":
            text = (
                "a processing-time tumbling window (its rows are timed by when their micro-batch "
                "started and it fires by the wall clock, so its results depend on when rows arrive "
                "and are not reproducible)"
            )
        out.append(Feature(kind, text))
        out += _emission_features(agg.emission)
    if n.top_ns(plan):
        out.append(Feature("top_n", "window top-N (top_n)"))
    if any(n.cascade_of(a) is not None for a in n.window_aggregates(plan)):
        out.append(Feature("cascade", "a window over windowed results"))
    if any(n.union_windows(a.input) is not None for a in n.window_aggregates(plan)):
        out.append(Feature("after_union", "a window over a union of windows' results"))
    kinds = {type(x) for x in n.walk(plan)}
    out += [
        Feature("keyed_agg", k.per_key_feature)
        for k in KINDS.values()
        if k.per_key_feature and k.node in kinds
    ]
    if any(n.joins_of(a.input) for a in n.window_aggregates(plan)):
        out.append(Feature("window_after_join", "a window over a join's rows"))
    if any(n.joins_of(j.left) or n.joins_of(j.right) for j in n.joins_of(plan)):
        out.append(Feature("window_after_join", "a join of a join's rows"))
    if any(n.window_aggregates(j.left) or n.window_aggregates(j.right) for j in n.joins_of(plan)):
        out.append(Feature("window_after_join", "a join of a window's results"))
    for join in n.joins_of(plan):
        if join.kind == "interval" and join.how == "inner":
            out.append(Feature("interval_join", "an inner interval join"))
        else:
            out.append(Feature("join", f"{JOIN_TEXT[join.kind]} (how={join.how!r})"))
        out += _emission_features(join.emission)
    return out


#: How a reason names each join; none runs on Spark's own stream-stream join (docs/joins.md).
JOIN_TEXT = {
    "interval": "an interval join",
    "window": "a window join",
    "as_of": "an as-of join",
}


def window_kind(window: WindowSpec) -> WindowKind:
    """The kind of ``window``; a new window class must be added here."""
    if isinstance(window, TumblingWindow):
        return "processing_tumbling" if window.processing_time else "tumbling"
    if isinstance(window, SlidingWindow):
        return "sliding"
    if isinstance(window, SessionWindow):
        return "session" if window.max_duration_ms is None else "capped_session"
    if isinstance(window, TimeIntervalWindow):
        return "time_interval"
    if isinstance(window, EventSlidingWindow):
        return "event_sliding"
    assert_never(window)


def _emission_features(emission: Emission) -> list[Feature]:
    # The same options, named the same way, as Emission.stateful_features().
    out = []
    if emission.trigger.is_early:
        out.append(Feature("early_trigger", f"trigger {emission.trigger.describe()}"))
    if emission.allowed_lateness_ms:
        out.append(Feature("allowed_lateness", f"allowed_lateness({emission.allowed_lateness_ms} ms)"))
    if emission.accumulation != "accumulating":
        out.append(Feature("non_accumulating", f"accumulation({emission.accumulation!r})"))
    handler = emission.late_handler
    if handler is not None and not counts_only(handler):
        out.append(Feature("late_handler", f"late-event handler {type(handler).__name__}"))
    if emission.state_ttl is not None:
        out.append(Feature("state_ttl", f"state TTL ({emission.state_ttl.describe()})"))
    return out


def _texts(features: list[Feature]) -> str:
    texts = list(dict.fromkeys(f.text for f in features))
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]
