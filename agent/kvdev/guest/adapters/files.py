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

Each key is one stream. A key's role is its name's, never its content's: ``guest-hints.json`` is
the controller's GuestHints (the only key read as hints), ``kvdev-sources.json`` the sources
index (data, read by the reconciler), every other key a KEP-5304 DeviceMetadata stream
(``stream_key``: a GuestHints object in it is an error on that key, as a stream key may hold a
driver's bytes relayed from the node). A stream's claim, request and driver come from its
content, not the key's name. ``..data`` is resolved
once per read and every key read from that version (again when it moved meanwhile), so one
result never mixes two versions; only regular files directly in that version's directory
count, at most ``CONFIGMAP_MAX_KEYS`` of them (the first by name; more is a cut, reported as
one, and an incomplete listing, so no key known before is taken for removed), within the same
read budget as a tree. A version's files never change (kubelet writes a new version and swaps
``..data``), so a key is read once, never again because it looks torn: the volume settles as a
whole, by reading it again when ``..data`` moved during the read.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kvdev import _confined
from kvdev._confined import RefusedError, TooLargeError
from kvdev._records import compared
from kvdev.errors import Problem, Severity
from kvdev.guest.adapters import walk
from kvdev.guest.adapters.resolve import real_path, real_path_or
from kvdev.guest.adapters.watch import Watcher
from kvdev.guest.core.observed import RawFile
from kvdev.schema import sniff_role
from kvdev.schema.origins import SOURCES_KEY
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import (
    CONFIGMAP_MAX_KEYS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    Role,
    configmap_role,
    role_of,
)

_ANCHORS = (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)
CONFIGMAP_DATA = "..data"  # kubelet's link to the version of a ConfigMap volume in force
__all__ = [
    "SETTLE",
    "Budget",
    "RawFile",
    "Settle",
    "Watcher",
    "is_configmap_volume",
    "read_path",
    "read_sources",
    "read_tree",
]


MAX_PASS_BYTES: Final = 16 * MAX_STREAM_BYTES  # read per pass over every file, re-reads included


class Budget:
    """How many more bytes one read of the sources may take (``MAX_PASS_BYTES`` in all)."""

    def __init__(self, limit: int = MAX_PASS_BYTES) -> None:
        self.limit, self.left = limit, limit
        self.refused = 0
        """Files not read because the budget was spent."""


def read_bounded(path: Path, limit: int = MAX_STREAM_BYTES, budget: Budget | None = None) -> bytes:
    """Read a regular file of at most ``limit`` bytes, through ``kvdev._confined.read_path``.

    Only a regular file is opened (a device, a FIFO or a socket is looked at, never opened). The
    bytes read are taken from ``budget`` when one is given; a file larger than what is left of
    it is not read at all.

    Raises:
        OSError: the file cannot be opened or read, is not a regular file, or is past the
            budget (its strerror says why, in the confined reader's words).
    """
    room = limit if budget is None else min(limit, budget.left)
    try:
        data = _confined.read_path(path, room)
    except TooLargeError as e:
        if budget is not None and room < limit:
            budget.refused += 1
            raise OSError(errno.ENOBUFS, "not read: this pass's read budget is spent") from e
        raise OSError(errno.EFBIG, f"larger than {limit} bytes") from e
    except RefusedError as e:
        raise OSError(errno.EINVAL, e.reason) from e
    if budget is not None:
        budget.left = max(0, budget.left - len(data))
    return data


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
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


def read_settled(path: Path, settle: Settle = SETTLE, budget: Budget | None = None) -> bytes:
    """Read a file whole, again while it looks torn (as ``settle`` says); return the last read.

    A read looks torn when its bytes are no complete JSON stream, or when the file's device,
    inode, size or modification time differ before and after it.

    Raises:
        OSError: as ``read_bounded``, or the file cannot be looked up.
    """
    rereads = 0
    while True:
        before = _identity(path)
        data = read_bounded(path, budget=budget)
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
    source: str, path: Path, relpath: str | None, role: Role | None, settle: Settle, budget: Budget
) -> RawFile:
    try:
        data = read_settled(path, settle, budget)
    except OSError as e:
        return _unreadable(source, relpath, role, e)
    if role is None:
        role = sniff_role(path.name, data)
    return RawFile(source, relpath, role, data)


def read_path(path: Path, settle: Settle = SETTLE) -> Iterator[RawFile]:
    """Read a file, or every file of a directory tree, as given on a command line.

    What the walk's bounds left out of a tree comes last, as unrelated entries on the tree's
    path whose problem says so: an error when files went unread (``kvdev metadata validate``
    then finds the tree invalid), a warning when only directories deeper than any file kvdev
    reads were left out.

    A directory that is a ConfigMap volume is read as the agent reads one (its keys, of the
    version in force), not as a tree of paths.
    """
    if path.is_dir():
        limits: list[Problem] = []
        if (path / CONFIGMAP_DATA).is_symlink():
            yield from read_sources(path, settle=settle, on_limit=limits.append)[0]
        else:
            yield from read_tree(path, settle=settle, on_limit=limits.append)
        for problem in limits:
            yield RawFile(str(path), None, Role.UNRELATED, None, problem)
        return
    relpath = _anchored_relpath(path)
    role = role_of(relpath) if relpath else None
    role = None if role in (None, Role.UNRELATED) else role
    yield _load(str(path), path, relpath, role, settle, Budget())


def read_tree(
    root: Path,
    *,
    settle: Settle = SETTLE,
    on_listing_error: Callable[[OSError], None] | None = None,
    real_root: str | None = None,
    bounds: walk.Bounds = walk.Bounds(),  # noqa: B008 - frozen: one shared default is safe
    on_limit: Callable[[Problem], None] | None = None,
    budget: Budget | None = None,
) -> Iterator[RawFile]:
    """Read every file under ``root``, classified by its place in the tree.

    Files that are no metadata, hints or config-drive file come back with role UNRELATED and
    no data. ``root`` is resolved once (``real_root``, default its real path) and the walk
    reads there, naming files under ``root``: when ``root`` is a link swapped to a new bundle
    generation mid-walk, the walk still reads one generation. Symbolic links inside are
    followed only when they stay inside. A directory that cannot be listed (the root
    included) is skipped and passed to ``on_listing_error``; a directory where a metadata or
    hints file belongs is a problem on that path (never mistaken for the file's removal).

    The walk is iterative and bounded (``walk.Bounds``: depth, entries, time), the upstream
    places (``resourceclaims``, ``resourceclaimtemplates``, ``kvdev``) first; what it left out
    is passed to ``on_limit`` as a problem on ``root`` (an error when files went unread, a
    warning for directories deeper than any file kvdev reads), and an entry or time cut is also
    a listing error (the listing is then incomplete). The bytes read are taken from ``budget``:
    a file past it is a problem on that file (its last good content stays in force).
    """
    real = real_root if real_root is not None else real_path_or(root, str(Path(root).absolute()))
    budget = budget if budget is not None else Budget()
    place = _Place(root, real)

    def prune(found: walk.Found) -> bool:  # a directory where a file belongs: not entered
        return role_of(found.rel) is not Role.UNRELATED

    tree = walk.Walk(real, bounds, first=walk.FIRST, prune=prune, on_error=on_listing_error)
    for found in tree:
        raw = place.classify(found)
        if raw is None:
            continue
        if raw.role is Role.UNRELATED or raw.problem is not None:
            yield raw
        else:
            yield _load(raw.source, Path(found.path), raw.relpath, raw.role, settle, budget)
    if tree.cut is not None and on_listing_error is not None:
        on_listing_error(OSError(errno.E2BIG, f"walk stopped: {tree.cut}", real))
    limits = [
        Problem(message, str(root), severity=Severity.ERROR if unread else Severity.WARNING)
        for message, unread in walk.describe_cut(tree, f"metadata tree {root}")
    ]
    if budget.refused:
        message = (
            f"metadata tree {root}: {budget.refused} file(s) not read: this pass read "
            f"{budget.limit} bytes already; their last good content stays in force"
        )
        limits.append(Problem(message, str(root)))
    if on_limit is not None:
        for problem in limits:
            on_limit(problem)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _Place:
    """Where a walk's entries are named (``base``) and read (``real``)."""

    base: Path
    real: str

    def classify(self, found: walk.Found) -> RawFile | None:
        """The entry's role and relpath, as a RawFile without data (None: not a file of note).

        A problem is set when the entry cannot be read as what its place says it is.
        """
        rel, source = found.rel, str(self.base / found.rel)
        role = role_of(rel)
        if found.is_dir:
            if role is Role.UNRELATED:
                return None
            return RawFile(
                source, rel, role, None, Problem("is a directory, not a file; not read", source)
            )
        relpath: str | None = rel
        if role is Role.UNRELATED and any(a in source for a in _ANCHORS):
            anchored = _anchored_relpath(Path(source))
            if anchored:
                role, relpath = role_of(anchored), anchored
        if role is not Role.UNRELATED and found.is_symlink:
            try:
                inside = _inside(real_path(found.path), self.real)
            except OSError:
                problem = Problem("symbolic link kept changing while read; not read", source)
                return RawFile(source, relpath, role, None, problem)
            if not inside:
                problem = Problem("symbolic link points outside the tree; not read", source)
                return RawFile(source, relpath, role, None, problem)
        return RawFile(source, relpath, role)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


SWAP_RETRIES = 5  # reads of a tree whose root link keeps moving before settling for the last


def read_sources(  # noqa: PLR0913 - keyword-only options past the three paths
    root: Path,
    hints: Path | None = None,
    config_drive: Path | None = None,
    *,
    settle: Settle = SETTLE,
    bounds: walk.Bounds = walk.Bounds(),  # noqa: B008 - frozen: one shared default is safe
    on_limit: Callable[[Problem], None] | None = None,
    root_expected: bool = False,
    on_unavailable: Callable[[str], None] | None = None,
) -> tuple[list[RawFile], bool]:
    """Read everything the agent reads: the tree under ``root``, the hints, the config drive.

    What one read costs is bounded: the walk by ``bounds``, the bytes read by ``Budget``;
    ``on_limit`` hears what a bound left out (see ``read_tree``), once per read.

    Returns:
        The files, and whether the listing is complete: False when a directory under ``root``
        could not be listed, so that a known file missing from the list may still exist. A
        missing ``root`` is a complete, empty listing; a missing hints or config-drive file is
        simply absent. A hints or config-drive file inside the tree is read once.

    A ``root`` that is a symbolic link (a bundle's ``current``) is resolved once per read,
    files under it (the hints included) are read through that resolution, and the read is
    redone when the link moved meanwhile: one result never mixes two generations. A root that
    is a ConfigMap volume is read as one (see the module docstring), the same way.

    A root link that vanishes or changes type while it is resolved is resolved again
    (``resolve.real_path``); one that keeps changing, and a root that is missing when
    ``root_expected`` (the caller holds content read from it: a link being re-pointed by
    ``rm; ln -s`` is missing for a moment), is no read at all: an incomplete, empty listing, so
    the last good content stays in force, and ``on_unavailable`` hears why.
    """
    unavailable = on_unavailable or (lambda _why: None)
    try:
        if (root / CONFIGMAP_DATA).is_symlink():
            return _read_configmap_volume(root, hints, config_drive, settle, on_limit)
        for _ in range(SWAP_RETRIES):
            target = real_path(root)
            if root_expected and not Path(target).is_dir():
                unavailable(f"metadata root {root} is missing now; the last good state stays")
                return [], False
            limits: list[Problem] = []
            how = _How(settle, bounds, limits.append)
            raws, complete = _read_once(root, target, hints, config_drive, how)
            if real_path(root) == target:
                break
    except OSError as e:  # the root link keeps changing under us
        unavailable(f"metadata root {root} cannot be resolved now ({e}); the last good state stays")
        return [], False
    if on_limit is not None:
        for message in limits:
            on_limit(message)
    return raws, complete


def _read_configmap_volume(
    root: Path,
    hints: Path | None,
    config_drive: Path | None,
    settle: Settle,
    on_limit: Callable[[Problem], None] | None,
) -> tuple[list[RawFile], bool]:
    """``read_sources`` of a ConfigMap volume: the keys of the version in force, then the rest."""
    link = root / CONFIGMAP_DATA
    for _ in range(SWAP_RETRIES):
        budget = Budget()
        version = real_path(link)
        raws, complete, keys = _read_configmap(root, Path(version), budget)
        if real_path(link) == version:
            break
    raws += _optional(hints, Role.GUEST_HINTS, settle, budget)
    raws += _optional(config_drive, Role.CONFIG_DRIVE, settle, budget)
    limits = []
    if keys > CONFIGMAP_MAX_KEYS:
        limits.append(
            Problem(
                f"ConfigMap volume {root}: {keys} keys, only the first {CONFIGMAP_MAX_KEYS} by "
                f"name are read; the last good content of the others stays in force",
                str(root),
            )
        )
    if budget.refused:
        limits.append(
            Problem(
                f"ConfigMap volume {root}: {budget.refused} file(s) not read: this pass read "
                f"{budget.limit} bytes already; their last good content stays in force",
                str(root),
            )
        )
    if on_limit is not None:
        for problem in limits:
            on_limit(problem)
    return raws, complete


_ONCE = Settle(rereads=0)  # a ConfigMap version never changes: each key is read once


def is_configmap_volume(root: Path) -> bool:
    """``root`` is a ConfigMap volume (kubelet's ``..data`` link is there)."""
    return (root / CONFIGMAP_DATA).is_symlink()


def _read_configmap(root: Path, version: Path, budget: Budget) -> tuple[list[RawFile], bool, int]:
    """The keys of one version of a ConfigMap volume; (files, listing complete, keys there)."""
    if version.parent != Path(real_path(root)):
        return [], False, 0  # ..data points out of the volume: not kubelet's layout, none read
    try:
        names = sorted(e.name for e in os.scandir(version) if not e.name.startswith(".."))
    except OSError:
        return [], False, 0
    raws = []
    for name in names[:CONFIGMAP_MAX_KEYS]:
        path = version / name
        role = Role.UNRELATED if name == SOURCES_KEY else configmap_role(name)  # index: data
        if not path.is_symlink() and path.is_file():  # kubelet writes regular files only
            raw = _load(str(root / name), path, None, role, _ONCE, budget)
            stream = role is Role.DEVICE_METADATA
            raws.append(dataclasses.replace(raw, stream_key=True) if stream else raw)
    return raws, len(names) <= CONFIGMAP_MAX_KEYS, len(names)


def _optional(path: Path | None, role: Role, settle: Settle, budget: Budget) -> list[RawFile]:
    """An optional file: read, unreadable (a problem), or absent (nothing)."""
    if path is None:
        return []
    try:
        return [RawFile(str(path), None, role, read_settled(path, settle, budget))]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        return [_unreadable(str(path), None, role, e)]


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _How:
    settle: Settle
    bounds: walk.Bounds
    on_limit: Callable[[Problem], None]


def _read_once(
    root: Path, target: str, hints: Path | None, config_drive: Path | None, how: _How
) -> tuple[list[RawFile], bool]:
    failures: list[OSError] = []
    budget = Budget()
    root_abs = os.path.normpath(root.absolute())

    def failed(error: OSError) -> None:
        if not (isinstance(error, FileNotFoundError) and error.filename == target):
            failures.append(error)

    def actual(path: str) -> str:
        """``path`` with the root replaced by the target it resolved to."""
        absolute = os.path.normpath(Path(path).absolute())
        if absolute == root_abs or absolute.startswith(root_abs + os.sep):
            absolute = target + absolute[len(root_abs) :]
        return real_path_or(absolute, absolute)

    raws = list(
        read_tree(
            root,
            settle=how.settle,
            on_listing_error=failed,
            real_root=target,
            bounds=how.bounds,
            on_limit=how.on_limit,
            budget=budget,
        )
    )
    for path, role in ((hints, Role.GUEST_HINTS), (config_drive, Role.CONFIG_DRIVE)):
        if path is None:
            continue
        where = actual(os.fspath(path))
        # Resolved only where it can be the same file: read by the tree, or of the same name
        # (a realpath per unrelated entry would cost more than the walk).
        names = {where.rpartition("/")[2], path.name}
        same = [
            r
            for r in raws
            if (r.role is not Role.UNRELATED or r.source.rpartition("/")[2] in names)
            and actual(r.source) == where
        ]
        if any(r.role is role for r in same):
            continue  # read with the tree
        raws = [r for r in raws if r not in same]
        try:
            data = read_settled(Path(where), how.settle, budget)
            raws.append(RawFile(str(path), None, role, data))
        except (FileNotFoundError, NotADirectoryError):
            pass  # an optional file that is not there
        except OSError as e:
            raws.append(_unreadable(str(path), None, role, e))
    return raws, not failures
