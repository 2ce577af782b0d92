"""The operators of a composition as plain descriptions, and what follows from them alone.

Each description is a small frozen value that names its input(s), so a
tree of them describes a composition (:class:`~krishiv_py.model.compose.ComposedModel`
runs it); equal descriptions are one operator. :func:`columns_of` gives an
operator's output columns, :class:`Layout` a joined row's (SPEC 3.12),
:func:`delay_of` how far a join holds its watermark back (SPEC 3.13).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal, TypeAlias

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.model.joins import JoinModel
from krishiv_py.model.reference import AggSpec, ModelWindow, ReferenceModel
from krishiv_py.plan.windows import SlidingWindow, TumblingWindow

__all__ = [
    "AggOf",
    "Change",
    "FilterOf",
    "JoinOf",
    "Layout",
    "Op",
    "OverOf",
    "SelectOf",
    "Source",
    "TopNOf",
    "UnionOf",
    "WindowOf",
    "check_columns",
    "columns_of",
    "delay_of",
    "join_model_of",
    "reads_sources",
    "reference_model_of",
]

Row: TypeAlias = Mapping[str, object]
Result: TypeAlias = dict[str, object]
Key: TypeAlias = tuple[object, ...]
Window: TypeAlias = tuple[int, int]
ChangeKind: TypeAlias = Literal["emit", "retract"]


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return (values,) if isinstance(values, str) else tuple(values)


def _maybe_names(values: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if values is None else _names(values)


def _specs(values: Iterable[AggSpec]) -> tuple[AggSpec, ...]:
    return tuple(values)


def _ops(values: Iterable[Op]) -> tuple[Op, ...]:
    return tuple(values)


@attrs.frozen
class Change:
    """One element of a changelog: ``row`` emitted or retracted, at event time ``ts_ms``."""

    row: Row = attrs.field(hash=False)
    kind: ChangeKind
    ts_ms: int
    #: A source row (through filters, selects and unions): its lateness is still to classify.
    raw: bool = attrs.field(default=False, eq=False, repr=False)


@attrs.frozen
class Source:
    """A source named ``name``: rows with ``columns``, event time in ``time``, watermark lag ``lag_ms``."""

    name: str
    time: str
    columns: tuple[str, ...] = attrs.field(converter=_names)
    lag_ms: int = 0


@attrs.frozen
class WindowOf:
    """A window and its aggregates per ``keys`` over ``input``.

    ``allowed_lateness_ms`` applies to source rows (SPEC 3.6); a changelog
    keeps every window.
    """

    input: Op
    window: ModelWindow  # over a changelog: tumbling, sliding or session
    keys: tuple[str, ...] = attrs.field(default=(), converter=_names)
    aggregates: tuple[AggSpec, ...] = attrs.field(default=(), converter=_specs)
    allowed_lateness_ms: int = 0


@attrs.frozen
class JoinOf:
    """An interval join (``between=(lower, upper)``), a window join (``window=``) or an as-of join
    (``as_of=True``: each left row with the latest right row of its key at or before its time,
    within ``max_age_ms``) of two streams."""

    left: Op
    right: Op
    keys: tuple[str, ...] = attrs.field(converter=_names)
    right_keys: tuple[str, ...] | None = attrs.field(default=None, converter=_maybe_names)
    between: tuple[int, int] | None = None
    window: TumblingWindow | SlidingWindow | None = None
    how: str = "inner"
    allowed_lateness_ms: int = 0
    as_of: bool = False
    max_age_ms: int | None = None


@attrs.frozen
class AggOf:
    """``agg`` per ``keys`` without a window (a regular group aggregation)."""

    input: Op
    keys: tuple[str, ...] = attrs.field(converter=_names)
    aggregates: tuple[AggSpec, ...] = attrs.field(converter=_specs)


@attrs.frozen
class TopNOf:
    """``top_n(n, by=..., per="key", keys=...)`` over all rows of ``input``."""

    input: Op
    n: int
    by: tuple[str, ...] = attrs.field(converter=_names)
    keys: tuple[str, ...] = attrs.field(default=(), converter=_names)
    ties: Literal["all", "first"] = "all"
    ascending: bool = False


@attrs.frozen
class OverOf:
    """An over-aggregation per ``keys`` over ``input`` (SPEC 3.16): ``frame="rows"`` with
    ``preceding`` rows before each row, or ``"range"`` with ``preceding`` ms before its time; each
    row's result (its columns, then the aggregates) once the watermark passes it, at the row's
    event time. ``allowed_lateness_ms`` applies to source rows; a changelog keeps every row."""

    input: Op
    keys: tuple[str, ...] = attrs.field(converter=_names)
    frame: Literal["rows", "range"] = "rows"
    preceding: int = 0
    aggregates: tuple[AggSpec, ...] = attrs.field(default=(), converter=_specs)
    allowed_lateness_ms: int = 0


@attrs.frozen
class UnionOf:
    """The union of changelogs with the same columns."""

    inputs: tuple[Op, ...] = attrs.field(converter=_ops)


@attrs.frozen
class FilterOf:
    """The changes of ``input`` whose rows ``predicate`` keeps."""

    input: Op
    predicate: Callable[[Row], bool]


@attrs.frozen
class SelectOf:
    """Every change of ``input`` with its row mapped to ``columns`` (by ``fn``; default: a projection)."""

    input: Op
    columns: tuple[str, ...] = attrs.field(converter=_names)
    fn: Callable[[Row], Row] | None = None


Op: TypeAlias = Source | WindowOf | JoinOf | AggOf | TopNOf | OverOf | UnionOf | FilterOf | SelectOf


def columns_of(op: Op) -> tuple[str, ...]:
    """The columns of ``op``'s rows, in order."""
    if isinstance(op, Source | SelectOf):
        return op.columns
    if isinstance(op, WindowOf):
        return (*op.keys, "window_start", "window_end", *(s.name for s in op.aggregates))
    if isinstance(op, AggOf):
        return (*op.keys, *(s.name for s in op.aggregates))
    if isinstance(op, OverOf):
        return (*columns_of(op.input), *(s.name for s in op.aggregates))
    if isinstance(op, JoinOf):
        columns = Layout(op).columns
        if op.how in ("semi", "anti"):  # the left side's columns only
            layout = Layout(op)
            return columns[: len(columns) - len(layout.right_rest)]
        return columns
    if isinstance(op, UnionOf):
        return columns_of(op.inputs[0])
    return columns_of(op.input)


class Layout:
    """A joined row's columns (SPEC 3.12): keys once, window bounds, the left's others, the right's."""

    def __init__(self, op: JoinOf) -> None:
        self.left_keys = op.keys
        self.right_keys = op.keys if op.right_keys is None else op.right_keys
        self.window = op.window is not None
        self.left_rest = tuple(c for c in columns_of(op.left) if c not in op.keys)
        taken = [*op.keys, *(("window_start", "window_end") if self.window else ()), *self.left_rest]
        #: each right column that is not a key, and its output name
        self.right_rest = tuple(
            (c, f"{c}_right" if c in taken else c) for c in columns_of(op.right) if c not in self.right_keys
        )

    @property
    def columns(self) -> tuple[str, ...]:
        bounds = ("window_start", "window_end") if self.window else ()
        return (*self.left_keys, *bounds, *self.left_rest, *(name for _, name in self.right_rest))

    def out_name(self, right_column: str) -> str:
        if right_column in self.right_keys:
            return self.left_keys[self.right_keys.index(right_column)]
        return dict(self.right_rest)[right_column]

    def row(self, left: Row | None, right: Row | None, window: Window | None = None) -> Result:
        out: Result = {}
        for name, right_name in zip(self.left_keys, self.right_keys, strict=True):
            out[name] = left.get(name) if left is not None else (right or {}).get(right_name)
        if window is not None:
            out["window_start"], out["window_end"] = window
        for name in self.left_rest:
            out[name] = None if left is None else left.get(name)
        for name, out_name in self.right_rest:
            out[out_name] = None if right is None else right.get(name)
        return out


def delay_of(op: JoinOf) -> int:
    """How far a join holds its watermark back (SPEC 3.13)."""
    if op.window is not None:
        return op.window.size_ms
    if op.as_of:
        return 0
    assert op.between is not None
    lower, upper = op.between
    pads = [upper] if op.how in ("left", "full") else []
    pads += [-lower] if op.how in ("right", "full") else []
    return max([0, *pads])


def reads_sources(op: Op) -> bool:
    """Source rows reach ``op``'s output unclassified (through filters, selects and unions)."""
    if isinstance(op, Source):
        return True
    if isinstance(op, FilterOf | SelectOf):
        return reads_sources(op.input)
    return isinstance(op, UnionOf) and any(reads_sources(i) for i in op.inputs)


def check_columns(what: str, names: Iterable[str | None], op: Op) -> None:
    columns = columns_of(op)
    missing = [n for n in names if n is not None and n not in columns]
    if missing:
        raise PlanError(f"{what}: no column {missing} in its input's columns {list(columns)}")


def reference_model_of(op: WindowOf) -> ReferenceModel:
    """The oracle of a window over a source: a retracting :class:`ReferenceModel`."""
    if not isinstance(op.input, Source):
        raise PlanError(f"a ReferenceModel runs a window over a source, not over {type(op.input).__name__}")
    return ReferenceModel(
        window=op.window,
        event_time=op.input.time,
        lag_ms=op.input.lag_ms,
        keys=op.keys,
        aggregates=op.aggregates,
        sources=(op.input.name,),
        allowed_lateness_ms=op.allowed_lateness_ms,
        accumulation="retracting",
    )


def join_model_of(op: JoinOf) -> JoinModel:
    """The oracle of a join of two sources: a retracting :class:`JoinModel`."""
    left, right = op.left, op.right
    if not isinstance(left, Source) or not isinstance(right, Source):
        raise PlanError("a JoinModel runs a join of two sources")
    return JoinModel(
        kind="as_of" if op.as_of else "interval" if op.window is None else "window",
        keys=op.keys,
        right_keys=op.right_keys,
        left_time=left.time,
        right_time=right.time,
        left_columns=left.columns,
        right_columns=right.columns,
        left_lag_ms=left.lag_ms,
        right_lag_ms=right.lag_ms,
        how=op.how,
        between=op.between,
        window=op.window,
        max_age_ms=op.max_age_ms,
        allowed_lateness_ms=op.allowed_lateness_ms,
        accumulation="retracting",
    )
