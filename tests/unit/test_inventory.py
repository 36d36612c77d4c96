"""inventory.merge: the udev scan and netlink's links combined by ifindex (plain values)."""

import pytest

from kvdev.guest.core.inventory import device_order, is_matchable, merge
from kvdev.guest.core.observed import GuestDevice, Link, Nic

MAC_A = "02:00:00:00:00:0a"
MAC_B = "02:00:00:00:00:0b"
PERM = "52:54:00:00:00:01"


def pci(address, *nics, **fields):
    return GuestDevice(
        pci_address=address,
        vendor_id="1af4",
        device_id="1041",
        class_id="020000",
        driver="virtio-pci",
        dev_nodes=("/dev/vfio/7",),
        nics=nics,
        **fields,
    )


def bare(ifindex, ifname, mac=None, **fields):
    return GuestDevice(pci_address=None, nics=(Nic(ifname, ifindex, mac, **fields),))


LO = Link(1, "lo", mac="00:00:00:00:00:00")
ETH0 = Link(2, "enp1s0", mac=MAC_A, permanent_mac=PERM, altnames=("enx020000000000a",))

CASES = {
    "nothing": ([], [], ()),
    "pci function without nics is kept": (
        [pci("0000:00:01.0")],
        [LO],
        (pci("0000:00:01.0"),),
    ),
    "nic takes name, macs and altnames from netlink": (
        [pci("0000:01:00.0", Nic("eth0", 2, MAC_B))],
        [LO, ETH0],
        (
            pci(
                "0000:01:00.0",
                Nic("enp1s0", 2, MAC_A, permanent_mac=PERM, altnames=("enx020000000000a",)),
            ),
        ),
    ),
    "netlink without a mac wins over sysfs": (
        [pci("0000:01:00.0", Nic("ib0", 2, MAC_A))],
        [Link(2, "ib0")],
        (pci("0000:01:00.0", Nic("ib0", 2)),),
    ),
    "nic netlink does not know is gone": (
        [pci("0000:01:00.0", Nic("eth0", 9, MAC_A))],
        [LO],
        (pci("0000:01:00.0"),),
    ),
    "pci nic of a software kind is still the function's": (
        [pci("0000:01:00.0", Nic("ib0", 2))],
        [Link(2, "ib0", kind="ipoib")],
        (pci("0000:01:00.0", Nic("ib0", 2)),),
    ),
    "nics of a function sorted by ifindex": (
        [pci("0000:01:00.0", Nic("b", 5), Nic("a", 3))],
        [Link(3, "a", mac=MAC_A), Link(5, "b", mac=MAC_B)],
        (pci("0000:01:00.0", Nic("a", 3, MAC_A), Nic("b", 5, MAC_B)),),
    ),
    "link no device carries becomes bare": (
        [],
        [LO, Link(7, "eth7", mac=MAC_B, permanent_mac=PERM)],
        (bare(7, "eth7", MAC_B, permanent_mac=PERM),),
    ),
    "scanned bare device is refreshed from netlink": (
        [bare(7, "eth0", MAC_A)],
        [Link(7, "eth7", mac=MAC_B, altnames=("x",))],
        (bare(7, "eth7", MAC_B, altnames=("x",)),),
    ),
    "scanned bare device netlink does not know is gone": (
        [bare(7, "eth7", MAC_A)],
        [LO],
        (),
    ),
    "software links and links without a mac are not bare devices": (
        [bare(3, "veth0", MAC_A)],
        [
            LO,
            Link(3, "veth0", mac=MAC_A, kind="veth"),
            Link(4, "br0", mac=MAC_A, kind="bridge"),
            Link(5, "enp1s0.100", mac=MAC_A, kind="vlan"),
            Link(6, "bond0", mac=MAC_A, kind="bond"),
            Link(8, "wg0", kind="wireguard"),
            Link(9, "tunl0", kind="ipip"),
            Link(10, "zero", mac="00:00:00:00:00:00"),
        ],
        (),
    ),
    "unknown kinds with a mac are matchable": (
        [],
        [Link(4, "mystery0", mac=MAC_A, kind="mystery")],
        (bare(4, "mystery0", MAC_A),),
    ),
    "link carried by a function is not also bare": (
        [pci("0000:01:00.0", Nic("eth0", 2))],
        [ETH0, Link(3, "eth1", mac=MAC_B)],
        (
            pci(
                "0000:01:00.0",
                Nic("enp1s0", 2, MAC_A, permanent_mac=PERM, altnames=("enx020000000000a",)),
            ),
            bare(3, "eth1", MAC_B),
        ),
    ),
    "order: functions by address numerically, then bare by ifindex": (
        [
            bare(9, "x9", MAC_A),
            pci("10000:00:00.0"),
            pci("0000:00:10.0"),
            pci("0000:00:02.0"),
            pci("0001:00:00.0"),
        ],
        [Link(12, "x12", mac=MAC_B), Link(9, "x9", mac=MAC_A)],
        (
            pci("0000:00:02.0"),
            pci("0000:00:10.0"),
            pci("0001:00:00.0"),
            pci("10000:00:00.0"),
            bare(9, "x9", MAC_A),
            bare(12, "x12", MAC_B),
        ),
    ),
}


@pytest.mark.parametrize(("devices", "links", "expected"), CASES.values(), ids=CASES.keys())
def test_merge(devices, links, expected):
    assert merge(devices, links) == expected


def test_merge_keeps_everything_but_nics_of_a_function():
    scanned = pci("0000:3b:00.2", Nic("eth0", 2), numa_node=1)
    (merged,) = merge([scanned], [ETH0])
    assert (merged.vendor_id, merged.device_id, merged.class_id) == ("1af4", "1041", "020000")
    assert (merged.driver, merged.numa_node, merged.dev_nodes) == (
        "virtio-pci",
        1,
        ("/dev/vfio/7",),
    )
    assert merged.key == "0000:3b:00.2"


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        (Link(2, "eth0", mac=MAC_A), True),
        (Link(2, "eth0", mac=MAC_A, kind="ipoib"), True),
        (Link(1, "lo", mac=MAC_A), False),
        (Link(2, "eth0"), False),
        (Link(2, "eth0", mac="00:00:00:00:00:00"), False),
        (Link(2, "macvtap0", mac=MAC_A, kind="macvtap"), False),
        (Link(2, "tap0", mac=MAC_A, kind="tun"), False),
    ],
)
def test_is_matchable(link, expected):
    assert is_matchable(link) is expected


def test_allowed_software_kinds_become_bare_devices():
    links = [LO, Link(3, "va", mac=MAC_A, kind="veth"), Link(4, "br0", mac=MAC_B, kind="bridge")]
    assert merge([], links, allow_kinds={"veth"}) == (bare(3, "va", MAC_A),)
    assert is_matchable(links[1], allow_kinds=("veth",))
    assert not is_matchable(LO, allow_kinds=("veth",))


def test_device_order_tolerates_an_unnormalized_address():
    devices = [pci("0000:00:01.0"), pci("weird")]
    assert min(devices, key=device_order).pci_address == "weird"
