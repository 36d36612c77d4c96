"""A vhost-user NIC's driver MTU, from a v1beta1-only stream, on real links in a namespace.

The stream is dra-driver-ovsdpdk's shape (tests/data/metadata-now): ``mtu`` unqualified, no IPs,
no v1alpha1 object. The agent runs as a real process inside the namespace; assertions read the
kernel with ``ip -j``.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agentlab import HINTS, add_link, agent_args, link, make_guest, write_atomically
from kvdev.schema.metadata import OLDER_READERS_NOTE

DATA = Path(__file__).resolve().parents[1] / "data" / "metadata-now"
STREAM = "ovsdpdk-vhost-user-mtu-metadata.json"
PLACE = "resourceclaims/vm1-dpdk/nic/ovsdpdk.dra.example.com-metadata.json"
MAC = "52:54:00:aa:bb:01"

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


@pytest.fixture
def guest(netns, tmp_path):
    tree = make_guest(netns, tmp_path)
    add_link(netns, "eth4", MAC, "peer4")
    (tree / PLACE).parent.mkdir(parents=True)
    shutil.copyfile(DATA / STREAM, tree / PLACE)
    return netns, tree, tmp_path


def run_once(ns, tree, work):
    cmd = ["ip", "netns", "exec", ns, *agent_args(tree, work, "--once", "--json")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return json.loads(done.stdout)


def vhu(status):
    return next(d for d in status["devices"] if d["device"] == "vhu-0")


def test_the_driver_mtu_of_a_v1beta1_only_stream_is_set_on_the_nic(guest):
    ns, tree, work = guest
    status = run_once(ns, tree, work)
    device = vhu(status)
    assert device["phase"] == "Configured", device
    assert device["interface"] == "eth4"
    assert link(ns, "eth4")["mtu"] == 1450
    assert device["driverMtu"] == 1450
    assert device["notes"] == [OLDER_READERS_NOTE]
    claim = next(c for c in status["claims"] if c["claim"] == "vm1-dpdk")
    assert claim["apiVersion"] == "metadata.resource.k8s.io/v1beta1"


def test_a_hint_above_the_driver_mtu_gets_the_drivers_with_a_warning(guest):
    ns, tree, work = guest
    hints = tree / HINTS
    doc = json.loads(hints.read_text().splitlines()[0])
    doc["devices"].append(
        {
            "claim": {"resourceClaimName": "vm1-dpdk"},
            "request": "nic",
            "device": "vhu-0",
            "network": {"mtu": 9000},
        }
    )
    write_atomically(hints, json.dumps(doc) + "\n")
    device = vhu(run_once(ns, tree, work))
    assert link(ns, "eth4")["mtu"] == 1450
    assert any("MTU 9000, more than the driver's 1450" in w for w in device["warnings"]), device


def test_an_ifcfg_file_and_cloud_init_hotplug_on_its_nics_are_warnings(guest):
    ns, tree, work = guest
    root = work / "guest-root"
    ifcfg = root / "etc/sysconfig/network-scripts/ifcfg-eth4"
    ifcfg.parent.mkdir(parents=True)
    ifcfg.write_text(f"DEVICE=eth4\nHWADDR={MAC}\nBOOTPROTO=dhcp\n")
    cfg = root / "etc/cloud/cloud.cfg.d/10-hotplug.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("updates:\n  network:\n    when: [boot, hotplug]\n")
    status = run_once(ns, tree, work)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["IfcfgNamesManagedNic"]["severity"] == "Warning"
    assert f"{ifcfg} names eth4" in conditions["IfcfgNamesManagedNic"]["message"]
    assert str(cfg) in conditions["CloudInitHotplug"]["message"]
    assert vhu(status)["phase"] == "Configured"  # kvdev still configures it
    assert link(ns, "eth4")["mtu"] == 1450
