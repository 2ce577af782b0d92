"""Key groups (SPEC 3.15): the hash, the tasks' ranges, the store that finds a key group's state
after a restart on another number of tasks, the layout a checkpoint records, and on Spark a job
run on 2, then 5, then 3 tasks against an uninterrupted run.

Without Spark: :func:`spark_hash` is checked against Spark's own ``hash()`` in the one Spark test
of the hash; the store and the layout rules are plain files.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import json
import os
import random
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import numpy as np
import pyarrow as pa
import pytest
from join_kernels import join_kernel

import krishiv_py as kp
from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.runtime.launch import KEY_GROUPS_CONF, operator_layout
from krishiv_py.stateful._arrow import ipc_bytes
from krishiv_py.stateful.key_groups import key_groups_of, lanes, spark_hash, task_of, task_ranges
from krishiv_py.stateful.operator import assemble_state
from krishiv_py.stateful.versioned import KeyGroupStore, Piece, forget_cache, range_name
from krishiv_py.testing.steps import _placeholder

SCHEMA = "k string, t bigint, v bigint"

# --- ranges and lanes --------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "tasks"), [(128, 1), (128, 2), (128, 3), (128, 5), (7, 7), (32_768, 300)])
def test_each_task_owns_a_contiguous_range_and_every_group_has_one_owner(groups: int, tasks: int) -> None:
    ranges = task_ranges(groups, tasks)
    assert len(ranges) == tasks and ranges[0][0] == 0 and ranges[-1][1] == groups
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))
    assert max(hi - lo for lo, hi in ranges) - min(hi - lo for lo, hi in ranges) <= 1  # even
    for group in range(0, groups, max(1, groups // 500)):
        lo, hi = ranges[task_of(group, groups, tasks)]
        assert lo <= group < hi


def test_a_lane_per_task_lands_on_its_own_partition() -> None:
    for tasks in (1, 2, 3, 8, 64, 200):
        values = lanes(tasks)
        assert len(set(values)) == tasks
        parts = np.mod(spark_hash([pa.array(values, pa.int32())]).astype(np.int64), tasks)
        assert parts.tolist() == list(range(tasks))


def _typed_columns(seed: int) -> pa.Table:
    rng = random.Random(seed)
    n = 300
    strings = ["", "a", "ab", "abc", "abcd", "héllo ✓", None, "x" * 41]
    strings += ["".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 19))) for _ in range(n - 8)]
    doubles = [rng.gauss(0, 1e6) for _ in range(n - 4)] + [-0.0, 0.0, float("nan"), None]
    return pa.table(
        {
            "s": pa.array(strings),
            "i": pa.array(
                [None if i % 13 == 0 else rng.randint(-(2**31), 2**31 - 1) for i in range(n)], pa.int32()
            ),
            "l": pa.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(n)], pa.int64()),
            "d": pa.array(doubles, pa.float64()),
            "f": pa.array([rng.gauss(0, 1) for _ in range(n)], pa.float32()),
            "b": pa.array([rng.random() < 0.5 for _ in range(n)]),
            "sh": pa.array([rng.randint(-(2**15), 2**15 - 1) for _ in range(n)], pa.int16()),
            "dt": pa.array(
                [
                    datetime.date(2020, 1, 1) + datetime.timedelta(days=rng.randint(-9000, 9000))
                    for _ in range(n)
                ]
            ),
            "ts": pa.array([rng.randint(0, 2**52) for _ in range(n)], pa.timestamp("us", tz="UTC")),
            "dec": pa.array(
                [decimal.Decimal(rng.randint(-(10**11), 10**11)) / 100 for _ in range(n)],
                pa.decimal128(14, 2),
            ),
            "bin": pa.array([None if s is None else s.encode() for s in strings], pa.binary()),
        }
    )


@pytest.mark.spark
def test_the_hash_of_state_rows_is_sparks_hash_of_their_rows(session: kp.Session) -> None:
    """Every key type the planner hashes, one at a time and several together, nulls, -0.0, NaN."""
    table = _typed_columns(7)
    frame = session.spark.createDataFrame(table)
    floats = {"d", "f"}  # the planner hashes floats as doubles: (k + 0.0)
    exprs = {c: f"hash(({c} + 0.0))" if c in floats else f"hash({c})" for c in table.column_names}
    exprs["several"] = "hash(s, i, (d + 0.0), dt)"
    got = frame.selectExpr(*[f"{e} AS {name}" for name, e in exprs.items()]).toArrow()
    for name in exprs:
        columns = ["s", "i", "d", "dt"] if name == "several" else [name]
        mine = spark_hash([table.column(c) for c in columns])
        assert mine.tolist() == got.column(name).to_pylist(), name


def test_a_key_of_no_hashable_type_is_named() -> None:
    from krishiv_py.stateful.key_groups import UnhashableKey

    with pytest.raises(UnhashableKey, match="list<item: int64>"):
        spark_hash([pa.array([[1]])])


# --- the store -------------------------------------------------------------------------------


def _window_spec(tasks: int, key_groups: int = 16) -> Any:
    import attrs

    recipe = (
        _placeholder(SCHEMA).watermark("t", 5).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")))
    ).lower(lowering="stateful")
    assert recipe.stateful is not None
    return attrs.evolve(recipe.stateful.operator, buckets=tasks, key_groups=key_groups)


def _state(keys: list[str]) -> pa.Table:
    return pa.table({"k0": pa.array(keys), "__ws": pa.array([0] * len(keys), pa.int64())})


def test_a_task_reads_its_key_groups_from_the_layout_before_and_then_its_own(tmp_path: Path) -> None:
    forget_cache()
    root, groups = str(tmp_path), 16
    keys = [f"k{i}" for i in range(200)]
    owner = key_groups_of([pa.array(keys)], groups, len(keys))
    old = task_ranges(groups, 2)
    for lo, hi in old:  # a run on two tasks left its state after micro-batch 4
        mine = [k for k, g in zip(keys, owner, strict=True) if lo <= g < hi]
        store = KeyGroupStore(root, lo, hi, since=0, current=frozenset(range_name(*r) for r in old))
        store.save(4, ipc_bytes(_state(mine)))
    new = task_ranges(groups, 3)
    current = frozenset(range_name(*r) for r in new)
    spec = _window_spec(3, groups)
    seen: list[Any] = []
    for lo, hi in new:
        store = KeyGroupStore(root, lo, hi, since=5, current=current)
        pieces = store.load_before(5)
        state, caught = assemble_state(spec, pieces)
        assert state is not None and caught is None  # (no watermark: nothing stepped)
        got = state.column("k0").to_pylist()
        assert all(lo <= g < hi for g in key_groups_of([pa.array(got)], groups, len(got)))
        seen += got
        store.save(5, ipc_bytes(state))
    assert sorted(seen) == sorted(keys)  # nothing lost, nothing twice
    # The old layout's directories stay while a re-run of micro-batch 5 may read them, then go.
    assert set(os.listdir(root)) == current | {range_name(*r) for r in old}
    for lo, hi in new:
        store = KeyGroupStore(root, lo, hi, since=5, current=current)
        pieces = store.load_before(6)
        assert len(pieces) == 1 and pieces[0].groups is None
        store.save(6, pieces[0].blob)
    assert set(os.listdir(root)) == current


def test_a_version_another_layout_wrote_after_this_one_began_is_not_read(tmp_path: Path) -> None:
    """A crash during the first micro-batch on 2 tasks, then a start on 1: the 2 tasks' version of
    that micro-batch never committed."""
    forget_cache()
    root = str(tmp_path)
    KeyGroupStore(root, 0, 16, since=0, current=frozenset({"0-16"})).save(3, ipc_bytes(_state(["before"])))
    for lo, hi in task_ranges(16, 2):
        KeyGroupStore(root, lo, hi, since=4, current=frozenset({"0-8", "8-16"})).save(
            4, ipc_bytes(_state(["lost"]))
        )
    store = KeyGroupStore(root, 0, 16, since=4, current=frozenset({"0-16"}))
    pieces = store.load_before(4)
    assert [p.blob for p in pieces] == [ipc_bytes(_state(["before"]))]
    store.save(4, ipc_bytes(_state(["again"])))
    pieces = store.load_before(5)
    assert len(pieces) == 1 and pieces[0].blob == ipc_bytes(_state(["again"]))


class _RacingListing:
    """A local file system whose first listing of each directory fails as Arrow's does when
    another task creates the directory while it is listed (gone at the listing, there after)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.failed = inner, set[str]()

    def get_file_info(self, what: Any) -> Any:
        base = getattr(what, "base_dir", None)
        if base is not None and base not in self.failed:
            self.failed.add(base)
            raise FileNotFoundError(f"[Errno 2] Cannot list directory '{base}'")
        return self.inner.get_file_info(what)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_directory_another_task_creates_while_it_is_listed_is_listed_again(tmp_path: Path) -> None:
    """The first micro-batch's tasks create the state root together: one task's listing of the
    root may fail although the root is there then; it is listed again, not failed."""
    forget_cache()
    root = str(tmp_path)
    KeyGroupStore(root, 0, 8, since=0, current=frozenset({"0-8", "8-16"})).save(0, ipc_bytes(_state(["a"])))
    store = KeyGroupStore(root, 8, 16, since=0, current=frozenset({"0-8", "8-16"}))
    racing = _RacingListing(store._fs)
    store._fs = racing
    store._own._fs = racing
    assert store.moved_before(1) is None
    assert store.own.newest_before(1) is None
    assert {str(tmp_path), f"{tmp_path}/8-16"} <= racing.failed


def test_state_rows_that_hash_outside_their_range_stop_the_task(tmp_path: Path) -> None:
    spec = _window_spec(2, 16)
    keys = [f"k{i}" for i in range(50)]
    stray = Piece(ipc_bytes(_state(keys)), 0, 1, (0,))  # said to hold key group 0 only
    with pytest.raises(JobError, match="do not hash as its rows did"):
        assemble_state(spec, [stray])


def test_an_operator_whose_state_cannot_split_is_named() -> None:
    """A join, then a window keyed by more columns than the join's: rows travel by the join's
    keys, so the window's state cannot be split by them."""
    from types import SimpleNamespace

    from krishiv_py.stateful.chain import ChainKernel

    window = _count_window(("k", "a"))
    chain = ChainKernel(first=_join("interval", "inner").kernel, then=window, columns=(("k", pa.string()),))
    spec = SimpleNamespace(kernel=chain, key_groups=16)
    assert not spec.kernel.movable and spec.kernel.first.movable and window.movable
    pieces = [Piece(ipc_bytes(_state(["a"])), 0, 8, None), Piece(ipc_bytes(_state(["b"])), 8, 16, None)]
    with pytest.raises(JobError, match="cannot move between tasks"):
        assemble_state(spec, pieces)  # type: ignore[arg-type]


def _count_window(keys: tuple[str, ...], **more: Any) -> Any:
    from krishiv_py.plan.windows import TumblingWindow
    from krishiv_py.stateful.aggregates import AggSpec
    from krishiv_py.stateful.state import KernelSpec
    from krishiv_py.stateful.window_kernel import WindowKernel

    n = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
    return WindowKernel(KernelSpec(keys=keys, window=TumblingWindow(size_ms=500), aggs=(n,), **more))


def _join(kind: str, how: str, **more: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(kernel=join_kernel(kind, how, **more), key_groups=16)  # what assemble_state reads


def _chain(then_keys: tuple[str, ...] = ("k",), *, by_key_from: int | None = None) -> Any:
    """A left join, then a count per window in the same call (its state by key from
    ``by_key_from`` rows; None: the chain's own threshold)."""
    from types import SimpleNamespace

    from krishiv_py.stateful.chain import ChainKernel

    first = _join("interval", "left", between=(0, 300), allowed_lateness_ms=400, event_times=True)
    then = _count_window(then_keys, allowed_lateness_ms=400)
    kernel = ChainKernel(first=first.kernel, then=then, columns=(("k", pa.string()),))
    if by_key_from is not None:
        kernel = attrs.evolve(kernel, by_key_from=by_key_from)
    return SimpleNamespace(kernel=kernel, key_groups=16)


def _chain_over_changes() -> Any:
    """A left join with retractions, then a window over its changes (count and sum): the window's
    live rows are numbered by the chain's arrival count, which each task keeps for itself."""
    from types import SimpleNamespace

    from krishiv_py.stateful.chain import ChainKernel

    first = _join(
        "interval",
        "left",
        between=(0, 300),
        allowed_lateness_ms=400,
        accumulation="retracting",
        event_times=True,
    )
    kernel = ChainKernel(
        first=first.kernel,
        then=_changes(aggs=("a",)).kernel,
        columns=(("k", pa.string()), ("a", pa.int64())),
        retracting=True,
    )
    return SimpleNamespace(kernel=kernel, key_groups=16)


def _union() -> Any:
    from types import SimpleNamespace

    from krishiv_py.stateful.union import UnionKernel

    kernel = UnionKernel(branches=(_count_window(("k",)), _join("window", "left", window=_tumbling()).kernel))
    return SimpleNamespace(kernel=kernel, key_groups=16)


def _changes(aggs: tuple[str, ...] = ()) -> Any:
    from types import SimpleNamespace

    from krishiv_py.stateful.aggregates import AggSpec
    from krishiv_py.stateful.window_changes import ChangesWindowKernel

    n = AggSpec(name="n", func="count", column=None, out_type=pa.int64(), in_type=None)
    sums = tuple(
        AggSpec(name=f"s_{c}", func="sum", column=c, out_type=pa.int64(), in_type=pa.int64()) for c in aggs
    )
    kernel = ChangesWindowKernel(
        keys=("k",), window=_tumbling(), aggs=(n, *sums), allowed_lateness_ms=300, accumulation="retracting"
    )
    return SimpleNamespace(kernel=kernel, key_groups=16)


def _tumbling() -> Any:
    from krishiv_py.plan.windows import TumblingWindow

    return TumblingWindow(size_ms=500)


def _over() -> Any:
    """An over-aggregation: the sum of each row and the 3 rows of its key before it."""
    from types import SimpleNamespace

    from krishiv_py.stateful.aggregates import AggSpec
    from krishiv_py.stateful.over import OverKernel

    s = AggSpec(name="s", func="sum", column="a", out_type=pa.int64(), in_type=pa.int64())
    kernel = OverKernel(
        keys=("k",), columns=("k", "a"), frame="rows", preceding=3, aggs=(s,), allowed_lateness_ms=500,
        mode="retracting",
    )  # fmt: skip
    return SimpleNamespace(kernel=kernel, key_groups=16)


#: Kernels whose state moves by key group, each stepped on 2, then 5, then 3 tasks below.
MOVABLE = {
    "interval-inner": _join("interval", "inner", between=(-200, 200)),
    "interval-left-late-retracting": _join(
        "interval", "left", between=(0, 300), allowed_lateness_ms=400, accumulation="retracting"
    ),
    "interval-full": _join("interval", "full", between=(-100, 100), allowed_lateness_ms=200),
    "as-of": _join("as_of", "left", max_age_ms=500),
    "window-inner": _join("window", "inner", window=_tumbling()),
    "window-full-late-retracting": _join(
        "window", "full", window=_tumbling(), allowed_lateness_ms=600, accumulation="retracting"
    ),
    "chain-join-then-window": _chain(),
    "chain-join-then-window-by-key": _chain(by_key_from=0),
    "chain-join-then-window-over-changes": _chain_over_changes(),
    "union-window-and-window-join": _union(),
    "window-over-changes": _changes(),
    "over-rows-late-retracting": _over(),
}


def _random_rows(
    name: str, rng: random.Random, b: int, watermark: int | None, sent: list[dict[str, Any]]
) -> pa.Table:
    """A micro-batch of random rows for kernel ``name``: a join's two sides, a union's two
    branches, or a changelog's emits and retractions of rows emitted before (``sent``)."""
    from krishiv_py.names import BATCH_TS, BRANCH, JOIN_SIDE, RESULT_KIND, SEQ

    # A few keys per micro-batch: many tasks get no rows, and their marks stay behind.
    keys = rng.sample([f"key{i}" for i in range(40)], rng.randint(1, 5))
    n = rng.randint(5, 60)
    ts = [max(0, (watermark or 0) + rng.randint(-600, 900)) for _ in range(n)]
    k = [rng.choice(keys) for _ in range(n)]
    seq = pa.array(range(b * 1000, b * 1000 + n), pa.int64())
    if name == "window-over-changes":
        rows: list[dict[str, Any]] = []
        for key, t in zip(k, ts, strict=True):
            if sent and rng.random() < 0.25:
                rows.append({**sent.pop(rng.randrange(len(sent))), "kind": "retract"})
            else:
                rows.append({"k": key, "t": t * 1000, "kind": "emit"})
                sent.append({"k": key, "t": t * 1000})
        return pa.table(
            {
                "k": [r["k"] for r in rows],
                BATCH_TS: pa.array([r["t"] for r in rows], pa.int64()),
                RESULT_KIND: [r["kind"] for r in rows],
                SEQ: seq,
            }
        )
    left = [rng.random() < 0.5 for _ in range(n)]
    cols: dict[str, Any] = {
        JOIN_SIDE: ["left" if s else "right" for s in left],
        "k": k,
        "a": [rng.randint(0, 9) if s else None for s in left],
        "b": [None if s else rng.randint(0, 9) for s in left],
        BATCH_TS: pa.array([t * 1000 for t in ts], pa.int64()),
        SEQ: seq,
    }
    if name.startswith("union"):
        cols[BRANCH] = pa.array([rng.randint(0, 1) for _ in range(n)], pa.int32())
    return pa.table(cols)


@pytest.mark.parametrize("name", sorted(MOVABLE))
def test_a_kernel_rescaled_from_2_to_5_to_3_tasks_equals_one_state(name: str, tmp_path: Path) -> None:
    """A movable kernel's state splits by key group and rejoins: stepped on 2, then 5, then 3
    tasks (each its key groups' rows, its state read back through the store, a task with no rows
    skipped now and then so that the tasks' marks differ — a window join's fired windows, a
    chain's and a union's watermarks), it gives the results of one state stepped over every row.
    A moved state's parts are stepped to the micro-batch's watermark before they are gathered,
    as the operator does; what that fires comes first."""
    from krishiv_py.stateful._arrow import ipc_table

    forget_cache()
    spec = MOVABLE[name]
    kernel = spec.kernel
    assert kernel.movable
    rng = random.Random(name)
    batches: list[tuple[pa.Table, int | None]] = []
    watermark: int | None = None
    sent: list[dict[str, Any]] = []
    for b in range(12):
        batches.append((_random_rows(name, rng, b, watermark, sent), watermark))
        watermark = (watermark or 0) + rng.randint(0, 400)
    batches.append((batches[0][0].slice(0, 0), 10**7))  # everything due, everything swept

    def results(table: pa.Table) -> list[str]:
        return [repr(sorted(r.items())) for r in table.to_pylist()]

    def stepped(state: pa.Table | None, rows: pa.Table, w: int | None) -> tuple[pa.Table, list[str]]:
        """What the watermark made due fires before the rows meet the state (the operator fires
        it at the end of the micro-batch before, or a tick wakes the task)."""
        state, fired = kernel.step(state, rows.slice(0, 0), w, 0)
        state, out = kernel.step(state, rows, w, 0)
        return state, results(fired.results) + results(out.results)

    whole: pa.Table | None = None
    expected: list[str] = []
    for rows, w in batches:
        whole, out = stepped(whole, rows, w)
        expected += out

    got: list[str] = []
    moved = 0
    root = str(tmp_path)
    for tasks, steps in ((2, range(0, 4)), (5, range(4, 8)), (3, range(8, len(batches)))):
        ranges = task_ranges(spec.key_groups, tasks)
        current = frozenset(range_name(*r) for r in ranges)
        for b in steps:
            rows, w = batches[b]
            groups = key_groups_of([rows.column("k")], spec.key_groups, rows.num_rows)
            for lo, hi in ranges:
                mine = rows.filter(pa.array((groups >= lo) & (groups < hi)))
                if not mine.num_rows and b < len(batches) - 1 and rng.random() < 0.5:
                    continue  # no rows and not ticked: its marks stay behind
                store = KeyGroupStore(root, lo, hi, since=steps.start, current=current)
                state, caught = assemble_state(spec, store.load_before(b), w, 0, mine.slice(0, 0))
                if caught is not None:
                    got += results(caught.results)
                    moved += 1
                new, out = stepped(state, mine, w)
                got += out
                store.save(b, ipc_bytes(new))
                assert ipc_table(ipc_bytes(new)).num_rows == new.num_rows
    assert sorted(got) == sorted(expected) and len(expected) > 50
    assert moved > 0  # some task gathered parts of several tasks' states


# --- what a checkpoint records ---------------------------------------------------------------


def _layout(path: Path, partitions: int, *, asked: str | None = None, movable: bool = True) -> Any:
    return operator_layout(
        CheckpointLayout(str(path)), partitions, asked=asked, movable=movable, what="a join"
    )


def _commit(path: Path, batch: int) -> None:
    (path / "commits").mkdir(parents=True, exist_ok=True)
    (path / "commits" / str(batch)).write_text("v1\n{}\n")
    (path / "offsets").mkdir(parents=True, exist_ok=True)
    (path / "offsets" / str(batch)).write_text("v1\n{}\n")


def test_a_new_checkpoint_records_its_key_groups_and_runs_one_task_per_partition(tmp_path: Path) -> None:
    first = _layout(tmp_path, 8)
    assert (first.key_groups, first.tasks, first.since) == (128, 8, 0)
    assert json.loads((tmp_path / "krishiv-key-groups.json").read_text())["key_groups"] == 128
    assert _layout(tmp_path / "few", 300, asked="64").tasks == 64  # at most one per key group
    assert _layout(tmp_path / "same", 3).tasks == 3
    assert _layout(tmp_path / "same", 3) == _layout(tmp_path / "same", 3)


def test_a_restart_on_other_partitions_moves_from_the_next_micro_batch(tmp_path: Path) -> None:
    _layout(tmp_path, 2)
    _commit(tmp_path, 6)
    moved = _layout(tmp_path, 5)
    assert (moved.tasks, moved.since) == (5, 7)
    assert json.loads((tmp_path / "krishiv-key-groups.json").read_text())["tasks"] == 5


def test_a_new_checkpoints_stage_runs_by_key_group_and_an_older_ones_keeps_its_buckets(
    tmp_path: Path,
) -> None:
    staged = CheckpointLayout(str(tmp_path / "new"))
    first = operator_layout(staged, 2, asked=None, movable=True, what="a window", stage_movable=True)
    assert first.stage_key_groups
    _commit(tmp_path / "new", 3)
    moved = operator_layout(staged, 5, asked=None, movable=True, what="a window", stage_movable=True)
    assert (moved.tasks, moved.since, moved.stage_key_groups) == (5, 4, True)
    # Recorded before stages moved: no stage_key_groups, its stage keeps its hashed buckets.
    old = tmp_path / "old"
    old.mkdir()
    record = {"key_groups": 128, "tasks": 2, "since": 0, "stage_buckets": 4}
    (old / "krishiv-key-groups.json").write_text(json.dumps(record))
    kept = operator_layout(
        CheckpointLayout(str(old)), 5, asked=None, movable=True, what="a window", stage_movable=True
    )
    assert (kept.tasks, kept.stage_buckets, kept.stage_key_groups) == (5, 4, False)


def test_a_restart_that_cannot_move_the_state_is_refused_naming_why(tmp_path: Path) -> None:
    _layout(tmp_path, 2, movable=False)
    with pytest.raises(JobError, match=r"ran on 2 tasks .* asks for 5 .*a join.*partitions=2"):
        _layout(tmp_path, 5, movable=False)
    assert _layout(tmp_path, 2, movable=False).tasks == 2


def test_the_key_groups_of_a_checkpoint_cannot_change(tmp_path: Path) -> None:
    _layout(tmp_path, 2, asked="256")
    with pytest.raises(JobError, match="hashes its keys into 256 key groups"):
        _layout(tmp_path, 2, asked="512")
    assert _layout(tmp_path, 2).key_groups == 256


@pytest.mark.parametrize("asked", ["0", "many", "40000", "-1"])
def test_a_wrong_number_of_key_groups_is_named(tmp_path: Path, asked: str) -> None:
    with pytest.raises(JobError, match=f"{KEY_GROUPS_CONF}=.* from 1 to 32768"):
        _layout(tmp_path, 2, asked=asked)


def test_a_checkpoint_of_key_buckets_reads_each_bucket_as_a_key_group(tmp_path: Path) -> None:
    (tmp_path / "krishiv-buckets.txt").write_text("4\n")
    _commit(tmp_path, 3)
    kept = _layout(tmp_path, 8, movable=False)  # a join: as it ran, one task per bucket
    assert (kept.key_groups, kept.tasks) == (4, 4)
    moved = _layout(tmp_path, 2)
    assert (moved.key_groups, moved.tasks, moved.since) == (4, 2, 4)
    assert range_name(2, 3) == "2"  # a bucket's directory is its key group's


def test_a_damaged_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "krishiv-key-groups.json").write_text("{not json")
    with pytest.raises(JobError, match=r"krishiv-key-groups\.json is damaged"):
        _layout(tmp_path, 2)


# --- on Spark --------------------------------------------------------------------------------


def _batches() -> list[list[dict[str, Any]]]:
    rng = random.Random(3)
    return [
        [
            {"k": f"k{rng.randint(0, 300)}", "t": 1_000 * i + rng.randint(0, 2_500), "v": rng.randint(1, 9)}
            for _ in range(200)
        ]
        for i in range(8)
    ]


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.spark
@pytest.mark.parametrize("pipeline", ["window", "join-then-window", "window-then-stage", "over"])
def test_a_job_rescaled_from_2_to_5_to_3_tasks_equals_an_uninterrupted_run(
    session: kp.Session, tmp_path: Path, pipeline: str
) -> None:
    """A window; and a left interval join with retractions, then a window over its changes in
    the same operator (a chain: its tasks' marks differ, so a moved state's parts are stepped to
    the micro-batch's watermark before they are gathered), its checkpoint given as a ``file://``
    URI (the same carrier, records and files)."""
    spark = session.spark
    batches = _batches()
    before = spark.conf.get("spark.sql.shuffle.partitions")
    uri = pipeline == "join-then-window"

    def build(stream: Any) -> Any:
        timed = stream.watermark("t", 1_500)
        if pipeline == "window":
            return (
                timed.key_by("k")
                .tumbling_window(3_000)
                .allowed_lateness(1_000)
                .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("s"))
            )
        if pipeline == "over":  # each row with its key's three before it, late rows correcting them
            over = timed.key_by("k").over_rows(3).allowed_lateness(1_000).accumulation("retracting")
            return over.agg(kp.sum(kp.col("v")).alias("s"), kp.count(kp.col("*")).alias("n"))
        if pipeline == "window-then-stage":  # the keys per count and second: a stage by other keys
            counts = timed.key_by("k").tumbling_window(500).agg(kp.count(kp.col("*")).alias("n"))
            return counts.key_by("n").tumbling_window(1_000).agg(kp.count(kp.col("*")).alias("keys"))
        small = timed.filter(kp.col("v") <= 4).select("k", "t", kp.col("v").alias("a"))
        large = timed.filter(kp.col("v") > 4).select("k", "t", kp.col("v").alias("b"))
        return (
            small.key_by("k")
            .interval_join(large.key_by("k"), between=(-1_000, 1_000), how="left")
            .allowed_lateness(1_000)
            .accumulation("retracting")
            .key_by("k")
            .tumbling_window(2_000)
            .accumulation("retracting")
            .agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("a")).alias("s"))
        )

    def run(checkpoint: Path, plan: list[tuple[int, list[int]]]) -> list[tuple[Any, ...]]:
        stream, sender = session.memory_stream(SCHEMA)
        rows: list[tuple[Any, ...]] = []
        for partitions, steps in plan:
            spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
            where = f"file://{checkpoint}" if uri else str(checkpoint)
            job = build(stream).start(checkpoint_dir=where, lowering="stateful")
            try:
                for i in steps:
                    sender.send(batches[i])
                    job.process_all_available()
                rows += _rows(job.results())
            finally:
                job.stop()
            layout = json.loads((checkpoint / "krishiv-key-groups.json").read_text())
            assert layout["tasks"] == partitions
            state = os.listdir(checkpoint / "krishiv-state")
            assert {range_name(*r) for r in task_ranges(128, partitions)} <= set(state)
            if pipeline == "window-then-stage":  # the stage's state moved with the tasks
                assert layout["stage_key_groups"] is True
                stages = set(os.listdir(checkpoint / "krishiv-stages"))
                assert {range_name(*r) for r in task_ranges(128, partitions)} <= stages
        return sorted(rows)

    try:
        rescaled = run(tmp_path / "rescaled", [(2, [0, 1, 2]), (5, [3, 4]), (3, [5, 6, 7])])
        whole = run(tmp_path / "whole", [(2, list(range(8)))])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(before))
    assert rescaled == whole and len(whole) > (20 if pipeline == "window-then-stage" else 100)


# --- a look inside -----------------------------------------------------------------------------


def _written_checkpoint(path: Path, keys: list[str], *, tasks: int = 2, groups: int = 16) -> None:
    """A stopped job's checkpoint as the operator leaves it: the records, two committed
    micro-batches, each task's state under its key groups."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "krishiv-plan.txt").write_text("lowering: stateful\nplan\ncarrier: krishiv-files\n")
    layout = {
        "key_groups": groups,
        "tasks": tasks,
        "since": 0,
        "stage_buckets": 4,
        "operator": "krishiv window",
        "keys": ["user"],
        "state_keys": ["k0"],
    }
    (path / "krishiv-key-groups.json").write_text(json.dumps(layout))
    (path / "krishiv-job.json").write_text(json.dumps({"time_shift_ms": 0}))
    (path / "commits").mkdir()
    for batch in (0, 1):
        (path / "commits" / str(batch)).write_text(
            "v1\n" + json.dumps({"nextBatchWatermarkMs": 5_000 * batch})
        )
    owner = key_groups_of([pa.array(keys)], groups, len(keys))
    ranges = task_ranges(groups, tasks)
    current = frozenset(range_name(*r) for r in ranges)
    for lo, hi in ranges:
        mine = [k for k, g in zip(keys, owner, strict=True) if lo <= g < hi]
        rows = pa.table(
            {
                "k0": pa.array(mine * 2),  # two windows per key
                "__ws": pa.array([0] * len(mine) + [10] * len(mine), pa.int64()),
                "__we": pa.array([10] * len(mine) + [20] * len(mine), pa.int64()),
                "p0_c": pa.array(list(range(2 * len(mine))), pa.int64()),
            }
        )
        store = KeyGroupStore(str(path / "krishiv-state"), lo, hi, since=0, current=current)
        store.save(1, ipc_bytes(rows))
        store.save(2, ipc_bytes(rows.slice(0, 0)))  # an attempt after the last commit: not read


def test_state_show_names_the_layout_the_keys_rows_and_the_largest_key_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from krishiv_py.cli import main
    from krishiv_py.runtime.state_view import describe_state

    keys = [f"user{i}" for i in range(300)]
    _written_checkpoint(tmp_path / "cp", keys)
    info = describe_state(str(tmp_path / "cp"))
    assert {
        k: info[k] for k in ("lowering", "carrier", "key_groups", "tasks", "last_batch", "watermark_ms")
    } == {
        "lowering": "stateful",
        "carrier": "krishiv-files",
        "key_groups": 16,
        "tasks": 2,
        "last_batch": 1,
        "watermark_ms": 5_000,
    }
    [op] = info["operators"]
    assert (op["name"], op["keys"], op["rows"]) == ("operator", 300, 600) and op["bytes"] > 0
    counts = np.bincount(key_groups_of([pa.array(keys)], 16, len(keys)), minlength=16) * 2
    assert [g["rows"] for g in op["largest_key_groups"]] == sorted(counts.tolist(), reverse=True)[:5]
    assert main(["state", "show", str(tmp_path / "cp"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == info
    assert main(["state", "show", str(tmp_path / "cp")]) == 0
    printed = capsys.readouterr().out
    assert "key_groups    16" in printed and "largest key groups:" in printed


def test_read_state_gives_the_rows_with_the_pipelines_names(tmp_path: Path) -> None:
    keys = [f"user{i}" for i in range(40)]
    _written_checkpoint(tmp_path / "cp", keys, tasks=3)
    state = kp.read_state(str(tmp_path / "cp"))
    assert state.column_names == ["user", "window_start", "window_end", "p0_c", "key_group"]
    assert sorted(str(u) for u in state.column("user").to_pylist()) == sorted(keys * 2)
    owner = dict(zip(keys, key_groups_of([pa.array(keys)], 16, len(keys)).tolist(), strict=True))
    assert all(owner[r["user"]] == r["key_group"] for r in state.to_pylist())
    with pytest.raises(JobError, match="holds one operator of krishiv's"):
        kp.read_state(str(tmp_path / "cp"), operator="1")


def test_state_show_and_read_state_take_a_chains_state_of_one_row(tmp_path: Path) -> None:
    """A join and the operator after it in one call keep a small state as one row of both tables
    (the key columns its layout records come with its state by key): shown and read, without
    key groups for that row."""
    from krishiv_py.names import CHAIN_FIRST, CHAIN_KEY, CHAIN_ROWS
    from krishiv_py.runtime.state_view import describe_state

    _written_checkpoint(tmp_path / "cp", [f"user{i}" for i in range(10)])
    layout = json.loads((tmp_path / "cp" / "krishiv-key-groups.json").read_text())
    layout.update(operator="krishiv join, then in the same call a top-N", state_keys=[f"{CHAIN_KEY}0"])
    (tmp_path / "cp" / "krishiv-key-groups.json").write_text(json.dumps(layout))
    one_row = pa.table({CHAIN_FIRST: [b"..."], CHAIN_ROWS: pa.array([7], pa.int64())})
    ranges = task_ranges(16, 2)
    current = frozenset(range_name(*r) for r in ranges)
    for lo, hi in ranges:
        KeyGroupStore(str(tmp_path / "cp" / "krishiv-state"), lo, hi, since=0, current=current).save(
            1, ipc_bytes(one_row)
        )
    [op] = describe_state(str(tmp_path / "cp"))["operators"]
    assert (op["keys"], op["rows"], op["largest_key_groups"]) == (None, 2, [])
    state = kp.read_state(str(tmp_path / "cp"))
    assert state.column_names == [CHAIN_FIRST, CHAIN_ROWS] and state.num_rows == 2


def test_a_look_inside_something_that_is_no_checkpoint_is_named(tmp_path: Path) -> None:
    from krishiv_py.cli import main

    with pytest.raises(JobError, match="no checkpoint at"):
        kp.read_state(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(JobError, match="is not a job's checkpoint"):
        kp.read_state(str(tmp_path / "empty"))
    assert main(["state", "show", str(tmp_path / "missing")]) == 1


# --- Spark's own state (the native lowering) ---------------------------------------------------


def test_the_partitions_spark_recorded_are_read_from_the_last_offsets(tmp_path: Path) -> None:
    from krishiv_py.runtime.rescale import recorded_partitions

    layout = CheckpointLayout(str(tmp_path))
    assert recorded_partitions(layout) is None
    (tmp_path / "offsets").mkdir()
    for batch, parts in ((0, 2), (1, 5)):
        meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": str(parts)}}
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n-\n")
    assert recorded_partitions(layout) == 5


def test_a_file_sink_log_gets_the_entry_of_a_micro_batch_that_wrote_nothing(tmp_path: Path) -> None:
    from krishiv_py.sinks import fill_sink_log

    log = tmp_path / "_spark_metadata"
    log.mkdir()
    entries = {b: json.dumps({"path": f"file:///out/part-{b}.parquet", "action": "add"}) for b in range(12)}
    for b in range(8):
        (log / str(b)).write_text(f"v1\n{entries[b]}")
    assert fill_sink_log(str(tmp_path), 8, compact_interval=10)
    assert (log / "8").read_text() == "v1"
    assert not fill_sink_log(str(tmp_path), 8, compact_interval=10)  # there already
    # A compaction's entry holds every file before it.
    assert fill_sink_log(str(tmp_path), 9, compact_interval=10)
    assert (log / "9.compact").read_text().splitlines() == ["v1", *(entries[b] for b in range(8))]
    for b in range(10, 19):
        (log / str(b)).write_text(f"v1\n{entries[b % 12]}")
    assert fill_sink_log(str(tmp_path), 19, compact_interval=10)
    want = ["v1", *(entries[b] for b in range(8)), *(entries[b % 12] for b in range(10, 19))]
    assert (log / "19.compact").read_text().splitlines() == want
    assert not fill_sink_log(str(tmp_path / "elsewhere"), 3)  # no log: not Spark's file sink


@pytest.mark.spark
def test_a_native_job_restarted_on_other_partitions_moves_sparks_state(
    session: kp.Session, tmp_path: Path
) -> None:
    """Spark's own state (RocksDB, a durable profile's) moves with Spark's StreamingCheckpointManager
    before the query starts; the Parquet sink's directory still reads; the results equal an
    uninterrupted run's. State Spark cannot move (its default store's) is a JobError saying so."""
    from krishiv_py.runtime.rescale import PROVIDER, Logs, recorded_partitions, rescale_spark_state

    spark = session.spark
    batches = _batches()
    before = spark.conf.get("spark.sql.shuffle.partitions")
    durable = kp.Session(
        spark, owns_spark=False, state_dir=str(tmp_path / "state"), durability="single-node-durable"
    )

    def run(name: str, plan: list[tuple[int, list[int]]]) -> list[tuple[Any, ...]]:
        stream, sender = durable.memory_stream(SCHEMA, name=name)
        checkpoint, out = tmp_path / name, tmp_path / f"{name}-out"
        for partitions, steps in plan:
            spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
            windows = (
                stream.watermark("t", 1_500)
                .key_by("k")
                .tumbling_window(3_000)
                .agg(kp.count(kp.col("*")).alias("n"))
            )
            job = windows.start(kp.ParquetSink(str(out)), checkpoint_dir=str(checkpoint), lowering="native")
            try:
                for i in steps:
                    sender.send(batches[i])
                    job.process_all_available()
            finally:
                job.stop()
            assert recorded_partitions(CheckpointLayout(str(checkpoint))) == partitions  # ran on them
        return _rows(spark.read.parquet(str(out)).toArrow())

    try:
        rescaled = run("rescaled", [(2, [0, 1, 2]), (5, [3, 4, 5]), (3, [6, 7])])
        whole = run("whole", [(2, list(range(8)))])
        # The default state store's state stays where it is: the restart says so, and runs as asked.
        stream, sender = session.memory_stream(SCHEMA)
        windows = stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")))
        sink, checkpoint = kp.ParquetSink(str(tmp_path / "plain-out")), str(tmp_path / "plain")
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        job = windows.start(sink, checkpoint_dir=checkpoint, lowering="native")
        sender.send(batches[0])
        job.process_all_available()
        job.stop()
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        with pytest.raises(JobError, match=r"Spark moves only RocksDB state .*partitions=2"):
            windows.start(sink, checkpoint_dir=checkpoint, lowering="native")
        # A checkpoint on another file system (hdfs://, s3a://) is read through Spark's Hadoop
        # file system: the same logs, the same refusal.
        uri = CheckpointLayout(f"file://{checkpoint}")
        local_logs, hadoop_logs = Logs.local(CheckpointLayout(checkpoint)), Logs.hadoop(spark, uri)
        rescaled_uri = CheckpointLayout(f"file://{tmp_path / 'rescaled'}")
        for logs in (local_logs, hadoop_logs, Logs.hadoop(spark, rescaled_uri)):
            assert logs.planned_batch() >= logs.committed_batch() >= 0 and logs.holds_spark_state()
        assert hadoop_logs.recorded_partitions() == local_logs.recorded_partitions() == 2
        assert hadoop_logs.recorded_conf(PROVIDER) == local_logs.recorded_conf(PROVIDER)
        with (
            mock.patch.object(CheckpointLayout, "on_this_machine", return_value=None),
            pytest.raises(JobError, match=r"Spark moves only RocksDB state .*partitions=2"),
        ):
            rescale_spark_state(spark, uri, 4)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        windows.start(sink, checkpoint_dir=checkpoint, lowering="native").stop()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(before))
    assert rescaled == whole and len(whole) > 20


def test_a_micro_batch_left_unfinished_is_finished_where_it_was_planned_before_the_state_moves(
    tmp_path: Path,
) -> None:
    from krishiv_py.runtime.rescale import unfinished_before_rescale

    layout = CheckpointLayout(str(tmp_path))
    (tmp_path / "state" / "0").mkdir(parents=True)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch in (0, 1):
        meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "2"}}
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n-\n")
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    spark: Any = None  # (a checkpoint on this machine: its logs are read without Spark)
    assert unfinished_before_rescale(spark, layout, 5, spark_state=True) == 2  # planned on 2, uncommitted
    assert unfinished_before_rescale(spark, layout, 2, spark_state=True) is None  # nothing to move
    assert unfinished_before_rescale(spark, layout, 5, spark_state=False) is None  # krishiv's move as read
    (tmp_path / "commits" / "1").write_text("v1\n{}\n")
    assert unfinished_before_rescale(spark, layout, 5, spark_state=True) is None  # committed: Spark moves it


@pytest.mark.spark
def test_a_look_inside_a_native_checkpoint_reads_sparks_state(session: kp.Session, tmp_path: Path) -> None:
    from krishiv_py.runtime.state_view import describe_state

    stream, sender = session.memory_stream(SCHEMA)
    checkpoint = str(tmp_path / "cp")
    windows = stream.watermark("t", 0).key_by("k").tumbling_window(10).agg(kp.count(kp.col("*")).alias("n"))
    job = windows.start(kp.ParquetSink(str(tmp_path / "out")), checkpoint_dir=checkpoint, lowering="native")
    try:
        sender.send([{"k": "a", "t": 1, "v": 1}, {"k": "b", "t": 2, "v": 1}, {"k": "a", "t": 3, "v": 1}])
        job.process_all_available()
    finally:
        job.stop()
    info = describe_state(checkpoint)
    assert (info["lowering"], info["carrier"]) == ("native", "spark") and info["last_batch"] >= 0
    assert info["watermark_ms"] == 3  # the highest event time, lag 0
    assert info["tasks"] == int(session.spark.conf.get("spark.sql.shuffle.partitions") or 0)
    spark_ops = [op for op in info["operators"] if op["name"].startswith("spark operator")]
    assert spark_ops and all(op["bytes"] > 0 for op in spark_ops)
    state = kp.read_state(checkpoint, operator=spark_ops[0]["name"].rsplit(" ", 1)[1])
    assert {"key", "value"} <= set(state.column_names) and state.num_rows == 2  # one open window per key
    with pytest.raises(JobError, match="has Spark state operators"):
        kp.read_state(checkpoint, operator="7")


@pytest.mark.spark
def test_state_show_names_the_keys_that_receive_most_rows(session: kp.Session, tmp_path: Path) -> None:
    """The skew report counts the rows that arrive per key (each task's busiest keys per
    micro-batch, estimated over a sample of a large one), not the state each key holds."""
    from krishiv_py.cli import main
    from krishiv_py.runtime.state_view import describe_state, format_state

    stream, sender = session.memory_stream(SCHEMA, name="hot_keys")
    checkpoint = str(tmp_path / "cp")
    job = (
        stream.watermark("t", 0)
        .key_by("k")
        .agg(kp.count(kp.col("*")).alias("n"))
        .start(checkpoint_dir=checkpoint, lowering="stateful")
    )
    rng = random.Random(5)
    try:
        for _ in range(3):
            keys = ["hot"] * 3_000 + ["warm"] * 1_000 + [f"k{rng.randrange(2_000)}" for _ in range(2_000)]
            sender.send([{"k": k, "t": 1_000, "v": 1} for k in keys])
            job.process_all_available()
    finally:
        job.stop()
    [op] = describe_state(checkpoint)["operators"]
    named = [h["key"] for h in op["hottest_keys"]]
    assert named[:2] == ["hot", "warm"], op["hottest_keys"]
    hot_rows = op["hottest_keys"][0]["rows"]
    assert 9_000 * 0.8 <= hot_rows <= 9_000 * 1.2  # (estimated from samples)
    assert "busiest keys (rows in, estimated): hot (" in format_state(describe_state(checkpoint))
    assert main(["state", "show", checkpoint]) == 0
