"""The normalized view of each described device: what matching and reports work from.

``describe`` flattens a ``DeviceMetadata`` into one ``DescribedDevice`` per allocated device,
with the facts kvdev uses already normalized: host PCI address (``dddd:bb:dd.f``, lower case)
from the standard ``resource.kubernetes.io/pciBusID`` or, failing that, the driver's own
attribute (``dra.net/pciAddress``, NVIDIA's ``pcieBusID``); PCIe root; NUMA nodes (physical
node first); MAC (lower case, colon-separated) and IPs (CIDR).

A value that is present but unusable (a pciBusID that is no PCI address, a hardwareAddress
that is no MAC; both legal upstream) is dropped from the view and reported as a warning, so
the matcher never matches on it and the user learns why.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvdev.errors import Problem, Severity
from kvdev.schema.base import format_path
from kvdev.schema.fields import normalize_mac, normalize_pci_address
from kvdev.schema.metadata import Device, DeviceMetadata

_Warn = Callable[[tuple[int | str, ...], str], None]

STANDARD = "resource.kubernetes.io"
PCI_BUS_ID = f"{STANDARD}/pciBusID"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
NUMA_NODE = f"{STANDARD}/numaNode"
# Driver-local spellings, looked up in the driver's own domain when the standard one is absent.
LOCAL_PCI_NAMES = ("pciBusID", "pciAddress", "pcieBusID")
LOCAL_NUMA_NAMES = ("numaNode", "numa")
LOCAL_VENDOR_NAMES = ("pciVendor", "vendorID", "vendor")
LOCAL_DEVICE_ID_NAMES = ("pciDevice", "deviceID")
_PCI_ID_DIGITS = 4


@dataclass(frozen=True, slots=True)
class DescribedDevice:
    """One allocated device as the metadata describes it, normalized."""

    claim: str
    namespace: str | None
    pod_claim_name: str | None
    request: str
    driver: str
    pool: str
    name: str
    generation: int
    pci_address: str | None = None
    pcie_root: str | None = None
    numa_nodes: tuple[int, ...] = ()
    mac: str | None = None
    ips: tuple[str, ...] = ()
    interface_name: str | None = None
    vendor_id: str | None = None
    device_id: str | None = None

    @property
    def ref(self) -> str:
        """A stable, human-readable identity: ``<claim>/<request>/<driver>/<pool>/<device>``."""
        return f"{self.claim}/{self.request}/{self.driver}/{self.pool}/{self.name}"


def describe(
    doc: DeviceMetadata, *, source: str = "", index: int | None = None
) -> tuple[list[DescribedDevice], list[Problem]]:
    """Flatten a document into described devices, with warnings about unusable values."""
    devices: list[DescribedDevice] = []
    warnings: list[Problem] = []

    def warn(loc: tuple[int | str, ...], message: str) -> None:
        warnings.append(Problem(message, source, index, format_path(loc), Severity.WARNING))

    for r, request in enumerate(doc.requests):
        for d, device in enumerate(request.devices):
            loc: tuple[int | str, ...] = ("requests", r, "devices", d)
            devices.append(
                DescribedDevice(
                    claim=doc.metadata.name,
                    namespace=doc.metadata.namespace,
                    pod_claim_name=doc.pod_claim_name,
                    request=request.name,
                    driver=device.driver,
                    pool=device.pool,
                    name=device.name,
                    generation=doc.metadata.generation,
                    pci_address=_pci_address(device, loc, warn),
                    pcie_root=_pcie_root(device),
                    numa_nodes=_numa_nodes(device),
                    mac=_mac(device, loc, warn),
                    ips=tuple(device.network_data.ips or []) if device.network_data else (),
                    interface_name=(
                        device.network_data.interface_name if device.network_data else None
                    ),
                    vendor_id=_pci_id(device, LOCAL_VENDOR_NAMES),
                    device_id=_pci_id(device, LOCAL_DEVICE_ID_NAMES),
                )
            )
    return devices, warnings


def _attr_key(device: Device, name: str) -> str:
    attrs = device.attributes or {}
    if name in attrs:
        return name
    return name.rpartition("/")[2]


def _pci_address(device: Device, loc: tuple[int | str, ...], warn: _Warn) -> str | None:
    names = [PCI_BUS_ID, *(f"{device.driver}/{n}" for n in LOCAL_PCI_NAMES)]
    for name in names:
        attr = device.attribute(name)
        if attr is None:
            continue
        where = (*loc, "attributes", _attr_key(device, name))
        if attr.string is None:
            warn(where, "is not a string; not used as the device's PCI address")
            continue
        try:
            return normalize_pci_address(attr.string)
        except ValueError as e:
            warn(where, f"{e}; not used as the device's PCI address")
    return None


def _pcie_root(device: Device) -> str | None:
    for name in (PCIE_ROOT, f"{device.driver}/pcieRoot"):
        attr = device.attribute(name)
        if attr is not None and attr.string is not None:
            return attr.string
    return None


def _numa_nodes(device: Device) -> tuple[int, ...]:
    for name in (NUMA_NODE, *(f"{device.driver}/{n}" for n in LOCAL_NUMA_NAMES)):
        attr = device.attribute(name)
        if attr is None:
            continue
        if attr.int_ is not None:
            return (attr.int_,)
        if attr.ints is not None:
            return tuple(attr.ints)
    return ()


def _pci_id(device: Device, names: tuple[str, ...]) -> str | None:
    """A PCI vendor or device ID from the driver's attributes, as four lower-case hex digits."""
    for name in names:
        attr = device.attribute(f"{device.driver}/{name}")
        if attr is None or attr.string is None:
            continue
        digits = attr.string.lower().removeprefix("0x")
        if len(digits) == _PCI_ID_DIGITS and all(c in "0123456789abcdef" for c in digits):
            return digits
    return None


def _mac(device: Device, loc: tuple[int | str, ...], warn: _Warn) -> str | None:
    data = device.network_data
    if data is None or data.hardware_address is None:
        return None
    try:
        return normalize_mac(data.hardware_address)
    except ValueError as e:
        warn((*loc, "networkData", "hardwareAddress"), f"{e}; the device cannot be matched by MAC")
        return None
