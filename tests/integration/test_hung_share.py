"""kvdev-agent with its metadata on a share that stops answering (issue 23 §3, first bullet).

The share is a bindfs (FUSE) mount whose daemon is SIGSTOPped (``fuselab``): every access of
it blocks, as with a virtiofs, 9p or NFS server that hangs. The agent runs for real in a network
namespace over veth links. Waits are bounded in steps of the agent's own work (``eventually``
only guards against a hang); times are printed as figures, never asserted.
"""

import json
import os
import shutil
import subprocess
import time

import pytest

from agentlab import NICS, addresses, agent_args, eventually, link, make_guest, serving
from fuselab import hung_share

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl"),
]
GUARD = 120.0  # seconds: only so that a hang fails the test instead of hanging the suite
DEADLINE = "1"  # --read-deadline: short, so that the test does not wait long for READY


def curl(work, path, *extra):
    done = subprocess.run(
        ["curl", "-sS", "--unix-socket", str(work / "agent.sock"), *extra, f"http://kvdev{path}"],
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=True,
    )
    return json.loads(done.stdout)


def conditions(status):
    return [c["type"] for c in status["conditions"]]


@pytest.fixture
def shared(netns, tmp_path):
    """(namespace, the host side tree, the guest side mount, the share, work dir)."""
    tree = make_guest(netns, tmp_path)
    with hung_share(tree, tmp_path / "share") as share:
        yield netns, tree, share, tmp_path


def test_a_share_hung_from_the_start_lets_the_agent_get_ready_and_recover(shared):
    ns, _, share, work = shared
    share.hang()
    started = time.monotonic()
    with serving(ns, share.guest, work, "--read-deadline", DEADLINE):
        ready = time.monotonic() - started
        status = curl(work, "/v1/status")  # the API answers while the share is hung
        assert "MetadataUnavailable" in conditions(status), status["conditions"]
        assert status["converged"] is False
        assert link(ns, "eth1")["mtu"] == 1500  # nothing read, nothing done
        share.answer()
        recovered = eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24"], GUARD)
        assert recovered
        after = eventually(
            lambda: "MetadataUnavailable" not in conditions(curl(work, "/v1/status")), GUARD
        )
        assert after
        took = time.monotonic() - started - ready
    print(
        f"hung share: READY=1 after {ready:.2f} s (read deadline {DEADLINE} s); "
        f"configured {took:.2f} s after the share answered again"
    )


def test_a_share_that_hangs_later_keeps_the_last_good_state_and_passes_go_on(shared):
    ns, tree, share, work = shared
    with serving(ns, share.guest, work, "--read-deadline", DEADLINE):
        assert eventually(lambda: addresses(ns, "data0") == ["10.1.0.5/24"], GUARD)
        share.hang()
        blocked = curl(work, "/v1/reconcile", "-X", "POST")  # a pass while the share hangs
        assert "MetadataUnavailable" in conditions(blocked), blocked["conditions"]
        vf1 = next(d for d in blocked["devices"] if d["device"] == "vf-1")
        assert vf1["phase"] == "Configured"  # the last good state is kept
        again = curl(work, "/v1/reconcile", "-X", "POST")  # the earlier read is still stuck
        assert "earlier read has not ended" in json.dumps(again["conditions"])
        # the host writes meanwhile; once the share answers, the agent reads it
        path = tree / NICS
        text = path.read_text().replace("10.1.0.5/24", '10.1.0.5/24", "10.1.0.55/24')
        share.answer()
        path.write_text(text)
        assert eventually(lambda: "10.1.0.55/24" in addresses(ns, "data0"), GUARD)
        assert eventually(
            lambda: "MetadataUnavailable" not in conditions(curl(work, "/v1/status")), GUARD
        )


def test_the_agent_stops_cleanly_while_the_share_hangs(shared):
    ns, _, share, work = shared
    share.hang()
    with serving(ns, share.guest, work, "--read-deadline", DEADLINE) as (proc, _):
        assert "MetadataUnavailable" in conditions(curl(work, "/v1/status"))
        proc.terminate()
        try:
            code = proc.wait(timeout=GUARD)
        finally:
            share.answer()
    assert code == 0


def test_once_over_a_hung_share_ends_and_says_why(shared):
    ns, _, share, work = shared
    share.hang()
    try:
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                *agent_args(share.guest, work, "--once", "--json", "--read-deadline", DEADLINE),
            ],
            capture_output=True,
            text=True,
            timeout=GUARD,
            check=False,
        )
    finally:
        share.answer()
    assert done.returncode == 1, done.stderr
    assert "MetadataUnavailable" in conditions(json.loads(done.stdout))
