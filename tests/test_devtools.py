"""krishiv_py.devtools without Spark: the deprecated alias krishiv_py.runtime.cluster, and who imports it."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import krishiv_py.devtools as devtools

ALIAS = "krishiv_py.runtime.cluster"
ROOT = Path(__file__).resolve().parent.parent


def test_the_old_module_warns_and_re_exports_the_devtools_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, ALIAS, raising=False)  # imported afresh, so it warns again
    with pytest.warns(
        DeprecationWarning, match=r"krishiv_py\.runtime\.cluster has moved to krishiv_py\.devtools"
    ):
        alias = importlib.import_module(ALIAS)
    assert alias.__all__ == devtools.__all__
    for name in devtools.__all__:
        assert getattr(alias, name) is getattr(devtools, name), name
    for name in ("HOST", "DEFAULT_TIMEOUT_S", "MASTER_CLASS", "WORKER_CLASS", "CONNECT_CLASS"):
        assert hasattr(alias, name), name


def test_nothing_in_the_repository_imports_the_old_module() -> None:
    pattern = re.compile(
        r"(from|import)\s+krishiv_py\.runtime\.cluster\b|from\s+krishiv_py\.runtime\s+import\s+cluster\b"
    )
    dirs = ("krishiv_py", "tests", "benchmarks", "examples", "docs")
    files = [f for d in dirs for f in (ROOT / d).rglob("*") if f.suffix in (".py", ".md", ".ipynb")]
    files += [ROOT / "noxfile.py", ROOT / "README.md"]
    users = [str(f.relative_to(ROOT)) for f in files if pattern.search(f.read_text(encoding="utf-8"))]
    assert users == [], f"import krishiv_py.devtools instead of {ALIAS} in {users}"
