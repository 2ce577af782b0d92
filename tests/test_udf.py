"""``kp.udf``: a Python function over Arrow arrays as a scalar expression.

Without Spark: the node, its type, where a plan calls it, the checks of its
result (the same for Spark's Arrow UDF and krishiv's Arrow evaluation). On
Spark: the same pipeline, a function before and after a window, on the
bounded, native and stateful lowerings, equals the function applied in
plain Python; a function that raises fails the job naming it.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import krishiv_py as kp
from krishiv_py.api.stream import Stream
from krishiv_py.expr import Udf
from krishiv_py.plan import nodes as n
from krishiv_py.planner.sql import to_sql
from krishiv_py.stateful.arrow_expr import call_user_function, evaluate
from krishiv_py.types import Schema, to_schema

NO_SESSION = cast(Any, None)
CLICKS = "user string, url string, t bigint"


@kp.udf("bigint")
def count_char(text: Any, char: Any) -> Any:
    """How many times ``char`` is in ``text`` (null for a null text), as Nexmark's q14 counts."""
    removed = pc.replace_substring(text, char[0].as_py() if len(char) else "", "")
    return pc.subtract(pc.utf8_length(text), pc.utf8_length(removed))


@kp.udf("bigint")
def twice(x: Any) -> Any:
    return pc.multiply(x, 2)


def _count(text: str | None, char: str) -> int | None:
    return None if text is None else text.count(char)


def _clicks() -> Stream:
    return Stream(NO_SESSION, n.MemorySource(name="clicks", schema=to_schema(CLICKS), path="/c"))


def test_a_udf_call_is_an_expression_of_its_type_that_plans_carry() -> None:
    call = count_char(kp.col("url"), "c")
    assert isinstance(call.node, Udf) and call.node.function is count_char
    assert kp.col("url").node in call.node.args
    schema = to_schema(CLICKS)
    assert str(n.schema_of(_clicks().with_column("cs", call).plan).field("cs").dtype) == "bigint"
    assert to_sql(call.node, schema) == f"{count_char.sql_name}(`url`, 'c')"
    filtered = _clicks().filter(count_char(kp.col("url"), "x") > 0).with_column("cs", call)
    assert n.user_functions(filtered.plan) == (count_char,)
    assert "udf count_char(url, 'c')" in n.render_plan(filtered.plan)
    agg = _clicks().watermark("t", 0).key_by("user").tumbling_window(10)
    counted = agg.agg(kp.count(kp.col("*"), filter=count_char(kp.col("url"), "c") > 1))
    assert n.user_functions(counted.plan) == (count_char,)
    recipe = counted.lower(force_bounded=True)
    assert recipe.udfs == (count_char,) and "count_char" in recipe.reason


def test_what_a_udf_does_not_take_is_named() -> None:
    with pytest.raises(kp.SchemaError, match="unsupported column type 'number'"):
        kp.udf("number")
    with pytest.raises(kp.PlanError, match="takes a DDL type"):
        kp.udf(cast(Any, int))
    with pytest.raises(kp.PlanError, match="name= must be an identifier"):
        kp.udf("bigint", name="a b")(len)
    with pytest.raises(kp.PlanError, match="needs at least one argument"):
        count_char()
    with pytest.raises(kp.PlanError, match="unknown column"):
        _clicks().with_column("cs", count_char(kp.col("nope"), "c"))


def test_a_udfs_result_is_checked_the_same_wherever_it_runs() -> None:
    text = pa.array(["acc", None, "x"])
    assert call_user_function(count_char, [text, pa.array(["c"] * 3)]).to_pylist() == [2, None, 0]
    as_list = kp.udf("int", name="as_list")(lambda a: [1, 2, 3])
    assert call_user_function(as_list, [text]).type == pa.int32()  # a list is made an array, cast
    short = kp.udf("bigint", name="short")(lambda a: pa.array([1]))
    with pytest.raises(ValueError, match="udf 'short' returned 1 values for 3 rows"):
        call_user_function(short, [text])
    wrong = kp.udf("bigint", name="wrong")(lambda a: a)
    with pytest.raises(ValueError, match="udf 'wrong' returned string, which is not its type bigint"):
        call_user_function(wrong, [pa.array(["x", "y", "z"])])
    boom = kp.udf("bigint", name="boom")(lambda a: 1 / 0)
    with pytest.raises(ValueError, match="udf 'boom' raised ZeroDivisionError"):
        call_user_function(boom, [text])
    table = pa.table({"user": ["u"] * 3, "url": text, "t": [1, 2, 3]})
    assert evaluate(count_char(kp.col("url"), "c").node, table, Schema.parse(CLICKS)).to_pylist() == [
        2,
        None,
        0,
    ]


ROWS: list[dict[str, Any]] = [
    {"user": "a", "url": "https://c.com/acc", "t": 1_000},
    {"user": "b", "url": None, "t": 2_000},
    {"user": "a", "url": "x", "t": 3_000},
    {"user": "b", "url": "cccc", "t": 12_000},
    {"user": "a", "url": "c", "t": 14_000},
]


def _pipeline(clicks: Stream) -> Stream:
    """A function before a window (a column, a filtered aggregate's condition) and after it."""
    counted = clicks.with_column("cs", count_char(kp.col("url"), "c")).watermark("t", 0)
    per_user = counted.key_by("user").tumbling_window(10_000)
    windows = per_user.agg(
        kp.sum(kp.col("cs")).alias("cs"),
        kp.count(kp.col("*"), filter=count_char(kp.col("url"), "c") >= 2).alias("many"),
    )
    return windows.with_column("cs_twice", twice(kp.col("cs")))


def _expected() -> list[tuple[Any, ...]]:
    """Per user and window: the sum of the counts (null when every url is), the rows with two or
    more, and the sum twice."""
    counts: dict[tuple[str, int], list[int | None]] = {}
    for r in ROWS:
        counts.setdefault((r["user"], r["t"] // 10_000 * 10), []).append(_count(r["url"], "c"))
    out = []
    for (user, start), cs in counts.items():
        known = [c for c in cs if c is not None]
        total = sum(known) if known else None
        out.append((user, start, total, sum(c >= 2 for c in known), None if total is None else 2 * total))
    return sorted(out, key=str)


@pytest.mark.spark
@pytest.mark.parametrize("lowering", ["bounded", "native", "stateful"])
def test_a_udf_before_and_after_a_window_runs_alike_on_every_lowering(
    session: kp.Session, lowering: str
) -> None:
    clicks, sender = session.memory_stream(CLICKS, name=f"clicks_{uuid.uuid4().hex[:6]}")
    sender.send(ROWS)
    pipeline = _pipeline(clicks)
    if lowering == "bounded":
        rows = pipeline.collect().to_pylist()
    else:
        job = pipeline.start(lowering=cast(Any, lowering))
        try:
            sender.advance_watermark(60_000)
            job.process_all_available()
            rows = job.results().to_pylist()
        finally:
            job.stop()
    got = sorted(
        ((r["user"], r["window_start"].second, r["cs"], r["many"], r["cs_twice"]) for r in rows), key=str
    )
    assert got == _expected()


@pytest.mark.spark
def test_a_udf_that_raises_fails_the_job_naming_it(session: kp.Session) -> None:
    @kp.udf("bigint", name="always_fails")
    def fails(text: Any) -> Any:
        raise RuntimeError("no service")

    clicks = session.from_records(ROWS, schema=CLICKS)
    with pytest.raises(kp.JobError, match=re.compile("udf 'always_fails' raised RuntimeError: no service")):
        clicks.with_column("x", fails(kp.col("url"))).collect()


def test_sql_calls_a_user_function_the_session_registered() -> None:
    from krishiv_py.sql import SqlCatalog, execute

    catalog = SqlCatalog()
    catalog.register("clicks", _clicks().plan)
    catalog.register_function("count_char", count_char)
    out = execute(
        catalog,
        "SELECT user, COUNT_CHAR(url, 'c') AS cs FROM clicks WHERE count_char(url, 'x') > 0",
        NO_SESSION,
    )
    assert out is not None
    built = _clicks().filter(count_char(kp.col("url"), "x") > 0)
    assert out.plan == built.select(kp.col("user"), count_char(kp.col("url"), "c").alias("cs")).plan
    with pytest.raises(kp.PlanError, match="unknown function TWICE in SELECT"):
        execute(catalog, "SELECT twice(t) FROM clicks", NO_SESSION)
    with pytest.raises(kp.PlanError, match=r"count_char\(\) needs at least one argument"):
        execute(catalog, "SELECT count_char() FROM clicks", NO_SESSION)


@pytest.mark.spark
def test_a_registered_user_function_runs_from_sql(session: kp.Session) -> None:
    name = f"clicks_{uuid.uuid4().hex[:6]}"
    session.from_records(ROWS, schema=CLICKS, name=name)
    assert session.register_udf(count_char) is count_char
    with pytest.raises(kp.PlanError, match=r"takes a function made with @kp\.udf"):
        session.register_udf(cast(Any, len))
    out = session.sql(f"SELECT user, count_char(url, 'c') AS cs FROM {name}")
    assert out is not None
    got = sorted(((r["user"], r["cs"]) for r in out.collect().to_pylist()), key=str)
    assert got == sorted(((r["user"], _count(r["url"], "c")) for r in ROWS), key=str)
