"""The guest's own topology on real links: a NIC stacked into it is refused, the rest goes ahead.

Regressions (issue 23 §2, "stacked links"): the safety policy looked only at the bound link, so
a NIC that is a port of the guest's bridge was renamed (taking it down), its MTU change shrank
the bridge's and its address landed on the enslaved port; a NIC carrying a macvlan or a vxlan
was reconfigured under them. Each such NIC is now refused per device, with the reason in the
status, and every other device is configured as before.
"""

import json
import os
import subprocess

import pytest

from agentlab import addresses, agent_args, ip, link, make_guest

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

VF1 = "vm1-devices/nic-1/sriov.example.com/node-a/vf-1"  # eth1 -> data0, MTU 9000, 10.1.0.5/24
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"  # eth2 -> data1, 10.1.0.6/24


def run_once(ns, tree, work):
    cmd = ["ip", "netns", "exec", ns, *agent_args(tree, work, "--once", "--json")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    return {d["ref"]: d for d in json.loads(done.stdout)["devices"]}


def reasons(device):
    """Everything the status says about a device, as one text (its reason is in it)."""
    return json.dumps(device)


def test_a_bridge_port_and_a_macvlan_parent_are_refused_and_the_rest_configured(netns, tmp_path):
    ns, work = netns, tmp_path
    tree = make_guest(ns, work)
    ip(ns, "link", "add", "br0", "type", "bridge")
    ip(ns, "link", "set", "eth1", "master", "br0")
    ip(ns, "link", "set", "br0", "up")
    ip(ns, "link", "set", "eth1", "up")
    ip(ns, "link", "add", "mv0", "link", "eth2", "type", "macvlan")
    bridge_before = link(ns, "br0")

    devices = run_once(ns, tree, work)

    port = link(ns, "eth1")  # not renamed to data0, not re-MTU'd, no address
    assert port["mtu"] == 1500
    assert "vm1-devices.nic-1.vf-1" not in port.get("altnames", [])
    assert port["master"] == "br0"
    assert addresses(ns, "eth1") == []
    bridge = link(ns, "br0")
    assert (bridge["mtu"], bridge["operstate"]) == (
        bridge_before["mtu"],
        bridge_before["operstate"],
    )
    parent = link(ns, "eth2")
    assert parent["mtu"] == 1500
    assert addresses(ns, "eth2") == []
    assert devices[VF1]["phase"] == "Error"
    assert "eth1 is a port of br0 (bridge)" in reasons(devices[VF1])
    refused = [d for d in devices.values() if "eth2 carries mv0 (macvlan)" in reasons(d)]
    assert [d["phase"] for d in refused] == ["Error"]
    assert addresses(ns, "fast0") == ["192.0.2.10/24", "198.51.100.7/24", "2001:db8:5e::10/64"]


def test_the_link_a_vxlan_sends_through_is_refused_and_a_free_link_configured(netns, tmp_path):
    ns, work = netns, tmp_path
    tree = make_guest(ns, work)
    ip(ns, "link", "add", "vx0", "type", "vxlan", "id", "42", "dev", "eth3", "dstport", "4789")

    devices = run_once(ns, tree, work)

    assert addresses(ns, "eth3") == []
    assert link(ns, "eth3")["mtu"] == 1500
    refused = [d for d in devices.values() if "eth3 carries vx0 (vxlan)" in reasons(d)]
    assert [d["phase"] for d in refused] == ["Error"]
    assert devices[VF1]["phase"] == "Configured"
    assert addresses(ns, "data0") == ["10.1.0.5/24"]


def test_at_boot_the_nic_the_guests_network_manager_will_configure_is_not_taken(netns, tmp_path):
    # Regression (issue 23 §2, "boot order"): before any DHCP lease the primary NIC carries no
    # default route; metadata naming its MAC renamed it. Its NetworkManager profile says it is
    # the guest's: untouched from the first pass on, and so after the lease too.
    ns, work = netns, tmp_path
    tree = make_guest(ns, work)
    keyfile = work / "guest-root/etc/NetworkManager/system-connections/uplink.nmconnection"
    keyfile.parent.mkdir(parents=True)
    keyfile.write_text(
        "[connection]\nid=uplink\ntype=ethernet\n\n[ethernet]\nmac-address=02:00:00:3B:02:01\n"
    )

    devices = run_once(ns, tree, work)

    assert link(ns, "eth1")["mtu"] == 1500  # not renamed to data0, not touched
    assert addresses(ns, "eth1") == []
    assert devices[VF1]["phase"] == "Error"
    assert "eth1 is the guest's own NIC" in devices[VF1]["reason"]
    assert str(keyfile) in devices[VF1]["reason"]
    assert addresses(ns, "fast0") == ["192.0.2.10/24", "198.51.100.7/24", "2001:db8:5e::10/64"]
    keyfile.unlink()  # whatever the next boot reads, the decision holds
    assert run_once(ns, tree, work)[VF1]["phase"] == "Error"
    assert addresses(ns, "eth1") == []


def test_at_first_boot_networkmanagers_auto_default_keeps_the_guests_way_out(netns, tmp_path):
    # NetworkManager with its defaults (no no-auto-default) gives every ethernet NIC without a
    # profile a DHCP connection, with no file at all, and the metadata describes every NIC it
    # would connect, the primary's MAC among them: taking them all would leave the guest no
    # network. kvdev holds them until the first lease says which is the guest's own.
    ns, work = netns, tmp_path
    tree = make_guest(ns, work)
    conf = work / "guest-root/etc/NetworkManager/NetworkManager.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[main]\nplugins=ifupdown,keyfile\n")

    devices = run_once(ns, tree, work)

    assert [devices[ref]["phase"] for ref in (VF1, VF2)] == ["Error", "Error"]
    assert "NetworkManager's auto-default would connect it" in devices[VF1]["reason"]
    assert link(ns, "eth1")["mtu"] == 1500  # not renamed to data0, not touched
    assert addresses(ns, "eth1") == []
    ip(ns, "addr", "add", "10.0.2.15/24", "dev", "eth1")  # the lease lands on eth1
    ip(ns, "link", "set", "eth1", "up")
    ip(ns, "route", "add", "default", "via", "10.0.2.2", "dev", "eth1", "proto", "dhcp")
    after = run_once(ns, tree, work)
    assert "eth1 carries the default route" in after[VF1]["reason"]
    assert after[VF2]["phase"] == "Configured"
    assert addresses(ns, "data1") == ["10.1.0.6/24"]
