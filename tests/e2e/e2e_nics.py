"""The NICs of the 9p-bundle boots (test_vm.py, test_vm_neighbours.py), their checks, and the
config drive of the neighbours' cloud-init boot.

The guest's NICs are virtio-net at fixed slots and MACs; the claim ``vm1-nics`` (inputs/
claims.yaml) describes three of them, one of which (``nic-hot``) is hot-plugged later, and the
third boot-time NIC (``spare``) is described by nothing. The boot-time NICs are those of
KubeVirt's domain for the VMI inputs/vmi-neighbours.yaml (recorded by make record-kubevirt):
their MACs, and nic-pci's slot, the one address the domain pins (an SR-IOV interface's
``pciAddress``); nic-mac's and spare's slots are ours, where libvirt would choose. nic-hot is
not in the VMI (ours). The cloud-init boot's config drive is the one KubeVirt writes for that
VMI, byte for byte.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from e2e_qemu import Nic

import kubevirtlab

CLAIM, REQUEST = "vm1-nics", "nics"
KUBEVIRT_NICS = {
    n.name: n for n in kubevirtlab.domain_nics(kubevirtlab.E2E_VERSION, kubevirtlab.NEIGHBOURS_CASE)
}
NIC_PCI = Nic.kubevirt(KUBEVIRT_NICS["nic-pci"])
NIC_MAC = Nic.kubevirt(KUBEVIRT_NICS["nic-mac"], slot=0x11)
NIC_SPARE = Nic.kubevirt(KUBEVIRT_NICS["spare"], slot=0x12)
NIC_HOT = Nic("nic-hot", 0x18, "52:54:00:e2:00:18")
BOOT_NICS = [NIC_PCI, NIC_MAC, NIC_SPARE]


def config_drive(directory: Path) -> Path:
    """``directory`` holding the files of KubeVirt's config drive for the neighbours' VMI."""
    for name, data in kubevirtlab.config_drive(kubevirtlab.E2E_VERSION).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return directory


NETWORK_DATA = "openstack/latest/network_data.json"


def network_address(nic: Nic) -> str:
    """The address (``a.b.c.d/len``) the config drive's network data gives ``nic``'s link."""
    data = json.loads(kubevirtlab.config_drive(kubevirtlab.E2E_VERSION)[NETWORK_DATA])
    link = next(k["id"] for k in data["links"] if k["ethernet_mac_address"] == nic.mac)
    net = next(n for n in data["networks"] if n["link"] == link)
    return str(ipaddress.ip_interface(f"{net['ip_address']}/{net['netmask']}"))


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
