"""A griffe extension for the API reference: the reStructuredText bits of numpydoc.

krishiv_py's numpydoc docstrings name other objects with Sphinx roles
(``:class:`~krishiv_py.Job```, ``:meth:`Stream.start```) and end a paragraph
that introduces a code block with ``::``; mkdocstrings would print both as
they are. This extension turns each role into inline code with the name a
reader would write (the last component when the target starts with ``~``,
as Sphinx shows it, else the target as written) and such a ``::`` into
``:``, as Sphinx renders it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
_LITERAL_MARKER = re.compile(r"(?<=\S)::(?=\n[ \t]*\n)")


def as_markdown(text: str) -> str:
    r"""``text`` with Sphinx roles as inline code and ``::`` before a code block as ``:``.

    >>> as_markdown("See :class:`~krishiv_py.Job` and :meth:`Stream.start`.")
    'See `Job` and `Stream.start`.'
    >>> as_markdown("For example::\n\n    run()")
    'For example:\n\n    run()'
    """

    def code(match: re.Match[str]) -> str:
        target = match.group(2)
        return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"

    return _LITERAL_MARKER.sub(":", _ROLE.sub(code, text))


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite the reStructuredText bits of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)
