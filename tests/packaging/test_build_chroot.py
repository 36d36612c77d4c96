"""packaging/pkg/build-chroot.sh's cache key: which edits build a new Debian 13 build chroot.

The key is a hash of the script and of debian/control's Build-Depends field, so editing a
description reuses the chroot and adding a build dependency makes a new one. ``--key`` prints
the chroot directory without building anything (no root, no mmdebstrap, no network); each test
runs it on a copy of the script beside a control file of its own.
"""

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "pkg" / "build-chroot.sh"
CONTROL = REPO / "debian" / "control"


def key_for(tmp_path: Path, control: str) -> str:
    (tmp_path / "packaging" / "pkg").mkdir(parents=True, exist_ok=True)
    (tmp_path / "debian").mkdir(exist_ok=True)
    script = tmp_path / "packaging" / "pkg" / "build-chroot.sh"
    shutil.copy2(SCRIPT, script)
    (tmp_path / "debian" / "control").write_text(control)
    done = subprocess.run(
        [str(script), "--key"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "KVDEV_DEB_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(
        rf"{re.escape(str(tmp_path))}/cache/chroot-([0-9a-f]{{16}})\n", done.stdout
    )
    assert found, done.stdout
    assert not (tmp_path / "cache").exists(), "--key built or made something"
    return found[1]


def build_depends_field(control: str) -> str:
    """The source paragraph's Build-Depends* fields, continuation lines included, as written."""
    source = control.split("\n\n", 1)[0]
    return "".join(
        m[0] for m in re.finditer(r"^Build-Depends.*\n(?:[ \t].*\n)*", source + "\n", re.MULTILINE)
    )


@pytest.fixture
def control() -> str:
    return CONTROL.read_text()


def test_the_key_is_the_script_and_the_build_depends(tmp_path, control):
    field = build_depends_field(control)
    assert "python3-pytest" in field
    assert "Standards-Version" not in field
    expected = hashlib.sha256(SCRIPT.read_bytes() + field.encode()).hexdigest()[:16]
    assert key_for(tmp_path, control) == expected


def test_a_description_or_maintainer_edit_reuses_the_chroot(tmp_path, control):
    edited = control.replace("Description: ", "Description: edited, ").replace(
        "Maintainer: ", "Maintainer: Someone Else, "
    )
    assert edited != control
    assert key_for(tmp_path, edited) == key_for(tmp_path, control)


def test_a_build_dependency_edit_makes_a_new_chroot(tmp_path, control):
    added = control.replace("python3-pytest <!nocheck>,", "python3-pytest <!nocheck>,\n  zstd,")
    bumped = re.sub(r"python3-pydantic \(>= [\d.]+\)", "python3-pydantic (>= 2.99)", control)
    assert control not in {added, bumped}
    keys = {key_for(tmp_path, text) for text in (control, added, bumped)}
    assert len(keys) == 3


def test_a_control_file_without_build_depends_is_refused(tmp_path):
    (tmp_path / "packaging" / "pkg").mkdir(parents=True)
    (tmp_path / "debian").mkdir()
    script = tmp_path / "packaging" / "pkg" / "build-chroot.sh"
    shutil.copy2(SCRIPT, script)
    (tmp_path / "debian" / "control").write_text("Source: x\n\nPackage: x\n")
    done = subprocess.run([str(script), "--key"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "has no Build-Depends" in done.stderr
