"""Durability profiles: where a job's state lives and which Spark state store keeps it.

============================  ==========================  ======================================
profile                       state store                 checkpoints and memory streams
============================  ==========================  ======================================
``dev-local``                 Spark's default (HDFS-      ``state_dir``, or a temporary directory
                              backed, in memory)          removed by ``Session.stop()``
``single-node-durable``       RocksDB, changelog          ``state_dir``, or :data:`DEFAULT_STATE_DIR`;
                              checkpointing               never removed
``distributed-durable``       RocksDB, changelog          ``state_dir`` must be a URI every node
                              checkpointing               sees (``hdfs://``, ``s3a://``, ...); a
                                                          plain local path only with a local master
============================  ==========================  ======================================

A query reads its state-store settings when it starts, so a job's profile
(the session's, or the one given to ``Stream.start``) is applied around
``writeStream.start()`` and recorded by Spark in the checkpoint: a restart
from that checkpoint keeps the store it was started with.

Examples
--------
>>> profile("single-node-durable").state_store
'rocksdb'
>>> try:
...     check_location("distributed-durable", "/data/krishiv", master="spark://db:7077")
... except SessionError as exc:
...     print(str(exc)[:81])
durability 'distributed-durable' needs a state_dir every node of the cluster sees
"""

from __future__ import annotations

import os
from typing import Literal, get_args

import attrs

import krishiv_py.files as files
from krishiv_py.errors import SessionError

__all__ = ["DEFAULT_STATE_DIR", "Durability", "DurabilityProfile", "check_location", "profile"]

Durability = Literal["dev-local", "single-node-durable", "distributed-durable"]

#: Where ``single-node-durable`` keeps state when no ``state_dir`` is given
#: (``$KRISHIV_STATE_DIR`` when set).
DEFAULT_STATE_DIR = os.path.join("~", ".krishiv", "state")

_ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


@attrs.frozen
class DurabilityProfile:
    name: Durability
    state_store: Literal["default", "rocksdb"]
    persistent: bool

    @property
    def query_conf(self) -> dict[str, str]:
        """The Spark settings a query of this profile starts with."""
        return dict(_ROCKSDB) if self.state_store == "rocksdb" else {}

    def describe(self) -> str:
        rocks = self.state_store == "rocksdb"
        store = "RocksDB state store, changelog checkpointing" if rocks else "Spark's default state store"
        kept = "kept" if self.persistent else "removed when the session stops, unless state_dir is given"
        return f"{self.name}: {store}; checkpoints {kept}"


_PROFILES = {
    "dev-local": DurabilityProfile("dev-local", "default", persistent=False),
    "single-node-durable": DurabilityProfile("single-node-durable", "rocksdb", persistent=True),
    "distributed-durable": DurabilityProfile("distributed-durable", "rocksdb", persistent=True),
}


def profile(name: str) -> DurabilityProfile:
    """The profile called ``name`` (:class:`SessionError` for an unknown one)."""
    if name not in _PROFILES:
        raise SessionError(f"unknown durability {name!r}; choose one of {', '.join(get_args(Durability))}")
    return _PROFILES[name]


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URI of a file system other than this machine's (not ``file://``)."""
    return files.object_store(path)


def check_location(name: str, state_dir: str | None, *, master: str) -> str | None:
    """The state directory a session of profile ``name`` uses (None: a temporary one).

    Raises :class:`SessionError` when the profile cannot keep its promise there.
    """
    prof = profile(name)
    if prof.name == "dev-local":
        return state_dir
    if prof.name == "single-node-durable":
        if state_dir is not None and is_uri(state_dir):
            raise SessionError(
                f"durability 'single-node-durable' keeps state in a local directory; got {state_dir!r} "
                "(use 'distributed-durable' for a shared URI)"
            )
        chosen = state_dir or os.environ.get("KRISHIV_STATE_DIR") or DEFAULT_STATE_DIR
        return os.path.abspath(os.path.expanduser(chosen))
    if state_dir is None:
        raise SessionError(
            "durability 'distributed-durable' needs state_dir: a URI every node of the cluster sees "
            "(hdfs://, s3a://, gs://, abfs://, ...)"
        )
    if not is_uri(state_dir) and not master.startswith("local"):
        raise SessionError(
            "durability 'distributed-durable' needs a state_dir every node of the cluster sees "
            f"(hdfs://, s3a://, gs://, abfs://, ...); {state_dir!r} is a local path and the master "
            f"is {master!r}"
        )
    return state_dir
