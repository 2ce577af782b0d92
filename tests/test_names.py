"""Every hidden name is defined once, in :mod:`krishiv_py.names`, with a value of its own."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from krishiv_py import names

PACKAGE = Path(names.__file__).resolve().parent
ROOT = PACKAGE.parent
#: The prefixes of hidden names: ``__krishiv_`` is the table sinks' older one.
PREFIXES = (names.HIDDEN_PREFIX, "__krishiv_")


def _constants() -> dict[str, str]:
    """The string constants of ``names.__all__``, by name."""
    return {n: v for n in names.__all__ if isinstance(v := getattr(names, n), str)}


def _hidden_values() -> set[str]:
    """The values no other module may spell out: the hidden columns, observations and prefixes."""
    return {v for v in _constants().values() if v.startswith(("__", "kp_"))}


def _docstrings(tree: ast.Module) -> set[int]:
    """The ``id`` of each docstring node in ``tree`` (they hold doctest examples)."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(first.value)
        for node in ast.walk(tree)
        if isinstance(node, owners) and node.body
        for first in node.body[:1]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if isinstance(first.value.value, str)
    }


def offenders(path: Path, source: str, hidden: set[str]) -> list[str]:
    """``file:line: 'value'`` of each string constant in ``source`` that spells out a hidden name.

    String constants include the literal parts of f-strings; docstrings are exempt.
    """
    tree = ast.parse(source, filename=str(path))
    docstrings = _docstrings(tree)
    strings = [
        (n.lineno, n.col_offset, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]
    return [
        f"{path}:{line}: {value!r}"
        for line, _, value in sorted(strings)
        if value.startswith(PREFIXES) or value in hidden
    ]


def test_every_name_has_a_value_of_its_own() -> None:
    by_value: dict[str, list[str]] = defaultdict(list)
    for name, value in _constants().items():
        by_value[value].append(name)
    shared = {v: ns for v, ns in by_value.items() if len(ns) > 1}
    assert not shared, f"names sharing a value in krishiv_py/names.py: {shared}"


def test_no_module_spells_out_a_hidden_name() -> None:
    hidden = _hidden_values()
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "names.py"
        for line in offenders(path.relative_to(ROOT), path.read_text(encoding="utf-8"), hidden)
    ]
    assert not found, "define these in krishiv_py/names.py and import them:\n" + "\n".join(found)


def test_the_scan_finds_literals_and_spares_docstrings() -> None:
    source = '''"""Module doc: ``__kp_et``."""

def f(i: int) -> str:
    """Function doc: ``__kp_seq``."""
    x = "__kp_planted"
    return f"__krishiv_{i}" + x + "kp_out"


class C:
    """Class doc: ``__kp_wm``."""

    y = "__kp_t"
'''
    assert names.OUT_OBSERVE == "kp_out"
    assert offenders(Path("m.py"), source, _hidden_values()) == [
        "m.py:5: '__kp_planted'",
        "m.py:6: '__krishiv_'",
        "m.py:6: 'kp_out'",
        "m.py:12: '__kp_t'",
    ]
