"""The exceptions kvdev raises on purpose, classified by what the caller should do next.

::

    KvdevError                 base of every error kvdev raises on purpose
    ├── PermanentError         the same input will fail the same way: report it, wait for new input
    │   ├── SchemaError        a document breaks the metadata contract; carries every Problem found
    │   └── UsageError         a command line or API call asks for something impossible
    └── RetryableError         the same call may succeed later: back off and try again
        └── TransientReadError a file vanished, changed or could not be read mid-way

A ``Problem`` is one finding about a document: where (file, position of the object in the
stream, field path) and what. Errors carry problems; warnings travel as problems next to a
successful result. This module imports nothing from kvdev, so everything may import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.Enum):
    """How bad a ``Problem`` is: an error rejects the document, a warning does not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding about a document, located as precisely as the reader could.

    Attributes:
        message: what is wrong, phrased for the person who wrote the file.
        source: the file (or ``<stdin>``) the document came from; empty when unknown.
        index: position of the object in the JSON stream, counted from 0; None for the
            whole stream.
        path: field path inside that object, e.g. ``requests[0].devices[1].networkData.ips[2]``.
        severity: ``ERROR`` rejects the document, ``WARNING`` is reported and kept.
    """

    message: str
    source: str = ""
    index: int | None = None
    path: str = ""
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        where = [self.source] if self.source else []
        if self.index is not None:
            where.append(f"stream[{self.index}]")
        if self.path:
            where.append(self.path)
        return ": ".join([*where, self.message])


class KvdevError(Exception):
    """Base class of every error kvdev raises on purpose."""


class PermanentError(KvdevError):
    """Retrying with the same input cannot help: report the error and wait for new input."""


class RetryableError(KvdevError):
    """The same call may succeed later: back off and retry."""


class SchemaError(PermanentError):
    """A document breaks the metadata contract.

    ``problems`` lists every error found (never empty); ``str()`` shows them one per line.
    """

    def __init__(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            msg = "SchemaError needs at least one problem"
            raise ValueError(msg)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(PermanentError):
    """A command line or API call asks for something that cannot be done."""


class TransientReadError(RetryableError):
    """A file could not be read completely right now (vanished, replaced, busy); retry."""
