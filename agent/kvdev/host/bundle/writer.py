"""Publishing a guest bundle into a directory, atomically as a whole.

Layout of the output directory ``OUT`` (shared into the VM; the agent's ``--metadata-root`` is
``OUT/current``)::

    OUT/current -> .gen-7        a relative symbolic link: the bundle readers see
    OUT/.gen-7/...               the files of generation 7, never changed once published
    OUT/.gen-6/...               the previous generation, kept for readers still inside it
    OUT/.lock                    serializes writers (flock)

Publishing generation N+1: write every file into ``.gen-<N+1>.partial`` (mode 0644, dirs
0755, each file and directory fsynced), rename it to ``.gen-<N+1>``, make a symbolic link at a
temporary name and rename it over ``current`` (rename(2) is atomic: a reader resolving
``current`` gets the old generation or the new one, whole), fsync ``OUT``, then remove every
generation but the new and the previous one. A crash leaves either the old bundle or the new
one in force, plus at worst a ``.partial`` directory that the next run removes. The same
content publishes nothing (no new generation). Directory numbers only grow.

Owns the directory layout and the I/O; the content comes from ``kvdev.host.bundle.build``.
Must not: interpret the files it writes.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kvdev._atomic import fsync_directory
from kvdev.errors import PermanentError, os_error
from kvdev.host import fs

CURRENT: Final = "current"
GEN_PREFIX: Final = ".gen-"
PARTIAL: Final = ".partial"
LOCK: Final = ".lock"


@dataclass(frozen=True, slots=True)
class Published:
    """What ``publish`` did: the root readers use, the generation directory, whether it changed."""

    root: Path
    directory: Path
    changed: bool
    removed: tuple[Path, ...] = ()


def _generation(name: str) -> int | None:
    digits = name.removeprefix(GEN_PREFIX).removesuffix(PARTIAL)
    if not name.startswith(GEN_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


def _check_relpath(relpath: str) -> None:
    parts = relpath.split("/")
    if relpath.startswith("/") or any(p in {"", ".", ".."} for p in parts):
        msg = f"bundle path {relpath!r} is not a plain relative path"
        raise PermanentError(msg)


def read_generation(directory: Path) -> dict[str, bytes]:
    """Every file of a published generation, by '/'-separated relative path."""
    out: dict[str, bytes] = {}
    for here, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in filenames:
            path = Path(here) / name
            out[path.relative_to(directory).as_posix()] = path.read_bytes()
    return out


def current(out: Path) -> tuple[Path | None, dict[str, bytes] | None]:
    """The generation directory ``OUT/current`` points to and its files (None, None if none).

    Raises:
        PermanentError: ``OUT/current`` exists but is no link to a generation of ``OUT``.
    """
    link = out / CURRENT
    try:
        target = str(link.readlink())
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno == errno.EINVAL:
            msg = f"{link}: exists and is not a symbolic link; not a bundle directory"
            raise PermanentError(msg) from e
        raise os_error(e, "read", link) from e
    if "/" in target or _generation(target) is None:
        msg = f"{link}: points to {target!r}, not to a {GEN_PREFIX}<N> directory beside it"
        raise PermanentError(msg)
    try:
        return out / target, read_generation(out / target)
    except OSError as e:
        raise os_error(e, "read", e.filename or out / target) from e


def _write_tree(directory: Path, files: Mapping[str, bytes]) -> None:
    directory.mkdir(mode=0o755)
    made = {directory}
    for relpath in sorted(files):
        path = directory / relpath
        for parent in reversed(path.relative_to(directory).parents[:-1]):
            if (d := directory / parent) not in made:
                d.mkdir(mode=0o755)
                made.add(d)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)
            view = memoryview(files[relpath])
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
        d.chmod(0o755)
        fsync_directory(d)


def _prune(out: Path, keep: set[str] | None) -> tuple[Path, ...]:
    """Remove generations not in ``keep`` and left-over partial ones (only those if None)."""
    removed = []
    for entry in sorted(p.name for p in out.iterdir()):
        if _generation(entry) is None:
            continue
        if entry.endswith(PARTIAL) or (keep is not None and entry not in keep):
            shutil.rmtree(out / entry)
            removed.append(out / entry)
    return tuple(removed)


def publish(
    out: Path, make: Callable[[Mapping[str, bytes] | None], Mapping[str, bytes]]
) -> Published:
    """Publish ``make(current files)`` as the new bundle in ``out``, unless it is unchanged.

    ``make`` runs under the writers' lock and gets the files now in force (None when there is
    no bundle yet), so that it can carry a generation counter forward.

    Raises:
        PermanentError: ``out`` is not a bundle directory, a path is not relative, or the file
            system refuses (read-only, permission, not a directory); the message names the path.
        RetryableError: the file system is full, or another failure that may pass
            (``kvdev.errors.RETRYABLE_ERRNOS``).
    """
    try:
        fs.mkdirs(out)
        with fs.locked(out / LOCK):
            return _publish_locked(out, make)
    except OSError as e:
        raise os_error(e, "publish into", e.filename or out) from e


def _publish_locked(
    out: Path, make: Callable[[Mapping[str, bytes] | None], Mapping[str, bytes]]
) -> Published:
    old_dir, old_files = current(out)
    files = make(old_files)
    for relpath in files:
        _check_relpath(relpath)
    keep = {old_dir.name} if old_dir is not None else set()
    if old_dir is not None and dict(files) == old_files:
        return Published(out / CURRENT, old_dir, changed=False, removed=_prune(out, None))
    numbers = [g for p in out.iterdir() if (g := _generation(p.name)) is not None]
    name = f"{GEN_PREFIX}{max(numbers, default=0) + 1}"
    partial = out / (name + PARTIAL)
    try:
        _write_tree(partial, files)
        partial.rename(out / name)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    fsync_directory(out)
    link = out / f".{CURRENT}.{os.getpid()}.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(name)
    try:
        link.replace(out / CURRENT)
    except BaseException:
        link.unlink(missing_ok=True)
        raise
    fsync_directory(out)
    removed = _prune(out, {*keep, name})
    return Published(out / CURRENT, out / name, changed=True, removed=removed)
