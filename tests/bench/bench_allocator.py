"""Allocator timings on the scale fixtures (S*): each should stay under 2 s (the issue's goal).

Reports, never asserts: ``.venv/bin/python tests/bench/bench_allocator.py [--repeat N]``.
Each case runs through ``allocate()`` exactly as the conformance runner builds it.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "unit" / "host" / "test_allocator_fixtures.py"


def _runner():
    spec = importlib.util.spec_from_file_location("allocator_runner", RUNNER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    """Time every S* case ``--repeat`` times; print median and max in seconds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runner = _runner()
    for path in sorted((REPO / "tests" / "data" / "allocator").glob("S*.yaml")):
        case = runner._load(path)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            runner.run_case(case)
            times.append(time.perf_counter() - start)
        print(
            f"{path.stem:45} median {statistics.median(times):6.3f} s  max {max(times):6.3f} s"
            f"  (goal < 2 s, n={args.repeat})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
