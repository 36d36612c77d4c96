"""Walking a directory tree iteratively, within bounds: depth, entries and time.

Owns the order of a walk (each directory's entries sorted by name; chosen top-level names
first), its bounds (``Bounds``) and the record of why it stopped early (``Walk.cut``) or left
directories out (``Walk.deep``). Every reader of the metadata tree walks through it: the files
adapter, the stat poller and the watcher's size check, so that no tree, however deep or wide,
costs more than the bounds allow, and no walk ever recurses (Python 3.11's ``os.walk`` does, and
a tree 1,000 levels deep exhausted the interpreter's stack).

Must not: read files, decide what they are, or follow a symbolic link to a directory (a link
is reported, never entered, as ``os.walk`` does by default).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.schema.tree import HINTS_PATH, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS

# The root's subdirectories where upstream and kvdev put what the agent reads: walked first.
FIRST: Final = (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES, HINTS_PATH.split("/", 1)[0])
MAX_DEPTH: Final = 16  # directory levels below the root; the upstream layout needs 3
MAX_ENTRIES: Final = 10_000  # directory entries listed per walk
MAX_SECONDS: Final = 10.0  # a backstop for file systems that answer slowly (9p, NFS)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Bounds:
    """How far one walk may go: directory levels below the root, entries listed, seconds."""

    depth: int = MAX_DEPTH
    entries: int = MAX_ENTRIES
    seconds: float = MAX_SECONDS


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Found:
    """One directory entry: its path relative to the root ('/'-separated) and its kind."""

    rel: str
    path: str
    is_dir: bool  # a directory, or a symbolic link to one
    is_symlink: bool
    depth: int  # 1 for the root's own entries


def _kind(entry: os.DirEntry[str]) -> tuple[bool, bool]:
    try:
        link = entry.is_symlink()
        return entry.is_dir(), link
    except OSError:  # gone meanwhile, or a link loop: an entry of no kind
        return False, False


class Walk:
    """An iterable walk of ``root``; afterwards ``cut``, ``deep`` and ``listed`` say how it went.

    ``first``: names of the root's subdirectories to walk before everything else (the places
    that matter most get read even when the rest of the tree is cut short). ``prune(found)``:
    True to not enter a directory. ``on_error``: called with each ``OSError`` of a listing (the
    directory is skipped). ``clock``: seconds, monotonic (tests pass a counter).
    """

    def __init__(
        self,
        root: str,
        bounds: Bounds = Bounds(),
        *,
        first: Sequence[str] = (),
        prune: Callable[[Found], bool] = lambda _found: False,
        on_error: Callable[[OSError], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root, self.bounds, self._first = root, bounds, tuple(first)
        self._prune, self._on_error, self._clock = prune, on_error, clock
        self.listed = 0
        """How many entries the walk listed."""
        self.cut: str | None = None
        """Why the walk stopped before the end (entries or time), None when it did not."""
        self.deep: str | None = None
        """The first directory left unread for being deeper than ``bounds.depth``, if any."""

    @property
    def complete(self) -> bool:
        """True when every directory the bounds allow was listed to its end."""
        return self.cut is None

    def __iter__(self) -> Iterator[Found]:
        """Every entry in bounds: a directory's entries in name order, then its subdirectories."""
        deadline = self._clock() + self.bounds.seconds
        pending: list[tuple[str, str, int, frozenset[str]]] = []  # a stack: path, rel, depth
        first = [
            name
            for name in self._first
            if _is_plain_dir(f"{self.root}/{name}")  # not a link: never entered
        ]
        pending.append((self.root, "", 0, frozenset(first)))
        ahead = [
            Found(name, f"{self.root}/{name}", is_dir=True, is_symlink=False, depth=1)
            for name in first
        ]
        for found in ahead:
            self.listed += 1
            yield found
        pending.extend(
            (f.path, f.rel, 1, frozenset()) for f in reversed(ahead) if not self._prune(f)
        )
        while pending and self.cut is None:
            path, rel, depth, skip = pending.pop()
            if depth >= self.bounds.depth:
                self.deep = self.deep or rel
                continue
            entries = self._list(path, skip, deadline)
            subdirs = []
            for entry in entries:
                is_dir, is_link = _kind(entry)
                name = f"{rel}/{entry.name}" if rel else entry.name
                found = Found(name, entry.path, is_dir, is_link, depth + 1)
                yield found
                if is_dir and not is_link and not self._prune(found):
                    subdirs.append(found)
            pending.extend((f.path, f.rel, f.depth, frozenset()) for f in reversed(subdirs))

    def _list(self, path: str, skip: frozenset[str], deadline: float) -> list[os.DirEntry[str]]:
        """The entries of one directory, sorted, as far as the bounds allow (else ``cut``)."""
        out: list[os.DirEntry[str]] = []
        try:
            with os.scandir(path) as listing:
                for entry in listing:
                    if entry.name in skip:
                        continue
                    if self.listed >= self.bounds.entries:
                        self.cut = f"more than {self.bounds.entries} entries"
                        break
                    if self._clock() > deadline:
                        self.cut = f"listing took more than {self.bounds.seconds:g} s"
                        break
                    self.listed += 1
                    out.append(entry)
        except OSError as e:
            if self._on_error is not None:
                self._on_error(e)
        out.sort(key=lambda e: e.name)
        return out


def _is_plain_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def describe_cut(walk: Walk, what: str) -> list[tuple[str, bool]]:
    """What a finished walk left out, as sentences naming ``what`` (empty: nothing).

    Each comes with whether files may have gone unread: True for a cut (entries, time), False
    for directories deeper than the bound (no file a reader of the upstream layout looks for
    can lie that deep).
    """
    out = []
    if walk.cut is not None:
        out.append(
            (
                (
                    f"{what}: stopped after {walk.listed} entries ({walk.cut}); files past that "
                    "point are not read, and files known before are kept as they were"
                ),
                True,
            )
        )
    if walk.deep is not None:
        shown = walk.deep if len(walk.deep) <= 80 else walk.deep[:77] + "..."
        out.append(
            (
                (
                    f"{what}: directories deeper than {walk.bounds.depth} levels are not read "
                    f"(first: {shown})"
                ),
                False,
            )
        )
    return out
