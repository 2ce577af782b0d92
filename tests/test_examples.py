"""Every script in examples/ runs (in this process, on the shared Spark) and checks itself."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import krishiv_py as kp
from krishiv_py.demo import run_demo

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(session: kp.Session, path: Path) -> None:
    runpy.run_path(str(path), run_name="__main__")
    assert session.spark.range(1).count() == 1  # the example did not stop the shared Spark


def test_demo_prints_windows_and_metrics(session: kp.Session) -> None:
    lines: list[str] = []
    assert run_demo(echo=lines.append) == 0
    text = "\n".join(lines)
    assert "Window results" in text
    assert "user-0" in text
    assert "input_rows" in text
    assert "dropped as late (sent - counted): 4" in text
    # Values a reader can read: no raw epoch milliseconds, empty sets or unnamed lowerings.
    assert "clicks: end of input" in text and "4503599627370496" not in text
    assert "frozenset" not in text
    assert "n/a (not observable in the native lowering)" in text
