"""File-system steps of the host's writers: atomic writes, removal, directories, the lock.

Owns the modes (files 0644, directories 0755 whatever the umask), fsync of every directory
change and the flock protocol (a lock file that may be unlinked by its holder), for both host
writers: ``publish.writer`` (a claim's metadata files and CDI specs) and ``bundle.writer`` (a
guest bundle). Every ``OSError`` becomes a kvdev error through ``kvdev.errors.os_error``, the
one errno map of both halves, with the path in the message. It knows nothing of claims,
metadata or bundles.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from kvdev._atomic import fsync_directory, write_atomic
from kvdev.errors import PermanentError, os_error

FILE_MODE: Final = 0o644
DIR_MODE: Final = 0o755


def mkdirs(path: Path) -> None:
    """Create ``path`` and missing parents, each mode 0755 whatever the umask."""
    missing = []
    here = path
    while not here.is_dir() and here != here.parent:
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        except OSError as e:
            raise os_error(e, "create directory", directory) from e
        try:
            directory.chmod(DIR_MODE)
            fsync_directory(directory.parent)
        except OSError as e:
            raise os_error(e, "set up directory", directory) from e


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[Path]:
    """Hold an exclusive flock on ``lock`` (created in an existing or new 0755 directory).

    The holder may unlink the lock file before it lets go: a waiter that then gets the lock
    of the unlinked file sees that and starts over with a fresh one.
    """
    mkdirs(lock.parent)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        except OSError as e:
            raise os_error(e, "open lock file", lock) from e
        try:
            os.fchmod(fd, FILE_MODE)  # whatever the umask
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = lock.stat().st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not unlinked by an unprepare that held it before us
                yield lock
                return
        finally:
            os.close(fd)


def write(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically and durably with ``data``, mode 0644."""
    try:
        write_atomic(path, data, mode=FILE_MODE)
    except OSError as e:
        raise os_error(e, "write", path) from e


def rewrite(path: Path, data: bytes, pad: bytes = b" ") -> None:
    """Put ``data`` into the existing file ``path`` in place: the same inode, mode 0644.

    For a file a container sees through a single-file bind mount, which keeps the inode it was
    given: a replacing rename would never reach it. The space the new content needs is
    reserved first (``posix_fallocate``), so a full file system fails the call before a byte
    changes. When the new content is shorter, it is first written padded with ``pad`` bytes
    (JSON whitespace) to the old length, then the file is cut to the new length and fsynced:
    killed at any point, the file holds the old content or the new one (perhaps padded), never
    a mix, and never an empty file. Only a reader *during* the one write can see the new start
    followed by the old end; a reader that reads twice and gets the same bytes has a whole
    file. A missing file is created atomically (``write``).

    Raises:
        PermanentError: ``path`` is not a regular file, or the file system refuses.
        RetryableError: a failure that may pass (``kvdev.errors.RETRYABLE_ERRNOS``: ENOSPC ...).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        write(path, data)
        return
    except OSError as e:
        raise os_error(e, "rewrite", path) from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PermanentError(f"cannot rewrite {path}: not a regular file")
        padded = data + pad * max(0, info.st_size - len(data))
        if padded:
            os.posix_fallocate(fd, 0, len(padded))
        view, done = memoryview(padded), 0
        while done < len(padded):
            done += os.pwrite(fd, view[done:], done)
        os.ftruncate(fd, len(data))
        os.fchmod(fd, FILE_MODE)
        os.fsync(fd)
    except OSError as e:
        raise os_error(e, "rewrite", path) from e
    finally:
        os.close(fd)


def read(path: Path) -> bytes | None:
    """The bytes of ``path``, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise os_error(e, "read", path) from e


def remove(path: Path) -> bool:
    """Unlink ``path`` durably; False when it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno == errno.EROFS and not path.exists() and not path.is_symlink():
            return False  # a read-only file system says EROFS even for a missing file
        raise os_error(e, "remove", path) from e
    fsync_directory(path.parent)
    return True


def prune(directory: Path, stop: Path) -> None:
    """Remove ``directory`` and its parents up to (not including) ``stop`` while empty."""
    here = directory
    while here != stop and stop in here.parents:
        try:
            here.rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno in {errno.ENOTEMPTY, errno.EEXIST}:
                return
            raise os_error(e, "remove directory", here) from e
        here = here.parent


def remove_temps(target: Path) -> None:
    """Remove the temporary files a killed ``write(target)`` may have left (``.<name>.*.tmp``)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in target.parent.iterdir():
            if entry.name.startswith(f".{target.name}.") and entry.name.endswith(".tmp"):
                remove(entry)
