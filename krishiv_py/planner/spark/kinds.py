"""One descriptor per kind of operator node: what the stateful lowering knows of each.

An operator kind (a window, a join, an aggregation or a top-N per key, a
window's top-N, an over-aggregation) is one :class:`OperatorKind` in
:data:`KINDS`: the rule that lowers it at the bottom of a chain (its
``slot``), the keys its rows are bucketed by, whether its results carry
``kind``, whether a change of it may withdraw a row of any age (an
operator after it then keeps what it holds while the job runs), whether it
reads the event times of the rows it takes, how its kernel is built and
what ``explain()`` says of it. The lowering asks the descriptor, not the
node's class; a new operator kind is one descriptor here and one kernel.

Examples
--------
>>> from krishiv_py.api.stream import placeholder
>>> import krishiv_py as kp
>>> s = placeholder("k string, v bigint, t bigint", "s").watermark("t", 0)
>>> over = s.key_by("k").over_rows(2).agg(kp.sum(kp.col("v"))).plan
>>> kind = kind_of(over)
>>> kind.slot, kind.what, kind.changes, kind.reads_times
('keyed', 'the over-aggregation', False, True)
>>> kind.kernel(over)[0].describe()[:78]
"krishiv over-aggregation per key: keys=['k'] over the row and 2 rows before it"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

from krishiv_py.names import RESULT_KIND
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.plan.emission import Emission

__all__ = ["KINDS", "OperatorKind", "kernel_aggs", "kind_of"]

#: A kind's kernel and the input columns it reads, given the node, how much longer than its own
#: lateness it keeps what it holds (``carried_ms``: what the operator before it may still correct),
#: whether its rows may withdraw earlier ones, and whether its results carry their event times.
KernelOf = Callable[..., tuple[Any, tuple[Any, ...]]]


#: How a kind's kernel hands its results on to the operator after it: given the node, its kernel,
#: whether that operator reads the results' event times, and whether it is a join stage.
HandOn = Callable[..., Any]


def _as_is(node: Any, kernel: Any, *, times: bool, to_join: bool) -> Any:
    del node, times, to_join
    return kernel


def _own_emission(node: Any) -> Emission:
    emission: Emission = node.emission
    return emission


@attrs.frozen(kw_only=True)
class OperatorKind:
    """What the stateful lowering knows of one kind of operator node."""

    node: type[Any]
    #: The :class:`~krishiv_py.planner.spark.sources.Lowerer` rule that lowers it over streams.
    slot: Literal["window", "join", "keyed"]
    #: How errors and reasons name it ("the window").
    what: str
    #: The operator in the reasons of the stages after it ("window").
    noun: str
    #: What the stages after it read of each micro-batch.
    rows: str = "results"
    #: What every plan with it adds to the reason.
    reason: str = ""
    #: Whether the Spark query's single watermark may give the maximum event time.
    spark_max: bool = True
    #: Why a filter after it is exact ("": nothing to add).
    exact: str = ""
    #: Whether it runs after another operator in a chain (in its call or as a stage).
    follows: bool = True
    #: Whether a change of its results may withdraw a row of any age (per key over every row).
    changes: bool = False
    #: Whether it reads the event times of the rows it takes (an operator of changes before it
    #: then hands them on).
    reads_times: bool = False
    #: Whether its results are one row per key, identified by its keys.
    result_key: bool = False
    #: Whether its rows wait for the watermark to pass them (an over-aggregation's): with one
    #: watermark of a fixed lag it fires in the micro-batch that moves it, knowing where Spark
    #: moves it (a window's rule does the same for windows).
    waits_for_watermark: bool = False
    #: What the reason says when it follows an aggregation's or a top-N's changes per key ("":
    #: nothing to add).
    after_changes: str = ""
    #: Why it runs retracting when another operator takes results it may correct (its changelog
    #: ``updating`` in the analysed plan).
    fed_reason: str = ""
    #: Whether a window may follow it in a chain of operators.
    window_after: bool = True
    #: Whether a side of it that is another operator's results runs that operator before it,
    #: itself a stage after that operator (a join's sides; a window or an aggregation after
    #: another operator is a link of the chain instead).
    stages_sides: bool = False
    #: Whether it runs with an automatic watermark lag where it takes its sources' rows first
    #: (a join only with no operator before or after it).
    auto_lag: bool = False
    #: Its kernel as it hands its results on (:data:`HandOn`). Its keys, its changelog and how
    #: long its results may be corrected are the analysed plan's
    #: (:func:`~krishiv_py.plan.analysis.facts`).
    hand_on: HandOn = _as_is
    #: Its kernel over every row (None: the window's and the join's rules build their own).
    kernel: KernelOf | None = None
    #: Its emission options (a window top-N: its window's, whose callbacks it keeps).
    emission: Callable[[Any], Emission] = _own_emission
    #: Why a join of its results runs as it does ("": a join does not take its results).
    join_side: str = ""
    #: How the capability table names it as an operator per key over every row, which only the
    #: stateful lowering runs (None: the table reads its features otherwise).
    per_key_feature: str | None = None


#: Every operator kind, by plan node class (:func:`register`).
KINDS: dict[type[Any], OperatorKind] = {}


def register(kind: OperatorKind) -> OperatorKind:
    KINDS[kind.node] = kind
    return kind


def kind_of(node: Any) -> OperatorKind | None:
    """The descriptor of ``node``'s kind (None: not an operator)."""
    return KINDS.get(type(node))


def kernel_aggs(node: Any) -> tuple[Any, ...]:
    """The kernel's :class:`~krishiv_py.stateful.aggregates.AggSpec` of each aggregate of ``node``."""
    from krishiv_py.stateful.aggregates import AggSpec

    inp = facts(node.input).schema.to_arrow()
    out = facts(node).schema.to_arrow()
    return tuple(
        AggSpec(
            name=a.name,
            func=a.func,
            column=a.column,
            out_type=out.field(a.name).type,
            in_type=inp.field(a.column).type if a.column is not None else None,
        )
        for a in node.aggregates
    )


def _columns(node: Any, needed: set[str]) -> tuple[Any, ...]:
    """The input columns of ``node`` a kernel reads, in the input's order."""
    from krishiv_py.stateful.operator import InputColumn

    arrow = facts(node.input).schema.to_arrow()
    return tuple(
        InputColumn(name=f.name, type=f.type, index=i) for i, f in enumerate(arrow) if f.name in needed
    )


def _keyed_agg_kernel(
    node: n.KeyedAggregate, carried_ms: int = 0, *, retracting: bool = False, timed: bool = False
) -> tuple[Any, tuple[Any, ...]]:
    from krishiv_py.stateful.keyed_agg import KeyedAggKernel

    del carried_ms  # (it keeps every key while the job runs)
    ttl = node.emission.state_ttl
    kernel = KeyedAggKernel(
        keys=node.keys,
        aggs=kernel_aggs(node),
        ttl_ms=ttl.ttl_ms if ttl else None,
        retracting=retracting,
        event_times=timed,
    )
    needed = {*node.keys, *(a.column for a in node.aggregates if a.column is not None)}
    return kernel, _columns(node, needed)


def _window_top_n_kernel(
    node: n.TopN, carried_ms: int = 0, *, retracting: bool = False, timed: bool = False
) -> tuple[Any, tuple[Any, ...]]:
    """A window's top-N: its ranking goes once the window can no longer change."""
    return _top_n_kernel(node, carried_ms, retracting=retracting, timed=timed, windowed=True)


def _top_n_kernel(
    node: n.KeyedTopN | n.TopN,
    carried_ms: int = 0,
    *,
    retracting: bool = False,
    timed: bool = False,
    windowed: bool = False,
) -> tuple[Any, tuple[Any, ...]]:
    from krishiv_py.stateful.keyed_topn import KeyedTopNKernel

    names = tuple(c for c in facts(node.input).schema.names if c != RESULT_KIND)
    kernel = KeyedTopNKernel(
        keys=facts(node).keys or (),
        n=node.n,
        by=node.by,
        columns=names,
        ascending=node.ascending,
        ties=node.ties,
        retracting=retracting,
        event_times=timed and not windowed,
        expires=("window_end", carried_ms) if windowed else None,
    )
    return kernel, _columns(node, set(names))  # a top-N's rows are its results: every column travels


def _over_kernel(
    node: n.OverAggregate, carried_ms: int = 0, *, retracting: bool = False, timed: bool = False
) -> tuple[Any, tuple[Any, ...]]:
    from krishiv_py.stateful.over import OverKernel

    names = tuple(c for c in facts(node.input).schema.names if c != RESULT_KIND)
    kernel = OverKernel(
        keys=node.keys,
        columns=names,
        frame=node.frame,
        preceding=node.preceding,
        aggs=kernel_aggs(node),
        allowed_lateness_ms=node.emission.allowed_lateness_ms + carried_ms,
        mode="retracting" if node.retracting else "accumulating",
        retracting_input=retracting or facts(node.input).corrects,
        event_times=timed,
    )
    return kernel, _columns(node, set(names))  # a result carries its row: every column travels


#: Why an aggregation per key without a window runs as it does (docs/windows.md, "Without a window").
KEYED_REASON = (
    "; the aggregation per key without a window runs in krishiv's operator, by key bucket: each "
    "micro-batch that changes a key's values retracts the key's previous row and emits the new one "
    "(Spark's own streaming aggregation in update mode emits no retraction); the state holds one row "
    "per key seen and grows with the keys, unless key_by(...).with_state_ttl() expires the quiet ones"
)

#: Why a top-N per key runs as it does (docs/windows.md, "Without a window").
KEYED_TOP_N_REASON = (
    "; top_n per key runs in krishiv's operator, by key bucket: a row that enters a key's top is "
    "emitted and a row pushed out retracted (Spark ranks no unbounded input); the state holds the "
    "rows in the top of each key seen, and grows with the keys"
)

#: Why window top-N runs as it does on the stateful lowering (docs/windows.md, "Top-N").
WINDOW_TOP_N_REASON = (
    "; window top-N runs in krishiv's operator after the window, per window and key (in the "
    "window's call when keyed by the window's keys, else a stage by its own): the window's "
    "corrections re-rank the window, a row that enters its top is emitted and a row pushed out "
    "retracted, and a window's ranking goes once the window can no longer be corrected"
)

#: Why an over-aggregation runs as it does (docs/windows.md, "Over-aggregation").
OVER_REASON = (
    "; the over-aggregation runs in krishiv's operator, by key bucket (Spark runs no OVER window "
    "on a stream): each key's rows in event-time order, ties by arrival, a row's result emitted in "
    "the micro-batch whose watermark passes it, a late row within the allowed lateness correcting "
    "the results after it; the state holds each key's rows a frame can still reach (rows: the last "
    "n behind the lateness; range: the rows of range_ms behind it)"
)

#: Why no join but an inner interval join asked for runs on Spark's stream-stream join.
JOIN_REASON = (
    "; the join runs in krishiv's operator over both inputs tagged by side, not in Spark's "
    "stream-stream join, which has no allowed lateness, retractions, late-event side output, "
    "state TTL, window or as-of join, emits an outer row when its own state eviction drops "
    "the row rather than when SPEC 3.12 says, and drops a late row by the watermark of the "
    "micro-batch before the one in force (an inner interval join runs on it only with "
    "lowering='native', behind krishiv's own filter of late rows)"
)

#: Why a join of a join's rows runs as it does (docs/joins.md, "A join of a join").
JOIN_STAGE_REASON = (
    "; the second join is a stage after the first join's operator: the first join's rows (with "
    "their event times) cross the cluster once more to the second join's key buckets in the same "
    "micro-batch, the other stream's rows are routed there by their keys, and the second join keeps "
    "its state of its own (one Arrow file per bucket and micro-batch under the checkpoint); it keeps "
    "rows the first join's allowed lateness longer, so that late pairs still meet their partners"
)

#: Why a join of a window's results runs as it does (docs/joins.md, "A join of a window's results").
JOIN_WINDOW_REASON = (
    "; the join is a stage after the window's operator: each window's result (event time "
    "window_end - 1 ms) crosses the cluster to the join's key buckets in the micro-batch that fires "
    "it, the other stream's rows are routed there by their keys, and the join keeps its state of its "
    "own (one Arrow file per bucket and micro-batch under the checkpoint); the join runs at the "
    "window's watermark, which the window does not hold back"
)

#: Why a join of an aggregation's or a top-N's changes per key runs as it does (docs/joins.md).
JOIN_PER_KEY_REASON = (
    "; the join is a stage after the aggregation's or top-N's operator: each change (event time: "
    "the rows' that made it; a retraction the time of the emit it withdraws) crosses the cluster "
    "to the join's key buckets in the micro-batch that makes it, the other stream's rows are "
    "routed there by their keys, and the join keeps its state of its own (one Arrow file per "
    "bucket and micro-batch under the checkpoint)"
)


def _window_hands_on(node: n.WindowAggregate, kernel: Any, *, times: bool, to_join: bool) -> Any:
    """A window that may fire again runs retracting when an operator in its chain takes its
    results, whatever its accumulation (its results are not the job's), so that each firing
    withdraws the one before (a join stage takes them as they are: a result per window and keys)."""
    del times
    f = facts(node)
    if to_join or not f.corrects or f.retracts:
        return kernel
    return attrs.evolve(kernel, spec=attrs.evolve(kernel.spec, accumulation="retracting"))


def _timed_join(kernel: Any) -> Any:
    """A join's kernel handing on its rows with their event times."""
    from krishiv_py.stateful.joins import JoinKernel

    return JoinKernel(attrs.evolve(kernel.spec, event_times=True))


def _with_times(node: Any, kernel: Any, *, times: bool, to_join: bool) -> Any:
    """An aggregation's or a top-N's per key kernel (a chain's last) handing on its changes with
    their event times when the operator after it reads them (a join stage always does)."""
    del node
    return _last_evolved(kernel, event_times=True) if times or to_join else kernel


def _last_evolved(kernel: Any, **changes: Any) -> Any:
    """``kernel`` with its last kernel (a chain's, in the same call) evolved by ``changes``."""
    from krishiv_py.stateful.chain import ChainKernel

    if isinstance(kernel, ChainKernel):
        return attrs.evolve(kernel, then=_last_evolved(kernel.then, **changes))
    return attrs.evolve(kernel, **changes)


#: Why a window after an aggregation or a top-N per key runs as it does.
WINDOW_OVER_CHANGES_REASON = (
    "; a window after an aggregation or a top-N per key takes its changes at the event time of the "
    "rows that made them (an aggregation's: the latest among its key's rows of the micro-batch; a "
    "retraction at the time of the emit it withdraws) and keeps its windows "
    "while the job runs, since a change may withdraw a row of any age: its state holds the live "
    "changes (one per key of the operator before it) and the windows they are in"
)

#: Why a window whose results another operator takes runs retracting there.
WINDOW_FED_REASON = (
    "; a window whose results another operator takes and that may fire a window again runs "
    "retracting there, whatever its accumulation (its results are not the job's): each firing "
    "withdraws the one before"
)

#: Why an over-aggregation whose results another operator takes runs retracting there.
OVER_FED_REASON = (
    "; an over-aggregation whose results another operator takes and that may correct them (allowed "
    "lateness, a changelog before it) runs retracting there, whatever its accumulation: each "
    "correction withdraws the result before; each result reaches the operator after it at its "
    "row's event time, in the micro-batch whose watermark passes the row"
)


def _over_hands_on(node: n.OverAggregate, kernel: Any, *, times: bool, to_join: bool) -> Any:
    """An over-aggregation's kernel handing its results on: with their rows' event times when the
    operator after it reads them, and retracting when it may correct them."""
    del to_join
    f = facts(node)
    if f.corrects and not f.retracts:
        kernel = attrs.evolve(kernel, mode="retracting")
    return attrs.evolve(kernel, event_times=True) if times else kernel


_RETRACTION_EXACT = ", so a retraction passes a filter exactly when the emit it withdraws did"

register(
    OperatorKind(
        node=n.WindowAggregate,
        slot="window",
        what="the window",
        noun="window",
        exact=_RETRACTION_EXACT,
        reads_times=True,
        after_changes=WINDOW_OVER_CHANGES_REASON,
        fed_reason=WINDOW_FED_REASON,
        hand_on=_window_hands_on,
        join_side=JOIN_WINDOW_REASON,
        auto_lag=True,
    )
)
register(
    OperatorKind(
        node=n.Join,
        slot="join",
        what="the join",
        noun="join",
        rows="joined rows",
        reason=JOIN_REASON,
        spark_max=False,
        follows=False,
        hand_on=lambda node, kernel, **_: _timed_join(kernel),
        join_side=JOIN_STAGE_REASON,
        stages_sides=True,
        auto_lag=True,
    )
)
register(
    OperatorKind(
        node=n.KeyedAggregate,
        slot="keyed",
        what="the aggregation",
        noun="aggregation",
        reason=KEYED_REASON,
        changes=True,
        result_key=True,
        hand_on=_with_times,
        kernel=_keyed_agg_kernel,
        join_side=JOIN_PER_KEY_REASON,
        per_key_feature="an aggregation per key without a window",
    )
)
register(
    OperatorKind(
        node=n.KeyedTopN,
        slot="keyed",
        what="the top-N",
        noun="top-N",
        reason=KEYED_TOP_N_REASON,
        changes=True,
        hand_on=_with_times,
        kernel=_top_n_kernel,
        join_side=JOIN_PER_KEY_REASON,
        per_key_feature="top_n per key over every row",
    )
)
register(
    OperatorKind(
        node=n.TopN,
        slot="keyed",
        what="the window top-N",
        noun="top-N",
        reason=WINDOW_TOP_N_REASON,
        window_after=False,
        kernel=_window_top_n_kernel,
        emission=lambda node: _own_emission(node.input),
    )
)
register(
    OperatorKind(
        node=n.OverAggregate,
        slot="keyed",
        what="the over-aggregation",
        noun="over-aggregation",
        reason=OVER_REASON,
        reads_times=True,
        waits_for_watermark=True,
        fed_reason=OVER_FED_REASON,
        hand_on=_over_hands_on,
        kernel=_over_kernel,
        per_key_feature="an over-aggregation (Spark runs no OVER window on a stream)",
    )
)
