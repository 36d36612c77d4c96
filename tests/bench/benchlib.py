"""What the benchmarks share: running commands, throwaway namespaces with veth NICs, quantiles."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


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


def agent_environment(work: Path, src: Path | None) -> None:
    """Run kvdev as installed (bytecode cached in ``work``, never in agent/), from ``src`` if given.

    ``src`` (e.g. a ``git archive`` of another commit) goes ahead of the editable install.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    if src:
        os.environ["PYTHONPATH"] = str(src.resolve())


@contextlib.contextmanager
def agent_work(src: Path | None, *, debug: bool = False) -> Iterator[Path]:
    """A scratch directory for one benchmark run, the environment set (``agent_environment``).

    ``debug``: the agents started (``bench_agent.agent``) log at debug level, pass timelines
    included.
    """
    with tempfile.TemporaryDirectory(prefix="kvdev-bench-") as tmp:
        work = Path(tmp)
        agent_environment(work, src)
        if debug:
            os.environ["KVDEV_BENCH_LOG_LEVEL"] = "debug"
        yield work


def report(text: str, results: dict[str, Any], json_path: Path | None) -> int:
    """Print the table, write the numbers as JSON when asked; the exit code (0)."""
    print(text)
    if json_path:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def agent_arguments(p: argparse.ArgumentParser, name: str) -> argparse.Namespace:
    """Add ``--json PATH`` and ``--src DIR`` (see ``agent_environment``), parse the arguments.

    Exits with 2 unless run as root (the agent benchmarks create network namespaces).
    """
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers as JSON")
    p.add_argument("--src", type=Path, help="run kvdev from this source root (e.g. a git archive)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.stderr.write(f"{name}: run as root (it creates network namespaces)\n")
        sys.exit(2)
    return args
