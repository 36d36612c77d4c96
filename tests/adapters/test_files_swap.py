"""The agent's file side against a bundle whose ``current`` link is swapped by the real writer.

* read_sources never mixes two generations, even with 200 swaps under a tight reader loop;
* the Watcher wakes for a swap through inotify (the rename in the root's parent), and through
  polling when polling is on;
* on a FUSE mount (bindfs, standing in for virtiofs), inotify does not see the host side's
  writes; ``auto`` detects the file system and polls, and the swap is seen.
"""

import contextlib
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kvdev.guest.adapters import files, fspoll
from kvdev.guest.core.sources import Sources, update
from kvdev.host.bundle import writer as bundlewriter
from kvdev.schema import DEVICE_METADATA, GUEST_HINTS, Role, decode_stream

CLAIMS = ("vm1-nics", "vm1-gpus")
SWAPS = 200


def generation_files(gen: int) -> dict[str, bytes]:
    """Two metadata files and the hints, all carrying generation ``gen``."""
    out = {}
    for i, claim in enumerate(CLAIMS):
        doc = {
            "apiVersion": "metadata.resource.k8s.io/v1beta1",
            "kind": "DeviceMetadata",
            "metadata": {"name": claim, "namespace": "vms", "uid": f"u{i}", "generation": gen},
            "requests": [
                {
                    "name": "r",
                    "devices": [{"driver": "d.example.com", "pool": "p", "name": f"dev-{i}"}],
                }
            ],
        }
        out[f"resourceclaims/{claim}/r/d.example.com-metadata.json"] = (
            json.dumps(doc) + "\n"
        ).encode()
    hints = {
        "apiVersion": "guest.kvdev.io/v1alpha1",
        "kind": "GuestHints",
        "metadata": {"generation": gen},
        "devices": [],
    }
    out["kvdev/guest-hints.json"] = (json.dumps(hints) + "\n").encode()
    return out


def publish(out: Path, gen: int) -> None:
    bundlewriter.publish(out, lambda _previous: generation_files(gen))


def generations(root: Path) -> list[int]:
    """The generation of every file one read_sources call returns; asserts the read is clean."""
    raws, complete = files.read_sources(root, root / "kvdev/guest-hints.json")
    assert complete
    gens = []
    for raw in raws:
        assert raw.problem is None, raw.problem
        assert raw.data is not None
        kind = GUEST_HINTS if raw.role is Role.GUEST_HINTS else DEVICE_METADATA
        gens.append(decode_stream(raw.data, kind).document.metadata.generation)
    assert len(gens) == len(CLAIMS) + 1
    return gens


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def wait_for_generation(
    watcher: files.Watcher, root: Path, gen: int, timeout: float, *, woken: bool = True
) -> float:
    """Seconds until the watcher woke and a read showed ``gen`` everywhere; fails on timeout.

    With ``woken`` False, a read that shows ``gen`` already (its event drained earlier) counts.
    """
    start = time.monotonic()
    deadline = start + timeout
    if not woken and set(generations(root)) == {gen}:
        return 0.0
    while time.monotonic() < deadline:
        if readable(watcher.fileno(), max(0.0, deadline - time.monotonic())):
            watcher.drain()
            if set(generations(root)) == {gen}:
                return time.monotonic() - start
    pytest.fail(f"generation {gen} not seen within {timeout} s")


_WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from test_files_swap import publish
from pathlib import Path
for gen in range(int(sys.argv[3]), int(sys.argv[4]) + 1):
    publish(Path(sys.argv[2]), gen)
"""


def start_writer(out: Path, first: int, last: int) -> subprocess.Popen[bytes]:
    """Another process (like the host) publishing generations first..last, as fast as it can."""
    args = [str(Path(__file__).parent), str(out), str(first), str(last)]
    return subprocess.Popen([sys.executable, "-c", _WRITER, *args])


# --------------------------------------------------------------------------- consistency


@pytest.mark.parametrize("poll", [0.0, 0.01], ids=["inotify", "inotify+poll"])
def test_tight_reader_never_mixes_generations_during_200_swaps(tmp_path, poll):
    out = tmp_path / "share"
    publish(out, 1)
    root = out / "current"
    with files.Watcher(root, root / "kvdev/guest-hints.json", poll=poll) as watcher:
        writer = start_writer(out, 2, SWAPS + 1)
        reads, seen = 0, set()
        while writer.poll() is None:
            if readable(watcher.fileno(), 0):
                watcher.drain()
            gens = generations(root)
            assert len(set(gens)) == 1, f"read {reads} mixes generations {gens}"
            seen.add(gens[0])
            reads += 1
        assert writer.wait() == 0
        assert reads > 20
        assert len(seen) > 5, "the reader never overlapped the swaps"
        wait_for_generation(watcher, root, SWAPS + 1, timeout=5, woken=False)
    assert sorted(p.name for p in out.iterdir()) == [
        f".gen-{SWAPS}",
        f".gen-{SWAPS + 1}",
        ".lock",
        "current",
    ]


def test_a_root_that_moves_while_read_is_read_again(tmp_path, monkeypatch):
    out = tmp_path / "share"
    publish(out, 1)
    real_read_once = files._read_once
    calls = []

    def swap_during_first_read(*args, **kwargs):
        result = real_read_once(*args, **kwargs)
        calls.append(args[1])
        if len(calls) == 1:
            publish(out, 2)
        return result

    monkeypatch.setattr(files, "_read_once", swap_during_first_read)
    assert set(generations(out / "current")) == {2}
    assert [Path(c).name for c in calls] == [".gen-1", ".gen-2"]


def test_belief_follows_the_swap_and_keeps_one_source_per_file(tmp_path):
    out = tmp_path / "share"
    publish(out, 1)
    root = out / "current"
    belief = Sources()
    for gen in (1, 2, 3):
        publish(out, gen)
        raws, complete = files.read_sources(root, root / "kvdev/guest-hints.json")
        belief = update(belief, raws, listing_complete=complete)
        assert {d.generation for d in belief.described()} == {gen}
    assert sorted(e.source for e in belief.entries) == sorted(
        str(root / rel) for rel in generation_files(1)
    )


# --------------------------------------------------------------------------- waking


@pytest.mark.parametrize("poll", [0.0, 0.05], ids=["inotify", "inotify+poll"])
def test_watcher_wakes_for_every_swap(tmp_path, poll, caplog):
    out = tmp_path / "share"
    publish(out, 1)
    root = out / "current"
    with files.Watcher(root, root / "kvdev/guest-hints.json", poll=poll) as watcher:
        assert watcher.poll_interval == poll
        for gen in range(2, 42):
            publish(out, gen)
            wait_for_generation(watcher, root, gen, timeout=60)  # a liveness bound, not a speed one
    # re-arming on each swap stops watchdog emitters mid-read: its benign error is filtered
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_poller_alone_sees_swaps_and_in_place_changes_but_not_reads(tmp_path):
    out = tmp_path / "share"
    publish(out, 1)
    root = out / "current"
    wakes = threading.Semaphore(0)
    poller = fspoll.Poller(lambda: fspoll.snapshot(root), 0.02, wakes.release)
    poller.start()
    try:
        publish(out, 2)  # a swap
        assert wakes.acquire(timeout=60)
        hints = out / ".gen-2/kvdev/guest-hints.json"
        hints.write_bytes(hints.read_bytes() + b"\n")  # an in-place rewrite
        assert wakes.acquire(timeout=60)
        polls = poller.polls
        for _ in range(20):
            generations(root)  # reading changes nothing a poll looks at
        deadline = time.monotonic() + 5
        while poller.polls < polls + 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not wakes.acquire(timeout=0)
    finally:
        poller.stop()
        poller.stop()


def test_snapshot_sees_the_link_target_not_just_the_tree(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "f").write_bytes(b"same")
        os.utime(d / "f", ns=(1, 1))
    (tmp_path / "current").symlink_to("a")
    first = fspoll.snapshot(tmp_path / "current")
    assert fspoll.snapshot(tmp_path / "current") == first
    (tmp_path / "current.tmp").symlink_to("b")
    (tmp_path / "current.tmp").replace(tmp_path / "current")
    assert fspoll.snapshot(tmp_path / "current") != first


def test_local_file_systems_are_not_polled_by_default(tmp_path):
    assert fspoll.remote_filesystem(tmp_path) is None
    assert fspoll.remote_filesystem(tmp_path / "not/yet/there") is None
    assert fspoll.effective_interval(None, [tmp_path]) == (0.0, None)
    assert fspoll.effective_interval(0.5, [tmp_path]) == (0.5, None)
    with files.Watcher(tmp_path, poll=None) as watcher:
        assert watcher.poll_interval == 0.0


# --------------------------------------------------------------------------- a FUSE share


@pytest.fixture
def fuse_share(tmp_path):
    """(host side directory, guest side mount): bindfs, a FUSE pass-through like virtiofs."""
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs root, /dev/fuse and bindfs")
    host, guest = tmp_path / "host", tmp_path / "guest"
    host.mkdir()
    guest.mkdir()
    proc = subprocess.run(["bindfs", str(host), str(guest)], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"bindfs cannot mount here: {proc.stderr.decode().strip()}")
    try:
        yield host, guest
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(guest)], check=False)


def test_fuse_share_is_detected_and_auto_polls(fuse_share):
    host, guest = fuse_share
    publish(host, 1)
    root = guest / "current"
    assert fspoll.remote_filesystem(root) == "fuse"
    assert fspoll.effective_interval(None, [root]) == (fspoll.DEFAULT_INTERVAL, "fuse")
    with files.Watcher(root, root / "kvdev/guest-hints.json", poll=None) as watcher:
        assert watcher.poll_interval == fspoll.DEFAULT_INTERVAL
        publish(host, 2)  # written on the host side of the share
        seconds = wait_for_generation(watcher, root, 2, timeout=10)
    assert seconds is not None, "the host-side write was never seen"
    print(f"host-side write seen in the guest view after {seconds:.2f} s")


def test_fuse_share_host_writes_are_invisible_to_inotify(fuse_share):
    """Why polling exists: without it, nothing wakes for a host-side swap."""
    host, guest = fuse_share
    publish(host, 1)
    root = guest / "current"
    with files.Watcher(root, root / "kvdev/guest-hints.json", poll=0) as watcher:
        publish(host, 2)
        assert not readable(watcher.fileno(), 1.5)
    with files.Watcher(root, root / "kvdev/guest-hints.json", poll=0.1) as watcher:
        publish(host, 3)
        wait_for_generation(watcher, root, 3, timeout=60)  # a liveness bound, not a speed one


# was: a 9p share was never polled: statfs there reports the host's own file system (ext4),
# not V9FS_MAGIC; the mount table says 9p (found by the QEMU e2e test)
MOUNTINFO_9P = (
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:35 / /mnt/e2e rw,relatime shared:20 - 9p hostshare rw,trans=virtio\n"
    "41 40 0:36 / /mnt/e2e/local\\040dir rw shared:21 - tmpfs tmpfs rw\n"
    "42 22 0:37 / /srv/fuse rw shared:22 - fuse.bindfs bindfs rw\n"
)


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/mnt/e2e/bundle/.gen-2", "9p"),
        ("/mnt/e2e", "9p"),
        ("/mnt/e2e/local dir/x", "tmpfs"),  # the deepest mount wins; octal escapes undone
        ("/mnt/e2ex/y", "ext4"),  # a prefix of a name is not a parent directory
        ("/srv/fuse/a", "fuse.bindfs"),
        ("/var/lib/kvdev", "ext4"),
    ],
)
def test_mount_type_is_read_from_the_mount_table(path, kind):
    assert fspoll._mount_type(path, MOUNTINFO_9P) == kind
