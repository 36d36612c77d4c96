"""The normalized view of each described device: what matching and reports work from.

``describe`` flattens a decoded ``DeviceMetadata`` (``reading``: whatever upstream's reader
accepts) into one ``DescribedDevice`` per allocated device, with the facts kvdev uses already
normalized: host PCI address (``dddd:bb:dd.f``, lower case) from the standard
``resource.kubernetes.io/pciBusID`` or, failing that, the driver's own attribute
(``dra.net/pciAddress``, NVIDIA's ``pcieBusID``); PCIe root; NUMA nodes (physical node first);
MAC (lower case, colon-separated) and IPs (CIDR, canonical).

The blast radius of a bad value is the device that carries it:

* a value kvdev only matches on (a pciBusID that is no PCI address, a hardwareAddress that is
  no MAC) is dropped from the view with a warning: the device is not matched on it;
* an IP kvdev can still act on safely is normalized, with a warning: a bare address is a host
  address (``10.0.0.5`` -> ``10.0.0.5/32``, ``/128`` for IPv6: no on-link route), a
  non-canonical one is written canonically (``2001:DB8::5/64`` -> ``2001:db8::5/64``), a
  duplicate is dropped;
* an IP that is no IP address at all, or an empty claim, request, driver, pool or device name
  (the device cannot be told from others), makes the device unusable: ``problems`` says why,
  the agent leaves its interface alone and shows the reason; the other devices are unaffected.

A driver's *deferred* metadata (upstream's flow for network devices: the kubelet plugin first
writes the devices without attributes or networkData, generation 1, and the driver's NRI hook
rewrites the file with them and generation + 1) describes devices the driver has not written
yet: ``deferred`` devices, which the agent shows as Pending and leaves alone until the rewrite.
A file of no device at all (or an empty file: ``pending``) shows its request the same way.

The driver's MTU: a device's ``mtu`` attribute (unqualified, as dra-driver-ovsdpdk writes it and
the vhost-user binding plugin reads it, or ``<driver>/mtu``) is ``mtu``, when it is an int within
``DRIVER_MTU_MIN..DRIVER_MTU_MAX`` (the binding plugin's range); anything else is left out with a
warning. Attribute names: ``X`` from driver D and ``D/X`` are one key (``Device.attribute``); a
device that carries both with different values is warned about (the qualified one is used).

CPU devices (``cpu``): a device of dra-driver-cpu (driver ``dra.cpu``, the driver DeviceClass
``dra.cpu`` selects; KubeVirt main's ``<vmi>-cpu-claim``) is the VM's vCPUs: no guest device
stands for it, so there is nothing to match.

Mediated devices: ``resource.kubernetes.io/mdevUUID`` or the driver's own ``mdevUUID`` (the
unqualified name KubeVirt reads) is the device's ``mdev_uuid``.

``hint_for``: the one hint of a GuestHints document that applies to a described device (the
most specific selector), for the agent's matching and the controller's guest comparison alike.

What a pass costs stays bounded whatever a file says (upstream's reader has no limits; a
conforming writer stays far below these): a device with more than ``MAX_IPS`` addresses is
unusable, and devices past the first ``MAX_DEVICES`` of a file are left out with a warning.

No I/O here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.errors import Problem, Severity
from kvdev.schema.fields import base_request, interface, normalize_mac, normalize_pci_address
from kvdev.schema.hints import DeviceHint
from kvdev.schema.plain import format_path
from kvdev.schema.reading import Device, DeviceMetadata
from kvdev.schema.tree import MetadataLocation

_Warn = Callable[[tuple[int | str, ...], str], None]

STANDARD = "resource.kubernetes.io"
PCI_BUS_ID = f"{STANDARD}/pciBusID"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
NUMA_NODE = f"{STANDARD}/numaNode"
MDEV_UUID = f"{STANDARD}/mdevUUID"
DEFERRED_GENERATION = 1  # the kubelet plugin's first write; its rewrites come with + 1
NOT_WRITTEN: Final = "the driver has not written its metadata yet"
# Driver-local spellings, looked up in the driver's own domain when the standard one is absent.
LOCAL_PCI_NAMES = ("pciBusID", "pciAddress", "pcieBusID")
LOCAL_NUMA_NAMES = ("numaNode", "numa")
LOCAL_VENDOR_NAMES = ("pciVendor", "vendorID", "vendor")
LOCAL_DEVICE_ID_NAMES = ("pciDevice", "deviceID")
_PCI_ID_DIGITS = 4
MAX_IPS = 256  # addresses kvdev puts on one interface (upstream's writers: at most 16)
MAX_DEVICES = 256  # devices kvdev reads from one file (upstream's writers: at most 32)
CPU_DRIVERS: Final = frozenset({"dra.cpu"})  # drivers whose devices are CPUs, not guest devices
MTU_NAME = "mtu"  # the driver's MTU attribute, unqualified or in the driver's domain
DRIVER_MTU_MIN, DRIVER_MTU_MAX = 68, 9702  # the range the vhost-user binding plugin accepts


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
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
    mdev_uuid: str | None = None
    mtu: int | None = None  # the driver's MTU for the NIC (its ``mtu`` attribute)
    notes: tuple[str, ...] = ()  # facts worth showing that are no problem (explain, validate)
    deferred: bool = False  # the driver has not written this device's metadata yet (Pending)
    problems: tuple[Problem, ...] = ()  # why kvdev cannot act on this device (empty: it can)
    # Set on a last good description kept in force: why its newer description was not used.
    rejected: tuple[Problem, ...] = ()

    @property
    def usable(self) -> bool:
        """True when kvdev may match and configure the device."""
        return not self.problems

    @property
    def cpu(self) -> bool:
        """True for a CPU device: the VM's vCPUs, with no guest device to match."""
        return self.driver in CPU_DRIVERS

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What names one device across versions of a file: claim, request, driver, pool, name."""
        return (self.claim, self.request, self.driver, self.pool, self.name)

    @property
    def ref(self) -> str:
        """A stable, human-readable identity: ``<claim>/<request>/<driver>/<pool>/<device>``."""
        return f"{self.claim}/{self.request}/{self.driver}/{self.pool}/{self.name}"


def hint_for(device: DescribedDevice, hints: Iterable[DeviceHint]) -> DeviceHint | None:
    """The most specific hint selecting ``device`` (None if none, or if two tie)."""
    scored = []
    for h in hints:
        claim_ok = (
            h.claim.pod_claim_name == device.pod_claim_name
            if h.claim.pod_claim_name is not None
            else h.claim.resource_claim_name == device.claim and device.pod_claim_name is None
        )
        request_ok = h.request in {device.request, base_request(device.request)}
        narrow = [(h.driver, device.driver), (h.pool, device.pool), (h.device, device.name)]
        if claim_ok and request_ok and all(want in {None, got} for want, got in narrow):
            scored.append((sum(want is not None for want, _ in narrow), h))
    scored.sort(key=lambda pair: -pair[0])
    if not scored or (len(scored) > 1 and scored[0][0] == scored[1][0]):
        return None
    return scored[0][1]


def deferred(doc: DeviceMetadata) -> bool:
    """True when ``doc`` is a driver's first, structure-only write of a deferred flow.

    No device carries attributes or networkData, and the generation is the first one: the
    rewrite that fills them in comes with a higher generation. (A later generation without
    them is the driver's last word, and read as it is.)
    """
    if doc.generation > DEFERRED_GENERATION:
        return False
    return not any(
        d is not None and (d.attributes or d.network_data is not None)
        for r in doc.requests or []
        if r is not None
        for d in r.devices or []
    )


def pending(location: MetadataLocation, generation: int = 0) -> DescribedDevice:
    """The stand-in for a request whose file describes no device yet (empty or structure-only)."""
    return DescribedDevice(
        claim="" if location.template else location.claim,
        namespace=None,
        pod_claim_name=location.claim if location.template else None,
        request=location.request,
        driver=location.driver,
        pool="",
        name="",
        generation=generation,
        deferred=True,
    )


def describe(
    doc: DeviceMetadata,
    *,
    source: str = "",
    index: int | None = None,
    location: MetadataLocation | None = None,
) -> tuple[list[DescribedDevice], list[Problem]]:
    """Flatten a document into described devices, with warnings about values not used.

    ``location`` (the file's place in a tree) names the claim of a document that names none.
    """
    devices: list[DescribedDevice] = []
    warnings: list[Problem] = []

    def warn(loc: tuple[int | str, ...], message: str) -> None:
        warnings.append(Problem(message, source, index, format_path(loc), Severity.WARNING))

    meta = doc.metadata
    is_deferred = deferred(doc)
    claim, pod_claim_name = doc.claim, doc.pod_claim_name
    if not (claim or pod_claim_name) and location is not None:  # the path says whose it is
        claim = "" if location.template else location.claim
        pod_claim_name = location.claim if location.template else None
    for r, request in enumerate(doc.requests or []):
        for d, found in enumerate((request.devices if request else None) or []):
            if len(devices) == MAX_DEVICES:
                total = sum(len((q.devices if q else None) or []) for q in doc.requests or [])
                warn(
                    ("requests", r, "devices", d),
                    f"the file describes {total} devices: "
                    f"kvdev reads the first {MAX_DEVICES} and leaves the rest out",
                )
                return devices, warnings
            device = found or Device()
            loc: tuple[int | str, ...] = ("requests", r, "devices", d)
            problems: list[Problem] = []

            def fail(where: tuple[int | str, ...], message: str) -> None:
                problems.append(Problem(message, source, index, format_path(where)))  # noqa: B023 - used at once

            data = device.network_data
            ips = _ips(data.ips if data else None, (*loc, "networkData", "ips"), warn, fail)
            request_name = (request.name if request else None) or ""
            _identity(claim or pod_claim_name, request_name, device, loc, fail)
            _same_key_twice(device, loc, warn)
            devices.append(
                DescribedDevice(
                    claim=claim,
                    namespace=meta.namespace if meta else None,
                    pod_claim_name=pod_claim_name,
                    request=request_name,
                    driver=device.driver or "",
                    pool=device.pool or "",
                    name=device.name or "",
                    generation=doc.generation,
                    pci_address=_pci_address(device, loc, warn),
                    pcie_root=_pcie_root(device),
                    numa_nodes=_numa_nodes(device),
                    mac=_mac(device, loc, warn),
                    ips=ips,
                    interface_name=data.interface_name if data else None,
                    vendor_id=_pci_id(device, LOCAL_VENDOR_NAMES),
                    device_id=_pci_id(device, LOCAL_DEVICE_ID_NAMES),
                    mdev_uuid=_mdev_uuid(device),
                    mtu=_driver_mtu(device, loc, warn),
                    deferred=is_deferred,
                    problems=tuple(problems),
                )
            )
    if not devices and location is not None:
        devices.append(pending(location, doc.generation))
    return devices, warnings


def _identity(
    claim: str | None, request: str, device: Device, loc: tuple[int | str, ...], fail: _Warn
) -> None:
    """A device kvdev cannot tell from others (an empty name) is one it must not act on."""
    if not claim:
        fail(("metadata", "name"), "is empty: the device's claim is unknown")
    if not request:
        fail((*loc[:2], "name"), "is empty: the device's request is unknown")
    for field in ("driver", "pool", "name"):
        if not getattr(device, field):
            fail((*loc, field), "is empty: the device cannot be told from others")


def _ips(
    texts: list[str] | None, loc: tuple[int | str, ...], warn: _Warn, fail: _Warn
) -> tuple[str, ...]:
    """The addresses, canonical; what kvdev can act on safely is normalized with a warning."""
    out: list[str] = []
    if len(texts or []) > MAX_IPS:
        fail(loc, f"lists {len(texts or [])} addresses; kvdev acts on at most {MAX_IPS}")
        return ()
    for i, text in enumerate(texts or []):
        where = (*loc, i)
        try:
            if "/" in text:
                iface = interface(text)
            else:
                address = ipaddress.ip_address(text)
                iface = ipaddress.ip_interface(f"{address}/{address.max_prefixlen}")
        except ValueError:
            fail(where, f"{text!r} is not an IP address; the device is left as it is")
            continue
        canonical = f"{iface.ip}/{iface.network.prefixlen}"
        if "/" not in text:
            warn(where, f"{text!r} has no prefix length: used as the host address {canonical}")
        elif canonical != text:
            warn(where, f"{text!r} is not in canonical form: used as {canonical}")
        if canonical in out:
            warn(where, f"{canonical} is listed twice: added once")
            continue
        out.append(canonical)
    return tuple(out)


def _attr_key(device: Device, name: str) -> str:
    attrs = device.attributes or {}
    if name in attrs:
        return name
    return name.rpartition("/")[2]


def _pci_address(device: Device, loc: tuple[int | str, ...], warn: _Warn) -> str | None:
    names = [PCI_BUS_ID, *(f"{device.driver or ''}/{n}" for n in LOCAL_PCI_NAMES)]
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
    for name in (PCIE_ROOT, f"{device.driver or ''}/pcieRoot"):
        attr = device.attribute(name)
        if attr is not None and attr.string is not None:
            return attr.string
    return None


def _numa_nodes(device: Device) -> tuple[int, ...]:
    for name in (NUMA_NODE, *(f"{device.driver or ''}/{n}" for n in LOCAL_NUMA_NAMES)):
        attr = device.attribute(name)
        if attr is None:
            continue
        if attr.int_ is not None:
            return (attr.int_,)
        if attr.ints is not None:
            return tuple(attr.ints)
    return ()


def _mdev_uuid(device: Device) -> str | None:
    """The mediated device's UUID: the standard attribute, else the driver's ``mdevUUID``."""
    for name in (MDEV_UUID, f"{device.driver or ''}/mdevUUID"):
        attr = device.attribute(name)
        if attr is not None and attr.string is not None:
            return attr.string
    return None


def _driver_mtu(device: Device, loc: tuple[int | str, ...], warn: _Warn) -> int | None:
    """The driver's MTU for the NIC: its ``mtu`` attribute, an int in the plugin's range."""
    name = f"{device.driver or ''}/{MTU_NAME}"
    attr = device.attribute(name)
    if attr is None:
        return None
    where = (*loc, "attributes", _attr_key(device, name))
    if attr.int_ is None:
        warn(where, "is not an int; not used as the NIC's MTU")
        return None
    if not DRIVER_MTU_MIN <= attr.int_ <= DRIVER_MTU_MAX:
        warn(
            where,
            f"{attr.int_} is outside {DRIVER_MTU_MIN}..{DRIVER_MTU_MAX}; not used as the NIC's MTU",
        )
        return None
    return attr.int_


def _same_key_twice(device: Device, loc: tuple[int | str, ...], warn: _Warn) -> None:
    """Warn where ``X`` and ``<driver>/X`` both name an attribute, with different values."""
    attrs = device.attributes or {}
    driver = device.driver or ""
    for name, value in attrs.items():
        if "/" in name or not driver:
            continue
        qualified = f"{driver}/{name}"
        if qualified in attrs and attrs[qualified] != value:
            warn(
                (*loc, "attributes", name),
                f"{name!r} and {qualified!r} are the same attribute of driver {driver} with "
                f"different values: kvdev uses {qualified!r}",
            )


def _pci_id(device: Device, names: tuple[str, ...]) -> str | None:
    """A PCI vendor or device ID from the driver's attributes, as four lower-case hex digits."""
    for name in names:
        attr = device.attribute(f"{device.driver or ''}/{name}")
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
