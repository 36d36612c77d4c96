"""KubeVirt's config-drive ``devices[]`` list: device role tags, a second hint source.

When a VMI's interfaces, hostDevices or gpus carry a ``tag``, virt-launcher writes an entry per
tagged device into the config drive's ``openstack/latest/meta_data.json`` (volume label
``config-2``): its type (``nic`` or ``hostdev``), bus, **guest** PCI address, MAC, NUMA node,
aligned CPUs and tags. It is the only upstream channel that maps a tag to a guest address.

Only ``devices`` is read; the rest of meta_data.json (instance id, keys ...) is not kvdev's.
Note that KubeVirt omits ``numaNode`` when it is 0 (``omitempty`` on a uint32), so an absent
NUMA node means "0 or unknown", never a fact.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvdev.schema.fields import normalize_mac, normalize_pci_address
from kvdev.schema.plain import Value, integer, list_of, literal, nullable, of, string, struct

DEVICES_MAX = 1024
UINT32_MAX = 2**32 - 1

_UINT32 = integer(ge=0, le=UINT32_MAX)


def pci_if_on_pci(address: str, fields: Mapping[str, object]) -> str:
    """The address normalized when the entry's bus (decoded before it) is ``pci``."""
    return normalize_pci_address(address) if fields.get("bus") == "pci" else address


class TaggedDevice(Value):
    """One ``devices[]`` entry."""

    type: str = of(literal("nic", "hostdev"))
    bus: str = of(string())
    address: str = of(string(), context=pci_if_on_pci)
    mac: str | None = of(nullable(string(normalize_mac)), default=None)
    serial: str | None = of(nullable(string()), default=None)
    numa_node: int | None = of(nullable(_UINT32), default=None)
    aligned_cp_us: list[int] | None = of(
        nullable(list_of(_UINT32)), default=None, key="alignedCPUs"
    )
    tags: list[str] = of(list_of(string()), factory=list)

    @property
    def pci_address(self) -> str | None:
        """The guest PCI address, normalized; None for other buses."""
        return self.address if self.bus == "pci" else None


class ConfigDriveMetadata(Value):
    """The part of meta_data.json kvdev reads; its other keys belong to cloud-init."""

    ignore_unknown = True

    devices: list[TaggedDevice] | None = of(
        nullable(list_of(struct(TaggedDevice), max_length=DEVICES_MAX)), default=None
    )

    def tagged(self) -> list[TaggedDevice]:
        """The device entries (an absent list means no tagged devices)."""
        return list(self.devices or [])
