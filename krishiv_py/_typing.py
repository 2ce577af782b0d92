"""Type aliases shared across the package (Polars keeps the same in ``polars/_typing.py``).

Closed value sets are ``Literal`` aliases, so mypy checks every value a
caller passes and every dispatch over them.

Examples
--------
>>> from typing import get_args
>>> get_args(Lowering)
('native', 'stateful', 'bounded')
>>> get_args(WindowKind)
('tumbling', 'sliding', 'session', 'capped_session', 'time_interval', 'event_sliding', 'processing_tumbling')
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["Lowering", "WindowKind"]

#: How a plan runs on Spark (see :mod:`krishiv_py.planner.spark.choose`).
Lowering: TypeAlias = Literal["native", "stateful", "bounded"]

#: The kinds of event-time window; ``capped_session`` is a session with ``max_duration_ms``,
#: ``time_interval`` the panes of SPL's timeInterval window, ``event_sliding`` Kafka's KIP-450 windows,
#: ``processing_tumbling`` a tumbling window in processing time.
WindowKind: TypeAlias = Literal[
    "tumbling",
    "sliding",
    "session",
    "capped_session",
    "time_interval",
    "event_sliding",
    "processing_tumbling",
]
