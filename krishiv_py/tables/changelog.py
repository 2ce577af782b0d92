"""The changelog contract of table sinks: what a micro-batch does to a table that holds the answer.

Primary key
    A windowed result row is identified by its key columns, ``window_start``
    and ``window_end`` (:attr:`krishiv_py.sinks.SinkContext.primary_key`).
    A merged session has new bounds, so it is a new row; the sessions it
    absorbed are retracted under their old bounds.
Upsert (``mode="upsert"``)
    Within a micro-batch, the *last* row of each primary key decides: an
    ``emit`` is an insert-or-replace of the stored row, a ``retract`` a
    delete. A retraction followed by the corrected emit in the same batch is
    therefore one replace; an emit followed by its retraction (a session
    merged away in the batch it fired) is a delete. After each committed
    micro-batch the table holds exactly the current result of every window
    that fired, one row per window, without the ``kind`` column.
A key that is not unique
    Window results are unique under their primary key by construction; a
    join's rows are unique only if the columns named with ``key=`` make them
    so (one click joined with two impressions is two rows under one
    ``click_id``). An upsert would keep one of them and lose the other
    without a word, so each micro-batch of a join is checked
    (:func:`second_rows`) before anything of it is written: applied in order
    to the rows the table holds for the keys it touches, a retraction
    withdraws the equal live row, an emit equal to the live row is a
    re-fire of the same result, and an emit of a *different* row while one
    is live fails the micro-batch with a :class:`~krishiv_py.errors.JobError`
    naming the key values, ``key=`` and ``mode="append"``. Nothing of that
    micro-batch is written; the job restarts from its checkpoint once the
    sink is fixed. Rows equal in every column are one row to an upsert
    table, as to any table with a primary key.
Append (``mode="append"``)
    The changelog itself: every row as it came, with ``kind`` (``"emit"``
    or ``"retract"``; ``"emit"`` for results without retractions) and the
    micro-batch's ``batch_id``, for audit.
``discarding`` accumulation
    A discarding firing carries only what arrived since the window's
    previous firing, so replacing the stored row with it would lose the
    earlier part. Table sinks refuse it in upsert mode (a
    :class:`~krishiv_py.errors.PlanError` when the job starts) and take it in
    append mode, where each firing is a row.
Exactly once
    Each sink records, in the same transaction as the rows, the last batch
    id it committed for the job (``sink_id``: from the job's checkpoint and
    the target); a batch Spark runs again after a restart, with an id at
    or below it, writes nothing. A bounded run has no checkpoint: it gets a
    sink id of its own, so two bounded runs into one table both write.

Examples
--------
>>> import pyarrow as pa
>>> batch = pa.table({
...     "user": ["a", "a", "b", "c", "c"],
...     "window_start": [0, 0, 0, 0, 0],
...     "window_end": [60, 60, 60, 60, 60],
...     "total": [10, 17, 4, 5, 5],
...     "kind": ["retract", "emit", "emit", "emit", "retract"],
... })
>>> changes = net_changes(batch, ("user", "window_start", "window_end"))
>>> changes.upserts.column("total").to_pylist(), changes.upserts.column("user").to_pylist()
([17, 4], ['a', 'b'])
>>> changes.deletes.to_pylist()
[{'user': 'c', 'window_start': 0, 'window_end': 60}]
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from krishiv_py.errors import JobError, PlanError
from krishiv_py.names import CHANGELOG_ROW as _ROW
from krishiv_py.names import RESULT_KIND

if TYPE_CHECKING:
    import pyarrow as pa

    from krishiv_py.sinks import SinkContext

__all__ = [
    "key_columns",
    "BATCH_ID",
    "second_rows",
    "non_unique_key",
    "Changes",
    "Mode",
    "Target",
    "changelog_rows",
    "net_changes",
    "target_for",
]

Mode = Literal["upsert", "append"]
#: The column append mode adds: the micro-batch a changelog row came in.
BATCH_ID = "batch_id"


@attrs.frozen
class Changes:
    """A micro-batch's net effect on an upsert table: rows to insert or replace, keys to delete."""

    upserts: pa.Table
    deletes: pa.Table

    @property
    def keys(self) -> pa.Table:
        """Every primary key the batch touches (the deletes' and the upserts')."""
        import pyarrow as pa

        names = self.deletes.column_names
        return pa.concat_tables([self.deletes, self.upserts.select(names)])


def net_changes(table: pa.Table, key: Sequence[str]) -> Changes:
    """The last row of each primary key in ``table``: emits to upsert (no ``kind``), retractions to delete."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    numbered = table.append_column(_ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = numbered.group_by(list(key), use_threads=False).aggregate([(_ROW, "max")])
    rows = table.take(np.sort(last[f"{_ROW}_max"].to_numpy()))  # in arrival order
    if RESULT_KIND not in rows.column_names:
        return Changes(upserts=rows, deletes=rows.select(list(key)).slice(0, 0))
    retract = pc.equal(rows[RESULT_KIND], pa.scalar("retract"))
    emitted = rows.filter(pc.invert(retract)).drop_columns([RESULT_KIND])
    return Changes(upserts=emitted, deletes=rows.filter(retract).select(list(key)))


def changelog_rows(table: pa.Table, batch_id: int) -> pa.Table:
    """``table`` as append-mode rows: every column, ``kind`` (``"emit"`` when absent) and ``batch_id``."""
    import pyarrow as pa

    n = table.num_rows
    if RESULT_KIND not in table.column_names:
        table = table.append_column(RESULT_KIND, pa.array(["emit"] * n, pa.string()))
    return table.append_column(BATCH_ID, pa.array([batch_id] * n, pa.int64()))


@attrs.frozen(kw_only=True)
class Target:
    """What a table sink's writer needs of its job: the mode it runs in, the key, its id."""

    #: ``"upsert"`` or ``"append"`` (a late-event side output is always appended).
    mode: Mode
    #: The primary key (upsert mode), else ().
    key: tuple[str, ...]
    #: Names the job's rows in the sink's commit record (the last batch id written).
    sink_id: str
    #: A streaming job's batches can come again after a restart; a bounded run's cannot.
    resumable: bool
    #: The key is the user's claim (``key=`` on a join's rows), checked on every micro-batch.
    checked: bool = False


def key_columns(value: object) -> tuple[str, ...]:
    """A table sink's ``key=``: column names, as a tuple (a single name is one column)."""
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list | tuple) else None
    if names is None or not all(isinstance(k, str) and k for k in names):
        raise PlanError(f"key= takes column names, e.g. key=('order_id',), got {value!r}")
    return names


def target_for(sink: str, mode: str, context: SinkContext, where: str, key: Sequence[str] = ()) -> Target:
    """Check ``mode`` against the job's rows and derive the writer's :class:`Target`.

    ``sink`` names the sink in errors; ``where`` is its table or path (part
    of the sink id, so that two tables of one job keep separate records).
    ``key``: the columns the user names to identify a join's rows (``key=``).
    """
    if mode not in ("upsert", "append"):
        raise PlanError(f"{sink}: mode must be 'upsert' or 'append', got {mode!r}")
    origin = f"{context.checkpoint_dir or uuid.uuid4().hex}|{where}|{context.output}"
    sink_id = hashlib.sha256(origin.encode()).hexdigest()[:16]
    resumable = context.checkpoint_dir is not None
    if mode == "append" or context.output != "results":
        return Target(mode="append", key=(), sink_id=sink_id, resumable=resumable)
    if context.join_identity is not None:
        return _join_target(sink, context, tuple(key), sink_id, resumable)
    if key:
        raise PlanError(
            f"{sink}(key=...) names the columns that identify a join's rows; window results are "
            "identified by their key columns and window bounds already: leave key= out"
        )
    primary = context.primary_key
    if primary is None:
        raise PlanError(
            f"{sink}(mode='upsert') needs window results (key columns, window_start, window_end) to "
            f"key its rows, and these rows have none ({', '.join(context.schema.names)}); use "
            "mode='append'"
        )
    if context.accumulation == "discarding":
        raise PlanError(
            f"{sink}(mode='upsert'): accumulation('discarding') fires only what arrived since a window's "
            "previous firing, so an upsert would replace the window's result with a part of it; use "
            "accumulation('accumulating') or ('retracting') with an upsert table, or mode='append' to "
            "keep every firing"
        )
    return Target(mode="upsert", key=primary, sink_id=sink_id, resumable=resumable)


def _join_target(
    sink: str, context: SinkContext, key: tuple[str, ...], sink_id: str, resumable: bool
) -> Target:
    """Upsert a join's rows by its identity columns plus the user's ``key=`` (SPEC 3.12)."""
    identity = context.join_identity or ()
    if not key:
        what = f"{', '.join(identity)} and " if identity else ""
        raise PlanError(
            f"{sink}(mode='upsert') needs columns that identify each joined row: a join's rows have "
            f"none of their own (one key and window may hold many pairs), so name them with key=, "
            f"e.g. key=('order_id',) (the table is keyed by {what}those columns), or use "
            "mode='append', which writes every joined row with its kind and batch id"
        )
    names = context.schema.names
    missing = [k for k in key if k not in names]
    if missing:
        raise PlanError(f"{sink}(key=...): no column {missing[0]!r} in the joined rows ({', '.join(names)})")
    full = tuple(dict.fromkeys((*identity, *key)))
    return Target(mode="upsert", key=full, sink_id=sink_id, resumable=resumable, checked=True)


#: How many keys a non-unique key error names.
_SHOWN = 3


def second_rows(batch: pa.Table, key: Sequence[str], held: pa.Table | None = None) -> list[dict[str, Any]]:
    """The keys under which ``batch``, applied in order to ``held``, leaves a second live row.

    ``held`` is what the table holds for the keys ``batch`` touches (its
    columns, without ``kind``). A key that occurs once among the held and
    the batch's rows cannot have two; only the others are replayed row by
    row, so that a batch of unique keys costs one vectorized group-by.

    >>> import pyarrow as pa
    >>> joined = pa.table({"click": [1, 1, 2], "ad": ["x", "y", "z"]})
    >>> second_rows(joined, ("click",))
    [{'click': 1}]
    >>> second_rows(joined.slice(1), ("click",), held=pa.table({"click": [1], "ad": ["y"]}))
    []
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [c for c in batch.column_names if c != RESULT_KIND]
    kinds = batch[RESULT_KIND].to_pylist() if RESULT_KIND in batch.column_names else ["emit"] * batch.num_rows
    rows = batch.select(names)
    if held is not None and held.num_rows:
        rows = pa.concat_tables([held.select(names).cast(rows.schema), rows])
        kinds = ["held"] * held.num_rows + kinds
    numbered = rows.select(list(key)).append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    groups = numbered.group_by(list(key), use_threads=False).aggregate([(_ROW, "list"), (_ROW, "count")])
    shared = groups.filter(pc.greater(groups[f"{_ROW}_count"], pa.scalar(1)))
    found = []
    for at, order in enumerate(shared[f"{_ROW}_list"].to_pylist()):
        taken = sorted(order or ())
        replay = zip((kinds[i] for i in taken), map(_plain, rows.take(taken).to_pylist()), strict=True)
        if _second_live(replay):
            found.append({k: shared[k][at].as_py() for k in key})
    return found


def _second_live(changes: Any) -> bool:
    """Replay ``(kind, row)`` pairs of one key: does an emit ever meet a different live row?"""
    live: list[tuple[Any, ...]] = []
    for kind, row in changes:
        if kind == "retract":
            if row in live:
                live.remove(row)
        elif row not in live:
            if live:
                return True
            live.append(row)
    return False


def _plain(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row's values, comparable (NaN equals NaN, as an upsert's key match treats it)."""
    return tuple("NaN" if isinstance(v, float) and v != v else v for v in row.values())


def non_unique_key(
    sink: str,
    key: Sequence[str],
    found: list[dict[str, Any]],
    batch_id: int,
    *,
    fix: str = "use mode='append', which keeps every row with its kind",
) -> JobError:
    """The error of a micro-batch that would leave two rows under one upsert key."""
    shown = "; ".join(", ".join(f"{k}={v!r}" for k, v in row.items()) for row in found[:_SHOWN])
    more = f" (and {len(found) - _SHOWN} more keys)" if len(found) > _SHOWN else ""
    names = ", ".join(key)
    return JobError(
        f"{sink}: batch {batch_id} has two different live rows under one key ({shown}){more}: an "
        f"upsert keyed by ({names}) would keep one and lose the other, so nothing of the batch was "
        "written; name columns that identify each row with key= (a join's rows are unique only on "
        f"columns of both sides), or {fix}; then restart the job from its checkpoint"
    )
