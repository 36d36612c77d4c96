"""KubeVirt's config-drive ``devices[]`` list as pydantic models (the guest's reader's judge).

The document is described in ``kvdev.schema.configdrive``, the guest's plain reader of it;
these models say the same in pydantic, for the tests to hold the two to agreement.

No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from kvdev.host.k8s.model import Model
from kvdev.host.k8s.types import MacAddress
from kvdev.schema.configdrive import DEVICES_MAX, UINT32_MAX
from kvdev.schema.fields import normalize_pci_address

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
