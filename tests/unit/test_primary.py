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

from kvdev.guest.adapters.state import PRIMARY
from kvdev.guest.core.observed import KVDEV_PROTO, GuestDevice, Link, NetState, Nic, Route
from kvdev.guest.core.primary import Decision, protected
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
    recorded = json.loads((cfg.state_dir / PRIMARY.name).read_text())
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
    recorded = json.loads((cfg.state_dir / PRIMARY.name).read_text())
    assert sorted(recorded["owned"]) == sorted([MACS[1], MACS[3]])
    assert "default route" in recorded["owned"][MACS[3]]


def test_without_configuration_or_default_route_nothing_is_the_guests(cfg):
    kernel = example_kernel()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF1].phase.value == "Configured"
    assert not (cfg.state_dir / PRIMARY.name).exists()


def test_a_damaged_record_starts_again_from_what_holds(cfg):
    cfg.state_dir.mkdir(parents=True)
    (cfg.state_dir / PRIMARY.name).write_text("{not json")
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


# ------------------------------------------------------------------ first boot: protectedNICs
# Probe III's reproducer: at first boot nothing names the guest's own NIC yet (no lease, no
# configuration), and metadata describing its MAC (vf-1 describes eth1's, whose hint renames it
# to data0) got it renamed, re-addressed and marked. The controller's hints now name the VMI's
# own interfaces (its pod network) as protectedNICs.


def protect(cfg, *entries):
    hints = json.loads(cfg.hints_path.read_text())
    hints["protectedNICs"] = list(entries)
    cfg.hints_path.write_text(json.dumps(hints))


def test_first_boot_metadata_describing_a_protected_nics_mac_leaves_it_alone(cfg):
    protect(cfg, {"macAddress": MACS[1].upper()})
    kernel = example_kernel()  # no default route, no configuration of the guest's own
    before = kernel.state.link(1)
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert not [x for x in kernel.applied if x.ifindex == 1]  # no rename, address, altname
    assert kernel.state.link(1) == before
    assert not list(cfg.link_dir.glob("*.link"))
    assert not (cfg.state_dir / "marks" / f"mac-{MACS[1]}").exists()
    vf1 = devices(outcome)[VF1]
    assert vf1.phase.value == "Error"
    assert f"protectedNICs[0] name it, by MAC {MACS[1]}" in vf1.reason
    assert devices(outcome)[VF2].phase.value == "Configured"
    recorded = json.loads((cfg.state_dir / PRIMARY.name).read_text())
    assert list(recorded["owned"]) == [MACS[1]]


def test_a_protected_nic_named_by_its_guest_pci_address(cfg):
    protect(cfg, {"pciAddress": "0000:01:00.0"})
    kernel = example_kernel()
    eth1 = GuestDevice(
        "0000:01:00.0", "1af4", "1041", "020000", "virtio-pci", nics=(Nic("eth1", 1, MACS[1]),)
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=lambda: (eth1,)))
    assert not [x for x in kernel.applied if x.ifindex == 1]
    assert "by PCI address 0000:01:00.0" in devices(outcome)[VF1].reason


# ------------------------------------------------- first boot: NetworkManager's auto-default


def networkmanager(cfg, conf="[main]\nplugins=keyfile\n"):
    path = cfg.config_root / "etc/NetworkManager/NetworkManager.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(conf)


def test_networkmanagers_auto_default_holds_every_nic_until_the_first_lease(cfg):
    """Metadata describes every NIC NetworkManager would connect: none would be left to it."""
    networkmanager(cfg)
    kernel = example_kernel()
    reconciler = Reconciler(cfg, kernel, scan_devices=tuple)
    first = converge(reconciler)
    assert kernel.applied == []  # NetworkManager would connect each: the lease decides
    assert {d.phase.value for d in first.status.devices} == {"Error"}
    assert "NetworkManager's auto-default would connect it" in devices(first)[VF1].reason
    assert not (cfg.state_dir / PRIMARY.name).exists()  # held, not recorded
    kernel.state = type(kernel.state)(  # the lease lands on eth1
        kernel.state.links, kernel.state.addresses, (Route(1, "0.0.0.0/0", "10.0.2.2", 100, 16),)
    )
    reconciler.stale_links = True
    after = converge(reconciler)
    assert "eth1 carries the default route" in devices(after)[VF1].reason
    assert devices(after)[VF2].phase.value == "Configured"
    recorded = json.loads((cfg.state_dir / PRIMARY.name).read_text())
    assert list(recorded["owned"]) == [MACS[1]]


def test_a_nic_left_to_networkmanager_is_the_guests_way_out_and_nothing_is_held(cfg):
    networkmanager(cfg)
    spare = Link(9, "enp9s0", mac="52:54:00:00:00:99")  # nobody describes it: NM connects it
    outcome = converge(Reconciler(cfg, example_kernel(spare), scan_devices=tuple))
    assert devices(outcome)[VF1].phase.value == "Configured"
    assert devices(outcome)[VF2].phase.value == "Configured"


def test_no_auto_default_or_protected_nics_make_the_hold_unneeded(cfg):
    networkmanager(cfg, "[main]\nno-auto-default=*\n")
    outcome = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert devices(outcome)[VF1].phase.value == "Configured"
    networkmanager(cfg)
    protect(cfg, {"macAddress": MACS[3]})
    again = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple))
    assert devices(again)[VF1].phase.value == "Configured"
    assert devices(again)[VF2].phase.value == "Configured"


# --------------------------------------------------------------------------- protected: why each


def _state(*routes):
    links = (
        Link(1, "eth0", "02:00:00:00:00:01"),
        Link(2, "eth1", "02:00:00:00:00:02"),
        Link(3, "eth2", "02:00:00:00:00:03"),
        Link(4, "eth3", "02:00:00:00:00:04"),
    )
    return NetState(links=links, routes=routes)


def test_protected_names_each_primary_nic_with_why():
    state = _state(
        Route(1, "0.0.0.0/0", "10.0.0.1", None, 4),  # the lease's: the guest's way out
        Route(3, "0.0.0.0/0", "10.3.0.1", None, KVDEV_PROTO),  # kvdev's own: no reason
    )
    decision = Decision(
        {"02:00:00:00:00:02": "the hints' protectedNICs name it, by MAC 02:00:00:00:00:02"},
        held={"02:00:00:00:00:04": "NetworkManager's auto-default would connect it"},
    )
    assert protected(state, decision).links == {
        1: "eth0 carries the default route 0.0.0.0/0 via 10.0.0.1 dev eth0, which kvdev did not "
        "add: kvdev does not configure the NIC the guest reaches its network through",
        2: "eth1 is the guest's own NIC: the hints' protectedNICs name it, by MAC "
        "02:00:00:00:00:02; kvdev does not configure it",
        4: "eth3 is the guest's own NIC: NetworkManager's auto-default would connect it; kvdev "
        "does not configure it",
    }


def test_a_default_route_is_the_first_reason_and_without_a_decision_the_only_one():
    state = _state(Route(2, "::/0", "fe80::1", None, 9))
    decision = Decision({"02:00:00:00:00:02": "the guest's network configuration sets it up"})
    assert protected(state, decision).why(2).startswith("eth1 carries the default route ::/0")
    assert protected(state).links.keys() == {2}
    assert protected(state).why(1) is None
