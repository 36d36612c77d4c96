"""The wire format: attributes read by length, and the requests the agent sends, as bytes.

``attrs`` indexes a run of rtattrs by type (the first of each; nested and byte-order flags
masked off) without copying; everything the agent does not read is skipped by its length.
``attr`` and the ``*_request`` functions build the few messages the agent sends: link changes
(up/down, name, MTU), altnames, addresses and routes added or removed, and the dumps.
Every request asks for an acknowledgement. ``ack_error`` reads an NLMSG_ERROR: the errno and
the kernel's extended-ack message (NLMSGERR_ATTR_MSG) when there is one.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

from kvdev.guest.adapters.netlink._rtnl import (
    ATTR,
    HEADER,
    IFA_ADDRESS,
    IFA_BROADCAST,
    IFA_LOCAL,
    IFA_PROTO,
    IFADDRMSG,
    IFF_UP,
    IFINFOMSG,
    IFLA_ALT_IFNAME,
    IFLA_IFNAME,
    IFLA_MTU,
    IFLA_PROP_LIST,
    MAIN_TABLE,
    NLA_F_NESTED,
    NLA_TYPE_MASK,
    NLM_F_ACK,
    NLM_F_ACK_TLVS,
    NLM_F_APPEND,
    NLM_F_CAPPED,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    NLMSG_HDRLEN,
    NLMSGERR_ATTR_MSG,
    RTA_DST,
    RTA_GATEWAY,
    RTA_OIF,
    RTA_PRIORITY,
    RTA_TABLE,
    RTM_DELADDR,
    RTM_DELLINKPROP,
    RTM_DELROUTE,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWLINKPROP,
    RTM_NEWROUTE,
    RTMSG,
    RTN_UNICAST,
)

_U32 = struct.Struct("=I")
_ERRNO = struct.Struct("=i")
_ASK = NLM_F_REQUEST | NLM_F_ACK
_CREATE = _ASK | NLM_F_CREATE | NLM_F_EXCL
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def attrs(data: memoryview) -> dict[int, memoryview]:
    """The attributes of ``data`` by type (the first of each type), values as views."""
    found: dict[int, memoryview] = {}
    offset, end = 0, len(data)
    while offset + 4 <= end:
        length, kind = ATTR.unpack_from(data, offset)
        if length < 4 or offset + length > end:
            break  # malformed: the rest cannot be read
        found.setdefault(kind & NLA_TYPE_MASK, data[offset + 4 : offset + length])
        offset += (length + 3) & ~3
    return found


def all_attrs(data: memoryview, wanted: int) -> list[memoryview]:
    """Every attribute of type ``wanted`` in ``data``, in order (altnames repeat)."""
    out = []
    offset, end = 0, len(data)
    while offset + 4 <= end:
        length, kind = ATTR.unpack_from(data, offset)
        if length < 4 or offset + length > end:
            break
        if kind & NLA_TYPE_MASK == wanted:
            out.append(data[offset + 4 : offset + length])
        offset += (length + 3) & ~3
    return out


def attr(kind: int, value: bytes) -> bytes:
    """One attribute, padded to four bytes."""
    length = 4 + len(value)
    return ATTR.pack(length, kind) + value + b"\0" * (-length & 3)


def _text(value: str) -> bytes:
    return value.encode() + b"\0"


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """A netlink message: header and body (the body is already padded)."""
    return HEADER.pack(NLMSG_HDRLEN + len(body), kind, flags, seq, 0) + body


def ack_error(payload: memoryview) -> tuple[int, str]:
    """An NLMSG_ERROR's errno (0: an acknowledgement) and the kernel's extended-ack text."""
    (code,) = _ERRNO.unpack_from(payload)
    if code == 0 or len(payload) < 4 + NLMSG_HDRLEN:
        return -code, ""
    length, _kind, flags, _seq, _pid = HEADER.unpack_from(payload, 4)
    if not flags & NLM_F_ACK_TLVS:
        return -code, ""
    # The request's header follows the errno; its body too unless the kernel capped it.
    offset = 4 + (NLMSG_HDRLEN if flags & NLM_F_CAPPED else (length + 3) & ~3)
    raw = attrs(payload[offset:]).get(NLMSGERR_ATTR_MSG)
    text = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace") if raw is not None else ""
    return -code, text


# ---------------------------------------------------------------- requests


def link_request(
    seq: int,
    ifindex: int,
    *,
    up: bool | None = None,
    name: str | None = None,
    mtu: int | None = None,
) -> bytes:
    """RTM_NEWLINK on an existing link: set it up or down, rename it, or set its MTU."""
    flags = IFF_UP if up else 0
    change = IFF_UP if up is not None else 0
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, ifindex, flags, change)
    if name is not None:
        body += attr(IFLA_IFNAME, _text(name))
    if mtu is not None:
        body += attr(IFLA_MTU, _U32.pack(mtu))
    return message(RTM_NEWLINK, _ASK, seq, body)


def altname_request(seq: int, ifindex: int, altname: str, *, add: bool) -> bytes:
    """RTM_NEWLINKPROP or RTM_DELLINKPROP: add ``altname`` to the link or remove it from it.

    Both carry the same payload; the flags are those ``ip link property add|del`` sends.
    """
    nested = attr(IFLA_ALT_IFNAME, _text(altname))
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, ifindex, 0, 0)
    body += attr(IFLA_PROP_LIST | NLA_F_NESTED, nested)
    if add:
        return message(RTM_NEWLINKPROP, _CREATE | NLM_F_APPEND, seq, body)
    return message(RTM_DELLINKPROP, _ASK, seq, body)


def address_request(
    seq: int,
    ifindex: int,
    interface: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
    *,
    add: bool,
    protocol: int | None = None,
) -> bytes:
    """RTM_NEWADDR (``brd +`` on IPv4 up to /30) or RTM_DELADDR for ``interface`` on a link."""
    family = socket.AF_INET if interface.version == 4 else socket.AF_INET6
    packed = interface.ip.packed
    body = IFADDRMSG.pack(family, interface.network.prefixlen, 0, 0, ifindex)
    body += attr(IFA_LOCAL, packed) + attr(IFA_ADDRESS, packed)
    if add and interface.version == 4 and interface.network.prefixlen <= 30:
        body += attr(IFA_BROADCAST, interface.network.broadcast_address.packed)
    if add and protocol is not None:
        body += attr(IFA_PROTO, bytes((protocol,)))
    return message(RTM_NEWADDR if add else RTM_DELADDR, _CREATE if add else _ASK, seq, body)


def route_request(  # noqa: PLR0913 - the fields of a route
    seq: int,
    *,
    add: bool,
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
    oif: int,
    gateway: Address | None,
    metric: int | None,
    protocol: int,
    scope: int,
) -> bytes:
    """RTM_NEWROUTE or RTM_DELROUTE of a unicast main-table route through ``oif``."""
    family = socket.AF_INET if network.version == 4 else socket.AF_INET6
    body = RTMSG.pack(family, network.prefixlen, 0, 0, MAIN_TABLE, protocol, scope, RTN_UNICAST, 0)
    body += attr(RTA_TABLE, _U32.pack(MAIN_TABLE))
    body += attr(RTA_DST, network.network_address.packed)
    body += attr(RTA_OIF, _U32.pack(oif))
    if gateway is not None:
        body += attr(RTA_GATEWAY, gateway.packed)
    if metric is not None:
        body += attr(RTA_PRIORITY, _U32.pack(metric))
    return message(RTM_NEWROUTE if add else RTM_DELROUTE, _CREATE if add else _ASK, seq, body)


DUMPS = (
    (RTM_GETLINK, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)),
    (RTM_GETADDR, IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)),
    (RTM_GETROUTE, RTMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)),
)
"""The three dumps of a full observation (every family): one at a time, the kernel runs one
dump per socket."""


def dump_request(seq: int, kind: int, body: bytes) -> bytes:
    """A dump request of ``kind`` (RTM_GET*) with its header struct ``body``."""
    return message(kind, NLM_F_REQUEST | NLM_F_DUMP, seq, body)
