"""Watching what the agent reads: a file descriptor that is readable when it may have changed.

The only importer of watchdog (inotify). It watches the metadata root recursively, the root's
parent (a bundle's ``current`` link swapped to a new generation is a rename there), and the
directories of the hints and config-drive files. Where inotify cannot see the writer (a 9p or
virtiofs shared folder written by the host, NFS, ...), it also polls cheap stat data
(``kvdev.guest.adapters.fspoll``). Either way it only says "something may have changed": the loop
re-reads everything (level-triggered).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import stat
import sys
import threading
import types
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Final, Self

from kvdev.guest.adapters import fspoll, walk
from kvdev.schema.tree import Role, role_of


class _OnUse(types.ModuleType):
    """A module's stand-in in ``sys.modules`` that imports the module when first used."""

    def __getattr__(self, attr: str) -> object:  # only for what the stand-in does not have
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        module = importlib.import_module(name)  # binds it on its parent package too
        return getattr(module, attr)


def _deferred(name: str) -> None:
    """Import module ``name`` only when one of its attributes is first used.

    watchdog's inotify module imports ``ctypes.util`` and uses none of it (it loads libc with
    ``CDLL(None)``); ``ctypes.util`` imports ``subprocess``: ~5 ms of every start, before READY=1.
    (``importlib.util.LazyLoader`` would not do: the import statement itself reads the module's
    ``__spec__``, which loads it.)
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)  # imports the parent package
    if spec is None:
        return
    stand_in = _OnUse(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, stand_in)  # as an import binds it


_deferred("ctypes.util")

from watchdog import events  # noqa: E402 - after _deferred
from watchdog.observers import Observer  # noqa: E402
from watchdog.observers.api import BaseObserver  # noqa: E402

log = logging.getLogger("kvdev.agent")


def _not_the_stop_race(record: logging.LogRecord) -> bool:
    """Drop watchdog's "queue_events() called when the thread is inactive" error.

    watchdog logs it when a watch is unscheduled while its thread has just read an event: a
    benign race that ``rearm`` meets on every bundle swap. Nothing is lost: the pass that
    follows a re-arm reads everything again.
    """
    return "called when the thread is inactive" not in record.getMessage()


logging.getLogger("watchdog.observers.inotify").addFilter(_not_the_stop_race)

_LIVE: weakref.WeakSet[Watcher] = weakref.WeakSet()  # watchers to tell when watchdog breaks
_WATCHDOG_DIR = os.path.dirname(events.__file__) + os.sep  # noqa: PTH120 - a prefix, as text
_next_hook = threading.excepthook


def _on_thread_death(args: threading.ExceptHookArgs) -> None:
    """A watchdog thread died: log one line, and have every watcher rebuild its watches.

    watchdog walks a directory that appears under a recursive watch with ``os.walk``, which
    recurses on Python 3.11: a tree ~1,000 levels deep moved in kills its thread (and with it
    every watch). The next ``rearm`` builds a new observer and sizes the tree up again.
    """
    tb = args.exc_traceback
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    if not any(f.startswith(_WATCHDOG_DIR) for f in files):
        _next_hook(args)
        return
    log.warning("watching failed (%s: %s); watching again", args.exc_type.__name__, args.exc_value)
    for watcher in list(_LIVE):
        watcher.broken(f"{args.exc_type.__name__}: {args.exc_value}")


threading.excepthook = _on_thread_death
RECHECK_DIR_EVENTS: Final = 64  # directories appearing between two drains: size the tree up again

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


_EVENT_TYPES = tuple(_EVENTS)
# watchdog >= 2.3 filters by event class where it reads inotify (schedule's event_filter);
# older ones (Debian 12's 2.2) deliver every class, which _Handler drops instead.
_SCHEDULE_FILTERS: Final = "event_filter" in BaseObserver.schedule.__code__.co_varnames


class _Handler(events.FileSystemEventHandler):
    def __init__(self, wake: Callable[[events.FileSystemEvent], None]) -> None:
        self._wake = wake

    def on_any_event(self, event: events.FileSystemEvent) -> None:
        if isinstance(event, _EVENT_TYPES):
            self._wake(event)


def _nearest_dir(path: Path) -> tuple[Path, _Identity]:
    """``path`` if it is a directory, else its nearest ancestor that is; and its identity."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            if stat.S_ISDIR((st := candidate.stat()).st_mode):
                return candidate, (st.st_dev, st.st_ino)
    return Path(path.anchor or "/"), (0, 0)  # not even "/" can be looked up


WATCH_BOUNDS: Final = walk.Bounds(entries=fspoll.MAX_ENTRIES)  # a tree watched recursively
MAX_WATCH_DIRS: Final = 1024  # directories (inotify watches) of a tree watched recursively


def _too_big(path: Path) -> str | None:
    """Why the tree at ``path`` is too big to watch recursively; None when it is not."""
    tree = walk.Walk(str(path), WATCH_BOUNDS)
    directories = 0
    for found in tree:
        directories += found.is_dir and not found.is_symlink
        if directories > MAX_WATCH_DIRS:
            return f"more than {MAX_WATCH_DIRS} directories"
    if tree.cut is not None:
        return tree.cut
    return f"deeper than {WATCH_BOUNDS.depth} levels" if tree.deep is not None else None


class Watcher:
    """Make a file descriptor readable when what ``read_sources`` reads may have changed.

    Watches ``root`` recursively, its parent, and the directories of ``hints`` and
    ``config_drive`` for files and directories created, modified, closed after writing, moved,
    deleted or changed in their attributes. A target that does not exist yet is watched through
    its nearest existing ancestor. ``deferred``: only ``rearm`` touches the targets (never
    ``__enter__`` or ``drain``), so that a caller can run it where a share that stopped
    answering blocks no one (``deadline.Deadline``). A ``root`` that is a symbolic link is
    watched where it points; the rename that swaps it (in the parent) wakes the loop, and the
    next ``drain()`` re-arms on the new target. ``poll``: seconds between stat polls (0 =
    never, None = ``auto``: poll every ``fspoll.DEFAULT_INTERVAL`` when a target is on a file
    system inotify cannot see remote writers on; decided again whenever the watches change).
    However many events arrive, the pipe behind ``fileno()`` holds at most one byte.

    Use it from one thread (the selector loop; deferred, ``rearm`` from one other thread and
    the rest from the loop's), as a context manager: register it with a
    selector; when readable, ``drain()`` and then ``read_sources`` again. ``drain()`` re-arms
    first (a target that has appeared or was replaced is then watched itself), so a read after
    it misses nothing. inotify says nothing when a watched directory is moved away and drops
    events when its queue overflows: drain and read on a timer too.
    """

    def __init__(
        self,
        root: Path,
        hints: Path | None = None,
        config_drive: Path | None = None,
        *,
        poll: float | None = 0.0,
        deferred: bool = False,
    ) -> None:
        self._root = Path(os.path.normpath(root.absolute()))
        self._deferred = deferred
        self._poll_setting = poll
        self._poller: fspoll.Poller | None = None
        self._files = [Path(os.path.normpath(p.absolute())) for p in (hints, config_drive) if p]
        self._handler = _Handler(self._on_event)
        self._observer: BaseObserver | None = None
        self._armed: dict[tuple[Path, bool], _Identity] = {}
        self._requested: dict[tuple[Path, bool], _Identity] = {}  # what _wanted() said then
        self._lock = threading.Lock()  # guards _pending and the pipe
        self._pending = 0
        self._pipe: tuple[int, int] | None = None
        self.error: OSError | None = None
        """Why arming a watch failed last time (None once it succeeds); retried by rearm()."""
        self.degraded: str | None = None
        """Why the tree is polled instead of watched whole (None when it is watched)."""
        self._broken: str | None = None  # a watchdog thread died: rebuild the observer
        self._dir_events = 0  # directories that appeared since the tree was last sized up

    def __enter__(self) -> Self:
        self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        _LIVE.add(self)
        try:
            self._observer = Observer()
            self._observer.start()
            if not self._deferred:
                self.rearm()  # arming the first watches also starts the poller when one is due
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
        """Re-arm, empty the pipe, and return how many events arrived since the last drain.

        Deferred, it does not re-arm: the caller's next ``rearm`` (before its read) does.
        """
        if not self._deferred:
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
        tried again on the next call. A tree too big to watch recursively (``WATCH_BOUNDS``,
        ``MAX_WATCH_DIRS``: each directory costs an inotify watch, and watchdog walks a new
        subtree recursively) is watched at its top only and polled (``degraded`` says why);
        that verdict is looked at again on every call while it holds.
        """
        self._rebuild_if_broken()
        for attempt in range(3):  # a directory may vanish while it is armed: look again
            wanted = self._wanted()
            observer = self._observer
            alive = observer is not None and all(e.is_alive() for e in observer.emitters)
            recheck = self.degraded is not None or self._dir_events >= RECHECK_DIR_EVENTS
            if observer is None or (wanted == self._requested and alive and not recheck):
                return attempt > 0
            self._dir_events = 0
            plan, degraded = self._fitted(wanted)
            if plan == self._armed and alive and degraded == self.degraded:
                self._requested = wanted
                return attempt > 0
            observer.unschedule_all()
            self._armed = {}
            try:
                for path, recursive in plan:
                    if _SCHEDULE_FILTERS:
                        observer.schedule(
                            self._handler, path, recursive=recursive, event_filter=_EVENTS
                        )
                    else:
                        observer.schedule(self._handler, path, recursive=recursive)
            except (OSError, RecursionError) as e:  # limits hit, or a tree deeper than we saw
                self.error = e if isinstance(e, OSError) else OSError(str(e))
                degraded = degraded or f"watching {self._root} failed: {e}"
            else:
                self._armed, self._requested, self.error = plan, wanted, None
            self.degraded = degraded
            self._repoll()
        return True

    def _fitted(
        self, wanted: dict[tuple[Path, bool], _Identity]
    ) -> tuple[dict[tuple[Path, bool], _Identity], str | None]:
        """``wanted`` with each recursive watch of a tree too big for one made flat, and why."""
        plan: dict[tuple[Path, bool], _Identity] = {}
        why = None
        for (path, recursive), identity in wanted.items():
            big = _too_big(path) if recursive else None
            if big is not None:
                why = f"{path} is too big to watch ({big}): polled every {self._degraded_poll:g} s"
            plan[path, recursive and big is None] = identity
        return plan, why

    @property
    def _degraded_poll(self) -> float:
        return self._poll_setting or fspoll.DEFAULT_INTERVAL

    def broken(self, why: str) -> None:
        """Say (from any thread) that watchdog failed: the next ``rearm`` watches anew."""
        self._broken = why
        self._poke()

    def _rebuild_if_broken(self) -> None:
        if self._broken is None or self._observer is None:
            return
        old, self._observer = self._observer, Observer()
        self._broken, self._armed, self._requested = None, {}, {}
        with contextlib.suppress(Exception):  # its threads may be dead or dying already
            old.unschedule_all()
            old.stop()
        self._observer.start()

    @property
    def poll_interval(self) -> float:
        """Seconds between polls now (0: not polling)."""
        return self._poller.interval if self._poller is not None else 0.0

    def _repoll(self) -> None:
        """Start, stop or re-time the poller for the setting and where the targets are now."""
        if self._observer is None:
            return
        files = tuple(self._files)
        interval, fs = fspoll.effective_interval(self._poll_setting, (self._root, *files))
        if self.degraded is not None:  # polled whatever the setting: the watches miss changes
            interval, fs = self._degraded_poll, None
            log.warning("%s", self.degraded)
        if interval == self.poll_interval:
            return
        if self._poller is not None:
            self._poller.stop()
            self._poller = None
        if interval > 0:
            if fs is not None:
                log.info("%s is on %s: polling it every %g s", self._root, fs, interval)
            self._poller = fspoll.Poller(
                lambda: fspoll.snapshot(self._root, files), interval, self._poke
            )
            self._poller.start()

    def close(self) -> None:
        """Stop watching and polling and close the pipe; closing twice is harmless."""
        _LIVE.discard(self)
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.stop()
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()  # also releases the inotify instance of an observer never started
            if observer.ident is not None:
                observer.join()
        self._armed.clear()
        self._requested.clear()
        with self._lock:
            pipe, self._pipe = self._pipe, None
        for fd in pipe or ():
            os.close(fd)

    def _wanted(self) -> dict[tuple[Path, bool], _Identity]:
        """(directory, recursive) -> identity of every watch the targets need now."""
        wanted: dict[tuple[Path, bool], _Identity] = {}
        targets = [(self._root, True), (self._root.parent, False)]
        for target, recursive in [*targets, *((f.parent, False) for f in self._files)]:
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
        if any(t.is_relative_to(path) for t in (self._root, *self._files)):
            return True
        if not path.is_relative_to(self._root):
            return False
        return is_dir or role_of(path.relative_to(self._root).as_posix()) is not Role.UNRELATED

    def _on_event(self, event: events.FileSystemEvent) -> None:
        """On watchdog's thread: count a relevant event; wake the loop once until drained."""
        if event.is_directory and event.event_type in {"created", "moved"}:
            self._dir_events += 1
        # watchdog < 4 gives only moves a dest_path
        paths = [
            Path(os.fsdecode(p)) for p in (event.src_path, getattr(event, "dest_path", "")) if p
        ]
        if any(self._matters(p, is_dir=event.is_directory) for p in paths):
            self._poke()

    def wake(self) -> None:
        """Make ``fileno()`` readable, as an event would (from any thread)."""
        self._poke()

    def _poke(self) -> None:
        """Count a change; wake the loop once until drained (from any thread)."""
        with self._lock:
            self._pending += 1
            if self._pending == 1 and self._pipe:
                with contextlib.suppress(BlockingIOError):  # full: the loop is awake already
                    os.write(self._pipe[1], b"\x00")
