"""Session windows in the kernel: which late rows are kept, and the merge sweep.

A row's proto-window is ``[ts, ts + gap)``; windows of one key that touch or
overlap merge (SPEC 3.3). Lateness follows Flink's rule (SPEC 3.6): a late
row is kept when the session it forms after merging with the key's current
sessions — the stored ones and the rows of the batch that arrived before it —
is retained (``W < end + allowed_lateness``).

Most rows are decided without looking at any other row: a row whose own
proto-window is retained is kept whatever it merges with (merging only
extends a session). Only the rare rows whose proto-window alone is not
retained are resolved one by one, in arrival order.

Examples
--------
>>> import numpy as np
>>> ids, n = sweep_sessions(np.array([0, 0, 0]), np.array([0, 5, 30]), np.array([10, 15, 40]),
...                         np.array([True, True, True]))
>>> ids.tolist(), n
([0, 0, 1], 2)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from krishiv_py.stateful.grouping import canonical, group_ids

if TYPE_CHECKING:
    from krishiv_py.stateful.kernel import KernelSpec

__all__ = ["kept_session_rows", "sweep_sessions"]


def sweep_sessions(
    kid: np.ndarray, ws: np.ndarray, we: np.ndarray, is_new: np.ndarray
) -> tuple[np.ndarray, int]:
    """Session id of every window (stored sessions and new proto-windows) after merging."""
    order = np.lexsort((ws, kid))
    k, s, e = kid[order], ws[order], we[order]
    running = pd.Series(e).groupby(k).cummax().to_numpy()
    prev_end = np.concatenate([[np.iinfo(np.int64).min], running[:-1]])
    starts = np.concatenate([[True], k[1:] != k[:-1]]) | (s > prev_end)
    sorted_ids = np.cumsum(starts) - 1
    ids = np.empty(len(order), np.int64)
    ids[order] = sorted_ids
    return ids, int(sorted_ids[-1]) + 1 if len(order) else 0


def kept_session_rows(
    spec: KernelSpec,
    state: pa.Table,
    batch: pa.Table,
    ts: np.ndarray,
    seq: np.ndarray,
    valid: np.ndarray,
    w_us: int | None,
    gap_us: int,
) -> np.ndarray:
    """Which rows are added to a session (the others are very late or invalid)."""
    if w_us is None:
        return valid.copy()
    lateness = spec.allowed_lateness_ms * 1000
    kept = valid & (ts + gap_us + lateness > w_us)
    doubtful = np.flatnonzero(valid & ~kept)
    if not len(doubtful):
        return kept
    kid_state, kid_rows = _key_ids(spec, state, batch)
    stored_ws = state.column("__ws").to_numpy()
    stored_we = state.column("__we").to_numpy()
    for i in doubtful[np.argsort(seq[doubtful], kind="stable")]:
        mine = kid_state == kid_rows[i]
        earlier = kept & (kid_rows == kid_rows[i]) & (seq < seq[i])
        starts = np.concatenate([stored_ws[mine], ts[earlier], [ts[i]]])
        ends = np.concatenate([stored_we[mine], ts[earlier] + gap_us, [ts[i] + gap_us]])
        if w_us < _merged_end(starts, ends, ts[i]) + lateness:
            kept[i] = True
    return kept


def _merged_end(starts: np.ndarray, ends: np.ndarray, ts: int) -> int:
    """End of the merged session that contains the proto-window starting at ``ts``."""
    order = np.argsort(starts, kind="stable")
    lo: int | None = None
    hi: int | None = None
    for s, e in zip(starts[order].tolist(), ends[order].tolist(), strict=True):
        if hi is None or s > hi:
            if lo is not None and hi is not None and lo <= ts <= hi:
                return hi
            lo, hi = s, e
        else:
            hi = max(hi, e)
    assert hi is not None
    return hi


def _key_ids(spec: KernelSpec, state: pa.Table, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    if not spec.keys:
        return np.zeros(state.num_rows, np.int64), np.zeros(batch.num_rows, np.int64)
    cols = [
        pa.concat_arrays([state.column(k).combine_chunks(), canonical(batch.column(name))])
        for k, name in zip(spec.key_names(), spec.keys, strict=True)
    ]
    ids, _, _ = group_ids(cols)
    return ids[: state.num_rows], ids[state.num_rows :]
