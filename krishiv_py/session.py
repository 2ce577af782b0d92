"""The entry point: a Spark session plus krishiv_py's sources.

``Session.embedded()`` starts a local Spark tuned for one machine;
``Session.connect(master)`` drives an existing cluster from this process;
``Session.remote(url)`` reaches a Spark Connect server. Creating a session
is the only thing that starts a JVM — ``import krishiv_py`` does not. Where
each part runs: :mod:`krishiv_py.runtime.remote`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from krishiv_py.errors import PlanError, SchemaError, SessionError
from krishiv_py.plan import nodes as n
from krishiv_py.runtime.durability import Durability, check_location, is_uri, profile
from krishiv_py.sender import Sender, to_arrow_batch
from krishiv_py.sql.catalog import SqlCatalog
from krishiv_py.types import Schema, to_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.api.stream import Stream
    from krishiv_py.planner.spark import SparkRecipe
    from krishiv_py.runtime.engine import StartOptions
    from krishiv_py.runtime.job import BoundedJob, Job
    from krishiv_py.runtime.spool import Retention
    from krishiv_py.sinks import Sink

__all__ = ["Durability", "Session"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Session:
    """A Spark session for krishiv_py pipelines. Use as a context manager.

    A session is the :class:`~krishiv_py.runtime.engine.Engine` of the
    streams made from its sources: ``Stream.collect()``, ``start()``,
    ``explain()`` and ``to_spark()`` hand their plan and recipe to it, and it
    runs them on its Spark (:mod:`krishiv_py.runtime.launch`).

    Examples
    --------
        import krishiv_py as kp
        with kp.Session.embedded() as session:
            stream, sender = session.memory_stream("k string, t timestamp")
    """

    def __init__(
        self,
        spark: SparkSession,
        *,
        owns_spark: bool,
        state_dir: str | None,
        durability: Durability = "dev-local",
        master: str = "local[*]",
        log_path: str | None = None,
        progress: bool | None = None,
    ) -> None:
        from krishiv_py._display import register_ipython_formatters

        self._spark: SparkSession | None = spark
        self.master = master
        #: The file that receives Spark's own output (None: the terminal, or a JVM started elsewhere).
        self.log_path = log_path
        #: Show progress bars for long waits: True, False, or None (when interactive).
        self.progress = progress
        register_ipython_formatters()
        self._owns_spark = owns_spark
        self.durability = durability
        #: The durability profile: state store and where checkpoints live.
        self.profile = profile(durability)
        state_dir = check_location(durability, state_dir, master=master)
        self._temp_root = state_dir is None
        self._root = state_dir or tempfile.mkdtemp(prefix="krishiv-")
        if not is_uri(self._root):
            os.makedirs(self._root, exist_ok=True)
        self._senders: dict[str, Sender] = {}
        #: The streams SQL reads, by name, and the SET settings waiting for the next query.
        self._sql = SqlCatalog()
        self._names: dict[str, int] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self._jobs: list[Job] = []
        self._visible = master.startswith("local")  # proven for other masters by a probe
        #: A remote session: (pyspark's Connect-mode switch before it started,); None otherwise.
        self._connect_mode_before: tuple[str | None] | None = None

    # --- construction ---------------------------------------------------------

    @classmethod
    def embedded(
        cls,
        *,
        app_name: str = "krishiv",
        durability: Durability = "dev-local",
        state_dir: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        verbose: bool | None = None,
        progress: bool | None = None,
    ) -> Session:
        """Start a local Spark (``local[*]``) tuned for this machine.

        Parameters
        ----------
        app_name
            Spark application name.
        durability
            ``"dev-local"`` (default: Spark's default state store;
            checkpoints and memory-stream batches in a temporary directory
            removed by :meth:`stop`), ``"single-node-durable"`` (RocksDB
            state store with changelog checkpointing; everything under
            ``state_dir``, default ``~/.krishiv/state`` or
            ``$KRISHIV_STATE_DIR``, never removed) or
            ``"distributed-durable"`` (RocksDB; ``state_dir`` a URI every node
            sees — with this local master a local path is accepted). See
            :mod:`krishiv_py.runtime.durability`.
        state_dir
            Keep checkpoints and memory-stream batches here instead of a
            temporary directory (not removed on stop).
        spark_conf
            Extra Spark settings, applied last.
        verbose
            Show Spark's own output (log lines, Java stack traces) in the
            terminal. By default it goes to a log file, :attr:`log_path`
            (default ``False``, or ``True`` when ``KRISHIV_VERBOSE=1``).
        progress
            Progress bars for long waits (bounded ``collect()``,
            ``process_all_available()``): ``True``, ``False``, or ``None`` —
            shown in terminals and notebooks, unless ``KRISHIV_PROGRESS=0``.

        Raises
        ------
        SessionError
            No Java 17+ was found, or Spark failed to start.
        """
        from krishiv_py.runtime.spark_session import build_spark, local_conf
        from krishiv_py.runtime.watch import verbose_default

        check_location(durability, state_dir, master="local[*]")  # before starting Spark
        cores = os.cpu_count() or 2
        conf = {**local_conf(cores), **dict(spark_conf or {})}
        spark, owns, log_path = build_spark(
            master="local[*]",
            app_name=app_name,
            conf=conf,
            local=True,
            verbose=verbose_default() if verbose is None else verbose,
        )
        return cls(
            spark,
            owns_spark=owns,
            state_dir=state_dir,
            durability=durability,
            log_path=log_path,
            progress=progress,
        )

    @classmethod
    def connect(
        cls,
        master: str,
        *,
        app_name: str = "krishiv",
        state_dir: str | None = None,
        durability: Durability = "dev-local",
        spark_conf: Mapping[str, str] | None = None,
        verbose: bool | None = None,
        progress: bool | None = None,
    ) -> Session:
        """Drive an existing Spark cluster from this process (``spark://host:port``, ``local[N]``, ...).

        This process is Spark's driver (client mode): executors run on the
        cluster with this process's Python (``PYSPARK_PYTHON``, default
        ``sys.executable`` — the same path must exist on the workers).
        Memory streams and checkpoints live under ``state_dir``, which must be
        visible to every executor at the same path (any path when the cluster
        runs on this machine, a shared mount otherwise); the first memory
        stream proves it with a probe file. Shuffle partitions follow the
        cluster's cores when it is reached (``spark_conf`` overrides).
        ``durability``, ``verbose`` and ``progress`` are as for
        :meth:`embedded`; ``"distributed-durable"`` refuses a local
        ``state_dir`` unless the master is local.

        Raises
        ------
        SessionError
            An unsupported or unreachable master, or Spark failed to start.
        """
        from krishiv_py.runtime.remote import check_reachable, is_loopback, parse_master_url
        from krishiv_py.runtime.spark_session import build_spark
        from krishiv_py.runtime.watch import verbose_default

        if not isinstance(master, str) or not re.match(
            r"^(spark://|local(\[[0-9*]+\])?$|yarn$|k8s://)", master
        ):
            raise SessionError(
                f"unsupported master {master!r}: use spark://host:port, local[N], yarn or k8s://..."
            )
        check_location(durability, state_dir, master=master)  # before connecting
        standalone = parse_master_url(master)
        if standalone is not None:
            check_reachable(*standalone, "Spark master")
        loopback = standalone is not None and is_loopback(standalone[0])
        conf = {**_driver_conf(master, loopback=loopback), **dict(spark_conf or {})}
        spark, owns, log_path = build_spark(
            master=master,
            app_name=app_name,
            conf=conf,
            local=master.startswith("local"),
            verbose=verbose_default() if verbose is None else verbose,
        )
        if not master.startswith("local") and "spark.sql.shuffle.partitions" not in conf:
            spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))
        return cls(
            spark,
            owns_spark=owns,
            state_dir=state_dir,
            durability=durability,
            master=master,
            log_path=log_path,
            progress=progress,
        )

    @classmethod
    def remote(
        cls,
        url: str,
        *,
        app_name: str = "krishiv",
        state_dir: str | None = None,
        durability: Durability = "dev-local",
        spark_conf: Mapping[str, str] | None = None,
        verbose: bool | None = None,
        progress: bool | None = None,
    ) -> Session:
        """Reach a Spark Connect server (``sc://host:port``); needs ``krishiv_py[connect]``.

        The server is Spark's driver: this process sends it plans. Memory
        streams and checkpoints live under ``state_dir``, which the server
        and its executors must see at the same path (any path for a server
        on this machine; the first memory stream proves it with a probe).
        ``foreachBatch`` functions (``ForeachBatchSink``) run in a Python
        process on the server's host. Session settings (UTC time zone,
        shuffle partitions) are set on the Connect session; ``spark_conf``
        adds more. ``durability``, ``verbose`` and ``progress`` are as for
        :meth:`embedded`.

        Raises
        ------
        SessionError
            A malformed URL, missing Connect client packages, an unreachable
            server, or a server of another Spark version.
        """
        from krishiv_py.runtime.remote import (
            CONNECT_MODE_ENV,
            build_remote,
            on_this_machine,
            parse_connect_url,
        )
        from krishiv_py.runtime.watch import quiet_python_loggers, verbose_default

        parse_connect_url(url)
        local = on_this_machine(url)
        check_location(durability, state_dir, master=url)  # before connecting
        quiet_python_loggers(verbose_default() if verbose is None else verbose)
        conf = {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)) if local else "8",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            **dict(spark_conf or {}),
        }
        before = os.environ.get(CONNECT_MODE_ENV)
        spark = build_remote(url, app_name=app_name, conf=conf)
        session = cls(
            spark,
            owns_spark=True,
            state_dir=state_dir,
            durability=durability,
            master=url,
            progress=progress,
        )
        session._connect_mode_before = (before,)
        return session

    @property
    def is_remote(self) -> bool:
        """True when Spark is reached over Spark Connect (:meth:`remote`)."""
        from krishiv_py.runtime.remote import is_remote

        return self._spark is not None and is_remote(self._spark)

    def cancel_spark_jobs(self) -> None:
        """Cancel the Spark jobs this session is running (Ctrl-C during a bounded run)."""
        spark = self.spark
        if self.is_remote:
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()

    # --- lifecycle --------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The underlying SparkSession."""
        if self._spark is None:
            raise SessionError("this session was stopped; create a new one")
        return self._spark

    @property
    def state_dir(self) -> str:
        return self._root

    def stop(self) -> None:
        """Stop running jobs, Spark (if this session started it) and remove temp state."""
        spark, self._spark = self._spark, None
        if spark is None:
            return
        for job in self._jobs:
            with contextlib.suppress(Exception):  # best effort while shutting down
                job.stop()
        if self._owns_spark:
            spark.stop()
        if self._connect_mode_before is not None:  # a remote session: local sessions work again
            from krishiv_py.runtime.remote import restore_mode

            restore_mode(self._connect_mode_before[0])
        if self._temp_root:
            shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def _display_rows(self) -> list[tuple[str, str]]:
        from krishiv_py._display import safe

        jobs = [j for j in self._jobs if getattr(j, "state", None) == "running"]
        spark = self._spark
        return [
            ("state", "stopped" if spark is None else "active"),
            ("master", self.master),
            ("spark", safe(lambda: spark.version) if spark is not None else "—"),
            ("durability", self.durability),
            ("state dir", self._root + (" (temporary)" if self._temp_root else "")),
            ("streams", ", ".join(sorted(self._names)) or "none"),
            ("jobs", f"{len(self._jobs)} started, {len(jobs)} running"),
            ("spark log", self.log_path or "terminal"),
        ]

    def __repr__(self) -> str:
        rows = dict(self._display_rows())
        return (
            f"<Session {rows['state']} master={self.master} durability={self.durability} "
            f"streams={len(self._names)} jobs={rows['jobs']!r}>"
        )

    def _repr_html_(self) -> str:
        from krishiv_py._display import html_card

        return html_card("krishiv_py Session", self._display_rows())

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- sources ----------------------------------------------------------------

    def memory_stream(
        self, schema: Any, *, name: str | None = None, retention: Retention = "all"
    ) -> tuple[Stream, Sender]:
        """An unbounded stream fed by the returned :class:`Sender`.

        Its batches are kept on disk under ``<state_dir>/sources/<name>``; a
        new process with the same ``state_dir`` and ``name`` re-attaches to
        them (``sender.batches_sent`` and ``sender.closed`` say where the
        producer left off; see docs/durability.md).

        Parameters
        ----------
        schema
            A Spark DDL string, a ``pyarrow.Schema`` or a Spark ``StructType``.
        name
            The stream's name (used in metrics and, later, SQL); a valid
            identifier. Creating a stream under a name the session already
            has *replaces* that registration with a new, empty stream — so a
            notebook cell can be run again. Jobs started on the earlier
            stream keep running on it, fed by its own sender.
        retention
            ``"all"`` (default) keeps every batch, so a later job or
            ``collect()`` reads the stream from its start. ``"committed"``
            deletes a batch once at least one job reads the stream and every
            job reading it (running, or named and resumable later) has
            committed it: disk use stays bounded, and a job started later or
            a ``collect()`` is refused with :class:`JobError` once batches
            are gone. See :mod:`krishiv_py.runtime.spool`.

        Examples
        --------
            clicks, sender = session.memory_stream(
                "user string, t timestamp", name="clicks", retention="committed")
        """
        from krishiv_py.api.stream import Stream
        from krishiv_py.runtime.spool import check_retention

        check_retention(retention)

        if is_uri(self._root):
            raise SessionError(
                f"memory streams keep their batches in a local (or mounted) state_dir; this session's is "
                f"{self._root!r}. Read the data from files (read_parquet(..., streaming=True)) instead"
            )
        parsed = to_schema(schema)
        if not self._visible:
            from krishiv_py.runtime.remote import check_visible

            check_visible(self.spark, os.path.join(self._root, "sources"), self.master)
            self._visible = True
        name = self._register(name)
        generation = self._names[name]
        path = os.path.join(self._root, "sources", name if generation == 1 else f"{name}.{generation}")
        sender = Sender(name=name, schema=parsed, path=path, retention=retention)
        node = n.MemorySource(name=name, schema=parsed, path=os.path.join(path, "data"))
        self._senders[node.path] = sender
        self._sql.register(name, node)
        return Stream(self, node), sender

    def from_records(self, records: Any, schema: Any, *, name: str | None = None) -> Stream:
        """A bounded stream over ``records`` (list of dicts, pandas or pyarrow), validated now."""
        from krishiv_py.api.stream import Stream

        parsed = to_schema(schema)
        table = to_arrow_batch(records, parsed)
        node = n.RecordsSource(name=self._register(name), schema=parsed, data=table)
        self._sql.register(node.name, node)
        return Stream(self, node)

    def read_parquet(
        self,
        path: str,
        schema: Any = None,
        *,
        streaming: bool = False,
        name: str | None = None,
        max_files_per_trigger: int | None = None,
        bad_files: n.BadFiles = "fail",
    ) -> Stream:
        """Parquet files: bounded, or an unbounded directory source with ``streaming=True``.

        ``max_files_per_trigger`` (streaming only) caps how many new files one
        micro-batch reads; files are taken oldest modification time first, so
        with ``1`` each file is one batch and the watermark advances between
        files. Default: every file present when a batch starts.

        ``bad_files`` (streaming only) says what a running job does with a
        file it cannot read (torn, truncated, not Parquet): ``"fail"`` (the
        default) fails the job with an error naming the file;
        ``"quarantine"`` moves the file under the job's
        ``start(quarantine_dir=...)`` with the reason beside it, counts it in
        ``JobMetrics.quarantined_files`` and runs the batch again without it,
        so no row of that file counts and every other row counts once.
        """
        return self._files("parquet", path, schema, streaming, name, (), max_files_per_trigger, bad_files)

    def read_csv(
        self,
        path: str,
        schema: Any = None,
        *,
        streaming: bool = False,
        name: str | None = None,
        max_files_per_trigger: int | None = None,
        bad_files: n.BadFiles = "fail",
    ) -> Stream:
        """CSV files with a header row (bounded, or a directory with ``streaming=True``).

        ``max_files_per_trigger`` and ``bad_files``: as for :meth:`read_parquet`.
        """
        options = (("header", "true"),)
        return self._files("csv", path, schema, streaming, name, options, max_files_per_trigger, bad_files)

    def read_json(
        self,
        path: str,
        schema: Any = None,
        *,
        streaming: bool = False,
        name: str | None = None,
        max_files_per_trigger: int | None = None,
        bad_files: n.BadFiles = "fail",
    ) -> Stream:
        """JSON-lines files (bounded, or a directory with ``streaming=True``).

        ``max_files_per_trigger`` and ``bad_files``: as for :meth:`read_parquet`.
        """
        return self._files("json", path, schema, streaming, name, (), max_files_per_trigger, bad_files)

    def _files(
        self,
        fmt: n.FileFormat,
        path: str,
        schema: Any,
        streaming: bool,
        name: str | None,
        options: tuple[tuple[str, str], ...],
        max_files_per_trigger: int | None,
        bad_files: n.BadFiles = "fail",
    ) -> Stream:
        from krishiv_py.api.stream import Stream

        if bad_files not in ("fail", "quarantine"):
            raise PlanError(f"bad_files must be 'fail' or 'quarantine', got {bad_files!r}")
        if bad_files == "quarantine" and not streaming:
            raise PlanError(
                "bad_files='quarantine' is for streaming=True sources: a bounded read runs as one "
                "batch job, which fails on a file it cannot read; leave it out, or move the file away"
            )
        if max_files_per_trigger is not None:
            if (
                isinstance(max_files_per_trigger, bool)
                or not isinstance(max_files_per_trigger, int)
                or max_files_per_trigger < 1
            ):
                raise PlanError(
                    f"max_files_per_trigger must be a positive integer, got {max_files_per_trigger!r}"
                )
            if not streaming:
                raise PlanError("max_files_per_trigger applies to streaming=True file sources only")
            options = (*options, ("maxFilesPerTrigger", str(max_files_per_trigger)))
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise PlanError(f"read_{fmt}() takes a file or directory path, got {path!r}")
        path = os.path.abspath(path)
        _check_exists(fmt, path)
        parsed = to_schema(schema) if schema is not None else _infer_schema(fmt, path)
        node = n.FileSource(
            name=self._register(name),
            schema=parsed,
            format=fmt,
            path=path,
            streaming=streaming,
            options=options,
            bad_files=bad_files,
        )
        self._sql.register(node.name, node)
        return Stream(self, node)

    def from_spark(self, df: DataFrame, *, name: str | None = None) -> Stream:
        """Any Spark DataFrame of this session as a source: streaming or batch, whatever produced it.

        Spark's own Kafka connector, Delta, Kinesis, the ``rate`` source, a
        table: the schema is read from the DataFrame, and the stream follows
        the same rules as every other source (watermark, lateness, every
        lowering). A streaming DataFrame gives an unbounded stream, a batch
        DataFrame a bounded one. Its rows are data only: no punctuation, so
        an idle timeout or the end of a bounded input moves its watermark.

        Examples
        --------
            rate = session.spark.readStream.format("rate").option("rowsPerSecond", 100).load()
            ticks = session.from_spark(rate, name="ticks")
            per_second = ticks.watermark("timestamp", 1_000).tumbling_window(1_000).agg(kp.count(kp.col("*")))
        """
        from krishiv_py.api.stream import Stream

        if not (hasattr(df, "schema") and hasattr(df, "isStreaming") and hasattr(df, "sparkSession")):
            raise PlanError(f"from_spark() takes a Spark DataFrame, got {type(df).__name__}")
        if df.sparkSession is not self.spark and not self.is_remote:
            raise PlanError(
                "from_spark(): the DataFrame belongs to another SparkSession; build it from session.spark"
            )
        parsed = to_schema(df.schema)
        node = n.SparkSource(name=self._register(name), schema=parsed, frame=df, streaming=df.isStreaming)
        self._sql.register(node.name, node)
        return Stream(self, node)

    def read_kafka(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        schema: Any = None,
        value_format: str = "json",
        key_format: str = "string",
        event_time: str | None = None,
        starting_offsets: Any = "earliest",
        max_records_per_batch: int | None = None,
        consumer_config: Mapping[str, Any] | None = None,
        name: str | None = None,
        connector: str = "auto",
        watermark_per_partition: bool = False,
    ) -> Stream:
        """A Kafka topic as an unbounded stream; see docs/kafka.md.

        Columns: the value's fields (``schema``, for ``value_format="json"``;
        ``value binary`` for ``"raw"``), then ``kafka_key``, ``kafka_topic``,
        ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp`` and
        ``kafka_value`` (the raw bytes of a record whose value did not
        decode; such a record's fields are null, so its event time is null
        and it is counted and handed to the late-event handler as invalid).

        Parameters
        ----------
        bootstrap_servers, topic
            Where to read (``"host:port[,host:port]"``).
        schema
            The JSON value's fields: a DDL string, ``pyarrow.Schema`` or
            ``StructType``. Timestamps are ISO-8601 strings; epoch
            milliseconds are a ``bigint`` field.
        event_time
            The event-time column, when it is ``"kafka_timestamp"``: then a
            record that does not decode has a null ``kafka_timestamp`` too.
        starting_offsets
            ``"earliest"`` (default), ``"latest"``, or ``{partition: offset}``
            (other partitions from their earliest). Used by a new job only; a
            restarted one goes on from its checkpoint.
        max_records_per_batch
            At most this many records per micro-batch (shared across
            partitions by backlog).
        consumer_config
            Further librdkafka settings (security, ``group.id`` for the
            committed offsets lag tools read, ...).
        connector
            ``"python"``: krishiv's data source (needs ``confluent-kafka``);
            ``"spark"``: Spark's ``format("kafka")`` (its jar on the
            classpath); ``"auto"``: Spark's when this Spark can load it.
        watermark_per_partition
            Give each partition a watermark of its own: ``.watermark(...)``
            right on this stream applies per partition, the job's watermark
            is their minimum, and an idle timeout leaves idle partitions out.

        Examples
        --------
            events = session.read_kafka("127.0.0.1:9092", "events",
                                        schema="user_id string, event_time timestamp, amount double")
        """
        from krishiv_py.api.stream import Stream
        from krishiv_py.kafka.source import kafka_source

        node = kafka_source(
            name=self._register(name),
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            schema=schema,
            value_format=value_format,
            key_format=key_format,
            event_time=event_time,
            starting_offsets=starting_offsets,
            max_records_per_batch=max_records_per_batch,
            consumer_config=consumer_config,
            connector=connector,
            watermark_per_partition=watermark_per_partition,
            spark=self.spark if connector != "python" else None,
            remote=self.is_remote,
        )
        self._sql.register(node.name, node)
        return Stream(self, node)

    # --- SQL --------------------------------------------------------------------

    def sql(self, text: str) -> Stream | None:
        """Run Krishiv's window SQL over the streams of this session; see docs/sql.md.

        ``text`` is a ``SELECT`` query, ``SET key = value`` statements, or
        both (separated by ``;``). A query reads streams by name — every
        source is registered under its ``name``, any stream with
        :meth:`Stream.register` — and returns a :class:`Stream` with the
        same logical plan as the equivalent builder pipeline, to collect,
        start or explain like any other. ``SET`` settings (``watermark.lag``,
        ``watermark.column``, ``window.*``) apply to the next query only;
        with no query, ``sql()`` returns None.

        Raises
        ------
        PlanError
            Invalid or unsupported SQL (a join, ``ORDER BY``, an unknown
            function, column or stream...), naming the construct and its
            line and column.

        Examples
        --------
            stream, sender = session.memory_stream(
                "user_id string, event_time timestamp, amount double", name="events")
            session.sql("SET watermark.lag = INTERVAL '5' SECOND")
            per_minute = session.sql('''
                SELECT user_id,
                       tumble_start(event_time, INTERVAL '1' MINUTE) AS window_start,
                       tumble_end(event_time, INTERVAL '1' MINUTE) AS window_end,
                       COUNT(*) AS events, SUM(amount) AS total
                FROM events
                GROUP BY user_id, tumble_start(event_time, INTERVAL '1' MINUTE)
            ''')
        """
        from krishiv_py.sql import execute

        return execute(self._sql, text, self)

    def _register(self, name: str | None) -> str:
        with self._lock:
            if name is None:
                self._counter += 1
                name = f"stream_{self._counter}"
                while name in self._names:
                    self._counter += 1
                    name = f"stream_{self._counter}"
            if not isinstance(name, str) or not _NAME.match(name):
                raise PlanError(f"stream name {name!r} must be an identifier (letters, digits, _)")
            # A name used again replaces the earlier registration (a re-run notebook cell).
            self._names[name] = self._names.get(name, 0) + 1
            return name

    # --- the engine of its streams ---------------------------------------------------

    def run_bounded(
        self, plan: n.PlanNode, recipe: SparkRecipe, sink: Sink, *, metrics: bool = True
    ) -> BoundedJob:
        """Run a bounded recipe as one batch job on this session's Spark; returns the finished job."""
        from krishiv_py.runtime import launch

        return launch.run_bounded(
            self.spark,
            plan,
            recipe,
            sink,
            metrics=metrics,
            progress=self.progress,
            remote=self.is_remote,
            on_interrupt=self.cancel_spark_jobs,
        )

    def start_job(self, plan: n.PlanNode, recipe: SparkRecipe, options: StartOptions) -> Job:
        """Start a recipe: a streaming query, or for bounded input a batch job returned finished."""
        from krishiv_py.runtime import launch

        if launch.is_batch(recipe):
            launch.refuse_quarantine_for_batch(options)
            return self.run_bounded(plan, recipe, options.sink)
        senders = [
            self.sender_for(s.path) if isinstance(s, n.MemorySource) else None for s in n.sources_of(plan)
        ]
        job = launch.start_streaming_job(
            self.spark,
            plan,
            recipe,
            options,
            checkpoint_dir=options.checkpoint_dir or self.checkpoint_dir(options.name),
            profile=self.profile if options.durability is None else profile(options.durability),
            senders=senders,
            progress=self.progress,
        )
        self._jobs.append(job)
        return job

    def spark_dataframe(self, recipe: SparkRecipe) -> DataFrame:
        """The DataFrame of ``recipe`` on this session's Spark (streaming when the recipe is)."""
        from krishiv_py.runtime.build import build_dataframe
        from krishiv_py.runtime.spark_errors import spark_call

        spark = self.spark
        return spark_call("building the DataFrame", lambda: build_dataframe(spark, recipe))

    def explain_spark(self, recipe: SparkRecipe) -> str:
        """Spark's extended plan of ``recipe`` (parsed, analyzed, optimized, physical)."""
        from krishiv_py.runtime.run import explain_spark

        return explain_spark(self.spark, recipe)

    def durability_text(self, *, bounded: bool) -> str:
        """Where a job's state and checkpoint go, for ``explain()``."""
        if bounded:
            return "a bounded run: one Spark batch job, no checkpoint"
        where = os.path.join(self.state_dir, "checkpoints", "<job name or a fresh id>")
        return f"{self.profile.describe()}; checkpoint: {where}"

    def register_stream(self, name: str, plan: n.PlanNode) -> None:
        """Make ``plan`` readable by :meth:`sql` as ``name`` (a name registered again means this plan)."""
        from krishiv_py.sql import check_name

        self._sql.register(check_name(name), plan)

    def sender_for(self, path: str) -> Sender | None:
        return self._senders.get(path)

    def checkpoint_dir(self, name: str | None = None) -> str:
        """Where a job's checkpoint goes: ``checkpoints/<name>`` (a fresh one when no name)."""
        import uuid

        return os.path.join(self._root, "checkpoints", name or uuid.uuid4().hex)


def _driver_conf(master: str, *, loopback: bool) -> dict[str, str]:
    """Spark settings for this process as the driver of ``master``.

    It keeps the local JVM options (UTC, quiet logging) but not the local
    sizing; executors elsewhere run this process's Python; a cluster on
    this machine (``loopback``) reaches the driver on loopback too.
    """
    from krishiv_py.runtime.spark_session import local_conf

    conf = {
        k: v
        for k, v in local_conf(os.cpu_count() or 2).items()
        if not k.startswith("spark.driver.") or k == "spark.driver.extraJavaOptions"
    }
    if not master.startswith("local"):
        conf.pop("spark.sql.shuffle.partitions")
        conf.pop("spark.default.parallelism")
        conf["spark.executorEnv.PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if loopback:
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def _check_exists(fmt: str, path: str) -> None:
    """A missing path fails at ``read_*`` time, not at the first Spark job."""
    import glob

    if glob.has_magic(path):
        if not glob.glob(path):
            raise PlanError(f"read_{fmt}(): no file matches {path!r}")
    elif not os.path.exists(path):
        parent = os.path.dirname(path)
        hint = "" if os.path.isdir(parent) else f" (nor does its directory {parent!r})"
        raise PlanError(f"read_{fmt}(): {path!r} does not exist{hint}")


def _infer_schema(fmt: str, path: str) -> Schema:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.json as pj

    try:
        if fmt == "json":
            files = (
                [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
            )
            files = [f for f in files if os.path.isfile(f) and not os.path.basename(f).startswith((".", "_"))]
            if not files:
                raise SchemaError(f"no files to infer the schema of {path!r} from; pass schema=")
            arrow_schema = pj.read_json(files[0]).schema
        else:
            arrow_schema = ds.dataset(path, format=fmt).schema  # type: ignore[call-overload]
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        reason = str(exc).replace(path, "").strip(" :'\"") or type(exc).__name__
        raise SchemaError(f"cannot infer the schema of {path!r} ({reason}); pass schema=") from None
    if not arrow_schema.names:
        raise SchemaError(f"no files to infer the schema of {path!r} from; pass schema=")
    return Schema.from_arrow(arrow_schema)
