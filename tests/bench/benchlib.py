"""What the benchmarks share: running commands, throwaway namespaces with veth NICs, quantiles."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import uuid
from collections.abc import Iterator, Sequence


def run(*cmd: str, stdin: str | None = None) -> str:
    """Run a command, fail loudly, return its stdout."""
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout


@contextlib.contextmanager
def namespace(prefix: str, links: Sequence[tuple[str, str, str]]) -> Iterator[str]:
    """A fresh namespace with veth NICs ``(name, mac, peer)``, NICs down and peers up.

    It is deleted on exit, whatever happens.
    """
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    run("ip", "netns", "add", ns)
    try:
        batch = "".join(
            f"link add {name} address {mac} type veth peer name {peer}\nlink set {peer} up\n"
            for name, mac, peer in links
        )
        run("ip", "-n", ns, "-batch", "-", stdin=batch)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)


def stats(values: list[float]) -> dict[str, float]:
    """Count, p50/p90/p99 and max, in milliseconds, of durations in seconds."""
    ms = sorted(v * 1000 for v in values)
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"n": len(ms), "p50": q[49], "p90": q[89], "p99": q[98], "max": ms[-1]}
