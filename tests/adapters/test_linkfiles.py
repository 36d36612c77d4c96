"""guest.linkfiles on a real file system: only kvdev's link wishes, written and removed safely."""

import os
import stat

import pytest

from kvdev.guest.adapters import linkfiles
from kvdev.guest.core import steps as s

CONTENT = "permanent-mac 02:00:00:00:00:01\n"  # a link wish (core/linkwish.py)


def write_step(path, content=CONTENT):
    return s.WriteLinkFile(3, "eth1", "c/r/d/p/vf-0", "keep the name", str(path), content)


def remove_step(path):
    return s.RemoveLinkFile(0, "", "", "no managed interface wants this name any more", str(path))


def test_write_creates_the_directory_and_the_file_with_mode_0644(tmp_path):
    path = tmp_path / "run" / "systemd" / "network" / "10-kvdev-net0.link"
    step = write_step(path)
    assert linkfiles.apply(step) == s.StepResult(step, ok=True)
    assert path.read_text() == CONTENT
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == ["10-kvdev-net0.link"]  # no temporary file left


def test_write_replaces_an_existing_file_and_its_mode(tmp_path):
    path = tmp_path / "10-kvdev-net0.link"
    path.write_text("old\n")
    path.chmod(0o600)
    assert linkfiles.apply(write_step(path, "new\n")).ok is True
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["10-kvdev-net0.link"]


def test_read_returns_only_link_wishes(tmp_path):
    for name, text in [
        ("net0.wish", "a\n"),
        ("net1.wish", "b\n"),
        ("10-kvdev-net0.link", "x\n"),  # what the root helper renders: not the agent's to read
        ("net0.wish.bak", "x\n"),
        ("net0.network", "x\n"),
    ]:
        (tmp_path / name).write_text(text)
    (tmp_path / "dir.wish").mkdir()  # unreadable as a file: skipped
    assert linkfiles.read(str(tmp_path)) == {
        f"{tmp_path}/net0.wish": "a\n",
        f"{tmp_path}/net1.wish": "b\n",
    }


def test_read_of_a_missing_directory_is_empty(tmp_path):
    assert linkfiles.read(str(tmp_path / "absent")) == {}


def test_read_of_a_regular_file_is_empty(tmp_path):
    (tmp_path / "f").write_text("")
    assert linkfiles.read(str(tmp_path / "f")) == {}


def test_read_sees_what_apply_wrote(tmp_path):
    path = tmp_path / "net0.wish"
    linkfiles.apply(write_step(path))
    assert linkfiles.read(str(tmp_path)) == {str(path): CONTENT}


def test_remove_deletes_the_file_and_nothing_else(tmp_path):
    path = tmp_path / "10-kvdev-net0.link"
    path.write_text(CONTENT)
    (tmp_path / "10-kvdev-net1.link").write_text(CONTENT)
    step = remove_step(path)
    assert linkfiles.apply(step) == s.StepResult(step, ok=True)
    assert os.listdir(tmp_path) == ["10-kvdev-net1.link"]


def test_remove_of_a_file_already_gone_succeeds(tmp_path):
    step = remove_step(tmp_path / "10-kvdev-net0.link")
    assert linkfiles.apply(step) == s.StepResult(step, ok=True)
    assert os.listdir(tmp_path) == []


# was a bug: reported as a permanent failure when the directory was gone too
def test_remove_when_the_directory_is_gone_too_succeeds(tmp_path):
    step = remove_step(tmp_path / "absent" / "10-kvdev-net0.link")
    assert linkfiles.apply(step) == s.StepResult(step, ok=True)


def test_write_under_a_regular_file_fails_without_raising(tmp_path):
    blocker = tmp_path / "network"
    blocker.write_text("not a directory\n")
    path = blocker / "10-kvdev-net0.link"
    step = write_step(path)
    result = linkfiles.apply(step)
    assert result == s.StepResult(
        step, ok=False, error=f"cannot write {path}: File exists", retryable=False
    )
    assert blocker.read_text() == "not a directory\n"


def test_write_deeper_under_a_regular_file_fails_without_raising(tmp_path):
    (tmp_path / "f").write_text("")
    path = tmp_path / "f" / "sub" / "10-kvdev-net0.link"
    result = linkfiles.apply(write_step(path))
    assert (result.ok, result.error, result.retryable) == (
        False,
        f"cannot write {path}: Not a directory",
        False,
    )


def test_write_over_a_directory_fails_without_raising(tmp_path):
    path = tmp_path / "10-kvdev-net0.link"
    (path / "inside").mkdir(parents=True)
    result = linkfiles.apply(write_step(path))
    assert (result.ok, result.error, result.retryable) == (
        False,
        f"cannot write {path}: Is a directory",
        False,
    )
    assert [p.name for p in tmp_path.iterdir()] == ["10-kvdev-net0.link"]  # no temporary left


@pytest.mark.parametrize(
    "step",
    [
        s.SetUp(3, "eth1", "c/r/d/p/vf-0", "a managed link is up"),
        s.AddAddress(3, "eth1", "c/r/d/p/vf-0", "listed", "10.1.0.5/24"),
        s.Step(3, "eth1", "", "base"),
    ],
)
def test_a_step_that_is_no_link_file_step_is_refused(step):
    assert linkfiles.apply(step) == s.StepResult(step, ok=False, error="not a link-file step")
