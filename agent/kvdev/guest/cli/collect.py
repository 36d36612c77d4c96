"""``kvdev collect``: one support tarball, as ``cloud-init collect-logs`` makes one.

It owns what goes in and how a failure is kept: the agent's status, plan and devices (from its
socket, when it answers), the units' journal (when ``journalctl`` exists), a listing of the
metadata tree (names, sizes, modes, mtimes and link targets; the files' contents only with
``--with-metadata``) and the state directory (its files, bounded). Each part that cannot be
collected is written as ``<part>.error`` and listed in ``collect.json`` with why: a part's
failure is never fatal. Exit 0 when the tarball is written, 2 when it cannot be.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import shutil
import stat
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final, TextIO

from kvdev import __version__
from kvdev.errors import KvdevError
from kvdev.guest.cli.client import Client
from kvdev.schema.tree import ROOT

EXIT_OK: Final = 0
EXIT_ERROR: Final = 2
STATE_DIR: Final = "/var/lib/kvdev"
UNITS: Final = ("kvdev-agent.service", "kvdev-agent.socket", "kvdev-metadata-share.service")
MAX_ENTRIES: Final = 10_000  # of the metadata listing and of the state directory
MAX_FILE: Final = 4 * 1024 * 1024  # bytes of one collected file
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
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
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
        with tarfile.open(path, "w:gz") as tar:
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


def _walk(root: Path) -> Iterator[Path]:
    """Every entry under ``root``, not following links, in name order, at most MAX_ENTRIES."""
    stack, seen = [root], 0
    while stack:
        here = stack.pop()
        for entry in sorted(here.iterdir(), reverse=True):
            seen += 1
            if seen > MAX_ENTRIES:
                return
            yield entry
            if entry.is_dir() and not entry.is_symlink():
                stack.append(entry)


def _listing(root: Path) -> bytes:
    if not root.is_dir():
        msg = f"{root}: no such directory"
        raise FileNotFoundError(msg)
    entries = []
    for entry in _walk(root):
        st = entry.lstat()
        item: dict[str, object] = {
            "path": str(entry.relative_to(root)),
            "mode": stat.filemode(st.st_mode),
            "size": st.st_size,
            "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)),
        }
        if entry.is_symlink():
            item["target"] = str(entry.readlink())
        entries.append(item)
    body = {"root": str(root), "entries": entries, "truncated": len(entries) >= MAX_ENTRIES}
    return (json.dumps(body, indent=2) + "\n").encode()


def _files(ball: _Tarball, root: Path, prefix: str) -> None:
    """Each regular file under ``root`` as ``prefix/<relative path>`` (links not followed)."""
    if not root.is_dir():
        ball.part(prefix, lambda: _missing(root))
        return
    try:
        entries = [e for e in _walk(root) if e.is_file() and not e.is_symlink()]
    except OSError as e:
        ball.part(prefix, partial(_raise, e))
        return
    for entry in entries:
        ball.part(f"{prefix}/{entry.relative_to(root)}", partial(_read, entry))


def _read(path: Path) -> bytes:
    with path.open("rb") as f:
        data = f.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        msg = f"{path}: larger than {MAX_FILE} bytes, not collected"
        raise ValueError(msg)
    return data


def _missing(root: Path) -> bytes:
    msg = f"{root}: no such directory"
    raise FileNotFoundError(msg)


def _raise(error: OSError) -> bytes:
    raise error
