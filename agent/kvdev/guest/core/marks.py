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
  is marked by udev's own "add" event, before any other manager sees it, unless a present link
  has that MAC or address (it is not kvdev's, or it would be bound).

Never marked: a link no device describes, one whose binding is ambiguous or invalid, and the
primary NIC the safety policy refuses (no ``Desired``): those stay their managers'.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    present_macs = {lk.mac for lk in state.links if lk.mac} | {
        lk.permanent_mac for lk in state.links if lk.permanent_mac
    }
    present_pci: set[str] = set()
    for b in matching.bindings:
        if b.guest is not None and b.guest.pci_address:
            present_pci.add(b.guest.pci_address)
    for g in matching.unmanaged:
        if g.pci_address:
            present_pci.add(g.pci_address)
    for b in matching.bindings:
        if b.state is MatchState.BOUND:
            out.update(_bound(b, ours, state))
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
