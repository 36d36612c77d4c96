"""Reading metadata files: bounded reads, never following links out of the tree.

The I/O adapter for the metadata tree, the guest hints and the config drive. It turns paths
into ``RawFile`` values and knows nothing of the schema beyond the tree layout. A file it
cannot read is a ``Problem`` on that file and a directory it cannot list makes the scan
incomplete, so "could not read" is never mistaken for "no devices". A file that
looks torn is read again, briefly (``Settle``); keeping the last good content is the caller's
job (``kvdev.guest.core.sources``). Watching lives in ``watch`` (``Watcher``, re-exported
here): it only says "something may have changed".

A root can also be a kubelet ConfigMap volume (shared with the guest over virtiofs; what
``kvdev-host controller`` keeps): a flat directory of keys, swapped as a whole::

    ROOT/..2026_12_01_20_41_08.123456789/<key>   the content of one version, never changed
    ROOT/..data -> ..2026_12_01_20_41_08.123456789   swapped by rename: the version in force
    ROOT/<key> -> ..data/<key>                    what a reader sees, one per key

Each key is one stream (KEP-5304 DeviceMetadata, or kvdev GuestHints). The key names are not
trusted: a file's role, claim, request and driver come from its content. ``..data`` is resolved
once per read and every key read from that version (again when it moved meanwhile), so one
result never mixes two versions; only regular files directly in that version's directory count.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kvdev.errors import Problem
from kvdev.guest.adapters.watch import Watcher
from kvdev.guest.core.observed import RawFile
from kvdev.schema import sniff_role
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, Role, role_of

_ANCHORS = (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)
CONFIGMAP_DATA = "..data"  # kubelet's link to the version of a ConfigMap volume in force
CONFIGMAP_MAX_KEYS = 256  # a ConfigMap of more keys is not kvdev's: the rest are left unread
__all__ = ["SETTLE", "RawFile", "Settle", "Watcher", "read_path", "read_sources", "read_tree"]


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


@dataclass(frozen=True, slots=True)
class Settle:
    """Read a file that looks torn again, at most ``rereads`` times, ``pause(interval)`` first."""

    rereads: int = 3
    interval: float = 0.01
    pause: Callable[[float], None] = time.sleep


SETTLE = Settle()


def _json_stream(data: bytes) -> bool:
    """True when ``data`` is one or more complete JSON values separated by JSON white space."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    decoder = json.JSONDecoder()
    pos, values, end = 0, 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos == end:
            return values > 0
        try:
            pos = decoder.raw_decode(text, pos)[1]
        except (ValueError, RecursionError):
            return False
        values += 1


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_settled(path: Path, settle: Settle = SETTLE) -> bytes:
    """Read a file whole, again while it looks torn (as ``settle`` says); return the last read.

    A read looks torn when its bytes are no complete JSON stream, or when the file's device,
    inode, size or modification time differ before and after it.

    Raises:
        OSError: as ``read_bounded``, or the file cannot be looked up.
    """
    rereads = 0
    while True:
        before = _identity(path)
        data = read_bounded(path)
        if rereads >= settle.rereads or (_identity(path) == before and _json_stream(data)):
            return data
        rereads += 1
        settle.pause(settle.interval)


def _anchored_relpath(path: Path) -> str | None:
    """The path from the last ``resourceclaims``/``resourceclaimtemplates`` component on."""
    parts = path.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _ANCHORS:
            return "/".join(parts[i:])
    return None


def _unreadable(source: str, relpath: str | None, role: Role | None, e: OSError) -> RawFile:
    problem = Problem(f"cannot read: {e.strerror or e}", source)
    return RawFile(source, relpath, role or Role.UNRELATED, None, problem)


def _load(
    source: str, path: Path, relpath: str | None, role: Role | None, settle: Settle
) -> RawFile:
    try:
        data = read_settled(path, settle)
    except OSError as e:
        return _unreadable(source, relpath, role, e)
    if role is None:
        role = sniff_role(path.name, data)
    return RawFile(source, relpath, role, data)


def read_path(path: Path, settle: Settle = SETTLE) -> Iterator[RawFile]:
    """Read a file, or every file of a directory tree, as given on a command line.

    A directory that is a ConfigMap volume is read as the agent reads one (its keys, of the
    version in force), not as a tree of paths.
    """
    if path.is_dir():
        if (path / CONFIGMAP_DATA).is_symlink():
            yield from read_sources(path, settle=settle)[0]
            return
        yield from read_tree(path, settle=settle)
        return
    relpath = _anchored_relpath(path)
    role = role_of(relpath) if relpath else None
    role = None if role in (None, Role.UNRELATED) else role
    yield _load(str(path), path, relpath, role, settle)


def read_tree(
    root: Path,
    *,
    settle: Settle = SETTLE,
    on_listing_error: Callable[[OSError], None] | None = None,
    real_root: str | None = None,
) -> Iterator[RawFile]:
    """Read every file under ``root`` in path order, classified by its place in the tree.

    Files that are no metadata, hints or config-drive file come back with role UNRELATED and
    no data. ``root`` is resolved once (``real_root``, default its real path) and the walk
    reads there, naming files under ``root``: when ``root`` is a link swapped to a new bundle
    generation mid-walk, the walk still reads one generation. Symbolic links inside are
    followed only when they stay inside. A directory that cannot be listed (the root
    included) is skipped and passed to ``on_listing_error``; a directory where a metadata or
    hints file belongs is a problem on that path (never mistaken for the file's removal).
    """
    real = Path(real_root if real_root is not None else os.path.realpath(root))
    for directory, dirnames, filenames in os.walk(real, onerror=on_listing_error):
        dirnames.sort()
        here = Path(directory)
        for name in list(dirnames):  # a directory where a file belongs: an error, not a removal
            rel = (here / name).relative_to(real).as_posix()
            if (role := role_of(rel)) is not Role.UNRELATED:
                dirnames.remove(name)
                source = str(root / rel)
                problem = Problem("is a directory, not a file; not read", source)
                yield RawFile(source, rel, role, None, problem)
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(real).as_posix()
            source = str(root / rel)
            role = role_of(rel)
            relpath: str | None = rel
            if role is Role.UNRELATED and (anchored := _anchored_relpath(root / rel)):
                role, relpath = role_of(anchored), anchored
            if role is Role.UNRELATED:
                yield RawFile(source, relpath, role)
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(real):
                problem = Problem("symbolic link points outside the tree; not read", source)
                yield RawFile(source, relpath, role, None, problem)
                continue
            yield _load(source, path, relpath, role, settle)


SWAP_RETRIES = 5  # reads of a tree whose root link keeps moving before settling for the last


def read_sources(
    root: Path,
    hints: Path | None = None,
    config_drive: Path | None = None,
    *,
    settle: Settle = SETTLE,
) -> tuple[list[RawFile], bool]:
    """Read everything the agent reads: the tree under ``root``, the hints, the config drive.

    Returns:
        The files, and whether the listing is complete: False when a directory under ``root``
        could not be listed, so that a known file missing from the list may still exist. A
        missing ``root`` is a complete, empty listing; a missing hints or config-drive file is
        simply absent. A hints or config-drive file inside the tree is read once.

    A ``root`` that is a symbolic link (a bundle's ``current``) is resolved once per read,
    files under it (the hints included) are read through that resolution, and the read is
    redone when the link moved meanwhile: one result never mixes two generations. A root that
    is a ConfigMap volume is read as one (see the module docstring), the same way.
    """
    if (root / CONFIGMAP_DATA).is_symlink():
        link = root / CONFIGMAP_DATA
        for _ in range(SWAP_RETRIES):
            version = os.path.realpath(link)
            raws, complete = _read_configmap(root, Path(version), settle)
            if os.path.realpath(link) == version:
                break
        extra = [*_optional(hints, Role.GUEST_HINTS, settle)]
        extra += _optional(config_drive, Role.CONFIG_DRIVE, settle)
        return [*raws, *extra], complete
    for _ in range(SWAP_RETRIES):
        target = os.path.realpath(root)
        raws, complete = _read_once(root, target, hints, config_drive, settle)
        if os.path.realpath(root) == target:
            break
    return raws, complete


def _read_configmap(root: Path, version: Path, settle: Settle) -> tuple[list[RawFile], bool]:
    """The keys of one version of a ConfigMap volume; (files, listing complete)."""
    if version.parent != Path(os.path.realpath(root)):
        return [], False  # ..data points out of the volume: not kubelet's layout, nothing read
    try:
        names = sorted(e.name for e in os.scandir(version) if not e.name.startswith(".."))
    except OSError:
        return [], False
    raws = []
    for name in names[:CONFIGMAP_MAX_KEYS]:
        path = version / name
        if not path.is_symlink() and path.is_file():  # kubelet writes regular files only
            raws.append(_load(str(root / name), path, None, None, settle))
    return raws, True


def _optional(path: Path | None, role: Role, settle: Settle) -> list[RawFile]:
    """An optional file: read, unreadable (a problem), or absent (nothing)."""
    if path is None:
        return []
    try:
        return [RawFile(str(path), None, role, read_settled(path, settle))]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        return [_unreadable(str(path), None, role, e)]


def _read_once(
    root: Path, target: str, hints: Path | None, config_drive: Path | None, settle: Settle
) -> tuple[list[RawFile], bool]:
    failures: list[OSError] = []
    root_abs = os.path.normpath(root.absolute())

    def failed(error: OSError) -> None:
        if not (isinstance(error, FileNotFoundError) and error.filename == target):
            failures.append(error)

    def actual(path: str) -> str:
        """``path`` with the root replaced by the target it resolved to."""
        absolute = os.path.normpath(Path(path).absolute())
        if absolute == root_abs or absolute.startswith(root_abs + os.sep):
            absolute = target + absolute[len(root_abs) :]
        return os.path.realpath(absolute)

    raws = list(read_tree(root, settle=settle, on_listing_error=failed, real_root=target))
    for path, role in ((hints, Role.GUEST_HINTS), (config_drive, Role.CONFIG_DRIVE)):
        if path is None:
            continue
        where = actual(os.fspath(path))
        same = [r for r in raws if actual(r.source) == where]
        if any(r.role is role for r in same):
            continue  # read with the tree
        raws = [r for r in raws if r not in same]
        try:
            raws.append(RawFile(str(path), None, role, read_settled(Path(where), settle)))
        except (FileNotFoundError, NotADirectoryError):
            pass  # an optional file that is not there
        except OSError as e:
            raws.append(_unreadable(str(path), None, role, e))
    return raws, not failures
