"""The Makefile's root goals as a user: the virtualenv is built as that user, and only the
goal itself goes through sudo (issue 26 friction 14: `make demo` left a root-owned .venv).

``make -n`` as uid 65534 (setpriv) with a fake ``sudo`` first on PATH that records how it was
called and by whom; make runs the recursive ``$(MAKE)`` lines even under ``-n``, so the log
shows exactly what would run as whom.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("make") is None,
    reason="needs root, setpriv and make to run make as another user",
)


@pytest.fixture
def tmp_path():
    """A directory uid 65534 can reach (pytest's own is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="kvdev-make-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_make_demo_as_a_user_builds_the_venv_as_the_user_and_only_the_demo_as_root(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(REPO / "Makefile", clone)
    shutil.copy(REPO / "pyproject.toml", clone)
    (clone / "agent/kvdev").mkdir(parents=True)
    shutil.copy(REPO / "agent/kvdev/__init__.py", clone / "agent/kvdev")
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "sudo.log"
    (fake / "sudo").write_text(f'#!/bin/sh\necho "uid=$(id -u) $*" >> {log}\n')
    (fake / "sudo").chmod(0o755)
    for p in (tmp_path, clone, fake):
        p.chmod(0o777)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [*NOBODY, "make", "-n", "demo"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    venv = next(i for i, line in enumerate(lines) if "-m venv .venv" in line)
    sudo = next(i for i, line in enumerate(lines) if line.startswith("sudo "))
    assert venv < sudo  # the virtualenv first, by the user's own make, not through sudo
    assert lines[sudo] == "sudo env PYTHONDONTWRITEBYTECODE=1 make demo"
    assert log.read_text().splitlines() == ["uid=65534 env PYTHONDONTWRITEBYTECODE=1 make demo"]
    assert not (clone / ".venv").exists()  # -n: nothing was built
