"""Hidden names: the columns, observations and metrics krishiv_py adds to a query.

Every name a user does not choose lives here, so the parts of the package
that write a name and the parts that read it cannot disagree, and two names
cannot collide unnoticed. The values are fixed: they are written into memory
streams' batch files, streaming checkpoints, operator state and quarantined
rows, and Spark reports observed metrics under them.

Two names keep an older prefix, ``__krishiv_``: the table sinks' working
columns :data:`CHANGELOG_ROW` and :data:`MERGE_OP`. They never reach a
table's rows, but a Delta table's history records the ``MERGE`` predicates
that name :data:`MERGE_OP`, so their values stay as they are too.

This module imports nothing from krishiv_py, so every layer can use it.

Examples
--------
>>> input_observation(0), source_observation(2), counts_input("kp_src_2"), counts_input(OUT_OBSERVE)
('kp_in_0', 'kp_src_2', True, False)
>>> arithmetic_metric(1), arithmetic_sum_metric(0), is_arithmetic_metric("arith_sum_0")
('arith_1', 'arith_sum_0', True)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "LOOKUP_FOUND",
    "LOOKUP_KEY",
    "CHANGES_EMITTED",
    "CHANGES_LIVE",
    "CHANGES_STATE",
    "HANDED_TS",
    "IN_TOP",
    "OVER_EMITTED",
    "OVER_FINAL",
    "OVER_VALUE",
    "KEYED_LIVE",
    "KEYED_NEWEST",
    "KEYED_OUT_TS",
    "KEY_HASH",
    "CHANGE_EVENT_TIME",
    "CHAIN_FIRST",
    "CHAIN_KEY",
    "CHAIN_PART",
    "CHAIN_ROWS",
    "CHAIN_SEQ",
    "CHAIN_THEN",
    "CHAIN_WATERMARK",
    "JOIN_EVENT_TIME",
    "keyed_output",
    "keyed_special",
    "keyed_values",
    "late_names",
    "ACTIVE",
    "ARITH_METRIC_PREFIX",
    "ARITH_SUMS_OBSERVATION",
    "BASE_HIDDEN",
    "BATCH_TS",
    "BRANCH",
    "BUCKET",
    "LANE",
    "CASCADE_DELETE",
    "CASCADE_EVENT_TIME",
    "CHANGELOG_ROW",
    "ET",
    "GLOBAL",
    "HIDDEN_PREFIX",
    "IDLE_WM",
    "JOIN_LEFT_TIME",
    "JOIN_RIGHT_TIME",
    "JOIN_SIDE",
    "LATE_CLASS",
    "LATE_COLUMNS",
    "LATE_WM",
    "INVALID",
    "KAFKA_COLUMNS",
    "KAFKA_CORRUPT",
    "KAFKA_DDL",
    "KAFKA_PARSED",
    "MARKER_DDL",
    "MAX_ET_US",
    "MERGED_FUTURE",
    "MERGED_ROWS",
    "MERGE_OP",
    "OUTPUT_DDL",
    "ROUTE",
    "ROUTED_DDL",
    "OUT_OBSERVE",
    "LATE_FLAG",
    "PACKED",
    "PACKED_DDL",
    "PANE",
    "PANE_WINDOW_START",
    "PAYLOAD",
    "QUARANTINE_BATCH",
    "QUARANTINE_ERROR",
    "RANK",
    "RESULT_ARITH",
    "RESULT_KIND",
    "ROWS",
    "ROW_KIND",
    "SEQ",
    "SOURCE_HIDDEN_DDL",
    "STATE_BLOB",
    "STATE_DDL",
    "SUBQUERY",
    "TS_VALUE",
    "WATERMARK_MARKER",
    "WINDOW",
    "WM",
    "arithmetic_metric",
    "arithmetic_observation",
    "arithmetic_sum_metric",
    "cascade_identity",
    "counts_input",
    "counts_very_late",
    "late_observation",
    "encoded_value",
    "input_observation",
    "join_key",
    "is_arithmetic_metric",
    "pane_input",
    "pane_part",
    "source_observation",
    "source_view",
    "sum_high",
    "sum_low",
    "sum_overflow",
]

#: Reserved prefix of the hidden columns: no user column may start with it.
HIDDEN_PREFIX = "__kp_"

# --- the columns every source carries -------------------------------------------------

#: Row kind: 0 data, 1 watermark promise, 2 close, 3 idle-source marker.
ROW_KIND = "__kp_kind"
#: The watermark a punctuation row promises.
WM = "__kp_wm"
#: Arrival order of a row (orders ``first``/``last`` among equal event times).
SEQ = "__kp_seq"
#: The hidden columns every source carries.
BASE_HIDDEN = (ROW_KIND, WM, SEQ)
#: Their Spark DDL, as a memory stream's files are read.
SOURCE_HIDDEN_DDL = f"`{ROW_KIND}` tinyint, `{WM}` bigint, `{SEQ}` bigint"
#: The Spark DDL of an idle-marker file (a promised watermark only).
MARKER_DDL = f"`{WM}` bigint"

# --- the columns a Kafka source adds after the value's fields (user-visible) ---------------

#: Key, topic, partition, offset and timestamp of each record, and ``kafka_value``: the raw
#: bytes of a record whose value did not decode (null for every other record).
KAFKA_COLUMNS = (
    "kafka_key",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "kafka_value",
)
#: Their Spark DDL, ``kafka_key`` as a string (``key_format="raw"``: binary).
KAFKA_DDL = (
    "kafka_key string, kafka_topic string, kafka_partition int, kafka_offset bigint, "
    "kafka_timestamp timestamp, kafka_value binary"
)

#: Spark's Kafka connector: the parsed value struct, and its field holding a record that did not parse.
KAFKA_PARSED, KAFKA_CORRUPT = "__kp_kafka_value", "__kp_corrupt"

# --- the columns of a lowered query ------------------------------------------------------

#: Event time in Spark, shifted by the recipe's ``time_shift_ms``.
ET = "__kp_et"
#: A row's rank within its window, for ``top_n``.
RANK = "__kp_rank"
#: The ``window``/``session_window`` struct a window aggregation groups by.
WINDOW = "__kp_window"
#: The constant key of a session window without keys.
GLOBAL = "__kp_global"
#: Sliding windows from panes: the start (µs) of the slide-sized pane a row falls in. Also the
#: pane-callback rows a job quarantines: ``"fired"`` or ``"closed"`` (the two never meet).
PANE = "__kp_pane"
#: Sliding windows from panes: the start (µs) of a window a pane is copied into.
PANE_WINDOW_START = "__kp_window_start"
#: The alias of a subquery in a bounded job's SQL.
SUBQUERY = "__kp_q"


def source_view(token: str) -> str:
    """The temporary view a bounded job reads a source through."""
    return f"__kp_src_{token}"


def sum_high(i: int) -> str:
    """Aggregate ``i``'s sum of the high 32 bits of a bigint."""
    return f"__kp_sum_high_{i}"


def sum_low(i: int) -> str:
    """Aggregate ``i``'s sum of the low 32 bits of a bigint."""
    return f"__kp_sum_low_{i}"


def sum_overflow(i: int) -> str:
    """Whether aggregate ``i``'s sum went beyond its type (the window's value is null)."""
    return f"__kp_sum_overflow_{i}"


def pane_input(i: int) -> str:
    """The pane partials step's input column of its ``i``-th partial aggregate."""
    return f"__kp_in_{i}"


def pane_part(i: int, part: str) -> str:
    """Sliding windows from panes: ``part`` of aggregate ``i``'s partial aggregate."""
    return f"__kp_part_{i}_{part}"


# --- the stateful operator's rows ----------------------------------------------------------

#: The key bucket a row is grouped by (with key groups: the task that owns its key group).
BUCKET = "__kp_bucket"
#: With key groups, the number a task's rows are shuffled by: one that lands on its own partition.
LANE = "__kp_lane"
#: Event time (µs, unshifted; null: invalid).
TS_VALUE = "__kp_tsv"
#: One bucket call's output (Arrow IPC streams) and a bucket's state blob.
PAYLOAD, STATE_BLOB = "__kp_payload", "__kp_state"
#: The all-null column that carries Spark's watermark metadata to the operator.
WATERMARK_MARKER = "__kp_wmark"
#: A map task's rows of one key bucket, decoded, as one Arrow IPC stream (null on tick rows).
PACKED = "__kp_packed"
#: True on a tick row among the encoded rows (the ``one-task`` carrier packs and runs in one call).
TICK = "__kp_tick"
PACKED_DDL = f"{BUCKET} int, {PACKED} binary"
OUTPUT_DDL = f"{BUCKET} int, {PAYLOAD} binary"
#: Which stage bucket an operator's output row goes to (-1: the operator's own payload).
ROUTE = "__kp_route"
ROUTED_DDL = f"{OUTPUT_DDL}, {ROUTE} int"
STATE_DDL = f"{STATE_BLOB} binary"


def encoded_value(i: int) -> str:
    """The operator's input column ``i``, as it reaches the packer."""
    return f"__kp_c{i}"


#: A join's input rows: which side a row comes from, ``"left"`` or ``"right"``.
JOIN_SIDE = "__kp_side"
#: A union's input rows: which branch (0, 1, ...) a row comes from.
BRANCH = "__kp_branch"
#: A late row's classification (``"invalid"``, ``"very_late"``) and the watermark it met, as the
#: operator sends them to the driver (the handler sees them as ``classification``, ``watermark_ms``).
LATE_CLASS, LATE_WM = "__kp_late_class", "__kp_late_wm"
#: Their names in the late-event table a handler gets (SPEC 3.8).
LATE_COLUMNS = ("classification", "watermark_ms")
#: The late-event table's own columns, by the name they travel under.
_LATE_MARKS = {JOIN_SIDE: "side", BRANCH: "branch", LATE_CLASS: LATE_COLUMNS[0], LATE_WM: LATE_COLUMNS[1]}


def late_names(names: Sequence[str]) -> dict[str, str]:
    """Each column of late rows (``names``, as they travel) by its name in the late-event table.

    The table's own columns (``side``, ``branch``, ``classification``, ``watermark_ms``) keep
    their names; an input column named as one of them gets ``_input`` added (again while the
    name is taken), so a row's value is never overwritten or doubled.

    >>> names = late_names(["k", "side", "__kp_side", "__kp_late_class", "__kp_late_wm"])
    >>> list(names.values())
    ['k', 'side_input', 'side', 'classification', 'watermark_ms']
    """
    marks = {_LATE_MARKS[n] for n in names if n in _LATE_MARKS}
    taken = marks | {n for n in names if n not in _LATE_MARKS}
    out = {}
    for name in names:
        if name in _LATE_MARKS:
            out[name] = _LATE_MARKS[name]
            continue
        public = name
        while public in marks or (public != name and public in taken):
            public += "_input"
        out[name] = public
    return out


#: With an automatic lag on several watermarked sources (a union of sources, a Kafka topic with a
#: watermark per partition): which source a row comes from, its index in the job's watermarks.
AUTO_SOURCE = "__kp_src"
#: A lookup join's table key columns (``__kp_lookup_0``, ...) and its match flag, while the
#: join runs (:mod:`krishiv_py.runtime.build`).
LOOKUP_KEY = "__kp_lookup_"
LOOKUP_FOUND = "__kp_lookup_found"
#: Spark's own join (the native lowering of an inner interval join): each side's event time
#: as the join reads it (one µs later than the event, see ``docs/joins.md``).
JOIN_LEFT_TIME, JOIN_RIGHT_TIME = "__kp_jl", "__kp_jr"


def join_key(i: int) -> str:
    """The right side's key column ``i`` in Spark's own join."""
    return f"__kp_jk{i}"


#: The kernel's batches: event time in µs (null when invalid); arrival order is :data:`SEQ`.
BATCH_TS = "__kp_ts"
#: The kernel's result rows: each row's count of aggregates without a value (an
#: integer sum beyond a bigint), dropped before the results leave the kernel.
RESULT_ARITH = "__arith"
#: The column ``accumulation("retracting")`` adds to window results: ``"emit"`` or ``"retract"``.
#: Not hidden (users see it); here so that it is not mistaken for :data:`ROW_KIND`.
RESULT_KIND = "kind"
#: Premerged rows (:mod:`krishiv_py.stateful.premerge`): a merged partial's number of rows
#: (the windows' pending count).
MERGED_ROWS = "__kp_rows"
#: Premerged rows: how many of those rows lay beyond the watermark plus the future tolerance.
MERGED_FUTURE = "__kp_future"

# --- the changes a window over a changelog applies (``stateful/cascade.py``) ----------------

#: A change row's event time (ms), kept with the version it adds.
CASCADE_EVENT_TIME = "__kp_t"
#: A change row's retraction flag (true: its identity's version is gone).
CASCADE_DELETE = "__kp_del"


# --- a chain of kernels in one operator call (``stateful/chain.py``) -----------------------

#: The event time of a join's rows in the plan (the later of its two rows'): no column of its
#: own; the operator computes it.
JOIN_EVENT_TIME = "__kp_join_ts"

#: A chain's state: the first kernel's state (Arrow IPC in a chain's one row; in a chain's rows by
#: key, a struct of the first kernel's state row).
CHAIN_FIRST = "__kp_chain_first"
#: The second kernel's state (as :data:`CHAIN_FIRST`).
CHAIN_THEN = "__kp_chain_then"
#: In a chain's rows by key: which state a row holds (0: the first kernel's, 1: the second's,
#: 2: the chain's own watermark and arrival number).
CHAIN_PART = "__kp_chain_part"
#: In a chain's rows by key: the prefix of the key columns (``__kp_chain_key0``, ...).
CHAIN_KEY = "__kp_chain_key"
#: The watermark the chain last ran at (ms; null: none yet).
CHAIN_WATERMARK = "__kp_chain_wm"
#: The arrival number the next row handed to the second kernel gets.
CHAIN_SEQ = "__kp_chain_seq"
#: The rows both states hold.
CHAIN_ROWS = "__kp_chain_rows"


def keyed_output(i: int) -> str:
    """An aggregation per key's state column: the value of its ``i``-th aggregate emitted last."""
    return f"__kp_out_{i}"


#: A retracting aggregation per key's state column: each key's live rows.
KEYED_LIVE = "__kp_live"
#: An aggregation per key with a state TTL: the newest event time (µs) of each key's rows.
KEYED_NEWEST = "__kp_newest"
#: An aggregation per key whose changes carry event times: the time (µs) of the row it emitted last.
KEYED_OUT_TS = "__kp_out_ts"
#: Persisted keyed state: each row's 64-bit key hash (stateful/held_state.py, stateful/versioned.py).
KEY_HASH = "__kp_khash"
#: The event time of an aggregation's or a top-N's change per key (the row that changed it).
CHANGE_EVENT_TIME = "__kp_change_ts"


def keyed_values(j: int) -> str:
    """A retracting aggregation per key's state column: the multiset of a column's live values."""
    return f"__kp_values_{j}"


def keyed_special(j: int, name: str) -> str:
    """A retracting aggregation per key's state column: a float sum's count of NaN or an infinity."""
    return f"__kp_{name}_{j}"


#: A window over a changelog's state (``stateful/window_changes.py``): the rows it holds (Arrow
#: IPC), the windows it fired with their values (Arrow IPC), and one row of numbers.
CHANGES_LIVE = "__kp_changes_live"
CHANGES_EMITTED = "__kp_changes_emitted"
CHANGES_STATE = "__kp_changes_state"

#: A retracting top-N per key's state column: whether the live row is in the top (emitted).
IN_TOP = "__kp_in_top"

#: An over-aggregation's state columns (``stateful/over.py``): whether a held row's result was
#: emitted, whether the row is final (no row can come before it any more), and the prefix of the
#: columns of the values it emitted (``__kp_o0``, ...).
OVER_EMITTED = "__kp_emitted"
OVER_FINAL = "__kp_final"
OVER_VALUE = "__kp_o"

#: An operator's results on their way to the next one: their event time (µs) through the
#: filters and projections between the two.
HANDED_TS = "__kp_handed_ts"


def cascade_identity(i: int) -> str:
    """A change row's ``i``-th identity column (a window over a changelog: an emit's arrival number)."""
    return f"__kp_id_{i}"


# --- the rows a job quarantines (``start(quarantine_dir=...)``) ----------------------------

#: The micro-batch id of a quarantined row (bigint).
QUARANTINE_BATCH = "__kp_batch_id"
#: Why its call failed: ``"<exception type>: <message>"`` (string).
QUARANTINE_ERROR = "__kp_error"

# --- the table sinks' working columns (the older prefix; see above) ------------------------

#: A table sink's net changes: a row's place in its micro-batch.
CHANGELOG_ROW = "__krishiv_row"
#: A Delta ``MERGE``'s source rows: ``"upsert"`` or ``"delete"``.
MERGE_OP = "__krishiv_op"

# --- observations (Spark ``observe``) and their metrics ------------------------------------

#: The observation of the windows a job emits.
OUT_OBSERVE = "kp_out"
#: The observation of the integer sums that went beyond their type.
ARITH_SUMS_OBSERVATION = "kp_arith_sums"
#: Metrics: rows; rows without a valid event time; the largest event time (µs).
ROWS, INVALID, MAX_ET_US = "rows", "invalid", "max_et_us"
#: Metrics of a source with an idle timeout: its own rows; the watermark of its idle markers.
ACTIVE, IDLE_WM = "active", "idle_wm"
#: Start of the metrics that count values arithmetic gave no result for.
ARITH_METRIC_PREFIX = "arith_"

_INPUT, _SOURCE, _ARITHMETIC = "kp_in_", "kp_src_", "kp_arith_"
_LATE = "kp_late_"
#: A native join side's flag: the row is behind its micro-batch's watermark (dropped, counted).
LATE_FLAG = "__kp_late"


def input_observation(i: int) -> str:
    """The observation counting the rows of the ``i``-th source read without a watermark above it."""
    return f"{_INPUT}{i}"


def source_observation(i: int) -> str:
    """The observation of the ``i``-th watermarked source: rows, invalid rows, largest event time."""
    return f"{_SOURCE}{i}"


def arithmetic_observation(i: int) -> str:
    """The ``i``-th observation of filters and projections whose arithmetic gave no result."""
    return f"{_ARITHMETIC}{i}"


def late_observation(i: int) -> str:
    """The observation counting the rows of a native join's side ``i`` (0 left, 1 right) dropped as
    very late: behind the watermark of their micro-batch."""
    return f"{_LATE}{i}"


def counts_very_late(observation: str) -> bool:
    """Whether ``observation`` counts very late rows (:func:`late_observation`)."""
    return _numbered(observation, _LATE)


def arithmetic_metric(i: int) -> str:
    """The metric of an arithmetic observation's ``i``-th expression."""
    return f"{ARITH_METRIC_PREFIX}{i}"


def arithmetic_sum_metric(i: int) -> str:
    """The metric of :data:`ARITH_SUMS_OBSERVATION` for aggregate ``i``."""
    return f"{ARITH_METRIC_PREFIX}sum_{i}"


def counts_input(observation: str) -> bool:
    """Whether ``observation`` counts a source's input rows (an input or a source observation)."""
    return _numbered(observation, _INPUT) or _numbered(observation, _SOURCE)


def is_arithmetic_metric(metric: str) -> bool:
    """Whether ``metric`` counts values arithmetic gave no result for."""
    return _numbered(metric, ARITH_METRIC_PREFIX) or _numbered(metric, f"{ARITH_METRIC_PREFIX}sum_")


def _numbered(name: str, stem: str) -> bool:
    """Whether ``name`` is ``stem`` followed by a number, as the functions above make them."""
    head, number = name[: len(stem)], name[len(stem) :]
    return head == stem and number.isascii() and number.isdigit()
