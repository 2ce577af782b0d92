"""Displays for notebooks and terminals: short text reprs and small HTML tables.

Nothing here starts a JVM: a display reads what an object already knows
(and what a running job's Spark query reports), and a display that cannot
read something shows a dash instead of raising.
"""

from __future__ import annotations

import datetime as dt
import html
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from krishiv_py.plan.watermarks import END_OF_TIME_MS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["fmt_ms", "html_card", "register_ipython_formatters", "table_html", "table_text"]

DASH = "—"
_STYLE = (
    "border-collapse:collapse;font-family:var(--jp-code-font-family,monospace);font-size:12px;text-align:left"
)
_CELL = "padding:2px 10px 2px 0;text-align:left;vertical-align:top"


def fmt_ms(ms: int | None, *, missing: str = DASH) -> str:
    """An epoch-millisecond time as UTC text; end of input and "none yet" spelled out."""
    if ms is None:
        return missing
    if ms >= END_OF_TIME_MS:
        return "end of input"
    try:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return str(ms)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond // 1000:03d}"
    return text + " UTC"


def fmt_value(value: object) -> str:
    """One cell: timestamps with their zone, None as null."""
    if value is None:
        return "null"
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        text = value.isoformat(sep=" ")
        return text.replace("+00:00", " UTC") if value.utcoffset() == dt.timedelta(0) else text
    if isinstance(value, float):
        return repr(value)
    return str(value)


def safe(fn: Callable[[], object], default: str = DASH) -> str:
    """``str(fn())``, or ``default`` when reading it fails (a stopped Spark, say)."""
    try:
        value = fn()
    except Exception:  # noqa: BLE001 - a display must never raise
        return default
    return default if value is None else str(value)


def html_card(title: str, rows: Sequence[tuple[str, str]], *, pre: str | None = None) -> str:
    """A titled two-column table (and an optional preformatted block)."""
    body = "".join(
        f"<tr><th style='{_CELL};font-weight:600'>{html.escape(k)}</th>"
        f"<td style='{_CELL}'>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    out = f"<div><strong>{html.escape(title)}</strong><table style='{_STYLE}'>{body}</table>"
    if pre:
        out += f"<pre style='margin:4px 0;font-size:12px'>{html.escape(pre)}</pre>"
    return out + "</div>"


def text_card(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """The plain-text twin of :func:`html_card`."""
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join([title, *(f"  {k.ljust(width)}  {v}" for k, v in rows)])


def _rows(table: pa.Table, limit: int, truncate: int | None = None) -> tuple[list[str], list[list[str]]]:
    head = table.slice(0, limit).to_pylist()
    names = list(table.column_names)
    rows = [[fmt_value(r[c]) for c in names] for r in head]
    if truncate is not None:
        rows = [[v if len(v) <= truncate else v[: truncate - 3] + "..." for v in r] for r in rows]
    return names, rows


def table_html(table: pa.Table, *, limit: int = 20) -> str:
    """A pyarrow table as an HTML table; timestamps shown with their zone."""
    names, rows = _rows(table, limit)
    head = "".join(f"<th style='{_CELL};border-bottom:1px solid #999'>{html.escape(c)}</th>" for c in names)
    body = "".join(
        "<tr>" + "".join(f"<td style='{_CELL}'>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows
    )
    more = table.num_rows - len(rows)
    note = f"<div style='font-size:11px'>{table.num_rows} rows x {len(names)} columns"
    note += f" (first {len(rows)} shown)</div>" if more > 0 else "</div>"
    return f"<div><table style='{_STYLE}'><tr>{head}</tr>{body}</table>{note}</div>"


def table_text(table: pa.Table, *, limit: int = 20, truncate: int | None = None) -> str:
    """A pyarrow table as aligned text columns (for terminals and the console sink)."""
    names, rows = _rows(table, limit, truncate)
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(names)]
    line = "  ".join(c.ljust(w) for c, w in zip(names, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    more = table.num_rows - len(rows)
    out.append(f"({table.num_rows} rows" + (f", first {len(rows)} shown)" if more > 0 else ")"))
    return "\n".join(out)


def register_ipython_formatters() -> None:
    """Show ``pyarrow.Table`` results as HTML tables in a running IPython kernel.

    A no-op outside IPython; pyarrow's own text repr stays for ``print``.
    """
    ipython_mod = sys.modules.get("IPython")
    if ipython_mod is None:
        return
    try:
        shell: Any = ipython_mod.get_ipython()
    except Exception:  # noqa: BLE001 - no usable IPython shell
        return
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    import pyarrow as pa

    formatter = shell.display_formatter.formatters.get("text/html")
    if formatter is not None:
        formatter.for_type(pa.Table, lambda t: table_html(t))
