"""MkDocs hooks: files that live outside ``docs/`` become part of the site.

The example notebooks and scripts stay in ``examples/`` (where they run and
are tested) and the changelog stays at the top of the repository. Instead of
copying them into ``docs/`` or linking them there, ``on_files`` adds each one
to the build at its path in the repository (``examples/late_events.py``,
``CHANGELOG.md``): the notebooks become pages rendered by mkdocs-jupyter,
the scripts static files, the changelog a page.

Pages link to those files by their place in the repository
(``../examples/late_events.py`` from ``docs/lateness.md``), which is right
when the Markdown is read on its own; ``on_page_markdown`` rewrites such
links to the file's path in the site, and the links inside ``CHANGELOG.md``
(``docs/lateness.md``) to the pages of the site. A link to a file that is
neither in ``docs/`` nor mounted is left alone, so MkDocs still reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent

#: Files outside docs/ that the site shows, at the same path as in the repository.
_MOUNTED = ("examples/*.py", "examples/notebooks/*.ipynb", "CHANGELOG.md")

_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)
_LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")


def mounts() -> dict[str, Path]:
    """Path in the site (= path in the repository) of each file taken from outside ``docs/``."""
    found: dict[str, Path] = {}
    for pattern in _MOUNTED:
        for path in sorted(ROOT.glob(pattern)):
            relative = path.relative_to(ROOT)
            if path.is_file() and not any(part.startswith(".") for part in relative.parts):
                found[relative.as_posix()] = path
    return found


@event_priority(50)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files: Files, config: Any) -> Files:
    # A File whose src_dir is the repository root, not File.generated: mkdocs-jupyter
    # wraps notebook files in a way that loses a generated file's source path.
    for site_path in mounts():
        if files.get_file_from_path(site_path) is None:
            files.append(
                File(
                    site_path,
                    src_dir=str(ROOT),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src_uri: str = page.file.src_uri
    real = Path(page.file.abs_src_path).resolve()
    docs_dir = Path(config["docs_dir"]).resolve()
    by_real = {p.resolve(): site for site, p in mounts().items()}

    def site_path_of(target: Path) -> str | None:
        if target in by_real:
            return by_real[target]
        if target.is_relative_to(docs_dir):
            return target.relative_to(docs_dir).as_posix()
        return None

    def rewrite(match: re.Match[str]) -> str:
        url = match.group(2)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url) or url.startswith(("#", "/")):
            return match.group(0)
        path, sep, fragment = url.partition("#")
        target = site_path_of(Path(posixpath.normpath((real.parent / path).as_posix())))
        if target is None or target == posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), path)):
            return match.group(0)
        new = posixpath.relpath(target, posixpath.dirname(src_uri) or ".")
        return f"{match.group(1)}{new}{sep}{fragment}{match.group(3)}"

    # Leave fenced code blocks alone: odd pieces of the split are inside a fence.
    pieces = _FENCE.split(markdown)
    out: list[str] = []
    inside = False
    for piece in pieces:
        if piece in ("```", "~~~"):
            inside = not inside
            out.append(piece)
        else:
            out.append(piece if inside else _LINK.sub(rewrite, piece))
    return "".join(out)
