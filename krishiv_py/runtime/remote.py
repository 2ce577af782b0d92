"""Reaching Spark beyond this process: standalone masters and Spark Connect servers.

What runs where
    With ``Session.connect("spark://...")`` this process is Spark's driver:
    plans, the watermark/tick/idle bookkeeping and ``foreachBatch`` functions
    run here, tasks run on the cluster's executors. With
    ``Session.remote("sc://...")`` the driver is the Connect server: this
    process sends plans over gRPC, and ``foreachBatch`` functions run in a
    Python process on the server's host (which needs pyspark's ``connect``
    extra and krishiv_py installed, as the executors do). krishiv's stateful
    operator therefore hands each micro-batch's output to this process
    through files under the job's checkpoint (see
    :mod:`krishiv_py.runtime.handoff`), and Spark's observed metrics arrive
    in Connect's ``{"values": [...], "schema": {...}}`` form
    (:func:`named_metrics`).
Shared storage
    Memory streams spool their batches as files under the session's
    ``state_dir``, which Spark reads; checkpoints live there too. Every
    executor (and, over Connect, the server) must see that directory at the
    same path: any path on one machine, a shared mount or a URI on a real
    cluster. :func:`check_visible` proves it with a probe file before the
    first memory stream of a session that is not local.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from typing import TYPE_CHECKING, Any

from krishiv_py.errors import SessionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "build_remote",
    "on_this_machine",
    "check_reachable",
    "check_visible",
    "is_remote",
    "named_metrics",
    "parse_connect_url",
    "parse_master_url",
]

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def parse_connect_url(url: object) -> tuple[str, int]:
    """``(host, port)`` of a Spark Connect URL ``sc://host[:port][/;param=value...]``."""
    m = re.match(
        r"^sc://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+)(?::(\d+))?(/.*)?$", url if isinstance(url, str) else ""
    )
    if m is None:
        raise SessionError(f"a Spark Connect URL looks like sc://host:15002; got {url!r}")
    return m.group(1), int(m.group(2) or 15002)


def parse_master_url(master: str) -> tuple[str, int] | None:
    """``(host, port)`` of a standalone master ``spark://host:port`` (None for other masters)."""
    m = re.match(r"^spark://([^:/,]+)(?::(\d+))?$", master)
    return None if m is None else (m.group(1), int(m.group(2) or 7077))


def is_loopback(host: str) -> bool:
    return host in _LOOPBACK


def on_this_machine(master: str) -> bool:
    """True for ``local[...]`` and for a master or Connect server on loopback."""
    if master.startswith("local"):
        return True
    standalone = parse_master_url(master)
    if standalone is not None:
        return is_loopback(standalone[0])
    if master.startswith("sc://"):
        return is_loopback(parse_connect_url(master)[0])
    return False


def check_reachable(host: str, port: int, what: str, *, timeout_s: float = 5.0) -> None:
    """:class:`SessionError` unless something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            return
    except OSError as exc:
        raise SessionError(
            f"cannot reach the {what} at {host}:{port} ({exc.strerror or exc}); is it running, and is "
            "the address right? (`krishiv cluster start` / `krishiv connect-server start` run one here)"
        ) from exc


def build_remote(url: str, *, app_name: str, conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session to ``url``, with ``conf`` set on it (session-level settings)."""
    host, port = parse_connect_url(url)
    import importlib.util

    missing = [m for m in ("grpc", "grpc_status", "zstandard") if importlib.util.find_spec(m) is None]
    if missing:
        raise SessionError(
            f"Spark Connect needs pyspark's connect extra ({', '.join(missing)} missing): "
            "python -m pip install '.[connect]' (in the krishiv_py clone)"
        )
    from pyspark.sql import SparkSession

    check_reachable(host, port, "Spark Connect server")
    before = os.environ.get(CONNECT_MODE_ENV)
    try:
        # create(), not getOrCreate(), which refuses while a local session exists. It sets
        # CONNECT_MODE_ENV, which makes pyspark build Connect columns everywhere in this
        # process: a local session here is unusable until the remote one stops and
        # restore_mode() puts the variable back.
        spark = SparkSession.builder.remote(url).appName(app_name).create()
        for key, value in conf.items():
            spark.conf.set(key, value)
        version = spark.version
    except Exception as exc:
        restore_mode(before)
        from krishiv_py.spark_errors import spark_cause

        raise SessionError(f"Spark Connect at {url} did not answer: {spark_cause(exc)}") from exc
    import pyspark

    if version.split(".")[:2] != pyspark.__version__.split(".")[:2]:
        spark.stop()
        restore_mode(before)
        raise SessionError(
            f"the Spark Connect server runs Spark {version}, this process has pyspark "
            f"{pyspark.__version__}: use a client of the server's major.minor version"
        )
    return spark


CONNECT_MODE_ENV = "SPARK_CONNECT_MODE_ENABLED"


def restore_mode(before: str | None) -> None:
    """Put pyspark's Connect-mode switch back as it was before a remote session started."""
    if before is None:
        os.environ.pop(CONNECT_MODE_ENV, None)
    else:
        os.environ[CONNECT_MODE_ENV] = before


def is_remote(spark: Any) -> bool:
    """True for a Spark Connect session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def named_metrics(observed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Observed metrics by name, whichever form Spark returned them in.

    Classic Spark gives ``{"name": {"field": value}}``; Spark Connect gives
    ``{"name": {"values": [...], "schema": {"fields": [{"name": ...}]}}}``.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, metric in observed.items():
        if isinstance(metric, dict) and set(metric) == {"values", "schema"}:
            fields = [f["name"] for f in metric["schema"]["fields"]]
            out[name] = dict(zip(fields, metric["values"], strict=True))
        else:
            out[name] = dict(metric)
    return out


def check_visible(spark: SparkSession, directory: str, where: str) -> None:
    """:class:`SessionError` unless Spark's tasks can read files written to ``directory`` here."""
    os.makedirs(directory, exist_ok=True)
    token = uuid.uuid4().hex
    probe = os.path.join(directory, f"krishiv-probe-{token}.txt")  # no dot: Spark skips hidden files
    with open(probe, "w", encoding="utf-8") as f:
        f.write(token)
    try:
        seen = [r[0] for r in spark.read.text(probe).collect()]
    except Exception as exc:  # noqa: BLE001 - any failure to read it back means it is not visible
        from krishiv_py.spark_errors import spark_cause

        seen = [f"<{spark_cause(exc).splitlines()[0]}>"]
    finally:
        os.remove(probe)
    if seen != [token]:
        raise SessionError(
            f"Spark ({where}) cannot read the files this process writes under {directory} "
            f"(probe read back {seen[:1]!r}): memory streams and checkpoints need a state_dir that "
            "this process and every executor see at the same path (a shared mount), or read the "
            "input from files the cluster sees (read_parquet(..., streaming=True))"
        )
