"""A state directory that fills up or turns read-only under a running agent.

Regression (robustness probe, finding 5): a full or read-only state dir was only logged:
``/v1/status`` said ``lastError: null``, ``kvdev status`` looked healthy, and a name swap went
ahead without its ``renames.json`` journal. The class: every failure to persist state shows in
``/v1/status`` (a ``StateNotSaved`` condition and ``lastError``) and in ``kvdev status``'s exit
code, no name trade starts without its journal on disk, and all of it recovers by itself once
the disk does.

The state dir is a 256 KiB tmpfs; the trade is the example's names swapped (data0 <-> data1).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlab import HINTS, eventually, ip_json, make_guest, serving
from conftest import CONVERGED, LiveAgent

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

KVDEV = str(Path(sys.executable).parent / "kvdev")
MACS = {"02:00:00:3b:02:01": "vf-1", "02:00:00:3b:02:02": "vf-2"}


def names(ns):
    """vf-1's and vf-2's interface names, by their MACs."""
    return {
        MACS[lk["address"]]: lk["ifname"] for lk in ip_json(ns, "link") if lk.get("address") in MACS
    }


def swap(tree):
    """Hints that trade vf-1's and vf-2's names; the names they ask for now."""
    path = tree / HINTS
    hints = json.loads(path.read_text())
    wanted = {}
    for entry in hints["devices"]:
        if entry.get("device") in MACS.values():
            current = entry["network"]["interfaceName"]
            entry["network"]["interfaceName"] = "data1" if current == "data0" else "data0"
            wanted[entry["device"]] = entry["network"]["interfaceName"]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(hints))
    tmp.replace(path)
    return wanted


def kvdev_status(agent):
    done = subprocess.run(
        [KVDEV, "--socket", str(agent.sock), "status"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout


@pytest.fixture
def small_state(netns, tmp_path, monkeypatch):
    """The agent serving the example with its state dir on a 256 KiB tmpfs."""
    if shutil.which("mount") is None:
        pytest.skip("needs mount(8)")
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(state)], check=True)
    try:
        tree = make_guest(netns, tmp_path)
        sock = tmp_path / "agent.sock"
        with serving(netns, tree, tmp_path, sock=sock) as (proc, _):
            agent = LiveAgent(netns, tree, tmp_path, sock, proc)
            assert eventually(lambda: agent.get("/v1/status")[1]["counts"] == CONVERGED)
            yield agent, state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def not_saved(agent):
    body = agent.get("/v1/status")[1]
    return [c for c in body["conditions"] if c["type"] == "StateNotSaved"], body


def fill(state):
    filler = state / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)
    return filler


def check_refused_trade(agent, before, why, row):
    """The trade was asked for: nothing renamed, and the status and the CLI say why."""
    answer = agent.post("/v1/reconcile")[1]
    held, body = not_saved(agent)
    assert held, body["conditions"]
    assert any(why in c["message"] for c in held)
    assert why in (body["lastError"] or "")
    rc, text = kvdev_status(agent)
    assert rc == 1, text  # not converged: the state is not saved
    assert "StateNotSaved (Error)" in text
    vfs = {d["device"]: d for d in answer["devices"] if d["device"] in MACS.values()}
    assert all("no link is renamed without its journal" in d["reason"] for d in vfs.values())
    row.unintended += int(names(agent.ns) != before)
    assert names(agent.ns) == before


def test_a_full_then_read_only_state_dir_is_visible_and_stops_trades_until_it_heals(
    small_state, report
):
    agent, state = small_state
    row = report("state-faults")
    row.fds_before = agent.settled_fds()
    before = names(agent.ns)
    assert before == {"vf-1": "data0", "vf-2": "data1"}
    # 1. full: ENOSPC, retried
    filler = fill(state)
    wanted = swap(agent.tree)
    check_refused_trade(agent, before, "No space left on device", row)
    answer = agent.post("/v1/reconcile")[1]
    assert {d["phase"] for d in answer["devices"] if d["device"] in MACS.values()} == {"Pending"}
    filler.unlink()  # space again: the back-off's next retry (or this pass) heals it
    assert eventually(lambda: names(agent.ns) == wanted, timeout=40), names(agent.ns)
    assert eventually(lambda: not not_saved(agent)[0], timeout=40)
    # the trade is over: the pass after it drops the journal
    assert eventually(lambda: not (state / "renames.json").exists(), timeout=20)
    row.inputs += 2
    # 2. read-only: EROFS, permanent until the next change or pass
    subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
    before = names(agent.ns)
    wanted = swap(agent.tree)
    try:
        check_refused_trade(agent, before, "Read-only file system", row)
        answer = agent.post("/v1/reconcile")[1]
        phases = {d["phase"] for d in answer["devices"] if d["device"] in MACS.values()}
        assert phases == {"Error"}
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(state)], check=True)
    agent.post("/v1/reconcile")
    assert eventually(lambda: names(agent.ns) == wanted, timeout=40), names(agent.ns)
    assert eventually(lambda: not not_saved(agent)[0], timeout=40)
    assert kvdev_status(agent)[0] == 1  # converged but for the GPU the namespace lacks
    assert json.loads((state / "status.json").read_text())["counts"] == CONVERGED
    row.inputs += 2
    row.crashes = 0 if agent.alive() else 1
    assert agent.alive()
    assert "Traceback" not in agent.log()
    assert eventually(lambda: agent.fds() <= row.fds_before, timeout=15)
    row.fds_after = agent.fds()
    row.max_rss_mb = round(agent.rss() / 2**20, 1)
