"""Frozen values describing what the guest observed, passed from adapters to the pure core.

Adapters (``files``, later ``udev`` and ``netlink``) produce these; the pure core consumes
them. Nothing here does I/O or holds a live handle.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdev.errors import Problem
from kvdev.schema.tree import Role


@dataclass(frozen=True, slots=True)
class RawFile:
    """One file as read from disk, before any parsing.

    Attributes:
        source: the path to show people (as given or found).
        relpath: the path relative to the metadata tree's root, '/'-separated; None when the
            file is not inside a recognisable tree.
        role: what the file is, by its place (or, outside a tree, by its content).
        data: the bytes read; None when the file could not be read.
        problem: why it could not be read (set exactly when ``data`` is None).
    """

    source: str
    relpath: str | None
    role: Role
    data: bytes | None = None
    problem: Problem | None = None
