"""Pure: which links carry kvdev's mark, the sign other network managers read as "not yours".

A mark is a name, ``mac-<mac>`` or ``pci-<dddd:bb:dd.f>``; the agent keeps one empty file per
mark in ``<state-dir>/marks`` and udev's ``81-kvdev.rules`` tests for the file that names a
link's MAC (``$attr{address}``) or its PCI path (``$env{ID_PATH}``) on every event, and then
sets ``KVDEV_MANAGED=1``, ``NM_UNMANAGED=1`` and ``ID_NET_MANAGED_BY=io.kvdev.agent``.

What is marked:

* every link kvdev configures (a ``Desired`` of the plan), renamed or not: by its MAC, and by
  its PCI address when the PCI function has this one link (a multi-port function's ports
  share one ``ID_PATH``, so they are marked by MAC only);
* a described device that is ``Missing`` (not yet plugged in), by what would bind it -- the
  hints' pinned PCI address, the hints' MAC, or the metadata's MAC -- so that a hot-plugged NIC
  is marked by udev's own "add" event, before any other manager sees it, unless a guest device
  the agent sees has that MAC or address (it is not kvdev's, or it would be bound);
* a device bound to a guest device whose link is not there yet (a hot-plugged NIC while udev
  still names it, or is still renaming it): by the same keys, so that its mark never goes away
  in between.

Never marked: a link no device describes, one whose binding is ambiguous or invalid, and the
primary NIC the safety policy refuses (no ``Desired``): those stay their managers'.

A mark is a request, and NetworkManager 1.58 lets a person overrule it for good: a managed
state set with ``nmcli device set IF managed --permanent yes`` beats ``NM_UNMANAGED``, across
reboots, and then NetworkManager and kvdev both configure the link. ``nm_overrides`` says so
for each link kvdev configures that NetworkManager manages (its runtime device state, read by
``adapters.netconfig.nm_managed``), with the command that undoes it.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from kvdev.guest.core.matching import Binding, Matching, MatchState
from kvdev.guest.core.observed import NetState

MAC_PREFIX, PCI_PREFIX = "mac-", "pci-"


def mac_mark(mac: str) -> str:
    """The mark of a link with this link-layer address (udev's ``$attr{address}``)."""
    return f"{MAC_PREFIX}{mac.lower()}"


def pci_mark(address: str) -> str:
    """The mark of the link of this PCI function (udev's ``ID_PATH`` of a PCI NIC)."""
    return f"{PCI_PREFIX}{address.lower()}"


def wanted(matching: Matching, configured: Iterable[int], state: NetState) -> frozenset[str]:
    """The marks that should exist: ``configured`` are the ifindexes kvdev configures."""
    ours = set(configured)
    out: set[str] = set()
    # What the agent sees of the guest (udev and netlink merged): a link the kernel has but udev
    # has not finished with is not in it yet, and must not count as "someone else's".
    seen = [b.guest for b in matching.bindings if b.guest is not None] + list(matching.unmanaged)
    present_pci = {g.pci_address for g in seen if g.pci_address}
    present_macs = {m for g in seen for n in g.nics for m in (n.mac, n.permanent_mac) if m}
    for b in matching.bindings:
        nic = b.nic if b.state is MatchState.BOUND else None
        if nic is not None and state.link(nic.ifindex) is not None:
            out.update(_bound(b, ours, state))  # configured, or refused (the primary NIC)
        elif b.state is MatchState.BOUND:
            out.update(_awaited(b, set(), set()))  # its link is on its way
        elif b.state is MatchState.MISSING:
            out.update(_awaited(b, present_macs, present_pci))
    return frozenset(out)


def _bound(b: Binding, ours: set[int], state: NetState) -> list[str]:
    nic = b.nic
    if nic is None or nic.ifindex not in ours:
        return []
    link = state.link(nic.ifindex)
    out = [mac_mark(link.mac)] if link is not None and link.mac else []
    if b.guest is not None and b.guest.pci_address:
        out.append(pci_mark(b.guest.pci_address))
    return out


def _awaited(b: Binding, present_macs: set[str], present_pci: set[str]) -> list[str]:
    pin = b.hint.guest.pci_address if b.hint is not None and b.hint.guest is not None else None
    hinted = b.hint.guest.mac_address if b.hint is not None and b.hint.guest is not None else None
    out = []
    if pin and pin not in present_pci:
        out.append(pci_mark(pin))
    out.extend(mac_mark(m) for m in (hinted, b.device.mac) if m and m not in present_macs)
    return out


def nm_overrides(
    configured: Iterable[tuple[int, str]], managed: Collection[int]
) -> list[tuple[str, str]]:
    """(name, why and how to undo it) per link kvdev configures that NetworkManager manages.

    ``configured``: (ifindex, name) of the links kvdev configures; ``managed``: the ifindexes
    NetworkManager says it manages.
    """
    return [
        (
            name,
            (
                f"NetworkManager manages {name}, which kvdev configures: its managed state (set "
                f"with 'nmcli device set {name} managed --permanent yes') beats kvdev's "
                f"NM_UNMANAGED mark and both configure the link; undo it with "
                f"'nmcli device set {name} managed --permanent reset'"
            ),
        )
        for ifindex, name in sorted(configured)
        if ifindex in managed
    ]
