"""The altnames kvdev added go once no longer wanted, and nobody else's do (a live agent).

Found by the metadata fuzz (``--hypothesis-seed=1`` and ``3``): a valid input whose claim name
held invalid UTF-8 (decoded to U+FFFD, as Go's reader does) gave vf-1's link an altname
such as ``vm1---devices.nic-1.vf-1-b254ee6017``; when the good file came back the right altname
was added beside it, and the stale one stayed on the link for good. The agent now records each
altname in ``altnames.json`` before adding it and removes only those.
"""

import json

import pytest

from agentlab import NICS, ip, ip_json, snapshot

pytestmark = [pytest.mark.robustness, pytest.mark.netns]

USERS = "uplink-a"  # a person's altname: kvdev must never take it off
STALE = "vm1---devices.nic-1.vf-1-"  # "vm1-\ufffd-devices", made safe, and a hash of it


def reconcile(agent):
    code, body, _ = agent.post("/v1/reconcile")
    assert code == 200, body
    return body


def altnames(agent, dev):
    return sorted(ip_json(agent.ns, "link", "show", "dev", dev)[0].get("altnames", []))


def replace_file(path, data):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def test_a_claim_name_that_changes_and_back_leaves_exactly_the_wanted_altnames(live_agent):
    agent = live_agent
    ip(agent.ns, "link", "property", "add", "dev", "data0", "altname", USERS)
    assert altnames(agent, "data0") == sorted([USERS, "vm1-devices.nic-1.vf-1"])
    before = snapshot(agent.ns)
    path = agent.tree / NICS
    good = path.read_bytes()
    assert b'"name": "vm1-devices"' in good  # the claim's name, in every version of the stream
    replace_file(path, good.replace(b'"name": "vm1-devices"', b'"name": "vm1-\xff-devices"'))
    assert reconcile(agent)["metadataErrors"] == []  # valid: upstream's reader takes it
    [users, stale] = altnames(agent, "data0")
    assert (users, stale[: len(STALE)], len(stale)) == (USERS, STALE, len(STALE) + 10)
    journal = json.loads((agent.work / "state" / "altnames.json").read_text())
    assert USERS not in {name for names in journal.values() for name in names}

    replace_file(path, good)
    assert reconcile(agent)["metadataErrors"] == []
    assert snapshot(agent.ns) == before  # exactly the wanted altnames, and the person's

    replace_file(path, b"{")  # invalid: the last good state stays, nothing is removed
    assert reconcile(agent)["metadataErrors"] != []
    assert snapshot(agent.ns) == before
    assert "Traceback" not in agent.log()
