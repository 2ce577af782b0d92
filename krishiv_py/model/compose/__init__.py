"""The reference model of composition (SPEC 3.13): any operator after any operator, as changelogs.

A :class:`ComposedModel` runs a tree of operators described by small
frozen values (:mod:`krishiv_py.model.compose.ops`: :class:`Source`,
:class:`WindowOf`, :class:`JoinOf`, :class:`AggOf`, :class:`TopNOf`,
:class:`UnionOf`, :class:`FilterOf`, :class:`SelectOf`) one *step* at a
time, as the other models do: one ``send``, ``advance_watermark`` or
``close`` is one step (one micro-batch). Within a step the operators run
inputs first; each takes its inputs' changes of the step, then their new
watermarks, so a result fires before the downstream windows the same
watermark closes (SPEC 3.11).

Changelogs
    Every stream is a changelog of :class:`Change` elements: a row, its
    kind (``"emit"`` or ``"retract"``) and its event time in ms. A source
    row is an emit. A retraction withdraws one earlier equal row (a
    multiset): the one with its event time if one is held, else the
    earliest held. Every retraction an operator sends carries the event
    time of the emit it withdraws. A step's changes of one operator are its
    retractions, then its emits.

Operators on sources keep their oracles
    A window that reads a source is a :class:`ReferenceModel`, and a join of
    two sources a :class:`JoinModel`, both in ``"retracting"`` mode; they
    classify the lateness of source rows, as they always did.

Operators on changelogs compute from the net rows
    Every other operator keeps all of its net input rows (emits not yet
    withdrawn) for good, and after each step computes its *desired* output
    from them and the watermark in force (its input watermark after the
    step), then emits the difference with what it emitted before: it
    retracts what is gone and emits what is new. So its results are exactly
    what it computes on the upstream's current net rows, and nothing an
    upstream sends is dropped downstream, however late.

    - Window (tumbling, sliding, session): a window is desired once
      ``W >= end``; its row holds the keys, ``window_start``, ``window_end``
      and the aggregates; event time ``window_end - 1``. A fired window whose
      value changes is retracted and emitted again; one that disappears
      (rows withdrawn, sessions merged or split) is retracted. Sessions
      merge rows at most ``gap`` apart (SPEC 3.3), so a session that fired
      at ``W = end`` merges with a row at exactly ``end`` (on time): it is
      retracted and the merged session fires later.
    - Join: an interval pair (``l + lower <= r <= l + upper``, equal keys,
      no null among them) is desired as soon as both rows are held; a left
      pad once ``W > l + upper``, a right pad once ``W > r - lower``, while
      the row has no partner: a partner withdraws the pad, and it comes back
      when its last partner is withdrawn (Flink's outer joins); a window
      join's pair once ``W >= end`` of a window both rows are in. A joined
      row's event time is the later of its rows' (a pad's: its row's).
    - ``agg`` (no window, Flink's group aggregation): one row per key (keys,
      then aggregates). After a step, a key whose input changed and whose
      row differs retracts its previous row and emits the new one, at the
      event time of the key's last input change in the step; a key left
      with no rows only retracts; an unchanged row sends nothing. Several
      changes of a key in one step make one update (a micro-batch's).
    - ``top_n`` per key over all rows: ranked as :func:`top_n_rows` ranks a
      window (``ties``, nulls last); rows entering or leaving the top are
      emitted or retracted, each at its own event time.
    - over-aggregation (``over_rows``, ``over_range``): an
      :class:`~krishiv_py.model.over.OverModel` in ``"retracting"`` mode
      over the input's changes; a row's result once the watermark passes
      it, at the row's event time; a row placed before emitted results
      (late within the allowed lateness, or any changelog row) retracts and
      emits the results it changes; its watermark passes on unchanged.
    - ``union`` carries every input's changes, in input order; ``filter``
      passes an emit when the predicate holds and a retraction when an
      equal row it passed is held; ``select`` maps every change's row.

Watermarks
    A source's watermark is ``max(previous, max event time sent - lag)``;
    ``advance_watermark(ts)`` raises it to ``ts``, ``close()`` to
    :data:`END_OF_TIME_MS`. A two-input operator's input watermark is the
    minimum of its inputs' (``None`` while one has none; a closed input is
    at ``END_OF_TIME_MS``). Each operator passes on its input watermark
    minus its delay: windows, ``agg``, ``top_n``, the stateless ones and
    inner interval joins 0; an outer interval join ``max(upper`` for left
    pads, ``-lower`` for right pads, ``0)``; a window join its window's
    size. ``END_OF_TIME_MS`` passes unchanged.

Lateness of source rows
    Source rows are classified by the oracle that reads them and, against
    the input watermark before the step, by a changelog join or tumbling or
    sliding window that reads them (through filters, selects and unions, or
    a join of a source with an operator's results), by the oracles' rules:
    an interval-join row is very late when ``t < W`` and ``W - t >= L``; a
    window or window-join row joins only its retained windows (``W < end +
    L``) and is very late with none. Very late rows are dropped and listed
    in :attr:`ComposedModel.late_events` (a join lists them as the
    JoinModel does); rows without a valid event time by their source when
    a changelog operator reads it (else by the oracle). ``agg``, ``top_n``,
    ``union`` and ``filter`` never drop a row of a valid time. Event times
    are whole milliseconds (a ``datetime`` is floored).

Not modelled yet
    As-of joins; semi, anti and outer window joins; triggers other than the
    watermark; capped sessions, per-event sliding and time-interval windows
    over a changelog; a session window reading source rows except through
    its oracle; state TTL, idle sources and processing time.

Examples
--------
>>> from krishiv_py.plan.windows import TumblingWindow
>>> a = Source("a", "t", ("k", "t"))
>>> b = Source("b", "t", ("k", "t"))
>>> joined = JoinOf(a, b, keys=["k"], between=(0, 5))
>>> model = ComposedModel(WindowOf(joined, TumblingWindow(size_ms=10), keys=["k"],
...                                aggregates=[AggSpec(name="n", func="count", column=None)]))
>>> model.send([{"k": 1, "t": 1}], source="a")
[]
>>> model.send([{"k": 1, "t": 3}, {"k": 1, "t": 12}], source="b")
[]
>>> model.send([{"k": 1, "t": 11}], source="a")
[{'k': 1, 'window_start': 0, 'window_end': 10, 'n': 1, 'kind': 'emit'}]
"""

from __future__ import annotations

from collections.abc import Sequence

from krishiv_py.errors import PlanError, SourceClosedError
from krishiv_py.model.compose._nodes import (
    AggNode,
    Event,
    FilterNode,
    JoinNode,
    JoinOracle,
    Node,
    OverNode,
    SelectNode,
    SourceNode,
    TopNNode,
    UnionNode,
    WindowNode,
    WindowOracle,
)
from krishiv_py.model.compose.ops import (
    AggOf,
    Change,
    FilterOf,
    JoinOf,
    Op,
    OverOf,
    Result,
    Row,
    SelectOf,
    Source,
    TopNOf,
    UnionOf,
    WindowOf,
    check_columns,
    columns_of,
    join_model_of,
    reads_sources,
    reference_model_of,
)
from krishiv_py.model.reference import AggSpec
from krishiv_py.plan.nodes import KIND_COLUMN
from krishiv_py.plan.windows import SessionWindow, SlidingWindow, TumblingWindow

__all__ = [
    "AggOf",
    "AggSpec",
    "Change",
    "ComposedModel",
    "FilterOf",
    "JoinOf",
    "Op",
    "OverOf",
    "SelectOf",
    "Source",
    "TopNOf",
    "UnionOf",
    "WindowOf",
    "columns_of",
    "join_model_of",
    "reference_model_of",
]


class ComposedModel:
    """Step-by-step reference run of a composition of operators (see the module docstring).

    Parameters
    ----------
    op
        The last operator; the tree under it is run. Equal descriptions are
        one operator (a source read twice is one source).
    oracles
        ``True`` (default): a window over a source runs on the
        :class:`ReferenceModel` and a join of two sources on the
        :class:`JoinModel`. ``False`` runs them as changelog operators too,
        classifying source rows by the same rules (to check one against the
        other).

    Examples
    --------
    >>> src = Source("main", "t", ("k", "t", "v"))
    >>> model = ComposedModel(AggOf(src, keys=["k"], aggregates=[AggSpec(name="s", func="sum", column="v")]))
    >>> model.send([{"k": "a", "t": 1, "v": 2}, {"k": "a", "t": 5, "v": 3}])
    [{'k': 'a', 's': 5, 'kind': 'emit'}]
    >>> model.send([{"k": "a", "t": 2, "v": 1}])
    [{'k': 'a', 's': 5, 'kind': 'retract'}, {'k': 'a', 's': 6, 'kind': 'emit'}]
    """

    def __init__(self, op: Op, *, oracles: bool = True) -> None:
        self._oracles = oracles
        self._nodes: dict[Op, Node] = {}
        self._order: list[Node] = []
        self._sources: dict[str, SourceNode] = {}
        self._final = self._build(op)
        if KIND_COLUMN in columns_of(op):
            raise PlanError(f"the last operator's columns hold {KIND_COLUMN!r}, the changelog's own column")
        self._closed: set[str] = set()

    # --- the steps ---------------------------------------------------------------------

    def send(self, rows: Sequence[Row], *, source: str | None = None) -> list[Result]:
        """Rows of one source: one step; return the last operator's changes of it."""
        name = self._source(source)
        return self._step(Event("send", frozenset({name}), tuple(rows)))

    def advance_watermark(self, ts_ms: int, *, source: str | None = None) -> list[Result]:
        """Raise a source's watermark (``None``: every open source) to ``ts_ms``: one step."""
        if isinstance(ts_ms, bool) or not isinstance(ts_ms, int):
            raise PlanError(f"ts_ms must be an integer number of milliseconds, got {ts_ms!r}")
        names = set(self._sources) - self._closed if source is None else {self._source(source)}
        return self._step(Event("advance", frozenset(names), ts_ms=ts_ms))

    def close(self, *, source: str | None = None) -> list[Result]:
        """End a source (``None``: every open one): one step."""
        if source is not None and source not in self._sources:
            raise PlanError(f"unknown source {source!r}; sources: {list(self._sources)}")
        names = set(self._sources) - self._closed if source is None else {source} - self._closed
        self._closed |= names
        return self._step(Event("close", frozenset(names)))

    # --- what it shows -----------------------------------------------------------------

    @property
    def results(self) -> list[Result]:
        """The last operator's changelog so far: each row with ``kind``."""
        return [{**c.row, KIND_COLUMN: c.kind} for c in self._final.log]

    def changelog(self, op: Op | None = None) -> list[Change]:
        """The whole changelog of ``op`` (default: the last operator), event times included."""
        return list(self._node(op).log)

    @property
    def watermark_ms(self) -> int | None:
        """The watermark the last operator passes on."""
        return self._final.wm

    def watermark_of(self, op: Op) -> int | None:
        """The watermark ``op`` passes on (a source: its own)."""
        return self._node(op).wm

    def source_watermarks(self) -> dict[str, int]:
        return {name: node.wm for name, node in self._sources.items() if node.wm is not None}

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(self._sources)

    @property
    def late_events(self) -> list[Result]:
        """Source rows dropped as invalid or very late, operator by operator (as each oracle lists them)."""
        return [event for node in self._order for event in node.late_events()]

    def late_events_of(self, op: Op) -> list[Result]:
        """The source rows ``op`` dropped (a source: its invalid rows, when a changelog operator reads it)."""
        return list(self._node(op).late_events())

    # --- inside ------------------------------------------------------------------------

    def _node(self, op: Op | None) -> Node:
        if op is None:
            return self._final
        if op not in self._nodes:
            raise PlanError(f"{op!r} is not an operator of this model")
        return self._nodes[op]

    def _source(self, name: str | None) -> str:
        if name is None:
            if len(self._sources) != 1:
                raise PlanError(f"say which source: one of {list(self._sources)}")
            name = next(iter(self._sources))
        if name not in self._sources:
            raise PlanError(f"unknown source {name!r}; sources: {list(self._sources)}")
        if name in self._closed:
            raise SourceClosedError(f"source {name!r} is closed")
        return name

    def _step(self, event: Event) -> list[Result]:
        for node in self._order:
            node.step(event)
        return [{**c.row, KIND_COLUMN: c.kind} for c in self._final.out]

    def _build(self, op: Op) -> Node:
        if op not in self._nodes:
            node = self._make(op)
            self._nodes[op] = node
            self._order.append(node)
        return self._nodes[op]

    def _make(self, op: Op) -> Node:
        if isinstance(op, Source):
            return self._source_node(op)
        if isinstance(op, WindowOf):
            return self._window(op)
        if isinstance(op, JoinOf):
            return self._join(op)
        if isinstance(op, AggOf):
            check_columns("agg", [*op.keys, *(s.column for s in op.aggregates)], op.input)
            return AggNode(op, self._changelog(op.input))
        if isinstance(op, TopNOf):
            check_columns("top_n", [*op.by, *op.keys], op.input)
            if op.n < 1 or op.ties not in ("all", "first") or not op.by:
                raise PlanError(f"top_n needs n >= 1, ties 'all' or 'first' and by= columns, got {op!r}")
            return TopNNode(op, self._changelog(op.input))
        if isinstance(op, OverOf):
            check_columns("an over-aggregation", [*op.keys, *(s.column for s in op.aggregates)], op.input)
            return OverNode(op, self._changelog(op.input), raw=reads_sources(op.input))
        if isinstance(op, UnionOf):
            if not op.inputs or len({columns_of(i) for i in op.inputs}) != 1:
                raise PlanError("a union needs one input at least, all with the same columns")
            return UnionNode([self._changelog(i) for i in op.inputs])
        if isinstance(op, FilterOf):
            return FilterNode(op, self._changelog(op.input))
        return SelectNode(op, self._changelog(op.input))

    def _changelog(self, op: Op) -> Node:
        node = self._build(op)
        if isinstance(node, SourceNode):
            node.listed = True
        return node

    def _source_node(self, op: Source) -> SourceNode:
        if op.time not in op.columns:
            raise PlanError(f"source {op.name!r}: its time column {op.time!r} is not in {list(op.columns)}")
        if op.name in self._sources:
            raise PlanError(f"two different sources are named {op.name!r}")
        self._sources[op.name] = node = SourceNode(op)
        return node

    def _window(self, op: WindowOf) -> Node:
        check_columns("window", [*op.keys, *(s.column for s in op.aggregates)], op.input)
        if self._oracles and isinstance(op.input, Source):
            self._build(op.input)
            return WindowOracle(op, op.input)
        window = op.window
        if not isinstance(window, TumblingWindow | SlidingWindow | SessionWindow) or (
            isinstance(window, SessionWindow) and window.max_duration_ms is not None
        ):
            raise PlanError(f"a window over a changelog is tumbling, sliding or session; got {window!r}")
        if isinstance(window, SessionWindow) and reads_sources(op.input):
            raise PlanError("a session window reads source rows only directly (its ReferenceModel)")
        return WindowNode(op, self._changelog(op.input))

    def _join(self, op: JoinOf) -> Node:
        if [op.between is not None, op.window is not None, op.as_of].count(True) != 1:
            raise PlanError("a join needs between=(lower, upper), window= or as_of=True, one of them")
        hows = ("inner", "left", "right", "full") + (("semi", "anti") if op.window is not None else ())
        hows = ("inner", "left") if op.as_of else hows
        if op.how not in hows:
            raise PlanError(f"how={op.how!r}: this join is one of {list(hows)}")
        right_keys = op.keys if op.right_keys is None else op.right_keys
        if not op.keys or len(op.keys) != len(right_keys):
            raise PlanError("a join needs key columns, as many on each side")
        if op.between is not None and op.between[0] > op.between[1]:
            raise PlanError(f"between=(lower, upper) needs lower <= upper, got {op.between!r}")
        check_columns("join", op.keys, op.left)
        check_columns("join", right_keys, op.right)
        if self._oracles and isinstance(op.left, Source) and isinstance(op.right, Source):
            self._build(op.left)
            self._build(op.right)
            return JoinOracle(op, op.left, op.right)
        return JoinNode(op, self._changelog(op.left), self._changelog(op.right))
