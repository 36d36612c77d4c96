"""``kvdev-host``: the host tools' entry point (the command line lives in ``kvdev.host.cli``).

pydantic looks for plugins (every installed distribution's entry points) the first time it
builds a model; kvdev uses none, and the look costs start-up time, so it is switched off
unless the environment says otherwise.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from kvdev.host.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
