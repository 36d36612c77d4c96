"""The exceptions kvdev raises on purpose, classified by what the caller should do next.

Every exception class in kvdev, wherever it is defined::

    KvdevError                        base of every error kvdev raises on purpose
    ├── PermanentError                the same input fails the same way: report, wait for new input
    │   ├── SchemaError               a document breaks the metadata contract; carries every Problem
    │   ├── UsageError                a command line or API call asks for something impossible
    │   ├── host.allocation.cel.CelError             a CEL selector cannot be used
    │   │   ├── CelCompileError       it does not compile (syntax, undeclared name, empty, too long)
    │   │   └── CelRuntimeError       its evaluation failed (missing key, types, non-bool result)
    │   │       └── CelCostLimitError     its estimated cost is over the limit: never evaluated
    │   ├── host.allocation.plans.AllocationFailedError   the allocator's failure, raised inside it
    │   │                             (a fixture keyword + message; returned as ``Failed``)
    │   ├── host.kube.errors.KubePermanentError   the API server refused a call (other 4xx)
    │   │   ├── NotFoundError         404: the object (or the API) is not there
    │   │   ├── ForbiddenError        403: RBAC does not allow the call
    │   │   └── InvalidError          422: the object was refused
    │   ├── host.plugin.claimsource.ClaimNotFoundError    the claim kubelet named does not exist
    │   ├── host.plugin.claimsource.ClaimUidMismatchError the claim found has another UID
    │   ├── guest.cli.client.AccessDeniedError     the agent's socket refuses this user
    │   └── guest.cli.client.ApiError              the agent answered an error (HTTP 4xx, 500)
    └── RetryableError                the same call may succeed later: back off and try again
        ├── TransientReadError        a file vanished, changed or could not be read mid-way
        ├── host.kube.errors.KubeRetryableError   an API call may succeed later (408, 429, 5xx,
        │   │                         unreachable, a body that is not JSON)
        │   ├── ConflictError         409: a write lost a race: read again, decide again
        │   └── GoneError             410: a resourceVersion or continue token expired: list again
        ├── host.plugin.claimstatus.DeviceStatusWriteError   a claim's status.devices was not
        │                             applied (``reason``): the next prepare applies it again
        ├── guest.cli.client.NotRunningError       no socket (yet): the agent is not running
        ├── guest.cli.client.UnreachableError      the socket gave no usable answer in time
        └── guest.cli.client.AgentBusyError        the agent answered 503 (busy, no pass yet)

``host.kube.errors.KubeError`` is the base of the API server's errors (each carries ``what``
and ``status``). ``guest.cli.client.AgentError`` is the base of the five ``kvdev`` client
errors (each also a PermanentError or a RetryableError, as drawn), so the CLI can catch them in
one clause;
``AnsweredError`` is the base of the two that carry the agent's answer (``status``, ``body``).
Internal signals, each caught in the module that raises it and never seen outside:
``schema.stream._JsonError``, ``host.bundle.domainxml._Refused`` (both become SchemaError),
``guest.adapters.netlink.DumpInterruptedError`` (becomes TransientReadError) and
``guest.api.httpconn._Reject`` (becomes an HTTP error answer).

A ``Problem`` is one finding about a document: where (file, position of the object in the
stream, field path) and what. Errors carry problems; warnings travel as problems next to a
successful result.

``os_error`` is the one map from an ``OSError`` of a file operation to a kvdev error, used by
every writer in both halves (the host's metadata writer and bundle publisher, the agent's
``.link`` files). This module imports nothing from kvdev, so everything may import it.
"""

from __future__ import annotations

import enum
import errno
from dataclasses import dataclass
from typing import ClassVar, Final


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
        upstream_invalid: the value breaks a rule every conforming writer follows (upstream's
            API validation), although upstream's reader accepts it: a driver bug to report.
    """

    message: str
    source: str = ""
    index: int | None = None
    path: str = ""
    severity: Severity = Severity.ERROR
    upstream_invalid: bool = False

    def __str__(self) -> str:
        where = [self.source] if self.source else []
        if self.index is not None:
            where.append(f"stream[{self.index}]")
        if self.path:
            where.append(self.path)
        return ": ".join([*where, self.message])


class KvdevError(Exception):
    """Base class of every error kvdev raises on purpose (each is permanent or retryable)."""

    retryable: ClassVar[bool] = False


class PermanentError(KvdevError):
    """Retrying with the same input cannot help: report the error and wait for new input."""


class RetryableError(KvdevError):
    """The same call may succeed later: back off and retry."""

    retryable: ClassVar[bool] = True


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


# The errno values after which the same file operation may succeed with nothing changed in
# kvdev's input or configuration. ENOSPC and EDQUOT are among them, decided once for every
# writer: freeing space is the operator's ordinary remedy, the file in force stays as it was
# meanwhile (every write is atomic), and the callers that retry (the agent's back-off, kubelet
# calling NodePrepareResources again) then recover without a restart. EIO and ESTALE come and go
# on network and shared file systems (virtiofs, NFS); the rest are contention or exhausted
# tables. Every other errno (EACCES, EPERM, EROFS, ENOTDIR, EISDIR, ELOOP, ENAMETOOLONG,
# EINVAL ...) needs permissions, mounts or paths changed: permanent.
RETRYABLE_ERRNOS: Final = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EAGAIN,
        errno.EINTR,
        errno.EBUSY,
        errno.EIO,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.ENOMEM,
        errno.ENFILE,
        errno.EMFILE,
    }
)


def os_error(e: OSError, action: str, path: object) -> PermanentError | RetryableError:
    """The kvdev error for ``e``, raised while trying to ``action`` ``path``.

    The message is ``cannot <action> <path>: <strerror>``; the class is RetryableError for
    ``RETRYABLE_ERRNOS`` and PermanentError for every other errno.
    """
    what = f"cannot {action} {path}: {e.strerror or e}"
    return RetryableError(what) if e.errno in RETRYABLE_ERRNOS else PermanentError(what)
