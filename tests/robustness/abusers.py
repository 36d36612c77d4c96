"""Clients that abuse the agent's API socket on purpose; also a script (stdlib only).

``python3 abusers.py SOCKET SCALE`` runs one ``storm`` and prints the statuses each kind of
client got, as JSON: the robustness suite runs it as another uid (a member of the socket's
group), so that the storm comes from a user who is not root.
"""

import contextlib
import json
import random
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from rawhttp import connect, read_answer

GOOD = b"GET /v1/status HTTP/1.1\r\nHost: kvdev\r\n\r\n"


def flood(sock, count):
    """``count`` connections open at once, then a request on each: the answers' statuses."""
    conns = [connect(sock, timeout=15) for _ in range(count)]
    statuses = []
    for c in conns:
        with contextlib.suppress(OSError):  # refused (503) and closed: the answer waits
            c.sendall(GOOD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    for c in conns:
        with c:
            statuses.append(read_answer(c)[0])
    return statuses


def slowloris(sock, seconds):
    """Send a header a byte a second; the status the server ends it with, and when."""
    started = time.monotonic()
    with connect(sock, timeout=seconds + 10) as c:
        try:
            c.sendall(b"GET /v1/status HTTP/1.1\r\nX-Slow: ")
            for _ in range(int(seconds)):
                c.sendall(b"a")
                time.sleep(1)
        except OSError:
            pass  # the server gave up on us: read why
        return read_answer(c)[0], time.monotonic() - started


def huge_headers(sock, size):
    """``size`` bytes of headers; the answer (431 expected), or 0 when reset before it."""
    with connect(sock, timeout=10) as c:
        line = b"X-Big: " + b"b" * 1000 + b"\r\n"
        with contextlib.suppress(OSError):
            c.sendall(b"GET /v1/status HTTP/1.1\r\nHost: kvdev\r\n" + line * (size // len(line)))
        try:
            return read_answer(c)[0]
        except OSError:
            return 0


def garbage(sock, seed):
    rng = random.Random(seed)  # noqa: S311 - reproducible junk, not secrets
    with connect(sock, timeout=10) as c:
        with contextlib.suppress(OSError):
            c.sendall(rng.randbytes(rng.randint(1, 8192)) + b"\r\n\r\n")
        return read_answer(c)[0]


def half_closed(sock):
    with connect(sock, timeout=10) as c:
        with contextlib.suppress(OSError):  # refused (503) and closed: the answer waits
            c.sendall(GOOD)
            c.shutdown(socket.SHUT_WR)
        return read_answer(c)[0]


def storm(sock, scale):
    """Every kind of abuse at once; returns (inputs, statuses by kind)."""
    out = {}
    with ThreadPoolExecutor(max_workers=256) as pool:
        slow = [pool.submit(slowloris, sock, 8) for _ in range(72 * scale)]  # > the cap
        big = [pool.submit(huge_headers, sock, 2**20) for _ in range(4 * scale)]
        junk = [pool.submit(garbage, sock, i) for i in range(40 * scale)]
        halves = [pool.submit(half_closed, sock) for _ in range(20 * scale)]
        floods = [pool.submit(flood, sock, 500) for _ in range(scale)]
        out["slowloris"] = [f.result(timeout=60) for f in slow]
        out["huge"] = [f.result(timeout=60) for f in big]
        out["garbage"] = [f.result(timeout=60) for f in junk]
        out["half"] = [f.result(timeout=60) for f in halves]
        out["flood"] = [s for f in floods for s in f.result(timeout=60)]
    return sum(len(v) for v in out.values()), out


if __name__ == "__main__":
    tried, got = storm(sys.argv[1], int(sys.argv[2]))
    print(json.dumps({"tried": tried, "got": got}))
