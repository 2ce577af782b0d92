"""Lower a logical plan to an inspectable Spark recipe.

The recipe is plain data — Spark SQL expression strings and a handful of
DataFrame operations — so it can be printed by ``explain()`` and
snapshot-tested without a JVM. :mod:`krishiv_py.runtime.build` applies it.

One module per part:

:mod:`.recipe`
    The recipe nodes and :class:`SparkRecipe`; it re-exports the hidden-column
    names, which are defined in :mod:`krishiv_py.names`.
:mod:`.choose`
    The table of what each lowering runs exactly, and :func:`choose`.
:mod:`.sources`
    Sources, filters, projections, unions and watermarks (every lowering).
:mod:`.native`
    Windows with Spark's ``window``/``session_window`` + ``groupBy().agg()``
    (the ``native`` streaming and the ``bounded`` batch lowering).
:mod:`.lower`
    :func:`lower`: the plan in, the recipe out.
"""

from __future__ import annotations

from krishiv_py._typing import Lowering
from krishiv_py.planner.spark.choose import LOWERINGS, Capabilities, choose
from krishiv_py.planner.spark.lower import lower
from krishiv_py.planner.spark.native import SHIFT_BASE_MS
from krishiv_py.planner.spark.recipe import (
    BASE_HIDDEN,
    ET,
    GLOBAL,
    KIND,
    OUT_OBSERVE,
    SEQ,
    WINDOW,
    WM,
    FilterExpr,
    GroupAgg,
    Observe,
    ReadSource,
    RecipeNode,
    SelectExprs,
    SparkRecipe,
    TrackedSource,
    UnionAll,
    WithWatermark,
)

__all__ = [
    "BASE_HIDDEN",
    "ET",
    "GLOBAL",
    "KIND",
    "LOWERINGS",
    "OUT_OBSERVE",
    "SEQ",
    "SHIFT_BASE_MS",
    "WINDOW",
    "WM",
    "Capabilities",
    "FilterExpr",
    "GroupAgg",
    "Lowering",
    "Observe",
    "ReadSource",
    "RecipeNode",
    "SelectExprs",
    "SparkRecipe",
    "TrackedSource",
    "UnionAll",
    "WithWatermark",
    "choose",
    "lower",
]
