"""Pure: what metadata may ask of the guest's network; what kvdev refuses, and what it warns about.

Metadata and hints come from the host; a wrong or hostile one must not take the guest's own
network away. ``judge`` applies the policy to what planning wants, before any step is planned;
which NICs are the guest's primary ones is ``core.primary``'s answer (``protected``), consumed
here and by planning. Each refusal is per item (an address, a route) or, for the primary NIC, per
device: the device shows as ``Error`` with the reason (``kvdev explain``), everything else it
asks for, and every other device, goes ahead.

Refused:

* **the primary NIC**: a bound NIC that ``core.primary.protected`` names (it carries a default
  route kvdev did not add, or it is the guest's own) is not touched at all (no altname, name,
  MTU, address, route or link state; planning leaves it out): it is how the guest reaches its
  network (and its primary address is on it);
* a **stacked NIC**: a bound NIC that is a port of the guest's own bridge, bond or VRF (it has
  a master), or that the guest built links on (a VLAN, macvlan, ipvlan, vxlan: it has uppers),
  is not touched at all either: a rename takes it down (and the bridge's forwarding with it), a
  smaller MTU shrinks the bridge's, an address on an enslaved port is never reached;
* an **address that is no unicast interface address**: unspecified (``0.0.0.0/0``), loopback,
  multicast (``ff02::1``), the limited broadcast, IPv4-mapped IPv6;
* an **address another link holds** (the primary NIC's address on a data NIC, say), whatever
  its prefix; an address kvdev removes from a link it manages in the same plan does not count;
* an **address two described devices ask for**: it stays where it is if one of them holds it
  already, else neither gets it;
* a **route into loopback or multicast space**, or through a gateway that is no unicast address;
* a **default route that would take over**: another link has a default route of the same family
  kvdev did not add, and this one's metric is no worse (lower or equal);
* what would **capture the primary NIC's traffic** (see "What may capture the primary's
  traffic" in docs/explanation/safety-policy.md): a route, or the connected prefix of an
  address, through a link kvdev manages that is shorter than ``SHORTEST`` (/8 for IPv4, /16
  for IPv6: more specific than any default route, it takes what the default reaches); that
  overlaps a connected prefix of a primary NIC, a primary NIC's gateway, a DNS server the
  guest reaches through a primary NIC, or a cloud metadata address (``METADATA``); or that,
  with the others through managed links before it, would reach more than a ``UNION_PREFIX``
  (/4 for IPv4, /12 for IPv6) worth of addresses: many routes that together cover what the
  default route reaches. A primary NIC is one ``core.primary.protected`` names
  (``Guard.protected``). None of this applies to
  a device whose hint says it is to become the primary (``network.primary``): it is warned
  about instead.

Where the guest reaches a DNS server is judged as if kvdev had configured nothing: without the
routes kvdev added and without the connected prefixes of the links kvdev manages (``_Judge.
_route_to``). What kvdev added earlier never vouches for itself: a route applied before the
guest's lease named a DNS server inside it is refused on the next pass (every pass judges
again), and planning removes it.

Warned about (applied; the warning is in the device's ``warnings``, shown by ``kvdev explain``):

* any other **default route** (a fallback behind the guest's own, or the only one);
* **link-local** addresses, and routes into link-local space (``169.254.0.0/16``, ``fe80::/10``)
  that hold no metadata address (one that does is refused: above);
* a **route that overlaps one another link carries** and kvdev did not add (but not one of the
  primary's connected prefixes: that is refused).

No I/O here.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kvdev._records import compared
from kvdev.guest.core import primary
from kvdev.guest.core.observed import (
    KVDEV_PROTO,
    RTPROT_KERNEL,
    Link,
    NetState,
    Route,
    interface_ip,
    network,
)
from kvdev.guest.core.primary import foreign_defaults, via
from kvdev.schema.fields import interface

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_NET = ipaddress.IPv4Network | ipaddress.IPv6Network
_LOOPBACK: Final = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
_MULTICAST: Final = (ipaddress.ip_network("224.0.0.0/4"), ipaddress.ip_network("ff00::/8"))
_LINK_LOCAL: Final = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_BROADCAST: Final = ipaddress.ip_address("255.255.255.255")
_DEFAULT_METRIC: Final = {4: 0, 6: 1024}  # what the kernel stores when no metric is given
# Shorter prefixes count as default routes: no data network needs more than a /8 of IPv4 (the
# largest block ever assigned to one organisation) or a /16 of IPv6 (RIRs hand out /12s, ISPs
# get /19 to /32, a site /48).
SHORTEST: Final = {4: 8, 6: 16}
# All routes and connected prefixes through managed links together: at most a /4 of IPv4 (16
# /8s: the private ranges and more fit) or a /12 of IPv6 (16 /16s).
UNION_PREFIX: Final = {4: 4, 6: 12}
# Cloud metadata services: 169.254.169.254 (every major cloud, OpenStack) and fd00:ec2::254
# (AWS over IPv6). OpenStack's fe80::a9fe:a9fe is link-local: reached with a scope (the
# interface), a route through another link cannot capture it.
METADATA: Final = (
    ipaddress.ip_network("169.254.169.254/32"),
    ipaddress.ip_network("fd00:ec2::254/128"),
)
_ALLOW: Final = (
    "if this device is to become the guest's primary NIC, set network.primary: true in its hint"
)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Wanted:
    """What one bound device asks for on its link, as planning has it before the policy."""

    device: str
    ifindex: int
    ifname: str
    addresses: tuple[str, ...]
    routes: tuple[tuple[str, str | None, int | None], ...]  # destination, gateway, metric
    primary: bool = False  # its hint says it is to become the guest's primary NIC


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Guard:
    """What holds the primary NICs' traffic.

    ``protected``: the primary NICs (``core.primary.protected``; None: those of the state alone,
    the links carrying a default route kvdev did not add); ``dns``: the guest's DNS servers
    (``adapters.netconfig.dns_servers``), protected when reached through a primary NIC.
    """

    protected: primary.Protected | None = None
    dns: tuple[str, ...] = ()


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Ruling:
    """The policy's word on one device: what it may have, what is refused, what is warned."""

    device: str
    addresses: tuple[str, ...]
    routes: tuple[tuple[str, str | None, int | None], ...]
    refused: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    refused_routes: tuple[tuple[tuple[str, str | None, int | None], str], ...] = ()
    """Each route refused, with why (planning says it when it removes one kvdev added)."""


def _metric(family: int, metric: int | None) -> int:
    return metric if metric is not None else _DEFAULT_METRIC[family]


def stacked(link: Link, state: NetState) -> str | None:
    """Why ``link`` is part of the guest's own topology and must not be touched; None if not."""

    def named(ifindex: int) -> str:
        other = state.link(ifindex)
        if other is None:
            return f"link {ifindex}"
        return f"{other.ifname} ({other.kind})" if other.kind else other.ifname

    why = "kvdev does not configure a link the guest's own network is built on"
    if link.master is not None:
        return f"{link.ifname} is a port of {named(link.master)}: {why}"
    if uppers := state.uppers(link.ifindex):
        return f"{link.ifname} carries {', '.join(named(u) for u in uppers)}: {why}"
    return None


@functools.lru_cache(maxsize=4096)
def _address_refusal(address: str) -> str | None:
    ip = interface_ip(address)
    what = None
    if ip.is_unspecified:
        what = "the unspecified address"
    elif ip.is_loopback:
        what = "a loopback address"
    elif ip.is_multicast:
        what = "a multicast address"
    elif ip == _BROADCAST:
        what = "the limited broadcast address"
    elif isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        what = "an IPv4-mapped IPv6 address"
    return f"address {address} is {what}: not an interface address" if what else None


def _within(net: _NET, spaces: Sequence[_NET]) -> bool:
    return any(net.version == s.version and net.subnet_of(s) for s in spaces)  # type: ignore[arg-type]


def _route_refusal(destination: str, gateway: str | None) -> str | None:
    net = network(destination)
    if net.prefixlen and _within(net, _LOOPBACK):
        return f"route {destination} leads into loopback space"
    if net.prefixlen and _within(net, _MULTICAST):
        return f"route {destination} leads into multicast space"
    if gateway is not None:
        gw = ipaddress.ip_address(gateway)
        if gw.is_unspecified or gw.is_loopback or gw.is_multicast or gw == _BROADCAST:
            return f"route {destination} via {gateway}: the gateway is no unicast address"
    return None


def _span(net: _NET) -> tuple[int, int]:
    """The first and last address of ``net``, as integers."""
    first = int(net.network_address)
    return first, first + net.num_addresses - 1


class _Reach:
    """The addresses that routes and connected prefixes through managed links reach, per family.

    Kept as the maximal blocks of their union (start -> end, as integers): two CIDR blocks nest
    or are disjoint, so a new one lies inside the block starting at or before it, or holds every
    block starting within it. ``measure`` and ``add`` cost a bisection and the blocks replaced.
    """

    def __init__(self) -> None:
        self.starts: dict[int, list[int]] = {4: [], 6: []}
        self.ends: dict[int, dict[int, int]] = {4: {}, 6: {}}
        self.size = {4: 0, 6: 0}

    def measure(self, v: int, first: int, last: int) -> tuple[int, int, int]:
        """With ``first..last`` of family ``v`` added: (addresses reached, lo, hi).

        ``lo:hi`` are the indexes of the blocks it would replace.
        """
        starts, ends = self.starts[v], self.ends[v]
        lo = bisect.bisect_left(starts, first)
        hi = bisect.bisect_right(starts, last)
        if (lo > 0 and ends[starts[lo - 1]] >= last) or (
            lo < hi and starts[lo] == first and ends[first] >= last
        ):
            return self.size[v], lo, lo  # inside a block already: nothing changes
        held = sum(ends[x] - x + 1 for x in starts[lo:hi])
        return self.size[v] - held + (last - first + 1), lo, hi

    def add(self, v: int, first: int, last: int, measured: tuple[int, int, int]) -> None:
        """Add ``first..last`` of family ``v``, as ``measure`` measured it just before."""
        size, lo, hi = measured
        if size == self.size[v] and lo == hi:
            return
        starts, ends = self.starts[v], self.ends[v]
        for x in starts[lo:hi]:
            del ends[x]
        starts[lo:hi] = [first]
        ends[first] = last
        self.size[v] = size


class _Judge:
    """The state every ruling is made against, computed once per plan."""

    def __init__(self, wanted: Sequence[Wanted], state: NetState, guard: Guard) -> None:
        self.state = state
        wants = {w.ifindex: w for w in wanted}
        # What kvdev removes in this plan (its own addresses a managed link no longer wants)
        # frees that address for another link.
        self.held: defaultdict[_IP, set[int]] = defaultdict(set)
        for a in state.addresses:
            w = wants.get(a.ifindex)
            if w is not None and a.proto == KVDEV_PROTO and a.address not in w.addresses:
                continue
            self.held[interface_ip(a.address)].add(a.ifindex)
        self.askers: defaultdict[_IP, list[Wanted]] = defaultdict(list)
        for w in wanted:
            for address in w.addresses:
                self.askers[interface_ip(address)].append(w)
        self.defaults = foreign_defaults(state.routes)
        self.foreign_routes = [
            r
            for r in state.routes
            if r.protocol != KVDEV_PROTO and network(r.destination).prefixlen
        ]
        protected = guard.protected if guard.protected is not None else primary.protected(state)
        self.primaries = set(protected.links)
        # The links kvdev manages: those it configures now, and those holding what it added.
        self.managed = {w.ifindex for w in wanted}
        self.managed.update(a.ifindex for a in state.addresses if a.proto == KVDEV_PROTO)
        self.managed.update(r.ifindex for r in state.routes if r.protocol == KVDEV_PROTO)
        self.protected = [
            (net.version, *_span(net), label) for net, label in self._protected(guard)
        ]
        self.reach = _Reach()

    def _name(self, ifindex: int) -> str:
        link = self.state.link(ifindex)
        return link.ifname if link else str(ifindex)

    def _protected(self, guard: Guard) -> list[tuple[_NET, str]]:
        """What the primary NICs' traffic is: (network, what it is, for people)."""
        out: dict[_NET, str] = {}
        # The primaries' addresses first: parsing every address of the guest is the cost.
        for a in filter(lambda a: a.ifindex in self.primaries, self.state.addresses):
            iface = interface(a.address)
            if not iface.ip.is_link_local:
                out.setdefault(
                    iface.network, f"{iface.network}, the prefix of {self._name(a.ifindex)}"
                )
        for r in self.state.routes:
            if r.ifindex in self.primaries and r.gateway and r.protocol != KVDEV_PROTO:
                gw = ipaddress.ip_network(r.gateway)
                if not gw.is_link_local:  # reached with a scope: no other link captures it
                    out.setdefault(gw, f"{r.gateway}, the gateway of {self._name(r.ifindex)}")
        for server in guard.dns:
            ip = ipaddress.ip_address(server)
            if ip.is_link_local:  # reached with a scope: no other link captures it
                continue
            via = self._route_to(ip)
            if via is not None and via.ifindex in self.primaries:
                why = f"{server}, a DNS server the guest reaches through {self._name(via.ifindex)}"
                out.setdefault(ipaddress.ip_network(ip), why)
        for net in METADATA:
            out.setdefault(net, f"{net.network_address}, the cloud's metadata service")
        return list(out.items())

    def _route_to(self, ip: _IP) -> Route | None:
        """The route the guest takes to ``ip`` on its own, without what kvdev configured.

        The longest prefix, then the lowest metric, not counting the routes kvdev added nor the
        connected prefixes of links kvdev manages (the kernel's routes for their addresses).
        Counting them would let what kvdev applied earlier vouch for itself: a hint route
        applied before the lease brought a DNS server inside it would be where the guest
        "reaches" that server, and be kept.
        """
        best: tuple[int, int] | None = None
        found = None
        for r in self.state.routes:
            if r.protocol == KVDEV_PROTO or (
                r.ifindex in self.managed and r.protocol == RTPROT_KERNEL and r.gateway is None
            ):
                continue
            net = network(r.destination)
            if net.version == ip.version and ip in net:
                key = (net.prefixlen, -_metric(net.version, r.metric))
                if best is None or key > best:
                    best, found = key, r
        return found

    def _captures(self, w: Wanted, net: _NET, what: str) -> str | None:
        """Why ``net`` through ``w``'s link would capture the primary's traffic; None if not.

        What would not joins the union of what managed links reach.
        """
        v = net.version
        if net.prefixlen < SHORTEST[v]:
            theirs = [r for r in self.defaults if network(r.destination).version == v]
            default = (
                f"the default route {via(theirs[0], self.state)}"
                if theirs
                else ("any default route the guest gets")
            )
            return (
                f"{what} through {w.ifname} is shorter than /{SHORTEST[v]}: more specific than "
                f"a default route, it would take what {default} reaches"
            )
        first, last = _span(net)
        for version, start, end, label in self.protected:
            if version == v and start <= last and first <= end:
                return f"{what} through {w.ifname} would capture {label}"
        measured = self.reach.measure(v, first, last)
        if (grown := measured[0]) > 2 ** (net.max_prefixlen - UNION_PREFIX[v]):
            return (
                f"{what} through {w.ifname}: with the routes and prefixes through links kvdev "
                f"manages before it, it would reach {grown} addresses, more than a "
                f"/{UNION_PREFIX[v]}: together like a default route"
            )
        self.reach.add(v, first, last, measured)
        return None

    def _capture_ruling(self, w: Wanted, net: _NET, what: str) -> tuple[str | None, str | None]:
        """(refusal, warning) for what ``net`` would capture; what passes joins the union."""
        why = self._captures(w, net, what)
        if why is None:
            return None, None
        if w.primary:
            return None, f"{why}: allowed, its hint sets network.primary"
        return f"{why}; {_ALLOW}", None

    def address(self, w: Wanted, address: str) -> tuple[str | None, str | None]:
        """(refusal, warning) for one address."""
        if (refused := _address_refusal(address)) is not None:
            return refused, None
        iface = interface(address)
        ip = iface.ip
        if ip.is_link_local:
            return None, f"address {address} is link-local"
        others = sorted(self.held[ip] - {w.ifindex})
        if others:
            holder = self.state.link(others[0])
            name = holder.ifname if holder else str(others[0])
            return f"address {address}: {ip} is already on {name}", None
        rivals = [o for o in self.askers[ip] if o.ifindex != w.ifindex]
        if rivals and w.ifindex not in self.held[ip]:
            return f"address {address}: {ip} is also asked for by {rivals[0].device}", None
        return self._capture_ruling(
            w, iface.network, f"address {address} (its prefix {iface.network})"
        )

    def route(
        self, w: Wanted, route: tuple[str, str | None, int | None]
    ) -> tuple[str | None, str | None]:
        """(refusal, warning) for one route."""
        destination, gateway, metric = route
        if (refused := _route_refusal(destination, gateway)) is not None:
            return refused, None
        net = network(destination)
        if net.prefixlen == 0:
            return self._default(w, net.version, metric)
        refused, warned = self._capture_ruling(w, net, f"route {destination}")
        if refused is not None or warned is not None:
            return refused, warned
        if _within(net, _LINK_LOCAL):
            return None, f"route {destination} leads into link-local space through {w.ifname}"
        for r in self.foreign_routes:
            other = network(r.destination)
            if r.ifindex != w.ifindex and other.version == net.version and other.overlaps(net):
                return None, f"route {destination} overlaps {via(r, self.state)}"
        return None, None

    def _default(self, w: Wanted, family: int, metric: int | None) -> tuple[str | None, str | None]:
        mine = _metric(family, metric)
        theirs = [
            r
            for r in self.defaults
            if network(r.destination).version == family and r.ifindex != w.ifindex
        ]
        if not theirs:
            return None, f"a default route through {w.ifname}: the guest's only one"
        best = min(theirs, key=lambda r: _metric(family, r.metric))
        if mine <= (their := _metric(family, best.metric)):
            over = via(best, self.state)
            why = f"default route with metric {mine} would take over from {over} (metric {their})"
            if w.primary:
                return None, f"{why}: allowed, its hint sets network.primary"
            return f"{why}; {_ALLOW}", None
        return None, f"a default route through {w.ifname}, behind {via(best, self.state)}"


def judge(wanted: Sequence[Wanted], state: NetState, guard: Guard | None = None) -> list[Ruling]:
    """The policy's ruling on each wanted device, in order (see the module docstring)."""
    judging = _Judge(wanted, state, guard or Guard())
    out = []
    for w in wanted:
        refused: list[str] = []
        warnings: list[str] = []
        addresses = []
        for address in w.addresses:
            no, beware = judging.address(w, address)
            refused += [no] if no else []
            warnings += [beware] if beware else []
            addresses += [] if no else [address]
        routes = []
        refused_routes = []
        for route in w.routes:
            no, beware = judging.route(w, route)
            refused += [no] if no else []
            warnings += [beware] if beware else []
            routes += [] if no else [route]
            refused_routes += [(route, no)] if no else []
        out.append(
            Ruling(
                w.device,
                tuple(addresses),
                tuple(routes),
                tuple(refused),
                tuple(warnings),
                tuple(refused_routes),
            )
        )
    return out
