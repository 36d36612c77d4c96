"""Start -> READY=1 of kvdev-agent, two source trees side by side: paired starts, alternating.

Run as root: ``.venv/bin/python tests/bench/bench_ready.py [--baseline DIR] [--starts N]``.
``DIR`` is the root of another tree's ``agent/`` (e.g. ``git archive HEAD~1 agent | tar -x``),
run through PYTHONPATH as ``--src`` does; the other column is this checkout (or ``--src``).
Each pair starts the baseline and then this tree in the same namespace, its 8 links already
configured (as at a restart), bytecode cached, its API socket passed as kvdev-agent.socket
passes it (socket activation); the import floors of both trees are measured the
same way (``python -c 'import <the agent's modules>'``). Per start, wall time and CPU time:
the agent's own user + system time (``/proc/<pid>/stat``, whole process, clock ticks) read as
``READY=1`` arrives on the notify socket, so from exec (of the ``ip netns exec`` and ``bash``
that exec into it, a few ms) to READY=1; the floors' CPU from this process' children's rusage,
and next to them, in the same run, the interpreter's own floor (``python -I -S -c pass``).
Then ``--idle`` more starts per tree, alternating, at debug level: the first pass's cost (the
sum of its logged timeline) and the agent's RSS after 5 s idle. Numbers only: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
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


FLOOR = (sys.executable, "-I", "-S", "-c", "pass")  # the interpreter alone
TICK = os.sysconf("SC_CLK_TCK")


def _child(argv: list[str] | tuple[str, ...]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, its rusage) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _import_once() -> tuple[float, float]:
    return _child([sys.executable, "-c", f"{ba.IMPORT}; os._exit(0)"])


def process_cpu(pid: int) -> float:
    """User + system seconds a live process has used (all its threads, ended ones included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def paired(starts: int, work: Path, trees: dict[str, Path | None]) -> dict[str, Any]:
    """``starts`` READY=1 times (wall, CPU) and import floors per tree, the trees alternating."""
    ready: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    imports: dict[str, list[float]] = {name: [] for name in trees}
    import_cpu: dict[str, list[float]] = {name: [] for name in trees}
    floor: list[float] = []
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
                with ba.agent(ns, tree, work, activated=True) as (agent, seconds):
                    cpu[name].append(process_cpu(agent.pid))
                    ready[name].append(seconds)
                wall, used = _import_once()
                imports[name].append(wall)
                import_cpu[name].append(used)
            floor.append(_child(FLOOR)[1])
    out: dict[str, Any] = {
        name: {
            "ready": benchlib.stats(ready[name]),
            "ready_cpu": benchlib.stats(cpu[name]),
            "import": benchlib.stats(imports[name]),
            "import_cpu": benchlib.stats(import_cpu[name]),
        }
        for name in trees
    }
    out["interpreter floor"] = {"cpu": benchlib.stats(floor)}
    return out


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
    if "median_ratio" in r:
        rows.append(("median READY=1, this tree / baseline", f"{r['median_ratio']:.2f}x"))
    for name, fig in r["trees"].items():
        if name == "interpreter floor":
            rows.append(("CPU: python -I -S -c pass", ba.fmt(fig["cpu"])))
            continue
        rows.append((f"{name}: start -> READY=1", ba.fmt(fig["ready"])))
        rows.append((f"{name}: CPU exec -> READY=1", ba.fmt(fig["ready_cpu"])))
        rows.append((f"{name}: import the agent's modules", ba.fmt(fig["import"])))
        rows.append((f"{name}: CPU of that import", ba.fmt(fig["import_cpu"])))
    for name, fig in r.get("idle", {}).items():
        rows.append((f"{name}: first pass (its timeline)", ba.fmt(fig["first_pass"])))
        mbs = ", ".join(f"{mb:.1f}" for mb in fig["rss_mb"])
        rows.append((f"{name}: RSS after {IDLE_S:.0f} s idle (MB, sorted)", mbs))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="the other tree's agent/ root (else none)")
    p.add_argument("--starts", type=int, default=11, help="starts per tree (default 11)")
    p.add_argument("--idle", type=int, default=3, help="idle starts per tree (default 3)")
    args = benchlib.agent_arguments(p, "bench_ready")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with benchlib.agent_work(None) as work:
        trees = {"this tree": args.src}
        if args.baseline:
            trees = {"baseline": args.baseline, **trees}
        results = {"trees": paired(args.starts, work, trees), "load_start": load}
        if args.idle:
            results["idle"] = idle(args.idle, work, trees)
        results["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        if args.baseline:
            base, this = (results["trees"][n]["ready"]["p50"] for n in trees)
            results["median_ratio"] = this / base
    return benchlib.report(table(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
