"""Developer tasks: ``nox -s tests lint typecheck examples bench``."""

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
    session.install("ruff>=0.6")
    session.run("ruff", "check", "krishiv_py", "tests", "benchmarks", "examples", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the tests."""
    session.install("-e", ".[dev]")
    session.run("mypy", "--strict", "krishiv_py", "tests", "examples", "benchmarks")


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """Run every example script."""
    session.install("-e", ".")
    import pathlib

    for script in sorted(pathlib.Path("examples").glob("*.py")):
        session.run("python", str(script))


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: ratios against hand-written PySpark in the same run (``-- --quick``)."""
    session.install("-e", ".")
    session.run("python", "-m", "benchmarks", *session.posargs)
