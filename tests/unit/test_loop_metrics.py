"""The serving loop counts each pass in the bridge's metrics, with what woke it, over the
in-memory kernel; and which trigger a pass is counted for."""

import concurrent.futures
import shutil
from pathlib import Path

import pytest

from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.api.bridge import Ask, Bridge
from kvdev.guest.core.observed import Link, NetState
from kvdev.guest.loop import _Loop, _trigger
from kvdev.guest.reconciler import Reconciler
from netlinkdouble import MemoryNetlink

EXAMPLES = Path(__file__).resolve().parents[2] / "packaging" / "examples"
MACS = {1: "02:00:00:3b:02:01", 2: "02:00:00:3b:02:02", 3: "0c:42:a1:5e:00:01"}


@pytest.fixture
def served(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES / "dra-device-attributes", tree)
    cfg = AgentConfig(
        metadata_root=tree,
        state_dir=tmp_path / "state",
        link_dir=tmp_path / "network",
        match_kinds=("veth",),
    )
    links = tuple(Link(i, f"eth{i}", mac, kind="veth", max_mtu=65535) for i, mac in MACS.items())
    bridge = Bridge()
    the_loop = _Loop(Reconciler(cfg, MemoryNetlink(NetState(links)), scan_devices=tuple), bridge)
    try:
        yield the_loop, bridge
    finally:
        the_loop.close()
        bridge.close()


def test_each_pass_is_counted_with_its_trigger_steps_and_phases(served):
    the_loop, bridge = served
    first = the_loop._pass(None, "start")
    view = bridge.metrics.view
    applied = [r for r in first.results if r.ok]
    assert applied
    assert sum(view.steps.values()) == len(applied)
    assert view.passes["start", "ok"] == 1
    assert sum(view.passes.values()) == 1
    assert view.phases["Configured"] == first.status.counts["Configured"]
    assert view.last_ok is not None
    the_loop._pass(first, "verify")
    assert bridge.metrics.view.passes["verify", "ok"] == 1
    assert bridge.metrics.view.steps == view.steps  # the verifying pass found nothing to do
    asked = Ask("reconcile", concurrent.futures.Future())
    the_loop.asks = [asked]
    the_loop._answer(first)
    assert asked.answer.result()["kind"] == "AgentStatus"
    assert bridge.metrics.view.passes["api", "ok"] == 1
    assert sum(bridge.metrics.view.buckets) == 3


@pytest.mark.parametrize(
    ("woke_by", "dirty", "due", "kick", "trigger"),
    [
        ({"signal"}, False, False, True, "signal"),
        ({"files", "netlink"}, True, True, True, "signal"),
        ({"files", "netlink", "udev"}, True, False, False, "metadata"),
        ({"netlink", "udev"}, True, False, False, "verify"),  # our own change's events
        ({"udev", "netlink"}, False, False, False, "udev"),
        ({"netlink"}, False, True, False, "link"),
        (set(), False, True, False, "timer"),
        ({"api"}, True, False, False, "verify"),
    ],
)
def test_a_pass_is_counted_for_what_woke_the_loop(woke_by, dirty, due, kick, trigger):
    assert _trigger(woke_by, dirty=dirty, due=due, kick=kick) == trigger
