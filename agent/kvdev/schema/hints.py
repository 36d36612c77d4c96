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
NICs of the guest kvdev never touches: the controller lists the VMI's own interfaces that are
not DRA devices (its pod network), so that even at first boot, before any lease or
configuration names it, metadata cannot take it.

A hint selects described devices by claim and request, narrowed by driver, pool and device
name when given; a selector that matches several devices is reported as ambiguous by the
matcher, never guessed. Versioning follows upstream: additive fields keep the version, removals
and renames make a new one, and writers emit every version they know, newest first.

``protectedNICs`` (optional, at most 64) lists them by guest MAC and/or guest PCI address (each
entry needs one of the two; ``name`` is the VMI interface's).

The host builds hints with these values and the guest reads with them; the tests judge them
by pydantic models of the same document.

No I/O here.
"""

from __future__ import annotations

from typing import Final, Protocol, Self

from kvdev.schema.fields import (
    check_dns_label,
    check_dns_subdomain,
    check_driver_name,
    check_ifname,
    check_pool_name,
    check_request_name,
    normalize_interface_address,
    normalize_ip,
    normalize_mac,
    normalize_network,
    normalize_pci_address,
)
from kvdev.schema.plain import Value, boolean, integer, list_of, nullable, of, string, struct

GROUP: Final = "guest.kvdev.io"
KIND: Final = "GuestHints"
V1ALPHA1: Final = f"{GROUP}/v1alpha1"
VERSIONS: Final = (V1ALPHA1,)

HINTS_MAX = 256  # devices per hints file: a VM has at most a few dozen PCI slots per bus
ADDRESSES_MAX = 16  # like networkData.ips
ROUTES_MAX = 64
PROTECTED_NICS_MAX = 64  # the VMI's own interfaces: far more than a VM has
TAG_MAX_BYTES = 256
MTU_MIN, MTU_MAX = 68, 65535  # RFC 791 minimum; the kernel's largest for most drivers
IPV6_MIN_MTU = 1280  # RFC 8200
UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1


def tag_bytes(value: str) -> str:
    """A tag of at most TAG_MAX_BYTES bytes."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > TAG_MAX_BYTES:
        raise ValueError(f"must be at most {TAG_MAX_BYTES} bytes, got {size}")
    return value


def exactly_one_claim(resource_claim_name: str | None, pod_claim_name: str | None) -> None:
    """A claim reference names exactly one of the two."""
    if (resource_claim_name is None) == (pod_claim_name is None):
        raise ValueError("set exactly one of resourceClaimName and podClaimName")


def same_family(destination: str, gateway: str | None) -> None:
    """A route's gateway is of its destination's IP family."""
    if gateway is not None and (":" in gateway) != (":" in destination):
        raise ValueError(
            f"gateway {gateway} and destination {destination} are of different IP families"
        )


def consistent_network(mtu: int | None, addresses: list[str]) -> None:
    """Each address once; an MTU that carries IPv6 when an address is IPv6."""
    if len(set(addresses)) != len(addresses):
        raise ValueError("addresses: an address is listed twice")
    if mtu is not None and mtu < IPV6_MIN_MTU and any(":" in a for a in addresses):
        raise ValueError(f"mtu {mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum")


def identifies_nic(mac_address: str | None, pci_address: str | None) -> None:
    """A protected NIC is named by its MAC, its guest PCI address, or both."""
    if mac_address is None and pci_address is None:
        raise ValueError("set macAddress or pciAddress (or both): a name alone picks no NIC")


Selector = tuple[str | None, str | None, str, str | None, str | None, str | None]


class _Claim(Protocol):
    @property
    def resource_claim_name(self) -> str | None: ...
    @property
    def pod_claim_name(self) -> str | None: ...


class _Hint(Protocol):
    @property
    def claim(self) -> _Claim: ...
    @property
    def request(self) -> str: ...
    @property
    def driver(self) -> str | None: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def device(self) -> str | None: ...


def selector_of(hint: _Hint) -> Selector:
    """The fields of a device hint that pick described devices, as a comparable tuple."""
    claim = hint.claim
    return (
        claim.resource_claim_name,
        claim.pod_claim_name,
        hint.request,
        hint.driver,
        hint.pool,
        hint.device,
    )


def unique_hints(selectors: list[Selector], names: list[str | None]) -> None:
    """No two hints select the same device(s) or ask for the same interface name."""
    seen: dict[Selector, int] = {}
    for i, key in enumerate(selectors):
        if key in seen:
            raise ValueError(f"devices[{i}] selects the same device(s) as devices[{seen[key]}]")
        seen[key] = i
    asked: dict[str, int] = {}
    for i, name in enumerate(names):
        if name is not None:
            if name in asked:
                raise ValueError(
                    f"devices[{i}] asks for interface name {name!r}, as devices[{asked[name]}]"
                )
            asked[name] = i


class ClaimRef(Value):
    """Which claim: by ResourceClaim name, or by the pod's claim name for template claims.

    These are the directory names upstream uses (``resourceclaims/<resourceClaimName>`` and
    ``resourceclaimtemplates/<podClaimName>``).
    """

    resource_claim_name: str | None = of(nullable(string(check_dns_subdomain)), default=None)
    pod_claim_name: str | None = of(nullable(string(check_dns_label)), default=None)

    def validate(self) -> Self:
        """Exactly one name."""
        exactly_one_claim(self.resource_claim_name, self.pod_claim_name)
        return self


class GuestLocation(Value):
    """Where the device appears in the guest, and the MAC the guest sees on it.

    ``macAddress`` is what a VMI interface's ``macAddress`` sets on the passed-through VF; it
    is matched on instead of the metadata's ``hardwareAddress`` (the VF's MAC as the driver
    saw it on the host, before KubeVirt changed it).
    """

    pci_address: str | None = of(nullable(string(normalize_pci_address)), default=None)
    tag: str | None = of(nullable(string(tag_bytes, min_length=1)), default=None)
    mac_address: str | None = of(nullable(string(normalize_mac)), default=None)


class Route(Value):
    """An extra route through the device's interface."""

    destination: str = of(string(normalize_network))
    gateway: str | None = of(nullable(string(normalize_ip)), default=None)
    metric: int | None = of(nullable(integer(ge=0, le=UINT32_MAX)), default=None)

    def validate(self) -> Self:
        """Gateway and destination of one family."""
        same_family(self.destination, self.gateway)
        return self


class NetworkHints(Value):
    """How kvdev should configure the interface. Unset fields are left as they are."""

    interface_name: str | None = of(nullable(string(check_ifname)), default=None)
    mtu: int | None = of(nullable(integer(ge=MTU_MIN, le=MTU_MAX)), default=None)
    addresses: list[str] | None = of(
        nullable(list_of(string(normalize_interface_address), max_length=ADDRESSES_MAX)),
        default=None,
    )
    routes: list[Route] | None = of(
        nullable(list_of(struct(Route), max_length=ROUTES_MAX)), default=None
    )
    primary: bool | None = of(nullable(boolean()), default=None)  # to become the primary NIC

    def validate(self) -> Self:
        """Addresses once each, an MTU fit for them."""
        consistent_network(self.mtu, self.addresses or [])
        return self


class DeviceHint(Value):
    """Hints for the described device(s) that the selector fields pick."""

    claim: ClaimRef = of(struct(ClaimRef))
    request: str = of(string(check_request_name))
    driver: str | None = of(nullable(string(check_driver_name)), default=None)
    pool: str | None = of(nullable(string(check_pool_name)), default=None)
    device: str | None = of(nullable(string(check_dns_label)), default=None)
    guest: GuestLocation | None = of(nullable(struct(GuestLocation)), default=None)
    network: NetworkHints | None = of(nullable(struct(NetworkHints)), default=None)

    def selector(self) -> Selector:
        """The fields that pick described devices, as a comparable tuple."""
        return selector_of(self)


class ProtectedNic(Value):
    """One of the VMI's own (non-DRA) interfaces, which the agent must never touch.

    Named by the guest's MAC and/or guest PCI address (at least one); ``name`` is the VMI
    interface's name, for messages only.
    """

    name: str | None = of(nullable(string()), default=None)
    mac_address: str | None = of(nullable(string(normalize_mac)), default=None)
    pci_address: str | None = of(nullable(string(normalize_pci_address)), default=None)

    def validate(self) -> Self:
        """A MAC or a PCI address."""
        identifies_nic(self.mac_address, self.pci_address)
        return self


class HintsMeta(Value):
    """Object metadata of a hints document."""

    name: str | None = of(nullable(string(check_dns_subdomain)), default=None)
    generation: int = of(integer(ge=0, le=INT64_MAX), default=0)


class GuestHints(Value):
    """The whole hints document."""

    api_version: str = of(string())
    kind: str = of(string())
    metadata: HintsMeta = of(struct(HintsMeta), factory=HintsMeta)
    devices: list[DeviceHint] = of(list_of(struct(DeviceHint), max_length=HINTS_MAX), factory=list)
    protected_nics: list[ProtectedNic] | None = of(
        nullable(list_of(struct(ProtectedNic), max_length=PROTECTED_NICS_MAX)),
        default=None,
        key="protectedNICs",
    )

    def validate(self) -> Self:
        """No two hints select the same device(s) or ask for the same name."""
        unique_hints(
            [h.selector() for h in self.devices],
            [h.network.interface_name if h.network else None for h in self.devices],
        )
        return self
