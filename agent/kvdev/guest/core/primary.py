"""Pure: which NICs are the guest's own, decided from what will hold at boot, and kept stable.

The agent starts before NetworkManager, networkd, ifupdown or DHCP, so at first boot the
primary NIC has no default route yet. A NIC is the guest's own (``safety`` refuses to touch it,
like the NIC carrying a default route kvdev did not add) when:

* the guest's own network configuration names it, by MAC or by interface name (``Configured``,
  read by ``adapters.netconfig``: NetworkManager keyfiles, netplan, ifupdown, networkd
  ``.network`` files, cloud-init's network-config); a wildcard (``Name=en*``, a profile with no
  interface) names no NIC;
* the hints name it in ``protectedNICs`` (by MAC, guest PCI address or name: the
  controller lists the VMI's own interfaces that are not DRA devices, its pod network);
* it carries a default route kvdev did not add;
* an earlier decision recorded it (``Decision``, kept in the state directory by the caller).

NetworkManager without ``no-auto-default`` (``AutoDefault``) gives every ethernet NIC without a
profile a DHCP connection: at first boot, before its lease, it names the NICs it would connect
(those ``no-auto-default`` does not list) but not which of them is the way out. kvdev's mark
keeps NetworkManager off the NICs kvdev takes, so the guest keeps a way out as long as one of
those NICs stays NetworkManager's. When kvdev would take every one of them (``taken``: the
links bound to a described device) and nothing above names any NIC, the metadata would leave
the guest without its network: those NICs are ``held`` (not touched, not marked, not
recorded) until one carries a default route (or a profile or the hints name one): the lease
decides, and the NICs it did not land on are free again.

The decision only grows: a NIC once the guest's own stays so (by MAC, which a rename does not
change), so a default route that later appears on another NIC adds that NIC and never takes
the first one back silently; ``decide`` says what it added and why, for the log.

``protected`` answers "is this the primary NIC" for a pass, once: the links carrying a default
route kvdev did not add now, and the links the decision names (owned or held), each with why.
``safety`` (whose traffic no other link may capture) and ``planning`` (which links kvdev never
touches) only consume it.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kvdev._records import compared
from kvdev.guest.core.observed import KVDEV_PROTO, NetState, Route, network


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Configured:
    """One NIC the guest's network configuration names: its MAC and/or its interface name."""

    source: str  # the file (and section) that names it, to show people
    name: str | None = None
    mac: str | None = None
    pci: str | None = None  # a guest PCI address (the hints' protectedNICs)


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AutoDefault:
    """NetworkManager's auto-default: on, and the NICs ``no-auto-default`` leaves out."""

    on: bool
    macs: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Decision:
    """The guest's own NICs: MAC -> why (the reason shown for a refusal)."""

    owned: Mapping[str, str]
    held: Mapping[str, str] = field(default_factory=dict)  # this pass only, never recorded

    def reason(self, mac: str | None) -> str | None:
        """Why the NIC with ``mac`` is the guest's own (or held); None when it is not."""
        if not mac:
            return None
        return self.owned.get(mac.lower()) or self.held.get(mac.lower())


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Protected:
    """The links kvdev never touches, as the guest's primary NICs: ifindex -> why (for people)."""

    links: Mapping[int, str] = field(default_factory=dict)

    def why(self, ifindex: int) -> str | None:
        """Why the link ``ifindex`` is protected; None when it is not."""
        return self.links.get(ifindex)


def protected(state: NetState, decision: Decision | None = None) -> Protected:
    """The guest's primary NICs in ``state``: each with why (see the module docstring).

    A default route kvdev did not add gives the first reason; the decision's (the guest's own,
    or held) is the reason of a link without one.
    """
    out: dict[int, str] = {}
    for r in foreign_defaults(state.routes):
        link = state.link(r.ifindex)
        if link is not None and link.ifindex not in out:
            out[link.ifindex] = (
                f"{link.ifname} carries the default route {via(r, state)}, which kvdev did not "
                "add: kvdev does not configure the NIC the guest reaches its network through"
            )
    for link in state.links if decision is not None else ():
        own = decision.reason(link.mac) if decision is not None else None
        if own is not None and link.ifindex not in out:
            out[link.ifindex] = (
                f"{link.ifname} is the guest's own NIC: {own}; kvdev does not configure it"
            )
    return Protected(out)


def via(route: Route, state: NetState) -> str:
    """``route`` as people read it: ``DEST [via GW] dev NAME``."""
    link = state.link(route.ifindex)
    gateway = f" via {route.gateway}" if route.gateway else ""
    return f"{route.destination}{gateway} dev {link.ifname if link else route.ifindex}"


def _why_configured(c: Configured) -> str:
    by = f"MAC {c.mac}" if c.mac else f"PCI address {c.pci}" if c.pci else f"name {c.name}"
    if c.source.startswith("hints"):
        return f"the {c.source} name it, by {by}: the VM's own interface"
    return f"the guest's network configuration ({c.source}) sets it up, by {by}"


def decide(
    configured: Sequence[Configured],
    state: NetState,
    recorded: Decision,
    pci_macs: Mapping[str, str] | None = None,
    auto: AutoDefault | None = None,
    taken: Collection[int] = (),
) -> tuple[Decision, list[str]]:
    """The decision for this pass (``recorded`` and what holds now), and what it added, as text.

    A configured name counts for the link that has the name now; its MAC is what is kept.
    ``pci_macs``: guest PCI address -> the MAC of its NIC (for ``Configured.pci``). ``auto``:
    NetworkManager's auto-default, when NetworkManager is there; ``taken``: the ifindexes kvdev
    would configure.
    """
    owned = dict(recorded.owned)
    added: list[str] = []

    def own(mac: str | None, ifname: str, why: str) -> None:
        if mac and mac.lower() not in owned:
            owned[mac.lower()] = why
            added.append(f"{ifname} ({mac}): {why}")

    by_name = {lk.ifname: lk for lk in state.links}
    by_mac = {lk.mac: lk for lk in state.links if lk.mac}
    pci = {k.lower(): v.lower() for k, v in (pci_macs or {}).items()}
    for c in configured:
        for link in (
            by_mac.get(c.mac.lower()) if c.mac else None,
            by_mac.get(pci.get(c.pci.lower(), "")) if c.pci else None,
            by_name.get(c.name) if c.name else None,
        ):
            if link is not None:
                own(link.mac, link.ifname, _why_configured(c))
    for route in foreign_defaults(state.routes):
        link = state.link(route.ifindex)
        if link is not None:
            own(link.mac, link.ifname, "it carried the guest's default route when kvdev saw it")
    held: dict[str, str] = {}
    if auto is not None and auto.on and not owned:
        would = [  # what NetworkManager would connect: ethernet NICs, and those kvdev takes
            lk
            for lk in state.links
            if lk.mac
            and lk.ifname != "lo"
            and lk.master is None
            and (lk.kind is None or lk.ifindex in taken)
            and lk.mac.lower() not in auto.macs
            and lk.ifname not in auto.names
        ]
        if would and all(lk.ifindex in taken for lk in would):
            why = (
                "NetworkManager's auto-default would connect it, kvdev would take every NIC it "
                "would connect and nothing names the guest's own NIC yet: kvdev waits for the "
                "first DHCP lease (or protectedNICs in the hints)"
            )
            held = {lk.mac.lower(): why for lk in would if lk.mac}
    return Decision(owned, held), added


def foreign_defaults(routes: Iterable[Route]) -> list[Route]:
    """The default routes kvdev did not add."""
    return [
        r for r in routes if r.protocol != KVDEV_PROTO and network(r.destination).prefixlen == 0
    ]
