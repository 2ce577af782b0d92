"""Files of a checkpoint on this machine or in an object store, by one set of calls.

A checkpoint's root is a path of this machine (``/data/ckpt``, ``file:///data/ckpt``)
or a URI of a file system every executor reaches (``s3a://bucket/ckpt``,
``s3://``, ``gs://``, ``abfss://``, ``hdfs://``). Spark reads and writes its own logs
there through Hadoop; krishiv's records and the stateful operator's state go
through these functions: a local path by the operating system's calls, a URI
by pyarrow's file system of its scheme (Hadoop's ``s3a``/``s3n`` are S3's).

pyarrow finds an object store's credentials as the store's own SDK does: for
S3 the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ``AWS_REGION``), the AWS config files, then the machine's
role. On a cluster the executors need them too (``spark.executorEnv.AWS_...``
or an instance role); docs/durability.md says more.

Every write is whole or absent: the bytes go to a temporary name moved over
the final one (a rename here, a copy in an object store, whose objects appear
whole).

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> write_bytes(join(root, "a", "b.txt"), b"hi")
>>> read_bytes(join(root, "a", "b.txt")), names(join(root, "a"))
(b'hi', ['b.txt'])
>>> object_store("s3a://bucket/ckpt"), object_store(root), object_store("file:///tmp/x")
(True, False, False)
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from typing import Any

__all__ = [
    "appears_whole",
    "bytes_under",
    "delete",
    "exists",
    "file_system",
    "is_dir",
    "join",
    "local",
    "makedirs",
    "names",
    "object_store",
    "read_bytes",
    "stat",
    "write_bytes",
]

#: A URI's scheme and its ``://``.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

#: Hadoop's names of file systems whose pyarrow name differs.
_SCHEMES = {"s3a": "s3", "s3n": "s3"}


def local(location: str) -> str | None:
    """``location`` as a path of this machine (None: a URI of another file system)."""
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    return None if _SCHEME.match(location) else location


def object_store(location: str) -> bool:
    """Whether ``location`` is a URI of a file system other than this machine's."""
    return local(location) is None


def join(root: str, *parts: str) -> str:
    """``root`` and ``parts`` joined by ``/`` (a path of this machine or a URI)."""
    if not parts:
        return root
    return "/".join([root.rstrip("/"), *parts]) if root else "/".join(parts)


_systems: dict[str, tuple[Any, str]] = {}
_systems_lock = threading.Lock()


def file_system(location: str) -> tuple[Any, str]:
    """pyarrow's file system of ``location`` and the path in it (one file system per store and
    process: opening one may ask the store, e.g. for an S3 bucket's region). Raises what pyarrow
    raises for a file system it cannot open (an unknown scheme, no Hadoop client for ``hdfs://``)."""
    from pyarrow import fs

    path = local(location)
    if path is not None:
        return fs.LocalFileSystem(), path
    scheme, _, rest = location.partition("://")
    authority, _, below = rest.partition("/")
    key = f"{_SCHEMES.get(scheme.lower(), scheme.lower())}://{authority}"
    with _systems_lock:
        opened = _systems.get(key)
    if opened is None:
        try:
            opened = fs.FileSystem.from_uri(key)  # (the store, its root's path: "bucket", "/")
        except ValueError as exc:  # (pyarrow's ArrowInvalid: no file system of that scheme)
            raise OSError(f"no file system for {location}: {exc}") from exc
        with _systems_lock:
            _systems[key] = opened
    store, base = opened
    below = below.rstrip("/")
    return store, (f"{base.rstrip('/')}/{below}" if below else base)


def read_bytes(path: str) -> bytes:
    """The bytes of file ``path``; :class:`FileNotFoundError` when there is none."""
    where = local(path)
    if where is not None:
        with open(where, "rb") as f:
            return f.read()
    store, inner = file_system(path)
    try:
        with store.open_input_stream(inner) as f:
            data: bytes = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:  # (some stores say only "not found" in their own words)
        if not exists(path):
            raise FileNotFoundError(path) from exc
        raise
    return data


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all, its directories made as needed: through a
    hidden temporary name (which Spark's file sources skip) moved over it; straight to it in an
    object store, whose objects appear whole."""
    where = local(path)
    parent, _, name = path.rstrip("/").rpartition("/")
    tmp = f"{parent}/.{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp" if parent else f".{name}.tmp"
    if where is not None:
        tmp_local = local(tmp)
        assert tmp_local is not None
        os.makedirs(os.path.dirname(where) or ".", exist_ok=True)
        with open(tmp_local, "wb") as f:
            f.write(data)
        os.replace(tmp_local, where)
        return
    store, inner = file_system(path)
    folder = inner.rpartition("/")[0]
    if folder:
        store.create_dir(folder, recursive=True)
    if appears_whole(store):
        with store.open_output_stream(inner) as f:
            f.write(data)
        return
    _, tmp_inner = file_system(tmp)
    with store.open_output_stream(tmp_inner) as f:
        f.write(data)
    store.move(tmp_inner, inner)


#: pyarrow's file systems whose files appear whole when their upload completes.
_OBJECT_STORES = frozenset({"S3FileSystem", "GcsFileSystem", "AzureFileSystem"})


def appears_whole(store: Any) -> bool:
    """Whether a file ``store`` writes appears whole or not at all (an object store's object, when
    its upload completes): written under its final name, with no temporary one to move."""
    return type(store).__name__ in _OBJECT_STORES


def names(directory: str) -> list[str]:
    """The names of what ``directory`` holds, sorted ([]: no such directory)."""
    where = local(directory)
    if where is not None:
        try:
            return sorted(os.listdir(where))
        except (FileNotFoundError, NotADirectoryError):
            return []
    store, inner = file_system(directory)
    try:
        return sorted(info.base_name for info in listing(store, inner))
    except NotADirectoryError:
        return []


def listing(store: Any, directory: str, *, recursive: bool = False) -> list[Any]:
    """pyarrow's ``FileInfo`` of what ``directory`` of file system ``store`` holds ([]: no such
    directory). A directory another task creates or removes while it is listed makes a local
    listing fail although it was asked not to fail on a missing directory (it finds the directory
    gone, then there): it is listed again, up to three times."""
    from pyarrow import fs

    selector = fs.FileSelector(directory, allow_not_found=True, recursive=recursive)
    for _ in range(2):
        with contextlib.suppress(FileNotFoundError):
            return list(store.get_file_info(selector))
    return list(store.get_file_info(selector))


def _info(path: str) -> Any:
    store, inner = file_system(path)
    return store.get_file_info(inner)


def exists(path: str) -> bool:
    """Whether a file or directory ``path`` exists."""
    where = local(path)
    if where is not None:
        return os.path.exists(where)
    from pyarrow import fs

    return bool(_info(path).type != fs.FileType.NotFound)


def is_dir(path: str) -> bool:
    """Whether ``path`` is a directory (in an object store: a prefix that holds objects)."""
    where = local(path)
    if where is not None:
        return os.path.isdir(where)
    from pyarrow import fs

    return bool(_info(path).type == fs.FileType.Directory)


def stat(path: str) -> tuple[int, int] | None:
    """``path``'s modification time (ns) and size (None: no such file)."""
    where = local(path)
    if where is not None:
        try:
            st = os.stat(where)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size
    from pyarrow import fs

    info = _info(path)
    if info.type != fs.FileType.File:
        return None
    return (info.mtime_ns or 0), int(info.size or 0)


def bytes_under(directory: str) -> int:
    """The bytes of every file under ``directory``, at any depth (0: no such directory)."""
    where = local(directory)
    if where is not None:
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(where) for f in fs)
    from pyarrow import fs

    store, inner = file_system(directory)
    return sum(int(i.size or 0) for i in listing(store, inner, recursive=True) if i.type == fs.FileType.File)


def delete(path: str) -> None:
    """Remove file ``path`` (nothing when it is gone already)."""
    where = local(path)
    if where is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(where)
        return
    store, inner = file_system(path)
    with contextlib.suppress(FileNotFoundError):
        store.delete_file(inner)


def makedirs(directory: str) -> None:
    """Make ``directory`` and its parents (nothing in an object store, which has no directories)."""
    where = local(directory)
    if where is not None:
        os.makedirs(where, exist_ok=True)
        return
    store, inner = file_system(directory)
    store.create_dir(inner, recursive=True)
