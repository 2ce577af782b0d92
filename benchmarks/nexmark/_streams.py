"""What every query module shares: the streams a query reads."""

from __future__ import annotations

from typing import Protocol

from krishiv_py.api.stream import Stream

#: Every stream's watermark lag (ms), as the other benchmark queries (:mod:`benchmarks.queries`).
LAG_MS = 5_000


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
