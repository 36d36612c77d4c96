"""Metadata write -> kernel state, end to end, with and without foreign link events before it.

Run as root: ``.venv/bin/python tests/bench/bench_e2e.py [--rounds N] [--json PATH]``. Each
round rewrites the metadata so that 8 NICs move to new addresses, and times, from outside the
agent (an rtnetlink socket in the namespace, ``bench_agent.AddrEvents``), until all 8 new
addresses are there; against one ``ip -batch`` of the same 16 changes. The "foreign" variants
first add an address on each link that nobody describes (untimed), then delete them with one
``ip -batch`` 50 ms before the change: link events the agent must absorb, not wait behind.
The agent runs with ``--log-level debug``: its ``pass timeline`` lines (one per pass:
wake-up, read, parse, observe, plan, apply, writes, logging) give the per-phase figures of the
timed passes; ``--info`` runs it at the packaged level instead (no timeline, no debug lines'
cost), the end to end a production agent gives. Numbers only: nothing about timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_agent as ba  # sibling modules: run as python tests/bench/<name>.py
import benchlib
from benchlib import run

FOREIGN_LEAD = 0.05  # s between the foreign deletes and the change
_TIMELINE = re.compile(r"pass \d+ timeline \((\d+) steps\): (.*)$")


def foreign(ns: str, k: int, verb: str) -> None:
    """Add (or delete) one address nobody describes on each NIC, in one ``ip -batch``."""
    lines = "".join(f"addr {verb} 192.168.{i}.{k % 250 + 1}/32 dev b{i}\n" for i in range(ba.NICS))
    run("ip", "-n", ns, "-batch", "-", stdin=lines)


def with_foreign(ns: str, change: ba.Change, events: ba.AddrEvents) -> ba.Change:
    """``change`` preceded by foreign adds (settled first) and deletes 50 ms before it."""

    def changed(k: int) -> tuple[float, Callable[[], object]]:
        foreign(ns, k, "add")
        time.sleep(ba.GAP)
        events.drain()
        foreign(ns, k, "del")
        time.sleep(FOREIGN_LEAD)
        return change(k)

    return changed


def timelines(log: Path, since: int) -> list[dict[str, float]]:
    """The agent's pass timelines logged after byte ``since`` of its log, as phase -> ms."""
    out = []
    with log.open("rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            if m := _TIMELINE.search(line):
                phases = (p.rsplit(" ", 2) for p in m.group(2).split(", "))
                out.append({"steps": float(m.group(1))} | {n: float(ms) for n, ms, _ in phases})
    return out


def phase_stats(passes: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """p50 and p99 of each phase over the passes that applied something (ms; steps: count)."""
    applying = [p for p in passes if p["steps"] > 0]
    names = sorted({n for p in applying for n in p})
    out = {}
    for name in names:
        values = sorted(p.get(name, 0.0) for p in applying)
        q = (
            statistics.quantiles(values, n=100, method="inclusive")
            if len(values) > 1
            else values * 99
        )
        out[name] = {"p50": q[49], "p99": q[98]}
    return out


def bench_agent(rounds: int, work: Path, *, concurrent: bool, timeline: bool) -> dict[str, Any]:
    """``rounds`` rewrites by the agent; ``timeline``: it logs at debug level (passes counted)."""
    name = "foreign" if concurrent else "quiet"
    with ba.served(work, name) as (ns, tree, events, proc, _):
        log = work / "agent.log"
        start = log.stat().st_size

        def change(k: int) -> tuple[float, Callable[[], object]]:
            return ba.write_metadata(tree, k), lambda: None

        measured = ba.rounds(
            events, with_foreign(ns, change, events) if concurrent else change, rounds
        )
        assert proc.poll() is None, "the agent died"
        passes = timelines(log, start)
        text = log.read_bytes()[start:].decode(errors="replace")
        backoffs = text.count("backing off")
    return {
        **measured,
        "passes": len(passes) if timeline else None,  # counted by their debug timeline lines
        "backoff_lines": backoffs,
        "phases": phase_stats(passes),
    }


def bench_ip(rounds: int, work: Path, *, concurrent: bool) -> dict[str, Any]:
    with ba.namespace() as ns:
        events = ba.AddrEvents(ns)
        up = [f"link set b{i} up\naddr add {a} dev b{i}\n" for i, a in enumerate(ba.addrs(0))]
        run("ip", "-n", ns, "-batch", "-", stdin="".join(up))
        change = ba.ip_change(ns, work, batch=True)
        return ba.rounds(events, with_foreign(ns, change, events) if concurrent else change, rounds)


def table(r: dict[str, Any]) -> str:
    rows = [("load average", r["loadavg"])]
    for variant in ("quiet", "foreign"):
        a, b = r[variant]["agent"], r[variant]["ip_batch"]
        rows.append((f"{variant}: agent", ba.fmt(a)))
        rows.append((f"{variant}: one ip -batch", ba.fmt(b)))
        rows.append(
            (
                f"{variant}: ratio p50 | p99",
                f"{a['p50'] / b['p50']:.2f}x | {a['p99'] / b['p99']:.2f}x",
            )
        )
        passes = "- (not logged at info)" if a["passes"] is None else a["passes"]
        rows.append((f"{variant}: agent passes, backoff lines", f"{passes}, {a['backoff_lines']}"))
        for phase, q in a["phases"].items():
            rows.append(
                (f"  {variant} pass phase {phase}", f"p50 {q['p50']:.2f}  p99 {q['p99']:.2f} ms")
            )
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=100, help="rewrites per variant (default 100)")
    p.add_argument(
        "--info",
        action="store_true",
        help="agents at the packaged log level (info), as in production: no debug lines, so no "
        "per-phase timeline, and the end to end without debug logging's cost",
    )
    args = benchlib.agent_arguments(p, "bench_e2e")
    with benchlib.agent_work(args.src, debug=not args.info) as work:
        results: dict[str, Any] = {}
        for variant, concurrent in (("quiet", False), ("foreign", True)):
            print(f"{variant}: {args.rounds} rounds, agent and ip -batch ...", flush=True)
            results[variant] = {
                "agent": bench_agent(
                    args.rounds, work, concurrent=concurrent, timeline=not args.info
                ),
                "ip_batch": bench_ip(args.rounds, work, concurrent=concurrent),
            }
        results["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return benchlib.report(table(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
