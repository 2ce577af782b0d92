"""The price ranks of q15-q17: under 10,000, to 1,000,000, above (Nexmark's bands)."""

from __future__ import annotations

import krishiv_py as kp
from krishiv_py.expr import Expr

#: Each rank's condition in SQL, and its builder twin.
RANKS_SQL = ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000")


def ranks() -> tuple[Expr, Expr, Expr]:
    price = kp.col("price")
    return price < 10000, (price >= 10000) & (price < 1000000), price >= 1000000


def counts(column: str | None, name: str) -> list[kp.AggExpr]:
    """``count(*)`` (``column`` None) or ``count(distinct column)``: in all and per rank."""
    if column is None:
        whole = kp.count(kp.col("*"))
        per = [kp.count(kp.col("*"), filter=r) for r in ranks()]
    else:
        whole = kp.count_distinct(kp.col(column))
        per = [kp.count_distinct(kp.col(column), filter=r) for r in ranks()]
    return [whole.alias(f"total_{name}"), *(a.alias(f"rank{i}_{name}") for i, a in enumerate(per, 1))]


def counts_sql(column: str | None, name: str) -> str:
    """:func:`counts` in SQL (``count(*) FILTER (WHERE ...)``)."""
    call = "COUNT(*)" if column is None else f"COUNT(DISTINCT {column})"
    parts = [f"{call} AS total_{name}"]
    parts += [f"{call} FILTER (WHERE {r}) AS rank{i}_{name}" for i, r in enumerate(RANKS_SQL, 1)]
    return ", ".join(parts)
