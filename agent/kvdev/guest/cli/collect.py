"""``kvdev collect``: one support tarball, as ``cloud-init collect-logs`` makes one.

It owns what goes in and how a failure is kept: the agent's status, plan and devices (from its
socket, when it answers), the units' journal (when ``journalctl`` exists), a listing of the
metadata tree (names, sizes, modes, mtimes and link targets; the files' contents only with
``--with-metadata``) and the state directory (its files, bounded). Each part that cannot be
collected is written as ``<part>.error`` and listed in ``collect.json`` with why: a part's
failure is never fatal. Exit 0 when the tarball is written, 2 when it cannot be.

It runs as root over trees another user owns (the state directory is the agent's user's), so
it reads them only through directory fds: each directory is opened from its parent's fd with
``O_NOFOLLOW`` and ``fstat`` must show the entry that was listed; each file is read by
``kvdev._confined.read_at`` through its directory's fd, copied only when it is the regular file
listed, with one link, of its directory's owner or root's, at most ``MAX_FILE`` bytes (a link, a
FIFO or a device is never opened). The tarball is a new 0600 file,
renamed into place, and its members are 0600.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO, Final, TextIO

from kvdev import __version__
from kvdev._confined import RefusedError, read_at
from kvdev._records import compared
from kvdev.errors import KvdevError
from kvdev.guest.cli.client import Client
from kvdev.schema.tree import ROOT

EXIT_OK: Final = 0
EXIT_ERROR: Final = 2
STATE_DIR: Final = "/var/lib/kvdev"
UNITS: Final = ("kvdev-agent.service", "kvdev-agent.socket", "kvdev-metadata-share.service")
MAX_ENTRIES: Final = 10_000  # of the metadata listing and of the state directory
MAX_FILE: Final = 4 * 1024 * 1024  # bytes of one collected file
MAX_DEPTH: Final = 32  # directory levels entered below a root
JOURNAL_LINES: Final = 20_000
JOURNAL_TIMEOUT: Final = 60.0

EPILOG = f"""\
what goes in (each part that fails is kept as PART.error, never fatal):
  status.json plan.json devices.json  the agent's answers, when it is running
  journal.txt                         journalctl -u {" -u ".join(UNITS)}
                                      (the last {JOURNAL_LINES} lines), when journalctl exists
  metadata-listing.json               the metadata tree: names, sizes, modes, mtimes, links
  metadata/                           its files' contents, only with --with-metadata
  state/                              the state directory's files (--state-dir)
  collect.json                        what was collected, what failed and why, versions

examples:
  sudo kvdev collect                                  # ./kvdev-collect-HOST-TIME.tar.gz
  sudo kvdev collect --tarfile /tmp/kvdev.tar.gz --with-metadata
  tar -tzf kvdev-collect-*.tar.gz

exit status: 0 the tarball was written (some parts may have failed: see collect.json),
2 it could not be written.
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], **kw: object) -> None:
    """Register ``collect`` (``kw``: the parents and formatter the other commands get)."""
    sub = commands.add_parser(
        "collect",
        help="write one support tarball: status, plan, devices, journal, metadata listing, state",
        description="Collect what a bug report needs into one .tar.gz: see below.",
        epilog=EPILOG,
        **kw,  # type: ignore[arg-type]
    )
    sub.add_argument(
        "--tarfile",
        metavar="PATH",
        help="where to write it (default ./kvdev-collect-HOST-YYYYmmddTHHMMSSZ.tar.gz)",
    )
    sub.add_argument(
        "--metadata-root",
        metavar="DIR",
        default=ROOT,
        help=f"the metadata tree to list (default {ROOT})",
    )
    sub.add_argument("--state-dir", metavar="DIR", default=STATE_DIR, help=f"(default {STATE_DIR})")
    sub.add_argument(
        "--with-metadata",
        action="store_true",
        help="also the metadata files' contents (they may hold addresses; default: names only)",
    )


@dataclass
class _Tarball:
    """The tarball being written and the record of every part."""

    tar: tarfile.TarFile
    top: str
    parts: dict[str, str] = field(default_factory=dict)  # name -> "ok" or why not

    def add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{self.top}/{name}")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
        self.tar.addfile(info, io.BytesIO(data))

    def part(self, name: str, make: Callable[[], bytes]) -> None:
        """Add ``name`` from ``make()``; on any failure, ``name.error`` with why."""
        try:
            data = make()
        except (OSError, KvdevError, ValueError, subprocess.SubprocessError) as e:
            why = f"{type(e).__name__}: {e}"
            self.parts[name] = why
            self.add(f"{name}.error", (why + "\n").encode())
        else:
            self.parts[name] = "ok"
            self.add(name, data)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kvdev collect``."""
    host = platform.node() or "localhost"
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    top = f"kvdev-collect-{host}-{when}"
    path = Path(args.tarfile or f"{top}.tar.gz")
    try:
        with _private_file(path) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            ball = _Tarball(tar, top)
            _collect(ball, args)
            manifest = {
                "kvdevVersion": __version__,
                "collectedAt": when,
                "host": host,
                "kernel": platform.release(),
                "parts": ball.parts,
            }
            ball.add("collect.json", (json.dumps(manifest, indent=2) + "\n").encode())
    except OSError as e:
        err.write(f"kvdev: collect: cannot write {path}: {e.strerror or e}\n")
        return EXIT_ERROR
    failed = sorted(n for n, s in ball.parts.items() if s != "ok")
    out.write(f"{path}\n")
    if failed:
        err.write(f"kvdev: collect: not collected (see collect.json): {', '.join(failed)}\n")
    return EXIT_OK


@contextmanager
def _private_file(path: Path) -> Iterator[BinaryIO]:
    """``path`` written as a new 0600 file, renamed into place when complete.

    The file is a temporary one made with ``O_EXCL`` beside ``path``: a file or link already
    there is replaced, never written through.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as raw:
            yield raw
        Path(tmp).replace(path)
    except BaseException:
        with suppress(OSError):
            Path(tmp).unlink()
        raise


def _collect(ball: _Tarball, args: argparse.Namespace) -> None:
    client = Client(args.socket, args.timeout or 5.0)
    for name, api in (("status", "/v1/status"), ("devices", "/v1/devices"), ("plan", "/v1/plan")):
        ball.part(f"{name}.json", partial(_ask, client, api))
    ball.part("journal.txt", _journal)
    root = Path(args.metadata_root)
    ball.part("metadata-listing.json", lambda: _listing(root))
    if args.with_metadata:
        _files(ball, root, "metadata")
    _files(ball, Path(args.state_dir), "state")


def _ask(client: Client, path: str) -> bytes:
    answer = client.request("GET", path)
    return (
        json.dumps({"httpStatus": answer.status, "body": answer.body}, indent=2) + "\n"
    ).encode()


def _journal() -> bytes:
    journalctl = shutil.which("journalctl")
    if journalctl is None:
        msg = "journalctl is not installed"
        raise FileNotFoundError(msg)
    units = [w for u in UNITS for w in ("-u", u)]
    cmd = [journalctl, *units, "--no-pager", "-o", "short-iso-precise", "-n", str(JOURNAL_LINES)]
    # S603: a fixed command (journalctl's own path and our unit names), no input of anyone's
    done = subprocess.run(cmd, capture_output=True, timeout=JOURNAL_TIMEOUT, check=False)  # noqa: S603
    if done.returncode != 0:
        msg = f"journalctl exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}"
        raise subprocess.SubprocessError(msg)
    return done.stdout


class _NotCollectedError(ValueError):
    """An entry that is not what it was listed as, or no file root may copy."""


@compared
@dataclass(frozen=True, eq=False, repr=False)
class _Entry:
    """One entry of a walked tree: its directory's fd (open while it is yielded), name, lstat."""

    dfd: int
    name: str
    rel: str
    st: os.stat_result
    owner: int  # the uid of the directory it is in


def _open_dir(name: str | Path, dir_fd: int | None, listed: os.stat_result | None) -> int:
    """A directory's fd, opened without following a link.

    Only the root the caller named may be a link. ``listed``: it must still be that directory.
    """
    nofollow = os.O_NOFOLLOW if dir_fd is not None else 0
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | nofollow, dir_fd=dir_fd)
    st = os.fstat(fd)
    if listed is not None and (st.st_dev, st.st_ino) != (listed.st_dev, listed.st_ino):
        os.close(fd)
        msg = f"{name}: replaced while it was read"
        raise _NotCollectedError(msg)
    return fd


def _walk(root: Path) -> Iterator[_Entry]:
    """Every entry under ``root``, not following links, in name order, at most MAX_ENTRIES.

    Each directory is opened through its parent's fd with ``O_NOFOLLOW`` and must be the one
    listed (device and inode), so a directory swapped for a link or another directory between
    the listing and the descent is not entered; at most MAX_DEPTH levels.
    """
    top = _open_dir(root, None, None)
    stack: list[tuple[int, str, int]] = [(top, "", 0)]
    seen = 0
    try:
        while stack:
            dfd, prefix, depth = stack.pop()
            try:
                owner = os.fstat(dfd).st_uid
                with os.scandir(dfd) as it:
                    names = sorted(e.name for e in it)
                subdirs: list[tuple[str, os.stat_result]] = []
                for name in names:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        return
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # gone since the listing
                    yield _Entry(dfd, name, prefix + name, st, owner)
                    if stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
                        subdirs.append((name, st))
                for name, st in reversed(subdirs):
                    try:
                        child = _open_dir(name, dfd, st)
                    except (OSError, _NotCollectedError):
                        continue  # swapped or gone: not entered
                    stack.append((child, f"{prefix}{name}/", depth + 1))
            finally:
                os.close(dfd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _listing(root: Path) -> bytes:
    if not root.is_dir():
        msg = f"{root}: no such directory"
        raise FileNotFoundError(msg)
    entries = []
    for entry in _walk(root):
        st = entry.st
        item: dict[str, object] = {
            "path": entry.rel,
            "mode": stat.filemode(st.st_mode),
            "size": st.st_size,
            "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
        }
        if stat.S_ISLNK(st.st_mode):
            try:
                item["target"] = os.readlink(entry.name, dir_fd=entry.dfd)[:4096]
            except OSError as e:
                item["target"] = f"(not read: {e.strerror})"
        entries.append(item)
    body = {"root": str(root), "entries": entries, "truncated": len(entries) >= MAX_ENTRIES}
    return (json.dumps(body, indent=2) + "\n").encode()


def _files(ball: _Tarball, root: Path, prefix: str) -> None:
    """Each regular file under ``root`` as ``prefix/<relative path>`` (links not followed).

    Read while walking, through the directory's fd (``_read``), so that what is copied is
    the file that was listed, never what a link put in its place points at.
    """
    try:
        for entry in _walk(root):
            if stat.S_ISREG(entry.st.st_mode):
                ball.part(f"{prefix}/{entry.rel}", partial(_read, entry))
    except FileNotFoundError:
        ball.part(prefix, lambda: _missing(root))
    except OSError as e:
        ball.part(prefix, partial(_raise, e))


def _read(entry: _Entry) -> bytes:
    """The listed regular file's bytes, or why not (``kvdev._confined.read_at``).

    Read through its directory's fd, never through a link, never a FIFO or a device, and only
    if it still is the regular file listed, with one link, of the directory's owner (or
    root's), no larger than MAX_FILE.

    Raises:
        RefusedError: it breaks one of those rules (the reason names it by its path).
        OSError: it cannot be read now.
    """
    try:
        return read_at(entry.dfd, entry.name, MAX_FILE, owners={entry.owner, 0}, listed=entry.st)
    except RefusedError as e:
        raise RefusedError(entry.rel, f"{e.reason}; not collected", e.mode) from e


def _missing(root: Path) -> bytes:
    msg = f"{root}: no such directory"
    raise FileNotFoundError(msg)


def _raise(error: OSError) -> bytes:
    raise error
