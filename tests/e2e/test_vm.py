"""kvdev in a real Debian trixie guest under QEMU: one boot, three scenarios, in order.

1. The agent runs as kvdev-agent.service from the freshly built .deb, as its own user kvdev
   with CAP_NET_ADMIN as its only capability (the renames, altnames, MTUs and addresses below
   are all made that way, its link wishes and status written as kvdev; the .link files root's
   kvdev-udev-marks rendered from them, and kvdev unable to write there), scoring at most 1.6 in
   the guest's ``systemd-analyze security``, its API readable by a member of group kvdev who
   is not root; and the three boot-time NICs are handled by the expected rule: nic-pci by its
   pinned guest PCI address only (no MAC in its metadata), nic-mac by
   networkData.hardwareAddress only (no pin), the third NIC described by nothing and left
   alone -- each configured (name, altname, MTU, addresses).
2. While the VM runs the host re-runs ``kvdev-host update`` + ``bundle`` (a new IP, a new
   MTU); the guest applies it.
3. A fourth NIC is hot-plugged through QMP ``device_add`` at its planned slot; it is
   configured.

Every check is judged inside the guest (guest/guest_check.py, from ``kvdev status --json``
and ``ip -j``); the host drives the phases through the 9p share and asserts the verdicts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_host
import pytest
from e2e_nics import BOOT_NICS, CLAIM, NIC_HOT, NIC_MAC, NIC_PCI, NIC_SPARE, REQUEST, device, link
from e2e_run import Run, bundle_boot

pytestmark = pytest.mark.e2e


MAX_EXPOSURE = 1.6  # systemd-analyze security on the guest's own systemd (257)

ROWS = (
    ("image build (or cache hit)", "image"),
    ("run disk: overlay + dpkg -i + mkfs", "disk"),
    ("QEMU start -> guest runner started", "booted"),
    ("QEMU start -> phase 1 converged (host clock)", "converged"),
    ("  guest uptime when phase 1 held", "converged_uptime"),
    ("metadata change -> applied in the guest", "change"),
    ("hot-plug -> NIC configured", "hotplug"),
    ("VM lifetime (start to power-off)", "vm"),
    ("e2e total: image, disk, boot, phases", "total"),
)


UNMANAGED = {
    "kind": "unmanaged",
    "mac": NIC_SPARE.mac,
    "ifname": NIC_SPARE.kernel_name,
    "mtu": 1500,
}


@pytest.fixture(scope="module")
def run(e2e_summary) -> Iterator[Run]:
    """Build/reuse the image, make the disk with the .deb, publish the bundle, boot the guest."""
    with bundle_boot(e2e_summary, ROWS, BOOT_NICS) as r:
        yield r


def _first_object(path: Path) -> dict[str, Any]:
    """The first (newest-version) object of a kvdev/KEP-5304 JSON stream file (any layout)."""
    return json.JSONDecoder().raw_decode(path.read_text().lstrip())[0]


def test_0_bundle_describes_each_nic_by_one_rule(run):
    """The inputs really leave one rule per NIC (else phase 1 would prove less than it says)."""
    current = run.share / "bundle" / "current"
    meta = _first_object(
        current / "resourceclaims" / CLAIM / REQUEST / f"{e2e_host.DRIVER}-metadata.json"
    )
    macs = {
        d["name"]: d.get("networkData", {}).get("hardwareAddress")
        for r in meta["requests"]
        for d in r["devices"]
    }
    hints = _first_object(current / "kvdev" / "guest-hints.json")
    pins = {h["device"]: h.get("guest", {}).get("pciAddress") for h in hints["devices"]}
    assert macs == {NIC_PCI.id: None, NIC_MAC.id: NIC_MAC.mac, NIC_HOT.id: None}
    assert pins == {
        NIC_PCI.id: NIC_PCI.pci_address,
        NIC_MAC.id: None,
        NIC_HOT.id: NIC_HOT.pci_address,
    }
    assert NIC_SPARE.mac not in macs.values()


def test_1_package_service_and_matching(run):
    run.times["booted"] = run.wait_booted()
    report = run.phase(
        "service from the package; NICs matched and configured",
        [
            {"kind": "service", "package": run.package},
            {"kind": "share", "mounted": False},  # no virtio-fs device: the unit does nothing
            {"kind": "privilege", "user": "kvdev", "maxExposure": MAX_EXPOSURE},
            {"kind": "status", "minGeneration": {CLAIM: 1}},
            device(
                NIC_PCI,
                "Configured",
                evidence=["pinned"],
                interface="dpci0",
                guestPciAddress=NIC_PCI.pci_address,
                kernelAltname=True,
            ),
            link(NIC_PCI, "dpci0", 1400, ["192.0.2.10/24"]),
            device(
                NIC_MAC,
                "Configured",
                evidence=["permanent-mac", "mac"],
                interface="dmac0",
                guestPciAddress=NIC_MAC.pci_address,
                kernelAltname=True,
            ),
            link(NIC_MAC, "dmac0", 9000, ["198.51.100.11/24", "2001:db8:e2e::11/64"]),
            UNMANAGED,
            device(NIC_HOT, "Missing"),
        ],
    )
    run.times["converged"] = time.monotonic() - run.vm.started
    run.times["converged_uptime"] = report["doneUptime"]


def test_2_metadata_change_while_running(run):
    run.require_guest("metadata change")
    t = time.monotonic()
    run.host.update("network-data-2.yaml", "plan-2.yaml")
    run.phase(
        "host-side metadata change applied",
        [
            {"kind": "status", "minGeneration": {CLAIM: 2}},
            link(NIC_PCI, "dpci0", 1280, ["192.0.2.10/24"]),
            link(NIC_MAC, "dmac0", 9000, ["198.51.100.12/24", "2001:db8:e2e::11/64"]),
            UNMANAGED,
        ],
    )
    run.times["change"] = time.monotonic() - t


def test_3_hotplug_nic(run):
    run.require_guest("hot-plug")
    t = time.monotonic()
    run.vm.hotplug(NIC_HOT)
    run.phase(
        "hot-plugged NIC configured",
        [
            device(
                NIC_HOT,
                "Configured",
                evidence=["pinned"],
                interface="dhot0",
                guestPciAddress=NIC_HOT.pci_address,
                kernelAltname=True,
            ),
            link(NIC_HOT, "dhot0", 1500, ["203.0.113.18/24"]),
            UNMANAGED,
            {"kind": "status", "converged": True},
            {"kind": "service", "package": run.package},
        ],
        final=True,
    )
    run.times["hotplug"] = time.monotonic() - t
