"""_atomic.remove_leftovers: what a ``write_atomic`` killed mid-write leaves, and its removal."""

import multiprocessing
import os
import signal
import time

from kvdev._atomic import remove_leftovers, write_atomic


def _write_and_hang(target):
    os.fsync = lambda _fd: time.sleep(60)  # the child stops inside the write, before its rename
    write_atomic(target, b"new")


def test_a_write_killed_mid_way_leaves_a_temporary_file_that_remove_leftovers_clears(tmp_path):
    target = tmp_path / "status.json"
    target.write_bytes(b"old")
    foreign = [tmp_path / ".other.json.abc12345.tmp", tmp_path / "status.json.tmp"]
    for path in foreign:
        path.write_bytes(b"not ours")
    child = multiprocessing.get_context("fork").Process(target=_write_and_hang, args=(target,))
    child.start()
    try:
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob(".status.json.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=10)
    (left,) = tmp_path.glob(".status.json.*.tmp")
    assert target.read_bytes() == b"old"

    assert remove_leftovers(tmp_path, "status.json") == [left]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["status.json", *(p.name for p in foreign)]
    )
    assert remove_leftovers(tmp_path, "status.json") == []
    assert remove_leftovers(tmp_path / "missing", "status.json") == []
