"""Nexmark's join queries (Q3, Q8, Q20): krishiv_py pipelines, hand-written PySpark, the reference model.

The krishiv_py pipelines are the query modules' (:mod:`benchmarks.nexmark.q3`,
``q8``, ``q20``: each one's docstring says how it gives Nexmark's answer).

Nexmark writes Q3 and Q20 as *regular* joins (every pair of rows with equal
keys, whenever they come) and Q8 as a join of two windowed aggregations.
krishiv_py joins on event time (docs/joins.md), so each query is written
with the join whose rules give Nexmark's answer on the data of
:func:`benchmarks.data.nexmark`. What that generator guarantees:

* a bid's auction is among the 100 newest auctions when the bid is
  generated (at most ~1.7 s of arrivals before it), an auction's seller among
  the 100 newest persons (at most ~5 s before it);
* event time is arrival time minus up to 2 s of disorder, minus a further
  5-60 s for 1 % of the events: so a partner's event time can be *after* the
  row's own (a person after their auction, an auction after its bid), and
  the two event times of a pair are at most 5 + 2 + 60 = 67 s apart;
* an auction lasts less than ``MAX_AUCTION_DURATION_MS`` = 120 s.

The as-of join (each row with its partner's latest version at or before it)
is the natural form of "each bid with its auction" and "each auction with its
seller", but it finds no partner whose event time is after the row's: on the
20,000-event dataset it misses 1,229 of Q20's 4,716 rows (26 %: a bid before
its auction) and 5 of Q3's 62 (a person after their auction), at 1,000,000
events 36,446 of Q20's 183,281 rows and 372 of Q3's 4,766
(``tests/test_benchmarks.py`` checks it misses rows on a small dataset). An
inner interval join bounded by the longest auction on both sides,
``between=(-120_000, 120_000)``, holds every pair of the generator and gives
exactly the regular join's rows (the same test file checks that against
Nexmark's SQL in DuckDB): that is the formulation of Q3 and Q20.

Streaming, every join drops the rows behind its watermark (the minimum of
both sides', each side's newest event time minus 5 s), as every streaming
query of the suite does; bounded, every row counts.

Filters on one side's columns run before the join (Nexmark's ``WHERE``
pushed down, as a SQL optimizer does), before that side's watermark: the
side's watermark is that of the rows it keeps, in every runner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import krishiv_py as kp
from benchmarks import nexmark, protocol
from benchmarks.nexmark._streams import BETWEEN as BETWEEN
from benchmarks.nexmark._streams import timed
from benchmarks.nexmark.q3 import CATEGORY as CATEGORY
from benchmarks.nexmark.q3 import STATES as STATES
from benchmarks.nexmark.q8 import WINDOW_MS as WINDOW_MS
from benchmarks.queries import WATERMARK_LAG_MS, Query
from krishiv_py.api.stream import placeholder
from krishiv_py.errors import PlanError
from krishiv_py.model.joins import JoinModel, join_model_for
from krishiv_py.plan import nodes as n

Sources = Mapping[str, kp.Stream]


# --- krishiv_py --------------------------------------------------------------------------------------


def krishiv_join(query: Query, sources: Sources) -> kp.Stream:
    """``query`` over ``sources`` (table name -> stream without a watermark): its module's pipeline
    (``nexmark-q3``: :mod:`benchmarks.nexmark.q3`), each table watermarked 5 s behind."""
    module = nexmark.query(query.name.removeprefix("nexmark-"))
    tables = timed({t: sources[t] for t in query.tables}, WATERMARK_LAG_MS, query.event_time)
    pipeline: kp.Stream = module.build(tables)
    return pipeline


def join_node(query: Query, ddls: Mapping[str, str]) -> n.Join:
    """The join of ``query``'s plan (under its projection), built without a session."""
    plan = krishiv_join(query, {t: placeholder(ddls[t], t) for t in query.tables}).plan
    while isinstance(plan, n.Filter | n.Project):
        plan = plan.input
    assert isinstance(plan, n.Join), plan
    return plan


# --- the rows each side of the join sees (the model's input) -----------------------------------------


def side_rows(query: Query, table: str, rows: pa.Table) -> pa.Table:
    """``rows`` of ``table`` that reach the join: the side's filter of :func:`krishiv_join`."""
    if table == "auction" and query.name in ("nexmark-q3", "nexmark-q20"):
        return rows.filter(pc.equal(rows["category"], pa.scalar(CATEGORY)))
    if table == "person" and query.name == "nexmark-q3":
        return rows.filter(pc.is_in(rows["state"], pa.array(STATES)))
    return rows


def project(query: Query, results: Sequence[Mapping[str, object]]) -> pa.Table:
    """The model's joined rows in ``query``'s columns (the select after the join)."""
    return pa.table({c: [r[c] for r in results] for c in query.columns})


# --- the reference model -----------------------------------------------------------------------------


def _files(info: protocol.TableInfo) -> list[Path]:
    return sorted(Path(info.files()).glob("*.parquet"))


def steps(query: Query, infos: Sequence[protocol.TableInfo]) -> list[tuple[pa.Table, pa.Table]]:
    """One step per file: file ``i`` of the left table and of the right, each as its side sees it.

    The streaming runners read one file of each source per micro-batch.
    """
    left, right = (_files(i) for i in infos)
    if len(left) != len(right):
        raise ValueError(
            f"{query.name}: {len(left)} files of {query.table}, {len(right)} of {query.right_table}"
        )
    return [
        (
            side_rows(query, query.tables[0], pq.read_table(a)),
            side_rows(query, query.tables[1], pq.read_table(b)),
        )
        for a, b in zip(left, right, strict=True)
    ]


def model_of(query: Query, infos: Sequence[protocol.TableInfo]) -> JoinModel:
    return join_model_for(join_node(query, {t: i.ddl for t, i in zip(query.tables, infos, strict=True)}))


def run_model_one(query: Query, infos: Sequence[protocol.TableInfo], *, close: bool = False) -> pa.Table:
    """The model as one instance, one step per file (``close``: then both sides end); for small inputs."""
    model = model_of(query, infos)
    for left, right in steps(query, infos):
        model.step(left=left.to_pylist(), right=right.to_pylist())
    if close:
        model.close()
    return project(query, model.results)


#: Which sides' next file a micro-batch took: ``(left, right)``.
Batching = Sequence[tuple[bool, bool]]


def run_model_batched(
    query: Query, infos: Sequence[protocol.TableInfo], batches: Batching, *, close: bool = False
) -> pa.Table:
    """The model on the micro-batches Spark ran: each takes the next file of the sides it names.

    A memory stream's send is one file and a micro-batch takes at most one
    waiting file per source, but which sends meet in a micro-batch depends on
    when Spark starts it: a send of one side may run alone when Spark starts
    before the other side's send lands. :func:`batching_of` reads what ran.
    """
    model = model_of(query, infos)
    files = steps(query, infos)
    taken = [0, 0]
    for takes in batches:
        if not any(takes):
            continue
        rows: list[list[dict[str, Any]]] = [[], []]
        for side in (0, 1):
            if takes[side]:
                rows[side] = files[taken[side]][side].to_pylist()
                taken[side] += 1
        model.step(left=rows[0], right=rows[1])
    if taken != [len(files), len(files)]:
        raise ValueError(f"{query.name}: the micro-batches took {taken} files of {len(files)} per side")
    if close:
        model.close()
    return project(query, model.results)


def batching_of(progress: Sequence[Mapping[str, Any]], paths: Sequence[str]) -> list[tuple[bool, bool]]:
    """Which of the two memory streams (their directories, ``paths``) each micro-batch read rows
    of, from Spark's progress reports in batch order (``job.progress()``'s ``raw``)."""
    out = []
    for raw in progress:
        took = [False, False]
        for source in raw.get("sources") or ():
            for side, path in enumerate(paths):
                at = re.escape(path.rstrip("/")) + r"(?:[/\]]|$)"  # the directory itself, not a sibling
                if re.search(at, str(source.get("description"))) and source.get("numInputRows"):
                    took[side] = True
        out.append((took[0], took[1]))
    return out


def run_memory_join(
    session: kp.Session, query: Query, infos: Sequence[protocol.TableInfo], *, lowering: Any
) -> tuple[pa.Table, list[tuple[bool, bool]], int | None]:
    """``query`` on memory streams named like its tables, one file of each sent per step, then
    both closed: the joined rows, the micro-batches' batching (data steps only) and the very late
    count."""
    sides = {t: session.memory_stream(i.ddl, name=t) for t, i in zip(query.tables, infos, strict=True)}
    job = krishiv_join(query, {t: stream for t, (stream, _) in sides.items()}).start(lowering=lowering)
    try:
        for left, right in zip(*(_files(i) for i in infos), strict=True):
            for table, path in zip(query.tables, (left, right), strict=True):
                sides[table][1].send(pq.read_table(path))
            job.process_all_available()
        paths = [cast(n.MemorySource, sides[t][0].plan).path for t in query.tables]
        batching = batching_of([p.raw for p in job.progress()], paths)
        for _, sender in sides.values():
            sender.close()
        job.process_all_available()
        return job.results(), batching, job.metrics().very_late_events
    finally:
        job.stop()


def run_model_bounded(query: Query, infos: Sequence[protocol.TableInfo]) -> pa.Table:
    """The model's bounded answer: one step with every row, then ``close()``."""
    model = model_of(query, infos)
    tables = [pa.concat_tables(side) for side in zip(*steps(query, infos), strict=True)]
    model.step(left=tables[0].to_pylist(), right=tables[1].to_pylist())
    model.close()
    return project(query, model.results)


def _key_of(columns: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    return lambda row: tuple(row[c] for c in columns)


def _newest_ms(rows: pa.Table, column: str) -> int | None:
    newest = pc.max(rows[column].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())).as_py()
    return None if newest is None else int(newest) // 1000


def run_model(query: Query, infos: Sequence[protocol.TableInfo]) -> pa.Table:
    """The ``reference-model`` runner on a join query: the model once per key, one step per file.

    Rows of different keys never meet, so the join of all rows is the union
    of the joins of each key's rows, given the watermark: each key's model
    is told both sides' watermarks (``advance_watermark``, the newest event
    time of each side's earlier steps minus the lag: the rule of
    :mod:`krishiv_py.model.joins`) before it takes the key's rows of a step,
    and at the end. A key's model sweeps later than one model of every key
    would (when the key next has rows), which changes no result: with no
    allowed lateness a window that fires, or a left row the as-of join emits,
    gains no row after the watermark passed it. :func:`run_model_one` is the
    single model; ``tests/test_benchmarks.py`` checks that both agree.
    One model of every key compares each new row with every stored row, so
    its time grows with the square of the input: Q20 takes it 8.5 s at
    50,000 events, where the model per key takes 15 s at 1,000,000.
    """
    node = join_node(query, {t: i.ddl for t, i in zip(query.tables, infos, strict=True)})
    if node.emission.allowed_lateness_ms or node.emission.state_ttl is not None:
        raise ValueError(f"{query.name}: the model per key needs a join without lateness and TTL")
    keys = {"left": _key_of(node.left_keys), "right": _key_of(node.right_keys)}
    times = {"left": node.left_time.column, "right": node.right_time.column}
    lags = {"left": node.left_time.lag_ms, "right": node.right_time.lag_ms}
    models: dict[tuple[Any, ...], JoinModel] = {}
    marks: dict[str, int] = {}

    def catch_up(model: JoinModel) -> None:
        for side, mark in marks.items():
            model.advance_watermark(mark, side=side)  # type: ignore[arg-type]

    for left, right in steps(query, infos):
        by_key: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
        for side, rows in (("left", left), ("right", right)):
            for row in rows.to_pylist():
                by_key.setdefault(keys[side](row), {"left": [], "right": []})[side].append(row)
        for key, sides in by_key.items():
            model = models.get(key)
            if model is None:
                model = models[key] = join_model_for(node)
            catch_up(model)
            model.step(left=sides["left"], right=sides["right"])
        for side, rows in (("left", left), ("right", right)):
            newest = _newest_ms(rows, times[side])
            if newest is not None:
                marks[side] = max(marks.get(side, newest - lags[side]), newest - lags[side])
    results: list[Mapping[str, object]] = []
    for model in models.values():
        catch_up(model)
        results += model.results
    return project(query, results)


# --- hand-written PySpark ------------------------------------------------------------------------------


def _spark_timed(df: Any) -> Any:
    """``df`` with its event time ``et``: ``date_time`` plus 1 µs, watermarked (lag 5 s).

    Spark's stream-stream join drops a row as late when its event time is at
    or below the watermark (``t <= W``), krishiv when it is below (``t <
    W``). Event times here are whole milliseconds, and Spark's watermark is
    one too (its newest event time, floored to ms, minus the lag), so with
    1 µs added Spark drops exactly the rows with ``t < W``. Both sides are
    shifted alike: the time condition is unchanged.
    """
    from pyspark.sql import functions as F

    et = F.timestamp_micros(F.unix_micros("date_time") + 1)
    return df.withColumn("et", et).withWatermark("et", f"{WATERMARK_LAG_MS} milliseconds")


def _between(a: str, b: str) -> str:
    """SQL: ``b``'s ``et`` within :data:`BETWEEN` of ``a``'s."""
    lower, upper = BETWEEN
    return (
        f"{b}.et >= {a}.et + INTERVAL '{lower}' MILLISECOND "
        f"AND {b}.et <= {a}.et + INTERVAL '{upper}' MILLISECOND"
    )


def pyspark_join(query: Query, frames: Mapping[str, Any]) -> Any:
    """``query`` by hand with Spark's join: a stream-stream join on streams, a plain join on batches.

    Q3 and Q20 are interval joins (``a.seller = p.id AND p.et BETWEEN a.et -
    120 s AND a.et + 120 s``); Q8 is a left semi join on the key and the
    window struct, each side projected to its key, name and ``window``
    (which carries the watermark: Spark then drops a row whose window has
    ended, ``window.end <= W``, as krishiv does). Its rows keep
    ``window_end`` for :func:`cut_to_closed_windows`.
    """
    from pyspark.sql import functions as F

    if query.name == "nexmark-q8":
        lag = f"{WATERMARK_LAG_MS} milliseconds"
        window = F.window("date_time", f"{WINDOW_MS} milliseconds").alias("window")
        persons = frames["person"].withWatermark("date_time", lag).select("id", "name", window).alias("p")
        auctions = frames["auction"].withWatermark("date_time", lag).select("seller", window).alias("a")
        cond = (F.col("p.id") == F.col("a.seller")) & (F.col("p.window") == F.col("a.window"))
        return persons.join(auctions, cond, "left_semi").select(
            "id", "name", F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")
        )
    auctions = _spark_timed(frames["auction"].filter(F.col("category") == CATEGORY))
    if query.name == "nexmark-q3":
        persons = _spark_timed(frames["person"].filter(F.col("state").isin(*STATES)))
        cond = F.expr(f"a.seller = p.id AND {_between('a', 'p')}")
        return (
            auctions.alias("a").join(persons.alias("p"), cond).select("p.name", "p.city", "p.state", "a.id")
        )
    if query.name == "nexmark-q20":
        bids = _spark_timed(frames["bid"])
        cond = F.expr(f"b.auction = a.id AND {_between('b', 'a')}")
        bid_cols = [F.col(f"b.{c}") for c in query.columns[:6]]
        auction_cols = [F.col(f"a.{c}") for c in query.columns[6:]]
        auction_cols[4] = F.col("a.date_time").alias("date_time_right")
        return bids.alias("b").join(auctions.alias("a"), cond).select(*bid_cols, *auction_cols)
    raise ValueError(f"unknown join query {query.name!r}")


def end_watermark(query: Query, infos: Sequence[protocol.TableInfo]) -> int:
    """The join's watermark once every file is read: each side's newest event time minus the lag, the least.

    Computed from the files as each side sees them (its filter applied).
    """
    marks = []
    for table, info in zip(query.tables, infos, strict=True):
        rows = side_rows(query, table, pq.read_table(info.files(), columns=None))
        newest = _newest_ms(rows, query.event_time)
        if newest is None:
            raise ValueError(f"{query.name}: no rows of {table}")
        marks.append(newest - WATERMARK_LAG_MS)
    return min(marks)


def cut_to_closed_windows(rows: pa.Table, watermark_ms: int) -> pa.Table:
    """The rows of the windows the watermark ``watermark_ms`` closed (``window_end <= W``)."""
    end = pa.scalar(watermark_ms * 1000, pa.timestamp("us", tz="UTC"))
    ends = rows["window_end"].cast(pa.timestamp("us", tz="UTC"))
    return rows.filter(pc.less_equal(ends, end))


# --- the runners of benchmarks.spark_runner -----------------------------------------------------------------


def native_skip(query: Query, sources: Sources) -> str | None:
    """Why ``krishiv-native`` cannot run ``query`` (``None``: it can)."""
    try:
        krishiv_join(query, sources).lower(lowering="native")
    except PlanError as exc:
        return f"the native lowering does not run this join: {exc}"
    return None


def streaming_sources(
    session: kp.Session, infos: Sequence[protocol.TableInfo], query: Query
) -> dict[str, kp.Stream]:
    return {
        t: session.read_parquet(i.files(), streaming=True, max_files_per_trigger=1)
        for t, i in zip(query.tables, infos, strict=True)
    }


def run_krishiv_streaming(
    session: kp.Session,
    query: Query,
    infos: Sequence[protocol.TableInfo],
    lowering: str,
    handles: list[Any] | None = None,
) -> pa.Table:
    """``krishiv-native`` / ``krishiv-stateful`` on a join query: one file of each table per micro-batch."""
    stream = krishiv_join(query, streaming_sources(session, infos, query))
    job = stream.start(lowering=lowering)  # type: ignore[arg-type]
    job.process_all_available()
    job.stop()
    if handles is not None:
        handles.append(job)
    return job.results()


def run_krishiv_bounded(
    session: kp.Session, query: Query, infos: Sequence[protocol.TableInfo], handles: list[Any] | None = None
) -> pa.Table:
    sources = {t: session.read_parquet(i.files()) for t, i in zip(query.tables, infos, strict=True)}
    return krishiv_join(query, sources).collect()


def run_pyspark_streaming(
    spark: Any,
    query: Query,
    infos: Sequence[protocol.TableInfo],
    end_ms: int | None,
    handles: list[Any] | None = None,
) -> pa.Table:
    """The hand-written stream-stream join, memory sink; Q8's rows cut to the windows ``end_ms`` closed."""
    import tempfile
    import uuid

    frames = {
        t: spark.readStream.schema(i.ddl).option("maxFilesPerTrigger", 1).parquet(i.files())
        for t, i in zip(query.tables, infos, strict=True)
    }
    name = f"bench_{uuid.uuid4().hex}"
    q = (
        pyspark_join(query, frames)
        .writeStream.outputMode("append")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-bench-"))
        .format("memory")
        .queryName(name)
        .start()
    )
    q.processAllAvailable()
    q.stop()
    if handles is not None:
        handles.append(q)
    out: pa.Table = spark.table(name).toArrow()
    spark.catalog.dropTempView(name)
    if "window_end" in out.column_names:
        assert end_ms is not None
        out = cut_to_closed_windows(out, end_ms)
    return out


def run_pyspark_batch(
    spark: Any, query: Query, infos: Sequence[protocol.TableInfo], handles: list[Any] | None = None
) -> pa.Table:
    frames = {
        t: spark.read.schema(i.ddl).parquet(i.files()) for t, i in zip(query.tables, infos, strict=True)
    }
    out: pa.Table = pyspark_join(query, frames).toArrow()
    return out
