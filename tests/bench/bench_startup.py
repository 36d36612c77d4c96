"""``kvdev-host`` start-up: one tiny ``allocate`` as a fresh process (issue 15: <= 0.2 s).

Reports, never asserts: ``.venv/bin/python tests/bench/bench_startup.py [--repeat N]``.
Runs ``kvdev-host allocate -f <one node, one class, one device, one claim> -o json`` and
``python -c pass`` ``--repeat`` times each and prints the best and median wall time and the
best CPU time (user + system, from the children's rusage), and where the import time goes
(``-X importtime``: the ten slowest modules, cumulative). Twice: with compiled bytecode (as
an installed package has it; the cache goes to a temporary PYTHONPYCACHEPREFIX) and without
(PYTHONDONTWRITEBYTECODE, as some sandboxes run: every module is compiled on every start).
Next to them, the same ``allocate`` by the oracle binary (``build/upstream/bin/allocate``,
upstream's v0.37.2 allocator, ``make upstream``; GOMAXPROCS=1) when it is built, as a whole
process too.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORACLE = Path(__file__).resolve().parents[2] / "build" / "upstream" / "bin" / "allocate"

SMALL = """\
apiVersion: v1
kind: Node
metadata: {name: node-a}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: gpu.example.com
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  nodeName: node-a
  devices: [{name: gpu-0}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
"""


def _times(cmd: list[str], repeat: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    subprocess.run(cmd, capture_output=True, check=True, env=env)  # warm the bytecode cache
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def main() -> int:
    """Print the start-up figures of the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.yaml"
        path.write_text(SMALL, encoding="utf-8")
        allocate = [sys.executable, "-m", "kvdev.host", "allocate", "-f", str(path)]
        allocate += ["--node", "node-a", "-o", "json"]
        compiled = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        compiled["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        source = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        runs = [("python -c pass", [sys.executable, "-c", "pass"]), ("allocate", allocate)]
        if ORACLE.exists():
            oracle = [str(ORACLE), *allocate[4:]]
            runs.append(("oracle allocate", oracle))
        for mode, env in (("bytecode", compiled), ("no bytecode", source)):
            for label, cmd in runs:
                if label.startswith("oracle") and mode != "bytecode":
                    continue  # no bytecode to speak of
                mine = {**env, "GOMAXPROCS": "1"} if label.startswith("oracle") else env
                walls, cpus = _times(cmd, args.repeat, mine)
                print(
                    f"{mode:12} {label:15} wall best {min(walls):.3f} s, median "
                    f"{statistics.median(walls):.3f} s; CPU best {min(cpus):.3f} s "
                    f"(n={args.repeat})"
                )
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *allocate[1:]],
            capture_output=True,
            text=True,
            check=True,
            env=compiled,
        )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].strip()))
    print("slowest imports (cumulative ms):")
    for us, name in sorted(rows, reverse=True)[:10]:
        print(f"  {us / 1000:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
