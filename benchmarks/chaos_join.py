"""Crash recovery of a join under SIGKILL: Kafka in, a DuckDB table out, nothing lost or written twice.

A *child* process runs a durable streaming join of two Kafka topics (one per
side) into a :class:`~krishiv_py.DuckDBSink` in append mode (the join's
changelog: every joined row, null-padded row and retraction once) and
produces a fixed, seeded input one step at a time: a step is one side's
batch, written in one Kafka transaction, then processed. The *parent* kills
the child (and its JVM) with SIGKILL at random moments and starts it again
until it has produced every step; a restarted child counts the records in
the topics to find where it stopped. The table must then hold exactly the
reference model's changelog for the same steps.

Runs alternate the stateful lowering (a full outer interval join with
allowed lateness and retractions: late rows withdraw padded rows) and the
native one (an inner interval join on Spark's own stream-stream join);
``--chain`` runs a window after a join instead (an inner interval join with
allowed lateness, then a tumbling window per key in retracting mode, both in
one operator call), checked against the composition model. ``--staged`` adds
an aggregation per ``window_start`` after that window: keyed by other
columns than the join, it is a stage of its own (its rows moved to its key
buckets, its state one Arrow file per bucket and micro-batch under the
checkpoint). Its table is checked as an upsert view: each key's emits and
retractions folded into its current rows, which must be the model's, once.
``--twice`` adds, after that, an aggregation per number of keys: a stage
after the stage, its rows moved across the cluster a second time, its state
under the first stage's (``then-1``); checked the same way.

    python -m benchmarks.chaos_join --runs 4 --kills 3     # nox -s chaos -- --join
    python -m benchmarks.chaos_join --chain --runs 2 --kills 4
    python -m benchmarks.chaos_join --staged --runs 2 --kills 4
    python -m benchmarks.chaos_join --twice --runs 2 --kills 4
    python -m benchmarks.chaos_join --staged --rescale 2,5,3 --runs 2 --kills 6

``--rescale 2,5,3`` starts each (re)start of a child on the next of those
shuffle partitions (as ``python -m benchmarks.chaos --rescale``): every kill
after the first lands in a restart that moves the operator's state and the
stage's to another number of tasks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Literal

import attrs

from benchmarks.chaos_job import RESCALE_ENV, kill_and_restart, rescale_conf, tally

LEFT = "k string, t bigint, a bigint"
RIGHT = "k string, t bigint, b bigint"
COLUMNS = ("k", "t", "a", "t_right", "b")
#: The columns of a window after the join (``--chain``).
CHAIN_COLUMNS = ("k", "window_start", "window_end", "pairs", "total_a")
#: The columns of an aggregation per window start after that window (``--staged``): its key first.
STAGED_COLUMNS = ("window_start", "keys", "pairs", "total_a", "most")
#: The columns of an aggregation per number of keys after that one (``--twice``: a stage after the
#: stage, the rows moved across the cluster twice): its key first.
TWICE_COLUMNS = ("keys", "starts", "pairs")
#: The shapes whose steps have late rows that correct fired windows, and whose tables are compared
#: by each key's current row.
STAGED = ("staged", "twice")
Side = Literal["left", "right"]


def steps(
    seed: int, count: int, size: int, lowering: str = "stateful"
) -> list[tuple[Side, list[dict[str, Any]]]]:
    """``count`` steps, each one side's batch: a few keys, time moving forward, disorder, late rows.

    One clock for both sides, so each step starts where the other side's
    ended, except for ``staged``: a clock per side, so that a step covers
    the event time of the other side's step before it, and late rows (more
    of them, and later) find partners behind the watermark and correct
    windows that have fired.
    """
    staged = lowering in STAGED
    late_ms, late_share = ((30, 150), 0.3) if staged else ((30, 90), 0.15)
    rng = random.Random(seed)
    out: list[tuple[Side, list[dict[str, Any]]]] = []
    clock = {"left": 0, "right": 0}
    for i in range(count):
        side: Side = "left" if i % 2 == 0 else "right"
        batch = []
        for _ in range(size):
            t = clock[side if staged else "left"] + rng.randint(0, 20)
            clock[side if staged else "left"] = t
            late = rng.random() < late_share
            row: dict[str, Any] = {
                "k": f"k{rng.randint(0, 3)}",
                "t": t - (rng.randint(*late_ms) if late else 0),
            }
            row["a" if side == "left" else "b"] = rng.randint(1, 9)
            batch.append(row)
        out.append((side, batch))
    return out


def lateness_of(lowering: str) -> int:
    """The allowed lateness of the join before a window: more for ``staged``'s later rows."""
    return 100 if lowering in STAGED else 60


def pipeline(left: Any, right: Any, lowering: str) -> Any:
    keyed_left = left.watermark("t", 10).key_by("k")
    keyed_right = right.watermark("t", 10).key_by("k")
    if lowering in ("chain", *STAGED):
        import krishiv_py as kp

        joined = keyed_left.interval_join(keyed_right, between=(-40, 20)).allowed_lateness(
            lateness_of(lowering)
        )
        windowed = joined.key_by("k").tumbling_window(50).accumulation("retracting")
        per_key = windowed.agg(kp.count(kp.col("*")).alias("pairs"), kp.sum(kp.col("a")).alias("total_a"))
        if lowering == "chain":
            return per_key
        per_start = per_key.key_by("window_start").agg(
            kp.count(kp.col("*")).alias("keys"),
            kp.sum(kp.col("pairs")).alias("pairs"),
            kp.sum(kp.col("total_a")).alias("total_a"),
            kp.max(kp.col("pairs")).alias("most"),
        )
        if lowering == "staged":
            return per_start
        return per_start.key_by("keys").agg(
            kp.count(kp.col("*")).alias("starts"), kp.sum(kp.col("pairs")).alias("pairs")
        )
    if lowering == "native":
        return keyed_left.interval_join(keyed_right, between=(-40, 20))
    return (
        keyed_left.interval_join(keyed_right, between=(-40, 20), how="full")
        .allowed_lateness(60)
        .accumulation("retracting")
    )


def child(
    state_dir: str, servers: str, topics: list[str], seed: int, count: int, size: int, lowering: str
) -> int:
    from confluent_kafka import Producer

    import krishiv_py as kp
    from krishiv_py.kafka.client import read_topic

    data = steps(seed, count, size, lowering)
    with kp.Session.embedded(
        durability="single-node-durable", state_dir=state_dir, spark_conf=rescale_conf(state_dir)
    ) as session:
        left = session.read_kafka(servers, topics[0], schema=LEFT, name="left").select("k", "t", "a")
        right = session.read_kafka(servers, topics[1], schema=RIGHT, name="right").select("k", "t", "b")
        sink = kp.DuckDBSink(os.path.join(state_dir, "out.duckdb"), "joined", mode="append")
        ran = "stateful" if lowering in ("chain", *STAGED) else lowering
        job = pipeline(left, right, lowering).start(sink, name="chaos-join", lowering=ran)
        job.process_all_available()
        held = {
            side: len(read_topic(servers, topic))
            for side, topic in zip(("left", "right"), topics, strict=True)
        }
        done, sent = 0, {"left": 0, "right": 0}
        while done < len(data) and sent[data[done][0]] + len(data[done][1]) <= held[data[done][0]]:
            sent[data[done][0]] += len(data[done][1])
            done += 1
        producer = Producer({"bootstrap.servers": servers, "transactional.id": f"chaos-{topics[0]}"})
        producer.init_transactions(30)
        for side, batch in data[done:]:
            producer.begin_transaction()
            for row in batch:
                producer.produce(topics[0] if side == "left" else topics[1], value=json.dumps(row).encode())
            producer.commit_transaction(30)
            job.process_all_available()
        job.stop()
    return 0


def expected(seed: int, count: int, size: int, lowering: str) -> list[dict[str, Any]]:
    """The reference model's changelog for the same steps (a topic has no end: no close)."""
    from krishiv_py.api.stream import placeholder
    from krishiv_py.model.joins import join_model_for

    if lowering in ("chain", *STAGED):
        return _chain_expected(seed, count, size, lowering)

    joined = pipeline(placeholder(LEFT, "left"), placeholder(RIGHT, "right"), lowering)
    model = join_model_for(joined.plan)
    for side, batch in steps(seed, count, size, lowering):
        model.send(batch, side=side)
    return model.results


def _chain_expected(seed: int, count: int, size: int, lowering: str) -> list[dict[str, Any]]:
    """The composition model's changelog of the window after the join, window bounds in ms.

    ``staged``: of the aggregation per window start after that window; ``twice``: of the
    aggregation per number of keys after that one.
    """
    from krishiv_py.model.compose import AggOf, ComposedModel, JoinOf, Source, WindowOf
    from krishiv_py.model.reference import AggSpec
    from krishiv_py.plan.windows import TumblingWindow

    left = Source("left", "t", ("k", "t", "a"), lag_ms=10)
    right = Source("right", "t", ("k", "t", "b"), lag_ms=10)
    staged = lowering in STAGED
    lateness = lateness_of(lowering)
    joined = JoinOf(left, right, keys=("k",), between=(-40, 20), allowed_lateness_ms=lateness)
    aggs = [AggSpec(name="pairs", func="count", column=None), AggSpec(name="total_a", func="sum", column="a")]
    op: Any = WindowOf(joined, window=TumblingWindow(size_ms=50), keys=("k",), aggregates=aggs)
    if staged:
        per_start = [
            AggSpec(name="keys", func="count", column=None),
            AggSpec(name="pairs", func="sum", column="pairs"),
            AggSpec(name="total_a", func="sum", column="total_a"),
            AggSpec(name="most", func="max", column="pairs"),
        ]
        op = AggOf(op, keys=("window_start",), aggregates=per_start)
    if lowering == "twice":
        per_keys = [
            AggSpec(name="starts", func="count", column=None),
            AggSpec(name="pairs", func="sum", column="pairs"),
        ]
        op = AggOf(op, keys=("keys",), aggregates=per_keys)
    model = ComposedModel(op)
    for side, batch in steps(seed, count, size, lowering):
        model.send(batch, source=side)
    return model.results


def columns_of(lowering: str) -> tuple[str, ...]:
    return {"chain": CHAIN_COLUMNS, "staged": STAGED_COLUMNS, "twice": TWICE_COLUMNS}.get(lowering, COLUMNS)


def upsert_view(changes: list[tuple[Any, ...]]) -> tuple[dict[Any, list[tuple[Any, ...]]], int]:
    """A changelog (rows ``(key, *values, kind)``) folded into each key's current rows.

    An emit adds its row, a retraction withdraws an equal one, in any
    order: a row written twice stays twice, and a retraction of a row never
    written is counted apart (second value).
    """
    net: Counter[tuple[Any, ...]] = Counter()
    for *row, kind in changes:
        net[tuple(row)] += -1 if kind == "retract" else 1
    current: dict[Any, list[tuple[Any, ...]]] = {}
    for (key, *values), n in net.items():
        current.setdefault(key, []).extend([tuple(values)] * max(n, 0))
    return {k: v for k, v in current.items() if v}, sum(-n for n in net.values() if n < 0)


def table_rows(state_dir: str, lowering: str) -> list[dict[str, Any]]:
    import duckdb

    columns = columns_of(lowering)
    with duckdb.connect(os.path.join(state_dir, "out.duckdb"), read_only=True) as con:
        names = [r[0] for r in con.execute("DESCRIBE joined").fetchall()]
        kind = "kind" if "kind" in names else "'emit'"
        got = con.execute(f"SELECT {', '.join(columns)}, {kind} FROM joined").fetchall()
    rows = [dict(zip((*columns, "kind"), r, strict=True)) for r in got]
    for row in rows:  # window bounds as the model gives them: epoch ms (the table's are UTC)
        for c in ("window_start", "window_end"):
            if c in row:
                at = row[c] if row[c].tzinfo is not None else row[c].replace(tzinfo=dt.UTC)
                row[c] = int(at.timestamp() * 1000)
    return rows


def run_once(
    *,
    seed: int,
    kills: int,
    count: int,
    size: int,
    lowering: str,
    max_delay_s: float,
    servers: str,
    topics: list[str],
    log: Any = print,
) -> dict[str, Any]:
    """One run: start, SIGKILL ``kills`` times at random moments, finish, compare the table with the model."""
    rng = random.Random(seed)
    run = JoinRun(lowering=lowering)
    with tempfile.TemporaryDirectory(prefix="krishiv-chaos-join-") as state_dir:
        cmd = [sys.executable, "-m", "benchmarks.chaos_join", "child", state_dir, servers, *topics]
        cmd += [str(seed), str(count), str(size), lowering]
        finished = kill_and_restart(cmd, kills, max_delay_s, rng, run, log)
        out: dict[str, Any] = {
            "lowering": lowering,
            "kills": run.kills,
            "restarts_failed": run.restarts_failed,
        }
        out["finished"] = finished
        if finished:
            got = Counter(tuple(r.values()) for r in table_rows(state_dir, lowering))
            want = Counter(
                (*(r[c] for c in columns_of(lowering)), r.get("kind", "emit"))
                for r in expected(seed, count, size, lowering)
            )
            out["rows"] = sum(want.values())
            if lowering in STAGED:
                out.update(compare_current(got, want))
            else:
                out["lost"] = sum((want - got).values())
                out["duplicated"] = sum(got[k] - want[k] for k in got if got[k] > want[k] > 0)
                out["wrong"] = sum(n for k, n in got.items() if k not in want)
    out["ok"] = finished and not (
        run.restarts_failed or out.get("lost") or out.get("duplicated") or out.get("wrong")
    )
    return out


def compare_current(got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> dict[str, Any]:
    """Each key's current row in the table against the model's: lost, held twice, wrong.

    A retraction in the table of a row it never held counts as wrong; the
    changelogs themselves may differ where a restart merged two steps into
    one micro-batch (one update per key, not two), so that is reported, not
    judged.
    """
    held, unmatched = upsert_view(list(got.elements()))
    wanted, _ = upsert_view(list(want.elements()))
    counts = Tally()
    tally(counts, held, {key: rows[0] for key, rows in wanted.items()})
    return {
        "keys": len(wanted),
        "lost": counts.lost,
        "duplicated": counts.duplicated,
        "wrong": counts.wrong + unmatched,
        "changelog_equal": got == want,
        "changelog_rows": sum(got.values()),
    }


@attrs.define
class Tally:
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    #: The key of each row lost.
    lost_windows: list[tuple[Any, ...]] = attrs.field(factory=list)


@attrs.define
class JoinRun:
    lowering: str
    kills: list[float] = attrs.field(factory=list)
    restarts_failed: int = 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "child":
        _, state_dir, servers, left, right, seed, count, size, lowering = argv
        return child(state_dir, servers, [left, right], int(seed), int(count), int(size), lowering)
    p = argparse.ArgumentParser(description="SIGKILL a durable Kafka -> DuckDB join at random points")
    p.add_argument("--runs", type=int, default=4, help="runs, alternating the stateful and native lowerings")
    p.add_argument("--kills", type=int, default=3, help="SIGKILLs per run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rows", type=int, default=20, help="rows per step")
    p.add_argument("--max-delay", type=float, default=25.0, help="latest kill, seconds after a (re)start")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--chain", action="store_true", help="a window after the join, every run")
    shape.add_argument(
        "--staged",
        action="store_true",
        help="a window after the join, then an aggregation per window start (a stage), every run",
    )
    shape.add_argument(
        "--twice",
        action="store_true",
        help="as --staged, then an aggregation per number of keys (a stage after the stage), every run",
    )
    p.add_argument(
        "--rescale",
        help="shuffle partitions of each (re)start in turn, e.g. 2,5,3: every restart moves the state "
        "(the operator's and a stage's, by key group)",
    )
    a = p.parse_args(argv)
    if a.rescale:
        os.environ[RESCALE_ENV] = a.rescale
    from krishiv_py.devtools import KafkaBroker

    runs = []
    with KafkaBroker() as broker:
        for i in range(a.runs):
            chosen = "chain" if a.chain else "staged" if a.staged else "twice" if a.twice else None
            lowering = chosen or ("stateful", "native")[i % 2]
            topics = [f"join_left_{i}_{a.seed}", f"join_right_{i}_{a.seed}"]
            for topic in topics:
                broker.create_topic(topic, partitions=1)
            run = run_once(
                seed=a.seed + i,
                kills=a.kills,
                count=a.steps,
                size=a.rows,
                lowering=lowering,
                max_delay_s=a.max_delay,
                servers=broker.bootstrap_servers,
                topics=topics,
            )
            runs.append(run)
            print(json.dumps(run), flush=True)
    kills = sum(len(r["kills"]) for r in runs)
    print(
        f"{len(runs)} runs, {kills} SIGKILLs: lost {sum(r.get('lost', 0) for r in runs)}, duplicated "
        f"{sum(r.get('duplicated', 0) for r in runs)}, wrong {sum(r.get('wrong', 0) for r in runs)}, "
        f"failed restarts {sum(r['restarts_failed'] for r in runs)}, unfinished "
        f"{sum(not r['finished'] for r in runs)}"
    )
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    t0 = time.monotonic()
    code = main()
    print(f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    raise SystemExit(code)
