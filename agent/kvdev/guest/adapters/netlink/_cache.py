"""The event-fed cache: links, addresses and routes kept from one dump and the events after it.

``Cache.feed`` takes any rtnetlink message (a dump's reply or an event) and updates the one
value it is about; ``state`` returns a ``NetState``, rebuilt only when something changed. A
message is applied whole (RTM_NEWLINK carries the full link, RTM_NEWADDR the full address), so
feeding the events that queued up while a dump ran, after it, ends in the kernel's state.

What the kernel changes without an event is covered here: a link that is deleted takes its
addresses and routes with it; a link set down, or an IPv4 address removed, flushes IPv4 routes
without RTM_DELROUTE (fib_sync_down_dev / fib_flush), so those mark the IPv4 routes stale
(``routes_stale``: the owner re-dumps IPv4 routes only). Messages of another family (the
bridge's AF_BRIDGE port notifications on the same group) are not links and are ignored.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from kvdev.guest.adapters.netlink._reading import (
    AddressKey,
    RouteKey,
    decode_address,
    decode_link,
    decode_route,
    link_index,
)
from kvdev.guest.adapters.netlink._rtnl import (
    NLM_F_REPLACE,
    RTM_DELADDR,
    RTM_DELLINK,
    RTM_DELROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
)
from kvdev.guest.core.observed import Address, Link, NetState, Route


class Cache:
    """Links, addresses and routes as the messages fed so far say they are."""

    def __init__(self) -> None:
        self.links: dict[int, Link] = {}
        self.addresses: dict[AddressKey, Address] = {}
        self.routes: dict[RouteKey, Route] = {}
        self.valid = False  # a full dump has been fed and no event was lost since
        self.routes_stale = False  # IPv4 routes may have gone without an event
        self.changes = 0  # messages that changed something, since the cache was made
        self._state: NetState | None = None

    def clear(self) -> None:
        """Forget everything (before a full dump)."""
        self.links.clear()
        self.addresses.clear()
        self.routes.clear()
        self.valid = self.routes_stale = False
        self._state = None

    def clear_ipv4_routes(self) -> None:
        """Forget the IPv4 routes (before a dump of them)."""
        self.routes = {k: r for k, r in self.routes.items() if k[0] != socket.AF_INET}
        self.routes_stale = False
        self._state = None

    def feed(self, kind: int, flags: int, body: memoryview) -> None:
        """Apply one message; what the agent does not represent is ignored."""
        if kind in {RTM_NEWLINK, RTM_DELLINK}:
            self._link(kind, body)
        elif kind in {RTM_NEWADDR, RTM_DELADDR}:
            self._address(kind, body)
        elif kind in {RTM_NEWROUTE, RTM_DELROUTE}:
            self._route(kind, flags, body)

    def _changed(self) -> None:
        self._state = None
        self.changes += 1

    def _link(self, kind: int, body: memoryview) -> None:
        found = link_index(body)
        if found is None or found[0] != socket.AF_UNSPEC:
            return
        ifindex = found[1]
        if kind == RTM_DELLINK:
            if self.links.pop(ifindex, None) is not None:
                self._drop(ifindex)
            return
        link = decode_link(body)
        if link is None:
            return
        old = self.links.get(ifindex)
        if old == link:
            return
        if old is not None and old.up and not link.up:
            self.routes_stale = True
        self.links[ifindex] = link
        self._changed()

    def _drop(self, ifindex: int) -> None:
        """What a deleted link took with it."""
        self.addresses = {k: a for k, a in self.addresses.items() if k[0] != ifindex}
        self.routes = {k: r for k, r in self.routes.items() if k[3] != ifindex}
        self._changed()

    def _address(self, kind: int, body: memoryview) -> None:
        found = decode_address(body)
        if found is None:
            return
        key, address = found
        if kind == RTM_DELADDR:
            if self.addresses.pop(key, None) is not None:
                self._changed()
            if ":" not in address.address:
                self.routes_stale = True
        elif self.addresses.get(key) != address:
            self.addresses[key] = address
            self._changed()

    def _route(self, kind: int, flags: int, body: memoryview) -> None:
        found = decode_route(body)
        if found is None:
            return
        key, route = found
        if kind == RTM_DELROUTE:
            if self.routes.pop(key, None) is not None:
                self._changed()
            return
        if flags & NLM_F_REPLACE:  # it took the place of the route with its dst and metric
            self.routes = {k: r for k, r in self.routes.items() if k[:3] != key[:3]}
        self.routes[key] = route
        self._changed()

    def state(self) -> NetState:
        """The links (by ifindex), addresses and routes as one ``NetState``."""
        if self._state is None:
            links: Iterable[Link] = sorted(self.links.values(), key=lambda lk: lk.ifindex)
            self._state = NetState(
                tuple(links), tuple(self.addresses.values()), tuple(self.routes.values())
            )
        return self._state
