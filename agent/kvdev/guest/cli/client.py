"""The ``kvdev`` CLI's side of the agent's local API: HTTP/1.1 + JSON over a Unix socket.

An adapter. It owns connecting to the socket (stdlib ``http.client`` over ``AF_UNIX``, Host
``kvdev``), one request per connection, decoding the JSON answer, and turning every way that
can fail into an ``AgentError`` whose text is the one line ``kvdev`` prints: no socket
(``NotRunningError``), a socket nobody listens on, no answer in time or a broken answer
(``UnreachableError``), permission denied (``AccessDeniedError``), the agent busy
(``AgentBusyError``, HTTP 503) or the agent's own JSON error (``ApiError``, with its HTTP
status). A 503 that says ``Retry-After`` (the agent's connections are all taken, or this
user's share of them) is asked again, with a growing pause, until the call's timeout. Each is
also a ``PermanentError`` or a ``RetryableError`` (``kvdev.errors``). It knows nothing of what
the endpoints mean; the CLI does.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import http.client
import json
import os
import socket
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

from kvdev._records import compared
from kvdev.errors import KvdevError, PermanentError, RetryableError

DEFAULT_SOCKET: Final = "/run/kvdev/agent.sock"
SOCKET_ENV: Final = "KVDEV_SOCKET"
HOST: Final = "kvdev"
DEFAULT_GROUP: Final = "kvdev"
# Where to look when the agent is not there: said after every "agent not running".
LOOK: Final = "; look: systemctl status kvdev-agent, journalctl -u kvdev-agent"
MAX_BODY: Final = 64 * 1024 * 1024  # an answer larger than this is not the agent's
BACKLOG_RETRY: Final = 0.02  # seconds between connects while the agent's backlog is full
BUSY_RETRY: Final = (0.02, 0.5)  # first and longest pause before asking again after a busy 503


class AgentError(KvdevError):
    """The agent could not be asked, or refused; ``str()`` is the line to print.

    Never raised itself: each subclass is also permanent or retryable.
    """


class NotRunningError(AgentError, RetryableError):
    """The socket file does not exist (yet): the agent is not running."""


class UnreachableError(AgentError, RetryableError):
    """The socket exists but gave no usable answer (nobody listening, time-out, garbage)."""


class AccessDeniedError(AgentError, PermanentError):
    """The socket's permissions refuse this user."""


class AnsweredError(AgentError):
    """The agent answered with an error status; ``body`` is its JSON (base of the next two)."""

    def __init__(self, status: int, message: str, body: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ApiError(AnsweredError, PermanentError):
    """The agent answered with an error (HTTP status >= 400, but 503); ``body`` is its JSON."""


class AgentBusyError(AnsweredError, RetryableError):
    """The agent answered 503: busy (all connections taken) or no first pass yet."""


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Answer:
    """One HTTP answer: status code and decoded JSON object (or, for a text answer, its text)."""

    status: int
    body: dict[str, Any]
    text: str | None = None  # a text/plain answer (GET /v1/metrics), as it came


def default_socket() -> str:
    """``$KVDEV_SOCKET`` when set and not empty, else ``/run/kvdev/agent.sock``."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def path_of(*segments: str) -> str:
    """An API path with each segment percent-encoded (``/`` inside a segment too)."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


class UnixHTTPConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` whose transport is a Unix stream socket at ``socket_path``."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__(HOST, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        """Connect to the Unix socket, with the connection's timeout.

        A full listen backlog (EAGAIN: the agent is busy accepting others) is waited out, up
        to the timeout, instead of failing at once; past it, TimeoutError.
        """
        deadline = time.monotonic() + (self.timeout or 0.0)
        with _pinned(self.socket_path) as path:
            self._connect(path, deadline)

    def _connect(self, path: str, deadline: float) -> None:
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except BlockingIOError as e:
                sock.close()
                if time.monotonic() >= deadline:
                    raise TimeoutError(errno.ETIMEDOUT, "the socket's backlog stayed full") from e
                time.sleep(BACKLOG_RETRY)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return


@contextlib.contextmanager
def _pinned(path: str) -> Iterator[str]:
    """A name for the socket file at ``path`` that no one can re-point while it is used.

    The socket's directory may be the agent's own (``/run/kvdev``), and ``kvdev`` often runs as
    root: the last component is opened with ``O_PATH | O_NOFOLLOW`` and must be a socket with
    one link (a symbolic or hard link to another service's socket is refused), then connected
    to through ``/proc/self/fd`` (the file opened, not whatever the name points at by then).
    """
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "a symbolic link, not the agent's socket", path)
        if not stat.S_ISSOCK(st.st_mode) or st.st_nlink != 1:
            raise OSError(errno.ENOTSOCK, "not a socket with one link", path)
        pinned = f"/proc/self/fd/{fd}"
        yield pinned if Path(pinned).exists() else path  # no /proc: the name as it is
    finally:
        os.close(fd)


def _group_of(path: str) -> str:
    """The socket file's group name (who may read), ``kvdev`` when it cannot be told."""
    with contextlib.suppress(OSError, KeyError):
        return grp.getgrgid(Path(path).stat().st_gid).gr_name
    return DEFAULT_GROUP


class Client:
    """Asks the agent at ``socket_path``; every call opens and closes its own connection."""

    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Answer:
        """One request; any HTTP status is returned, only transport failures raise.

        A busy 503 (one with ``Retry-After``) is asked again until ``timeout`` has passed;
        then the last 503 is returned.
        """
        wait = self.timeout if timeout is None else timeout
        target = path + ("?" + urlencode(query) if query else "")
        deadline = time.monotonic() + wait
        pause = BUSY_RETRY[0]
        while True:
            answer, busy = self._once(method, target, wait)
            left = deadline - time.monotonic()
            if not busy or left <= pause:
                return answer
            time.sleep(pause)
            pause = min(pause * 2, BUSY_RETRY[1])
            wait = deadline - time.monotonic()

    def _once(self, method: str, target: str, wait: float) -> tuple[Answer, bool]:
        """One attempt: the answer, and whether it was a 503 asking to be retried."""
        conn = UnixHTTPConnection(self.socket_path, wait)
        try:
            conn.connect()
        except OSError as e:
            raise self._connect_error(e, wait) from e
        try:
            # refused (503) and closed before we wrote: the answer may still be there
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, target, headers={"Accept": "application/json"})
            response = conn.getresponse()
            data = response.read(MAX_BODY + 1)
        except TimeoutError as e:
            raise UnreachableError(self._late(wait)) from e
        except (OSError, http.client.HTTPException) as e:
            message = f"the agent at {self.socket_path} broke off the answer: {_why(e)}"
            raise UnreachableError(message) from e
        finally:
            conn.close()
        busy = response.status == 503 and response.getheader("Retry-After") is not None
        if (response.getheader("Content-Type") or "").startswith("text/plain"):
            if len(data) > MAX_BODY:
                raise UnreachableError(f"the agent at {self.socket_path} answered more than 64 MiB")
            return Answer(response.status, {}, data.decode(errors="replace")), busy
        return Answer(response.status, self._decode(data)), busy

    def get(
        self, path: str, query: Mapping[str, str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """GET ``path``: the JSON body of a 2xx answer; ``ApiError`` for an error status."""
        return self.check(self.request("GET", path, query, timeout=timeout))

    def text(self, path: str) -> str:
        """GET ``path``: the text of a 2xx text/plain answer; ``ApiError`` for an error."""
        answer = self.request("GET", path)
        body = self.check(answer)
        if answer.text is None:
            message = f"the agent at {self.socket_path} answered {path} with JSON, not text"
            raise UnreachableError(message + (f": {body}" if body else ""))
        return answer.text

    def post(self, path: str, *, timeout: float | None = None) -> dict[str, Any]:
        """POST ``path`` with no body: the JSON of a 2xx answer; ``ApiError`` otherwise."""
        return self.check(self.request("POST", path, timeout=timeout))

    @staticmethod
    def check(answer: Answer) -> dict[str, Any]:
        """The body of a successful answer, or ``ApiError`` with the agent's message."""
        if answer.status < 400:
            return answer.body
        message = answer.body.get("message")
        if not isinstance(message, str) or not message:
            message = f"the agent answered HTTP {answer.status}"
        if answer.status == 503:
            raise AgentBusyError(answer.status, message, answer.body)
        raise ApiError(answer.status, message, answer.body)

    def _late(self, wait: float) -> str:
        return f"agent at {self.socket_path} did not answer within {wait:g} s"

    def _connect_error(self, e: OSError, wait: float) -> AgentError:
        path = self.socket_path
        if isinstance(e, TimeoutError):
            return UnreachableError(self._late(wait))
        if e.errno == errno.ENOENT:
            return NotRunningError(f"agent not running: no socket at {path}{LOOK}")
        if e.errno in {errno.EACCES, errno.EPERM}:
            group = _group_of(path)
            readers = "only root" if group == "root" else f"members of group {group} and root"
            return AccessDeniedError(f"permission denied on {path} ({readers} may read)")
        if e.errno == errno.ECONNREFUSED:
            return UnreachableError(
                f"agent not running: nothing listens on {path} (a stale socket?){LOOK}"
            )
        return UnreachableError(f"cannot connect to the agent at {path}: {_why(e)}")

    def _decode(self, data: bytes) -> dict[str, Any]:
        if len(data) > MAX_BODY:
            raise UnreachableError(f"the agent at {self.socket_path} answered more than 64 MiB")
        try:
            body = json.loads(data)
        except ValueError as e:
            raise UnreachableError(
                f"the agent at {self.socket_path} answered with bad JSON: {e}"
            ) from e
        if not isinstance(body, dict):
            raise UnreachableError(
                f"the agent at {self.socket_path} answered JSON that is no object"
            )
        return body


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
