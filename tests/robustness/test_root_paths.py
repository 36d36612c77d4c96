"""Every root path that reads or writes under a directory an unprivileged user owns, run against
a tree that user rewrites between its steps (``rootpaths``: symlinks, FIFOs, hard links,
directory swaps, deterministically, never by racing).

* ``kvdev collect`` (in-process, every filesystem call hooked): before each step in turn, and
  before every step, the entry the step is about is rewritten; the tarball must hold none of
  the root-only mirror's bytes, be 0600 with 0600 members, and no call may follow the user's
  link or block on a FIFO.
* ``kvdev-udev-marks`` (in-process the same way, udev's database a test's dict and
  ``udevadm`` a no-op on PATH): no ``.link`` file from a secret wish, no link followed.
* ``kvdev-metadata-share`` (a shell script): its target under a directory the user owns,
  rewritten before the run and at its ``modprobe`` step (the stand-in runs the user's move
  with ``setpriv``); ``mount`` must never be called.
* The packages' tmpfiles.d and sysusers.d rules, applied twice (install, then upgrade) to a
  scratch root whose ``/var/lib/kvdev`` and ``/run/kvdev`` the user filled and rewrote
  between: nothing of root's changes, nothing of the user's is chowned or chmodded; and the
  packages have no maintainer script of their own (debhelper's and the rpm macros' only).
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
from functools import partial
from pathlib import Path

import pytest
from rootpaths import KINDS, SECRET, UID, mirror, under_attack

from kvdev.guest import udevmarks
from kvdev.guest.cli import collect

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the root paths run as root"),
]
REPO = Path(__file__).resolve().parents[2]


def _summary(wrong: list[str]) -> str:
    """Each kind of failure once (paths left out), then the first few in full."""
    kinds = sorted({re.sub(r"/\S+", "PATH", w.partition(": ")[2]) for w in wrong})
    return "\n".join([f"{len(wrong)} failures, of these kinds:", *kinds, "first:", *wrong[:5]])


def _every_step(once, tmp_path: Path, row, name: str, at_least: int) -> None:
    """``once`` undisturbed (to count its steps), then with each kind of move before each
    step in turn, then three times with a move before every step; no run may go wrong."""
    wrong, steps = once(tmp_path / "calm", "none", None, attack=False)
    assert steps > at_least  # the hook sees the walk
    runs = [(kind, at) for kind in KINDS for at in range(steps)] + [("every", None)] * 3
    for n, (kind, at) in enumerate(runs):
        got, _ = once(tmp_path / f"run{n}", kind, at, attack=True)
        row.inputs += 1
        row.unintended += bool(got)
        wrong += got
    print(f"{name}: {steps} steps, {len(runs)} rewritten runs, {len(wrong)} failures")
    assert wrong == [], _summary(wrong)


def _secret(rel: str) -> bytes:
    return SECRET + rel.encode() + b"\n"


# --------------------------------------------------------------------------- kvdev collect


def _state_tree(base: Path) -> Path:
    tree = base / "state"
    for d in ("links", "marks", "sub/deep"):
        (tree / d).mkdir(parents=True)
    (tree / "status.json").write_text('{"kind": "AgentStatus"}\n')
    (tree / "renames.json").write_text("{}\n")
    (tree / "links/eth1.wish").write_text("mac 02:00:00:00:00:01")
    (tree / "marks/mac-02:00:00:00:00:01").write_text("")
    (tree / "sub/deep/notes.txt").write_text("kvdev's own\n")
    return tree


def _collect_once(base: Path, kind: str, at: int | None, attack: bool) -> tuple[list[str], int]:
    """One ``kvdev collect`` of a fresh tree; (what went wrong, steps)."""
    base.mkdir()
    tree = _state_tree(base)
    mirror(tree, base / "secret", _secret)
    tarball = base / "out" / "support.tar.gz"
    tarball.parent.mkdir()
    args = argparse.Namespace(
        socket=str(base / "no-agent.sock"),
        timeout=None,
        tarfile=str(tarball),
        metadata_root=str(tree),
        state_dir=str(tree),
        with_metadata=True,
    )
    run = partial(collect.run, args, io.StringIO(), io.StringIO())
    code, steps = under_attack(tree, base / "secret", kind, at, run, attack=attack)
    wrong = [f"{kind}@{at}: {v}" for v in steps.violations]
    if code != 0:
        wrong.append(f"{kind}@{at}: exit {code}")
        return wrong, steps.count
    raw = tarball.read_bytes()
    if SECRET in gzip.decompress(raw):
        wrong.append(f"{kind}@{at}: root-only bytes in the tarball")
    if stat.S_IMODE(tarball.stat().st_mode) != 0o600:
        wrong.append(f"{kind}@{at}: tarball mode {stat.S_IMODE(tarball.stat().st_mode):o}")
    with tarfile.open(tarball) as tar:
        modes = {m.name: m.mode for m in tar.getmembers() if m.mode != 0o600}
    if modes:
        wrong.append(f"{kind}@{at}: {len(modes)} members not 0600")
    return wrong, steps.count


# --------------------------------------------------------------------------- kvdev-udev-marks

MAC, SECRET_MAC = "02:00:00:00:00:01", "02:00:00:00:00:99"


def _udev_once(base: Path, kind: str, at: int | None, attack: bool) -> tuple[list[str], int]:
    base.mkdir()
    tree = base / "state"
    (tree / "links").mkdir(parents=True)
    (tree / "marks").mkdir()
    (tree / "links/eth1.wish").write_text(f"mac {MAC}")
    (tree / f"marks/mac-{MAC}").write_text("")
    mirror(tree, base / "secret", lambda _: f"mac {SECRET_MAC}".encode())
    for mark in (base / "secret/marks").iterdir():
        mark.rename(mark.with_name(f"mac-{MAC}"))
    network = base / "network"
    network.mkdir()
    sysfs = base / "sys/class/net/eth1"
    (sysfs / "device").mkdir(parents=True)
    (sysfs / "address").write_text(MAC + "\n")

    def run() -> None:
        files = udevmarks.render(tree / "links", network)
        udevmarks.update_marks(base / "sys", tree / "marks", files)

    _, steps = under_attack(tree, base / "secret", kind, at, run, attack=attack)
    wrong = [f"{kind}@{at}: {v}" for v in steps.violations]
    rendered = "".join(p.read_text() for p in network.iterdir() if p.is_file())
    if SECRET_MAC in rendered:
        wrong.append(f"{kind}@{at}: a .link file from root-only content")
    return wrong, steps.count


@pytest.mark.parametrize(
    ("name", "once", "at_least"),
    [("kvdev collect", _collect_once, 10), ("kvdev-udev-marks", _udev_once, 3)],
    ids=["collect", "udev-marks"],
)
def test_a_root_path_reads_nothing_of_roots_whatever_the_user_swaps_at_any_step(
    name, once, at_least, tmp_path, monkeypatch, report
):
    row = report(f"root paths: {name}")
    bin_dir = tmp_path / "bin"  # no journalctl (not under test), udevmarks' udevadm a no-op
    bin_dir.mkdir()
    (bin_dir / "udevadm").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "udevadm").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    db = {"eth1": {"INTERFACE": "eth1", "ID_PATH": "pci-0000:00:05.0"}}
    monkeypatch.setattr(udevmarks, "_export_db", lambda: db)
    _every_step(once, tmp_path, row, name, at_least)


# --------------------------------------------------------------------------- kvdev-metadata-share

SHARE = REPO / "packaging" / "libexec" / "kvdev-metadata-share"
MOVES = {
    "symlink": "mv k8s/target k8s/target~ 2>/dev/null; ln -s {secret} k8s/target",
    "fifo": "rm -rf k8s/target; mkfifo k8s/target",
    "dirswap": "mv k8s k8s~; ln -s {secret} k8s",
}


def _share_once(base: Path, move: str | None, when: str) -> tuple[int, list[str], str]:
    """The helper with its target at ``base/run/m/k8s/target`` (``m`` and below: the user's)."""
    secret = base / "secret"
    secret.mkdir(parents=True, mode=0o700)
    (secret / "passwd").write_text("root-only\n")
    top = base / "run"
    (top / "m/k8s/target").mkdir(parents=True)
    for path in (top / "m", top / "m/k8s", top / "m/k8s/target"):
        os.chown(path, UID, UID)
    script = MOVES[move].format(secret=secret) if move else ":"
    as_user = (
        f"cd {top / 'm'} && setpriv --reuid={UID} --regid={UID} --clear-groups sh -c '{script}'"
    )
    if when == "before":
        subprocess.run(["sh", "-c", as_user], check=True)
    bin_dir, log = base / "bin", base / "calls.log"
    bin_dir.mkdir()
    log.touch()
    hook = as_user if when == "modprobe" else ":"
    for name, body in {"modprobe": hook, "mount": ":", "sleep": ":"}.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{body}\nexit 0\n')
        (bin_dir / name).chmod(0o755)
    sysfs = base / "sys/bus/pci/devices/0000:00:05.0"
    sysfs.mkdir(parents=True)
    (sysfs / "vendor").write_text("0x1af4\n")
    (sysfs / "device").write_text("0x105a\n")
    (base / "sys/fs/virtiofs/0").mkdir(parents=True)
    (base / "sys/fs/virtiofs/0/tag").write_text("kvdev-metadata\n")
    (base / "mountinfo").write_text("22 1 254:1 / / rw - ext4 /dev/vda rw\n")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KVDEV_SYSFS": str(base / "sys"),
        "KVDEV_MOUNTINFO": str(base / "mountinfo"),
        "LC_ALL": "C",
    }
    target = top / "m/k8s/target"
    done = subprocess.run(
        ["/bin/sh", str(SHARE), "kvdev-metadata", str(target)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    mounts = [c for c in log.read_text().splitlines() if c.startswith("mount ")]
    return done.returncode, mounts, done.stderr


def test_the_share_is_never_mounted_through_a_directory_the_user_owns(tmp_path, report):
    row = report("root paths: kvdev-metadata-share")
    wrong = []
    runs = [(m, w) for m in (None, *MOVES) for w in ("before", "modprobe")]
    for n, (move, when) in enumerate(runs):
        code, mounts, err = _share_once(tmp_path / f"run{n}", move, when)
        row.inputs += 1
        if mounts or code != 1 or "not root's alone" not in err:
            row.unintended += 1
            wrong.append(f"{move}@{when}: exit {code}, {mounts}, {err.strip()[-200:]}")
    assert wrong == [], "\n".join(wrong)


# --------------------------------------------------------------------------- packaging rules


def _hostile_root(root: Path) -> tuple[Path, list[Path]]:
    """A scratch root whose /var/lib/kvdev and /run/kvdev the user filled with traps."""
    secret = root / "root/secret"
    secret.parent.mkdir(parents=True, mode=0o700)
    secret.write_bytes(_secret("secret"))
    secret.chmod(0o600)
    (root / "etc").mkdir()
    owned = []
    for d in ("var/lib/kvdev", "run/kvdev"):
        here = root / d
        (here / "marks").mkdir(parents=True)
        (here / "links").symlink_to(secret.parent)
        (here / "status.json").symlink_to(secret)
        os.mkfifo(here / "fifo")
        os.link(secret, here / "hard")
        for path in (here, here / "marks", here / "links", here / "status.json", here / "fifo"):
            os.lchown(path, UID, UID)
            owned.append(path)
    return secret, owned


def _snapshot(paths: list[Path]) -> dict[str, tuple[int, int, int]]:
    out = {}
    for p in paths:
        with_link = p.lstat()
        out[str(p)] = (with_link.st_uid, with_link.st_gid, with_link.st_mode)
    return out


def test_tmpfiles_and_sysusers_on_install_and_upgrade_touch_nothing_the_user_owns(tmp_path, report):
    row = report("root paths: tmpfiles, sysusers, maintainer scripts")
    tmpfiles, sysusers = shutil.which("systemd-tmpfiles"), shutil.which("systemd-sysusers")
    if tmpfiles is None or sysusers is None:
        pytest.skip("systemd-tmpfiles and systemd-sysusers are needed")
    root = tmp_path / "root"
    secret, owned = _hostile_root(root)
    before_secret = (secret.read_bytes(), _snapshot([secret]))
    before = _snapshot(owned)
    wrong = []
    for phase in ("install", "upgrade"):
        for cmd in (
            [sysusers, f"--root={root}", str(REPO / "packaging/system/kvdev.sysusers")],
            [tmpfiles, f"--root={root}", "--create", str(REPO / "packaging/system/kvdev.tmpfiles")],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            row.inputs += 1
            if done.returncode != 0:
                wrong.append(f"{phase}: {cmd[0]} exit {done.returncode}: {done.stderr}")
        if (secret.read_bytes(), _snapshot([secret])) != before_secret:
            wrong.append(f"{phase}: root's secret changed")
        if _snapshot(owned) != before:
            wrong.append(f"{phase}: the user's entries were chowned or chmodded")
        if phase == "upgrade":
            break
        # between install and upgrade the user swaps its directories again
        for d in ("var/lib/kvdev", "run/kvdev"):
            (root / d / "marks").rename(root / d / "marks~")
            (root / d / "marks").symlink_to(secret.parent)
            os.lchown(root / d / "marks", UID, UID)
            owned = [p for p in owned if p.name != "marks"] + [root / d / "marks"]
        before = _snapshot(owned)
    network = (root / "run/systemd/network").lstat()
    if (network.st_uid, stat.S_IMODE(network.st_mode)) != (0, 0o755):
        wrong.append("/run/systemd/network is not root's 0755")
    row.unintended += len(wrong)
    assert wrong == [], "\n".join(wrong)


def test_the_packages_run_no_maintainer_script_of_their_own():
    """debhelper's snippets (systemd-sysusers, systemd-tmpfiles --create, deb-systemd-helper,
    udevadm) and the rpm systemd macros are all the packages run as root on install, upgrade
    and purge; none of them reads under /var/lib/kvdev or /run/kvdev. A hand-written script
    would need to be listed in docs/reference/files-and-privileges.md and tested here."""
    scripts = ("preinst", "postinst", "prerm", "postrm", "config")
    found = [p.name for p in (REPO / "debian").iterdir() if p.name.split(".")[-1] in scripts]
    assert found == []
    spec = (REPO / "rpm/kvdev.spec").read_text().splitlines()
    sections = ("%pre", "%post", "%preun", "%postun", "%pretrans", "%posttrans", "%triggerin")
    body, inside = [], False
    for line in spec:
        if line.startswith("%"):
            inside = line.split()[0] in sections
            continue
        if inside and line.strip():
            body.append(line)
    assert body == [], body
    scriptlets = [line for line in spec if line.split()[:1] and line.split()[0] in sections]
    assert scriptlets == ["%post", "%preun", "%postun"]
    macros = [line for line in spec if line.startswith("%systemd_")]
    assert all("/var/lib" not in m and "/run/kvdev" not in m for m in macros)
