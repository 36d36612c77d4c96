"""Confined reads: a regular file beneath a root directory, never through a link, never a device.

``read_beneath(root, rel, limit)`` reads the file ``rel`` names beneath the directory ``root``:

* ``root`` is the caller's configuration (links in it are followed); ``rel`` is untrusted:
  empty and ``.`` components are dropped, a ``..`` component is refused, and each component
  is *looked at* through its parent's descriptor with ``O_PATH | O_NOFOLLOW`` (which opens
  nothing: a device's driver is not called, a FIFO not waited on) and ``fstat``: a link is
  refused, every component but the last must be a directory;
* the last must be a regular file with one link (a hard link could bring in a file from
  outside the root); only then is it opened for reading, through ``/proc/self/fd/<the O_PATH
  descriptor>`` (the very inode looked at), or without ``/proc`` by name with ``O_NOFOLLOW``,
  and it must still be that inode (``st_dev``/``st_ino``);
* at most ``limit`` bytes are read (one more, to tell).

``read_at(dir_fd, name, limit)`` reads one entry of a directory the caller holds open, by the
same rules (a walker's listing: ``listed`` names the inode it saw). ``read_path(path, limit)``
reads the caller's own path (links in it followed), opening only a regular file. Each caller
names what else it needs: ``owners`` (the file's uid must be one of them), a one-link rule.
Every read is non-blocking (a FIFO is never opened) and a regular file claiming more than
``limit`` bytes is refused before it is opened.

``place(path, roots)`` splits an absolute path into (root, the rest) for the first root it
lies beneath (by its components). ``list_names(root, limit)`` lists a directory through its
descriptor, at most ``limit`` names.

A path that breaks a rule raises ``RefusedError`` (``TooLargeError`` past the limit): it will not
be read as it is, and the caller names it and skips it; a path that cannot be read now raises
``OSError``. Stdlib only, imports nothing of kvdev: both halves read through it (the node relay,
``kvdev-host bundle``, the agent's metadata reads, ``kvdev collect``, the root helper
``kvdev-udev-marks``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable
from typing import Final

MAX_DEPTH: Final = 64  # components beneath a root

_LOOK: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS: Final = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


class RefusedError(ValueError):
    """A path the confined reader will not read as it is; the message says why.

    ``mode`` is the ``st_mode`` of what was looked at (0 when the refusal is of the name).
    """

    def __init__(self, path: str, reason: str, mode: int = 0) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason, self.mode = path, reason, mode


class TooLargeError(RefusedError):
    """A file larger than the caller's ``limit``."""

    def __init__(self, path: str, limit: int, mode: int = stat.S_IFREG) -> None:
        super().__init__(path, f"larger than {limit} bytes; not read", mode)
        self.limit = limit


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``, ``a regular file`` ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def components(rel: str) -> list[str]:
    """The names of ``rel`` to walk (empty and ``.`` dropped).

    Raises:
        RefusedError: it has a ``..`` component, names nothing, or is deeper than ``MAX_DEPTH``.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise RefusedError(rel, "a '..' component; not read")
    if not parts:
        raise RefusedError(rel, "names no file beneath its root; not read")
    if len(parts) > MAX_DEPTH:
        raise RefusedError(rel, f"more than {MAX_DEPTH} components; not read")
    return parts


def place(path: str, roots: Iterable[str | os.PathLike[str]]) -> tuple[str, str] | None:
    """(root, the rest) of the absolute ``path`` beneath the first of ``roots``; None if none.

    Compared by components (``/a/b`` is not beneath ``/a/bc``); a root is tried as given and
    as its real path, so that a spec may name either.
    """
    if not path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for root in roots:
        given = os.fspath(root)
        for form in dict.fromkeys((given, os.path.realpath(given))):
            base = [p for p in form.split("/") if p not in ("", ".")]
            if parts[: len(base)] == base and len(parts) > len(base):
                return given, "/".join(parts[len(base) :])
    return None


def read_beneath(
    root: str | os.PathLike[str], rel: str, limit: int, *, owners: Collection[int] | None = None
) -> bytes:
    """The bytes of the regular file ``rel`` names beneath ``root`` (see the module's rules).

    ``owners``: when given, the file's uid must be one of them.

    Raises:
        RefusedError: ``rel`` breaks a rule (a link, ``..``, not a regular file, hard-linked,
            another owner's, swapped between look and open, larger than ``limit``).
        OSError: ``root`` or a component cannot be looked at or read now.
    """
    parts = components(rel)
    here = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    parent = -1
    try:
        for depth, name in enumerate(parts):
            nxt = os.open(name, _LOOK, dir_fd=here)
            if parent >= 0:
                os.close(parent)
            parent, here = here, nxt
            seen = os.fstat(here)
            walked = "/".join(parts[: depth + 1])
            if stat.S_ISLNK(seen.st_mode):
                raise RefusedError(rel, f"{walked} is a symbolic link; not followed")
            if depth < len(parts) - 1 and not stat.S_ISDIR(seen.st_mode):
                raise RefusedError(rel, f"{walked} is {kind_of(seen.st_mode)}, not a directory")
        _check(seen, rel, limit, owners=owners, one_link=True)
        fd = _reopen(here, parent, parts[-1], seen, rel)
    finally:
        os.close(here)
        if parent >= 0:
            os.close(parent)
    return _read_closing(fd, limit, rel)


def read_at(
    dir_fd: int,
    name: str,
    limit: int,
    *,
    owners: Collection[int] | None = None,
    listed: os.stat_result | None = None,
) -> bytes:
    """The bytes of the regular file ``name`` in the directory open as ``dir_fd``.

    Looked at through ``dir_fd`` with ``O_PATH | O_NOFOLLOW`` (a link is refused, a device or a
    FIFO never opened), with one link; ``owners``: its uid must be one of them; ``listed``: it
    must still be that inode (what a walker listed). Errors name ``name``.

    Raises:
        RefusedError: it breaks a rule (as ``read_beneath``), or ``name`` is not one name.
        OSError: it cannot be looked at or read now.
    """
    if name in ("", ".", "..") or "/" in name:
        raise RefusedError(name, "not one name in its directory; not read")
    looked = os.open(name, _LOOK, dir_fd=dir_fd)
    try:
        seen = os.fstat(looked)
        if stat.S_ISLNK(seen.st_mode):
            raise RefusedError(name, "a symbolic link; not followed", seen.st_mode)
        if listed is not None and (seen.st_dev, seen.st_ino) != (listed.st_dev, listed.st_ino):
            raise RefusedError(name, "no longer the file listed; not read")
        _check(seen, name, limit, owners=owners, one_link=True)
        fd = _reopen(looked, dir_fd, name, seen, name)
    finally:
        os.close(looked)
    return _read_closing(fd, limit, name)


def read_path(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at the caller's own ``path`` (links in it followed).

    Looked at first (``O_PATH``, ``fstat``) and opened only when it is a regular file, the same
    inode: a device or a FIFO named on a command line is never opened.

    Raises:
        RefusedError: it is not a regular file, was replaced between look and open, or is larger
            than ``limit``.
        OSError: it cannot be looked at or read now.
    """
    where = os.fspath(path)
    looked = os.open(where, os.O_PATH | os.O_CLOEXEC)
    try:
        seen = os.fstat(looked)
        _check(seen, where, limit, owners=None, one_link=False)
        fd = _reopen(looked, None, where, seen, where)
    finally:
        os.close(looked)
    return _read_closing(fd, limit, where)


def _check(
    seen: os.stat_result, rel: str, limit: int, *, owners: Collection[int] | None, one_link: bool
) -> None:
    """Refuse what was looked at unless it is a regular file the caller may read."""
    mode = seen.st_mode
    if not stat.S_ISREG(mode):
        raise RefusedError(rel, f"{kind_of(mode)}, not a regular file; not opened", mode)
    if one_link and seen.st_nlink != 1:
        raise RefusedError(rel, f"a file with {seen.st_nlink} hard links; not read", mode)
    if owners is not None and seen.st_uid not in owners:
        why = f"owned by uid {seen.st_uid}, not by {sorted(owners)}; not read"
        raise RefusedError(rel, why, mode)
    if seen.st_size > limit:
        raise TooLargeError(rel, limit)


def _reopen(looked: int, parent: int | None, name: str, seen: os.stat_result, rel: str) -> int:
    """The regular file looked at through ``looked``, open for reading: the same inode."""
    try:
        fd = os.open(f"/proc/self/fd/{looked}", _READ)
    except FileNotFoundError:  # no /proc here: by name, and it must be the same inode
        flags = _READ if parent is None else _READ | os.O_NOFOLLOW
        fd = os.open(name, flags, dir_fd=parent)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
        os.close(fd)
        raise RefusedError(rel, "replaced between look and open; not read")
    return fd


def _read_closing(fd: int, limit: int, rel: str) -> bytes:
    """All of ``fd`` (closed after), refused when larger than ``limit``."""
    try:
        data = read_upto(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLargeError(rel, limit)
    return data


def read_upto(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fd`` from where it stands (one more than allowed tells)."""
    chunks, left = [], limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def list_names(root: str | os.PathLike[str], limit: int) -> tuple[list[str], bool]:
    """The names in the directory ``root`` (unsorted), at most ``limit``; True if cut there.

    Raises:
        OSError: it cannot be opened as a directory or listed.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    names: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(names) == limit:
                    return names, True
                names.append(entry.name)
    finally:
        os.close(fd)
    return names, False


__all__ = [
    "MAX_DEPTH",
    "RefusedError",
    "TooLargeError",
    "components",
    "kind_of",
    "list_names",
    "place",
    "read_at",
    "read_beneath",
    "read_path",
    "read_upto",
]
