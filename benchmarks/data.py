"""Deterministic benchmark inputs, generated once and cached as Parquet and CSV.

Two generators, both vectorised (numpy) and seeded:

* :func:`clickstream`: ``n`` events ``(user_id, event_time, amount)`` over
  ``n`` ms of event time (1 event per ms in arrival order), ``keys`` users
  drawn from a Zipf(1.1) distribution (a few hot users, a long tail),
  out of order by up to ``disorder_ms``; a ``late_fraction`` of events is
  delayed by a further 5-60 s, past the benchmark's 5 s watermark lag.
* :func:`nexmark`: the Nexmark Person/Auction/Bid streams in the 1:3:46 mix
  of the reference generator (event ``i`` is a person if ``i % 50 == 0``,
  an auction if ``i % 50`` is 1-3, a bid otherwise), event time derived from
  the event number (1 event per ms) with the same injected disorder and late
  fraction (the reference generator is in order by default). Half of the
  bids go to the newest "hot" auction and three quarters come from hot
  bidders, as in the reference generator's default hot ratios. Half of
  the bids come from one of the four hot channels (Google, Facebook,
  Baidu, Apple), the rest from ``channel-<i>`` of 10,000, whose URL names
  it (``...&channel_id=<i>``), in Nexmark's URL shape
  (``https://www.nexmark.com/<dir>/<dir>/<dir>/item.htm?query=1``).
  With ``extra=True`` each table has Nexmark's ``extra`` column, random
  letters that bring a row to the table's average size in Nexmark's
  generator (person 200 bytes, auction 500, bid 100: ``nextExtra``, the
  padding within 20 % either side of what the row lacks, counting 8 bytes a
  number or time and a string's length). Where it differs from Nexmark's
  generator: its own names, cities and states, and its own draws (not
  Java's ``Random``), so the rows are not Nexmark's rows, only their shape.

A dataset is a directory holding, for each table, ``parquet/part-NNNNN.parquet``
and ``csv/part-NNNNN.csv`` (no header; columns in schema order; timestamps as
``yyyy-MM-dd HH:mm:ss.SSS`` UTC) split in arrival order into ``files`` parts
whose modification times increase with the part number, so a streaming file
source reads them in arrival order, one micro-batch per file. ``meta.json``
records the parameters, the schemas (Spark DDL) and row counts.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as _pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

T0_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
pc: Any = _pc  # the stubs' overloads do not cover numpy-built arrays
CACHE = Path(__file__).parent / ".cache"
MAX_LATE_DELAY_MS = 60_000
WATERMARK_LAG_MS = 5_000
#: An auction lasts less than this: ``expires - date_time`` is drawn from [10 s, 120 s).
MAX_AUCTION_DURATION_MS = 120_000

CLICKSTREAM_DDL = "user_id string, event_time timestamp, amount double"
BID_DDL = "auction bigint, bidder bigint, price bigint, channel string, url string, date_time timestamp"
PERSON_DDL = (
    "id bigint, name string, email_address string, credit_card string, city string, "
    "state string, date_time timestamp"
)
AUCTION_DDL = (
    "id bigint, item_name string, description string, initial_bid bigint, reserve bigint, "
    "date_time timestamp, expires timestamp, seller bigint, category bigint"
)


@dataclass(frozen=True, kw_only=True)
class _Spec:
    """What both generators share: size, files, disorder, lateness, seed."""

    events: int
    files: int = 20
    disorder_ms: int = 2_000
    late_fraction: float = 0.01
    seed: int = 1

    def _suffix(self) -> str:
        return f"f{self.files}-d{self.disorder_ms}-l{self.late_fraction:g}-s{self.seed}"


@dataclass(frozen=True, kw_only=True)
class ClickstreamSpec(_Spec):
    keys: int = 1_000

    @property
    def name(self) -> str:
        return f"clickstream-n{self.events}-k{self.keys}-{self._suffix()}"


@dataclass(frozen=True, kw_only=True)
class NexmarkSpec(_Spec):
    #: Each table with Nexmark's ``extra`` padding column (its rows at Nexmark's average sizes).
    extra: bool = False

    @property
    def name(self) -> str:
        padded = "-x" if self.extra else ""
        return f"nexmark-v2-n{self.events}-{self._suffix()}{padded}"  # v2: Nexmark's channels and URLs


#: Nexmark's average row size of each table (bytes), which ``extra`` pads a row to.
AVERAGE_BYTES = {"person": 200, "auction": 500, "bid": 100}


def extra_column(rng: np.random.Generator, table: pa.Table, average: int) -> pa.Array[Any]:
    """Nexmark's ``extra`` of each row of ``table``: random lowercase letters, as many as
    ``nextExtra`` draws for what the row lacks of ``average`` bytes (8 a number or a time, a
    string its length): ``lack - round(0.2 * lack)`` plus a draw below ``2 * round(0.2 * lack)``;
    none when the row is as large already."""
    size = np.zeros(table.num_rows, np.int64)
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_string(field.type):
            size += np.asarray(pc.utf8_length(column).to_numpy(zero_copy_only=False), np.int64)
        else:
            size += 8
    lack = np.maximum(average - size, 0)
    delta = np.round(lack * 0.2).astype(np.int64)
    lengths = lack - delta + np.floor(rng.random(len(lack)) * 2 * delta).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    letters = (rng.integers(0, 26, size=int(offsets[-1]), dtype=np.uint8) + ord("a")).tobytes()
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets.tobytes()), pa.py_buffer(letters))


@dataclass(frozen=True)
class Dataset:
    """A cached dataset: ``table_dir(t, fmt)`` is the directory of one table's files."""

    root: Path
    meta: dict[str, Any]

    def table_dir(self, table: str, fmt: str = "parquet") -> str:
        return str(self.root / table / fmt)

    def rows(self, table: str) -> int:
        return int(self.meta["tables"][table]["rows"])

    def ddl(self, table: str) -> str:
        return str(self.meta["tables"][table]["ddl"])


def _event_times(rng: np.random.Generator, n: int, disorder_ms: int, late_fraction: float) -> np.ndarray:
    """Arrival order ``i`` -> event time ms: ``T0 + i`` minus disorder, minus lateness for a few."""
    et = T0_MS + np.arange(n, dtype=np.int64)
    et -= rng.integers(0, disorder_ms + 1, size=n, dtype=np.int64)
    late = rng.random(n) < late_fraction
    et[late] -= rng.integers(
        WATERMARK_LAG_MS + 1, MAX_LATE_DELAY_MS + 1, size=int(late.sum()), dtype=np.int64
    )
    return et


def _zipf(rng: np.random.Generator, n: int, keys: int, s: float = 1.1) -> np.ndarray:
    """``n`` draws from ranks 0..keys-1 with P(rank k) proportional to 1/(k+1)^s."""
    cdf = np.cumsum(1.0 / np.arange(1, keys + 1, dtype=np.float64) ** s)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), keys - 1)


def _ts(ms: np.ndarray) -> Any:
    return pa.array(ms * 1000, pa.timestamp("us", tz="UTC"))


def _table(columns: dict[str, Any]) -> pa.Table:
    return pa.table(columns)


def clickstream_table(spec: ClickstreamSpec) -> pa.Table:
    rng = np.random.default_rng(spec.seed)
    n = spec.events
    users = _zipf(rng, n, spec.keys)
    et = _event_times(rng, n, spec.disorder_ms, spec.late_fraction)
    amount = rng.integers(0, 51, size=n).astype(np.float64)
    return _table(
        {
            "user_id": pc.binary_join_element_wise("u", pa.array(users).cast(pa.string()), ""),
            "event_time": _ts(et),
            "amount": amount,
        }
    )


def nexmark_tables(spec: NexmarkSpec) -> dict[str, pa.Table]:
    rng = np.random.default_rng(spec.seed)
    n = spec.events
    num = np.arange(n, dtype=np.int64)
    et = _event_times(rng, n, spec.disorder_ms, spec.late_fraction)
    slot = num % 50
    epoch = num // 50
    # Ids of the newest person / auction generated at or before each event.
    last_person = 1_000 + epoch
    last_auction = 1_000 + epoch * 3 + np.minimum(slot, 3) - 1
    last_auction = np.maximum(last_auction, 1_000)

    person = slot == 0
    auction = (slot >= 1) & (slot <= 3)
    bid = slot > 3

    p_ids = last_person[person]
    person_t = _table(
        {
            "id": p_ids,
            "name": pc.binary_join_element_wise("person-", pa.array(p_ids).cast(pa.string()), ""),
            "email_address": pc.binary_join_element_wise(
                "p", pa.array(p_ids).cast(pa.string()), "@example.com"
            ),
            "credit_card": pa.array(rng.integers(10**15, 10**16, size=len(p_ids))).cast(pa.string()),
            "city": pa.array(np.array(["Phoenix", "Portland", "Seattle", "Boise", "Reno"])[p_ids % 5]),
            "state": pa.array(np.array(["AZ", "OR", "WA", "ID", "NV"])[p_ids % 5]),
            "date_time": _ts(et[person]),
        }
    )

    a_ids = 1_000 + epoch[auction] * 3 + slot[auction] - 1
    a_et = et[auction]
    initial = rng.integers(1, 1_000, size=len(a_ids))
    auction_t = _table(
        {
            "id": a_ids,
            "item_name": pc.binary_join_element_wise("item-", pa.array(a_ids).cast(pa.string()), ""),
            "description": pa.array(np.full(len(a_ids), "a thing for sale")),
            "initial_bid": initial,
            "reserve": initial + rng.integers(0, 1_000, size=len(a_ids)),
            "date_time": _ts(a_et),
            "expires": _ts(a_et + rng.integers(10_000, MAX_AUCTION_DURATION_MS, size=len(a_ids))),
            "seller": np.maximum(last_person[auction] - rng.integers(0, 100, size=len(a_ids)), 1_000),
            "category": 10 + rng.integers(0, 5, size=len(a_ids)),
        }
    )

    nb = int(bid.sum())
    newest = last_auction[bid]
    hot_auction = rng.integers(0, 2, size=nb) > 0  # hot auction ratio 2
    auction_id = np.where(
        hot_auction,
        np.maximum((newest // 100) * 100, 1_000),
        np.maximum(newest - rng.integers(0, 100, size=nb), 1_000),
    )
    newest_person = last_person[bid]
    hot_bidder = rng.integers(0, 4, size=nb) > 0  # hot bidder ratio 4
    bidder = np.where(
        hot_bidder,
        np.maximum((newest_person // 100) * 100 + 1, 1_000),
        np.maximum(newest_person - rng.integers(0, 1_000, size=nb), 1_000),
    )
    price = np.round(10.0 ** (rng.random(nb) * 6.0) * 100.0).astype(np.int64)
    channel, url = _channels(rng, nb)
    bid_t = _table(
        {
            "auction": auction_id,
            "bidder": bidder,
            "price": price,
            "channel": channel,
            "url": url,
            "date_time": _ts(et[bid]),
        }
    )
    tables = {"person": person_t, "auction": auction_t, "bid": bid_t}
    if spec.extra:
        padding = np.random.default_rng(spec.seed + 1)  # the other columns' draws stay the same
        tables = {
            k: t.append_column("extra", extra_column(padding, t, AVERAGE_BYTES[k])) for k, t in tables.items()
        }
    return tables


#: The hot channels, each with one URL (without a channel id); the others are ``channel-<n>``.
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
#: How many other channels there are, each with a URL of its own that names it (``&channel_id=n``).
CHANNELS = 10_000


def _channels(rng: np.random.Generator, n: int) -> tuple[Any, Any]:
    """Each bid's channel and URL, in the shape of Nexmark's generator: half the bids from one of
    the four hot channels (each with its URL, which has no channel id), the rest from one of
    :data:`CHANNELS` others, ``channel-<i>``, whose URL ends in ``&channel_id=<i>``. A URL is
    ``https://www.nexmark.com/<dir>/<dir>/<dir>/item.htm?query=1``, each ``<dir>`` 3-5 letters."""
    words = rng.integers(0, 26, size=(3 * (CHANNELS + 4), 5))
    lengths = rng.integers(3, 6, size=3 * (CHANNELS + 4))
    dirs = ["".join(chr(97 + c) for c in row[:k]) for row, k in zip(words, lengths, strict=True)]
    bases = [
        f"https://www.nexmark.com/{dirs[3 * i]}/{dirs[3 * i + 1]}/{dirs[3 * i + 2]}/item.htm?query=1"
        for i in range(CHANNELS + 4)
    ]
    names = np.array([*HOT_CHANNELS, *(f"channel-{i}" for i in range(CHANNELS))], dtype=object)
    urls = np.array([*bases[:4], *(f"{b}&channel_id={i}" for i, b in enumerate(bases[4:]))], dtype=object)
    hot = rng.integers(0, 2, size=n) > 0
    which = np.where(hot, rng.integers(0, 4, size=n), 4 + rng.integers(0, CHANNELS, size=n))
    return pa.array(names[which], pa.string()), pa.array(urls[which], pa.string())


def _csv_table(table: pa.Table) -> pa.Table:
    cols: list[Any] = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type):
            column = pc.strftime(column.cast(pa.timestamp("ms", tz="UTC")), format="%Y-%m-%d %H:%M:%S")
        cols.append(column)
    return pa.table(cols, names=table.column_names)


def _write_table(root: Path, name: str, table: pa.Table, files: int, ddl: str) -> dict[str, Any]:
    n = table.num_rows
    bounds = np.linspace(0, n, files + 1).astype(np.int64)
    base_mtime = 1_700_000_000
    for fmt in ("parquet", "csv"):
        (root / name / fmt).mkdir(parents=True, exist_ok=True)
    for i in range(files):
        part = table.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
        pq_path = root / name / "parquet" / f"part-{i:05d}.parquet"
        csv_path = root / name / "csv" / f"part-{i:05d}.csv"
        pq.write_table(part, pq_path, coerce_timestamps="us")
        pacsv.write_csv(
            _csv_table(part),
            csv_path,
            write_options=pacsv.WriteOptions(include_header=False, quoting_style="needed"),
        )
        for path in (pq_path, csv_path):
            os.utime(path, (base_mtime + i, base_mtime + i))
    return {"rows": n, "ddl": ddl, "columns": table.column_names}


def _materialise(
    root: Path, meta: dict[str, Any], tables: dict[str, tuple[pa.Table, str]], files: int
) -> None:
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta = {**meta, "tables": {k: _write_table(tmp, k, t, files, ddl) for k, (t, ddl) in tables.items()}}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)


def _load(root: Path) -> Dataset | None:
    meta_path = root / "meta.json"
    if not meta_path.exists():
        return None
    return Dataset(root=root, meta=json.loads(meta_path.read_text()))


def clickstream(spec: ClickstreamSpec, cache: Path = CACHE) -> Dataset:
    """The cached clickstream dataset for ``spec`` (generated on first use)."""
    root = cache / spec.name
    found = _load(root)
    if found is None:
        table = clickstream_table(spec)
        _materialise(
            root,
            {"generator": "clickstream", "params": asdict(spec), "t0_ms": T0_MS},
            {"events": (table, CLICKSTREAM_DDL)},
            spec.files,
        )
        found = _load(root)
    assert found is not None
    return found


def nexmark(spec: NexmarkSpec, cache: Path = CACHE) -> Dataset:
    """The cached Nexmark dataset (person, auction, bid tables) for ``spec``."""
    root = cache / spec.name
    found = _load(root)
    if found is None:
        tables = nexmark_tables(spec)
        extra = ", extra string" if spec.extra else ""
        ddls = {"person": PERSON_DDL + extra, "auction": AUCTION_DDL + extra, "bid": BID_DDL + extra}
        _materialise(
            root,
            {"generator": "nexmark", "params": asdict(spec), "t0_ms": T0_MS},
            {k: (tables[k], ddls[k]) for k in ("person", "auction", "bid")},
            spec.files,
        )
        found = _load(root)
    assert found is not None
    return found
