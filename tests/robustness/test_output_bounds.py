"""Per-device text stays bounded: output and memory grow linearly with devices, and shrink again.

Regression (robustness probe, finding 3): duplicate MACs made each Ambiguous device's reason
list every competitor: 600 such devices made ``/v1/devices`` 7.2 MB and 2,000 made it 82 MB
per response (360 MB RSS, 130 MB still after the files were gone). Here hostile claims describe
N more devices with the MAC of vf-1's NIC; sizes, RSS and pass times are printed as figures; the
per-device size may not grow with N (a bound on bytes, not on time).
"""

import json
import os
import shutil

import pytest

from agentlab import eventually, snapshot

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

MAC = "02:00:00:3b:02:01"  # eth1's: vf-1 of the example binds it
PER_FILE = 200  # below MAX_DEVICES per file
PER_DEVICE_BYTES = 2048  # what one Ambiguous device may cost in /v1/devices, at most


def hostile_claims(tree, n):
    """``n`` devices, ``PER_FILE`` per claim file, every one with vf-1's MAC."""
    top = tree / "resourceclaims"
    for f in range((n + PER_FILE - 1) // PER_FILE):
        devices = [
            {
                "driver": "dup.example.com",
                "pool": "p",
                "name": f"dup-{f}-{i}",
                "networkData": {"hardwareAddress": MAC},
            }
            for i in range(min(PER_FILE, n - f * PER_FILE))
        ]
        doc = {
            "apiVersion": "metadata.resource.k8s.io/v1beta1",
            "kind": "DeviceMetadata",
            "metadata": {"name": f"dup-{f}", "namespace": "vms", "generation": 1},
            "requests": [{"name": "nic", "devices": devices}],
        }
        path = top / f"dup-{f}" / "nic" / "dup.example.com-metadata.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(doc) + "\n")


def remove_hostile(tree):
    for claim in (tree / "resourceclaims").glob("dup-*"):
        shutil.rmtree(claim)


def measure(agent, n):
    hostile_claims(agent.tree, n)
    took = agent.post("/v1/reconcile", timeout=120)[1]["tookSeconds"]
    status, body, _ = agent.get("/v1/devices", timeout=30)
    assert status == 200
    size = len(json.dumps(body))
    saved = (agent.work / "state" / "status.json").stat().st_size
    ambiguous = [d for d in body["items"] if d["phase"] == "Ambiguous"]
    reasons = max(len(d["reason"]) for d in ambiguous)
    candidates = max(len(d["candidates"]) for d in ambiguous)
    rss = agent.rss()
    print(
        f"{n} devices with one MAC: /v1/devices {size / 1e6:.2f} MB, status.json "
        f"{saved / 1e6:.2f} MB, RSS {rss / 2**20:.0f} MB, pass {took} s, longest reason "
        f"{reasons} bytes, at most {candidates} candidates"
    )
    assert len(ambiguous) == n + 1  # vf-1 too: n + 1 devices want eth1
    remove_hostile(agent.tree)
    agent.post("/v1/reconcile", timeout=120)
    return size, saved, rss


def test_duplicate_macs_cost_linear_output_and_memory_that_returns(live_agent, long_run, report):
    agent = live_agent
    row = report("output-bounds (long)" if long_run else "output-bounds")
    links_before = snapshot(agent.ns)
    row.fds_before, rss_before = agent.settled_fds(), agent.rss()
    small, large = (1000, 2000) if long_run else (300, 600)
    size_small, saved_small, rss_small = measure(agent, small)
    size_large, saved_large, rss_large = measure(agent, large)
    row.inputs = small + large
    row.max_rss_mb = round(max(rss_small, rss_large) / 2**20, 1)
    assert size_large <= PER_DEVICE_BYTES * (large + 4)
    assert size_large <= 2.2 * size_small  # twice the devices, about twice the bytes
    assert saved_large <= 2.2 * saved_small
    after = agent.rss()
    print(f"RSS before {rss_before / 2**20:.0f} MB, after the devices went {after / 2**20:.0f} MB")
    assert after - rss_before < 40 * 2**20  # what the devices cost is (mostly) given back
    assert eventually(lambda: agent.get("/v1/status")[1]["converged"] is False)  # the GPU
    assert agent.get("/v1/status")[1]["counts"] == {"Configured": 3, "Missing": 1}
    row.crashes = 0 if agent.alive() else 1
    assert agent.alive()
    assert "Traceback" not in agent.log()
    assert eventually(lambda: agent.fds() <= row.fds_before, timeout=15)
    row.fds_after = agent.fds()
    unintended = snapshot(agent.ns) != links_before  # vf-1 was Ambiguous: left as it was
    row.unintended = int(unintended)
    assert not unintended
