"""Spark runners: krishiv_py (native and stateful streaming, bounded) and hand-written PySpark.

``python -m benchmarks.spark_runner --runner R [--runner R ...] --query Q ...``
runs each query with each runner (see :mod:`benchmarks.protocol`). Runners:

``krishiv-native``
    ``read_parquet(dir, streaming=True, max_files_per_trigger=1)`` ->
    ``watermark`` -> ``key_by`` -> window -> ``agg`` ->
    ``start(lowering="native")`` (memory sink), ``process_all_available()``,
    ``stop()``, ``results()``. The native lowering is forced on every query,
    session windows included (the planner would pick the stateful one for
    those), so its figures measure Spark's own window operators.
``krishiv-stateful``
    the same with ``start(lowering="stateful")``: krishiv's own operator
    (``applyInPandasWithState`` over key buckets, vectorized kernels).
``krishiv-bounded``
    the same pipeline over ``read_parquet(dir)`` (bounded) and ``collect()``.
``pyspark-streaming``
    the same query written by hand with Structured Streaming
    (``withWatermark`` + ``window``/``session_window`` + ``groupBy().agg()``,
    memory sink) in a session with krishiv_py's settings: the overhead baseline.
``pyspark-batch``
    the hand-written query as a batch job in the same session.
``pyspark-default``
    the hand-written streaming query in ``SparkSession.builder.getOrCreate()``
    with Spark's default configuration (200 shuffle partitions): what a
    newcomer writes. Must run in a process of its own.

Every runner reads the same Parquet files, streaming ones one file per
micro-batch, and materialises its full result as an Arrow table inside the
timing.

Nexmark's join queries (Q3, Q8, Q20) read two tables, one file of each per
micro-batch; their pipelines and hand-written joins are in
:mod:`benchmarks.joins`. ``krishiv-native`` reports a join it cannot run
(the window join of Q8) as skipped, with the planner's reason.

``--master spark://host:port`` runs the krishiv runners and the hand-written
ones that share their session on a standalone cluster, through
``kp.Session.connect(master)`` instead of ``kp.Session.embedded()`` (this
process is the driver; ``pyspark-default`` gets ``.master(master)``). The
executors read the dataset's files by the paths given here, so on a cluster
of several machines the dataset directories must be shared at the same path.
``--phases`` also reports, for every run (warm-up included), where its time
went: Spark's ``durationMs`` per phase summed over the run's micro-batches,
and the task metrics of the Spark stages it submitted (see :class:`Phases`).
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

import krishiv_py as kp
from benchmarks import joins, protocol
from benchmarks.arrow import rows_of
from benchmarks.nexmark import q5, q11
from benchmarks.nexmark._streams import Tables
from benchmarks.queries import QUERIES, WATERMARK_LAG_MS, Query
from krishiv_py.runtime.run import SINGLE_WATERMARK_CONF

STREAMING_RUNNERS = ("krishiv-native", "krishiv-stateful", "pyspark-streaming", "pyspark-default")
BOUNDED_RUNNERS = ("krishiv-bounded", "pyspark-batch")
RUNNERS = (*STREAMING_RUNNERS, *BOUNDED_RUNNERS)
StreamingLowering: TypeAlias = Literal["native", "stateful"]


# --- krishiv_py -------------------------------------------------------------------------------------------


def krishiv_query(query: Query, source: kp.Stream, *, ranked: bool = True) -> kp.Stream:
    """``query`` with the krishiv_py builder.

    Q5 is one pipeline, its window top-N included; ``ranked=False`` leaves
    the top-N out (the stateful lowering does not rank yet: :func:`hot_items`
    is its second stage).
    """
    s = source.watermark(query.event_time, WATERMARK_LAG_MS)
    count = kp.count(kp.col("*"))
    amount = kp.sum(kp.col("amount"))
    if query.name == "tumbling":
        return s.key_by("user_id").tumbling_window(60_000).agg(count, amount)
    if query.name == "sliding":
        return s.key_by("user_id").sliding_window(60_000, 10_000).agg(count, amount)
    if query.name == "sliding-10m":
        return s.key_by("user_id").sliding_window(600_000, 10_000).agg(count, amount)
    if query.name == "session":
        return s.key_by("user_id").session_window(30_000).agg(count, amount)
    if query.name == "nexmark-q5":  # (benchmarks.nexmark.q5: the hot auctions of each window)
        bids = Tables({"bid": s})
        return q5.build(bids) if ranked else q5.counts(bids)
    if query.name == "nexmark-q7":
        return s.tumbling_window(10_000).agg(kp.max(kp.col("price")).alias("max_price"))
    if query.name == "nexmark-q11":  # (benchmarks.nexmark.q11: bids per bidder and session)
        return q11.build(Tables({"bid": s}))
    raise ValueError(f"unknown query {query.name!r}")


def hot_items(counts: pa.Table) -> pa.Table:
    """Q5's second stage on windowed bid counts: per window, the auctions with the most bids.

    Exact on a streaming job's micro-batches too: a window's rows are all
    emitted in the batch where the watermark passes its end.
    """
    win = ["window_start", "window_end"]
    best = counts.group_by(win).aggregate([("count", "max")])
    joined = counts.join(best, keys=win)
    return joined.filter(pc.equal(joined["count"], joined["count_max"])).select(
        ["auction", "window_start", "window_end", "count"]
    )


def hot_items_of_batches(parts: list[pa.Table]) -> pa.Table:
    """Q5's result from the per-micro-batch :func:`hot_items`: the winners of each window.

    Where each window's rows all come in one micro-batch (native Spark,
    hand-written queries) this returns the batches' rows unchanged. The
    stateful lowering fires a window in every key bucket the watermark
    passed, and a bucket without new rows fires it in the next (tick)
    micro-batch, so one window's counts can span two batches: the
    auctions with a window's highest count are among their batch's winners,
    so taking the winners again over the batches' winners is exact.
    """
    if not parts:
        return hot_items(_empty_counts())
    return hot_items(pa.concat_tables(parts))


def run_krishiv_streaming(
    session: kp.Session,
    query: Query,
    path: str,
    lowering: StreamingLowering,
    handles: list[Any] | None = None,
) -> pa.Table:
    """``krishiv-native`` / ``krishiv-stateful``: the streaming query under the forced ``lowering``.

    The finished job is appended to ``handles`` when given (for :class:`Phases`).
    """
    source = session.read_parquet(path, streaming=True, max_files_per_trigger=1)
    stream = krishiv_query(query, source, ranked=lowering != "stateful")
    if query.name == "nexmark-q5" and lowering == "stateful":
        parts: list[pa.Table] = []
        job = stream.start(
            kp.ForeachBatchSink(lambda table, _batch: parts.append(hot_items(table))), lowering=lowering
        )
        job.process_all_available()
        job.stop()
        if handles is not None:
            handles.append(job)
        return hot_items_of_batches(parts)
    job = stream.start(lowering=lowering)
    job.process_all_available()
    job.stop()
    if handles is not None:
        handles.append(job)
    return job.results()


def run_krishiv_bounded(
    session: kp.Session, query: Query, path: str, handles: list[Any] | None = None
) -> pa.Table:
    return krishiv_query(query, session.read_parquet(path)).collect()


# --- hand-written PySpark -----------------------------------------------------------------------------------


def pyspark_query(query: Query, df: Any) -> Any:
    """``query`` written by hand with the DataFrame API; works on streams and batches."""
    from pyspark.sql import functions as F

    df = df.withWatermark(query.event_time, f"{WATERMARK_LAG_MS // 1000} seconds")
    et = query.event_time
    count = F.count(F.lit(1)).alias("count")
    amount = F.sum("amount").alias("sum_amount")
    if query.name == "tumbling":
        out = df.groupBy("user_id", F.window(et, "60 seconds")).agg(count, amount)
    elif query.name == "sliding":
        out = df.groupBy("user_id", F.window(et, "60 seconds", "10 seconds")).agg(count, amount)
    elif query.name == "sliding-10m":
        out = df.groupBy("user_id", F.window(et, "600 seconds", "10 seconds")).agg(count, amount)
    elif query.name == "session":
        out = df.groupBy("user_id", F.session_window(et, "30 seconds").alias("window")).agg(count, amount)
    elif query.name == "nexmark-q7":
        out = df.groupBy(F.window(et, "10 seconds")).agg(F.max("price").alias("max_price"))
    elif query.name == "nexmark-q11":
        out = df.groupBy("bidder", F.session_window(et, "10 seconds").alias("window")).agg(count)
    elif query.name == "nexmark-q5":
        # Stage 1 (bid counts per auction and hop window); the caller applies
        # hot_items() per micro-batch, as a window's rows all come in one batch.
        out = df.groupBy(F.window(et, "10 seconds", "2 seconds"), "auction").agg(count)
        return out.select(
            "auction",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
        )
    else:
        raise ValueError(f"unknown query {query.name!r}")
    cols = list(query.columns)
    keys, aggs = cols[: cols.index("window_start")], cols[cols.index("window_end") + 1 :]
    return out.select(
        *keys,
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *aggs,
    )


def run_pyspark_streaming(
    spark: Any, query: Query, path: str, ddl: str, handles: list[Any] | None = None
) -> pa.Table:
    """The hand-written streaming query; the finished query is appended to ``handles`` when given."""
    df = spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(path)
    writer = pyspark_query(query, df).writeStream.outputMode("append")
    writer = writer.option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-bench-"))
    if query.name == "nexmark-q5":
        parts: list[pa.Table] = []
        q = writer.foreachBatch(lambda batch, _id: parts.append(hot_items(batch.toArrow()))).start()
        q.processAllAvailable()
        q.stop()
        if handles is not None:
            handles.append(q)
        return hot_items_of_batches(parts)
    name = f"bench_{uuid.uuid4().hex}"
    q = writer.format("memory").queryName(name).start()
    q.processAllAvailable()
    q.stop()
    if handles is not None:
        handles.append(q)
    out: pa.Table = spark.table(name).toArrow()
    spark.catalog.dropTempView(name)
    return out


def _empty_counts() -> pa.Table:
    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [("auction", pa.int64()), ("window_start", ts), ("window_end", ts), ("count", pa.int64())]
    ).empty_table()


def run_pyspark_batch(
    spark: Any, query: Query, path: str, ddl: str, handles: list[Any] | None = None
) -> pa.Table:
    out: pa.Table = pyspark_query(query, spark.read.schema(ddl).parquet(path)).toArrow()
    return hot_items(out) if query.name == "nexmark-q5" else out


# --- where the time goes (--phases) -------------------------------------------------------------------------

# Spark's StreamingQueryProgress.durationMs keys, summed over a run's micro-batches.
PROGRESS_PHASES = (
    "triggerExecution",
    "addBatch",
    "queryPlanning",
    "getBatch",
    "latestOffset",
    "walCommit",
    "commitOffsets",
)
# Spark's per-stage task metrics (milliseconds unless named otherwise), summed over a run's stages.
STAGE_METRICS = (
    "numTasks",
    "executorDeserializeTime",
    "executorRunTime",
    "executorCpuTime",  # nanoseconds
    "jvmGcTime",
    "resultSerializationTime",
    "resultSize",  # bytes
    "shuffleFetchWaitTime",
    "shuffleWriteTime",  # nanoseconds
)


class Phases:
    """Where each run's time went, read back from Spark after the timed runs.

    :meth:`wrap` records each call's wall-clock window and the streaming
    query it ran; :meth:`emit`, called once a query's runs are over (outside
    every timing), reports one ``detail`` per run: ``durationMs`` per phase
    summed over the query's micro-batches (``recentProgress``), and for the
    Spark stages submitted within the run's window (the driver's status
    store, which Spark keeps whether or not its UI runs): how many, their
    wall time from submission to completion, the delay from submission to
    the first task's launch, and their tasks' summed metrics
    (:data:`STAGE_METRICS`). With ``--interleave`` the window of a run holds
    only its own stages: runs do not overlap.
    """

    def __init__(self, session: kp.Session, master: str, session_start_s: float, *, warmup: bool) -> None:
        self._spark = session.spark
        self._master = master
        self._warmup = warmup
        self._runs: list[dict[str, Any]] = []
        self._counts: dict[tuple[str, str], int] = {}
        self.session_start_s = session_start_s

    def wrap(self, runner: str, query: str, run: Callable[..., pa.Table]) -> Callable[[], pa.Table]:
        """``run`` (taking ``handles=``), recording each call for :meth:`emit`."""

        def call() -> pa.Table:
            handles: list[Any] = []
            index = self._counts.get((runner, query), 0)
            self._counts[runner, query] = index + 1
            t0 = time.time()
            try:
                return run(handles=handles)
            finally:
                self._runs.append(
                    {
                        "runner": runner,
                        "query": query,
                        "index": index,
                        "t0": t0,
                        "t1": time.time(),
                        "h": handles,
                    }
                )

        return call

    def _store_json(self, what: str) -> Any:
        """A list from Spark's status store as JSON (one call: serialised by Spark's Jackson)."""
        sc = self._spark.sparkContext
        jvm: Any = sc._jvm
        store = sc._jsc.sc().statusStore()
        mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
        mapper.registerModule(jvm.com.fasterxml.jackson.module.scala.DefaultScalaModule())
        if what == "stages":
            seq = store.stageList(None, False, False, getattr(store, "stageList$default$4")(), None)
        elif what == "jobs":
            seq = store.jobsList(None)
        else:
            seq = store.executorList(True)
        return json.loads(mapper.writeValueAsString(seq))

    def session_detail(self) -> dict[str, Any]:
        """Fixed costs: the session's start, and when each executor joined after the application started."""
        app_start_ms = int(self._spark.sparkContext.startTime)
        executors = [
            {
                "id": e["id"],
                "cores": e["totalCores"],
                "max_memory_mb": round(e["maxMemory"] / 2**20),
                "joined_after_s": round((e["addTime"] - app_start_ms) / 1000, 3),
            }
            for e in self._store_json("executors")
        ]
        return {
            "kind": "session",
            "master": self._master,
            "session_start_s": round(self.session_start_s, 3),
            "executors": executors,
        }

    def emit(self) -> None:
        """Report the recorded runs (one ``detail`` each) and forget them."""
        try:
            stages, jobs = self._store_json("stages"), self._store_json("jobs")
        except Exception as exc:  # noqa: BLE001 - a diagnostic: the measured runs stand without it
            protocol.detail(
                {"kind": "phases", "master": self._master, "error": f"{type(exc).__name__}: {exc}"}
            )
            stages, jobs = [], []
        for run in self._runs:
            lo, hi = run["t0"] * 1000, run["t1"] * 1000
            mine = [s for s in stages if s.get("submissionTime") and lo <= s["submissionTime"] <= hi]
            done = [s for s in mine if s.get("completionTime")]
            own_jobs = [j for j in jobs if j.get("submissionTime") and lo <= j["submissionTime"] <= hi]
            progress = [p for h in run["h"] for p in _progress_of(h)]
            executed = [p for p in progress if "addBatch" in (p.get("durationMs") or {})]
            protocol.detail(
                {
                    "kind": "phases",
                    "master": self._master,
                    "runner": run["runner"],
                    "query": run["query"],
                    "index": run["index"],
                    "warmup": self._warmup and run["index"] == 0,
                    "wall_s": round(run["t1"] - run["t0"], 3),
                    "started_at": run["t0"],
                    "ended_at": run["t1"],
                    "micro_batches": len(executed),
                    "duration_ms": {
                        k: sum(int((p.get("durationMs") or {}).get(k) or 0) for p in executed)
                        for k in PROGRESS_PHASES
                    },
                    "jobs": len(own_jobs),
                    "stages": len(mine),
                    "stage_wall_ms": sum(s["completionTime"] - s["submissionTime"] for s in done),
                    "first_launch_delay_ms": sum(
                        s["firstTaskLaunchedTime"] - s["submissionTime"]
                        for s in done
                        if s.get("firstTaskLaunchedTime")
                    ),
                    "tasks": {k: sum(int(s.get(k) or 0) for s in mine) for k in STAGE_METRICS},
                    **_operator_detail(run["h"], executed),
                }
            )
        self._runs.clear()


def _operator_detail(handles: list[Any], executed: list[dict[str, Any]]) -> dict[str, Any]:
    """For krishiv's stateful operator: its time per part (ms, all micro-batches) and its tick batches.

    A tick batch reads only the operator's own tick rows (no input rows):
    it runs the buckets whose windows the watermark made due.
    """
    timings = [t for h in handles for t in getattr(getattr(h, "_collector", None), "timings", {}).values()]
    if not timings:
        return {}
    names = sorted({k for t in timings for k in t})

    def data_rows(p: dict[str, Any]) -> int:
        return sum(
            int(s.get("numInputRows") or 0) for s in p.get("sources", []) if "tick" not in s["description"]
        )

    return {
        "operator_ms": {
            k: round(sum(t.get(k, 0) for t in timings) / 1000, 1) for k in names if k != "buckets"
        },
        "bucket_calls": sum(t.get("buckets", 0) for t in timings),
        "tick_batches": sum(1 for p in executed if not data_rows(p)),
    }


def _progress_of(handle: Any) -> list[dict[str, Any]]:
    """The progress reports of a finished krishiv job or Spark streaming query."""
    if isinstance(handle, kp.Job):
        return [p.raw for p in handle.progress()]
    return [json.loads(p.json) for p in handle.recentProgress]


# --- process entry ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = protocol.parser("python -m benchmarks.spark_runner")
    p.add_argument("--runner", action="append", required=True, choices=RUNNERS)
    p.add_argument(
        "--interleave", action="store_true", help="interleave the runners' timed runs of each query"
    )
    p.add_argument(
        "--master",
        help="a Spark standalone master (spark://host:port) to run on instead of local[*]; "
        "its executors must see the dataset directories at the same paths",
    )
    p.add_argument(
        "--phases",
        action="store_true",
        help="also report where each run's time went (Spark progress per phase, stage task metrics)",
    )
    args = p.parse_args(argv)
    if args.interleave and "pyspark-default" in args.runner:
        p.error("pyspark-default cannot be interleaved (it needs a process of its own)")
    if "pyspark-default" in args.runner and len(args.runner) > 1:
        p.error("pyspark-default needs a process of its own (Spark's default configuration)")
    if args.runner == ["pyspark-default"]:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName("krishiv-bench-default")
        spark = (builder.master(args.master) if args.master else builder).getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        for name in args.query:
            query = QUERIES[name]
            info = protocol.table_info(query, args)
            run: Callable[..., pa.Table] = functools.partial(
                run_pyspark_streaming, spark, query, info.files(), info.ddl
            )
            if query.is_join:
                infos = protocol.tables_info(query, args)
                run = functools.partial(
                    joins.run_pyspark_streaming, spark, query, infos, _end_ms(query, infos)
                )
            protocol.measure(
                "pyspark-default",
                name,
                _events(query, args),
                run,
                rows_of(query.columns),
                args.repeat,
                warmup=args.warmup,
            )
        spark.stop()
        return 0
    t = time.perf_counter()
    if args.master:
        session = kp.Session.connect(args.master, app_name="krishiv-bench")
    else:
        session = kp.Session.embedded(app_name="krishiv-bench")
    start_s = time.perf_counter() - t
    phases = Phases(session, args.master or "local[*]", start_s, warmup=args.warmup) if args.phases else None
    with session:
        # Hand-written queries run tuned the way krishiv_py tunes Spark: the same
        # session settings, plus the single-watermark mode krishiv_py starts its
        # streaming queries with (see docs/lowering.md).
        session.spark.conf.set(SINGLE_WATERMARK_CONF, "false")
        for name in args.query:
            query = QUERIES[name]
            runs = _join_runs(session, query, args) if query.is_join else _runs(session, query, args)
            runners = [r for r in args.runner if r not in _skipped(session, query, args, r)]
            chosen = {r: phases.wrap(r, name, runs[r]) if phases else runs[r] for r in runners}
            events = _events(query, args)
            if args.interleave:
                protocol.measure_interleaved(
                    chosen, name, events, rows_of(query.columns), args.repeat, warmup=args.warmup
                )
            else:
                for runner in runners:
                    protocol.measure(
                        runner,
                        name,
                        events,
                        chosen[runner],
                        rows_of(query.columns),
                        args.repeat,
                        warmup=args.warmup,
                    )
            if phases is not None:
                phases.emit()
        if phases is not None:  # at the end: the executors have joined by now
            protocol.detail(phases.session_detail())
    return 0


def _runs(session: kp.Session, query: Query, args: Any) -> dict[str, Callable[..., pa.Table]]:
    """Each runner's run of a one-table query."""
    info = protocol.table_info(query, args)
    path, ddl = info.files(), info.ddl
    return {
        "krishiv-native": functools.partial(run_krishiv_streaming, session, query, path, "native"),
        "krishiv-stateful": functools.partial(run_krishiv_streaming, session, query, path, "stateful"),
        "krishiv-bounded": functools.partial(run_krishiv_bounded, session, query, path),
        "pyspark-streaming": functools.partial(run_pyspark_streaming, session.spark, query, path, ddl),
        "pyspark-batch": functools.partial(run_pyspark_batch, session.spark, query, path, ddl),
    }


def _join_runs(session: kp.Session, query: Query, args: Any) -> dict[str, Callable[..., pa.Table]]:
    """Each runner's run of a join query (:mod:`benchmarks.joins`)."""
    infos = protocol.tables_info(query, args)
    spark = session.spark
    return {
        "krishiv-native": functools.partial(joins.run_krishiv_streaming, session, query, infos, "native"),
        "krishiv-stateful": functools.partial(joins.run_krishiv_streaming, session, query, infos, "stateful"),
        "krishiv-bounded": functools.partial(joins.run_krishiv_bounded, session, query, infos),
        "pyspark-streaming": functools.partial(
            joins.run_pyspark_streaming, spark, query, infos, _end_ms(query, infos)
        ),
        "pyspark-batch": functools.partial(joins.run_pyspark_batch, spark, query, infos),
    }


def _skipped(session: kp.Session, query: Query, args: Any, runner: str) -> set[str]:
    """``{runner}`` if it cannot run ``query`` (reported as skipped, with the reason), else nothing."""
    if runner != "krishiv-native" or not query.is_join:
        return set()
    infos = protocol.tables_info(query, args)
    why = joins.native_skip(query, joins.streaming_sources(session, infos, query))
    if why is None:
        return set()
    protocol.skip(runner, query.name, why)
    return {runner}


def _events(query: Query, args: Any) -> int:
    """Rows a run of ``query`` reads: of its table, or of both tables of a join."""
    return sum(i.rows for i in protocol.tables_info(query, args))


def _end_ms(query: Query, infos: list[protocol.TableInfo]) -> int | None:
    """A window join's watermark at the end of its input (its streaming rows are cut to it), else None."""
    return joins.end_watermark(query, infos) if "window_start" in query.columns else None


LATENCY_DDL = "k string, event_time timestamp, v double"
LATENCY_WINDOW_MS = 10_000


def latency_rows(step: int, per_step: int) -> pa.Table:
    """Step ``step``: ``per_step`` events in window ``step``, plus one that moves the watermark past it."""
    start_us = (1_704_067_200_000 + step * LATENCY_WINDOW_MS) * 1000
    times = [start_us + i * (LATENCY_WINDOW_MS * 1000 // per_step) for i in range(per_step)]
    times.append(start_us + (LATENCY_WINDOW_MS + WATERMARK_LAG_MS) * 1000)
    n = len(times)
    return pa.table(
        {
            "k": [f"k{i % 10}" for i in range(n)],
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "v": [1.0] * n,
        }
    )


def parquet_feed(prefix: str) -> tuple[str, Callable[[pa.Table], None]]:
    """A new directory for Spark's file source, and a function that adds one Parquet file to it.

    Each file is written aside and moved in, so the source never reads half a file.
    """
    import os

    import pyarrow.parquet as pq

    src = tempfile.mkdtemp(prefix=prefix)
    staging = tempfile.mkdtemp(prefix=f"{prefix}staging-")
    counter = [0]

    def write(table: pa.Table) -> None:
        counter[0] += 1
        tmp = os.path.join(staging, f"part-{counter[0]:07d}.parquet")
        pq.write_table(table, tmp)
        os.replace(tmp, os.path.join(src, f"part-{counter[0]:07d}.parquet"))

    return src, write


def latency_main(runners: str, steps: int, per_step: int) -> int:
    """``--latency RUNNER[,RUNNER...] STEPS PER_STEP``: time from sending a step's events to its window
    reaching the sink.

    A step sends events of one 10 s window plus an event 5 s past its end, so
    the watermark passes the window; the clock stops when the sink's callback
    sees that window's result. Both runners use a foreach-batch sink, so the
    figure includes Spark's batch that reads the events and the batch the new
    watermark triggers. Several runners share one session, one after the other
    (quick runs: one JVM start instead of one per runner); each warms up first.
    """
    with kp.Session.embedded(app_name="krishiv-bench-latency") as session:
        for runner in runners.split(","):
            lat = _latencies(session, runner, steps, per_step)
            protocol.emit("result", json.dumps({"runner": runner, "latencies_s": lat, "per_step": per_step}))
    return 0


def _latencies(session: kp.Session, runner: str, steps: int, per_step: int) -> list[float]:
    """One runner's send-to-result seconds per step, after two warm-up steps (:func:`latency_main`)."""
    import threading

    seen: dict[int, float] = {}
    cond = threading.Condition()

    def on_batch(starts: list[int]) -> None:
        now = time.perf_counter()
        with cond:
            for ms in starts:
                seen.setdefault(ms, now)
            cond.notify_all()

    def wait_for(window_ms: int, timeout: float = 60.0) -> float:
        with cond:
            if not cond.wait_for(lambda: window_ms in seen, timeout=timeout):
                raise TimeoutError(f"window {window_ms} not seen in {timeout} s")
            return seen[window_ms]

    def starts_of(column: Any) -> list[int]:
        return [
            int(v) // 1000 for v in pc.cast(column, pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
        ]

    lat: list[float] = []
    if runner == "krishiv-native":
        stream, sender = session.memory_stream(LATENCY_DDL)
        job = (
            stream.watermark("event_time", WATERMARK_LAG_MS)
            .key_by("k")
            .tumbling_window(LATENCY_WINDOW_MS)
            .agg(kp.count(kp.col("*")))
            .start(
                kp.ForeachBatchSink(lambda t, _b: on_batch(starts_of(t.column("window_start")))),
                lowering="native",
            )
        )
        send: Callable[[pa.Table], object] = sender.send
        stop: Callable[[], None] = job.stop
    else:
        from pyspark.sql import functions as F

        spark = session.spark
        src, write = parquet_feed("krishiv-bench-latency-")

        df = (
            spark.readStream.schema(LATENCY_DDL)
            .option("maxFilesPerTrigger", 1)
            .parquet(src)
            .withWatermark("event_time", f"{WATERMARK_LAG_MS // 1000} seconds")
        )
        agg = df.groupBy("k", F.window("event_time", f"{LATENCY_WINDOW_MS // 1000} seconds")).count()

        def batch(frame: Any, _batch_id: int) -> None:
            on_batch(starts_of(frame.select("window.start").toArrow().column(0)))

        q = (
            agg.writeStream.outputMode("append")
            .option("checkpointLocation", tempfile.mkdtemp(prefix="krishiv-bench-"))
            .foreachBatch(batch)
            .start()
        )
        send, stop = write, q.stop
    base = 1_704_067_200_000
    for step in range(steps + 2):  # the first two steps warm up
        rows = latency_rows(step, per_step)
        t = time.perf_counter()
        send(rows)
        done = wait_for(base + step * LATENCY_WINDOW_MS)
        if step >= 2:
            lat.append(done - t)
    stop()
    return lat


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "--latency":
        raise SystemExit(latency_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    raise SystemExit(main())
