"""Polling the metadata tree where change notification cannot see the writer.

The bundle reaches the guest through a 9p or virtiofs shared folder, and inotify reports only
changes made through this kernel: a file the host writes into the shared directory raises no
event in the guest. So when the metadata root (or the hints or config-drive file) lies on such a
file system (``statfs`` ``f_type``: 9p, FUSE and so virtiofs, NFS, CIFS/SMB, Ceph, AFS ...),
the watcher also polls. A poll reads only cheap ``stat`` data: where the root resolves to (a
bundle's ``current`` link swapped to a new generation), and the inode, size, mode and
modification time of every directory and file under it, bounded in count. When that snapshot
differs from the last one, the poller wakes the loop, like an event; it never reads a file.

Owns: the file-system type check, the snapshot, the polling thread. Must not: parse files, or
decide anything beyond "something may have changed" (the loop stays level-triggered).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from kvdev.guest.adapters import walk
from kvdev.guest.adapters.resolve import real_path, real_path_or

log = logging.getLogger("kvdev.agent")

DEFAULT_INTERVAL: Final = 2.0  # seconds, on a file system without remote change notification
MAX_ENTRIES: Final = 4096  # a snapshot stats at most this many entries under the root

# statfs(2) f_type values of file systems whose changes by another machine (or by the host of a
# shared folder) inotify does not report; from <linux/magic.h>.
REMOTE_FILESYSTEMS: Final = {
    0x01021997: "9p",
    0x65735546: "fuse",  # virtiofs mounts as a FUSE file system
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x517B: "smb",
    0x00C36400: "ceph",
    0x5346414F: "afs",
    0x73757245: "coda",
    0x786F4256: "vboxsf",
}

_STATFS_BUFFER = 256  # larger than struct statfs on every Linux ABI; f_type is its first word
_libc: ctypes.CDLL | None = None


def _statfs_type(path: str) -> int | None:
    """``statfs(path).f_type``, or None when it cannot be asked."""
    global _libc  # noqa: PLW0603 - loaded once, on first use
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # the C library Python itself is linked to
    statfs = getattr(_libc, "statfs", None)
    buf = ctypes.create_string_buffer(_STATFS_BUFFER)
    if statfs is None or statfs(os.fsencode(path), buf) != 0:
        return None
    value = ctypes.c_long.from_buffer(buf).value
    return value & 0xFFFFFFFF


# Mount types (/proc/self/mountinfo) of the same file systems. statfs alone is not enough: on 9p
# (9p2000.L) the kernel reports the f_type the host's server sends, i.e. the host's own file
# system (ext4, xfs ...), never V9FS_MAGIC.
REMOTE_MOUNT_TYPES: Final = frozenset(
    {"9p", "virtiofs", "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "afs", "coda", "vboxsf"}
)
MOUNTINFO: Final = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    r"""A mountinfo path field, with its octal escapes (``\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mount_type(path: str, mountinfo: str) -> str | None:
    """The type of the mount ``path`` (absolute, resolved) lies on; the last, deepest one wins."""
    best, found = -1, None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, found = len(point), right.split()[0]
    return found


def remote_filesystem(path: Path) -> str | None:
    """The name of the remote file system ``path`` (or its nearest existing ancestor) is on."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            resolved = real_path_or(candidate, str(candidate.absolute()))
            try:
                kind = _mount_type(resolved, MOUNTINFO.read_text())
            except OSError:
                kind = None
            if kind is not None and (kind in REMOTE_MOUNT_TYPES or kind.startswith("fuse")):
                return kind
            magic = _statfs_type(resolved)
            return REMOTE_FILESYSTEMS.get(magic) if magic is not None else None
    return None


def effective_interval(setting: float | None, paths: Sequence[Path]) -> tuple[float, str | None]:
    """The poll interval to use, and the remote file system that made ``auto`` choose it.

    ``setting`` None is ``auto``: ``DEFAULT_INTERVAL`` when a path is on a remote file system,
    else 0 (off). A number is used as it is (0 = off).
    """
    if setting is not None:
        return setting, None
    for path in paths:
        if (fs := remote_filesystem(path)) is not None:
            return DEFAULT_INTERVAL, fs
    return 0.0, None


Snapshot = tuple[tuple[object, ...], ...]


def _stat_entry(name: str, path: Path, *, follow: bool) -> tuple[object, ...]:
    try:
        st = path.stat(follow_symlinks=follow)
    except OSError as e:
        return (name, "error", e.errno)
    return (name, st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _tree(walker: walk.Walk) -> Iterator[tuple[object, ...]]:
    """The stat entry of every directory and file the walk finds, in its order."""
    for found in walker:
        yield _stat_entry(found.rel, Path(found.path), follow=False)


def snapshot(root: Path, files: Sequence[Path] = ()) -> Snapshot:
    """Cheap stat data of what ``read_sources`` reads.

    The root's target, every entry under it (at most ``MAX_ENTRIES``, ``walk.MAX_DEPTH`` levels
    deep, walked without recursion, the upstream places first), and ``files`` (also when the
    tree was cut short).

    Raises:
        OSError: the root link keeps changing while it is resolved (``resolve.real_path``).
    """
    target = Path(real_path(root))
    walker = walk.Walk(str(target), walk.Bounds(entries=MAX_ENTRIES), first=walk.FIRST)
    tree = list(_tree(walker))
    cut = [("truncated",)] if walker.cut is not None else []
    extra = [_stat_entry(str(f), f, follow=True) for f in files]
    return (("root", str(target)), _stat_entry(".", target, follow=True), *tree, *cut, *extra)


class Poller:
    """A thread that calls ``wake()`` when ``take()`` returns something new, every ``interval``."""

    def __init__(
        self, take: Callable[[], object], interval: float, wake: Callable[[], None]
    ) -> None:
        self._take = take
        self._interval = interval
        self._wake = wake
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._taking = False  # in a snapshot, which a share that stopped answering blocks
        self.polls = 0
        """How many snapshots were taken (for tests and reports)."""

    @property
    def interval(self) -> float:
        """Seconds between snapshots."""
        return self._interval

    def start(self) -> None:
        """Take the first snapshot now, then poll on a daemon thread."""
        last = self._taken()
        self._thread = threading.Thread(
            target=self._run, args=(last,), name="kvdev-poll", daemon=True
        )
        self._thread.start()

    def _run(self, last: object) -> None:
        while not self._stop.wait(self._interval):
            now = self._taken()
            self.polls += 1
            if now != last:
                last = now
                self._wake()

    def _taken(self) -> object:
        self._taking = True
        try:
            return self._take()
        except OSError as e:  # the root vanished mid-walk, or its link keeps moving: "changed"
            log.debug("poll: %s", e)
            return ("error", e.errno)
        finally:
            self._taking = False

    def stop(self) -> None:
        """Stop polling; stopping twice is harmless.

        A thread blocked in a snapshot (a hung share) is not waited for: it is a daemon, and
        it ends when the share answers (it sees the stop then).
        """
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and not self._taking:
            with contextlib.suppress(RuntimeError):
                thread.join()
