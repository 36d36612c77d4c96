"""kvdev beside the guest's other network managers: one boot each, on the same Debian guest.

1. **NetworkManager** with Debian's defaults (it makes a "Wired connection" for every Ethernet
   link it may manage), plus a keyfile of the admin's for the NIC nobody describes;
2. **systemd-networkd** with a catch-all ``.network`` (``en*``/``eth*``, DHCP), the way a
   netplan or cloud-init fallback leaves it;
3. **cloud-init** (its ConfigDrive source: the config drive KubeVirt writes for the VMI
   inputs/vmi-neighbours.yaml, byte for byte as recorded, its ``network_data.json`` giving
   every NIC, the two kvdev manages too, a static address) rendering for systemd-networkd.

In each boot the two described NICs -- nic-pci renamed to dpci0, nic-mac configured under the
kernel's own name ens17 -- must keep kvdev's names, MTUs and addresses through the manager's
start, its restart, an admin and a carrier flap, and carry kvdev's udev marks, while the
manager calls them unmanaged and never logs acting on them; the spare NIC stays the manager's
(it configures it, and its log shows it). Then a described NIC is hot-plugged: configured by
kvdev, and never acted on by the manager, not even before kvdev renamed it (its log again).
Then the driver's network data for nic-mac loses its MAC, so nothing binds it any more: kvdev
lets ens17 go, unmarks it at run time (through kvdev-udev-marks.path), and the manager takes it.
Last, the MAC comes back: kvdev takes ens17 back from the running manager, which lets it go.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import e2e_host
import pytest
from e2e_host import Secret, Symlink
from e2e_nics import (
    BOOT_NICS,
    CLAIM,
    NIC_HOT,
    NIC_MAC,
    NIC_PCI,
    NIC_SPARE,
    config_drive,
    device,
    link,
    network_address,
)
from e2e_qemu import Guest, Nic, Vm
from e2e_run import Run, artifacts_dir, make_share, running, scratch_disk

pytestmark = pytest.mark.e2e

UNITS = "/usr/lib/systemd/system"
FIRST_PHASE_TIMEOUT = 300.0  # cloud-init's four stages under TCG take minutes

ROWS = (
    ("run disk: overlay + dpkg -i + mkfs", "disk"),
    ("QEMU start -> guest runner started", "booted"),
    ("QEMU start -> converged beside the manager", "converged"),
    ("manager restart -> held", "restart"),
    ("admin + carrier flap -> held", "flap"),
    ("hot-plug -> NIC configured, untouched", "hotplug"),
    ("nic-mac let go -> unmarked, the manager's", "release"),
    ("nic-mac described again -> kvdev's again", "retake"),
    ("VM lifetime (start to power-off)", "vm"),
)


@dataclass(frozen=True)
class Neighbour:
    """One network manager as a boot sets it up."""

    name: str
    unit: str  # its systemd unit, as its journal is kept
    manager: str  # whose view guest_check's "manager" check reads (NetworkManager | networkd)
    files: dict[str, str | Secret | Symlink]
    spare_address: str | None  # what it gives the spare NIC, when it gives it an address
    config_drive: bool = False
    checks: list[dict[str, Any]] = field(default_factory=list)  # its own, every phase


def _enable(unit: str, target: str) -> dict[str, str | Secret | Symlink]:
    return {f"/etc/systemd/system/{target}.wants/{unit}": Symlink(f"{UNITS}/{unit}")}


NETWORKD = {
    **_enable("systemd-networkd.service", "multi-user.target"),
    **_enable("systemd-networkd.socket", "sockets.target"),
}
NM_KEYFILE = f"""[connection]
id=spare
type=ethernet

[ethernet]
mac-address={NIC_SPARE.mac.upper()}

[ipv4]
method=manual
address1=10.250.0.12/24

[ipv6]
method=disabled
"""
# The e2e guest has no ssh, no resize2fs and no sudo group: the modules that need them off, so
# that cloud-init's status says "done" when everything that matters here worked.
CLOUD_CFG = """resize_rootfs: false
growpart:
  mode: "off"
ssh_genkeytypes: []
users: []
"""
CATCH_ALL = """[Match]
Name=en* eth*

[Network]
DHCP=yes
"""


NEIGHBOURS = [
    Neighbour(
        "NetworkManager",
        "NetworkManager",
        "NetworkManager",
        {
            **_enable("NetworkManager.service", "multi-user.target"),
            "/etc/NetworkManager/system-connections/spare.nmconnection": Secret(NM_KEYFILE),
        },
        "10.250.0.12/24",
    ),
    Neighbour(
        "networkd",
        "systemd-networkd",
        "networkd",
        {**NETWORKD, "/etc/systemd/network/90-catch-all.network": CATCH_ALL},
        None,  # DHCP with no server: up, link-local only
    ),
    Neighbour(
        "cloud-init",
        "systemd-networkd",
        "networkd",
        {**NETWORKD, "/etc/cloud/cloud.cfg.d/90-kvdev-e2e.cfg": CLOUD_CFG},
        network_address(NIC_SPARE),  # the config drive's network data gives it
        config_drive=True,
        checks=[
            {
                "kind": "cloudInit",
                "datasource": "configdrive",
                "macs": [NIC_PCI.mac, NIC_MAC.mac, NIC_SPARE.mac],
            }
        ],
    ),
]


@dataclass
class Boot:
    run: Run
    neighbour: Neighbour


@pytest.fixture(scope="module", params=NEIGHBOURS, ids=[n.name for n in NEIGHBOURS])
def boot(request, e2e_summary) -> Iterator[Boot]:
    """Make the disk with the .deb and the neighbour's files, publish the bundle, boot."""
    neighbour: Neighbour = request.param
    t0 = time.monotonic()
    artifacts = artifacts_dir(f"-{neighbour.name}")
    share = make_share(artifacts)
    e2e_summary.append(f"--- beside {neighbour.name}: artifacts {artifacts}")
    base = e2e_host.base_image()
    deb = e2e_host.find_deb()
    host = e2e_host.HostSide(artifacts, share / "bundle")
    host.prepare("plan-neighbours.yaml")
    drive = None
    if neighbour.config_drive:
        drive = config_drive(artifacts / "config-drive")
    with scratch_disk() as disk:
        t = time.monotonic()
        installed = e2e_host.run_disk(
            base, deb, disk, e2e_host.GUEST_SHARE / "bundle" / "current", neighbour.files
        )
        times = {"disk": time.monotonic() - t}
        guest = Guest(
            kernel=base.kernel,
            initrd=base.initrd,
            disk=disk,
            nics=BOOT_NICS,
            share=share,
            workdir=artifacts,
            config_drive=drive,
        )
        vm = Vm(guest)
        r = Run(vm, share, artifacts, host, e2e_host.package_name(deb), times)
        e2e_summary.append(f"package {installed}, accelerator {vm.accel}")
        with running(r, t0, e2e_summary, ROWS):
            yield Boot(r, neighbour)


def configured(nic: Nic, interface: str) -> dict[str, Any]:
    return device(nic, "Configured", interface=interface)


# Every name each NIC had: the manager's log must not show it acting on any of them.
KVDEV_NAMES = [NIC_PCI.kernel_name, "dpci0", NIC_MAC.kernel_name]


def held(b: Boot, *, hot: bool = False) -> list[dict[str, Any]]:
    """What must hold after every phase: kvdev's NICs as kvdev made them, the spare NIC the
    manager's, and the manager's log clean of kvdev's NICs."""
    n = b.neighbour
    ours = [NIC_PCI.mac, NIC_MAC.mac, *([NIC_HOT.mac] if hot else [])]
    # a hot-plugged NIC is eth<n> until udev names it: the only eth* after boot
    untouched = KVDEV_NAMES + (
        [f"eth{i}" for i in range(4)] + [NIC_HOT.kernel_name, "dhot0"] if hot else []
    )
    spare: dict[str, Any] = {"kind": "managedLink", "mac": NIC_SPARE.mac}
    if n.spare_address:
        spare["address"] = n.spare_address
    return [
        configured(NIC_PCI, "dpci0"),
        configured(NIC_MAC, NIC_MAC.kernel_name),
        link(NIC_PCI, "dpci0", 1400, ["192.0.2.10/24"]),
        link(NIC_MAC, NIC_MAC.kernel_name, 9000, ["198.51.100.11/24", "2001:db8:e2e::11/64"]),
        {"kind": "manager", "manager": n.manager, "unmanaged": ours, "managed": [NIC_SPARE.mac]},
        spare,
        {
            "kind": "managerLog",
            "unit": n.unit,
            "untouched": untouched,
            "touched": [NIC_SPARE.kernel_name],
        },
        *n.checks,
    ]


def test_1_boot_beside_the_manager(boot):
    r = boot.run
    r.times["booted"] = r.wait_booted()
    r.phase(
        f"booted beside {boot.neighbour.name}",
        [
            {"kind": "service", "package": r.package},
            {"kind": "status", "minGeneration": {CLAIM: 1}},
            *held(boot),
        ],
        timeout=FIRST_PHASE_TIMEOUT,
    )
    r.times["converged"] = time.monotonic() - r.vm.started


def test_2_manager_restart(boot):
    r = boot.run
    r.require_guest("manager restart")
    t = time.monotonic()
    r.phase(
        f"{boot.neighbour.unit} restarted",
        held(boot),
        actions=[["systemctl", "restart", f"{boot.neighbour.unit}.service"]],
    )
    r.times["restart"] = time.monotonic() - t


def test_3_link_flap(boot):
    r = boot.run
    r.require_guest("link flap")
    t = time.monotonic()
    for nic in (NIC_PCI, NIC_MAC, NIC_SPARE):  # the carrier, as a pulled cable
        r.vm.set_link(nic, up=False)
    time.sleep(2.0)
    for nic in (NIC_PCI, NIC_MAC, NIC_SPARE):
        r.vm.set_link(nic, up=True)
    flap = [
        ["ip", "link", "set", name, state]
        for name in ("dpci0", NIC_MAC.kernel_name)
        for state in ("down", "up")
    ]
    r.phase("admin and carrier flap", held(boot), actions=flap)
    r.times["flap"] = time.monotonic() - t


def test_4_hotplug_described_nic(boot):
    r = boot.run
    r.require_guest("hot-plug")
    t = time.monotonic()
    r.vm.hotplug(NIC_HOT)
    r.phase(
        "described NIC hot-plugged",
        [
            *held(boot, hot=True),
            configured(NIC_HOT, "dhot0"),
            link(NIC_HOT, "dhot0", 1500, ["203.0.113.18/24"]),
            {"kind": "status", "converged": True},
        ],
    )
    r.times["hotplug"] = time.monotonic() - t


def test_5_a_nic_kvdev_lets_go_goes_back_to_the_manager(boot):
    r = boot.run
    r.require_guest("release")
    assert r.host is not None
    t = time.monotonic()
    r.host.update("network-data-release.yaml", "plan-neighbours.yaml")
    n = boot.neighbour
    r.phase(
        "nic-mac let go",
        [
            device(NIC_MAC, "Missing", interface=None),
            configured(NIC_PCI, "dpci0"),
            configured(NIC_HOT, "dhot0"),
            {
                "kind": "manager",
                "manager": n.manager,
                "unmanaged": [NIC_PCI.mac, NIC_HOT.mac],
                "managed": [NIC_SPARE.mac, NIC_MAC.mac],
            },
            {"kind": "status", "minGeneration": {CLAIM: 2}},
        ],
    )
    r.times["release"] = time.monotonic() - t


def test_6_kvdev_takes_a_nic_back_from_the_running_manager(boot):
    r = boot.run
    r.require_guest("retake")
    assert r.host is not None
    t = time.monotonic()
    r.host.update("network-data-2.yaml", "plan-neighbours.yaml")  # the MAC again, a new IPv4
    n = boot.neighbour
    # The manager may have left an address of its own on ens17 while it had it (cloud-init's
    # static one): kvdev never removes what it did not add, so only kvdev's are asserted here.
    r.phase(
        "nic-mac described again",
        [
            configured(NIC_MAC, NIC_MAC.kernel_name),
            {
                "kind": "manager",
                "manager": n.manager,
                "unmanaged": [NIC_PCI.mac, NIC_HOT.mac, NIC_MAC.mac],
                "managed": [NIC_SPARE.mac],
            },
            {
                "kind": "managedLink",
                "mac": NIC_MAC.mac,
                "address": "198.51.100.12/24",
            },
            {"kind": "status", "minGeneration": {CLAIM: 3}, "converged": True},
        ],
        final=True,
    )
    r.times["retake"] = time.monotonic() - t
