"""Root's ``GET /v1/status`` latency while another uid loops on ``GET /v1/devices``.

Run as root against a serving agent whose socket the other uid may read (its group):
``.venv/bin/python tests/bench/bench_status_fairness.py SOCKET [--uid 65534] [--requests 200]``.
The looping client runs as ``--uid`` (``setpriv``, that uid's gid, no other groups); root's
requests are timed one after the other, each on a new connection. Numbers only.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

LOOP = """
import socket, sys
while True:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(b"GET /v1/devices HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n")
    while s.recv(65536):
        pass
    s.close()
"""


def get(path: str, target: str) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n".encode())
        while s.recv(65536):
            pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("socket")
    p.add_argument("--uid", type=int, default=65534)
    p.add_argument("--requests", type=int, default=200)
    args = p.parse_args()
    ids = [f"--reuid={args.uid}", f"--regid={args.uid}", "--clear-groups"]
    looper = subprocess.Popen(["setpriv", *ids, sys.executable, "-c", LOOP, args.socket])
    try:
        time.sleep(1.0)  # a bench may wait: the looping client gets going
        times = []
        for _ in range(args.requests):
            t0 = time.perf_counter()
            get(args.socket, "/v1/status")
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        looper.kill()
        looper.wait()
    q = statistics.quantiles(times, n=100)
    print(json.dumps({"p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2), "n": len(times)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
