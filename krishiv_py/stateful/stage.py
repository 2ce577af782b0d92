"""A stage keyed by other columns than the operator before it: its rows moved, its state its own.

An operator after another one (a window after a join, SPEC 3.13) runs in
the same operator call when its keys include the first one's
(:mod:`krishiv_py.stateful.chain`). Keyed by other columns, its rows of one
key come out of many of the first operator's key buckets, so they cross
the cluster once more, in the same micro-batch:

1. The first operator's bucket call splits its results by the stage's
   key bucket (:func:`hand_on`) and sends each stage bucket one row: its
   rows and a *report* of the call (the operator bucket, the watermark,
   the rows its state holds and the watermark at which it next fires).
   Every stage bucket gets a row from every call, rows or not.
2. Spark groups those rows by stage bucket (``groupBy(...).applyInArrow``)
   and each stage bucket runs :func:`step`: the stage's kernel over the
   rows, at the watermark the first operator passes on.
3. The stage's state is krishiv's own, not Spark's state store: one Arrow
   file per stage bucket and micro-batch under the checkpoint
   (:class:`StageStore`), written before the micro-batch commits; the
   micro-batch that Spark runs again after a failure reads the version
   the micro-batch before it left — the scheme of Spark's own HDFS state
   store. The micro-batch's id comes from the task (Spark sets it as the
   ``streaming.sql.batchId`` local property of every task it runs).

The stage's watermark
    A first-operator bucket runs only in a micro-batch that has its rows or
    its tick, so a bucket whose window is due may fire it a micro-batch
    after the watermark passed its end. The stage runs at
    :func:`stages_watermark`: the watermark, held at ``due - 1`` by every
    bucket that holds state it has not yet fired at ``due`` (from the
    reports the stage keeps of every bucket), then passed through the first
    operator's :meth:`~krishiv_py.stateful.protocol.Kernel.output_watermark`
    (its structural delay, never its allowed lateness). Rows handed on are
    applied at the watermark of the stage's previous step (a result of
    on-time input is never late there), then the stage moves to the new
    one and fires what it passed (SPEC 3.11, as the chain does).

Examples
--------
>>> stages_watermark(105, {0: (2, 110), 1: (1, 100), 2: (0, -1)})
99
>>> stages_watermark(105, {0: (2, 110)}, buckets=2) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import pyarrow as pa

from krishiv_py.names import BATCH_TS, BRANCH, JOIN_SIDE, LATE_CLASS, LATE_WM, RESULT_KIND, SEQ, TS_VALUE
from krishiv_py.plan.watermarks import END_OF_TIME_MS
from krishiv_py.stateful._arrow import framed, ipc_bytes, ipc_table, unframed
from krishiv_py.stateful.between import Between, handed_rows
from krishiv_py.stateful.chain import ChainKernel
from krishiv_py.stateful.grouping import canonical
from krishiv_py.stateful.kernel import StepOutput
from krishiv_py.stateful.key_groups import key_groups_of, task_ranges
from krishiv_py.stateful.protocol import NOT_DUE, Kernel
from krishiv_py.stateful.regroup import gather_stepped
from krishiv_py.stateful.versioned import KeyGroupStore, Piece, VersionedBlobs, piece_keep, range_name

__all__ = [
    "JoinSide",
    "StageSpec",
    "Upstream",
    "StageState",
    "StageStore",
    "KeyGroupStageStore",
    "gathered",
    "stage_blob",
    "stage_state",
    "hand_on",
    "handed_from",
    "levels",
    "route_of",
    "side_rows",
    "stages_watermark",
    "step",
]

#: A report's watermark when the micro-batch had none yet.
NO_WATERMARK = -(2**63)

_REPORT = pa.schema(
    [pa.field(name, pa.int64()) for name in ("bucket", "watermark_ms", "state_rows", "next_due_ms")]
)


def stages_watermark(
    watermark: int | None, reports: Mapping[int, tuple[int, int]], buckets: int | None = None
) -> int | None:
    """``watermark`` held below every due bucket (see the module docstring).

    ``reports`` holds each bucket's last report, ``(state rows, next due
    watermark)``; with ``buckets``, a bucket in ``range(buckets)`` without
    one may hold state, and nothing moves (None) until it reports.
    """
    if watermark is None or (buckets is not None and any(b not in reports for b in range(buckets))):
        return None
    due = [d for rows, d in reports.values() if rows and d != NOT_DUE]
    return min([watermark, *(d - 1 for d in due)])


@attrs.frozen(kw_only=True)
class JoinSide:
    """How the first operator's results enter a join after it: as one side of the join's rows.

    ``layout``: each column of the join's rows (its kernel's row schema),
    its type and the result column it comes from (None: null, a column of
    the other side).
    """

    side: str
    layout: tuple[tuple[str, pa.DataType, str | None], ...]
    #: The results carry ``kind`` (emits and retractions), which the join takes.
    retracting: bool = False
    #: A join of two operators' results (one operator, :class:`~krishiv_py.stateful.union.UnionKernel`
    #: with ``tagged``): the other side, made of the results of branch 1 (this one: of branch 0).
    other: JoinSide | None = None
    #: With ``other``: the filters and projections between this side's operator and the join, over
    #: its results (the layout's sources are their columns).
    between: Between | None = None
    #: The operator's results carry their own event times (``__kp_ts``: a join's, an aggregation's
    #: or a top-N's per key); False: a window's, ``window_end - 1 ms``.
    timed: bool = True

    @property
    def sources(self) -> tuple[tuple[str, pa.DataType], ...]:
        """The result columns this side reads (after the filters and projections between), with
        the types it takes them in."""
        return tuple((source, kind) for _, kind, source in self.layout if source is not None)

    def handed(self, results: pa.Table, *, retracting: bool, at: int | None) -> pa.Table:
        """A join of two operators' results (``other``): each one's results, through the filters
        and projections between it and the join, as the join's rows of its side.

        The two operators' results travel as one table (the columns of both,
        nulls where one has none): a window's rows drop the event times the
        other operator's results carry (and a row with no ``kind`` is an emit).
        """
        assert self.other is not None
        branch = np.asarray(results.column(BRANCH).to_numpy(zero_copy_only=False), np.int64)
        parts = []
        for i, side in enumerate((attrs.evolve(self, other=None), self.other)):
            mine = results.filter(pa.array(branch == i))
            if not side.timed and BATCH_TS in mine.column_names:
                mine = mine.drop_columns([BATCH_TS])
            handed = handed_rows(mine, side.sources, between=side.between, retracting=retracting, at=at)
            parts.append(side.rows(handed))
        return pa.concat_tables(parts)

    def rows(self, handed: pa.Table) -> pa.Table:
        """``handed`` (the result columns and event time) as the join's rows of this side."""
        assert self.other is None, "a join of two operators' results hands each side its rows (handed)"
        count = handed.num_rows
        cols: dict[str, Any] = {JOIN_SIDE: pa.array([self.side] * count, pa.string())}
        for name, kind, source in self.layout:
            if source is not None:
                cols[name] = handed.column(source).cast(kind)
            else:
                cols[name] = pa.array([None] * count, kind)
        cols[BATCH_TS] = handed.column(BATCH_TS)
        if self.retracting:
            cols[RESULT_KIND] = handed.column(RESULT_KIND)
        return pa.table(cols)

    def empty(self) -> pa.Table:
        fields = [pa.field(JOIN_SIDE, pa.string())] + [pa.field(name, kind) for name, kind, _ in self.layout]
        fields.append(pa.field(BATCH_TS, pa.int64()))
        if self.retracting:
            fields.append(pa.field(RESULT_KIND, pa.string()))
        return pa.schema(fields).empty_table()


@attrs.frozen
class Upstream:
    """The operator and the stages before a stage that follows another stage, first to last: the
    watermark they pass on is each one's in turn (their structural delays add up)."""

    kernels: tuple[Kernel, ...]

    def output_watermark(self, watermark_ms: int | None) -> int | None:
        for kernel in self.kernels:
            watermark_ms = kernel.output_watermark(watermark_ms)
        return watermark_ms


@attrs.frozen(kw_only=True)
class StageSpec:
    """A stage's kernel, what it reads of the first operator's results, and where its state goes.

    ``then``: the next stage, keyed by other columns again (its rows cross
    the cluster once more, in the same micro-batch). A stage hands it its
    results and a report exactly as the operator hands them to the first
    stage; the watermark in the report is the stage's own input watermark
    held below the buckets before it (:func:`handed_from`), so each stage's
    watermark is held by every operator and stage before it.
    """

    kernel: Kernel
    #: The kernels before the stage (the watermark they pass on): the first operator's, or
    #: for a stage after a stage every one before it (:class:`Upstream`).
    upstream: Kernel | Upstream
    #: The columns the stage reads of the first operator's results, with the types it takes.
    columns: tuple[tuple[str, pa.DataType], ...]
    #: The stage's key buckets, and the first operator's.
    buckets: int
    upstream_buckets: int
    #: Where the stage's state versions go (a directory or URI under the checkpoint; set when
    #: the job's query is built).
    path: str = ""
    #: Whether the first operator's results carry ``kind`` (emits and retractions), which it takes.
    retracting: bool = False
    #: Filters and projections between the two, over the first operator's results.
    between: Between | None = None
    #: A join stage: how the first operator's results become one side of its rows.
    join_side: JoinSide | None = None
    #: A join stage: the other side's columns as its map tasks encode them (name, type, encoded name).
    side_input: tuple[tuple[str, pa.DataType, str], ...] = ()
    #: The next stage, keyed by other columns again (None: this one's results are the job's).
    then: StageSpec | None = None
    #: The first micro-batch of the operator's layout (its tasks, SPEC 3.15): the reports of the
    #: tasks of a layout before it are dropped (:func:`step`).
    layout_since: int = 0
    #: Key groups (SPEC 3.15): the stage's rows go to task ``key group * buckets // key_groups``
    #: and its state is kept per task's range of key groups, so it moves when ``buckets``
    #: changes; None: ``buckets`` hashed buckets, fixed for the checkpoint's life.
    key_groups: int | None = None

    @property
    def before(self) -> tuple[Kernel, ...]:
        """The kernels before the stage, first to last (the operator's, then each stage's)."""
        return self.upstream.kernels if isinstance(self.upstream, Upstream) else (self.upstream,)

    @property
    def read(self) -> tuple[tuple[str, pa.DataType], ...]:
        """The result columns the stage reads."""
        return self.columns if self.join_side is None else self.join_side.sources

    def describe(self) -> str:
        return (
            f"{self.kernel.describe()}, over the rows of the operator before it moved to "
            f"{self.buckets} bucket(s) of its own keys"
        )

    def with_path(self, path: str) -> StageSpec:
        """This stage's state under ``path``, each stage after it under ``<path>/then-<n>``."""
        then = self.then
        if then is None:
            return attrs.evolve(self, path=path)
        root = path.rstrip("/")
        out = [attrs.evolve(self, path=path)]
        for i, level in enumerate(levels(then), start=1):
            out.append(attrs.evolve(level, path=f"{root}/then-{i}"))
        return nested(out)

    def with_buckets(
        self,
        buckets: int,
        *,
        upstream: int | None = None,
        since: int | None = None,
        key_groups: int | None = None,
    ) -> StageSpec:
        """Every stage from this one on with ``buckets`` key buckets (with ``key_groups``: tasks,
        each a range of key groups), this one after ``upstream`` calls of the operator before it
        (by default as many); ``since``: the first micro-batch of the operator's layout."""
        return nested(
            [
                attrs.evolve(
                    level,
                    buckets=buckets,
                    upstream_buckets=upstream if i == 0 and upstream else buckets,
                    layout_since=level.layout_since if since is None else since,
                    key_groups=key_groups if key_groups is not None else level.key_groups,
                )
                for i, level in enumerate(levels(self))
            ]
        )

    @property
    def movable(self) -> bool:
        """Whether every stage from this one on can move its state by key group."""
        return all(level.kernel.movable for level in levels(self))

    def task_range(self, route: int) -> tuple[int, int]:
        """The key groups stage task ``route`` owns (key-grouped stages only)."""
        assert self.key_groups is not None
        return task_ranges(self.key_groups, self.buckets)[route]

    @property
    def layout_dirs(self) -> frozenset[str]:
        """The state directories of this layout's tasks (key-grouped stages only)."""
        assert self.key_groups is not None
        return frozenset(range_name(lo, hi) for lo, hi in task_ranges(self.key_groups, self.buckets))


def levels(spec: StageSpec | None) -> list[StageSpec]:
    """``spec`` and the stages after it, first to last."""
    out = []
    while spec is not None:
        out.append(spec)
        spec = spec.then
    return out


def nested(stages: Sequence[StageSpec]) -> StageSpec:
    """``stages`` (first to last; their own ``then`` ignored) as one chain: each one's next is the next."""
    then: StageSpec | None = None
    for level in reversed(stages):
        then = attrs.evolve(level, then=then)
    assert then is not None
    return then


def bucket_base(spec: StageSpec, level: int) -> int:
    """The first statistics bucket number of ``level`` (0: the first stage): stage buckets count down
    from -1, level after level (the operator's count up from 0)."""
    return -1 - sum(s.buckets for s in levels(spec)[:level])


def route_of(rows: pa.Table, keys: Sequence[str], buckets: int, key_groups: int | None = None) -> np.ndarray:
    """Each row's stage bucket: a hash of its key values (equal keys, equal bucket, on any machine).

    With ``key_groups``: the task of its key group (Spark's ``hash()``, as the
    operator's rows and every state row split by key group are hashed).
    Without: column by column, a value's hash does not depend on the other
    rows (an integer column with a null is still hashed as integers), a null
    hashes to one constant, and the columns' hashes combine in order.
    """
    if key_groups is not None:
        groups = key_groups_of([rows.column(k) for k in keys], key_groups, rows.num_rows)
        out_kg: np.ndarray = groups * buckets // key_groups
        return out_kg
    import pandas as pd

    if not keys or buckets == 1 or not rows.num_rows:
        return np.zeros(rows.num_rows, np.int64)
    combined = np.zeros(rows.num_rows, np.uint64)
    for k in keys:
        col = canonical(rows.column(k))
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
        present = col.drop_null()
        if len(present):
            filled = col.fill_null(present[0]) if col.null_count else col
            hashed = pd.util.hash_array(filled.to_numpy(zero_copy_only=False)).astype(np.uint64)
        else:
            hashed = np.zeros(rows.num_rows, np.uint64)
        hashed = np.where(valid, hashed, np.uint64(0x9E3779B97F4A7C15))
        combined = combined * np.uint64(1_000_003) ^ hashed
    out: np.ndarray = (combined % np.uint64(buckets)).astype(np.int64)
    return out


def _route_keys(kernel: Kernel) -> tuple[str, ...]:
    """The keys a stage's rows are routed by: its first kernel's (a chain's first one's)."""
    while isinstance(kernel, ChainKernel):
        kernel = kernel.first
    return kernel.keys


def hand_on(
    spec: StageSpec,
    bucket: int,
    results: pa.Table,
    watermark_ms: int | None,
    state_rows: int,
    next_due_ms: int,
) -> list[bytes]:
    """One value per stage bucket: its share of ``results`` and the report of this bucket call."""
    report = pa.table(
        {
            "bucket": [bucket],
            "watermark_ms": [NO_WATERMARK if watermark_ms is None else watermark_ms],
            "state_rows": [state_rows],
            "next_due_ms": [next_due_ms],
        },
        schema=_REPORT,
    )
    side = spec.join_side
    if side is not None and side.other is not None:  # two windows' results, each its side's rows
        rows = side.handed(results, retracting=spec.retracting, at=watermark_ms)
    else:
        rows = handed_rows(
            results, spec.read, between=spec.between, retracting=spec.retracting, at=watermark_ms
        )
        rows = side.rows(rows) if side is not None else rows
    routes = route_of(rows, _route_keys(spec.kernel), spec.buckets, spec.key_groups)
    return [framed([rows.filter(pa.array(routes == s)), report]) for s in range(spec.buckets)]


def handed_from(
    spec: StageSpec, route: int, state: StageState, out: StepOutput, upstream_wm: int | None, *, bounded: bool
) -> list[bytes]:
    """A stage bucket's results and report for the next stage, as :func:`hand_on` makes the operator's.

    The report's watermark is the input watermark held below every bucket
    before this stage that still holds something due
    (:func:`stages_watermark` over the reports this stage holds), so that
    the next stage is held by the operator's buckets and this stage's alike.
    """
    nxt = spec.then
    assert nxt is not None
    reports = state.report_map()
    held = END_OF_TIME_MS if bounded else stages_watermark(upstream_wm, reports, spec.upstream_buckets)
    rows = spec.kernel.state_rows(state.kernel) if state.kernel is not None else 0
    due = next_due(spec, state, upstream_wm)[0]
    return hand_on(nxt, route, out.results, held, rows, due)


@attrs.frozen
class StageState:
    """A stage bucket's state: its kernel's, the reports it holds, its watermark, the next arrival."""

    kernel: pa.Table | None = None
    #: The last report of each first-operator bucket (``_REPORT``'s columns).
    reports: pa.Table = attrs.field(factory=_REPORT.empty_table)
    watermark_ms: int | None = None
    seq: int = 0
    #: The operator's layout its reports come from (:attr:`StageSpec.layout_since`).
    since: int = 0

    def report_map(self) -> dict[int, tuple[int, int]]:
        r = self.reports.to_pydict()
        return {
            int(b): (int(n), int(d))
            for b, n, d in zip(r["bucket"], r["state_rows"], r["next_due_ms"], strict=True)
        }


def side_rows(spec: StageSpec, encoded: pa.Table) -> list[tuple[int, bytes]]:
    """A map task's rows of a join stage's other side: one IPC stream per stage bucket (route)."""
    cols: dict[str, Any] = {name: encoded.column(value).cast(kind) for name, kind, value in spec.side_input}
    cols[BATCH_TS] = encoded.column(TS_VALUE).cast(pa.int64())
    cols[SEQ] = encoded.column(SEQ).cast(pa.int64())
    rows = pa.table(cols)
    routes = route_of(rows, _route_keys(spec.kernel), spec.buckets, spec.key_groups)
    return [(int(r), ipc_bytes(rows.filter(pa.array(routes == r)))) for r in np.unique(routes)]


def step(
    spec: StageSpec,
    state: StageState | None,
    handed: Sequence[bytes],
    now_ms: int,
    *,
    bounded: bool = False,
    side: Sequence[pa.Table] = (),
    watermark_ms: int | None = None,
) -> tuple[StageState, StepOutput, int | None, pa.Table]:
    """One micro-batch of one stage bucket: the rows handed on, then the watermark moved.

    Returns the new state, what the kernel emitted (the counts and late
    rows of a join stage's other side), the watermark of the first
    operator's input this micro-batch (None: none yet) and the other side's
    very late and invalid rows.
    ``bounded``: every row of a bounded run at once, then the end of input.
    ``watermark_ms``: the micro-batch's watermark of the first operator's
    input as the task read it from the query's offset log (None: it could
    not); what a micro-batch with no bucket of the first operator in it
    (a join stage's other side alone) runs at.
    """
    state = state or StageState(since=spec.layout_since)
    if state.since != spec.layout_since:
        # The operator runs on other tasks since a restart (SPEC 3.15): a report of a task of
        # the layout before speaks for key groups another task holds now, and one of a task
        # that is gone would hold the watermark for ever. Every task of the new layout reports
        # (the job wakes each until it does); until then the watermark waits.
        state = attrs.evolve(state, reports=_REPORT.empty_table(), since=spec.layout_since)
    parts = sorted((unframed(blob) for blob in handed), key=lambda p: int(p[1].column("bucket")[0].as_py()))
    reports = [p[1] for p in parts]
    marks = [int(r.column("watermark_ms")[0].as_py()) for r in reports]
    known = [m for m in marks if m != NO_WATERMARK]
    if watermark_ms is not None:
        known.append(watermark_ms)
    upstream_wm = max(known) if known else None
    all_reports = _merged_reports(state.reports, reports)
    held_state = attrs.evolve(state, reports=all_reports)
    wanted = stages_watermark(upstream_wm, held_state.report_map(), spec.upstream_buckets)
    target = END_OF_TIME_MS if bounded else spec.upstream.output_watermark(wanted)
    before = state.watermark_ms
    if target is not None and before is not None and target < before:
        target = before  # never backwards
    rows = _rows([p[0] for p in parts], spec, state.seq)
    extra = _rows(_in_arrival_order(side), spec, state.seq + rows.num_rows)
    # The rows handed on at the watermark before (a result of on-time input is never late
    # there); a join's other side, input like any source's, at the watermark now.
    # (A bounded run has no watermark until its end: all its rows come before it.)
    # (A stage that learns no watermark this micro-batch, a later join stage's other side alone,
    # takes its rows at the one it last ran at.)
    side_at = before if bounded or target is None else target
    kernel_state, applied = spec.kernel.step(state.kernel, rows, before, now_ms)
    outputs = [applied]
    took = None
    if extra.num_rows:
        kernel_state, took = spec.kernel.step(kernel_state, extra, side_at, now_ms)
        outputs.append(took)
    if target is not None and target != (side_at if extra.num_rows else before):
        kernel_state, fired = spec.kernel.step(kernel_state, extra.slice(0, 0), target, now_ms)
        outputs.append(fired)
    new = StageState(
        kernel=kernel_state if kernel_state.num_rows else None,
        reports=all_reports,
        watermark_ms=target if target is not None else before,
        seq=state.seq + rows.num_rows + extra.num_rows,
        since=state.since,
    )
    results = [o.results for o in outputs]
    closed = [o.closed for o in outputs if o.closed is not None]
    out = StepOutput(
        results=pa.concat_tables(results) if len(results) > 1 else results[0],
        very_late=took.very_late if took is not None else np.zeros(0, np.int64),
        invalid=took.invalid if took is not None else np.zeros(0, np.int64),
        on_time=took.on_time if took is not None else 0,
        mildly_late=took.mildly_late if took is not None else 0,
        future=took.future if took is not None else 0,
        closed=pa.concat_tables(closed) if closed else None,
        expired=sum(o.expired for o in outputs),
        arithmetic_errors=sum(o.arithmetic_errors for o in outputs),
    )
    return new, out, upstream_wm, _late(extra, out, side_at)


def _late(side: pa.Table, out: StepOutput, watermark: int | None) -> pa.Table:
    """A join stage's other side's very late and invalid rows, as the late-event side output takes them."""
    pieces = []
    names = [c for c in side.column_names if c not in (BATCH_TS, SEQ)]
    for label, idx in (("invalid", out.invalid), ("very_late", out.very_late)):
        if len(idx):
            take = pa.array(idx)
            cols: dict[str, Any] = {c: side.column(c).take(take) for c in names}
            cols[LATE_CLASS] = pa.array([label] * len(idx), pa.string())
            cols[LATE_WM] = pa.array([watermark] * len(idx), pa.int64())
            pieces.append(pa.table(cols))
    if not pieces:  # (as the operator sends them: see OperatorSpec.late_layout)
        return pa.table({LATE_CLASS: pa.array([], pa.string()), LATE_WM: pa.array([], pa.int64())})
    return pa.concat_tables(pieces)


def next_due(spec: StageSpec, state: StageState, upstream_wm: int | None) -> tuple[int, int]:
    """When the stage next fires, as a watermark of the first operator's input, and by the clock."""
    if state.kernel is None:
        return NOT_DUE, NOT_DUE
    event, clock = spec.kernel.next_due(state.kernel)
    if event != NOT_DUE:
        base = upstream_wm if upstream_wm is not None else 0
        out = spec.upstream.output_watermark(base)
        event += base - (out if out is not None else base)  # the first operator's delay
    return event, clock


def _merged_reports(held: pa.Table, new: list[pa.Table]) -> pa.Table:
    """The newest report of every first-operator bucket."""
    if not new:
        return held
    table = pa.concat_tables([held, *new])
    buckets = table.column("bucket").to_numpy()
    last = {int(b): i for i, b in enumerate(buckets)}
    return table.take(pa.array(sorted(last.values())))


def _in_arrival_order(side: Sequence[pa.Table]) -> list[pa.Table]:
    """The other side's rows by their own arrival order, without it (the stage numbers them anew)."""
    if not side:
        return []
    rows = pa.concat_tables(side)
    order = np.argsort(rows.column(SEQ).to_numpy(), kind="stable")
    return [rows.take(order).drop_columns([SEQ])]


def _rows(parts: list[pa.Table], spec: StageSpec, seq: int) -> pa.Table:
    """The rows handed on, in bucket order, numbered in arrival order from ``seq``."""
    rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0] if parts else _empty(spec)
    return rows.append_column(SEQ, pa.array(np.arange(seq, seq + rows.num_rows, dtype=np.int64)))


def _empty(spec: StageSpec) -> pa.Table:
    if spec.join_side is not None:
        return spec.join_side.empty()
    fields = [pa.field(name, kind) for name, kind in spec.columns] + [pa.field(BATCH_TS, pa.int64())]
    if spec.retracting:
        fields.append(pa.field(RESULT_KIND, pa.string()))
    return pa.schema(fields).empty_table()


def stage_blob(state: StageState) -> bytes:
    """``state`` as the bytes of one version of a stage task's state."""
    row = pa.table(
        {
            "kernel": pa.array([None if state.kernel is None else ipc_bytes(state.kernel)], pa.binary()),
            "reports": pa.array([ipc_bytes(state.reports)], pa.binary()),
            "watermark_ms": pa.array([state.watermark_ms], pa.int64()),
            "seq": pa.array([state.seq], pa.int64()),
            "since": pa.array([state.since], pa.int64()),
        }
    )
    return ipc_bytes(row)


def stage_state(blob: bytes) -> StageState:
    """The state one version's bytes hold (:func:`stage_blob`)."""
    row = ipc_table(blob).to_pylist()[0]
    kernel = ipc_table(row["kernel"]) if row["kernel"] is not None else None
    return StageState(
        kernel=kernel,
        reports=ipc_table(row["reports"]),
        watermark_ms=row["watermark_ms"],
        seq=int(row["seq"]),
        since=int(row.get("since") or 0),  # a state written before layouts: the first
    )


class StageStore:
    """A stage bucket's state, one Arrow file per micro-batch under ``path`` (local or a URI).

    ``<path>/<bucket>/<batch id>.arrow``, kept as
    :class:`~krishiv_py.stateful.versioned.VersionedBlobs`: :meth:`load_before`
    reads the newest version before a micro-batch, so the micro-batch Spark
    runs again starts where the one before it ended; :meth:`save` keeps the
    version before the new one and deletes older ones.
    """

    def __init__(self, path: str, bucket: int) -> None:
        self._blobs = VersionedBlobs(path, bucket)

    def load_before(self, batch_id: int) -> StageState | None:
        blob = self._blobs.load_before(batch_id)
        return None if blob is None else stage_state(blob)

    def save(self, batch_id: int, state: StageState) -> int:
        """Write ``state`` as the version of ``batch_id``; returns its size in bytes."""
        blob = stage_blob(state)
        self._blobs.save(batch_id, blob)
        return len(blob)


class KeyGroupStageStore:
    """A key-grouped stage task's state (SPEC 3.15): the key groups ``route`` owns, under
    ``<path>/<lo>-<hi>`` as the operator's (:class:`~krishiv_py.stateful.versioned.KeyGroupStore`).

    After a restart on another number of tasks a task gathers its key groups
    from the directories the tasks before left (:func:`gathered`)."""

    def __init__(self, spec: StageSpec, route: int) -> None:
        lo, hi = spec.task_range(route)
        self._spec = spec
        self._store = KeyGroupStore(spec.path, lo, hi, since=spec.layout_since, current=spec.layout_dirs)

    def load_before(self, batch_id: int, now_ms: int = 0) -> tuple[StageState | None, StepOutput | None]:
        """The task's state before ``batch_id``, and what gathering it fired (None: nothing moved)."""
        return gathered(self._spec, self._store.load_before(batch_id), now_ms)

    def save(self, batch_id: int, state: StageState) -> int:
        blob = stage_blob(state)
        self._store.save(batch_id, blob)
        return len(blob)


def gathered(
    spec: StageSpec, pieces: Sequence[Piece], now_ms: int = 0
) -> tuple[StageState | None, StepOutput | None]:
    """A stage task's state from the pieces its key groups were left in, and what it fired.

    Each piece's kernel state is split to the key groups the task takes. The
    tasks that left them may stand at different watermarks (a join stage's
    other side runs only the tasks its rows go to): each part is stepped over
    no rows to the highest, as the operator's parts are
    (:func:`~krishiv_py.stateful.regroup.gather_stepped`), and what that fires
    comes first. The reports are dropped with the layout they came from
    (:func:`step` waits for every task of the new one); the arrival count goes
    on from the highest.
    """
    if len(pieces) == 1 and pieces[0].groups is None:
        blob = pieces[0].blob
        return (None if blob is None else stage_state(blob)), None
    kernel = spec.kernel
    assert spec.key_groups is not None
    states: list[tuple[StageState, pa.Table | None]] = []
    for piece in pieces:
        if piece.blob is None:
            continue
        state = stage_state(piece.blob)
        table = state.kernel
        if table is not None and piece.groups is not None:
            table = kernel.split_state(table, piece_keep(spec.key_groups, piece))
        states.append((state, table))
    if not states:
        return None, None
    marks = [s.watermark_ms for s, _ in states if s.watermark_ms is not None]
    target = max(marks) if marks else None
    parts = [table for _, table in states if table is not None]
    together, caught = gather_stepped(kernel, parts, target, now_ms, _rows([], spec, 0))
    state = StageState(
        kernel=together if together is not None and together.num_rows else None,
        watermark_ms=target,
        seq=max(s.seq for s, _ in states),
        since=spec.layout_since,
    )
    return state, caught
