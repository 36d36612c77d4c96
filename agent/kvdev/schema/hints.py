"""kvdev's own ``GuestHints`` kind: what upstream metadata cannot say about the guest side.

Upstream files describe devices as the *host* sees them. A guest hint adds, per described
device: where it appears in the guest (guest PCI address and/or a tag), and how kvdev should
configure it (interface name, MTU, extra addresses and routes). Hints are optional: with
upstream files alone, kvdev matches NICs by MAC and configures ``networkData.ips``.

Example (one JSON object per line in the file; see packaging/examples)::

    {"apiVersion": "guest.kvdev.io/v1alpha1", "kind": "GuestHints",
     "metadata": {"generation": 1},
     "devices": [{"claim": {"resourceClaimName": "vm1-nics"}, "request": "nic",
                  "driver": "sriov.example.com", "device": "vf-0",
                  "guest": {"pciAddress": "0000:07:00.0", "tag": "dra:vm1-nics/nic/0"},
                  "network": {"interfaceName": "data0", "mtu": 9000,
                              "addresses": ["10.2.0.5/24"],
                              "routes": [{"destination": "10.3.0.0/16", "gateway": "10.2.0.1"}]}}]}

A hint may also say the device is to become the guest's primary NIC (``network.primary``):
the safety policy's rules that keep the primary NIC's traffic (default and short routes,
routes and connected prefixes over the primary's prefixes, gateway, DNS servers or the
metadata service) then do not refuse what it asks for. The top-level ``protectedNICs`` names
NICs of the guest kvdev never touches, by interface name, MAC and/or guest PCI address: the
controller lists the VMI's own interfaces that are not DRA devices (its pod network), so that
even at first boot, before any lease or configuration names it, metadata cannot take it.

A hint selects described devices by claim and request, narrowed by driver, pool and device
name when given; a selector that matches several devices is reported as ambiguous by the
matcher, never guessed. Versioning follows upstream: additive fields keep the version, removals
and renames make a new one, and writers emit every version they know, newest first.

No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import AfterValidator, Field, model_validator

from kvdev.schema.base import Document, Model
from kvdev.schema.fields import (
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

GROUP: Final = "guest.kvdev.io"
KIND: Final = "GuestHints"
V1ALPHA1: Final = f"{GROUP}/v1alpha1"
VERSIONS: Final = (V1ALPHA1,)

HINTS_MAX = 256  # devices per hints file: a VM has at most a few dozen PCI slots per bus
PROTECTED_NICS_MAX = 64  # a VM's own interfaces: fewer than its PCI slots
ADDRESSES_MAX = 16  # like networkData.ips
ROUTES_MAX = 64
TAG_MAX_BYTES = 256
MTU_MIN, MTU_MAX = 68, 65535  # RFC 791 minimum; the kernel's largest for most drivers
IPV6_MIN_MTU = 1280  # RFC 8200
UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1


def _tag_bytes(value: str) -> str:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > TAG_MAX_BYTES:
        raise ValueError(f"must be at most {TAG_MAX_BYTES} bytes, got {size}")
    return value


class ClaimRef(Model):
    """Which claim: by ResourceClaim name, or by the pod's claim name for template claims.

    These are the directory names upstream uses (``resourceclaims/<resourceClaimName>`` and
    ``resourceclaimtemplates/<podClaimName>``).
    """

    resource_claim_name: DnsSubdomain | None = None
    pod_claim_name: DnsLabel | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ClaimRef:
        if (self.resource_claim_name is None) == (self.pod_claim_name is None):
            raise ValueError("set exactly one of resourceClaimName and podClaimName")
        return self


class GuestLocation(Model):
    """Where the device appears in the guest, and the MAC the guest sees on it.

    ``macAddress`` is what a VMI interface's ``macAddress`` sets on the passed-through VF; it
    is matched on instead of the metadata's ``hardwareAddress`` (the VF's MAC as the driver
    saw it on the host, before KubeVirt changed it).
    """

    pci_address: PciAddress | None = None
    tag: Annotated[str, Field(min_length=1), AfterValidator(_tag_bytes)] | None = None
    mac_address: MacAddress | None = None


class Route(Model):
    """An extra route through the device's interface."""

    destination: Network
    gateway: IpAddress | None = None
    metric: Annotated[int, Field(ge=0, le=UINT32_MAX)] | None = None

    @model_validator(mode="after")
    def _same_family(self) -> Route:
        if self.gateway is not None and (":" in self.gateway) != (":" in self.destination):
            raise ValueError(
                f"gateway {self.gateway} and destination {self.destination} are of different "
                "IP families"
            )
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
        addresses = self.addresses or []
        if len(set(addresses)) != len(addresses):
            raise ValueError("addresses: an address is listed twice")
        if self.mtu is not None and self.mtu < IPV6_MIN_MTU and any(":" in a for a in addresses):
            raise ValueError(f"mtu {self.mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum")
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

    def selector(self) -> tuple[str | None, str | None, str, str | None, str | None, str | None]:
        """The fields that pick described devices, as a comparable tuple."""
        return (
            self.claim.resource_claim_name,
            self.claim.pod_claim_name,
            self.request,
            self.driver,
            self.pool,
            self.device,
        )


class ProtectedNic(Model):
    """A NIC kvdev never touches: the guest's own, as the host knows it (any field matches)."""

    name: IfName | None = None
    mac_address: MacAddress | None = None
    pci_address: PciAddress | None = None

    @model_validator(mode="after")
    def _something(self) -> ProtectedNic:
        if self.name is None and self.mac_address is None and self.pci_address is None:
            raise ValueError("set at least one of name, macAddress and pciAddress")
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
        seen: dict[tuple[object, ...], int] = {}
        for i, hint in enumerate(self.devices):
            key = hint.selector()
            if key in seen:
                raise ValueError(f"devices[{i}] selects the same device(s) as devices[{seen[key]}]")
            seen[key] = i
        names: dict[str, int] = {}
        for i, hint in enumerate(self.devices):
            name = hint.network.interface_name if hint.network else None
            if name is not None:
                if name in names:
                    raise ValueError(
                        f"devices[{i}] asks for interface name {name!r}, as devices[{names[name]}]"
                    )
                names[name] = i
        return self
