"""A job's checkpoint: every path a job writes there, and the one reader of Spark's logs in it.

:class:`CheckpointLayout` is built once when a job starts, from its
checkpoint directory, and handed to everything that writes or reads
there: the launcher (the plan and bucket records), the runtime (idle
markers, ticks, the Connect hand-off, the state of the operator's stages),
the memory streams' spools, sinks (``SinkContext.checkpoint``) and
timelines.

Spark's streaming checkpoint logs, read from a checkpoint directory on this machine:

A streaming query's checkpoint holds metadata logs of one file per
micro-batch, each a version line, ``v1``, then its entries::

    commits/<batch>            the micro-batches that completed, each with the watermark
                               it left for the next (``nextBatchWatermarkMs``)
    offsets/<batch>            a line of batch metadata, then each source's offset
                               after the micro-batch (line ``i`` for ``sources/<i>``, ``-``: none)
    sources/<i>/<batch>        a file source's log: the files each micro-batch read,
    sources/<i>/<batch>.compact  one JSON line each ({"path", "timestamp", "batchId"});
                               a compact file lists every batch up to its own

A file source's offset is ``{"logOffset": <batch>}``, an index into its log.
A log file whose first line is not ``v1`` is a format this module does not
know: reading it raises :class:`~krishiv_py.errors.PlanError`.

The memory stream's spool (:mod:`krishiv_py.runtime.spool`) reads these logs
to know what its readers committed; the watermark timeline
(:mod:`krishiv_py.viz`) reads them to replay a job's input.
"""

from __future__ import annotations

import json
import re
import threading
from typing import NamedTuple

import attrs

import krishiv_py.files as files
from krishiv_py.errors import PlanError

__all__ = [
    "CheckpointLayout",
    "FileEntry",
    "batch_watermark_ms",
    "committed_batch",
    "file_source_batch",
    "file_source_log",
    "local_path",
    "log_offset",
    "read_json",
    "source_offsets",
    "write_json",
]

# Log files of a file source: <batch> and <batch>.compact (not temporary or checksum files).
_LOG_FILE = re.compile(r"^\d+(\.compact)?$")
_BATCH_FILE = re.compile(r"^\d+$")
# Spark's temporary file of a log entry (``.<name>.<uuid>.tmp``, renamed to ``<name>`` when
# written whole) and its checksum file.
_SPARK_TEMP_FILE = re.compile(r"^\.\.?\d+\.[0-9a-f-]+\.tmp(\.crc)?$")
_VERSION = "v1"


@attrs.frozen
class CheckpointLayout:
    """The paths of one job's checkpoint directory ``root`` (a local path or a URI)."""

    root: str

    # --- Spark's own -----------------------------------------------------------------------

    @property
    def offsets(self) -> str:
        """Spark's offset log: ``offsets/<batch>``, written before a micro-batch runs."""
        return files.join(self.root, "offsets")

    @property
    def commits(self) -> str:
        """Spark's commit log: ``commits/<batch>``, written when a micro-batch completed."""
        return files.join(self.root, "commits")

    @property
    def state(self) -> str:
        """Spark's state store (the native lowering's and the stateful operator's state)."""
        return files.join(self.root, "state")

    @property
    def sources(self) -> str:
        """Spark's file-source logs, one directory per source of the query (``sources/<i>``)."""
        return files.join(self.root, "sources")

    def source_log(self, index: int) -> str:
        """The log of the file source (memory streams too) that is the query's ``index``-th source."""
        return files.join(self.sources, str(index))

    def source_logs(self) -> list[int]:
        """The indexes of the sources that have a log, in order."""
        return sorted(int(name) for name in files.names(self.sources) if name.isdigit())

    # --- krishiv_py's -----------------------------------------------------------------------

    @property
    def plan_file(self) -> str:
        """The identity of the plan that wrote the checkpoint (a later start must match it)."""
        return files.join(self.root, "krishiv-plan.txt")

    @property
    def buckets_file(self) -> str:
        """The stateful operator's number of key buckets, recorded when the job first started."""
        return files.join(self.root, "krishiv-buckets.txt")

    @property
    def key_groups_file(self) -> str:
        """The stateful operator's key groups and the tasks of its last run (JSON; SPEC 3.15)."""
        return files.join(self.root, "krishiv-key-groups.json")

    @property
    def job_file(self) -> str:
        """Facts of the job a look inside needs (JSON): the event-time shift of its watermarks."""
        return files.join(self.root, "krishiv-job.json")

    @property
    def hot_keys_file(self) -> str:
        """The keys the stateful operator received most rows of since the job started (JSON)."""
        return files.join(self.root, "krishiv-hot-keys.json")

    @property
    def idle_markers(self) -> str:
        """The idle sources' marker files (a streaming file source the query reads)."""
        return files.join(self.root, "krishiv-idle")

    @property
    def ticks(self) -> str:
        """The stateful lowering's processing-time ticks (a streaming file source)."""
        return files.join(self.root, "krishiv-ticks")

    @property
    def handoff(self) -> str:
        """Over Spark Connect: the stateful operator's payloads, written on the server."""
        return files.join(self.root, "krishiv-handoff")

    @property
    def stages(self) -> str:
        """The state of the operator's stages keyed by other columns, per stage bucket and micro-batch."""
        return files.join(self.root, "krishiv-stages")

    @property
    def operator_state(self) -> str:
        """The operator's state per key bucket and micro-batch, with the ``krishiv-files`` carrier."""
        return files.join(self.root, "krishiv-state")

    @property
    def auto_lag(self) -> str:
        """The automatic lag's record: per micro-batch, the state it runs with (``<batch>``)."""
        return files.join(self.root, "krishiv-auto-lag")

    def auto_lag_record(self, batch_id: int) -> bytes | None:
        """The automatic lag's record for micro-batch ``batch_id`` (None: there is none)."""
        try:
            return files.read_bytes(files.join(self.auto_lag, str(batch_id)))
        except FileNotFoundError:
            return None

    def has_auto_lag_records(self) -> bool:
        """True once a micro-batch's automatic lag was recorded here."""
        return any(_BATCH_FILE.match(n) for n in files.names(self.auto_lag))

    def write_auto_lag_record(self, batch_id: int, data: bytes, *, keep: int = 100) -> None:
        """Record ``data`` for micro-batch ``batch_id`` (atomically: a re-run writes the same bytes);
        records more than ``keep`` micro-batches older go, as Spark keeps its own logs."""
        files.write_bytes(files.join(self.auto_lag, str(batch_id)), data)
        for name in files.names(self.auto_lag):
            if _BATCH_FILE.match(name) and int(name) < batch_id - keep:
                files.delete(files.join(self.auto_lag, name))

    def on_this_machine(self) -> CheckpointLayout | None:
        """This layout with its root as a path of this machine's file system (None: another one)."""
        local = local_path(self.root)
        return None if local is None else CheckpointLayout(local)

    # --- reading the logs ----------------------------------------------------------------------

    def has_offsets(self) -> bool:
        """True once Spark planned a micro-batch here (the checkpoint is in use)."""
        return any(name.isdigit() for name in files.names(self.offsets))

    def drop_unfinished_first_entries(self) -> list[str]:
        """Remove what a job killed while Spark wrote its first log entry left; the paths removed.

        Spark writes a log entry to a temporary file beside it and renames it
        when whole: a process killed in between leaves the temporary file,
        and Spark refuses to start a checkpoint with no micro-batch planned
        whose logs hold any file (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``),
        so the job could never start again on it. Nothing was planned there
        yet, so the file holds nothing of the job's. Only such temporary files
        go, and only while no micro-batch was planned (later ones Spark ignores).
        """
        if self.has_offsets():
            return []
        dropped = []
        for log in (self.offsets, self.commits):
            for name in files.names(log):
                if _SPARK_TEMP_FILE.match(name):
                    path = files.join(log, name)
                    files.delete(path)
                    dropped.append(path)
        return dropped

    def committed_batch(self) -> int:
        """The last committed micro-batch, the newest ``commits/<batch>`` (-1: none yet)."""
        names = files.names(self.commits)
        return max((int(name) for name in names if _BATCH_FILE.match(name)), default=-1)

    def source_offsets(self, batch_id: int) -> list[str]:
        """Each source's offset after micro-batch ``batch_id`` (``offsets/<batch_id>``), one line per source.

        ``-`` stands for no offset yet. Raises :class:`FileNotFoundError` when the
        file is missing, :class:`~krishiv_py.errors.PlanError` when it is not ``v1``.
        """
        path = files.join(self.offsets, str(batch_id))
        return _entries(path, "offset")[1:]  # the first entry is the batch's metadata

    def batch_watermark_ms(self, batch_id: int) -> int:
        """The watermark micro-batch ``batch_id`` runs with (``batchWatermarkMs`` of ``offsets/<batch_id>``).

        Spark writes the entry before the micro-batch runs and runs it again
        with the same entry after a restart. Raises :class:`FileNotFoundError`
        when the file is missing, :class:`~krishiv_py.errors.PlanError` when it
        is not ``v1`` or has no watermark.
        """
        return self._batch_metadata(batch_id, "batchWatermarkMs")

    def batch_timestamp_ms(self, batch_id: int) -> int:
        """When micro-batch ``batch_id`` started, as Spark recorded it (``batchTimestampMs``; its
        processing time, the same when Spark runs it again). Raises as :meth:`batch_watermark_ms`."""
        return self._batch_metadata(batch_id, "batchTimestampMs")

    def next_watermark_ms(self, batch_id: int) -> int:
        """The watermark committed micro-batch ``batch_id`` left for the next one
        (``nextBatchWatermarkMs`` of ``commits/<batch_id>``).

        Above :meth:`batch_watermark_ms` of the same micro-batch when its rows
        moved the watermark. Raises as :meth:`batch_watermark_ms`.
        """
        path = files.join(self.commits, str(batch_id))
        entries = _entries(path, "commit")
        try:
            return int(json.loads(entries[0])["nextBatchWatermarkMs"])
        except (IndexError, KeyError, TypeError, ValueError):
            raise PlanError(f"no nextBatchWatermarkMs in Spark's commit log entry {path}") from None

    def _batch_metadata(self, batch_id: int, name: str) -> int:
        path = files.join(self.offsets, str(batch_id))
        entries = _entries(path, "offset")
        try:
            return int(json.loads(entries[0])[name])
        except (IndexError, KeyError, TypeError, ValueError):
            raise PlanError(f"no {name} in Spark's offset log entry {path}") from None


class FileEntry(NamedTuple):
    """One line of a file source's log: a file one micro-batch read."""

    batch_id: int  # the log's batch id (the source's logOffset), not necessarily the micro-batch's
    path: str  # the file's URI
    timestamp: int  # its modification time, epoch ms


def _entries(path: str, what: str) -> list[str]:
    """The lines after the version line of log file ``path``; PlanError unless it is ``v1``."""
    lines = files.read_bytes(path).decode("utf-8").splitlines()
    if not lines or lines[0] != _VERSION:
        raise PlanError(f"unknown Spark {what} log format in {path}")
    return lines[1:]


def committed_batch(checkpoint_dir: str) -> int:
    """:meth:`CheckpointLayout.committed_batch` of the checkpoint at ``checkpoint_dir``."""
    return CheckpointLayout(checkpoint_dir).committed_batch()


def source_offsets(checkpoint_dir: str, batch_id: int) -> list[str]:
    """:meth:`CheckpointLayout.source_offsets` of the checkpoint at ``checkpoint_dir``."""
    return CheckpointLayout(checkpoint_dir).source_offsets(batch_id)


def batch_watermark_ms(checkpoint_dir: str, batch_id: int) -> int:
    """:meth:`CheckpointLayout.batch_watermark_ms` of the checkpoint at ``checkpoint_dir``."""
    return CheckpointLayout(checkpoint_dir).batch_watermark_ms(batch_id)


def write_json(path: str, data: object) -> None:
    """Write ``data`` as JSON to ``path`` (a local path or a URI), whole or not at all (a
    temporary file moved in place)."""
    files.write_bytes(path, (json.dumps(data) + "\n").encode("utf-8"))


def read_json(path: str | None) -> object | None:
    """The JSON at ``path`` (None: no path, no file, or not JSON)."""
    if path is None:
        return None
    try:
        data: object = json.loads(files.read_bytes(path))
    except (OSError, ValueError):
        return None
    return data


def local_path(location: str | None) -> str | None:
    """A checkpoint location as a path of this machine's file system (None: another file system)."""
    return None if location is None else files.local(location)


def log_offset(value: object) -> int | None:
    """A file source's offset, its ``logOffset``: from an offset log line or a progress report's value.

    None for no offset (``-``, empty) and for offsets of other sources.
    """
    if isinstance(value, str):
        if value.strip() in ("", "-"):
            return None
        value = json.loads(value)
    if isinstance(value, dict) and "logOffset" in value:
        return int(value["logOffset"])
    return None


# Parsed log files by (path, mtime, size): a spool reads the same files after every send.
_parsed: dict[tuple[str, int, int], list[FileEntry]] = {}
_parsed_lock = threading.Lock()


def file_source_log(directory: str) -> list[FileEntry]:
    """Every entry of a file source's log ``sources/<i>``, compact files included ([] if there is none).

    An entry of a batch that a compact file and the batch's own file both list
    appears twice. A file removed meanwhile (by Spark's log compaction, into a
    compact file) is skipped.
    """
    out: list[FileEntry] = []
    for name in files.names(directory):
        if _LOG_FILE.match(name):
            out += _log_file(files.join(directory, name))
    return out


def file_source_batch(directory: str, batch_id: int) -> list[FileEntry] | None:
    """The entries of log batch ``batch_id`` from its own file ``sources/<i>/<batch_id>``.

    None when there is no such file (the batch is a compaction batch, whose
    ``.compact`` file lists every batch, or Spark deleted the file after
    compacting it): read :func:`file_source_log` then. The log of a
    long-running job holds a line per file it ever read; this reads one batch's.
    """
    path = files.join(directory, str(batch_id))
    if files.stat(path) is None:
        return None
    entries = [e for e in _log_file(path) if e.batch_id == batch_id]
    return entries or None


def _log_file(path: str) -> list[FileEntry]:
    st = files.stat(path)
    if st is None:
        return []
    key = (path, *st)
    with _parsed_lock:
        cached = _parsed.get(key)
    if cached is not None:
        return cached
    try:
        lines = _entries(path, "file-source")
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        if line.strip():
            raw = json.loads(line)
            entries.append(FileEntry(int(raw["batchId"]), str(raw["path"]), int(raw["timestamp"])))
    with _parsed_lock:
        if len(_parsed) > 512:
            _parsed.clear()
        _parsed[key] = entries
    return entries
