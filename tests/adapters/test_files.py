"""guest.files on a real file system: bounded reads, roles by place, links kept in the tree."""

import os
from pathlib import Path

from kvdev.guest.adapters import files
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import Role

META = "resourceclaims/claim-a/nic/sriov.example.com-metadata.json"


def put(root: Path, rel: str, data: bytes = b"{}") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def by_relpath(root: Path) -> dict[str | None, files.RawFile]:
    return {raw.relpath: raw for raw in files.read_tree(root)}


def test_tree_roles_by_place(tmp_path):
    put(tmp_path, META, b"meta")
    put(tmp_path, "resourceclaimtemplates/nic/nic/dra.net-metadata.json", b"tmpl")
    put(tmp_path, "kvdev/guest-hints.json", b"hints")
    put(tmp_path, "resourceclaims/claim-a/nic/notes.txt")
    raws = by_relpath(tmp_path)
    assert raws[META].role is Role.DEVICE_METADATA
    assert raws[META].data == b"meta"
    assert raws["resourceclaimtemplates/nic/nic/dra.net-metadata.json"].data == b"tmpl"
    assert raws["kvdev/guest-hints.json"].role is Role.GUEST_HINTS
    unrelated = raws["resourceclaims/claim-a/nic/notes.txt"]
    assert unrelated.role is Role.UNRELATED
    assert unrelated.data is None


def test_subdirectory_of_a_tree_keeps_upstream_relpath(tmp_path):
    put(tmp_path, META, b"meta")
    (raw,) = files.read_tree(tmp_path / "resourceclaims" / "claim-a")
    assert raw.relpath == META
    assert raw.role is Role.DEVICE_METADATA


def test_explicit_file_inside_a_tree_gets_its_location(tmp_path):
    path = put(tmp_path, "x/" + META, b"meta")
    (raw,) = files.read_path(path)
    assert raw.relpath == META
    assert raw.role is Role.DEVICE_METADATA


def test_explicit_file_outside_a_tree_is_sniffed(tmp_path):
    hints = put(tmp_path, "h.json", b'{"apiVersion":"guest.kvdev.io/v1alpha1","kind":"GuestHints"}')
    (raw,) = files.read_path(hints)
    assert raw.role is Role.GUEST_HINTS
    assert raw.relpath is None


def test_symlink_out_of_the_tree_is_not_read(tmp_path):
    secret = put(tmp_path, "outside/secret", b"do not read")
    root = tmp_path / "tree"
    link = root / META
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    raw = by_relpath(root)[META]
    assert raw.data is None
    assert raw.problem is not None
    assert "outside the tree" in raw.problem.message


def test_symlink_inside_the_tree_is_followed(tmp_path):
    real = put(tmp_path, "store/data.json", b"inside")
    link = tmp_path / META
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    assert by_relpath(tmp_path)[META].data == b"inside"


def test_file_too_large_is_a_read_problem(tmp_path):
    put(tmp_path, META, b" " * (MAX_STREAM_BYTES + 1))
    raw = by_relpath(tmp_path)[META]
    assert raw.data is None
    assert raw.problem is not None
    assert "larger than" in raw.problem.message


def test_file_at_the_limit_is_read(tmp_path):
    put(tmp_path, META, b" " * MAX_STREAM_BYTES)
    raw = by_relpath(tmp_path)[META]
    assert raw.data is not None
    assert len(raw.data) == MAX_STREAM_BYTES


def test_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "fifo-metadata.json"
    os.mkfifo(path)
    (raw,) = files.read_path(path)
    assert raw.data is None
    assert raw.problem is not None
    assert "not a regular file" in raw.problem.message


def test_vanished_file_is_a_problem_not_an_exception(tmp_path):
    (raw,) = files.read_path(tmp_path / "gone-metadata.json")
    assert raw.data is None
    assert raw.problem is not None
    assert "cannot read" in raw.problem.message
