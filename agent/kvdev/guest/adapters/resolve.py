r"""Resolving a path that someone may be re-pointing while it is resolved.

``os.path.realpath`` ``lstat``\\ s each component and ``readlink``\\ s those that are symbolic
links. A link re-pointed non-atomically (``rm; ln -s``, BusyBox ``ln -sf``), or replaced by a
file or directory, between those two calls makes ``readlink`` fail (ENOENT, EINVAL) and
``realpath`` raise. ``real_path`` resolves again instead, a bounded number of times: a change
that settles is read where it settled; one that keeps moving is an ``OSError`` the caller
reads as "cannot read now" (an incomplete listing: the last good state stays), never as "gone".

Owns: the bounded re-resolution. Every resolution of the metadata root (and of what lies
under it) in the agent goes through here.
"""

from __future__ import annotations

import os
from typing import Final

RESOLVE_TRIES: Final = 8  # resolutions of one path that met a link changing under them


def real_path(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``, resolved again when a link changed type or vanished mid-way.

    Raises:
        OSError: the last error, when every one of ``RESOLVE_TRIES`` resolutions met a change.
    """
    error: OSError | None = None
    for _ in range(RESOLVE_TRIES):
        try:
            return os.path.realpath(path)
        except OSError as e:  # readlink of a link that is no longer one
            error = e
    assert error is not None
    raise error


def real_path_or(path: str | os.PathLike[str], fallback: str) -> str:
    """``real_path(path)``, or ``fallback`` when it keeps changing (for "where is it" guesses)."""
    try:
        return real_path(path)
    except OSError:
        return fallback
