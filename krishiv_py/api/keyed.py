"""``KeyedStream``: a stream partitioned by key columns, before windowing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from krishiv_py.api.windowed import WindowAssigners, WindowedStream
from krishiv_py.errors import PlanError
from krishiv_py.plan.windows import WindowSpec

if TYPE_CHECKING:
    from krishiv_py.api.stream import Stream

__all__ = ["KeyedStream"]


@attrs.frozen
class KeyedStream(WindowAssigners):
    """Returned by ``Stream.key_by``; windows computed per key."""

    stream: Stream
    keys: tuple[str, ...]

    def __attrs_post_init__(self) -> None:
        if not self.keys:
            raise PlanError("key_by() needs at least one column")
        schema = self.stream.schema
        for k in self.keys:
            if not isinstance(k, str):
                raise PlanError(f"key_by() takes column names, got {k!r}")
            schema.field(k, role="key column")
        if len(set(self.keys)) != len(self.keys):
            raise PlanError(f"key_by() names a column twice: {', '.join(self.keys)}")

    def _windowed(self, window: WindowSpec) -> WindowedStream:
        return WindowedStream(self.stream, self.keys, window)
