"""What holds about the agent itself shows in its status: ``conditions``, ``converged``, events.

A pass over the in-memory kernel (``MemoryNetlink``) and a copy of the bundled example in
``tmp_path``: a metadata tree cut short by the walk's bounds is a condition (the agent cannot
vouch for what it did not read), and it clears once the tree fits again.
"""

import shutil
from pathlib import Path

import pytest

from kvdev.errors import Severity
from kvdev.guest.adapters import walk
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.adapters.memory import MemoryNetlink
from kvdev.guest.core.observed import Link, NetState
from kvdev.guest.core.status import changes
from kvdev.guest.reconciler import Reconciler, converge
from kvdev.guest.views import encode, tables

EXAMPLES = Path(__file__).resolve().parents[2] / "packaging" / "examples"
MACS = {1: "02:00:00:3b:02:01", 2: "02:00:00:3b:02:02", 3: "0c:42:a1:5e:00:01"}


def example_kernel():
    links = tuple(Link(i, f"eth{i}", mac, kind="veth", max_mtu=65535) for i, mac in MACS.items())
    return MemoryNetlink(NetState(links))


@pytest.fixture
def cfg(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES / "dra-device-attributes", tree)
    shutil.rmtree(tree / "resourceclaims/vm1-devices/gpu")  # no PCI device here to bind it
    return AgentConfig(
        metadata_root=tree,
        state_dir=tmp_path / "state",
        link_dir=tmp_path / "network",
        match_kinds=("veth",),
    )


def test_a_tree_cut_short_is_a_condition_until_it_fits_again(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple, bounds=walk.Bounds(entries=60))
    first = converge(r)
    assert first.status.conditions == ()
    assert first.status.converged
    junk = cfg.metadata_root / "junk"
    junk.mkdir()
    for i in range(100):
        (junk / f"f{i}").touch()
    cut = r.reconcile().status
    [condition] = cut.conditions
    assert condition.type == "MetadataTruncated"
    assert "stopped after 60 entries" in condition.message
    assert not cut.converged  # it cannot vouch for files it did not read
    assert cut.counts == first.status.counts  # the devices read first are all still there
    body = encode.status_json(cut)
    assert body["conditions"] == [
        {"type": "MetadataTruncated", "severity": "Error", "message": condition.message}
    ]
    assert "MetadataTruncated (Error): metadata tree" in tables.status_text(body)
    assert "MetadataTruncated" in cut.summary()
    raised = [c for c in changes(first.status, cut) if c.type == "ConditionRaised"]
    assert [(c.subject, c.message) for c in raised] == [("MetadataTruncated", condition.message)]
    shutil.rmtree(junk)
    again = r.reconcile().status
    assert (again.conditions, again.converged) == ((), True)
    assert [c.type for c in changes(cut, again)] == ["ConditionCleared"]


def test_a_too_deep_tree_is_reported_but_the_agent_still_converges(cfg):
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple, bounds=walk.Bounds(depth=5))
    deep = cfg.metadata_root / "junk" / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    status = converge(r).status
    [condition] = status.conditions
    assert (condition.type, condition.severity) == ("MetadataTruncated", Severity.WARNING)
    assert "deeper than 5 levels" in condition.message
    assert status.converged  # no file kvdev reads lies deeper than the upstream layout
