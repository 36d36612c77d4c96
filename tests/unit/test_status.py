"""guest.status.summarize with plain values: every phase, convergence, the summary line."""

import pytest

from kvdev.errors import Problem
from kvdev.guest.core import steps as s
from kvdev.guest.core.matching import Binding, Evidence, Matching, MatchState
from kvdev.guest.core.observed import Address, GuestDevice, Link, NetState, Nic
from kvdev.guest.core.planning import Blocked, Desired, Plan
from kvdev.guest.core.status import (
    ClaimStatus,
    DeviceStatus,
    MetadataState,
    Phase,
    Status,
    summarize,
)
from kvdev.schema.described import DescribedDevice

EMPTY_PLAN = Plan((), (), ())
MAC_EVIDENCE = Evidence("mac", "02:00:00:00:00:01 on eth1")


def described(name="vf-0"):
    return DescribedDevice(
        claim="vm1-nics",
        namespace="vms",
        pod_claim_name=None,
        request="nic",
        driver="sriov.example.com",
        pool="node-a",
        name=name,
        generation=3,
    )


def ref(name="vf-0"):
    return f"vm1-nics/nic/sriov.example.com/node-a/{name}"


def guest(ifindex=11, ifname="eth1", mac="02:00:00:00:00:01", perm=None):
    return GuestDevice(f"0000:0{ifindex % 10}:00.0", nics=(Nic(ifname, ifindex, mac, perm),))


def bound(name="vf-0", g=None):
    return Binding(described(name), MatchState.BOUND, g or guest(), (MAC_EVIDENCE,))


def desired(name="vf-0", ifname="eth1", addresses=("10.1.0.5/24",)):
    return Desired(ref(name), 11, ifname, f"vm1-nics.nic.{name}", None, addresses, ())


def add_address(name="vf-0", address="10.1.0.5/24"):
    return s.AddAddress(11, "eth1", ref(name), "listed in the metadata", address)


def one(*bindings, plan=EMPTY_PLAN, results=(), dry_run=False):
    status = summarize(
        Matching(tuple(bindings), ()),
        plan,
        list(results),
        MetadataState(),
        reconcile=1,
        dry_run=dry_run,
    )
    return status.devices


def test_bound_device_with_nothing_failed_is_configured_with_every_field():
    g = guest(perm="02:aa:00:00:00:01")
    want = desired(ifname="net0")
    (d,) = one(bound(g=g), plan=Plan((), (want,), ()))
    assert d == DeviceStatus(
        ref=ref(),
        phase=Phase.CONFIGURED,
        claim="vm1-nics",
        request="nic",
        driver="sriov.example.com",
        pool="node-a",
        name="vf-0",
        generation=3,
        guest_pci_address="0000:01:00.0",
        ifname="net0",  # the desired name wins over the current one
        mac="02:aa:00:00:00:01",  # the permanent MAC wins over the current one
        evidence=(MAC_EVIDENCE,),
        desired=want,
        guest=g,
    )


def test_observed_link_and_addresses_come_from_the_state_of_the_bound_nic():
    g = guest()
    link = Link(11, "eth1", "02:00:00:00:00:01", mtu=9000, up=True)
    state = NetState(
        (link, Link(12, "eth2")),
        (Address(11, "10.1.0.5/24"), Address(12, "10.9.0.1/24"), Address(11, "fe80::1/64")),
    )
    status = summarize(
        Matching((bound(g=g),), ()), EMPTY_PLAN, [], MetadataState(), reconcile=1, state=state
    )
    (d,) = status.devices
    assert d.observed == link
    assert d.observed_addresses == ("10.1.0.5/24", "fe80::1/64")


def test_successfully_applied_steps_leave_the_device_configured():
    step = add_address()
    (d,) = one(bound(), plan=Plan((step,), (desired(),), ()), results=[s.StepResult(step, ok=True)])
    assert (d.phase, d.reason, d.pending_steps) == (Phase.CONFIGURED, "", ())


def test_without_desired_state_the_nic_name_and_current_mac_are_shown():
    (d,) = one(bound())
    assert (d.ifname, d.mac, d.desired) == ("eth1", "02:00:00:00:00:01", None)


def test_device_with_two_nics_shows_no_interface():
    g = GuestDevice("0000:05:00.0", nics=(Nic("eth5", 15), Nic("eth6", 16)))
    (d,) = one(bound(g=g))
    assert (d.phase, d.guest_pci_address, d.ifname, d.mac) == (
        Phase.CONFIGURED,
        "0000:05:00.0",
        None,
        None,
    )


def test_dry_run_with_steps_is_pending_and_lists_them():
    steps = (add_address(), add_address(address="10.1.0.6/24"))
    (d,) = one(bound(), plan=Plan(steps, (desired(),), ()), dry_run=True)
    assert (d.phase, d.reason, d.pending_steps) == (Phase.PENDING, "2 step(s) to apply", steps)


def test_dry_run_without_steps_is_configured():
    (d,) = one(bound(), plan=Plan((), (desired(),), ()), dry_run=True)
    assert (d.phase, d.pending_steps) == (Phase.CONFIGURED, ())


def test_retryable_failures_are_pending_with_their_errors_and_only_their_steps():
    ok, busy, gone = add_address(), add_address(address="b"), add_address(address="c")
    results = [
        s.StepResult(ok, ok=True),
        s.StepResult(busy, ok=False, error="eth1: Device or resource busy", retryable=True),
        s.StepResult(gone, ok=False, error="eth1: link is gone", retryable=True),
    ]
    (d,) = one(bound(), plan=Plan((ok, busy, gone), (desired(),), ()), results=results)
    assert d.phase is Phase.PENDING
    assert d.reason == "eth1: Device or resource busy; eth1: link is gone"
    assert d.pending_steps == (busy, gone)


def test_permanent_failure_is_an_error_even_next_to_a_retryable_one():
    bad, busy = add_address(), add_address(address="b")
    results = [
        s.StepResult(busy, ok=False, error="busy", retryable=True),
        s.StepResult(bad, ok=False, error="eth1: Invalid argument"),
    ]
    (d,) = one(bound(), plan=Plan((bad, busy), (desired(),), ()), results=results)
    assert (d.phase, d.reason, d.pending_steps) == (Phase.ERROR, "eth1: Invalid argument", ())


@pytest.mark.parametrize("dry_run", [False, True])
def test_blocked_item_is_an_error(dry_run):
    blocked = (Blocked(ref(), "eth1", "name 'net0' is held by eth9, which kvdev does not rename"),)
    (d,) = one(bound(), plan=Plan((add_address(),), (desired(),), blocked), dry_run=dry_run)
    assert d.phase is Phase.ERROR
    assert d.reason == "name 'net0' is held by eth9, which kvdev does not rename"
    assert d.pending_steps == ()


def test_permanent_failures_and_blocked_items_are_all_in_the_reason():
    bad = add_address()
    plan = Plan((bad,), (desired(),), (Blocked(ref(), "eth1", "MTU 9999 is outside"),))
    (d,) = one(bound(), plan=plan, results=[s.StepResult(bad, ok=False, error="EINVAL")])
    assert (d.phase, d.reason) == (Phase.ERROR, "EINVAL; MTU 9999 is outside")


def test_failures_and_blocks_stay_with_their_own_device():
    bad = add_address("vf-1")
    plan = Plan((bad,), (desired("vf-0"), desired("vf-1")), (Blocked(ref("vf-2"), "x", "no"),))
    devices = one(
        bound("vf-0"),
        bound("vf-1", guest(12, "eth2")),
        bound("vf-2", guest(13, "eth3")),
        plan=plan,
        results=[s.StepResult(bad, ok=False, error="EINVAL")],
    )
    assert [(d.ref, d.phase, d.reason) for d in devices] == [
        (ref("vf-0"), Phase.CONFIGURED, ""),
        (ref("vf-1"), Phase.ERROR, "EINVAL"),
        (ref("vf-2"), Phase.ERROR, "no"),
    ]


@pytest.mark.parametrize(
    ("state", "phase"),
    [(MatchState.MISSING, Phase.MISSING), (MatchState.AMBIGUOUS, Phase.AMBIGUOUS)],
)
def test_missing_and_ambiguous_carry_reason_and_candidates(state, phase):
    b = Binding(described(), state, candidates=("0000:07:00.0", "0000:08:00.0"), reason="why")
    (d,) = one(b, dry_run=True)
    assert (d.phase, d.reason, d.candidates) == (phase, "why", ("0000:07:00.0", "0000:08:00.0"))
    assert (d.guest_pci_address, d.ifname, d.mac, d.evidence, d.desired) == (
        None,
        None,
        None,
        (),
        None,
    )
    assert d.pending_steps == ()


def test_unmanaged_lists_the_nics_of_unbound_guest_devices_in_order():
    unbound = (
        GuestDevice("0000:03:00.0", nics=(Nic("eth3", 3), Nic("eth4", 4))),
        GuestDevice("0000:04:00.0"),  # no NIC: nothing to name
        GuestDevice(None, nics=(Nic("veth0", 9),)),
    )
    status = summarize(Matching((), unbound), EMPTY_PLAN, [], MetadataState(), reconcile=7)
    assert status.unmanaged == ("eth3", "eth4", "veth0")


def test_status_carries_reconcile_file_errors_and_dry_run():
    claim = ClaimStatus("vm1-devices", "vms", None, 2, "tree/x-metadata.json")
    metadata = MetadataState((Problem("boom", "a.json"),), (claim,))
    status = summarize(Matching((), ()), EMPTY_PLAN, [], metadata, reconcile=7, dry_run=True)
    assert status == Status(7, (), (), (Problem("boom", "a.json"),), dry_run=True, claims=(claim,))


def device(phase):
    return DeviceStatus(f"c/r/d/p/{phase.value}", phase, "c", "r", "d", "p", "n", 1)


def status(*phases, errors=0):
    problems = tuple(Problem(f"bad {i}", "m.json") for i in range(errors))
    return Status(1, tuple(device(p) for p in phases), (), problems)


C, P, M, A, E = Phase.CONFIGURED, Phase.PENDING, Phase.MISSING, Phase.AMBIGUOUS, Phase.ERROR


@pytest.mark.parametrize(
    ("phases", "errors", "converged"),
    [
        ((), 0, True),
        ((C, C), 0, True),
        ((C, C), 1, False),
        ((), 1, False),
        ((C, P), 0, False),
        ((C, M), 0, False),
        ((A,), 0, False),
        ((E, C), 0, False),
    ],
)
def test_converged_only_when_all_configured_and_no_file_errors(phases, errors, converged):
    assert status(*phases, errors=errors).converged is converged


@pytest.mark.parametrize(
    ("phases", "errors", "text"),
    [
        ((), 0, "no devices described"),
        ((C, M, C, C), 0, "3 configured, 1 missing"),
        ((P, E, M, C, A), 0, "1 ambiguous, 1 configured, 1 error, 1 missing, 1 pending"),
        ((C,), 2, "1 configured; 2 metadata error(s), last good metadata in force"),
        ((), 1, "no devices described; 1 metadata error(s), last good metadata in force"),
    ],
)
def test_summary_text(phases, errors, text):
    assert status(*phases, errors=errors).summary() == text


def test_counts_only_phases_that_occur():
    assert status(C, M, C).counts == {"Configured": 2, "Missing": 1}
