"""Reading metadata files from disk: bounded, never following links out of the tree.

The I/O adapter for the metadata tree. It turns paths into ``RawFile`` values and knows
nothing of the schema beyond the tree layout (which file has which role). It never raises
for a file it cannot read: the failure is a ``Problem`` on that file, so that "could not read"
is never mistaken for "no devices".
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from kvdev.errors import Problem
from kvdev.guest.observed import RawFile
from kvdev.schema import sniff_role
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, Role, role_of

_ANCHORS = (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)


def read_bounded(path: Path, limit: int = MAX_STREAM_BYTES) -> bytes:
    """Read a regular file of at most ``limit`` bytes (one byte more is read to tell).

    Raises:
        OSError: the file cannot be opened or read, or is not a regular file (ENOTSUP-like
            errors carry a readable strerror).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return data


def _anchored_relpath(path: Path) -> str | None:
    """The path from the last ``resourceclaims``/``resourceclaimtemplates`` component on."""
    parts = path.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _ANCHORS:
            return "/".join(parts[i:])
    return None


def _load(source: str, path: Path, relpath: str | None, role: Role | None) -> RawFile:
    try:
        data = read_bounded(path)
    except OSError as e:
        reason = e.strerror or str(e)
        problem = Problem(f"cannot read: {reason}", source)
        return RawFile(source, relpath, role or Role.UNRELATED, None, problem)
    if role is None:
        role = sniff_role(path.name, data)
    return RawFile(source, relpath, role, data)


def read_path(path: Path) -> Iterator[RawFile]:
    """Read a file, or every file of a directory tree, as given on a command line."""
    if path.is_dir():
        yield from read_tree(path)
        return
    relpath = _anchored_relpath(path)
    role = role_of(relpath) if relpath else None
    yield _load(str(path), path, relpath, None if role in (None, Role.UNRELATED) else role)


def read_tree(root: Path) -> Iterator[RawFile]:
    """Read every file under ``root`` in path order, classified by its place in the tree.

    Files that are no metadata, hints or config-drive file come back with role UNRELATED and
    no data. Symbolic links are followed only when they stay inside ``root``.
    """
    real_root = root.resolve()
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = Path(directory)
        for name in sorted(filenames):
            path = here / name
            source = str(path)
            rel = path.relative_to(root).as_posix()
            role = role_of(rel)
            relpath: str | None = rel
            if role is Role.UNRELATED and (anchored := _anchored_relpath(path)):
                role, relpath = role_of(anchored), anchored
            if role is Role.UNRELATED:
                yield RawFile(source, relpath, role)
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(real_root):
                problem = Problem("symbolic link points outside the tree; not read", source)
                yield RawFile(source, relpath, role, None, problem)
                continue
            yield _load(source, path, relpath, role)
