"""rtnetlink: read links, addresses and routes, apply typed steps, and watch for changes.

The only module that imports pyroute2. ``Netlink`` turns kernel dumps into the frozen values of
``observed`` (reporting everything it sees: the planner decides what matters) and applies the
``steps`` it is given, exactly and in order, one ``StepResult`` each. It makes no decisions and
never raises for a kernel error while applying: each error becomes a readable, classified
result (retryable or permanent). ``LinkEvents`` only says *that* something changed; callers
re-observe.

pyroute2's synchronous ``IPRoute`` runs a private asyncio loop: use these classes from the
thread that created them, and never from inside a running event loop.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol, Self, TypeVar, runtime_checkable

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkDumpInterrupted, NetlinkError

from kvdev.errors import RetryableError, UsageError
from kvdev.guest import steps as st
from kvdev.guest.observed import KVDEV_PROTO, Address, Link, NetState, Route

# Kernel ABI constants (linux/rtnetlink.h, linux/if.h, linux/netlink.h).
_MAIN_TABLE = 254
_RTN_UNICAST = 1
_RT_SCOPE_UNIVERSE = 0
_RT_SCOPE_LINK = 253
_RT_SCOPE_NOWHERE = 255  # in a delete request: match a route of any scope
_IFF_UP = 0x1
_NLM_F_DUMP_INTR = 0x10
_NLMSG_HDRLEN = 16
# RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
_EVENT_GROUPS = 0x1 | 0x10 | 0x40 | 0x100 | 0x400
_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_NETNS_DIR = "/var/run/netns"  # where `ip netns` (and pyroute2) find a namespace by name

_DUMP_ATTEMPTS = 3  # a dump interrupted by concurrent changes is retried this many times
_DRAIN_LIMIT = 10_000  # datagrams per drain(), so an event storm cannot hold the caller
_RECV_SIZE = 1 << 18

_RETRYABLE = frozenset(
    {errno.EBUSY, errno.EAGAIN, errno.ENODEV, errno.ENETUNREACH, errno.ETIMEDOUT, errno.ENOBUFS}
)
_ALREADY_THERE = frozenset({errno.EEXIST})
_ALREADY_GONE = frozenset({errno.EADDRNOTAVAIL, errno.ESRCH, errno.ENOENT})
_NOT_NETLINK = "not a netlink step"

_T = TypeVar("_T")


@runtime_checkable
class _Msg(Protocol):
    """The part of a pyroute2 message (or nested attribute set) this module reads."""

    def get_attr(self, attr: str, default: object = None) -> object: ...
    def get_attrs(self, attr: str) -> list[object]: ...
    def __getitem__(self, key: str) -> object: ...


class _Rtnl(Protocol):
    """The part of ``pyroute2.IPRoute`` this module calls."""

    def link(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
    def addr(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
    def route(self, command: str, **kwargs: object) -> Iterable[_Msg]: ...
    def bind(self, *, groups: int) -> None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


def _open(netns: str | None) -> _Rtnl:
    """An rtnetlink socket (no multicast groups), in ``netns`` when given.

    Raises:
        UsageError: there is no network namespace of that name.
        RetryableError: the socket could not be opened.
    """
    where = f" in network namespace {netns!r}" if netns else ""
    # Checked here because pyroute2 leaks its event loop when IPRoute() itself fails.
    if netns is not None and not (Path(_NETNS_DIR) / netns).exists():
        raise UsageError(f"no network namespace named {netns!r}")
    try:
        ipr: _Rtnl = IPRoute(netns=netns, flags=0, groups=0, ext_ack=True)
    except FileNotFoundError as e:
        raise UsageError(f"no network namespace named {netns!r}") from e
    except OSError as e:
        raise RetryableError(f"cannot open rtnetlink{where}: {e.strerror or e}") from e
    return ipr


# ---------------------------------------------------------------- reading


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


# ---------------------------------------------------------------- applying


@dataclass(frozen=True, slots=True)
class _Request:
    """One netlink request for a step: what to say, what to send, which errnos mean done."""

    what: str
    send: Callable[[], object]
    done_if: frozenset[int] = frozenset()
    confirm: Callable[[], bool] | None = None  # on a done_if errno: is it really done?


def _error_text(what: str, code: int, message: str) -> str:
    reason = os.strerror(code) if code > 0 else "error"
    if message and message != reason:
        return f"{what}: {message} ({reason}, errno {code})"
    return f"{what}: {reason} (errno {code})"


def _route_text(verb: str, step: st.AddRoute | st.RemoveRoute) -> str:
    via = f" via {step.gateway}" if step.gateway else ""
    metric = f" metric {step.metric}" if step.metric is not None else ""
    return f"{verb} route {step.destination}{via} dev {step.ifname}{metric}"


def _route_args(step: st.AddRoute | st.RemoveRoute) -> dict[str, object]:
    """The request fields shared by adding and removing a route (ValueError if malformed)."""
    network = ipaddress.ip_network(step.destination)
    args: dict[str, object] = {
        "family": socket.AF_INET if network.version == 4 else socket.AF_INET6,
        "dst": str(network.network_address),
        "dst_len": network.prefixlen,
        "oif": step.ifindex,
        "table": _MAIN_TABLE,
        "proto": KVDEV_PROTO,
    }
    if step.gateway:
        gateway = ipaddress.ip_address(step.gateway)
        if gateway.version != network.version:
            raise ValueError(f"gateway {gateway} is not IPv{network.version}")
        args["gateway"] = str(gateway)
    if step.metric is not None:
        args["priority"] = step.metric
    return args


def _address_args(address: str, ifindex: int) -> dict[str, object]:
    """Fields naming an address on a link (ValueError if malformed)."""
    ip = ipaddress.ip_interface(address)
    return {"index": ifindex, "address": str(ip.ip), "prefixlen": ip.network.prefixlen}


class _Socket:
    """An rtnetlink socket that closes once and refuses use after that."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._ipr: _Rtnl | None = _open(netns)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._ipr is not None:
            ipr, self._ipr = self._ipr, None
            ipr.close()

    @property
    def _rtnl(self) -> _Rtnl:
        if self._ipr is None:
            raise UsageError(f"this {type(self).__name__} is closed")
        return self._ipr


class Netlink(_Socket):
    """One rtnetlink socket, in the current or a named network namespace.

    ``Netlink(netns="blue")`` works in ``/var/run/netns/blue`` (as ``ip netns`` names it; an
    absolute path such as ``/proc/<pid>/ns/net`` works too). Opening raises ``UsageError``
    when the namespace does not exist (none is created) and ``RetryableError`` when the
    socket cannot be opened.
    """

    def read_state(self) -> NetState:
        """All links, IPv4/IPv6 addresses and main-table unicast routes: one dump of each.

        Raises:
            RetryableError: a dump failed, or kept being interrupted by concurrent changes.
        """
        ipr = self._rtnl
        for _ in range(_DUMP_ATTEMPTS):
            try:
                return NetState(
                    links=_collect(_link, ipr.link("dump")),
                    addresses=_collect(_address, ipr.addr("dump")),
                    routes=_collect(_route, ipr.route("dump")),
                )
            except (_DumpInterruptedError, NetlinkDumpInterrupted):
                continue
            except (NetlinkError, OSError) as e:
                raise RetryableError(f"reading rtnetlink state failed: {e}") from e
        raise RetryableError("rtnetlink dumps kept being interrupted by concurrent changes")

    def apply(self, steps: Sequence[st.Step]) -> list[st.StepResult]:
        """Apply each step in order; one result per step, whatever happened to the others."""
        return [self._apply(step) for step in steps]

    def _apply(self, step: st.Step) -> st.StepResult:
        try:
            request = self._link_request(step) or self._ip_request(step)
        except ValueError as e:
            error = f"{type(step).__name__} on {step.ifname}: {e}"  # a malformed step
            return st.StepResult(step=step, ok=False, error=error, retryable=False)
        if request is None:
            return st.StepResult(step=step, ok=False, error=_NOT_NETLINK, retryable=False)
        try:
            request.send()
        except (NetlinkError, OSError) as e:
            code = _int(getattr(e, "code", None)) or _int(getattr(e, "errno", None)) or 0
            message = str(e.args[1]) if len(e.args) > 1 else str(e)
        else:
            return st.StepResult(step=step, ok=True)
        if code in request.done_if and (request.confirm is None or request.confirm()):
            return st.StepResult(step=step, ok=True)
        error = _error_text(request.what, code, message)
        return st.StepResult(step=step, ok=False, error=error, retryable=code in _RETRYABLE)

    def _link_request(self, step: st.Step) -> _Request | None:
        ipr, index, name = self._rtnl, step.ifindex, step.ifname
        change: dict[str, object]
        match step:
            case st.AddAltname(altname=altname):
                return _Request(
                    f"add altname {altname} to {name}",
                    partial(ipr.link, "property_add", index=index, altname=altname),
                    _ALREADY_THERE,
                    # EEXIST also when another link has that name: only done if it is ours
                    partial(self._has_name, index, altname),
                )
            case st.SetDown() | st.SetUp():
                state = "up" if isinstance(step, st.SetUp) else "down"
                what, change = f"set {name} {state}", {"state": state}
            case st.Rename(new_name=new):
                what, change = f"rename {name} to {new}", {"ifname": new}
            case st.SetMtu(mtu=mtu):
                what, change = f"set mtu {mtu} on {name}", {"mtu": mtu}
            case _:
                return None
        return _Request(what, partial(ipr.link, "set", index=index, **change))

    def _ip_request(self, step: st.Step) -> _Request | None:
        ipr = self._rtnl
        match step:
            case st.AddAddress(address=address):
                args = _address_args(address, step.ifindex)
                interface = ipaddress.ip_interface(address)
                if interface.version == 4 and interface.network.prefixlen <= 30:
                    args["broadcast"] = str(interface.network.broadcast_address)  # `brd +`
                args["IFA_PROTO"] = KVDEV_PROTO
                return _Request(
                    f"add address {address} to {step.ifname}",
                    partial(ipr.addr, "add", **args),
                    _ALREADY_THERE,
                )
            case st.RemoveAddress(address=address):
                return _Request(
                    f"remove address {address} from {step.ifname}",
                    partial(ipr.addr, "del", **_address_args(address, step.ifindex)),
                    _ALREADY_GONE,
                )
            case st.AddRoute():
                args = _route_args(step)
                args["scope"] = _RT_SCOPE_UNIVERSE if step.gateway else _RT_SCOPE_LINK
                return _Request(
                    _route_text("add", step), partial(ipr.route, "add", **args), _ALREADY_THERE
                )
            case st.RemoveRoute():
                args = _route_args(step) | {"scope": _RT_SCOPE_NOWHERE}
                return _Request(
                    _route_text("remove", step), partial(ipr.route, "del", **args), _ALREADY_GONE
                )
        return None

    def _has_name(self, ifindex: int, name: str) -> bool:
        """Whether ``name`` (ifname or altname) belongs to the link ``ifindex``."""
        try:
            found = list(self._rtnl.link("get", ifname=name))
        except (NetlinkError, OSError):
            return False
        return any(_int(msg["index"]) == ifindex for msg in found)


# ---------------------------------------------------------------- events


def _count_messages(datagram: bytes) -> int:
    count, offset = 0, 0
    while offset + _NLMSG_HDRLEN <= len(datagram):
        (length,) = struct.unpack_from("=I", datagram, offset)
        count += 1
        if length < _NLMSG_HDRLEN:
            break
        offset += (length + 3) & ~3
    return count


class LinkEvents(_Socket):
    """A non-blocking socket subscribed to link, address and route changes (IPv4 and IPv6).

    Register ``fileno()`` with a selector; when it is readable, call ``drain()``. Events are
    hints: they say that something changed, and the caller re-reads the state. Opening
    raises like ``Netlink``.
    """

    def __init__(self, netns: str | None = None) -> None:
        super().__init__(netns)
        try:
            self._rtnl.bind(groups=_EVENT_GROUPS)
            self._fd = self._rtnl.fileno()
            os.set_blocking(self._fd, False)
        except (NetlinkError, OSError) as e:
            self.close()
            raise RetryableError(f"cannot subscribe to rtnetlink events: {e}") from e

    def fileno(self) -> int:
        """The socket's descriptor, readable when events are pending."""
        if self._ipr is None:
            raise UsageError("this LinkEvents is closed")
        return self._fd

    def drain(self) -> int:
        """Read every pending message without blocking; how many there were (0 if none).

        A receive-buffer overflow (ENOBUFS: events were lost) counts as one message, so the
        caller still learns that the state changed.

        Raises:
            RetryableError: the socket failed in another way.
        """
        fd, count = self.fileno(), 0
        for _ in range(_DRAIN_LIMIT):
            try:
                datagram = os.read(fd, _RECV_SIZE)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    count += 1
                    continue
                raise RetryableError(f"reading rtnetlink events failed: {e}") from e
            if not datagram:
                break
            count += _count_messages(datagram)
        return count
