"""The entry point: a front door to Spark and krishiv_py's sources.

``Session.embedded()`` starts a local Spark tuned for one machine;
``Session.connect(master)`` drives an existing cluster from this process;
``Session.remote(url)`` reaches a Spark Connect server. Creating a session
is the only thing that starts a JVM — ``import krishiv_py`` does not. Where
each part runs: :mod:`krishiv_py.runtime.remote`.

A session makes sources and hands on the rest: starting Spark
(:mod:`krishiv_py.runtime.spark_session`), running its streams (its
:class:`~krishiv_py.runtime.spark_engine.SparkEngine`) and SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from krishiv_py._display import html_card, register_ipython_formatters
from krishiv_py.api.stream import Stream
from krishiv_py.errors import PlanError, SessionError
from krishiv_py.expr import UserFunction
from krishiv_py.kafka.source import KafkaOptions, kafka_source
from krishiv_py.plan import nodes as n
from krishiv_py.plan.files import FileOptions, file_source
from krishiv_py.runtime.durability import Durability, DurabilityProfile, check_location, is_uri, profile
from krishiv_py.runtime.remote import check_visible
from krishiv_py.runtime.sources import spark_source
from krishiv_py.runtime.spark_engine import SparkEngine
from krishiv_py.runtime.spark_session import StartedSpark, start_cluster, start_local, start_remote
from krishiv_py.runtime.spool import check_retention
from krishiv_py.sender import Sender, memory_source, to_arrow_batch
from krishiv_py.sql import execute
from krishiv_py.sql.catalog import SqlCatalog
from krishiv_py.types import to_schema
from krishiv_py.viz import timeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from krishiv_py.runtime.handle import Job
    from krishiv_py.runtime.spool import Retention

__all__ = ["Durability", "Session"]


class Session:
    """A Spark session for krishiv_py pipelines. Use as a context manager.

    The streams made from its sources run on its :attr:`engine`
    (``Stream.collect()``, ``start()``, ``explain()``, ``to_spark()``).

    Examples
    --------
        import krishiv_py as kp
        with kp.Session.embedded() as session:
            stream, sender = session.memory_stream("k string, t timestamp")
    """

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        owns_spark: bool,
        state_dir: str | None,
        durability: Durability = "dev-local",
        master: str = "local[*]",
        log_path: str | None = None,
        progress: bool | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        register_ipython_formatters()
        #: The streams SQL reads, by name, and the SET settings waiting for the next query.
        self._sql = SqlCatalog()
        self.master = master
        #: The file that receives Spark's own output (None: the terminal, or a JVM started elsewhere).
        self.log_path = log_path
        self.durability = durability
        #: Where this session's streams run: its Spark, state directory, profile and jobs.
        self.engine = SparkEngine(
            spark,
            owns_spark=owns_spark,
            state_dir=check_location(durability, state_dir, master=master),
            profile=profile(durability),
            progress=progress,
            on_stop=on_stop,
            register=self._sql.register,
            timeline=_timeline,
        )
        self._visible = master.startswith("local")  # proven for other masters by a probe

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

        - ``durability``: ``"dev-local"`` (default: Spark's default state
          store; checkpoints and memory-stream batches in a temporary
          directory removed by :meth:`stop`), ``"single-node-durable"``
          (RocksDB with changelog checkpointing, under ``state_dir``, default
          ``~/.krishiv/state`` or ``$KRISHIV_STATE_DIR``, never removed) or
          ``"distributed-durable"`` (RocksDB; ``state_dir`` a URI every node
          sees). See :mod:`krishiv_py.runtime.durability`.
        - ``state_dir``: checkpoints and memory-stream batches here (kept on stop).
        - ``spark_conf``: extra Spark settings, applied last.
        - ``verbose``: Spark's own output in the terminal; by default it goes
          to :attr:`log_path` (``True`` when ``KRISHIV_VERBOSE=1``).
        - ``progress``: progress bars for long waits (``None``: in terminals
          and notebooks, unless ``KRISHIV_PROGRESS=0``).

        Raises :class:`SessionError` when no Java 17+ is found or Spark fails to start.
        """
        return cls._start(start_local, app_name, durability, state_dir, spark_conf, verbose, progress)

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

        This process is Spark's driver (client mode); executors run this
        process's Python (``PYSPARK_PYTHON``, default ``sys.executable``).
        ``state_dir`` must be visible to every executor at the same path (the
        first memory stream proves it with a probe file). The other
        arguments are as for :meth:`embedded`; see docs/deployment.md.

        Raises :class:`SessionError` for an unsupported or unreachable master, or when Spark fails to start.
        """
        start = functools.partial(start_cluster, master)
        return cls._start(start, app_name, durability, state_dir, spark_conf, verbose, progress)

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

        The server is Spark's driver: this process sends it plans.
        ``state_dir`` must be visible to the server and its executors at the
        same path; ``ForeachBatchSink`` functions run on the server's host.
        The other arguments are as for :meth:`embedded`; see docs/deployment.md.

        Raises :class:`SessionError` for a malformed URL, missing Connect client packages,
        an unreachable server, or a server of another Spark version.
        """
        start = functools.partial(start_remote, url)
        return cls._start(start, app_name, durability, state_dir, spark_conf, verbose, progress)

    @classmethod
    def _start(
        cls,
        start: Callable[..., StartedSpark],
        app_name: str,
        durability: Durability,
        state_dir: str | None,
        spark_conf: Mapping[str, str] | None,
        verbose: bool | None,
        progress: bool | None,
    ) -> Session:
        kw = {
            "app_name": app_name,
            "durability": durability,
            "state_dir": state_dir,
            "spark_conf": spark_conf,
        }
        started = start(**kw, verbose=verbose)
        return cls(
            started.spark,
            owns_spark=started.owns,
            state_dir=state_dir,
            durability=durability,
            master=started.master,
            log_path=started.log_path,
            progress=progress,
            on_stop=started.on_stop,
        )

    @property
    def profile(self) -> DurabilityProfile:
        """The durability profile: state store and where checkpoints live."""
        return self.engine.profile

    @property
    def progress(self) -> bool | None:
        """Show progress bars for long waits: True, False, or None (when interactive)."""
        return self.engine.progress

    @property
    def spark(self) -> SparkSession:
        """The underlying SparkSession."""
        return self.engine.spark

    @property
    def state_dir(self) -> str:
        return self.engine.state_dir

    @property
    def is_remote(self) -> bool:
        """True when Spark is reached over Spark Connect (:meth:`remote`)."""
        return self.engine.is_remote

    def cancel_spark_jobs(self) -> None:
        """Cancel the Spark jobs this session is running (Ctrl-C during a bounded run)."""
        self.engine.cancel_spark_jobs()

    def checkpoint_dir(self, name: str | None = None) -> str:
        """Where a job's checkpoint goes: ``checkpoints/<name>`` (a fresh one when no name)."""
        return self.engine.checkpoint_dir(name)

    def serve_metrics(self, port: int = 0, *, host: str = "127.0.0.1") -> str:
        """Serve the metrics of every streaming job of this session for Prometheus; returns the URL.

        As :meth:`Job.serve_metrics <krishiv_py.Job.serve_metrics>`, one
        endpoint for all: jobs started later appear at the next scrape, each
        labelled ``job="<name>"`` (``start(name=...)``, else its Spark query
        name). Stopped with the session. Needs ``krishiv_py[metrics]``.
        """
        return self.engine.serve_metrics(port, host=host)

    def stop(self) -> None:
        """Stop running jobs, Spark (if this session started it) and remove temp state."""
        self.engine.stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _display_rows(self) -> list[tuple[str, str]]:
        streams = ", ".join(self._sql.sources) or "none"
        rows = [("master", self.master), ("durability", self.durability), ("streams", streams)]
        return [*self.engine.display_rows(rows), ("spark log", self.log_path or "terminal")]

    def __repr__(self) -> str:
        rows = dict(self._display_rows())
        return (
            f"<Session {rows['state']} master={self.master} durability={self.durability} "
            f"streams={len(self._sql.sources)} jobs={rows['jobs']!r}>"
        )

    def _repr_html_(self) -> str:
        return html_card("krishiv_py Session", self._display_rows())

    # --- sources ----------------------------------------------------------------

    def memory_stream(
        self, schema: Any, *, name: str | None = None, retention: Retention = "all"
    ) -> tuple[Stream, Sender]:
        """An unbounded stream fed by the returned :class:`Sender`.

        Its batches are kept on disk under ``<state_dir>/sources/<name>``; a
        new process with the same ``state_dir`` and ``name`` re-attaches to
        them (see docs/durability.md).

        Parameters
        ----------
        schema
            A Spark DDL string, a ``pyarrow.Schema`` or a Spark ``StructType``.
        name
            The stream's name (in metrics and SQL); an identifier. A name the
            session already has gets a new, empty stream (a notebook cell run
            again); jobs on the earlier one keep running on it.
        retention
            ``"all"`` (default) keeps every batch; ``"committed"`` deletes a
            batch once every job reading the stream has committed it, so disk
            use stays bounded (see :mod:`krishiv_py.runtime.spool`).
        """
        check_retention(retention)
        root = self.state_dir
        if is_uri(root):
            raise SessionError(
                f"memory streams keep their batches in a local (or mounted) state_dir; this session's is "
                f"{root!r}. Read the data from files (read_parquet(..., streaming=True)) instead"
            )
        parsed = to_schema(schema)
        if not self._visible:
            check_visible(self.spark, self.engine.sources_dir, self.master)
            self._visible = True
        node, sender = memory_source(self.engine.sources_dir, *self._sql.claim(name), parsed, retention)
        self.engine.add_feed(node.path, sender)
        return self._source(node), sender

    def from_records(self, records: Any, schema: Any, *, name: str | None = None) -> Stream:
        """A bounded stream over ``records`` (list of dicts, pandas or pyarrow), validated now."""
        parsed = to_schema(schema)
        table = to_arrow_batch(records, parsed)
        return self._source(n.RecordsSource(name=self._sql.claim(name)[0], schema=parsed, data=table))

    def read_parquet(
        self, path: str, schema: Any = None, *, name: str | None = None, **options: Unpack[FileOptions]
    ) -> Stream:
        """Parquet files: bounded, or an unbounded directory source with ``streaming=True``.

        ``schema`` (default: read from the files); the options
        (``streaming``, ``max_files_per_trigger``, ``bad_files``):
        :class:`~krishiv_py.plan.files.FileOptions`. See docs/sources.md.
        """
        return self._files("parquet", path, schema, name, (), options)

    def read_csv(
        self, path: str, schema: Any = None, *, name: str | None = None, **options: Unpack[FileOptions]
    ) -> Stream:
        """CSV files with a header row; as :meth:`read_parquet`."""
        return self._files("csv", path, schema, name, (("header", "true"),), options)

    def read_json(
        self, path: str, schema: Any = None, *, name: str | None = None, **options: Unpack[FileOptions]
    ) -> Stream:
        """JSON-lines files; as :meth:`read_parquet`."""
        return self._files("json", path, schema, name, (), options)

    def _files(
        self,
        fmt: n.FileFormat,
        path: str,
        schema: Any,
        name: str | None,
        spark_options: tuple[tuple[str, str], ...],
        options: FileOptions,
    ) -> Stream:
        claim = lambda: self._sql.claim(name)[0]  # noqa: E731 - named once everything else is valid
        return self._source(file_source(fmt, path, schema, name=claim, options=spark_options, **options))

    def from_spark(self, df: DataFrame, *, name: str | None = None) -> Stream:
        """Any Spark DataFrame of this session as a source: streaming or batch, whatever produced it.

        Spark's own Kafka connector, Delta, the ``rate`` source, a table: the
        schema is read from the DataFrame, and the stream follows the same
        rules as every other source. A streaming DataFrame gives an unbounded
        stream, a batch DataFrame a bounded one. Its rows carry no
        punctuation, so an idle timeout or the end of a bounded input moves
        its watermark.
        """
        claim = lambda: self._sql.claim(name)[0]  # noqa: E731
        return self._source(spark_source(df, name=claim, spark=self.spark, remote=self.is_remote))

    def read_kafka(
        self, bootstrap_servers: str, topic: str, *, name: str | None = None, **options: Unpack[KafkaOptions]
    ) -> Stream:
        """A Kafka topic as an unbounded stream; the options: :class:`~krishiv_py.kafka.source.KafkaOptions`.

        Columns: the value's fields (``schema``, for ``value_format="json"``;
        ``value binary`` for ``"raw"``), then ``kafka_key``, ``kafka_topic``,
        ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp`` and
        ``kafka_value`` (the raw bytes of a record whose value did not
        decode; it counts as invalid). See docs/kafka.md.

        ``name`` (SQL, metrics, source watermarks) is the topic's by default,
        made an identifier (``orders.v1`` → ``orders_v1``), with ``_2``,
        ``_3``, ... when a source of this session has it already.

        Examples
        --------
            events = session.read_kafka("127.0.0.1:9092", "events",
                                        schema="user_id string, event_time timestamp, amount double")
        """
        spark = None if options.get("connector") == "python" else self.spark
        default = topic if isinstance(topic, str) and topic.strip() else None
        node = kafka_source(
            name=self._sql.claim(name, default=default)[0],
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            spark=spark,
            remote=self.is_remote,
            **options,
        )
        return self._source(node)

    def _source(self, node: n.SourceNode) -> Stream:
        """A stream reading ``node`` on this session's engine, readable by :meth:`sql` under its name."""
        self._sql.register(node.name, node)
        return Stream(self.engine, node)

    def sql(self, text: str) -> Stream | None:
        """Run Krishiv's window SQL over the streams of this session; see docs/sql.md.

        ``text`` is a ``SELECT`` query, ``SET key = value`` statements, or
        both (separated by ``;``). A query reads streams by name (every
        source under its ``name``, any stream after :meth:`Stream.register`)
        and returns a :class:`Stream` with the same logical plan as the
        equivalent builder pipeline. ``SET`` settings (``watermark.lag``,
        ``watermark.column``, ``window.*``) apply to the next query only;
        with no query, ``sql()`` returns None.

        Raises :class:`PlanError` for invalid or unsupported SQL, naming the construct, line and column.
        """
        return execute(self._sql, text, self.engine)

    def register_udf(self, function: UserFunction, name: str | None = None) -> UserFunction:
        """Let this session's SQL call ``function`` (:func:`krishiv_py.udf`) as ``name`` (its own
        name by default; any case); returns ``function``.

        A registered name does not shadow Spark's functions of the same
        name (``length``, ``lower``, ...): those are the built-in ones.

        Examples
        --------
            session.register_udf(count_char)
            session.sql("SELECT auction, count_char(url, 'c') AS c_counts FROM bid")
        """
        if not isinstance(function, UserFunction):
            raise PlanError(f"register_udf() takes a function made with @kp.udf(...), got {function!r}")
        self._sql.register_function(function.name if name is None else name, function)
        return function


def _timeline(job: Job, ax: Any) -> Any:
    """How a job started by a session draws :meth:`~krishiv_py.runtime.handle.Job.plot_timeline`."""
    return timeline(job, ax=ax)
