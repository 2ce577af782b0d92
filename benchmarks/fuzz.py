"""Fuzz the front doors: random builder calls, SQL text and ``send()`` batches; every refusal a KrishivError.

    python -m benchmarks.fuzz [--cases N] [--door builder|sql|send] [--seed S] [--json F]
    nox -s fuzz                      # 10,000 cases per door

Three doors, no Spark:

``builder``
    a random sequence of up to eight calls of the fluent builder
    (:class:`~krishiv_py.Stream`, :class:`~krishiv_py.KeyedStream`,
    :class:`~krishiv_py.WindowedStream`) on a memory source of a random
    schema, each with arguments drawn from a pool that mixes valid values
    (column names, millisecond counts, expressions, aggregates, triggers,
    TTLs, handlers) with wrong ones (unknown names, negative, huge and
    boolean numbers, NaN, bytes, lone surrogates, ``None``, foreign objects);
    expressions and aggregates are built inside the case, so ``kp.col(5)``
    is a front door too. The stream at the end is lowered
    (``Stream.lower``), with a random forced lowering.
``sql``
    a query of the supported grammar, mutated token by token (deleted,
    repeated, swapped for a keyword, a number, a string, an identifier or
    punctuation), through the SQL front end against a catalog that holds
    ``events``.
``send``
    a batch of random rows (dict rows, pandas or Arrow) for a random schema,
    with values of every type in every column, through
    :meth:`~krishiv_py.Sender.send` into a spool directory.

Every case passes or is refused. A refusal must be a
:class:`~krishiv_py.KrishivError` subclass (any other exception is an
*escape*), and nothing accepted before it may be lost: a refused builder call
leaves its stream's plan as it was, a refused SQL text leaves the catalog's
waiting ``SET`` settings as they were, and a refused ``send()`` writes no
spool file while an accepted one writes exactly its rows. Prints, per door,
the cases tried and the outcomes by exception type; exits 1 on any escape
or loss. The test suite runs the same doors with a few hundred cases
(``tests/test_fuzz.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import inspect
import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, cast

import attrs
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.errors import KrishivError
from krishiv_py.plan import nodes as n
from krishiv_py.types import to_schema

DOORS = ("builder", "sql", "send")


@attrs.define
class Tally:
    """Cases tried and outcomes per door; escapes (non-KrishivError) and losses with their cases."""

    cases: collections.Counter[str] = attrs.field(factory=collections.Counter)
    outcomes: dict[str, collections.Counter[str]] = attrs.field(
        factory=lambda: collections.defaultdict(collections.Counter)
    )
    escapes: list[dict[str, str]] = attrs.field(factory=list)
    strict: bool = False

    def ok(self, door: str) -> None:
        self.outcomes[door]["accepted"] += 1

    def refused(self, door: str, exc: BaseException, case: str) -> None:
        if isinstance(exc, KrishivError):
            self.outcomes[door][type(exc).__name__] += 1
            if not str(exc).strip():
                self.problem(door, "an error without a message", case, exc)
            return
        self.outcomes[door][f"ESCAPE {type(exc).__name__}"] += 1
        self.problem(door, f"{type(exc).__name__} escaped: {exc}", case, exc)

    def problem(self, door: str, what: str, case: str, exc: BaseException | None = None) -> None:
        trace = "".join(traceback.format_exception(exc)) if exc is not None else ""
        self.escapes.append({"door": door, "what": what, "case": case, "trace": trace})
        if self.strict:
            raise AssertionError(f"{door}: {what}\ncase: {case}\n{trace}")

    def record(self) -> dict[str, Any]:
        return {
            "cases": dict(self.cases),
            "outcomes": {d: dict(c) for d, c in self.outcomes.items()},
            "problems": len(self.escapes),
        }


# --- builder ------------------------------------------------------------------------------------------

_TYPES = ["string", "bigint", "int", "double", "boolean", "timestamp", "date"]
_RUNS = ("collect", "collect_with_aggs", "explain", "start", "to_spark", "register", "lower")


def _methods(cls: type) -> list[str]:
    return sorted(
        m
        for m in dir(cls)
        if not m.startswith("_") and callable(getattr(cls, m)) and m not in _RUNS and m not in ("describe",)
    )


_METHODS = {cls: _methods(cls) for cls in (kp.Stream, kp.KeyedStream, kp.WindowedStream, kp.JoinedStream)}
_JUNK: list[Any] = [
    None,
    True,
    False,
    1.5,
    float("nan"),
    float("inf"),
    b"event_time",
    "a\ud800",
    [],
    {},
    ("x",),
    object(),
    Decimal("1.5"),
    np.int64(7),
    np.float64(2.0),
    dt.timedelta(seconds=5),
]
_MS = [0, 1, -1, 10, 999, 1_000, 5_000, 60_000, 600_000, 2**31, 2**53 + 1, 2**63, -(2**63), 10**20]


@attrs.frozen
class Thunk:
    """A value built inside the case (so that building it is tried too), and how it reads."""

    text: str
    make: Callable[[], Any]


def _value(names: list[str]) -> st.SearchStrategy[Thunk]:
    """Any argument: mostly plausible (names, milliseconds, expressions), often wrong."""
    name = st.sampled_from([*names, "nope", "", "*", "Event_Time", "a b"])
    ms = st.sampled_from(_MS) | st.integers(-(10**7), 10**9)
    plain = st.one_of(name, ms, st.sampled_from(_JUNK), st.text(max_size=4))

    def const(v: Any) -> Thunk:
        return Thunk(repr(v), lambda: v)

    def col(v: Any) -> Thunk:
        return Thunk(f"kp.col({v!r})", lambda: kp.col(v))

    def compare(v: Any, w: Any, op: str) -> Thunk:
        def make() -> Any:
            left = kp.col(v)
            return {
                ">": lambda: left > w,
                "==": lambda: left == w,
                "+": lambda: left + w,
                "*": lambda: left * w,
                "&": lambda: (left > w) & (left < w),
                "~": lambda: ~(left == w),
            }[op]()

        return Thunk(f"kp.col({v!r}) {op} {w!r}", make)

    def agg(fn: str, v: Any, alias: Any) -> Thunk:
        def make() -> Any:
            arg = kp.col(v) if fn != "count" or v != "*" else kp.col("*")
            out = getattr(kp, fn)(arg)
            return out.alias(alias) if alias is not None else out

        return Thunk(f"kp.{fn}(kp.col({v!r})).alias({alias!r})", make)

    def trigger(kind: str, every: Any) -> Thunk:
        def make() -> Any:
            method = getattr(kp.Trigger, kind)
            return method() if kind in ("on_watermark", "on_every_element") else method(every)

        return Thunk(f"kp.Trigger.{kind}({every!r})", make)

    def ttl(ms_: Any, time_: Any) -> Thunk:
        return Thunk(
            f"kp.StateTtlConfig({ms_!r}, {time_!r})", lambda: kp.StateTtlConfig(ttl_ms=ms_, time=time_)
        )

    return st.one_of(
        plain.map(const),
        name.map(const),
        ms.map(const),
        name.map(col),
        st.builds(compare, name, st.one_of(ms, plain), st.sampled_from([">", "==", "+", "*", "&", "~"])),
        st.builds(
            agg,
            st.sampled_from(["count", "sum", "avg", "min", "max", "first", "last", "count_distinct"]),
            name,
            st.none() | st.sampled_from(["n", "", "total", "event_time", 3]),
        ),
        st.builds(
            trigger,
            st.sampled_from(["on_watermark", "on_every_element", "on_interval", "on_count"]),
            st.one_of(ms, plain),
        ),
        st.builds(ttl, st.one_of(ms, plain), st.sampled_from(["event", "processing", "wall", None])),
        st.sampled_from(
            [
                Thunk("kp.CountingLateEventHandler()", kp.CountingLateEventHandler),
                Thunk("kp.SideOutputLateEventHandler()", kp.SideOutputLateEventHandler),
                Thunk("lambda pane: None", lambda: lambda pane: None),
                Thunk("'accumulating'", lambda: "accumulating"),
                Thunk("'discarding'", lambda: "discarding"),
                Thunk("'retracting'", lambda: "retracting"),
            ]
        ),
    )


def _plausible(param: str, names: list[str]) -> st.SearchStrategy[Thunk]:
    """A value that fits the parameter's name (most calls should go through, to reach deeper plans)."""

    def const(v: Any) -> Thunk:
        return Thunk(repr(v), lambda: v)

    name = st.sampled_from(names)
    if param.endswith("ms") or param in ("ms", "n"):
        return st.sampled_from([1, 10, 1_000, 5_000, 10_000, 60_000]).map(const)
    if param == "column":  # watermark(column, ...): mostly the event time
        return st.sampled_from([*names, "event_time", "event_time"]).map(const)
    if param in ("columns", "name", "by", "keys"):
        return name.map(const)
    if param in ("condition", "expr"):
        return st.builds(
            lambda c, v: Thunk(f"kp.col({c!r}) == {v!r}", lambda: kp.col(c) == v),
            name,
            st.sampled_from([0, "a"]),
        )
    if param == "aggregates":
        return st.builds(
            lambda f, c: Thunk(f"kp.{f}(kp.col({c!r}))", lambda: getattr(kp, f)(kp.col(c))),
            st.sampled_from(["count", "sum", "max", "min", "avg"]),
            name,
        )
    if param == "mode":
        return st.sampled_from(["accumulating", "discarding", "retracting"]).map(const)
    if param == "between":
        return st.sampled_from([(-5_000, 0), (0, 1_000), (-60_000, 60_000), (5, -5), (0, 0)]).map(const)
    if param == "how":
        return st.sampled_from(["inner", "left", "right", "full", "semi", "anti", "outer"]).map(const)
    if param == "trigger":
        return st.sampled_from(
            [
                Thunk("kp.Trigger.on_watermark()", kp.Trigger.on_watermark),
                Thunk("kp.Trigger.on_every_element()", kp.Trigger.on_every_element),
                Thunk("kp.Trigger.on_count(3)", lambda: kp.Trigger.on_count(3)),
                Thunk("kp.Trigger.on_interval(1000)", lambda: kp.Trigger.on_interval(1_000)),
            ]
        )
    if param == "config":
        return st.just(Thunk("kp.StateTtlConfig(ttl_ms=60000)", lambda: kp.StateTtlConfig(ttl_ms=60_000)))
    if param == "handler":
        return st.just(Thunk("kp.CountingLateEventHandler()", kp.CountingLateEventHandler))
    if param == "callback":
        return st.just(Thunk("lambda pane: None", lambda: lambda pane: None))
    return _value(names)


def _arg(data: st.DataObject, param: str, names: list[str]) -> Thunk:
    """Three times in four a plausible value for ``param``, else anything."""
    if data.draw(st.integers(0, 3)) > 0:
        return data.draw(_plausible(param, names))
    return data.draw(_value(names))


def _schema(draw: st.DrawFn) -> kp.Schema:
    k = draw(st.integers(0, 4))
    extra = [f"c{i} {draw(st.sampled_from(_TYPES))}" for i in range(k)]
    return to_schema(", ".join(["user_id string", "event_time timestamp", "amount double", *extra]))


def _params(method: Callable[..., Any]) -> tuple[list[str], list[str], str | None]:
    """(positional, keyword-only, the name of ``*args`` or None) of a builder method."""
    sig = inspect.signature(method)
    pos: list[str] = []
    kw: list[str] = []
    star: str | None = None
    for p in sig.parameters.values():  # a bound method: no self
        if p.kind is p.VAR_POSITIONAL:
            star = p.name
        elif p.kind is p.KEYWORD_ONLY:
            kw.append(p.name)
        elif p.default is p.empty:
            pos.append(p.name)
        else:
            kw.append(p.name)
    return pos, kw, star


def builder_case(data: st.DataObject, tally: Tally) -> None:
    """One random call sequence; a refused call must leave the stream as it was."""
    schema = data.draw(st.composite(_schema)())
    source = n.MemorySource(name="events", schema=schema, path="/data/events")
    current: Any = Stream(None, source)
    other = Stream(None, n.MemorySource(name="other", schema=schema, path="/data/other"))
    names = list(schema.names)
    steps: list[str] = []
    if data.draw(st.integers(0, 3)) > 0:  # most pipelines start from event time
        current = current.watermark("event_time", 5_000)
        other = other.watermark("event_time", 5_000)
        steps.append("watermark('event_time', 5000)")
        if data.draw(st.integers(0, 2)) == 0:  # some from a join, and an operator after it
            current, call = _joined_start(data, current, other)
            steps.append(call)
            names = list(current.columns)
    for _ in range(data.draw(st.integers(1, 8), label="calls")):
        name = data.draw(st.sampled_from(_METHODS[type(current)]))
        method = getattr(current, name)
        pos, kw, star = _params(method)
        args = [_arg(data, p, names) for p in pos]
        if star is not None:
            args += [_arg(data, star, names) for _ in range(data.draw(st.integers(0, 3)))]
            if name == "union" and data.draw(st.booleans()):
                args = [Thunk("other", lambda: other)]
        if name in ("interval_join", "as_of_join", "join") and args and data.draw(st.integers(0, 3)) > 0:
            args[0] = _other_side(data, other, name, current)
        kwargs = {k: _arg(data, k, names) for k in kw if data.draw(st.booleans())}
        call = f"{name}({', '.join([a.text for a in args] + [f'{k}={v.text}' for k, v in kwargs.items()])})"
        steps.append(call)
        before = _snapshot(current)
        try:
            result = method(*[a.make() for a in args], **{k: v.make() for k, v in kwargs.items()})
        except Exception as exc:  # noqa: BLE001 - judged by the tally: only KrishivError may refuse
            tally.refused("builder", exc, " . ".join(steps))
            if _snapshot(current) != before:
                tally.problem("builder", "a refused call changed the stream", " . ".join(steps))
            continue
        tally.ok("builder")
        if isinstance(result, (kp.Stream, kp.KeyedStream, kp.WindowedStream, kp.JoinedStream)):
            current = result
            names = list(result.columns) if isinstance(result, kp.Stream) else names
    if isinstance(current, kp.Stream):
        lowering: Any = data.draw(st.sampled_from([None, "native", "stateful", "bounded", "fast", 3]))
        steps.append(f"lower(lowering={lowering!r})")
        try:
            current.lower(lowering=lowering)
        except Exception as exc:  # noqa: BLE001 - judged by the tally
            tally.refused("builder", exc, " . ".join(steps))
        else:
            tally.ok("builder")
            if n.joins_of(current.plan):
                composed = any(not isinstance(x, n.Join) and n.joins_of(x) for x in _operators(current.plan))
                tally.outcomes["builder"]["accepted chain" if composed else "accepted join"] += 1


def _operators(plan: n.PlanNode) -> list[n.PlanNode]:
    """The plan's stateful operators: windows, joins, aggregations and top-N per key."""
    kinds = (n.WindowAggregate, n.Join, n.KeyedAggregate, n.KeyedTopN)
    return [x for x in n.walk(plan) if isinstance(x, kinds)]


def _joined_start(data: st.DataObject, current: Stream, other: Stream) -> tuple[Stream, str]:
    """An interval join of the two streams by user, and (mostly) an operator keyed by user after it."""
    lateness = data.draw(st.sampled_from([0, 10_000]))
    joined: Stream = current.key_by("user_id").interval_join(other.key_by("user_id"), between=(-5_000, 0))
    joined = joined.allowed_lateness(lateness) if lateness else joined  # type: ignore[attr-defined]
    call = f"key_by('user_id').interval_join(other, (-5000, 0)).allowed_lateness({lateness})"
    after = data.draw(st.sampled_from(["", "window", "agg", "top_n"]))
    if after == "window":
        joined = joined.key_by("user_id").tumbling_window(60_000).agg(kp.count(kp.col("*")))
    elif after == "agg":
        joined = joined.key_by("user_id").agg(kp.max(kp.col("amount")))
    elif after == "top_n":
        joined = joined.top_n(1, by="amount", per="key", keys=("user_id",))
    return joined, call + (f" . <{after} by user_id>" if after else "")


def _other_side(data: st.DataObject, other: Stream, name: str, current: Any) -> Thunk:
    """The other stream as a join's right side: keyed (and windowed like ``current`` for ``join``)."""
    key = data.draw(st.sampled_from(["user_id", "amount", "event_time"]))
    if name != "join":
        return Thunk(f"other.key_by({key!r})", lambda: other.key_by(key))
    window = getattr(current, "window", None)
    if window is not None and data.draw(st.booleans()):
        return Thunk(f"other.key_by({key!r}).<same window>", lambda: kp.WindowedStream(other, (key,), window))
    return Thunk(
        f"other.key_by({key!r}).tumbling_window(60000)", lambda: other.key_by(key).tumbling_window(60_000)
    )


def _snapshot(obj: Any) -> Any:
    if isinstance(obj, kp.Stream):
        return obj.plan
    return repr(vars(obj)) if hasattr(obj, "__dict__") else repr(obj)


# --- sql ----------------------------------------------------------------------------------------------

SQL_SEEDS = [
    "SET watermark.lag = INTERVAL '5' SECOND; SELECT * FROM events l LEFT JOIN events r "
    "ON l.user_id = r.user_id AND r.event_time BETWEEN l.event_time - INTERVAL '1' MINUTE AND l.event_time",
    "SELECT tumble_start(event_time, INTERVAL '1 minute') AS window_start, "
    "tumble_end(event_time, INTERVAL '1 minute') AS window_end, COUNT(*) AS events FROM events "
    "GROUP BY tumble_start(event_time, INTERVAL '1 minute'), tumble_end(event_time, INTERVAL '1 minute')",
    "SET watermark.lag = INTERVAL '5' SECOND; SELECT user_id, "
    "tumble_start(event_time, INTERVAL '10' SECOND) AS s, SUM(amount) AS total "
    "FROM events GROUP BY user_id, tumble_start(event_time, INTERVAL '10' SECOND)",
    "SELECT user_id, hop_end(event_time, INTERVAL '5' SECOND, INTERVAL '1' MINUTE) AS e, COUNT(*) AS n "
    "FROM events WHERE amount > 3 "
    "GROUP BY user_id, hop_end(event_time, INTERVAL '5' SECOND, INTERVAL '1' MINUTE) HAVING COUNT(*) > 1",
    "SET watermark.lag = INTERVAL '2' SECOND; "
    "SELECT user_id, session_start(event_time, INTERVAL '30' SECOND) AS s, MAX(amount) AS top "
    "FROM events GROUP BY user_id, session_start(event_time, INTERVAL '30' SECOND)",
    "SELECT user_id, amount * 2 AS double_amount FROM events WHERE user_id <> 'bot' AND amount >= 0",
    "WITH big AS (SELECT * FROM events WHERE amount > 10) SELECT COUNT(*) AS n, "
    "tumble_end(event_time, INTERVAL '1' HOUR) AS e FROM big "
    "GROUP BY tumble_end(event_time, INTERVAL '1' HOUR)",
    "SELECT user_id, AVG(amount) AS mean, MIN(amount) AS low, "
    "session_end(event_time, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) AS e FROM events "
    "GROUP BY user_id, session_end(event_time, INTERVAL '10' SECOND, INTERVAL '1' MINUTE)",
]
SQL_TOKENS = [
    "SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT 3", "JOIN", "UNION ALL", "WITH",
    "AS", "AND", "OR", "NOT", "NULL", "TRUE", "*", ",", "(", ")", ";", "'", '"', "=", "<>", "+", "/", "-",
    "INTERVAL", "'5' SECOND", "'-1' MINUTE", "'1 fortnight'", "TUMBLE", "hop_start", "SESSION", "CUMULATE",
    "DESCRIPTOR(event_time)", "TABLE events", "tumble_start", "session_end", "COUNT(*)", "SUM(",
    "AVG(amount)", "CAST(amount AS bigint)", "SET", "watermark.lag", "watermark.column", "= 'x'",
    "events", "clicks", "event_time",
    "user_id", "amount", "nope", "0", "-1", "1e400", "9223372036854775808", "'a\u00e9'", "\x00", "--", "/*",
    "$1", "?", "OVER (PARTITION BY user_id)", "DISTINCT", "LATERAL", "EXISTS (SELECT 1)",
]  # fmt: skip


def _sql_text(draw: st.DrawFn) -> str:
    tokens = draw(st.sampled_from(SQL_SEEDS)).split(" ")
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3, 4]))):
        i = draw(st.integers(0, len(tokens)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "repeat"]))
        new = draw(st.sampled_from(SQL_TOKENS) | st.text(max_size=3))
        if op == "insert" or not tokens:
            tokens.insert(i, new)
        elif op == "delete":
            del tokens[min(i, len(tokens) - 1)]
        elif op == "replace":
            tokens[min(i, len(tokens) - 1)] = new
        else:
            j = min(i, len(tokens) - 1)
            tokens.insert(j, tokens[j])
    return " ".join(tokens)


def sql_case(data: st.DataObject, tally: Tally) -> None:
    """One mutated query; a refused text leaves the catalog's waiting settings as they were."""
    from krishiv_py.sql.catalog import SqlCatalog
    from krishiv_py.sql.execute import execute

    schema = to_schema("user_id string, event_time timestamp, amount double")
    catalog = SqlCatalog()
    catalog.register("events", n.MemorySource(name="events", schema=schema, path="/data/events"))
    text = data.draw(st.composite(_sql_text)())
    before = catalog.pending
    try:
        out = execute(catalog, text, cast(Any, None))
        if out is not None:
            out.lower()
    except Exception as exc:  # noqa: BLE001 - judged by the tally
        tally.refused("sql", exc, text)
        if catalog.pending != before:
            tally.problem("sql", "a refused text changed the waiting SET settings", text)
    else:
        tally.ok("sql")


# --- send ---------------------------------------------------------------------------------------------

_SEND_TYPES = [*_TYPES, "decimal(10,2)"]
_ANY: list[Any] = [
    None, 0, 1, -1, 2**31, 2**63, -(2**63) - 1, 1.5, float("nan"), float("-inf"), True, "x", "", "a\ud800",
    b"b", dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1), dt.date(2024, 1, 1),
    dt.timedelta(1), Decimal("1.25"), Decimal("1e30"), np.int64(5), np.float32(1.5),
    np.datetime64("2024-01-01"),
    pd.Timestamp("2024-01-01", tz="UTC"), pd.NaT, 1 + 2j, [1], {"a": 1},
]  # fmt: skip


def _send_batch(draw: st.DrawFn) -> tuple[kp.Schema, Any, str]:
    k = draw(st.integers(1, 4))
    ddl = ", ".join(
        f"c{i} {draw(st.sampled_from(_SEND_TYPES))}{' NOT NULL' if draw(st.booleans()) else ''}"
        for i in range(k)
    )
    schema = to_schema(ddl)
    names = list(schema.names)
    col_names = draw(
        st.sampled_from(
            [
                names,
                names[:-1],
                [*names, "extra"],
                [*names[:-1], names[0]],
                [*reversed(names)],
                ["__kp_seq", *names],
            ]
        )
    )
    rows = [
        {c: draw(st.sampled_from(_ANY) | st.integers() | st.text(max_size=3)) for c in col_names}
        for _ in range(draw(st.integers(0, 5)))
    ]
    form = draw(st.sampled_from(["rows", "pandas", "arrow"]))
    batch: Any = rows
    if form == "pandas":
        batch = pd.DataFrame(rows, columns=col_names)
    elif form == "arrow":
        try:
            batch = (
                pa.Table.from_pylist(rows)
                if rows
                else pa.table({c: pa.array([], pa.null()) for c in col_names})
            )
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            batch = pd.DataFrame(rows, columns=col_names)
            form = "pandas"
    return schema, batch, f"{ddl} <- {form} {rows!r}"


def send_case(data: st.DataObject, tally: Tally, root: str) -> None:
    """One batch; a refused batch writes nothing, an accepted one exactly its rows, once."""
    schema, batch, text = data.draw(st.composite(_send_batch)())
    path = tempfile.mkdtemp(dir=root)
    sender = kp.Sender(name="fuzz", schema=schema, path=path)

    def files() -> list[str]:
        return sorted(os.listdir(os.path.join(path, "data")))

    before = files()
    try:
        sender.send(batch)
    except Exception as exc:  # noqa: BLE001 - judged by the tally
        tally.refused("send", exc, text)
        if files() != before or sender.batches_sent != 0:
            tally.problem("send", "a refused batch left a spool file or a count", text)
        return
    tally.ok("send")
    written = [f for f in files() if f not in before]
    rows = len(batch) if not isinstance(batch, pa.Table) else batch.num_rows
    got = sum(pq.read_table(os.path.join(path, "data", f)).num_rows for f in written)
    if sender.batches_sent != 1 or got != rows:
        tally.problem("send", f"accepted {rows} rows, spooled {got} in {len(written)} files", text)


# --- running ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def run_door(door: str, cases: int, tally: Tally, seed: int | None = None) -> None:
    """``cases`` generated cases through ``door`` (hypothesis generates, no shrinking unless strict)."""
    root = tempfile.mkdtemp(prefix="krishiv-fuzz-")

    def one(data: st.DataObject) -> None:
        tally.cases[door] += 1
        if door == "builder":
            builder_case(data, tally)
        elif door == "sql":
            sql_case(data, tally)
        else:
            send_case(data, tally, root)

    phases = [Phase.generate] + ([Phase.shrink] if tally.strict else [])
    test = settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        derandomize=seed is None,
    )(given(st.data())(one))
    if seed is not None:
        from hypothesis import seed as with_seed

        test = with_seed(seed)(test)
    with _quiet():
        test()
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=10_000, help="cases per door (default 10,000)")
    p.add_argument("--door", action="append", choices=DOORS)
    p.add_argument("--seed", type=int, help="a random seed (default: hypothesis's derandomized run)")
    p.add_argument("--json", help="write the tally to this file")
    a = p.parse_args(argv)
    tally = Tally()
    timings = {}
    for door in a.door or list(DOORS):
        t0 = time.perf_counter()
        run_door(door, a.cases, tally, a.seed)
        timings[door] = round(time.perf_counter() - t0, 1)
        outcomes = ", ".join(f"{k} {v:,}" for k, v in tally.outcomes[door].most_common())
        print(f"{door}: {tally.cases[door]:,} cases in {timings[door]} s; calls: {outcomes}")
    for problem in tally.escapes[:20]:
        print(
            f"\nPROBLEM ({problem['door']}): {problem['what']}\n  case: {problem['case']}\n{problem['trace']}"
        )
    print(f"\n{len(tally.escapes)} problem(s)")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({**tally.record(), "seconds": timings}, f, indent=1)
    return 1 if tally.escapes else 0


if __name__ == "__main__":
    raise SystemExit(main())
