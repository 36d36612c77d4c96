"""``Netlink``: read the state, and turn steps into netlink requests and apply them.

Each step becomes one ``_Request`` (what to say, what to send, which errnos mean it is already
done); ``Netlink.apply`` sends them in order and turns every outcome into a ``StepResult``,
classifying kernel errors as retryable or permanent instead of raising.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from pyroute2.netlink.exceptions import NetlinkDumpInterrupted, NetlinkError

from kvdev.errors import RetryableError
from kvdev.guest.adapters.netlink._reading import (
    DumpInterruptedError,
    collect,
    parse_address,
    parse_int,
    parse_link,
    parse_route,
)
from kvdev.guest.adapters.netlink._rtnl import (
    FAMILIES,
    MAIN_TABLE,
    RT_SCOPE_LINK,
    RT_SCOPE_NOWHERE,
    RT_SCOPE_UNIVERSE,
    Socket,
)
from kvdev.guest.core import steps as st
from kvdev.guest.core.observed import KVDEV_PROTO, NetState

_DUMP_ATTEMPTS = 3  # a dump interrupted by concurrent changes is retried this many times

_RETRYABLE = frozenset(
    {errno.EBUSY, errno.EAGAIN, errno.ENODEV, errno.ENETUNREACH, errno.ETIMEDOUT, errno.ENOBUFS}
)
_ALREADY_THERE = frozenset({errno.EEXIST})
_ALREADY_GONE = frozenset({errno.EADDRNOTAVAIL, errno.ESRCH, errno.ENOENT})
_NOT_NETLINK = "not a netlink step"


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
        "table": MAIN_TABLE,
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


class Netlink(Socket):
    """One rtnetlink socket, in the current or a named network namespace.

    ``Netlink(netns="blue")`` works in ``/var/run/netns/blue`` (as ``ip netns`` names it; an
    absolute path such as ``/proc/<pid>/ns/net`` works too). Opening raises ``UsageError``
    when the namespace does not exist (none is created) and ``RetryableError`` when the
    socket cannot be opened.
    """

    def read_state(self) -> NetState:
        """All links, IPv4/IPv6 addresses and main-table unicast routes: one dump of each.

        Routes are dumped per family: pyroute2 0.7 dumps only IPv4 when no family is given.

        Raises:
            RetryableError: a dump failed, or kept being interrupted by concurrent changes.
        """
        ipr = self._rtnl
        for _ in range(_DUMP_ATTEMPTS):
            try:
                return NetState(
                    links=collect(parse_link, ipr.link("dump")),
                    addresses=collect(parse_address, ipr.addr("dump")),
                    routes=tuple(
                        route
                        for family in FAMILIES
                        for route in collect(parse_route, ipr.route("dump", family=family))
                    ),
                )
            except (DumpInterruptedError, NetlinkDumpInterrupted):
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
            code = parse_int(getattr(e, "code", None)) or parse_int(getattr(e, "errno", None)) or 0
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
                if step.protocol is not None:
                    args["IFA_PROTO"] = step.protocol
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
                args = _route_args(step) | {"proto": step.protocol}
                args["scope"] = RT_SCOPE_UNIVERSE if step.gateway else RT_SCOPE_LINK
                return _Request(
                    _route_text("add", step), partial(ipr.route, "add", **args), _ALREADY_THERE
                )
            case st.RemoveRoute():
                args = _route_args(step) | {"scope": RT_SCOPE_NOWHERE}
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
        return any(parse_int(msg["index"]) == ifindex for msg in found)
