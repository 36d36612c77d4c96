"""The guest's own topology, drawn at random: a NIC stacked into it is never touched.

Regression class (issue 23 §2, "stacked links" and "boot order"): the safety policy looked only
at the bound link, so a NIC that was a port of the guest's bridge, or carried a macvlan or a
vxlan, or was named by the guest's own NetworkManager profile, was renamed, re-MTU'd or given
addresses. Each round draws, for each of the example's three NICs, how the guest uses it (a
bridge port, a macvlan's or a vxlan's parent, named by a NetworkManager keyfile, or free) and
runs the agent once in a fresh namespace; the invariant: every used NIC keeps its name, MTU,
addresses and master, and its device is refused with a reason; every free one is configured
as the example asks. Rounds are counted, never timed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid

import pytest

from agentlab import LINKS, addresses, agent_args, ip, link, make_guest

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]
USES = ("bridge-port", "macvlan-parent", "vxlan-parent", "keyfile", "free")
WANTED = {"eth1": "data0", "eth2": "data1"}  # the example renames these two (hints)


def stack(ns: str, work, nic: str, mac: str, use: str) -> None:
    """Make ``nic`` part of the guest's own topology as ``use`` says."""
    tag = nic[-1]
    if use == "bridge-port":
        ip(ns, "link", "add", f"br{tag}", "type", "bridge")
        ip(ns, "link", "set", nic, "master", f"br{tag}")
        ip(ns, "link", "set", f"br{tag}", "up")
    elif use == "macvlan-parent":
        ip(ns, "link", "add", f"mv{tag}", "link", nic, "type", "macvlan")
    elif use == "vxlan-parent":
        ip(ns, "link", "add", f"vx{tag}", "type", "vxlan", "id", f"4{tag}", "dev", nic,
           "dstport", "4789")  # fmt: skip
    elif use == "keyfile":
        keyfile = work / f"guest-root/etc/NetworkManager/system-connections/{nic}.nmconnection"
        keyfile.parent.mkdir(parents=True, exist_ok=True)
        keyfile.write_text(
            f"[connection]\nid={nic}\ntype=ethernet\n\n[ethernet]\nmac-address={mac}\n"
        )


def one_round(work, uses: dict[str, str]) -> list[str]:
    """Run the agent once over a fresh namespace stacked as ``uses``; what broke the invariant."""
    ns = f"kvdev-r-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        tree = make_guest(ns, work)
        for nic, mac in LINKS:
            stack(ns, work, nic, mac, uses[nic])
        before = {nic: link(ns, nic) for nic, _ in LINKS}
        cmd = ["ip", "netns", "exec", ns, *agent_args(tree, work, "--once", "--json")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        devices = json.loads(done.stdout)["devices"]
        bad = []
        for nic, _ in LINKS:
            if uses[nic] == "free":
                continue
            now = link(ns, nic)  # never renamed: it is still found under its name
            bad.extend(
                f"{nic} ({uses[nic]}): {key} {before[nic].get(key)} -> {now.get(key)}"
                for key in ("mtu", "master")
                if now.get(key) != before[nic].get(key)
            )
            if addresses(ns, nic):
                bad.append(f"{nic} ({uses[nic]}): addresses {addresses(ns, nic)}")
            if not any(nic in json.dumps(d) and d["phase"] == "Error" for d in devices):
                bad.append(f"{nic} ({uses[nic]}): no device refused with a reason naming it")
        for nic, name in WANTED.items():
            if uses[nic] == "free" and not addresses(ns, name):
                bad.append(f"{nic} (free): not configured as {name}")
        return bad
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)


def test_random_guest_topologies_never_lose_a_stacked_nic(tmp_path, long_run, report):
    row = report("the guest's own topology")
    seed = int(os.environ.get("SEED", random.randrange(2**32)))  # noqa: S311 - not a secret
    print(f"\n  stacked links: SEED={seed}")
    draw = random.Random(seed)  # noqa: S311 - a reproducible draw
    rounds = 60 if long_run else 6
    found = []
    for n in range(rounds):
        uses = {nic: draw.choice(USES) for nic, _ in LINKS}
        work = tmp_path / f"round{n}"
        work.mkdir()
        row.inputs += 1
        bad = one_round(work, uses)
        row.unintended += bool(bad)
        found.extend(f"round {n} {uses}: {b}" for b in bad)
    assert not found, found
