"""guest.files on a real file system: read_sources (torn writes, listings) and the Watcher."""

import fcntl
import json
import os
import select
import shutil
import termios
import time
from pathlib import Path

import pytest

from kvdev.guest.adapters import files, walk
from kvdev.guest.core.sources import Sources, update
from kvdev.schema.tree import Role

META = "resourceclaims/vm1-nics/nic/sriov.example.com-metadata.json"
DOC = {
    "apiVersion": "metadata.resource.k8s.io/v1beta1",
    "kind": "DeviceMetadata",
    "metadata": {"name": "vm1-nics", "namespace": "vms", "uid": "u", "generation": 1},
    "requests": [
        {"name": "nic", "devices": [{"driver": "sriov.example.com", "pool": "p", "name": "vf-0"}]}
    ],
}
COMPLETE = (json.dumps(DOC) + "\n").encode()
TORN = COMPLETE[:40]


def put(path: Path, data: bytes = b"{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- read_sources


def test_half_written_file_completed_between_attempts_is_read_whole(tmp_path):
    path = put(tmp_path / META, TORN)
    pauses = []

    def writer_finishes(seconds):
        pauses.append(seconds)
        path.write_bytes(COMPLETE)

    settle = files.Settle(pause=writer_finishes)
    (raw,), complete = files.read_sources(tmp_path, settle=settle)
    assert (raw.data, complete, pauses) == (COMPLETE, True, [0.01])


def test_file_that_stays_torn_is_returned_after_the_rereads(tmp_path):
    put(tmp_path / META, TORN)
    pauses = []
    settle = files.Settle(rereads=3, interval=0.5, pause=pauses.append)
    (raw,), _ = files.read_sources(tmp_path, settle=settle)
    assert (raw.data, pauses) == (TORN, [0.5, 0.5, 0.5])


def test_complete_file_is_read_once(tmp_path):
    put(tmp_path / META, COMPLETE)
    put(tmp_path / "kvdev/guest-hints.json", b'{"a": 1}\n{"b": [2]}\n')
    pauses = []
    raws, _ = files.read_sources(tmp_path, settle=files.Settle(pause=pauses.append))
    assert len(raws) == 2
    assert pauses == []


@pytest.mark.parametrize(
    ("data", "complete"),
    [
        (b'{"a": 1}', True),
        (b' {"a": 1}\n{"b": 2}\n', True),
        (b"", False),
        (b"  \n", False),
        (b'{"a": 1}\n{"b"', False),
        (b"\xff{}", False),
        (b"[" * 100_000, False),
    ],
)
def test_json_stream_check(data, complete):
    assert files._json_stream(data) is complete


def test_torn_read_then_bad_content_keeps_the_last_good(tmp_path):
    path = put(tmp_path / META, COMPLETE)
    no_wait = files.Settle(pause=lambda _: None)
    raws, complete = files.read_sources(tmp_path, settle=no_wait)
    sources = update(Sources(), raws, listing_complete=complete)
    path.write_bytes(TORN)
    raws, complete = files.read_sources(tmp_path, settle=no_wait)
    sources = update(sources, raws, listing_complete=complete)
    assert [d.name for d in sources.described()] == ["vf-0"]
    assert list(sources.errors()) == [str(path)]


def test_missing_root_is_a_complete_empty_listing(tmp_path):
    assert files.read_sources(tmp_path / "not" / "there") == ([], True)


def test_root_that_is_a_file_is_no_complete_listing(tmp_path):
    assert files.read_sources(put(tmp_path / "root")) == ([], False)


def test_unlistable_directory_makes_the_listing_incomplete(tmp_path):
    put(tmp_path / META, COMPLETE)
    # Running as root, permissions do not stop a listing; a path longer than PATH_MAX does.
    fd = os.open(tmp_path / "resourceclaims", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            deeper = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
    finally:
        os.close(fd)
    try:  # deeper than the walk goes by default (walk.MAX_DEPTH): it would not list them
        raws, complete = files.read_sources(tmp_path, bounds=walk.Bounds(depth=64))
    finally:
        shutil.rmtree(tmp_path / "resourceclaims" / ("d" * 250))
    assert [r.source for r in raws] == [str(tmp_path / META)]
    assert complete is False


def test_hints_and_config_drive_are_read_when_present(tmp_path):
    root = tmp_path / "root"
    hints = put(tmp_path / "etc/hints.json", b'{"x": 1}')
    drive = put(tmp_path / "cd/openstack/latest/meta_data.json", b'{"devices": []}')
    raws, complete = files.read_sources(root, hints, drive)
    assert complete
    assert [(r.source, r.role, r.data) for r in raws] == [
        (str(hints), Role.GUEST_HINTS, b'{"x": 1}'),
        (str(drive), Role.CONFIG_DRIVE, b'{"devices": []}'),
    ]


def test_missing_optional_files_are_absent_not_errors(tmp_path):
    raws, complete = files.read_sources(tmp_path, tmp_path / "no/hints.json", tmp_path / "m.json")
    assert (raws, complete) == ([], True)


def test_unreadable_optional_file_is_a_problem(tmp_path):
    hints = tmp_path / "hints.json"
    hints.mkdir()
    (raw,), _ = files.read_sources(tmp_path / "root", hints)
    assert raw.role is Role.GUEST_HINTS
    assert raw.data is None
    assert "not a regular file" in raw.problem.message


def test_hints_inside_the_tree_are_read_once(tmp_path):
    hints = put(tmp_path / "kvdev/guest-hints.json", b"{}")
    raws, _ = files.read_sources(tmp_path, tmp_path / "kvdev/../kvdev/guest-hints.json")
    assert [(r.source, r.role) for r in raws] == [(str(hints), Role.GUEST_HINTS)]


def test_hints_inside_the_tree_at_an_unusual_place_get_their_role(tmp_path):
    hints = put(tmp_path / "etc/hints.json", b"{}")
    raws, _ = files.read_sources(tmp_path, hints)
    assert [(r.source, r.role, r.data) for r in raws] == [(str(hints), Role.GUEST_HINTS, b"{}")]


# --------------------------------------------------------------------------- Watcher


def woken(watcher, timeout=2.0):
    return bool(select.select([watcher], [], [], timeout)[0])


def quiet(watcher):
    """Drain until no event arrives for 0.2 s; True when the pipe is then empty."""
    while woken(watcher, 0.2):
        watcher.drain()
    return not woken(watcher, 0)


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "root"
    (path / "resourceclaims").mkdir(parents=True)
    return path


def test_fires_on_create_modify_replace_delete(root, tmp_path):
    path = root / META
    with files.Watcher(root) as watcher:
        assert not woken(watcher, 0.1)
        put(path, TORN)
        assert woken(watcher)
        assert watcher.drain() >= 1
        assert quiet(watcher)

        with path.open("ab") as f:
            f.write(COMPLETE[len(TORN) :])
        assert woken(watcher)
        assert quiet(watcher)

        staged = put(tmp_path / "staging" / "new.json", COMPLETE)
        assert not woken(watcher, 0.1)
        staged.replace(path)
        assert woken(watcher)
        assert quiet(watcher)

        path.unlink()
        assert woken(watcher)
        assert quiet(watcher)


def test_a_writers_temporary_file_does_not_wake_but_its_rename_does(root):
    path = root / META
    put(path, COMPLETE)
    with files.Watcher(root) as watcher:
        assert quiet(watcher)
        temporary = put(path.parent / f".{path.name}.tmp", COMPLETE)
        assert not woken(watcher, 0.3)
        temporary.replace(path)
        assert woken(watcher)
        assert quiet(watcher)
        put(root / "resourceclaims" / "notes.txt")
        assert not woken(watcher, 0.3)


def test_own_reads_and_unrelated_neighbours_do_not_wake(root, tmp_path):
    put(root / META, COMPLETE)
    with files.Watcher(root, tmp_path / "etc/hints.json") as watcher:
        assert quiet(watcher)
        for _ in range(3):
            files.read_sources(root, tmp_path / "etc/hints.json")
        put(tmp_path / "elsewhere.txt")
        assert not woken(watcher, 0.3)
        (tmp_path / "etc").mkdir()  # the hints' directory appears: that is news
        assert woken(watcher)
        assert quiet(watcher)
        put(tmp_path / "etc/other.json")
        assert not woken(watcher, 0.3)
        put(tmp_path / "etc/hints.json")
        assert woken(watcher)


def test_missing_root_is_watched_through_its_ancestors(tmp_path):
    root = tmp_path / "a" / "b"
    with files.Watcher(root) as watcher:
        (tmp_path / "a").mkdir()
        assert woken(watcher)
        assert quiet(watcher)
        root.mkdir()
        assert woken(watcher)
        assert quiet(watcher)
        put(root / META, COMPLETE)
        assert woken(watcher)
        assert quiet(watcher)
        put(root / "resourceclaims/c2/nic/x.io-metadata.json")  # recursive now
        assert woken(watcher)


def test_root_removed_and_created_again_is_watched_again(root):
    with files.Watcher(root) as watcher:
        shutil.rmtree(root)
        assert woken(watcher)
        assert quiet(watcher)
        root.mkdir()
        assert woken(watcher)
        assert quiet(watcher)
        put(root / META, COMPLETE)
        assert woken(watcher)


def test_config_drive_directory_is_watched(tmp_path, root):
    drive = tmp_path / "cd/openstack/latest/meta_data.json"
    with files.Watcher(root, config_drive=drive) as watcher:
        put(drive, b"{}")  # creates the directories one by one
        assert woken(watcher)
        assert quiet(watcher)
        drive.write_bytes(b'{"devices": []}')
        assert woken(watcher)


def pending_bytes(fd):
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


def test_many_events_coalesce_and_never_block(root):
    path = put(root / META, COMPLETE)
    with files.Watcher(root) as watcher:
        assert not os.get_blocking(watcher.fileno())  # drain can never block
        start = time.monotonic()
        for i in range(1000):
            path.write_bytes(b"%d" % i)
        writes = time.monotonic() - start
        assert woken(watcher)
        assert pending_bytes(watcher.fileno()) == 1  # 1000 events, one byte to read
        start = time.monotonic()
        assert watcher.drain() >= 1
        drained = time.monotonic() - start
        print(f"1000 writes {writes * 1e3:.0f} ms, drain {drained * 1e3:.1f} ms")
        assert quiet(watcher)
        assert pending_bytes(watcher.fileno()) == 0


def test_close_is_idempotent_and_stops_waking(root):
    watcher = files.Watcher(root)
    with watcher:
        pass
    watcher.close()
    put(root / META)
    assert watcher.drain() == 0
