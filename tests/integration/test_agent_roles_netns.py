"""The agent on real links keeps roles apart: what may speak as hints, what vouches for a route.

A live ``kvdev-agent`` in a network namespace, reading a ConfigMap volume laid out as kubelet
lays one out (a version directory, ``..data``, a link per key) or the example tree:

* a stream key holding a GuestHints document (``network.primary: true``, ``0.0.0.0/1`` +
  ``128.0.0.0/1``, a new name): an error on that key; no link, address or route changes;
* a sources index holding an object where an origin belongs: the agent keeps running and the
  status names the key and the field;
* a hint route applied before the lease, which then names a DNS server inside it: the next
  pass removes the route and says why (DNS is judged without kvdev's own routes).

Every assertion on the network reads the kernel with ``ip -j``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import EXAMPLES, HINTS, add_link, ip, ip_json, make_guest, serving, snapshot

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

KVDEV = str(Path(sys.executable).parent / "kvdev")
TREE = EXAMPLES / "dra-device-attributes"
NIC1 = "vm1-devices.nic-1.sriov.example.com-metadata.json"
EVIL = "vm1-devices.nic-2.evil.example.com-metadata.json"  # sorts before guest-hints.json
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"


def volume_keys():
    """The example as the controller writes it: a key per stream, the hints, no index."""
    keys = {}
    for path in TREE.rglob("*-metadata.json"):
        _, directory, request, name = path.relative_to(TREE).parts
        keys[f"{directory}.{request}.{name}"] = path.read_bytes()
    keys["guest-hints.json"] = (TREE / HINTS).read_bytes()
    return keys


def publish(volume, keys, serial):
    """A new version of the volume, swapped in by renaming ``..data`` (as kubelet does)."""
    volume.mkdir(exist_ok=True)
    version = volume / f"..2026_12_07_05_00_00.{serial:09d}"
    version.mkdir()
    for key, data in keys.items():
        (version / key).write_bytes(data)
    tmp = volume / "..data_tmp"
    tmp.symlink_to(version.name)
    tmp.replace(volume / "..data")
    for key in keys:
        if not (volume / key).is_symlink():
            (volume / key).symlink_to(f"..data/{key}")


def kvdev(work, *args):
    done = subprocess.run(
        [KVDEV, "--socket", str(work / "agent.sock"), "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def reconcile(work):
    return kvdev(work, "reconcile")


@pytest.fixture
def volume_guest(netns, tmp_path):
    make_guest(netns, tmp_path)
    volume = tmp_path / "volume"
    publish(volume, volume_keys(), 1)
    return netns, volume, tmp_path


def test_hints_under_a_stream_key_change_no_link_and_no_route(volume_guest):
    ns, volume, work = volume_guest
    with serving(ns, volume, work) as (proc, _):
        before = reconcile(work)
        assert before["metadataErrors"] == [], before["metadataErrors"]
        assert before["counts"] == {"Configured": 3, "Missing": 1}
        good = snapshot(ns)
        hints = json.loads((TREE / HINTS).read_text())
        vf2 = next(h for h in hints["devices"] if h.get("device") == "vf-2")
        vf2["network"] = {
            "interfaceName": "evil0",
            "primary": True,
            "routes": [
                {"destination": "0.0.0.0/1", "gateway": "10.1.0.1"},
                {"destination": "128.0.0.0/1", "gateway": "10.1.0.1"},
            ],
        }
        evil = {**hints, "devices": [vf2]}
        publish(volume, {**volume_keys(), EVIL: (json.dumps(evil) + "\n").encode()}, 2)
        after = reconcile(work)
        assert proc.poll() is None
        assert snapshot(ns) == good  # no link renamed, no address, no route
        assert not [r for r in ip_json(ns, "route") if r["dst"] in ("0.0.0.0/1", "128.0.0.0/1")]
        (error,) = after["metadataErrors"]
        assert error.startswith(f"{volume / EVIL}: stream[0]: apiVersion: a GuestHints object")
        assert "kvdev reads hints only from the key guest-hints.json" in error


def test_a_sources_index_the_agent_cannot_read_is_reported_and_the_agent_keeps_running(
    volume_guest,
):
    ns, volume, work = volume_guest
    with serving(ns, volume, work) as (proc, _):
        assert reconcile(work)["counts"] == {"Configured": 3, "Missing": 1}
        good = snapshot(ns)
        for serial, origin in enumerate(({}, ["driver"], {"deep": [[[1]]]}), start=2):
            index = {
                "apiVersion": "kvdev.io/v1alpha1",
                "kind": "StreamSources",
                "sources": {NIC1: origin},
            }
            keys = {**volume_keys(), "kvdev-sources.json": json.dumps(index).encode()}
            publish(volume, keys, serial)
            status = reconcile(work)
            assert proc.poll() is None, "the agent exited on the index"
            (error,) = status["metadataErrors"]
            assert error.startswith(f"{volume / 'kvdev-sources.json'}: sources['{NIC1}']: ")
            assert "stream sources index: found an " in error
            assert status["counts"] == {"Configured": 3, "Missing": 1}
            assert snapshot(ns) == good
        assert proc.poll() is None
        assert "Traceback" not in (work / "agent.log").read_text()


def test_a_hint_route_over_the_dns_server_the_lease_brings_is_removed_on_the_next_pass(
    netns, tmp_path
):
    tree = make_guest(netns, tmp_path)
    add_link(netns, "uplink", "52:54:00:12:34:56", "uplink-peer")  # the guest's primary NIC
    ip(netns, "addr", "add", "10.0.2.15/24", "dev", "uplink")
    ip(netns, "link", "set", "uplink", "up")
    ip(netns, "route", "add", "default", "via", "10.0.2.2", "dev", "uplink", "proto", "dhcp")
    hints = json.loads((tree / HINTS).read_text())
    vf2 = next(h for h in hints["devices"] if h.get("device") == "vf-2")
    vf2["network"]["routes"] = [{"destination": "9.9.0.0/16", "gateway": "10.1.0.1"}]
    (tree / HINTS).write_text(json.dumps(hints) + "\n")

    def hint_route():
        return [r for r in ip_json(netns, "route") if r["dst"] == "9.9.0.0/16"]

    with serving(netns, tree, tmp_path) as (proc, _):
        reconcile(tmp_path)  # first boot: no lease, no DNS server yet
        (applied,) = hint_route()
        assert applied["dev"] == "data1"
        resolv = tmp_path / "guest-root/etc/resolv.conf"  # the lease, as the DHCP client writes it
        resolv.parent.mkdir(parents=True, exist_ok=True)
        resolv.write_text("nameserver 9.9.9.9\n")
        status = reconcile(tmp_path)
        assert proc.poll() is None
        assert hint_route() == []
        got = ip_json(netns, "route", "get", "9.9.9.9")[0]
        assert got["dev"] == "uplink"  # the guest's DNS leaves through its own NIC again
        device = kvdev(tmp_path, "explain", VF2)
        reason = device.get("reason") or ""
        assert "route 9.9.0.0/16 through data1 would capture 9.9.9.9, a DNS server the guest " in (
            reason
        ), device
        assert "reaches through uplink" in reason
        assert status["counts"]["Configured"] == 2  # vf-1 and the fast NIC: vf-2 shows why
    log = (tmp_path / "agent.log").read_text()
    (removed,) = [line for line in log.splitlines() if "RemoveRoute route 9.9.0.0/16" in line]
    assert "kvdev added it and the safety policy refuses it now: route 9.9.0.0/16" in removed
