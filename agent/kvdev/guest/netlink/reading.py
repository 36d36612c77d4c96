"""Kernel dumps parsed into ``observed`` values, and interrupted dumps detected.

``_link``, ``_address`` and ``_route`` each turn one message into a value (or None for what is
not represented); ``_collect`` runs one over a dump and raises ``_DumpInterruptedError`` when the
kernel flags the dump as inconsistent. ``_int`` and ``_str`` read loosely typed fields.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import TypeVar

from kvdev.guest.netlink.rtnl import (
    _FAMILIES,
    _IFF_UP,
    _MAIN_TABLE,
    _NLM_F_DUMP_INTR,
    _RTN_UNICAST,
    _Msg,
)
from kvdev.guest.observed import Address, Link, Route

_T = TypeVar("_T")


def _int(value: object) -> int | None:
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


def _interrupted(msg: _Msg) -> bool:
    header = msg["header"]
    return isinstance(header, dict) and bool((_int(header.get("flags")) or 0) & _NLM_F_DUMP_INTR)


def _link(msg: _Msg) -> Link | None:
    ifindex, ifname = _int(msg["index"]), _str(msg.get_attr("IFLA_IFNAME"))
    if ifindex is None or ifname is None:
        return None
    info = msg.get_attr("IFLA_LINKINFO")
    props = msg.get_attr("IFLA_PROP_LIST")
    altnames = props.get_attrs("IFLA_ALT_IFNAME") if isinstance(props, _Msg) else []
    max_mtu = _int(msg.get_attr("IFLA_MAX_MTU"))
    oper = msg.get_attr("IFLA_OPERSTATE")
    return Link(
        ifindex=ifindex,
        ifname=ifname,
        mac=_mac(msg.get_attr("IFLA_ADDRESS")),
        permanent_mac=_mac(msg.get_attr("IFLA_PERM_ADDRESS")),
        mtu=_int(msg.get_attr("IFLA_MTU")) or 0,
        min_mtu=_int(msg.get_attr("IFLA_MIN_MTU")),
        max_mtu=max_mtu or None,  # 0 means the driver sets no upper bound
        up=bool((_int(msg["flags"]) or 0) & _IFF_UP),
        oper_state=str(oper).lower() if oper is not None else "unknown",
        altnames=tuple(name for name in altnames if isinstance(name, str)),
        kind=_str(info.get_attr("IFLA_INFO_KIND")) if isinstance(info, _Msg) else None,
    )


def _address(msg: _Msg) -> Address | None:
    if msg["family"] not in _FAMILIES:
        return None
    ifindex, prefixlen = _int(msg["index"]), _int(msg["prefixlen"])
    # IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links.
    ip = _str(msg.get_attr("IFA_LOCAL")) or _str(msg.get_attr("IFA_ADDRESS"))
    if ifindex is None or prefixlen is None or ip is None:
        return None
    try:
        interface = ipaddress.ip_interface(f"{ip}/{prefixlen}")
    except ValueError:
        return None
    return Address(ifindex=ifindex, address=str(interface), proto=_int(msg.get_attr("IFA_PROTO")))


def _route(msg: _Msg) -> Route | None:
    """A unicast main-table route through one link; None for everything else.

    Multipath routes (no single output link) and source-specific routes are not represented.
    """
    family = msg["family"]
    table = _int(msg.get_attr("RTA_TABLE"))
    table = table if table is not None else _int(msg["table"])
    oif = _int(msg.get_attr("RTA_OIF"))
    if family not in _FAMILIES or table != _MAIN_TABLE or msg["type"] != _RTN_UNICAST:
        return None
    if oif is None or msg["src_len"]:
        return None
    unspecified = ipaddress.IPv4Address(0) if family == socket.AF_INET else ipaddress.IPv6Address(0)
    dst = _str(msg.get_attr("RTA_DST")) or str(unspecified)  # no RTA_DST: a default route
    gateway = _str(msg.get_attr("RTA_GATEWAY"))
    try:
        network = ipaddress.ip_network(f"{dst}/{_int(msg['dst_len']) or 0}", strict=False)
        gateway = str(ipaddress.ip_address(gateway)) if gateway else None
    except ValueError:
        return None
    return Route(
        ifindex=oif,
        destination=str(network),
        gateway=gateway,
        metric=_int(msg.get_attr("RTA_PRIORITY")),
        protocol=_int(msg["proto"]) or 0,
    )


def _collect(parse: Callable[[_Msg], _T | None], messages: Iterable[_Msg]) -> tuple[_T, ...]:
    values = []
    for msg in messages:
        if _interrupted(msg):
            raise _DumpInterruptedError
        value = parse(msg)
        if value is not None:
            values.append(value)
    return tuple(values)


class _DumpInterruptedError(Exception):
    """The kernel flagged a dump as inconsistent (NLM_F_DUMP_INTR): something changed."""
