"""Regression: `kvdev` against an agent whose listen backlog is full (during a connection storm).

Connecting a non-blocking (timeout) Unix socket to a full backlog fails with EAGAIN at once;
the client used to report "Resource temporarily unavailable" instead of waiting its timeout.
"""

import contextlib
import socket
import threading
import time

import pytest

from kvdev.guest.cli.client import Client, UnreachableError

pytestmark = [pytest.mark.robustness]

ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
    b"Connection: close\r\n\r\n"
    b'{"ok": true}'
)


@pytest.fixture
def full_backlog(tmp_path):
    """A listener nobody accepts on, its backlog filled; yields (path, listener)."""
    path = tmp_path / "agent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers = []
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)  # noqa: FBT003
        try:
            s.connect(str(path))
        except BlockingIOError:
            s.close()
            break
        fillers.append(s)
    assert fillers, "the backlog took no connection at all"
    yield path, listener
    for s in fillers:
        s.close()
    listener.close()


def test_a_full_backlog_is_waited_out_until_the_timeout(full_backlog):
    path, _ = full_backlog
    started = time.monotonic()
    with pytest.raises(UnreachableError) as raised:
        Client(str(path), timeout=0.5).request("GET", "/v1/status")
    assert str(raised.value) == f"agent at {path} did not answer within 0.5 s"
    assert time.monotonic() - started >= 0.45


def test_a_backlog_that_drains_is_served(full_backlog):
    path, listener = full_backlog

    def serve():
        time.sleep(0.3)
        listener.settimeout(1)
        with contextlib.suppress(OSError):  # until nobody connects for a second
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(0.2)
                    with contextlib.suppress(OSError):
                        conn.recv(65536)
                    conn.sendall(ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    answer = Client(str(path), timeout=5).request("GET", "/v1/status")
    assert (answer.status, answer.body) == (200, {"ok": True})
    thread.join(timeout=10)
