"""kvdev-agent end to end on real links: a network namespace stands in for the guest.

The agent runs as a real process inside the namespace (``ip netns exec``), against a copy of
the bundled example tree; every assertion reads the kernel with ``ip -j``.
"""

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentlab import (
    NICS,
    add_link,
    addresses,
    agent_args,
    eventually,
    ip,
    ip_json,
    link,
    make_guest,
    serving,
    snapshot,
    stream_objects,
    write_atomically,
)

HELPER = Path(__file__).resolve().parents[2] / "packaging" / "libexec" / "kvdev-udev-marks"

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


@pytest.fixture
def guest(netns, tmp_path):
    """The namespace with the example's three NICs, and a private copy of the example tree."""
    return netns, make_guest(netns, tmp_path), tmp_path


def run_once(ns, tree, work, *extra):
    cmd = ["ip", "netns", "exec", ns, *agent_args(tree, work, "--once", *extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_once_configures_the_example(guest):
    ns, tree, work = guest
    done = run_once(ns, tree, work)
    assert "vm1-devices/nic-1/sriov.example.com/node-a/vf-1" in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr  # the GPU is missing in a netns
    data0, data1, fast0 = link(ns, "data0"), link(ns, "data1"), link(ns, "fast0")
    assert data0["address"] == "02:00:00:3b:02:01"
    assert data0["mtu"] == 9000
    assert "UP" in data0["flags"]
    assert "vm1-devices.nic-1.vf-1" in data0.get("altnames", [])
    assert "fast-nic.nic.pci-0000-5e-00-1" in fast0.get("altnames", [])
    assert data1["mtu"] == 9000
    assert addresses(ns, "data0") == ["10.1.0.5/24"]
    assert addresses(ns, "data1") == ["10.1.0.6/24"]
    assert addresses(ns, "fast0") == ["192.0.2.10/24", "198.51.100.7/24", "2001:db8:5e::10/64"]
    routes = ip_json(ns, "route", "show", "proto", "75")
    assert [(r["dst"], r["gateway"], r["dev"], r["metric"]) for r in routes] == [
        ("10.3.0.0/16", "10.1.0.1", "data0", 100)
    ]
    saved = json.loads((work / "state" / "status.json").read_text())
    assert saved["kind"] == "AgentStatus"
    assert saved["counts"] == {"Configured": 3, "Missing": 1}
    # the agent asks for the name as data; root's helper renders the .link file (issue 23 §1)
    assert (work / "network" / "data0.wish").read_text().startswith(("mac ", "permanent-mac "))
    rendered = work / "rendered"
    helper = subprocess.run(
        [sys.executable, str(HELPER)],
        env={
            **os.environ,
            "KVDEV_LINK_WISHES": str(work / "network"),
            "KVDEV_NETWORK_DIR": str(rendered),
            "KVDEV_MARK_DIR": str(work / "state" / "marks"),
            "KVDEV_SYSFS": str(work / "no-sysfs"),  # the marks need udev: not here
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert helper.returncode == 0, helper.stderr
    link_file = (rendered / "10-kvdev-data0.link").read_text()
    assert "Name=data0" in link_file
    assert sorted(p.name for p in rendered.iterdir()) == [
        "10-kvdev-data0.link",
        "10-kvdev-data1.link",
        "10-kvdev-fast0.link",
    ]
    again = run_once(ns, tree, work, "--dry-run", "--json")
    status = json.loads(again.stdout)
    assert [d["phase"] for d in status["devices"]] == [
        "Missing",
        "Configured",
        "Configured",
        "Configured",
    ]


def files_under(root):
    """Every path under ``root`` with its type, size and content hash (directories: none)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", str(path.readlink()))
        elif path.is_dir():
            out[rel] = ("dir", oct(path.stat().st_mode))
        else:
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def test_a_dry_run_changes_nothing_writes_nothing_and_exits_as_documented(guest):
    """As root, a fresh state directory: no state dir, status, marks, link wishes; exit 1."""
    ns, tree, work = guest
    before_links, before_files = snapshot(ns), files_under(work)
    assert not (work / "state").exists()
    done = run_once(ns, tree, work, "--dry-run", "--json")
    status = json.loads(done.stdout)
    assert {d["phase"] for d in status["devices"]} == {"Pending", "Missing"}
    assert status["dryRun"] is True
    assert snapshot(ns) == before_links
    assert files_under(work) == before_files  # nothing created, changed or removed
    # documented (kvdev-agent --help, kvdev-agent(8)): 1 when --once leaves devices not configured
    assert done.returncode == 1, done.stdout + done.stderr


def test_invalid_metadata_changes_nothing(guest):
    ns, tree, work = guest
    (tree / NICS).write_text('{"apiVersion": "metadata.resource.k8s.io/v1beta1", "kind": "Dev')
    done = run_once(ns, tree, work, "--json")
    status = json.loads(done.stdout)
    assert any(NICS in e for e in status["metadataErrors"])
    assert link(ns, "eth1")["mtu"] == 1500
    assert addresses(ns, "eth1") == []


@pytest.fixture
def served(guest):
    ns, tree, work = guest
    with serving(ns, tree, work) as (proc, notify):
        yield ns, tree, work, proc, notify


def test_serve_converges_corrects_drift_and_survives_bad_input(served):
    ns, tree, _, proc, notify = served
    assert eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24"])

    # a metadata rewrite: one more IP on vf-1
    path = tree / NICS
    docs = stream_objects(path)
    for doc in docs:
        doc["requests"][0]["devices"][0]["networkData"]["ips"].append("10.1.0.50/24")
        doc["metadata"]["generation"] = 3
    write_atomically(path, "".join(json.dumps(d) + "\n" for d in docs))
    assert eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24", "10.1.0.50/24"])

    # drift: someone deletes a managed address; it comes back
    ip(ns, "addr", "del", "10.1.0.50/24", "dev", "data0")
    assert eventually(lambda: "10.1.0.50/24" in addresses(ns, "data0"))

    # a hints rewrite: another MTU for data0
    hints = tree / "kvdev/guest-hints.json"
    doc = json.loads(hints.read_text().splitlines()[0])
    doc["devices"][0]["network"]["mtu"] = 4000
    write_atomically(hints, json.dumps(doc) + "\n")
    assert eventually(lambda: link(ns, "data0")["mtu"] == 4000)

    # the IP leaves the metadata: kvdev removes the address it added, and only that
    ip(ns, "addr", "add", "10.1.0.99/24", "dev", "data0")  # someone else's
    for d in docs:
        d["requests"][0]["devices"][0]["networkData"]["ips"].remove("10.1.0.50/24")
    write_atomically(path, "".join(json.dumps(d) + "\n" for d in docs))
    assert eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24", "10.1.0.99/24"])
    ip(ns, "addr", "del", "10.1.0.99/24", "dev", "data0")
    for d in docs:
        d["requests"][0]["devices"][0]["networkData"]["ips"].append("10.1.0.50/24")
    write_atomically(path, "".join(json.dumps(d) + "\n" for d in docs))
    assert eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24", "10.1.0.50/24"])

    # a half-written file, then invalid JSON: nothing changes, the error is reported
    current = path.read_text()  # one compact object per line, as written above
    path.write_text(current[: current.index("\n") // 2])  # half of the first object
    time.sleep(0.5)
    assert addresses(ns, "data0") == ["10.1.0.5/24", "10.1.0.50/24"]
    assert eventually(lambda: any("metadata error" in s for s in notify.collect()))

    # hotplug: the NIC goes away and comes back (same MAC): configured again
    ip(ns, "link", "del", "data1")
    add_link(ns, "eth2", "02:00:00:3b:02:02", "peer2")
    assert eventually(lambda: addresses(ns, "data1") == ["10.1.0.6/24"])
    assert link(ns, "data1")["mtu"] == 9000

    # SIGTERM: clean exit, configuration stays
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert addresses(ns, "data0") == ["10.1.0.5/24", "10.1.0.50/24"]


def curl(work, path, *extra):
    done = subprocess.run(
        ["curl", "-sS", "--unix-socket", str(work / "agent.sock"), *extra, f"http://kvdev{path}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_local_api_answers_curl(served):
    _, _, work, _, _ = served
    assert eventually(lambda: curl(work, "/v1/status")["converged"] is False)  # the GPU is missing
    status = curl(work, "/v1/status")
    assert status["ready"] is True
    assert status["counts"] == {"Configured": 3, "Missing": 1}
    assert {c["claim"] for c in status["claims"]} == {
        "vm1-devices",
        "virt-launcher-vm1-fast-nic-q7w2x",
    }
    if importlib.util.find_spec("psutil") is not None:
        assert status["agent"]["rssBytes"] > 0
    else:  # EL9's python3.11 (test-compat's el9 leg): the pid alone
        assert "rssBytes" not in status["agent"]
        assert status["agent"]["pid"] > 0

    def vf1():
        return next(d for d in curl(work, "/v1/devices")["items"] if d["device"] == "vf-1")

    # "not converged" holds after the first pass already; the observed state is filled in by
    # the verify pass after it
    assert eventually(lambda: (vf1().get("observed") or {}).get("interface") == "data0")
    vf1 = vf1()
    assert vf1["observed"]["mtu"] == 9000
    assert "10.1.0.5/24" in vf1["observed"]["addresses"]
    assert vf1["interfaceStats"]["rxBytes"] >= 0
    one = curl(work, "/v1/devices/fast-nic/nic/pci-0000-5e-00-1")
    assert one["phase"] == "Configured"
    assert curl(work, "/v1/plan")["steps"] == []
    assert curl(work, "/v1/reconcile", "-X", "POST")["converged"] is False
    events = curl(work, "/v1/events?since=0")
    assert {e["type"] for e in events["items"]} >= {"DeviceAdded"}
    assert curl(work, "/healthz")["ok"] is True
    missing = curl(work, "/v1/devices/nope/nic/vf-9")
    assert (missing["kind"], missing["code"]) == ("Error", 404)


def test_a_rename_on_real_links_puts_back_the_routes_and_addresses_the_link_had(guest):
    # Finding 7: a rename takes the link down, and the kernel deletes its routes and IPv6
    # addresses; kvdev put back only its own. Now what was not kvdev's comes back too.
    ns, tree, work = guest
    ip(ns, "link", "set", "eth1", "up")
    ip(ns, "addr", "add", "10.1.0.200/24", "dev", "eth1")
    ip(ns, "addr", "add", "2001:db8:77::5/64", "dev", "eth1", "nodad")
    ip(ns, "route", "add", "192.168.50.0/24", "via", "10.1.0.1", "dev", "eth1", "proto", "static")
    ip(ns, "route", "add", "2001:db8:99::/48", "via", "2001:db8:77::1", "dev", "eth1")
    run_once(ns, tree, work)
    assert link(ns, "data0")["address"] == "02:00:00:3b:02:01"  # renamed: it went down
    routes = {
        (r["dst"], r.get("gateway"), r.get("protocol"))
        for r in ip_json(ns, "route", "show", "dev", "data0")
        + ip_json(ns, "-6", "route", "show", "dev", "data0")
    }
    assert ("192.168.50.0/24", "10.1.0.1", "static") in routes
    assert ("2001:db8:99::/48", "2001:db8:77::1", None) in routes  # boot: ip -j omits it
    assert ("10.3.0.0/16", "10.1.0.1", "75") in routes  # the hints' own
    assert addresses(ns, "data0") == ["10.1.0.200/24", "10.1.0.5/24", "2001:db8:77::5/64"]
    again = run_once(ns, tree, work, "--dry-run", "--json")
    assert not [d for d in json.loads(again.stdout)["devices"] if d.get("pendingSteps")]


def test_an_mtu_below_the_ipv6_minimum_with_ipv6_addresses_is_refused_before_any_step(guest):
    """Hints mtu 1000 + an IPv6 address in networkData.ips: nothing half-applied (issue 23 §5)."""
    ns, tree, work = guest
    path = tree / NICS
    docs = stream_objects(path)
    for doc in docs:
        doc["requests"][0]["devices"][0]["networkData"]["ips"].append("2001:db8:1::5/64")
    write_atomically(path, "".join(json.dumps(d) + "\n" for d in docs))
    hints = tree / "kvdev/guest-hints.json"
    doc = json.loads(hints.read_text().splitlines()[0])
    doc["devices"][0]["network"]["mtu"] = 1000
    write_atomically(hints, json.dumps(doc) + "\n")
    done = run_once(ns, tree, work, "--json")
    status = json.loads(done.stdout)
    assert "Errno 22" not in done.stdout + done.stderr
    assert link(ns, "data0")["mtu"] == 1500  # the refused MTU was not set
    assert addresses(ns, "data0") == ["10.1.0.5/24", "2001:db8:1::5/64"]  # all the rest is
    vf1 = next(d for d in status["devices"] if d["device"] == "vf-1")
    said = " ".join([vf1["reason"], *vf1["warnings"]])
    assert "network.mtu 1000" in said, vf1
    assert "1280" in said, vf1


def test_once_on_a_metadata_root_that_is_not_there_warns_and_says_what_it_did(netns, tmp_path):
    done = run_once(netns, tmp_path / "nonexist", tmp_path)
    assert done.returncode == 0, done.stderr  # nothing described is nothing left undone
    assert f"WARNING metadata root {tmp_path}/nonexist does not exist: " in done.stderr
    assert "this pass configures nothing (no device is described)" in done.stderr
    assert done.stdout.splitlines()[-1] == "no devices described"


def test_once_shows_names_no_api_server_would_accept_as_escaped_warnings(guest):
    """A device name that retitles the window and a pool that clears the screen: the pass
    goes on (warnings, never errors), its text shows them escaped, the status lists them."""
    ns, tree, work = guest
    gpu = next((tree / "resourceclaims").rglob("gpu.nvidia.com-metadata.json"))
    docs = stream_objects(gpu)
    for doc in docs:
        device = doc["requests"][0]["devices"][0]
        device["name"], device["pool"] = "gpu\x1b]0;pwned\x07", "Node_A\x1b[2J"
    gpu.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    done = run_once(ns, tree, work)
    assert done.returncode == 1, done.stdout + done.stderr  # the GPU is missing, as ever
    shown = done.stdout + done.stderr
    assert "\x1b]" not in shown
    assert "\x1b[2J" not in shown
    assert "gpu\\x1b]0;pwned\\x07" in done.stdout
    saved = json.loads((work / "state" / "status.json").read_text())
    assert saved["counts"] == {"Configured": 3, "Missing": 1}
    warned = "\n".join(saved["metadataWarnings"])
    assert "requests[0].devices[0].name" in warned
    assert "requests[0].devices[0].pool" in warned
    assert "metadata warning: [upstream]" in done.stdout
