"""packaging/libexec/kvdev-metadata-share: what it asks of the kernel, on a made-up sysfs.

The script reads sysfs and the mount table (``KVDEV_SYSFS``, ``KVDEV_MOUNTINFO`` name scratch
ones) and calls ``modprobe``, ``mount`` and ``sleep``; here those are scripts on PATH that log
their arguments and answer as a test says. The real mount of a real virtio-fs share is in the VM e2e
(tests/e2e/test_vm_kubevirt.py); this covers the branches a VM cannot easily show: no device, a
device without the tag, a kernel without a tag list, a refused mount, a unit restarted.
"""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from fuselab import hung_share
from kvdev.schema.tree import ROOT

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "libexec" / "kvdev-metadata-share"
UNIT = REPO / "systemd" / "kvdev-metadata-share.service"
TAG = "kvdev-metadata"
TARGET_NAME = "dra-device-attributes"
HANG_GUARD = 120  # seconds: only so that a blocked script fails the test instead of hanging it


class Box:
    """A scratch sysfs and mount table, a PATH of logging commands, and the script's outcome."""

    def __init__(self, tmp: Path) -> None:
        self.sys = tmp / "sys"
        self.bin = tmp / "bin"
        self.log = tmp / "calls.log"
        self.target = tmp / "run" / TARGET_NAME
        self.bin.mkdir()
        self.log.touch()
        self.answers = {"modprobe": 0, "mount": 0, "sleep": 0}
        self.mountinfo: Path | None = tmp / "mountinfo"  # None: the kernel's
        self.mountinfo.write_text("22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n")

    def device(self, name: str, **files: str) -> None:
        """A sysfs device directory under ``name`` (e.g. bus/pci/devices/0000:00:05.0)."""
        where = self.sys / name
        where.mkdir(parents=True)
        for key, value in files.items():
            (where / key).write_text(value + "\n")

    def tags(self, *tags: str) -> None:
        """/sys/fs/virtiofs with one instance per tag (an empty call: the list, no share)."""
        (self.sys / "fs" / "virtiofs").mkdir(parents=True, exist_ok=True)
        for n, tag in enumerate(tags):
            self.device(f"fs/virtiofs/{n}", tag=tag)

    def run(self) -> subprocess.CompletedProcess[str]:
        """Run the script with the logging tools; its own session, output through files.

        A script still running after ``HANG_GUARD`` seconds (blocked: the figure is only there
        so that the test fails instead of hanging) is killed with its whole session, since a
        command blocked on a hung share would keep pipes open.
        """
        for name, code in self.answers.items():
            tool = self.bin / name
            tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.log}"\nexit {code}\n')
            tool.chmod(0o755)
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "KVDEV_SYSFS": str(self.sys),
            "LC_ALL": "C",
        }
        if self.mountinfo is not None:
            env["KVDEV_MOUNTINFO"] = str(self.mountinfo)
        out, err = self.log.with_name("stdout"), self.log.with_name("stderr")
        argv = ["/bin/sh", str(SCRIPT), TAG, str(self.target)]
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(argv, stdout=o, stderr=e, env=env, start_new_session=True)
            try:
                code = proc.wait(timeout=HANG_GUARD)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                pytest.fail(f"the script had not ended after {HANG_GUARD} s: it is blocked")
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())

    def calls(self, name: str) -> list[str]:
        return [c for c in self.log.read_text().splitlines() if c.split()[0] == name]


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def virtio_fs_pci(box: Box) -> None:
    box.device("bus/pci/devices/0000:00:05.0", vendor="0x1af4", device="0x105a")


def test_a_vm_without_a_virtio_fs_device_loads_nothing_and_mounts_nothing(box):
    box.device("bus/pci/devices/0000:00:03.0", vendor="0x1af4", device="0x1041")  # a virtio NIC
    box.device("bus/virtio/devices/virtio0", device="0x0001")
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert box.calls("modprobe") == []
    assert box.calls("mount") == []
    assert not box.target.exists()


def test_the_tagged_share_is_mounted_read_only_at_the_target(box):
    virtio_fs_pci(box)
    box.tags("other-share", TAG)
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert box.calls("modprobe") == ["modprobe -q virtiofs"]
    assert box.calls("mount") == [f"mount -t virtiofs -o ro,nosuid,nodev,noexec {TAG} {box.target}"]
    assert box.target.is_dir()
    assert "mounted virtio-fs share 'kvdev-metadata' read-only" in done.stderr


def test_a_virtio_device_26_on_another_transport_counts_as_a_device(box):
    box.device("bus/virtio/devices/virtio3", device="0x001a")  # e.g. virtio-ccw, virtio-mmio
    box.tags(TAG)
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert len(box.calls("mount")) == 1


def test_shares_with_other_tags_only_mount_nothing_after_a_bounded_wait(box):
    virtio_fs_pci(box)
    box.tags("home", "data")
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert box.calls("mount") == []
    assert len(box.calls("sleep")) == 10  # the wait is ten tries, never unbounded
    assert "no virtio-fs share tagged 'kvdev-metadata'" in done.stderr


def test_without_a_tag_list_a_refused_mount_means_no_share_not_a_failure(box):
    virtio_fs_pci(box)  # a kernel before 6.9 keeps no /sys/fs/virtiofs
    box.answers["mount"] = 32
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert len(box.calls("mount")) == 1
    assert box.calls("sleep") == []
    assert "mount refused" in done.stderr


def test_a_listed_share_that_does_not_mount_fails_the_unit(box):
    virtio_fs_pci(box)
    box.tags(TAG)
    box.answers["mount"] = 32
    done = box.run()
    assert done.returncode == 1
    assert "present but not mounted" in done.stderr


def test_a_restarted_unit_leaves_an_existing_mount_alone(box):
    virtio_fs_pci(box)
    box.tags(TAG)
    escaped = str(box.target).replace(" ", "\\040")
    with box.mountinfo.open("a") as table:
        table.write(f"40 22 0:35 / {escaped} ro,relatime - virtiofs {TAG} ro\n")
    done = box.run()
    assert done.returncode == 0, done.stderr
    assert box.calls("mount") == []
    assert box.calls("modprobe") == []


def test_the_unit_mounts_where_the_agent_reads_by_default():
    exec_start = next(
        line for line in UNIT.read_text().splitlines() if line.startswith("ExecStart=")
    )
    _, tag, target = exec_start.removeprefix("ExecStart=").split()
    assert tag == TAG
    assert os.path.normpath(target) == os.path.normpath(ROOT.replace("/var/run/", "/run/", 1))


def test_a_hung_share_already_mounted_is_seen_from_the_mount_table_never_touched(box, tmp_path):
    """was: ``mountpoint -q`` stat()ed the target and blocked on a share that stopped answering."""
    virtio_fs_pci(box)
    box.tags(TAG)
    box.mountinfo = None  # the kernel's own table, where the real mount is
    with hung_share(tmp_path / "host", box.target) as share:
        share.hang()
        try:
            done = box.run()
        finally:
            share.answer()
    assert done.returncode == 0, done.stderr
    assert "mounted already" in done.stderr
    assert box.calls("mount") == []


def test_the_unit_and_its_mount_are_bounded():
    unit = UNIT.read_text()
    assert "\nTimeoutStartSec=" in unit
    assert 'timeout -k 5 "$MOUNT_SECONDS" mount ' in SCRIPT.read_text()
