"""A share that stops answering: a bindfs (FUSE) mount whose daemon is SIGSTOPped.

A stopped FUSE daemon makes every access of the mount block, as a virtiofs, 9p or NFS server
that stops answering does. ``hung_share`` mounts ``host`` at ``guest`` with bindfs, stops its
daemon when asked (``Share.hang``), and in teardown continues it (``Share.answer``) before
unmounting, so that nothing is left blocked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _daemon_pid(host: Path, guest: Path) -> int:
    """The pid of the bindfs daemon serving ``guest`` (found by its exact command line)."""
    want = [b"bindfs", os.fsencode(host), os.fsencode(guest)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            if len(argv) >= 3 and [Path(os.fsdecode(argv[0])).name.encode(), *argv[-2:]] == want:
                return int(entry.name)
    raise AssertionError(f"no bindfs daemon for {guest}")


class Share:
    """A mounted bindfs share and its daemon."""

    def __init__(self, host: Path, guest: Path, pid: int) -> None:
        self.host, self.guest, self.pid = host, guest, pid
        self.hung = False

    def hang(self) -> None:
        """Stop the daemon: from now on every access of ``guest`` blocks."""
        os.kill(self.pid, signal.SIGSTOP)
        self.hung = True

    def answer(self) -> None:
        """Continue the daemon: the blocked accesses complete."""
        os.kill(self.pid, signal.SIGCONT)
        self.hung = False


@contextlib.contextmanager
def hung_share(host: Path, guest: Path) -> Iterator[Share]:
    """Mount ``host`` at ``guest`` with bindfs (skip where that cannot be done)."""
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs root, /dev/fuse and bindfs")
    host.mkdir(parents=True, exist_ok=True)
    guest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bindfs", str(host), str(guest)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"bindfs cannot mount here: {done.stderr.decode().strip()}")
    share: Share | None = None
    try:
        share = Share(host, guest, _daemon_pid(host, guest))
        yield share
    finally:
        if share is not None:
            with contextlib.suppress(ProcessLookupError):
                share.answer()
        if subprocess.run(["umount", str(guest)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(guest)], capture_output=True, check=False)
        if share is not None:  # a lazily detached mount keeps its daemon: end ours
            with contextlib.suppress(ProcessLookupError):
                os.kill(share.pid, signal.SIGTERM)
