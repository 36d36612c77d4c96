"""The real agent follows a bundle that ``kvdev-host bundle`` republishes from outside.

A network namespace stands in for the guest (``agentlab``); the agent's ``--metadata-root``
is the bundle's ``current`` link, either on the local file system (inotify sees the swap) or
through a bindfs FUSE mount of the host's directory, like a virtiofs share: there inotify
sees nothing of the host's writes and the agent's ``auto`` poll must notice the swap.
"""

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import EXAMPLES, add_link, eventually, link, serving

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

TREE = EXAMPLES / "dra-device-attributes"
PLAN = """\
apiVersion: bundle.kvdev.io/v1alpha1
kind: GuestPlan
devices:
- {{claim: vm1-devices, request: nic-1, device: vf-1, interfaceName: data0, mtu: {mtu}}}
"""


def bundle(out: Path, work: Path, mtu: int) -> None:
    plan = work / f"plan-{mtu}.yaml"
    plan.write_text(PLAN.format(mtu=mtu))
    host_cli = [sys.executable, "-m", "kvdev.host", "bundle", "--from-tree", str(TREE)]
    done = subprocess.run(
        [*host_cli, "--guest-plan", str(plan), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def bindfs_mount(tmp_path):
    if shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs bindfs and /dev/fuse")
    host, guest = tmp_path / "host", tmp_path / "guest"
    host.mkdir()
    guest.mkdir()
    done = subprocess.run(["bindfs", str(host), str(guest)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"bindfs cannot mount here: {done.stderr.decode().strip()}")
    try:
        yield host, guest
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(guest)], check=False)


def follow(netns, work: Path, host_side: Path, guest_side: Path) -> str:
    add_link(netns, "eth1", "02:00:00:3b:02:01", "peer1")
    bundle(host_side, work, 9000)
    with serving(netns, guest_side / "current", work):
        assert eventually(lambda: link(netns, "data0")["mtu"] == 9000)
        bundle(host_side, work, 4000)  # republished on the host side: current is swapped
        assert eventually(lambda: link(netns, "data0")["mtu"] == 4000, timeout=15)
    return (work / "agent.log").read_text()


def test_agent_follows_a_republished_bundle_locally(netns, tmp_path):
    out = tmp_path / "share"
    log = follow(netns, tmp_path, out, out)
    assert "polling" not in log


def test_agent_follows_a_republished_bundle_through_a_fuse_share(netns, tmp_path, bindfs_mount):
    host, guest = bindfs_mount
    log = follow(netns, tmp_path, host, guest)
    assert f"{guest}/current is on fuse: polling it every 2 s" in log
