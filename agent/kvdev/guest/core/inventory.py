"""Pure: one inventory of guest devices from the udev scan and netlink's view of the links.

``merge(devices, links)`` combines the two observations by ifindex:

1. **PCI functions** come from the scan and are all kept, with or without interfaces.
2. **Their NICs** are looked up in netlink by ifindex. Found: the NIC takes ifname, MAC,
   permanent MAC and altnames from the link, because netlink is fresher than the sysfs the scan
   read (a rename or MAC change since) and alone reports the permanent MAC and altnames.
   Not found: the link is gone, and the NIC is dropped.
3. **Every other link** netlink knows (whether the scan saw it as a bare device or not) becomes
   a bare ``GuestDevice`` (``pci_address=None``) when it is matchable. A bare device of the scan
   that netlink does not know is gone and is dropped.
4. **Matchable** (``is_matchable``): not ``lo``, with a MAC that is not all zeros, and of a kind
   not in ``SOFTWARE_KINDS``. Those kinds are software links made inside the guest, never a
   device the VM was given; several copy the MAC of the NIC they sit on (vlan, macvlan,
   ipvlan, macsec, bond, team, bridge), so offering them to MAC matching would make the real
   NIC ambiguous. ``allow_kinds`` lifts the ban for chosen kinds (veth pairs standing in for
   NICs in tests and demos). The NICs of a PCI function are kept whatever their kind (IPoIB
   reports ``ipoib``): the function is the device.
5. **Order**: PCI functions by address (numerically), then bare devices by ifindex; NICs of a
   function by ifindex.

A link whose PCI function the scan has not seen yet (it appeared after the scan) shows up as
a bare device until the next scan places it; its uevent triggers that scan.

Both inputs must come from the same network namespace: ifindexes are per namespace.
No I/O here: all inputs are values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from kvdev.guest.core.observed import GuestDevice, Link, Nic

LOOPBACK = "lo"

# IFLA_INFO_KIND values of links that software creates inside the guest.
SOFTWARE_KINDS = frozenset(
    {
        # built on another link, often with its MAC
        "vlan",
        "macvlan",
        "macvtap",
        "ipvlan",
        "ipvtap",
        "macsec",
        # aggregate other links and take a port's MAC
        "bond",
        "team",
        "bridge",
        "openvswitch",
        # pure software endpoints and tunnels with made-up MACs
        "veth",
        "netkit",
        "tun",
        "dummy",
        "ifb",
        "vrf",
        "vxlan",
        "geneve",
        "gretap",
        "ip6gretap",
    }
)


def is_matchable(link: Link, allow_kinds: Collection[str] = ()) -> bool:
    """Whether a link without a PCI function may stand for a device the VM was given.

    ``allow_kinds`` lifts the ban on some ``SOFTWARE_KINDS`` (e.g. ``veth`` pairs standing in
    for NICs in tests and demos).
    """
    if link.ifname == LOOPBACK:
        return False
    if link.kind in SOFTWARE_KINDS and link.kind not in allow_kinds:
        return False
    return link.mac is not None and link.mac.strip("0:") != ""


def device_order(device: GuestDevice) -> tuple[int, tuple[int, ...], str]:
    """Sort key: PCI functions by address, numerically (wide domains too), then by ifindex."""
    if device.pci_address:
        address = device.pci_address
        numbers: tuple[int, ...] = ()
        try:
            domain, bus, rest = address.split(":")
            slot, function = rest.split(".")
            numbers = (int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16))
        except ValueError:
            pass  # not normalized: sorts first, by text
        return (0, numbers, address)
    return (1, tuple(nic.ifindex for nic in device.nics), "")


def _from_link(link: Link) -> Nic:
    return Nic(
        ifname=link.ifname,
        ifindex=link.ifindex,
        mac=link.mac,
        permanent_mac=link.permanent_mac,
        altnames=link.altnames,
    )


def _with_nics(device: GuestDevice, nics: tuple[Nic, ...]) -> GuestDevice:
    return dataclasses.replace(device, nics=nics)


def merge(
    devices: Sequence[GuestDevice],
    links: Sequence[Link],
    *,
    allow_kinds: Collection[str] = (),
) -> tuple[GuestDevice, ...]:
    """The scan's devices with netlink's view of their links, plus the links no function has.

    See the module docstring for the rules; ``allow_kinds`` is passed to ``is_matchable``.
    """
    by_index = {link.ifindex: link for link in links}
    carried: set[int] = set()
    functions: list[GuestDevice] = []
    for device in devices:
        if device.pci_address is None:
            continue
        known = sorted(
            (by_index[nic.ifindex] for nic in device.nics if nic.ifindex in by_index),
            key=lambda link: link.ifindex,
        )
        carried.update(link.ifindex for link in known)
        functions.append(_with_nics(device, tuple(_from_link(link) for link in known)))
    bare = [
        GuestDevice(pci_address=None, nics=(_from_link(link),))
        for link in sorted(by_index.values(), key=lambda link: link.ifindex)
        if link.ifindex not in carried and is_matchable(link, allow_kinds)
    ]
    functions.sort(key=device_order)
    return (*functions, *bare)
