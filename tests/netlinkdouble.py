"""The netlink double: an in-memory ``NetlinkPort``, so the reconcile pass is tested without root.

Test-only: it lives under tests/, outside the package (the pure core's unit tests use it).

``MemoryNetlink`` is a ``NetlinkPort`` over a ``NetState`` held in memory: ``apply`` changes it
the way the kernel would (renaming an up link is EBUSY, a name taken is EEXIST, an MTU out of
the driver's bounds and removing another link's altname are EINVAL, a link going down loses its
IPv6 addresses and its routes, adding what is there and removing what is gone succeed) and
records every step it was given.
``read_state`` returns the state as a snapshot, counting reads; ``fail_reads`` makes the next
reads raise ``RetryableError`` (an interrupted dump), ``fault`` answers chosen steps with a
result of the test's choosing. ``add_link`` / ``remove_link`` play hot-plug.

It is a model of the kernel's rules kvdev relies on, not of the kernel: no namespaces,
families of routes or scopes, and an address is only its text. Pure: it does no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvdev.errors import RetryableError
from kvdev.guest.core import steps as st
from kvdev.guest.core.observed import Address, Link, NetState, Route

Fault = Callable[[st.Step], st.StepResult | None]


@dataclass
class MemoryNetlink:
    """A ``NetlinkPort`` whose kernel is a ``NetState`` in memory."""

    state: NetState = field(default_factory=NetState)
    fault: Fault | None = None  # a result for a step, instead of applying it (None: apply)
    fail_reads: int = 0  # this many next reads raise RetryableError
    reads: int = 0
    applied: list[st.Step] = field(default_factory=list)
    ifa_proto: bool = True  # False: a kernel before 5.18, which forgets an address's protocol

    def read_state(self) -> NetState:
        """The state now (a snapshot: later changes do not show in it)."""
        self.reads += 1
        if self.fail_reads > 0:
            self.fail_reads -= 1
            raise RetryableError("reading rtnetlink state failed: dump interrupted (memory)")
        return self.state

    def apply(self, steps: Sequence[st.Step]) -> list[st.StepResult]:
        """Apply each step in order; one result per step, whatever happened to the others."""
        results = []
        for step in steps:
            self.applied.append(step)
            forced = self.fault(step) if self.fault is not None else None
            results.append(forced if forced is not None else self._apply(step))
        return results

    def add_link(self, link: Link) -> None:
        """A link appears (hot-plug)."""
        self.state = dataclasses.replace(self.state, links=(*self.state.links, link))

    def remove_link(self, ifindex: int) -> None:
        """A link goes, with its addresses and routes (hot-unplug)."""
        s = self.state
        self.state = NetState(
            tuple(lk for lk in s.links if lk.ifindex != ifindex),
            tuple(a for a in s.addresses if a.ifindex != ifindex),
            tuple(r for r in s.routes if r.ifindex != ifindex),
        )

    def _apply(self, step: st.Step) -> st.StepResult:  # noqa: C901, PLR0911, PLR0912 - one branch per step
        lk = self.state.link(step.ifindex)
        if isinstance(step, st.WriteLinkFile | st.RemoveLinkFile):
            return _failed(step, "not a netlink step")
        if lk is None:
            return _failed(step, "No such device (errno 19)", retryable=True)
        s = self.state
        addresses, routes = list(s.addresses), list(s.routes)
        match step:
            case st.AddAltname(altname=name):
                if name in lk.altnames:
                    return _done(step)
                if self._taken(name, step.ifindex):
                    return _failed(step, f"add altname {name}: File exists (errno 17)")
                lk = dataclasses.replace(lk, altnames=(*lk.altnames, name))
            case st.RemoveAltname(altname=name):
                if name not in lk.altnames:
                    if self._taken(name, step.ifindex) or name == lk.ifname:
                        return _failed(step, f"remove altname {name}: Invalid argument (errno 22)")
                    return _done(step)  # gone already
                lk = dataclasses.replace(lk, altnames=tuple(a for a in lk.altnames if a != name))
            case st.SetDown():
                lk = dataclasses.replace(lk, up=False, oper_state="down")
                addresses = [a for a in addresses if a.ifindex != lk.ifindex or "." in a.address]
                routes = [r for r in routes if r.ifindex != lk.ifindex]
            case st.SetUp():
                lk = dataclasses.replace(lk, up=True, oper_state="up")
            case st.Rename(new_name=new):
                if lk.up:
                    return _failed(step, f"rename {lk.ifname}: busy (errno 16)", retryable=True)
                if self._taken(new, step.ifindex) or new in lk.altnames:
                    return _failed(step, f"rename {lk.ifname} to {new}: File exists (errno 17)")
                lk = dataclasses.replace(lk, ifname=new)
            case st.SetMtu(mtu=mtu):
                low, high = lk.min_mtu or 68, lk.max_mtu or 65535
                if not low <= mtu <= high:
                    return _failed(step, f"set mtu {mtu}: Invalid argument (errno 22)")
                lk = dataclasses.replace(lk, mtu=mtu)
            case st.AddAddress(address=address, protocol=proto):
                if all((a.ifindex, a.address) != (lk.ifindex, address) for a in addresses):
                    kept = proto if self.ifa_proto else None
                    addresses.append(Address(lk.ifindex, address, kept))
            case st.RemoveAddress(address=address):
                gone = (lk.ifindex, address)
                addresses = [a for a in addresses if (a.ifindex, a.address) != gone]
            case st.AddRoute(destination=dst, gateway=gw, metric=metric, protocol=proto):
                if all(_route_key(r) != (lk.ifindex, dst, gw) for r in routes):
                    routes.append(Route(lk.ifindex, dst, gw, metric, proto))
            case st.RemoveRoute(destination=dst, gateway=gw):
                routes = [r for r in routes if _route_key(r) != (lk.ifindex, dst, gw)]
            case _:
                return _failed(step, "not a netlink step")
        links = tuple(lk if o.ifindex == lk.ifindex else o for o in s.links)
        self.state = NetState(links, tuple(addresses), tuple(routes))
        return _done(step)

    def _taken(self, name: str, ifindex: int) -> bool:
        return any(
            o.ifindex != ifindex and (o.ifname == name or name in o.altnames)
            for o in self.state.links
        )


def _route_key(r: Route) -> tuple[int, str, str | None]:
    return (r.ifindex, r.destination, r.gateway)


def _done(step: st.Step) -> st.StepResult:
    return st.StepResult(step=step, ok=True)


def _failed(step: st.Step, error: str, *, retryable: bool = False) -> st.StepResult:
    return st.StepResult(step=step, ok=False, error=error, retryable=retryable)
