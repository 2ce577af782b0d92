"""The krishiv_py exception tree.

Every error the library raises on purpose is a :class:`KrishivError`. Each
family also subclasses the matching built-in, so ``except ValueError`` keeps
working for code that does not know about krishiv_py::

    KrishivError (Exception)
    ├── SchemaError (ValueError)        bad input data: a row or batch that does
    │                                   not match the source schema
    ├── PlanError (ValueError)          an invalid pipeline, raised by the builder
    │   │                               method that made it invalid
    │   └── MisplacedCallError (AttributeError) a builder method called where
    │                                   it is not, e.g. interval_join() before
    │                                   key_by(); the message says where it goes
    ├── SessionError (RuntimeError)     no usable Java, Spark failed to start,
    │                                   the session was already stopped
    ├── SourceClosedError (RuntimeError) data sent to a closed source
    ├── MissingDependencyError (ImportError) an optional dependency is not
    │                                   installed (the message names the extra)
    └── JobError (RuntimeError)         a running query failed; ``cause`` holds
        │                               the Spark error message
        ├── JobStoppedError             the job was stopped by ``stop()`` (or
        │                               Ctrl-C) before its input ended
        └── NoResultsError              ``results()`` on a sink that keeps no rows

Spark and Py4J exceptions are never shown raw: a ``JobError``'s
``__cause__`` is Spark's error in brief (its message without the streaming
query's plan or the JVM's stack trace), which holds the exception Spark
raised, all of it, as ``.error``.
"""

from __future__ import annotations

import re

__all__ = [
    "JobError",
    "JobStoppedError",
    "KrishivError",
    "MisplacedCallError",
    "MissingDependencyError",
    "NoResultsError",
    "PlanError",
    "SchemaError",
    "SessionError",
    "SourceClosedError",
]


class KrishivError(Exception):
    """Root of every error krishiv_py raises on purpose."""


class SchemaError(KrishivError, ValueError):
    """Input data does not match the declared schema (nothing was written)."""


class PlanError(KrishivError, ValueError):
    """The pipeline is invalid: unknown column, bad window argument, ..."""


class MisplacedCallError(PlanError, AttributeError):
    """A builder method called on a stream that does not have it, e.g. ``interval_join`` before ``key_by``.

    The stream has no such attribute (``hasattr`` is false, ``except
    AttributeError`` catches it); the message says where the call goes.
    """


def attribute_error(obj: object, name: str, hints: dict[str, str]) -> AttributeError:
    """What a missing attribute ``name`` of ``obj`` raises: a :class:`MisplacedCallError` with
    the hint ``hints`` has for ``name``, else Python's own ``AttributeError``.
    """
    hint = hints.get(name)
    if hint is not None:
        return MisplacedCallError(hint)
    return AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}", name=name, obj=obj)


class SessionError(KrishivError, RuntimeError):
    """The Spark session cannot be created or is no longer usable."""


class SourceClosedError(KrishivError, RuntimeError):
    """Data or a watermark was sent to a source after ``close()``."""


class MissingDependencyError(KrishivError, ImportError):
    """An optional dependency is missing, e.g. matplotlib for :mod:`krishiv_py.viz`.

    The message names what to install (``python -m pip install '.[viz]' (in the krishiv_py clone)``).
    """


class JobError(KrishivError, RuntimeError):
    """A running job failed.

    Parameters
    ----------
    message
        What failed, in krishiv_py's words.
    cause
        The Spark error message (first lines of the JVM exception), if any.
    """

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        full = message if not cause else f"{message}\nSpark cause: {cause}"
        own = own_error(cause)
        if own is not None:  # krishiv's own words from inside Spark say what to do: they come first
            name, text = own
            first, _, hints = message.partition("\n")
            note = f" ({name} raised inside Spark; Spark's message is in the error's .cause)"
            full = f"{text}\n{first}{note}" + (f"\n{hints}" if hints else "")
        super().__init__(full)
        self.cause = cause


#: krishiv's own errors raised inside Spark (a Kafka read, a client not installed in a worker, a
#: sink's writer that cannot write), as Spark reports them (the qualified name first): their message
#: says what is wrong and what to do.
_OWN_ERROR = re.compile(
    r"^krishiv_py(?:\.\w+)*\.(?P<name>KafkaReadError|MissingDependencyError|JobError): (?P<message>.+)$"
)


def own_error(cause: str | None) -> tuple[str, str] | None:
    """The name and message of krishiv's own error that a Spark cause ends in, else None.

    Not for a failure in user code (a sink function, a handler), whose
    error says which code failed on which batch first.
    """
    if not cause or not cause.strip() or "UserCodeError: " in cause:
        return None
    match = _OWN_ERROR.match(cause.strip().splitlines()[-1].strip())
    return (match.group("name"), match.group("message").strip()) if match else None


class JobStoppedError(JobError):
    """The job was stopped (``stop()``, Ctrl-C) and processes nothing more.

    Its results so far stay readable; start the pipeline again (with the
    same ``checkpoint_dir`` to resume) to go on.
    """


class NoResultsError(JobError):
    """``results()`` was called on a job whose sink keeps no rows (console, foreach-batch)."""
