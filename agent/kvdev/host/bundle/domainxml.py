"""Reading a libvirt domain XML, safely: where each passed-through device sits in the guest.

Owns: turning ``virsh dumpxml`` output (bytes) into ``DomainDevice`` values, one per
``<hostdev>`` and ``<interface>`` under ``<devices>``: the host PCI address or mdev UUID of its
``<source>``, the ``<mac address>``, the guest ``<address type='pci'>`` and the ``<alias name>``.

Safety: the parser is the standard library's expat, driven directly. A document type
declaration is refused outright (so no entity can be declared: no "billion laughs", no
external entity, no DTD fetched), parameter entity parsing is off, and input is bounded in
size and nesting. libvirt never writes a DOCTYPE, so nothing real is lost.

Must not: read files or resolve anything outside the bytes it is given (no I/O here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from xml.parsers import expat

from kvdev.errors import Problem, SchemaError
from kvdev.schema.fields import normalize_mac

MAX_XML_BYTES: Final = 8 * 1024 * 1024
MAX_DEPTH: Final = 64
_PCI_LIMITS: Final = (("domain", 0xFFFF), ("bus", 0xFF), ("slot", 0x1F), ("function", 0x7))


@dataclass(frozen=True, slots=True)
class DomainDevice:
    """One ``<hostdev>`` or ``<interface>`` of a domain.

    Attributes:
        element: ``hostdev`` or ``interface``.
        index: its position among the domain's elements of that name (``hostdev[2]``).
        host_pci: the host PCI address of its source (``dddd:bb:dd.f``), if a PCI device.
        mdev_uuid: the mediated device's UUID (a ``type='mdev'`` hostdev).
        mac: the MAC (``<mac address>``) of an interface, lower case.
        guest_pci: the guest PCI address libvirt gave it; None when not on a PCI bus.
        alias: libvirt's alias (``ua-...`` for KubeVirt user aliases).
    """

    element: str
    index: int
    host_pci: str | None = None
    mdev_uuid: str | None = None
    mac: str | None = None
    guest_pci: str | None = None
    alias: str | None = None

    @property
    def where(self) -> str:
        """``hostdev[0]`` (alias ua-gpu-gpu1)."""
        alias = f" (alias {self.alias})" if self.alias else ""
        return f"{self.element}[{self.index}]{alias}"


@dataclass
class _Node:
    name: str
    attrs: dict[str, str]
    line: int
    children: list[_Node] = field(default_factory=list)

    def child(self, name: str) -> _Node | None:
        return next((c for c in self.children if c.name == name), None)


class _Refused(Exception):  # noqa: N818 - internal signal, always turned into SchemaError
    pass


def _parse(data: bytes, source: str) -> _Node:
    if len(data) > MAX_XML_BYTES:
        raise SchemaError([Problem(f"larger than {MAX_XML_BYTES} bytes", source)])
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[_Node] = []
    top: list[_Node] = []

    def refuse(what: str) -> None:
        msg = f"line {parser.CurrentLineNumber}: {what} refused (libvirt never writes one)"
        raise _Refused(msg)

    def start(name: str, attrs: dict[str, str]) -> None:
        if len(stack) >= MAX_DEPTH:
            raise _Refused(f"line {parser.CurrentLineNumber}: nested deeper than {MAX_DEPTH}")
        node = _Node(name, attrs, parser.CurrentLineNumber)
        (stack[-1].children if stack else top).append(node)
        stack.append(node)

    def end(name: str) -> None:
        del name
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = lambda *_: refuse("a document type declaration (DOCTYPE)")
    parser.EntityDeclHandler = lambda *_: refuse("an entity declaration")

    def external(*_: object) -> int:
        refuse("an external entity reference")
        return 0  # pragma: no cover - refuse raises

    parser.ExternalEntityRefHandler = external
    try:
        parser.Parse(data, True)  # noqa: FBT003 - expat's signature
    except _Refused as e:
        raise SchemaError([Problem(str(e), source)]) from e
    except expat.ExpatError as e:
        msg = (
            f"not well-formed XML: {expat.ErrorString(e.code)} (line {e.lineno} column {e.offset})"
        )
        raise SchemaError([Problem(msg, source)]) from e
    return top[0]


def _pci(node: _Node | None, source: str, where: str) -> str | None:
    """``dddd:bb:dd.f`` from an ``<address domain= bus= slot= function=>`` element."""
    if node is None or node.attrs.get("type", "pci") != "pci" or "bus" not in node.attrs:
        return None
    parts = []
    for name, limit in _PCI_LIMITS:
        text = node.attrs.get(name, "0")
        try:
            value = int(text, 0)
        except ValueError:
            value = -1
        if not 0 <= value <= limit:
            msg = f"{name}={text!r} is not a PCI {name} (0 to {limit:#x})"
            raise SchemaError([Problem(msg, source, None, f"{where}.address (line {node.line})")])
        parts.append(value)
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.{parts[3]:x}"


def _device(node: _Node, index: int, source: str) -> DomainDevice:
    where = f"{node.name}[{index}]"
    src = node.child("source")
    src_address = src.child("address") if src is not None else None
    host_pci = mdev = None
    if src_address is not None:
        mdev = src_address.attrs.get("uuid")
        if mdev is None:
            host_pci = _pci(src_address, source, f"{where}.source")
    mac = None
    if (mac_node := node.child("mac")) is not None and "address" in mac_node.attrs:
        try:
            mac = normalize_mac(mac_node.attrs["address"])
        except ValueError as e:
            problem = Problem(str(e), source, None, f"{where}.mac.address (line {mac_node.line})")
            raise SchemaError([problem]) from e
    guest = node.child("address")
    alias = node.child("alias")
    return DomainDevice(
        element=node.name,
        index=index,
        host_pci=host_pci,
        mdev_uuid=mdev.lower() if mdev else None,
        mac=mac,
        guest_pci=_pci(guest, source, where),
        alias=alias.attrs.get("name") if alias is not None else None,
    )


def parse_domain(data: bytes, source: str = "") -> tuple[DomainDevice, ...]:
    """Every ``<hostdev>`` and ``<interface>`` of a domain XML, in document order.

    Raises:
        SchemaError: not well-formed, a DOCTYPE/entity, not a ``<domain>``, or an address or
            MAC that is not one (the message names the element and line).
    """
    root = _parse(data, source)
    if root.name != "domain":
        raise SchemaError([Problem(f"the root element is <{root.name}>, not <domain>", source)])
    devices = root.child("devices")
    out: list[DomainDevice] = []
    counts = {"hostdev": 0, "interface": 0}
    for node in devices.children if devices is not None else []:
        if node.name in counts:
            out.append(_device(node, counts[node.name], source))
            counts[node.name] += 1
    return tuple(out)
