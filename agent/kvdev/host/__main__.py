"""``kvdev-host``: the host tools' entry point.

The allocator (``allocate``, ``schedule``) and the metadata writer (``prepare``,
``unprepare``, ``bundle``, ``serve``) are being built; until they land this entry point only
answers ``--help`` and ``--version`` and refuses to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kvdev import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev-host`` console script."""
    parser = argparse.ArgumentParser(
        prog="kvdev-host",
        description="kvdev host tools: allocate DRA devices like the scheduler does, and write "
        "the KEP-5304 metadata files, CDI specs and guest bundles a VM reads.",
    )
    parser.add_argument("--version", action="version", version=f"kvdev-host {__version__}")
    parser.parse_args(argv)
    sys.stderr.write("kvdev-host: no host command is in this build yet\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
