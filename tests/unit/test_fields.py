import re

import pytest

from kvdev.schema import fields

SUBDOMAIN_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])


def _rejects(check, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check(value)


# --------------------------------------------------------------------------- DNS names


@pytest.mark.parametrize("value", ["a", "0", "a-b", "abc-123", "1a", "a" * 63])
def test_dns_label_accepts(value):
    assert fields.check_dns_label(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must not be empty"),
        ("a" * 64, "must be at most 63 characters, got 64"),
        ("Abc", "'Abc' is not a DNS label"),
        ("-abc", "'-abc' is not a DNS label"),
        ("abc-", "'abc-' is not a DNS label"),
        ("a.b", "'a.b' is not a DNS label"),
        ("a_b", "'a_b' is not a DNS label"),
        ("a b", "'a b' is not a DNS label"),
    ],
)
def test_dns_label_rejects(value, message):
    _rejects(fields.check_dns_label, value, message)


@pytest.mark.parametrize("value", ["a", "a.b", "example.com", "a-1.b-2.c", SUBDOMAIN_253, "a" * 64])
def test_dns_subdomain_accepts(value):
    # Like Kubernetes' IsDNS1123Subdomain, only the total length is bounded.
    assert fields.check_dns_subdomain(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must not be empty"),
        (SUBDOMAIN_253 + "d", "must be at most 253 characters, got 254"),
        ("a..b", "is not a DNS subdomain"),
        (".a", "is not a DNS subdomain"),
        ("a.", "is not a DNS subdomain"),
        ("Example.com", "is not a DNS subdomain"),
        ("a.-b", "is not a DNS subdomain"),
        ("a/b", "is not a DNS subdomain"),
    ],
)
def test_dns_subdomain_rejects(value, message):
    _rejects(fields.check_dns_subdomain, value, message)


def test_dns_subdomain_custom_limit():
    assert fields.check_dns_subdomain("a" * 10, 10) == "a" * 10
    _rejects(lambda v: fields.check_dns_subdomain(v, 10), "a" * 11, "at most 10 characters, got 11")


@pytest.mark.parametrize(
    ("value", "ok"),
    [("dra.net", True), ("a" * 63, True), ("a" * 64, False), ("Dra.net", False), ("", False)],
)
def test_driver_name(value, ok):
    if ok:
        assert fields.check_driver_name(value) == value
    else:
        with pytest.raises(ValueError):  # noqa: PT011 - the table only says "rejected"
            fields.check_driver_name(value)


@pytest.mark.parametrize(
    "value", ["pool-a", "node-a/pool-1", "a.b/c.d/e", "x" * 253, "a" * 126 + "/" + "b" * 126]
)
def test_pool_name_accepts(value):
    assert fields.check_pool_name(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must not be empty"),
        ("x" * 254, "must be at most 253 characters, got 254"),
        ("a//b", "pool name segment '': must not be empty"),
        ("/a", "pool name segment '': must not be empty"),
        ("a/", "pool name segment '': must not be empty"),
        ("node-a/Pool", "pool name segment 'Pool'"),
    ],
)
def test_pool_name_rejects(value, message):
    _rejects(fields.check_pool_name, value, message)


@pytest.mark.parametrize("value", ["a", "a/b", "nic/sriov", "a" * 63 + "/" + "b" * 63])
def test_request_name_accepts(value):
    assert fields.check_request_name(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a/b/c", "'a/b/c' has more than one '/'"),
        ("", "must not be empty"),
        ("a/", "must not be empty"),
        ("/b", "must not be empty"),
        ("Nic", "is not a DNS label"),
        ("nic/Sub", "is not a DNS label"),
        ("a.b", "is not a DNS label"),
        ("a" * 64, "at most 63 characters, got 64"),
    ],
)
def test_request_name_rejects(value, message):
    _rejects(fields.check_request_name, value, message)


@pytest.mark.parametrize(("value", "base"), [("nic", "nic"), ("nic/sriov", "nic")])
def test_base_request(value, base):
    assert fields.base_request(value) == base


@pytest.mark.parametrize(
    "value",
    [
        "model",
        "_x",
        "X9_y",
        "x" * 32,
        "dra.net/pciAddress",
        "resource.kubernetes.io/pciBusID",
        "a" * 63 + "/x",
    ],
)
def test_qualified_name_accepts(value):
    assert fields.check_qualified_name(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * 33, f"name {'x' * 33!r} must be at most 32 characters, got 33"),
        ("a" * 64 + "/x", "domain of"),
        ("a" * 64 + "/x", "must be at most 63 characters, got 64"),
        ("1abc", "name '1abc' is not a C identifier"),
        ("a-b", "is not a C identifier"),
        ("dra.net/a.b", "is not a C identifier"),
        ("example.com/", "'example.com/' has an empty name after the domain"),
        ("", "has an empty name after the domain"),
        ("/x", "domain of '/x': must not be empty"),
        ("Example.com/x", "domain of 'Example.com/x'"),
        ("a/b/c", "domain of 'a/b/c'"),
    ],
)
def test_qualified_name_rejects(value, message):
    _rejects(fields.check_qualified_name, value, message)


# --------------------------------------------------------------------------- semver


@pytest.mark.parametrize(
    "value",
    [
        "1.2.3",
        "0.0.0",
        "10.20.30",
        "1.0.0-rc.1+build.5",
        "1.0.0-alpha",
        "1.0.0-0.3.7",
        "1.0.0-x.7.z.92",
        "1.0.0-x-y",
        "1.0.0+20130313144700",
        "1.0.0-alpha+001",
    ],
)
def test_semver_accepts(value):
    assert fields.check_semver(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "01.2.3",
        "1.02.3",
        "1.2",
        "v1.2.3",
        "1.2.3-01",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-a..b",
        "1.2.3+a..b",
        " 1.2.3",
        "1.2.3\n",
        "",
    ],
)
def test_semver_rejects(value):
    _rejects(fields.check_semver, value, f"{value!r} is not a semantic version")


# --------------------------------------------------------------------------- PCI


@pytest.mark.parametrize(
    ("value", "normalized"),
    [
        ("0000:3B:02.1", "0000:3b:02.1"),
        ("3b:02.1", "0000:3b:02.1"),
        ("10000:00:01.0", "10000:00:01.0"),
        ("0000:00:1f.7", "0000:00:1f.7"),
        ("1:00:00.0", "0001:00:00.0"),
        ("00000000:af:1F.0", "0000:af:1f.0"),
        (" 0000:3b:02.1\n", "0000:3b:02.1"),
    ],
)
def test_pci_normalizes(value, normalized):
    assert fields.normalize_pci_address(value) == normalized


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0000:3b:20.0", "device number above 1f"),
        ("0000:3b:ff.0", "device number above 1f"),
        ("0000:3b:02.8", "is not a PCI address ([dddd:]bb:dd.f)"),
        ("0000:3b:2.1", "is not a PCI address"),
        ("0000:3b:02", "is not a PCI address"),
        ("123456789:00:00.0", "is not a PCI address"),
        ("0000-3b-02.1", "is not a PCI address"),
        ("g000:3b:02.1", "is not a PCI address"),
        ("", "is not a PCI address"),
    ],
)
def test_pci_rejects(value, message):
    _rejects(fields.normalize_pci_address, value, message)


# --------------------------------------------------------------------------- MAC

IB_MAC = ":".join(f"{i:02x}" for i in range(0xA0, 0xB4))


@pytest.mark.parametrize(
    ("value", "normalized"),
    [
        ("02:00:00:3b:02:01", "02:00:00:3b:02:01"),
        ("02:00:00:3B:02:0A", "02:00:00:3b:02:0a"),
        ("02-00-00-3B-02-01", "02:00:00:3b:02:01"),
        ("0200.003B.0201", "02:00:00:3b:02:01"),
        (IB_MAC.upper(), IB_MAC),
        (IB_MAC.replace(":", "-"), IB_MAC),
        (".".join(IB_MAC.replace(":", "")[i : i + 4] for i in range(0, 40, 4)), IB_MAC),
        (" 02:00:00:3b:02:01 ", "02:00:00:3b:02:01"),
    ],
)
def test_mac_normalizes(value, normalized):
    assert fields.normalize_mac(value) == normalized


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("02:00:00:3b:02", "has 5 octets"),
        ("02:00:00:3b:02:01:02:03", "has 8 octets"),
        ("0200.003b", "has 4 octets"),
        ("02:00-00:3b:02:01", "is not a MAC address"),
        ("0200.003b:0201", "is not a MAC address"),
        ("not-a-mac", "is not a MAC address"),
        ("0200003b0201", "is not a MAC address"),
        ("02:00:00:3b:02:1", "is not a MAC address"),
        ("02:00:00:3b:02:0g", "is not a MAC address"),
        ("", "is not a MAC address"),
    ],
)
def test_mac_rejects(value, message):
    _rejects(fields.normalize_mac, value, message)


# --------------------------------------------------------------------------- IP


@pytest.mark.parametrize(
    "value", ["10.1.0.5/24", "10.1.0.0/24", "10.1.0.5/32", "0.0.0.0/0", "2001:db8::5/64", "::1/128"]
)
def test_canonical_interface_address_accepts(value):
    assert fields.check_canonical_interface_address(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("10.1.0.5", "'10.1.0.5' is not a CIDR address"),
        ("2001:DB8::5/64", "'2001:DB8::5/64' is not in canonical form ('2001:db8::5/64')"),
        ("2001:db8:0:0::5/64", "is not in canonical form ('2001:db8::5/64')"),
        ("10.1.0.5/255.255.255.0", "is not in canonical form ('10.1.0.5/24')"),
        ("fe80::1%eth0/64", "is not a CIDR address"),
        ("10.1.0.5/33", "is not a CIDR address"),
        ("10.1.0.256/24", "is not a CIDR address"),
        ("a/b", "is not a CIDR address"),
        ("", "is not a CIDR address"),
    ],
)
def test_canonical_interface_address_rejects(value, message):
    _rejects(fields.check_canonical_interface_address, value, message)


@pytest.mark.parametrize(
    ("value", "normalized"),
    [
        ("2001:DB8::5/64", "2001:db8::5/64"),
        ("2001:db8:0:0::5/64", "2001:db8::5/64"),
        ("10.1.0.5/255.255.255.0", "10.1.0.5/24"),
        ("10.1.0.5/24", "10.1.0.5/24"),
    ],
)
def test_interface_address_normalizes(value, normalized):
    assert fields.normalize_interface_address(value) == normalized


@pytest.mark.parametrize("value", ["10.1.0.5", "fe80::1%eth0/64", "2001:db8::5/129"])
def test_interface_address_rejects(value):
    _rejects(fields.normalize_interface_address, value, "is not a CIDR address")


@pytest.mark.parametrize(
    ("value", "normalized"),
    [
        ("10.3.0.0/16", "10.3.0.0/16"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("::/0", "::/0"),
        ("2001:DB8::/32", "2001:db8::/32"),
    ],
)
def test_network_normalizes(value, normalized):
    assert fields.normalize_network(value) == normalized


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "10.3.0.1/16",
            "'10.3.0.1/16' is not a network in CIDR form: 10.3.0.1/16 has host bits set",
        ),
        ("2001:db8::1/32", "has host bits set"),
        ("10.3.0.0", "'10.3.0.0' is not a network in CIDR form (e.g."),
        ("10.3.0.0/40", "is not a network in CIDR form"),
    ],
)
def test_network_rejects(value, message):
    _rejects(fields.normalize_network, value, message)


@pytest.mark.parametrize(
    ("value", "normalized"), [("10.0.0.1", "10.0.0.1"), ("2001:DB8::1", "2001:db8::1")]
)
def test_ip_normalizes(value, normalized):
    assert fields.normalize_ip(value) == normalized


@pytest.mark.parametrize("value", ["10.0.0.1/32", "1.2.3.256", "", "host"])
def test_ip_rejects(value):
    _rejects(fields.normalize_ip, value, f"{value!r} is not an IP address")


# --------------------------------------------------------------------------- interface names


@pytest.mark.parametrize(
    "value", ["eth0", "a" * 15, "net-1_x", "a.b", "..a", "-", "all0", "Default", "0a", "~"]
)
def test_ifname_accepts(value):
    assert fields.check_ifname(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "interface name must not be empty"),
        ("a" * 16, "is 16 bytes; the kernel allows at most 15"),
        ("é" * 8, "is 16 bytes; the kernel allows at most 15"),
        ("a" * 14 + "é", "is 16 bytes"),
        (".", "interface name '.' is reserved"),
        ("..", "interface name '..' is reserved"),
        ("a/b", "contains forbidden characters ['/']"),
        ("a:b", "contains forbidden characters [':']"),
        ("net%d", "contains forbidden characters ['%']"),
        ("data=1", "contains forbidden characters ['=']"),  # issue 23: NAME=WANT lists
        ("a b", "contains forbidden characters [' ']"),
        ("a\tb", "contains forbidden characters ['\\t']"),
        ("a\nb", "contains forbidden characters ['\\n']"),
        ("a\x00b", "contains control characters"),
        ("a\x1bb", "contains control characters"),
        ("a\x7fb", "contains control characters"),
        # finding 6: applied, then refused by udev at the next boot / by the kernel (EINVAL)
        ("é" * 7, "is not ASCII; udev refuses such a name in a .link file"),
        ("€" * 5, "is not ASCII"),
        ("daten\u00e4", "is not ASCII"),
        ("all", "interface name 'all' is reserved"),
        ("default", "interface name 'default' is reserved"),
        ("123", "is all digits, like an ifindex"),
    ],
)
def test_ifname_rejects(value, message):
    _rejects(fields.check_ifname, value, message)
