"""The controller's HTTP endpoints: ``/healthz``, ``/readyz``, ``/leader``, ``/metrics``.

Owns the ``--http-address`` syntax (``HOST:PORT``, ``:PORT`` for every address, ``[::1]:PORT``;
``0`` or empty: no server) and one small stdlib HTTP server in a daemon thread that answers
GETs from what a ``Probes`` says (each probe: whether it passes and a line for a person).
The server knows nothing of the controller: ``live`` supplies the probes.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kvdev.errors import PermanentError

log = logging.getLogger(__name__)
Probe = Callable[[], tuple[bool, str]]
DISABLED = ("", "0")


@dataclass(frozen=True, slots=True)
class Probes:
    """What each endpoint answers: ``(ok, text)``; ``metrics``: the Prometheus text."""

    healthz: Probe
    readyz: Probe
    leader: Probe
    metrics: Callable[[], bytes]
    metrics_type: str


def parse_address(text: str) -> tuple[str, int] | None:
    """``(host, port)`` of an ``--http-address``; None when it disables the server.

    Raises:
        ValueError: not HOST:PORT, or the port is not 0-65535 (the message says which).
    """
    if text.strip() in DISABLED:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        msg = f"{text!r} is not HOST:PORT (':8080' for every address, '0' to serve nothing)"
        raise ValueError(msg)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        probes = self.server.probes
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(HTTPStatus.OK, probes.metrics(), probes.metrics_type)
            return
        checks = {"/healthz": probes.healthz, "/readyz": probes.readyz, "/leader": probes.leader}
        check = checks.get(path)
        if check is None:
            text = "not found: /healthz, /readyz, /leader, /metrics\n"
            self._answer(HTTPStatus.NOT_FOUND, text.encode())
            return
        ok, text = check()
        if ok:
            status = HTTPStatus.OK
        else:
            status = (
                HTTPStatus.INTERNAL_SERVER_ERROR
                if path == "/healthz"
                else HTTPStatus.SERVICE_UNAVAILABLE
            )
        self._answer(status, f"{text}\n".encode())

    def _answer(
        self, status: HTTPStatus, body: bytes, kind: str = "text/plain; charset=utf-8"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        log.debug("http: " + format, *args)  # noqa: G003 - the stdlib's format


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], probes: Probes) -> None:
        self.probes = probes
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class Endpoints:
    """The HTTP server on ``address`` in a thread; ``close()`` stops it."""

    def __init__(self, address: tuple[str, int], probes: Probes) -> None:
        """Listen on ``address`` at once (so a bad address fails before anything runs).

        Raises:
            PermanentError: the address cannot be listened on (in use, not this host's).
        """
        try:
            self._server = _Server(address, probes)
        except OSError as e:
            host, port = address
            msg = f"--http-address {host}:{port}: cannot listen: {e.strerror or e}"
            raise PermanentError(msg) from e
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kvdev-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the port the system chose for port 0)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Serve, in the thread."""
        self._thread.start()
        host, port = self.address
        shown = f"[{host}]" if ":" in host else host
        log.info("serving /healthz /readyz /leader /metrics on http://%s:%d", shown, port)

    def close(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


__all__ = ["Endpoints", "Probe", "Probes", "parse_address"]
