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


def test_the_readme_lists_every_docs_page() -> None:
    listed = set(re.findall(r"\(docs/([\w-]+\.md)\)", README.read_text().split("## Documentation", 1)[1]))
    pages = {p.name for p in (README.parent / "docs").glob("*.md")}
    assert not pages - listed, f"README.md's Documentation list leaves out {sorted(pages - listed)}"


def test_extras_install_from_the_clone() -> None:
    """krishiv_py is not on PyPI: ``pip install 'krishiv_py[x]'`` fails, ``'.[x]'`` in the clone works."""
    root = README.parent
    texts = [README, *(root / "docs").rglob("*.md"), *(root / "examples").glob("*.py")]
    wrong = [
        p.relative_to(root).as_posix() for p in texts if re.search(r"install \S*krishiv_py\[", p.read_text())
    ]
    assert not wrong, f"install extras as python -m pip install '.[extra]' in: {wrong}"
    assert "python -m pip install '.[kafka,duckdb]'" in README.read_text()
