"""Frozen values describing what the guest observed, passed from adapters to the pure core.

Adapters (``files``, ``udev``, ``netlink``) produce these; the pure core consumes
them. Nothing here does I/O or holds a live handle. ``network`` and ``interface_ip`` parse an
observed route's destination and an observed address once per distinct text (a guest's are the
same strings pass after pass, and parsing them was most of a pass's plan time).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field

from kvdev._records import compared
from kvdev.errors import Problem
from kvdev.schema.fields import interface
from kvdev.schema.tree import Role


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RawFile:
    """One file as read from disk, before any parsing.

    Attributes:
        source: the path to show people (as given or found).
        relpath: the path relative to the metadata tree's root, '/'-separated; None when the
            file is not inside a recognisable tree.
        role: what the file is, by its place (or, outside a tree, by its content).
        data: the bytes read; None when the file could not be read.
        problem: why it could not be read (set exactly when ``data`` is None).
        stream_key: a ConfigMap volume's stream key: DeviceMetadata only, a GuestHints
            object in it is an error (``schema.documents.check_file``).
    """

    source: str
    relpath: str | None
    role: Role
    data: bytes | None = None
    problem: Problem | None = None
    stream_key: bool = False


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Nic:
    """A network interface as the kernel shows it.

    Attributes:
        ifname: the current kernel name.
        ifindex: the kernel's index (stable while the link exists).
        mac: the current link-layer address, normalized; None if the link has none.
        permanent_mac: the burned-in address (ethtool permaddr), when the driver reports one.
        altnames: alternative names.
    """

    ifname: str
    ifindex: int
    mac: str | None = None
    permanent_mac: str | None = None
    altnames: tuple[str, ...] = ()


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GuestDevice:
    """A device in the guest: a PCI function (with its NICs, if any) or a NIC with no PCI parent.

    Attributes:
        pci_address: ``dddd:bb:dd.f`` lower case; None for virtual links (veth, bridges ...).
        vendor_id, device_id: four lower-case hex digits, e.g. ``15b3``, ``101e``.
        class_id: six hex digits, e.g. ``020000`` for Ethernet.
        driver: the bound kernel driver, if any.
        numa_node: the guest NUMA node, None when the kernel reports none (-1).
        dev_nodes: ``/dev`` nodes belonging to the device (e.g. ``/dev/vfio/12``).
        nics: its network interfaces (usually zero or one).
    """

    pci_address: str | None
    vendor_id: str | None = None
    device_id: str | None = None
    class_id: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    dev_nodes: tuple[str, ...] = ()
    nics: tuple[Nic, ...] = ()

    @property
    def key(self) -> str:
        """A key unique within one observation: the PCI address, else ``ifindex:<n>``."""
        if self.pci_address:
            return self.pci_address
        return f"ifindex:{self.nics[0].ifindex}" if self.nics else "unknown"


KVDEV_PROTO = 75  # route protocol and address protocol (IFA_PROTO) marking what kvdev added
RTPROT_KERNEL, RTPROT_RA = 2, 9  # routes the kernel makes by itself: connected prefixes, RA


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Link:
    """A network link as rtnetlink reports it.

    Attributes:
        ifindex, ifname: the kernel's index and current name.
        mac: current link-layer address, normalized; None when the link has none.
        permanent_mac: IFLA_PERM_ADDRESS when the kernel reports it.
        mtu, min_mtu, max_mtu: current MTU and the driver's bounds (None when unknown).
        up: administratively up (IFF_UP).
        oper_state: IFLA_OPERSTATE as lower-case text (``up``, ``down``, ``unknown`` ...).
        altnames: alternative names.
        kind: IFLA_INFO_KIND (``veth``, ``bridge`` ...); None for physical devices.
        master: IFLA_MASTER, the ifindex of the bridge, bond or VRF this link is a port of;
            None when it has none. ``NetState.uppers`` gives the other direction.
        lower: the link this one is stacked on, in this namespace: IFLA_LINK of a VLAN,
            macvlan, ipvlan or tunnel, IFLA_VXLAN_LINK of a vxlan; None when there is none
            (a veth's IFLA_LINK is its peer, not a lower link, and is not kept).
    """

    ifindex: int
    ifname: str
    mac: str | None = None
    permanent_mac: str | None = None
    mtu: int = 1500
    min_mtu: int | None = None
    max_mtu: int | None = None
    up: bool = False
    oper_state: str = "unknown"
    altnames: tuple[str, ...] = ()
    kind: str | None = None
    master: int | None = None
    lower: int | None = None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Address:
    """An IP address on a link, in canonical CIDR interface form (``10.1.0.5/24``).

    ``proto`` is IFA_PROTO (None when the kernel does not report it); ``KVDEV_PROTO`` marks an
    address kvdev added.
    """

    ifindex: int
    address: str
    proto: int | None = None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Route:
    """A unicast route in the main table through one link.

    ``destination`` is a canonical network (``10.3.0.0/16``, ``0.0.0.0/0``); ``protocol`` is
    rtm_protocol, ``KVDEV_PROTO`` for routes kvdev added.
    """

    ifindex: int
    destination: str
    gateway: str | None = None
    metric: int | None = None
    protocol: int = 0


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class NetState:
    """Everything rtnetlink told us in one observation.

    ``link`` and ``uppers`` answer from an index built once per state (on first use), so a
    pass that asks about its few described links costs nothing per link of the guest.
    """

    links: tuple[Link, ...] = ()
    addresses: tuple[Address, ...] = ()
    routes: tuple[Route, ...] = ()
    _by_index: dict[int, Link] | None = field(default=None, init=False, compare=False, repr=False)
    _uppers: dict[int, tuple[int, ...]] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    def link(self, ifindex: int) -> Link | None:
        """The link with this index, if any."""
        if self._by_index is None:
            object.__setattr__(self, "_by_index", {lk.ifindex: lk for lk in self.links})
        assert self._by_index is not None
        return self._by_index.get(ifindex)

    def uppers(self, ifindex: int) -> tuple[int, ...]:
        """The links built on ``ifindex``, in index order: its ports and what is stacked on it.

        A link's uppers are the links whose ``master`` it is (a bridge, bond or VRF holding
        ports) and those whose ``lower`` it is (the VLANs, macvlans, vxlans on a NIC); a link
        with a ``master`` is itself a port.
        """
        if self._uppers is None:
            ports: dict[int, list[int]] = {}
            for lk in self.links:
                for under in (lk.master, lk.lower):
                    if under is not None:
                        ports.setdefault(under, []).append(lk.ifindex)
            uppers = {k: tuple(sorted(set(v))) for k, v in ports.items()}
            object.__setattr__(self, "_uppers", uppers)
        assert self._uppers is not None
        return self._uppers.get(ifindex, ())


@functools.lru_cache(maxsize=4096)
def network(destination: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A route's ``destination`` as a network (parsed once per distinct text)."""
    return ipaddress.ip_network(destination)


def interface_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IP of an ``address`` (``ip/prefix``), parsed once per distinct text."""
    return interface(address).ip
