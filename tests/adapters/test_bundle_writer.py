"""host.bundlewriter on a real file system: generations, the atomic swap, idempotence, failures."""

import signal
import subprocess
import sys

import pytest

from kvdev.errors import PermanentError
from kvdev.host.bundle import writer as bw

A = {"resourceclaims/c/r/d.example.com-metadata.json": b"A\n", "kvdev/guest-hints.json": b"1\n"}
B = {"resourceclaims/c/r/d.example.com-metadata.json": b"B\n", "kvdev/guest-hints.json": b"2\n"}


def publish(out, files):
    return bw.publish(out, lambda _previous: files)


def entries(out):
    return sorted(p.name for p in out.iterdir())


def test_first_publish_makes_a_generation_and_the_link(tmp_path):
    out = tmp_path / "out"
    result = publish(out, A)
    assert (result.changed, result.root, result.directory) == (
        True,
        out / "current",
        out / ".gen-1",
    )
    assert str((out / "current").readlink()) == ".gen-1"  # relative: valid in the VM too
    assert bw.read_generation(out / "current") == A
    assert entries(out) == [".gen-1", ".lock", "current"]
    meta = out / ".gen-1/resourceclaims/c/r/d.example.com-metadata.json"
    assert (meta.stat().st_mode & 0o777, meta.parent.stat().st_mode & 0o777) == (0o644, 0o755)


def test_same_content_publishes_nothing(tmp_path):
    out = tmp_path / "out"
    publish(out, A)
    before = (out / ".gen-1").stat().st_mtime_ns
    result = publish(out, dict(A))
    assert (result.changed, result.directory) == (False, out / ".gen-1")
    assert entries(out) == [".gen-1", ".lock", "current"]
    assert (out / ".gen-1").stat().st_mtime_ns == before


def test_new_content_swaps_and_keeps_only_the_previous_generation(tmp_path):
    out = tmp_path / "out"
    publish(out, A)
    publish(out, B)
    assert bw.read_generation(out / "current") == B
    assert entries(out) == [".gen-1", ".gen-2", ".lock", "current"]
    result = publish(out, A)
    assert result.removed == (out / ".gen-1",)
    assert entries(out) == [".gen-2", ".gen-3", ".lock", "current"]
    assert bw.read_generation(out / "current") == A


def test_make_gets_the_files_in_force(tmp_path):
    out = tmp_path / "out"
    seen = []
    bw.publish(out, lambda prev: seen.append(prev) or A)
    bw.publish(out, lambda prev: seen.append(prev) or B)
    assert seen == [None, A]


def test_leftover_partial_generation_is_removed_and_never_reused(tmp_path):
    out = tmp_path / "out"
    publish(out, A)
    (out / ".gen-2.partial/resourceclaims").mkdir(parents=True)  # a writer died here
    publish(out, B)
    assert entries(out) == [".gen-1", ".gen-3", ".lock", "current"]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a//b", "a/./b"])
def test_paths_that_are_not_plain_relative_are_refused_and_nothing_changes(tmp_path, bad):
    out = tmp_path / "out"
    publish(out, A)
    with pytest.raises(PermanentError, match="is not a plain relative path"):
        publish(out, {**B, bad: b"x"})
    assert bw.read_generation(out / "current") == A
    assert entries(out) == [".gen-1", ".lock", "current"]


def test_current_that_is_a_real_directory_is_refused(tmp_path):
    (tmp_path / "current").mkdir()
    with pytest.raises(PermanentError) as e:
        publish(tmp_path, A)
    assert str(e.value) == (
        f"{tmp_path}/current: exists and is not a symbolic link; not a bundle directory"
    )


def test_current_pointing_elsewhere_is_refused(tmp_path):
    (tmp_path / "current").symlink_to("/etc")
    with pytest.raises(PermanentError, match=r"points to '/etc', not to a \.gen-<N> directory"):
        publish(tmp_path, A)


def test_output_that_is_a_file_is_a_permanent_error_naming_it(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(PermanentError, match=f"{tmp_path}/f"):
        publish(tmp_path / "f" / "out", A)


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from kvdev.host.bundle import writer as bw
out, kill_at = Path(sys.argv[1]), int(sys.argv[2])
real_write = os.write
writes = 0
def counted_write(fd, data):
    global writes
    writes += 1
    if writes == kill_at:  # killed here, in the middle of whatever the writer was doing
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)
os.write = counted_write
i = 0
while True:
    i += 1
    files = {f"resourceclaims/c/r{k}/d.example.com-metadata.json": f"{i}\\n".encode()
             for k in range(20)}
    bw.publish(out, lambda _p, files=files: files)
"""


def test_a_writer_killed_at_any_point_leaves_a_whole_bundle(tmp_path):
    """SIGKILL at the n-th write of the writer (counted, not timed): at a point of the first
    generation, then at points of later ones; every kill leaves a whole generation or none."""
    out = tmp_path / "out"
    seen = set()
    for kill_at in (7, 31, 45, 58, 73, 99):
        args = [sys.executable, "-c", _KILLED_WRITER, str(out), str(kill_at)]
        proc = subprocess.run(args, check=False)
        assert proc.returncode == -signal.SIGKILL
        if not (out / "current").exists():
            continue  # killed before the first generation was complete
        seen.update(n for n in entries(out) if n.endswith(".partial"))
        files = bw.read_generation(out / "current")
        assert len(files) == 20
        assert len(set(files.values())) == 1, "a generation mixes two writes"
    assert (out / "current").exists()
    assert seen, "no kill landed while a generation was being written"
    result = publish(out, A)  # the next run cleans up and goes on
    assert not [n for n in entries(out) if n.endswith(".partial")]
    assert bw.read_generation(result.root) == A
