"""Kernel dumps parsed into ``observed`` values, and interrupted dumps detected.

``parse_link``, ``parse_address`` and ``parse_route`` each turn one message into a value (or None
for what is not represented); ``collect`` runs one over a dump and raises ``DumpInterruptedError``
when the kernel flags the dump as inconsistent. ``parse_int`` and ``_str`` read loosely typed
fields.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import TypeVar

from kvdev.guest.adapters.netlink._rtnl import (
    FAMILIES,
    IFF_UP,
    MAIN_TABLE,
    NLM_F_DUMP_INTR_FLAG,
    RTN_UNICAST,
    Msg,
)
from kvdev.guest.core.observed import Address, Link, Route

_T = TypeVar("_T")


def parse_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _mac(value: object) -> str | None:
    """``02:00:5E:0:0:1`` -> ``02:00:5e:00:00:01``; None when absent or not hex octets."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return ":".join(f"{int(part, 16):02x}" for part in value.split(":"))
    except ValueError:
        return None


def _interrupted(msg: Msg) -> bool:
    header = msg["header"]
    flags = parse_int(header.get("flags")) if isinstance(header, dict) else None
    return bool((flags or 0) & NLM_F_DUMP_INTR_FLAG)


def parse_link(msg: Msg) -> Link | None:
    ifindex, ifname = parse_int(msg["index"]), _str(msg.get_attr("IFLA_IFNAME"))
    if ifindex is None or ifname is None:
        return None
    info = msg.get_attr("IFLA_LINKINFO")
    props = msg.get_attr("IFLA_PROP_LIST")
    altnames = props.get_attrs("IFLA_ALT_IFNAME") if isinstance(props, Msg) else []
    max_mtu = parse_int(msg.get_attr("IFLA_MAX_MTU"))
    oper = msg.get_attr("IFLA_OPERSTATE")
    return Link(
        ifindex=ifindex,
        ifname=ifname,
        mac=_mac(msg.get_attr("IFLA_ADDRESS")),
        permanent_mac=_mac(msg.get_attr("IFLA_PERM_ADDRESS")),
        mtu=parse_int(msg.get_attr("IFLA_MTU")) or 0,
        min_mtu=parse_int(msg.get_attr("IFLA_MIN_MTU")),
        max_mtu=max_mtu or None,  # 0 means the driver sets no upper bound
        up=bool((parse_int(msg["flags"]) or 0) & IFF_UP),
        oper_state=str(oper).lower() if oper is not None else "unknown",
        altnames=tuple(name for name in altnames if isinstance(name, str)),
        kind=_str(info.get_attr("IFLA_INFO_KIND")) if isinstance(info, Msg) else None,
    )


def parse_address(msg: Msg) -> Address | None:
    if msg["family"] not in FAMILIES:
        return None
    ifindex, prefixlen = parse_int(msg["index"]), parse_int(msg["prefixlen"])
    # IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links.
    ip = _str(msg.get_attr("IFA_LOCAL")) or _str(msg.get_attr("IFA_ADDRESS"))
    if ifindex is None or prefixlen is None or ip is None:
        return None
    try:
        interface = ipaddress.ip_interface(f"{ip}/{prefixlen}")
    except ValueError:
        return None
    proto = parse_int(msg.get_attr("IFA_PROTO"))
    return Address(ifindex=ifindex, address=str(interface), proto=proto)


def parse_route(msg: Msg) -> Route | None:
    """A unicast main-table route through one link; None for everything else.

    Multipath routes (no single output link) and source-specific routes are not represented.
    """
    family = msg["family"]
    table = parse_int(msg.get_attr("RTA_TABLE"))
    table = table if table is not None else parse_int(msg["table"])
    oif = parse_int(msg.get_attr("RTA_OIF"))
    if family not in FAMILIES or table != MAIN_TABLE or msg["type"] != RTN_UNICAST:
        return None
    if oif is None or msg["src_len"]:
        return None
    unspecified = ipaddress.IPv4Address(0) if family == socket.AF_INET else ipaddress.IPv6Address(0)
    dst = _str(msg.get_attr("RTA_DST")) or str(unspecified)  # no RTA_DST: a default route
    gateway = _str(msg.get_attr("RTA_GATEWAY"))
    try:
        network = ipaddress.ip_network(f"{dst}/{parse_int(msg['dst_len']) or 0}", strict=False)
        gateway = str(ipaddress.ip_address(gateway)) if gateway else None
    except ValueError:
        return None
    return Route(
        ifindex=oif,
        destination=str(network),
        gateway=gateway,
        metric=parse_int(msg.get_attr("RTA_PRIORITY")),
        protocol=parse_int(msg["proto"]) or 0,
    )


def collect(parse: Callable[[Msg], _T | None], messages: Iterable[Msg]) -> tuple[_T, ...]:
    values = []
    for msg in messages:
        if _interrupted(msg):
            raise DumpInterruptedError
        value = parse(msg)
        if value is not None:
            values.append(value)
    return tuple(values)


class DumpInterruptedError(Exception):
    """The kernel flagged a dump as inconsistent (NLM_F_DUMP_INTR): something changed."""
