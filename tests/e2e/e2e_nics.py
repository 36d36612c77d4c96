"""The NICs of the 9p-bundle boots (test_vm.py, test_vm_neighbours.py) and their checks.

The guest's NICs are virtio-net at fixed slots and MACs; the claim ``vm1-nics`` (inputs/
claims.yaml) describes three of them, one of which (``nic-hot``) is hot-plugged later, and the
third boot-time NIC (``spare``) is described by nothing.
"""

from __future__ import annotations

from typing import Any

from e2e_qemu import Nic

CLAIM, REQUEST = "vm1-nics", "nics"
NIC_PCI = Nic("nic-pci", 0x10, "52:54:00:e2:00:10")
NIC_MAC = Nic("nic-mac", 0x11, "52:54:00:e2:00:11")
NIC_SPARE = Nic("spare", 0x12, "52:54:00:e2:00:12")
NIC_HOT = Nic("nic-hot", 0x18, "52:54:00:e2:00:18")
BOOT_NICS = [NIC_PCI, NIC_MAC, NIC_SPARE]


def device(nic: Nic, phase: str, **expect: Any) -> dict[str, Any]:
    """The agent's status shows ``nic``'s device in ``phase`` (and as ``expect`` says)."""
    return {
        "kind": "device",
        "claim": CLAIM,
        "request": REQUEST,
        "device": nic.id,
        "phase": phase,
        **expect,
    }


def link(nic: Nic, ifname: str, mtu: int, addresses: list[str]) -> dict[str, Any]:
    """The kernel shows ``nic`` under ``ifname``, with exactly this MTU and these addresses."""
    return {"kind": "link", "mac": nic.mac, "ifname": ifname, "mtu": mtu, "addresses": addresses}
