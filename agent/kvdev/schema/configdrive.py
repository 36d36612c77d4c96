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

from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from kvdev.schema.base import Model
from kvdev.schema.fields import MacAddress, normalize_pci_address

META_DATA_PATH: Final = "openstack/latest/meta_data.json"
VOLUME_LABEL: Final = "config-2"
DEVICES_MAX = 1024
UINT32_MAX = 2**32 - 1

Uint32 = Annotated[int, Field(ge=0, le=UINT32_MAX)]


class TaggedDevice(Model):
    """One ``devices[]`` entry."""

    type: Literal["nic", "hostdev"]
    bus: str
    address: str
    mac: MacAddress | None = None
    serial: str | None = None
    numa_node: Uint32 | None = None
    aligned_cp_us: list[Uint32] | None = Field(default=None, alias="alignedCPUs")
    tags: list[str] = Field(default_factory=list)

    @field_validator("address")
    @classmethod
    def _pci_address(cls, value: str, info: ValidationInfo) -> str:
        return normalize_pci_address(value) if info.data.get("bus") == "pci" else value

    @property
    def pci_address(self) -> str | None:
        """The guest PCI address, normalized; None for other buses."""
        return self.address if self.bus == "pci" else None


class ConfigDriveMetadata(Model):
    """The part of meta_data.json kvdev reads; its other keys belong to cloud-init."""

    model_config = ConfigDict(extra="ignore")

    devices: Annotated[list[TaggedDevice], Field(max_length=DEVICES_MAX)] | None = None

    def tagged(self) -> list[TaggedDevice]:
        """The device entries (an absent list means no tagged devices)."""
        return list(self.devices or [])
