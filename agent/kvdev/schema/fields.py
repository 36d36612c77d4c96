"""Value rules shared by every document kvdev reads: Kubernetes names, PCI, MAC, IP, ifnames.

Each rule is a plain function ``check_x(value) -> normalized value`` that raises ``ValueError``
with a message naming what is wrong (the reader turns that into a field-path error); the
host's pydantic models of Kubernetes objects apply the same functions (``kvdev.host.k8s.types``).
The limits are the upstream ones (resource.k8s.io/v1 validation, the kernel's
``dev_valid_name``); each says where it comes from.

This module owns value syntax only. It does no I/O and knows no document shapes.
``lookup_attribute`` is the one rule for attribute names: ``X`` of driver D's device and ``D/X``
are the same key, wherever kvdev looks an attribute up (the reader, the writer's derived
attributes, the allocator's constraints and CEL view).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from typing import TypeVar

# re-exported: the interface-name rule lives in a module of its own (the root helper's start-up)
from kvdev.schema.ifnames import IFNAMSIZ as IFNAMSIZ  # noqa: PLC0414
from kvdev.schema.ifnames import check_ifname as check_ifname  # noqa: PLC0414

_V = TypeVar("_V")


def attribute_names(driver: str, name: str) -> tuple[str, ...]:
    """The spellings of attribute ``name`` on a device of ``driver``, the given one first.

    ``X`` and ``<driver>/X`` are one key; another domain's name (``resource.kubernetes.io/X``) has
    one spelling.
    """
    domain, sep, ident = name.rpartition("/")
    if not sep:
        return (name, f"{driver}/{name}") if driver else (name,)
    return (name, ident) if domain == driver else (name,)


def lookup_attribute(attrs: Mapping[str, _V | None], driver: str, name: str) -> _V | None:
    """The value of attribute ``name`` (either spelling, ``attribute_names``), or None."""
    if not attrs:  # most devices: nothing to spell
        return None
    for key in attribute_names(driver, name):
        found = attrs.get(key)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- Kubernetes names

DNS_LABEL_MAX = 63  # RFC 1123 label
DNS_SUBDOMAIN_MAX = 253  # RFC 1123 subdomain
DRIVER_NAME_MAX = 63  # resource.k8s.io DriverNameMaxLength
POOL_NAME_MAX = 253  # resource.k8s.io PoolNameMaxLength
DEVICE_MAX_ID_LENGTH = (
    32  # resource.k8s.io DeviceMaxIDLength (C identifier part of a QualifiedName)
)
DEVICE_MAX_DOMAIN_LENGTH = 63  # domain part of a QualifiedName

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_dns_label(value: str) -> str:
    """An RFC 1123 label: lower-case alphanumerics and '-', at most 63 characters."""
    if not value:
        raise ValueError("must not be empty")
    if len(value) > DNS_LABEL_MAX:
        raise ValueError(f"must be at most {DNS_LABEL_MAX} characters, got {len(value)}")
    if not _LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return value


def check_dns_subdomain(value: str, max_length: int = DNS_SUBDOMAIN_MAX) -> str:
    """An RFC 1123 subdomain: dot-separated DNS labels, at most ``max_length`` characters."""
    if not value:
        raise ValueError("must not be empty")
    if len(value) > max_length:
        raise ValueError(f"must be at most {max_length} characters, got {len(value)}")
    if not all(_LABEL.match(part) for part in value.split(".")):
        raise ValueError(
            f"{value!r} is not a DNS subdomain (dot-separated lower-case labels of letters, "
            "digits and '-')"
        )
    return value


def check_driver_name(value: str) -> str:
    """A DRA driver name: a DNS subdomain of at most 63 characters."""
    return check_dns_subdomain(value, DRIVER_NAME_MAX)


def check_pool_name(value: str) -> str:
    """A DRA pool name: DNS subdomains separated by '/', at most 253 characters in all."""
    if not value:
        raise ValueError("must not be empty")
    if len(value) > POOL_NAME_MAX:
        raise ValueError(f"must be at most {POOL_NAME_MAX} characters, got {len(value)}")
    for part in value.split("/"):
        try:
            check_dns_subdomain(part)
        except ValueError as e:
            raise ValueError(f"pool name segment {part!r}: {e}") from e
    return value


def check_request_name(value: str) -> str:
    """A request reference: ``<request>`` or ``<request>/<subrequest>``, each a DNS label."""
    parts = value.split("/")
    if len(parts) > 2:
        raise ValueError(
            f"{value!r} has more than one '/': use <request> or <request>/<subrequest>"
        )
    for part in parts:
        check_dns_label(part)
    return value


def base_request(name: str) -> str:
    """The base request of ``<request>/<subrequest>`` (the name used in file paths)."""
    return name.split("/", 1)[0]


def check_qualified_name(value: str) -> str:
    """An attribute or capacity name: ``[<domain>/]<C identifier>``, identifier <= 32 chars."""
    domain, sep, ident = value.rpartition("/")
    if "/" in domain:
        raise ValueError(f"domain of {value!r}: more than one '/' (Kubernetes 1.38 refuses that)")
    if sep:
        try:
            check_dns_subdomain(domain, DEVICE_MAX_DOMAIN_LENGTH)
        except ValueError as e:
            raise ValueError(f"domain of {value!r}: {e}") from e
    if not ident:
        raise ValueError(f"{value!r} has an empty name after the domain")
    if len(ident) > DEVICE_MAX_ID_LENGTH:
        raise ValueError(
            f"name {ident!r} must be at most {DEVICE_MAX_ID_LENGTH} characters, got {len(ident)}"
        )
    if not _C_IDENT.match(ident):
        raise ValueError(f"name {ident!r} is not a C identifier (letters, digits, '_')")
    return value


# --------------------------------------------------------------------------- semantic versions

# Semantic Versioning 2.0.0: MAJOR.MINOR.PATCH, numeric parts without leading zeros, then an
# optional pre-release (dot-separated identifiers; numeric ones without leading zeros) and
# optional build metadata (dot-separated alphanumeric identifiers).
_NUM = r"(0|[1-9][0-9]*)"
_PRE_ID = r"(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
_SEMVER = re.compile(
    rf"{_NUM}\.{_NUM}\.{_NUM}(-{_PRE_ID}(\.{_PRE_ID})*)?(\+{_BUILD_ID}(\.{_BUILD_ID})*)?\Z"
)


def check_semver(value: str) -> str:
    """A Semantic Versioning 2.0.0 string such as ``1.2.3`` or ``1.0.0-rc.1+build.5``."""
    if not _SEMVER.match(value):
        raise ValueError(f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH, semver 2.0.0)")
    return value


# --------------------------------------------------------------------------- PCI addresses

_PCI = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):"
    r"(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])\Z"
)
_PCI_MAX_DEVICE = 0x1F


def normalize_pci_address(value: str) -> str:
    """Return ``dddd:bb:dd.f`` in lower case; a missing domain means 0000.

    Domains wider than four hex digits (VMD puts devices at 10000 and up) keep their width.
    """
    m = _PCI.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a PCI address ([dddd:]bb:dd.f)")
    if int(m["dev"], 16) > _PCI_MAX_DEVICE:
        raise ValueError(f"{value!r} is not a PCI address: device number above 1f")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn']}"


# --------------------------------------------------------------------------- MAC addresses

MAC_OCTETS = (6, 20)  # Ethernet and InfiniBand (IPoIB) link-layer addresses
_HEX_PAIRS = re.compile(r"[0-9a-fA-F]{2}\Z")
_HEX_QUADS = re.compile(r"[0-9a-fA-F]{4}\Z")


def normalize_mac(value: str) -> str:
    """Return the lower-case colon-separated form of a 6- or 20-octet link-layer address.

    Accepts ``aa:bb:..``, ``aa-bb-..`` and the dotted ``aabb.ccdd.eeff`` form, as Go's
    ``net.ParseMAC`` does.
    """
    text = value.strip()
    if "." in text:
        quads = text.split(".")
        if not all(_HEX_QUADS.match(q) for q in quads):
            raise ValueError(f"{value!r} is not a MAC address")
        octets = [q[i : i + 2] for q in quads for i in (0, 2)]
    else:
        seps = {c for c in text if c in ":-"}
        if len(seps) != 1:
            raise ValueError(f"{value!r} is not a MAC address")
        octets = text.split(seps.pop())
        if not all(_HEX_PAIRS.match(o) for o in octets):
            raise ValueError(f"{value!r} is not a MAC address")
    if len(octets) not in MAC_OCTETS:
        raise ValueError(
            f"{value!r} has {len(octets)} octets; a link-layer address has 6 (Ethernet) "
            "or 20 (InfiniBand)"
        )
    return ":".join(o.lower() for o in octets)


# --------------------------------------------------------------------------- IP addresses


@functools.lru_cache(maxsize=4096)
def interface(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """``ipaddress.ip_interface(text)``, parsed once per distinct text (ValueError if not one).

    Every pass reads the same addresses again (the metadata's, the kernel's): their parse is
    kept, as the values are immutable.
    """
    return ipaddress.ip_interface(text)


def _parse_interface(value: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if "/" not in value or "%" in value:
        raise ValueError(f"{value!r} is not a CIDR address (address/prefix, e.g. 10.1.0.5/24)")
    try:
        return interface(value)
    except ValueError as e:
        raise ValueError(
            f"{value!r} is not a CIDR address (address/prefix, e.g. 10.1.0.5/24)"
        ) from e


def check_canonical_interface_address(value: str) -> str:
    """An address with prefix length in canonical form, as upstream ``networkData.ips`` needs.

    Upstream (``IsValidInterfaceAddress``) rejects non-canonical spellings such as
    ``2001:DB8::5/64``, so we do too rather than quietly accepting what the API server refuses.
    """
    iface = _parse_interface(value)
    canonical = f"{iface.ip}/{iface.network.prefixlen}"
    if value != canonical:
        raise ValueError(f"{value!r} is not in canonical form ({canonical!r})")
    return value


def normalize_interface_address(value: str) -> str:
    """An address with prefix length, returned in canonical form (kvdev's own documents)."""
    iface = _parse_interface(value)
    return f"{iface.ip}/{iface.network.prefixlen}"


def normalize_network(value: str) -> str:
    """A network in CIDR form (host bits zero), returned canonical: ``10.3.0.0/16``."""
    if "/" not in value:
        raise ValueError(f"{value!r} is not a network in CIDR form (e.g. 10.3.0.0/16 or ::/0)")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as e:
        raise ValueError(f"{value!r} is not a network in CIDR form: {e}") from e


def normalize_ip(value: str) -> str:
    """A single IPv4 or IPv6 address, returned canonical (no ``%zone``)."""
    if "%" in value:
        raise ValueError(f"{value!r} is not an IP address: a zone (%...) is not allowed")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError as e:
        raise ValueError(f"{value!r} is not an IP address") from e


# --------------------------------------------------------------------------- interface names

# check_ifname lives in kvdev.schema.ifnames (a module of its own, so that the root helper
# kvdev-udev-marks, which checks the names the agent asks for, starts fast); imported above.
