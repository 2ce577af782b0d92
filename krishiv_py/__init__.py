"""krishiv_py: event-time windowed stream processing for Python, on Apache Spark.

Build a pipeline with the fluent API — it makes an immutable logical plan —
and run it: a planner lowers the plan to Spark (Structured Streaming for
unbounded input, batch jobs for bounded input). Importing this package
starts no JVM; :meth:`Session.embedded` does.

>>> import krishiv_py as kp
>>> kp.count(kp.col("*")).name
'count'
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The public names, each written once: ``__all__`` and the imports on first use
    # below are read from these lines (the ``as`` marks a name as exported).
    from krishiv_py.advice import WatermarkAdvice as WatermarkAdvice
    from krishiv_py.advice import advise_watermark as advise_watermark
    from krishiv_py.advice import what_if as what_if
    from krishiv_py.api.keyed import KeyedStream as KeyedStream
    from krishiv_py.api.over import OverStream as OverStream
    from krishiv_py.api.stream import JoinedStream as JoinedStream
    from krishiv_py.api.stream import Stream as Stream
    from krishiv_py.api.windowed import WindowedStream as WindowedStream
    from krishiv_py.errors import JobError as JobError
    from krishiv_py.errors import JobStoppedError as JobStoppedError
    from krishiv_py.errors import KrishivError as KrishivError
    from krishiv_py.errors import MissingDependencyError as MissingDependencyError
    from krishiv_py.errors import NoResultsError as NoResultsError
    from krishiv_py.errors import PlanError as PlanError
    from krishiv_py.errors import SchemaError as SchemaError
    from krishiv_py.errors import SessionError as SessionError
    from krishiv_py.errors import SourceClosedError as SourceClosedError
    from krishiv_py.expr import AggExpr as AggExpr
    from krishiv_py.expr import Expr as Expr
    from krishiv_py.expr import UserFunction as UserFunction
    from krishiv_py.expr import avg as avg
    from krishiv_py.expr import col as col
    from krishiv_py.expr import count as count
    from krishiv_py.expr import count_distinct as count_distinct
    from krishiv_py.expr import date_format as date_format
    from krishiv_py.expr import first as first
    from krishiv_py.expr import hour as hour
    from krishiv_py.expr import last as last
    from krishiv_py.expr import length as length
    from krishiv_py.expr import lit as lit
    from krishiv_py.expr import lower as lower
    from krishiv_py.expr import max as max
    from krishiv_py.expr import min as min
    from krishiv_py.expr import regexp_extract as regexp_extract
    from krishiv_py.expr import replace as replace
    from krishiv_py.expr import split_part as split_part
    from krishiv_py.expr import sum as sum
    from krishiv_py.expr import udf as udf
    from krishiv_py.expr import upper as upper
    from krishiv_py.expr import when as when
    from krishiv_py.kafka.sink import KafkaSink as KafkaSink
    from krishiv_py.kafka.source import KafkaOptions as KafkaOptions
    from krishiv_py.late import CountingLateEventHandler as CountingLateEventHandler
    from krishiv_py.late import LateEventHandler as LateEventHandler
    from krishiv_py.late import SideOutputLateEventHandler as SideOutputLateEventHandler
    from krishiv_py.metrics import JobMetrics as JobMetrics
    from krishiv_py.panes import PaneEvent as PaneEvent
    from krishiv_py.plan.emission import StateTtlConfig as StateTtlConfig
    from krishiv_py.plan.emission import Trigger as Trigger
    from krishiv_py.plan.files import FileOptions as FileOptions
    from krishiv_py.plan.watermarks import END_OF_TIME_MS as END_OF_TIME_MS
    from krishiv_py.plan.watermarks import AutoLag as AutoLag
    from krishiv_py.plan.watermarks import MultiSourceWatermarkSpec as MultiSourceWatermarkSpec
    from krishiv_py.plan.watermarks import WatermarkSpec as WatermarkSpec
    from krishiv_py.runtime.job import Job as Job
    from krishiv_py.runtime.job import JobProgress as JobProgress
    from krishiv_py.runtime.state_view import read_state as read_state
    from krishiv_py.sender import Sender as Sender
    from krishiv_py.session import Session as Session
    from krishiv_py.sinks import ConsoleSink as ConsoleSink
    from krishiv_py.sinks import ForeachBatchSink as ForeachBatchSink
    from krishiv_py.sinks import MemorySink as MemorySink
    from krishiv_py.sinks import ParquetSink as ParquetSink
    from krishiv_py.sinks import Sink as Sink
    from krishiv_py.sinks import SinkContext as SinkContext
    from krishiv_py.sinks import SinkWriter as SinkWriter
    from krishiv_py.tables import DeltaSink as DeltaSink
    from krishiv_py.tables import DuckDBSink as DuckDBSink
    from krishiv_py.tables import IcebergSink as IcebergSink
    from krishiv_py.tables import PostgresSink as PostgresSink
    from krishiv_py.types import Schema as Schema

__version__ = "0.1.0"


@functools.cache
def _exports() -> dict[str, str]:
    """Each public name and its module, from the ``TYPE_CHECKING`` imports above.

    Read from this file's source when a public name is first asked for, so
    that ``import krishiv_py`` (and the modules Spark's Python workers import:
    ``krishiv_py.kafka.datasource``, ``krishiv_py.stateful``) load only what
    they use (PEP 562).
    """
    import ast
    from importlib.resources import files

    tree = ast.parse(files(__name__).joinpath("__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {a.name: str(n.module) for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}


def _public_order(name: str) -> tuple[int, str]:
    """Constants first, then classes, then functions (the order of ruff's ``__all__`` sort)."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2), name


def __getattr__(name: str) -> Any:
    if name == "__all__":
        value: Any = sorted([*_exports(), "__version__"], key=_public_order)
    elif (module := _exports().get(name)) is not None:
        value = getattr(importlib.import_module(module), name)
    else:
        raise AttributeError(f"module 'krishiv_py' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_exports()})
