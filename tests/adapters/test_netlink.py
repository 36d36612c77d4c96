"""guest.netlink against the real kernel, inside a throwaway network namespace."""

import json
import os
import selectors
import subprocess
from pathlib import Path

import pytest

from kvdev.errors import UsageError
from kvdev.guest.adapters.netlink import LinkEvents, Netlink
from kvdev.guest.core import steps
from kvdev.guest.core.observed import KVDEV_PROTO

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]

MAC = "02:00:5e:10:00:01"


def ip(ns, *args):
    subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True)


def ip_json(ns, *args):
    out = subprocess.run(
        ["ip", "-j", "-n", ns, *args], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out) if out.strip() else []


def add_veth(ns, name="a0", peer="b0"):
    ip(ns, "link", "add", name, "type", "veth", "peer", "name", peer)
    ip(ns, "link", "set", name, "address", MAC)
    ip(ns, "link", "set", peer, "up")
    return ip_json(ns, "link", "show", "dev", name)[0]["ifindex"]


def show(ns, dev):
    return ip_json(ns, "link", "show", "dev", dev)[0]


def kw(ifindex, ifname="a0"):
    return {"ifindex": ifindex, "ifname": ifname, "device": "nic0", "reason": "test"}


def apply(ns, *todo):
    with Netlink(netns=ns) as nl:
        results = nl.apply(todo)
    assert [r.step for r in results] == list(todo)
    return results


def assert_all_ok(results):
    assert [(r.ok, r.error) for r in results] == [(True, "")] * len(results)


def show_addrs(ns, dev="a0"):
    return ip_json(ns, "addr", "show", "dev", dev)[0]["addr_info"]


def main_routes(ns, family="-4"):
    return ip_json(ns, family, "route", "show", "table", "main")


def test_read_state_sees_links_addresses_and_routes(netns):
    ifindex = add_veth(netns)
    ip(netns, "link", "set", "a0", "mtu", "1400")
    ip(netns, "link", "property", "add", "dev", "a0", "altname", "data-alt")
    ip(netns, "link", "set", "a0", "up")
    ip(netns, "addr", "add", "10.1.0.6/24", "dev", "a0")
    assert_all_ok(
        apply(
            netns,
            steps.AddAddress(**kw(ifindex), address="10.1.0.5/24"),
            steps.AddAddress(**kw(ifindex), address="2001:DB8:0:0::5/64"),
        )
    )
    ip(netns, "route", "add", "10.3.0.0/16", "via", "10.1.0.1", "dev", "a0", "proto", "75")
    ip(netns, "route", "add", "default", "via", "10.1.0.1", "dev", "a0", "metric", "7")

    with Netlink(netns=netns) as nl:
        state = nl.read_state()

    link = state.link(ifindex)
    assert link is not None
    assert (link.ifname, link.mac, link.mtu, link.kind) == ("a0", MAC, 1400, "veth")
    assert (link.min_mtu, link.max_mtu) == (68, 65535)
    assert link.altnames == ("data-alt",)
    assert link.up
    assert link.permanent_mac is None  # veth has no burned-in address
    lo = next(lk for lk in state.links if lk.ifname == "lo")
    assert lo.kind is None
    assert not lo.up

    mine = {a.address: a.proto for a in state.addresses if a.ifindex == ifindex}
    assert mine["10.1.0.5/24"] == KVDEV_PROTO
    assert mine["2001:db8::5/64"] == KVDEV_PROTO
    assert mine["10.1.0.6/24"] is None  # `ip addr add` sets no IFA_PROTO
    assert any(addr.startswith("fe80::") for addr in mine)  # everything is reported

    routes = {r.destination: r for r in state.routes if r.ifindex == ifindex}
    assert routes["10.3.0.0/16"].gateway == "10.1.0.1"
    assert routes["10.3.0.0/16"].protocol == KVDEV_PROTO
    assert routes["10.3.0.0/16"].metric is None  # IPv4 metric 0 is not reported
    assert routes["0.0.0.0/0"].metric == 7
    assert routes["10.1.0.0/24"].protocol == 2  # RTPROT_KERNEL prefix route
    assert routes["2001:db8::/64"].metric == 256
    assert all(r.destination != "10.1.0.5/32" for r in state.routes)  # local table left out


def test_link_steps_rename_altname_mtu_and_updown(netns):
    ifindex = add_veth(netns, "eth7")
    ip(netns, "link", "set", "eth7", "up")
    results = apply(
        netns,
        steps.SetDown(**kw(ifindex, "eth7")),
        steps.Rename(**kw(ifindex, "eth7"), new_name="data0"),
        steps.AddAltname(**kw(ifindex, "data0"), altname="enp0s7"),
        steps.SetMtu(**kw(ifindex, "data0"), mtu=9000),
    )
    assert_all_ok(results)
    link = show(netns, "data0")
    assert (link["ifindex"], link["mtu"], link["altnames"]) == (ifindex, 9000, ["enp0s7"])
    assert "UP" not in link["flags"]

    assert_all_ok(apply(netns, steps.SetUp(**kw(ifindex, "data0"))))
    assert "UP" in show(netns, "data0")["flags"]
    assert show(netns, "enp0s7")["ifindex"] == ifindex  # the altname resolves


def test_renaming_an_up_link_works(netns):
    ifindex = add_veth(netns, "eth8")
    ip(netns, "link", "set", "eth8", "up")
    assert_all_ok(apply(netns, steps.Rename(**kw(ifindex, "eth8"), new_name="data8")))
    assert "UP" in show(netns, "data8")["flags"]


def test_altname_twice_is_ok_but_another_links_name_is_not(netns):
    ifindex = add_veth(netns)
    alt = steps.AddAltname(**kw(ifindex), altname="data-x")
    taken = steps.AddAltname(**kw(ifindex), altname="b0")  # the peer's name
    ok1, ok2, bad = apply(netns, alt, alt, taken)
    assert ok1.ok
    assert ok2.ok
    assert show(netns, "a0")["altnames"] == ["data-x"]
    assert not bad.ok
    assert not bad.retryable
    assert bad.error.startswith("add altname b0 to a0: ")
    assert "errno 17" in bad.error


def test_altname_removed_twice_is_ok_but_another_links_name_stays(netns):
    ifindex = add_veth(netns)
    ip(netns, "link", "property", "add", "dev", "a0", "altname", "data-x")
    ip(netns, "link", "property", "add", "dev", "a0", "altname", "data-y")
    ip(netns, "link", "property", "add", "dev", "b0", "altname", "peer-x")
    gone = steps.RemoveAltname(**kw(ifindex), altname="data-x")
    theirs = steps.RemoveAltname(**kw(ifindex), altname="peer-x")  # the peer's altname
    ok1, ok2, bad = apply(netns, gone, gone, theirs)
    assert (ok1.ok, ok2.ok) == (True, True)  # gone already: done (ENOENT)
    assert show(netns, "a0")["altnames"] == ["data-y"]
    assert show(netns, "b0")["altnames"] == ["peer-x"]
    assert not bad.ok
    assert not bad.retryable
    assert bad.error.startswith("remove altname peer-x from a0: ")


def test_addresses_add_remove_and_idempotence(netns):
    ifindex = add_veth(netns)
    v4 = steps.AddAddress(**kw(ifindex), address="10.1.0.5/24")
    v6 = steps.AddAddress(**kw(ifindex), address="2001:db8::5/64")
    assert_all_ok(apply(netns, v4, v4, v6, v6))

    info = [a for a in show_addrs(netns) if a["family"] in {"inet", "inet6"}]
    assert [(a["local"], a["prefixlen"]) for a in info if a["local"] == "10.1.0.5"] == [
        ("10.1.0.5", 24)
    ]
    (inet,) = (a for a in info if a["family"] == "inet")
    assert inet["broadcast"] == "10.1.0.255"  # like `ip addr add ... brd +`
    assert [a["local"] for a in info if a["local"] == "2001:db8::5"] == ["2001:db8::5"]
    if "protocol" in inet:  # newer iproute2 prints IFA_PROTO
        assert inet["protocol"] == str(KVDEV_PROTO)

    rm4 = steps.RemoveAddress(**kw(ifindex), address="10.1.0.5/24")
    rm6 = steps.RemoveAddress(**kw(ifindex), address="2001:db8::5/64")
    assert_all_ok(apply(netns, rm4, rm4, rm6, rm6))
    assert not {a["local"] for a in show_addrs(netns)} & {"10.1.0.5", "2001:db8::5"}


def test_broadcast_is_not_set_on_a_31(netns):
    ifindex = add_veth(netns)
    assert_all_ok(apply(netns, steps.AddAddress(**kw(ifindex), address="10.9.0.0/31")))
    (inet,) = (a for a in show_addrs(netns) if a["family"] == "inet")
    assert "broadcast" not in inet


def test_routes_add_remove_with_kvdev_protocol(netns):
    ifindex = add_veth(netns)
    ip(netns, "link", "set", "a0", "up")
    ip(netns, "addr", "add", "10.1.0.5/24", "dev", "a0")
    ip(netns, "addr", "add", "2001:db8::5/64", "dev", "a0", "nodad")
    via = steps.AddRoute(**kw(ifindex), destination="10.3.0.0/16", gateway="10.1.0.1", metric=50)
    onlink = steps.AddRoute(**kw(ifindex), destination="10.4.0.0/16", gateway=None, metric=None)
    default = steps.AddRoute(
        **kw(ifindex), destination="0.0.0.0/0", gateway="10.1.0.1", metric=None
    )
    v6 = steps.AddRoute(**kw(ifindex), destination="2001:db9::/48", gateway="2001:db8::1", metric=9)
    assert_all_ok(apply(netns, via, via, onlink, default, v6))

    routes = {r["dst"]: r for r in main_routes(netns)}
    assert routes["10.3.0.0/16"]["gateway"] == "10.1.0.1"
    assert routes["10.3.0.0/16"]["metric"] == 50
    assert routes["10.4.0.0/16"]["scope"] == "link"
    assert "gateway" not in routes["10.4.0.0/16"]
    assert routes["default"]["gateway"] == "10.1.0.1"
    for dst in ("10.3.0.0/16", "10.4.0.0/16", "default"):
        assert routes[dst]["protocol"] == str(KVDEV_PROTO)
    (route6,) = (r for r in main_routes(netns, "-6") if r["dst"] == "2001:db9::/48")
    assert (route6["gateway"], route6["metric"], route6["protocol"]) == ("2001:db8::1", 9, "75")

    removals = [
        steps.RemoveRoute(
            **kw(ifindex), destination=s.destination, gateway=s.gateway, metric=s.metric
        )
        for s in (via, onlink, default, v6)
    ]
    assert_all_ok(apply(netns, *removals, *removals))
    assert {r["dst"] for r in main_routes(netns)} == {"10.1.0.0/24"}
    assert all(r["dst"] != "2001:db9::/48" for r in main_routes(netns, "-6"))


def test_remove_route_leaves_a_route_kvdev_did_not_add(netns):
    ifindex = add_veth(netns)
    ip(netns, "link", "set", "a0", "up")
    ip(netns, "route", "add", "10.5.0.0/16", "dev", "a0", "proto", "static")
    rm = steps.RemoveRoute(**kw(ifindex), destination="10.5.0.0/16", gateway=None, metric=None)
    assert_all_ok(apply(netns, rm))  # nothing of kvdev's to remove
    assert [r["dst"] for r in main_routes(netns)] == ["10.5.0.0/16"]


def test_permanent_error_does_not_stop_the_next_step(netns):
    ifindex = add_veth(netns)
    too_big, fine = apply(
        netns,
        steps.SetMtu(**kw(ifindex), mtu=70000),
        steps.SetMtu(**kw(ifindex), mtu=1400),
    )
    assert (too_big.ok, too_big.retryable) == (False, False)
    assert too_big.error.startswith("set mtu 70000 on a0: ")
    assert "errno 22" in too_big.error  # veth says EINVAL: mtu greater than device maximum
    assert fine.ok
    assert show(netns, "a0")["mtu"] == 1400


def test_malformed_step_is_a_permanent_failure(netns):
    ifindex = add_veth(netns)
    bad, mixed = apply(
        netns,
        steps.AddAddress(**kw(ifindex), address="10.1.0.300/24"),
        steps.AddRoute(
            **kw(ifindex), destination="10.3.0.0/16", gateway="2001:db8::1", metric=None
        ),
    )
    assert (bad.ok, bad.retryable) == (False, False)
    assert "10.1.0.300" in bad.error
    assert (mixed.ok, mixed.retryable) == (False, False)
    assert "not IPv4" in mixed.error


def test_vanished_link_and_unreachable_gateway_are_retryable(netns):
    ifindex = add_veth(netns)
    other = add_veth(netns, "a1", "b1")
    ip(netns, "link", "set", "a1", "up")
    ip(netns, "link", "del", "a0")
    gone, unreachable = apply(
        netns,
        steps.SetMtu(**kw(ifindex), mtu=1400),
        steps.AddRoute(
            **kw(other, "a1"), destination="10.3.0.0/16", gateway="192.0.2.1", metric=None
        ),
    )
    assert (gone.ok, gone.retryable) == (False, True)
    assert gone.error == "set mtu 1400 on a0: No such device (errno 19)"
    assert (unreachable.ok, unreachable.retryable) == (False, True)
    assert "errno 101" in unreachable.error


def test_write_link_file_is_not_a_netlink_step(netns):
    step = steps.WriteLinkFile(**kw(1, "lo"), path="/etc/systemd/network/x.link", content="")
    (result,) = apply(netns, step)
    assert (result.ok, result.retryable, result.error) == (False, False, "not a netlink step")


def test_missing_namespace_is_a_usage_error(netns):
    with pytest.raises(UsageError, match="no network namespace"):
        Netlink(netns=netns + "-missing")
    assert not Path(f"/var/run/netns/{netns}-missing").exists()  # and none was created


def test_link_events_drain(netns):
    add_veth(netns)
    with LinkEvents(netns=netns) as events, selectors.DefaultSelector() as sel:
        sel.register(events, selectors.EVENT_READ)
        assert events.drain() == 0
        assert sel.select(timeout=0) == []
        ip(netns, "link", "set", "a0", "mtu", "1400")
        ip(netns, "addr", "add", "10.1.0.5/24", "dev", "a0")
        assert sel.select(timeout=60)  # a liveness bound: the events come, however slowly
        assert events.drain() >= 2
        assert events.drain() == 0
        assert sel.select(timeout=0) == []
    with pytest.raises(UsageError):
        events.fileno()


def test_closed_netlink_is_a_usage_error(netns):
    nl = Netlink(netns=netns)
    nl.close()
    nl.close()
    with pytest.raises(UsageError):
        nl.read_state()
