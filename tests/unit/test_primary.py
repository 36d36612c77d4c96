"""The guest's own NICs (``core.primary``), decided from what holds at boot, and kept stable.

Regressions (issue 23 §2, "boot order"): the agent runs before NetworkManager, networkd and
DHCP, so the primary NIC had no default route yet and metadata naming its MAC took it (renamed,
marked: no manager ever configured it); the same metadata after the lease was refused. Now a NIC
the guest's own network configuration names is the guest's from the first pass on, and the
decision is recorded in the state directory: a later default route on another NIC adds that
one and takes nothing back.
"""

import json

import pytest

from kvdev.guest.adapters import primary_record
from kvdev.guest.core.observed import Route
from kvdev.guest.reconciler import Reconciler, converge
from kvdev.guest.views import encode, tables
from memlab import MACS, example_config, example_kernel

VF1 = "vm1-devices/nic-1/sriov.example.com/node-a/vf-1"  # eth1
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"  # eth2


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path, gpu=False)


def networkd(cfg, mac):
    path = cfg.config_root / "etc/systemd/network/10-uplink.network"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[Match]\nMACAddress={mac}\n\n[Network]\nDHCP=yes\n")
    return path


def devices(outcome):
    return {d.ref: d for d in outcome.status.devices}


def test_a_nic_the_guests_configuration_names_is_never_touched_before_any_lease(cfg):
    source = networkd(cfg, MACS[1])  # no default route anywhere yet: the lease comes later
    kernel = example_kernel()
    before = kernel.state.link(1)
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert not [x for x in kernel.applied if x.ifindex == 1]
    assert kernel.state.link(1) == before
    vf1 = devices(outcome)[VF1]
    assert vf1.phase.value == "Error"
    assert vf1.reason == (
        f"eth1 is the guest's own NIC: the guest's network configuration ({source} [Match]) "
        f"sets it up, by MAC {MACS[1]}; kvdev does not configure it"
    )
    assert "eth1 is the guest's own NIC" in tables.explain_text(encode.device_json(vf1))
    assert devices(outcome)[VF2].phase.value == "Configured"  # the rest goes ahead
    recorded = json.loads((cfg.state_dir / primary_record.RECORD_FILE).read_text())
    assert list(recorded["owned"]) == [MACS[1]]


def test_the_decision_is_kept_and_a_later_default_route_adds_and_takes_nothing_back(cfg):
    source = networkd(cfg, MACS[1])
    kernel = example_kernel()
    converge(Reconciler(cfg, kernel, scan_devices=tuple))
    source.unlink()  # the configuration goes (or is not readable at the next boot) ...
    kernel.state = type(kernel.state)(  # ... and a DHCP lease lands on another NIC
        kernel.state.links,
        kernel.state.addresses,
        (Route(3, "0.0.0.0/0", "10.9.0.1", 100, 16),),
    )
    again = converge(Reconciler(cfg, kernel, scan_devices=tuple))  # a restarted agent
    assert devices(again)[VF1].phase.value == "Error"  # still the guest's, from the record
    assert "eth1 is the guest's own NIC" in devices(again)[VF1].reason
    recorded = json.loads((cfg.state_dir / primary_record.RECORD_FILE).read_text())
    assert sorted(recorded["owned"]) == sorted([MACS[1], MACS[3]])
    assert "default route" in recorded["owned"][MACS[3]]


def test_without_configuration_or_default_route_nothing_is_the_guests(cfg):
    kernel = example_kernel()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF1].phase.value == "Configured"
    assert not (cfg.state_dir / primary_record.RECORD_FILE).exists()


def test_a_damaged_record_starts_again_from_what_holds(cfg):
    cfg.state_dir.mkdir(parents=True)
    (cfg.state_dir / primary_record.RECORD_FILE).write_text("{not json")
    networkd(cfg, MACS[2])
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert devices(outcome)[VF2].phase.value == "Error"
    assert devices(outcome)[VF1].phase.value == "Configured"


def test_a_bad_configuration_file_is_logged_once_not_on_every_udev_event(cfg, caplog):
    bad = cfg.config_root / "etc/systemd/network/x.network"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("no section header\n")
    reconciler = Reconciler(cfg, example_kernel(), scan_devices=tuple)
    caplog.set_level("WARNING", logger="kvdev")
    for _ in range(5):  # five passes after udev events: the configuration is read five times
        reconciler.stale_devices = True
        converge(reconciler)
    said = [r.getMessage() for r in caplog.records if "network configuration" in r.getMessage()]
    assert len(said) == 1, said
    assert str(bad) in said[0]
