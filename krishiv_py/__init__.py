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
    "WatermarkSpec",
    "WindowedStream",
    "__version__",
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
]
