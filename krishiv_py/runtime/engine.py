"""The engine protocol: what a ``Stream`` hands its plan to.

A :class:`~krishiv_py.Stream` describes a pipeline: it holds a logical plan
and the engine its sources belong to, and lowers the plan to a recipe
(:mod:`krishiv_py.planner.spark`). Running is the engine's work: a
:class:`~krishiv_py.Session` implements :class:`Engine` for a local Spark, a
cluster and a Spark Connect server alike, and the launching code it calls
(checkpoint policy, spooled memory streams, the job itself) lives in
:mod:`krishiv_py.runtime.launch`. The builder imports this module and no
other part of the runtime; a job never points back at the builder.

This module imports no pyspark: ``import krishiv_py`` starts no JVM.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from krishiv_py.errors import PlanError
from krishiv_py.runtime.durability import Durability, profile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from krishiv_py.plan.nodes import PlanNode
    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.handle import Job
    from krishiv_py.sinks import Sink

__all__ = ["Durability", "Engine", "Job", "StartOptions"]

_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _check_name(_: Any, __: Any, name: str | None) -> None:
    if name is not None and not (isinstance(name, str) and _JOB_NAME.match(name)):
        raise PlanError(f"job name {name!r} must be letters, digits, '_', '-' or '.'")


def _check_durability(_: Any, __: Any, value: Durability | None) -> None:
    if value is not None:
        profile(value)  # a SessionError naming the profiles when it is not one


def _quarantine_path(value: object) -> str | None:
    """The absolute path of ``start(quarantine_dir=...)``: a non-empty local path string."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"quarantine_dir must be a directory path (a non-empty str), got {value!r}")
    if "://" in value:
        raise PlanError(
            f"quarantine_dir must be a local directory (or a mount every Spark driver sees), got {value!r}"
        )
    return os.path.abspath(os.path.expanduser(value))


@attrs.frozen(kw_only=True)
class StartOptions:
    """How to start a job (``Stream.start``'s options), validated when made.

    ``name`` and ``checkpoint_dir`` exclude each other; ``quarantine_dir``
    is made absolute.
    """

    sink: Sink
    checkpoint_dir: str | None = None
    name: str | None = attrs.field(default=None, validator=_check_name)
    durability: Durability | None = attrs.field(default=None, validator=_check_durability)
    quarantine_dir: str | None = attrs.field(default=None, converter=_quarantine_path)

    def __attrs_post_init__(self) -> None:
        if self.name is not None and self.checkpoint_dir is not None:
            raise PlanError("start() takes a name or a checkpoint_dir, not both")

    @property
    def resumable(self) -> bool:
        """A later run can resume this job (it has a name or a checkpoint directory)."""
        return self.name is not None or self.checkpoint_dir is not None


class Engine(Protocol):
    """Runs what a ``Stream`` describes. :class:`~krishiv_py.Session` is the engine of Spark."""

    def run_bounded(self, plan: PlanNode, recipe: SparkRecipe, sink: Sink, *, metrics: bool = True) -> Job:
        """Run a bounded recipe as one batch job; returns the finished job."""
        ...

    def start_job(self, plan: PlanNode, recipe: SparkRecipe, options: StartOptions) -> Job:
        """Start a streaming recipe; returns the running job."""
        ...

    def spark_dataframe(self, recipe: SparkRecipe) -> DataFrame:
        """The Spark DataFrame of a recipe (streaming when the recipe is)."""
        ...

    def explain_spark(self, recipe: SparkRecipe) -> str:
        """Spark's own extended plan of a recipe."""
        ...

    def durability_text(self, *, bounded: bool) -> str:
        """How a job of this engine keeps its state and checkpoint, for ``explain()``."""
        ...

    def register_stream(self, name: str, plan: PlanNode) -> None:
        """Make ``plan`` readable by the engine's SQL as ``name``."""
        ...
