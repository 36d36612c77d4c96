"""The guest bundle: the container-side metadata tree plus kvdev GuestHints that pin each device.

Input: the files of the tree virt-launcher sees at /var/run/kubernetes.io/dra-device-attributes
(relative path -> bytes) and a plan of where the devices sit in the guest, from a libvirt domain
XML (``bundle_xml``) or a guest-plan file (``bundle_plan``). Output: the bundle (relative path ->
bytes): every metadata file unchanged, plus ``kvdev/guest-hints.json`` with one hint per
described device: its guest PCI address when the plan knows it, a tag
(``dra:<claim>/<request>/<index>``, index counting the devices of that claim directory and base
request in file and allocation order), and the interface name, MTU and routes a plan asks for.

How the domain XML is joined to the metadata, per described device, first hit wins:
``<hostdev>`` whose source PCI address is the device's ``resource.kubernetes.io/pciBusID`` (or
the driver's own PCI attribute), ``<interface>`` whose ``<mac>`` is ``networkData.hardwareAddress``,
``<interface type='hostdev'>`` whose source is the pciBusID. A device with no hit, or a hit
without a guest PCI address, is left unpinned (the agent then matches it by MAC, or a device
without one by a vendor:device ID no other device shares) and reported.

Must not: do I/O (the writer is ``bundlewriter``), or change a metadata file's bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kvdev.errors import Problem, SchemaError, Severity
from kvdev.host.bundle.domainxml import DomainDevice
from kvdev.host.bundle.plan import GuestPlan
from kvdev.schema import GUEST_HINTS, Role, check_file, decode_stream, encode_stream, role_of
from kvdev.schema.described import DescribedDevice
from kvdev.schema.fields import base_request
from kvdev.schema.hints import KIND, V1ALPHA1, GuestHints, Route
from kvdev.schema.stream import validate_value
from kvdev.schema.tree import HINTS_PATH, MetadataLocation, metadata_location

HINTS_FILE: Final = HINTS_PATH


@dataclass(frozen=True, slots=True)
class Entry:
    """One described device of the tree, where its file is, and its tag index."""

    relpath: str
    location: MetadataLocation
    device: DescribedDevice
    ordinal: int

    @property
    def default_tag(self) -> str:
        """``dra:<claim>/<request>/<index>``."""
        return f"dra:{self.location.claim}/{self.location.request}/{self.ordinal}"

    @property
    def ref(self) -> str:
        """``<claim dir>/<request>/<driver>/<pool>/<device>``."""
        d = self.device
        return f"{self.location.claim}/{d.request}/{d.driver}/{d.pool}/{d.name}"


@dataclass(frozen=True, slots=True)
class Tree:
    """The checked input tree: its metadata files and the devices they describe."""

    files: Mapping[str, bytes]
    entries: tuple[Entry, ...]
    warnings: tuple[Problem, ...] = ()


@dataclass(frozen=True, slots=True)
class Pin:
    """What the plan says about one described device."""

    matched_by: str
    origin: str
    guest_pci: str | None = None
    tag: str | None = None
    interface_name: str | None = None
    mtu: int | None = None
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """A plan joined to a tree: pins by entry index, plan items no device used, warnings."""

    pins: Mapping[int, Pin]
    unused: tuple[str, ...] = ()
    warnings: tuple[Problem, ...] = ()


@dataclass(frozen=True, slots=True)
class BundleDevice:
    """One line of the report: a described device and what the bundle says about it."""

    ref: str
    host_pci: str | None
    mac: str | None
    tag: str
    guest_pci: str | None = None
    matched_by: str | None = None
    origin: str | None = None


@dataclass(frozen=True, slots=True)
class Bundle:
    """The bundle's files and a report of what went into them."""

    files: Mapping[str, bytes]
    devices: tuple[BundleDevice, ...]
    unused: tuple[str, ...] = ()
    warnings: tuple[Problem, ...] = field(default=())

    @property
    def unpinned(self) -> tuple[BundleDevice, ...]:
        """Devices the bundle gives no guest PCI address (matched by MAC or unique ID)."""
        return tuple(d for d in self.devices if d.guest_pci is None)


def read_tree(files: Mapping[str, bytes], root: str = "") -> Tree:
    """Check every metadata file of a container-side tree; drop what is no metadata file.

    Raises:
        SchemaError: a metadata file is invalid or misplaced (all such files named).
    """
    errors: list[Problem] = []
    warnings: list[Problem] = []
    kept: dict[str, bytes] = {}
    entries: list[Entry] = []
    counters: dict[tuple[bool, str, str], int] = {}
    for relpath in sorted(files):
        source = f"{root.rstrip('/')}/{relpath}" if root else relpath
        if role_of(relpath) is not Role.DEVICE_METADATA:
            what = "guest hints, replaced by the bundle's" if relpath == HINTS_FILE else "unrelated"
            warnings.append(Problem(f"not copied ({what})", source, severity=Severity.WARNING))
            continue
        try:
            location = metadata_location(relpath)
        except ValueError as e:
            errors.append(Problem(str(e), source))
            continue
        assert location is not None
        result = check_file(source, Role.DEVICE_METADATA, files[relpath], location)
        errors.extend(result.errors)
        warnings.extend(result.warnings)
        kept[relpath] = files[relpath]
        for device in result.described:
            key = (location.template, location.claim, location.request)
            ordinal = counters.get(key, 0)
            counters[key] = ordinal + 1
            entries.append(Entry(relpath, location, device, ordinal))
    if errors:
        raise SchemaError(errors)
    return Tree(kept, tuple(entries), tuple(warnings))


_DOMAIN_RULES: Final = (
    ("hostdev source = pciBusID", "hostdev", "pci"),
    ("interface mac = hardwareAddress", "interface", "mac"),
    ("interface source = pciBusID", "interface", "pci"),
)


def place_by_domain(tree: Tree, domain: Sequence[DomainDevice], source: str = "") -> Placement:
    """Join a domain's hostdevs and interfaces to the described devices (rules: module doc)."""
    pins: dict[int, Pin] = {}
    warnings: list[Problem] = []
    used: set[tuple[str, int]] = set()
    for i, entry in enumerate(tree.entries):
        d = entry.device
        for rule, element, key in _DOMAIN_RULES:
            want = d.pci_address if key == "pci" else d.mac
            if want is None:
                continue
            hits = [
                x
                for x in domain
                if x.element == element and (x.host_pci if key == "pci" else x.mac) == want
            ]
            if not hits:
                continue
            if len(hits) > 1:
                where = ", ".join(x.where for x in hits)
                msg = f"{entry.ref}: {rule} matches {where}; not pinned"
                warnings.append(Problem(msg, source, severity=Severity.WARNING))
                break
            hit = hits[0]
            used.add((hit.element, hit.index))
            pins[i] = Pin(rule, f"{source}: {hit.where}" if source else hit.where, hit.guest_pci)
            break
    unused = tuple(
        f"{x.where}: no described device has its "
        + ("MAC" if x.element == "interface" and x.host_pci is None else "host PCI address")
        for x in domain
        if (x.element, x.index) not in used
    )
    return Placement(pins, unused, tuple(warnings))


def place_by_plan(tree: Tree, plan: GuestPlan, source: str = "") -> Placement:
    """Join a guest plan's entries to the described devices; each entry must pick exactly one.

    Raises:
        SchemaError: an entry picks no device, several devices, or one another entry picked.
    """
    pins: dict[int, Pin] = {}
    taken: dict[int, int] = {}
    errors: list[Problem] = []
    for n, item in enumerate(plan.devices):
        picked = [
            i
            for i, e in enumerate(tree.entries)
            if e.location.claim == item.claim
            and item.request in {e.device.request, base_request(e.device.request)}
            and all(
                want in {None, got}
                for want, got in (
                    (item.driver, e.device.driver),
                    (item.pool, e.device.pool),
                    (item.device, e.device.name),
                )
            )
        ]
        where = f"devices[{n}]"
        if len(picked) != 1:
            refs = ", ".join(tree.entries[i].ref for i in picked)
            msg = (
                f"selects {len(picked)} described devices ({refs}); name driver and device"
                if picked
                else f"selects no described device (claim {item.claim!r}, request "
                f"{item.request!r}); check the claim directory and request names"
            )
            errors.append(Problem(msg, source, None, where))
            continue
        i = picked[0]
        if i in taken:
            msg = f"selects {tree.entries[i].ref}, as devices[{taken[i]}] does"
            errors.append(Problem(msg, source, None, where))
            continue
        taken[i] = n
        origin = f"{source}: {where}" if source else where
        pins[i] = Pin(
            "guest plan",
            origin,
            item.pci_address,
            item.tag,
            item.interface_name,
            item.mtu,
            tuple(item.routes or ()),
        )
    if errors:
        raise SchemaError(errors)
    return Placement(pins)


def _hint(entry: Entry, pin: Pin | None) -> dict[str, Any]:
    loc, d = entry.location, entry.device
    claim = {"podClaimName" if loc.template else "resourceClaimName": loc.claim}
    guest: dict[str, Any] = {"tag": (pin.tag if pin and pin.tag else entry.default_tag)}
    if pin and pin.guest_pci:
        guest["pciAddress"] = pin.guest_pci
    hint: dict[str, Any] = {
        "claim": claim,
        "request": d.request,
        "driver": d.driver,
        "pool": d.pool,
        "device": d.name,
        "guest": guest,
    }
    network: dict[str, Any] = {}
    if pin and pin.interface_name:
        network["interfaceName"] = pin.interface_name
    if pin and pin.mtu is not None:
        network["mtu"] = pin.mtu
    if pin and pin.routes:
        network["routes"] = [r.to_json_dict() for r in pin.routes]
    if network:
        hint["network"] = network
    return hint


def build(tree: Tree, placement: Placement, *, generation: int = 1) -> Bundle:
    """The bundle for a tree and a placement; the hints carry ``generation``.

    Raises:
        SchemaError: the hints would be invalid (e.g. two devices asking for one interface name).
    """
    hints = [_hint(e, placement.pins.get(i)) for i, e in enumerate(tree.entries)]
    body = {
        "apiVersion": V1ALPHA1,
        "kind": KIND,
        "metadata": {"generation": generation},
        "devices": hints,
    }
    doc = validate_value(body, GuestHints, source=HINTS_FILE, index=None)
    files = dict(tree.files)
    files[HINTS_FILE] = encode_stream(doc, GUEST_HINTS)
    devices = []
    for i, e in enumerate(tree.entries):
        pin = placement.pins.get(i)
        devices.append(
            BundleDevice(
                e.ref,
                e.device.pci_address,
                e.device.mac,
                str(hints[i]["guest"]["tag"]),
                pin.guest_pci if pin else None,
                pin.matched_by if pin else None,
                pin.origin if pin else None,
            )
        )
    return Bundle(files, tuple(devices), placement.unused, (*tree.warnings, *placement.warnings))


def hints_generation(data: bytes) -> int | None:
    """The generation of a bundle's hints file; None when it cannot be read as GuestHints."""
    try:
        return decode_stream(data, GUEST_HINTS).document.metadata.generation
    except SchemaError:
        return None
