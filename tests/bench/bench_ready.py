"""Start -> READY=1 of kvdev-agent, two source trees side by side: paired starts, alternating.

Run as root: ``.venv/bin/python tests/bench/bench_ready.py --baseline DIR [--starts N]``.
``DIR`` is the root of another tree's ``agent/`` (e.g. ``git archive HEAD~1 agent | tar -x``),
run through PYTHONPATH as ``--src`` does; the other column is this checkout (or ``--src``).
Each pair starts the baseline and then this tree in the same namespace, its 8 links already
configured (as at a restart), bytecode cached, its API socket passed as kvdev-agent.socket
passes it (socket activation); the import floors of both trees are measured the
same way (``python -c 'import <the agent's modules>'``). Numbers only: nothing is asserted.
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
import benchlib


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


def table(r: dict[str, Any]) -> str:
    rows = [("load average (start | end)", f"{r['load_start']} | {r['load_end']}")]
    rows.append(("median READY=1, this tree / baseline", f"{r['median_ratio']:.2f}x"))
    for name, fig in r["trees"].items():
        rows.append((f"{name}: start -> READY=1", ba.fmt(fig["ready"])))
        rows.append((f"{name}: import the agent's modules", ba.fmt(fig["import"])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="the other tree's agent/ root")
    p.add_argument("--starts", type=int, default=11, help="starts per tree (default 11)")
    args = benchlib.agent_arguments(p, "bench_ready")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with benchlib.agent_work(None) as work:
        trees = {"baseline": args.baseline, "this tree": args.src}
        results = {"trees": paired(args.starts, work, trees), "load_start": load}
        results["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        base, this = (results["trees"][n]["ready"]["p50"] for n in trees)
        results["median_ratio"] = this / base
    return benchlib.report(table(results), results, args.json)


if __name__ == "__main__":
    sys.exit(main())
