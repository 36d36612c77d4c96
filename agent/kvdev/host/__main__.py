"""``kvdev-host``: the host tools' entry point (the command line lives in ``kvdev.host.cli``)."""

from __future__ import annotations

import sys

from kvdev.host.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
