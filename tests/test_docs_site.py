"""The documentation site covers the public API and lists every page (no Spark, no mkdocs needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import krishiv_py as kp

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
_DIRECTIVE = re.compile(r"^::: krishiv_py\.(\S+)\s*$", re.MULTILINE)
#: Public modules with a reference page of their own, beside the names of krishiv_py.__all__.
MODULES = {"testing", "tables.changelog", "devtools.KafkaBroker", "devtools.PostgresServer"}
#: Public names of optional modules (``krishiv_py.viz`` needs the ``viz`` extra).
OPTIONAL = {"viz.timeline", "viz.Timeline"}


def _config() -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert isinstance(config, dict)
    return config


def _nav_paths(entry: object) -> list[str]:
    """Every page path in a (nested) mkdocs nav entry."""
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [p for item in entry for p in _nav_paths(item)]
    if isinstance(entry, dict):
        return [p for value in entry.values() for p in _nav_paths(value)]
    raise AssertionError(f"unexpected nav entry {entry!r}")


def _nav() -> list[str]:
    return _nav_paths(_config()["nav"])


def _documented() -> list[str]:
    """Names rendered by a ``::: krishiv_py.<name>`` block of the reference pages."""
    return [name for page in sorted(REFERENCE.glob("*.md")) for name in _DIRECTIVE.findall(page.read_text())]


def test_every_public_name_is_in_the_reference() -> None:
    missing = sorted(set(kp.__all__) - set(_documented()))
    assert not missing, f"add a '::: krishiv_py.<name>' block to a page of docs/reference/ for: {missing}"


def test_the_reference_documents_only_public_names_once() -> None:
    documented = _documented()
    assert sorted(set(documented) - set(kp.__all__) - MODULES - OPTIONAL) == []
    assert sorted({n for n in documented if documented.count(n) > 1}) == []


def test_every_page_is_in_the_nav() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    notebooks = {p.relative_to(ROOT).as_posix() for p in (ROOT / "examples" / "notebooks").glob("*.ipynb")}
    missing = sorted((pages | notebooks) - set(_nav()))
    assert not missing, f"add to the nav of mkdocs.yml: {missing}"


@pytest.mark.parametrize("path", _nav())
def test_every_nav_entry_exists(path: str) -> None:
    # Pages come from docs/; docs/_hooks.py mounts files from outside it at their repository path.
    assert (DOCS / path).is_file() or (ROOT / path).is_file(), path


def test_the_build_is_strict_and_runs_the_notebooks() -> None:
    config = _config()
    assert config["docs_dir"] == "docs"
    assert set(config["validation"].values()) == {"warn"}
    plugins = {next(iter(p)) if isinstance(p, dict) else p: p for p in config["plugins"]}
    jupyter = plugins["mkdocs-jupyter"]["mkdocs-jupyter"]
    assert jupyter["execute"] is True
    assert jupyter["allow_errors"] is False
    python = plugins["mkdocstrings"]["mkdocstrings"]["handlers"]["python"]
    assert python["options"]["docstring_style"] == "numpy"


def test_the_index_lists_every_page_and_every_example() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md")
    examples = sorted(p.name for p in (DOCS.parent / "examples").glob("*.py"))
    missing = [p for p in pages if f"]({p})" not in index]
    missing += [e for e in examples if f"](../examples/{e})" not in index]
    assert not missing, f"docs/index.md leaves out {missing}"


def test_the_reference_index_names_what_each_page_documents() -> None:
    """Each row of the reference's table of pages names every public name its page renders."""
    rows = re.findall(
        r"^\| \[[^]]+\]\((\w+)\.md\) \| (.*) \|$", (REFERENCE / "index.md").read_text(), re.MULTILINE
    )
    assert rows
    for page, names in rows:
        documented = _DIRECTIVE.findall((REFERENCE / f"{page}.md").read_text())
        missing = [n for n in documented if n in kp.__all__ and f"`{n}`" not in names]
        assert not missing, f"docs/reference/index.md: the row of {page}.md leaves out {missing}"
