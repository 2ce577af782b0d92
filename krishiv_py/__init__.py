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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from krishiv_py.advice import WatermarkAdvice, advise_watermark, what_if
    from krishiv_py.api.keyed import KeyedStream
    from krishiv_py.api.stream import Stream
    from krishiv_py.api.windowed import WindowedStream
    from krishiv_py.errors import (
        JobError,
        JobStoppedError,
        KrishivError,
        MissingDependencyError,
        NoResultsError,
        PlanError,
        SchemaError,
        SessionError,
        SourceClosedError,
    )
    from krishiv_py.expr import (
        AggExpr,
        Expr,
        avg,
        col,
        count,
        count_distinct,
        first,
        last,
        lit,
        max,
        min,
        sum,
    )
    from krishiv_py.kafka.sink import KafkaSink
    from krishiv_py.late import CountingLateEventHandler, LateEventHandler, SideOutputLateEventHandler
    from krishiv_py.metrics import JobMetrics
    from krishiv_py.panes import PaneEvent
    from krishiv_py.plan.emission import StateTtlConfig, Trigger
    from krishiv_py.plan.watermarks import END_OF_TIME_MS, MultiSourceWatermarkSpec, WatermarkSpec
    from krishiv_py.runtime.job import Job, JobProgress
    from krishiv_py.sender import Sender
    from krishiv_py.session import Session
    from krishiv_py.sinks import (
        ConsoleSink,
        ForeachBatchSink,
        MemorySink,
        ParquetSink,
        Sink,
        SinkContext,
        SinkWriter,
    )
    from krishiv_py.tables import DeltaSink, DuckDBSink, PostgresSink
    from krishiv_py.types import Schema

__version__ = "0.1.0"

#: Where each public name lives: imported on first use (PEP 562), so that
#: ``import krishiv_py`` and the modules Spark's Python workers import
#: (``krishiv_py.kafka.datasource``, ``krishiv_py.stateful``) load only what they use.
_EXPORTS: dict[str, str] = {
    "WatermarkAdvice": "krishiv_py.advice",
    "advise_watermark": "krishiv_py.advice",
    "what_if": "krishiv_py.advice",
    "KeyedStream": "krishiv_py.api.keyed",
    "Stream": "krishiv_py.api.stream",
    "WindowedStream": "krishiv_py.api.windowed",
    "JobError": "krishiv_py.errors",
    "JobStoppedError": "krishiv_py.errors",
    "KrishivError": "krishiv_py.errors",
    "MissingDependencyError": "krishiv_py.errors",
    "NoResultsError": "krishiv_py.errors",
    "PlanError": "krishiv_py.errors",
    "SchemaError": "krishiv_py.errors",
    "SessionError": "krishiv_py.errors",
    "SourceClosedError": "krishiv_py.errors",
    "AggExpr": "krishiv_py.expr",
    "Expr": "krishiv_py.expr",
    "avg": "krishiv_py.expr",
    "col": "krishiv_py.expr",
    "count": "krishiv_py.expr",
    "count_distinct": "krishiv_py.expr",
    "first": "krishiv_py.expr",
    "last": "krishiv_py.expr",
    "lit": "krishiv_py.expr",
    "max": "krishiv_py.expr",
    "min": "krishiv_py.expr",
    "sum": "krishiv_py.expr",
    "KafkaSink": "krishiv_py.kafka.sink",
    "CountingLateEventHandler": "krishiv_py.late",
    "LateEventHandler": "krishiv_py.late",
    "SideOutputLateEventHandler": "krishiv_py.late",
    "JobMetrics": "krishiv_py.metrics",
    "PaneEvent": "krishiv_py.panes",
    "StateTtlConfig": "krishiv_py.plan.emission",
    "Trigger": "krishiv_py.plan.emission",
    "END_OF_TIME_MS": "krishiv_py.plan.watermarks",
    "MultiSourceWatermarkSpec": "krishiv_py.plan.watermarks",
    "WatermarkSpec": "krishiv_py.plan.watermarks",
    "Job": "krishiv_py.runtime.job",
    "JobProgress": "krishiv_py.runtime.job",
    "Sender": "krishiv_py.sender",
    "Session": "krishiv_py.session",
    "ConsoleSink": "krishiv_py.sinks",
    "ForeachBatchSink": "krishiv_py.sinks",
    "MemorySink": "krishiv_py.sinks",
    "ParquetSink": "krishiv_py.sinks",
    "Sink": "krishiv_py.sinks",
    "SinkContext": "krishiv_py.sinks",
    "SinkWriter": "krishiv_py.sinks",
    "DeltaSink": "krishiv_py.tables",
    "DuckDBSink": "krishiv_py.tables",
    "PostgresSink": "krishiv_py.tables",
    "Schema": "krishiv_py.types",
}


__all__ = [
    "END_OF_TIME_MS",
    "AggExpr",
    "ConsoleSink",
    "CountingLateEventHandler",
    "DeltaSink",
    "DuckDBSink",
    "Expr",
    "ForeachBatchSink",
    "Job",
    "JobError",
    "JobMetrics",
    "JobProgress",
    "JobStoppedError",
    "KafkaSink",
    "KeyedStream",
    "KrishivError",
    "LateEventHandler",
    "MemorySink",
    "MissingDependencyError",
    "MultiSourceWatermarkSpec",
    "NoResultsError",
    "PaneEvent",
    "ParquetSink",
    "PlanError",
    "PostgresSink",
    "Schema",
    "SchemaError",
    "Sender",
    "Session",
    "SessionError",
    "SideOutputLateEventHandler",
    "Sink",
    "SinkContext",
    "SinkWriter",
    "SourceClosedError",
    "StateTtlConfig",
    "Stream",
    "Trigger",
    "WatermarkAdvice",
    "WatermarkSpec",
    "WindowedStream",
    "__version__",
    "advise_watermark",
    "avg",
    "col",
    "count",
    "count_distinct",
    "first",
    "last",
    "lit",
    "max",
    "min",
    "sum",
    "what_if",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'krishiv_py' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
