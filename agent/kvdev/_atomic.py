"""Atomic file replacement: readers see the old content or the new, never a mix.

``write_atomic`` writes a temporary file in the target's directory, fsyncs it, renames it over
the target and fsyncs the directory, so the new content survives a crash once the call returns
and a concurrent reader never sees a torn file. (Upstream's metadata writer uses a plain
truncate-and-write; kvdev's readers tolerate that, kvdev's writers never do it.) A write killed
before its rename leaves its temporary file; ``remove_leftovers`` is how the sole writer of a
directory clears those when it starts again.

Stdlib only; shared by both halves.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_TMP_SUFFIX = ".tmp"


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably, with permission bits ``mode``.

    The directory must exist. On failure the target is unchanged and no temporary file is left.
    """
    target = Path(path)
    directory = target.parent
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(directory)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def remove_leftovers(directory: str | os.PathLike[str], names: str) -> list[Path]:
    """Remove the temporary files of ``write_atomic`` calls killed (SIGKILL, power loss) mid-write.

    ``names`` is a glob of the targets' names (``status.json``, ``10-kvdev-*.link``); only
    ``.<target name>.<random>.tmp`` files are touched. Call it only where no other process
    writes those targets at the same time (it would delete a write in progress). A missing
    directory has none. Returns the files removed.
    """
    base = Path(directory)
    removed = []
    for tmp in sorted(base.glob(f".{names}.*{_TMP_SUFFIX}")):  # none in a missing directory
        try:
            tmp.unlink()
        except FileNotFoundError:
            continue
        removed.append(tmp)
    if removed:
        fsync_directory(base)
    return removed
