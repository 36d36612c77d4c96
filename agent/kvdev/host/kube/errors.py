"""The one map from the API server's answers (and transport failures) to typed kvdev errors.

Every error names the call and its object (``what``) and carries the HTTP ``status`` (None for
a transport failure). Callers branch on the type, never on a status code or the message:

* 404 ``NotFoundError`` (permanent): the object, or the API itself, is not there;
* 409 ``ConflictError`` (retryable): AlreadyExists on a create, a stale ``resourceVersion`` or a
  UID precondition on a write: read again and decide again;
* 410 ``GoneError`` (retryable): a list's ``continue`` token or a watch's ``resourceVersion``
  is too old: list again;
* 403 ``ForbiddenError`` and 422 ``InvalidError`` (permanent): RBAC, a refused object;
* 408, 429, 5xx, a broken connection, a body that is not JSON: ``KubeRetryableError``;
* any other 4xx (400, 401 ...): ``KubePermanentError``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kvdev.errors import KvdevError, PermanentError, RetryableError
from kvdev.host.kube.client import short_reason
from kvdev.host.kube.client import unreachable as unreachable_text

_RETRYABLE_CLIENT_ERRORS: Final = frozenset({408, 429})


class KubeError(KvdevError):
    """An API call failed: ``what`` (the call and its object) and the answer's ``status``."""

    def __init__(self, message: str, *, what: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.what = what
        self.status = status


class KubePermanentError(KubeError, PermanentError):
    """The API server refused the call; the same call fails the same way."""


class KubeRetryableError(KubeError, RetryableError):
    """The call may succeed later (unreachable, overloaded, timed out): back off and retry."""


class NotFoundError(KubePermanentError):
    """404: the object (or the API: a resource version not served) is not there."""


class ForbiddenError(KubePermanentError):
    """403: the caller's RBAC does not allow the call."""


class InvalidError(KubePermanentError):
    """422: the API server refused the object (validation, admission)."""


class ConflictError(KubeRetryableError):
    """409: a write lost a race (it exists, a stale resourceVersion): read again, decide again."""


class GoneError(KubeRetryableError):
    """410: the resourceVersion or continue token is too old: list again."""


_BY_STATUS: Final[dict[int, type[KubeError]]] = {
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
}


def answered(what: str, status: int | None, reason: str | None, body: object) -> KubeError:
    """The typed error for the API server's answer ``status`` to ``what``.

    The message: ``<what>: API server answered <status> <reason>: <the Status's message>``.
    """
    detail = reason or ""
    message = status_message(body)
    if message:
        detail = f"{detail}: {message}" if detail else message
    text = f"{what}: API server answered {status} {detail}".rstrip()
    kind = _BY_STATUS.get(status) if status is not None else None
    if kind is None:
        permanent = status is not None and 400 <= status < 500
        retry = not permanent or status in _RETRYABLE_CLIENT_ERRORS
        kind = KubeRetryableError if retry else KubePermanentError
    return kind(text, what=what, status=status)


def unreachable(what: str, endpoint: str, error: BaseException) -> KubeRetryableError:
    """A transport failure: ``<what>: API server <endpoint> unreachable: <reason>``."""
    return KubeRetryableError(f"{what}: {unreachable_text(endpoint, error)}", what=what)


def broken(what: str, error: BaseException) -> KubeRetryableError:
    """A watch's stream that broke mid-way: ``<what>: the stream broke: <reason>``."""
    return KubeRetryableError(f"{what}: the stream broke: {short_reason(error)}", what=what)


def not_json(what: str, error: Exception) -> KubeRetryableError:
    """A body that is not the JSON the API server sends."""
    return KubeRetryableError(f"{what}: API server sent invalid JSON: {error}", what=what)


def status_message(body: object) -> str:
    """The ``message`` of a Status body, when the body is one (else empty)."""
    try:
        status: Any = json.loads(body) if isinstance(body, str | bytes) else None
    except (ValueError, UnicodeDecodeError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else ""
