"""`make robustness`: run the robustness suites and print their evidence as a table.

Runs ``pytest -m robustness tests/robustness`` (``--long``: with ``--robustness-long``, 10,000
fuzz inputs and five storms) with ``KVDEV_ROBUST_REPORT`` naming a scratch file each suite
appends its row to, then prints: suite, inputs tried, crashes, unintended changes, max RSS,
fds before/after, duration. Exit status: pytest's.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = (
    ("suite", "SUITE"),
    ("inputs", "INPUTS"),
    ("crashes", "CRASHES"),
    ("unintended", "UNINTENDED CHANGES"),
    ("max_rss_mb", "MAX RSS MB"),
    ("fds", "FDS BEFORE/AFTER"),
    ("seconds", "SECONDS"),
)


def table(rows):
    cells = [[title for _, title in COLUMNS]]
    for given in rows:
        row = {
            **given,
            "fds": f"{given['fds_before']}/{given['fds_after']}" if given["fds_before"] else "-",
        }
        row["max_rss_mb"] = row["max_rss_mb"] or "-"
        cells.append([str(row[key]) for key, _ in COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="the long versions")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvdev-robust-") as scratch:
        rows_file = Path(scratch) / "rows.jsonl"
        env = {**os.environ, "KVDEV_ROBUST_REPORT": str(rows_file)}
        cmd = [sys.executable, "-m", "pytest", "-m", "robustness", "-q", "-p", "no:cacheprovider"]
        cmd += ["--robustness-long"] if args.long else []
        done = subprocess.run([*cmd, *args.pytest_args, str(HERE)], env=env, check=False)
        rows = (
            [json.loads(line) for line in rows_file.read_text().splitlines()]
            if rows_file.exists()
            else []
        )
    print()
    print(table(rows) if rows else "no suite recorded a row (not root? see the pytest output)")
    failed = sum(r["crashes"] + r["unintended"] for r in rows)
    print(
        f"\n{len(rows)} suites, {sum(r['inputs'] for r in rows)} inputs, "
        f"{failed} crashes or unintended changes; pytest exit status {done.returncode}"
    )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
