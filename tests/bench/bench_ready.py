"""Start -> READY=1 of kvdev-agent, two source trees side by side: paired starts, alternating.

Run as root: ``.venv/bin/python tests/bench/bench_ready.py --baseline DIR [--starts N]``.
``DIR`` is the root of another tree's ``agent/`` (e.g. ``git archive HEAD~1 agent | tar -x``),
run through PYTHONPATH as ``--src`` does; the other column is this checkout (or ``--src``).
Each pair starts the baseline and then this tree in the same namespace, its 8 links already
configured (as at a restart), bytecode cached, its API socket passed as kvdev-agent.socket
passes it (socket activation); the import floors of both trees are measured the
same way (``python -c 'import <the agent's modules>'``). Then ``--idle`` more starts per tree,
alternating, at debug level: the first pass's cost (the sum of its logged timeline) and the
agent's RSS after 5 s idle. Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_agent as ba  # sibling modules: run as python tests/bench/<name>.py
import bench_e2e
import benchlib
import psutil

IDLE_S = 5.0  # as bench_agent's idle RSS


def _use(src: Path | None) -> None:
    if src is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = str(src.resolve())


def _import_once() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"{ba.IMPORT}; os._exit(0)"], check=True)
    return time.perf_counter() - t0


def paired(starts: int, work: Path, trees: dict[str, Path | None]) -> dict[str, Any]:
    """``starts`` READY=1 times and import floors per tree, the trees alternating."""
    ready: dict[str, list[float]] = {name: [] for name in trees}
    imports: dict[str, list[float]] = {name: [] for name in trees}
    with ba.served(work, "ready") as (ns, tree, _, proc, _):
        proc.terminate()
        proc.wait()
        for src in trees.values():  # warm each tree's bytecode cache, unmeasured
            _use(src)
            with ba.agent(ns, tree, work, activated=True):
                pass
        for _ in range(starts):
            for name, src in trees.items():
                _use(src)
                with ba.agent(ns, tree, work, activated=True) as (_, seconds):
                    ready[name].append(seconds)
                imports[name].append(_import_once())
    return {
        name: {"ready": benchlib.stats(ready[name]), "import": benchlib.stats(imports[name])}
        for name in trees
    }


def idle(rounds: int, work: Path, trees: dict[str, Path | None]) -> dict[str, Any]:
    """Per tree: the first pass's cost (ms, its debug timeline) and RSS (MB) after 5 s idle."""
    first: dict[str, list[float]] = {name: [] for name in trees}
    rss: dict[str, list[float]] = {name: [] for name in trees}
    os.environ["KVDEV_BENCH_LOG_LEVEL"] = "debug"
    try:
        with ba.served(work, "idle") as (ns, tree, _, proc, _):
            proc.terminate()
            proc.wait()
            for _ in range(rounds):
                for name, src in trees.items():
                    _use(src)
                    log = work / "agent.log"
                    since = log.stat().st_size
                    with ba.agent(ns, tree, work, activated=True) as (agent, _):
                        time.sleep(IDLE_S)
                        rss[name].append(psutil.Process(agent.pid).memory_info().rss / 2**20)
                    passes = bench_e2e.timelines(log, since)
                    first[name].append(sum(v for k, v in passes[0].items() if k != "steps") / 1000)
    finally:
        os.environ.pop("KVDEV_BENCH_LOG_LEVEL", None)
    return {
        name: {"first_pass": benchlib.stats(first[name]), "rss_mb": sorted(rss[name])}
        for name in trees
    }


def table(r: dict[str, Any]) -> str:
    rows = [("load average (start | end)", f"{r['load_start']} | {r['load_end']}")]
    rows.append(("median READY=1, this tree / baseline", f"{r['median_ratio']:.2f}x"))
    for name, fig in r["trees"].items():
        rows.append((f"{name}: start -> READY=1", ba.fmt(fig["ready"])))
        rows.append((f"{name}: import the agent's modules", ba.fmt(fig["import"])))
    for name, fig in r.get("idle", {}).items():
        rows.append((f"{name}: first pass (its timeline)", ba.fmt(fig["first_pass"])))
        mbs = ", ".join(f"{mb:.1f}" for mb in fig["rss_mb"])
        rows.append((f"{name}: RSS after {IDLE_S:.0f} s idle (MB, sorted)", mbs))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="the other tree's agent/ root")
    p.add_argument("--starts", type=int, default=11, help="starts per tree (default 11)")
    p.add_argument("--idle", type=int, default=3, help="idle starts per tree (default 3)")
    args = benchlib.agent_arguments(p, "bench_ready")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with benchlib.agent_work(None) as work:
        trees = {"baseline": args.baseline, "this tree": args.src}
        results = {"trees": paired(args.starts, work, trees), "load_start": load}
        if args.idle:
            results["idle"] = idle(args.idle, work, trees)
        results["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        base, this = (results["trees"][n]["ready"]["p50"] for n in trees)
        results["median_ratio"] = this / base
    return benchlib.report(table(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
