"""The SQL text of one ``session.sql()`` call: its statements and where things are in it.

sqlglot tokenizes the whole text once; the statements are the runs of
tokens between semicolons, each parsed on its own, so every statement keeps
its exact source text (shown by ``explain()``) and every node keeps its
offset in the whole text. Errors name the construct and its place as
``line L, column C`` (1-based, the construct's first character).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from krishiv_py.errors import PlanError

if TYPE_CHECKING:
    from sqlglot import exp
    from sqlglot.tokenizer_core import Token

__all__ = ["DIALECT", "SqlText", "Statement"]

#: The dialect sqlglot reads: Spark SQL, the words (and back-quoted names) Spark users write.
DIALECT = "spark"


@attrs.frozen
class Statement:
    """One parsed statement and its text, exactly as written."""

    node: exp.Expression
    text: str


@attrs.frozen(eq=False)
class SqlText:
    """The text given to ``sql()``, tokenized; makes :class:`PlanError` s that say where."""

    text: str
    tokens: tuple[Token, ...]

    @classmethod
    def tokenize(cls, text: str) -> SqlText:
        from sqlglot.dialects.dialect import Dialect
        from sqlglot.errors import TokenError

        if not isinstance(text, str):
            raise PlanError(f"sql() takes the SQL text as a str, got {type(text).__name__}")
        try:
            tokens = Dialect.get_or_raise(DIALECT).tokenize(text)
        except TokenError as exc:
            detail = exc.__context__ or exc  # sqlglot's Python tokenizer puts the position there
            raise PlanError(f"SQL syntax error: {detail}") from None
        return cls(text, tuple(tokens))

    def statements(self) -> list[Statement]:
        """The statements, in order (empty ones between two semicolons left out)."""
        chunks: list[list[Token]] = [[]]
        for token in self.tokens:
            if token.token_type.name == "SEMICOLON":
                chunks.append([])
            else:
                chunks[-1].append(token)
        return [self._parse(chunk) for chunk in chunks if chunk]

    def _parse(self, tokens: list[Token]) -> Statement:
        from sqlglot.dialects.dialect import Dialect
        from sqlglot.errors import ParseError

        try:
            with _quiet_parser():
                read = _set_keys(_table_arguments(tokens))
                nodes = Dialect.get_or_raise(DIALECT).parser().parse(read, self.text)
        except ParseError as exc:
            first = exc.errors[0] if exc.errors else {}
            where = f" at line {first['line']}, column {first['col']}" if "line" in first else ""
            reason = str(first.get("description") or str(exc).splitlines()[0])
            if reason.startswith("Required keyword"):  # e.g. "... missing for <class '...Where'>"
                clause = reason.rsplit(".", 1)[-1].strip("'>")
                reason = f"{clause.upper()} is incomplete"
            shown = ""
            if "line" in first:
                shown = self._pointed(int(first["line"]), int(first["col"]), tokens)
            raise PlanError(f"SQL syntax error{where}: {reason}{shown}") from None
        from sqlglot import exp

        node = nodes[0]
        assert isinstance(node, exp.Expression)
        return Statement(node, self.text[tokens[0].start : tokens[-1].end + 1])

    def _pointed(self, line: int, column: int, tokens: list[Token]) -> str:
        """The statement's line ``line`` with a caret under ``column``, and a keyword a word there
        was probably meant to be (``SELCT``: SELECT)."""
        import difflib

        lines = self.text.splitlines() or [""]
        text = lines[min(line, len(lines)) - 1]
        caret = " " * max(min(column, len(text)) - 1, 0) + "^"
        # A word up to the error that is not a keyword but is spelt like one.
        offset = sum(len(x) + 1 for x in lines[: line - 1]) + column
        words = [t.text for t in tokens if t.start < offset and t.token_type.name == "VAR"]
        hint = ""
        for word in reversed(words[-3:]):
            close = difflib.get_close_matches(word.upper(), _KEYWORDS, n=1, cutoff=0.75)
            if close and word.upper() not in _KEYWORDS:
                hint = f"\n  did you mean {close[0]} where it says {word}?"
                break
        return f"\n  {text}\n  {caret}{hint}"

    # --- positions ----------------------------------------------------------------

    def offset(self, node: exp.Expression) -> int | None:
        """Where ``node`` starts in the text: its first token that sqlglot located.

        A construct that starts with a keyword sqlglot does not locate
        (``INTERVAL '5' SECOND``, a ``SELECT``, a clause) starts at that keyword.
        """
        from sqlglot import exp

        first = self._first(node)
        leading = {
            exp.Interval: "INTERVAL",
            exp.Select: "SELECT",
            exp.Group: "GROUP_BY",
            exp.Having: "HAVING",
            exp.Where: "WHERE",
        }
        kind = leading.get(type(node))
        return first if kind is None else self.keyword(kind, before=first)

    def _first(self, node: exp.Expression) -> int | None:
        starts = [x.meta["start"] for x in node.walk() if "start" in x.meta]
        return min(starts) if starts else None

    def keyword(
        self, kind: str, near: exp.Expression | None = None, *, before: int | None = None
    ) -> int | None:
        """Where the keyword ``kind`` is: the last one before ``near``, or the first in the text.

        ``kind`` is a sqlglot token type name, such as ``"ORDER_BY"``.
        """
        if near is not None:
            before = self._first(near)
        found = [t.start for t in self.tokens if t.token_type.name == kind]
        if before is not None:
            found = [s for s in found if s < before] or found
            return found[-1] if found else None
        return found[0] if found else None

    def where(self, offset: int | None) -> str:
        """``"line L, column C"`` of ``offset``."""
        if offset is None:
            return "unknown position"
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return f"line {line}, column {column}"

    def error(self, node: exp.Expression | None, message: str, *, at: int | None = None) -> PlanError:
        """A :class:`PlanError`: ``message``, then the construct's text and position."""
        offset = at if at is not None else (self.offset(node) if node is not None else None)
        shown = f" `{_snippet(node)}`" if node is not None else ""
        return PlanError(f"{message} ({self.where(offset)}{':' if shown else ''}{shown})")


#: The keywords a misspelt word of a statement that fails to parse is held against.
_KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "LIMIT",
    "JOIN",
    "LEFT",
    "RIGHT",
    "FULL",
    "INNER",
    "OUTER",
    "ON",
    "AS",
    "AND",
    "OR",
    "NOT",
    "BETWEEN",
    "INTERVAL",
    "UNION",
    "ALL",
    "DISTINCT",
    "OVER",
    "PARTITION",
    "ROWS",
    "RANGE",
    "PRECEDING",
    "FOLLOWING",
    "CURRENT",
    "ROW",
    "WINDOW",
    "TABLE",
    "TUMBLE",
    "HOP",
    "SESSION",
    "CUMULATE",
    "DESCRIPTOR",
    "SET",
    "WITH",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "SECOND",
    "SECONDS",
    "MINUTE",
    "MINUTES",
    "HOUR",
    "HOURS",
    "DAY",
    "DAYS",
    "ASC",
    "DESC",
    "QUALIFY",
)


def _snippet(node: exp.Expression, limit: int = 60) -> str:
    text = " ".join(node.transform(_flink_version).sql(dialect=DIALECT).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _flink_version(node: exp.Expression) -> exp.Expression:
    """``FOR SYSTEM_TIME AS OF t`` as written (sqlglot writes it as Spark's ``TIMESTAMP AS OF t``)."""
    from sqlglot import exp

    if not isinstance(node, exp.Version):
        return node
    time = node.args.get("expression")
    words = ["FOR SYSTEM_TIME", node.text("kind"), time.sql(dialect=DIALECT) if time is not None else ""]
    return exp.Var(this=" ".join(w for w in words if w))


#: Flink's window table functions, whose first argument is ``TABLE <name>``.
_WINDOW_TVFS = frozenset({"tumble", "hop", "cumulate"})


def _table_arguments(tokens: list[Token]) -> list[Token]:
    """``tokens`` without the ``TABLE`` of Flink's ``TUMBLE(TABLE name, ...)``, which sqlglot cannot read.

    The window TVF then reads as a call whose first argument is ``name``
    (:mod:`krishiv_py.sql.joins`); every other token keeps its place in the
    text, so positions in errors stay exact.
    """
    return [
        t
        for i, t in enumerate(tokens)
        if not (
            t.token_type.name == "TABLE"
            and i >= 2
            and tokens[i - 1].token_type.name == "L_PAREN"
            and tokens[i - 2].text.lower() in _WINDOW_TVFS
        )
    ]


def _set_keys(tokens: list[Token]) -> list[Token]:
    """``tokens`` with the ``join`` of a ``SET join.<option>`` key read as a name, not the keyword.

    sqlglot reads ``join`` as the JOIN keyword and the statement as a command
    it cannot parse; as a name it is the first part of the key, as
    ``window`` of ``SET window.<option>`` is. Positions stay as they were.
    """
    from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]

    if len(tokens) < 3 or tokens[0].token_type.name != "SET":
        return tokens
    key = tokens[1]
    if key.token_type.name != "JOIN" or tokens[2].token_type.name != "DOT":
        return tokens
    name = Token(TokenType.VAR, key.text, key.line, key.col, key.start, key.end, key.comments)
    return [tokens[0], name, *tokens[2:]]


@contextlib.contextmanager
def _quiet_parser() -> Iterator[None]:
    """sqlglot logs a warning before parsing a statement it cannot read as a ``Command``.

    krishiv_py refuses such a statement with a :class:`PlanError` that says
    what is wrong, so the warning is noise on the user's stderr.
    """
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
