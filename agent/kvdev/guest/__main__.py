"""``kvdev-agent``: the guest daemon's entry point (composition root).

The reconcile loop (files, udev and netlink in; configured interfaces and a status socket
out) is being built; until it lands this entry point only answers ``--help`` and
``--version`` and refuses to run, rather than pretend to manage anything.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kvdev import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev-agent`` console script."""
    parser = argparse.ArgumentParser(
        prog="kvdev-agent",
        description="The kvdev guest agent: configures the network interfaces that DRA "
        "metadata describes and reports their state on a local socket.",
    )
    parser.add_argument("--version", action="version", version=f"kvdev-agent {__version__}")
    parser.parse_args(argv)
    sys.stderr.write(
        "kvdev-agent: the agent's reconcile loop is not in this build yet; "
        "use 'kvdev metadata validate' to check metadata offline\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
