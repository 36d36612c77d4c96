"""A minimal HTTP/1.1 client over a Unix socket: exactly the bytes the test chooses.

The robustness suites need clients that misbehave on purpose (slow, huge, half-closed,
garbage), so they speak raw bytes; ``request`` is the well-behaved one.
"""

import json
import socket
import time


def connect(path, timeout=5.0):
    """A connected socket; a full listen backlog (EAGAIN) is waited out, as kvdev's client does."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except BlockingIOError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        except BaseException:
            sock.close()
            raise
        return sock


def read_answer(sock):
    """(status, parsed body or raw text) from everything until EOF; (0, reason) when none."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass  # the server may reset a client it stopped reading from; keep what came
    data = b"".join(chunks)
    if not data:
        return 0, "no answer"
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


def request(path, method, target, *, timeout=5.0):
    """One request with ``Connection: close``: (status, body, seconds taken)."""
    started = time.monotonic()
    with connect(path, timeout) as sock:
        sock.sendall(
            f"{method} {target} HTTP/1.1\r\nHost: kvdev\r\nConnection: close\r\n\r\n".encode()
        )
        status, body = read_answer(sock)
    return status, body, time.monotonic() - started
