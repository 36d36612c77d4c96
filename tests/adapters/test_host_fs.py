"""kvdev.host.fs.rewrite: in place (the inode a bind mount holds), never a torn file on disk."""

import errno
import json
import os

import pytest

from kvdev.errors import PermanentError
from kvdev.host import fs


def test_rewrite_keeps_the_inode_and_the_mode(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes(b'{"a": 1}\n')
    path.chmod(0o600)
    inode = path.stat().st_ino
    fs.rewrite(path, b'{"a": 22}\n')
    assert path.read_bytes() == b'{"a": 22}\n'
    assert (path.stat().st_ino, path.stat().st_mode & 0o777) == (inode, 0o644)


def test_a_shorter_content_killed_before_the_cut_leaves_valid_json(tmp_path, monkeypatch):
    path = tmp_path / "m.json"
    old = json.dumps({"generation": 1, "ips": ["10.0.0.1/24"] * 20}).encode() + b"\n"
    new = json.dumps({"generation": 2}).encode() + b"\n"
    path.write_bytes(old)

    def killed(*_args):
        raise KeyboardInterrupt  # stands in for a SIGKILL between the write and the cut

    monkeypatch.setattr(fs.os, "ftruncate", killed)
    with pytest.raises(KeyboardInterrupt):
        fs.rewrite(path, new)
    on_disk = path.read_bytes()
    assert len(on_disk) == len(old)  # padded, not yet cut
    assert json.loads(on_disk) == {"generation": 2}  # the new content and whitespace only


def test_a_missing_file_is_created_and_a_fifo_is_refused(tmp_path):
    fs.rewrite(tmp_path / "new.json", b"{}")
    assert (tmp_path / "new.json").read_bytes() == b"{}"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(PermanentError, match="fifo"):
        fs.rewrite(tmp_path / "fifo", b"{}")


def test_a_symlink_is_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (tmp_path / "m.json").symlink_to(target)
    with pytest.raises(PermanentError) as raised:
        fs.rewrite(tmp_path / "m.json", b"{}")
    assert os.strerror(errno.ELOOP) in str(raised.value)
    assert target.read_bytes() == b"keep"
