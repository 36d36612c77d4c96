"""guest.planning with plain values; a fake link table proves plans converge."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Binding, Matching, MatchState
from kvdev.guest.core.observed import KVDEV_PROTO, Address, GuestDevice, Link, NetState, Nic, Route
from kvdev.guest.core.planning import Policy, altname_for, plan
from kvdev.schema.described import DescribedDevice
from kvdev.schema.hints import DeviceHint
from netlinkdouble import MemoryNetlink


def described(name="vf-1", ips=(), claim="vm1-devices", pod_claim=None, request="nics"):
    return DescribedDevice(
        claim=claim,
        namespace="vms",
        pod_claim_name=pod_claim,
        request=request,
        driver="sriov.example.com",
        pool="node-a",
        name=name,
        generation=1,
        ips=tuple(ips),
    )


def hint(device="vf-1", **network):
    data = {"claim": {"resourceClaimName": "vm1-devices"}, "request": "nics", "device": device}
    if network:
        data["network"] = network
    return DeviceHint.parse(data)


def bound(d, ifindex, ifname, h=None):
    guest = GuestDevice(f"0000:0{ifindex}:00.0", nics=(Nic(ifname, ifindex),))
    return Binding(d, MatchState.BOUND, guest, hint=h)


def link(ifindex, ifname, **kw):
    base = {"mac": f"02:00:00:00:00:0{ifindex}", "mtu": 1500, "min_mtu": 68, "max_mtu": 9216}
    return Link(ifindex, ifname, **{**base, **kw})


def fake_apply(state: NetState, steps) -> NetState:
    """The state after the kernel (in memory) applied ``steps``; every one must succeed."""
    kernel = MemoryNetlink(state)
    results = kernel.apply(
        [x for x in steps if not isinstance(x, s.WriteLinkFile | s.RemoveLinkFile)]
    )
    assert [r.error for r in results if not r.ok] == []
    return kernel.state


def files_after(files, steps):
    out = dict(files)
    for step in steps:
        if isinstance(step, s.WriteLinkFile):
            out[step.path] = step.content
        elif isinstance(step, s.RemoveLinkFile):
            out.pop(step.path, None)
    return out


def kinds(p):
    return [type(x).__name__ for x in p.steps]


def test_fresh_link_gets_altname_up_and_addresses():
    state = NetState((link(3, "eth1"),))
    p = plan(Matching((bound(described(ips=["10.1.0.5/24"]), 3, "eth1"),), ()), state)
    assert kinds(p) == ["AddAltname", "SetUp", "AddAddress"]
    assert p.steps[0].altname == "vm1-devices.nics.vf-1"
    assert p.steps[2].address == "10.1.0.5/24"


def test_converged_state_plans_nothing():
    m = Matching((bound(described(ips=["10.1.0.5/24"]), 3, "eth1"),), ())
    state = NetState(
        (link(3, "eth1", up=True, altnames=("vm1-devices.nics.vf-1",)),),
        (Address(3, "10.1.0.5/24", KVDEV_PROTO),),
    )
    assert plan(m, state).empty


def test_only_kvdev_addresses_and_routes_are_removed():
    m = Matching((bound(described(ips=["10.1.0.5/24"]), 3, "eth1"),), ())
    state = NetState(
        (link(3, "eth1", up=True, altnames=("vm1-devices.nics.vf-1",)),),
        (
            Address(3, "10.1.0.5/24", KVDEV_PROTO),
            Address(3, "10.1.0.9/24", KVDEV_PROTO),
            Address(3, "10.1.0.77/24", None),
            Address(3, "fe80::1/64", 3),
        ),
        (
            Route(3, "10.5.0.0/16", "10.1.0.1", None, KVDEV_PROTO),
            Route(3, "10.6.0.0/16", None, None, 4),
        ),
    )
    p = plan(m, state)
    assert [
        (type(x).__name__, getattr(x, "address", getattr(x, "destination", None))) for x in p.steps
    ] == [
        ("RemoveAddress", "10.1.0.9/24"),
        ("RemoveRoute", "10.5.0.0/16"),
    ]


def test_rename_takes_the_link_down_writes_a_link_wish_and_brings_it_up():
    h = hint(interfaceName="data0", mtu=9000)
    state = NetState((link(3, "eth1", up=True, permanent_mac="02:00:00:3b:02:01"),))
    p = plan(
        Matching((bound(described(), 3, "eth1", h),), ()), state, policy=Policy(link_dir="/run/x")
    )
    assert kinds(p) == ["SetDown", "Rename", "AddAltname", "SetMtu", "SetUp", "WriteLinkFile"]
    write = p.steps[-1]
    assert write.path == "/run/x/data0.wish"
    assert write.content == "permanent-mac 02:00:00:3b:02:01\n"  # a link wish: data, no keys


def test_name_held_by_an_unmanaged_link_blocks_the_rename_only():
    h = hint(interfaceName="eth0", mtu=9000)
    state = NetState((link(2, "eth0"), link(3, "eth1")))
    p = plan(Matching((bound(described(), 3, "eth1", h),), ()), state)
    assert "Rename" not in kinds(p)
    assert "SetMtu" in kinds(p)
    (b,) = p.blocked
    assert "'eth0' is held by eth0" in b.reason
    assert not any(isinstance(x, s.WriteLinkFile) for x in p.steps)


def test_traded_names_go_through_temporary_names_and_converge():
    a = bound(described("vf-1"), 3, "eth1", hint("vf-1", interfaceName="eth2"))
    b = bound(described("vf-2"), 4, "eth2", hint("vf-2", interfaceName="eth1"))
    state = NetState((link(3, "eth1", up=True), link(4, "eth2", up=True)))
    p = plan(Matching((a, b), ()), state)
    renames = [(x.ifindex, x.new_name) for x in p.steps if isinstance(x, s.Rename)]
    assert renames == [(3, "kvtmp3"), (4, "kvtmp4"), (3, "eth2"), (4, "eth1")]
    after = fake_apply(state, p.steps)
    assert {lk.ifindex: lk.ifname for lk in after.links} == {3: "eth2", 4: "eth1"}
    assert all(lk.up for lk in after.links)
    assert plan(Matching((a, b), ()), after, files_after({}, p.steps)).empty


def test_mtu_outside_driver_bounds_is_blocked_not_planned():
    state = NetState((link(3, "eth1", up=True, max_mtu=1500, altnames=("vm1-devices.nics.vf-1",)),))
    p = plan(Matching((bound(described(), 3, "eth1", hint(mtu=9000)),), ()), state)
    assert p.empty
    assert "MTU 9000 is outside the driver's range 68..1500" in p.blocked[0].reason


def test_stale_link_wishes_are_removed_and_foreign_files_kept():
    state = NetState((link(3, "eth1", up=True, altnames=("vm1-devices.nics.vf-1",)),))
    files = {
        "/var/lib/kvdev/links/old.wish": "x",
        "/var/lib/kvdev/links/README": "y",
    }
    p = plan(Matching((bound(described(), 3, "eth1"),), ()), state, files)
    assert [(type(x).__name__, x.path) for x in p.steps] == [
        ("RemoveLinkFile", "/var/lib/kvdev/links/old.wish")
    ]


def test_unbound_devices_plan_nothing():
    m = Matching((Binding(described(), MatchState.MISSING, reason="x"),), ())
    assert plan(m, NetState((link(3, "eth1"),))).empty


def test_long_altnames_are_shortened_within_the_kernel_limit():
    d = described(claim="c" * 200)
    name = altname_for(Binding(d, MatchState.BOUND))
    assert len(name.encode()) == 127
    assert name != altname_for(Binding(described(claim="c" * 199 + "d"), MatchState.BOUND))


def test_template_claims_use_the_pod_claim_name():
    d = described(claim="virt-launcher-x-abc12", pod_claim="fast-nic", request="nic/rdma")
    assert altname_for(Binding(d, MatchState.BOUND)) == "fast-nic.nic.vf-1"


IPV4 = st.builds(lambda b, p: f"10.{b}.0.{p}/24", st.integers(0, 3), st.integers(1, 9))
NAMES = st.sampled_from(["eth1", "eth2", "eth3", "data0", "data1"])


@settings(max_examples=200, deadline=None)
@given(
    wants=st.lists(
        st.tuples(
            st.lists(IPV4, max_size=3, unique=True),
            st.one_of(st.none(), NAMES),
            st.one_of(st.none(), st.sampled_from([1400, 1500, 9000])),
        ),
        min_size=1,
        max_size=3,
    ),
    present=st.lists(IPV4, max_size=4, unique=True),
    ups=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_applying_a_plan_then_planning_again_is_empty(wants, present, ups):
    bindings, links = [], []
    names = [w[1] for w in wants if w[1]]
    if len(names) != len(set(names)):
        return  # hints validation forbids two devices asking for one name
    for i, (ips, name, mtu) in enumerate(wants):
        network = {k: v for k, v in (("interfaceName", name), ("mtu", mtu)) if v is not None}
        bindings.append(
            bound(described(f"vf-{i}", ips), 3 + i, f"eth{i + 1}", hint(f"vf-{i}", **network))
        )
        links.append(link(3 + i, f"eth{i + 1}", up=ups[i]))
    state = NetState(tuple(links), tuple(Address(3, a, KVDEV_PROTO) for a in present))
    m = Matching(tuple(bindings), ())
    first = plan(m, state)
    after = fake_apply(state, first.steps)
    again = plan(m, after, files_after({}, first.steps))
    assert again.steps == ()


@pytest.mark.parametrize("name", ["Bad Name", "vf/1", "Grafikkarte-€", "a:b", "x" * 300, "é" * 70])
def test_altnames_from_names_upstream_accepts_are_always_valid_for_the_kernel(name):
    altname = altname_for(Binding(described(name=name), MatchState.BOUND))
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", altname), altname
    assert len(altname.encode()) <= 127
    other = altname_for(Binding(described(name=name + "x"), MatchState.BOUND))
    assert altname != other  # a hash of the original keeps two names apart


def test_ipv6_below_the_ipv6_minimum_mtu_is_refused_not_half_applied():
    alt = ("vm1-devices.nics.vf-1",)
    state = NetState((link(3, "eth1", up=True, altnames=alt),))
    ips = ("10.1.0.5/24", "2001:db8:1::5/64")
    p = plan(Matching((bound(described(ips=ips), 3, "eth1", hint(mtu=1000)),), ()), state)
    assert not any(isinstance(x, s.SetMtu) for x in p.steps)  # the hinted MTU is refused
    assert [x.address for x in p.steps if isinstance(x, s.AddAddress)] == list(ips)
    assert "network.mtu 1000 is below 1280" in p.blocked[0].reason
    assert "2001:db8:1::5/64 (networkData.ips" in p.blocked[0].reason
    # a link already below 1280 with no MTU hint: its IPv6 address and route are refused
    small = NetState((link(3, "eth1", up=True, altnames=alt, mtu=1000),))
    route = {"destination": "2001:db8:9::/48"}
    p = plan(Matching((bound(described(ips=ips), 3, "eth1", hint(routes=[route])),), ()), small)
    assert [x.address for x in p.steps if isinstance(x, s.AddAddress)] == ["10.1.0.5/24"]
    assert not any(isinstance(x, s.AddRoute) for x in p.steps)
    assert "the link's MTU 1000 is below 1280" in p.blocked[0].reason
    # at 1280 everything goes in
    p = plan(Matching((bound(described(ips=ips), 3, "eth1", hint(mtu=1280)),), ()), state)
    assert not p.blocked
    assert any(isinstance(x, s.SetMtu) for x in p.steps)
