"""Pure: which NICs are the guest's own, decided from what will hold at boot, and kept stable.

The agent starts before NetworkManager, networkd, ifupdown or DHCP, so at first boot the
primary NIC has no default route yet. A NIC is the guest's own (``safety`` refuses to touch it,
like the NIC carrying a default route kvdev did not add) when:

* the guest's own network configuration names it, by MAC or by interface name (``Configured``,
  read by ``adapters.netconfig``: NetworkManager keyfiles, netplan, ifupdown, networkd
  ``.network`` files, cloud-init's network-config); a wildcard (``Name=en*``, a profile with no
  interface) names no NIC;
* it carries a default route kvdev did not add;
* an earlier decision recorded it (``Decision``, kept in the state directory by the caller).

The decision only grows: a NIC once the guest's own stays so (by MAC, which a rename does not
change), so a default route that later appears on another NIC adds that NIC and never takes
the first one back silently; ``decide`` says what it added and why, for the log.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kvdev.guest.core.observed import KVDEV_PROTO, NetState, Route, network


@dataclass(frozen=True, slots=True)
class Configured:
    """One NIC the guest's network configuration names: its MAC and/or its interface name."""

    source: str  # the file (and section) that names it, to show people
    name: str | None = None
    mac: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The guest's own NICs: MAC -> why (the reason shown for a refusal)."""

    owned: Mapping[str, str]

    def reason(self, mac: str | None) -> str | None:
        """Why the NIC with ``mac`` is the guest's own; None when it is not."""
        return self.owned.get(mac.lower()) if mac else None


def _why_configured(c: Configured) -> str:
    by = f"MAC {c.mac}" if c.mac else f"name {c.name}"
    return f"the guest's network configuration ({c.source}) sets it up, by {by}"


def decide(
    configured: Sequence[Configured], state: NetState, recorded: Decision
) -> tuple[Decision, list[str]]:
    """The decision for this pass (``recorded`` and what holds now), and what it added, as text.

    A configured name counts for the link that has the name now; its MAC is what is kept.
    """
    owned = dict(recorded.owned)
    added: list[str] = []

    def own(mac: str | None, ifname: str, why: str) -> None:
        if mac and mac.lower() not in owned:
            owned[mac.lower()] = why
            added.append(f"{ifname} ({mac}): {why}")

    by_name = {lk.ifname: lk for lk in state.links}
    by_mac = {lk.mac: lk for lk in state.links if lk.mac}
    for c in configured:
        link = by_mac.get(c.mac.lower()) if c.mac else by_name.get(c.name or "")
        if link is not None:
            own(link.mac, link.ifname, _why_configured(c))
    for route in _foreign_defaults(state.routes):
        link = state.link(route)
        if link is not None:
            own(link.mac, link.ifname, "it carried the guest's default route when kvdev saw it")
    return Decision(owned), added


def _foreign_defaults(routes: Iterable[Route]) -> list[int]:
    """The ifindexes carrying a default route kvdev did not add."""
    return [
        r.ifindex
        for r in routes
        if r.protocol != KVDEV_PROTO and network(r.destination).prefixlen == 0
    ]
