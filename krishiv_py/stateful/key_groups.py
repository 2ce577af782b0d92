"""Key groups: how keys spread over an operator's tasks, and how its state moves when they change.

A keyed operator's rows go to a *key group*, ``pmod(hash(keys), G)`` with
Spark's own ``hash()`` (Murmur3, seed 42), where ``G`` is fixed for the life
of a checkpoint (``spark.krishiv.stateful.key_groups``, Flink's max
parallelism). A run on ``P`` tasks gives task ``i`` the contiguous range of
key groups ``[ceil(i·G/P), ceil((i+1)·G/P))`` (:func:`task_ranges`), so a
key group's state lives in exactly one task's files, and a run on another
``P`` finds each key group's state by its number (SPEC 3.15).

The rows are hashed in Spark (an expression of the planner); the state rows
a restarted task must split by key group are hashed here, by
:func:`spark_hash`, the same function over Arrow columns: integers, floats
(as doubles, ``-0.0`` as ``0.0``, one NaN), booleans, dates, timestamps,
decimals of at most 18 digits, strings and binary. A task checks every state
row it splits against the range it was stored for, so a key the two hashes
disagreed on would stop the job with an error, never move silently.

Spark spreads a grouping's rows over partitions by ``pmod(hash(value), P)``;
:func:`lanes` picks, per task, an integer that lands on the task's own
partition, so ``P`` tasks run as ``P`` partitions with none shared.

Examples
--------
>>> import pyarrow as pa
>>> int(spark_hash([pa.array([1], pa.int32())])[0]), int(spark_hash([pa.array(["a"])])[0])
(-559580957, 1485273170)
>>> task_ranges(128, 3)
[(0, 43), (43, 86), (86, 128)]
>>> [task_of(g, 128, 3) for g in (0, 42, 43, 127)]
[0, 0, 1, 2]
>>> lanes(4)
(12, 6, 2, 0)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "MAX_KEY_GROUPS",
    "UnhashableKey",
    "key_groups_of",
    "key_hash64",
    "lanes",
    "spark_hash",
    "task_of",
    "task_ranges",
]

#: Key groups of a new checkpoint (Flink's default max parallelism).
DEFAULT_KEY_GROUPS = 128
#: The most key groups a checkpoint can have (Flink's limit).
MAX_KEY_GROUPS = 32_768
#: Spark's seed of ``hash()`` and of the hash partitioning of a shuffle.
SEED = 42

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


class UnhashableKey(TypeError):
    """A key column of a type :func:`spark_hash` does not hash (its state cannot move by key group)."""


def _buffer(buffer: Any, dtype: Any) -> np.ndarray:
    """An Arrow buffer's bytes as a numpy array of ``dtype`` (empty: no buffer)."""
    if buffer is None:
        return np.zeros(0, dtype)
    return np.frombuffer(buffer, dtype)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    out: np.ndarray = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return out


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length).astype(np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    out: np.ndarray = h1 ^ (h1 >> np.uint32(16))
    return out


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``Murmur3_x86_32.hashInt`` of int32 ``values`` (as uint32) under ``seed``."""
    return _fmix(_mix_h1(seed, _mix_k1(values.astype(np.int32).view(np.uint32))), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashLong``: the low 32 bits, then the high 32 bits."""
    v = values.astype(np.int64).view(np.uint64)
    low = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (v >> np.uint64(32)).astype(np.uint32)
    return _fmix(_mix_h1(_mix_h1(seed, _mix_k1(low)), _mix_k1(high)), 8)


def _hash_bytes(arr: pa.Array[Any], seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashUnsafeBytes``: 4-byte little-endian words, then each byte left (signed) alone."""
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offsets = _buffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + n + 1]
    data = _buffer(arr.buffers()[2], np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    words = lengths // 4
    h = seed.copy()
    for j in range(int(words.max(initial=0))):
        rows = np.flatnonzero(words > j)
        at = starts[rows] + 4 * j
        word = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        h[rows] = _mix_h1(h[rows], _mix_k1(word))
    for t in range(3):
        rows = np.flatnonzero(lengths % 4 > t)
        byte = data[starts[rows] + 4 * words[rows] + t].view(np.int8).astype(np.int32).view(np.uint32)
        h[rows] = _mix_h1(h[rows], _mix_k1(byte))
    return _fmix(h, lengths)


def _column_hash(arr: pa.Array[Any], seed: np.ndarray) -> np.ndarray:
    """One column folded into ``seed`` as Spark's ``hash()`` folds it (a null leaves the seed)."""
    kind = arr.type
    if pa.types.is_dictionary(kind):
        arr = arr.dictionary_decode()  # type: ignore[attr-defined]
        kind = arr.type
    if pa.types.is_floating(kind):  # the planner hashes floats as doubles: -0.0 as 0.0, one NaN
        doubles = np.asarray(arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
        doubles = np.where(doubles == 0.0, 0.0, doubles)
        bits = doubles.view(np.int64).copy()
        bits[np.isnan(doubles)] = 0x7FF8000000000000
        hashed = _hash_long(bits, seed)
    elif pa.types.is_boolean(kind):
        hashed = _hash_int(np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), np.int32), seed)
    elif (pa.types.is_integer(kind) and kind.bit_width == 64) or pa.types.is_timestamp(kind):
        hashed = _hash_long(_ints(arr, pa.int64()), seed)
    elif pa.types.is_integer(kind) or pa.types.is_date32(kind):
        hashed = _hash_int(_ints(arr, pa.int32()), seed)
    elif pa.types.is_decimal(kind) and kind.precision <= 18:
        # Spark hashes the unscaled long: the low 64 bits of Arrow's 128-bit little-endian value.
        wide = arr.cast(pa.decimal128(max(kind.precision, 1), kind.scale))
        words = _buffer(wide.buffers()[1], np.int64)[2 * wide.offset : 2 * (wide.offset + len(wide))]
        hashed = _hash_long(words[0::2].copy(), seed)
    elif (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        hashed = _hash_bytes(arr, seed)
    else:
        raise UnhashableKey(f"a key of type {kind} cannot be hashed into key groups here")
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
    return np.where(valid, hashed, seed)


def _ints(arr: pa.Array[Any], to: pa.DataType) -> np.ndarray:
    filled: Any = arr.cast(to)
    return np.asarray(filled.fill_null(0).to_numpy(zero_copy_only=False))


def spark_hash(columns: Sequence[pa.Array[Any] | pa.ChunkedArray[Any]]) -> np.ndarray:
    """Spark's ``hash(c1, c2, ...)`` of each row (int32), over Arrow columns of equal length.

    No columns: every row hashes to the seed (Spark's ``hash()`` of nothing is 42).
    """
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    n = len(arrays[0]) if arrays else 0
    h = np.full(n, SEED, np.uint32)
    for arr in arrays:
        h = _column_hash(arr, h)
    return h.view(np.int32)


#: The second seed of :func:`key_hash64` (any odd constant other than :data:`SEED`).
_SEED_HIGH = 0x9E3779B1


def key_hash64(columns: Sequence[pa.Array[Any] | pa.ChunkedArray[Any]], rows: int) -> np.ndarray:
    """A 64-bit hash of each row's ``columns`` (uint64): Spark's ``hash()`` in the low 32 bits, the
    same Murmur3 under a second seed in the high 32 (equal values, equal hashes, in any process).

    How keyed state finds a key's rows (:mod:`krishiv_py.stateful.held_state`); no columns: every
    row the same hash. Raises :class:`UnhashableKey` for a type :func:`spark_hash` does not hash.

    >>> import pyarrow as pa
    >>> h = key_hash64([pa.array(["a", "b", "a"])], 3)
    >>> bool(h[0] == h[2]), bool(h[0] == h[1]), int(h[0]) & 0xFFFFFFFF == 1485273170
    (True, False, True)
    """
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    low = np.full(rows, SEED, np.uint32)
    high = np.full(rows, _SEED_HIGH, np.uint32)
    for arr in arrays:
        low = _column_hash(arr, low)
        high = _column_hash(arr, high)
    out: np.ndarray = (high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)
    return out


def key_groups_of(
    columns: Sequence[pa.Array[Any] | pa.ChunkedArray[Any]], key_groups: int, rows: int
) -> np.ndarray:
    """Each row's key group, ``pmod(hash(columns), key_groups)``; without key columns all in group 0
    (the planner sends every row of an operator without keys to one task)."""
    if not columns:
        return np.zeros(rows, np.int64)
    return np.mod(spark_hash(columns).astype(np.int64), key_groups)


def task_of(group: int, key_groups: int, tasks: int) -> int:
    """The task (of ``tasks``) that owns key group ``group``."""
    return group * tasks // key_groups


def task_ranges(key_groups: int, tasks: int) -> list[tuple[int, int]]:
    """Each task's key groups, ``[lo, hi)``, contiguous and in order (``tasks`` at most ``key_groups``)."""
    bounds = [-(-i * key_groups // tasks) for i in range(tasks + 1)]
    return list(itertools.pairwise(bounds))


def lanes(tasks: int) -> tuple[int, ...]:
    """Per task, the least non-negative int whose Spark hash lands on that task's partition
    (``pmod(hash(int), tasks)``): grouped by it, ``tasks`` groups share no partition."""
    found: dict[int, int] = {}
    start = 0
    while len(found) < tasks:
        values = np.arange(start, start + 4096, dtype=np.int64)
        parts = np.mod(
            _hash_int(values, np.full(len(values), SEED, np.uint32)).view(np.int32).astype(np.int64), tasks
        )
        for value, part in zip(values.tolist(), parts.tolist(), strict=True):
            found.setdefault(part, value)
        start += 4096
    return tuple(found[i] for i in range(tasks))
