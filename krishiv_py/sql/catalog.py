"""The streams a session's SQL can read, by name, the user functions it can call, and the settings
its next query takes.

Every source registers under its ``name`` when it is made (memory streams,
records, file sources); ``Stream.register(name)`` registers any stream. A
name registered again replaces the earlier stream, as a source made again
under its name does (a notebook cell run twice).
"""

from __future__ import annotations

import re
import threading

from krishiv_py.errors import PlanError
from krishiv_py.expr import UserFunction
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
        #: The user functions SQL may call, by name (``session.register_udf``).
        self._functions: dict[str, UserFunction] = {}
        #: Settings of ``SET`` statements, taken by the next query.
        self.pending = SqlSettings()
        #: How many sources were made under each name.
        self._made: dict[str, int] = {}
        self._counter = 0
        self._lock = threading.Lock()

    def claim(self, name: str | None, *, default: str | None = None) -> tuple[str, int]:
        """The name of a new source and how many sources have had it (1: the first).

        ``name`` None: ``default`` made an identifier (what the source
        reads, e.g. a Kafka topic), or ``<default>_2``, ``_3``, ... when a
        source has that name already; without ``default``, the next free
        ``stream_<n>``. A name given again replaces the earlier
        registration (a notebook cell run again).

        >>> catalog = SqlCatalog()
        >>> [catalog.claim(None, default=t)[0] for t in ("clicks", "orders.v1-eu", "clicks", "7days")]
        ['clicks', 'orders_v1_eu', 'clicks_2', '_7days']
        >>> catalog.claim(None)[0], catalog.claim("clicks")
        ('stream_1', ('clicks', 2))
        """
        with self._lock:
            if name is None and default is not None:
                base = re.sub(r"[^A-Za-z0-9_]", "_", default)
                base = base if _NAME.match(base) else f"_{base}"
                name, k = base, 1
                while name in self._made:
                    k += 1
                    name = f"{base}_{k}"
            elif name is None:
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

    def register_function(self, name: str, function: UserFunction) -> None:
        """Let SQL call ``function`` as ``name`` (any case), replacing what had that name."""
        self._functions[check_name(name).lower()] = function

    def function(self, name: str) -> UserFunction | None:
        """The user function SQL calls ``name`` (any case), or None."""
        return self._functions.get(name.lower())

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._plans))
