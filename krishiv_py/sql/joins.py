"""The joins of Krishiv's SQL: a ``JOIN`` clause read into the builder join it means.

Three forms (docs/sql.md, "Joins"), all of two streams on key equalities:

- the **interval join**
  ``FROM l JOIN r ON l.k = r.k AND r.ts BETWEEN l.ts - a AND l.ts + b`` is
  ``l.key_by("k").interval_join(r.key_by("k"), between=(-a, b))``;
- the **window join** (Flink's window TVFs)
  ``FROM TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), size)) L JOIN TABLE(TUMBLE(TABLE r,
  DESCRIPTOR(ts), size)) R ON L.k = R.k AND L.window_start = R.window_start AND
  L.window_end = R.window_end`` is
  ``l.key_by("k").tumbling_window(size).join(r.key_by("k").tumbling_window(size))``;
- the **as-of join** (Flink's event-time temporal join)
  ``FROM l JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.k = r.k [AND r.ts >= l.ts - max_age]`` is
  ``l.key_by("k").as_of_join(r.key_by("k"), max_age_ms=max_age)``.

Flink's ``FROM l, r WHERE l.k = r.k AND r.ts BETWEEN ...`` is the inner
interval join too: the ``WHERE`` holds its condition (:func:`read_where`),
and what else it says filters the joined rows.

``LEFT``, ``RIGHT`` and ``FULL [OUTER] JOIN`` are ``how="left"``,
``"right"``, ``"full"``; a window join also takes ``LEFT SEMI JOIN`` and
``LEFT ANTI JOIN``; an as-of join is ``[INNER]`` or ``LEFT [OUTER]`` only.
``HOP(TABLE t, DESCRIPTOR(ts), slide, size)`` is ``sliding_window(size,
slide)``. ``JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`` (Flink's
processing-time temporal join) is ``lookup_join`` of a bounded table
(:data:`LOOKUP_FORM`).

This module reads the clause (its sides, its kind, its ON condition) and
translates it (:func:`join_relation`): it scans the two streams, declares
their watermarks on the join's time columns, applies the ``join.*`` and
``window.*`` settings and calls the builder; the joined rows are a
:class:`~krishiv_py.sql.scope.Relation` whose sides name their columns as
SQL does. :mod:`krishiv_py.sql.query` filters them by the query's ``WHERE``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, cast

import attrs

import krishiv_py.expr as kx
from krishiv_py.errors import PlanError
from krishiv_py.expr import Expr
from krishiv_py.plan import nodes as n
from krishiv_py.plan.analysis import facts
from krishiv_py.sql.expressions import scalar
from krishiv_py.sql.scope import (
    Context,
    JoinedSide,
    Relation,
    column_named,
    descriptor_column,
    errors_at,
    no_helpers,
    refuse_clauses,
    resolver,
    scan,
    time_source,
    watermark,
)
from krishiv_py.sql.settings import apply_settings, emission_options, interval_ms, join_options
from krishiv_py.sql.source import DIALECT
from krishiv_py.sql.windows import WindowCall, is_proctime

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.api.stream import Stream
    from krishiv_py.sql.source import SqlText

__all__ = [
    "AS_OF_FORM",
    "BOUNDS",
    "INTERVAL_FORM",
    "LOOKUP_FORM",
    "WHERE_FORM",
    "WINDOW_FORM",
    "AsOf",
    "JoinOn",
    "MaxAge",
    "Side",
    "SideResolver",
    "SideSpec",
    "TimeRange",
    "WhereJoin",
    "conjuncts",
    "event_time_columns",
    "is_column",
    "is_comma_join",
    "is_window_tvf",
    "join_how",
    "join_relation",
    "join_start",
    "read_on",
    "read_side",
    "read_where",
]

Side = Literal["left", "right"]
#: Resolves a column of the ON condition to its side and its name there (a window bound by its name).
SideResolver = Callable[["exp.Column"], tuple[Side, str]]

#: The columns a window TVF adds to its stream's rows.
BOUNDS = ("window_start", "window_end")

INTERVAL_FORM = (
    "ON l.k = r.k [AND l.k2 = r.k2 ...] AND r.ts BETWEEN l.ts - INTERVAL ... AND l.ts + INTERVAL ... "
    "(or r.ts >= ... AND r.ts <= ...)"
)
WINDOW_FORM = (
    "ON L.k = R.k [AND L.k2 = R.k2 ...] AND L.window_start = R.window_start AND L.window_end = R.window_end"
)
AS_OF_FORM = (
    "FROM l [LEFT] JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.k = r.k [AND l.k2 = r.k2 ...] "
    "[AND r.ts >= l.ts - INTERVAL ... (the max age)]"
)
WHERE_FORM = (
    "FROM l, r WHERE l.k = r.k [AND ...] AND r.ts BETWEEN l.ts - INTERVAL ... AND l.ts + INTERVAL ... "
    "[AND other conditions]"
)
TVF_FORM = (
    "TABLE(TUMBLE(TABLE stream, DESCRIPTOR(ts), size [, offset])) or "
    "TABLE(HOP(TABLE stream, DESCRIPTOR(ts), slide, size))"
)
_JOIN_ARGS = {"this", "on", "side", "kind", "using", "method"}
_JOIN_WORDS = {"JOIN", "LEFT", "RIGHT", "FULL", "INNER", "OUTER", "CROSS", "SEMI", "ANTI", "NATURAL"}


@attrs.frozen
class AsOf:
    """The ``FOR SYSTEM_TIME AS OF <time>`` of a side: the as-of join's right side."""

    #: The time as written (the left side's event-time column, for a valid join).
    time: exp.Expression = attrs.field(eq=False)
    #: Where the clause starts (its ``FOR``).
    at: int | None
    #: The clause as written, for errors about it.
    shown: exp.Expression = attrs.field(eq=False)


@attrs.frozen
class SideSpec:
    """One side of a join as written."""

    #: The stream's name as a table reference (what ``FROM name`` scans).
    table: exp.Table
    #: The name that qualifies the side's columns: its alias, else its stream's name (lower case).
    qualifier: str
    #: The window of a window TVF side (its time column as written), None for a plain stream.
    window: WindowCall | None
    #: The side as written (without its ``FOR SYSTEM_TIME AS OF``).
    node: exp.Table = attrs.field(eq=False)
    #: The side's ``FOR SYSTEM_TIME AS OF`` (an as-of join's right side), None without one.
    as_of: AsOf | None = None

    @property
    def name(self) -> str:
        return str(self.table.name)


@attrs.frozen
class TimeRange:
    """The time range of an interval join: ``l.ts + lower_ms <= r.ts <= l.ts + upper_ms``."""

    left: str
    right: str
    lower_ms: int
    upper_ms: int
    #: The columns as written, for errors about them.
    left_node: exp.Column = attrs.field(eq=False)
    right_node: exp.Column = attrs.field(eq=False)
    #: Offsets written as plain numbers (milliseconds; only for a bigint event time).
    numbers: tuple[exp.Expression, ...] = attrs.field(eq=False)


@attrs.frozen
class MaxAge:
    """The max age of an as-of join: ``r.ts >= l.ts - max_age_ms``."""

    left: str
    right: str
    max_age_ms: int
    #: The columns and the bound as written, for errors about them.
    left_node: exp.Column = attrs.field(eq=False)
    right_node: exp.Column = attrs.field(eq=False)
    node: exp.Expression = attrs.field(eq=False)
    #: Offsets written as plain numbers (milliseconds; only for a bigint event time).
    numbers: tuple[exp.Expression, ...] = attrs.field(eq=False)


@attrs.frozen
class JoinOn:
    """What an ON condition says: key pairs ``(left column, right column)`` in order, and the time."""

    keys: tuple[tuple[str, str], ...]
    #: The interval join's time range (None for a window or an as-of join).
    time: TimeRange | None
    #: The as-of join's max age (None: none written, or another join).
    max_age: MaxAge | None = None


def is_window_tvf(node: exp.Expression) -> bool:
    """Whether ``node`` is a ``FROM`` item ``TABLE(<function>(...))``: a window table function."""
    from sqlglot import exp

    return (
        isinstance(node, exp.Table)
        and isinstance(node.this, exp.Anonymous)
        and str(node.this.name).lower() == "table"
    )


def join_start(join: exp.Join, sql: SqlText) -> int | None:
    """Where the join clause starts: its first keyword (``LEFT`` of ``LEFT JOIN``), or the comma."""
    right = sql.offset(join.this)
    if right is None:
        return None
    before = [t for t in sql.tokens if t.start < right]
    start = None
    for token in reversed(before):
        kind = token.token_type.name
        if kind == "COMMA" and start is None:
            return int(token.start)
        if kind not in _JOIN_WORDS:
            break
        start = int(token.start)
    return start


def join_how(join: exp.Join, sql: SqlText, at: int | None) -> n.JoinHow:
    """``how`` of the builder's join for the join clause's kind."""
    from sqlglot import exp

    for key, value in join.args.items():
        if value and key not in _JOIN_ARGS:
            raise sql.error(join, f"this JOIN ({key.upper().rstrip('_')}) is not supported", at=at)
    side, kind, method = join.side, join.kind, join.method
    if method == "NATURAL":
        raise sql.error(
            join,
            f"NATURAL JOIN is not supported: name the keys and the time with ON ({INTERVAL_FORM})",
            at=at,
        )
    if method:
        also = (
            f"; the as-of join is Flink's temporal join, {AS_OF_FORM} (as_of_join() in the builder)"
            if method == "ASOF"
            else ""
        )
        raise sql.error(join, f"{method} JOIN is not supported{also}", at=at)
    on = join.args.get("on")
    if isinstance(on, exp.Boolean):  # Spark's JOIN without ON (sqlglot reads it as ON TRUE)
        on = None
    if kind == "CROSS" or not (on or join.args.get("using")):
        shown = join.copy()  # what Spark reads a JOIN without ON as
        shown.set("on", None)
        shown.set("kind", "CROSS")
        raise sql.error(
            shown,
            "CROSS JOIN (and FROM a, b) is not supported: a join of streams matches rows by key and event "
            f"time, JOIN r {INTERVAL_FORM}, or (Flink's form) {WHERE_FORM}",
            at=at,
        )
    if join.args.get("using"):
        raise sql.error(
            join,
            f"JOIN ... USING is not supported: name the keys and the time with ON ({INTERVAL_FORM})",
            at=at,
        )
    if kind in ("SEMI", "ANTI"):
        if side not in ("", "LEFT"):
            raise sql.error(join, f"{side} {kind} JOIN is not supported; write LEFT {kind} JOIN", at=at)
        return "semi" if kind == "SEMI" else "anti"
    if kind not in ("", "INNER", "OUTER"):
        raise sql.error(join, f"{kind} JOIN is not supported", at=at)
    hows: dict[str, n.JoinHow] = {"": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}
    if side not in hows or (kind == "OUTER" and not side):
        raise sql.error(join, "a JOIN is [INNER], LEFT, RIGHT or FULL [OUTER]", at=at)
    return hows[side]


def read_side(node: exp.Expression, sql: SqlText) -> SideSpec:
    """A side of a join: a stream name, or a window TVF over one."""
    from sqlglot import exp

    as_of = _as_of(node, sql) if isinstance(node, exp.Table) else None
    if as_of is not None:
        assert isinstance(node, exp.Table)
        node = node.copy()  # the side without its FOR SYSTEM_TIME AS OF (a copy keeps the positions)
        node.set("version", None)
        if not isinstance(node.this, exp.Identifier):
            raise sql.error(
                as_of.shown,
                f"FOR SYSTEM_TIME AS OF follows a stream name, the as-of join's right side: {AS_OF_FORM}",
                at=as_of.at,
            )
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        return SideSpec(
            table=node,
            qualifier=(str(node.alias) or str(node.name)).lower(),
            window=None,
            node=node,
            as_of=as_of,
        )
    if is_window_tvf(node):
        assert isinstance(node, exp.Table)
        return _tvf(node, sql)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        raise sql.error(
            node, f"a table function in FROM is not supported; a window TVF is written {TVF_FORM}"
        )
    if isinstance(node, exp.Subquery):
        raise sql.error(
            node,
            "a side of a JOIN is a stream name (or a window TVF over one), not a subquery: filter the joined "
            "rows with WHERE, or filter a side with the builder and register it (stream.register(name))",
        )
    raise sql.error(
        node,
        f"a side of a JOIN is a stream name or a window TVF ({TVF_FORM}), not {type(node).__name__.upper()}",
    )


def _as_of(node: exp.Table, sql: SqlText) -> AsOf | None:
    """The side's ``FOR SYSTEM_TIME AS OF <time>`` (sqlglot's ``version``), None without one.

    sqlglot reads Flink's ``FOR SYSTEM_TIME AS OF`` and Spark's time travel
    (``TIMESTAMP AS OF``, ``VERSION AS OF``) as the same node; the tokens
    tell them apart. Only Flink's form, with ``AS OF``, is an as-of join.
    """
    from sqlglot import exp

    version = node.args.get("version")
    if version is None:
        return None
    time = version.args.get("expression")
    if isinstance(node.this, exp.Identifier) and "end" in node.this.meta:
        after = int(node.this.meta["end"])
        tokens = [t for t in sql.tokens if t.start > after]
    else:  # a window TVF: its clause starts at the last FOR before the time
        start = sql.keyword("FOR", time if isinstance(time, exp.Expression) else node)
        tokens = [t for t in sql.tokens if start is not None and t.start >= start]
    words = [t.text.upper() for t in tokens[:4]]
    at = int(tokens[0].start) if tokens else sql.offset(node)
    begin = sql.offset(time) if isinstance(time, exp.Expression) else None
    lead = sql.text[at:begin] if at is not None and begin is not None and begin > at else ""
    lead = " ".join(lead.split()) or " ".join(t.text for t in tokens[:3])
    # the clause as written: its words, then the time of AS OF (the words alone for other kinds)
    shown = exp.Var(
        this=f"{lead} {time.sql(dialect=DIALECT)}"
        if isinstance(time, exp.Expression) and version.text("kind") == "AS OF"
        else lead
    )
    if words != ["FOR", "SYSTEM_TIME", "AS", "OF"] or not isinstance(time, exp.Expression):
        raise sql.error(
            shown,
            "a side of a join takes Flink's FOR SYSTEM_TIME AS OF <the left side's event-time column>, "
            f"the as-of join: {AS_OF_FORM}; time travel (TIMESTAMP AS OF, VERSION AS OF, FOR SYSTEM_TIME "
            "BETWEEN/FROM/ALL) does not apply to streams",
            at=at,
        )
    return AsOf(time=time, at=at, shown=shown)


def _tvf(node: exp.Table, sql: SqlText) -> SideSpec:
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size [, offset]))`` or ``TABLE(HOP(..., slide, size))``."""
    from sqlglot import exp

    outer = node.this
    call = outer.expressions[0] if len(outer.expressions) == 1 else None
    if not isinstance(call, exp.Anonymous):
        raise sql.error(outer, f"a window TVF is {TVF_FORM}")
    name = str(call.name).upper()
    if name not in ("TUMBLE", "HOP"):
        raise sql.error(
            call,
            f"window TVF {name} is not supported: a window join takes TUMBLE or HOP windows, the same "
            "on both sides",
        )
    args = call.expressions
    arity = (3, 4) if name == "TUMBLE" else (4, 4)
    if not arity[0] <= len(args) <= arity[1]:
        shape = (
            "(TABLE stream, DESCRIPTOR(ts), size [, offset])"
            if name == "TUMBLE"
            else ("(TABLE stream, DESCRIPTOR(ts), slide, size)")
        )
        raise sql.error(call, f"{name} takes {shape}, every duration an INTERVAL")
    table, descriptor = args[0], args[1]
    if not isinstance(table, exp.Column) or table.table or not isinstance(table.this, exp.Identifier):
        raise sql.error(table, f"the first argument of {name} is TABLE <stream name>")
    ts = (
        descriptor.expressions[0]
        if isinstance(descriptor, exp.Anonymous) and descriptor.expressions
        else None
    )
    if (
        str(descriptor.name).upper() != "DESCRIPTOR"
        or len(descriptor.expressions) != 1
        or not isinstance(ts, exp.Column)
        or isinstance(ts.this, exp.Star)
    ):
        raise sql.error(descriptor, f"the second argument of {name} is DESCRIPTOR(<event-time column>)")
    what = ("size", "offset") if name == "TUMBLE" else ("slide", "size")
    durations = tuple(interval_ms(arg, sql, f"{name}: {w}") for arg, w in zip(args[2:], what, strict=False))
    window = WindowCall(
        kind="tumble" if name == "TUMBLE" else "hop",
        column=str(ts.name),
        durations=durations,
        output="window_start",
        node=call,
    )
    try:
        window.spec()
    except PlanError as exc:
        raise sql.error(call, f"{name}: {exc}") from None
    stream = exp.Table(this=table.this.copy())
    return SideSpec(
        table=stream, qualifier=(str(node.alias) or str(table.name)).lower(), window=window, node=node
    )


# --- ON ----------------------------------------------------------------------------------


@attrs.frozen
class _Term:
    """``column + offset_ms`` (column None: a constant)."""

    column: tuple[Side, str] | None
    node: exp.Column | None
    offset_ms: int
    numbers: tuple[exp.Expression, ...] = ()


@attrs.frozen
class _Bound:
    """One side of the time range: ``r - l >= value`` (lower) or ``<= value`` (upper)."""

    lower: bool
    value: int
    #: The time columns compared: (name, node as written) of the left side, then of the right.
    left: tuple[str, exp.Column]
    right: tuple[str, exp.Column]
    node: exp.Expression
    numbers: tuple[exp.Expression, ...]


def read_on(
    on: exp.Expression, sql: SqlText, resolve: SideResolver, *, windowed: bool, as_of: bool = False
) -> JoinOn:
    """The keys and the time range (interval join), window bounds (window join) or max age (as-of join)."""
    from sqlglot import exp

    form = WINDOW_FORM if windowed else AS_OF_FORM if as_of else INTERVAL_FORM
    keys: list[tuple[str, str]] = []
    bounds: list[str] = []
    times: list[_Bound] = []
    for part in conjuncts(on):
        if isinstance(part, exp.EQ) and is_column(part.this) and is_column(part.expression):
            a, b = resolve(part.this), resolve(part.expression)
            if a[0] == b[0]:
                raise sql.error(
                    part,
                    f"this equality compares two columns of the {a[0]} side; the ON condition of a join "
                    f"relates the two sides: {form}",
                )
            left, right = (a[1], b[1]) if a[0] == "left" else (b[1], a[1])
            if windowed and (left in BOUNDS or right in BOUNDS):
                if left != right:
                    raise sql.error(
                        part,
                        "a window join equates each bound of the two windows with itself: "
                        "L.window_start = R.window_start AND L.window_end = R.window_end",
                    )
                bounds.append(left)
                continue
            keys.append((left, right))
            continue
        if isinstance(part, exp.Between | exp.GTE | exp.LTE | exp.GT | exp.LT) and _relates(part, resolve):
            if windowed:
                raise sql.error(
                    part,
                    f"a window join's rows meet by window, not by a time range: {form} (join the streams "
                    "themselves for a time range: an interval join)",
                )
            times += _time_bounds(part, sql, resolve, form)
            continue
        what = "the window bounds" if windowed else "a max age" if as_of else "one time range"
        raise sql.error(
            part,
            f"a join's ON condition is key equalities and {what}: {form}; filter the joined rows with WHERE",
        )
    if not keys:
        raise sql.error(on, f"a join of streams needs at least one key equality, L.k = R.k: {form}")
    if windowed:
        if sorted(set(bounds)) != sorted(BOUNDS) or len(bounds) != 2:
            raise sql.error(
                on,
                "a window join's ON condition names each window bound once, as Flink's window joins do: "
                "L.window_start = R.window_start AND L.window_end = R.window_end",
            )
        return JoinOn(keys=tuple(keys), time=None)
    if as_of:
        return JoinOn(keys=tuple(keys), time=None, max_age=_max_age(times, sql))
    return JoinOn(keys=tuple(keys), time=_time_range(on, times, sql))


def _max_age(times: list[_Bound], sql: SqlText) -> MaxAge | None:
    """The as-of join's max age: one lower bound ``r.ts >= l.ts - age`` (None: no bound written)."""
    if not times:
        return None
    for upper in [t for t in times if not t.lower][:1]:
        raise sql.error(
            upper.node,
            "an as-of join's ON bounds the right side's time from below only, its max age "
            "(r.ts >= l.ts - INTERVAL ...): its upper bound is the AS OF time itself, a right row at or "
            f"before the left row's: {AS_OF_FORM}",
        )
    for extra in times[1:2]:
        raise sql.error(
            extra.node, f"an as-of join has one max age, one bound r.ts >= l.ts - ...: {AS_OF_FORM}"
        )
    bound = times[0]
    if bound.value > 0:
        raise sql.error(
            bound.node,
            "an as-of join's max age bound is at or before the AS OF time, r.ts >= l.ts - INTERVAL ...; "
            f"this one is {bound.value} ms after it",
        )
    return MaxAge(
        left=bound.left[0],
        right=bound.right[0],
        max_age_ms=-bound.value,
        left_node=bound.left[1],
        right_node=bound.right[1],
        node=bound.node,
        numbers=bound.numbers,
    )


def _time_range(on: exp.Expression, times: list[_Bound], sql: SqlText) -> TimeRange:
    lowers = [t for t in times if t.lower]
    uppers = [t for t in times if not t.lower]
    if not lowers or not uppers:
        missing = "a time range" if not times else ("a lower bound" if not lowers else "an upper bound")
        raise sql.error(
            times[0].node if times else on,
            f"an interval join needs {missing}: {INTERVAL_FORM} (both bounds inclusive)",
        )
    for extra in (lowers[1:] + uppers[1:])[:1]:
        raise sql.error(
            extra.node,
            f"an interval join has one time range, one lower and one upper bound: {INTERVAL_FORM}",
        )
    low, high = lowers[0], uppers[0]
    if (low.left[0], low.right[0]) != (high.left[0], high.right[0]):
        raise sql.error(
            high.node,
            "both bounds of the time range compare the same two time columns, one of each side, a fixed "
            f"INTERVAL apart: {INTERVAL_FORM}; a comparison with another column (an auction's end time) "
            "filters the joined rows: write it in WHERE, and bound the range by an INTERVAL",
        )
    return TimeRange(
        left=low.left[0],
        right=low.right[0],
        lower_ms=low.value,
        upper_ms=high.value,
        left_node=low.left[1],
        right_node=low.right[1],
        numbers=low.numbers + high.numbers,
    )


def _relates(part: exp.Expression, resolve: SideResolver) -> bool:
    """Whether ``part`` names columns of both sides (a bound of a time range, else a filter)."""
    from sqlglot import exp

    return len({resolve(c)[0] for c in part.find_all(exp.Column) if is_column(c)}) == 2


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def is_column(node: exp.Expression) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Column) and not isinstance(node.this, exp.Star)


def _time_bounds(part: exp.Expression, sql: SqlText, resolve: SideResolver, form: str) -> list[_Bound]:
    from sqlglot import exp

    if isinstance(part, exp.GT | exp.LT):
        what = (
            "an as-of join's max age is"
            if form == AS_OF_FORM
            else "the bounds of an interval join's time range are"
        )
        raise sql.error(
            part,
            f"{what} inclusive: write <= or >= (or BETWEEN); "
            "event time has microseconds, so < is not <= one millisecond less",
        )
    if isinstance(part, exp.Between):
        value = part.this
        return [
            _compare(value, part.args["low"], lower=True, part=part, sql=sql, resolve=resolve, form=form),
            _compare(value, part.args["high"], lower=False, part=part, sql=sql, resolve=resolve, form=form),
        ]
    return [
        _compare(
            part.this,
            part.expression,
            lower=isinstance(part, exp.GTE),
            part=part,
            sql=sql,
            resolve=resolve,
            form=form,
        )
    ]


def _compare(
    a: exp.Expression,
    b: exp.Expression,
    *,
    lower: bool,
    part: exp.Expression,
    sql: SqlText,
    resolve: SideResolver,
    form: str,
) -> _Bound:
    """``a >= b`` (``lower``) or ``a <= b`` as a bound on ``r - l``."""
    ta, tb = _term(a, sql, resolve, form), _term(b, sql, resolve, form)
    if ta.column is None or tb.column is None or ta.column[0] == tb.column[0]:
        what = "the max age" if form == AS_OF_FORM else "a bound of the time range"
        raise sql.error(
            part,
            f"{what} compares a time column of one side with the other side's, "
            f"plus or minus an INTERVAL: {form}",
        )
    assert ta.node is not None and tb.node is not None
    numbers = ta.numbers + tb.numbers
    col_a, col_b = (ta.column[1], ta.node), (tb.column[1], tb.node)
    if ta.column[0] == "right":  # r + a (>= or <=) l + b: r - l (>= or <=) b - a
        return _Bound(lower, tb.offset_ms - ta.offset_ms, col_b, col_a, part, numbers)
    # l + a (>= or <=) r + b: r - l (<= or >=) a - b
    return _Bound(not lower, ta.offset_ms - tb.offset_ms, col_a, col_b, part, numbers)


def _term(node: exp.Expression, sql: SqlText, resolve: SideResolver, form: str) -> _Term:
    """``node`` as ``column + offset``: a time column plus or minus INTERVALs (or milliseconds)."""
    from sqlglot import exp

    what = "an as-of join's max age" if form == AS_OF_FORM else "a bound of an interval join's time range"
    if isinstance(node, exp.Paren):
        return _term(node.this, sql, resolve, form)
    if is_column(node):
        assert isinstance(node, exp.Column)
        side, name = resolve(node)
        return _Term((side, name), node, 0)
    if isinstance(node, exp.Interval):
        return _Term(None, None, interval_ms(node, sql, what))
    if isinstance(node, exp.Literal) and not node.is_string:
        if not node.is_int:
            raise sql.error(node, f"{what}: an offset is a whole number of milliseconds, or an INTERVAL")
        return _Term(None, None, int(str(node.this)), (node,))
    if isinstance(node, exp.Neg):
        inner = _term(node.this, sql, resolve, form)
        if inner.column is None:
            return attrs.evolve(inner, offset_ms=-inner.offset_ms)
    if isinstance(node, exp.Add | exp.Sub):
        a, b = _term(node.this, sql, resolve, form), _term(node.expression, sql, resolve, form)
        sign = 1 if isinstance(node, exp.Add) else -1
        if b.column is None or (sign == 1 and a.column is None):
            column, col_node = (a.column, a.node) if a.column is not None else (b.column, b.node)
            return _Term(column, col_node, a.offset_ms + sign * b.offset_ms, a.numbers + b.numbers)
    raise sql.error(
        node,
        f"{what} is a time column plus or minus an INTERVAL, e.g. l.ts - INTERVAL '5' SECOND: {form}",
    )


# --- FROM l, r WHERE ...: the join's condition in WHERE ---------------------------------------


def is_comma_join(join: exp.Join, sql: SqlText) -> bool:
    """Whether ``join`` is written ``FROM l, r`` (a comma, not a JOIN keyword)."""
    at = join_start(join, sql)
    return join.kind == "CROSS" and at is not None and sql.text[at] == ","


@attrs.frozen
class WhereJoin:
    """A comma join's ``WHERE``, split: the join's condition, and a filter of the joined rows."""

    #: The key equalities and the bounds of the time range, ANDed: the join's ON.
    on: exp.Expression = attrs.field(eq=False)
    #: The other conditions, ANDed (None: there are none).
    rest: exp.Expression | None = attrs.field(eq=False)


@attrs.frozen
class _Comparison:
    """``>=``, ``<=``, ``>`` or ``<`` of a column of each side: a bound on ``right - left``."""

    node: exp.Expression = attrs.field(eq=False)
    left: str
    right: str
    #: It bounds the right side's time from below (``r >= l + a``), else from above.
    lower: bool
    left_node: exp.Column = attrs.field(eq=False)
    right_node: exp.Column = attrs.field(eq=False)


def read_where(
    where: exp.Expression,
    sql: SqlText,
    resolve: SideResolver,
    *,
    times: tuple[str | None, str | None],
    is_time: Callable[[Side, str], bool],
) -> WhereJoin:
    """Split the ``WHERE`` of ``FROM l, r`` into the join's ``ON`` and a filter after the join.

    An equality of a column of each side is a key. A comparison of a column
    of each side (``>=``, ``<=``, ``>``, ``<``, either half of a ``BETWEEN``)
    bounds the time range when its columns are the sides' event-time
    columns: ``times`` (a side's watermark column, or ``SET
    watermark.column``), else, for a side without one, its timestamp column
    in the first pair compared both ways (from below and from above), else
    in the first comparison. The rest filters the joined rows: the
    inner join on the first two kinds filtered by the rest is the cross
    product filtered by the whole ``WHERE``.
    """

    keys: list[exp.Expression] = []
    pieces: list[exp.Expression | _Comparison] = []  # the rest, in the order written
    for part in conjuncts(where):
        if _is_key(part, resolve):
            keys.append(part)
            continue
        pieces += [_comparison(half, resolve) or half for half in _halves(part, resolve)]
    bounds = [p for p in pieces if isinstance(p, _Comparison)]
    pair = _time_pair(bounds, times, is_time)
    ranged = [b for b in bounds if (b.left, b.right) == pair]
    others = [b for b in bounds if (b.left, b.right) != pair]
    filters = [p.node if isinstance(p, _Comparison) else p for p in pieces if all(p is not b for b in ranged)]
    if not keys or not ranged:
        missing = "key equality of the two sides" if not keys else "time range of their event-time columns"
        raise sql.error(
            where, f"FROM l, r is an interval join, and this WHERE has no {missing}: {WHERE_FORM}"
        )
    _check_fixed_offsets(ranged, others, sql)
    return WhereJoin(on=_and([*keys, *(b.node for b in ranged)]), rest=_and(filters) if filters else None)


def _and(parts: list[exp.Expression]) -> exp.Expression:
    """``parts`` ANDed in order, left to right (copies: each keeps its position in the text)."""
    from sqlglot import exp

    out = parts[0].copy()
    for part in parts[1:]:
        out = exp.And(this=out, expression=part.copy())
    return out


def _is_key(part: exp.Expression, resolve: SideResolver) -> bool:
    """Whether ``part`` is ``l.x = r.y``: an equality of a column of each side."""
    from sqlglot import exp

    return (
        isinstance(part, exp.EQ)
        and is_column(part.this)
        and is_column(part.expression)
        and _sides_of(part, resolve) == {"left", "right"}
    )


def _sides_of(part: exp.Expression, resolve: SideResolver) -> set[Side]:
    """The sides whose columns ``part`` names (a column neither side has counts for none)."""
    from sqlglot import exp

    sides: set[Side] = set()
    for column in part.find_all(exp.Column):
        found = _resolved(column, resolve)
        if found is not None:
            sides.add(found[0])
    return sides


def _resolved(column: exp.Column, resolve: SideResolver) -> tuple[Side, str] | None:
    """``resolve(column)``, or None for a name that is not one side's column (the joined rows' own)."""
    if not is_column(column):
        return None
    try:
        return resolve(column)
    except PlanError:
        return None


def _halves(part: exp.Expression, resolve: SideResolver) -> list[exp.Expression]:
    """``part``, or the two comparisons of a ``BETWEEN`` that relates the two sides."""
    from sqlglot import exp

    if not isinstance(part, exp.Between) or _sides_of(part, resolve) != {"left", "right"}:
        return [part]
    value = part.this
    return [
        exp.GTE(this=value.copy(), expression=part.args["low"].copy()),
        exp.LTE(this=value.copy(), expression=part.args["high"].copy()),
    ]


def _comparison(node: exp.Expression, resolve: SideResolver) -> _Comparison | None:
    """``node`` as a bound of one side's column by the other's; None for anything else."""
    from sqlglot import exp

    if not isinstance(node, exp.GTE | exp.LTE | exp.GT | exp.LT):
        return None
    a, b = _one_column(node.this, resolve), _one_column(node.expression, resolve)
    if a is None or b is None or a[0] == b[0]:
        return None
    greater = isinstance(node, exp.GTE | exp.GT)
    if a[0] == "right":  # r (>= or <=) l + ...
        return _Comparison(node, b[1], a[1], greater, b[2], a[2])
    return _Comparison(node, a[1], b[1], not greater, a[2], b[2])


def _one_column(node: exp.Expression, resolve: SideResolver) -> tuple[Side, str, exp.Column] | None:
    from sqlglot import exp

    columns = [c for c in node.find_all(exp.Column) if is_column(c)]
    found = _resolved(columns[0], resolve) if len(columns) == 1 else None
    return None if found is None else (found[0], found[1], columns[0])


def _time_pair(
    bounds: list[_Comparison], times: tuple[str | None, str | None], is_time: Callable[[Side, str], bool]
) -> tuple[str, str] | None:
    """The sides' event-time columns: known, else the first pair bounded both ways, else the first pair."""

    def fits(side: Side, column: str, known: str | None) -> bool:
        return column == known if known is not None else is_time(side, column)

    pairs = [
        (b.left, b.right)
        for b in bounds
        if fits("left", b.left, times[0]) and fits("right", b.right, times[1])
    ]
    ranged = [p for p in pairs if {b.lower for b in bounds if (b.left, b.right) == p} == {True, False}]
    chosen = ranged or pairs
    return chosen[0] if chosen else None


def _check_fixed_offsets(ranged: list[_Comparison], others: list[_Comparison], sql: SqlText) -> None:
    """A bound of the range missing, with a comparison of another column in its place: say why."""
    first = ranged[0]
    for lower in (True, False):
        if any(b.lower == lower for b in ranged):
            continue
        near = [b for b in others if b.lower == lower and (b.left == first.left or b.right == first.right)]
        if not near:
            continue
        b = near[0]
        other = b.left_node if b.left != first.left else b.right_node
        rt, lt = (x.sql(dialect=DIALECT) for x in (first.right_node, first.left_node))
        example = f"{rt} >= {lt} - INTERVAL '1' HOUR" if lower else f"{rt} <= {lt} + INTERVAL '1' DAY"
        raise sql.error(
            b.node,
            f"an interval join bounds {rt} by {lt} plus or minus a fixed INTERVAL (its state is bounded by "
            f"the watermark); this {'lower' if lower else 'upper'} bound compares with another column, "
            f"{other.sql(dialect=DIALECT)}, so it filters the joined rows and the join has no "
            f"{'lower' if lower else 'upper'} bound: add the one your data allows, e.g. AND {example}, "
            "and keep this comparison as a filter",
        )


def event_time_columns(join: n.Join) -> tuple[str, ...]:
    """The columns of ``join``'s rows that hold each row's event time: the later of its two rows'.

    An as-of join's right row is at or before its left row: the left time. An
    interval join's right row is at or after the left one when ``lower >= 0``
    (the right time), at or before it when ``upper <= 0`` (the left time); a
    padded row of an outer join has only its own side's. A window join's
    later row may be either side's: no column holds it, nor does one hold a
    side's time when that side is a join's rows itself.
    """
    left, right = join.left_time.column, join.right_time.column
    if right in join.right_keys:
        right = join.left_keys[join.right_keys.index(right)]
    elif right in join.right_names:
        right = join.right_names[right]
    if join.kind == "as_of":
        return () if join.left_time.from_join else (left,)
    if join.kind != "interval" or join.between is None:
        return ()
    lower, upper = join.between
    later_left = upper <= 0 and join.how in ("inner", "left") and not join.left_time.from_join
    later_right = lower >= 0 and join.how in ("inner", "right") and not join.right_time.from_join
    return tuple(c for c, holds in ((left, later_left), (right, later_right)) if holds)


# --- the join as the builder makes it --------------------------------------------------------


def join_relation(node: exp.Select, left_node: exp.Expression, ctx: Context) -> tuple[Relation, exp.Select]:
    """The rows of ``node``'s join (an interval, window or as-of join), and the query whose
    ``WHERE`` filters them.

    ``FROM l, r WHERE ...`` (Flink's form) is the inner interval join whose
    condition the ``WHERE`` holds; the rest of it filters the joined rows
    (:func:`read_where`): the query returned has that rest as its ``WHERE``.
    """
    from sqlglot import exp

    joins: list[exp.Join] = list(node.args["joins"])
    join = joins[0]
    at = join_start(join, ctx.sql)
    if len(joins) > 1:
        raise ctx.sql.error(
            joins[1],
            "a query joins two streams; a join of three or more is not supported",
            at=join_start(joins[1], ctx.sql),
        )
    comma = is_comma_join(join, ctx.sql) and node.args.get("where") is not None
    how: n.JoinHow = "inner" if comma else join_how(join, ctx.sql, at)
    for side in (left_node, join.this):
        if isinstance(side, exp.Table):
            refuse_clauses(side, ctx, {"this", "alias", "db", "catalog", "version"})
    specs = (read_side(left_node, ctx.sql), read_side(join.this, ctx.sql))
    rels = (_join_scan(specs[0], ctx), _join_scan(specs[1], ctx))
    if specs[0].qualifier == specs[1].qualifier:
        raise ctx.sql.error(
            join.this,
            f"both sides of the JOIN are called {specs[1].qualifier!r}; give one an alias "
            f"(JOIN {specs[1].name} AS {specs[1].name}2)",
        )
    if specs[0].as_of is not None:
        raise ctx.sql.error(
            specs[0].as_of.shown,
            "FOR SYSTEM_TIME AS OF goes on the right side of the join, the stream whose row in force at "
            f"each left row's time the left row meets: {AS_OF_FORM}",
            at=specs[0].as_of.at,
        )
    if comma:
        join, node = _join_from_where(node, join, specs, rels, ctx)
    if specs[1].as_of is not None and is_proctime(specs[1].as_of.time):
        looked_up, lkeys, rkeys = _lookup_join(join, how, at, specs, rels, ctx)
        ctx.joins.append(join)
        return _joined_relation(looked_up, specs, rels, lkeys, rkeys, how), node
    build, lkeys, rkeys = (
        _as_of_join(join, how, at, specs, rels, ctx)
        if specs[1].as_of is not None
        else _time_join(join, how, at, specs, rels, ctx)
    )
    try:
        joined = _join_emission(build(), ctx)
    except PlanError as exc:
        raise ctx.sql.error(join, f"JOIN: {exc}", at=at) from None
    ctx.joins.append(join)
    return _joined_relation(joined, specs, rels, lkeys, rkeys, how), node


def _join_from_where(
    node: exp.Select,
    join: exp.Join,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    ctx: Context,
) -> tuple[exp.Join, exp.Select]:
    """``FROM l, r WHERE ...`` as ``FROM l JOIN r ON <its join condition> WHERE <the rest>``."""
    from sqlglot import exp

    if specs[1].as_of is not None:
        raise ctx.sql.error(
            specs[1].as_of.shown,
            f"an as-of join is written with JOIN and ON: {AS_OF_FORM}",
            at=specs[1].as_of.at,
        )
    for spec in specs:
        if spec.window is not None:
            raise ctx.sql.error(
                spec.node,
                f"a window join is written with JOIN and ON, as in Flink: JOIN ... {WINDOW_FORM}",
            )
    split = read_where(
        node.args["where"].this,
        ctx.sql,
        _side_resolver(specs, rels, ctx),
        times=(_known_time(rels[0], ctx), _known_time(rels[1], ctx)),
        is_time=lambda side, column: (
            rels[0 if side == "left" else 1].stream.schema.field(column).dtype.is_timestamp
        ),
    )
    on_join = join.copy()
    on_join.set("kind", None)
    on_join.set("on", split.on)
    rest = node.copy()
    rest.set("where", exp.Where(this=split.rest) if split.rest is not None else None)
    return on_join, rest


def _known_time(rel: Relation, ctx: Context) -> str | None:
    """A side's event-time column before its join: its watermark's, else ``SET watermark.column``."""
    et = facts(rel.stream.plan).event_time
    if et is not None:
        return et.column
    column = ctx.settings.column
    return column_named(rel.stream.columns, column) if column is not None else None


#: A join as the builder makes it (called where its errors get the JOIN's position), and its keys.
_JoinCall = tuple[Callable[[], "Stream"], tuple[str, ...], tuple[str, ...]]


def _time_join(
    join: exp.Join,
    how: n.JoinHow,
    at: int | None,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    ctx: Context,
) -> _JoinCall:
    """The interval join of two streams, or the window join of two window TVFs."""
    windowed = specs[0].window is not None
    if windowed != (specs[1].window is not None):
        plain = specs[1] if windowed else specs[0]
        raise ctx.sql.error(
            plain.node,
            "a window join takes a window TVF on both sides, TABLE(TUMBLE(TABLE stream, DESCRIPTOR(ts), "
            "size)) or TABLE(HOP(...)); an interval join takes two stream names",
        )
    if how in ("semi", "anti") and not windowed:
        raise ctx.sql.error(
            join,
            f"LEFT {how.upper()} JOIN is a window join's (window TVFs on both sides); an interval join is "
            "[INNER], LEFT, RIGHT or FULL [OUTER]",
            at=at,
        )
    on = read_on(join.args["on"], ctx.sql, _side_resolver(specs, rels, ctx), windowed=windowed)
    times: list[tuple[str, exp.Expression]] = []
    for spec, rel, i in zip(specs, rels, (0, 1), strict=True):
        if spec.window is not None:
            descriptor = spec.window.node.expressions[1]
            times.append((descriptor_column(spec.window, descriptor, rel, ctx), descriptor))
        else:
            assert on.time is not None
            time = on.time
            times.append((time.left, time.left_node) if i == 0 else (time.right, time.right_node))
    left, right = (_join_time(spec, rel, *t, ctx) for spec, rel, t in zip(specs, rels, times, strict=True))
    if on.time is not None:
        _plain_numbers(on.time.numbers, ((left, times[0][0]), (right, times[1][0])), ctx)
    lkeys, rkeys = tuple(k for k, _ in on.keys), tuple(k for _, k in on.keys)
    wl, wr = specs[0].window, specs[1].window
    if wl is not None and wr is not None and wl.spec() != wr.spec():
        raise ctx.sql.error(
            wr.node,
            "the two sides of a window join need the same window; the left side's is "
            f"{wl.node.sql(dialect=DIALECT)}",
        )

    def build() -> Stream:
        if wl is not None and wr is not None:
            return wl.assign(left.key_by(*lkeys)).join(wr.assign(right.key_by(*rkeys)), how=how)
        assert on.time is not None
        # The bounds relate the time columns; a window's results' column is 1 ms past its event time.
        shift = _window_shift(left) - _window_shift(right)
        return left.key_by(*lkeys).interval_join(
            right.key_by(*rkeys),
            between=(on.time.lower_ms + shift, on.time.upper_ms + shift),
            how=cast('Literal["inner", "left", "right", "full"]', how),
        )

    return build, lkeys, rkeys


def _window_shift(stream: Stream) -> int:
    """How far a side's time column is past its event time: 1 ms for a window's results (window_end)."""
    return 1 if isinstance(stream.plan, n.WindowAggregate) else 0


def _as_of_join(
    join: exp.Join,
    how: n.JoinHow,
    at: int | None,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    ctx: Context,
) -> _JoinCall:
    """``FROM l [LEFT] JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.k = r.k [AND r.ts >= l.ts - age]``.

    ``l.key_by(k).as_of_join(r.key_by(k), how=..., max_age_ms=age)``: the
    AS OF time is the left side's event-time column; the right side's is its
    watermark's (the column of the max age, if written, for a stream without
    a watermark; else ``SET watermark.column`` or its one timestamp column).
    """
    as_of = specs[1].as_of
    assert as_of is not None
    how = _check_as_of(join, how, at, specs, ctx)
    resolve = _side_resolver(specs, rels, ctx)
    on = read_on(join.args["on"], ctx.sql, resolve, windowed=False, as_of=True)
    time = as_of.time
    column = _as_of_column(time, resolve, specs, rels, ctx)
    age = on.max_age
    if age is not None and age.left != column:
        raise ctx.sql.error(
            age.left_node,
            f"the max age compares the right side's event time with the AS OF column, r.ts >= "
            f"{specs[0].qualifier}.{column} - INTERVAL ...; this one names {age.left!r}",
        )
    left = _join_time(specs[0], rels[0], column, time, ctx)
    right = _join_time(
        specs[1],
        rels[1],
        age.right if age is not None else None,
        age.right_node if age is not None else specs[1].node,
        ctx,
    )
    if age is not None:
        _plain_numbers(age.numbers, ((left, column), (right, age.right)), ctx)
    lkeys, rkeys = tuple(k for k, _ in on.keys), tuple(k for _, k in on.keys)

    def build() -> Stream:
        return left.key_by(*lkeys).as_of_join(
            right.key_by(*rkeys),
            how=how,
            max_age_ms=age.max_age_ms if age is not None else None,
        )

    return build, lkeys, rkeys


def _check_as_of(
    join: exp.Join, how: n.JoinHow, at: int | None, specs: tuple[SideSpec, SideSpec], ctx: Context
) -> Literal["inner", "left"]:
    """An as-of join's ``how``, [INNER] or LEFT, and its sides, two streams (no window TVFs), checked."""
    if how not in ("inner", "left"):
        words = " ".join(w for w in (join.side, join.kind) if w)
        raise ctx.sql.error(
            join,
            f"{words} JOIN is not supported with FOR SYSTEM_TIME AS OF: an as-of join is [INNER] JOIN or "
            "LEFT [OUTER] JOIN (each left row with the right row of its key in force at its time, "
            f"null-padded by LEFT when there is none): {AS_OF_FORM}",
            at=at,
        )
    windows = [spec for spec in specs if spec.window is not None]
    if windows:
        raise ctx.sql.error(
            windows[0].node,
            f"an as-of join (FOR SYSTEM_TIME AS OF) joins two streams, not window TVFs: {AS_OF_FORM}",
        )
    return how


def _as_of_column(
    time: exp.Expression,
    resolve: SideResolver,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    ctx: Context,
) -> str:
    """The left side's column that ``FOR SYSTEM_TIME AS OF`` names (else an error)."""
    from sqlglot import exp

    form = f"FOR SYSTEM_TIME AS OF {specs[0].qualifier}.<its event-time column>"
    if not isinstance(time, exp.Column) or isinstance(time.this, exp.Star):
        raise ctx.sql.error(
            time,
            f"FOR SYSTEM_TIME AS OF takes the left side's event-time column, {form}: the as-of join is on "
            "event time (PROCTIME() and other expressions are not supported)",
        )
    side, column = resolve(time)
    if side != "left":
        raise ctx.sql.error(
            time,
            f"FOR SYSTEM_TIME AS OF names the left side's event-time column, {form} (each left row meets "
            f"the right row in force at its own time); {column!r} is a column of {rels[1].label}",
        )
    return column


#: How SQL writes a lookup join (SPEC 3.14: ``stream.lookup_join(table, on=...)``).
LOOKUP_FORM = (
    "FROM s [LEFT] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() [AS a] ON s.k = a.k [AND ...] (or an "
    "expression of s's columns = a.k, e.g. MOD(s.auction, 10000) = a.key)"
)


def _lookup_join(
    join: exp.Join,
    how: n.JoinHow,
    at: int | None,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    ctx: Context,
) -> tuple[Stream, tuple[str, ...], tuple[str, ...]]:
    """``FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON ...``: Flink's processing-time temporal
    join, each row with the table's rows as they are when it is processed: ``lookup_join``.

    Each ON conjunct equates a column of the table with a column of the
    stream or with an expression of the stream's columns, which becomes a
    column named as the table's (Nexmark q13's ``MOD(B.auction, 10000) =
    S.key``); a table column named otherwise than its stream column is
    renamed to it. The joined rows name the key as the stream does.
    """
    if how not in ("inner", "left"):
        words = " ".join(w for w in (join.side, join.kind) if w)
        raise ctx.sql.error(
            join, f"{words} JOIN is not supported with a lookup join: [INNER] or LEFT: {LOOKUP_FORM}", at=at
        )
    if any(spec.window is not None for spec in specs):
        raise ctx.sql.error(join, f"a lookup join joins a stream and a table, not window TVFs: {LOOKUP_FORM}")
    table = rels[1].stream
    if not n.is_bounded(table.plan):
        assert specs[1].as_of is not None
        raise ctx.sql.error(
            specs[1].as_of.shown,
            f"FOR SYSTEM_TIME AS OF PROCTIME() looks rows up in a bounded table, and {rels[1].label} is a "
            f"stream: {LOOKUP_FORM}; join two streams FOR SYSTEM_TIME AS OF the left side's event time",
            at=specs[1].as_of.at,
        )
    stream, on, rkeys, renames = _lookup_keys(join, specs, rels, ctx)
    if renames:
        table = table.select(
            *(kx.col(c).alias(renames[c]) if c in renames else kx.col(c) for c in table.columns)
        )
    with errors_at(ctx, join, "JOIN: "):
        joined = stream.lookup_join(table, on=tuple(on), how="left" if how == "left" else "inner")
    return joined, tuple(on), tuple(rkeys)


def _lookup_keys(
    join: exp.Join, specs: tuple[SideSpec, SideSpec], rels: tuple[Relation, Relation], ctx: Context
) -> tuple[Stream, list[str], list[str], dict[str, str]]:
    """A lookup join's ON condition read: the stream (with a column per key computed by an
    expression), its key columns, the table's, and the table's columns to rename to the stream's."""
    from sqlglot import exp

    stream = rels[0].stream
    resolve = _side_resolver(specs, rels, ctx)
    left_only = resolver(rels[0], ctx)
    renames: dict[str, str] = {}
    on: list[str] = []
    rkeys: list[str] = []
    for part in conjuncts(join.args["on"]):
        sides = [part.this, part.expression] if isinstance(part, exp.EQ) else []
        right = [x for x in sides if is_column(x) and resolve(x)[0] == "right"]
        if len(right) != 1:
            raise ctx.sql.error(
                part, f"a lookup join's ON condition equates each table key with the stream's: {LOOKUP_FORM}"
            )
        key = resolve(right[0])[1]
        other = sides[1] if right[0] is sides[0] else sides[0]
        if is_column(other) and resolve(other)[0] == "left":
            column = resolve(other)[1]
            if column != key:
                renames[key] = column
        else:
            value = scalar(other, ctx.sql, left_only, no_helpers(ctx, "ON", left_only), "ON")
            if key in stream.columns:
                raise ctx.sql.error(
                    other,
                    f"the stream has a column {key!r} already; the expression's value would take that name "
                    "(the table's key's): rename the table's key, or compute the value in the stream",
                )
            with errors_at(ctx, other, "ON: "):
                stream = stream.with_column(key, Expr(value))
            column = key
        on.append(column)
        rkeys.append(key)
    return stream, on, rkeys, renames


def _plain_numbers(
    numbers: tuple[exp.Expression, ...], times: tuple[tuple[Stream, str], ...], ctx: Context
) -> None:
    """Offsets written as plain numbers are milliseconds, only on a bigint event time."""
    if not numbers:
        return
    for stream, column in times:
        if stream.schema.field(column).dtype.is_timestamp:
            raise ctx.sql.error(
                numbers[0],
                f"a plain number is an offset in milliseconds only on a bigint event time; {column!r} is "
                "a timestamp: write an INTERVAL, e.g. INTERVAL '5' SECOND",
            )


def _join_scan(spec: SideSpec, ctx: Context) -> Relation:
    """A side's registered stream, as it is (its watermark comes with the join's time columns)."""
    if spec.name.lower() in ctx.ctes:
        raise ctx.sql.error(
            spec.table,
            f"a side of a JOIN is a registered stream, not a WITH subquery ({spec.name!r}): filter the "
            "joined rows with WHERE, or filter a side with the builder and register it "
            "(stream.register(name))",
        )
    rel = scan(spec.table, attrs.evolve(ctx, needs_watermark=False))
    return attrs.evolve(rel, qualifiers=frozenset({spec.qualifier}))


def _side_resolver(
    specs: tuple[SideSpec, SideSpec], rels: tuple[Relation, Relation], ctx: Context
) -> SideResolver:
    """Resolves a column of the ON condition to its side (by qualifier, or the one side that has it)."""
    names: tuple[Side, Side] = ("left", "right")

    def resolve(column: exp.Column) -> tuple[Side, str]:
        if column.args.get("db") or column.args.get("catalog"):
            raise ctx.sql.error(column, "column names have at most two parts: <stream or alias>.<column>")
        qualifier, name = str(column.table).lower(), str(column.name)
        indexes = [i for i in (0, 1) if not qualifier or specs[i].qualifier == qualifier]
        if not indexes:
            raise ctx.sql.error(
                column,
                f"unknown stream or alias {str(column.table)!r}; this query joins {specs[0].qualifier} and "
                f"{specs[1].qualifier}",
            )
        found: list[tuple[int, str]] = []
        for i in indexes:
            if specs[i].window is not None and name.lower() in BOUNDS:
                found.append((i, name.lower()))
                continue
            match = column_named(rels[i].stream.columns, name)
            if match is not None:
                found.append((i, match))
        if len(found) == 1:
            return names[found[0][0]], found[0][1]
        if found:
            raise ctx.sql.error(
                column,
                f"column {name!r} is on both sides of the join; qualify it: {specs[0].qualifier}.{name} or "
                f"{specs[1].qualifier}.{name}",
            )
        known = "; ".join(f"{rels[i].label}: {', '.join(rels[i].stream.columns)}" for i in indexes)
        raise ctx.sql.error(column, f"unknown column {name!r}; the columns of {known}")

    return resolve


def _join_time(
    spec: SideSpec, rel: Relation, column: str | None, where: exp.Expression, ctx: Context
) -> Stream:
    """The side's stream with its watermark, which must be on ``column``, the join's time column for it.

    A stream without a watermark gets one on ``column`` (``SET watermark.column``
    if set), with the lag of ``SET watermark.lag``, as for a window. ``column``
    None (an as-of join's right side without a max age): whichever column its
    watermark is on, for a stream without one ``SET watermark.column``, else its
    one timestamp column.
    """
    stream = rel.stream
    if isinstance(stream.plan, n.WindowAggregate) and spec.window is None:
        # A registered window's results: their event time is window_end - 1 ms (see _window_shift).
        if column is None or column.lower() != "window_end":
            raise ctx.sql.error(
                where,
                f"{rel.label} is a window's results: the join's time column for it is window_end "
                "(a result's event time is window_end - 1 ms)",
            )
        return stream
    if n.window_aggregates(stream.plan) or n.joins_of(stream.plan):
        raise ctx.sql.error(
            spec.node,
            f"{rel.label} is the result of a window or a join, which a join does not take as a side yet "
            "(a window's results registered as they are, stream.register(name), it does); join the "
            "streams it reads",
        )
    if facts(stream.plan).event_time is None:
        stream = watermark(
            stream, spec.node, rel.label, attrs.evolve(ctx, time_column=ctx.settings.column or column)
        )
    if column is not None and time_source(stream.plan, column) is None:
        et = facts(stream.plan).event_time
        on = repr(et.column) if et is not None else "no column"
        raise ctx.sql.error(
            where,
            f"the join's time column {column!r} is not the event-time column of {rel.label} (its watermark "
            f"is on {on}); a join matches rows by the event time of their watermarks",
        )
    return stream


def _join_emission(joined: Stream, ctx: Context) -> Stream:
    """Apply the ``window.*`` settings through the join's options (allowed lateness, accumulation, TTL)."""
    from krishiv_py.api.stream import JoinedStream

    assert isinstance(joined, JoinedStream)
    own = join_options(ctx.settings)
    joined = apply_settings(joined, own)
    if ctx.has_window:
        return joined  # a window over the join's rows takes the window.* settings
    if ctx.settings.trigger is not None:
        raise PlanError("SET window.trigger does not apply to a join: a join emits as its rules say")
    shared = emission_options(ctx.settings)
    both = [(a, b) for a, method, _ in own for b, other, _ in shared if method == other]
    if both:
        a, b = both[0]
        raise PlanError(
            f"SET {a} and SET {b} both set the join's option (the query has no window after its "
            f"join, so {b} applies to the join too): set one of them"
        )
    return apply_settings(joined, shared)


def _joined_relation(
    joined: Stream,
    specs: tuple[SideSpec, SideSpec],
    rels: tuple[Relation, Relation],
    lkeys: tuple[str, ...],
    rkeys: tuple[str, ...],
    how: str,
) -> Relation:
    """The join's rows as a ``FROM`` input: each side's columns named as the joined rows name them.

    A key column of either side is the key (named as on the left); a left
    column keeps its name; a right column is named as the joined row names it
    (``_right`` added when taken), and is not there in a semi or anti join; a
    window TVF's ``window_start`` and ``window_end`` are the window's.
    """
    join = joined.plan
    assert isinstance(join, n.Join | n.LookupJoin)
    right_names = join.right_names if isinstance(join, n.Join) else join.table_names
    sides = []
    for i, (spec, rel) in enumerate(zip(specs, rels, strict=True)):
        keys = lkeys if i == 0 else rkeys
        columns: dict[str, str | None] = {}
        for c in rel.stream.columns:
            if c in keys:
                columns[c] = lkeys[keys.index(c)]
            elif i == 0:
                columns[c] = c
            else:
                columns[c] = None if how in ("semi", "anti") else right_names[c]
        if spec.window is not None:
            columns.update((b, b) for b in BOUNDS)
        sides.append(JoinedSide(spec.qualifier, rel.label, columns))
    return Relation(
        joined,
        frozenset(spec.qualifier for spec in specs),
        f"the join of {rels[0].label} and {rels[1].label}",
        tuple(sides),
    )
