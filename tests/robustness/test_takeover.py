"""Hostile metadata against the guest's own network: the safety policy on real links.

Regression (robustness probe, finding 7, "takeover is silent"): metadata naming the primary
NIC's MAC got it an address and an altname, a hint renamed it and the rename took its default
route with it; duplicate addresses, the primary NIC's address on a data NIC, a metric-0 default
route and a route into 127.0.0.0/8 were applied without a word. Finding 6: a hint address
0.0.0.0/0 was silently not applied, ff02::1 failed at the kernel after earlier addresses.
Probe IV, class 3: ``0.0.0.0/1`` + ``128.0.0.0/1`` through a data NIC were only warned about and
applied (8.8.8.8 then left through it), an address ``10.0.2.99/25`` on a data NIC took the
primary's DNS server, ``1.2.3.4/1`` added half a default route: all refused now, with the
metadata service's address and a route over the primary's DNS server.

The namespace gets a primary NIC (``uplink``: 10.0.2.15/24, default route via 10.0.2.2 as a
DHCP client would leave it) next to the example's NICs; every hostile ask below is written
while the agent runs. What must hold: the primary NIC is exactly as it was; each refusal is on
its device only and shown by ``kvdev explain``; what is only warned about is applied; every
other device keeps what it had.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import HINTS, add_link, eventually, ip, ip_json, snapshot

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

KVDEV = str(Path(sys.executable).parent / "kvdev")
UPLINK_MAC = "52:54:00:12:34:56"
VF1 = "vm1-devices/nic-1/sriov.example.com/node-a/vf-1"
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"
TAKEOVER = "takeover/nic/evil.example.com/p/primary"
FAST = "virt-launcher-vm1-fast-nic-q7w2x/nic/dra.net/node-a/pci-0000-5e-00-1"


def primary(ns, work):
    add_link(ns, "uplink", UPLINK_MAC, "uplink-peer")
    ip(ns, "addr", "add", "10.0.2.15/24", "dev", "uplink")
    ip(ns, "link", "set", "uplink", "up")
    ip(ns, "route", "add", "default", "via", "10.0.2.2", "dev", "uplink", "proto", "dhcp")
    resolv = work / "guest-root/etc/resolv.conf"  # as the DHCP client leaves it
    resolv.parent.mkdir(parents=True, exist_ok=True)
    resolv.write_text("nameserver 10.0.2.3\nnameserver 8.8.8.8\n")


def route_get(ns, destination):
    """The link the guest's kernel sends ``destination`` through."""
    return ip_json(ns, "route", "get", destination)[0]["dev"]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def hostile(tree):
    """Every ask of the finding, at once; how many asks that is."""
    claim = {
        "apiVersion": "metadata.resource.k8s.io/v1beta1",
        "kind": "DeviceMetadata",
        "metadata": {"name": "takeover", "namespace": "vms", "generation": 1},
        "requests": [
            {
                "name": "nic",
                "devices": [
                    {
                        "driver": "evil.example.com",
                        "pool": "p",
                        "name": "primary",
                        "networkData": {"hardwareAddress": UPLINK_MAC, "ips": ["10.9.9.9/24"]},
                    }
                ],
            }
        ],
    }
    write(tree / "resourceclaims/takeover/nic/evil.example.com-metadata.json", json.dumps(claim))
    hints = json.loads((tree / HINTS).read_text())
    hints["devices"].append(
        {
            "claim": {"resourceClaimName": "takeover"},
            "request": "nic",
            "network": {"interfaceName": "stolen0", "mtu": 1400},
        }
    )
    by_device = {h.get("device"): h for h in hints["devices"]}
    by_device["vf-1"]["network"]["addresses"] = ["10.1.0.99/24"]
    by_device["vf-2"]["network"]["addresses"] = [
        "10.0.2.15/32",  # the primary NIC's address
        "10.1.0.5/24",  # vf-1's
        "10.1.0.99/24",  # what vf-1 asks for too
        "0.0.0.0/0",
        "ff02::1/128",
        "10.0.2.99/25",  # its prefix holds the primary's DNS server 10.0.2.3
        "1.2.3.4/1",  # half a default route
    ]
    by_device["vf-2"]["network"]["routes"] = [
        {"destination": "0.0.0.0/0", "gateway": "10.1.0.1", "metric": 0},
        {"destination": "127.0.0.0/8", "gateway": "10.1.0.1"},
        {"destination": "0.0.0.0/1", "gateway": "10.1.0.1"},
        {"destination": "128.0.0.0/1", "gateway": "10.1.0.1"},
        {"destination": "169.254.169.254/32", "gateway": "10.1.0.1"},
        {"destination": "10.0.2.128/25", "gateway": "10.1.0.1"},  # the primary's prefix
        {"destination": "8.8.8.0/24", "gateway": "10.1.0.1"},  # the primary's DNS server
        {"destination": "169.254.1.0/24", "gateway": "10.1.0.1"},  # warned: link-local
        {"destination": "10.1.0.128/25", "gateway": "10.1.0.1"},  # warned: overlaps data0's
    ]
    write(tree / HINTS, json.dumps(hints))
    return 20


def explain(agent, ref):
    done = subprocess.run(
        [KVDEV, "--socket", str(agent.sock), "explain", ref],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def addresses(ns):
    return {
        lk["ifname"]: sorted(
            f"{a['local']}/{a['prefixlen']}" for a in lk["addr_info"] if a["scope"] == "global"
        )
        for lk in ip_json(ns, "addr")
    }


def test_hostile_metadata_never_takes_the_guests_network(live_agent, report):
    agent = live_agent
    row = report("metadata-takeover")
    primary(agent.ns, agent.work)
    assert eventually(lambda: "uplink" in agent.get("/v1/status")[1]["unmanaged"])
    row.fds_before = agent.settled_fds()
    links, routes = snapshot(agent.ns)
    row.inputs = hostile(agent.tree)

    def vf2_warned():
        items = agent.get("/v1/devices")[1]["items"]
        return any(d["ref"] == VF2 and len(d["warnings"]) == 2 for d in items)

    assert eventually(vf2_warned, timeout=20)  # the watcher saw the files and a pass ran
    agent.post("/v1/reconcile")
    devices = {d["ref"]: d for d in agent.get("/v1/devices")[1]["items"]}
    # the primary NIC: untouched, and the device that named it says why
    after_links, after_routes = snapshot(agent.ns)
    uplink = [v for v in after_links.values() if v[1] == UPLINK_MAC]
    assert uplink == [v for v in links.values() if v[1] == UPLINK_MAC]  # name, MTU, addresses
    default = [r for r in ip_json(agent.ns, "route") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"], r["protocol"]) for r in default] == [
        ("10.0.2.2", "uplink", "dhcp")
    ]
    assert devices[TAKEOVER]["phase"] == "Error"
    assert "uplink carries the default route" in devices[TAKEOVER]["reason"]
    assert "uplink carries the default route" in explain(agent, TAKEOVER)
    # vf-2: each refusal named; what is only warned about applied
    text = explain(agent, VF2)
    for refused in (
        "10.0.2.15 is already on uplink",
        "10.1.0.5 is already on data0",
        f"10.1.0.99 is also asked for by {VF1}",
        "address 0.0.0.0/0 is the unspecified address",
        "address ff02::1/128 is a multicast address",
        "default route with metric 0 would take over from 0.0.0.0/0 via 10.0.2.2 dev uplink",
        "route 127.0.0.0/8 leads into loopback space",
        "route 0.0.0.0/1 through data1 is shorter than /8",
        "route 128.0.0.0/1 through data1 is shorter than /8",
        "route 169.254.169.254/32 through data1 would capture 169.254.169.254, the cloud's",
        "route 10.0.2.128/25 through data1 would capture 10.0.2.0/24, the prefix of uplink",
        "route 8.8.8.0/24 through data1 would capture 8.8.8.8, a DNS server the guest reaches",
        "address 10.0.2.99/25 (its prefix 10.0.2.0/25) through data1 would capture 10.0.2.0/24",
        "address 1.2.3.4/1 (its prefix 0.0.0.0/1) through data1 is shorter than /8",
        "set network.primary: true in its hint",
    ):
        assert refused in devices[VF2]["reason"], devices[VF2]["reason"]
        assert refused in text
    assert devices[VF2]["warnings"] == [
        "route 169.254.1.0/24 leads into link-local space through data1",
        "route 10.1.0.128/25 overlaps 10.1.0.0/24 dev data0",
    ]
    assert "route 169.254.1.0/24 leads into link-local space" in text
    data1 = {
        (r["dst"], r.get("gateway")) for r in ip_json(agent.ns, "route", "show", "dev", "data1")
    }
    assert {("169.254.1.0/24", "10.1.0.1"), ("10.1.0.128/25", "10.1.0.1")} <= data1
    # the primary's traffic still leaves through it: the Internet, its DNS servers, metadata
    for destination in ("8.8.8.8", "1.1.1.1", "200.1.2.3", "10.0.2.3", "169.254.169.254"):
        assert route_get(agent.ns, destination) == "uplink", destination
    # everyone else keeps what they had; the duplicate went to neither
    assert devices[VF1]["reason"] == f"address 10.1.0.99/24: 10.1.0.99 is also asked for by {VF2}"
    assert devices[FAST]["phase"] == "Configured"
    now = addresses(agent.ns)
    assert now["data0"] == ["10.1.0.5/24"]
    assert now["data1"] == ["10.1.0.6/24"]
    assert now["uplink"] == ["10.0.2.15/24"]
    assert "stolen0" not in now
    # nothing else changed: the links as before, the routes as before plus the two warned ones
    unintended = after_links != links or set(after_routes) - set(routes) != {
        r
        for r in after_routes
        if json.loads(r).get("dev") == "data1"
        and json.loads(r)["dst"] in {"169.254.1.0/24", "10.1.0.128/25"}
    }
    row.unintended = int(unintended)
    assert not unintended
    row.crashes = 0 if agent.alive() else 1
    assert agent.alive()
    assert "Traceback" not in agent.log()
    row.fds_after = agent.fds()
    row.max_rss_mb = round(agent.rss() / 2**20, 1)


def test_first_boot_a_protected_nic_is_never_taken_before_any_lease(live_agent):
    """Before its lease the guest's own NIC carries no default route and no configuration names
    it; metadata describing its MAC (with a hint renaming it) got it renamed and marked. The
    controller's hints name it in protectedNICs: it stays exactly as the kernel made it."""
    agent = live_agent
    add_link(agent.ns, "uplink", UPLINK_MAC, "uplink-peer")  # no address, no route: no lease yet
    hints = json.loads((agent.tree / HINTS).read_text())
    hints["protectedNICs"] = [{"macAddress": UPLINK_MAC}]
    write(agent.tree / HINTS, json.dumps(hints))
    links, _ = snapshot(agent.ns)
    hostile(agent.tree)  # the claim describing the uplink's MAC, the hint renaming it (and more)

    def refused():
        items = agent.get("/v1/devices")[1]["items"]
        return any(d["ref"] == TAKEOVER and d["phase"] == "Error" for d in items)

    assert eventually(refused, timeout=20)
    agent.post("/v1/reconcile")
    devices = {d["ref"]: d for d in agent.get("/v1/devices")[1]["items"]}
    assert "protectedNICs[0] name it, by MAC" in devices[TAKEOVER]["reason"]
    assert "uplink is the guest's own NIC" in explain(agent, TAKEOVER)
    after_links, _ = snapshot(agent.ns)
    uplink = [v for v in after_links.values() if v[1] == UPLINK_MAC]
    assert uplink == [v for v in links.values() if v[1] == UPLINK_MAC]  # name, MTU, state
    marks = agent.work / "state" / "marks"
    assert list(marks.glob("mac-*"))  # the data NICs' marks are there; the uplink has none
    assert not (marks / f"mac-{UPLINK_MAC}").exists()
    assert not list((agent.work / "network").glob("*stolen0*"))
    assert "Traceback" not in agent.log()
