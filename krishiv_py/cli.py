"""The ``krishiv`` command.

``krishiv demo`` runs the embedded end-to-end demo; ``krishiv doctor``
checks this machine for what krishiv_py needs, one line per check;
``krishiv cluster
start|status|stop``, ``krishiv connect-server start|status|stop`` and
``krishiv kafka start|status|stop`` run a Spark standalone cluster, a Spark
Connect server or a Kafka-protocol broker on this machine
(:mod:`krishiv_py.devtools`), detached from the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from krishiv_py.errors import KrishivError

if TYPE_CHECKING:
    from krishiv_py.devtools import ConnectServer, KafkaBroker, LocalCluster

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]
#: State file names (under ``$KRISHIV_STATE_DIR`` or ``~/.krishiv``) of the two server kinds.
CLUSTER, CONNECT, KAFKA = "cluster", "connect-server", "kafka"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KrishivError as exc:
        print(f"krishiv: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the job was stopped and said so in one line
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each command's parser sets ``handler``, the function that runs it."""
    parser = argparse.ArgumentParser(prog="krishiv", description="krishiv_py command line")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_machine_commands(sub)
    _add_advise_command(sub)
    _add_state_command(sub)
    _add_server_groups(sub)
    return parser


def _add_machine_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``krishiv demo``, ``version``, ``doctor`` and ``jvm-archive``."""
    demo = sub.add_parser("demo", help="run the streaming demo (on local Spark unless told otherwise)")
    where = demo.add_mutually_exclusive_group()
    where.add_argument("--master", help="drive a standalone cluster from here: spark://host:port")
    where.add_argument("--remote", help="run on a Spark Connect server: sc://host:port")
    demo.set_defaults(handler=_demo)
    version = sub.add_parser("version", help="print the version")
    version.set_defaults(handler=_version)
    doctor = sub.add_parser(
        "doctor",
        help="check Java, Spark, the extras, writable directories and the servers named in the "
        "environment (KRISHIV_KAFKA, KRISHIV_POSTGRES_DSN, SPARK_REMOTE), one line each",
    )
    doctor.set_defaults(handler=_doctor)
    archive = sub.add_parser(
        "jvm-archive",
        help="write this machine's class archive of Spark: local Spark then starts in about half the time",
    )
    archive.add_argument("--path", help="where (default: $KRISHIV_CLASS_ARCHIVE, else the cache directory)")
    archive.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    archive.set_defaults(handler=_jvm_archive)


def _add_advise_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``krishiv advise PATH --time-column ...``."""
    advise = sub.add_parser(
        "advise", help="profile the event-time disorder of Parquet/CSV/JSON files and advise a watermark lag"
    )
    advise.add_argument("path", help="a data file, or a directory of them (read in name order)")
    advise.add_argument("--time-column", required=True, help="the event-time column (timestamp or epoch ms)")
    advise.add_argument("--key", action="append", default=[], help="a key column (repeat for more)")
    advise.add_argument("--format", choices=["parquet", "csv", "json"], help="default: from the file names")
    advise.add_argument("--window-ms", type=int, help="a tumbling window size, for the lateness advice")
    advise.add_argument("--lag-ms", type=int, default=0, help="the lag used today (default 0)")
    advise.add_argument(
        "--completeness", type=float, default=0.999, help="share of events to put on time (default 0.999)"
    )
    advise.add_argument(
        "--caught",
        type=float,
        default=0.9999,
        help="share of events to count in their windows (default 0.9999)",
    )
    advise.set_defaults(handler=_advise)


def _add_state_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``krishiv state show CHECKPOINT``."""
    state = sub.add_parser("state", help="look inside a job's checkpoint")
    state_actions = state.add_subparsers(dest="action", required=True)
    show = state_actions.add_parser(
        "show",
        help="what a checkpoint's state holds: lowering, carrier, key groups, tasks, last batch, "
        "watermark, and per operator its keys, rows, bytes and largest key groups",
    )
    show.add_argument("checkpoint", help="the job's checkpoint_dir")
    show.add_argument("--json", action="store_true", help="print JSON (the same fields)")
    show.set_defaults(handler=_state_show)


def _add_server_groups(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``krishiv cluster``, ``connect-server`` and ``kafka``, each ``start|status|stop``."""
    start = _add_server_commands(sub, CLUSTER, "a Spark standalone cluster", "a master and workers")
    start.add_argument("--workers", type=int, default=1, help="number of workers (default 1)")
    start.add_argument("--cores", type=int, default=1, help="cores per worker (default 1)")
    start.add_argument("--memory", default="1g", help="memory per worker (default 1g)")
    start.set_defaults(handler=_cluster_start)
    start = _add_server_commands(sub, CONNECT, "a Spark Connect server", "a Spark Connect server")
    start.add_argument("--master", default="local[2]", help="the server's Spark master (default local[2])")
    start.set_defaults(handler=_connect_start)
    start = _add_server_commands(sub, KAFKA, "a Kafka-protocol broker (Tansu)", "a Kafka broker")
    start.set_defaults(handler=_kafka_start)


def _state_show(args: argparse.Namespace) -> int:
    from krishiv_py.runtime.state_view import describe_state, format_state

    info = describe_state(args.checkpoint)
    print(json.dumps(info, indent=2) if args.json else format_state(info))
    return 0


def _add_server_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, what: str, starts: str
) -> argparse.ArgumentParser:
    """``krishiv <name> start|status|stop``; returns the ``start`` parser, for options of its own."""
    group = sub.add_parser(name, help=f"{what} on this machine (127.0.0.1)")
    actions = group.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help=f"start {starts}, detached; print the URL and the log directory")
    start.add_argument("--log-dir", help="directory of the log files (default: a new temporary directory)")
    start.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for the servers (default 180)"
    )
    actions.add_parser("status", help=f"show the recorded {name}").set_defaults(
        handler=lambda _: _status(name)
    )
    actions.add_parser("stop", help=f"stop the recorded {name}").set_defaults(handler=lambda _: _stop(name))
    return start


def _advise(args: argparse.Namespace) -> int:
    import krishiv_py as kp
    from krishiv_py.advice import advise_plan
    from krishiv_py.advice.replay import file_format, read_files
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.types import to_schema

    fmt: Any = args.format or file_format(args.path)
    schema = to_schema(read_files(args.path, fmt)[0].schema)
    source = n.FileSource(name=Path(args.path).name or "files", schema=schema, format=fmt, path=args.path)
    stream: Any = Stream(cast(Any, None), source).watermark(args.time_column, args.lag_ms)
    if args.window_ms is not None:
        keyed = stream.key_by(*args.key) if args.key else stream
        stream = keyed.tumbling_window(args.window_ms).agg(kp.count(kp.col("*")))
    advice = advise_plan(stream.plan, completeness=args.completeness, caught=args.caught, keys=args.key)
    print(advice.describe())
    print(
        f"\nsuggested: .watermark({args.time_column!r}, {advice.lag_ms})"
        + (f" ... .allowed_lateness({advice.allowed_lateness_ms})" if advice.allowed_lateness_ms else "")
    )
    return 0


def _version(args: argparse.Namespace) -> int:
    from krishiv_py import __version__

    print(__version__)
    return 0


#: The extras and a module each brings, for ``krishiv doctor``.
EXTRAS = {
    "kafka": "confluent_kafka",
    "duckdb": "duckdb",
    "delta": "deltalake",
    "iceberg": "pyiceberg",
    "postgres": "psycopg",
    "connect": "grpc",
    "viz": "matplotlib",
    "metrics": "prometheus_client",
}
#: Environment variables naming servers ``krishiv doctor`` tries to reach.
SERVERS = ("KRISHIV_KAFKA", "KRISHIV_POSTGRES_DSN", "SPARK_REMOTE")


def _doctor(args: argparse.Namespace) -> int:
    """One line per check: ``ok``, ``--`` (optional and missing) or ``FAIL`` with the fix; 1 on a FAIL."""
    lines = [
        _check_java(),
        _check_spark(),
        _check_archive(),
        *_check_extras(),
        *_check_dirs(),
        *_check_servers(),
    ]
    for status, what, detail in lines:
        print(f"{status:4s} {what:14s} {detail}")
    return 1 if any(status == "FAIL" for status, _, _ in lines) else 0


Check = tuple[str, str, str]


def _check_java() -> Check:
    from krishiv_py.runtime.spark_session import MIN_JAVA, find_java, java_major_version

    java = find_java()
    if java is None:
        return "FAIL", "java", f"no java on JAVA_HOME or PATH: install Java {MIN_JAVA}+ (Spark 4 needs it)"
    version = java_major_version(java)
    if version is None or version < MIN_JAVA:
        return "FAIL", "java", f"{java} is not Java {MIN_JAVA}+: point JAVA_HOME at Java {MIN_JAVA} or newer"
    return "ok", "java", f"Java {version} ({java})"


def _check_spark() -> Check:
    import importlib.metadata

    try:
        return "ok", "pyspark", importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return "FAIL", "pyspark", "not installed: python -m pip install ."


def _check_archive() -> Check:
    """Whether local Spark starts from a class archive (``krishiv jvm-archive``); optional either way."""
    import os

    from krishiv_py.runtime.class_archive import ARCHIVE_ENV, archive_path
    from krishiv_py.runtime.spark_session import find_java

    path = archive_path(find_java())
    if path is None:
        return "--", "class archive", f"turned off ({ARCHIVE_ENV}) or no Java"
    if not os.path.isfile(path):
        return (
            "--",
            "class archive",
            f"not written (optional): `krishiv jvm-archive` halves local Spark's start-up ({path})",
        )
    return "ok", "class archive", f"{path} ({os.path.getsize(path) / 2**20:,.0f} MiB)"


def _check_extras() -> list[Check]:
    import importlib.util

    return [
        ("ok", f"extra {name}", module)
        if importlib.util.find_spec(module) is not None
        else ("--", f"extra {name}", f"not installed (optional): python -m pip install '.[{name}]'")
        for name, module in EXTRAS.items()
    ]


def _check_dirs() -> list[Check]:
    import os
    import tempfile

    out = []
    state = os.environ.get("KRISHIV_STATE_DIR") or str(Path.home() / ".krishiv")
    for what, where in (("temp dir", tempfile.gettempdir()), ("state dir", state)):
        try:
            os.makedirs(where, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=where):
                pass
            out.append(("ok", what, f"{where} is writable"))
        except OSError as exc:
            out.append(
                ("FAIL", what, f"{where} is not writable ({exc.strerror}): set TMPDIR or KRISHIV_STATE_DIR")
            )
    return out


def _check_servers() -> list[Check]:
    import os
    import socket
    from urllib.parse import urlparse

    out = []
    for name in SERVERS:
        value = os.environ.get(name)
        if not value:
            continue
        if "://" in value:
            url = urlparse(value)
            hosts = [(url.hostname or "127.0.0.1", url.port or {"sc": 15002}.get(url.scheme, 5432))]
        else:  # bootstrap servers: host:port,host:port
            hosts = [(h.rpartition(":")[0], int(h.rpartition(":")[2])) for h in value.split(",") if h.strip()]
        for host, port in hosts:
            try:
                socket.create_connection((host, port), timeout=3).close()
                out.append(("ok", name, f"{host}:{port} answers"))
            except OSError as exc:
                out.append(
                    ("FAIL", name, f"{host}:{port} is unreachable ({exc}): check that it runs and {name}")
                )
    return out


def _demo(args: argparse.Namespace) -> int:
    from krishiv_py.demo import run_demo

    return run_demo(master=args.master, remote=args.remote)


def _cluster_start(args: argparse.Namespace) -> int:
    from krishiv_py.devtools import LocalCluster

    try:
        servers = LocalCluster(
            workers=args.workers, cores_per_worker=args.cores, memory=args.memory, log_dir=args.log_dir
        )
    except ValueError as exc:
        print(f"krishiv: {exc}", file=sys.stderr)
        return 2
    noun = "worker" if args.workers == 1 else "workers"
    return _start(CLUSTER, servers, f"a Spark master and {args.workers} {noun}", args.timeout)


def _connect_start(args: argparse.Namespace) -> int:
    from krishiv_py.devtools import ConnectServer

    servers = ConnectServer(master=args.master, log_dir=args.log_dir)
    return _start(CONNECT, servers, f"a Spark Connect server ({args.master})", args.timeout)


def _kafka_start(args: argparse.Namespace) -> int:
    from krishiv_py.devtools import KafkaBroker

    return _start(KAFKA, KafkaBroker(log_dir=args.log_dir), "a Kafka broker (memory storage)", args.timeout)


def _start(
    name: str, servers: LocalCluster | ConnectServer | KafkaBroker, what: str, timeout_s: float
) -> int:
    from krishiv_py.devtools import read_state, recorded_processes, write_state

    running = read_state(name)
    if running is not None and any(p.alive() for p in recorded_processes(running)):
        print(
            f"krishiv: {name} already running at {running.get('url')}; `krishiv {name} stop` first",
            file=sys.stderr,
        )
        return 1
    print(f"starting {what} (logs in {servers.log_dir}) ...", file=sys.stderr)
    servers.start(timeout_s=timeout_s)
    state = servers.detach()
    path = write_state(name, state)
    print(f"url:     {state['url']}")
    if "web_ui" in state:
        print(f"web UI:  {state['web_ui']}")
    print(f"logs:    {state['log_dir']}")
    print(f"state:   {path}")
    print(f"started in {servers.startup_s or 0.0:.1f} s; stop with `krishiv {name} stop`")
    return 0


def _status(name: str) -> int:
    from krishiv_py.devtools import read_state, recorded_processes, state_path

    state = read_state(name)
    if state is None:
        print(f"no {name} recorded in {state_path(name)}")
        return 1
    procs = recorded_processes(state)
    alive = {p.name: p.alive() for p in procs}
    print(f"url:     {state.get('url')}")
    if "web_ui" in state:
        print(f"web UI:  {state['web_ui']}")
    print(f"logs:    {state.get('log_dir')}")
    for p in procs:
        print(f"{p.name}: pid {p.pid}, {'running' if alive[p.name] else 'not running'}, log {p.log}")
    extra = _cluster_detail(state) if name == CLUSTER and all(alive.values()) else ""
    if extra:
        print(extra)
    return 0 if alive and all(alive.values()) else 1


def _cluster_detail(state: dict[str, Any]) -> str:
    from urllib.parse import urlsplit

    from krishiv_py.devtools import master_status

    port = urlsplit(str(state.get("web_ui", ""))).port
    status = master_status(port) if port else {}
    if not status:
        return "the master's web UI does not answer"
    workers, cores = status.get("aliveworkers"), status.get("cores")
    return f"master {status.get('status')}, {workers} worker(s) alive, {cores} cores"


def _stop(name: str) -> int:
    from krishiv_py.devtools import state_path, stop_recorded

    state = stop_recorded(name)
    if state is None:
        print(f"no {name} recorded in {state_path(name)}: nothing to stop")
        return 0
    print(f"stopped {name} {state.get('url')} (logs in {state.get('log_dir')})")
    return 0


def _jvm_archive(args: argparse.Namespace) -> int:
    """Write the class archive (a child process runs :func:`_archive_workload` and dumps its classes)."""
    from krishiv_py.runtime.class_archive import archive_path, build_archive
    from krishiv_py.runtime.spark_session import check_java, find_java

    if args.workload:
        _archive_workload()
        return 0
    check_java()
    path = args.path or archive_path(find_java())
    if path is None:
        print("krishiv: the class archive is turned off (KRISHIV_CLASS_ARCHIVE=off)", file=sys.stderr)
        return 1
    try:
        build_archive(path, [sys.executable, "-m", "krishiv_py.cli", "jvm-archive", "--workload"])
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"krishiv: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({os.path.getsize(path) / 2**20:.0f} MiB): local Spark sessions start from it")
    return 0


def _archive_workload() -> None:
    """What the archive holds: the classes of a windowed job on each lowering, a join, a batch run."""
    import krishiv_py as kp
    from krishiv_py.runtime.class_archive import exit_jvm

    with kp.Session.embedded(app_name="krishiv-jvm-archive") as session:
        stream, sender = session.memory_stream("user string, t bigint, v double")
        other, other_sender = session.memory_stream("user string, t bigint, ad string")
        windows = stream.watermark("t", 0).key_by("user").tumbling_window(10_000)
        pipelines = [
            windows.agg(kp.count(kp.col("*")).alias("n"), kp.sum(kp.col("v")).alias("v")),
            stream.watermark("t", 0)
            .key_by("user")
            .interval_join(other.watermark("t", 0).key_by("user"), between=(-5_000, 0)),
        ]
        jobs = [pipelines[0].start(), pipelines[0].start(lowering="stateful"), pipelines[1].start()]
        for step in range(3):
            sender.send([{"user": "a", "t": step * 11_000, "v": 1.0}])
            other_sender.send([{"user": "a", "t": step * 11_000 - 1_000, "ad": "x"}])
            for job in jobs:
                job.process_all_available()
        for job in jobs:
            job.stop()
        rows = [{"user": "a", "t": 1_000, "v": 1.0}]
        session.from_records(rows, "user string, t bigint, v double").watermark("t", 0).key_by(
            "user"
        ).tumbling_window(10_000).agg(kp.count(kp.col("*"))).collect()
    exit_jvm()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
