"""The agent's API socket: binds it (or adopts a socket-activated one) and serves it.

It owns the listening socket (parent directory, stale-file check, mode, group, removal on
stop) and the daemon thread that runs ``httpconn.Connections.poll`` (one epoll loop: no
asyncio), so that the API answers while the agent's main thread runs a pass. Connections,
limits and the access policy are ``httpconn``'s; this module re-exports the values a handler
needs, so callers import only ``kvdev.guest.api.server``.

It must not know what it serves: routes and payloads belong to the handler, a callable from
``Request`` to ``Response`` (or a ``Deferred`` one). Of kvdev it imports only ``errors`` and
``httpconn``.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from kvdev.errors import UsageError
from kvdev.guest.api.httpconn import (
    API_VERSION,
    Connections,
    Deferred,
    Handler,
    Limits,
    Peer,
    Request,
    Response,
    error_response,
)

__all__ = [
    "API_VERSION",
    "Deferred",
    "Handler",
    "Limits",
    "Peer",
    "Request",
    "Response",
    "Server",
    "error_response",
]

logger = logging.getLogger(__name__)


class Server:
    """Serve ``handler`` on a Unix socket from a daemon thread (see the module docstring).

    With ``listen_fd`` (socket activation) it serves a duplicate of that listening socket and
    the caller keeps the fd; with ``path`` it binds, and removes the socket file on stop.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        path: Path | None = None,
        listen_fd: int | None = None,
        group: str = "kvdev",
        mode: int = 0o660,
        limits: Limits = Limits(),  # noqa: B008 - frozen: one shared default is safe
    ) -> None:
        if (path is None) == (listen_fd is None):
            raise UsageError("Server needs exactly one of path= or listen_fd=")
        self._handler, self._limits = handler, limits
        self._path, self._listen_fd, self._group, self._mode = path, listen_fd, group, mode
        self._listener: socket.socket | None = None
        self._inode: int | None = None  # of the socket file we bound
        self._thread: threading.Thread | None = None
        self._wake: Callable[[], object] | None = None  # ends the loop; thread-safe
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def address(self) -> str:
        """The socket's path (``@name`` if abstract); empty when not known yet."""
        if self._listener is None or self._listener.fileno() < 0:
            return str(self._path or "")
        name = self._listener.getsockname()
        return "@" + name[1:].decode(errors="replace") if isinstance(name, bytes) else str(name)

    def start(self) -> None:
        """Bind or adopt the socket (UsageError when it cannot), then serve from a thread."""
        with self._lock:
            if self._thread is not None or self._stopped:
                raise UsageError("a Server can be started once")
            self._listener = self._adopt() if self._listen_fd is not None else self._bind()
            ready = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
            self._thread.name = f"kvdev-api {self.address}"
            self._thread.start()
        ready.wait()
        if self._wake is None:
            self.stop()
            raise UsageError(f"the API server on {self.address} failed to start; see the log")

    def stop(self) -> None:
        """Close the listener and all connections and join the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._wake is not None:
                with contextlib.suppress(RuntimeError):  # the loop has ended already
                    self._wake()
            if self._thread is not None:
                self._thread.join()
            if self._listener is not None:
                self._listener.close()
            if self._path is not None and self._inode is not None:
                with contextlib.suppress(OSError):
                    if self._path.lstat().st_ino == self._inode:  # still ours
                        self._path.unlink()

    def _adopt(self) -> socket.socket:
        assert self._listen_fd is not None
        sock = socket.socket(fileno=os.dup(self._listen_fd))
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM or not listening:
            sock.close()
            raise UsageError(f"fd {self._listen_fd} is not a listening AF_UNIX stream socket")
        return sock

    def _bind(self) -> socket.socket:
        path = self._path
        assert path is not None
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        _remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            self._inode = path.lstat().st_ino
            path.chmod(self._mode)  # before listen(): no client can connect until then
            with contextlib.suppress(KeyError):
                os.chown(path, -1, grp.getgrnam(self._group).gr_gid)
            sock.listen(max(128, 2 * self._limits.max_connections))  # a burst, then 503s
        except OSError as e:
            sock.close()
            raise UsageError(f"cannot listen on {path}: {e.strerror or e}") from e
        return sock

    def _group_gid(self) -> int | None:
        """Who may read: the socket file's group, else ``group``'s gid, else nobody but root."""
        if self.address.startswith("/"):
            with contextlib.suppress(OSError):
                return Path(self.address).stat().st_gid
        try:
            return grp.getgrnam(self._group).gr_gid
        except KeyError:
            return None

    def _run(self, ready: threading.Event) -> None:
        assert self._listener is not None
        try:
            service = Connections(self._handler, self._limits, self._group_gid, self._listener)
        except Exception:
            logger.exception("the API server on %s failed", self.address)
            ready.set()
            return
        stopping = threading.Event()

        def wake() -> None:
            stopping.set()
            service.wake()

        self._wake = wake
        ready.set()
        try:
            while not stopping.is_set():
                service.poll(None)
        except Exception:
            logger.exception("the API server on %s failed", self.address)
        finally:
            service.close()


def _remove_stale(path: Path) -> None:
    """Remove a socket file nobody listens on; refuse to touch a live one or a non-socket."""
    try:
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise UsageError(f"{path} exists and is not a socket; not replacing it")
    except FileNotFoundError:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        refused = probe.connect_ex(str(path)) in {errno.ECONNREFUSED, errno.ENOENT}
    if not refused:  # accepted, or busy, or not ours to test: leave it alone
        raise UsageError(f"another server is listening on {path} (or it cannot be checked)")
    path.unlink(missing_ok=True)
