"""The link marks (``core.marking``, ``adapters.markfiles``) as a ``Reconciler`` keeps them.

The example tree over an in-memory kernel, as in test_reconciler.py: the three NICs it
describes are matched by MAC (veth links, no PCI), a fourth link nobody describes is not, and
the example's GPU (pinned to guest PCI 0000:09:00.0, which this guest does not have) is Missing.
"""

import json
import shutil

import pytest

from kvdev.guest.adapters import markfiles as mark_files
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.core.marking import mac_mark, nm_overrides, pci_mark
from kvdev.guest.core.observed import GuestDevice, Link, Route
from kvdev.guest.reconciler import Reconciler, converge
from memlab import MACS, example_config, example_kernel

STRANGER = "02:00:00:99:99:99"
GPU_PIN = "0000:09:00.0"
EXPECTED = {*(mac_mark(m) for m in MACS.values()), pci_mark(GPU_PIN)}


def kernel(*, routes: tuple[Route, ...] = (), leave_out: frozenset[int] = frozenset()):
    stranger = Link(ifindex=9, ifname="eth9", mac=STRANGER, kind="veth")
    return example_kernel(stranger, routes=routes, leave_out=leave_out)


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path)


def on_disk(cfg):
    return set(mark_files.read(mark_files.directory(cfg.state_dir)))


def test_every_configured_link_is_marked_renamed_or_not_and_nothing_else(cfg):
    k = kernel()
    outcome = converge(Reconciler(cfg, k, scan_devices=tuple))
    assert outcome.status.converged is False  # the GPU is missing
    assert on_disk(cfg) == EXPECTED
    assert mac_mark(STRANGER) not in on_disk(cfg)  # no device describes it
    # fast0 is renamed; the two others too. Drop the names: still marked, no link wish
    hints = cfg.metadata_root / "kvdev" / "guest-hints.json"
    doc = json.loads(hints.read_text())
    for d in doc["devices"]:
        d.get("network", {}).pop("interfaceName", None)
    hints.write_text(json.dumps(doc))
    converge(Reconciler(cfg, k, scan_devices=tuple))
    assert on_disk(cfg) == EXPECTED
    assert not list(cfg.link_dir.glob("*.wish"))


def test_a_device_the_metadata_drops_loses_its_mark(cfg):
    k = kernel()
    r = Reconciler(cfg, k, scan_devices=tuple)
    converge(r)
    shutil.rmtree(cfg.metadata_root / "resourceclaims" / "vm1-devices" / "nic-2")
    converge(r)
    assert on_disk(cfg) == EXPECTED - {mac_mark(MACS[2])}
    shutil.rmtree(cfg.metadata_root / "resourceclaims" / "vm1-devices" / "gpu")
    converge(r)
    assert on_disk(cfg) == EXPECTED - {mac_mark(MACS[2]), pci_mark(GPU_PIN)}


def test_the_primary_nic_is_never_marked(cfg):
    # a default route kvdev did not add makes eth1 the guest's primary NIC: not touched at all
    default = Route(ifindex=1, destination="0.0.0.0/0", gateway="10.1.0.1", protocol=4)
    k = kernel(routes=(default,))
    converge(Reconciler(cfg, k, scan_devices=tuple))
    assert on_disk(cfg) == EXPECTED - {mac_mark(MACS[1])}


def test_a_missing_device_is_marked_by_its_mac_until_a_link_has_it(cfg):
    # nic-2 is matched by its MAC only: without the link it is Missing, marked by that MAC
    k = kernel(leave_out=frozenset({2}))
    converge(Reconciler(cfg, k, scan_devices=tuple))
    assert mac_mark(MACS[2]) in on_disk(cfg)


def test_a_dry_run_marks_nothing(cfg):
    converge(Reconciler(AgentConfig(**{**cfg_fields(cfg), "dry_run": True}), kernel(), tuple))
    assert on_disk(cfg) == set()


def cfg_fields(cfg):
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_a_mark_that_cannot_be_saved_is_state_not_saved_and_retried(cfg):
    cfg.state_dir.mkdir()
    (cfg.state_dir / "marks").write_text("not a directory")
    r = Reconciler(cfg, kernel(), scan_devices=tuple)
    outcome = r.reconcile()
    conditions = [c for c in outcome.status.conditions if c.type == "StateNotSaved"]
    assert len(conditions) == 1
    assert "marks" in conditions[0].message
    assert outcome.retry
    (cfg.state_dir / "marks").unlink()
    outcome = r.reconcile()
    assert not [c for c in outcome.status.conditions if c.type == "StateNotSaved"]
    assert on_disk(cfg) == EXPECTED


def test_sync_touches_only_mark_names(tmp_path):
    d = tmp_path / "marks"
    d.mkdir()
    (d / "README").write_text("keep")
    (d / mac_mark("02:00:00:00:00:01")).touch()
    added, removed = mark_files.sync(d, frozenset({pci_mark("0000:00:10.0")}))
    assert (added, removed) == ({"pci-0000:00:10.0"}, {"mac-02:00:00:00:00:01"})
    assert sorted(p.name for p in d.iterdir()) == ["README", "pci-0000:00:10.0"]
    assert (d / "pci-0000:00:10.0").read_bytes() == b""


def test_a_bound_device_whose_link_is_not_there_yet_keeps_its_mark(cfg):
    # a hot-plug: udev already shows the PCI function the hints pin, its link is still on its way
    # (being named): the pin's mark must stay, or the helper would unmark the NIC in between
    gpu = GuestDevice(pci_address=GPU_PIN, vendor_id="10de", device_id="20b0", class_id="030200")
    r = Reconciler(cfg, kernel(), scan_devices=lambda: (gpu,))
    converge(r)
    statuses = {d.ref.split("/")[-1]: d.phase.value for d in r.reconcile().status.devices}
    assert statuses["gpu-vfio-0"] == "Configured"  # bound by its pin, nothing to configure
    assert pci_mark(GPU_PIN) in on_disk(cfg)


def test_only_links_kvdev_configures_that_networkmanager_manages_are_overrides():
    found = nm_overrides([(3, "data1"), (2, "data0"), (4, "fast0")], {2, 3, 9})
    assert [name for name, _ in found] == ["data0", "data1"]  # 9: not kvdev's; 4: not NM's
    assert found[0][1].endswith("undo it with 'nmcli device set data0 managed --permanent reset'")
    assert nm_overrides([(2, "data0")], set()) == []
