"""The mark files: one empty file per mark (``core.marking``) in ``<state-dir>/marks``.

udev's ``81-kvdev.rules`` tests for them by name, so what a file holds does not matter and the
agent writes nothing in them. Only names that start with ``mac-`` or ``pci-`` are created or
removed; anything else in the directory is left alone. The directory is kept across reboots
with the rest of the state, so that udev's first events of the next boot already mark the
links kvdev had, before the agent (or any other manager) has started; the agent's first pass
then corrects what changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvdev.guest.core.marking import MAC_PREFIX, PCI_PREFIX

MARK_DIR = "marks"


def directory(state_dir: Path) -> Path:
    """Where the marks of an agent with this state directory live."""
    return state_dir / MARK_DIR


def read(path: Path) -> frozenset[str]:
    """The marks now on disk (none when the directory is missing)."""
    try:
        names = [p.name for p in path.iterdir()]
    except FileNotFoundError:
        return frozenset()
    return frozenset(n for n in names if n.startswith((MAC_PREFIX, PCI_PREFIX)))


def sync(path: Path, wanted: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """Make the marks on disk ``wanted``; the marks added and removed. Raises ``OSError``."""
    have = read(path)
    added, removed = wanted - have, have - wanted
    if added:
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
    for name in sorted(added):
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        os.close(fd)
    for name in sorted(removed):
        (path / name).unlink(missing_ok=True)
    return added, removed
