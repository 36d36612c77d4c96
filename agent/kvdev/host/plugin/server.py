"""Run the kubelet DRA plugin: two gRPC servers on two Unix sockets, started and stopped in order.

The DRA socket (``<plugin-data-dir>/dra.sock``) serves ``v1.DRAPlugin`` and
``v1beta1.DRAPlugin``; the registration socket (``<registry-dir>/<driver>-reg.sock``, watched
by kubelet) serves only ``Registration``. With a pod UID (rolling updates: old and new plugin
pod side by side, each registered) both names carry it, as upstream's kubeletplugin helper
names them: ``dra-<uid>.sock`` and ``<driver>-<uid>-reg.sock`` (when that path is too long for
a socket, ``<driver>-<base64url(sha256(uid))[:8 bytes]>-reg.sock``, then
``dra-<base64url(sha256(driver NUL uid))[:16 bytes]>-reg.sock``). The DRA socket is up before
the registration socket appears, and the registration socket goes first on stop, so kubelet
never dials a plugin that is not serving. Synchronous ``grpc.server`` with a thread pool: the
writer and the Kubernetes client block, and kubelet sends few calls. Sockets are created 0600
in directories created 0750 (existing directories are left as they are); a stale socket (nobody
answers) is replaced, a live one or a non-socket file is an error; both are removed on stop,
and only while they are still the inode we bound (another plugin that took the path over keeps
its socket). gRPC unlinks the path it bound when it shuts down, whoever holds that path by
then, so it binds a temporary name (``.<pid>.<n>.s`` beside the socket) that is renamed into
place once serving. The services themselves live in ``kvdev.host.plugin.service``.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import itertools
import logging
import os
import socket
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import grpc

from kvdev.errors import PermanentError, UsageError
from kvdev.host.plugin.service import Plugin, RegistrationService, add_dra_services
from kvdev.host.proto import registration_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
SOCKET_MODE = 0o600
DIR_MODE = 0o750
_umask_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Sockets:
    """Where the plugin listens."""

    dra: Path
    registration: Path

    @classmethod
    def default(
        cls, driver: str, plugin_data_dir: Path, registry_dir: Path, pod_uid: str | None = None
    ) -> Sockets:
        """Kubelet's conventions: ``<plugin-data-dir>/dra.sock``, ``<registry>/<driver>-reg.sock``.

        With a non-empty ``pod_uid``, the rolling-update names (see the module's docstring);
        an empty one means none, as for upstream's helper. Paths are made absolute (kubelet
        dials the endpoint GetInfo returns as it is).

        Raises:
            UsageError: ``pod_uid`` cannot be part of a file name (a ``/`` or a NUL).
        """
        plugin_data_dir, registry_dir = plugin_data_dir.absolute(), registry_dir.absolute()
        if not pod_uid:
            return cls(plugin_data_dir / "dra.sock", registry_dir / f"{driver}-reg.sock")
        if "/" in pod_uid or "\0" in pod_uid:
            raise UsageError(f"--pod-uid {pod_uid!r}: must be a pod UID (a file name part)")
        return cls(
            plugin_data_dir / f"dra-{pod_uid}.sock",
            registry_dir / _rolling_registration_name(registry_dir, driver, pod_uid),
        )


def _rolling_registration_name(registry_dir: Path, driver: str, pod_uid: str) -> str:
    """The first of upstream's three names whose path fits in a socket address."""

    def digest(text: str, size: int) -> str:
        raw = hashlib.sha256(text.encode()).digest()[:size]
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    candidates = (
        f"{driver}-{pod_uid}-reg.sock",
        f"{driver}-{digest(pod_uid, 8)}-reg.sock",
        f"dra-{digest(driver + chr(0) + pod_uid, 16)}-reg.sock",
    )
    for name in candidates:
        if len(os.fsencode(registry_dir / name)) <= SOCKET_PATH_MAX:
            return name
    return candidates[-1]


_serial = itertools.count()


class _Bound:
    """One gRPC server bound to one Unix socket it owns."""

    def __init__(self, path: Path, server: grpc.Server) -> None:
        self.path = path
        self.server = server
        self.inode: int | None = None

    def start(self) -> None:
        _prepare_socket_path(self.path)
        bound = self.path.with_name(f".{os.getpid()}.{next(_serial)}.s")  # what gRPC unlinks
        if len(os.fsencode(bound)) > SOCKET_PATH_MAX:
            bound = self.path  # no room for the temporary name: gRPC gets the path itself
        with _umask_lock:
            old = os.umask(0o177)  # the socket file is born 0600: no window with a wider mode
            try:
                self.server.add_insecure_port(f"unix:{bound}")
                self.server.start()
            except RuntimeError as e:
                raise PermanentError(f"{self.path}: cannot listen: {e}") from e
            finally:
                os.umask(old)
        try:
            bound.chmod(SOCKET_MODE)
            if bound != self.path:
                bound.replace(self.path)
        except OSError as e:
            self.server.stop(0).wait()
            bound.unlink(missing_ok=True)
            raise PermanentError(f"{self.path}: cannot put the socket in place: {e}") from e
        self.inode = self.path.stat().st_ino
        log.info("listening on %s", self.path)

    def stop(self, grace: float) -> None:
        self.server.stop(grace).wait()
        with contextlib.suppress(FileNotFoundError):
            if self.inode is not None and self.path.lstat().st_ino == self.inode:
                self.path.unlink()


class PluginServer:
    """The DRA and registration servers of one driver; ``start`` then ``stop`` (or ``with``)."""

    def __init__(self, plugin: Plugin, sockets: Sockets, *, driver: str, workers: int = 8) -> None:
        self.sockets = sockets
        self.registration = RegistrationService(driver, str(sockets.dra))
        dra = grpc.server(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dra"))
        add_dra_services(dra, plugin)
        reg = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="registration"))
        registration_pb2_grpc.add_RegistrationServicer_to_server(self.registration, reg)
        self._dra = _Bound(sockets.dra, dra)
        self._reg = _Bound(sockets.registration, reg)

    def start(self) -> None:
        """Listen on the DRA socket, then on the registration socket.

        Raises:
            UsageError: a socket path is too long.
            PermanentError: a socket path is taken (a live server, or not a socket).
        """
        self._dra.start()
        try:
            self._reg.start()
        except BaseException:
            self._dra.stop(0)
            raise

    def stop(self, grace: float = 5.0) -> None:
        """Stop registration first, then let DRA calls in flight finish (up to ``grace`` s)."""
        self._reg.stop(0)
        self._dra.stop(grace)
        log.info("stopped")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _prepare_socket_path(path: Path) -> None:
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise UsageError(
            f"{path}: a Unix socket path must be at most {SOCKET_PATH_MAX} bytes, "
            f"this one is {len(os.fsencode(path))}"
        )
    try:
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise PermanentError(f"{path.parent}: cannot create the socket directory: {e}") from e
    if not stat.S_ISSOCK(info.st_mode):
        raise PermanentError(f"{path}: exists and is not a socket; not replacing it")
    if _answers(path):
        raise PermanentError(f"{path}: another server is listening on it")
    log.info("replacing stale socket %s", path)
    path.unlink(missing_ok=True)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            raise PermanentError(f"{path}: cannot tell whether it is in use: {e}") from e
        return True
