"""Reading and watching metadata files: bounded reads, never following links out of the tree.

The I/O adapter for the metadata tree, the guest hints and the config drive; the only importer
of watchdog. It turns paths into ``RawFile`` values and knows nothing of the schema beyond the
tree layout. A file it cannot read is a ``Problem`` on that file and a directory it cannot list
makes the scan incomplete, so "could not read" is never mistaken for "no devices". A file that
looks torn is read again, briefly (``Settle``); keeping the last good content is the caller's
job (``kvdev.guest.sources``). ``Watcher`` only says "something may have changed".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from watchdog import events
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

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
    """Read a file, or every file of a directory tree, as given on a command line."""
    if path.is_dir():
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
) -> Iterator[RawFile]:
    """Read every file under ``root`` in path order, classified by its place in the tree.

    Files that are no metadata, hints or config-drive file come back with role UNRELATED and
    no data. Symbolic links are followed only when they stay inside ``root``. A directory that
    cannot be listed (``root`` included) is skipped and passed to ``on_listing_error``.
    """
    real_root = root.resolve()
    for directory, dirnames, filenames in os.walk(root, onerror=on_listing_error):
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
            yield _load(source, path, relpath, role, settle)


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
    """
    failures: list[OSError] = []

    def failed(error: OSError) -> None:
        if not (isinstance(error, FileNotFoundError) and error.filename == os.fspath(root)):
            failures.append(error)

    raws = list(read_tree(root, settle=settle, on_listing_error=failed))
    for path, role in ((hints, Role.GUEST_HINTS), (config_drive, Role.CONFIG_DRIVE)):
        if path is None:
            continue
        same = [r for r in raws if os.path.realpath(r.source) == os.path.realpath(path)]
        if any(r.role is role for r in same):
            continue  # read with the tree
        raws = [r for r in raws if r not in same]
        try:
            raws.append(RawFile(str(path), None, role, read_settled(path, settle)))
        except (FileNotFoundError, NotADirectoryError):
            pass  # an optional file that is not there
        except OSError as e:
            raws.append(_unreadable(str(path), None, role, e))
    return raws, not failures


# --------------------------------------------------------------------------- watching

# What can change what read_sources returns. Not opens or no-write closes: our own reads must
# not wake us. Not DirModifiedEvent: it doubles every event in a directory, for the directory
# itself (an ancestor of a target). Attribute changes have their own classes from watchdog 7.
_EVENTS: list[type[events.FileSystemEvent]] = [
    cls
    for name in (
        *("FileCreated", "FileMoved", "FileDeleted", "FileModified", "FileClosed", "FileAttrib"),
        *("DirCreated", "DirMoved", "DirDeleted", "DirAttrib"),
    )
    if isinstance(cls := getattr(events, f"{name}Event", None), type)
]
_Identity = tuple[int, int]  # st_dev, st_ino of a watched directory


class _Handler(events.FileSystemEventHandler):
    def __init__(self, wake: Callable[[events.FileSystemEvent], None]) -> None:
        self._wake = wake

    def on_any_event(self, event: events.FileSystemEvent) -> None:
        self._wake(event)


def _nearest_dir(path: Path) -> tuple[Path, _Identity]:
    """``path`` if it is a directory, else its nearest ancestor that is; and its identity."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            if stat.S_ISDIR((st := candidate.stat()).st_mode):
                return candidate, (st.st_dev, st.st_ino)
    return Path(path.anchor or "/"), (0, 0)  # not even "/" can be looked up


class Watcher:
    """Make a file descriptor readable when what ``read_sources`` reads may have changed.

    Watches ``root`` recursively and the directories of ``hints`` and ``config_drive`` for
    files and directories created, modified, closed after writing, moved, deleted or changed in
    their attributes. A target that does not exist yet is watched through its nearest existing
    ancestor. However many events arrive, the pipe behind ``fileno()`` holds at most one byte.

    Use it from one thread (the selector loop), as a context manager: register it with a
    selector; when readable, ``drain()`` and then ``read_sources`` again. ``drain()`` re-arms
    first (a target that has appeared or was replaced is then watched itself), so a read after
    it misses nothing. inotify says nothing when a watched directory is moved away and drops
    events when its queue overflows: drain and read on a timer too.
    """

    def __init__(
        self, root: Path, hints: Path | None = None, config_drive: Path | None = None
    ) -> None:
        self._root = Path(os.path.normpath(root.absolute()))
        self._files = [Path(os.path.normpath(p.absolute())) for p in (hints, config_drive) if p]
        self._handler = _Handler(self._on_event)
        self._observer: BaseObserver | None = None
        self._armed: dict[tuple[Path, bool], _Identity] = {}
        self._lock = threading.Lock()  # guards _pending and the pipe
        self._pending = 0
        self._pipe: tuple[int, int] | None = None
        self.error: OSError | None = None
        """Why arming a watch failed last time (None once it succeeds); retried by rearm()."""

    def __enter__(self) -> Self:
        self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._observer = Observer()
            self._observer.start()
            self.rearm()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def fileno(self) -> int:
        """The read end of the wake-up pipe: readable when something may have changed."""
        assert self._pipe is not None, "use Watcher as a context manager"
        return self._pipe[0]

    def drain(self) -> int:
        """Re-arm, empty the pipe, and return how many events arrived since the last drain."""
        self.rearm()
        with self._lock:
            with contextlib.suppress(BlockingIOError):
                while self._pipe and os.read(self._pipe[0], 64):
                    pass
            count, self._pending = self._pending, 0
        return count

    def rearm(self) -> bool:
        """Watch each target, or its nearest existing ancestor; True when the watches changed.

        A failure (inotify limits, a directory gone while armed) is kept in ``error`` and
        tried again on the next call.
        """
        for attempt in range(3):  # a directory may vanish while it is armed: look again
            wanted = self._wanted()
            if not (observer := self._observer) or (
                wanted == self._armed and all(e.is_alive() for e in observer.emitters)
            ):
                return attempt > 0
            observer.unschedule_all()
            self._armed = {}
            try:
                for path, recursive in wanted:
                    observer.schedule(
                        self._handler, path, recursive=recursive, event_filter=_EVENTS
                    )
            except OSError as e:
                self.error = e
            else:
                self._armed, self.error = wanted, None
        return True

    def close(self) -> None:
        """Stop watching and close the pipe; closing twice is harmless."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()  # also releases the inotify instance of an observer never started
            if observer.ident is not None:
                observer.join()
        self._armed.clear()
        with self._lock:
            pipe, self._pipe = self._pipe, None
        for fd in pipe or ():
            os.close(fd)

    def _wanted(self) -> dict[tuple[Path, bool], _Identity]:
        """(directory, recursive) -> identity of every watch the targets need now."""
        wanted: dict[tuple[Path, bool], _Identity] = {}
        for target, recursive in [(self._root, True), *((f.parent, False) for f in self._files)]:
            path, identity = _nearest_dir(target)
            wanted[path, recursive and path == target] = identity
        tops = [path for path, recursive in wanted if recursive]
        return {
            (path, recursive): identity
            for (path, recursive), identity in wanted.items()
            if recursive or not any(path.is_relative_to(top) for top in tops)
        }

    def _matters(self, path: Path, *, is_dir: bool) -> bool:
        """A target or its ancestor; under the root, a directory or a file kvdev reads.

        A writer's temporary file (``.x-metadata.json.tmp``) wakes nobody; the rename that
        puts it in place does.
        """
        if any(t.is_relative_to(path) for t in (Path(self._root), *map(Path, self._files))):
            return True
        if not path.is_relative_to(self._root):
            return False
        return is_dir or role_of(path.relative_to(self._root).as_posix()) is not Role.UNRELATED

    def _on_event(self, event: events.FileSystemEvent) -> None:
        """On watchdog's thread: count a relevant event; wake the loop once until drained."""
        paths = [Path(os.fsdecode(p)) for p in (event.src_path, event.dest_path) if p]
        if not any(self._matters(p, is_dir=event.is_directory) for p in paths):
            return
        with self._lock:
            self._pending += 1
            if self._pending == 1 and self._pipe:
                with contextlib.suppress(BlockingIOError):  # full: the loop is awake already
                    os.write(self._pipe[1], b"\x00")
