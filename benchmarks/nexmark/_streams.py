"""What every query module shares: the streams a query reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import attrs

from benchmarks.data import MAX_AUCTION_DURATION_MS
from krishiv_py.api.stream import Stream
from krishiv_py.expr import Expr
from krishiv_py.plan import nodes as n

#: Every stream's watermark lag (ms), as the other benchmark queries (:mod:`benchmarks.queries`).
LAG_MS = 5_000
#: The interval joins of Nexmark's regular joins (q3, q20, q23): a partner at most the longest auction
#: before or after a row. On this generator a pair's event times are at most 67 s apart (a partner is
#: among the newest when its row is generated, plus 2 s of disorder and up to 60 s of lateness on
#: each side), so the bound holds every pair and the join gives the regular join's rows.
BETWEEN = (-MAX_AUCTION_DURATION_MS, MAX_AUCTION_DURATION_MS)


class Streams(Protocol):
    """The three Nexmark streams, each with its watermark on ``date_time``."""

    @property
    def bid(self) -> Stream: ...

    @property
    def auction(self) -> Stream: ...

    @property
    def person(self) -> Stream: ...

    @property
    def side_input(self) -> Stream:
        """q13's side table: ``key bigint, value string``, 10,000 rows, bounded (no watermark)."""
        ...


@dataclass(frozen=True)
class Tables:
    """:class:`Streams` of the tables a caller has, by name (``Tables({"bid": bids}).bid``): a query
    that reads another table is told which ones it was given."""

    streams: Mapping[str, Stream]

    def __getattr__(self, table: str) -> Stream:
        streams: Mapping[str, Stream] = self.__dict__.get("streams", {})  # (not yet set: unpickling)
        if table not in streams:
            given = ", ".join(streams) or "none"
            raise AttributeError(f"this query reads the table {table!r}; the streams given are {given}")
        return streams[table]


def timed(streams: Mapping[str, Stream], lag_ms: int, column: str = "date_time") -> Tables:
    """``streams`` (without a watermark), each with its watermark on ``column``, ``lag_ms`` behind."""
    return Tables({name: s.watermark(column, lag_ms) for name, s in streams.items()})


def kept_before_watermark(stream: Stream, condition: Expr) -> Stream:
    """The rows of ``stream`` (a source with its watermark) that meet ``condition``, filtered before the
    watermark, which is then the kept rows' own.

    A join side filtered this way (Nexmark's ``WHERE`` on one side pushed
    below the join, as a SQL optimizer does) has the watermark of the rows
    that reach the join, in every runner of the benchmark suite: the
    hand-written Spark join and the reference model filter first too
    (:mod:`benchmarks.joins`).
    """
    mark = stream.plan
    if not isinstance(mark, n.Watermark):
        raise ValueError(f"a stream with its watermark last, not {type(mark).__name__}")
    kept = Stream(stream.session, mark.input).filter(condition)
    return Stream(stream.session, attrs.evolve(mark, input=kept.plan))
