"""File sources: a ``read_parquet``/``read_csv``/``read_json`` call checked and made a plan node.

Everything is checked when the source is made, before any Spark job: the
options, that the path exists, and the schema (given, or read from the
files' own metadata with pyarrow).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any, TypedDict

from krishiv_py.errors import PlanError, SchemaError
from krishiv_py.plan.nodes import BadFiles, FileFormat, FileSource
from krishiv_py.types import Schema, to_schema

__all__ = ["FileOptions", "file_source"]


class FileOptions(TypedDict, total=False):
    """The keyword arguments of ``session.read_parquet/read_csv/read_json(path, schema=None, **options)``.

    ``streaming``
        ``False`` (default): the files there now, bounded. ``True``: an
        unbounded source over a directory; every new file is read.
    ``max_files_per_trigger``
        (streaming only) How many new files one micro-batch reads at most;
        files are taken oldest modification time first, so with ``1`` each
        file is one batch and the watermark advances between files.
        Default: every file present when a batch starts.
    ``bad_files``
        (streaming only) What a running job does with a file it cannot read
        (torn, truncated, not of the format): ``"fail"`` (default) fails the
        job with an error naming the file; ``"quarantine"`` moves the file
        under the job's ``start(quarantine_dir=...)`` with the reason beside
        it, counts it in ``JobMetrics.quarantined_files`` and runs the batch
        again without it, so no row of that file counts and every other row
        counts once.
    """

    streaming: bool
    max_files_per_trigger: int | None
    bad_files: BadFiles


def file_source(
    fmt: FileFormat,
    path: str,
    schema: Any,
    *,
    name: Callable[[], str],
    streaming: bool = False,
    options: tuple[tuple[str, str], ...] = (),
    max_files_per_trigger: int | None = None,
    bad_files: BadFiles = "fail",
) -> FileSource:
    """The node of a file source (the options: :class:`FileOptions`).

    ``name`` is asked for the stream's name once everything else is valid;
    ``options`` are the format's own Spark options.
    """
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
    return FileSource(
        name=name(),
        schema=parsed,
        format=fmt,
        path=path,
        streaming=streaming,
        options=options,
        bad_files=bad_files,
    )


def _check_exists(fmt: str, path: str) -> None:
    """A missing path fails at ``read_*`` time, not at the first Spark job."""
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
