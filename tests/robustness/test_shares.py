"""Shares that misbehave under a serving agent: a root re-pointed non-atomically, a hung share.

Regressions (issue 23 §3): ``rm; ln -s`` of a symlinked root killed the agent within a second
(``FileNotFoundError`` from ``realpath``), and a share whose server stopped answering kept the
first pass from ever ending (no READY=1, no socket, no watchdog). The class: every resolution of
the root tolerates a link that vanishes or changes type, a read that cannot be done now keeps
the last good state (``MetadataUnavailable``), and no read of the share can block the loop.

A real agent serves the example in a namespace, its root ``current`` a link on a bindfs (FUSE)
share. Each round is deterministic: the pass (``POST /v1/reconcile``) runs between ``rm`` and
``ln -s``, or while the share's daemon is stopped. Times are printed as figures, never asserted.
"""

import os
import shutil

import pytest

from agentlab import addresses, eventually, make_guest, serving
from conftest import CONVERGED, LiveAgent
from fuselab import hung_share

pytestmark = [
    pytest.mark.robustness,
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]
GUARD = 120.0  # seconds: a bound on waiting for the agent's own work, never asserted


def conditions(body):
    return [c["type"] for c in body["conditions"]]


def configured(body):
    return body["counts"] == CONVERGED


def test_a_root_repointed_and_a_share_hung_again_and_again(netns, tmp_path, long_run, report):
    row = report("misbehaving shares")
    tree = make_guest(netns, tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    for gen in ("gen1", "gen2"):
        shutil.copytree(tree, host / gen)
    (host / "current").symlink_to("gen1")
    repoints, hangs = (200, 10) if long_run else (20, 2)
    with hung_share(host, tmp_path / "share") as share:
        root = share.guest / "current"
        args = ("--read-deadline", "1")
        with serving(netns, root, tmp_path, *args, sock=tmp_path / "agent.sock") as (proc, _):
            agent = LiveAgent(netns, root, tmp_path, tmp_path / "agent.sock", proc)
            assert eventually(lambda: configured(agent.get("/v1/status")[1]), GUARD)
            before = agent.settled_fds()
            for n in range(repoints):
                root.unlink()  # rm: the pass runs in the gap
                _, gap, _ = agent.post("/v1/reconcile")
                row.inputs += 1
                row.unintended += not configured(gap) or "MetadataUnavailable" not in conditions(
                    gap
                )
                root.symlink_to(f"gen{1 + (n + 1) % 2}")  # ln -s
                _, after, _ = agent.post("/v1/reconcile")
                row.unintended += not configured(after) or conditions(after) != []
                row.crashes += not agent.alive()
            for _ in range(hangs):
                share.hang()
                _, hung, seconds = agent.post("/v1/reconcile", timeout=GUARD)
                share.answer()
                row.inputs += 1
                row.unintended += not configured(hung) or "MetadataUnavailable" not in conditions(
                    hung
                )
                back = eventually(
                    lambda: "MetadataUnavailable" not in conditions(agent.get("/v1/status")[1]),
                    GUARD,
                )
                row.unintended += not back
                row.crashes += not agent.alive()
                print(f"a pass while the share hangs answered in {seconds:.2f} s")
            row.max_rss_mb = round(agent.rss() / 2**20, 1)
            row.fds_before, row.fds_after = before, agent.settled_fds()
            assert addresses(netns, "data0") == ["10.1.0.5/24"]
    assert (row.crashes, row.unintended) == (0, 0), row
