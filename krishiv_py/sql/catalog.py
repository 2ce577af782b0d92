"""The streams a session's SQL can read, by name, and the settings its next query takes.

Every source registers under its ``name`` when it is made (memory streams,
records, file sources); ``Stream.register(name)`` registers any stream. A
name registered again replaces the earlier stream, as a source made again
under its name does (a notebook cell run twice).
"""

from __future__ import annotations

import re
import threading

from krishiv_py.errors import PlanError
from krishiv_py.plan import nodes as n
from krishiv_py.sql.settings import SqlSettings

__all__ = ["SqlCatalog", "check_name"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_name(name: object) -> str:
    """``name`` if it is an identifier SQL can write without quotes, else :class:`PlanError`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise PlanError(f"stream name {name!r} must be an identifier (letters, digits, _)")
    return name


class SqlCatalog:
    """Named plans, and the ``SET`` settings waiting for the next query."""

    def __init__(self) -> None:
        self._plans: dict[str, n.PlanNode] = {}
        #: Settings of ``SET`` statements, taken by the next query.
        self.pending = SqlSettings()
        #: How many sources were made under each name.
        self._made: dict[str, int] = {}
        self._counter = 0
        self._lock = threading.Lock()

    def claim(self, name: str | None) -> tuple[str, int]:
        """The name of a new source and how many sources have had it (1: the first).

        ``name`` None: the next free ``stream_<n>``. A name used again
        replaces the earlier registration (a notebook cell run again).
        """
        with self._lock:
            if name is None:
                self._counter += 1
                while f"stream_{self._counter}" in self._made:
                    self._counter += 1
                name = f"stream_{self._counter}"
            check_name(name)
            self._made[name] = self._made.get(name, 0) + 1
            return name, self._made[name]

    @property
    def sources(self) -> tuple[str, ...]:
        """The names sources were made under, sorted."""
        return tuple(sorted(self._made))

    def register(self, name: str, plan: n.PlanNode) -> None:
        """Make ``plan`` readable as ``name`` (replacing what had that name)."""
        self._plans[check_name(name)] = plan

    def lookup(self, name: str) -> n.PlanNode | None:
        """The plan called ``name``: the exact name, else the one name equal to it ignoring case."""
        if name in self._plans:
            return self._plans[name]
        same = [k for k in self._plans if k.lower() == name.lower()]
        return self._plans[same[0]] if len(same) == 1 else None

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._plans))
