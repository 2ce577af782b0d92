"""An aggregation per key without a window over a changelog (rows that may be retractions).

A retraction withdraws one earlier emitted row of equal values. The
kernel's current row per key must, after every micro-batch, be what Spark
SQL computes over the key's live rows: the property test recomputes it
from the live multiset, event by event, with a small oracle of its own;
the composition model checks the Nexmark q4 shape (an average over a
running maximum per auction). The unit tests pin the edge cases: a key
that loses its last row, a retraction of a row never emitted, NaN and
infinities in a float sum, an integer sum beyond a bigint.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krishiv_py.model.compose import AggOf, ComposedModel, Source
from krishiv_py.model.reference import AggSpec as ModelAgg
from krishiv_py.names import BATCH_TS, KEYED_OUT_TS, SEQ, keyed_output
from krishiv_py.stateful.aggregates import AggSpec
from krishiv_py.stateful.keyed_agg import KeyedAggKernel

Row = dict[str, Any]
NAN, INF = float("nan"), float("inf")
I64 = pa.int64()
F64 = pa.float64()
TYPES: dict[str, pa.DataType] = {"k": pa.string(), "i": I64, "b": I64, "f": F64}

#: (name, func, column): every aggregate a retraction can withdraw, on ints, big ints and floats.
AGGS: tuple[tuple[str, str, str | None], ...] = (
    ("n", "count", None),
    ("ni", "count", "i"),
    ("si", "sum", "i"),
    ("ai", "avg", "i"),
    ("lo_i", "min", "i"),
    ("hi_i", "max", "i"),
    ("di", "count_distinct", "i"),
    ("sb", "sum", "b"),
    ("nf", "count", "f"),
    ("sf", "sum", "f"),
    ("af", "avg", "f"),
    ("lo_f", "min", "f"),
    ("hi_f", "max", "f"),
    ("df", "count_distinct", "f"),
)
OUT_TYPES: dict[str, pa.DataType] = {"count": I64, "count_distinct": I64, "avg": F64}


def _spec(name: str, func: str, column: str | None) -> AggSpec:
    in_type = None if column is None else TYPES[column]
    out_type = OUT_TYPES.get(func) or in_type
    assert out_type is not None
    return AggSpec(name=name, func=func, column=column, out_type=out_type, in_type=in_type)


def _kernel(aggs: Sequence[tuple[str, str, str | None]] = AGGS, *, retracting: bool = True) -> KeyedAggKernel:
    return KeyedAggKernel(keys=("k",), aggs=tuple(_spec(*a) for a in aggs), retracting=retracting)


def _batch(changes: Sequence[tuple[str, Row]], seq: int) -> pa.Table:
    """A micro-batch of ``(kind, row)`` changes (a column missing from a row is null)."""
    table = {c: pa.array([r.get(c) for _, r in changes], t) for c, t in TYPES.items()}
    table["kind"] = pa.array([kind for kind, _ in changes], pa.string())
    table[BATCH_TS] = pa.array([1_000] * len(changes), I64)
    table[SEQ] = pa.array(range(seq, seq + len(changes)), I64)
    return pa.table(table)


def _emits(*rows: Row) -> list[tuple[str, Row]]:
    return [("emit", r) for r in rows]


def _retracts(*rows: Row) -> list[tuple[str, Row]]:
    return [("retract", r) for r in rows]


# --- the oracle: Spark SQL over a key's live rows, one row at a time -------------------------


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _spark_order(v: Any) -> tuple[int, Any]:
    """Spark's order of numbers: NaN above everything."""
    return (1, 0) if _is_nan(v) else (0, v)


def _distinct(v: Any) -> Any:
    """Spark's distinct values: one NaN, -0.0 as 0.0."""
    return "NaN" if _is_nan(v) else v + 0 if isinstance(v, float) else v


def _oracle(func: str, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if func == "count":
        return len(present)
    if func == "count_distinct":
        return len({_distinct(v) for v in present})
    if not present:
        return None
    if func == "min":
        return min(present, key=_spark_order)
    if func == "max":
        return max(present, key=_spark_order)
    total = sum(present)
    if func == "avg":
        return total / len(present)
    if isinstance(total, int) and not -(2**63) <= total < 2**63:
        return None  # an integer sum beyond a bigint has no value
    return total


def _expected(live: dict[Any, list[Row]]) -> dict[Any, tuple[Any, ...]]:
    out = {}
    for key, rows in live.items():
        if rows:
            out[key] = tuple(
                len(rows) if column is None else _oracle(func, [r[column] for r in rows])
                for _, func, column in AGGS
            )
    return out


def _same_value(a: Any, b: Any) -> bool:
    return (_is_nan(a) and _is_nan(b)) or (a == b and type(a) is type(b))


def _same_values(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))


def _apply_output(current: dict[Any, tuple[Any, ...]], results: list[Row]) -> None:
    """Replay the kernel's changes of one batch on the current row of each key, checking each."""
    names = [name for name, _, _ in AGGS]
    seen: Counter[tuple[Any, str]] = Counter()
    for r in results:
        key, values = r["k"], tuple(r[n] for n in names)
        seen[(key, r["kind"])] += 1
        if r["kind"] == "retract":
            assert key in current and _same_values(current.pop(key), values), r
        else:
            assert key not in current, r
            current[key] = values
    assert all(n == 1 for n in seen.values()), seen  # one retraction and one emit per key at most


# --- random changelogs -------------------------------------------------------------------------

ROW = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["a", "b", None]),
        "i": st.one_of(st.none(), st.integers(-3, 3)),
        "b": st.one_of(st.none(), st.sampled_from([0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63)])),
        "f": st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.5, -1.5, 2.0, NAN, INF, -INF])),
    }
)
#: One change: a retraction (of the live row picked) or an emit of the row; a batch ends after it or not.
CHANGE = st.tuples(st.booleans(), ROW, st.integers(0, 10_000), st.booleans())


def _changelog(
    drawn: list[tuple[bool, Row, int, bool]],
) -> list[list[tuple[str, Row]]]:
    """Micro-batches of a valid changelog: a retraction withdraws a row emitted before it."""
    batches: list[list[tuple[str, Row]]] = [[]]
    emitted: list[Row] = []
    for withdraw, row, pick, cut in drawn:
        if withdraw and emitted:
            batches[-1].append(("retract", emitted.pop(pick % len(emitted))))
        else:
            emitted.append(row)
            batches[-1].append(("emit", row))
        if cut:
            batches.append([])
    return [b for b in batches if b]


@settings(max_examples=300, deadline=None)
@given(drawn=st.lists(CHANGE, min_size=1, max_size=40))
def test_each_keys_row_is_spark_sql_over_its_live_rows_after_every_batch(
    drawn: list[tuple[bool, Row, int, bool]],
) -> None:
    kernel = _kernel()
    state: pa.Table | None = None
    live: dict[Any, list[Row]] = defaultdict(list)
    current: dict[Any, tuple[Any, ...]] = {}
    seq = 0
    for changes in _changelog(drawn):
        for kind, row in changes:
            if kind == "emit":
                live[row["k"]].append(row)
            else:
                live[row["k"]].remove(row)  # the very row emitted (an equal one would do as well)
        state, out = kernel.step(state, _batch(changes, seq), None, 0)
        seq += len(changes)
        _apply_output(current, out.results.to_pylist())
        expected = _expected(live)
        assert current.keys() == expected.keys()
        for key, values in expected.items():
            assert _same_values(current[key], values), (key, current[key], values)
        assert out.arithmetic_errors == 0
        assert kernel.state_rows(state) == len(expected)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(ROW, max_size=6), min_size=1, max_size=5))
def test_over_emits_only_the_retracting_kernel_gives_the_plain_kernels_changelog(
    batches: list[list[Row]],
) -> None:
    kernels = {False: _kernel(retracting=False), True: _kernel()}
    states: dict[bool, pa.Table | None] = {False: None, True: None}
    seq = 0
    for rows in batches:
        got = {}
        for retracting, kernel in kernels.items():
            batch = _batch(_emits(*rows), seq)
            if not retracting:
                batch = batch.drop_columns(["kind"])
            states[retracting], out = kernel.step(states[retracting], batch, None, 0)
            got[retracting] = out.results
        seq += len(rows)
        changed, plain_rows = (got[r].to_pylist() for r in (True, False))
        assert len(changed) == len(plain_rows)
        for a, b in zip(changed, plain_rows, strict=True):
            assert a.keys() == b.keys() and _same_values(tuple(a.values()), tuple(b.values())), (a, b)
        assert got[True].schema == got[False].schema


# --- Nexmark q4's shape, against the composition model ----------------------------------------

BID = st.fixed_dictionaries(
    {
        "auction": st.integers(0, 4),
        "cat": st.sampled_from([1, 2]),
        "t": st.integers(0, 30),
        "price": st.integers(1, 9),
    }
)
Q4: tuple[tuple[str, str, str | None], ...] = (
    ("mean", "avg", "final"),
    ("n", "count", None),
    ("low", "min", "final"),
    ("high", "max", "final"),
    ("total", "sum", "final"),
    ("prices", "count_distinct", "final"),
)


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.lists(BID, max_size=5), min_size=1, max_size=6))
def test_an_average_over_a_running_maximum_per_auction_matches_the_model(steps: list[list[Row]]) -> None:
    """``AVG(final) GROUP BY category`` over ``MAX(price) GROUP BY category, auction`` (Nexmark q4)."""
    bids = Source("bids", "t", ("auction", "cat", "t", "price"))
    finals = AggOf(
        bids, keys=("cat", "auction"), aggregates=[ModelAgg(name="final", func="max", column="price")]
    )
    outer = [ModelAgg(name=n, func=f, column=c) for n, f, c in Q4]  # type: ignore[arg-type]
    model = ComposedModel(AggOf(finals, keys=("cat",), aggregates=outer))
    kernel = KeyedAggKernel(
        keys=("cat",),
        aggs=tuple(
            AggSpec(
                name=n, func=f, column=c, out_type=OUT_TYPES.get(f, I64), in_type=None if c is None else I64
            )
            for n, f, c in Q4
        ),
        retracting=True,
    )
    state: pa.Table | None = None
    seen = seq = 0
    for rows in steps:
        before = model.watermark_of(finals)
        expected = model.send(rows, source="bids")
        changes = model.changelog(finals)[seen:]
        seen += len(changes)
        batch = pa.table(
            {
                "cat": pa.array([c.row["cat"] for c in changes], I64),
                "auction": pa.array([c.row["auction"] for c in changes], I64),
                "final": pa.array([c.row["final"] for c in changes], I64),
                "kind": pa.array([c.kind for c in changes], pa.string()),
                BATCH_TS: pa.array([c.ts_ms * 1000 for c in changes], I64),
                SEQ: pa.array(range(seq, seq + len(changes)), I64),
            }
        )
        seq += len(changes)
        state, out = kernel.step(state, batch, before, 0)
        assert _rounded(out.results.to_pylist()) == _rounded(expected)


def _rounded(rows: list[Row]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(round(v, 9) if isinstance(v, float) else v for v in r.values()) for r in rows)


# --- transcripts of the edge cases -------------------------------------------------------------


def _run(kernel: KeyedAggKernel, *batches: list[tuple[str, Row]]) -> tuple[pa.Table, list[list[Row]], int]:
    state: pa.Table | None = None
    outputs, errors, seq = [], 0, 0
    for changes in batches:
        state, out = kernel.step(state, _batch(changes, seq), None, 0)
        seq += len(changes)
        outputs.append(out.results.to_pylist())
        errors += out.arithmetic_errors
    assert state is not None
    return state, outputs, errors


SMALL = (("n", "count", None), ("s", "sum", "i"), ("m", "avg", "i"), ("lo", "min", "i"), ("hi", "max", "i"))


def test_a_withdrawn_row_leaves_every_aggregate_and_an_equal_row_keeps_the_extreme() -> None:
    _, outputs, errors = _run(
        _kernel(SMALL),
        _emits({"k": "a", "i": 9}, {"k": "a", "i": 9}, {"k": "a", "i": 2}),
        _retracts({"k": "a", "i": 9}),
        _retracts({"k": "a", "i": 9}),
    )
    assert outputs == [
        [{"k": "a", "n": 3, "s": 20, "m": 20 / 3, "lo": 2, "hi": 9, "kind": "emit"}],
        [
            {"k": "a", "n": 3, "s": 20, "m": 20 / 3, "lo": 2, "hi": 9, "kind": "retract"},
            {"k": "a", "n": 2, "s": 11, "m": 5.5, "lo": 2, "hi": 9, "kind": "emit"},
        ],
        [
            {"k": "a", "n": 2, "s": 11, "m": 5.5, "lo": 2, "hi": 9, "kind": "retract"},
            {"k": "a", "n": 1, "s": 2, "m": 2.0, "lo": 2, "hi": 2, "kind": "emit"},
        ],
    ]
    assert errors == 0


def test_a_key_left_without_rows_retracts_its_row_and_leaves_the_state() -> None:
    state, outputs, _ = _run(
        _kernel(SMALL),
        _emits({"k": "a", "i": 1}, {"k": None, "i": 4}),
        _retracts({"k": "a", "i": 1}),
    )
    assert outputs[1] == [{"k": "a", "n": 1, "s": 1, "m": 1.0, "lo": 1, "hi": 1, "kind": "retract"}]
    assert state.column("k").to_pylist() == [None]
    state, outputs, _ = _run(
        _kernel(SMALL), _emits({"k": "a", "i": 1}), _retracts({"k": "a", "i": 1}) + _emits({"k": "a", "i": 1})
    )
    assert outputs[1] == [] and state.num_rows == 1  # withdrawn and sent again: no change


def test_an_emit_and_its_retraction_in_one_batch_change_nothing_whatever_their_order() -> None:
    _, outputs, errors = _run(
        _kernel(SMALL),
        _emits({"k": "a", "i": 1}),
        _retracts({"k": "b", "i": 5})
        + _emits({"k": "b", "i": 5}, {"k": "b", "i": 5}, {"k": "a", "i": 3})
        + _retracts({"k": "a", "i": 3}),
    )
    assert outputs[1] == [{"k": "b", "n": 1, "s": 5, "m": 5.0, "lo": 5, "hi": 5, "kind": "emit"}]
    assert errors == 0


def test_a_retraction_of_a_row_never_emitted_is_dropped_and_counted() -> None:
    state, outputs, errors = _run(
        _kernel(SMALL),
        _emits({"k": "a", "i": 1}, {"k": "a", "i": None}),
        _retracts({"k": "z", "i": 1}),  # a key never seen
        _retracts({"k": "a", "i": 7}),  # a value no live row of the key has (min/max keep the values)
        _retracts({"k": "a", "i": None}, {"k": "a", "i": None}, {"k": "a", "i": None}),  # 3 of 2 live rows
    )
    assert outputs[1] == outputs[2] == []
    assert outputs[3] == [{"k": "a", "n": 2, "s": 1, "m": 1.0, "lo": 1, "hi": 1, "kind": "retract"}]
    assert errors == 3
    assert state.num_rows == 0


def test_a_sums_non_null_count_catches_a_retraction_without_a_value_to_withdraw() -> None:
    """No min/max tracks the column here: its non-null count is what a retraction is checked by."""
    _, outputs, errors = _run(
        _kernel((("s", "sum", "i"),)),
        _emits({"k": "a", "i": None}),
        _retracts({"k": "a", "i": 4}),
        _emits({"k": "a", "i": 2}),
    )
    assert outputs == [[{"k": "a", "s": None, "kind": "emit"}], [], _changed({"s": None}, {"s": 2})]
    assert errors == 1


def _changed(old: Row, new: Row) -> list[Row]:
    return [{"k": "a", **old, "kind": "retract"}, {"k": "a", **new, "kind": "emit"}]


def test_nan_and_infinities_withdraw_from_a_float_sum_and_its_extremes() -> None:
    aggs = (("s", "sum", "f"), ("m", "avg", "f"), ("hi", "max", "f"), ("lo", "min", "f"))
    _, outputs, errors = _run(
        _kernel(aggs),
        _emits({"k": "a", "f": 1.5}, {"k": "a", "f": NAN}, {"k": "a", "f": INF}, {"k": "a", "f": -INF}),
        _retracts({"k": "a", "f": NAN}),
        _retracts({"k": "a", "f": -INF}),
        _retracts({"k": "a", "f": INF}),
    )
    current = [rows[-1] for rows in outputs]
    assert [(r["s"], r["m"], r["hi"], r["lo"]) for r in current][1:] == [
        (pytest.approx(NAN, nan_ok=True), pytest.approx(NAN, nan_ok=True), INF, -INF),
        (INF, INF, INF, 1.5),
        (1.5, 1.5, 1.5, 1.5),
    ]
    assert math.isnan(current[0]["s"]) and math.isnan(current[0]["hi"]) and current[0]["lo"] == -INF
    assert errors == 0


def test_an_integer_sum_beyond_a_bigint_has_a_value_again_once_a_row_is_withdrawn() -> None:
    big = 2**63 - 1
    _, outputs, _ = _run(
        _kernel((("s", "sum", "b"),)),
        _emits({"k": "a", "b": big}, {"k": "a", "b": big}),
        _retracts({"k": "a", "b": big}),
    )
    assert outputs == [[{"k": "a", "s": None, "kind": "emit"}], _changed({"s": None}, {"s": big})]


def test_first_and_last_cannot_take_a_retracting_input() -> None:
    with pytest.raises(ValueError, match=r"first\(v\).*withdrawn"):
        KeyedAggKernel(
            keys=("k",), aggs=(AggSpec(name="x", func="first", column="v", out_type=I64),), retracting=True
        )
    KeyedAggKernel(keys=("k",), aggs=(AggSpec(name="x", func="last", column="v", out_type=I64),))


def test_a_kernel_built_without_retracting_refuses_retractions_and_any_kind_is_emit_or_retract() -> None:
    plain = _kernel(SMALL, retracting=False)
    _, out = plain.step(None, _batch(_emits({"k": "a", "i": 1}), 0), None, 0)
    assert out.emitted == 1  # a kind column of emits only is fine
    with pytest.raises(ValueError, match="retracting=False"):
        plain.step(None, _batch(_retracts({"k": "a", "i": 1}), 0), None, 0)
    with pytest.raises(ValueError, match="'emit' or 'retract'"):
        _kernel(SMALL).step(None, _batch([("update", {"k": "a"})], 0), None, 0)
    assert "retracting input" in _kernel(SMALL).describe()


def test_a_retracting_kernel_without_a_kind_column_takes_every_row_as_an_emit() -> None:
    state, out = _kernel(SMALL).step(
        None, _batch(_emits({"k": "a", "i": 3}), 0).drop_columns(["kind"]), None, 0
    )
    assert out.results.to_pylist() == [{"k": "a", "n": 1, "s": 3, "m": 3.0, "lo": 3, "hi": 3, "kind": "emit"}]
    kept, out = _kernel(SMALL).step(state, _batch([], 1), None, 0)
    assert out.results.num_rows == 0 and kept.equals(state)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["emit", "retract"]), st.sampled_from(["a", "b", None])), max_size=8
        ),
        min_size=1,
        max_size=6,
    )
)
def test_retractions_beyond_a_keys_live_rows_are_dropped_and_counted(
    batches: list[list[tuple[str, Any]]],
) -> None:
    """Any kinds in any order: a batch nets per key, and what would leave fewer than no rows is counted."""
    kernel = _kernel((("n", "count", None),))
    state: pa.Table | None = None
    live: Counter[Any] = Counter()
    seq = 0
    for changes in batches:
        state, out = kernel.step(state, _batch([(kind, {"k": k}) for kind, k in changes], seq), None, 0)
        seq += len(changes)
        dropped = 0
        for key in {k for _, k in changes}:
            net = live[key] + sum(1 if kind == "emit" else -1 for kind, k in changes if k == key)
            dropped += max(-net, 0)
            live[key] = max(net, 0)
        assert out.arithmetic_errors == dropped
        held = {r["k"]: (r["__kp_live"], r[keyed_output(0)]) for r in state.to_pylist()}
        assert held == {k: (n, n) for k, n in live.items() if n}


def test_changes_carry_the_event_time_of_the_row_that_made_them() -> None:
    """With ``event_times``: an emit at the latest time among its key's rows of the batch
    (whatever their order), a retraction at the time of the emit it withdraws."""
    kernel = KeyedAggKernel(
        keys=("k",),
        aggs=(AggSpec(name="n", func="count", column=None, out_type=pa.int64()),),
        event_times=True,
    )

    def batch(rows: list[tuple[str, int]], seq: int) -> pa.Table:
        return pa.table(
            {
                "k": [r[0] for r in rows],
                BATCH_TS: pa.array([r[1] * 1000 for r in rows], pa.int64()),
                SEQ: pa.array(range(seq, seq + len(rows)), pa.int64()),
            }
        )

    def changes(out: Any) -> list[tuple[Any, ...]]:
        return [(r["k"], r["n"], r["kind"], r[BATCH_TS] // 1000) for r in out.results.to_pylist()]

    state, out = kernel.step(None, batch([("a", 9), ("a", 4), ("b", 2)], 0), None, 0)
    assert changes(out) == [("a", 2, "emit", 9), ("b", 1, "emit", 2)]
    state, out = kernel.step(state, batch([("b", 1)], 3), 5, 0)
    assert changes(out) == [("b", 1, "retract", 2), ("b", 2, "emit", 1)]
    state, out = kernel.step(state, batch([("a", 7)], 4), 5, 0)
    assert changes(out) == [("a", 2, "retract", 9), ("a", 3, "emit", 7)]
    assert sorted(
        zip(state.column("k").to_pylist(), state.column(KEYED_OUT_TS).to_pylist(), strict=True)
    ) == [
        ("a", 7_000),
        ("b", 1_000),
    ]
