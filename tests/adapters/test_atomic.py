"""_atomic.write_atomic on a real file system."""

import os
import stat

import pytest

from kvdev._atomic import write_atomic


def test_writes_content_and_mode(tmp_path):
    target = tmp_path / "metadata.json"
    write_atomic(target, b"one\n", mode=0o640)
    assert target.read_bytes() == b"one\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_replaces_without_leaving_temporary_files(tmp_path):
    target = tmp_path / "metadata.json"
    target.write_bytes(b"old")
    inode_before = target.stat().st_ino
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != inode_before  # replaced by rename, not rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["metadata.json"]


def test_an_open_reader_keeps_the_old_content(tmp_path):
    target = tmp_path / "metadata.json"
    target.write_bytes(b"old content")
    with target.open("rb") as reader:
        write_atomic(target, b"new content")
        assert reader.read() == b"old content"
    assert target.read_bytes() == b"new content"


def test_failure_leaves_target_and_directory_untouched(tmp_path):
    target = tmp_path / "metadata.json"
    target.write_bytes(b"old")

    with pytest.raises(TypeError):
        write_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["metadata.json"]


def test_missing_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "nope" / "x.json", b"x")
