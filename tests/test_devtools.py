"""krishiv_py.devtools without Spark: nothing imports its former home, krishiv_py.runtime.cluster."""

from __future__ import annotations

import re
from pathlib import Path

FORMER_HOME = "krishiv_py.runtime.cluster"
ROOT = Path(__file__).resolve().parent.parent


def test_nothing_in_the_repository_imports_the_old_module() -> None:
    pattern = re.compile(
        r"(from|import)\s+krishiv_py\.runtime\.cluster\b|from\s+krishiv_py\.runtime\s+import\s+cluster\b"
    )
    dirs = ("krishiv_py", "tests", "benchmarks", "examples", "docs")
    files = [f for d in dirs for f in (ROOT / d).rglob("*") if f.suffix in (".py", ".md", ".ipynb")]
    files += [ROOT / "noxfile.py", ROOT / "README.md"]
    users = [str(f.relative_to(ROOT)) for f in files if pattern.search(f.read_text(encoding="utf-8"))]
    assert users == [], f"import krishiv_py.devtools instead of {FORMER_HOME} in {users}"
