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
slide)``. This module reads the clause (its sides, its kind, its ON
condition); :mod:`krishiv_py.sql.query` scans the streams, declares their
watermarks and calls the builder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.sql.settings import interval_ms
from krishiv_py.sql.source import DIALECT
from krishiv_py.sql.windows import WindowCall

if TYPE_CHECKING:
    from sqlglot import exp

    from krishiv_py.sql.source import SqlText

__all__ = [
    "AS_OF_FORM",
    "BOUNDS",
    "INTERVAL_FORM",
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
