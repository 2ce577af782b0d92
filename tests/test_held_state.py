"""Keyed state: a step over the touched keys' rows equals a step over the whole state.

:mod:`krishiv_py.stateful.held_state` steps a key-local kernel over the rows
of the keys a micro-batch touches and of the rows due at its watermark, and
writes a delta of those keys (a snapshot now and then). These tests run the
same random micro-batches through both — whole state, and keyed state read
back from its files whenever a worker "forgets" it — for every key-local
kernel, and hold their results (per key, in order), counts and final states
equal, and the files' size in proportion to the keys changed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from join_kernels import join_kernel

import krishiv_py.files as files
from krishiv_py.names import BATCH_TS, RESULT_KIND, SEQ
from krishiv_py.plan.emission import Trigger
from krishiv_py.plan.windows import EventSlidingWindow, SessionWindow, SlidingWindow, TumblingWindow
from krishiv_py.stateful import held_state
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.chain import ChainKernel
from krishiv_py.stateful.held_state import KeyedState, WholeState, keyed, open_held, write_state
from krishiv_py.stateful.joins import ARR, SIDE, JoinKernel
from krishiv_py.stateful.keyed_agg import KeyedAggKernel
from krishiv_py.stateful.keyed_topn import KeyedTopNKernel
from krishiv_py.stateful.over import OverKernel
from krishiv_py.stateful.protocol import Kernel
from krishiv_py.stateful.state import KernelSpec
from krishiv_py.stateful.versioned import VersionedBlobs, delta_blob, forget_cache, replay
from krishiv_py.stateful.window_kernel import WindowKernel

COUNT = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
SUM = AggSpec(name="s", func="sum", column="v", out_type=pa.int64(), in_type=pa.int64())
MAX = AggSpec(name="m", func="max", column="v", out_type=pa.int64(), in_type=pa.int64())
#: Over a join's rows: the sum of their left values, the most of their right ones.
SUM_A = AggSpec(name="s", func="sum", column="a", out_type=pa.int64(), in_type=pa.int64())
MAX_B = AggSpec(name="m", func="max", column="b", out_type=pa.int64(), in_type=pa.int64())


def _window(window: Any, **more: Any) -> WindowKernel:
    return WindowKernel(KernelSpec(keys=("k",), window=window, aggs=(COUNT, SUM), **more))


def _join(kind: str = "interval", how: str = "inner", **more: Any) -> JoinKernel:
    """A join of left rows (``a``) and right rows (``b``) by ``k``, between 40 ms before and 60 after."""
    return join_kernel(kind, how, **{"between": (-40, 60), **more})


def _joined_window(window: Any) -> WindowKernel:
    """A window over a join's rows (with the join's allowed lateness)."""
    return WindowKernel(KernelSpec(keys=("k",), window=window, aggs=(COUNT, SUM_A), allowed_lateness_ms=60))


def _chain(then: Kernel, first: JoinKernel | None = None, *, by_key_from: int = 0) -> ChainKernel:
    """``then`` over a join's rows (its columns ``k``, ``a``, ``b``) in the same call, its state
    held by key from ``by_key_from`` rows."""
    first = first or _join(allowed_lateness_ms=60, event_times=True)
    columns = (("k", pa.string()), ("a", pa.int64()), ("b", pa.int64()))
    return ChainKernel(first=first, then=then, columns=columns, by_key_from=by_key_from)


KERNELS: dict[str, Kernel] = {
    "tumbling": _window(TumblingWindow(size_ms=100)),
    "tumbling-late-retracting": _window(
        TumblingWindow(size_ms=100), allowed_lateness_ms=150, accumulation="retracting"
    ),
    "sliding": _window(SlidingWindow(size_ms=200, slide_ms=50), allowed_lateness_ms=30),
    "sliding-uneven": _window(SlidingWindow(size_ms=200, slide_ms=70)),
    "session": _window(SessionWindow(gap_ms=60)),
    "event-sliding": _window(EventSlidingWindow(size_ms=80, grace_ms=40)),
    "every-element": _window(TumblingWindow(size_ms=100), trigger=Trigger.on_every_element()),
    "event-ttl": _window(TumblingWindow(size_ms=400), ttl_ms=120),
    "keyed-count": KeyedAggKernel(keys=("k",), aggs=(COUNT, SUM)),
    "keyed-ttl": KeyedAggKernel(keys=("k",), aggs=(COUNT, MAX), ttl_ms=150),
    "keyed-timed": KeyedAggKernel(keys=("k",), aggs=(COUNT,), event_times=True),
    "top-n": KeyedTopNKernel(keys=("k",), n=2, by=("v",), columns=("k", "v", "t"), expires=("t", 200)),
    "over-rows": OverKernel(
        keys=("k",), columns=("k", "v", "t"), frame="rows", preceding=3, aggs=(COUNT, SUM),
        allowed_lateness_ms=100, mode="retracting",
    ),
    "join-inner": _join(),
    "join-inner-late": _join(allowed_lateness_ms=80, event_times=True),
    "join-left-retracting": _join(how="left", allowed_lateness_ms=50, accumulation="retracting"),
    "join-full-ttl": _join(how="full", ttl_ms=90),
    "join-right-changes": _join(how="right", accumulation="retracting", changes=True),
    "chain-window": _chain(_joined_window(TumblingWindow(size_ms=100))),
    "chain-outer-window": _chain(
        _joined_window(SessionWindow(gap_ms=50)),
        _join(how="left", allowed_lateness_ms=60, event_times=True),
    ),
    "chain-top-n": _chain(
        KeyedTopNKernel(keys=("k",), n=1, by=("a",), columns=("k", "a", "b"), ties="first")
    ),
    "chain-wider-keys": _chain(KeyedAggKernel(keys=("k", "a"), aggs=(COUNT, MAX_B))),
    "chain-of-a-chain": ChainKernel(  # a join, its rows counted per key, the keys' top count
        first=_chain(KeyedAggKernel(keys=("k",), aggs=(COUNT, SUM_A))),
        then=KeyedTopNKernel(keys=("k",), n=1, by=("s",), columns=("k", "n", "s"), retracting=True),
        columns=(("k", pa.string()), ("n", pa.int64()), ("s", pa.int64())),
        retracting=True,
        by_key_from=0,
    ),
    "over-range": OverKernel(
        keys=("k",), columns=("k", "v", "t"), frame="range", preceding=150, aggs=(COUNT, MAX),
        allowed_lateness_ms=60,
    ),
}  # fmt: skip


def _batch(rng: random.Random, keys: list[str], watermark: int, seq: int, n: int) -> pa.Table:
    ks = [rng.choice(keys) for _ in range(n)]
    ts = [max(0, watermark + rng.randint(-120, 200)) for _ in range(n)]
    return pa.table(
        {
            "k": pa.array(ks, pa.string()),
            "v": pa.array([rng.randint(-5, 50) for _ in range(n)], pa.int64()),
            "t": pa.array([t * 1000 for t in ts], pa.int64()),
            BATCH_TS: pa.array([t * 1000 for t in ts], pa.int64()),
            SEQ: pa.array(range(seq, seq + n), pa.int64()),
        }
    )


def _join_batch(kernel: JoinKernel, batch: pa.Table, rng: random.Random, held: list[pa.Table]) -> pa.Table:
    """``batch``'s rows as a join's input: each of a random side (``v`` its column); with ``changes``,
    some retractions of rows sent before (``held``, which this batch's rows join)."""
    n = batch.num_rows
    left = np.array([rng.random() < 0.5 for _ in range(n)], bool)
    v = batch.column("v")
    rows = pa.table(
        {
            SIDE: pa.array(np.where(left, "left", "right"), pa.string()),
            "k": batch.column("k").combine_chunks(),
            "a": pc.if_else(pa.array(left), v, pa.scalar(None, pa.int64())),
            "b": pc.if_else(pa.array(~left), v, pa.scalar(None, pa.int64())),
            BATCH_TS: batch.column(BATCH_TS).combine_chunks(),
            SEQ: batch.column(SEQ).combine_chunks(),
        }
    )
    if not kernel.spec.changes:
        return rows
    rows = rows.append_column(RESULT_KIND, pa.array(["emit"] * n, pa.string()))
    sent = pa.concat_tables(held) if held else rows.slice(0, 0)
    held.append(rows)
    pick = [i for i in range(sent.num_rows) if n and rng.random() < 0.05]
    gone = sent.take(pa.array(pick, pa.int64()))
    gone = gone.set_column(
        gone.schema.get_field_index(RESULT_KIND), RESULT_KIND, pa.array(["retract"] * len(pick), pa.string())
    )
    seq = batch.column(SEQ)[n - 1].as_py() + 1 if n else 0  # (after this batch's rows)
    gone = gone.set_column(
        gone.schema.get_field_index(SEQ), SEQ, pa.array(range(seq, seq + len(pick)), pa.int64())
    )
    return pa.concat_tables([rows, gone])


def _by_key(results: pa.Table) -> dict[Any, list[tuple[Any, ...]]]:
    """Each key's result rows, in the order the step gave them."""
    out: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
    for row in results.to_pylist():
        out[row.get("k")].append(tuple(sorted((k, repr(v)) for k, v in row.items())))
    return dict(out)


def _without_arrivals(table: pa.Table | None) -> pa.Table | None:
    """A join's state without its rows' arrival numbers, which count per step (an interval join
    orders nothing by them; a key's rows keep their order either way)."""
    return table.drop_columns([ARR]) if table is not None and ARR in table.column_names else table


def _rows(table: pa.Table | None) -> list[str]:
    if table is None:
        return []
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("seed", [1, 2])
def test_a_keyed_step_equals_a_whole_step_across_restarts(
    name: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(held_state, "MAX_DELTAS", 4)  # snapshots between deltas, often
    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 0)  # held by key however small
    step_whole_and_keyed(KERNELS[name], VersionedBlobs(str(tmp_path), 0), seed, batches=40)


@pytest.mark.parametrize("name", ["keyed-ttl", "join-left-retracting", "chain-top-n"])
def test_runs_that_copy_their_live_rows_out_at_every_merge_step_as_the_whole_state(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge keeps its runs' tables side by side and sorts only their hashes, unless a table
    holds more dead rows than live ones or too many chunks: then it copies the live rows out.
    Forced at every merge, the steps are still the whole state's."""
    monkeypatch.setattr(held_state, "MAX_DELTAS", 4)
    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 0)
    monkeypatch.setattr(held_state, "_COMPACT_DEAD", 0)
    monkeypatch.setattr(held_state, "_MAX_CHUNKS", 1)
    monkeypatch.setattr(held_state, "FANOUT", 2)
    step_whole_and_keyed(KERNELS[name], VersionedBlobs(str(tmp_path), 0), 3, batches=40)


def step_whole_and_keyed(kernel: Kernel, blobs: VersionedBlobs, seed: int, *, batches: int) -> None:
    """Step random micro-batches through ``kernel`` whole and by key (its state in ``blobs``),
    and hold both equal: results per key in order, counts, state rows, next due, final state."""
    assert keyed(kernel)
    name = kernel.describe()
    rng = random.Random(seed)
    keys = [f"key{i}" for i in range(400)]
    whole: pa.Table | None = None
    watermark: int | None = None
    seq, deltas = 0, 0
    sent: list[pa.Table] = []
    for batch_id in range(batches):
        n = 600 if batch_id == 0 else rng.choice([0, 1, 3, 8, 25])
        batch = _batch(rng, keys, watermark or 0, seq, n)
        join = kernel
        while isinstance(join, ChainKernel):
            join = join.first
        if isinstance(join, JoinKernel):
            batch = _join_batch(join, batch, rng, sent)
        seq += batch.num_rows
        whole, expected = kernel.step(whole, batch, watermark, 0)

        if rng.random() < 0.3:
            forget_cache()  # another worker, or a restart: the state from its files
        held = open_held(kernel, blobs, batch_id)
        assert isinstance(held, KeyedState)
        new, got = kernel.step(held.take(batch, None, watermark), batch, watermark, 0)
        held.put(new)
        write_state(held, blobs, batch_id)
        deltas += sum(1 for v in blobs._listing()[0].values() if v.base is not None)

        assert _by_key(got.results) == _by_key(expected.results), (name, batch_id)
        assert (got.on_time, got.mildly_late, got.expired) == (
            expected.on_time,
            expected.mildly_late,
            expected.expired,
        )
        assert sorted(got.very_late.tolist()) == sorted(expected.very_late.tolist())
        assert held.state_rows() == kernel.state_rows(whole)
        assert held.next_due()[0] == kernel.next_due(whole)[0]
        if rng.random() < 0.6:
            watermark = (watermark or 0) + rng.randint(0, 90)
    forget_cache()
    final = open_held(kernel, blobs, 10**6)
    assert isinstance(final, KeyedState)
    assert _final_rows(kernel, final.table()) == _final_rows(kernel, whole)
    assert deltas, "no micro-batch wrote a delta"


def test_a_chain_holds_one_row_until_it_holds_by_key_from_rows_then_by_key() -> None:
    """A small chain's state is one row (both kernels' tables); from ``by_key_from`` rows on it is
    held by key, and stays so. Either form gives the same results and holds the same rows."""
    then = _joined_window(TumblingWindow(size_ms=100))
    forms = {n: _chain(then, by_key_from=n) for n in (0, 300, 10**9)}
    states: dict[int, pa.Table | None] = dict.fromkeys(forms)
    rng = random.Random(5)
    keys = [f"key{i}" for i in range(200)]
    seen, watermark, seq = [], 0, 0
    join = forms[0].first
    assert isinstance(join, JoinKernel)
    for _ in range(30):
        batch = _join_batch(join, _batch(rng, keys, watermark, seq, rng.choice([5, 60])), rng, [])
        seq += batch.num_rows
        results = []
        for n, kernel in forms.items():
            states[n], out = kernel.step(states[n], batch, watermark, 0)
            results.append(_by_key(out.results))
        assert results[0] == results[1] == results[2]
        rows = [_final_rows(kernel, states[n]) for n, kernel in forms.items()]
        assert rows[0] == rows[1] == rows[2]
        mid = states[300]
        assert mid is not None
        seen.append((mid.num_rows > 1, forms[300].state_rows(mid)))
        watermark += rng.randint(0, 10)
    assert states[10**9] is not None and states[10**9].num_rows == 1
    assert states[0] is not None and states[0].num_rows > 1
    by_key = [flat for flat, _ in seen]
    assert not by_key[0] and by_key[-1] and by_key == sorted(by_key), seen  # one row, then by key
    assert next(rows for flat, rows in seen if flat) >= 300


def _final_rows(kernel: Kernel, state: pa.Table | None) -> list[list[str]]:
    """A state's rows (a chain's: each kernel's, and its watermark and arrival number)."""
    if not isinstance(kernel, ChainKernel):
        return [_rows(_without_arrivals(state))]
    first, then, watermark, seq = kernel._split(state)
    inner = _final_rows(kernel.first, first) if isinstance(kernel.first, ChainKernel) else None
    return [*(inner or [_rows(_without_arrivals(first))]), _rows(then), [repr((watermark, seq))]]


@pytest.mark.parametrize("name", ["keyed-count", "tumbling-late-retracting"])
def test_the_operators_versioned_state_in_the_store_equals_the_whole_state(
    name: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an object store (an S3-protocol server, tests/test_object_store.py): snapshots, deltas
    over them, replays after a "forgotten" worker, and retention."""
    monkeypatch.setattr(held_state, "MAX_DELTAS", 4)
    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 0)
    blobs = VersionedBlobs(files.join(s3_bucket, "state", name), 0)
    step_whole_and_keyed(KERNELS[name], blobs, seed=3, batches=16)
    kept = blobs.versions()
    assert 1 <= len(kept) <= 8, kept  # retention: what the newest two versions need


def test_kernels_that_are_not_key_local_are_held_whole(tmp_path: Path) -> None:
    # A window join keeps its last sweep's watermark in the state's schema; an as-of join numbers
    # arrivals across keys.
    window_join = _join("window", window=TumblingWindow(size_ms=100))
    as_of = _join("as_of")
    interval = _window(TumblingWindow(size_ms=100), trigger=Trigger.on_interval(1_000))
    panes = _window(SlidingWindow(size_ms=200, slide_ms=50))  # one row per pane: a watermark of all keys
    for kernel in (window_join, as_of, interval, panes):
        assert not keyed(kernel)
        assert isinstance(open_held(kernel, VersionedBlobs(str(tmp_path), 0), 0), WholeState)


def test_a_micro_batch_writes_bytes_in_proportion_to_the_keys_it_changed(tmp_path: Path) -> None:
    """A state of 200,000 keys is held by key (from its second micro-batch: the first one holds
    it whole, and the one after writes the snapshot with the keys' hashes); 1,000 changed keys
    write a delta of about 1/200 of it."""
    kernel = KERNELS["keyed-count"]
    blobs = VersionedBlobs(str(tmp_path), 0)
    live = 200_000
    rows = pa.table(
        {
            "k": pa.array([f"user{i}" for i in range(live)]),
            "v": pa.array(np.ones(live, np.int64)),
            BATCH_TS: pa.array(np.full(live, 1_000, np.int64)),
            SEQ: pa.array(np.arange(live, dtype=np.int64)),
        }
    )
    held = open_held(kernel, blobs, 0)
    assert isinstance(held, WholeState)  # (no state yet)
    new, _ = kernel.step(held.take(rows, None, None), rows, None, 0)
    held.put(new)
    write_state(held, blobs, 0)
    written = []
    for batch_id in range(1, 5):
        held = open_held(kernel, blobs, batch_id)
        assert isinstance(held, KeyedState)
        changed = rows.slice(batch_id * 1_000, 1_000)
        taken = held.take(changed, None, 5_000)  # (a watermark makes no key without a TTL due)
        assert taken is not None and taken.num_rows == 1_000  # only the changed keys go to the step
        new, _ = kernel.step(taken, changed, 5_000, 0)
        held.put(new)
        written.append(write_state(held, blobs, batch_id))
    snapshot, *deltas = written
    assert max(deltas) * 50 < snapshot, (written, snapshot)  # 1,000 keys of 200,000
    forget_cache()
    again = open_held(kernel, blobs, 5)
    table = again.table()
    assert table is not None and table.num_rows == live
    counts = dict(zip(table.column("k").to_pylist(), table.column("p0_c").to_pylist(), strict=True))
    assert counts["user1500"] == 2 and counts["user0"] == 1
    assert isinstance(again, KeyedState)


def test_a_micro_batch_that_changes_every_key_writes_a_snapshot_without_writing_out_its_delta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under churn a delta outweighs the room left below the snapshot's bytes: the state is written
    as a snapshot, and the delta's file is not made first only to be dropped; a small change
    still writes a delta, and either way the state reads back the same."""
    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 100)
    made: list[int] = []

    def counted(keys: np.ndarray, rows: pa.Table | None) -> bytes:
        blob = delta_blob(keys, rows)
        made.append(len(blob))
        return blob

    monkeypatch.setattr(held_state, "delta_blob", counted)
    kernel = KERNELS["keyed-count"]
    blobs = VersionedBlobs(str(tmp_path), 0)
    keys = [f"key{i}" for i in range(2_000)]
    everyone = pa.table(
        {
            "k": pa.array(keys),
            "v": pa.array(np.ones(len(keys), np.int64)),
            BATCH_TS: pa.array(np.full(len(keys), 1_000, np.int64)),
            SEQ: pa.array(np.arange(len(keys), dtype=np.int64)),
        }
    )
    kinds = []
    batches = [everyone, everyone, everyone.slice(0, 1_000), everyone, everyone.slice(0, 10)]
    for batch_id, batch in enumerate(batches):
        held = open_held(kernel, blobs, batch_id)
        new, _ = kernel.step(held.take(batch, None, None), batch, None, 0)
        held.put(new)
        before = len(made)
        write_state(held, blobs, batch_id)
        listing = blobs._listing()[0]
        kinds.append(("delta" if listing[batch_id].base is not None else "snapshot", len(made) - before))
    # The first two are whole (then keyed, written with the keys' hashes); half the keys make a
    # delta of about half the snapshot, then every key one larger than the room left (none made:
    # a snapshot), ten keys a delta again.
    want = [("snapshot", 0), ("snapshot", 0), ("delta", 1), ("snapshot", 0), ("delta", 1)]
    assert kinds == want, kinds
    forget_cache()
    table = open_held(kernel, blobs, 5).table()
    assert table is not None
    counts = dict(zip(table.column("k").to_pylist(), table.column("p0_c").to_pylist(), strict=True))
    assert (counts["key0"], counts["key999"], counts["key1999"]) == (5, 4, 3) and len(counts) == len(keys)


def test_a_state_that_shrinks_is_held_whole_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 100)
    kernel = KERNELS["keyed-ttl"]  # (keys expire: the state shrinks)
    blobs = VersionedBlobs(str(tmp_path), 0)
    rng = random.Random(4)
    keys = [f"key{i}" for i in range(300)]
    kinds = []
    for batch_id, (n, watermark) in enumerate([(300, None), (5, 0), (5, 10_000), (5, 10_000)]):
        held = open_held(kernel, blobs, batch_id)
        kinds.append(type(held).__name__)
        batch = _batch(rng, keys, watermark or 0, batch_id * 300, n)
        new, _ = kernel.step(held.take(batch, None, watermark), batch, watermark, 0)
        held.put(new)
        write_state(held, blobs, batch_id)
    assert kinds == ["WholeState", "KeyedState", "KeyedState", "WholeState"]


def test_a_delta_whose_base_is_missing_is_an_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from krishiv_py.errors import JobError

    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 0)
    kernel = KERNELS["keyed-count"]
    blobs = VersionedBlobs(str(tmp_path), 0)
    rng = random.Random(3)
    keys = [f"key{i}" for i in range(500)]
    for batch_id in range(3):
        held = open_held(kernel, blobs, batch_id)
        batch = _batch(rng, keys, 0, batch_id * 400, 400 if batch_id == 0 else 2)
        new, _ = kernel.step(held.take(batch, None, None), batch, None, 0)
        held.put(new)
        write_state(held, blobs, batch_id)
    listing = blobs._listing()[0]
    assert listing[2].base == 1 and listing[1].base == 0
    Path(listing[0].info.path).unlink()
    forget_cache()
    with pytest.raises(JobError, match="delta over version 0, which is not there"):
        open_held(kernel, blobs, 3)


def test_a_delta_replays_over_its_snapshot_without_the_kernel() -> None:
    snapshot = pa.table({"k": ["a", "b", "b"], "__kp_khash": pa.array([1, 2, 2], pa.uint64())})
    rows = pa.table({"k": ["b"], "__kp_khash": pa.array([2], pa.uint64())})
    table = replay(snapshot, [(np.array([2], np.uint64), rows), (np.array([1], np.uint64), None)])
    assert table is not None and table.column("k").to_pylist() == ["b"]


@pytest.mark.spark
def test_a_job_on_keyed_state_writes_deltas_and_restarts_on_them(session: Any, tmp_path: Path) -> None:
    """Through Spark: a per-key count over 120,000 keys (each task's state above KEYED_MIN_ROWS),
    then micro-batches of a few rows, write deltas; a restart on the checkpoint goes on from them,
    and ``read_state`` shows plain rows."""
    import glob
    from collections import Counter

    import krishiv_py as kp

    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    stream, sender = session.memory_stream("k string, t bigint", name="held_deltas")

    def start() -> Any:
        counted = stream.watermark("t", 0).key_by("k").agg(kp.count(kp.col("*")).alias("n"))
        return counted.start(kp.ParquetSink(out), checkpoint_dir=checkpoint, lowering="stateful")

    sent: Counter[str] = Counter()
    live = 2 * held_state.KEYED_MIN_ROWS + 20_000
    batches = [[f"user{i}" for i in range(live)], ["user1", "user2"], ["user1", "user7"], ["user9"]]
    job = start()
    try:
        for keys in batches:
            sender.send(pa.table({"k": keys, "t": pa.array([1_000] * len(keys), pa.int64())}))
            sent.update(keys)
            job.process_all_available()
    finally:
        job.stop()
    assert glob.glob(f"{checkpoint}/krishiv-state/*/*.d*.arrow"), "no micro-batch wrote a delta"
    more = ["user7", f"user{live - 1}", f"user{live}"]
    sender.send([{"k": k, "t": 2_000} for k in more])
    sent.update(more)
    job = start()
    try:
        job.process_all_available()
        changes = job.results().to_pylist()
    finally:
        job.stop()
    newest: dict[str, int] = {}  # (the sink's files come in any order; a count only grows)
    for row in changes:
        if row["kind"] == "emit":
            newest[row["k"]] = max(row["n"], newest.get(row["k"], 0))
    assert newest == dict(sent)
    state = kp.read_state(checkpoint)
    assert "__kp_khash" not in state.column_names
    counts = zip(state.column("k").to_pylist(), state.column("p0_c").to_pylist(), strict=True)
    assert dict(counts) == dict(sent)


def test_a_join_on_keyed_state_equals_the_model_and_restarts_on_its_deltas(
    session: Any, tmp_path: Path
) -> None:
    """Through Spark: a left interval join holding 120,000 unmatched rows (each task's state above
    KEYED_MIN_ROWS) steps only the keys a micro-batch touches, writes deltas, restarts on them,
    and pads every row once the watermark passes it: the model's rows, exactly."""
    from collections import Counter

    from krishiv_py.model.joins import join_model_for
    from krishiv_py.plan import nodes as n

    left, to_left = session.memory_stream("k string, t bigint, a bigint", name="held_join_left")
    right, to_right = session.memory_stream("k string, t bigint, b bigint", name="held_join_right")
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .interval_join(right.watermark("t", 0).key_by("k"), between=(0, 5_000), how="left")
    )
    model = join_model_for(cast(n.Join, joined.plan))
    live = 2 * held_state.KEYED_MIN_ROWS + 20_000
    many = _left_rows(live)
    first = [
        ("left", many),
        ("right", [{"k": "user1", "t": 2_000, "b": 1}, {"k": "user2", "t": 7_000, "b": 2}]),
        ("left", [{"k": "user7", "t": 4_000, "a": -7}, {"k": "nobody", "t": 4_000, "a": -1}]),
        ("right", [{"k": "user7", "t": 4_500, "b": 7}, {"k": "user7", "t": 3_000, "b": 8}]),
    ]
    then = [
        ("right", [{"k": "user9", "t": 5_000, "b": 9}, {"k": f"user{live - 1}", "t": 5_500, "b": 10}]),
        ("left", [{"k": "user5", "t": 9_000, "a": -5}]),
        ("right", [{"k": "user5", "t": 20_000, "b": 5}]),
        ("left", [{"k": "late", "t": 30_000, "a": -9}]),  # the watermark passes every row held
    ]

    def to_model(side: str, rows: list[dict[str, Any]]) -> None:
        model.send(rows, side=cast(Any, side))

    got = _run_twice(joined, first, then, {"left": to_left, "right": to_right}, to_model, tmp_path)
    assert Counter(_plain(r) for r in got) == Counter(_plain(r) for r in model.results)
    assert sum(1 for r in got if r["b"] is None) > live - 10  # the pads came after the restart


@pytest.mark.spark
def test_a_join_and_its_top_n_in_one_call_on_keyed_state_equal_the_model_across_a_restart(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Spark, Nexmark q9's shape: each key's highest right row of its join, the earliest of
    equal ones, in the join's operator call. 120,000 left rows put each task's state above
    KEYED_MIN_ROWS (and the chain's BY_KEY_ROWS, lowered to it here): micro-batches step only
    their keys (and the chain's own row of its watermark and arrival count), write deltas, and
    a restart goes on from them; a tie after the restart keeps the row that came first."""
    from collections import Counter

    import krishiv_py as kp
    from krishiv_py.model.compose import ComposedModel, FilterOf, JoinOf, Source, TopNOf
    from krishiv_py.stateful import chain

    monkeypatch.setattr(chain, "BY_KEY_ROWS", held_state.KEYED_MIN_ROWS)  # (the plan carries it)

    left, to_left = session.memory_stream("k string, t bigint, a bigint", name="held_chain_left")
    right, to_right = session.memory_stream("k string, t bigint, b bigint", name="held_chain_right")
    joined = (
        left.watermark("t", 0)
        .key_by("k")
        .interval_join(right.watermark("t", 0).key_by("k"), between=(0, 5_000))
    )
    best = joined.filter(kp.col("b") >= 0).top_n(1, by="b", per="key", keys=("k",), ties="first")
    assert "same operator call as the join" in best.explain(lowering="stateful")
    model = ComposedModel(
        TopNOf(
            FilterOf(
                JoinOf(
                    Source("left", "t", ("k", "t", "a")),
                    Source("right", "t", ("k", "t", "b")),
                    keys=("k",),
                    between=(0, 5_000),
                ),
                lambda r: cast(int, r["b"]) >= 0,
            ),
            n=1,
            by=("b",),
            keys=("k",),
            ties="first",
        )
    )
    live = 2 * held_state.KEYED_MIN_ROWS + 20_000
    many = _left_rows(live)
    first = [
        ("left", many),
        ("right", [{"k": f"user{i}", "t": 1_500, "b": i} for i in range(10, 60)]),  # 50 pairs first
        ("right", [{"k": "user1", "t": 2_000, "b": 5}, {"k": "user2", "t": 3_000, "b": 7}]),
        ("right", [{"k": "user1", "t": 2_500, "b": 5}, {"k": "user3", "t": 2_000, "b": -1}]),
        ("right", [{"k": "user3", "t": 2_200, "b": 1}, {"k": "nobody", "t": 2_300, "b": 50}]),
    ]
    then = [
        ("right", [{"k": "user1", "t": 3_000, "b": 5}, {"k": "user2", "t": 3_500, "b": 9}]),
        ("right", [{"k": f"user{live - 1}", "t": 4_000, "b": 3}, {"k": "user3", "t": 4_100, "b": 1}]),
        ("left", [{"k": "user4", "t": 30_000, "a": -4}]),  # the watermark passes every left row held
        ("right", [{"k": "user1", "t": 30_500, "b": 99}]),  # too late for user1's left row
    ]
    expected: list[dict[str, Any]] = []

    def to_model(side: str, rows: list[dict[str, Any]]) -> None:
        expected.extend(model.send(rows, source=side))

    got = _run_twice(best, first, then, {"left": to_left, "right": to_right}, to_model, tmp_path)
    names = list(best.columns)
    assert Counter(_plain(r) for r in got) == Counter(_plain({c: r.get(c) for c in names}) for r in expected)
    assert sum(1 for r in got if r["k"] == "user1") == 1  # its ties never replaced the first


def _left_rows(live: int) -> pa.Table:
    """``live`` left rows, one per key ``user<i>``, all at 1 s."""
    return pa.table(
        {
            "k": [f"user{i}" for i in range(live)],
            "t": pa.array([1_000] * live, pa.int64()),
            "a": pa.array(range(live), pa.int64()),
        }
    )


def _run_twice(
    pipeline: Any,
    first: list[tuple[str, Any]],
    then: list[tuple[str, Any]],
    senders: dict[str, Any],
    to_model: Callable[[str, list[dict[str, Any]]], None],
    tmp_path: Path,
) -> list[dict[str, Any]]:
    """Run ``pipeline`` on the stateful lowering over the steps ``first`` (each ``(side, rows)``,
    sent to the job and ``to_model``), check that its state wrote a delta, restart it on the
    checkpoint over ``then``; every row it wrote."""
    import glob

    import krishiv_py as kp

    checkpoint, out = str(tmp_path / "cp"), str(tmp_path / "out")
    for steps in (first, then):
        job = pipeline.start(kp.ParquetSink(out), checkpoint_dir=checkpoint, lowering="stateful")
        try:
            for side, rows in steps:
                to_model(side, rows if isinstance(rows, list) else rows.to_pylist())
                senders[side].send(rows)
                job.process_all_available()
        finally:
            job.stop()
        if steps is first:
            assert glob.glob(f"{checkpoint}/krishiv-state/*/*.d*.arrow"), "no micro-batch wrote a delta"
    written: list[dict[str, Any]] = pq.read_table(out).select(list(pipeline.columns)).to_pylist()
    return written


def _plain(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, v.timestamp() * 1000 if hasattr(v, "timestamp") else v) for k, v in row.items()))


def test_a_worker_whose_state_is_behind_replays_only_the_deltas_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Python workers take a task's micro-batches in turn: each catches its own state up with
    the other's deltas instead of reading the snapshot again, and both equal the whole state."""
    from krishiv_py.stateful import versioned

    monkeypatch.setattr(held_state, "KEYED_MIN_ROWS", 0)
    kernel = KERNELS["keyed-count"]
    blobs = VersionedBlobs(str(tmp_path), 0)
    rng = random.Random(6)
    keys = [f"key{i}" for i in range(2_000)]
    workers: list[dict[str, Any]] = [{}, {}]
    whole: pa.Table | None = None
    reads: list[int] = []
    real_read = VersionedBlobs._read

    def counted(self: VersionedBlobs, version: Any) -> bytes | None:
        reads.append(int(version.size))
        return real_read(self, version)

    monkeypatch.setattr(VersionedBlobs, "_read", counted)
    for batch_id in range(8):
        worker = workers[batch_id % 2] if batch_id else workers[0]
        monkeypatch.setattr(versioned, "_HELD", worker)
        n = 2_000 if batch_id == 0 else 20
        batch = _batch(rng, keys, 0, batch_id * 2_000, n)
        whole, _ = kernel.step(whole, batch, None, 0)
        reads.clear()
        held = open_held(kernel, blobs, batch_id)
        new, _ = kernel.step(held.take(batch, None, None), batch, None, 0)
        held.put(new)
        write_state(held, blobs, batch_id)
        assert isinstance(held, KeyedState) and _rows(held.table()) == _rows(whole), batch_id
        if batch_id >= 3:  # each worker behind by one delta: it reads that delta, not the snapshot
            assert len(reads) == 1 and reads[0] < 10_000, (batch_id, reads)
