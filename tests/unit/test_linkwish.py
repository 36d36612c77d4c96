"""core.linkwish: the wish format both sides agree on, the fixed .link form, the mark decision."""

import re

import pytest

from kvdev.guest.core import linkwish
from kvdev.guest.core.linkwish import NetLink, Wish


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("mac", "52:54:00:00:00:10"),
        ("permanent-mac", "02:00:00:3b:02:01"),
        ("pci", "0000:07:00.0"),
        ("pci", "10000:00:1f.7"),  # VMD domains are wider
        ("mac", ":".join(["a0"] * 20)),  # InfiniBand
    ],
)
def test_what_the_agent_writes_the_helper_reads(kind, value):
    text = linkwish.wish_text(kind, value)
    assert linkwish.parse_wish("data0", text.encode()) == Wish("data0", kind, value)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("data=1", b"mac 52:54:00:00:00:10\n", "forbidden characters ['=']"),
        ("a b", b"mac 52:54:00:00:00:10\n", "forbidden characters"),
        ("..", b"mac 52:54:00:00:00:10\n", "reserved"),
        ("d0", b"mac 52:54:00:00:00:10\nProperty=X=1\n", "not one line"),
        ("d0", b"mac 52:54:00:00:00:10 Property=X=1\n", "not a canonical MAC"),
        ("d0", b"pci 0000:07:00.0\x00\n", "not a canonical PCI"),
        ("d0", b"Name=x\n", "not '<kind> <value>'"),
        ("d0", b"\xff\n", "not ASCII"),
        ("d0", b"mac " + b"0" * 100 + b"\n", "more than 64 bytes"),
    ],
)
def test_the_helper_refuses_without_repeating_the_content(name, data, message):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        linkwish.parse_wish(name, data)
    assert "Property" not in str(e.value)


def test_an_agent_side_wish_the_helper_would_refuse_is_never_written():
    with pytest.raises(ValueError, match="canonical MAC"):
        linkwish.wish_text("mac", "52:54:00:00:00:1A")


def test_the_rendered_form_has_one_match_key_and_the_name():
    text = linkwish.render_link(Wish("d0", "pci", "0000:07:00.0"), "/w/d0.wish")
    assert text.splitlines()[1:] == ["[Match]", "Path=pci-0000:07:00.0", "", "[Link]", "Name=d0"]
    mac = linkwish.render_link(Wish("d0", "mac", "52:54:00:00:00:10"), "/w/d0.wish")
    assert "MACAddress=52:54:00:00:00:10\nPath=?*\n" in mac  # only a link with hardware


def test_export_db_is_read_for_net_devices_only():
    db = (
        "P: /devices/pci0000:00/0000:00:03.0/virtio0/net/ens3\nE: SUBSYSTEM=net\n"
        "E: INTERFACE=ens3\nE: ID_PATH=pci-0000:00:03.0\nE: KVDEV_MANAGED=1\n\n"
        "P: /devices/pci0000:00/0000:00:03.0\nE: SUBSYSTEM=pci\nE: INTERFACE=nope\n\n"
        "P: /devices/virtual/net/br0\nE: SUBSYSTEM=net\nE: DEVTYPE=bridge\n"
    )
    props = linkwish.parse_export_db(db)
    assert sorted(props) == ["br0", "ens3"]
    assert props["ens3"]["ID_PATH"] == "pci-0000:00:03.0"


def test_a_link_without_hardware_is_never_marked_whatever_it_carries():
    mac = "52:54:00:00:00:10"
    marks = {f"mac-{mac}": True, "pci-0000:00:03.0": True}
    files = frozenset({"/run/systemd/network/10-kvdev-d0.link"})
    props = {"ID_PATH": "pci-0000:00:03.0", "ID_NET_LINK_FILE": next(iter(files))}
    assert linkwish.marked(NetLink("ens3", mac, hardware=True, props=props), marks, files)
    assert not linkwish.marked(NetLink("br0", mac, hardware=False, props=props), marks, files)
    assert linkwish.mark_keys(NetLink("br0", mac, hardware=False, props=props)) == []
