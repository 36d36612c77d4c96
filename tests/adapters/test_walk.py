"""Walking the metadata tree: iterative, bounded (depth, entries, time, bytes), limits reported.

Regressions (robustness probe): a directory ~1,000 levels deep under the metadata root crashed
the agent with RecursionError on Python 3.11 (``os.walk`` recurses), ``--once`` included
(finding 2); 100,000 unrelated files made every pass walk all of them (finding 4).
"""

import contextlib
import errno
import os
import select
import subprocess
import sys

import pytest

from kvdev.errors import Severity
from kvdev.guest.adapters import files, fspoll, walk, watch
from kvdev.guest.adapters.watch import Watcher
from kvdev.schema.tree import Role

META = "resourceclaims/claim-a/nic/sriov.example.com-metadata.json"
HINTS = "kvdev/guest-hints.json"
STREAM = b'{"apiVersion":"metadata.resource.k8s.io/v1beta1"}\n'


def put(path, data=b"{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@contextlib.contextmanager
def deep(top, levels, name="a"):
    """``top/a/a/.../a``, ``levels`` deep (made through descriptors: the path is too long to
    name); removed with rm(1) afterwards, which does not recurse either."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    try:
        yield top
    finally:
        subprocess.run(["rm", "-rf", str(top / name)], check=True)


def test_a_tree_1000_levels_deep_is_read_without_recursion(tmp_path):
    put(tmp_path / META, STREAM)
    limits = []
    with deep(tmp_path / "junk", 1000):
        raws, complete = files.read_sources(tmp_path, on_limit=limits.append)
    assert [r.source for r in raws if r.role is Role.DEVICE_METADATA] == [str(tmp_path / META)]
    assert complete  # nothing we could know of lies deeper than the walk goes
    assert [(p.message, p.severity) for p in limits] == [
        (
            (
                f"metadata tree {tmp_path}: directories deeper than {walk.MAX_DEPTH} levels are "
                f"not read (first: junk{'/a' * (walk.MAX_DEPTH - 1)})"
            ),
            Severity.WARNING,
        )
    ]


@pytest.mark.parametrize("levels", [1000, 5000])
def test_the_walk_never_needs_more_stack_than_a_shallow_one(tmp_path, levels):
    old = sys.getrecursionlimit()
    errors = []
    with deep(tmp_path, levels):
        sys.setrecursionlimit(200)  # far below what a recursive walk 1,000 deep would take
        try:
            tree = walk.Walk(str(tmp_path), walk.Bounds(depth=levels + 1), on_error=errors.append)
            found = list(tree)
        finally:
            sys.setrecursionlimit(old)
    if len(str(tmp_path)) + 2 * levels < os.pathconf("/", "PC_PATH_MAX"):
        assert (len(found), errors) == (levels, [])
    else:  # a path longer than PATH_MAX cannot be listed: an error, not a crash
        assert len(found) > 1000
        assert [e.errno for e in errors] == [errno.ENAMETOOLONG]


def test_the_stat_poller_walks_a_deep_tree_too(tmp_path):
    with deep(tmp_path / "root", 1000) as root:
        snap = fspoll.snapshot(root)
    assert len(snap) == 2 + walk.MAX_DEPTH  # root, "." and one entry per level walked


def test_a_tree_too_deep_to_watch_is_polled_and_says_why(tmp_path):
    put(tmp_path / META, STREAM)
    with deep(tmp_path / "junk", 1000), Watcher(tmp_path, poll=0.0) as watcher:
        assert watcher.degraded is not None
        assert f"deeper than {walk.MAX_DEPTH} levels" in watcher.degraded
        assert watcher.poll_interval == fspoll.DEFAULT_INTERVAL
    with Watcher(tmp_path, poll=0.0) as watcher:  # the junk gone: watched again, not polled
        assert (watcher.degraded, watcher.poll_interval) == (None, 0.0)


def test_unrelated_files_cost_at_most_the_entry_bound_and_the_upstream_places_come_first(
    tmp_path, monkeypatch
):
    put(tmp_path / META, STREAM)
    put(tmp_path / HINTS, b"{}")
    junk = tmp_path / "aaa-junk"  # sorts before everything kvdev reads
    junk.mkdir()
    for i in range(3000):
        (junk / f"f{i:05}").touch()
    listed = []
    real_scandir = os.scandir

    class Counting:
        def __init__(self, path):
            self.it = real_scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.it.close()

        def __iter__(self):
            for entry in self.it:
                listed.append(entry.name)
                yield entry

    monkeypatch.setattr(walk.os, "scandir", Counting)
    limits = []
    raws, complete = files.read_sources(
        tmp_path, bounds=walk.Bounds(entries=1000), on_limit=limits.append
    )
    print(f"entries listed: {len(listed)} of {3000 + 6}")
    assert len(listed) <= 1000 + 1  # one more is looked at to know the walk is cut
    roles = {r.source: r.role for r in raws if r.role is not Role.UNRELATED}
    assert roles == {
        str(tmp_path / META): Role.DEVICE_METADATA,
        str(tmp_path / HINTS): Role.GUEST_HINTS,
    }
    assert not complete  # a file known before may lie past the cut: it is kept
    assert [(p.message, p.severity) for p in limits] == [
        (
            (
                f"metadata tree {tmp_path}: stopped after 1000 entries (more than 1000 entries); "
                "files past that point are not read, and files known before are kept as they were"
            ),
            Severity.ERROR,
        )
    ]


def test_the_walk_stops_when_its_time_is_up(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    ticks = iter(range(10_000))  # one "second" per look at the clock
    tree = walk.Walk(str(tmp_path), walk.Bounds(seconds=10), clock=lambda: next(ticks))
    found = list(tree)
    assert len(found) == 10
    assert tree.cut == "listing took more than 10 s"
    assert not tree.complete


def test_reads_past_the_pass_budget_are_problems_on_their_files(tmp_path):
    size = 1000
    for i in range(5):
        data = b"{}" + b" " * (size - 2)  # a complete JSON stream: read once, not re-read
        put(tmp_path / f"resourceclaims/c{i}/nic/d.example.com-metadata.json", data)
    budget = files.Budget(limit=3 * size)
    limits = []
    raws = list(files.read_tree(tmp_path, budget=budget, on_limit=limits.append))
    read = [r for r in raws if r.data is not None]
    refused = [r for r in raws if r.problem is not None]
    assert (len(read), len(refused)) == (3, 2)
    assert all("read budget is spent" in r.problem.message for r in refused)
    assert [(p.message, p.severity) for p in limits] == [
        (
            (
                f"metadata tree {tmp_path}: 2 file(s) not read: this pass read 3000 bytes already; "
                "their last good content stays in force"
            ),
            Severity.ERROR,
        )
    ]


def test_a_device_node_in_the_tree_is_never_opened(tmp_path, monkeypatch):
    path = tmp_path / META
    path.parent.mkdir(parents=True)
    os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's
    opened = []
    real_open = os.open

    def watching_open(p, flags, *args, **kwargs):
        if not flags & os.O_PATH:
            opened.append(os.fspath(p))
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", watching_open)
    (raw,) = [r for r in files.read_tree(tmp_path) if r.role is Role.DEVICE_METADATA]
    assert raw.data is None
    assert "not a regular file" in raw.problem.message
    assert opened == []  # looked at through O_PATH only: its driver never saw an open(2)


def test_a_regular_file_is_read_through_the_descriptor_that_was_checked(tmp_path):
    put(tmp_path / META, STREAM)
    assert files.read_bounded(tmp_path / META) == STREAM


def test_a_deep_tree_moved_under_a_watched_root_is_survived_and_then_polled(tmp_path, monkeypatch):
    root = tmp_path / "root"
    put(root / META, STREAM)
    # pytest puts its own hook in place for each test; the agent's is installed at import
    monkeypatch.setattr(watch.threading, "excepthook", watch._on_thread_death)
    with Watcher(root, poll=0.0) as watcher:
        assert watcher.degraded is None
        with deep(tmp_path / "outside", 1000):
            (tmp_path / "outside" / "a").rename(root / "moved")  # watchdog walks it: recursion
            try:
                woke = select.select([watcher], [], [], 10)[0]
                watcher.drain()  # re-arms: a new observer, and the tree sized up again
                assert woke
                assert watcher.degraded is not None
                assert "deeper than" in watcher.degraded
                assert watcher.poll_interval == fspoll.DEFAULT_INTERVAL
            finally:
                subprocess.run(["rm", "-rf", str(root / "moved")], check=True)
        watcher.drain()
        assert (watcher.degraded, watcher.poll_interval) == (None, 0.0)
