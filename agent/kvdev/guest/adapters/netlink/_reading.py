"""Kernel messages decoded into ``observed`` values: only the attributes the agent reads.

``decode_link``, ``decode_address`` and ``decode_route`` each turn one message body into a
value, or None for what the agent does not represent (another family, another table, a
multipath route, a malformed message). Each also gives the key its cache files the value
under, so that the matching delete event removes it. Attributes are found by type and
skipped by length (``_codec.attrs``); nothing else of the message is parsed.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct

from kvdev.guest.adapters.netlink._codec import all_attrs, attrs
from kvdev.guest.adapters.netlink._rtnl import (
    FAMILIES,
    IFA_ADDRESS,
    IFA_LOCAL,
    IFA_PROTO,
    IFADDRMSG,
    IFF_UP,
    IFINFOMSG,
    IFLA_ADDRESS,
    IFLA_ALT_IFNAME,
    IFLA_IFNAME,
    IFLA_INFO_DATA,
    IFLA_INFO_KIND,
    IFLA_LINK,
    IFLA_LINK_NETNSID,
    IFLA_LINKINFO,
    IFLA_MASTER,
    IFLA_MAX_MTU,
    IFLA_MIN_MTU,
    IFLA_MTU,
    IFLA_OPERSTATE,
    IFLA_PERM_ADDRESS,
    IFLA_PROP_LIST,
    IFLA_VXLAN_LINK,
    MAIN_TABLE,
    OPERSTATES,
    RTA_DST,
    RTA_GATEWAY,
    RTA_OIF,
    RTA_PRIORITY,
    RTA_TABLE,
    RTMSG,
    RTN_UNICAST,
)
from kvdev.guest.core.observed import Address, Link, Route

_U32 = struct.Struct("=I")
AddressKey = tuple[int, str]  # ifindex, address/prefix
RouteKey = tuple[int, str, int | None, int, str | None]  # family, dst, metric, oif, gateway
_WIDTH: dict[int, int] = {socket.AF_INET: 4, socket.AF_INET6: 16}
# Kinds whose IFLA_LINK names the other end of a pair, not a link they are stacked on.
_PAIRS = frozenset({"veth", "netkit", "vxcan"})
_UNSPECIFIED: dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address] = {
    socket.AF_INET: ipaddress.IPv4Address(0),
    socket.AF_INET6: ipaddress.IPv6Address(0),
}


def _u32(value: memoryview | None) -> int | None:
    return _U32.unpack_from(value)[0] if value is not None and len(value) >= 4 else None


def _text(value: memoryview | None) -> str | None:
    if value is None:
        return None
    text = bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    return text or None


def _mac(value: memoryview | None) -> str | None:
    """A link-layer address as lower-case colon-separated hex; None when absent or empty."""
    if value is None or not len(value):
        return None
    return bytes(value).hex(":")


def _ip(family: int, value: memoryview | None) -> str | None:
    if value is None or len(value) != _WIDTH[family]:
        return None
    if family == socket.AF_INET:  # as ipaddress writes it; IPv6: its own compression rules
        return socket.inet_ntop(family, value)
    return _ipv6_text(bytes(value))


@functools.lru_cache(maxsize=4096)
def _ipv6_text(packed: bytes) -> str:
    return str(ipaddress.IPv6Address(packed))


@functools.lru_cache(maxsize=4096)
def _destination(dst: str, dst_len: int) -> str:
    """A route's destination as its network (host bits cleared), once per distinct one."""
    return str(ipaddress.ip_network(f"{dst}/{dst_len}", strict=False))


def link_index(body: memoryview) -> tuple[int, int] | None:
    """(family, ifindex) of an ifinfomsg; None when the body is too short."""
    if len(body) < IFINFOMSG.size:
        return None
    family, _type, ifindex, _flags, _change = IFINFOMSG.unpack_from(body)
    return family, ifindex


def decode_link(body: memoryview) -> Link | None:
    """An RTM_NEWLINK body (family AF_UNSPEC) as a ``Link``; None when malformed."""
    if len(body) < IFINFOMSG.size:
        return None
    family, _type, ifindex, flags, _change = IFINFOMSG.unpack_from(body)
    found = attrs(body[IFINFOMSG.size :])
    ifname = _text(found.get(IFLA_IFNAME))
    if family != socket.AF_UNSPEC or ifname is None:
        return None
    kind, lower = None, None
    if (info := found.get(IFLA_LINKINFO)) is not None:
        linkinfo = attrs(info)
        kind = _text(linkinfo.get(IFLA_INFO_KIND))
        if kind == "vxlan" and (data := linkinfo.get(IFLA_INFO_DATA)) is not None:
            lower = _u32(attrs(data).get(IFLA_VXLAN_LINK))
    if kind not in _PAIRS and lower is None and IFLA_LINK_NETNSID not in found:
        lower = _u32(found.get(IFLA_LINK))  # a VLAN's, macvlan's, ipvlan's parent
    altnames: tuple[str, ...] = ()
    if (props := found.get(IFLA_PROP_LIST)) is not None:
        altnames = tuple(
            name for raw in all_attrs(props, IFLA_ALT_IFNAME) if (name := _text(raw)) is not None
        )
    oper = found.get(IFLA_OPERSTATE)
    state = oper[0] if oper is not None and len(oper) else 0
    master = _u32(found.get(IFLA_MASTER))
    return Link(
        ifindex=ifindex,
        ifname=ifname,
        mac=_mac(found.get(IFLA_ADDRESS)),
        permanent_mac=_mac(found.get(IFLA_PERM_ADDRESS)),
        mtu=_u32(found.get(IFLA_MTU)) or 0,
        min_mtu=_u32(found.get(IFLA_MIN_MTU)),
        max_mtu=_u32(found.get(IFLA_MAX_MTU)) or None,  # 0: the driver sets no upper bound
        up=bool(flags & IFF_UP),
        oper_state=OPERSTATES[state] if state < len(OPERSTATES) else "unknown",
        altnames=altnames,
        kind=kind,
        master=master or None,
        lower=lower if lower and lower != ifindex else None,
    )


def decode_address(body: memoryview) -> tuple[AddressKey, Address] | None:
    """An RTM_NEWADDR/RTM_DELADDR body (IPv4, IPv6) as its key and ``Address``."""
    if len(body) < IFADDRMSG.size:
        return None
    family, prefixlen, _flags, _scope, ifindex = IFADDRMSG.unpack_from(body)
    if family not in FAMILIES:
        return None
    found = attrs(body[IFADDRMSG.size :])
    # IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links.
    ip = _ip(family, found.get(IFA_LOCAL)) or _ip(family, found.get(IFA_ADDRESS))
    if ip is None or prefixlen > _WIDTH[family] * 8:
        return None
    proto = found.get(IFA_PROTO)
    address = f"{ip}/{prefixlen}"
    value = Address(ifindex=ifindex, address=address, proto=proto[0] if proto else None)
    return (ifindex, address), value


def decode_route(body: memoryview) -> tuple[RouteKey, Route] | None:
    """A unicast main-table route through one link, with its key; None for everything else.

    Multipath routes (no single output link) and source-specific routes are not represented.
    """
    if len(body) < RTMSG.size:
        return None
    family, dst_len, src_len, _tos, table, protocol, _scope, kind, _flags = RTMSG.unpack_from(body)
    if family not in FAMILIES or kind != RTN_UNICAST or src_len:
        return None
    found = attrs(body[RTMSG.size :])
    table = _u32(found.get(RTA_TABLE)) or table
    oif = _u32(found.get(RTA_OIF))
    if table != MAIN_TABLE or oif is None or dst_len > _WIDTH[family] * 8:
        return None
    dst = _ip(family, found.get(RTA_DST)) or str(_UNSPECIFIED[family])  # none: a default route
    destination = _destination(dst, dst_len)
    gateway = _ip(family, found.get(RTA_GATEWAY))
    metric = _u32(found.get(RTA_PRIORITY))
    route = Route(
        ifindex=oif, destination=destination, gateway=gateway, metric=metric, protocol=protocol
    )
    return (family, destination, metric, oif, gateway), route
