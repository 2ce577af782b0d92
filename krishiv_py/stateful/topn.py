"""Window top-N over results that are corrected: the driver's step, over Arrow tables.

The stateful operator may fire a window again (allowed lateness, early
triggers), so its top-N changes after it was shown. :func:`step` keeps the
current value of every result (its identity: the window's keys,
``window_start`` and ``window_end``; a ``retract`` row removes it), ranks
again each window (and top-N keys) whose results changed in the micro-batch
— through ``rank``, the same Spark ranking the other lowerings run — and
emits the difference: a row that left the top, or changed, is retracted; a
row that entered it, or changed, is emitted. The rules are those of
:class:`krishiv_py.testing.TopNModel`. A window's state is dropped once the
watermark passes its end plus the window's allowed lateness.

Examples
--------
>>> import pyarrow as pa
>>> spec = TopNSpec(identity=("k", "window_start", "window_end"), group=("window_start", "window_end"),
...                 lateness_ms=0)
>>> def rank(rows):  # the top 1 by n
...     best = max(rows.column("n").to_pylist())
...     return rows.filter(pa.compute.equal(rows.column("n"), best))
>>> batch = pa.table({"k": ["a", "b"], "window_start": [0, 0], "window_end": [10, 10], "n": [2, 3],
...                   "kind": ["emit", "emit"]})
>>> state, out = step(spec, None, batch, 10, rank)
>>> out.to_pylist()
[{'k': 'b', 'window_start': 0, 'window_end': 10, 'n': 3, 'kind': 'emit'}]
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from krishiv_py.stateful.cascade import upsert_versions
from krishiv_py.stateful.grouping import group_ids

__all__ = ["TopNSpec", "TopNState", "step"]

_KIND = "kind"


@attrs.frozen(kw_only=True)
class TopNSpec:
    #: The columns that name one result: the window's keys, window_start, window_end.
    identity: tuple[str, ...]
    #: The columns of one ranking: window_start, window_end and the top-N keys.
    group: tuple[str, ...]
    lateness_ms: int


@attrs.frozen
class TopNState:
    #: The current value of every result of a window still open for corrections.
    live: pa.Table
    #: The rows shown as the top of each window.
    shown: pa.Table


def step(
    spec: TopNSpec,
    state: TopNState | None,
    results: pa.Table,
    watermark_ms: int | None,
    rank: Callable[[pa.Table], pa.Table],
) -> tuple[TopNState, pa.Table]:
    """Apply one micro-batch's ``results`` (with ``kind``); the retractions and emits of the top-N."""
    values = results.drop_columns([_KIND])
    if state is None:
        state = TopNState(values.slice(0, 0), values.slice(0, 0))
    live, shown = state.live, state.shown
    out = _kinded(values.slice(0, 0), "emit")
    if results.num_rows:
        retract = pc.equal(results.column(_KIND), pa.scalar("retract")).to_numpy(zero_copy_only=False)
        live = upsert_versions(live, values, np.asarray(retract, bool), spec.identity)
        touched_live = _in_groups(spec, live, values)
        touched_shown = _in_groups(spec, shown, values)
        top = rank(live.filter(pa.array(touched_live))).select(live.column_names).cast(live.schema)
        old = shown.filter(pa.array(touched_shown))
        left, entered = _difference(old, top), _difference(top, old)
        out = pa.concat_tables(
            [_kinded(old.filter(pa.array(left)), "retract"), _kinded(top.filter(pa.array(entered)), "emit")]
        )
        shown = pa.concat_tables([shown.filter(pa.array(~touched_shown)), top.select(shown.column_names)])
    if watermark_ms is not None:
        live = _open(spec, live, watermark_ms)
        shown = _open(spec, shown, watermark_ms)
    return TopNState(live, shown), out


def _in_groups(spec: TopNSpec, table: pa.Table, changed: pa.Table) -> np.ndarray:
    """Which rows of ``table`` are in a ranking that ``changed`` touches."""
    if not table.num_rows:
        return np.zeros(0, bool)
    both = pa.concat_tables([changed.select(list(spec.group)), table.select(list(spec.group))])
    ids, n_groups, _ = group_ids([both.column(c).combine_chunks() for c in spec.group])
    touched = np.zeros(n_groups, bool)
    touched[ids[: changed.num_rows]] = True
    return np.asarray(touched[ids[changed.num_rows :]], bool)


def _difference(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Which rows of ``a`` have no equal row in ``b`` (every column; NaN equals NaN)."""
    if not a.num_rows:
        return np.zeros(0, bool)
    if not b.num_rows:
        return np.ones(a.num_rows, bool)
    both = pa.concat_tables([a, b.select(a.column_names)])
    ids, n_groups, _ = group_ids([both.column(c).combine_chunks() for c in a.column_names])
    in_b = np.zeros(n_groups, bool)
    in_b[ids[a.num_rows :]] = True
    return np.asarray(~in_b[ids[: a.num_rows]], bool)


def _open(spec: TopNSpec, table: pa.Table, watermark_ms: int) -> pa.Table:
    """The rows of windows the upstream may still correct."""
    if not table.num_rows:
        return table
    end = table.column("window_end")
    end_ms = pc.cast(end, pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(end.type):
        unit = end.type.unit
        end_ms = end_ms * 1000 if unit == "s" else end_ms // {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    return table.filter(pa.array(end_ms + spec.lateness_ms > watermark_ms))


def _kinded(table: pa.Table, kind: str) -> pa.Table:
    return table.append_column(_KIND, pa.array([kind] * table.num_rows, pa.string()))
