"""Every Python snippet in README.md runs on its own (fresh globals, this process's Spark)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import krishiv_py as kp

README = Path(__file__).parent.parent / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs_alone(
    session: kp.Session, index: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = compile(SNIPPETS[index], f"README.md snippet {index + 1}", "exec")
    exec(code, {"__name__": f"readme_{index}"})  # a fresh namespace: nothing from other snippets
    assert capsys.readouterr().out.strip(), "a README snippet shows something"
    assert session.spark.range(1).count() == 1  # the snippet did not stop the shared Spark
