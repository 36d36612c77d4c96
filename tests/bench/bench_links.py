"""The agent in a guest with thousands of unrelated links: pass time, CPU per link event, RSS.

Run as root: ``.venv/bin/python tests/bench/bench_links.py [--links N] [--src DIR]``. A
namespace holds the 8 described veth NICs of ``bench_agent`` and, for the large case, N
macvlans on one more veth nobody describes. Reported: the time of a pass that applies a
metadata rewrite (the agent's own ``pass timeline`` line, summed), with no extra links and
with N; the agent's CPU for 10 unrelated link adds (one ``ip`` each, then 3 s to settle); its
RSS after creating and deleting the N macvlans 3 times. Numbers only, nothing asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_agent as ba  # sibling modules: run as python tests/bench/<name>.py
import benchlib
import psutil
from benchlib import run

_TIMELINE = re.compile(r"pass \d+ timeline \((\d+) steps\): (.*)$")
SETTLE = 3.0  # s for the agent to finish with a burst of events (a bench may wait)


def macvlans(ns: str, count: int, verb: str, prefix: str = "m") -> None:
    lines = [
        f"link {verb} {prefix}{i}" + (" link u0 type macvlan" if verb == "add" else "")
        for i in range(count)
    ]
    run("ip", "-n", ns, "-batch", "-", stdin="\n".join(lines) + "\n")


def pass_ms(log: Path, since: int) -> list[float]:
    """Total times of the passes that applied something, logged after byte ``since``."""
    lines = log.read_bytes()[since:].decode(errors="replace").splitlines()
    found = [m for line in lines if (m := _TIMELINE.search(line)) and int(m.group(1)) > 0]
    return [sum(float(p.rsplit(" ", 2)[1]) for p in m.group(2).split(", ")) for m in found]


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


@contextlib.contextmanager
def guest(
    work: Path, name: str, links: int
) -> Iterator[tuple[str, Path, ba.AddrEvents, psutil.Process]]:
    tree = work / f"tree-{name}"
    ba.write_metadata(tree, 0)
    with ba.namespace() as ns:
        run("ip", "-n", ns, "link", "add", "u0", "type", "veth", "peer", "name", "up0")
        if links:
            macvlans(ns, links, "add")
        events = ba.AddrEvents(ns)
        with ba.agent(ns, tree, work) as (proc, _ready):
            events.wait(time.perf_counter(), set(ba.addrs(0)))
            time.sleep(SETTLE)
            yield ns, tree, events, psutil.Process(proc.pid)


def rewrites(tree: Path, events: ba.AddrEvents, log: Path, rounds: int) -> list[float]:
    start = log.stat().st_size
    for k in range(1, rounds + 1):
        events.drain()
        events.wait(ba.write_metadata(tree, k), set(ba.addrs(k)))
        time.sleep(ba.GAP)
    return pass_ms(log, start)


def bench(work: Path, links: int, rounds: int) -> dict[str, Any]:
    log = work / "agent.log"
    out: dict[str, Any] = {}
    with guest(work, "small", 0) as (_ns, tree, events, _proc):
        small = rewrites(tree, events, log, rounds)
    with guest(work, "large", links) as (ns, tree, events, proc):
        large = rewrites(tree, events, log, rounds)
        before = cpu(proc)
        for i in range(10):
            run("ip", "-n", ns, "link", "add", f"x{i}", "link", "u0", "type", "macvlan")
        time.sleep(SETTLE)
        out["cpu_10_link_adds_s"] = cpu(proc) - before
        rss0 = proc.memory_info().rss
        for _ in range(3):
            macvlans(ns, links, "del")
            macvlans(ns, links, "add")
        time.sleep(SETTLE)
        out["rss_before_churn_mb"] = rss0 / 2**20
        out["rss_after_churn_mb"] = proc.memory_info().rss / 2**20
    out["pass_ms_7_links"] = statistics.median(small)
    out[f"pass_ms_{links}_links"] = statistics.median(large)
    out["passes_measured"] = [len(small), len(large)]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--links", type=int, default=2000, help="unrelated macvlans (default 2000)")
    p.add_argument("--rounds", type=int, default=10, help="rewrites per case (default 10)")
    args = benchlib.agent_arguments(p, "bench_links")
    with benchlib.agent_work(args.src, debug=True) as work:
        results = bench(work, args.links, args.rounds)
        results["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = "\n".join(
        f"{k:<28}  {v if isinstance(v, str | list) else f'{v:.3f}'}" for k, v in results.items()
    )
    return benchlib.report(text, results, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
