"""Stages after the window: filter, select and with_column on windowed results, on every lowering.

The stateful lowering runs them on each micro-batch's results on the driver
(in Arrow, each expression with Spark SQL's value, or a small Spark batch
job where Arrow does not evaluate one as Spark does); the native and bounded lowerings chain them
after Spark's own aggregation. A retraction passes a filter exactly when
the emit it withdraws did, since it carries that emit's values.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

import krishiv_py as kp
from krishiv_py.testing import Close, Send, Step, assert_same_rows, run_reference, run_streaming

SCHEMA = "k string, t bigint, v bigint"
TWO_62 = 2**62


def windows(s: kp.Stream, *, lateness: int = 0, mode: Any = "accumulating") -> kp.Stream:
    w = s.watermark("t", 0).key_by("k").tumbling_window(10)
    if lateness:
        w = w.allowed_lateness(lateness).accumulation(mode)
    return w.agg(kp.count(kp.col("*")), kp.sum(kp.col("v")))


def busy(s: kp.Stream) -> kp.Stream:
    """Windows with two rows or more, their sum doubled, without ``window_end``."""
    return (
        s.filter(kp.col("count") >= 2)
        .with_column("twice", kp.col("sum_v") * 2)
        .select("k", "window_start", "count", "twice")
    )


def test_select_keeps_the_kind_of_retracting_results(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    res = windows(stream, lateness=50, mode="retracting")
    assert res.select("k", "count").columns == ("k", "count", "kind")
    assert res.select("k", "kind", "count").columns == ("k", "kind", "count")
    assert windows(stream).select("k", "count").columns == ("k", "count")


def test_the_recipe_shows_the_stages_the_driver_runs_on_the_results(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    recipe = busy(windows(stream, lateness=50, mode="retracting")).lower()
    assert recipe.lowering == "stateful"
    assert recipe.after is not None
    text = recipe.render()
    after = text.split("# then, on the driver, on each micro-batch's results:\n")[1]
    # Every expression evaluates in Arrow as Spark SQL does: no Spark job per micro-batch.
    assert recipe.after.arrow is not None
    assert after.splitlines()[0].startswith("result = <this micro-batch's window results, in Arrow")
    assert "filter('(`count` >= 2)')" in after
    assert "try_multiply(`sum_v`, 2) AS `twice`" in after
    assert "in Arrow on the driver" in recipe.reason and "Spark batch job" not in recipe.reason
    assert recipe.output_schema.names == ("k", "window_start", "count", "twice", "kind")
    assert recipe.after.window_schema.names == ("k", "window_start", "window_end", "count", "sum_v", "kind")


def test_stages_arrow_does_not_evaluate_as_spark_does_run_as_a_spark_batch_job(session: kp.Session) -> None:
    stream, _ = session.memory_stream(SCHEMA)
    parsed = windows(stream, lateness=50, mode="retracting").with_column("c", kp.col("k").cast("double"))
    recipe = parsed.lower()
    assert recipe.after is not None and recipe.after.arrow is None  # a cast from a string: Spark parses it
    after = recipe.render().split("# then, on the driver, on each micro-batch's results:\n")[1]
    assert after.splitlines()[0] == "src_0 = spark.createDataFrame(<this micro-batch's window results>)"
    assert "as a Spark batch job on the driver" in recipe.reason


def test_a_union_of_windowed_results_runs_as_one_operator_on_the_stateful_lowering(
    session: kp.Session,
) -> None:
    a, _ = session.memory_stream(SCHEMA)
    b, _ = session.memory_stream(SCHEMA)
    both = windows(a, lateness=50).union(windows(b, lateness=50))
    recipe = both.lower()
    assert recipe.lowering == "stateful" and "the union of windows runs as one operator" in recipe.reason
    assert recipe.stateful is not None and "krishiv union of" in recipe.stateful.operator.kernel.describe()


# Steps: a and b fill [0, 10); the watermark closes it; late rows re-fire it.
STEPS: list[Step] = [
    Send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 2, "v": 2}, {"k": "b", "t": 3, "v": 5}]),
    Send([{"k": "c", "t": 15, "v": 0}]),  # watermark 15: [0, 10) fires
    Send([{"k": "a", "t": 5, "v": 10}, {"k": "b", "t": 6, "v": TWO_62}]),  # mildly late: both re-fire
    Close(),
]


def test_a_filter_after_a_retracting_window_passes_a_retraction_with_its_emit(session: kp.Session) -> None:
    got = run_streaming(session, SCHEMA, lambda s: busy(windows(s, lateness=50, mode="retracting")), STEPS)
    w0 = 0
    a1 = {"k": "a", "window_start": w0, "count": 2, "twice": 6}
    a2 = {"k": "a", "window_start": w0, "count": 3, "twice": 26}
    # b's first result (count 1) did not pass, so neither does its retraction;
    # its corrected sum doubled does not fit a bigint: null, and counted.
    b2 = {"k": "b", "window_start": w0, "count": 2, "twice": None}
    expected = [
        [],
        [{**a1, "kind": "emit"}],
        [{**a1, "kind": "emit"}, {**a1, "kind": "retract"}, {**a2, "kind": "emit"}, {**b2, "kind": "emit"}],
    ]
    for step, want in zip(got, expected, strict=False):
        assert_same_rows(step, want)
    assert_same_rows(got[-1], expected[-1])  # [10, 20) has one row: filtered out


def test_arithmetic_after_the_window_is_counted_in_the_job_metrics(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    job = busy(windows(stream, lateness=50)).start()
    try:
        sender.send([{"k": "b", "t": 3, "v": TWO_62}, {"k": "b", "t": 4, "v": 1}])
        sender.close()
        job.process_all_available()
        assert job.results().to_pylist()[0]["twice"] is None
        assert job.metrics().arithmetic_errors == 1
    finally:
        job.stop()


def test_stages_arrow_does_not_evaluate_run_as_a_spark_job_and_count_failures(session: kp.Session) -> None:
    stream, sender = session.memory_stream(SCHEMA)
    parsed = busy(windows(stream, lateness=50)).with_column("n", kp.col("k").cast("double"))
    after = parsed.lower().after
    assert after is not None and after.arrow is None  # Spark parses the string: its batch job runs
    job = parsed.start()
    try:
        sender.send([{"k": "7", "t": 3, "v": TWO_62}, {"k": "7", "t": 4, "v": 1}])
        sender.close()
        job.process_all_available()
        row = job.results().to_pylist()[0]
        assert row["twice"] is None and row["n"] == 7.0
        assert job.metrics().arithmetic_errors == 1
    finally:
        job.stop()


@pytest.mark.parametrize("lowering", ["native", "bounded"])
def test_stages_after_a_spark_window_match_the_model_filtered(session: kp.Session, lowering: str) -> None:
    steps: list[Step] = [
        Send([{"k": "a", "t": 1, "v": 1}, {"k": "a", "t": 2, "v": 2}, {"k": "b", "t": 3, "v": 5}]),
        Send([{"k": "a", "t": 11, "v": 3}, {"k": "b", "t": 12, "v": 4}, {"k": "b", "t": 14, "v": 4}]),
        Close(),
    ]
    model = run_reference(SCHEMA, windows, steps)[-1]
    want = [
        {
            "k": r["k"],
            "window_start": r["window_start"],
            "count": r["count"],
            "twice": cast(int, r["sum_v"]) * 2,
        }
        for r in model
        if cast(int, r["count"]) >= 2
    ]
    assert len(want) == 2
    if lowering == "native":
        got = run_streaming(session, SCHEMA, lambda s: busy(windows(s)), steps, lowering="native")[-1]
    else:
        rows = [r for step in steps if isinstance(step, Send) for r in step.rows]
        got = busy(windows(session.from_records(rows, SCHEMA))).collect().to_pylist()
    assert_same_rows(got, want)


def test_a_stateful_sql_query_with_having_and_its_own_select_order_streams(session: kp.Session) -> None:
    _, sender = session.memory_stream(SCHEMA, name="after_window_sql")
    query = session.sql(
        """SET window.allowed_lateness = INTERVAL '1' MINUTE;
           SELECT COUNT(*) AS n, k, tumble_start(t, INTERVAL '10' MILLISECONDS) AS opens
           FROM after_window_sql GROUP BY k, tumble_start(t, INTERVAL '10' MILLISECONDS)
           HAVING COUNT(*) >= 2"""
    )
    assert query is not None
    job = query.start()
    try:
        assert job.lowering == "stateful"
        sender.send([{"k": "a", "t": 1, "v": 0}, {"k": "a", "t": 2, "v": 0}, {"k": "b", "t": 3, "v": 0}])
        sender.send([{"k": "c", "t": 25, "v": 0}])
        job.process_all_available()
        sender.send([{"k": "b", "t": 4, "v": 0}])  # late: b's window re-fires with two rows
        sender.close()
        job.process_all_available()
        assert job.results().column_names == ["n", "k", "opens"]
        assert_same_rows(job.results(), [{"n": 2, "k": "a", "opens": 0}, {"n": 2, "k": "b", "opens": 0}])
    finally:
        job.stop()


def test_the_stages_take_every_chunk_of_a_micro_batchs_results(session: kp.Session) -> None:
    """Results in chunks with an empty one among them (one per bucket): every row reaches the stages.

    PySpark 4.3's ``createDataFrame`` of an Arrow table keeps the record
    batches up to the first empty one after data (chunks 2, 0, 3 give 2 rows).
    """
    import pyarrow as pa

    from krishiv_py.planner.spark.recipe import AfterWindow
    from krishiv_py.runtime.stages import AfterWindowRunner

    stream, _ = session.memory_stream(SCHEMA)
    (stage,) = busy(windows(stream)).lower(lowering="stateful").stages
    assert isinstance(stage, AfterWindow)
    parts = []
    for start, n in ((0, 2), (2, 0), (2, 3)):
        ms = pa.array([10 * i for i in range(start, start + n)], pa.int64()).cast(
            pa.timestamp("ms", tz="UTC")
        )
        parts.append(
            pa.table(
                {
                    "k": pa.array([f"k{i}" for i in range(start, start + n)], pa.string()),
                    "window_start": ms.cast(pa.timestamp("us", tz="UTC")),
                    "window_end": ms.cast(pa.timestamp("us", tz="UTC")),
                    "count": pa.array([2] * n, pa.int64()),
                    "sum_v": pa.array([1] * n, pa.int64()),
                }
            )
        )
    results = pa.concat_tables(parts)
    assert [len(c) for c in results.column(0).chunks] == [2, 0, 3]
    out = AfterWindowRunner(stage, session.spark).step(results).table
    assert out.column("k").to_pylist() == ["k0", "k1", "k2", "k3", "k4"]


def test_records_with_an_empty_chunk_keep_every_row(session: kp.Session) -> None:
    """``from_records`` of an Arrow table whose chunks are 2, 0 and 3 rows: all five are read."""
    import pyarrow as pa

    parts = [
        pa.table(
            {
                "k": pa.array([f"k{i}" for i in range(a, b)], pa.string()),
                "v": pa.array(list(range(a, b)), pa.int64()),
            }
        )
        for a, b in ((0, 2), (2, 2), (2, 5))
    ]
    table = pa.concat_tables(parts)
    assert [len(c) for c in table.column(0).chunks] == [2, 0, 3]
    got = session.from_records(table, "k string, v bigint").collect()
    assert sorted(v for v in got.column("v").to_pylist() if v is not None) == [0, 1, 2, 3, 4]
    assert got.num_rows == 5
