"""A look inside a job's checkpoint (SPEC 3.15): what its state holds, read without running it.

:func:`describe_state` answers ``krishiv state show``: the lowering and the
carrier the job started with, its key groups and the tasks of its last run,
the last committed micro-batch and the watermark it left, and per operator
its live keys, state rows and bytes and its largest key groups (skew).
:func:`read_state` answers ``kp.read_state``: an operator's state as rows.

What is read
    krishiv's operator (the ``krishiv-files`` and ``one-task`` carriers):
    each task's newest version up to the last committed micro-batch, from
    the directory of its key groups (after a restart on another number of
    tasks, from the directories each key group was last written to). Key
    columns get the names the pipeline gave them, a window's bounds
    ``window_start``/``window_end`` (ms); the other columns are the
    operator's own (its partial aggregates, bookkeeping). A stage after the
    operator and Spark's own state (the native lowering, the
    ``state-store`` carrier) are reported by files and bytes; their rows are
    read with Spark's state data source (``read_state`` on a Spark session).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

import krishiv_py.files as files
from krishiv_py.checkpoint import CheckpointLayout, read_json
from krishiv_py.errors import JobError
from krishiv_py.stateful._arrow import ipc_table
from krishiv_py.stateful.key_groups import key_groups_of, task_ranges
from krishiv_py.stateful.versioned import KeyGroupStore, range_name, without_hash

__all__ = ["describe_state", "format_state", "read_state"]

#: The operator's name in ``describe_state`` and ``read_state(operator=...)``.
OPERATOR = "operator"
#: How many of the largest key groups ``describe_state`` lists per operator.
LARGEST = 5


def _layout(checkpoint: CheckpointLayout) -> dict[str, Any]:
    """The recorded layout: key groups, tasks, since, and what the operator keeps (may be partial)."""
    data = read_json(checkpoint.key_groups_file)
    if isinstance(data, dict):
        return data
    try:
        buckets = int(files.read_bytes(checkpoint.buckets_file).decode().strip())
    except FileNotFoundError:
        return {}
    return {"key_groups": buckets, "tasks": buckets, "since": 0}


def _plan_facts(checkpoint: CheckpointLayout) -> tuple[str | None, str | None]:
    """The lowering and the carrier recorded when the job first started (None: not recorded)."""
    try:
        text = files.read_bytes(checkpoint.plan_file).decode("utf-8")
    except FileNotFoundError:
        return None, None
    lowering = carrier = None
    for line in text.splitlines():
        if line.startswith("lowering: "):
            lowering = line.removeprefix("lowering: ").strip()
        elif line.startswith("carrier: "):
            carrier = line.removeprefix("carrier: ").strip()
    if lowering is not None and carrier is None:
        carrier = "spark" if lowering in ("native", "bounded") else "state-store"
    return lowering, carrier


def _check(checkpoint_dir: str) -> CheckpointLayout:
    local = CheckpointLayout(checkpoint_dir)  # (a path here or a URI: krishiv_py.files reads both)
    try:
        found = files.is_dir(local.root)
    except OSError as exc:
        raise JobError(
            f"cannot read the checkpoint {checkpoint_dir} ({type(exc).__name__}: {exc}): give this "
            "process the store's client and credentials (docs/durability.md)"
        ) from exc
    if not found:
        raise JobError(f"no checkpoint at {checkpoint_dir}: give the checkpoint_dir a job was started with")
    if not files.exists(local.plan_file) and not local.has_offsets():
        raise JobError(
            f"{checkpoint_dir} is not a job's checkpoint (no krishiv-plan.txt, no offsets/): give the "
            "checkpoint_dir a job was started with"
        )
    return local


def _operator_tables(checkpoint: CheckpointLayout, layout: dict[str, Any]) -> list[tuple[pa.Table, int]]:
    """Each task's state (newest committed version) and its size in bytes."""
    root = checkpoint.operator_state
    if not layout or not files.is_dir(root):
        return []
    upto = checkpoint.committed_batch() + 1
    groups, tasks, since = int(layout["key_groups"]), int(layout["tasks"]), int(layout.get("since", 0))
    ranges = task_ranges(groups, tasks)
    current = frozenset(range_name(lo, hi) for lo, hi in ranges)
    state_keys = layout.get("state_keys")
    out = []
    for lo, hi in ranges:
        for piece in KeyGroupStore(root, lo, hi, since=since, current=current).load_before(upto):
            if piece.blob is None:
                continue
            table = without_hash(ipc_table(piece.blob))
            size = len(piece.blob)
            if piece.groups is not None:
                if not _holds_keys(table, state_keys):
                    raise JobError(
                        f"the checkpoint {checkpoint.root} is between two layouts of tasks and its "
                        "operator's state rows do not hold their keys (a checkpoint that does not "
                        "record them, or a chain's one row): start the job once to finish the move"
                    )
                assert state_keys is not None
                owner = key_groups_of([table.column(k) for k in state_keys], groups, table.num_rows)
                keep = np.isin(owner, np.asarray(piece.groups))
                size = int(size * keep.mean()) if len(keep) else 0
                table = table.filter(pa.array(keep))
            out.append((table, size))
    return out


def _named(table: pa.Table, layout: dict[str, Any]) -> pa.Table:
    """The state's columns as the pipeline names them, and each row's key group."""
    keys = list(layout.get("keys") or ())
    state_keys = list(layout.get("state_keys") or ())
    renames = {"__ws": "window_start", "__we": "window_end"}
    renames.update({s: k for s, k in zip(state_keys, keys, strict=False) if s != k})
    names = [renames.get(c, c) for c in table.column_names]
    named = table.rename_columns(names)
    if state_keys and _holds_keys(table, state_keys):
        groups = key_groups_of(
            [table.column(k) for k in state_keys], int(layout["key_groups"]), table.num_rows
        )
        named = named.append_column("key_group", pa.array(groups.astype(np.int32)))
    return named


def read_state(checkpoint_dir: str, operator: str | None = None) -> pa.Table:
    """The state of an operator of the job whose checkpoint is ``checkpoint_dir``, as rows.

    ``operator``: ``"operator"`` (krishiv's stateful operator, the default),
    or for Spark's own state (the native lowering) the id of one of its
    stateful operators (``"0"``, ``"1"``, ...; ``krishiv state show`` lists
    them), read with Spark's state data source on the active Spark session.
    """
    checkpoint = _check(checkpoint_dir)
    layout = _layout(checkpoint)
    if files.is_dir(checkpoint.operator_state):
        if operator not in (None, OPERATOR):
            raise JobError(
                f"the checkpoint {checkpoint_dir} holds one operator of krishiv's, "
                f"{OPERATOR!r}; got {operator!r}"
            )
        tables = [_named(t, layout) for t, _ in _operator_tables(checkpoint, layout)]
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="permissive")
    ids = _spark_operators(checkpoint)
    if not ids:
        raise JobError(
            f"the checkpoint {checkpoint_dir} holds no state (a pipeline without a stateful operator?)"
        )
    chosen = operator if operator is not None else ids[0]
    if chosen not in ids:
        raise JobError(f"the checkpoint {checkpoint_dir} has Spark state operators {ids}; got {operator!r}")
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise JobError(
            "Spark's own state is read with Spark's state data source: start a session first "
            "(kp.Session.embedded()), then call read_state again"
        )
    frame = spark.read.format("statestore").option("operatorId", int(chosen)).load(checkpoint.root)
    return frame.toArrow()


def _time_shift(checkpoint: CheckpointLayout) -> int | None:
    """How far the query shifts event time (its watermarks with it); None: not recorded."""
    data = read_json(checkpoint.job_file)
    return int(data["time_shift_ms"]) if isinstance(data, dict) else None


def _spark_operators(checkpoint: CheckpointLayout) -> list[str]:
    return sorted((n for n in files.names(checkpoint.state) if n.isdigit()), key=int)


def _dir_bytes(path: str) -> int:
    return files.bytes_under(path)


def describe_state(checkpoint_dir: str) -> dict[str, Any]:
    """What ``krishiv state show`` prints: the fields of SPEC 3.15 as a dict (JSON-ready)."""
    checkpoint = _check(checkpoint_dir)
    lowering, carrier = _plan_facts(checkpoint)
    layout = _layout(checkpoint)
    last = checkpoint.committed_batch()
    watermark = None
    shift = _time_shift(checkpoint)
    if last >= 0 and shift is not None:
        try:
            spark_ms = checkpoint.next_watermark_ms(last)
            watermark = spark_ms - shift if spark_ms > 0 else None  # (0: no watermark yet)
        except Exception:  # noqa: BLE001 - an unreadable entry: no watermark to show
            watermark = None
    operators: list[dict[str, Any]] = []
    krishivs = files.is_dir(checkpoint.operator_state)
    tables = _operator_tables(checkpoint, layout) if krishivs else []
    if krishivs:
        operators.append({**_krishiv_operator(tables, layout), "hottest_keys": _hottest(checkpoint)})
    if files.is_dir(checkpoint.stages):
        operators.append(
            {
                "name": "stage",
                "keys": None,
                "rows": None,
                "bytes": _dir_bytes(checkpoint.stages),
                "largest_key_groups": [],
            }
        )
    for op_id in _spark_operators(checkpoint):
        path = files.join(checkpoint.state, op_id)
        partitions = [p for p in files.names(path) if p.isdigit()]
        operators.append(
            {
                "name": f"spark operator {op_id}",
                "keys": None,
                "rows": None,
                "bytes": _dir_bytes(path),
                "partitions": len(partitions),
                "largest_key_groups": [],
            }
        )
    return {
        "checkpoint": checkpoint.root,
        "lowering": lowering,
        "carrier": carrier,
        "key_groups": layout.get("key_groups"),
        "tasks": layout.get("tasks") if layout else _spark_partitions(checkpoint, last),
        "last_batch": last if last >= 0 else None,
        "watermark_ms": watermark,
        "operators": operators,
    }


def _holds_keys(table: pa.Table, state_keys: Any) -> bool:
    """Whether ``table``'s rows hold the operator's keys (a chain's small state is one row of its
    kernels' tables, which does not)."""
    return state_keys is not None and all(k in table.column_names for k in state_keys)


def _krishiv_operator(tables: list[tuple[pa.Table, int]], layout: dict[str, Any]) -> dict[str, Any]:
    state_keys = layout.get("state_keys")
    rows = sum(t.num_rows for t, _ in tables)
    keys = None
    largest: list[dict[str, int]] = []
    keyed = [t for t, _ in tables if _holds_keys(t, state_keys)]
    if state_keys is not None and keyed:
        both = pa.concat_tables([t.select(list(state_keys)) for t in keyed], promote_options="permissive")
        keys = len(both.group_by(list(state_keys)).aggregate([])) if state_keys else int(rows > 0)
        groups = key_groups_of([both.column(k) for k in state_keys], int(layout["key_groups"]), both.num_rows)
        counts = np.bincount(groups, minlength=int(layout["key_groups"]))
        top = np.argsort(-counts, kind="stable")[:LARGEST]
        largest = [{"key_group": int(g), "rows": int(counts[g])} for g in top if counts[g]]
    return {
        "name": OPERATOR,
        "kind": layout.get("operator"),
        "keys": keys,
        "rows": rows,
        "bytes": sum(size for _, size in tables),
        "largest_key_groups": largest,
    }


def _spark_partitions(checkpoint: CheckpointLayout, last: int) -> int | None:
    """The shuffle partitions Spark's offset log recorded for the last micro-batch (its state's)."""
    if last < 0:
        return None
    path = files.join(checkpoint.offsets, str(last))
    try:
        lines = files.read_bytes(path).decode("utf-8").splitlines()
        conf = json.loads(lines[1]).get("conf", {})
        value = conf.get("spark.sql.shuffle.partitions")
        return None if value is None else int(value)
    except (OSError, IndexError, ValueError):
        return None


def _hottest(checkpoint: CheckpointLayout, top: int = 10) -> list[dict[str, Any]]:
    """The keys the operator received most rows of since the checkpoint started (estimated from
    each task's busiest keys per micro-batch; ``krishiv-hot-keys.json``), most first."""
    data = read_json(checkpoint.hot_keys_file)
    if not isinstance(data, dict):
        return []
    return [{"key": str(e["key"]), "rows": int(e["rows"])} for e in data.get("hottest", [])[:top]]


def format_state(info: dict[str, Any]) -> str:
    """``describe_state``'s answer as lines for a terminal."""
    lines = [f"checkpoint    {info['checkpoint']}"]
    for name in ("lowering", "carrier", "key_groups", "tasks", "last_batch", "watermark_ms"):
        value = info[name]
        lines.append(f"{name:<13} {'-' if value is None else value}")
    for op in info["operators"]:
        lists = ("name", "largest_key_groups", "hottest_keys")
        shown = {k: ("-" if v is None else v) for k, v in op.items() if k not in lists}
        lines.append(f"{op['name']}: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
        if op["largest_key_groups"]:
            skew = ", ".join(f"{g['key_group']} ({g['rows']} rows)" for g in op["largest_key_groups"])
            lines.append(f"  largest key groups: {skew}")
        if op.get("hottest_keys"):
            hot = ", ".join(f"{h['key']} ({h['rows']} rows)" for h in op["hottest_keys"])
            lines.append(f"  busiest keys (rows in, estimated): {hot}")
    return "\n".join(lines)
