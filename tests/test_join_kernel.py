"""The join kernel against the join reference model, step by step, without Spark.

Each case builds a real plan (``interval_join``, ``join``, ``as_of_join`` on
placeholder streams), takes the kernel spec the planner gives it and the
model of the same node, and drives both through the same steps the way the
Spark job drives the operator: a micro-batch's rows meet the watermark that
held before it, and when the watermark moved, a tick (an empty batch at the
new watermark) sweeps. Per step, the rows out must be the same multiset.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krishiv_py.api.stream import JoinedStream, placeholder
from krishiv_py.model.joins import join_model_for
from krishiv_py.names import BATCH_TS, SEQ
from krishiv_py.plan import nodes as n
from krishiv_py.planner.spark.stateful import join_spec
from krishiv_py.stateful import joins
from krishiv_py.stateful.operator import to_output

LEFT = "k string, t bigint, a bigint"
RIGHT = "k string, t bigint, b bigint"
Step = tuple[str, Any, Any]


def build(
    kind: str, how: Any, *, lateness: int = 0, lags: tuple[int, int] = (0, 0), **options: Any
) -> JoinedStream:
    left = placeholder(LEFT, "left").watermark("t", lags[0])
    right = placeholder(RIGHT, "right").watermark("t", lags[1])
    if kind == "interval":
        joined = left.key_by("k").interval_join(right.key_by("k"), options["between"], how=how)
    elif kind == "as_of":
        joined = left.key_by("k").as_of_join(right.key_by("k"), how=how, max_age_ms=options.get("max_age_ms"))
    else:
        size, slide, *offset = options["window"]
        lw = (
            left.key_by("k").sliding_window(size, slide)
            if slide != size
            else left.key_by("k").tumbling_window(size, offset_ms=offset[0] if offset else 0)
        )
        rw = (
            right.key_by("k").sliding_window(size, slide)
            if slide != size
            else right.key_by("k").tumbling_window(size, offset_ms=offset[0] if offset else 0)
        )
        joined = lw.join(rw, how=how)
    if lateness:
        joined = joined.allowed_lateness(lateness)
    if options.get("retracting") or (lateness and (how != "inner" or kind == "as_of")):
        joined = joined.accumulation("retracting")
    if options.get("ttl"):
        import krishiv_py as kp

        joined = joined.with_state_ttl(kp.StateTtlConfig(ttl_ms=options["ttl"]))
    return joined


def batch_of(spec: joins.JoinSpec, side: str, rows: list[dict[str, Any]], seq0: int) -> pa.Table:
    schema = spec.row_schema
    right_names = {"t": "t_right", "b": "b"}  # the right side's columns in the joined row
    cols: dict[str, list[Any]] = {f.name: [] for f in schema}
    ts: list[int | None] = []
    for row in rows:
        cols[joins.SIDE].append(side)
        cols["k"].append(row["k"])
        for c in spec.left:
            cols[c].append(row.get(c) if side == "left" else None)
        for c in spec.right:
            own = {v: k for k, v in right_names.items()}[c]
            cols[c].append(row.get(own) if side == "right" else None)
        ts.append(None if row["t"] is None else row["t"] * 1000)
    table = pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema})
    table = table.append_column(BATCH_TS, pa.array(ts, pa.int64()))
    return table.append_column(SEQ, pa.array(range(seq0, seq0 + len(rows)), pa.int64()))


def rows_of(spec: joins.JoinSpec, node: n.Join, results: pa.Table) -> list[tuple[Any, ...]]:
    """Kernel result rows as the model writes them (window bounds in epoch ms)."""
    out = to_output(results, n.schema_of(node).to_arrow())
    rows = []
    for row in out.to_pylist():
        for c in ("window_start", "window_end"):
            if c in row:
                row[c] = int(row[c].timestamp() * 1000)
        rows.append(tuple(sorted(row.items())))
    return rows


def model_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(sorted(r.items())) for r in rows]


def run_both(joined: JoinedStream, steps: list[Step]) -> None:
    node = joined.plan
    assert isinstance(node, n.Join)
    n.check_joins_complete(node)
    spec = join_spec(node, shift_ms=0).kernel.spec
    model = join_model_for(node)
    state: pa.Table | None = None
    seq = 0
    late_kernel = 0
    for i, (op, side, arg) in enumerate(steps):
        before = model.watermark_ms
        if op == "send":
            expected = model.send(arg, side=side)
            batch = batch_of(spec, side, arg, seq)
            seq += len(arg)
        elif op == "advance":
            expected = model.advance_watermark(arg, side=side)
            batch = batch_of(spec, side, [], seq)
        else:
            expected = model.close(side=side)
            batch = batch_of(spec, side, [], seq)
        after = model.watermark_ms
        state, out = joins.step(spec, state, batch, before, 0)
        got = rows_of(spec, node, out.results)
        late_kernel += len(out.very_late) + len(out.invalid)
        if after is not None:
            state, tick = joins.step(spec, state, batch.slice(0, 0), after, 0)
            got += rows_of(spec, node, tick.results)
        assert Counter(got) == Counter(model_rows(expected)), f"step {i} ({op} {side}): {steps[: i + 1]}"
    assert late_kernel == len(model.late_events)


def random_steps(rng: random.Random, *, count: int, spread: int) -> list[Step]:
    steps: list[Step] = []
    clock = 0
    for _ in range(count):
        side = rng.choice(["left", "right"])
        roll = rng.random()
        if roll < 0.75:
            rows = []
            for _ in range(rng.randint(1, 4)):
                clock += rng.randint(0, 4)
                t: int | None = clock - rng.randint(0, spread) if rng.random() < 0.4 else clock
                if rng.random() < 0.03:
                    t = None
                value = rng.randint(0, 9)
                key = rng.choice(["a", "b", "a", "a", None])
                rows.append({"k": key, "t": t, "a" if side == "left" else "b": value})
            steps.append(("send", side, rows))
        elif roll < 0.95:
            steps.append(("advance", side, clock + rng.randint(-3, 3)))
        else:
            steps.append(("advance", None, clock))
    steps.append(("close", None, None))
    return steps


CASES = (
    [
        ("interval", how, lateness, {"between": between})
        for how in ("inner", "left", "right", "full")
        for lateness in (0, 6)
        for between in ((-3, 2), (0, 0), (1, 5))
    ]
    + [
        ("window", how, lateness, {"window": window})
        for how in ("inner", "left", "right", "full", "semi", "anti")
        for lateness in (0, 6)
        for window in ((5, 5), (6, 2))
    ]
    + [("window", how, 6, {"window": (5, 5, 2)}) for how in ("full", "anti")]  # offset 2
    + [
        ("as_of", how, lateness, {"max_age_ms": age})
        for how in ("inner", "left")
        for lateness in (0, 6)
        for age in (None, 4)
    ]
)


#: Random streams per case (many cases): ``nox -s deep`` (``KERNEL_EXAMPLES=600``) tries 120.
JOIN_EXAMPLES = max(int(os.environ.get("KERNEL_EXAMPLES", "30")) // 5, 1)


@pytest.mark.parametrize(("kind", "how", "lateness", "options"), CASES, ids=str)
@settings(max_examples=JOIN_EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_kernel_agrees_with_the_model(
    kind: str, how: str, lateness: int, options: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    lags = (rng.choice([0, 2]), rng.choice([0, 3]))
    joined = build(kind, how, lateness=lateness, lags=lags, **options)
    run_both(joined, random_steps(rng, count=rng.randint(3, 14), spread=12))


@pytest.mark.parametrize("kind", ["interval", "window", "as_of"])
@settings(max_examples=JOIN_EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_kernel_agrees_with_the_model_under_a_state_ttl(kind: str, seed: int) -> None:
    rng = random.Random(seed)
    options: dict[str, Any] = {"interval": {"between": (-4, 4)}, "window": {"window": (5, 5)}, "as_of": {}}[
        kind
    ]
    how = {"interval": "full", "window": "left", "as_of": "left"}[kind]
    joined = build(kind, how, lateness=6, ttl=rng.choice([3, 8]), **options)
    run_both(joined, random_steps(rng, count=rng.randint(3, 14), spread=12))


def test_the_kernel_keeps_state_bounded_by_the_watermark() -> None:
    """A long run with a moving watermark: the state holds only what a future row can still meet."""
    joined = build("interval", "full", lateness=10, between=(-5, 5))
    node = joined.plan
    assert isinstance(node, n.Join)
    spec = join_spec(node, shift_ms=0).kernel.spec
    state: pa.Table | None = None
    sizes = []
    for i in range(200):
        t = i * 10
        batch = pa.concat_tables(
            [
                batch_of(spec, "left", [{"k": "a", "t": t, "a": 1}], 2 * i),
                batch_of(spec, "right", [{"k": "a", "t": t + 3, "b": 2}], 2 * i + 1),
            ]
        )
        state, _ = joins.step(spec, state, batch, max(t - 1, 0), 0)
        sizes.append(state.num_rows)
    assert max(sizes[20:]) <= 6, sizes  # rows within lateness + bound of the watermark only
    assert state is not None and joins.next_due(spec, state) > 0


def late_steps(late_side: str, late_row: dict[str, Any], first: list[Step]) -> list[Step]:
    return [*first, ("advance", None, 6), ("send", late_side, [late_row]), ("close", None, None)]


@pytest.mark.parametrize(
    ("kind", "how", "options", "steps"),
    [
        # A late right row reaches a window that fired: the left row's result changes.
        *(
            (
                "window",
                how,
                {"window": (5, 5)},
                late_steps(
                    "right",
                    {"k": "a", "t": 2, "b": 7},
                    [
                        ("send", "left", [{"k": "a", "t": 1, "a": 1}]),
                    ],
                ),
            )
            for how in ("inner", "left", "full", "semi", "anti")
        ),
        # ... and a late left row one whose right rows fired alone.
        *(
            (
                "window",
                how,
                {"window": (5, 5)},
                late_steps(
                    "left",
                    {"k": "a", "t": 3, "a": 2},
                    [
                        ("send", "right", [{"k": "a", "t": 1, "b": 1}]),
                    ],
                ),
            )
            for how in ("right", "full", "semi", "anti")
        ),
        # A padded interval row meets a late partner.
        *(
            (
                "interval",
                how,
                {"between": (0, 2)},
                late_steps(
                    "right",
                    {"k": "a", "t": 2, "b": 7},
                    [
                        ("send", "left", [{"k": "a", "t": 1, "a": 1}]),
                    ],
                ),
            )
            for how in ("left", "full")
        ),
        # A late right row becomes the row in force for an emitted as-of row.
        *(
            (
                "as_of",
                how,
                {},
                late_steps(
                    "right",
                    {"k": "a", "t": 3, "b": 7},
                    [
                        ("send", "right", [{"k": "a", "t": 0, "b": 1}]),
                        ("send", "left", [{"k": "a", "t": 5, "a": 1}, {"k": "b", "t": 5, "a": 2}]),
                    ],
                ),
            )
            for how in ("inner", "left")
        ),
    ],
    ids=str,
)
def test_late_rows_correct_what_was_emitted(
    kind: str, how: str, options: dict[str, Any], steps: list[Step]
) -> None:
    joined = build(kind, how, lateness=6, retracting=True, **options)
    node = joined.plan
    assert isinstance(node, n.Join)
    model = join_model_for(node)
    for op, side, arg in steps:
        if op == "send":
            model.send(arg, side=side)
        elif op == "advance":
            model.advance_watermark(arg, side=side)
        else:
            model.close(side=side)
    assert model.metrics["mildly_late_events"] == 1  # the scenario does what it says
    run_both(joined, steps)


@pytest.mark.parametrize("keys", [("k",), ("k", "j")])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_an_interval_joins_pairs_are_every_pair_with_a_new_row_whatever_the_key(
    keys: tuple[str, ...], data: st.DataObject
) -> None:
    """A float key (NaN, -0.0 and 0.0, null) and two keys: the pairs the kernel finds for the rows
    marked new, against every pair of rows counted one by one."""
    n_rows = data.draw(st.integers(0, 30))
    floats = st.sampled_from([float("nan"), -0.0, 0.0, 1.5, None])
    k = data.draw(st.lists(floats, min_size=n_rows, max_size=n_rows))
    j = data.draw(st.lists(st.sampled_from([1, 2, None]), min_size=n_rows, max_size=n_rows))
    left = data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    marked = data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows))
    ts = data.draw(st.lists(st.integers(0, 20), min_size=n_rows, max_size=n_rows))
    spec = joins.JoinSpec(
        kind="interval",
        how="inner",
        keys=keys,
        left=("a",),
        right=("b",),
        key_types=(pa.float64(), pa.int64())[: len(keys)],
        left_types=(pa.int64(),),
        right_types=(pa.int64(),),
        between=(-3, 5),
    )
    table = pa.table(
        {
            joins.SIDE: ["left" if x else "right" for x in left],
            "k": pa.array(k, pa.float64()),
            "j": pa.array(j, pa.int64()),
            BATCH_TS: [t * 1000 for t in ts],
        }
    )

    def key(i: int) -> tuple[Any, ...] | None:
        values = [k[i], j[i]][: len(keys)]
        out: list[Any] = []
        for v in values:
            if v is None:
                return None
            out.append("nan" if v != v else v + 0.0)  # (one NaN; -0.0 as 0.0)
        return tuple(out)

    expected = sorted(
        (a, b)
        for a in range(n_rows)
        for b in range(n_rows)
        if left[a]
        and not left[b]
        and (marked[a] or marked[b])
        and key(a) is not None
        and key(a) == key(b)
        and ts[a] - 3 <= ts[b] <= ts[a] + 5
    )
    li, ri = joins._pairs_of(spec, table, np.array(marked, bool))
    assert sorted(zip(li.tolist(), ri.tolist(), strict=True)) == expected
