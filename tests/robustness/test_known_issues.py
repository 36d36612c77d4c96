"""Regressions for defects the robustness suites found outside the modules they exercise.

* notify never blocks the reconcile loop on a full notify socket (systemd hung or slow);
* a directory where a metadata file belongs is an error on that path, not the file's removal;
* a poll snapshot of a tree cut short at MAX_ENTRIES still covers the files outside it.
"""

import socket
import threading

import pytest

from kvdev.guest.adapters import files, fspoll, systemd

pytestmark = [pytest.mark.robustness]


def test_notify_never_blocks_the_loop_on_a_full_notify_socket(tmp_path, monkeypatch):
    path = tmp_path / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))  # nobody reads it: its queue fills up
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)  # noqa: FBT003
    filler.connect(str(path))
    try:
        while True:
            filler.send(b"STATUS=filler")
    except BlockingIOError:
        pass
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    done = threading.Event()
    sender = threading.Thread(
        target=lambda: (systemd.notify("STATUS=one more"), done.set()), daemon=True
    )
    sender.start()
    try:
        assert done.wait(2.0), "notify() still blocked after 2 s"
    finally:
        receiver.close()  # unblocks the sender (it gets an error) so the thread ends
        filler.close()
        sender.join(timeout=5)


def test_a_directory_in_place_of_a_metadata_file_is_an_error_on_that_path(tmp_path):
    target = tmp_path / "resourceclaims/claim/req/drv.example.com-metadata.json"
    target.mkdir(parents=True)
    (target / "inner-metadata.json").write_text("{}")
    raws, complete = files.read_sources(tmp_path)
    at_target = [r for r in raws if r.source == str(target)]
    assert complete
    assert len(at_target) == 1, [r.source for r in raws]
    assert at_target[0].data is None
    assert at_target[0].problem is not None
    assert "is a directory" in at_target[0].problem.message
    assert not [r for r in raws if r.source.startswith(str(target) + "/")]  # not walked into


def test_a_snapshot_cut_short_still_sees_a_change_to_the_files_outside_the_tree(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(fspoll, "MAX_ENTRIES", 3)
    root = tmp_path / "tree"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}").write_text("x")
    outside = tmp_path / "config-drive.json"
    outside.write_text("{}")
    before = fspoll.snapshot(root, [outside])
    assert ("truncated",) in before
    assert len(before) == 2 + 3 + 1 + 1  # root, ".", 3 entries, the cut, the file
    outside.write_text('{"changed": true}')
    assert fspoll.snapshot(root, [outside]) != before
