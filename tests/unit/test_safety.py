"""The safety policy (``core/safety``): what metadata may ask of the guest's network.

Regressions (robustness probe, finding 7: "takeover is silent"): metadata naming the primary
NIC's MAC got it an address and an altname and a hint renamed it, the link going down took its
default route with it; duplicate addresses, the primary NIC's address on a data NIC, a metric-0
default route and a route into 127.0.0.0/8 were applied without a word. And finding 6: a hint
address 0.0.0.0/0 was silently not applied, ff02::1 failed at the kernel after earlier
addresses of the same step were added.

Each pass runs over the in-memory kernel (``MemoryNetlink``) and a copy of the bundled example;
eth1 is vf-1's NIC, eth2 vf-2's, eth3 the fast NIC's. Refusals cost the item (or, for the
primary NIC, the device) only: every other device is configured.
"""

import ipaddress
import json
from dataclasses import replace

import pytest

from kvdev.guest.core import safety
from kvdev.guest.core import steps as s
from kvdev.guest.core.observed import KVDEV_PROTO, Address, Link, Route
from kvdev.guest.reconciler import Reconciler, converge
from kvdev.guest.views import encode, tables
from memlab import example_config, example_kernel

DHCP, STATIC = 16, 4
ALLOW = "if this device is to become the guest's primary NIC, set network.primary: true in its hint"
VF1 = "vm1-devices/nic-1/sriov.example.com/node-a/vf-1"
VF2 = "vm1-devices/nic-2/sriov.example.com/node-a/vf-2"


def kernel_with(*, addresses=(), routes=(), extra_links=(), up=False):
    return example_kernel(*extra_links, addresses=tuple(addresses), routes=tuple(routes), up=up)


@pytest.fixture
def cfg(tmp_path):
    return example_config(tmp_path, gpu=False)


def hint_network(cfg, device, **network):
    """Set fields of ``device``'s hint network section."""
    path = cfg.hints_path
    hints = json.loads(path.read_text())
    entry = next(d for d in hints["devices"] if d.get("device") == device)
    entry.setdefault("network", {}).update(network)
    path.write_text(json.dumps(hints))


def devices(outcome):
    return {d.ref: d for d in outcome.status.devices}


def on(kernel, ifindex):
    return (
        sorted(a.address for a in kernel.state.addresses if a.ifindex == ifindex),
        sorted((r.destination, r.gateway) for r in kernel.state.routes if r.ifindex == ifindex),
    )


# ------------------------------------------------------------------------ the primary NIC

PRIMARY_ADDRESS = Address(1, "10.0.2.15/24", None)
PRIMARY_DEFAULT = Route(1, "0.0.0.0/0", "10.0.2.2", 100, DHCP)


def test_the_nic_with_the_default_route_is_never_touched(cfg):
    kernel = kernel_with(addresses=[PRIMARY_ADDRESS], routes=[PRIMARY_DEFAULT])
    before = kernel.state.link(1)
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert not [x for x in kernel.applied if x.ifindex == 1]  # no altname, rename, MTU, address
    assert kernel.state.link(1) == before
    assert on(kernel, 1) == (["10.0.2.15/24"], [("0.0.0.0/0", "10.0.2.2")])
    vf1 = devices(outcome)[VF1]
    assert vf1.phase.value == "Error"
    assert vf1.reason == (
        "eth1 carries the default route 0.0.0.0/0 via 10.0.2.2 dev eth1, which kvdev did not "
        "add: kvdev does not configure the NIC the guest reaches its network through"
    )
    assert not (cfg.link_dir / "10-kvdev-data0.link").exists()
    # every other device goes ahead
    assert devices(outcome)[VF2].phase.value == "Configured"
    assert kernel.state.link(2).ifname == "data1"
    explained = tables.explain_text(encode.device_json(vf1))
    assert "eth1 carries the default route" in explained


def test_a_default_route_kvdev_added_itself_does_not_make_a_primary_nic(cfg):
    kernel = kernel_with(routes=[Route(1, "0.0.0.0/0", "10.1.0.1", 500, KVDEV_PROTO)])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF1].phase.value == "Configured"
    assert kernel.state.link(1).ifname == "data0"


# ---------------------------------------------------------------------- stacked NICs


def test_a_bridge_port_and_a_macvlan_parent_are_never_touched_and_the_rest_goes_ahead(cfg):
    # eth1 is a port of the guest's br0 (ifindex 10); mv0 (11) is a macvlan on eth2
    bridge = Link(ifindex=10, ifname="br0", mac="02:00:00:3b:02:01", kind="bridge", up=True)
    macvlan = Link(ifindex=11, ifname="mv0", mac="02:aa:00:00:00:01", kind="macvlan", lower=2)
    kernel = kernel_with(extra_links=[bridge, macvlan])
    links = tuple(replace(lk, master=10) if lk.ifindex == 1 else lk for lk in kernel.state.links)
    kernel.state = replace(kernel.state, links=links)
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert not [x for x in kernel.applied if x.ifindex in {1, 2, 10, 11}]
    vf1, vf2 = devices(outcome)[VF1], devices(outcome)[VF2]
    assert (vf1.phase.value, vf2.phase.value) == ("Error", "Error")
    why = "kvdev does not configure a link the guest's own network is built on"
    assert vf1.reason == f"eth1 is a port of br0 (bridge): {why}"
    assert vf2.reason == f"eth2 carries mv0 (macvlan): {why}"
    assert "eth1 is a port of br0" in tables.explain_text(encode.device_json(vf1))
    assert kernel.state.link(3).ifname == "fast0"  # the free NIC is configured


# ------------------------------------------------------------------------------ addresses


def test_the_primary_nics_address_on_a_data_nic_is_refused_and_the_rest_applied(cfg):
    kernel = kernel_with(
        addresses=[PRIMARY_ADDRESS],
        routes=[PRIMARY_DEFAULT],
        extra_links=[],
    )
    hint_network(cfg, "vf-2", addresses=["10.0.2.15/32", "10.9.0.2/24"])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.phase.value == "Error"
    assert vf2.reason == "address 10.0.2.15/32: 10.0.2.15 is already on eth1"
    assert on(kernel, 2)[0] == ["10.1.0.6/24", "10.9.0.2/24"]  # the rest is applied
    assert kernel.state.link(2).ifname == "data1"


def test_an_address_two_devices_ask_for_goes_to_neither(cfg):
    hint_network(cfg, "vf-2", addresses=["10.1.0.5/24"])  # vf-1's, from its metadata
    kernel = kernel_with()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    both = devices(outcome)
    assert both[VF1].reason == f"address 10.1.0.5/24: 10.1.0.5 is also asked for by {VF2}"
    assert both[VF2].reason == f"address 10.1.0.5/24: 10.1.0.5 is also asked for by {VF1}"
    assert "10.1.0.5/24" not in on(kernel, 1)[0] + on(kernel, 2)[0]


def test_an_address_a_device_holds_already_stays_with_it_when_another_asks_for_it(cfg):
    kernel = kernel_with()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    assert "10.1.0.5/24" in on(kernel, 1)[0]
    hint_network(cfg, "vf-2", addresses=["10.1.0.5/24"])
    outcome = converge(r)
    assert devices(outcome)[VF1].phase.value == "Configured"
    assert devices(outcome)[VF2].reason == "address 10.1.0.5/24: 10.1.0.5 is already on data0"
    assert "10.1.0.5/24" in on(kernel, 1)[0]
    assert "10.1.0.5/24" not in on(kernel, 2)[0]


def test_an_address_kvdev_moves_between_its_links_is_no_collision(cfg):
    kernel = kernel_with()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    converge(r)
    hint_network(cfg, "vf-2", addresses=["10.7.0.1/24"])
    converge(r)
    # vf-2 gives 10.7.0.1 up and vf-1 takes it, in one metadata change
    hint_network(cfg, "vf-2", addresses=[])
    hint_network(cfg, "vf-1", addresses=["10.7.0.1/24"])
    outcome = converge(r)
    assert outcome.status.converged
    assert "10.7.0.1/24" in on(kernel, 1)[0]
    assert "10.7.0.1/24" not in on(kernel, 2)[0]


@pytest.mark.parametrize(
    ("address", "what"),
    [
        ("0.0.0.0/0", "the unspecified address"),
        ("::/0", "the unspecified address"),
        ("ff02::1/128", "a multicast address"),
        ("224.0.0.1/32", "a multicast address"),
        ("127.0.0.2/8", "a loopback address"),
        ("::1/128", "a loopback address"),
        ("255.255.255.255/32", "the limited broadcast address"),
        ("::ffff:a00:1/128", "an IPv4-mapped IPv6 address"),
    ],
)
def test_what_is_no_interface_address_is_refused_before_the_kernel_sees_it(cfg, address, what):
    hint_network(cfg, "vf-2", addresses=["10.9.0.2/24", address])
    kernel = kernel_with()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    # As this Python writes it: 3.13 writes IPv4-mapped ones dotted (::ffff:10.0.0.1/128)
    shown = str(ipaddress.ip_interface(address))
    assert vf2.reason == f"address {shown} is {what}: not an interface address"
    assert not [x for x in kernel.applied if isinstance(x, s.AddAddress) and x.address == address]
    assert on(kernel, 2)[0] == ["10.1.0.6/24", "10.9.0.2/24"]  # never half-applied
    assert devices(outcome)[VF1].phase.value == "Configured"


def test_a_link_local_address_is_applied_with_a_warning(cfg):
    hint_network(cfg, "vf-2", addresses=["169.254.7.7/16"])
    kernel = kernel_with()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.phase.value == "Configured"
    assert vf2.warnings == ("address 169.254.7.7/16 is link-local",)
    assert "169.254.7.7/16" in on(kernel, 2)[0]
    assert encode.device_json(vf2)["warnings"] == ["address 169.254.7.7/16 is link-local"]
    assert "address 169.254.7.7/16 is link-local" in tables.explain_text(encode.device_json(vf2))


# --------------------------------------------------------------------------------- routes


def route(destination, gateway=None, metric=None):
    return {
        k: v
        for k, v in (("destination", destination), ("gateway", gateway), ("metric", metric))
        if v is not None
    }


def test_a_default_route_that_would_take_over_is_refused(cfg):
    kernel = kernel_with(addresses=[PRIMARY_ADDRESS], routes=[PRIMARY_DEFAULT])
    hint_network(cfg, "vf-2", routes=[route("0.0.0.0/0", "10.1.0.1", 0)])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.reason == (
        "default route with metric 0 would take over from 0.0.0.0/0 via 10.0.2.2 dev eth1 "
        f"(metric 100); {ALLOW}"
    )
    assert on(kernel, 2)[1] == []
    assert on(kernel, 1)[1] == [("0.0.0.0/0", "10.0.2.2")]


def test_a_fallback_default_route_is_applied_with_a_warning(cfg):
    kernel = kernel_with(addresses=[PRIMARY_ADDRESS], routes=[PRIMARY_DEFAULT])
    hint_network(cfg, "vf-2", routes=[route("0.0.0.0/0", "10.1.0.1", 600)])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.phase.value == "Configured"
    assert vf2.warnings == (
        "a default route through data1, behind 0.0.0.0/0 via 10.0.2.2 dev eth1",
    )
    assert on(kernel, 2)[1] == [("0.0.0.0/0", "10.1.0.1")]


def test_the_only_default_route_is_applied_with_a_warning(cfg):
    hint_network(cfg, "vf-2", routes=[route("::/0", "fe80::1")])
    kernel = kernel_with()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF2].warnings == (
        "a default route through data1: the guest's only one",
    )


@pytest.mark.parametrize(
    ("wanted", "reason"),
    [
        (route("127.0.0.0/8"), "route 127.0.0.0/8 leads into loopback space"),
        (route("127.1.2.0/24", "10.1.0.1"), "route 127.1.2.0/24 leads into loopback space"),
        (route("::1/128"), "route ::1/128 leads into loopback space"),
        (route("224.0.0.0/4"), "route 224.0.0.0/4 leads into multicast space"),
        (route("ff02::/16"), "route ff02::/16 leads into multicast space"),
        (route("10.8.0.0/16", "127.0.0.1"), "route 10.8.0.0/16 via 127.0.0.1: the gateway is"),
        (route("10.8.0.0/16", "0.0.0.0"), "route 10.8.0.0/16 via 0.0.0.0: the gateway is"),  # noqa: S104
    ],
)
def test_routes_into_loopback_or_multicast_or_via_no_unicast_gateway_are_refused(
    cfg, wanted, reason
):
    hint_network(cfg, "vf-2", routes=[route("10.5.0.0/16", "10.1.0.1"), wanted])
    kernel = kernel_with()
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF2].reason.startswith(reason)
    assert on(kernel, 2)[1] == [("10.5.0.0/16", "10.1.0.1")]


def test_link_local_and_overlapping_routes_are_applied_with_warnings(cfg):
    lan = Route(1, "10.0.2.0/24", None, None, 2)  # eth1's own subnet, the kernel's
    kernel = kernel_with(addresses=[Address(1, "10.0.2.15/24", None)], routes=[lan])
    hint_network(
        cfg,
        "vf-2",
        routes=[route("169.254.1.0/24", "10.1.0.1"), route("10.0.2.128/25", "10.1.0.1")],
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.phase.value == "Configured"
    assert vf2.warnings == (
        "route 169.254.1.0/24 leads into link-local space through data1",
        "route 10.0.2.128/25 overlaps 10.0.2.0/24 dev data0",
    )
    assert len(on(kernel, 2)[1]) == 2


# ------------------------------------------------- what may capture the primary NIC's traffic
# eth1 is the primary (10.0.2.15/24, default via 10.0.2.2, DNS 10.0.2.3 and 8.8.8.8); vf-2 asks
# for things through data1 (eth2, 10.1.0.6/24).

LAN = Route(1, "10.0.2.0/24", None, None, 2)


def primary_kernel():
    return kernel_with(addresses=[PRIMARY_ADDRESS], routes=[LAN, PRIMARY_DEFAULT])


def resolv(cfg, *servers):
    path = cfg.config_root / "etc/resolv.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"nameserver {s}\n" for s in servers) + "search example.com\n")


def refusals(outcome, ref=VF2):
    return devices(outcome)[ref].reason.split("; metadata: ")[0]


@pytest.mark.parametrize(
    ("wanted", "reason"),
    [
        (
            route("0.0.0.0/1", "10.1.0.1"),
            (
                "route 0.0.0.0/1 through data1 is shorter than /8: more specific than a "
                "default route, it would take what the default route 0.0.0.0/0 via 10.0.2.2 "
                "dev eth1 reaches"
            ),
        ),
        (
            route("128.0.0.0/1", "10.1.0.1"),
            "route 128.0.0.0/1 through data1 is shorter than /8",
        ),
        (
            route("10.0.2.0/25", "10.1.0.1"),
            "route 10.0.2.0/25 through data1 would capture 10.0.2.0/24, the prefix of eth1",
        ),
        (
            route("10.0.0.0/8", "10.1.0.1"),
            "route 10.0.0.0/8 through data1 would capture 10.0.2.0/24, the prefix of eth1",
        ),
        (
            route("8.8.8.0/24", "10.1.0.1"),
            (
                "route 8.8.8.0/24 through data1 would capture 8.8.8.8, a DNS server the guest "
                "reaches through eth1"
            ),
        ),
        (
            route("169.254.169.254/32", "10.1.0.1"),
            (
                "route 169.254.169.254/32 through data1 would capture 169.254.169.254, the cloud's "
                "metadata service"
            ),
        ),
        (route("169.254.0.0/16", "10.1.0.1"), "the cloud's metadata service"),
        (route("2000::/3"), "route 2000::/3 through data1 is shorter than /16"),
        (route("fd00:ec2::/32"), "would capture fd00:ec2::254, the cloud's metadata service"),
    ],
)
def test_a_route_that_would_capture_the_primarys_traffic_is_refused(cfg, wanted, reason):
    resolv(cfg, "10.0.2.3", "8.8.8.8", "127.0.0.53")
    kernel = primary_kernel()
    hint_network(cfg, "vf-2", routes=[route("10.5.0.0/16", "10.1.0.1"), wanted])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert reason in vf2.reason, vf2.reason
    assert vf2.reason.endswith(ALLOW)
    assert "route" in tables.explain_text(encode.device_json(vf2))
    assert on(kernel, 2)[1] == [("10.5.0.0/16", "10.1.0.1")]
    assert on(kernel, 1) == (["10.0.2.15/24"], [("0.0.0.0/0", "10.0.2.2"), ("10.0.2.0/24", None)])


def test_two_halves_of_the_default_route_are_both_refused(cfg):
    kernel = primary_kernel()
    hint_network(
        cfg, "vf-2", routes=[route("0.0.0.0/1", "10.1.0.1"), route("128.0.0.0/1", "10.1.0.1")]
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.warnings == ()
    assert vf2.reason.count("is shorter than /8") == 2
    assert on(kernel, 2)[1] == []


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        (
            "10.0.2.99/25",
            (
                "address 10.0.2.99/25 (its prefix 10.0.2.0/25) through data1 would capture "
                "10.0.2.0/24, the prefix of eth1"
            ),
        ),
        ("1.2.3.4/1", "address 1.2.3.4/1 (its prefix 0.0.0.0/1) through data1 is shorter than /8"),
        ("8.8.8.9/24", "would capture 8.8.8.8, a DNS server the guest reaches through eth1"),
        ("2001:db8::5/8", "(its prefix 2000::/8) through data1 is shorter than /16"),
    ],
)
def test_an_address_whose_prefix_would_capture_the_primarys_traffic_is_refused(
    cfg, address, reason
):
    resolv(cfg, "8.8.8.8")
    kernel = primary_kernel()
    hint_network(cfg, "vf-2", addresses=[address])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert reason in vf2.reason, vf2.reason
    assert address not in on(kernel, 2)[0]
    assert on(kernel, 2)[0] == ["10.1.0.6/24"]  # networkData.ips still applied


def test_routes_that_together_reach_more_than_a_slash_4_are_refused_from_the_one_that_tips(cfg):
    kernel = primary_kernel()
    eighths = [route(f"{n}.0.0.0/8", "10.1.0.1") for n in range(20, 40)]
    hint_network(cfg, "vf-2", routes=eighths)
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    # data1's own 10.1.0.0/24 and 16 /8s fit in a /4's worth; the 16th /8 tips it over
    kept = {d for d, _ in on(kernel, 2)[1]}
    assert kept == {f"{n}.0.0.0/8" for n in range(20, 35)}
    assert "route 35.0.0.0/8 through data1: with the routes and prefixes through links kvdev " in (
        vf2.reason
    )
    assert "more than a /4: together like a default route" in vf2.reason
    assert vf2.reason.count("together like a default route") == 5


def test_a_device_the_hints_make_the_primary_gets_its_routes_with_warnings(cfg):
    kernel = primary_kernel()
    hint_network(
        cfg,
        "vf-2",
        primary=True,
        routes=[route("0.0.0.0/1", "10.1.0.1"), route("0.0.0.0/0", "10.1.0.1", 0)],
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    vf2 = devices(outcome)[VF2]
    assert vf2.phase.value == "Configured"
    assert [w.split(":")[-1] for w in vf2.warnings] == [
        " allowed, its hint sets network.primary"
    ] * 2
    assert {d for d, _ in on(kernel, 2)[1]} == {"0.0.0.0/1", "0.0.0.0/0"}


def test_a_dns_server_the_guest_reaches_through_a_data_link_is_not_the_primarys(cfg):
    resolv(cfg, "10.1.0.53")  # on data1's network, by the guest's own static route through it
    data1 = Route(2, "10.1.0.0/24", "10.1.0.1", None, STATIC)  # the guest's, not kvdev's
    kernel = kernel_with(addresses=[PRIMARY_ADDRESS], routes=[LAN, PRIMARY_DEFAULT, data1])
    hint_network(cfg, "vf-2", routes=[route("10.1.0.0/25", "10.1.0.1")])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert devices(outcome)[VF2].phase.value == "Configured"


def test_what_kvdev_configured_never_makes_a_dns_server_the_data_links():
    """was: a hint route 9.9.0.0/16 through a data NIC, applied before the lease, was kept once
    the lease named 9.9.9.9: the guest "reached" it through kvdev's own route."""
    dns = safety.Guard(dns=("9.9.9.9", "10.1.0.53"))
    state = primary_kernel().state
    state = replace(
        state,
        addresses=(*state.addresses, Address(2, "10.1.0.6/24", KVDEV_PROTO)),
        routes=(
            *state.routes,
            Route(2, "9.9.0.0/16", "10.1.0.1", None, KVDEV_PROTO),  # kvdev's, from the hint
            Route(2, "10.1.0.0/24", None, None, 2),  # the connected prefix of kvdev's address
        ),
    )
    wanted = [
        safety.Wanted("dev", 2, "data1", ("10.1.0.6/24",), (("9.9.0.0/16", "10.1.0.1", None),))
    ]
    ruling = safety.judge(wanted, state, dns)[0]
    assert ruling.routes == ()
    assert ruling.addresses == ()
    by_address = "address 10.1.0.6/24 (its prefix 10.1.0.0/24) through data1 would capture"
    by_route = "route 9.9.0.0/16 through data1 would capture"
    assert ruling.refused == (
        f"{by_address} 10.1.0.53, a DNS server the guest reaches through eth1; {ALLOW}",
        f"{by_route} 9.9.9.9, a DNS server the guest reaches through eth1; {ALLOW}",
    )
    assert ruling.refused_routes == ((("9.9.0.0/16", "10.1.0.1", None), ruling.refused[1]),)
    # a connected prefix on a link kvdev does not manage still counts: that is the guest's
    guests = Route(3, "9.9.0.0/16", None, None, 2)
    other = replace(state, routes=(*primary_kernel().state.routes, guests))
    assert safety.judge([replace(wanted[0], addresses=())], other, dns)[0].refused == ()


def test_a_route_kvdev_applied_before_the_lease_is_removed_when_the_lease_names_a_dns_server_in_it(
    cfg,
):
    kernel = primary_kernel()
    hint_network(cfg, "vf-2", routes=[route("9.9.0.0/16", "10.1.0.1")])
    converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert ("9.9.0.0/16", "10.1.0.1") in on(kernel, 2)[1]  # no DNS server in it yet
    resolv(cfg, "9.9.9.9")  # the lease
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert ("9.9.0.0/16", "10.1.0.1") not in on(kernel, 2)[1]
    assert "would capture 9.9.9.9, a DNS server the guest reaches through eth1" in refusals(outcome)
    (removed,) = [x for x in kernel.applied if isinstance(x, s.RemoveRoute)]
    assert removed.reason.startswith("kvdev added it and the safety policy refuses it now: route")


def test_the_guests_own_nic_without_a_default_route_is_protected_too(cfg):
    """First boot: the configuration names eth1, no lease yet: its prefix is still guarded."""
    path = cfg.config_root / "etc/systemd/network/10-uplink.network"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[Match]\nName=eth1\n\n[Network]\nDHCP=yes\nAddress=10.0.2.15/24\n")
    kernel = kernel_with(addresses=[PRIMARY_ADDRESS], routes=[LAN])
    hint_network(cfg, "vf-2", addresses=["10.0.2.99/25"])
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert "would capture 10.0.2.0/24, the prefix of eth1" in devices(outcome)[VF2].reason


# ------------------------------------------------------- a rename never loses what the link had


def test_a_rename_puts_back_the_routes_and_ipv6_addresses_the_link_had(cfg):
    static = Route(1, "192.168.50.0/24", "10.1.0.1", 7, STATIC)
    kernel = kernel_with(
        addresses=[Address(1, "2001:db8:77::5/64", None), Address(1, "fe80::1/64", 3)],
        routes=[static, Route(1, "2001:db8:77::/64", None, 256, 2)],
        up=True,  # a rename takes it down: the kernel drops its IPv6 addresses and routes
    )
    outcome = converge(Reconciler(cfg, kernel, scan_devices=tuple))
    assert outcome.status.converged
    assert kernel.state.link(1).ifname == "data0"  # renamed: the link went down
    back = {(r.destination, r.gateway, r.protocol) for r in kernel.state.routes if r.ifindex == 1}
    assert ("192.168.50.0/24", "10.1.0.1", STATIC) in back  # with its own protocol
    assert ("10.3.0.0/16", "10.1.0.1", KVDEV_PROTO) in back  # and the hints' route
    ipv6 = {(a.address, a.proto) for a in kernel.state.addresses if a.ifindex == 1}
    assert ("2001:db8:77::5/64", None) in ipv6
    assert not {a for a, _ in ipv6} & {"fe80::1/64"}  # the kernel's own come back by themselves
    put_back = [x for x in kernel.applied if "before the link went down" in x.reason]
    assert {type(x) for x in put_back} == {s.AddRoute, s.AddAddress}
    again = Reconciler(cfg, kernel, scan_devices=tuple).reconcile()
    assert again.results == []  # not kvdev's: never removed, never re-added


# ------------------------------------------------------------- the pure policy, judged directly


def judged(routes, addresses=(), guard=None):
    state = primary_kernel().state
    wanted = [safety.Wanted("dev", 2, "data1", tuple(addresses), tuple(routes))]
    return safety.judge(wanted, state, guard)[0]


def test_the_union_counts_each_address_once_nested_and_repeated_prefixes_add_nothing():
    same = [(f"{n}.0.0.0/8", None, None) for n in range(20, 36)]  # 16 /8s: a /4's worth
    again = same + [("20.0.0.0/8", None, None), ("20.5.0.0/16", None, None)] * 50
    ruling = judged(again)
    assert ruling.refused == ()
    assert len(ruling.routes) == len(again)
    tipped = judged([*again, ("99.1.2.0/24", None, None)])
    assert tipped.refused == (
        (
            "route 99.1.2.0/24 through data1: with the routes and prefixes through links kvdev "
            "manages before it, it would reach 268435712 addresses, more than a /4: together like "
            f"a default route; {ALLOW}"
        ),
    )


def test_the_union_of_ipv6_prefixes_is_bounded_by_a_slash_12():
    sixteens = [(f"2001:{n:x}::/32", None, None) for n in range(0, 0x10000, 0x1000)]
    assert judged(sixteens).refused == ()  # sixteen /32s, well inside
    wide = [(f"{0x2000 + n:x}::/16", None, None) for n in range(17)]
    ruling = judged(wide)
    assert [r.split(":")[0] for r in ruling.refused] == ["route 2010"]
