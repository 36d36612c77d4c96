"""kvdev's ``GuestHints`` kind as pydantic models: a judge of ``kvdev.schema.hints``.

The host builds hints with the plain values of ``kvdev.schema.hints``; these models state the
same document in pydantic (sharing its limits and rule functions), for the tests to hold the
two to agreement.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from kvdev.host.k8s.model import Document, Model
from kvdev.host.k8s.types import (
    DnsLabel,
    DnsSubdomain,
    DriverName,
    IfName,
    InterfaceAddress,
    IpAddress,
    MacAddress,
    Network,
    PciAddress,
    PoolName,
    RequestName,
)
from kvdev.schema.hints import (
    ADDRESSES_MAX,
    HINTS_MAX,
    INT64_MAX,
    MTU_MAX,
    MTU_MIN,
    PROTECTED_NICS_MAX,
    ROUTES_MAX,
    UINT32_MAX,
    Selector,
    consistent_network,
    exactly_one_claim,
    identifies_nic,
    same_family,
    selector_of,
    tag_bytes,
    unique_hints,
)


class ClaimRef(Model):
    """Which claim (``kvdev.schema.hints.ClaimRef``)."""

    resource_claim_name: DnsSubdomain | None = None
    pod_claim_name: DnsLabel | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ClaimRef:
        exactly_one_claim(self.resource_claim_name, self.pod_claim_name)
        return self


class GuestLocation(Model):
    """Where the device appears in the guest (``kvdev.schema.hints.GuestLocation``)."""

    pci_address: PciAddress | None = None
    tag: Annotated[str, Field(min_length=1), AfterValidator(tag_bytes)] | None = None
    mac_address: MacAddress | None = None


class Route(Model):
    """An extra route through the device's interface."""

    destination: Network
    gateway: IpAddress | None = None
    metric: Annotated[int, Field(ge=0, le=UINT32_MAX)] | None = None

    @model_validator(mode="after")
    def _same_family(self) -> Route:
        same_family(self.destination, self.gateway)
        return self


class NetworkHints(Model):
    """How kvdev should configure the interface. Unset fields are left as they are."""

    interface_name: IfName | None = None
    mtu: Annotated[int, Field(ge=MTU_MIN, le=MTU_MAX)] | None = None
    addresses: Annotated[list[InterfaceAddress], Field(max_length=ADDRESSES_MAX)] | None = None
    routes: Annotated[list[Route], Field(max_length=ROUTES_MAX)] | None = None
    primary: bool | None = None  # the device is to become the guest's primary NIC

    @model_validator(mode="after")
    def _consistent(self) -> NetworkHints:
        consistent_network(self.mtu, self.addresses or [])
        return self


class DeviceHint(Model):
    """Hints for the described device(s) that the selector fields pick."""

    claim: ClaimRef
    request: RequestName
    driver: DriverName | None = None
    pool: PoolName | None = None
    device: DnsLabel | None = None
    guest: GuestLocation | None = None
    network: NetworkHints | None = None

    def selector(self) -> Selector:
        """The fields that pick described devices, as a comparable tuple."""
        return selector_of(self)


class ProtectedNic(Model):
    """One of the VMI's own (non-DRA) interfaces, which the agent must never touch."""

    name: str | None = None
    mac_address: MacAddress | None = None
    pci_address: PciAddress | None = None

    @model_validator(mode="after")
    def _identified(self) -> ProtectedNic:
        identifies_nic(self.mac_address, self.pci_address)
        return self


class HintsMeta(Model):
    """Object metadata of a hints document."""

    name: DnsSubdomain | None = None
    generation: Annotated[int, Field(ge=0, le=INT64_MAX)] = 0


class GuestHints(Document):
    """The whole hints document."""

    metadata: HintsMeta = Field(default_factory=HintsMeta)
    devices: Annotated[list[DeviceHint], Field(max_length=HINTS_MAX)] = Field(default_factory=list)

    protected_nics: Annotated[list[ProtectedNic], Field(max_length=PROTECTED_NICS_MAX)] | None = (
        Field(default=None, alias="protectedNICs")
    )

    @model_validator(mode="after")
    def _unique(self) -> GuestHints:
        unique_hints(
            [h.selector() for h in self.devices],
            [h.network.interface_name if h.network else None for h in self.devices],
        )
        return self
