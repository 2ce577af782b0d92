"""Column types and schemas, independent of any engine.

A :class:`Schema` is an ordered tuple of :class:`Field` s. Types use Spark's
SQL names (``string``, ``bigint``, ``double``, ``timestamp`` ...), so a Spark
DDL string such as ``"user_id string, event_time timestamp, amount double"``
is the native way to write one. ``pyarrow.Schema`` and Spark ``StructType``
objects are converted on the way in.

Nested types are not supported yet: a schema that uses them is refused with
a :class:`~krishiv_py.errors.SchemaError` naming the column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.names import HIDDEN_PREFIX

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DataType", "Field", "Schema", "conform", "to_schema"]


_ALIASES = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "text": "string",
    "bigint": "bigint",
    "long": "bigint",
    "int": "int",
    "integer": "int",
    "smallint": "smallint",
    "short": "smallint",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "date": "date",
    "binary": "binary",
}
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"^decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@attrs.frozen
class DataType:
    """A column type, by its Spark SQL name (``"bigint"``, ``"decimal(10,2)"``)."""

    name: str

    @classmethod
    def parse(cls, text: str) -> DataType:
        """Parse a type name, accepting Spark's aliases (``long``, ``integer`` ...)."""
        key = re.sub(r"\s+", " ", text.strip().lower())
        if key in _ALIASES:
            return cls(_ALIASES[key])
        if key == "decimal":
            return cls("decimal(10,0)")
        m = _DECIMAL.match(key)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            if not (1 <= precision <= 38 and scale <= precision):
                raise SchemaError(
                    f"unsupported column type {text!r}: decimal(p,s) needs 1 <= p <= 38 and s <= p"
                )
            return cls(f"decimal({precision},{scale})")
        raise SchemaError(
            f"unsupported column type {text!r}; supported: {', '.join(sorted(set(_ALIASES.values())))}"
            ", decimal(p,s)"
        )

    @property
    def is_integral(self) -> bool:
        return self.name in _INTEGRAL

    @property
    def is_numeric(self) -> bool:
        return self.is_integral or self.name in ("double", "float") or self.is_decimal

    @property
    def is_decimal(self) -> bool:
        return self.name.startswith("decimal")

    @property
    def is_timestamp(self) -> bool:
        return self.name in ("timestamp", "timestamp_ntz")

    def to_arrow(self) -> pa.DataType:
        import pyarrow as pa

        simple: dict[str, pa.DataType] = {
            "string": pa.string(),
            "bigint": pa.int64(),
            "int": pa.int32(),
            "smallint": pa.int16(),
            "tinyint": pa.int8(),
            "double": pa.float64(),
            "float": pa.float32(),
            "boolean": pa.bool_(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
            "date": pa.date32(),
            "binary": pa.binary(),
        }
        if self.name in simple:
            return simple[self.name]
        m = _DECIMAL.match(self.name)
        assert m is not None
        return pa.decimal128(int(m.group(1)), int(m.group(2)))

    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType, column: str) -> DataType:
        import pyarrow as pa
        import pyarrow.types as pat

        checks: list[tuple[Any, str]] = [
            (pat.is_string, "string"),
            (pat.is_large_string, "string"),
            (pat.is_int64, "bigint"),
            (pat.is_int32, "int"),
            (pat.is_int16, "smallint"),
            (pat.is_int8, "tinyint"),
            (pat.is_float64, "double"),
            (pat.is_float32, "float"),
            (pat.is_boolean, "boolean"),
            (pat.is_date32, "date"),
            (pat.is_binary, "binary"),
            (pat.is_large_binary, "binary"),
        ]
        for check, name in checks:
            if check(arrow_type):
                return cls(name)
        if pat.is_timestamp(arrow_type):
            assert isinstance(arrow_type, pa.TimestampType)
            return cls("timestamp" if arrow_type.tz is not None else "timestamp_ntz")
        if pat.is_decimal(arrow_type):
            assert isinstance(arrow_type, pa.Decimal128Type)
            return cls(f"decimal({arrow_type.precision},{arrow_type.scale})")
        raise SchemaError(f"column {column!r}: unsupported Arrow type {arrow_type}")

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Field:
    """One named, typed column."""

    name: str
    dtype: DataType
    nullable: bool = True

    def ddl(self) -> str:
        quoted = "`" + self.name.replace("`", "``") + "`"
        return f"{quoted} {self.dtype.name}" + ("" if self.nullable else " NOT NULL")


@attrs.frozen(repr=False)
class Schema:
    """An ordered set of uniquely named fields.

    Examples
    --------
    >>> Schema.parse("user_id string, event_time timestamp").names
    ('user_id', 'event_time')
    """

    fields: tuple[Field, ...]

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for f in self.fields:
            if f.name in seen:
                raise SchemaError(f"duplicate column name {f.name!r}")
            if not is_valid_text(f.name):
                raise SchemaError(f"column {f.name!r}: a name must be valid UTF-8 text (no lone surrogates)")
            seen.add(f.name)

    @classmethod
    def parse(cls, ddl: str) -> Schema:
        """Parse a Spark DDL column list: ``"a string, b bigint NOT NULL"``."""
        fields = []
        for part in _split_top_level(ddl):
            m = re.match(
                r"^\s*(?:`((?:[^`]|``)+)`\s*|([A-Za-z_][A-Za-z0-9_]*)(?=[\s:]))\s*:?\s*(.+?)\s*$",
                part,
                flags=re.DOTALL,
            )
            if not m:
                raise SchemaError(
                    f"cannot parse column definition {part.strip()!r} in schema {ddl!r}: expected 'name type'"
                )
            name = m.group(1).replace("``", "`") if m.group(1) is not None else m.group(2)
            type_text = m.group(3)
            nullable = True
            nn = re.search(r"\s+not\s+null$", type_text, flags=re.IGNORECASE)
            if nn:
                nullable = False
                type_text = type_text[: nn.start()]
            try:
                dtype = DataType.parse(type_text)
            except SchemaError as exc:
                raise SchemaError(f"column {name!r}: {exc}") from None
            fields.append(Field(name, dtype, nullable))
        if not fields:
            raise SchemaError("a schema needs at least one column")
        return cls(tuple(fields))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def field(self, name: str, *, role: str = "column") -> Field:
        """Return the field called ``name`` or raise a PlanError listing the choices."""
        for f in self.fields:
            if f.name == name:
                return f
        raise PlanError(f"unknown {role} {name!r}; available columns: {', '.join(self.names)}")

    def ddl(self) -> str:
        return ", ".join(f.ddl() for f in self.fields)

    def to_arrow(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(f.name, f.dtype.to_arrow(), f.nullable) for f in self.fields])

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> Schema:
        return cls(tuple(Field(f.name, DataType.from_arrow(f.type, f.name), f.nullable) for f in schema))

    def __str__(self) -> str:
        return self.ddl()

    def __repr__(self) -> str:
        cols = (
            (f.name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", f.name) else f"`{f.name}`")
            + f" {f.dtype.name}"
            + ("" if f.nullable else " not null")
            for f in self.fields
        )
        return f"Schema({', '.join(cols)})"

    def _repr_html_(self) -> str:
        from krishiv_py._display import html_card

        rows = [(f.name, f.dtype.name + ("" if f.nullable else " not null")) for f in self.fields]
        return html_card(f"Schema ({len(self.fields)} columns)", rows)


def is_valid_text(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (Arrow, Parquet and Spark need that).

    Python strings may hold lone surrogates (``"\\ud800"``), which have no UTF-8 form.

    >>> is_valid_text("naïve"), is_valid_text("\\ud800")
    (True, False)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _split_top_level(ddl: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth, quoted = 0, False
    for ch in ddl:
        if ch == "`":
            quoted = not quoted  # a doubled `` inside a name toggles twice
        elif quoted:
            pass
        elif ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def to_schema(schema: object) -> Schema:
    """Accept a DDL string, a :class:`Schema`, a ``pyarrow.Schema`` or a Spark ``StructType``."""
    if isinstance(schema, Schema):
        out = schema
    elif isinstance(schema, str):
        out = Schema.parse(schema)
    elif type(schema).__module__.startswith("pyarrow"):
        out = Schema.from_arrow(schema)  # type: ignore[arg-type]
    elif hasattr(schema, "fields") and hasattr(schema, "simpleString"):
        out = Schema(
            tuple(
                Field(f.name, _parse_field_type(f.name, f.dataType.simpleString()), f.nullable)
                for f in schema.fields
            )
        )
    else:
        raise SchemaError(
            "schema must be a DDL string, a pyarrow.Schema or a Spark StructType, "
            f"got {type(schema).__name__}"
        )
    for f in out.fields:
        if f.name.startswith(HIDDEN_PREFIX):
            raise SchemaError(f"column {f.name!r}: names starting with {HIDDEN_PREFIX!r} are reserved")
    return out


def _parse_field_type(column: str, text: str) -> DataType:
    try:
        return DataType.parse(text)
    except SchemaError as exc:
        raise SchemaError(f"column {column!r}: {exc}") from None


def conform(table: pa.Table, schema: Schema) -> pa.Table:
    """A result table in the schema the plan promised: ``schema``'s columns in order, its Arrow types."""
    import pyarrow as pa

    target = pa.schema([pa.field(f.name, f.dtype.to_arrow(), True) for f in schema])
    arrays = [table.column(f.name).cast(f.type) for f in target]
    return pa.Table.from_arrays(arrays, schema=target)
