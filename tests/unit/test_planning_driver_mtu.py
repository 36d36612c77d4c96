"""The driver's MTU (a device's ``mtu`` attribute) in planning: the default, and a ceiling."""

from dataclasses import replace

from test_planning import bound, described, hint, kinds, link

from kvdev.guest.core.matching import Matching
from kvdev.guest.core.observed import NetState
from kvdev.guest.core.planning import plan

ALT = ("vm1-devices.nics.vf-1",)


def test_driver_mtu_is_the_nics_mtu_when_hints_name_none():
    state = NetState((link(3, "eth1", up=True, altnames=ALT),))
    p = plan(Matching((bound(replace(described(), mtu=1450), 3, "eth1"),), ()), state)
    assert kinds(p) == ["SetMtu"]
    assert p.steps[0].mtu == 1450
    assert p.desired[0].mtu == 1450
    assert p.warnings == ()


def test_a_hint_at_or_below_the_driver_mtu_wins():
    state = NetState((link(3, "eth1", up=True, altnames=ALT),))
    device = replace(described(), mtu=9000)
    p = plan(Matching((bound(device, 3, "eth1", hint(mtu=1400)),), ()), state)
    assert p.desired[0].mtu == 1400
    assert p.warnings == ()


def test_a_hint_above_the_driver_mtu_gets_the_drivers_and_says_why():
    state = NetState((link(3, "eth1", up=True, altnames=ALT),))
    device = replace(described(), mtu=1450)
    p = plan(Matching((bound(device, 3, "eth1", hint(mtu=9000)),), ()), state)
    assert p.desired[0].mtu == 1450
    assert [x.mtu for x in p.steps if type(x).__name__ == "SetMtu"] == [1450]
    (warned,) = p.warnings
    assert "MTU 9000, more than the driver's 1450" in warned.reason
    assert p.blocked == ()


def test_no_driver_mtu_and_no_hint_leaves_the_mtu_alone():
    state = NetState((link(3, "eth1", up=True, altnames=ALT, mtu=1500),))
    p = plan(Matching((bound(described(), 3, "eth1"),), ()), state)
    assert p.steps == ()
    assert p.desired[0].mtu is None
